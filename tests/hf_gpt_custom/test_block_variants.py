"""The block variants of GPTCustomConfig, piece by piece, against references we did not write.

Sinusoidal positions against the paper's formula evaluated here with `math`; RMSNorm, RoPE, SwiGLU and grouped-query
attention against transformers' LlamaRMSNorm, LlamaRotaryEmbedding, LlamaMLP and LlamaAttention with the same weights;
the post-LN block against transformers' OpenAIGPT Block. Then what the model makes of them: weight names, exact
parameter counts, the padded vocabulary never predicted, the KV cache, save/load, and `hf-gpt-custom train` accepting every option as a `model:` key.
"""

import json
import math

import pytest
import torch
from torch import nn
from transformers import LlamaConfig, OpenAIGPTConfig
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding
from transformers.models.openai.modeling_openai import Block as OpenAIGPTBlock

from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
from hf_gpt_custom.block_variants import GPTCustomRMSNorm, GPTCustomRotaryEmbedding, sinusoidal_table
from hf_gpt_custom.modeling_gpt_custom import GPTCustomAttention, GPTCustomBlock, GPTCustomSwiGLU

from tests.helpers import TINY_GPT2

# One config change per variant, plus LLaMA's combination and GPT-1's.
VARIANTS = {
    "post_norm": {"norm_position": "post"},
    "rmsnorm": {"norm_type": "rmsnorm", "layer_norm_epsilon": 1e-6},
    "swiglu": {"mlp_type": "swiglu", "n_inner": 48},
    "sinusoidal": {"position_embedding_type": "sinusoidal"},
    "rope": {"position_embedding_type": "rope", "rope_theta": 500.0},
    "no_bias": {"attention_bias": False, "mlp_bias": False},
    "gqa": {"n_kv_head": 2},
    "multi_query": {"n_kv_head": 1},
    "untied": {"tie_word_embeddings": False},
    "padded_vocab": {"pad_vocab_size_to_multiple_of": 64},
    "llama": {"position_embedding_type": "rope", "norm_type": "rmsnorm", "mlp_type": "swiglu", "attention_bias": False,
              "mlp_bias": False, "n_kv_head": 2, "tie_word_embeddings": False, "multiple_of": 16},
    "gpt1": {"norm_position": "post", "activation_function": "gelu_new"},
    "transformer": {"norm_position": "post", "position_embedding_type": "sinusoidal", "activation_function": "relu"},
}


def _config(**overrides) -> GPTCustomConfig:
    return GPTCustomConfig(**{**TINY_GPT2, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "resid_pdrop": 0.0, **overrides})


def _model(seed: int = 0, **overrides) -> GPTCustomForCausalLM:
    torch.manual_seed(seed)
    model = GPTCustomForCausalLM(_config(**overrides)).eval()
    with torch.no_grad():  # norms and biases away from their identity/zero init, so dropping one shows
        for name, parameter in model.named_parameters():
            if parameter.dim() == 1:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    return model


def _prompt(batch: int = 2, length: int = 7) -> torch.Tensor:
    return torch.randint(1, 98, (batch, length), generator=torch.Generator().manual_seed(5))


# --- sinusoidal positions --------------------------------------------------------------------------------------------


