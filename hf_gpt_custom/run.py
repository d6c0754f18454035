"""The main job: tokenizer -> pre-training -> zero/one/few-shot evaluation -> model card + Hub-ready export.

Each stage is one call into the part that owns it (training/, eval/, hub.py); this module only orders them, skips
the ones already finished and shows where the run is. Progress lives in <run_dir>/pipeline_state.json (rewritten
atomically after every stage; run_state.py says what it records and when a finished stage still stands), so an
interrupted run resumes by rerunning the same command: finished stages are skipped and training continues from its
latest checkpoint.
"""

from __future__ import annotations

import shlex
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from . import run_state
from .errors import UserError, shell_word

STAGES = ("tokenizer", "train", "eval", "export")


def run_pipeline(config_path: str | Path, overrides: list[str] | None = None, start_over: bool = False) -> Path:
    """Run (or resume) the main job for the YAML at `config_path` with `key=value` overrides; return the run folder.

    The run folder is the config's out_dir (default runs/<run_name>); the Hub-ready result is <run_folder>/export
    and evaluation results are in <run_folder>/eval. Rerunning with the same config skips finished stages; a
    different config for the same folder raises ValueError naming the changed keys (benchmark_* changes re-run eval
    and export; eval_batches and peak_flops train's finishing step and export; run_name only export; a data,
    tokenizer or init_from path whose files hold what the run read is the same input, moved). `start_over` runs
    every stage again, training from step 0 (the old checkpoints are moved aside, as `train --start_over` does);
    interrupted, it resumes by the same call without it.
    """
    from hf_gpt_custom.training.config import find_config_file, load_train_config
    from hf_gpt_custom.training.run_lock import lock_run_folder

    config_path = find_config_file(config_path, "run config", "training/configs/shakespeare.yaml")
    config = load_train_config(config_path, list(overrides or []))
    from hf_gpt_custom.training.hub_revision import pin_dataset_revision
    from hf_gpt_custom.training.train import check_machine_can_train

    # fp16 on a CPU, cpu=false without a GPU: refused before the tokenizer stage. The config it returns has
    # mixed_precision=auto resolved, as train() records it in config.yaml: that file given back to `run` is this run.
    config, device_type = check_machine_can_train(config)
    config = pin_dataset_revision(config, start_over)  # every stage reads a Hub dataset at the same commit
    from hf_gpt_custom.training.devices import join_launched_processes

    # Under `accelerate launch --num_processes N` (or torchrun): train shares the batches, eval the documents; the
    # main process alone writes the tokenizer, the pipeline's state and the export (train's Accelerator joins this
    # process group)
    processes = join_launched_processes(on_cpu=device_type == "cpu")
    with lock_run_folder(config.run_dir):  # a second main job or `train` on this folder stops, naming this process
        return _run_stages(config, start_over, processes)


