"""The errors we raise on purpose: a message that names the problem and the fix, for a person to read.

The CLI prints a `UserError` as one line and exits 2; any other exception is a bug (ours or a library's) and keeps
its traceback. `UserError` is a `ValueError` so code written against the older `except ValueError` still works.
Shipped as remote code with the modeling/configuration/tokenization files, so it imports only the standard library.
"""

import difflib
from collections.abc import Iterable


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
    close = difflib.get_close_matches(str(value), list(choices), n=1)
    return f"did you mean {prefix + close[0]!r}? " if close else ""


__all__ = ["MissingFileError", "UserError", "check_listed_once", "did_you_mean", "repeated"]
