import json
import re

import pytest
import torch

from hf_gpt_custom import PRESETS, GPTCustomConfig, GPTCustomForCausalLM
from hf_gpt_custom.errors import did_you_mean


def test_gpt2_small_parameter_counts_match_textbook_and_true_count():
    breakdown = GPTCustomConfig.from_preset("gpt2").parameter_breakdown()
    assert breakdown["textbook"] == 124_318_464  # 12·d²·L + V·d + T·d
    assert breakdown["total"] == 124_439_808  # + biases and LayerNorms, tied head counted once


@pytest.mark.parametrize("preset, total", [("gpt2", 124_439_808), ("gpt1", 116_534_784),
                                           ("llama-7b", 6_738_415_616), ("transformer-decoder", None)])
def test_parameter_breakdown_equals_num_parameters_of_the_real_model(preset, total):
    config = GPTCustomConfig.from_preset(preset)
    with torch.device("meta"):  # no memory for the weights, same parameter shapes
        model = GPTCustomForCausalLM(config)
    assert model.num_parameters() == config.parameter_breakdown()["total"] == (total or model.num_parameters())


@pytest.mark.parametrize("overrides", [{}, {"n_inner": 40}, {"tie_word_embeddings": False}])
def test_parameter_breakdown_matches_model_for_other_shapes(tiny_config, overrides):
    config = GPTCustomConfig(**{**tiny_config.to_dict(), **overrides})
    assert GPTCustomForCausalLM(config).num_parameters() == config.parameter_breakdown()["total"]


def test_attribute_map_exposes_generic_names():
    config = GPTCustomConfig(n_embd=64, n_layer=3, n_head=4, n_positions=128)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (64, 3, 4)
    assert config.max_position_embeddings == 128
    assert config.head_dim == 16 and config.inner_dim == 256


@pytest.mark.parametrize(
    "name, layers, d_model, heads, d_head",
    [
        ("gpt3-small", 12, 768, 12, 64),
        ("gpt3-medium", 24, 1024, 16, 64),
        ("gpt3-large", 24, 1536, 16, 96),
        ("gpt3-xl", 24, 2048, 16, 128),  # the paper prints 24 heads; 24 × 128 ≠ 2048
        ("gpt3-2.7b", 32, 2560, 32, 80),
        ("gpt3-6.7b", 32, 4096, 32, 128),
        ("gpt3-13b", 40, 5120, 40, 128),
        ("gpt3-175b", 96, 12288, 96, 128),
    ],
)
def test_gpt3_presets_follow_the_paper_table(name, layers, d_model, heads, d_head):
    config = GPTCustomConfig.from_preset(name)
    assert (config.n_layer, config.n_embd, config.n_head, config.head_dim) == (layers, d_model, heads, d_head)
    assert config.n_positions == 2048


def test_gpt3_175b_preset_has_175b_parameters_without_allocating_them():
    total = GPTCustomConfig.from_preset("gpt3-175b").parameter_breakdown()["total"]
    assert 174e9 < total < 176e9