def test_sinusoidal_table_is_the_papers_formula():
    n_positions, d_model = 50, 16
    table = sinusoidal_table(n_positions, d_model)
    for position in range(n_positions):
        for i in range(d_model // 2):
            angle = position / 10000 ** (2 * i / d_model)
            assert table[position, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-7)
            assert table[position, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-7)


def test_sinusoidal_positions_are_a_buffer_added_to_scaled_token_embeddings():
    model = _model(position_embedding_type="sinusoidal")
    transformer = model.transformer
    assert not list(transformer.wpe.parameters())
    assert not any("position" in name for name, _ in model.named_parameters())
    assert not any("position" in key for key in model.state_dict())  # recomputed from the config, never saved
    input_ids = _prompt(1, 9)
    with torch.no_grad():
        first_hidden = transformer(input_ids, output_hidden_states=True).hidden_states[0]
    # The paper's section 3.4: token embeddings times sqrt(d_model), plus the encoding of each position.
    expected = transformer.wte.weight[input_ids] * math.sqrt(32) + sinusoidal_table(64, 32)[:9]
    torch.testing.assert_close(first_hidden, expected, rtol=0, atol=1e-6)
    with torch.no_grad():  # any length up to n_positions
        assert model(torch.randint(1, 98, (1, 64))).logits.shape == (1, 64, 99)


def test_the_sinusoid_stays_the_formula_through_a_cast_to_bf16_and_back():
    """model.to(torch.bfloat16) cast the table; .to(torch.float32) after it kept bf16's rounding (2e-3 off), so the
    model's logits were no longer the float32 model's. Reference: the paper's formula (above) and, in bf16, the table
    rounded where it is added, as a model loaded with dtype=torch.bfloat16 adds it."""
    model = _model(position_embedding_type="sinusoidal")
    input_ids = _prompt(1, 9)
    with torch.no_grad():
        before = model(input_ids).logits
        model.to(torch.bfloat16)
        assert model.transformer.wpe.table.dtype == torch.float32
        in_bf16 = model.transformer(input_ids, output_hidden_states=True).hidden_states[0]
        expected = (model.transformer.wte.weight[input_ids] * math.sqrt(32)
                    + sinusoidal_table(64, 32)[:9].to(torch.bfloat16))
        torch.testing.assert_close(in_bf16, expected, rtol=0, atol=0)
        model.to(torch.float32)
        assert torch.equal(model.transformer.wpe.table, sinusoidal_table(64, 32))
        fresh = _model(position_embedding_type="sinusoidal")  # the same seed: the weights before the bf16 round trip
        model.load_state_dict(fresh.state_dict())
        torch.testing.assert_close(model(input_ids).logits, before, rtol=0, atol=0)


# --- RMSNorm, RoPE, SwiGLU, GQA against transformers' Llama ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_matches_llama_rmsnorm_and_the_formula(dtype):
    ours, llama = GPTCustomRMSNorm(32, eps=1e-6), LlamaRMSNorm(32, eps=1e-6)
    with torch.no_grad():
        ours.weight.normal_()
        llama.weight.copy_(ours.weight)
    ours, llama = ours.to(dtype), llama.to(dtype)
    x = (torch.randn(2, 5, 32) * 3).to(dtype)
    assert torch.equal(ours(x), llama(x))  # same arithmetic, incl. the float32 statistics
    x32 = x.float()
    by_hand = x32 / torch.sqrt((x32**2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(ours(x).float(), (by_hand.to(dtype) * ours.weight).float(), rtol=1e-5, atol=1e-5)


def test_rotary_angles_match_llamas():
    config = _config(position_embedding_type="rope", rope_theta=500.0)
    llama = LlamaRotaryEmbedding(LlamaConfig(hidden_size=32, num_attention_heads=4, max_position_embeddings=64,
                                             rope_parameters={"rope_type": "default", "rope_theta": 500.0}))
    position_ids = torch.tensor([[3, 4, 5, 9]])
    x = torch.randn(1, 4, 32)
    unchanged, angles = GPTCustomRotaryEmbedding(config)(x, position_ids)
    assert unchanged is x  # RoPE adds nothing to the embeddings: the attention layers rotate queries and keys
    for got, want in zip(angles, llama(x, position_ids)):
        assert torch.equal(got, want)


def test_rotary_angles_of_a_bf16_model_are_computed_in_float32():
    """model.to(bfloat16) casts every floating buffer; a bf16 frequency table would put position 2000 off by radians.
    The angles are LlamaRotaryEmbedding's float32 angles rounded once to bf16, however the module was cast."""
    config = _config(position_embedding_type="rope", n_positions=4096)
    llama = LlamaRotaryEmbedding(LlamaConfig(hidden_size=32, num_attention_heads=4, max_position_embeddings=4096))
    position_ids = torch.tensor([[0, 17, 2000, 4095]])
    x = torch.randn(1, 4, 32, dtype=torch.bfloat16)
    _, angles = GPTCustomRotaryEmbedding(config).to(torch.bfloat16)(x, position_ids)
    for got, want in zip(angles, llama(x.float(), position_ids)):
        assert got.dtype == torch.bfloat16 and torch.equal(got, want.to(torch.bfloat16))


def test_swiglu_matches_llama_mlp_and_the_formula():
    config = _config(mlp_type="swiglu", n_inner=48, mlp_bias=False)
    ours = GPTCustomSwiGLU(config)
    llama = LlamaMLP(LlamaConfig(hidden_size=32, intermediate_size=48, mlp_bias=False, hidden_act="silu"))
    llama.up_proj.weight, llama.gate_proj.weight, llama.down_proj.weight = (
        ours.c_fc.weight, ours.c_gate.weight, ours.c_proj.weight)
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        assert torch.equal(ours(x), llama(x))
        gate = x @ ours.c_gate.weight.T
        by_hand = (gate / (1 + torch.exp(-gate)) * (x @ ours.c_fc.weight.T)) @ ours.c_proj.weight.T
        torch.testing.assert_close(ours(x), by_hand, rtol=0, atol=1e-5)


@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_rope_gqa_attention_matches_llama_attention(n_kv_head, attn_implementation):
    """Our fused c_attn (q, then k, then v) with RoPE and n_kv_head key/value heads, against LlamaAttention with
    the same weights split into q/k/v_proj, at positions that do not start at 0 (as after a KV cache)."""
    config = _config(position_embedding_type="rope", n_kv_head=n_kv_head, attention_bias=False, rope_theta=300.0)
    config._attn_implementation = attn_implementation
    llama_config = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=n_kv_head,
                               attention_bias=False, max_position_embeddings=64,
                               rope_parameters={"rope_type": "default", "rope_theta": 300.0})
    llama_config._attn_implementation = attn_implementation
    ours, llama = GPTCustomAttention(config, 0).eval(), LlamaAttention(llama_config, 0).eval()
    q_width, kv_width = 32, 8 * n_kv_head
    assert ours.c_attn.weight.shape == (q_width + 2 * kv_width, 32)
    with torch.no_grad():
        ours.c_attn.weight.normal_(0, 0.3)
        q, k, v = ours.c_attn.weight.split([q_width, kv_width, kv_width])
        llama.q_proj.weight.copy_(q), llama.k_proj.weight.copy_(k), llama.v_proj.weight.copy_(v)
        llama.o_proj.weight.copy_(ours.c_proj.weight)
    x = torch.randn(2, 6, 32)
    position_ids = torch.arange(5, 11)[None].expand(2, -1)
    _, cos_sin = GPTCustomRotaryEmbedding(config)(x, position_ids)
    causal = torch.full((6, 6), torch.finfo(torch.float32).min).triu(1)[None, None].expand(2, 1, 6, 6)
    with torch.no_grad():
        got, _ = ours(x, cos_sin, causal)
        want, _ = llama(x, position_embeddings=LlamaRotaryEmbedding(llama_config)(x, position_ids),
                        attention_mask=causal)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


# --- post-LN against transformers' OpenAIGPT block -------------------------------------------------------------------


def test_post_norm_block_matches_openai_gpt_block():
    config = _config(norm_position="post", activation_function="gelu_new")
    ours = GPTCustomBlock(config, 0).eval()
    reference = OpenAIGPTBlock(64, OpenAIGPTConfig(n_embd=32, n_head=4, n_positions=64, afn="gelu"), scale=True).eval()
    with torch.no_grad():
        for parameter in ours.parameters():
            parameter.normal_(0, 0.3)
        for name, parameter in reference.named_parameters():
            source = ours.get_parameter(name)
            parameter.copy_(source.T if parameter.dim() == 2 else source)  # Conv1D stores (in, out)
    x = torch.randn(2, 7, 32)
    causal = torch.full((7, 7), torch.finfo(torch.float32).min).triu(1)[None, None]  # OpenAIGPT's own tril buffer
    with torch.no_grad():
        torch.testing.assert_close(ours(x, attention_mask=causal), reference(x)[0], rtol=0, atol=1e-5)


def test_post_norm_model_has_no_final_norm_and_returns_the_last_blocks_output():
    model = _model(norm_position="post")
    assert isinstance(model.transformer.ln_f, nn.Identity)
    assert not any(key.startswith("transformer.ln_f") for key in model.state_dict())
    with torch.no_grad():
        out = model.transformer(_prompt(), output_hidden_states=True)
    assert torch.equal(out.last_hidden_state, out.hidden_states[-1])


# --- the model: names, counts, head, vocabulary padding --------------------------------------------------------------


def test_weight_names_follow_the_shared_scheme():
    def names(**overrides):
        return set(GPTCustomForCausalLM(_config(n_layer=1, **overrides)).state_dict())

    gpt2 = names()
    assert gpt2 == {
        "transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.ln_f.bias",
        *(f"transformer.h.0.{part}" for part in (
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
            "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
            "mlp.c_proj.bias")),
        "lm_head.weight",  # tied: state_dict lists it, save_pretrained stores it once
    }
    llama = names(**VARIANTS["llama"])
    assert llama == {
        "transformer.wte.weight", "transformer.ln_f.weight", "lm_head.weight",
        *(f"transformer.h.0.{part}.weight" for part in (
            "ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_gate", "mlp.c_proj")),
    }
    assert "transformer.ln_f.weight" not in names(norm_position="post")


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANTS.keys())
def test_parameter_breakdown_equals_num_parameters(variant):
    config = _config(**VARIANTS[variant])
    model = GPTCustomForCausalLM(config)
    assert model.num_parameters() == config.parameter_breakdown()["total"]
    assert sum(p.numel() for p in model.parameters()) == config.parameter_breakdown()["total"]


def test_parameter_breakdown_counts_an_untied_heads_padded_rows():
    """An untied head has padded_vocab_size rows as the embedding does: the breakdown's total is num_parameters()
    for the combination too, and the head's own count is the embedding's."""
    config = _config(tie_word_embeddings=False, pad_vocab_size_to_multiple_of=64)
    model = GPTCustomForCausalLM(config)
    breakdown = config.parameter_breakdown()
    assert model.lm_head.weight.numel() == breakdown["lm_head"] == breakdown["token_embedding"]
    assert model.num_parameters() == breakdown["total"]


def test_untied_head_is_its_own_weight_and_survives_save_and_load(tmp_path):
    model = _model(tie_word_embeddings=False)
    assert model.lm_head.weight is not model.transformer.wte.weight
    assert not torch.equal(model.lm_head.weight, model.transformer.wte.weight)
    model.save_pretrained(tmp_path)
    loaded = GPTCustomForCausalLM.from_pretrained(tmp_path).eval()
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)


