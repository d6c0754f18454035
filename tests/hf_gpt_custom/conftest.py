"""Builders for model tests: a transformers GPT-2 with random weights and our model holding the same weights."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from hf_gpt_custom.convert_gpt2 import from_gpt2_model
from tests.helpers import TINY_GPT2



def randomize_(model: torch.nn.Module, std: float = 0.2) -> torch.nn.Module:
    """Every parameter random — biases and LayerNorms too — so a mis-mapped bias cannot hide behind a zero init."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, std)
    return model


def make_gpt2_pair(attn_implementation: str = "sdpa", seed: int = 0, **overrides):
    """(ours, reference) in eval mode with identical random weights."""
    torch.manual_seed(seed)
    fields = {**TINY_GPT2, **overrides}
    reference = GPT2LMHeadModel(GPT2Config(**fields, attn_implementation=attn_implementation))
    randomize_(reference).eval()
    return from_gpt2_model(reference), reference


@pytest.fixture
def tiny_gpt2_pair():
    return make_gpt2_pair
