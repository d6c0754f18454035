"""No derived copy of a weight outlives a change to that weight (issue 12): every edit users and libraries make —
`.data` writes, load_state_dict, PEFT's merge_and_unload, dynamic quantization — shows in the next forward and the
next generate, exactly as on a copy of the model that never ran (plain F.linear on the same edit)."""

import copy

import pytest
import torch
from torch import nn

from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM

from tests.helpers import make_gpt2_pair

GREEDY = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)


def _logits(model, input_ids):
    with torch.no_grad():
        return model(input_ids).logits


def _generate(model, prompt):
    with torch.no_grad():
        return model.generate(prompt, **GREEDY)


def test_issue_12_reproduction_an_edit_through_data_changes_the_logits():
    model = GPTCustomForCausalLM(GPTCustomConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=64)).eval()
    x = torch.randint(0, 256, (1, 16))
    before = _logits(model, x)
    model.transformer.h[0].mlp.c_fc.weight.data.mul_(0)
    after = _logits(model, x)
    assert (before - after).abs().max() > 0
    never_ran = copy.deepcopy(model)
    torch.testing.assert_close(after, _logits(never_ran, x), rtol=0, atol=0)


def test_every_linear_layer_is_a_plain_nn_linear():
    model, _ = make_gpt2_pair()
    linears = [module for module in model.modules() if isinstance(module, nn.Linear)]
    assert len(linears) == 4 * model.config.n_layer + 1 and all(type(module) is nn.Linear for module in linears)


@pytest.mark.parametrize("edit", ["data_copy", "load_state_dict"])
def test_an_edit_between_two_no_grad_forwards_and_generates_is_seen(edit):
    model, _ = make_gpt2_pair(seed=1)
    donor, _ = make_gpt2_pair(seed=2)  # other random weights
    prompt = torch.randint(1, 98, (2, 6), generator=torch.Generator().manual_seed(0))
    _logits(model, prompt), _generate(model, prompt)  # anything cached would be made now
    if edit == "data_copy":
        for target, source in zip(model.parameters(), donor.parameters()):
            target.data.copy_(source.data)
    else:
        model.load_state_dict(donor.state_dict())
    reference = copy.deepcopy(donor)  # the same weights, never ran
    torch.testing.assert_close(_logits(model, prompt), _logits(reference, prompt), rtol=0, atol=0)
    assert torch.equal(_generate(model, prompt), _generate(reference, prompt))
    assert not torch.equal(_logits(donor, prompt), _logits(make_gpt2_pair(seed=1)[0], prompt))  # the edit mattered


def test_peft_lora_merge_and_unload_after_generate_gives_the_merged_models_tokens():
    peft = pytest.importorskip("peft")
    model, _ = make_gpt2_pair(seed=1)
    prompt = torch.randint(1, 98, (1, 6), generator=torch.Generator().manual_seed(0))
    base_tokens = _generate(model, prompt)
    base_logits = _logits(model, prompt)
    lora = peft.LoraConfig(r=4, lora_alpha=32, target_modules=["c_attn", "c_proj", "c_fc"], init_lora_weights=False)
    reference = copy.deepcopy(model)  # same base weights
    torch.manual_seed(5)
    merged = peft.get_peft_model(model, lora)
    torch.manual_seed(5)
    reference_merged = peft.get_peft_model(reference, lora)
    reference_merged.load_state_dict(merged.state_dict())  # the same adapter weights
    _generate(merged, prompt)  # generate through the adapter, then merge in place (writes through .data)
    merged = merged.merge_and_unload()
    reference_merged = copy.deepcopy(reference_merged.merge_and_unload())  # merged without ever running
    merged_logits = _logits(merged, prompt)
    assert (merged_logits - base_logits).abs().max() > 0.1  # the adapter changes the model
    torch.testing.assert_close(merged_logits, _logits(reference_merged, prompt), rtol=0, atol=0)
    assert torch.equal(_generate(merged, prompt), _generate(reference_merged, prompt))
    assert all(type(module) is nn.Linear for module in merged.modules() if isinstance(module, nn.Linear))
    assert base_tokens.shape == _generate(merged, prompt).shape


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")  # torch.ao's deprecation notices
def test_dynamic_quantization_of_a_model_that_ran_quantizes_every_linear_layer():
    model, _ = make_gpt2_pair(seed=1)
    prompt = torch.randint(1, 98, (1, 6), generator=torch.Generator().manual_seed(0))
    never_ran = copy.deepcopy(model)
    _logits(model, prompt), _generate(model, prompt)
    quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    reference = torch.ao.quantization.quantize_dynamic(never_ran, {nn.Linear}, dtype=torch.qint8)
    dynamic = torch.ao.nn.quantized.dynamic.Linear
    assert sum(type(module) is dynamic for module in quantized.modules()) == 4 * model.config.n_layer + 1
    assert not any(type(module) is nn.Linear for module in quantized.modules())
    torch.testing.assert_close(_logits(quantized, prompt), _logits(reference, prompt), rtol=0, atol=0)
    assert torch.equal(_generate(quantized, prompt), _generate(reference, prompt))


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_dropout_turned_off_module_by_module_turns_attention_dropout_off_as_in_gpt2(attn_implementation):
    """TRL's disable_dropout_in_model (and many training scripts) set p = 0 on every nn.Dropout. GPT-2 keeps its
    attention dropout in such a module; ours read config.attn_pdrop, so attention dropout stayed on and a train-mode
    forward changed from call to call (the newuser4 walk: 9.718 then 9.743 against 9.646 in eval). Reference:
    GPT2LMHeadModel with the same weights, whose train-mode forward then equals its eval forward."""
    dropouts = {"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1}
    ours, gpt2 = make_gpt2_pair(attn_implementation=attn_implementation, **dropouts)
    input_ids = torch.randint(0, 99, (2, 12), generator=torch.Generator().manual_seed(0))
    for model in (ours, gpt2):
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                module.p = 0
    with torch.no_grad():
        evaluated = gpt2.eval()(input_ids).logits
        torch.testing.assert_close(ours.eval()(input_ids).logits, evaluated, rtol=0, atol=1e-5)
        for model in (ours.train(), gpt2.train()):
            torch.testing.assert_close(model(input_ids).logits, evaluated, rtol=0, atol=1e-5)
    # and the config edited after the model was built changes nothing in either
    ours, gpt2 = make_gpt2_pair(attn_implementation=attn_implementation, **dropouts)
    ours.config.attn_pdrop = gpt2.config.attn_pdrop = 0.0
    assert ours.transformer.h[0].attn.attn_dropout.p == gpt2.transformer.h[0].attn.attn_dropout.p == 0.1
