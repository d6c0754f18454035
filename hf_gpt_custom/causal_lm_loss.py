"""transformers' causal-LM loss (ForCausalLMLoss) without its three logits-sized temporaries.

`F.cross_entropy(logits, targets)` keeps the log-softmax of every logit for the backward (one tensor the size of the
logits), and its backward allocates two more: a zero-filled gradient for the picked log-probabilities and the
gradient of the log-softmax. At the benchmarks' small size (8 x 256 tokens, 8192-token vocabulary) each is 67 MB, so
a CPU training step faulted in ~270 MB of fresh pages (~70,000 page faults, measured with getrusage) and a bf16 model
also paid for `logits.float()`, a float32 copy. Here the forward keeps only one float per row (the log-sum-exp) and
the backward writes the softmax straight into the one gradient tensor autograd needs, a block of rows at a time.

Same arguments and result as transformers' ForCausalLMLoss: labels shifted by one inside (or `shift_labels` given),
`ignore_index` (-100) positions count for nothing, the mean over counted positions, or the sum divided by
`num_items_in_batch` when given (gradient accumulation over token counts, as Trainer and our loop pass it). The
arithmetic is float32 whatever the logits' dtype. Tests compare loss and gradient with transformers' function.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Rows per block: ~4M logits (16 MB of float32) at a time, whatever the vocabulary.
_BLOCK_ELEMENTS = 1 << 22


def _row_blocks(rows: int, vocab_size: int) -> list[slice]:
    block = max(1, _BLOCK_ELEMENTS // vocab_size)
    return [slice(start, min(start + block, rows)) for start in range(0, rows, block)]


class _CrossEntropySum(torch.autograd.Function):
    """sum over rows with target != ignore_index of logsumexp(logits[row]) - logits[row, target], divided by
    `denominator` (a tensor)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, denominator: torch.Tensor):
        counted = targets != ignore_index
        picked = targets.masked_fill(~counted, 0)  # any valid column for ignored rows; they are zeroed below
        log_sum_exp = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        for rows in _row_blocks(*logits.shape):
            log_sum_exp[rows] = torch.logsumexp(logits[rows].float(), dim=-1)
        target_logits = logits.gather(1, picked[:, None]).squeeze(1).float()
        losses = (log_sum_exp - target_logits).masked_fill_(~counted, 0.0)
        ctx.save_for_backward(logits, picked, counted, log_sum_exp, denominator)
        return losses.sum() / denominator

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        logits, picked, counted, log_sum_exp, denominator = ctx.saved_tensors
        # d loss / d logits[row] = (softmax(logits[row]) - onehot(target)) * grad_loss / denominator, 0 if ignored
        row_scale = counted.float() * (grad_loss / denominator)
        grad = torch.empty_like(logits)
        in_place = logits.dtype == torch.float32  # float32: computed straight into the gradient's rows
        for rows in _row_blocks(*logits.shape):
            if in_place:
                probabilities = torch.sub(logits[rows], log_sum_exp[rows, None], out=grad[rows])
            else:  # through a float32 block, cast on the way into the gradient
                probabilities = logits[rows].float() - log_sum_exp[rows, None]
            probabilities.exp_()
            probabilities[torch.arange(probabilities.shape[0], device=logits.device), picked[rows]] -= 1.0
            probabilities.mul_(row_scale[rows, None])
            if not in_place:
                grad[rows] = probabilities
        return grad, None, None, None


def causal_lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    vocab_size: int,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    shift_labels: torch.Tensor | None = None,
    **kwargs,
) -> torch.Tensor:
    """transformers.loss.loss_utils.ForCausalLMLoss's signature and value (see the module docstring)."""
    if shift_labels is None:
        labels = F.pad(labels, (0, 1), value=ignore_index)  # tokens < n predict n; the last predicts nothing
        shift_labels = labels[..., 1:]
    logits = logits.reshape(-1, vocab_size)
    targets = shift_labels.reshape(-1).to(logits.device)
    if num_items_in_batch is None:
        denominator = (targets != ignore_index).sum().float()  # F.cross_entropy's mean: 0/0 = nan when none count
    else:
        denominator = torch.as_tensor(num_items_in_batch, dtype=torch.float32, device=logits.device)
    return _CrossEntropySum.apply(logits, targets, ignore_index, denominator)
