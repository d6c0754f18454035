"""generate()'s fast decoding step computes bitwise what the module path computes (with F.linear kernels; oneDNN's
differ by summation order only), reaches every block option, and steps aside when it cannot."""

import pytest
import torch
from transformers import GenerationMixin

from hf_gpt_custom import GPTCustomForCausalLM, modeling_gpt_custom, onednn_linear
from hf_gpt_custom.decode_step import DecodeStep

from tests.helpers import make_gpt2_pair

GREEDY = dict(max_new_tokens=12, do_sample=False, pad_token_id=0, return_dict_in_generate=True, output_logits=True)


@pytest.fixture(autouse=True)
def f_linear_kernels(monkeypatch):
    """Bit-for-bit comparisons need the module path's kernel (F.linear) whatever this machine's timing prefers."""
    monkeypatch.setattr(onednn_linear, "_enabled", False)


@pytest.fixture
def step_calls(monkeypatch):
    """How many decoding steps went through DecodeStep."""
    calls = []
    original = DecodeStep.__call__

    def counting(self, *args):
        calls.append(1)
        return original(self, *args)

    monkeypatch.setattr(DecodeStep, "__call__", counting)
    return calls


def _generate(model, prompt, **kwargs):
    with torch.no_grad():
        return model.generate(prompt, **{**GREEDY, **kwargs})


def _generate_on_module_path(model, prompt, monkeypatch, **kwargs):
    with monkeypatch.context() as patch:
        patch.setattr(modeling_gpt_custom, "supports_decode_step", lambda *args: False)
        return _generate(model, prompt, **kwargs)


def _assert_bitwise_equal(fast, reference):
    assert torch.equal(fast.sequences, reference.sequences)
    assert len(fast.logits) == len(reference.logits)
    assert all(torch.equal(a, b) for a, b in zip(fast.logits, reference.logits))


@pytest.mark.parametrize("batch", [1, 3])
def test_fast_steps_give_the_module_paths_logits_bit_for_bit(batch, step_calls, monkeypatch):
    ours, reference_gpt2 = make_gpt2_pair(n_layer=3)
    prompt = torch.randint(1, 98, (batch, 7), generator=torch.Generator().manual_seed(batch))
    fast = _generate(ours, prompt)
    assert len(step_calls) == GREEDY["max_new_tokens"] - 1  # every step after the prompt's forward
    _assert_bitwise_equal(fast, _generate_on_module_path(ours, prompt, monkeypatch))
    with torch.no_grad():  # and transformers' GPT-2 on the same weights picks the same tokens
        expected = reference_gpt2.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(fast.sequences, expected)
    assert ours._decode_step is None  # dropped when the loop ends


