"""pipeline_state.json: what `run` records of a run folder's settings and finished stages, and whether each finished
stage still stands on a rerun (its output still there, made from the final/, benchmark files and reports that are there
now). run.py orders the stages; this module decides which of them a rerun skips, which settings it accepts as changed
without retraining, and writes those into the run's records.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import UserError

STATE_FILE = "pipeline_state.json"
# Settings that change no weight: changing them keeps the trained model and redoes only what shows them.
# - benchmarks: evaluation and export run again;
_EVAL_ONLY_KEYS = {"benchmark_tasks", "benchmark_shots", "benchmark_limit"}
# - figures of the summary and the card (final_val_loss over eval_batches, mfu over peak_flops): train's finishing
#   step runs again (a complete run only evaluates and writes its summary again), then export;
_REPORT_KEYS = {"eval_batches", "peak_flops"}
# - the run's name, shown by the card and the loss curve's title: written down, then export.
_NAME_KEYS = {"run_name"}
# The benchmark settings and the name are also written into config.yaml and the summary in place (no training step
# needed): config.yaml given back to `run` would otherwise evaluate the old benchmarks again. So is the new path of a
# moved input, and out_dir with them (a copied folder's config.yaml named the original folder).
_WRITTEN_DOWN_KEYS = _EVAL_ONLY_KEYS | _NAME_KEYS
_NO_WEIGHT_KEYS = _EVAL_ONLY_KEYS | _REPORT_KEYS | _NAME_KEYS  # every setting above: accepted, then export again


def checkpoint_identities(run_dir: Path) -> list[str]:
    """sha256 of the manifest of each complete checkpoint in the run folder (a manifest names every file's sha256)."""
    from .manifest import MANIFEST_NAME, sha256_file
    from hf_gpt_custom.training.checkpoint import list_checkpoints

    manifests = (folder / MANIFEST_NAME for folder in list_checkpoints(run_dir / "checkpoints"))
    return sorted(sha256_file(manifest) for manifest in manifests if manifest.is_file())


def still_starting_over(state: dict[str, Any], run_dir: Path) -> bool:
    """True while a --start_over (this call's, or an interrupted one's) has not trained to its first checkpoint: the
    tokenizer may be replaced and train() sets the old checkpoints aside. A checkpoint that was not there when it
    began is the new run's own, which train() continues from. (By content, not time: a copied folder's old
    checkpoints have new times.)"""
    replaced = state.get("starting_over_from")
    return replaced is not None and set(checkpoint_identities(run_dir)) <= set(replaced)


def stored_path(output: Path | None, run_dir: Path) -> str | None:
    """An output inside the run folder relative to it (a copied or moved run folder then points at its own files,
    not at the original's); one outside it (a tokenizer folder of the user's) as given."""
    if output is None:
        return None
    try:
        return Path(output).resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        return str(output)


def _output_still_there(record: dict[str, Any], run_dir: Path) -> bool:
    """A finished stage counts while what it wrote is there: `train --start_over` in this folder moves final/,
    eval/ and export/ aside (checkpoint.set_aside_replaced_outputs), and those stages then run again. An export counts
    only while it is whole: a rerun after files were deleted from it said "Hub-ready" of a folder that no longer
    loaded (found by a hunt)."""
    if record.get("output") is None:
        return True
    output = run_dir / record["output"]  # (an absolute path stays one)
    return _export_is_whole(output) if record["output"] == "export" else output.exists()


def _export_is_whole(folder: Path) -> bool:
    """Every file the export's manifest lists there with its size (no hashing: a rerun stays instant; push and
    from_pretrained check the sha256), and the documentation it wrote (the card, the results) there too, edited or
    not."""
    from .manifest import MANIFEST_NAME, verify_manifest

    if not folder.is_dir() or verify_manifest(folder, quick=True) is not None:
        return False
    written = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8")).get("documentation") or {}
    return all((folder / name).is_file() for name in written)


def final_saved_over_since_training(run_dir: Path) -> bool:
    """Whether final/ holds other weights than training_summary.json records the run's training wrote there (a
    merged adapter saved over them, the crossfeature hunt): export refuses them, a rerun of train keeps them aside.
    False for a summary written before it recorded them."""
    from .manifest import weights_fingerprint

    try:
        recorded = json.loads((run_dir / "training_summary.json").read_text(encoding="utf-8")).get(
            "final_weights_sha256")
    except (OSError, ValueError, AttributeError):
        return False
    final_dir = run_dir / "final"
    return recorded is not None and final_dir.is_dir() and weights_fingerprint(final_dir) not in (recorded, None)


def model_kept(record: dict[str, Any], run_dir: Path) -> bool:
    """True while what a finished stage wrote is there and was made from the final/ that is there now."""
    return _output_still_there(record, run_dir) and _made_from_this_model(record, run_dir)


def made_by_older_code(stage: str, run_dir: Path) -> str | None:
    """Why what a finished stage wrote came from other code than this package's, None when it did not (or for a
    stage that leaves no such trace): an export holds remote code files that differ from this package's (whoever
    loads it with trust_remote_code would run the old version's model) or its manifest another export_code_sha256
    (the old card stayed after an upgrade that fixed it), an evaluation recorded another scoring_code_sha256 (the
    old version's figures would stay in the card after an upgrade that fixed them)."""
    if stage == "export" and (run_dir / "export").is_dir():
        package = Path(__file__).parent
        older = sorted(path.name for path in (run_dir / "export").glob("*.py")
                       if (package / path.name).is_file() and path.read_bytes() != (package / path.name).read_bytes())
        if older:
            return f"export/ holds an older version's code ({', '.join(older)})"
        from .manifest import MANIFEST_NAME
        from .versions import export_code_sha256

        try:
            recorded = json.loads((run_dir / "export" / MANIFEST_NAME).read_text(encoding="utf-8"))
            recorded = recorded.get("export_code_sha256")
        except (OSError, ValueError, AttributeError):
            return None  # no readable manifest: _export_is_whole sees the export is not whole
        if recorded != export_code_sha256():  # None: an export older than the record
            return "export/ was written by another version of the export and model card code"
        return None
    results = run_dir / "eval" / "results.json"
    if stage == "eval" and results.is_file():
        from .versions import scoring_code_sha256

        try:
            recorded = json.loads(results.read_text(encoding="utf-8")).get("scoring_code_sha256")
        except (ValueError, AttributeError):
            return None  # not readable as results: reports_unchanged sees the file is not the one eval wrote
        if recorded is None:  # every evaluation records it since it was added: these are older (the upgrade hunt)
            return "eval/results.json was scored by a version that did not record its evaluation code (an older one)"
        if recorded != scoring_code_sha256():
            return "eval/results.json was scored by another version of the evaluation or model code"
    return None


def reports_unchanged(record: dict[str, Any], run_dir: Path, benchmarks: str | None) -> bool:
    """True while the benchmark files a stage scored and the reports it read and wrote are as they were then."""
    return (_scored_on_these_benchmarks(record, benchmarks) and _read_these_reports(record, run_dir)
            and _wrote_what_is_there(record, run_dir))


def stage_record(stage: str, run_dir: Path, output: Path | None, status: str, wall_time_s: float,
                 benchmarks: str | None) -> dict[str, Any]:
    """What pipeline_state.json keeps of a finished stage: its output, and the identities of what it was made from
    (final/, the benchmark files, the reports it read or wrote), which the next rerun compares."""
    record = {
        "status": status,
        "output": stored_path(output, run_dir),
        "wall_time_s": round(wall_time_s, 2),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if stage in _STAGES_OF_THE_MODEL:  # final/ as train wrote it, or as eval and export read it
        record["model"] = _model_identity(run_dir)
    if stage in _STAGES_OF_THE_BENCHMARKS:
        record["benchmarks"] = benchmarks
    if stage in _REPORTS_READ:
        record["reports"] = _report_identities(run_dir, _REPORTS_READ[stage])
    if stage in _REPORTS_WRITTEN:  # a skipped eval wrote "nothing": results a hand `eval` puts there make it run again
        record["wrote"] = _report_identities(run_dir, _REPORTS_WRITTEN[stage])
    return record


# Stages tied to final/: train wrote it (a final/ another `train` here replaced since is not this run's); eval and
# export describe the model that was there when they ran. Eval scored the benchmark files, export's card shows that.
_STAGES_OF_THE_MODEL = ("train", "eval", "export")
_STAGES_OF_THE_BENCHMARKS = ("eval", "export")


def _model_identity(run_dir: Path) -> str | None:
    """sha256 of final/'s manifest, which holds the sha256 of its weights, config and tokenizer files; None without."""
    from .manifest import MANIFEST_NAME, sha256_file

    manifest = run_dir / "final" / MANIFEST_NAME
    return sha256_file(manifest) if manifest.is_file() else None


def _made_from_this_model(record: dict[str, Any], run_dir: Path) -> bool:
    """False when final/ is not the model a stage recorded: the train stage's own output replaced by another `train`
    in this folder (trained with other settings: training runs again, by this config), or an eval or export made
    from an earlier final/ (their results would describe the old model). A record without "model" (the tokenizer
    stage, or one written before this check) is trusted."""
    made_from = record.get("model")
    return made_from is None or made_from == _model_identity(run_dir)


def benchmarks_identity(config) -> str | None:
    """sha256 of the benchmark task files and their data files as the eval stage reads them; None without tasks."""
    if not config.benchmark_tasks:
        return None
    from hf_gpt_custom.eval.task import tasks_fingerprint

    return tasks_fingerprint(list(config.benchmark_tasks))


def _scored_on_these_benchmarks(record: dict[str, Any], benchmarks: str | None) -> bool:
    """False when an eval (or the export whose card shows its results) read task or data files that have changed
    since: the scores would be of the old files. Other stages, and records from before this check, have none."""
    return "benchmarks" not in record or record["benchmarks"] == benchmarks


# The run folder's files a stage copies or quotes beside final/: the card shows the summary's figures, the results and
# the config. A `train` in this folder (another eval_batches, say) or an `eval` rewrites them, and the export made
# before would disagree with the run folder.
_REPORTS_READ = {"export": ("config.yaml", "training_summary.json", "eval/results.json")}


# The reports a stage writes that another command can rewrite or delete: a hand `eval --out <run>/eval` (another
# model, tasks or limit), or a hand `train` (another eval_batches), replaced what `run` made, and the card published
# it as this run's; a deleted results.json left the card without results. Such a stage runs again.
_REPORTS_WRITTEN = {"train": ("training_summary.json",), "eval": ("eval/results.json",)}


def _report_identities(run_dir: Path, names: tuple[str, ...]) -> dict[str, str | None]:
    """name -> sha256 of each of `names` in the run folder (None where absent)."""
    from .manifest import sha256_file

    return {name: sha256_file(run_dir / name) if (run_dir / name).is_file() else None for name in names}


def _read_these_reports(record: dict[str, Any], run_dir: Path) -> bool:
    """False when a report file the stage read has changed since (see _REPORTS_READ); records without them, trusted."""
    reports = record.get("reports")
    return reports is None or reports == _report_identities(run_dir, tuple(reports))


def _wrote_what_is_there(record: dict[str, Any], run_dir: Path) -> bool:
    """False when a report the stage wrote (_REPORTS_WRITTEN) was changed or deleted since; records without, trusted."""
    wrote = record.get("wrote")
    return wrote is None or wrote == _report_identities(run_dir, tuple(wrote))


def fingerprint(config) -> dict[str, Any]:
    """The settings a resumed run must share with the one that started — what is trained, and what is evaluated —
    and the contents of the files it reads (`contents.<role>`: data, tokenizer, init_from, as checkpoints record
    them): new text at the same path is another run, not this one. A role with no files yet (the run's own
    tokenizer before its stage) is left out, and a key one side lacks is not compared (`load_state`)."""
    from hf_gpt_custom.training.config import settings_that_do_not_change_training
    from hf_gpt_custom.training.fingerprints import input_fingerprints

    ignored = settings_that_do_not_change_training(type(config)) - _NO_WEIGHT_KEYS
    fingerprint = {key: value for key, value in config.to_dict().items() if key not in ignored}
    fingerprint.update({f"{_CONTENTS}{role}": sha256 for role, sha256 in input_fingerprints(config).items()})
    return with_model_keys(fingerprint)


_CONTENTS = "contents."
# Set from the tokenizer and block_size when the section leaves them out: an explicit value is never "the default".
_MODEL_KEYS_SET_ELSEWHERE = {"vocab_size", "n_positions", "bos_token_id", "eos_token_id"}


def with_model_keys(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """`fingerprint` with its `model` section as one model.<field> entry per GPTCustomConfig field, a preset expanded
    and the defaults filled in, as train's resume check compares it: `model.activation_function=gelu_new` (GPT-2's
    default) was refused by `run` alone, naming the whole section. (A state saved with the section as one dict
    reads the same.)"""
    from hf_gpt_custom.architecture import PRESETS
    from hf_gpt_custom.training.model_section import architecture_defaults, split_preset

    if isinstance(fingerprint.get("model"), dict):
        preset, fields = split_preset(fingerprint["model"])
        fields = {**PRESETS.get(preset, {}), **fields}
        # every field, at its default where the section leaves it out (None: set from the tokenizer or block_size),
        # so both sides hold the same keys and a field set back to its default is a change too
        defaults = {key: None if key in _MODEL_KEYS_SET_ELSEWHERE else value
                    for key, value in architecture_defaults().items()}
        entries = {f"model.{key}": value for key, value in {**defaults, **fields}.items()}
        fingerprint = {**{key: value for key, value in fingerprint.items() if key != "model"}, **entries}
    if fingerprint.get("model.n_positions", 0) is None and "block_size" in fingerprint:
        # neither the section nor a preset sets it: block_size does (model_config_kwargs), so an explicit
        # model.n_positions equal to block_size is no change, as `train` sees it (a state saved with None reads so too)
        fingerprint = {**fingerprint, "model.n_positions": fingerprint["block_size"]}
    return fingerprint


def _describe_change(key: str, saved: Any, now: Any, config) -> str:
    if key.startswith(_CONTENTS):
        role = key.removeprefix(_CONTENTS)
        setting = "tokenizer" if role == "tokenizer_vocabulary" else role  # its vocabulary files: the same setting
        value = getattr(config, setting, None)
        if setting == "tokenizer" and not value and config is not None:  # the run's own tokenizer/ (or init_from's)
            from hf_gpt_custom.training.fingerprints import run_tokenizer_folder

            return (f"the files of its tokenizer in {run_tokenizer_folder(config)} changed since then: put back the "
                    f"files it was trained with")
        return f"the contents of {setting}={value if value is not None else '?'} changed since then"
    return f"{key}: {saved!r} -> {now!r}"


def load_state(run_dir: Path, fingerprint: dict[str, Any], config=None) -> dict[str, Any]:
    """The saved state if it belongs to this config, a fresh one if there is none; ValueError on a real mismatch."""
    path = run_dir / STATE_FILE
    if not path.is_file():
        return {"config": fingerprint, "stages": {}}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserError(f"{path} is not valid JSON ({err}); delete it to restart the pipeline from the beginning") from err
    from hf_gpt_custom.training.config import BEHAVIOUR_BEFORE_THE_SETTING

    saved = with_model_keys(_with_auto_precision_resolved(state.get("config", {}), config))
    # Only settings both versions know: a field added to TrainConfig since the run started is not a change, unless
    # the code before it trained one way only (BEHAVIOUR_BEFORE_THE_SETTING): then the saved state had that value.
    saved = {**{key: value for key, value in BEHAVIOUR_BEFORE_THE_SETTING.items() if key in fingerprint}, **saved}
    changed = sorted(key for key in set(fingerprint) & set(saved) if fingerprint[key] != saved[key])
    moved = _moved_inputs(saved, fingerprint)
    refused = [key for key in changed if key not in _NO_WEIGHT_KEYS | set(moved)]
    if refused and _nothing_trained_under(state, run_dir):
        # A start that stopped before training wrote anything (the Hub unreachable, bad data, a refused setting) left
        # only this file and config.yaml: no model was made under its settings, so the corrected config starts
        # afresh (the tokenizer stage reuses or retrains its folder by its own record) instead of being refused.
        return {"config": fingerprint, "stages": {}}
    if refused and still_starting_over(state, run_dir):
        # the same for a --start_over that failed before its first checkpoint: the corrected command, rerun without
        # the flag as the failure said, goes on replacing the same run (whose checkpoints are still to set aside)
        return {"config": fingerprint, "stages": {}, "starting_over_from": state["starting_over_from"]}
    if refused:
        shown = ", ".join(_describe_change(key, saved[key], fingerprint[key], config) for key in refused[:4])
        elsewhere = "give it another out_dir=..." if config is not None and config.out_dir \
            else "start a new run with run_name=<new name> (or out_dir=...)"
        raise UserError(
            f"{run_dir} was started with a different config ({shown}); rerun with the original settings to resume, "
            f"{elsewhere}, or pass --start_over to run it again here"
        )
    # What is left changes no weight: keep the trained model, redo what shows the changed settings.
    redo = {"eval"} if set(changed) & _EVAL_ONLY_KEYS else set()
    if set(changed) & _REPORT_KEYS:
        _check_train_can_finish_again(run_dir, state, [key for key in changed if key in _REPORT_KEYS], saved)
        redo.add("train")
    new = {key: fingerprint[key] for key in changed if key in _WRITTEN_DOWN_KEYS or key in moved}  # moved: new path
    if new and config is not None and config.out_dir:
        new["out_dir"] = config.out_dir  # a copied folder's config.yaml names the original's: it would edit that one
    _write_down_new_settings(run_dir, state, new)
    if set(changed) & _NO_WEIGHT_KEYS:
        redo.add("export")
    for stage in redo:
        state["stages"].pop(stage, None)
    state["config"] = fingerprint  # a moved path, a resolved auto, a key added since: compared as they are now
    return state


def _nothing_trained_under(state: dict[str, Any], run_dir: Path) -> bool:
    """No checkpoint, no final/ and no finished train stage: a failed start. (An interrupted --start_over is not one:
    its record says which checkpoints it replaces.)"""
    from hf_gpt_custom.training.checkpoint import list_checkpoints

    return ("starting_over_from" not in state and "train" not in state.get("stages", {})
            and not (run_dir / "final").exists() and not list_checkpoints(run_dir / "checkpoints"))


def _check_train_can_finish_again(run_dir: Path, state: dict[str, Any], keys: list[str], saved: dict) -> None:
    """Refuse a report-only change (eval_batches, peak_flops) of a trained run whose checkpoints were deleted: train()
    would find nothing to continue from and train the model again from step 0, where the user asked for a figure.
    (Checked before the new settings are saved: the original ones then still resume.)"""
    if state["stages"].get("train", {}).get("status") == "done":
        refuse_to_train_again_without_checkpoints(run_dir, f"{', '.join(keys)} changed",
                                                   "rerun with " + ", ".join(f"{key}={saved[key]}" for key in keys))


def refuse_to_train_again_without_checkpoints(run_dir: Path, why: str, keep: str) -> None:
    """A finished train stage whose final/ is kept runs again only to write its summary, from its last checkpoint:
    without one, train() would train the model again from step 0 (the old one set aside), which nobody asked for."""
    from hf_gpt_custom.training.checkpoint import list_checkpoints

    if list_checkpoints(run_dir / "checkpoints"):
        return
    raise UserError(f"{why}: writing the training summary again evaluates the trained model from its last checkpoint, "
                    f"but {run_dir / 'checkpoints'} holds none (deleted?); {keep} to keep this run as it is, or pass "
                    f"--start_over to train it again")


def _write_down_new_settings(run_dir: Path, state: dict[str, Any], new: dict[str, Any]) -> None:
    """Write `new` settings (benchmark_*, run_name, a moved input's path, out_dir) into config.yaml and the training
    summary (the loss curve's title too) of a finished train stage, and record the summary as the stage's own again.
    A train stage that is not done, or whose summary another command rewrote, runs again and writes them itself."""
    record = state["stages"].get("train", {})
    if not new or record.get("status") != "done" or not _wrote_what_is_there(record, run_dir):
        return
    from hf_gpt_custom.manifest import write_text_atomically
    from hf_gpt_custom.training.config import read_config_yaml, run_config_text
    from hf_gpt_custom.training.run_log import (
        LOSS_CURVE_NAME, RUN_LOG_NAME, SUMMARY_NAME, loss_curve_title, plot_loss_curve, read_run_log,
        write_training_summary,
    )

    config_path, summary_path = run_dir / "config.yaml", run_dir / SUMMARY_NAME
    if config_path.is_file():
        recorded = read_config_yaml(config_path.read_text(encoding="utf-8"))
        # the record of the run: the old or the new, never half
        write_text_atomically(config_path, run_config_text({**recorded, **new}))
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        summary["config"] = {**summary.get("config", {}), **new}
        if "run_name" in new:
            summary["run_name"] = new["run_name"]
            if (run_dir / RUN_LOG_NAME).is_file() and summary.get("n_params"):
                plot_loss_curve(read_run_log(run_dir / RUN_LOG_NAME), run_dir / LOSS_CURVE_NAME,
                                title=loss_curve_title(new["run_name"], summary["n_params"]),
                                **({"loss_name": summary["loss_name"]} if summary.get("loss_name") else {}),
                                val_blocks=summary.get("val_blocks"))
        write_training_summary(summary_path, summary)
    if "wrote" in record:
        record["wrote"] = _report_identities(run_dir, tuple(record["wrote"]))


def _moved_inputs(saved: dict[str, Any], fingerprint: dict[str, Any]) -> list[str]:
    """The data, tokenizer and init_from settings that name another path whose files hold what the run read (a moved
    folder), each noted once; training's resume check (resume.moved_inputs) accepts them the same way."""
    from hf_gpt_custom.training.resume import moved_inputs, note_moved_input

    roles = moved_inputs(saved, fingerprint)
    for role in roles:
        note_moved_input(role, saved[role], fingerprint[role])
    return roles


def _with_auto_precision_resolved(saved: dict[str, Any], config) -> dict[str, Any]:
    """`saved` with a recorded mixed_precision=auto replaced by what it resolves to on this machine: states written
    before `run` resolved it (as train() and config.yaml do) continue with the same command."""
    if saved.get("mixed_precision") != "auto":
        return saved
    from hf_gpt_custom.training.devices import resolve_mixed_precision, training_device_type

    device_type = training_device_type(config.cpu if config is not None else None)
    return {**saved, "mixed_precision": resolve_mixed_precision("auto", device_type)}


def save_state(run_dir: Path, state: dict[str, Any]) -> None:
    """Write pipeline_state.json atomically: a crash leaves the previous complete file, never half of one."""
    run_dir.mkdir(parents=True, exist_ok=True)
    from .manifest import write_text_atomically

    write_text_atomically(run_dir / STATE_FILE, json.dumps(state, indent=2, default=str) + "\n")
