"""The ablation benchmark's bookkeeping: which block each variant trains, and the command that trains it.

The benchmark itself trains for minutes and is run by hand; these check the parts that decide what it compares.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.bench_ablation import (
    VARIANTS, base_block, is_implemented, render_markdown, swiglu_inner_for_equal_parameters, train_command,
    variant_overrides,
)

BLOCK = {"n_layer": 2, "n_head": 4, "n_embd": 32, "vocab_size": 97, "n_positions": 64}


def test_swiglu_width_matches_the_standard_mlp_parameter_count_by_hand():
    # Standard MLP per layer: c_fc d x 4d + 4d bias, c_proj 4d x d + d bias. SwiGLU with inner h: c_fc and c_gate
    # d x h + h bias each, c_proj h x d + d. The nearest h to equal counts, searched here by plain arithmetic.
    d = 128
    standard = 2 * d * 4 * d + 4 * d + d
    best = min(range(1, 4 * d), key=lambda h: abs(3 * d * h + 2 * h + d - standard))
    assert best == 341
    assert swiglu_inner_for_equal_parameters({**BLOCK, "n_embd": d}) == best


def test_every_variant_changes_one_option_of_the_gpt2_block():
    base = base_block(BLOCK)
    for name in VARIANTS:
        changed = {key for key, value in variant_overrides(name, base).items() if base.get(key) != value}
        expected = {"default": set(), "swiglu": {"mlp_type", "n_inner"}, "gqa": {"n_kv_head"},
                    "no_bias": {"attention_bias", "mlp_bias"}}.get(name, set(VARIANTS[name]))
        assert changed == expected, name
    assert variant_overrides("gqa", base)["n_kv_head"] == 2


def test_base_block_puts_the_main_jobs_block_options_back_to_gpt2():
    from hf_gpt_custom import GPTCustomConfig

    main_job = {**BLOCK, "position_embedding_type": "rope", "mlp_type": "swiglu", "n_inner": 88, "norm_type": "rmsnorm"}
    base = base_block(main_job)
    assert (base["position_embedding_type"], base["mlp_type"], base["n_inner"], base["norm_type"]) == (
        "learned", "standard", None, "layernorm")
    assert {key: base[key] for key in BLOCK} == BLOCK
    defaults = GPTCustomConfig()
    assert all(base[key] == getattr(defaults, key) for key in ("position_embedding_type", "mlp_type", "norm_type"))


def test_an_option_the_model_ignores_is_reported_as_not_implemented():
    base = base_block(BLOCK)
    # GPTCustomConfig, like every PretrainedConfig, stores an unknown keyword without complaint: the model is unchanged
    assert not is_implemented({**base, "some_future_option": "on"}, base)
    # n_inner only sizes the option (SwiGLU's width): an ignored option with a new width is still not implemented
    assert not is_implemented({**base, "some_future_option": "on", "n_inner": 88}, base)
    assert is_implemented({**base, "activation_function": "relu"}, base)  # same tensors, other logits
    assert is_implemented(variant_overrides("rope", base), base)
    assert is_implemented(variant_overrides("post_ln", base), base)
    assert is_implemented(base, base)


def test_train_command_is_the_real_train_command_with_the_variants_model_keys(tmp_path):
    args = argparse.Namespace(max_steps=120, threads=None)
    model = {**BLOCK, "n_kv_head": None, "attention_bias": False}
    command = train_command(Path("cfg.yaml"), tmp_path / "run", tmp_path / "tok", model, args)
    assert command[1:5] == ["-m", "hf_gpt_custom.cli", "train", "cfg.yaml"]
    assert f"tokenizer={tmp_path / 'tok'}" in command and "max_steps=120" in command and "eval_interval=20" in command
    assert "model.n_kv_head=null" in command and "model.attention_bias=False" in command
    from hf_gpt_custom.training.config import load_train_config

    smoke = Path(__file__).resolve().parents[2] / "training" / "configs" / "smoke.yaml"
    overrides = [item for item in command[5:] if item.startswith("model.")]
    assert load_train_config(smoke, overrides).model["attention_bias"] is False  # the CLI parses them back


def test_markdown_row_shows_the_difference_to_the_default():
    row = {"n_params": 1000, "tokens_per_cpu_s": 200.0, "tokens_per_s": 150.0, "tokens_per_s_in_run": 140.0,
           "load_average_at_start": [1.0, 1.0, 1.0], "load_average_at_end": [2.0, 1.0, 1.0]}
    result = {
        "machine": {"cpu": "CPU", "cpu_family": 25, "cpu_model": 1, "isa_flags": ["avx2"], "threads": 1,
                    "logical_cpus": 2, "time_utc": "2026-01-01 00:00:00", "load_average": [1.0, 1.0, 1.0]},
        "config": "training/configs/shakespeare.yaml", "tokens_per_run": 4096, "steps": 2, "jobs": 1,
        "rows": {"default": {**row, "val_bits_per_byte": 2.5}, "rope": {**row, "val_bits_per_byte": 2.4,
                                                                          "tokens_per_cpu_s": 100.0}},
        "not_implemented": ["gqa"], "failed": [],
    }
    text = render_markdown(result)
    rope_line = next(line for line in text.splitlines() if line.startswith("| RoPE"))
    assert "| 2.400 | -0.100 |" in rope_line and "| 0.50x |" in rope_line
    assert "GQA" in text.split("Not measured")[1]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_variant_builds_on_the_main_jobs_block(name):
    from hf_gpt_custom import GPTCustomConfig

    GPTCustomConfig(**variant_overrides(name, base_block(BLOCK)))
