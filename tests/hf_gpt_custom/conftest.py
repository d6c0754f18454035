"""Builders for model tests: a transformers GPT-2 with random weights and our model holding the same weights."""

import pytest

from tests.helpers import make_gpt2_pair


@pytest.fixture
def tiny_gpt2_pair():
    return make_gpt2_pair


@pytest.fixture
def gpu_code_path(monkeypatch):
    """static_decoding.py's GPU code path, on the CPU: the stop flag read one step late and the token choice compiled
    (with a fresh set of compiled choices and dynamo's caches and counters emptied)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from hf_gpt_custom import static_decoding

    monkeypatch.setattr(static_decoding, "STOP_LATE_DEVICES", ("cpu",))
    monkeypatch.setattr(static_decoding, "COMPILED_CHOICE_DEVICES", ("cpu",))
    monkeypatch.setattr(static_decoding, "_compiled_choices", {})
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()
