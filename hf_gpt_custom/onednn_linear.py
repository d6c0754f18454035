"""oneDNN's packed fp32 linear kernel for generate()'s decoding loop, used only where a timing on this machine wins.

The model's linear layers are plain `nn.Linear` (F.linear, which PyTorch sends to MKL on CPU). Only inside one
generate() decoding loop, while no weight can change, `decoding_linear` may hand DecodeStep oneDNN's kernel on a
copy of the weight reordered into oneDNN's blocked layout; the copy is dropped when the loop ends. Whether that
pays depends on the CPU (≈2x on one AVX-512 EPYC, 0.83-1.9x across 1-8-row shapes on a Zen 3 EPYC), so each
shape (rows, in, out, dtype, threads) is timed once per process against F.linear, like cuDNN's benchmark mode,
and oneDNN is used only when it measured clearly faster; the choice is logged once at info level.

Training and every other forward stay on F.linear: at training shapes oneDNN measured 0.84-0.99x MKL on Zen 3.
`use_onednn_linear(False)` or `HF_GPT_CUSTOM_ONEDNN=0` switches the kernel off; builds without the private ops
`torch.ops.mkldnn._linear_pointwise` / `_reorder_linear_weight`, non-x86 CPUs, other devices, other dtypes,
autocast and torch.compile all get F.linear.
"""

from __future__ import annotations

import logging
import os
import platform
import time
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

logger = logging.getLogger(__name__)

# oneDNN must beat F.linear by this factor before it is used, so timing noise cannot pick the slower kernel.
REQUIRED_SPEEDUP = 1.05


def _onednn_kernels():
    # x86 only: there oneDNN has its own AVX2/AVX-512 kernels; on ARM it wraps other libraries, not measured here.
    if not torch.backends.mkldnn.is_available() or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        # _linear_pointwise(x, weight (out, in), bias, "none", [], "") = x @ weightᵀ + bias, weight plain or packed
        return torch.ops.mkldnn._linear_pointwise.default, torch.ops.mkldnn._reorder_linear_weight
    except (AttributeError, RuntimeError):  # a build without the ops
        return None


_KERNELS = _onednn_kernels()
_enabled = os.environ.get("HF_GPT_CUSTOM_ONEDNN", "1") != "0"
_speedups: dict[tuple, float] = {}  # (rows, in, out, dtype, threads) -> F.linear time / oneDNN time, measured once


def use_onednn_linear(enabled: bool = True) -> None:
    """Allow (True, the default) or forbid (False) oneDNN's packed kernel in generate()'s decoding steps."""
    global _enabled
    _enabled = enabled


def onednn_linear_active() -> bool:
    return _enabled and _KERNELS is not None


def matmul_t(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weightᵀ (+ bias) by oneDNN, fp32 CPU, no autograd; `weight` plain or packed by `pack_weight`.
    Only when `onednn_linear_active()`."""
    return _KERNELS[0](x, weight, bias, "none", [], "")


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """A copy of `weight` (out, in) in oneDNN's blocked layout, for `matmul_t`."""
    return _KERNELS[1](weight.detach())


def _applies(weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    return (
        onednn_linear_active()
        and weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and (bias is None or bias.dtype == torch.float32)
        and not torch.is_grad_enabled()
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
        and not torch.jit.is_tracing()
    )


def decoding_linear(layer: nn.Linear, rows: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """`layer`'s computation for inputs of `rows` rows during one decoding loop, whose weights cannot change.

    oneDNN on a packed copy of the weight where a one-time timing of this shape says it is faster, else F.linear on
    the layer's own parameters. The packed copy lives as long as the returned function, no longer.
    """
    weight, bias = layer.weight, layer.bias
    plain = partial(F.linear, weight=weight, bias=bias)
    if not _applies(weight, bias):
        return plain
    key = (rows, weight.shape[1], weight.shape[0], weight.dtype, torch.get_num_threads())
    fast = None
    if key not in _speedups:
        # A private generator: timing must not move the global RNG that seeded sampling depends on.
        sample = torch.randn(rows, weight.shape[1], dtype=weight.dtype, generator=torch.Generator().manual_seed(0))
        fast = partial(matmul_t, weight=pack_weight(weight), bias=bias)
        _speedups[key] = measure_speedup(plain, fast, sample)
        chosen = "oneDNN (packed)" if _speedups[key] >= REQUIRED_SPEEDUP else "F.linear"
        logger.info(
            "decoding linear %d rows x %d -> %d, %d threads: oneDNN %.2fx F.linear, using %s",
            rows, weight.shape[1], weight.shape[0], key[-1], _speedups[key], chosen,
        )
    if _speedups[key] < REQUIRED_SPEEDUP:
        return plain  # no packed copy: reordering every weight on every generate() call costs ~0.1 s per 100M weights
    return fast or partial(matmul_t, weight=pack_weight(weight), bias=bias)  # the timed copy, if this call made one


def measure_speedup(plain: Callable, fast: Callable, x: torch.Tensor, rounds: int = 7) -> float:
    """Median over `rounds` of (time of `plain(x)`) / (time of `fast(x)`), the two interleaved so that a burst of
    load on a shared machine hits both; each timed batch lasts about a millisecond."""
    for _ in range(2):  # warm-up: first calls pay allocation and kernel selection
        plain(x), fast(x)
    start = time.perf_counter()
    plain(x)
    calls = max(1, int(1e-3 / max(time.perf_counter() - start, 1e-7)))
    ratios = []
    for _ in range(rounds):
        timings = []
        for function in (plain, fast):
            start = time.perf_counter()
            for _ in range(calls):
                function(x)
            timings.append(time.perf_counter() - start)
        ratios.append(timings[0] / timings[1])
    return sorted(ratios)[rounds // 2]
