"""The causal-LM loss computed from the hidden states, a block of rows at a time, so the logits never exist whole.

The (batch·seq, vocab) logits are a GPT-2-sized model's largest activation: at 16 × 1,024 × 50,304 they take 1.6 GB
in bf16, kept for the backward pass, plus their float32 copy in the loss and their gradient. Here the head's matmul
and the cross-entropy run together on `rows_per_chunk` rows at a time, and the gradients of the hidden states and the
head's weight are computed in the same pass (Liger-Kernel's fused linear cross-entropy, in plain torch: it runs on any
device and torch.compile takes it whole). Backward only scales those stored gradients by the incoming one.

The numbers are transformers' ForCausalLMLoss's: `labels` are the input ids (the shift by one happens here), -100 is
ignored, the loss is the mean over counted tokens, or their sum / `num_items_in_batch` when that is given (gradient
accumulation). Under autocast the head's matmul runs in the autocast dtype and the softmax in float32, as the
unfused path does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def shifted_targets(labels: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Position t predicts labels[t + 1]; the last position predicts nothing (ignore_index). Flattened."""
    return F.pad(labels, (0, 1), value=ignore_index)[..., 1:].reshape(-1)


def _compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    device_type = tensor.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return tensor.dtype


class _LinearCrossEntropy(torch.autograd.Function):
    """loss(hidden @ weightᵀ, targets) with the gradients computed in forward, one chunk of rows at a time."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, denominator, rows_per_chunk: int, ignore_index: int):
        compute_dtype = _compute_dtype(hidden)
        with torch.autocast(hidden.device.type, enabled=False):  # dtypes are chosen here, explicitly
            weight_c = weight.to(compute_dtype)
            loss = hidden.new_zeros((), dtype=torch.float32)
            grad_hidden = torch.empty_like(hidden)
            grad_weight = torch.zeros_like(weight, dtype=torch.float32)
            for start in range(0, hidden.shape[0], rows_per_chunk):
                rows = hidden[start:start + rows_per_chunk].to(compute_dtype)
                chunk_targets = targets[start:start + rows_per_chunk]
                counted = chunk_targets != ignore_index
                safe_targets = torch.where(counted, chunk_targets, 0)[:, None]
                logits = (rows @ weight_c.T).float()  # (rows, vocab)
                log_normalizer = torch.logsumexp(logits, dim=-1)
                target_logits = logits.gather(1, safe_targets).squeeze(1)
                loss = loss + torch.where(counted, log_normalizer - target_logits, 0.0).sum()
                # d loss / d logits = (softmax - one_hot(target)) / denominator on counted rows, 0 on ignored ones
                grad_logits = (logits - log_normalizer[:, None]).exp_()
                grad_logits.scatter_add_(1, safe_targets, torch.full_like(target_logits, -1.0)[:, None])
                grad_logits.mul_((counted / denominator)[:, None])
                grad_logits = grad_logits.to(compute_dtype)
                grad_hidden[start:start + rows_per_chunk] = (grad_logits @ weight_c).to(hidden.dtype)
                grad_weight += (grad_logits.T @ rows).float()
        ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        return loss / denominator

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_loss.to(grad_hidden.dtype), grad_weight * grad_loss.to(grad_weight.dtype), \
            None, None, None, None


def linear_cross_entropy(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    vocab_size: int,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = IGNORE_INDEX,
    rows_per_chunk: int = 4096,
) -> torch.Tensor:
    """The causal-LM loss of logits = hidden_states @ weight[:vocab_size]ᵀ without materialising them.

    hidden_states: (batch, seq, n_embd), the final norm's output. weight: the head's (padded_vocab, n_embd) matrix;
    padded rows beyond `vocab_size` get no logits and no gradient, as when the logits are cut. labels: (batch, seq).
    """
    targets = shifted_targets(labels, ignore_index).to(hidden_states.device)
    if num_items_in_batch is None:
        denominator = (targets != ignore_index).sum().float()  # a tensor: no read back to the host
    else:
        denominator = torch.as_tensor(num_items_in_batch, device=hidden_states.device).float()
    hidden = hidden_states.reshape(-1, hidden_states.shape[-1])
    return _LinearCrossEntropy.apply(hidden, weight[:vocab_size], targets, denominator, rows_per_chunk, ignore_index)
