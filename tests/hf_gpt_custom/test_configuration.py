import pytest
import torch

from hf_gpt_custom import PRESETS, GPTCustomConfig, GPTCustomForCausalLM
from hf_gpt_custom.errors import did_you_mean


def test_gpt2_small_parameter_counts_match_textbook_and_true_count():
    breakdown = GPTCustomConfig.from_preset("gpt2").parameter_breakdown()
    assert breakdown["textbook"] == 124_318_464  # 12·d²·L + V·d + T·d
    assert breakdown["total"] == 124_439_808  # + biases and LayerNorms, tied head counted once


def test_parameter_breakdown_equals_num_parameters_of_the_real_model():
    config = GPTCustomConfig.from_preset("gpt2")
    with torch.device("meta"):  # no memory for 124M weights, same parameter shapes
        model = GPTCustomForCausalLM(config)
    assert model.num_parameters() == config.parameter_breakdown()["total"] == 124_439_808


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
    gpt1 = GPTCustomConfig.from_preset("gpt1")
    assert (gpt1.n_layer, gpt1.n_embd, gpt1.n_head, gpt1.inner_dim, gpt1.vocab_size, gpt1.n_positions) == (
        12, 768, 12, 3072, 40000, 512
    )
    for name, (layers, width) in {"gpt2-medium": (24, 1024), "gpt2-large": (36, 1280), "gpt2-xl": (48, 1600)}.items():
        config = GPTCustomConfig.from_preset(name)
        assert (config.n_layer, config.n_embd, config.n_positions, config.vocab_size) == (layers, width, 1024, 50257)
    assert set(PRESETS) >= {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt1"}


def test_did_you_mean_names_the_closest_choice_or_says_nothing():
    assert did_you_mean("gtp2", ["gpt1", "gpt2-medium", "gpt2"]) == "did you mean 'gpt2'? "
    assert did_you_mean("n_layr", {"n_layer", "n_head"}, prefix="model.") == "did you mean 'model.n_layer'? "
    assert did_you_mean("zzzz", ["gpt2", "gpt1"]) == ""


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
    ],
)
def test_invalid_values_raise_value_error_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        GPTCustomConfig(**fields)


@pytest.mark.parametrize("activation", ["gelu_new", "gelu"])
def test_config_round_trips_through_save_pretrained(tmp_path, tiny_config, activation):
    tiny_config.activation_function = activation
    tiny_config.save_pretrained(tmp_path)
    loaded = GPTCustomConfig.from_pretrained(tmp_path)
    assert loaded.to_dict() == tiny_config.to_dict()
    assert loaded.model_type == "gpt_custom"
