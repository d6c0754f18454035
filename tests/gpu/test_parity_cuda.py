"""On CUDA our model computes transformers' GPT2LMHeadModel's logits from the same (converted) weights, with eager
and sdpa attention, with and without padding."""

import pytest
import torch

from tests.helpers import make_gpt2_pair, padded_batch, row_position_ids

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_logits_match_transformers_gpt2_on_cuda(attn_implementation, device):
    ours, reference = make_gpt2_pair(attn_implementation)
    ours.to(device)
    reference.to(device)
    input_ids, attention_mask = (tensor.to(device) for tensor in padded_batch())
    with torch.no_grad():
        logits = ours(input_ids).logits
        assert logits.device == input_ids.device
        torch.testing.assert_close(logits, reference(input_ids).logits, rtol=1e-5, atol=1e-5)
        ours_logits = ours(input_ids, attention_mask=attention_mask).logits
        # GPT-2 numbers positions by column; a left-padded row needs its own positions, which ours derives itself
        position_ids = row_position_ids(attention_mask.cpu()).to(device)
        reference_logits = reference(input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    keep = attention_mask.bool()  # padding positions are garbage in both models
    torch.testing.assert_close(ours_logits[keep], reference_logits[keep], rtol=1e-5, atol=1e-5)
