"""Which process owns a folder: the lock a training run holds on its run folder, the lock a command holds on the
folder it writes (an evaluation's --out, an export, a tokenizer), and build folders that processes which no longer
run left in the shared packed-data cache.

Two processes writing one run folder interleave their logs and checkpoints, so a run takes fcntl.flock on
<run>/.run.lock. Two writing one output folder mix their files (one evaluation's results.json beside the other's
table.md; an export renaming the other's half-written staging folder into place), so each takes a lock file in the
folder (beside it for an export, which replaces the folder itself). The kernel drops a lock when
its holder exits or is killed, so a lock left by a dead process is simply taken over; the file records the holder's
PID, host and start time for the error a second process gets. Under accelerate launch / torchrun only rank 0 takes
them: the other ranks write there only in step with rank 0.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hf_gpt_custom.errors import UserError, check_writable
from hf_gpt_custom.training.devices import launch_rank

logger = logging.getLogger(__name__)

LOCK_NAME = ".run.lock"
OUTPUT_LOCK_NAME = ".hf-gpt-custom-writing.lock"  # inside an output folder while a command writes it
# <key>.tmp<pid>@<host> (and <key>.tmp<pid>, as older versions named them): a packed-data build in progress.
_BUILD_FOLDER_RE = re.compile(r"^(?P<key>[^/]+?)\.tmp(?P<pid>\d+)(?:@(?P<host>.+))?$")
_held: dict[str, list] = {}  # lock file -> [open handle, depth]: one process may nest (the main job, then train)


def process_is_alive(pid: int) -> bool:
    """True if a process with this PID runs on this machine (a PID reused since counts as alive: the safe side)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        return True
    return True


@contextmanager
def lock_run_folder(run_dir: str | os.PathLike) -> Iterator[None]:
    """Hold the run folder for the duration of the block; a UserError naming the holder if another process has it.

    Creates the folder. Re-entrant within one process. Ranks other than 0 of a multi-process launch do nothing.
    """
    run_dir = Path(run_dir)
    fix = "choose a writable out_dir (or run_name), or make the folder writable"
    with _held_lock(run_dir / LOCK_NAME, lambda: _open_in_run_folder(run_dir, fix), lambda who, pid: (
            f"the run folder {run_dir} is in use by {who}; wait for it to finish, or stop it (kill {pid}) and run the "
            f"same command again to resume, or give this run another run_name/out_dir")):
        yield


@contextmanager
def lock_output_folder(folder: str | os.PathLike, what: str, other: str, replaced_whole: bool = False,
                       busy_fix: str | None = None) -> Iterator[None]:
    """Hold the output `folder` (`what`: "the evaluation folder") for the block; a UserError naming the holder, and
    `other` ("another --out"), if another process writes it. The lock file is OUTPUT_LOCK_NAME inside the folder
    (created), or, for a folder the command replaces whole by a rename (`replaced_whole`: an export), .<name>.lock
    beside it; either is deleted when released (one a killed holder left is taken over). The folder is the one the
    path resolves to: a symlink to it is the same folder. `busy_fix` replaces "wait for it to finish, or give this
    one {other}" for a command that only reads the folder."""
    folder = Path(folder).resolve()
    lock_file = folder.with_name(f".{folder.name}.lock") if replaced_whole else folder / OUTPUT_LOCK_NAME
    made = None if lock_file.parent.exists() else lock_file.parent  # removed again if the command leaves it empty

    def open_lock_file():
        try:
            lock_file.parent.mkdir(parents=True, exist_ok=True)
            return open(lock_file, "a+", encoding="utf-8")
        except OSError as err:
            where = f"the folder {lock_file.parent}, where it stages" if replaced_whole else "it"
            raise UserError(f"cannot write {what} {folder}: {os.strerror(err.errno) if err.errno else err} in "
                            f"{where}; choose a folder you can write") from err

    try:
        with _held_lock(lock_file, open_lock_file, lambda who, pid: (
                f"{what} {folder} is being written by {who}; "
                f"{busy_fix or f'wait for it to finish, or give this one {other}'}"),
                remove_when_released=True):
            yield
    finally:
        if made is not None and made.is_dir() and not any(made.iterdir()):  # a command that stopped early
            made.rmdir()


