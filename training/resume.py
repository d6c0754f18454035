"""A resume continues the same run: settings that change what is trained must be the checkpoint's own.

Each checkpoint carries training_settings.json (every TrainConfig field marked `changes_training`) and the model's
config.json, both written into the folder before its manifest, so the checkpoint also loads as `init_from`. A
resume compares them with the new config before anything is loaded: a changed learning_rate would be overridden by
the restored scheduler, a changed batch_size would skip batches counted in the old size, a changed architecture
would fail deep inside the weight loading. Speed, logging, saving and evaluation settings may change freely. The
files a run reads are compared by contents (`contents.<role>`, fingerprints.py): the same data path with other text
would go on training on other token ids, a retrained tokenizer would give old weights new ids; and the same files at
another path (a moved data folder, repository or run folder) are the same input, not a change. A run that stopped
because it diverged is not continued into the same blow-up by rerunning its command.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.config import (
    BEHAVIOUR_BEFORE_THE_SETTING, TrainConfig, own_folder_fix, read_config_yaml, training_settings,
)
from hf_gpt_custom.training.config_checks import settings_without_effect
from hf_gpt_custom.training.model_section import architecture_defaults, model_config_kwargs

logger = logging.getLogger(__name__)

SETTINGS_NAME = "training_settings.json"
CONTENTS = "contents"  # the section of SETTINGS_NAME holding input_fingerprints: role -> sha256
INPUT_ROLES = ("dataset", "val_dataset", "tokenizer", "init_from")  # the settings whose files contents.<role> hashes
_RUN_CONFIG_NAME = "config.yaml"  # the run folder's resolved config: what checkpoints without SETTINGS_NAME recorded


def record_settings_in_checkpoints(accelerator, config: TrainConfig, model_class: type, model_config,
                                   save_into_checkpoint: Callable[[Path, Any], None], generation_config=None) -> None:
    """Make every `accelerator.save_state` also write training_settings.json, config.json as save_pretrained writes
    it (`architectures` naming the trained class: a fine-tuning run's head, not the body it started from, so a
    checkpoint as init_from keeps its head), a causal LM's generation_config.json (an init_from folder's eos list and
    penalties, which a run continued from the checkpoint keeps in its final/) and what the workload puts in a
    checkpoint (a fine-tuning run's tokenizer)."""
    settings = settings_to_record(config)  # once, after the workload prepared its data and tokenizer: what it read
    checkpoint_config = copy.deepcopy(model_config)
    checkpoint_config.architectures = [model_class.__name__]

    def write(models, weights, output_dir) -> None:
        if accelerator.is_main_process:
            Path(output_dir, SETTINGS_NAME).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
            checkpoint_config.to_json_file(str(Path(output_dir, "config.json")))
            if generation_config is not None:
                generation_config.save_pretrained(output_dir)
            save_into_checkpoint(Path(output_dir), checkpoint_config)

    accelerator.register_save_state_pre_hook(write)


def recorded_settings(checkpoint: Path) -> dict[str, Any] | None:
    """The training settings `checkpoint` (or a run's final/) was trained with, or None when it predates them and its
    run has no config."""
    settings_file = checkpoint / SETTINGS_NAME
    if settings_file.is_file():
        return _read_checkpoint_json(settings_file)
    run_folder = checkpoint.parent if checkpoint.name == "final" else checkpoint.parent.parent
    run_config = run_folder / _RUN_CONFIG_NAME
    if run_config.is_file():
        recorded = read_config_yaml(run_config.read_text(encoding="utf-8")) or {}
        return {key: value for key, value in recorded.items() if key in training_settings_keys()}
    return None


def settings_to_record(config: TrainConfig) -> dict[str, Any]:
    """training_settings(config), the objective it trains (`objective`) and, as its `contents` section, the
    fingerprints of the files the run reads."""
    from hf_gpt_custom.training.fingerprints import input_fingerprints

    return {**training_settings(config), OBJECTIVE: objective(config), CONTENTS: input_fingerprints(config)}


OBJECTIVE = "objective"
# The loss a run optimises, with the version of its definition: a resume by a version that redefined it trained the
# steps after the checkpoint on another objective than those before, in silence (the upgrade hunt: GPT-1's auxiliary
# LM loss became each row's mean over its tokens, pooled over the batch's tokens before, and a fine-tune begun before
# resumed after). Give a definition that changes what is optimised a new version.
_LM_LOSS_PER_ROW = "lm loss as each row's mean over its tokens, averaged over the rows (2)"


def objective(config: TrainConfig) -> str:
    """The definition only (the settings in it, lm_loss_weight, are compared as settings)."""
    if getattr(config, "task_section", None) is None:
        return "causal language modelling: cross-entropy averaged over the predicted tokens (1)"
    return f"task cross-entropy (1) + lm_loss_weight x {_LM_LOSS_PER_ROW}"


def training_settings_keys() -> set[str]:
    return set(training_settings(TrainConfig(dataset="-")))


def changed_settings(config: TrainConfig, checkpoint: Path) -> dict[str, tuple[Any, Any]] | None:
    """Every setting `config` trains with differently from `checkpoint`: key -> (recorded, now); None when the
    checkpoint records nothing to compare with.

    The `model:` section is compared resolved: the architecture this config would build against the checkpoint's own
    config.json, so a key the first run left at its default (model.activation_function=relu) counts as a change.
    """
    recorded = recorded_settings(checkpoint)
    if recorded is None:
        return None
    if CONTENTS not in recorded:  # written before contents were recorded ({} when the run reads no local files)
        note_unchecked_contents(str(checkpoint))
    current = _flatten(json.loads(json.dumps(settings_to_record(config))))  # tuples -> lists, as recorded
    recorded = {**BEHAVIOUR_BEFORE_THE_SETTING, **_flatten(recorded)}
    # A key the checkpoint lacks was not recorded by the code that wrote it (contents.* came late): unknown, not a
    # change, or every run folder trained before would be refused. BEHAVIOUR_BEFORE_THE_SETTING's keys are known
    # instead: that code trained one way only. A contents.* key missing now is a file not there yet (the run's own
    # tokenizer, trained again from the data and settings compared here).
    # A setting the run never reads (val_fraction beside a val_dataset) may change: the settings that decide whether
    # it is read are compared themselves.
    lm_loss_counts = (recorded.get("task.lm_loss_weight") or 0) > 0 and current.get("task.lm_loss_weight")
    if OBJECTIVE not in recorded and lm_loss_counts:  # a checkpoint written before the record: which one is unknown
        note_unrecorded_objective(str(checkpoint))
    without_effect = settings_without_effect(config)
    changed = {key: (recorded[key], current.get(key)) for key in sorted(current.keys() | recorded.keys())
               if key in recorded and current.get(key) != recorded[key] and key not in without_effect
               and (key in current or not key.startswith(f"{CONTENTS}."))}
    for role in moved_inputs(recorded, current):
        note_moved_input(role, recorded[role], current[role])
        del changed[role]
    architecture = _architecture_changes(config, checkpoint)
    if architecture is not None:
        # Its fields compared resolved, not as written: a field given at its default once and left out after
        # (model.activation_function=gelu_new) builds the same model, but was refused as "'gelu_new' -> None".
        # (vocab_size and the bos/eos ids come from the tokenizer when the section leaves them out: compared there
        # against the checkpoint's own, so compared as written here)
        stand_ins = {"model.vocab_size", "model.bos_token_id", "model.eos_token_id"}
        resolved = ({f"model.{key}" for key in architecture_defaults()} | {"model.preset"}) - stand_ins
        changed = {key: values for key, values in changed.items() if key not in resolved}
        changed.update(architecture)
    return dict(sorted(changed.items()))


def moved_inputs(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The roles (dataset, tokenizer, ...) whose setting names another local path now, where the files hold what
    `contents.<role>` recorded: the same input moved (load_train_config stores paths absolute, so a moved data folder,
    repository or run folder changes them). Both dicts are flat, with `contents.<role>` keys. A Hub name has no
    contents fingerprint, so a changed one still counts."""
    def same_files(role: str) -> bool:
        contents = f"{CONTENTS}.{role}"
        return recorded.get(contents) is not None and recorded.get(contents) == current.get(contents)

    return [role for role in INPUT_ROLES if role in recorded and recorded[role] != current.get(role)
            and isinstance(current.get(role), str) and Path(current[role]).exists() and same_files(role)]


@functools.lru_cache(maxsize=None)  # said once per process: `train` compares before its work and again inside it
def note_unchecked_contents(checkpoint: str) -> None:
    logger.warning("%s records the paths of its data and tokenizer but not their contents (an older checkpoint, or "
                   "final/ read through config.yaml): whether those files changed since cannot be checked; if they "
                   "did, start over (--start_over)", checkpoint)


@functools.lru_cache(maxsize=None)
def note_unrecorded_objective(checkpoint: str) -> None:
    logger.warning("%s was written before checkpoints recorded their objective: if a version before 2026-11-26 began "
                   "this fine-tune, its steps so far pooled the auxiliary LM loss over the batch's tokens, and the "
                   "steps from here take each row's mean (GPT-1's λ·L1 as documented); to keep one objective, finish "
                   "it with the version that began it or start it over (--start_over)", checkpoint)


@functools.lru_cache(maxsize=None)
def note_moved_input(role: str, before: str, now: str) -> None:
    logger.warning("%s moved from %s to %s: the files hold the same contents, so the run continues with them",
                   role, before, now)


def _read_checkpoint_json(path: Path) -> dict[str, Any]:
    """A checkpoint's (or final/'s) JSON file; a damaged one (its size intact, so the quick manifest check passed) is
    a UserError naming it, not a JSONDecodeError."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise UserError(f"{path} is damaged ({err}); resume from an earlier checkpoint (resume_from_checkpoint="
                        f"<its folder>), or move {path.parent} away") from err


def _architecture_changes(config: TrainConfig, checkpoint: Path) -> dict[str, tuple[Any, Any]] | None:
    """model.<field>: (checkpoint's, this config's) for each GPTCustomConfig field whose resolved value differs;
    None where the checkpoint has no config.json of this model to compare with (or init_from gives the architecture,
    compared as a setting). Compared as plain dicts by the config's own rules (architecture.py), so the check runs
    before transformers loads."""
    from hf_gpt_custom.architecture import check_architecture, fields_without_effect

    config_file = checkpoint / "config.json"
    if config.init_from or not config_file.is_file():
        return None
    saved_json = _read_checkpoint_json(config_file)
    if saved_json.get("model_type") != "gpt_custom":
        return None
    defaults = architecture_defaults()
    saved = {**defaults, **{key: value for key, value in saved_json.items() if key in defaults}}
    current = {**defaults, **model_config_kwargs(config, vocab_size=saved["vocab_size"],
                                                 eos_token_id=saved["eos_token_id"])}
    try:
        for fields in (saved, current):
            fields.update(check_architecture(fields))  # head_dim and n_kv_head resolved, as construction does
    except ValueError as err:  # the config validated already; a stand-in value should not fail
        raise UserError(f"cannot compare the model section with {checkpoint}: {err}") from err
    unread = fields_without_effect(saved).keys() & fields_without_effect(current).keys()  # by either architecture
    return {f"model.{key}": (saved[key], current[key]) for key in defaults
            if saved[key] != current[key] and key not in unread}


def check_run_folder(config: TrainConfig, start_over: bool = False) -> None:
    """What `train` checks of its run folder before any work — it can be created and written; its checkpoints were
    trained with these settings, or `start_over` — without hashing checkpoint files and before torch loads (~0.2 s),
    so the console script names a clash at once; train() checks it all again, verifying the checkpoint it resumes."""
    from hf_gpt_custom.training.run_lock import check_folder_writable

    run_dir = config.run_dir.absolute()
    nearest = next(folder for folder in (run_dir, *run_dir.parents) if folder.exists())  # where it will be created
    if not nearest.is_dir():
        raise UserError(f"the run folder {run_dir} cannot be created: {nearest} is a file; choose another out_dir "
                        f"(or run_name)")
    check_folder_writable(nearest, "the run folder" if nearest == run_dir else "the run folder's parent folder")
    check_folder_writable(run_dir / "checkpoints", "the checkpoints folder")
    if config.mixed_precision == "auto":
        # Checkpoints record what `auto` resolved to on the machine that trained them (train.py resolves it before
        # it records), so compare that: the same command on the same machine continues. This imports torch.
        from hf_gpt_custom.training.devices import resolve_mixed_precision, training_device_type

        config = dataclasses.replace(
            config, mixed_precision=resolve_mixed_precision("auto", training_device_type(config.cpu)))
    find_resume_point(config, run_dir, start_over, verify=False)


def _shown(changed: dict[str, tuple[Any, Any]]) -> str:
    def value(key: str, value: Any) -> str:
        is_sha256 = key.startswith(f"{CONTENTS}.") and isinstance(value, str)
        return f"sha256 {value[:12]}..." if is_sha256 else repr(value)

    return ", ".join(f"{key}: {value(key, before)} -> {value(key, now)}" for key, (before, now) in changed.items())


def _redefined_objective_hint(changed: dict[str, tuple[Any, Any]]) -> str:
    if OBJECTIVE not in changed or changed[OBJECTIVE][0] is None or changed[OBJECTIVE][1] is None:
        return ""
    return ("; the objective is the version of the loss this code trains: the version of hf-gpt-custom that wrote the "
            "checkpoint defined it otherwise, so finish the run with that version")


def _restore_files_hint(changed: dict[str, tuple[Any, Any]]) -> str:
    """'; the files of dataset changed ...' when a contents.* fingerprint differs, else ''."""
    roles = sorted({key.removeprefix(f"{CONTENTS}.").removesuffix("_vocabulary") for key in changed
                    if key.startswith(f"{CONTENTS}.")})  # tokenizer_vocabulary: the tokenizer's vocabulary files
    if not roles:
        return ""
    return (f"; the files of {', '.join(roles)} hold other contents than it was trained on: put back the files it "
            f"was trained with")


def _from_its_weights(config: TrainConfig, changed: dict[str, Any], weights: Path) -> str:
    """The way that keeps the trained weights, as a clause ending in ", ": a new run init_from them in a folder of its
    own (out_dir, where the config sets one: run_name does not move it). None for another architecture, which the
    weights cannot load into."""
    if any(key.startswith("model.") for key in changed):
        return ""
    folder = "out_dir=<new folder>" if config.out_dir else "run_name=<new name>"
    return f"start a new run from its weights (fresh optimizer and schedule) with init_from={weights} {folder}, "


def check_resume_settings(config: TrainConfig, checkpoint: Path) -> None:
    """Raise a UserError naming every setting that differs from the one `checkpoint` was trained with."""
    changed = changed_settings(config, checkpoint)
    if changed is None:
        logger.warning("%s records no training settings (an older checkpoint outside its run folder): a changed "
                       "learning_rate, batch_size or architecture cannot be detected; resume with the same config",
                       checkpoint)
        return
    if not changed:
        return
    raise UserError(
        f"cannot resume from {checkpoint}: these settings differ from the ones it was trained with ({_shown(changed)})"
        f"{_restore_files_hint(changed)}{_redefined_objective_hint(changed)}; "
        f"a resumed run continues the same optimizer, schedule and data order, so they must stay as they were. Resume "
        f"with the original values, {_from_its_weights(config, changed, checkpoint)}or start a new run"
    )


def find_resume_point(config: TrainConfig, run_dir: Path, start_over: bool = False,
                      verify: bool = True) -> Path | None:
    """The checkpoint this call continues from, or None to train from step 0; checked before any work is done.

    `resume_from_checkpoint` names one ("latest" or a folder). Otherwise a run folder that already holds checkpoints
    is continued from its latest one when its settings are this config's, and refused, naming each difference, when
    they are not. `start_over` trains from step 0 whatever the folder holds (its checkpoints are set aside, not
    deleted). A folder with a final/ model but no checkpoint left is compared through its config.yaml.
    `verify=False` leaves the checkpoint's files unhashed: see check_run_folder.
    """
    from hf_gpt_custom.training.checkpoint import find_checkpoint, list_checkpoints

    checkpoints_dir = run_dir / "checkpoints"
    if start_over:
        if config.resume_from_checkpoint:
            raise UserError(f"start_over and resume_from_checkpoint={config.resume_from_checkpoint} contradict each "
                            f"other; drop one of them")
        return None
    if config.resume_from_checkpoint:
        folder = find_checkpoint(checkpoints_dir, config.resume_from_checkpoint, verify=verify)
        check_resume_settings(config, folder)
        return folder
    folder = find_checkpoint(checkpoints_dir, "latest", verify=verify) if list_checkpoints(checkpoints_dir) else None
    if folder is None and not (run_dir / "final").is_dir():
        _refuse_to_repeat_a_divergence_from_step_0(config, run_dir)
        return None  # nothing trained here yet
    changed = changed_settings(config, folder if folder is not None else run_dir / "final")
    if changed:
        what = f"checkpoints up to {folder.name}" if folder is not None else "a trained model in final/"
        weights = folder if folder is not None else run_dir / "final"
        raise UserError(
            f"the run folder {run_dir} holds {what} trained with other settings ({_shown(changed)})"
            f"{_restore_files_hint(changed)}{_redefined_objective_hint(changed)}; rerun with those settings to "
            f"continue that run, "
            f"{_from_its_weights(config, changed, weights)}{own_folder_fix(config)}, or pass --start_over to train "
            f"from step 0 here (the old checkpoints are moved aside, not deleted)"
        )
    if folder is None:
        # `run` refuses this too: the same command trained the whole run again from step 0, in silence
        raise UserError(
            f"the run folder {run_dir} holds a trained model in final/ but no checkpoint to continue from "
            f"(deleted since: a run always keeps its last), so this command would train it again from "
            f"step 0; the model in final/ is this config's. To train it again, pass --start_over (final/ is moved "
            f"aside, not deleted), or {own_folder_fix(config)}"
        )
    _refuse_to_continue_into_a_divergence(run_dir, folder)
    return folder


def _refuse_to_repeat_a_divergence_from_step_0(config: TrainConfig, run_dir: Path) -> None:
    """Raise a UserError when the run in `run_dir` diverged before its first checkpoint and `config` trains with the
    settings it ran with (its config.yaml): step 0 with the same seed trains into the same blow-up, and a rerun did
    so in silence, each time. Other settings (the advice followed) are a new attempt; --start_over runs it anyway."""
    from hf_gpt_custom.training.run_log import RUN_LOG_NAME, last_run_log_record

    record = last_run_log_record(run_dir / RUN_LOG_NAME)
    if record is None or record.get("kind") != "error" or not (run_dir / _RUN_CONFIG_NAME).is_file():
        return
    recorded = _flatten(recorded_settings(run_dir / "final") or {})  # read from the run folder's config.yaml
    current = _flatten(json.loads(json.dumps(settings_to_record(config))))  # tuples -> lists, as recorded
    without_effect = settings_without_effect(config)
    if any(recorded[key] != value for key, value in current.items() if key in recorded and key not in without_effect):
        return
    advice = record.get("advice") or "lower learning_rate or raise warmup_steps and start again"
    raise UserError(
        f"the run in {run_dir} stopped at step {record['step']}, before its first checkpoint: "
        f"{record.get('problem', 'it diverged')}; the same settings from step 0 train into the same blow-up: {advice}; "
        f"or pass --start_over to run it again anyway"
    )


def _refuse_to_continue_into_a_divergence(run_dir: Path, folder: Path) -> None:
    """Raise a UserError when the run stopped because it diverged after `folder`: the same settings from the same
    checkpoint train the same steps into the same blow-up (a resume is exact), so a rerun of the command would only
    repeat it. The error repeats the diagnosis and its advice; resume_from_checkpoint retries on purpose."""
    from hf_gpt_custom.training.checkpoint import checkpoint_step

    from hf_gpt_custom.training.run_log import RUN_LOG_NAME, last_run_log_record

    record = last_run_log_record(run_dir / RUN_LOG_NAME)
    if record is None or record.get("kind") != "error" or record.get("step", 0) <= checkpoint_step(folder):
        return
    advice = record.get("advice") or "lower learning_rate or raise warmup_steps and start again"
    raise UserError(
        f"the run in {run_dir} stopped at step {record['step']}: {record.get('problem', 'it diverged')}; continuing "
        f"it from {folder.name} with the same settings trains into the same blow-up: {advice}; or pass --start_over "
        f"to train from step 0 here (the old checkpoints are moved aside, not deleted), or resume_from_checkpoint="
        f"latest to retry it anyway"
    )


def _flatten(settings: dict[str, Any]) -> dict[str, Any]:
    """Sections (`model:`, fine-tuning's `task:`) as <section>.<key> entries, so a change is named key by key."""
    flat = {key: value for key, value in settings.items() if not isinstance(value, dict) and key != "model"}
    for section, entries in settings.items():
        if isinstance(entries, dict) or section == "model":
            flat.update({f"{section}.{key}": value for key, value in (entries or {}).items()})
    return flat
