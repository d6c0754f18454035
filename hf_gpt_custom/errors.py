"""The errors we raise on purpose: a message that names the problem and the fix, for a person to read.

The CLI prints a `UserError` as one line and exits 2; any other exception is a bug (ours or a library's) and keeps
its traceback. `UserError` is a `ValueError` so code written against the older `except ValueError` still works.
Shipped as remote code with the modeling/configuration/tokenization files, so it imports nothing.
"""


class UserError(ValueError):
    """Bad input, a missing or damaged file, or a setting that cannot work: the message says what to change."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder the user named (or that a folder must contain) does not exist."""


__all__ = ["MissingFileError", "UserError"]
