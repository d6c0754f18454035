"""Validation: loss (nats/token), perplexity and bits per byte over the validation batches, on every process."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


@torch.no_grad()
def evaluate_loss(model, val_loader, accelerator, token_bytes: torch.Tensor) -> dict[str, float]:
    """Validation loss (nats/token), perplexity and bits per byte over the whole validation loader.

    Bits per byte = total nats / (ln 2 · UTF-8 bytes of the predicted tokens). Each block predicts its tokens
    1..T-1 (token 0 has no context inside the block); the end-of-text separator is predicted but stands for 0
    bytes, so the figure is, if anything, slightly pessimistic.
    """
    model.eval()
    # summed on the device and read back once at the end: the GPU never waits for the host between batches
    total_nats = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    total_bytes = torch.zeros((), dtype=torch.int64, device=accelerator.device)
    total_tokens = 0
    token_bytes = token_bytes.to(accelerator.device)
    for batch in val_loader:
        logits = model(input_ids=batch["input_ids"]).logits
        targets = batch["labels"][:, 1:]
        nats = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.size(-1)), targets.reshape(-1),
                               reduction="none").view(targets.shape).sum(dim=1)
        n_bytes = token_bytes[targets].sum(dim=1)
        nats, n_bytes = accelerator.gather_for_metrics((nats, n_bytes))
        total_nats += nats.double().sum()
        total_bytes += n_bytes.sum()
        total_tokens += targets.size(1) * nats.numel()
    model.train()
    total_nats, total_bytes = float(total_nats), int(total_bytes)
    val_loss = total_nats / max(total_tokens, 1)
    return {
        "val_loss": val_loss,
        "val_perplexity": math.exp(min(val_loss, 700.0)),
        "val_bits_per_byte": total_nats / (math.log(2) * max(total_bytes, 1)),
        "val_tokens": total_tokens,
        "val_bytes": total_bytes,
    }
