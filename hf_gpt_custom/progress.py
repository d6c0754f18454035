"""The progress bars of long work (training, scoring): tqdm.auto's, off where `show` is False.

`disable` is passed only to turn a bar off: tqdm applies its TQDM_* environment variables to the arguments it is not
given, so an explicit disable=False would override a user's TQDM_DISABLE=1.
"""

from __future__ import annotations


def progress_bar(*, show: bool = True, **kwargs):
    from tqdm.auto import tqdm

    return tqdm(**kwargs, **({} if show else {"disable": True}))
