"""What a bf16 training step keeps for its backward pass, ours against nanoGPT's GPT with the same weights.

Peak training memory is parameters, optimizer state, and the tensors the forward saves for the backward; the last
is what a model's code decides. They are counted here with saved-tensor hooks, which see what eager autograd saves
and what a compiled graph saves (its partitioner picks those), so the comparison needs no GPU: the
`aot_eager_decomp_partition` backend partitions forward and backward as inductor does, without generating kernels.

What the GPU figures (benchmarks/results/gpu_results.md) rest on:
- compiled, ours saves what nanoGPT saves, to a byte per position (peak memory 1.00x on an H200): the bf16 logits,
  not float32 ones;
- eager on the CUDA path (the loss compiled, causal_lm_loss.py), ours saves no float32 copy of the logits, which
  nanoGPT's eager cross-entropy does (0.68x nanoGPT's peak on an H200); on the CPU path it saves one, as nanoGPT does.
"""

import pytest
import torch

from benchmarks.bench_gpu import build_model
from hf_gpt_custom import causal_lm_loss

SHAPE = {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 64, "vocab_size": 2048}
BATCH, SEQ = 2, 64
PARTITIONED = "aot_eager_decomp_partition"  # inductor's forward/backward partition, no kernels generated


def saved_for_backward(name: str, compiled: bool) -> list[torch.Tensor]:
    """The distinct tensors (by storage) one bf16-autocast training forward saves for its backward."""
    model = build_model(name, SHAPE, torch.device("cpu"))
    forward = torch.compile(model, backend=PARTITIONED, dynamic=False) if compiled else model
    input_ids = torch.randint(0, SHAPE["vocab_size"], (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    saved: dict[int, torch.Tensor] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.setdefault(tensor.untyped_storage().data_ptr(), tensor)
        return tensor

    for _ in range(2):  # the second step: compiled graphs are cached, eager is unchanged
        saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), \
                torch.autocast("cpu", dtype=torch.bfloat16):
            if name == "nanoGPT":
                loss = forward(input_ids, input_ids.roll(-1, dims=1))[1]
            else:
                loss = forward(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
    return list(saved.values())


def total_bytes(tensors: list[torch.Tensor]) -> int:
    return sum(tensor.untyped_storage().nbytes() for tensor in tensors)


def float32_logits(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Saved float32 tensors holding a value per (position, vocabulary entry): an upcast copy of the logits."""
    return [t for t in tensors if t.dtype == torch.float32 and t.dim() and t.shape[-1] == SHAPE["vocab_size"]
            and t.numel() >= BATCH * (SEQ - 1) * SHAPE["vocab_size"]]


@pytest.fixture
def cuda_loss_path(monkeypatch):
    monkeypatch.setattr(causal_lm_loss, "COMPILED_LOSS_DEVICES", ("cpu",))
    monkeypatch.setattr(causal_lm_loss, "COMPILE_BACKEND", PARTITIONED)
    causal_lm_loss._compiled.cache_clear()
    yield
    causal_lm_loss._compiled.cache_clear()


def test_compiled_ours_saves_what_nanogpt_saves_and_no_float32_logits():
    ours, nano = saved_for_backward("ours", compiled=True), saved_for_backward("nanoGPT", compiled=True)
    # the only extra: transformers' loss keeps which positions count (labels != -100), a byte per position
    assert total_bytes(ours) <= total_bytes(nano) + BATCH * SEQ
    assert not float32_logits(ours) and not float32_logits(nano)
    bf16_logits = BATCH * SEQ * SHAPE["vocab_size"] * 2
    assert any(t.dtype == torch.bfloat16 and t.untyped_storage().nbytes() == bf16_logits for t in ours)


def test_eager_on_the_cuda_path_saves_no_float32_copy_of_the_logits(cuda_loss_path):
    ours, nano = saved_for_backward("ours", compiled=False), saved_for_backward("nanoGPT", compiled=False)
    assert float32_logits(nano), "nanoGPT's eager cross-entropy saves float32 log-probabilities"
    assert not float32_logits(ours)
    assert total_bytes(nano) - total_bytes(ours) >= BATCH * (SEQ - 1) * SHAPE["vocab_size"] * 4 // 2


def test_eager_on_the_cpu_path_saves_the_float32_log_probabilities_as_nanogpt_does():
    """The CPU keeps transformers' eager loss (measured faster there): the control that shows the test above can
    fail, as it would if the CUDA path stopped compiling the loss."""
    ours = saved_for_backward("ours", compiled=False)
    assert float32_logits(ours)
