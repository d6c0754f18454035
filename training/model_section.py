"""The training config's `model:` section: GPTCustomConfig's keyword arguments, a preset expanded, the vocabulary and
bos/eos taken from the tokenizer. Checked by the rules GPTCustomConfig applies (architecture.py) without importing
transformers or torch, so a mistake in a YAML is named at once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_gpt_custom.errors import UserError, did_you_mean

if TYPE_CHECKING:
    from hf_gpt_custom.training.config import TrainConfig


def check_model_section(config: TrainConfig) -> None:
    """Check the `model:` keys and values by the rules GPTCustomConfig applies (architecture.py), without importing
    transformers: a mistake is named in a fraction of a second, not after ~5 s of imports."""
    from hf_gpt_custom.architecture import GENERIC_NAMES, PRESETS, check_architecture, fields_without_effect
    from hf_gpt_custom.training.config_checks import note_without_effect

    preset, model = split_preset(config.model)
    defaults = architecture_defaults()
    for key in model:
        if key in GENERIC_NAMES:
            raise UserError(f"model.{key} is transformers' generic name of model.{GENERIC_NAMES[key]}; the model "
                            f"section takes the field: write {GENERIC_NAMES[key]}: {model[key]}")
        if key not in defaults:
            hint = did_you_mean(key, defaults, prefix="model.")
            raise UserError(f"unknown model key 'model.{key}'; {hint}known: {', '.join(sorted(defaults))}")
    if preset is not None and preset not in PRESETS:
        raise UserError(f"model.preset: unknown value {preset!r}; {did_you_mean(str(preset), PRESETS)}choose from "
                        f"{', '.join(PRESETS)}")
    if config.init_from:
        return
    vocab_size = model.get("vocab_size") or config.tokenizer_vocab_size
    fields = {**defaults, **model_config_kwargs(config, vocab_size=vocab_size, eos_token_id=0)}
    check_architecture(fields)
    for key, why in fields_without_effect(fields).items():
        if key in model and model[key] != defaults[key]:
            note_without_effect(f"model.{key}", model[key], why)
    if fields["n_positions"] < config.block_size:
        raise UserError(
            f"block_size={config.block_size} exceeds model.n_positions={fields['n_positions']}; lower block_size or "
            f"raise model.n_positions"
        )


def architecture_defaults() -> dict[str, Any]:
    """GPTCustomConfig's fields and their defaults (its annotated fields; generic PretrainedConfig ones excluded),
    read from the class's source: importing the class takes seconds (transformers, torch), and a training config
    should be checked at once. tests/training/test_config.py keeps this equal to `GPTCustomConfig()`."""
    import ast
    import importlib.util

    source = importlib.util.find_spec("hf_gpt_custom.configuration_gpt_custom").origin  # found, not imported
    tree = ast.parse(Path(source).read_text(encoding="utf-8"))
    config_class = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "GPTCustomConfig")
    return {item.target.id: ast.literal_eval(item.value) for item in config_class.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}


def split_preset(model_section: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The `model:` section as (preset name or None, the other GPTCustomConfig keyword arguments)."""
    rest = dict(model_section)
    return rest.pop("preset", None), rest


def requested_architecture(config: TrainConfig) -> dict[str, Any]:
    """The GPTCustomConfig fields the `model:` section sets, a preset expanded into its own fields."""
    from hf_gpt_custom.architecture import PRESETS

    preset, rest = split_preset(config.model)
    return {**PRESETS.get(preset, {}), **rest}


def model_config_kwargs(config: TrainConfig, vocab_size: int, eos_token_id: int) -> dict[str, Any]:
    """GPTCustomConfig's keyword arguments for the `model:` section: the preset's fields, then the vocabulary and
    bos/eos from the tokenizer (and, without a preset, n_positions = block_size), then the section's own keys."""
    from hf_gpt_custom.architecture import PRESETS

    preset, model = split_preset(config.model)
    from_tokenizer = {"vocab_size": vocab_size, "bos_token_id": eos_token_id, "eos_token_id": eos_token_id}
    if preset is None:
        from_tokenizer["n_positions"] = config.block_size
    return {**PRESETS.get(preset, {}), **from_tokenizer, **model}


def build_model_config(config: TrainConfig, vocab_size: int, eos_token_id: int):
    """GPTCustomConfig from the `model:` section (see model_config_kwargs)."""
    from hf_gpt_custom import GPTCustomConfig

    return GPTCustomConfig(**model_config_kwargs(config, vocab_size, eos_token_id))