def test_padded_vocabulary_has_padded_rows_but_logits_over_the_real_vocabulary():
    model = _model(pad_vocab_size_to_multiple_of=64)
    assert model.transformer.wte.weight.shape[0] == model.lm_head.weight.shape[0] == 128
    input_ids = _prompt()
    with torch.no_grad():
        out = model(input_ids, labels=input_ids)
    assert out.logits.shape == (2, 7, 99)
    # The loss is transformers' cross entropy over the 99 real columns.
    expected = nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, 99), input_ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, expected)


def test_gpt1_auxiliary_lm_loss_of_a_task_head_ignores_the_padded_rows():
    """The classification head's λ·L1 is the causal LM's loss on the same body, also with a padded vocabulary."""
    from hf_gpt_custom import GPTCustomForSequenceClassification

    config = _config(pad_vocab_size_to_multiple_of=64, num_labels=2, pad_token_id=0)
    torch.manual_seed(0)
    head = GPTCustomForSequenceClassification(config).eval()
    causal_lm = GPTCustomForCausalLM(config).eval()
    causal_lm.transformer.load_state_dict(head.transformer.state_dict())
    input_ids = _prompt()
    with torch.no_grad():
        got = head(input_ids, labels=torch.tensor([0, 1]), lm_loss_weight=0.5).lm_loss
        expected = causal_lm(input_ids, labels=input_ids).loss
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_resizing_a_padded_vocabulary_keeps_it_padded_and_loadable(tmp_path):
    model = _model(pad_vocab_size_to_multiple_of=64)
    model.resize_token_embeddings(130)
    assert model.config.vocab_size == 130 and model.transformer.wte.weight.shape[0] == 192
    assert model.num_parameters() == model.config.parameter_breakdown()["total"]
    model.save_pretrained(tmp_path)
    loaded = GPTCustomForCausalLM.from_pretrained(tmp_path).eval()
    input_ids = torch.tensor([[129, 5, 7]])
    with torch.no_grad():
        assert loaded(input_ids).logits.shape == (1, 3, 130)
        assert torch.equal(loaded(input_ids).logits, model.eval()(input_ids).logits)
    with pytest.raises(ValueError, match="pads its vocabulary itself"):
        model.resize_token_embeddings(140, pad_to_multiple_of=8)


