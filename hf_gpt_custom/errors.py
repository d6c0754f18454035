"""The errors we raise on purpose: a message that names the problem and the fix, for a person to read.

The CLI prints a `UserError` as one line and exits 2; any other exception is a bug (ours or a library's) and keeps
its traceback. `UserError` is a `ValueError` so code written against the older `except ValueError` still works.
Shipped as remote code with the modeling/configuration/tokenization files, so it imports only the standard library.
"""

import difflib
import errno
import os
import re
import shlex
import tempfile
from collections.abc import Iterable
from pathlib import Path


class UserError(ValueError):
    """Bad input, a missing or damaged file, or a setting that cannot work: the message says what to change."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder the user named (or that a folder must contain) does not exist."""


def repeated(values: list) -> list[str]:
    """The values that occur more than once in `values`, as sorted text ([] when each occurs once)."""
    return sorted({str(value) for value in values if values.count(value) > 1})


def check_listed_once(name: str, values: list) -> None:
    """A UserError naming the repeats when a list setting (tasks, K values) holds one twice: each would be done, and
    reported, twice."""
    if repeated(values):
        raise UserError(f"{name} lists {', '.join(repeated(values))} more than once; give each once")


def did_you_mean(value: str, choices: Iterable[str], prefix: str = "") -> str:
    """"did you mean 'x'? " for the choice closest to `value` (shown as `prefix + choice`), or "" when none is close.

    Meant to sit inside a message: f"unknown task {name!r}; {did_you_mean(name, known)}known tasks: ...".
    """
    by_lowercase = {}  # case aside: --tasks ARC_Easy is arc_easy (the newcomer4 walk got no suggestion)
    for choice in choices:
        by_lowercase.setdefault(str(choice).lower(), choice)
    close = difflib.get_close_matches(str(value).lower(), list(by_lowercase), n=1)
    return f"did you mean {prefix + str(by_lowercase[close[0]])!r}? " if close else ""


def check_writable(path: str | os.PathLike, what: str, fix: str) -> None:
    """A UserError "cannot write to <what> <folder>: <reason>; <fix>" when no file can be created in `path` or, while
    it does not exist, in the nearest folder above it that does (where it would be created): said before the work, not
    after it. A real write, not os.access (which root's capabilities fool); the probe file leaves nothing behind."""
    path = Path(path)
    folder = path.absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return  # a file where the folder should be: the caller names that
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        reason = err.strerror or str(err)
        where = reason if folder == path.absolute() else f"{folder} takes no new file ({reason})"
        raise UserError(f"cannot write to {what} {path}: {where}; {fix}") from err


# OSErrors the user fixes by choosing another folder or making room. Any other errno (a path our code got wrong,
# ENOENT) is a bug and keeps its traceback; so does a permission error without a filename.
_DISK_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}  # EDQUOT: not on Windows
# A file past the size a file system (FAT32, exFAT: 4 GiB) or `ulimit -f` allows
_FILE_TOO_LARGE_ERRNOS = {errno.EFBIG}
# A file where a folder belongs (ENOTDIR) or a folder where a file belongs (EISDIR): a user's leftover in an output
# folder, moved away by hand
_WRONG_KIND_ERRNOS = {errno.EISDIR, errno.ENOTDIR}
_FILE_SYSTEM_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, *_DISK_FULL_ERRNOS, *_FILE_TOO_LARGE_ERRNOS,
                       *_WRONG_KIND_ERRNOS}


def wrong_kind_message(path: Path, number: int) -> str:
    """A file where a folder belongs, or the reverse, with the fix. ENOTDIR's path may run through the file: the
    first ancestor that is a file is named."""
    if number == errno.EISDIR:
        return f"{path} is a folder where a file belongs: move it away (nothing there is read), then run again"
    file = next((p for p in (path, *path.parents) if p.is_file()), path)
    return f"{file} is a file where a folder belongs: move it away, then run again"


def path_in_the_way(error: OSError) -> Path:
    """The path an EISDIR/ENOTDIR error is about: a rename's destination (`filename2`: os.replace names its own
    source first, and the source is the file the project just wrote), else the one path it names."""
    return Path(os.fsdecode(error.filename2 if getattr(error, "filename2", None) else error.filename))


