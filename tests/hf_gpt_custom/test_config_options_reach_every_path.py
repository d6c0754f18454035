"""Each GPT-2 config option that changes the arithmetic reaches every path that computes logits.

The reference is transformers' GPT2LMHeadModel with the same random weights. The paths: a GPT-2 folder loaded with
our from_pretrained (config conversion + weight conversion), the plain forward (eager and sdpa), generate()'s
cached decoding steps (compared through output_logits) and train-mode dropout. An option dropped on any one of them
(e.g. the converter forgetting `activation_function`, attention scaling scores by 1/sqrt(d) although
`scale_attn_weights=False`, a LayerNorm built with the default eps) changes logits by far more than float rounding.
"""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from hf_gpt_custom import GPTCustomForCausalLM

from tests.helpers import TINY_GPT2

from tests.helpers import make_gpt2_pair, randomize_

# Each one moves logits by >1e-3 on the tiny random model (checked by planting the option being ignored).
OPTIONS = {
    "relu": {"activation_function": "relu"},
    "exact_gelu": {"activation_function": "gelu"},
    "unscaled_attention": {"scale_attn_weights": False},
    "large_layer_norm_epsilon": {"layer_norm_epsilon": 0.5},
}
NEW_TOKENS = 8


def _prompt(batch: int = 2, length: int = 6) -> torch.Tensor:
    return torch.randint(1, 98, (batch, length), generator=torch.Generator().manual_seed(7))


@pytest.mark.parametrize("option", OPTIONS.values(), ids=OPTIONS.keys())
def test_gpt2_folder_loaded_by_our_from_pretrained_keeps_the_option(option, tmp_path):
    torch.manual_seed(0)
    reference = randomize_(GPT2LMHeadModel(GPT2Config(**TINY_GPT2, **option))).eval()
    reference.save_pretrained(tmp_path)
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path).eval()
    for key, value in option.items():
        assert getattr(ours.config, key) == value
    input_ids = _prompt()
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids).logits, reference(input_ids).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("option", OPTIONS.values(), ids=OPTIONS.keys())
def test_forward_with_the_option_matches_transformers_gpt2(option, attn_implementation):
    ours, reference = make_gpt2_pair(attn_implementation, **option)
    input_ids = _prompt()
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids).logits, reference(input_ids).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("option", OPTIONS.values(), ids=OPTIONS.keys())
def test_greedy_generate_with_the_option_matches_transformers_gpt2_step_by_step(option):
    ours, reference = make_gpt2_pair("sdpa", **option)
    prompt = _prompt()
    greedy = dict(max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0, return_dict_in_generate=True,
                  output_logits=True)
    with torch.no_grad():
        got_steps, expected = ours.generate(prompt, **greedy), reference.generate(prompt, **greedy)
    assert len(got_steps.logits) == len(expected.logits) == NEW_TOKENS
    for step, (got, want) in enumerate(zip(got_steps.logits, expected.logits)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4, msg=lambda m: f"decoding step {step}: {m}")
    assert torch.equal(got_steps.sequences, expected.sequences)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("dropout", ["embd_pdrop", "attn_pdrop", "resid_pdrop"])
def test_training_forward_applies_each_dropout_as_transformers_gpt2_does(dropout, attn_implementation):
    """In train mode with one dropout probability set, the same seed gives GPT-2's logits: the dropout is applied
    at the same place, to the same tensor, drawing the same mask (a dropped dropout would give other logits)."""
    ours, reference = make_gpt2_pair(attn_implementation, **{"embd_pdrop": 0.0, "attn_pdrop": 0.0,
                                                             "resid_pdrop": 0.0, dropout: 0.3})
    ours.train(), reference.train()
    input_ids = _prompt()
    torch.manual_seed(11)
    expected = reference(input_ids).logits
    torch.manual_seed(11)
    got = ours(input_ids).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    torch.manual_seed(12)
    assert not torch.allclose(ours(input_ids).logits, got)  # the dropout really is on: another seed, other logits