def test_gpt1_and_gpt2_family_presets():
    # GPT-1 is post-LayerNorm with the tanh GELU (what transformers' OpenAIGPT computes for afn="gelu"); its
    # vocabulary is the released checkpoint's 40,478 (it was 40,000 in a pre-LN block before the family options).
    gpt1 = GPTCustomConfig.from_preset("gpt1")
    assert (gpt1.n_layer, gpt1.n_embd, gpt1.n_head, gpt1.inner_dim, gpt1.vocab_size, gpt1.n_positions) == (
        12, 768, 12, 3072, 40478, 512
    )
    assert (gpt1.norm_position, gpt1.position_embedding_type, gpt1.activation_function) == ("post", "learned", "gelu_new")
    for name, (layers, width) in {"gpt2-medium": (24, 1024), "gpt2-large": (36, 1280), "gpt2-xl": (48, 1600)}.items():
        config = GPTCustomConfig.from_preset(name)
        assert (config.n_layer, config.n_embd, config.n_positions, config.vocab_size) == (layers, width, 1024, 50257)
    assert set(PRESETS) >= {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt1"}


def test_did_you_mean_names_the_closest_choice_or_says_nothing():
    assert did_you_mean("gtp2", ["gpt1", "gpt2-medium", "gpt2"]) == "did you mean 'gpt2'? "
    assert did_you_mean("n_layr", {"n_layer", "n_head"}, prefix="model.") == "did you mean 'model.n_layer'? "
    assert did_you_mean("zzzz", ["gpt2", "gpt1"]) == ""
    assert did_you_mean("ARC_Easy", ["arc_easy", "piqa"]) == "did you mean 'arc_easy'? "  # case aside (newcomer4)


def test_preset_overrides_and_unknown_preset_suggestion():
    assert GPTCustomConfig.from_preset("gpt2", n_layer=2).n_layer == 2
    with pytest.raises(ValueError, match="did you mean 'gpt2'"):
        GPTCustomConfig.from_preset("gtp2")


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"n_embd": 770, "n_head": 12}, r"n_embd=770 must be divisible by n_head=12; try n_embd=768"),
        ({"n_layer": 0}, r"n_layer=0 must be a positive integer"),
        ({"vocab_size": -5}, r"vocab_size=-5"),
        ({"n_inner": 0}, r"n_inner=0"),
        ({"activation_function": "gelu_neww"}, r"did you mean 'gelu_new'"),
        ({"attn_pdrop": 1.0}, r"attn_pdrop=1.0 must be a dropout probability in \[0, 1\)"),
        ({"resid_pdrop": -0.1}, r"resid_pdrop=-0.1"),
        ({"layer_norm_epsilon": 0}, r"layer_norm_epsilon=0 must be a positive number"),
        ({"n_head": 12, "n_kv_head": 5}, r"n_head=12 must be divisible by n_kv_head=5 .*; try n_kv_head=4 or 6"),
        ({"n_kv_head": 0}, r"n_kv_head=0 must be a positive integer"),
        ({"position_embedding_type": "rotary"}, r"position_embedding_type=.rotary. is not supported; choose one of learned, sinusoidal, rope"),
        ({"norm_position": "middle"}, r"norm_position='middle' is not supported; choose one of pre, post"),
        ({"norm_type": "rms"}, r"norm_type='rms' is not supported; did you mean 'rmsnorm'"),
        ({"mlp_type": "swiglue"}, r"mlp_type='swiglue' is not supported; did you mean 'swiglu'"),
        ({"attention_bias": "no"}, r"attention_bias='no' must be true or false"),
        ({"mlp_bias": 1}, r"mlp_bias=1 must be true or false"),
        ({"multiple_of": 0}, r"multiple_of=0 must be a positive integer"),
        ({"pad_vocab_size_to_multiple_of": -64}, r"pad_vocab_size_to_multiple_of=-64 must be a positive integer"),
        ({"rope_theta": 0.5}, r"rope_theta=0.5 must be a number > 1"),
        ({"position_embedding_type": "rope", "n_embd": 36, "n_head": 4}, r"head_dim=9 is odd"),
        ({"position_embedding_type": "sinusoidal", "n_embd": 33, "n_head": 3}, r"n_embd=33 is odd"),
        ({"use_cache": "maybe"}, r"use_cache='maybe' must be true or false"),
        ({"scale_attn_weights": None}, r"scale_attn_weights=None must be true or false"),
        ({"bos_token_id": "<s>"}, r"bos_token_id='<s>' must be a token id \(an integer >= 0\) or null"),
        ({"pad_token_id": -1}, r"pad_token_id=-1 must be a token id"),
        ({"eos_token_id": [2, -1]}, r"eos_token_id=\[2, -1\] must be a token id \(an integer >= 0\), a list of them"),
    ],
)
def test_invalid_values_raise_value_error_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        GPTCustomConfig(**fields)


def test_token_ids_may_be_null_and_eos_may_be_a_list_as_in_transformers():
    """LlamaConfig-style checkpoints carry several end-of-sequence ids (generation stops at any of them)."""
    config = GPTCustomConfig(bos_token_id=None, pad_token_id=0, eos_token_id=[2, 7])
    assert (config.bos_token_id, config.pad_token_id, config.eos_token_id) == (None, 0, [2, 7])
    with pytest.raises(ValueError, match="bos_token_id=.* must be a token id"):
        GPTCustomConfig(bos_token_id=[1, 2])  # only eos may be a list


@pytest.mark.parametrize("activation", ["gelu_new", "gelu"])
def test_config_round_trips_through_save_pretrained(tmp_path, tiny_config, activation):
    tiny_config.activation_function = activation
    tiny_config.save_pretrained(tmp_path)
    loaded = GPTCustomConfig.from_pretrained(tmp_path)
    assert loaded.to_dict() == tiny_config.to_dict()
    assert loaded.model_type == "gpt_custom"


def test_gpt1_parameter_count_by_hand():
    """GPT-1 at the paper's sizes: 12 layers x 768, 3072 inner, vocabulary 40,000, 512 positions (tied head).

    Every parameter, by hand: per layer c_attn 768·2304 + 2304, c_proj 768·768 + 768, c_fc 768·3072 + 3072,
    mlp.c_proj 3072·768 + 768, two LayerNorms 2·2·768 = 7,087,872; x 12 = 85,054,464; plus token embedding
    40,000·768 = 30,720,000 and positions 512·768 = 393,216: 116,167,680. Post-LN has no final LayerNorm.
    The weight matrices alone (the textbook 12·d²·L + V·d + T·d) are 116,047,872. The 115.95M quoted in issue 15
    is neither: it is 0.1M below even the matrices-only count and no subset of the components (without positions:
    115,654,656 / 115,774,464) gives it; all of these round to the paper's 116M, which is what it can support.
    The released checkpoint's 40,478-row vocabulary (the gpt1 preset) gives 116,534,784, transformers' figure for
    openai-gpt."""
    d, layers, inner, vocab, positions = 768, 12, 3072, 40000, 512
    per_layer = (d * 3 * d + 3 * d) + (d * d + d) + (d * inner + inner) + (inner * d + d) + 2 * 2 * d
    assert per_layer == 7_087_872
    by_hand = layers * per_layer + vocab * d + positions * d
    assert by_hand == 116_167_680
    breakdown = GPTCustomConfig.from_preset("gpt1", vocab_size=vocab).parameter_breakdown()
    assert breakdown["total"] == by_hand
    assert breakdown["textbook"] == 12 * d * d * layers + vocab * d + positions * d == 116_047_872
    assert breakdown["layer_norm"] == layers * 2 * 2 * d  # no ln_f in a post-LN model
    assert GPTCustomConfig.from_preset("gpt1").parameter_breakdown()["total"] == 116_534_784


def test_llama_7b_block_parameter_count_by_hand():
    """A LLaMA-7B block: 4·d² attention (q, k, v, o; no biases) + 3·d·11008 SwiGLU + two RMSNorm weights."""
    d, inner = 4096, 11008
    config = GPTCustomConfig.from_preset("llama-7b")
    assert config.inner_dim == inner == round(2.6875 * d)
    breakdown = config.parameter_breakdown()
    attention, mlp, norms = 4 * d * d, 3 * d * inner, 2 * d
    assert attention == 67_108_864 and mlp == 135_266_304
    assert breakdown["attention"] == 32 * attention and breakdown["mlp"] == 32 * mlp
    assert attention + mlp + norms == 202_383_360  # ≈ 202M per block
    # 32 blocks, untied 32,000-row embedding and head, one final RMSNorm: LLaMA-7B's 6,738,415,616.
    assert breakdown["total"] == 32 * (attention + mlp + norms) + 2 * 32000 * d + d == 6_738_415_616
    assert breakdown["position_embedding"] == 0  # RoPE has no table


def test_grouped_query_attention_and_padding_counts_by_hand():
    # d 64, 8 query heads of 8, 2 kv heads: c_attn 64·(8 + 2·2)·8 = 6144 (+ 96 biases), c_proj 64·64 + 64.
    config = GPTCustomConfig(n_embd=64, n_head=8, n_kv_head=2, n_layer=1, vocab_size=100, n_positions=16,
                             pad_vocab_size_to_multiple_of=64)
    assert config.padded_vocab_size == 128 and config.n_kv_head == 2
    breakdown = config.parameter_breakdown()
    assert breakdown["attention"] == 64 * 96 + 96 + 64 * 64 + 64
    assert breakdown["token_embedding"] == 128 * 64  # the padded rows are parameters too


def test_swiglu_default_inner_width_follows_llamas_rule():
    assert GPTCustomConfig(mlp_type="swiglu", n_embd=4096, n_head=32).inner_dim == 11008
    assert GPTCustomConfig(mlp_type="swiglu", n_embd=128, n_head=4, multiple_of=8).inner_dim == 344
    assert GPTCustomConfig(mlp_type="swiglu", n_embd=128, n_head=4, n_inner=100).inner_dim == 100
    assert GPTCustomConfig(n_embd=128, n_head=4).inner_dim == 512  # standard MLP: 4·d whatever multiple_of says


@pytest.mark.parametrize("n_embd, n_head, inner",
                         [(5120, 40, 13824), (6656, 52, 17920), (8192, 64, 22016), (32, 4, 256)],
                         ids=["llama-13b", "llama-33b", "llama-65b", "tiny"])
def test_swiglu_default_inner_width_rounds_up_as_llama_does(n_embd, n_head, inner):
    """Meta's LLaMA FeedForward rounds 2/3·4·d *up* to a multiple of 256 (multiple_of * ((h + multiple_of - 1) //
    multiple_of)); the released 13B, 33B and 65B configs say intermediate_size 13824, 17920 and 22016. 7B (11008) and
    the llama-small preset round up and to the nearest alike, so only widths whose 2/3·4·d lies in the lower half
    of a step (13653 -> 13824, 17749 -> 17920, 21845 -> 22016, 85 -> 256, never 0) tell rounding up from rounding."""
    assert GPTCustomConfig(mlp_type="swiglu", n_embd=n_embd, n_head=n_head).inner_dim == inner


def test_transformers_names_of_the_family_fields():
    config = GPTCustomConfig(n_kv_head=4, layer_norm_epsilon=1e-6, n_inner=100)
    assert (config.num_key_value_heads, config.rms_norm_eps, config.intermediate_size) == (4, 1e-6, 100)
    config.num_key_value_heads = 2
    assert config.n_kv_head == 2
    # Unset, the derived fields take their transformers meaning (as LlamaConfig): generation reads them for cache shapes.
    assert GPTCustomConfig().num_key_value_heads == 12 and GPTCustomConfig(n_embd=64, n_head=4).head_dim == 16


def test_intermediate_size_is_the_mlps_real_width_as_llama_config_says():
    """n_inner's default (None) means a width the model computes; generic code reading config.intermediate_size (as
    LlamaConfig has it) gets that width, never None: GPT-2's 4·d, LLaMA's rounded SwiGLU width (Meta's 7B: 11008)."""
    assert GPTCustomConfig(n_embd=64, n_head=4).intermediate_size == 256
    assert GPTCustomConfig(mlp_type="swiglu", n_embd=4096, n_head=32).intermediate_size == 11008
    config = GPTCustomConfig(n_embd=64, n_head=4, intermediate_size=100)  # a generic name given when building
    assert config.n_inner == 100 and GPTCustomForCausalLM(config).transformer.h[0].mlp.c_fc.out_features == 100
    config.intermediate_size = 80
    assert config.n_inner == 80 and "intermediate_size" not in config.to_dict()


def test_family_presets():
    decoder = GPTCustomConfig.from_preset("transformer-decoder")
    assert (decoder.n_layer, decoder.n_embd, decoder.n_head, decoder.inner_dim) == (6, 512, 8, 2048)
    assert (decoder.norm_position, decoder.position_embedding_type, decoder.activation_function) == (
        "post", "sinusoidal", "relu")
    for name in ("llama-7b", "llama-small"):
        llama = GPTCustomConfig.from_preset(name)
        assert (llama.position_embedding_type, llama.norm_type, llama.mlp_type, llama.norm_position) == (
            "rope", "rmsnorm", "swiglu", "pre")
        assert not (llama.attention_bias or llama.mlp_bias or llama.tie_word_embeddings)
        assert (llama.rope_theta, llama.layer_norm_epsilon, llama.bos_token_id, llama.eos_token_id) == (1e4, 1e-6, 1, 2)
    llama = GPTCustomConfig.from_preset("llama-7b")
    assert (llama.n_layer, llama.n_embd, llama.n_head, llama.vocab_size, llama.n_positions) == (32, 4096, 32, 32000, 2048)


def test_default_config_is_gpt2s_block():
    config = GPTCustomConfig()
    assert (config.position_embedding_type, config.norm_position, config.norm_type, config.mlp_type) == (
        "learned", "pre", "layernorm", "standard")
    assert config.attention_bias and config.mlp_bias and config.tie_word_embeddings
    assert config.n_kv_head == config.n_head and config.pad_vocab_size_to_multiple_of is None


@pytest.mark.parametrize("preset, expected", [
    ("gpt2", "Pre-norm decoder: learned absolute position embeddings, LayerNorm, gelu_new MLP, biases in the attention "
             "and MLP projections, 12 attention heads, output head tied to the token embedding"),
    ("gpt1", "Post-norm (Add & Norm) decoder: learned absolute position embeddings, LayerNorm, gelu_new MLP"),
    ("transformer-decoder", "Post-norm (Add & Norm) decoder: sinusoidal position encodings (no parameters), LayerNorm, "
                            "relu MLP"),
    ("llama-7b", "Pre-norm decoder: rotary position embeddings (RoPE, theta 10000), RMSNorm, SwiGLU MLP, no biases, "
                 "32 attention heads, untied output head"),
])
def test_the_block_is_described_from_the_fields(preset, expected):
    """What a model card says the model is: read from the config, so a RoPE model is never called GPT-2's block."""
    assert GPTCustomConfig.from_preset(preset).describe_block().startswith(expected)
    grouped = GPTCustomConfig(n_head=8, n_kv_head=2, n_embd=64, pad_vocab_size_to_multiple_of=64, vocab_size=100)
    assert "grouped-query attention (8 query heads, 2 key/value heads)" in grouped.describe_block()
    assert "vocabulary padded to 128 rows" in grouped.describe_block()


@pytest.mark.parametrize("field, value, fix", [
    ("sliding_window", 4, "every layer attends to the whole context"),
    ("scale_attn_by_inverse_layer_idx", True, "not implemented (GPT-2's option)"),
    ("rope_scaling", {"rope_type": "linear", "factor": 2.0}, "only plain RoPE is implemented"),
    ("attention_dropout", 0.0, "this config's name for it is attn_pdrop"),
    ("hidden_act", "silu", "this config's name for it is activation_function"),
    ("afn", "relu", "this config's name for it is activation_function"),
    # GPT2Config(add_cross_attention=True) builds cross-attention layers; a half-turned RoPE is another model (the
    # hostilemodel hunt: both were stored and ignored)
    ("add_cross_attention", True, "there are no cross-attention layers"),
    ("partial_rotary_factor", 0.5, "RoPE turns every dimension of each head"),
])
def test_fields_of_other_configs_this_model_does_not_implement_are_refused(field, value, fix):
    """Stored and ignored, they changed nothing: sliding_window=4 even made DynamicCache(config=...) build sliding
    layers, so cached generation differed from the uncached forward; GPT-2's scale_attn_by_inverse_layer_idx gave
    GPT2LMHeadModel's config with other logits. Unset values (None, False) are what the model does: accepted."""
    with pytest.raises(ValueError, match=rf"GPTCustomConfig got {field}=.*ignored; {re.escape(fix)}"):
        GPTCustomConfig(**{field: value})
    GPTCustomConfig(**{field: None})


@pytest.mark.parametrize("field, value", [("pretraining_tp", 1), ("partial_rotary_factor", 1.0)])
def test_a_field_set_to_what_the_model_computes_anyway_is_accepted(field, value):
    GPTCustomConfig(position_embedding_type="rope", **{field: value})


def test_rope_parameters_set_rope_theta_and_scaling_is_refused():
    """transformers 5 writes RoPE's base as rope_parameters={"rope_type": "default", "rope_theta": ...}: it was
    ignored (rope_theta stayed 10000)."""
    config = GPTCustomConfig(position_embedding_type="rope", rope_parameters={"rope_type": "default", "rope_theta": 5e5})
    assert config.rope_theta == 5e5
    with pytest.raises(ValueError, match="only plain RoPE is implemented"):
        GPTCustomConfig(position_embedding_type="rope", rope_parameters={"rope_type": "yarn", "factor": 4.0})


@pytest.mark.parametrize("field, value, message", [
    ("rope_parameters", {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}, "only plain RoPE"),
    ("rope_scaling", {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}, "only plain RoPE"),
    ("sliding_window", 4, "sliding_window=4, which other transformers configs have"),
])
def test_other_configs_fields_set_on_a_built_config_are_refused_when_the_model_is_built(tmp_path, field, value, message):
    """The usual context-extension recipe: load the config, set rope scaling (or a sliding window) on it, pass it to
    from_pretrained. Construction refuses these fields, but set afterwards they were built past and ignored: the
    model gave the unscaled model's logits, and save_pretrained wrote the setting into config.json. Reference:
    transformers' Llama, which honours the same assignment (its logits change), so the setting is not a no-op."""
    import warnings

    from transformers import LlamaConfig, LlamaForCausalLM

    llama_config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                               num_attention_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    llama = LlamaForCausalLM(llama_config).eval()
    llama.save_pretrained(tmp_path / "llama")
    edited = LlamaConfig.from_pretrained(tmp_path / "llama")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # rope_scaling's deprecation
        setattr(edited, field, value)
    ids = torch.arange(40)[None] % 64
    with torch.no_grad():
        edited_logits = LlamaForCausalLM.from_pretrained(tmp_path / "llama", config=edited).eval()(ids).logits
    if field != "sliding_window":  # Llama reads sliding_window only through layer_types
        assert not torch.allclose(edited_logits, llama(ids).logits, atol=1e-4)

    GPTCustomForCausalLM(GPTCustomConfig(vocab_size=64, n_layer=1, n_embd=32, n_head=2, n_positions=64,
                                         position_embedding_type="rope")).save_pretrained(tmp_path / "ours")
    config = GPTCustomConfig.from_pretrained(tmp_path / "ours")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        setattr(config, field, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        GPTCustomForCausalLM.from_pretrained(tmp_path / "ours", config=config)
    # plain RoPE in transformers 5's spelling (its own advice) is what the model does: read as construction reads it
    config = GPTCustomConfig.from_pretrained(tmp_path / "ours")
    config.rope_parameters = {"rope_type": "default", "rope_theta": 5e5}
    model = GPTCustomForCausalLM.from_pretrained(tmp_path / "ours", config=config).eval()
    assert model.config.rope_theta == 5e5 and "rope_parameters" not in model.config.to_dict()
    built = GPTCustomConfig.from_pretrained(tmp_path / "ours", rope_parameters={"rope_type": "default",
                                                                                "rope_theta": 5e5})
    reference = GPTCustomForCausalLM.from_pretrained(tmp_path / "ours", config=built).eval()
    ids = torch.arange(40)[None] % 64
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=0)
        assert not torch.allclose(model(ids).logits, GPTCustomForCausalLM.from_pretrained(tmp_path / "ours")(ids).logits)


@pytest.mark.parametrize("edits", [{"n_head": 8}, {"n_head": 2}, {"n_embd": 64}, {"hidden_size": 64, "n_head": 8},
                                   {"num_attention_heads": 8}])