def file_system_error_message(err: OSError) -> str | None:
    """One line for a file or folder that cannot be written or read (permissions, read-only, disk full, a file too
    large), with the fix; None for any other OSError (the CLI keeps its traceback).

    A write that fails after open() (a full disk, a quota: write, flush and close report them) carries no file name:
    the line then says what happened and the fix without one, rather than a traceback. A copy's or rename's error
    names its source first (shutil.copy: the package's own installed file) and the file being written second."""
    if err.errno not in _FILE_SYSTEM_ERRNOS:
        return None
    if not err.filename:
        if err.errno in _DISK_FULL_ERRNOS | _FILE_TOO_LARGE_ERRNOS:
            return (f"a file could not be written: {err.strerror}; {_room_fix(err.errno, 'the output folder')}, then "
                    f"run the same command again (finished stages and checkpoints are kept)")
        return None
    path = Path(os.fsdecode(err.filename2 if getattr(err, "filename2", None) else err.filename))
    folder = next((p for p in (path, *path.parents) if p.is_dir()), path.parent)  # what was to hold the new file
    if err.errno in _DISK_FULL_ERRNOS | _FILE_TOO_LARGE_ERRNOS:
        return f"cannot write {path}: {err.strerror}; {_room_fix(err.errno, folder)}"
    if err.errno in _WRONG_KIND_ERRNOS:
        return wrong_kind_message(path_in_the_way(err), err.errno)
    is_read = path.exists() and not os.access(path, os.R_OK)
    return (f"cannot {'read' if is_read else 'write'} {path}: {err.strerror}; "
            + ("make it readable for your user" if is_read else
               f"choose an output folder you can write to, or make {folder} writable for your user"))


def _room_fix(number: int, where, elsewhere: str = "choose an output folder") -> str:
    """The fix for a write refused for want of room: a full disk, a quota (whose limit is not the disk's free space),
    or a size limit per file (no amount of free space helps). `elsewhere`: how to write somewhere else instead."""
    if number in _FILE_TOO_LARGE_ERRNOS:
        return (f"the file system of {where} (FAT32 and exFAT: 4 GiB), or the shell's `ulimit -f`, limits the size of "
                f"one file: {elsewhere} on another file system, or raise the limit")
    if number == getattr(errno, "EDQUOT", None):
        return f"your disk quota is used up: free space within it, or {elsewhere} outside {where}'s quota"
    return f"free space on the disk of {where}, or {elsewhere} on another disk"


def write_failure_fix(error: Exception, where, elsewhere: str = "choose an output folder") -> str:
    """What to do about a failed write into `where` (an output folder, or a cache: then `elsewhere` says which
    setting moves it): room for a full disk, a quota or a size limit; write permission for a read-only or forbidden
    folder (an export said "free space" for those too)."""
    number = getattr(error, "errno", None)
    if number in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"make {where} writable for your user, or {elsewhere} you can write to"
    return _room_fix(number, where, elsewhere)


def no_room_cause(error: BaseException) -> OSError | None:
    """The full disk, quota or file size limit somewhere in `error`'s chain (datasets and fsspec wrap it, often
    in an error of their own that says "could not read" or "An error occurred while generating"), else None."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS | _FILE_TOO_LARGE_ERRNOS:
            return error
        error = error.__cause__ or error.__context__
    return None


# torch's zip writer's words for a failed write (a full disk under torch.save): a RuntimeError, no OSError
TORCH_WRITE_FAILURES = ("inline_container", "file write failed", "PytorchStreamWriter")


def write_failure_cause(error: Exception) -> str | None:
    """The cause of a failed write as a phrase ("No space left on device (ENOSPC)"), None for an error that is not
    one (a bug keeps its traceback)."""
    if isinstance(error, OSError):
        code = errno.errorcode.get(error.errno, error.errno)
        return f"{os.strerror(error.errno)} ({code})" if error.errno else str(error)
    if isinstance(error, RuntimeError) and any(text in str(error) for text in TORCH_WRITE_FAILURES):
        return f"torch could not write the file ({str(error).strip().splitlines()[0][:120]})"
    # safetensors raises its own class (an Exception, no OSError), with the OS's error number in its text
    found = re.search(r"os error (\d+)", str(error)) if type(error).__name__ == "SafetensorError" else None
    if found:
        number = int(found.group(1))
        return f"{os.strerror(number)} ({errno.errorcode.get(number, number)})"
    return None


__all__ = ["MissingFileError", "UserError", "check_listed_once", "check_writable", "did_you_mean",
           "file_system_error_message", "repeated", "write_failure_cause", "write_failure_fix"]


def shell_word(path: str | os.PathLike) -> str:
    """A path as one word of a command to paste into a shell: quoted, and "./" before a relative one starting with
    "-", which the command would read as an option (`hf-gpt-custom export -run -run/export`: the paths hunt)."""
    text = str(path)
    return shlex.quote(f"./{text}" if text.startswith("-") else text)
