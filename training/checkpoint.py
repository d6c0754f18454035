"""Checkpoints: atomic save, keep the last K, find and verify a checkpoint to resume from.

A checkpoint folder is `accelerator.save_state` output (model, optimizer, scheduler, per-rank RNG states) plus
training_state.json (optimizer step, epoch, batches consumed in the epoch, tokens seen) and manifest.json, written
last, listing every file with its size and sha256. It is written as step_NNNNNN.tmp and renamed when complete, so a
folder named step_NNNNNN without a verifying manifest was damaged afterwards: it is refused, never deleted here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from hf_gpt_custom.errors import MissingFileError, UserError

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
TRAINING_STATE_NAME = "training_state.json"
MANIFEST_FORMAT = 1
_CHECKPOINT_RE = re.compile(r"^step_(\d{6,})$")


@dataclass
class TrainingState:
    """Where a run is: enough to continue exactly where it stopped."""

    step: int = 0  # optimizer steps completed
    epoch: int = 0  # passes over the training blocks started (0-based)
    batches_in_epoch: int = 0  # micro-batches this process consumed in `epoch` (what skip_first_batches skips)
    tokens_seen: int = 0  # tokens trained on, all processes together


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}"


def save_checkpoint(accelerator, checkpoints_dir: str | os.PathLike, state: TrainingState, keep_last: int) -> Path:
    """Write checkpoints_dir/step_NNNNNN atomically (save to .tmp, write manifest, rename), then keep the last K.

    Every process must call this (each saves its own RNG state). Returns the final folder.
    """
    checkpoints_dir = Path(checkpoints_dir)
    final = checkpoints_dir / checkpoint_name(state.step)
    temporary = checkpoints_dir / f"{final.name}.tmp"
    if accelerator.is_main_process:
        checkpoints_dir.mkdir(parents=True, exist_ok=True)
        if temporary.exists():  # our own leftover from a run killed while saving this very step
            shutil.rmtree(temporary)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(temporary))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (temporary / TRAINING_STATE_NAME).write_text(json.dumps(dataclasses.asdict(state), indent=2))
        _write_manifest(temporary, state.step)
        _fsync_folder(temporary)
        if final.exists():  # left by an earlier attempt or run in this folder: these weights supersede it
            _move_aside(final)
        os.rename(temporary, final)
        _fsync_folder(checkpoints_dir)
        _delete_old_checkpoints(checkpoints_dir, keep_last)
    accelerator.wait_for_everyone()
    return final


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


def _write_manifest(folder: Path, step: int) -> None:
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        files[path.relative_to(folder).as_posix()] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = {"format": MANIFEST_FORMAT, "step": step, "files": files}
    partial = folder / f"{MANIFEST_NAME}.partial"
    partial.write_text(json.dumps(manifest, indent=2))
    os.replace(partial, folder / MANIFEST_NAME)


def _fsync_folder(folder: Path) -> None:
    for path in [*folder.rglob("*"), folder] if folder.is_dir() else []:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _delete_old_checkpoints(checkpoints_dir: Path, keep_last: int) -> None:
    """Delete complete checkpoints beyond the newest `keep_last`; incomplete folders are left for a human."""
    complete = [folder for folder in list_checkpoints(checkpoints_dir) if verify_checkpoint(folder, quick=True) is None]
    for folder in complete[:-keep_last] if keep_last > 0 else []:
        shutil.rmtree(folder)


# --- finding and verifying -----------------------------------------------------------------------------------------


def list_checkpoints(checkpoints_dir: str | os.PathLike) -> list[Path]:
    """Folders named step_NNNNNN (complete or not), oldest first; *.tmp folders are not checkpoints."""
    checkpoints_dir = Path(checkpoints_dir)
    if not checkpoints_dir.is_dir():
        return []
    folders = [p for p in checkpoints_dir.iterdir() if p.is_dir() and _CHECKPOINT_RE.match(p.name)]
    return sorted(folders, key=lambda p: int(_CHECKPOINT_RE.match(p.name).group(1)))


def verify_checkpoint(folder: str | os.PathLike, quick: bool = False) -> str | None:
    """None if `folder` is a complete checkpoint, else the reason it is not. `quick` checks sizes, not sha256."""
    folder = Path(folder)
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        return f"it has no {MANIFEST_NAME} (written last, so the save never finished)"
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return f"its {MANIFEST_NAME} is unreadable"
    if TRAINING_STATE_NAME not in files:
        return f"its manifest does not list {TRAINING_STATE_NAME}"
    for name, expected in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != expected["size"]:
            return f"{name} has {path.stat().st_size} bytes, the manifest says {expected['size']}"
        if not quick and sha256_file(path) != expected["sha256"]:
            return f"{name} does not match its sha256 in the manifest"
    return None


def find_checkpoint(checkpoints_dir: str | os.PathLike, which: str) -> Path:
    """The checkpoint to resume from: `which` is "latest" or a folder. Refuses an incomplete one with the fix.

    "latest" means the newest step_NNNNNN folder; if that one does not verify, the error names the newest complete
    checkpoint instead of silently falling back, because a damaged folder is something a person should look at.
    """
    checkpoints_dir = Path(checkpoints_dir)
    for leftover in sorted(checkpoints_dir.glob("step_*.tmp")) if checkpoints_dir.is_dir() else []:
        logger.warning("ignoring %s: a save that was interrupted (it was never renamed into place)", leftover)
    if which == "latest":
        folders = list_checkpoints(checkpoints_dir)
        if not folders:
            raise MissingFileError(
                f"no checkpoint to resume from in {checkpoints_dir}; run without resume_from_checkpoint to start fresh"
            )
        candidate = folders[-1]
    else:
        candidate = Path(which)
        if not candidate.is_dir():
            raise MissingFileError(f"checkpoint {candidate} not found; give a step_NNNNNN folder or 'latest'")
        checkpoints_dir = candidate.parent
    problem = verify_checkpoint(candidate)
    if problem is not None:
        complete = [f for f in list_checkpoints(checkpoints_dir) if f != candidate and verify_checkpoint(f) is None]
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
    """Restore model, optimizer, scheduler and RNG states from a verified checkpoint; return where the run was."""
    accelerator.load_state(str(folder))
    return read_training_state(folder)