def test_a_config_edited_after_it_was_built_builds_gpt2s_model_of_the_edited_fields(edits):
    """config.n_head = 8 after construction kept head_dim and n_kv_head derived from the old fields: the model was
    silently grouped-query (8 query heads sharing 4 key/value heads) with the old head width. Reference: transformers'
    GPT-2 built from the same edited config; its weights must load into ours key for key and give its logits."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom.convert_gpt2 import from_gpt2_model
    from tests.helpers import randomize_

    fields = dict(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    ours_config, gpt2_config = GPTCustomConfig(**fields), GPT2Config(**fields)
    for name, value in edits.items():
        setattr(ours_config, name, value)
        setattr(gpt2_config, name, value)
    torch.manual_seed(0)
    gpt2 = randomize_(GPT2LMHeadModel(gpt2_config)).eval()
    ours = GPTCustomForCausalLM(ours_config).eval()
    ours.load_state_dict(from_gpt2_model(gpt2, GPTCustomForCausalLM).state_dict())  # strict: every shape equal
    n_head, n_embd = gpt2_config.n_head, gpt2_config.n_embd
    assert (ours_config.n_kv_head, ours_config.head_dim) == (n_head, n_embd // n_head)
    input_ids = torch.randint(0, 99, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids).logits, gpt2(input_ids).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("edits", [{"n_head": 8}, {"n_head": 2}, {"n_embd": 64}, {"n_embd": 64, "n_head": 8}])
@pytest.mark.parametrize("route", ["dict", "config.json"])
def test_a_config_dict_or_json_edited_builds_gpt2s_model_of_the_edited_fields(edits, route, tmp_path):
    """to_dict and config.json held head_dim and n_kv_head as numbers: n_head edited to 8 there, the model built was
    grouped-query (8 query heads of width 8 sharing 4 key/value heads, attention 64 wide in a 32-wide model).
    Reference: GPT2Config.from_dict with the same edits, its model's weights loaded into ours key for key."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom.convert_gpt2 import from_gpt2_model
    from tests.helpers import randomize_

    fields = dict(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    if route == "dict":
        ours_dict = GPTCustomConfig(**fields).to_dict()
    else:
        GPTCustomConfig(**fields).save_pretrained(tmp_path)
        ours_dict = json.loads((tmp_path / "config.json").read_text())
    ours_config = GPTCustomConfig.from_dict({**ours_dict, **edits})
    gpt2_config = GPT2Config.from_dict({**GPT2Config(**fields).to_dict(), **edits})
    torch.manual_seed(0)
    gpt2 = randomize_(GPT2LMHeadModel(gpt2_config)).eval()
    ours = GPTCustomForCausalLM(ours_config).eval()
    ours.load_state_dict(from_gpt2_model(gpt2, GPTCustomForCausalLM).state_dict())  # strict: every shape equal
    input_ids = torch.randint(0, 99, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids).logits, gpt2(input_ids).logits, rtol=1e-5, atol=1e-5)
    # a head width and key/value heads of its own (LLaMA's kind) are written and kept
    own = GPTCustomConfig(**{**fields, "n_kv_head": 2, "head_dim": 16}).to_dict()
    assert (own["head_dim"], own["n_kv_head"]) == (16, 2)
    kept = GPTCustomConfig.from_dict({**own, **edits})
    assert (kept.head_dim, kept.n_kv_head) == (16, 2)


def test_a_derived_field_set_to_none_is_derived_again(tmp_path):
    """to_dict writes derived head_dim and n_kv_head as null, so config.update(other.to_dict()) and
    from_pretrained(folder, head_dim=None) set them to None: the config then said "None key/value heads" in its model
    card sentence and parameter_breakdown failed (the model built was right). Reference: LlamaConfig.update with its
    own to_dict keeps the numbers n_embd and n_head give."""
    from transformers import LlamaConfig

    fields = dict(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    config = GPTCustomConfig(**fields)
    config.update(GPTCustomConfig(**fields).to_dict())
    llama = LlamaConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, vocab_size=99)
    llama.update(LlamaConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, vocab_size=99).to_dict())
    assert (config.head_dim, config.num_key_value_heads) == (llama.head_dim, llama.num_key_value_heads) == (8, 4)
    assert "None" not in config.describe_block()
    config.parameter_breakdown()
    config.save_pretrained(tmp_path)
    loaded = GPTCustomConfig.from_pretrained(tmp_path, head_dim=None, n_kv_head=None)
    assert (loaded.head_dim, loaded.n_kv_head) == (8, 4)


def test_an_edited_config_keeps_a_head_width_and_kv_heads_of_its_own_and_refuses_a_bad_edit_when_built(tmp_path):
    """LLaMA's kind of config (head_dim and n_kv_head given, not n_embd // n_head and n_head) keeps them as
    LlamaConfig does; an edit that leaves n_head not dividing n_embd is refused when a model is built from it, and a
    later edit that mends it builds. from_pretrained's keyword overrides are such edits."""
    from hf_gpt_custom.errors import UserError

    config = GPTCustomConfig(n_embd=64, n_head=4, n_kv_head=2, head_dim=8, n_layer=1, vocab_size=99, n_positions=32)
    config.n_head = 8
    assert (config.head_dim, config.n_kv_head) == (8, 2)
    config = GPTCustomConfig(n_embd=32, n_head=4, n_layer=1, vocab_size=99, n_positions=32)
    config.n_embd = 30  # on the way to 30 / 3
    with pytest.raises(UserError, match="n_embd"):
        GPTCustomForCausalLM(config)
    config.n_head = 3
    assert (config.head_dim, config.n_kv_head) == (10, 3)
    assert GPTCustomForCausalLM(config).transformer.h[0].attn.c_attn.weight.shape == (90, 30)
    config.save_pretrained(tmp_path)
    loaded = GPTCustomConfig.from_pretrained(tmp_path, n_head=5)
    assert (loaded.head_dim, loaded.n_kv_head) == (6, 5)
    assert "_post_init_done" not in json.loads((tmp_path / "config.json").read_text())


