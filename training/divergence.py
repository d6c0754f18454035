"""When a run has diverged, and which of its checkpoints still holds good weights.

A step's loss is computed with the weights the previous update left, so checkpoint k (saved after update k) is known
to be good only once the loss of step k+1 — the loss of exactly those weights — came out finite and not blown up. A
huge learning rate shows why: the update that ruins the weights leaves a finite loss behind it, so "the checkpoint
before the first NaN" can hold weights of 1e6.
"""

from __future__ import annotations

import math
from pathlib import Path

from hf_gpt_custom.errors import UserError


class TrainingDivergedError(UserError):
    """The loss blew up or stopped being finite; the run stopped without saving the broken weights."""


# A loss that rose above the run's best by more than the best itself (and by at least this many nats) has blown up:
# a healthy language-model run fluctuates by a few percent, a diverging one multiplies its loss.
MIN_BLOWUP_NATS = 1.0


class DivergenceGuard:
    """Checks each step's loss and tracks the newest checkpoint whose weights gave a healthy loss."""

    def __init__(self, resumed_from: Path | None = None):
        self.best_loss = math.inf
        self.last_good: Path | None = None
        self._unconfirmed = resumed_from  # the weights we resumed from are judged by the first step's loss too

    def problem(self, loss: float, grad_norm: float, overflow_is_normal: bool = False) -> str | None:
        """Why this step's loss or gradient shows divergence, or None when the step is healthy."""
        if not math.isfinite(loss):
            return f"loss became {loss}"
        if not (math.isfinite(grad_norm) or overflow_is_normal):
            return f"gradient norm became {grad_norm}"
        if loss - self.best_loss > max(self.best_loss, MIN_BLOWUP_NATS):
            return f"loss became {loss:.6g}, more than twice the best loss {self.best_loss:.6g} of this run (diverged)"
        return None

    def record_healthy_step(self, loss: float) -> None:
        """The step's loss was healthy: the checkpoint holding the weights that produced it is good."""
        self.best_loss = min(self.best_loss, loss)
        if self._unconfirmed is not None:
            self.last_good, self._unconfirmed = self._unconfirmed, None

    def checkpoint_saved(self, folder: Path) -> None:
        self._unconfirmed = folder

    def advice(self, checkpoints_dir: Path) -> str:
        """What the error says to do: the really safe checkpoint (if it still exists) and the ones not to use."""
        if self.last_good is not None and self.last_good.is_dir():
            newer = [p.name for p in sorted(checkpoints_dir.glob("step_*"))
                     if p.is_dir() and p.name.split(".")[0] > self.last_good.name]
            unsafe = f"; {', '.join(newer)} hold(s) the diverging weights" if newer else ""
            return (f"the last good checkpoint is {self.last_good} (its weights gave a healthy loss){unsafe}. Start "
                    f"a new run from it with init_from={self.last_good} run_name=<new name> and a lower learning_rate "
                    f"or more warmup_steps")
        if self.last_good is not None:
            return (f"the last good checkpoint, {self.last_good}, was already deleted (keep_checkpoints); lower "
                    f"learning_rate or raise warmup_steps and start again, with a higher keep_checkpoints")
        return ("no checkpoint holds weights that gave a healthy loss; lower learning_rate or raise warmup_steps and "
                "start again")
