"""Checkpoints: atomic save, keep the last K, find and verify a checkpoint to resume from.

A checkpoint folder is `accelerator.save_state` output (model, optimizer, scheduler, per-rank RNG states) plus
training_state.json (optimizer step, epoch, batches consumed in the epoch, tokens seen, the divergence guard's
memory) and manifest.json, written last, listing every file with its size and sha256. It is written as
step_NNNNNN.tmp and renamed when complete, so a folder named step_NNNNNN without a verifying manifest was damaged
afterwards: it is refused, never deleted here.
The folder holds one linear history: a run that starts over or resumes from an older step first moves the other
history's checkpoints into an abandoned_* folder, so rotation and "latest" only ever see the branch being trained.
The manifest helpers live in hf_gpt_custom.manifest (one format for checkpoints and model folders).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import re
import shutil
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from hf_gpt_custom.errors import MissingFileError, UserError, path_in_the_way, write_failure_cause, wrong_kind_message
# sha256_file is re-exported: data.py hashes the cache key's files with it
from hf_gpt_custom.manifest import MANIFEST_NAME, sync_to_disk, verify_manifest, write_manifest
from hf_gpt_custom.training.run_lock import OUTPUT_LOCK_NAME, lock_output_folder

logger = logging.getLogger(__name__)

TRAINING_STATE_NAME = "training_state.json"
RANDOM_STATES_NAME = "random_states_{rank}.pkl"  # accelerate's per-rank RNG file (RNG_STATE_NAME + rank)
_CHECKPOINT_RE = re.compile(r"^step_(\d{6,})$")


@dataclass
class TrainingState:
    """Where a run is: enough to continue exactly where it stopped."""

    step: int = 0  # optimizer steps completed
    epoch: int = 0  # passes over the training blocks started (0-based)
    batches_in_epoch: int = 0  # micro-batches this process consumed in `epoch` (what skip_first_batches skips)
    tokens_seen: int = 0  # tokens trained on, all processes together
    # seconds of the run's train() calls up to this checkpoint, set-up included (a session's time after its last
    # checkpoint is lost with it: those steps are redone and counted again)
    wall_time_s: float = 0.0
    # The divergence guard's memory (divergence.DivergenceGuard), so a resumed run judges its losses against the whole
    # run's best, as the uninterrupted run would. None in checkpoints written before it was recorded.
    best_loss: float | None = None  # the lowest loss of a healthy training step so far
    last_good_checkpoint: str | None = None  # the newest checkpoint (its folder name) whose weights gave a healthy loss


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}"


def checkpoint_step(folder: Path) -> int | None:
    match = _CHECKPOINT_RE.match(folder.name)
    return int(match.group(1)) if match else None


def save_checkpoint(accelerator, checkpoints_dir: str | os.PathLike, state: TrainingState, keep_last: int) -> Path:
    """Write checkpoints_dir/step_NNNNNN atomically (save to .tmp, write manifest, rename), then keep the last K.

    Every process must call this (each saves its own RNG state). Returns the final folder. A failed write (read-only
    folder, full disk) removes the partial .tmp folder and raises a UserError naming the folder and the cause; the
    checkpoints saved before stay as they were.
    """
    checkpoints_dir = Path(checkpoints_dir)
    final = checkpoints_dir / checkpoint_name(state.step)
    temporary = checkpoints_dir / f"{final.name}.tmp"
    with write_errors_named(checkpoints_dir, temporary, f"checkpoint {final.name}"):
        if accelerator.is_main_process:
            checkpoints_dir.mkdir(parents=True, exist_ok=True)
            if temporary.exists():  # our own leftover from a run killed while saving this very step
                shutil.rmtree(temporary)
        accelerator.wait_for_everyone()
        with _quiet_about_tied_weights(accelerator):
            accelerator.save_state(str(temporary))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            (temporary / TRAINING_STATE_NAME).write_text(json.dumps(dataclasses.asdict(state), indent=2))
            write_manifest(temporary, step=state.step)
            sync_to_disk(temporary)
            if final.exists():  # left by an earlier attempt or run in this folder: these weights supersede it
                _move_aside(final)
            os.rename(temporary, final)
            sync_to_disk(checkpoints_dir, contents=False)
            _delete_old_checkpoints(checkpoints_dir, keep_last)
    accelerator.wait_for_everyone()
    return final


@contextmanager
def write_errors_named(folder: Path, partial: Path | None, what: str):
    """Turn an OSError, torch's RuntimeError for a failed write ("[enforce fail at inline_container.cc] ...",
    "file write failed") or safetensors' SafetensorError for one ("I/O error: No space left on device (os error
    28)", what a full disk gives as accelerate writes model.safetensors) into a UserError naming `folder` and the
    cause; delete the partial `partial` folder. The message lists the complete checkpoints (the run's work,
    untouched) and says how to carry on from them."""
    try:
        yield
    except UserError:
        raise
    except Exception as error:
        cause = write_failure_cause(error)
        if cause is None:
            raise
        if partial is not None and partial.is_dir():
            shutil.rmtree(partial, ignore_errors=True)  # frees the space the half-written files took
        checkpoints_dir = folder if folder.name == "checkpoints" else folder / "checkpoints"
        complete = [f.name for f in list_checkpoints(checkpoints_dir) if verify_checkpoint(f, quick=True) is None]
        kept = f"the complete checkpoints {', '.join(complete)} are untouched" if complete else "no checkpoint was lost"
        if isinstance(error, OSError) and error.errno in (errno.EISDIR, errno.ENOTDIR) and error.filename:
            # a user's file or folder in the way (a file named final.tmp, a folder named run_log.jsonl): no space
            # or permission to fix, the path to move
            in_the_way = wrong_kind_message(path_in_the_way(error), error.errno)
            raise UserError(f"cannot write {what} to {folder}: {in_the_way}. {kept}") from error
        raise UserError(
            f"cannot write {what} to {folder}: {cause}; {_free_space(folder)}. {kept} — make the folder writable or "
            f"free space, then rerun the same command: it resumes from the latest checkpoint"
        ) from error


class _TiedWeightsFilter(logging.Filter):
    """Drops accelerate's "Removed shared tensor {...} while saving" when the removed names are exactly the tied
    weights the models declare (the LM head that shares the token embedding: stored once by design). Any other
    shared tensor still warns."""

    def __init__(self, expected: set[str]):
        super().__init__()
        self.expected = expected

    def filter(self, record: logging.LogRecord) -> bool:
        found = re.search(r"Removed shared tensor \{([^}]*)\}", record.getMessage())  # after "[RANK 0] "
        if found is None:
            return True
        names = set(re.findall(r"'([^']+)'", found.group(1)))
        # wrappers prefix the names (DDP "module.", torch.compile "_orig_mod."): compare the model's own part
        return not names or not all(any(name == key or name.endswith("." + key) for key in self.expected)
                                    for name in names)


@contextmanager
def _quiet_about_tied_weights(accelerator):
    expected = set()
    for model in accelerator._models:
        unwrapped = accelerator.unwrap_model(model)
        if getattr(getattr(unwrapped, "config", None), "tie_word_embeddings", False):
            expected |= set(getattr(unwrapped, "_tied_weights_keys", None) or ())
    target = logging.getLogger("accelerate.utils.other")
    quiet = _TiedWeightsFilter(expected)
    target.addFilter(quiet)
    try:
        yield
    finally:
        target.removeFilter(quiet)


def _free_space(folder: Path) -> str:
    existing = next((p for p in [folder, *folder.parents] if p.exists()), None)
    if existing is None:
        return "free space unknown"
    return f"{shutil.disk_usage(existing).free / 2**20:,.0f} MiB free on that filesystem"


def _move_aside(folder: Path) -> None:
    """Make room for a new checkpoint of the same step: a complete old one is superseded and deleted; an
    incomplete one is renamed to *.damaged and kept for a person to inspect."""
    if verify_checkpoint(folder, quick=True) is None:
        superseded = folder.with_name(f"{folder.name}.superseded")
        os.rename(folder, superseded)
        shutil.rmtree(superseded)
        return
    damaged = folder.with_name(f"{folder.name}.damaged")
    suffix = 1
    while damaged.exists():
        damaged, suffix = folder.with_name(f"{folder.name}.damaged{suffix}"), suffix + 1
    logger.warning("moving the incomplete checkpoint %s aside to %s (kept, not deleted)", folder, damaged)
    os.rename(folder, damaged)


def _delete_old_checkpoints(checkpoints_dir: Path, keep_last: int) -> None:
    """Delete complete checkpoints beyond the newest `keep_last`; incomplete folders are left for a human.

    Safe because the folder holds only the branch being trained (set_aside_other_histories ran at the start)."""
    complete = [folder for folder in list_checkpoints(checkpoints_dir) if verify_checkpoint(folder, quick=True) is None]
    for folder in complete[:-keep_last] if keep_last > 0 else []:
        # renamed first: a kill in the middle of the deletion leaves a *.deleting folder, never a half-deleted
        # step_* that counts as a checkpoint; the next rotation finishes it
        folder.rename(folder.with_name(folder.name + ".deleting"))
    finish_interrupted_deletions(checkpoints_dir)


def finish_interrupted_deletions(checkpoints_dir: Path, saves_too: bool = False) -> None:
    """Delete the step_*.deleting folders a rotation killed mid-delete left (at the next rotation, and at the start
    of a session: a finished run resumed again never rotates). `saves_too` (the start of a session, which holds the
    run lock, so no save is under way): also the step_*.tmp folders of saves a kill interrupted, never resumable;
    only the save of the same step removed one, so a rerun with another checkpoint_interval kept it for good."""
    leftovers = [*Path(checkpoints_dir).glob("step_*.deleting"),
                 *(Path(checkpoints_dir).glob("step_*.tmp") if saves_too else ())]
    for leftover in leftovers:
        shutil.rmtree(leftover, ignore_errors=True)


def set_aside_other_histories(accelerator, checkpoints_dir: str | os.PathLike,
                              resume_folder: Path | None) -> Path | None:
    """Before training: move checkpoints that are not on the branch about to be trained into an abandoned_* folder.

    Resuming from step S of this folder abandons its checkpoints after S (rotation would otherwise keep those, the
    newest, and delete the resumed branch, and "latest" would point at the other history). A fresh run, or one
    resumed from another folder, abandons all of them. Nothing is deleted. Returns the folder they went to, if any.
    """
    checkpoints_dir = Path(checkpoints_dir)
    if not accelerator.is_main_process:
        return None
    finish_interrupted_deletions(checkpoints_dir, saves_too=True)
    resumed_here = resume_folder is not None and Path(resume_folder).resolve().parent == checkpoints_dir.resolve()
    resumed_step = checkpoint_step(Path(resume_folder)) if resumed_here else None
    other = [f for f in list_checkpoints(checkpoints_dir) if resumed_step is None or checkpoint_step(f) > resumed_step]
    if not other:
        return None
    reason = f"after_{checkpoint_name(resumed_step)}" if resumed_step is not None else "before_new_run"
    abandoned = new_abandoned_folder(checkpoints_dir, reason)
    for folder in other:
        os.rename(folder, abandoned / folder.name)
    why = f"resuming from {resume_folder}" if resume_folder is not None else "starting a new run in this folder"
    logger.warning(
        "%s: moved the checkpoints of the other history (%s) to %s — kept, not deleted; 'latest' and rotation now "
        "see only this run's branch. Delete that folder when you no longer need it.",
        why, ", ".join(f.name for f in other), abandoned,
    )
    return abandoned


def replaces_the_run(run_dir: Path, resume_folder: Path | None) -> bool:
    """Whether training from `resume_folder` (None: step 0) replaces the run in `run_dir`, so that
    set_aside_replaced_outputs moves its outputs: a new run, a checkpoint of another folder, or one of this folder's
    with later checkpoints (an older branch)."""
    checkpoints_dir = (run_dir / "checkpoints").resolve()
    if resume_folder is None or Path(resume_folder).resolve().parent != checkpoints_dir:
        return True
    resumed_step = checkpoint_step(Path(resume_folder))
    return any(checkpoint_step(folder) > resumed_step for folder in list_checkpoints(checkpoints_dir))


def new_abandoned_folder(checkpoints_dir: Path, reason: str) -> Path:
    abandoned = checkpoints_dir / f"abandoned_{reason}_{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    suffix = 1
    while abandoned.exists():
        abandoned, suffix = abandoned.with_name(f"{abandoned.name.split('.')[0]}.{suffix}"), suffix + 1
    abandoned.mkdir(parents=True)
    return abandoned


# What a training run leaves beside its checkpoints, and what the main job (`hf-gpt-custom run`) derives from it.
RUN_OUTPUTS = ("final", "training_summary.json", "loss_curve.png", "run_log.jsonl", "tensorboard", "eval", "export")
# What a resumed run continues rather than replaces (the log is cut to the checkpoint: run_log.RunLog).
_CONTINUED_WHEN_RESUMING = ("run_log.jsonl", "tensorboard")


def set_aside_replaced_outputs(accelerator, run_dir: Path, resume_folder: Path | None,
                               abandoned: Path | None) -> Path | None:
    """Before a run that replaces the one in `run_dir` (it starts from step 0, or it set checkpoints aside: an
    older branch is resumed): move that run's outputs beside the checkpoints set aside. Left in place they would be
    read as the new run's until it finishes: an export in between paired the new config.yaml with the old model.
    The run log continues when resuming one of this folder's own checkpoints (run_log.RunLog keeps its records up
    to the checkpoint). Resuming a checkpoint of another history (an abandoned_* one, or another run folder's), this
    folder's log is that other run's: it is set aside too, and the checkpoint's own log, where it lies beside it, is
    continued instead (kept, another run's records below the step made the loss curve and final_train_loss).
    Nothing is deleted; returns the folder they went to, if any."""
    checkpoints = (run_dir / "checkpoints").resolve()
    resumed_here = resume_folder is not None and Path(resume_folder).resolve().parent == checkpoints
    if not accelerator.is_main_process or (resumed_here and abandoned is None):
        return None
    names = [name for name in RUN_OUTPUTS if not resumed_here or name not in _CONTINUED_WHEN_RESUMING]
    present = [run_dir / name for name in names if (run_dir / name).exists()]
    into = abandoned
    if present:  # the caller holds eval/'s and export's locks (outputs_not_being_written)
        into = abandoned or new_abandoned_folder(run_dir / "checkpoints", "before_new_run")
        for path in present:
            os.rename(path, into / path.name)
        if (run_dir / "eval") in present:  # the evaluation lock this process holds moved with its folder
            (into / "eval" / OUTPUT_LOCK_NAME).unlink(missing_ok=True)
        why = "starting a new run in this folder" if resume_folder is None else f"resuming from {resume_folder}"
        logger.warning("%s: moved the outputs of the run it replaces (%s) to %s — kept, not deleted", why,
                       ", ".join(path.name for path in present), into)
    if resume_folder is not None and not resumed_here:
        from hf_gpt_custom.training.run_log import RUN_LOG_NAME

        # set aside with its checkpoints (abandoned_*/run_log.jsonl), or its own run folder's (<run>/run_log.jsonl)
        own = [Path(resume_folder).parent / RUN_LOG_NAME, Path(resume_folder).parent.parent / RUN_LOG_NAME]
        log = next((path for path in own if path.is_file() and path.resolve() != (run_dir / RUN_LOG_NAME).resolve()),
                   None)
        if log is not None:
            shutil.copyfile(log, run_dir / RUN_LOG_NAME)
    return into


@contextmanager
def outputs_not_being_written(run_dir: Path, replacing: bool = True):
    """Hold the output locks of `run_dir`'s eval/ and export while a new run (`replacing`) sets them aside, taken
    before anything is moved (checkpoints included): refused with the checkpoints already moved, the folder was
    left with final/ and no checkpoint. Nothing is held for a run that replaces nothing."""
    busy_fix = ("wait for it to finish, then run this command again: it replaces the run in this folder and sets "
                "that run's outputs aside; nothing was moved or trained")
    with ExitStack() as held:
        # an `eval --out <run>/eval` or an `export` still writing would otherwise go on writing into the moved
        # folder (its lock moved with it) while a second one began beside the new run
        for name, what, replaced_whole in (("eval", "the evaluation folder", False),
                                           ("export", "the export folder", True)):
            if replacing and (run_dir / name).is_dir():
                held.enter_context(lock_output_folder(run_dir / name, what, "", replaced_whole=replaced_whole,
                                                      busy_fix=busy_fix))
        yield


# --- finding and verifying -----------------------------------------------------------------------------------------


def list_checkpoints(checkpoints_dir: str | os.PathLike) -> list[Path]:
    """Folders named step_NNNNNN (complete or not), oldest first; *.tmp and abandoned_* folders are not listed."""
    checkpoints_dir = Path(checkpoints_dir)
    if not checkpoints_dir.is_dir():
        return []
    folders = [p for p in checkpoints_dir.iterdir() if p.is_dir() and _CHECKPOINT_RE.match(p.name)]
    return sorted(folders, key=checkpoint_step)


def verify_checkpoint(folder: str | os.PathLike, quick: bool = False) -> str | None:
    """None if `folder` is a complete checkpoint, else the reason it is not. `quick` checks sizes, not sha256."""
    folder = Path(folder)
    if not (folder / MANIFEST_NAME).is_file():
        return f"it has no {MANIFEST_NAME} (written last, so the save never finished)"
    problem = verify_manifest(folder, quick=quick)
    if problem is not None:
        return problem
    if TRAINING_STATE_NAME not in json.loads((folder / MANIFEST_NAME).read_text())["files"]:
        return f"its manifest does not list {TRAINING_STATE_NAME}"
    return None
def find_checkpoint(checkpoints_dir: str | os.PathLike, which: str, verify: bool = True) -> Path:
    """The checkpoint to resume from: `which` is "latest" or a folder. Refuses an incomplete one with the fix.

    "latest" means the newest step_NNNNNN folder; if that one does not verify, the error names the newest complete
    checkpoint instead of silently falling back, because a damaged folder is something a person should look at.
    `verify=False` skips hashing its files (a quick look before training, which verifies it again).
    """
    checkpoints_dir = Path(checkpoints_dir)
    for leftover in sorted(checkpoints_dir.glob("step_*.tmp")) if checkpoints_dir.is_dir() else []:
        logger.warning("ignoring %s: a save that was interrupted (it was never renamed into place)", leftover)
    if which == "latest":
        folders = list_checkpoints(checkpoints_dir)
        if not folders:
            raise MissingFileError(
                f"no checkpoint to resume from in {checkpoints_dir}; run without resume_from_checkpoint to start from "
                f"step 0, or pass --start_over instead where a run here stopped before its first checkpoint (a "
                f"divergence, which a plain rerun refuses to repeat)"
            )
        candidate = folders[-1]
    else:
        candidate = Path(which)
        if not candidate.is_dir():
            raise MissingFileError(f"checkpoint {candidate} not found; give a step_NNNNNN folder or 'latest'")
        if (candidate / "config.json").is_file() and not (candidate / TRAINING_STATE_NAME).exists():
            # final/ or an export: weights without optimizer, schedule or data position (not a damaged checkpoint)
            raise UserError(
                f"{candidate} is a model folder, not a training checkpoint (it has no {TRAINING_STATE_NAME}: no "
                f"optimizer, schedule or data position); to train from its weights use init_from={candidate}, to "
                "continue its run resume from a step_NNNNNN folder of that run's checkpoints/"
            )
        checkpoints_dir = candidate.parent
    # sizes only without `verify`: a truncated settings or config file is named here, before anything parses it
    problem = verify_checkpoint(candidate, quick=not verify)
    if problem is not None:
        complete = [f for f in list_checkpoints(checkpoints_dir)
                    if f != candidate and verify_checkpoint(f, quick=not verify) is None]
        if complete:
            fix = f"the last complete one is {complete[-1]} — resume from it, or delete the damaged folder"
        else:
            fix = "there is no complete checkpoint beside it — delete the damaged folder and start fresh"
        raise UserError(f"checkpoint {candidate} is incomplete: {problem}; {fix}")
    return candidate


def read_training_state(folder: str | os.PathLike) -> TrainingState:
    data = json.loads((Path(folder) / TRAINING_STATE_NAME).read_text())
    known = {f.name for f in dataclasses.fields(TrainingState)}
    return TrainingState(**{key: value for key, value in data.items() if key in known})


def load_checkpoint(accelerator, folder: str | os.PathLike) -> TrainingState:
    """Restore model, optimizer, scheduler and RNG states from a verified checkpoint; return where the run was.

    Accelerate skips a random-state file it cannot load with an info-level log line, and the run then goes on with
    other random numbers (dropout differs from an uninterrupted run). That file is checked first and refused.
    """
    check_random_states(folder, accelerator.process_index, accelerator.num_processes)
    accelerator.load_state(str(folder))
    return read_training_state(folder)


def check_random_states_on_every_rank(accelerator, folder: str | os.PathLike) -> None:
    """check_random_states on each rank, the first refusal raised on every rank: each rank reads only its own file,
    so rank 0, whose file loaded, went on to set the run's newer checkpoints and final/ aside while rank 1 refused
    (another numpy on another node; the roundreview28 hunt)."""
    try:
        check_random_states(folder, accelerator.process_index, accelerator.num_processes)
        refusal = None
    except UserError as err:
        refusal = str(err)
    if accelerator.num_processes > 1:
        from accelerate.utils import gather_object

        refusal = next((said for said in gather_object([refusal]) if said is not None), None)
    if refusal is not None:
        raise UserError(refusal)


def check_random_states(folder: str | os.PathLike, rank: int, num_processes: int) -> None:
    """Raise a UserError unless this rank's random_states_<rank>.pkl loads as accelerate's load_state will load it."""
    from accelerate.utils import load
    import torch

    folder = Path(folder)
    path = folder / RANDOM_STATES_NAME.format(rank=rank)
    not_exact = "without it the run would not continue exactly (other dropout masks than an uninterrupted run)"
    saved_by = len(list(folder.glob(RANDOM_STATES_NAME.format(rank="*"))))
    if saved_by != num_processes:  # each rank's place in the data would be another's, the global batch another
        # (every rank refuses, with one message: rank 0, which has its file, went on to rewrite the run log, then
        # died in a collective)
        raise UserError(
            f"checkpoint {folder} was saved by {saved_by} process(es) and this run has {num_processes}: the ranks "
            f"would read other batches than the saved run's, with another global batch size — resume with "
            f"{saved_by} process(es) (accelerate launch --multi_gpu --num_processes {saved_by}; on a CPU, torchrun "
            f"--standalone --nproc_per_node {saved_by}), or start a new run (run_name=...)"
        )
    if not path.is_file():
        raise UserError(f"checkpoint {folder} has no {path.name} though {saved_by} process(es) saved it; {not_exact} "
                        f"— resume from an earlier checkpoint (resume_from_checkpoint=...)")
    needed = ["random_state", "numpy_random_seed", "torch_manual_seed"]
    needed += ["torch_cuda_manual_seed"] if torch.cuda.is_available() else []
    try:
        states = load(path)  # accelerate's loader: torch.load with weights_only=True
        missing = [key for key in needed if key not in states]
    except Exception as err:  # unpickling fails in many ways (another numpy/torch version, a damaged file)
        raise UserError(
            f"cannot load the random state {path} ({type(err).__name__}: {str(err).strip().splitlines()[0][:160]}); "
            f"{not_exact} — resume with the torch/numpy versions that wrote it, or start a new run"
        ) from err
    if missing:
        raise UserError(
            f"the random state {path} lacks {', '.join(missing)} (saved on another kind of device?); {not_exact} — "
            f"resume on the kind of device that wrote it, or start a new run"
        )