def _run_stages(config, start_over: bool = False, processes=None) -> Path:
    """The stages of run_pipeline in order, skipping finished ones; the caller holds the run folder's lock.
    `processes`: the launched ones (devices.join_launched_processes), None for this process alone."""
    main = processes is None or processes.is_main_process
    say, show_stages = (print, _print_stages) if main else (_silent, _silent)  # the main process reports
    run_dir = config.run_dir
    fingerprint = run_state.fingerprint(config)
    # A --start_over stays one until its training has written a checkpoint: an interrupted one resumes without the
    # flag (with it, a second --start_over would set the new run's progress aside too).
    # Under a launcher the main process reads the state first (a changed benchmark setting is written into config.yaml
    # as it is read) and saves it; the others then read what it saved.
    with processes.main_process_first() if processes is not None else nullcontext():
        state = {"config": fingerprint, "stages": {}, "starting_over_from": run_state.checkpoint_identities(run_dir)} \
            if start_over else run_state.load_state(run_dir, fingerprint, config)
        if main:
            run_state.save_state(run_dir, state)

    benchmarks = run_state.benchmarks_identity(config)
    started = time.perf_counter()
    for stage in STAGES:
        if processes is not None:  # each decides from the folder the stage before left, not one still writing it
            processes.wait_for_everyone()
        record = state["stages"].get(stage, {})
        starting_over = start_over or run_state.still_starting_over(state, run_dir)
        if record.get("status") in ("done", "skipped"):
            model_kept = run_state.model_kept(record, run_dir)
            older_code = run_state.made_by_older_code(stage, run_dir)
            if model_kept and run_state.reports_unchanged(record, run_dir, benchmarks) and not older_code:
                continue
            if older_code:
                say(f"{older_code}: running the {stage} stage again", flush=True)
            if stage == "train" and model_kept and not starting_over:  # only its summary changed
                run_state.refuse_to_train_again_without_checkpoints(
                    run_dir, "training_summary.json was changed or deleted since the train stage wrote it",
                    "put the file back")
            # what it wrote was moved aside, or made from another final/, other benchmark files or other reports
            state["stages"].pop(stage)
        if stage == "train" and starting_over and not start_over and config.resume_from_checkpoint:
            raise UserError(f"{run_dir} holds an interrupted --start_over whose training has written no checkpoint yet: "
                            f"resume_from_checkpoint={config.resume_from_checkpoint} would continue the run it "
                            f"replaces; drop resume_from_checkpoint to start over as asked")
        show_stages(run_dir, state, running=stage)
        stage_started = time.perf_counter()
        try:
            output, status = _run_stage(stage, config, run_dir, state, starting_over, processes)
        except BaseException as err:  # KeyboardInterrupt included: say where the run stopped, then re-raise
            show_stages(run_dir, state, running=stage, failed=True)
            what = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
            then = "fix what the error below names, then rerun" if isinstance(err, UserError) else "rerun"
            command = "the same command without --start_over" if start_over else "the same command"
            say(f"stage '{stage}' {what}; finished stages are kept: {then} {command} to resume", flush=True)
            raise
        if stage == "train":
            state.pop("starting_over_from", None)
        if main:  # the others' stages left nothing of their own to record
            state["stages"][stage] = run_state.stage_record(
                stage, run_dir, output, status, time.perf_counter() - stage_started, benchmarks)
            run_state.save_state(run_dir, state)
    if processes is not None:
        processes.wait_for_everyone()  # the export is written before any process returns
    if not main:
        return run_dir
    _print_stages(run_dir, state, running=None)
    _print_outputs(run_dir)
    run, export = shell_word(run_dir), shell_word(run_dir / "export")  # commands to paste
    from .hub import previous_export_options

    repo_id = previous_export_options(run_dir / "export").get("repo_id")  # kept from an export the user ran
    publish = (f"`hf-gpt-custom push {export} --repo-id {shlex.quote(repo_id)} --dry-run`, then without --dry-run"
               if repo_id else
               f"`hf-gpt-custom export {run} {export} --repo-id USER/NAME` names your repository in the card, then "
               f"`hf-gpt-custom push {export} --repo-id USER/NAME --dry-run`, then without --dry-run")
    print(f"done in {time.perf_counter() - started:.1f} s this session; Hub-ready folder: {run_dir / 'export'} "
          f"(to publish it: {publish})", flush=True)
    return run_dir


def _print_outputs(run_dir: Path) -> None:
    """The results table (small: tasks x K x metrics) and where each output of the run is."""
    table = run_dir / "eval" / "table.md"
    if table.is_file():
        print(table.read_text(encoding="utf-8"), flush=True)
    outputs = {
        "trained model": run_dir / "final",
        "training summary": run_dir / "training_summary.json",
        "loss curve": run_dir / "loss_curve.png",
        "evaluation": run_dir / "eval" / "results.json",
        "results table": table,
        "model card": run_dir / "export" / "README.md",
    }
    width = max(len(label) for label in outputs)
    print("\n".join(f"  {label:<{width}}  {path}" for label, path in outputs.items() if path.exists()), flush=True)


# --- the stages: each returns (output path or None, "done" | "skipped") ------------------------------------------


def _stage_tokenizer(config, run_dir: Path, state: dict, start_over: bool = False) -> tuple[Path, str]:
    from hf_gpt_custom.training.workload import prepare_tokenizer

    # start_over: train() sets the old checkpoints aside next, so the tokenizer they were trained with may be replaced
    return Path(prepare_tokenizer(config, start_over=start_over)), "done"


def _stage_train(config, run_dir: Path, state: dict, start_over: bool = False) -> tuple[Path, str]:
    from hf_gpt_custom.training.train import train

    # train() calls prepare_tokenizer itself, which reuses the folder the tokenizer stage wrote (same data, same
    # size), so config.yaml keeps the user's `tokenizer:` setting. An interrupted run continues from its latest
    # checkpoint, as `train` does on any run folder (a damaged one is refused with the fix).
    return Path(train(config, start_over=start_over)) / "final", "done"


