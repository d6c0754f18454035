"""Every block variant, one option changed from the default at a time (plus the family presets and one model with
everything changed at once), through every path a user takes: cached decoding = uncached, eager = sdpa, gradient
checkpointing = plain backward, save ->
Auto classes and save -> remote code without the package give the same logits. 2 layers, 32 wide."""

import json
import math

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
from hf_gpt_custom.model_folder import load_model_folder

from tests.helpers import randomize_

TINY = dict(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=98, eos_token_id=98,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
ONE_OPTION = {
    "default": {},
    "sinusoidal": {"position_embedding_type": "sinusoidal"},
    "rope": {"position_embedding_type": "rope", "rope_theta": 500.0},
    "post-ln": {"norm_position": "post"},
    "rmsnorm": {"norm_type": "rmsnorm"},
    "swiglu": {"mlp_type": "swiglu"},
    "no-bias": {"attention_bias": False, "mlp_bias": False},
    "gqa": {"n_kv_head": 2},
    "untied": {"tie_word_embeddings": False},
    "vocab-padding": {"pad_vocab_size_to_multiple_of": 64},
    "everything": {"position_embedding_type": "rope", "norm_position": "post", "norm_type": "rmsnorm",
                   "mlp_type": "swiglu", "attention_bias": False, "mlp_bias": True, "n_kv_head": 1,
                   "tie_word_embeddings": False, "pad_vocab_size_to_multiple_of": 64},
}
PRESETS = ("gpt1", "transformer-decoder", "llama-small")
VARIANTS = [*ONE_OPTION, *(f"preset:{name}" for name in PRESETS)]
GREEDY = dict(max_new_tokens=10, do_sample=False, pad_token_id=0, return_dict_in_generate=True, output_logits=True)


def variant_config(variant: str) -> GPTCustomConfig:
    if variant.startswith("preset:"):  # the preset's block at tiny size (its own inner width scaled down too)
        return GPTCustomConfig.from_preset(variant.removeprefix("preset:"), **TINY, n_inner=None)
    return GPTCustomConfig(**TINY, **ONE_OPTION[variant])


def variant_model(variant: str, attn_implementation: str = "sdpa") -> GPTCustomForCausalLM:
    """Random weights everywhere (norms, biases, an untied head), so a dropped or swapped weight shows."""
    torch.manual_seed(0)
    config = variant_config(variant)
    config._attn_implementation = attn_implementation
    return randomize_(GPTCustomForCausalLM(config)).eval()


def _left_padded_batch():
    input_ids = torch.randint(1, 98, (2, 9), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :3] = 0
    return input_ids, attention_mask


@pytest.mark.parametrize("variant", VARIANTS)
def test_cached_decoding_equals_uncached(variant):
    model = variant_model(variant)
    input_ids = torch.randint(0, 99, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(input_ids, use_cache=False).logits
        prefix = model(input_ids[:, :5], use_cache=True)
        cache, steps = prefix.past_key_values, [prefix.logits]
        for position in range(5, 12):
            step = model(input_ids[:, position : position + 1], past_key_values=cache, use_cache=True)
            steps.append(step.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)
    # (batch, kv heads, positions, head_dim): grouped-query attention caches n_kv_head heads, not n_head.
    assert cache.layers[0].keys.shape == (1, model.config.n_kv_head, 12, model.config.head_dim)

    input_ids, attention_mask = _left_padded_batch()  # positions from the mask, through generate()'s cache
    settings = dict(attention_mask=attention_mask, max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        cached = model.generate(input_ids, use_cache=True, **settings)
        uncached = model.generate(input_ids, use_cache=False, **settings)
    assert cached.tolist() == uncached.tolist()


@pytest.mark.parametrize("variant", VARIANTS)
def test_eager_attention_equals_sdpa(variant):
    sdpa, eager = variant_model(variant, "sdpa"), variant_model(variant, "eager")
    input_ids, attention_mask = _left_padded_batch()
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        for kwargs in ({}, {"attention_mask": attention_mask, "position_ids": position_ids}):
            sdpa_logits, eager_logits = sdpa(input_ids, **kwargs).logits, eager(input_ids, **kwargs).logits
            keep = kwargs.get("attention_mask", torch.ones_like(input_ids)).bool()
            torch.testing.assert_close(sdpa_logits[keep], eager_logits[keep], rtol=0, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_gradient_checkpointing_gives_identical_gradients(variant):
    model = variant_model(variant).train()
    input_ids = torch.randint(0, 99, (2, 16), generator=torch.Generator().manual_seed(0))
    forwards = []
    # On a module inside the block: transformers checkpoints the block's forward, so the block's own hooks run once.
    model.transformer.h[0].mlp.register_forward_pre_hook(lambda module, args: forwards.append(1))

    def gradients() -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        model(input_ids, labels=input_ids).loss.backward()
        return {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}

    plain = gradients()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    forwards.clear()
    checkpointed = gradients()
    assert len(forwards) == 2  # the block ran again in backward: checkpointing was really on
    assert plain.keys() == checkpointed.keys() == {name for name, _ in model.named_parameters()}
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=0, atol=1e-7, msg=name)


@pytest.mark.parametrize("variant", VARIANTS)
def test_save_and_load_through_the_auto_classes_round_trips(variant, tmp_path):
    model = variant_model(variant)
    model.save_pretrained(tmp_path)
    input_ids = torch.randint(0, 99, (2, 11), generator=torch.Generator().manual_seed(0))
    config = AutoConfig.from_pretrained(tmp_path)
    loaded, info = AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    strict = load_model_folder(tmp_path)  # our commands' loader: every weight present, no shape mismatch
    base = AutoModel.from_pretrained(tmp_path)
    assert type(loaded) is GPTCustomForCausalLM and config.to_diff_dict() == model.config.to_diff_dict()
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    with torch.no_grad():
        logits = model(input_ids).logits
        assert torch.equal(loaded.eval()(input_ids).logits, logits)
        assert torch.equal(strict(input_ids).logits, logits)
        assert torch.equal(base.eval()(input_ids).last_hidden_state, model.transformer(input_ids).last_hidden_state)
    is_tied = loaded.lm_head.weight.data_ptr() == loaded.transformer.wte.weight.data_ptr()
    assert is_tied == model.config.tie_word_embeddings


# Runs under the `python_without_project` fixture (tests/conftest.py): every variant's folder in one process.
LOAD_EVERY_FOLDER = """
import json, sys
import torch
from transformers import AutoModelForCausalLM

input_ids, results = torch.tensor(json.loads(sys.argv[2])), {}
for folder in json.loads(sys.argv[1]):
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    with torch.no_grad():
        logits = model(input_ids).logits
    generated = model.generate(input_ids[:1], max_new_tokens=6, do_sample=False, pad_token_id=0)
    results[folder] = {"module": type(model).__module__, "logits": logits.tolist(), "generated": generated.tolist()}
print(json.dumps(results))
"""


@pytest.mark.slow  # one clean interpreter loading 14 folders' remote code: ~15 s of CPU
def test_every_variant_loads_as_remote_code_without_the_package(tmp_path, python_without_project):
    input_ids = torch.randint(0, 99, (2, 7), generator=torch.Generator().manual_seed(0))
    expected = {}
    for variant in VARIANTS:
        model, folder = variant_model(variant), tmp_path / variant.replace(":", "-")
        model.save_pretrained(folder)
        with torch.no_grad():
            expected[str(folder)] = (model(input_ids).logits, model.generate(input_ids[:1], max_new_tokens=6,
                                                                             do_sample=False, pad_token_id=0))
    remote = python_without_project(LOAD_EVERY_FOLDER, json.dumps(list(expected)), json.dumps(input_ids.tolist()))
    for folder, (logits, generated) in expected.items():
        assert remote[folder]["module"].startswith("transformers_modules."), folder
        assert torch.equal(torch.tensor(remote[folder]["logits"]), logits), folder
        assert remote[folder]["generated"] == generated.tolist(), folder


def test_sinusoidal_positions_are_the_papers_formula():
    """Vaswani et al. 2017, section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), added
    to the token embeddings, which section 3.4 multiplies by √d_model. Read off the first block's input."""
    model = variant_model("sinusoidal")
    seen = []
    model.transformer.h[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    input_ids = torch.randint(0, 99, (1, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(input_ids)
    d = model.config.n_embd
    formula = torch.tensor([[math.sin(pos / 10000 ** (2 * (j // 2) / d)) if j % 2 == 0
                             else math.cos(pos / 10000 ** (2 * (j // 2) / d)) for j in range(d)] for pos in range(64)])
    token_part = model.transformer.wte.weight[input_ids[0]] * math.sqrt(d)
    torch.testing.assert_close(seen[0][0] - token_part, formula, rtol=0, atol=1e-5)
    assert not any("position" in name for name, _ in model.named_parameters())  # no parameters
    assert not any("position" in name for name in model.state_dict())  # and nothing saved


def test_padded_vocabulary_rows_are_never_predicted():
    model = variant_model("vocab-padding")
    assert model.transformer.wte.weight.shape[0] == 128 and model.config.vocab_size == 99
    with torch.no_grad():
        model.lm_head.weight[99:] = 1e3  # a padding row would win every argmax if it had a column
        result = model.generate(torch.randint(1, 98, (2, 5)), **GREEDY)
    assert all(logits.shape[-1] == 99 for logits in result.logits)
    assert int(result.sequences.max()) < 99


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("new_vocab_size", [100, 101, 140])  # into the old padding (128 rows); past it (192)
def test_new_tokens_of_a_padded_vocabulary_start_where_transformers_starts_them(tie, new_vocab_size):
    """transformers' resize of an unpadded model (mean_resizing, the default) starts new rows at the mean of the old
    ones. A padded model's new ids take over padding rows, which must not keep their stale, never-trained values:
    the same model without padding, resized by transformers, is the reference."""
    torch.manual_seed(0)
    padded = GPTCustomForCausalLM(GPTCustomConfig(**TINY, tie_word_embeddings=tie, pad_vocab_size_to_multiple_of=64))
    plain = GPTCustomForCausalLM(GPTCustomConfig(**TINY, tie_word_embeddings=tie))
    with torch.no_grad():
        for name, tensor in plain.state_dict().items():
            tensor.copy_(padded.state_dict()[name][: tensor.shape[0]])  # the real rows; every other tensor whole
    stale = padded.transformer.wte.weight[99:128].detach().clone()
    padded.resize_token_embeddings(new_vocab_size)
    plain.resize_token_embeddings(new_vocab_size)
    for matrix in ("transformer.wte.weight", "lm_head.weight"):
        ours, reference = padded.state_dict()[matrix], plain.state_dict()[matrix]
        torch.testing.assert_close(ours[:new_vocab_size], reference, rtol=0, atol=1e-4)
    assert not torch.equal(padded.transformer.wte.weight[99:101], stale[:2])
    with torch.no_grad():
        input_ids = torch.tensor([[1, 98, 99, new_vocab_size - 1]])
        torch.testing.assert_close(padded(input_ids).logits, plain(input_ids).logits, rtol=0, atol=1e-4)


def test_resizing_a_padded_vocabulary_keeps_a_model_that_saves_and_loads(tmp_path):
    """transformers' resize_token_embeddings (a user adding tokens) on a padded vocabulary: the model must still
    predict exactly the new vocabulary and load back from its folder."""
    model = variant_model("vocab-padding")
    model.resize_token_embeddings(109)
    input_ids = torch.tensor([[105, 3, 7]])
    with torch.no_grad():
        logits = model(input_ids).logits
    assert model.config.vocab_size == 109 and logits.shape[-1] == 109
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        assert torch.equal(GPTCustomForCausalLM.from_pretrained(tmp_path)(input_ids).logits, logits)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_gradient_checkpointing_with_use_cache_trains_as_without_it(implementation):
    """Checkpointed blocks recompute in backward: the cache they were handed was written twice (16 positions for 8
    tokens, next-token logits off by 3.9 under sdpa; a size error under eager). As transformers does, use_cache is
    turned off under checkpointed training; a cache that already holds keys (a prefix) is refused, not dropped."""
    model = variant_model(VARIANTS[0]).train()
    model.config._attn_implementation = implementation
    input_ids = torch.randint(0, 99, (2, 8), generator=torch.Generator().manual_seed(0))

    def loss_and_gradients(**kwargs):
        model.zero_grad(set_to_none=True)
        output = model(input_ids, labels=input_ids, **kwargs)
        output.loss.backward()
        return output, {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}

    _, plain = loss_and_gradients()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    output, checkpointed = loss_and_gradients(use_cache=True)
    assert output.past_key_values is None
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=0, atol=1e-7, msg=name)
    with torch.no_grad():
        prefix = model(input_ids, use_cache=True).past_key_values  # no gradients: nothing to recompute, cache kept
    assert prefix.get_seq_length() == 8
    with pytest.raises(ValueError, match="gradient checkpointing recomputes each block and would write into it twice"):
        model(input_ids, past_key_values=prefix)
