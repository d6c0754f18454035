"""Builders for model tests: a transformers GPT-2 with random weights and our model holding the same weights."""

import pytest

from tests.helpers import make_gpt2_pair


@pytest.fixture
def tiny_gpt2_pair():
    return make_gpt2_pair