@pytest.mark.parametrize("tie_word_embeddings", [True, False])
def test_resizing_a_padded_vocabulary_gives_new_ids_the_rows_an_unpadded_model_gives_them(tie_word_embeddings):
    """With mean_resizing, transformers gives a new id's embedding (and untied head) row the mean of the old *real*
    rows (sampled within ~1e-9 of it). A padded model's new ids take over padding rows, which are never trained: they
    must be overwritten with that mean, in wte and in an untied lm_head alike, never averaged in. References: the
    mean by hand, and transformers' own resize of the same weights without padding."""
    padded = _model(pad_vocab_size_to_multiple_of=64, tie_word_embeddings=tie_word_embeddings)
    unpadded = _model(tie_word_embeddings=tie_word_embeddings)
    with torch.no_grad():
        for name in ("transformer.wte.weight", "lm_head.weight"):
            weight = padded.get_parameter(name)
            weight[99:] = 5.0  # padding rows far from every real row: averaging them in, or keeping them, shows
            unpadded.get_parameter(name).copy_(weight[:99])
    padded.resize_token_embeddings(110)
    torch.manual_seed(0)
    unpadded.resize_token_embeddings(110)
    for name in ("transformer.wte.weight", "lm_head.weight"):
        got = padded.get_parameter(name)[99:110]
        by_hand = padded.get_parameter(name)[:99].mean(0).expand_as(got)
        torch.testing.assert_close(got, by_hand, rtol=0, atol=1e-6, msg=name)
        torch.testing.assert_close(got, unpadded.get_parameter(name)[99:110], rtol=0, atol=1e-3, msg=name)


