"""The causal-LM loss, by device: the model's `loss_function` (transformers' ForCausalLMLoss), compiled on CUDA.

ForCausalLMLoss upcasts the logits to float32 before the softmax, on purpose (bf16 log-probabilities would round the
loss and its gradient). Run op by op, that is several full passes over a (batch·seq, vocab) float32 tensor: on an
H200, 6.5 ms of a 47 ms eager GPT-2 step at batch 16, against 2.7 ms for nanoGPT's loss, which keeps bf16
log-probabilities (benchmarks/results/gpu_probe.json). torch.compile of the same function fuses the upcast into the
softmax's reductions — the same float32 arithmetic in 2.4 ms — so on CUDA an eager model computes its loss through
a compiled copy of its loss function. Where the whole model is being compiled, the function is traced with it.

On the CPU the loss stays eager: compiled it is ~1.9x faster there (benchmarks/results/loss_threads2.json), but each
new shape costs a compilation (~13 s the first time, again for eval's shapes), which a CPU run of a few hundred steps
barely earns back. If
compiling fails (no working compiler, e.g. Triton missing), the loss is computed eagerly from then on, with one
warning naming the cause.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import torch

logger = logging.getLogger(__name__)

COMPILED_LOSS_DEVICES = ("cuda",)  # a test runs the compiled path on the CPU by setting ("cpu",)
COMPILE_BACKEND = "inductor"  # tests use "aot_eager": the same tracing, no kernels generated
_failed: set[Callable] = set()


@functools.cache
def _compiled(loss_function: Callable, backend: str) -> Callable:
    return torch.compile(loss_function, backend=backend, fullgraph=True)


def causal_lm_loss(loss_function: Callable, logits: torch.Tensor, labels: torch.Tensor, **kwargs) -> torch.Tensor:
    """`loss_function(logits, labels, **kwargs)`, compiled where that is the faster path (see the module docstring)."""
    if (logits.device.type not in COMPILED_LOSS_DEVICES or torch.compiler.is_compiling()
            or loss_function in _failed):
        return loss_function(logits, labels, **kwargs)
    try:
        return _compiled(loss_function, COMPILE_BACKEND)(logits, labels, **kwargs)
    except Exception as err:  # noqa: BLE001  the eager call below raises again if the inputs themselves are wrong
        loss = loss_function(logits, labels, **kwargs)
        _failed.add(loss_function)
        cause = getattr(err, "inner_exception", None) or err  # dynamo wraps the compiler's own error
        logger.warning("compiling the loss on %s failed (%s: %s); computing it eagerly from now on, which is slower "
                       "but gives the same numbers", logits.device.type, type(cause).__name__,
                       (str(cause).strip().splitlines() or [""])[0])
        return loss
