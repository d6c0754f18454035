"""fp32 linear layers through oneDNN on CPU: the same arithmetic as `F.linear`, about twice as fast here.

PyTorch sends fp32 CPU matmuls to MKL. On this machine's AMD EPYC (AVX-512 with full-width units) MKL's sgemm
runs ~95 GFLOP/s on one thread while oneDNN, which PyTorch also ships, reaches ~205 GFLOP/s on the same shapes
(benchmarks/results/NOTES.md). oneDNN is still IEEE fp32 — only the summation order differs, ~1e-6 relative —
so losses and generated tokens stay those of `F.linear`. PyTorch only routes fp32 matmuls to oneDNN when reduced
precision (bf16/tf32) is allowed, hence this small autograd function around its linear kernel.

Used only where it is the same computation: fp32 on an x86 CPU, no autocast (which wants its bf16 kernels), not under
torch.compile/torch.export (inductor has its own CPU lowering) or torch.jit.trace. Everything else, and CUDA, goes to `F.linear`. Switch it off for
A/B comparisons with `use_onednn_linear(False)` or `HF_GPT_CUSTOM_ONEDNN=0` in the environment.

Inference (no autograd) also keeps each weight reordered once into oneDNN's blocked layout, so a call does not
repack it: 1.5x faster again for the 1-8 rows of a decoding step (124M model, 1 thread: 15 ms per token for all
linear layers vs 23 ms unpacked and 29 ms with MKL). The price is a second copy of the weights while the model
is used for inference; it is dropped at the next forward with autograd on, or with `pack_weights=False`.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn


def _onednn_linear_kernel():
    # x86 only: there oneDNN has its own AVX2/AVX-512 kernels; on ARM it wraps other libraries, not measured here.
    if not torch.backends.mkldnn.is_available() or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        return torch.ops.mkldnn._linear_pointwise.default  # (x, weight (out, in), bias, "none", [], "") -> x @ weightᵀ + bias
    except (AttributeError, RuntimeError):  # a build without the op
        return None


_KERNEL = _onednn_linear_kernel()
_enabled = os.environ.get("HF_GPT_CUSTOM_ONEDNN", "1") != "0"
_pack_weights = True


def use_onednn_linear(enabled: bool = True, pack_weights: bool = True) -> None:
    """Route fp32 CPU linear layers through oneDNN (True, the default) or through `F.linear` (False).

    `pack_weights=False` skips the inference-time copy of the weights in oneDNN's layout (less memory, slower
    decoding).
    """
    global _enabled, _pack_weights
    _enabled, _pack_weights = enabled, pack_weights


def onednn_linear_active() -> bool:
    return _enabled and _KERNEL is not None


def matmul_t(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weightᵀ (+ bias) by oneDNN, fp32 CPU, no autograd; x may have leading batch dimensions, both may be
    transposed views. Only when `onednn_linear_active()`."""
    return _KERNEL(x, weight, bias, "none", [], "")


class _OneDNNLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return matmul_t(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_2d = grad_output.reshape(-1, grad_output.shape[-1])  # (tokens, out)
        grad_x = grad_weight = grad_bias = None
        # Transposed views, not copies: a contiguous copy is ~10% faster but would add the lm_head's
        # (tokens x vocab) gradient a second time to peak memory.
        if ctx.needs_input_grad[0]:
            grad_x = matmul_t(grad_output, weight.t())  # grad @ weight
        if ctx.needs_input_grad[1]:
            grad_weight = matmul_t(grad_2d.t(), x.reshape(-1, x.shape[-1]).t())  # gradᵀ @ x, (out, in)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_2d.sum(0)
        return grad_x, grad_weight, grad_bias


def _onednn_applies(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    return (
        _enabled
        and _KERNEL is not None
        and x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and (bias is None or bias.dtype == torch.float32)
        and x.numel() > 0
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()  # torch.compile / torch.export: inductor lowers F.linear itself
        and not torch.jit.is_tracing()  # torch.jit.trace and the TorchScript ONNX exporter know F.linear, not oneDNN
    )


def _identity(weight: torch.Tensor) -> tuple:
    """What must be unchanged for a packed copy of `weight` to be current.

    data_ptr changes when the weight is replaced or moved, _version on every in-place update (optimizer steps,
    load_state_dict, tie_weights), so a stale copy is never used. (Inference tensors have no version counter; they
    can only change inside inference mode.)
    """
    return weight.data_ptr(), None if weight.is_inference() else weight._version, weight.shape


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`, computed by oneDNN when that is the same fp32 computation (see module doc)."""
    if _onednn_applies(x, weight, bias):
        return _OneDNNLinearFunction.apply(x, weight, bias)
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """nn.Linear whose fp32 CPU forward (and backward) runs on oneDNN; same parameters, same state dict."""

    _packed: tuple | None = None  # (weight identity, weight in oneDNN's layout), for inference only

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if torch.is_grad_enabled():
            self._packed = None  # training again: free the inference copy (it would be stale after a step anyway)
        elif _pack_weights and _onednn_applies(input, weight, bias):
            return matmul_t(input, self._packed_weight(), bias)
        return linear(input, weight, bias)

    def _packed_weight(self) -> torch.Tensor:
        packed, identity = self._packed, _identity(self.weight)
        if packed is None or packed[0] != identity:
            self._packed = None  # free the old copy before making the new one
            packed = self._packed = (identity, torch.ops.mkldnn._reorder_linear_weight(self.weight.detach()))
        return packed[1]

    def frozen_forward(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """`self.forward` for a run of inference calls during which the weights do not change (a generate()
        decoding loop) on inputs of the weight's dtype and device: kernel chosen and weight packed once, here."""
        weight, bias = self.weight, self.bias
        if not torch.is_grad_enabled() and _pack_weights and _onednn_applies(weight, weight, bias):
            return partial(matmul_t, weight=self._packed_weight(), bias=bias)
        return self.forward

    def __getstate__(self):
        # The packed copy is a cache in an opaque oneDNN layout: not something to deepcopy or pickle.
        state = super().__getstate__()
        state.pop("_packed", None)
        return state