@pytest.mark.parametrize("tie_word_embeddings", [True, False])
def test_generation_never_emits_a_padded_id(tie_word_embeddings):
    model = _model(pad_vocab_size_to_multiple_of=64, tie_word_embeddings=tie_word_embeddings)
    with torch.no_grad():  # padded rows that would win every argmax and nearly every sample if they had a column
        model.lm_head.weight[99:] = model.transformer.ln_f(torch.ones(32)) * 100
    prompt = _prompt(3, 4)
    with torch.no_grad():
        greedy = model.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=0)
        sampled = model.generate(prompt, max_new_tokens=20, do_sample=True, temperature=2.0, pad_token_id=0)
    assert int(greedy.max()) < 99 and int(sampled.max()) < 99


# --- KV cache, padding, save/load, training -------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["llama", "gqa", "sinusoidal", "post_norm"])
def test_cache_holds_kv_heads_and_cached_logits_equal_a_full_pass(variant):
    model = _model(**VARIANTS[variant])
    input_ids = _prompt(2, 12)
    with torch.no_grad():
        full = model(input_ids).logits
        prefix = model(input_ids[:, :8], use_cache=True)
        step = model(input_ids[:, 8:], past_key_values=prefix.past_key_values)
    assert step.past_key_values.layers[0].keys.shape == (2, model.config.n_kv_head, 12, 8)
    torch.testing.assert_close(step.logits, full[:, 8:], rtol=0, atol=1e-5)