def test_afn_is_refused_at_construction_and_when_set_on_a_built_config(tmp_path):
    """OpenAIGPTConfig's name for the activation: stored and ignored, the model kept gelu_new where OpenAI GPT with the
    same weights computes relu (the roundreview16 hunt). Refused as hidden_act is, naming activation_function."""
    from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

    from hf_gpt_custom.convert_openai_gpt import from_openai_gpt_model

    def openai_gpt(afn):
        torch.manual_seed(0)
        return OpenAIGPTLMHeadModel(OpenAIGPTConfig(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2,
                                                    afn=afn)).eval()

    ids = torch.arange(20)[None] % 64
    with torch.no_grad():  # the field changes what OpenAI GPT computes: not a no-op
        assert not torch.allclose(openai_gpt("relu")(ids).logits, openai_gpt("gelu")(ids).logits, atol=1e-4)
    from_openai_gpt_model(openai_gpt("gelu"), GPTCustomForCausalLM).save_pretrained(tmp_path)
    config = GPTCustomConfig.from_pretrained(tmp_path)
    config.afn = "relu"
    with pytest.raises(ValueError, match="afn='relu'.*name for it is activation_function"):
        GPTCustomForCausalLM.from_pretrained(tmp_path, config=config)


@pytest.mark.parametrize("first", ["rope_parameters", "rope_scaling"])
def test_the_rope_theta_set_last_is_the_one_built_on_every_reuse_of_the_config(tmp_path, first):
    """`config.rope_parameters = {..., "rope_theta": 1e6}` (or a plain `rope_scaling`, whose transformers setter writes
    the current theta into rope_parameters), then `config.rope_theta = 5e5`: the model was built with the older 1e6
    (the copy was read at build, on from_pretrained's deep copy, so the user's config kept it for every later build).
    The reference is a model whose config is constructed with rope_theta=5e5 (the roundreview16 hunt)."""
    import warnings

    GPTCustomForCausalLM(GPTCustomConfig(vocab_size=64, n_layer=1, n_embd=32, n_head=2, n_positions=64,
                                         position_embedding_type="rope")).save_pretrained(tmp_path / "ours")
    config = GPTCustomConfig.from_pretrained(tmp_path / "ours")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # rope_scaling's deprecation
        setattr(config, first, {"rope_type": "default", **({"rope_theta": 1e6} if first == "rope_parameters" else {})})
    ids = torch.arange(40)[None] % 64
    for theta in (5e5, 2e5):  # a sweep reusing one config
        config.rope_theta = theta
        model = GPTCustomForCausalLM.from_pretrained(tmp_path / "ours", config=config).eval()
        reference = GPTCustomForCausalLM.from_pretrained(
            tmp_path / "ours", config=GPTCustomConfig.from_pretrained(tmp_path / "ours", rope_theta=theta)).eval()
        assert model.config.rope_theta == theta
        with torch.no_grad():
            torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=0)
    config.save_pretrained(tmp_path / "saved")
    assert GPTCustomConfig.from_pretrained(tmp_path / "saved").rope_theta == 2e5


@pytest.mark.parametrize("then", ["plain rope_parameters", "None"])
def test_a_scaling_assigned_then_replaced_or_cleared_builds_the_plain_model(tmp_path, then):
    """`config.rope_parameters = {linear scaling}`, then the user changes their mind: a plain rope_parameters sets
    rope_theta and drops the stored scaling, None clears it. Whichever is assigned last holds, as for any other
    field (the mutation sweep: a kept scaling still refused the build, and None raised a TypeError on assignment).
    Reference: a model whose config is constructed with the final rope_theta."""
    GPTCustomForCausalLM(GPTCustomConfig(vocab_size=64, n_layer=1, n_embd=32, n_head=2, n_positions=64,
                                         position_embedding_type="rope")).save_pretrained(tmp_path / "ours")
    config = GPTCustomConfig.from_pretrained(tmp_path / "ours")
    config.rope_parameters = {"rope_type": "linear", "factor": 2.0}
    if then == "None":
        config.rope_parameters = None
        theta = 10000.0
    else:
        config.rope_parameters = {"rope_type": "default", "rope_theta": 5e5}
        theta = 5e5
    model = GPTCustomForCausalLM.from_pretrained(tmp_path / "ours", config=config).eval()
    reference = GPTCustomForCausalLM.from_pretrained(
        tmp_path / "ours", config=GPTCustomConfig.from_pretrained(tmp_path / "ours", rope_theta=theta)).eval()
    assert model.config.rope_theta == theta
    ids = torch.arange(40)[None] % 64
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=0)