@contextmanager
def _held_lock(lock_file: Path, open_lock_file, busy: Callable[[str, str], str],
               remove_when_released: bool = False) -> Iterator[None]:
    """flock on `lock_file` for the block, re-entrant within one process; rank 0 of a launch only. `busy(who, pid)`
    is the error when another process holds it. `remove_when_released`: the holder deletes the file before letting
    go, so a lock taken on a file that was deleted meanwhile is no lock: taken again on the file now there."""
    if launch_rank() != 0:
        yield
        return
    key = os.path.realpath(lock_file)
    if key in _held:
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    handle = _acquire(lock_file, open_lock_file(), busy)
    while remove_when_released and not _is_the_file_at(lock_file, handle):
        handle.close()
        handle = _acquire(lock_file, open_lock_file(), busy)
    _held[key] = [handle, 1]
    try:
        yield
    finally:
        del _held[key]
        if remove_when_released:
            try:
                Path(lock_file).unlink(missing_ok=True)
            except OSError:  # the folder made read-only meanwhile: a leftover lock file is taken over later, and
                pass         # an error here would hide the one the block raised
        handle.close()  # closing the file releases the lock


def _is_the_file_at(path: Path, handle) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False


def check_folder_writable(folder: Path, what: str) -> None:
    """Raise a UserError unless a file can be created in `folder` (or where it will be created): found before
    training, not when the first checkpoint or final/ is written."""
    check_writable(folder, what, "make it writable, or give this run another out_dir/run_name (nothing was trained or "
                                 "changed)")


def _open_in_run_folder(run_dir: Path, fix: str):
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        check_writable(run_dir, "the run folder", fix)  # the lock file may be writable in a read-only folder
        return open(run_dir / LOCK_NAME, "a+", encoding="utf-8")
    except OSError as err:
        raise UserError(f"cannot write to the run folder {run_dir}: {os.strerror(err.errno) if err.errno else err}; "
                        f"{fix}") from err


def _acquire(lock_file: Path, handle, busy: Callable[[str, str], str]):
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as err:
        holder = _read_holder(handle)
        handle.close()
        who = f"process {holder.get('pid', '?')} on {holder.get('host', '?')} (started {holder.get('started', '?')})"
        raise UserError(busy(who, holder.get("pid", "<pid>"))) from err
    except OSError as err:  # e.g. ENOLCK: a network filesystem without lock support
        logger.warning("cannot lock %s (%s): a second process writing there would not be stopped",
                       lock_file, errno.errorcode.get(err.errno, err))
        return handle
    previous = _read_holder(handle)
    if previous.get("pid") not in (None, os.getpid()):
        logger.info("%s: taking over the lock of process %s, which no longer holds it (it ended or was killed)",
                    lock_file, previous["pid"])
    handle.seek(0)
    handle.truncate()
    try:
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}))
        handle.flush()
    except OSError as err:  # the first write of every command on a full disk: a traceback naming no file
        try:
            handle.close()  # which writes what is left in its buffer: fails again
        except OSError:
            pass
        err.filename = err.filename or str(lock_file)
        raise
    return handle


def _read_holder(handle) -> dict:
    handle.seek(0)
    try:
        holder = json.loads(handle.read() or "{}")
    except json.JSONDecodeError:
        return {}
    return holder if isinstance(holder, dict) else {}


def claim_build_folder(parent: str | os.PathLike, key: str) -> Path:
    """A fresh, empty parent/<key>.tmp<pid>@<host> to build into, after removing build folders of dead processes."""
    parent = Path(parent)
    remove_stale_build_folders(parent)
    work = parent / f"{key}.tmp{os.getpid()}@{socket.gethostname()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


def remove_stale_build_folders(parent: str | os.PathLike) -> list[Path]:
    """Delete build folders in `parent` whose process, on this host, no longer runs; return what was removed.

    A folder another host wrote is left alone: its PID says nothing here (caches are shared over NFS). A folder
    named without a host (older versions) is taken to be this host's.
    """
    parent, host, removed = Path(parent), socket.gethostname(), []
    for folder in sorted(parent.iterdir()) if parent.is_dir() else []:
        match = _BUILD_FOLDER_RE.match(folder.name)
        if not match or not folder.is_dir() or match["host"] not in (None, host):
            continue
        pid = int(match["pid"])
        if pid == os.getpid() or process_is_alive(pid):
            continue
        logger.warning("removing %s: an unfinished data build of process %d, which no longer runs", folder, pid)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed
