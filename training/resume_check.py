"""A resume continues the same run: settings that change what is trained must be the checkpoint's own.

Each checkpoint carries training_settings.json (every TrainConfig field marked `changes_training`) and the model's
config.json, both written into the folder before its manifest, so the checkpoint also loads as `init_from`. A
resume compares them with the new config before anything is loaded: a changed learning_rate would be overridden by
the restored scheduler, a changed batch_size would skip batches counted in the old size, a changed architecture
would fail deep inside the weight loading. Speed, logging, saving and evaluation settings may change freely.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import yaml

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.config import TrainConfig, training_settings

logger = logging.getLogger(__name__)

SETTINGS_NAME = "training_settings.json"
_RUN_CONFIG_NAME = "config.yaml"  # the run folder's resolved config: what checkpoints without SETTINGS_NAME recorded


def record_settings_in_checkpoints(accelerator, config: TrainConfig, model_config) -> None:
    """Make every `accelerator.save_state` also write training_settings.json and the model's config.json."""
    settings = training_settings(config)

    def write(models, weights, output_dir) -> None:
        if accelerator.is_main_process:
            Path(output_dir, SETTINGS_NAME).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
            model_config.to_json_file(str(Path(output_dir, "config.json")))

    accelerator.register_save_state_pre_hook(write)


def recorded_settings(checkpoint: Path) -> dict[str, Any] | None:
    """The training settings `checkpoint` was trained with, or None when it predates them and its run has no config."""
    settings_file = checkpoint / SETTINGS_NAME
    if settings_file.is_file():
        return json.loads(settings_file.read_text(encoding="utf-8"))
    run_config = checkpoint.parent.parent / _RUN_CONFIG_NAME
    if run_config.is_file():
        recorded = yaml.safe_load(run_config.read_text(encoding="utf-8")) or {}
        return {key: value for key, value in recorded.items() if key in training_settings_keys()}
    return None


def training_settings_keys() -> set[str]:
    return set(training_settings(TrainConfig(dataset="-")))


def check_resume_settings(config: TrainConfig, checkpoint: Path) -> None:
    """Raise a UserError naming every setting that differs from the one `checkpoint` was trained with."""
    recorded = recorded_settings(checkpoint)
    if recorded is None:
        logger.warning("%s records no training settings (an older checkpoint outside its run folder): a changed "
                       "learning_rate, batch_size or architecture cannot be detected; resume with the same config",
                       checkpoint)
        return
    current = _flatten(json.loads(json.dumps(training_settings(config))))  # tuples -> lists, as recorded
    recorded = _flatten(recorded)
    changed = sorted(key for key in current.keys() | recorded.keys()
                     if key in recorded and current.get(key) != recorded[key])
    if not changed:
        return
    shown = ", ".join(f"{key}: {recorded[key]!r} -> {current.get(key)!r}" for key in changed)
    raise UserError(
        f"cannot resume from {checkpoint}: these settings differ from the ones it was trained with ({shown}); a "
        f"resumed run continues the same optimizer, schedule and data order, so they must stay as they were. Resume "
        f"with the original values, or start a new run from its weights (fresh optimizer and schedule) with "
        f"init_from={checkpoint} run_name=<new name>"
    )


def _flatten(settings: dict[str, Any]) -> dict[str, Any]:
    """Sections (`model:`, fine-tuning's `task:`) as <section>.<key> entries, so a change is named key by key."""
    flat = {key: value for key, value in settings.items() if not isinstance(value, dict) and key != "model"}
    for section, entries in settings.items():
        if isinstance(entries, dict) or section == "model":
            flat.update({f"{section}.{key}": value for key, value in (entries or {}).items()})
    return flat