@pytest.mark.parametrize("variant", ["llama", "sinusoidal", "gqa"])
def test_a_static_cache_stepped_without_positions_or_mask_gives_the_full_pass_logits(variant):
    """Decoding by hand through a StaticCache, with neither position_ids nor attention_mask: each step's positions
    continue from the cache's count (held on the device), so every step's logits are the full pass's."""
    from transformers import StaticCache

    model = _model(**VARIANTS[variant])
    input_ids = _prompt(2, 11)
    cache = StaticCache(config=model.config, max_cache_len=16)
    with torch.no_grad():
        full = model(input_ids).logits
        steps = [model(input_ids[:, :8], past_key_values=cache, use_cache=True).logits]
        for column in range(8, 11):
            steps.append(model(input_ids[:, column:column + 1], past_key_values=cache, use_cache=True).logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)


def test_rope_left_padded_batch_generates_what_each_row_generates_alone():
    """RoPE reads generate()'s position_ids (counted from each row's first real token), so left padding changes
    nothing for a row."""
    model = _model(**VARIANTS["llama"])
    rows = [torch.tensor([[5, 6, 7, 8, 9]]), torch.tensor([[11, 12, 13]])]
    batch = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 11, 12, 13]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    greedy = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        batched = model.generate(batch, attention_mask=mask, **greedy)
        alone = [model.generate(row, **greedy) for row in rows]
    assert torch.equal(batched[0], alone[0][0])
    assert torch.equal(batched[1, 2:], alone[1][0])


@pytest.mark.parametrize("variant", ["llama", "transformer", "padded_vocab"])
def test_save_and_load_give_identical_logits(variant, tmp_path):
    """from_pretrained builds the model on the meta device: the sinusoid table and RoPE frequencies, which are not
    saved, must be recomputed on load."""
    model = _model(**VARIANTS[variant])
    model.save_pretrained(tmp_path)
    loaded, info = GPTCustomForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    input_ids = _prompt()
    with torch.no_grad():
        assert torch.equal(loaded.eval()(input_ids).logits, model(input_ids).logits)


REMOTE_LOGITS = """
import json, sys
import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
with torch.no_grad():
    print(json.dumps(model(torch.tensor(json.loads(sys.argv[2]))).logits.tolist()))
"""


@pytest.mark.slow  # ~18 s: a fresh interpreter imports torch and transformers
def test_llama_shaped_model_loads_as_remote_code(tmp_path, python_without_project):
    """block_variants.py travels with the saved code, and the rotary frequencies are rebuilt where the package is
    not installed (one combination here; every option is covered by the per-option tests)."""
    model = _model(**VARIANTS["llama"], pad_vocab_size_to_multiple_of=64)
    model.save_pretrained(tmp_path / "model")
    input_ids = _prompt().tolist()
    remote = torch.tensor(python_without_project(REMOTE_LOGITS, tmp_path / "model", json.dumps(input_ids)))
    with torch.no_grad():
        assert torch.equal(remote, model(torch.tensor(input_ids)).logits)


def test_training_config_passes_every_variant_field_to_the_model(tmp_path):
    from hf_gpt_custom.training.config import load_train_config
    from hf_gpt_custom.training.model_section import build_model_config

    overrides = [f"model.{key}={value}" for key, value in VARIANTS["llama"].items()] + ["model.norm_position=post"]
    config = load_train_config("training/configs/smoke.yaml", [f"out_dir={tmp_path}", *overrides])
    model_config = build_model_config(config, vocab_size=300, eos_token_id=0)
    for key, value in {**VARIANTS["llama"], "norm_position": "post"}.items():
        assert getattr(model_config, key) == value, key
    with pytest.raises(ValueError, match="n_kv_head=3"):
        load_train_config("training/configs/smoke.yaml", [f"out_dir={tmp_path}", "model.n_kv_head=3"])