def test_an_all_ones_attention_mask_takes_the_fast_path(step_calls, monkeypatch):
    ours, _ = make_gpt2_pair()
    prompt = torch.randint(1, 98, (2, 5), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(prompt)
    fast = _generate(ours, prompt, attention_mask=mask)
    assert step_calls
    _assert_bitwise_equal(fast, _generate_on_module_path(ours, prompt, monkeypatch, attention_mask=mask))


def test_a_fast_steps_inputs_are_what_transformers_would_prepare(step_calls, monkeypatch):
    ours, _ = make_gpt2_pair()
    prompt = torch.randint(1, 98, (2, 5), generator=torch.Generator().manual_seed(0))
    compared = []
    lean = GPTCustomForCausalLM.prepare_inputs_for_generation

    def compare(self, *args, **kwargs):
        inputs = lean(self, *args, **kwargs)
        expected = GenerationMixin.prepare_inputs_for_generation(self, *args, **kwargs)
        assert inputs.keys() == expected.keys()
        for key, value in expected.items():
            assert torch.equal(inputs[key], value) if isinstance(value, torch.Tensor) else inputs[key] is value, key
        compared.append(self._decode_step is not None)
        return inputs

    monkeypatch.setattr(GPTCustomForCausalLM, "prepare_inputs_for_generation", compare)
    _generate(ours, prompt, attention_mask=torch.ones_like(prompt))
    assert compared.count(True) == len(step_calls) == GREEDY["max_new_tokens"] - 1


def test_a_padded_batch_takes_the_module_path(step_calls, monkeypatch):
    ours, _ = make_gpt2_pair()
    prompt = torch.randint(1, 98, (2, 5), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    result = _generate(ours, prompt, attention_mask=mask)
    assert not step_calls
    _assert_bitwise_equal(result, _generate_on_module_path(ours, prompt, monkeypatch, attention_mask=mask))


def test_hooks_eager_attention_hidden_states_and_a_static_cache_take_the_module_path(step_calls):
    ours, _ = make_gpt2_pair()
    prompt = torch.randint(1, 98, (1, 5), generator=torch.Generator().manual_seed(0))
    seen = []
    handle = ours.transformer.h[1].mlp.register_forward_hook(lambda module, args, output: seen.append(1))
    _generate(ours, prompt)
    handle.remove()
    assert len(seen) == GREEDY["max_new_tokens"] and not step_calls  # the hook saw every step

    _generate(ours, prompt, output_hidden_states=True)
    assert not step_calls

    eager, _ = make_gpt2_pair(attn_implementation="eager")
    _generate(eager, prompt)
    assert not step_calls

    ours.set_fast_decode(enabled=True, compile=False)  # a StaticCache: transformers' own inputs and masks
    static = _generate(ours, prompt)
    ours.set_fast_decode(enabled=False)
    assert not step_calls and torch.equal(static.sequences, _generate(ours, prompt).sequences)
    step_calls.clear()

    _generate(ours, prompt)
    assert step_calls  # nothing left behind by the runs above


def test_decoding_past_the_context_still_raises_the_models_error(step_calls):
    ours, _ = make_gpt2_pair(n_positions=16)
    prompt = torch.randint(1, 98, (1, 10), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="n_positions is 16"):
        _generate(ours, prompt, max_new_tokens=10)
    assert len(step_calls) == 6  # after the prompt's forward, positions 10..15 fit; position 16 does not
    assert ours._decode_step is None


@pytest.mark.parametrize("option", [{"scale_attn_weights": False}, {"layer_norm_epsilon": 0.3}, {"n_inner": 48}])
def test_a_changed_block_option_reaches_the_fast_steps(option, step_calls, monkeypatch):
    """Fast steps run the block's own methods, so an option of the block changes them as it changes transformers'
    GPT-2 with the same weights (GPT-2 forgets neither)."""
    ours, reference_gpt2 = make_gpt2_pair(**option)
    prompt = torch.randint(1, 98, (1, 6), generator=torch.Generator().manual_seed(0))
    fast = _generate(ours, prompt)
    assert len(step_calls) == GREEDY["max_new_tokens"] - 1
    _assert_bitwise_equal(fast, _generate_on_module_path(ours, prompt, monkeypatch))
    with torch.no_grad():
        expected = reference_gpt2.generate(prompt, **GREEDY)
    for got, want in zip(fast.logits, expected.logits):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4)


@pytest.mark.skipif(not onednn_linear._KERNELS, reason="this torch build has no oneDNN")
def test_fast_steps_on_onednn_kernels_match_the_module_path_to_rounding(step_calls, monkeypatch):
    monkeypatch.setattr(onednn_linear, "_enabled", True)
    monkeypatch.setattr(onednn_linear, "REQUIRED_SPEEDUP", 0.0)  # oneDNN for every shape
    monkeypatch.setattr(onednn_linear, "_speedups", {})
    ours, _ = make_gpt2_pair(n_layer=3)
    prompt = torch.randint(1, 98, (2, 7), generator=torch.Generator().manual_seed(0))
    _generate(ours, prompt)  # times each shape once in this process (packing a copy to time it)
    packed = []
    monkeypatch.setattr(onednn_linear, "pack_weight", lambda weight, pack=onednn_linear.pack_weight: packed.append(1) or pack(weight))
    fast = _generate(ours, prompt)
    assert len(packed) == 4 * 3 + 1 and step_calls  # every linear layer packed once for the loop
    reference = _generate_on_module_path(ours, prompt, monkeypatch)
    assert torch.equal(fast.sequences, reference.sequences)
    for got, want in zip(fast.logits, reference.logits):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_without_onednn_ops_generation_is_the_module_paths(step_calls, monkeypatch):
    """The fallback for a torch build without torch.ops.mkldnn's private linear ops (other CPUs, other devices)."""
    monkeypatch.setattr(onednn_linear, "_enabled", True)
    monkeypatch.setattr(onednn_linear, "_KERNELS", None)
    ours, _ = make_gpt2_pair()
    prompt = torch.randint(1, 98, (1, 5), generator=torch.Generator().manual_seed(0))
    fast = _generate(ours, prompt)
    assert step_calls
    _assert_bitwise_equal(fast, _generate_on_module_path(ours, prompt, monkeypatch))


def test_transformers_output_capturing_hooks_keep_the_fast_path(step_calls):
    """After output_hidden_states=True, transformers' capture hooks stay on every block; they record nothing in a
    plain decoding step, so the fast steps still apply (a user's hook still turns them off, see above)."""
    ours, _ = make_gpt2_pair()
    prompt = torch.randint(1, 98, (1, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours(prompt, output_hidden_states=True)
    assert any(block._forward_hooks for block in ours.transformer.h)
    _generate(ours, prompt)
    assert len(step_calls) == GREEDY["max_new_tokens"] - 1