def _set_aside_earlier_results(eval_dir: Path) -> None:
    """Move an earlier run's evaluation out of the card's way, not into the bin: hours of scoring were deleted when a
    rerun asked for no benchmarks."""
    from hf_gpt_custom.training.run_lock import OUTPUT_LOCK_NAME, lock_output_folder

    if not eval_dir.exists():
        return
    aside = eval_dir.with_name(f"eval_set_aside_{time.strftime('%Y%m%d-%H%M%S')}")
    while aside.exists():
        aside = aside.with_name(aside.name + "_")
    # not from under an `eval --out <run>/eval` still writing there: its lock would move with the folder
    with lock_output_folder(eval_dir, "the evaluation folder", "", busy_fix=(
            "wait for it to finish, then run this command again (it sets that evaluation aside: benchmark_tasks is "
            "empty)")):
        eval_dir.rename(aside)
        (aside / OUTPUT_LOCK_NAME).unlink(missing_ok=True)
    print(f"benchmark_tasks is empty: the earlier evaluation in {eval_dir} was moved to {aside} (the card leaves it "
          f"out)", flush=True)


def _stage_eval(config, run_dir: Path, state: dict, start_over: bool = False) -> tuple[Path | None, str]:
    if not config.benchmark_tasks:
        print("eval skipped: benchmark_tasks is empty (give benchmark_tasks=[copa] to evaluate)", flush=True)
        _set_aside_earlier_results(run_dir / "eval")  # results of earlier settings must not reach the card
        return None, "skipped"
    from hf_gpt_custom.eval.runner import evaluate
    from hf_gpt_custom.training.devices import launcher_asks_for_cpu

    out_dir = run_dir / "eval"
    evaluate(
        str(run_dir / "final"),
        tasks=list(config.benchmark_tasks),
        shots=list(config.benchmark_shots),
        limit=config.benchmark_limit,
        # where training ran (cpu=true, or a launch with use_cpu / --cpu); None picks CUDA when there is one
        device="cpu" if config.cpu or launcher_asks_for_cpu() else None,
        out_dir=out_dir,
        skip_unfittable=True,  # a sweep over many tasks: a K the context cannot hold is reported, not fatal
        batch_size="auto",  # the largest a GPU holds; 16 on a CPU (scores do not depend on it)
        data_parallel=True,  # under accelerate launch or torchrun: the processes share the documents out
    )
    return out_dir, "done"


def _stage_export(config, run_dir: Path, state: dict, start_over: bool = False) -> tuple[Path, str]:
    from .hub import export_folder, previous_export_options

    kept = previous_export_options(run_dir / "export")  # what `hf-gpt-custom export` was given for this folder
    if kept:
        flags = ", ".join(f"--{key.replace('_', '-')} {value}" for key, value in kept.items())
        print(f"export: keeping {flags} from the previous export of {run_dir / 'export'}", flush=True)
    return export_folder(run_dir, run_dir / "export", **kept), "done"


_STAGE_FUNCTIONS = {
    "tokenizer": _stage_tokenizer,
    "train": _stage_train,
    "eval": _stage_eval,
    "export": _stage_export,
}


def _run_stage(stage: str, config, run_dir: Path, state: dict, start_over: bool, processes) -> tuple[Path | None, str]:
    """One stage in this process: all of it alone; under a launcher (`processes`) train and eval on every process
    (they share the work), the tokenizer on the main process first (the others then find it trained), the export
    (and an eval without benchmarks) on the main process only."""
    function = _STAGE_FUNCTIONS[stage]
    if processes is None or stage == "train" or (stage == "eval" and config.benchmark_tasks):
        return function(config, run_dir, state, start_over)
    if stage == "tokenizer":
        with processes.main_process_first():
            return function(config, run_dir, state, start_over)
    if processes.is_main_process:  # the export, or an eval stage without benchmarks (it sets old results aside)
        return function(config, run_dir, state, start_over)
    return None, "done"  # the main process records what its stage wrote; this process saves no state


def _silent(*args, **kwargs) -> None:
    """print's stand-in on the processes a launcher started besides the main one: the main one reports."""


def _print_stages(run_dir: Path, state: dict[str, Any], running: str | None, failed: bool = False) -> None:
    """The stage list: done / skipped (with wall time) / running (or failed) / pending."""
    lines = [f"hf-gpt-custom run: {run_dir}"]
    for position, stage in enumerate(STAGES, start=1):
        record = state["stages"].get(stage, {})
        if record.get("status") in ("done", "skipped"):
            status, detail = record["status"], f"{record.get('wall_time_s', 0):8.1f} s"
        elif stage == running:
            status, detail = ("failed" if failed else "running"), ""
        else:
            status, detail = "pending", ""
        lines.append(f"  [{status:^8}] {position}/{len(STAGES)} {stage:<10}{detail}")
    print("\n".join(lines), flush=True)


__all__ = ["STAGES", "run_pipeline"]
