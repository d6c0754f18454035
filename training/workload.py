"""What train() trains on and for: the seam between the Accelerate loop (train.py) and the work it does.

The loop owns the optimizer, schedule, accumulation, clipping, divergence stop, checkpoints, exact resume, the run
lock, the JSONL log and the loss curve. A workload owns the rest: the tokenizer, the model it starts from, the
batches, the loss of a batch, the validation figures and the files that ship beside the weights in final/.
Pre-training is `LanguageModelling` (train.py); GPT-1-style fine-tuning is `FinetuneWorkload` (finetune.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch


@dataclass
class PreparedWork:
    """What a workload hands the loop before accelerator.prepare: the model and both loaders are unwrapped."""

    tokenizer: Any
    model: torch.nn.Module
    train_loader: torch.utils.data.DataLoader
    val_loader: torch.utils.data.DataLoader


class Workload(Protocol):
    def prepare(self, config, accelerator) -> PreparedWork:
        """Tokenizer, data, model (after set_seed, so its initialisation is seeded) and the two loaders."""

    def loss(self, model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The scalar the loop backpropagates and logs as `loss`."""

    def count_tokens(self, batch: dict[str, torch.Tensor]) -> int | torch.Tensor:
        """Tokens this micro-batch trains on: an int, or a 0-d tensor left on the device (the loop sums them over
        accumulation and processes and reads them back only when it logs)."""

    def evaluate(self, model, val_loader, accelerator) -> dict[str, float]:
        """Validation figures on every process; `val_loss` must be among them (the loss curve plots it)."""

    def describe(self, result: dict[str, float]) -> str:
        """One line for people: `val loss 4.36, 2.28 bits/byte` after each evaluation and at the end."""

    def summary_fields(self, last_eval: dict[str, float]) -> dict[str, Any]:
        """The workload's own entries of training_summary.json (data, final validation figures)."""

    def save_beside_model(self, folder: Path, model_config) -> None:
        """Write what ships with the weights in final/ (the tokenizer) into `folder`."""
