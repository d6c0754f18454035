"""When a run has diverged: the rule that judges each step's loss (DivergenceGuard, on the host at each logging
window) and the same rule on the device (UpdateGate), which holds every later update back without reading a value.
The loop (loop.py) runs both; why checkpoint k is trusted only after step k+1's loss is explained there.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from hf_gpt_custom.errors import UserError


class TrainingDivergedError(UserError):
    """The loss blew up or stopped being finite; the run stopped without saving the broken weights."""


# A loss that rose above the run's best by more than the best itself (and by at least this many nats) has blown up:
# a healthy language-model run fluctuates by a few percent, a diverging one multiplies its loss.
MIN_BLOWUP_NATS = 1.0


class DivergenceGuard:
    """Checks each step's loss and tracks the newest checkpoint whose weights gave a healthy loss."""

    def __init__(self, resumed_from: Path | None = None, best_loss: float = math.inf, last_good: Path | None = None,
                 loss_blowup_is_divergence: bool = True):
        self.best_loss = best_loss
        self.loss_blowup_is_divergence = loss_blowup_is_divergence  # False: only a non-finite loss (Workload says)
        self.last_good = last_good
        self._unconfirmed = resumed_from  # the weights we resumed from are judged by the first step's loss too

    def problem(self, loss: float, grad_norm: float, overflow_is_normal: bool = False) -> str | None:
        """Why this step's loss or gradient shows divergence, every symptom it has, or None when it is healthy.

        A blown-up loss often comes with a gradient norm that overflowed to inf or nan (which one depends on the
        device's kernels): both are named, the loss first, so the message starts the same everywhere.
        """
        if not math.isfinite(loss):
            return f"loss became {loss}"  # its gradient is not finite either: nothing more to say
        symptoms = []
        if self.loss_blowup_is_divergence and loss - self.best_loss > max(self.best_loss, MIN_BLOWUP_NATS):
            symptoms.append(f"loss became {loss:.6g}, more than twice the best loss {self.best_loss:.6g} of this run "
                            f"(diverged)")
        # Under fp16 the gradient scaler overflows now and then by design (an inf norm): it skips that update and
        # lowers its scale itself. Only the loss tells divergence there.
        if not (math.isfinite(grad_norm) or overflow_is_normal):
            symptoms.append(f"gradient norm became {grad_norm}")
        return "; ".join(symptoms) or None

    def record_healthy_step(self, loss: float) -> None:
        """The step's loss was healthy: the checkpoint holding the weights that produced it is good."""
        self.best_loss = min(self.best_loss, loss)
        if self._unconfirmed is not None:
            self.last_good, self._unconfirmed = self._unconfirmed, None

    def checkpoint_saved(self, folder: Path) -> None:
        self._unconfirmed = folder

    def remember_in(self, state: TrainingState) -> None:
        """Write what a resumed run needs to judge its losses as this one would into the state a checkpoint saves."""
        state.best_loss = self.best_loss if math.isfinite(self.best_loss) else None
        state.last_good_checkpoint = self.last_good.name if self.last_good is not None else None

    def advice(self, checkpoints_dir: Path) -> str:
        """What the error says to do: the really safe checkpoint (if it still exists) and the ones not to use."""
        if self.last_good is not None and self.last_good.is_dir():
            from hf_gpt_custom.training.checkpoint import checkpoint_step, list_checkpoints, read_training_state

            # by step number, not name: past step 999,999 "step_1000000" sorts before "step_999999" as text. A folder
            # resumed from under another name (resume_from_checkpoint takes any) has its step in its state file.
            good_step = checkpoint_step(self.last_good)
            if good_step is None:
                good_step = read_training_state(self.last_good).step
            newer = [p.name for p in list_checkpoints(checkpoints_dir) if checkpoint_step(p) > good_step]
            unsafe = f"; {', '.join(newer)} hold(s) the diverging weights" if newer else ""
            return (f"the last good checkpoint is {self.last_good} (its weights gave a healthy loss){unsafe}. Start "
                    f"a new run from it with init_from={self.last_good} run_name=<new name> and a lower learning_rate "
                    f"or more warmup_steps")
        if self.last_good is not None:
            return (f"the last good checkpoint, {self.last_good}, was already deleted (keep_checkpoints); lower "
                    f"learning_rate or raise warmup_steps and start again, with a higher keep_checkpoints")
        return ("no checkpoint holds weights that gave a healthy loss; lower learning_rate or raise warmup_steps and "
                "start again")


def full_value(tensor: torch.Tensor) -> torch.Tensor:
    """A plain tensor of `tensor`'s whole value. Under FSDP2 the parameters are DTensors and clip_grad_norm_ returns
    the norm as one too, which the gate's plain tensors cannot take in (torch's DTensor dispatcher asserts)."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


class UpdateGate:
    """DivergenceGuard's rule evaluated on the device, so the loop never waits for a step's loss to read it.

    From the first step whose loss is not finite or blew up (or whose gradient norm is not finite, unless fp16's
    gradient scaler handles overflows), every update is skipped on the device: the fused AdamW kernel's `found_inf`
    input, the one torch's GradScaler drives, is held at 1. The weights stay those before that step until the loop
    reads the window back and stops, naming the step. The host guard replays the same values with the same float64
    arithmetic. Optimizers without that input (not fused, or fp16 whose scaler owns it) are checked on the host at
    each step instead (`skips_on_device` is False).
    """

    def __init__(self, optimizer, device, overflow_is_normal: bool = False, best_loss: float = math.inf,
                 loss_blowup_is_divergence: bool = True):
        inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps torch's
        self.overflow_is_normal = overflow_is_normal
        self.loss_blowup_is_divergence = loss_blowup_is_divergence
        self.skips_on_device = bool(inner.defaults.get("fused")) and not overflow_is_normal
        self._best_loss = torch.full((), best_loss, dtype=torch.float64, device=device)  # the guard's, on resume
        self._halted = torch.zeros((), dtype=torch.float32, device=device)
        if self.skips_on_device:
            inner.found_inf = self._halted

    def check(self, loss, grad_norm):
        """A 0-d bool tensor: this step shows divergence. Updates are skipped from that step on."""
        loss, grad_norm = full_value(loss).double(), full_value(grad_norm).double()
        best = self._best_loss
        diverged = ~torch.isfinite(loss)
        if self.loss_blowup_is_divergence:
            diverged = diverged | (loss - best > torch.clamp(best, min=MIN_BLOWUP_NATS))
        if not self.overflow_is_normal:
            diverged = diverged | ~torch.isfinite(grad_norm)
        self._halted.copy_(torch.maximum(self._halted, diverged.float()))
        self._best_loss.copy_(torch.where(self._halted.bool(), best, torch.minimum(best, loss)))
        return diverged
