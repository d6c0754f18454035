"""Dropout whose CPU mask is one uniform draw and a compare, for the model's residual, embedding and attention dropout.

On CPU, `F.dropout` spends most of its time drawing the mask (`bernoulli_`): 35 ms for a 3.1M-element attention
map at 2 threads on an AMD EPYC (Zen 3), where `torch.rand_like(x) >= p` takes 14 ms. With GPT-2's dropout of 0.1
`bernoulli_` was 14% of a training step of the benchmarks' small model in torch.profiler, `uniform_` is 8%; whole
steps measured ~3% faster, within that machine's noise (benchmarks/results/NOTES.md). The arithmetic
is dropout's: each element is kept with probability 1 - p and scaled by 1 / (1 - p); the gradient is the same mask
times the same scale. The mask comes from torch's default generator, so `torch.manual_seed` reproduces it and
gradient checkpointing's recomputation (which restores the RNG state) draws the same one.

Only on CPU: CUDA's native dropout is one fused kernel, faster than a draw, a compare and a multiply. The choice
is by device, not timed per machine like onednn_linear.py, so that one seed gives one mask on a given machine.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _KeepAndScale(torch.autograd.Function):
    """x · keep · scale, saving only the boolean mask (1 byte per element, as native dropout) for the backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(keep).mul_(scale)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return grad_output.mul(keep).mul_(ctx.scale), None, None


# Where the mask is drawn as `rand >= p`; elsewhere F.dropout's own. A test empties it to check, against transformers'
# GPT-2 and the same seed, that each dropout sits at GPT-2's place: only native masks can match GPT-2's bit for bit.
UNIFORM_MASK_DEVICES = ("cpu",)


def draws_uniform_mask(x: torch.Tensor) -> bool:
    """True when dropout on `x` draws its mask here rather than through F.dropout."""
    return x.device.type in UNIFORM_MASK_DEVICES


def apply_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """`F.dropout(x, p, training)`, with the mask drawn as `rand >= p` on CPU (see the module docstring)."""
    if not training or p == 0.0:
        return x
    if not draws_uniform_mask(x) or p >= 1.0:
        return F.dropout(x, p=p, training=True)
    keep = torch.rand_like(x) >= p
    return _KeepAndScale.apply(x, keep, 1.0 / (1.0 - p))


class GPTCustomDropout(nn.Dropout):
    """nn.Dropout (same `p`, no state; PEFT and other code that looks for nn.Dropout still finds it) computed by
    `apply_dropout` above."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inplace:  # nn.Dropout(inplace=True) semantics are not ours to change; the model never asks for it
            return super().forward(x)
        return apply_dropout(x, self.p, self.training)


def sdpa_mask_as_additive(
    attention_mask: torch.Tensor | None, q_len: int, kv_len: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor | None:
    """The mask transformers built for sdpa, in eager attention's additive form (0 = attend, dtype-min = not), so
    that attention with dropout on CPU can run the textbook arithmetic with the mask above.

    sdpa's conventions (transformers' sdpa_attention_forward): a boolean mask is True where a query may attend; no
    mask means causal when there is more than one query (top-left aligned, as torch's `is_causal`) and everything
    otherwise (one decoding query); a float mask is already additive.
    """
    if attention_mask is None:
        if q_len == 1:
            return None
        allowed = torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril()
        attention_mask = allowed.view(1, 1, q_len, kv_len)
    if attention_mask.dtype == torch.bool:
        blocked = torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=device)
        return torch.where(attention_mask, torch.zeros((), dtype=dtype, device=device), blocked)
    return attention_mask