@pytest.mark.parametrize("rope", [{"type": "linear", "factor": 2.0},  # transformers 4's key for the scaling's kind
                                  {"rope_type": "linear", "rope_theta": 10000.0}])
def test_a_scaling_in_any_spelling_is_refused_at_construction_and_when_set_on_a_built_config(tmp_path, rope):
    """Only {"rope_type": "default", "rope_theta": ...} is plain RoPE: another rope_type, or any other key (the older
    "type" spelling of it included), is scaling this model does not implement. Reference: transformers' Llama reads
    rope_scaling={"type": "linear", "factor": 2.0} from a config.json as linear scaling (its logits change)."""
    import warnings

    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, max_position_embeddings=64)).eval()
    llama.save_pretrained(tmp_path / "llama")
    saved = json.loads((tmp_path / "llama" / "config.json").read_text())
    saved.pop("rope_parameters", None)
    saved.update(rope_theta=10000.0, rope_scaling={"type": "linear", "factor": 2.0})
    (tmp_path / "llama" / "config.json").write_text(json.dumps(saved))
    ids = torch.arange(40)[None] % 64
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaled = LlamaForCausalLM.from_pretrained(tmp_path / "llama").eval()(ids).logits
        assert not torch.allclose(scaled, llama(ids).logits, atol=1e-4)

    with pytest.raises(ValueError, match="only plain RoPE is implemented"):
        GPTCustomConfig(position_embedding_type="rope", rope_parameters=dict(rope))
    GPTCustomForCausalLM(GPTCustomConfig(vocab_size=64, n_layer=1, n_embd=32, n_head=2, n_positions=64,
                                         position_embedding_type="rope")).save_pretrained(tmp_path / "ours")
    config = GPTCustomConfig.from_pretrained(tmp_path / "ours")
    config.rope_parameters = dict(rope)
    with pytest.raises(ValueError, match="only plain RoPE is implemented"):
        GPTCustomForCausalLM.from_pretrained(tmp_path / "ours", config=config)


@pytest.mark.parametrize("spelling", [{"type": "default"}, {"rope_type": "default"},
                                      {"type": "default", "rope_theta": 700.0}])
def test_a_plain_rope_scaling_in_either_spelling_is_plain_rope_as_llama_reads_it(spelling):
    """transformers 4 wrote plain RoPE as rope_scaling={"type": "default"}; LlamaConfig reads it (given or assigned)
    as default RoPE, where ours refused it as scaling (the roundreview19 hunt). Reference: LlamaConfig's reading."""
    import warnings

    from transformers import LlamaConfig

    tiny = dict(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=64, position_embedding_type="rope")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        llama = LlamaConfig(rope_theta=500.0)
        llama.rope_scaling = dict(spelling)
        given = GPTCustomConfig(**tiny, rope_theta=500.0, rope_scaling=dict(spelling))
        assigned = GPTCustomConfig(**tiny, rope_theta=500.0)
        assigned.rope_scaling = dict(spelling)
    assert llama.rope_parameters["rope_type"] == "default"
    for config in (given, assigned):
        GPTCustomForCausalLM(config)  # built, not refused
        assert config.rope_theta == spelling.get("rope_theta", 500.0)  # a theta given with it is read
    with pytest.raises(ValueError, match="only plain RoPE"):  # the old spelling of a scaling type is still scaling
        GPTCustomConfig(**tiny, rope_scaling={"type": "dynamic"})


def test_rope_parameters_and_a_rope_scaling_given_together_are_refused_not_half_read():
    """Both given at construction, only the first was read: the model in memory used one theta, its saved folder
    reloaded with the other (the roundreview20 hunt, a regression of reading a plain rope_scaling)."""
    with pytest.raises(ValueError, match=r"both rope_parameters=.* and rope_scaling=.*give one"):
        GPTCustomConfig(position_embedding_type="rope", rope_parameters={"rope_type": "default", "rope_theta": 1e4},
                        rope_scaling={"type": "default", "rope_theta": 5e5})


@pytest.mark.parametrize("field", ["add_cross_attention", "sliding_window", "scale_attn_by_inverse_layer_idx"])
def test_an_unsupported_field_set_to_false_is_accepted(field):
    """False is what the model does, as None is: GPT2Config().to_dict() writes add_cross_attention=False (a planted
    refusal of False was missed: mut_s62)."""
    from transformers import GPT2Config

    assert GPT2Config().to_dict()["add_cross_attention"] is False
    GPTCustomConfig(**{field: False})
