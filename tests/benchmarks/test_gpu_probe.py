"""benchmarks/gpu_probe.py without a GPU: its chunked hidden-state loss against transformers' loss, its kernel
classes, and a --smoke run on the CPU. Speed is never asserted."""

import json

import pytest
import torch
from transformers.loss.loss_utils import ForCausalLMLoss

from benchmarks import gpu_probe
from benchmarks.linear_cross_entropy import linear_cross_entropy


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("num_items_in_batch", [None, 40])
def test_the_chunked_loss_gives_transformers_loss_and_gradients(autocast, num_items_in_batch):
    """The probe's candidate is timed only if it computes the same thing: padded vocabulary rows get no logits and
    no gradient, -100 is ignored, the shift is by one, chunks do not divide the rows evenly."""
    torch.manual_seed(0)
    hidden = torch.randn(3, 17, 32, requires_grad=True)
    weight = torch.randn(128, 32, requires_grad=True)  # vocabulary 100, padded to 128
    labels = torch.randint(0, 100, (3, 17))
    labels[0, :5] = -100
    items = None if num_items_in_batch is None else torch.tensor(num_items_in_batch)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        want = ForCausalLMLoss((hidden @ weight.T)[..., :100], labels, 100, num_items_in_batch=items)
    want.backward()
    want_hidden, want_weight = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        got = linear_cross_entropy(hidden, weight, labels, 100, num_items_in_batch=items, rows_per_chunk=7)
    (2 * got).backward()  # backward scales the gradients it computed in forward by the incoming one
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    tolerance = {"rtol": 2e-2, "atol": 5e-3} if autocast else {"rtol": 1e-5, "atol": 1e-6}
    torch.testing.assert_close(hidden.grad / 2, want_hidden, **tolerance)
    torch.testing.assert_close(weight.grad / 2, want_weight, **tolerance)
    assert weight.grad[100:].abs().max() == 0


@pytest.mark.parametrize("name, kind", [
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "matmul"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26", "attention"),
    ("triton_red_fused__log_softmax__to_copy_add", "triton"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>", "loss/softmax"),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda>", "elementwise"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
])
def test_kernels_are_sorted_into_kinds_by_name(name, kind):
    assert gpu_probe.kernel_kind(name) == kind


def test_a_smoke_run_writes_the_variants_with_their_ratio_to_nanogpt(tmp_path):
    out = gpu_probe.main(["--smoke", "--parts", "variants", "--contenders", "nanoGPT,ours,ours+chunk4096",
                          "--out", str(tmp_path)])
    result = json.loads(out.read_text())
    assert (tmp_path / "gpu_probe.png").is_file()
    assert result["meta"]["device_type"] == "cpu" and result["meta"]["date_utc"]
    for mode in ("variants_compiled", "variants_eager"):
        rows = result["parts"][mode]["rows"]
        assert rows.keys() == {"nanoGPT", "ours", "ours+chunk4096"}
        assert rows["nanoGPT"]["ratio_to_nanogpt"] == 1.0 and all(r["tokens_per_s"] > 0 for r in rows.values())
        assert result["parts"][mode]["profiles"]["ours"]["wall_ms_per_step"] > 0


def test_a_budget_contender_compiles_anew_and_saves_less_for_backward():
    """The activation-memory-budget candidates are timed only if each one is partitioned under its own budget:
    dynamo would otherwise reuse the first compiled instance of the class (one budget for all). The min-cut
    partitioner behind inductor also runs in the `aot_eager_decomp_partition` backend, so the CPU shows it."""
    import argparse

    from torch._dynamo.utils import counters

    from benchmarks import bench_gpu

    torch._dynamo.reset()
    args = argparse.Namespace(device=torch.device("cpu"), shape=bench_gpu.SMOKE_SHAPE,
                              compile_backend="aot_eager_decomp_partition")
    saved, graphs = {}, {}
    for label in ("ours", "ours+budget0.5", "ours+budget0.3", "ours"):
        contender = gpu_probe.Contender(label, 2, args, compiled=True)
        sizes = []

        def keep(tensor, sizes=sizes):
            sizes.append(tensor.numel() * tensor.element_size())
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor), contender.step_context():
            contender.forward(input_ids=contender.input_ids, labels=contender.input_ids)
        saved[label], graphs[label] = sum(sizes), counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    assert saved["ours"] > saved["ours+budget0.5"] > saved["ours+budget0.3"]
    assert graphs["ours+budget0.3"] == graphs["ours+budget0.5"] + 1  # compiled anew; plain "ours" then reused


def test_compile_candidates_reach_torch_compile_and_inductor(monkeypatch):
    """A compile-mode candidate is timed only if its mode reaches torch.compile on the inductor backend (other
    backends take none), and an inductor option only if it is set while the step runs (and compiles) and unset
    after, so the next contender compiles with the defaults."""
    import argparse

    import torch._inductor.config as inductor_config

    from benchmarks import bench_gpu

    modes = []
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: modes.append(kwargs.get("mode")) or model)
    for backend in ("inductor", "aot_eager"):
        args = argparse.Namespace(device=torch.device("cpu"), shape=bench_gpu.SMOKE_SHAPE, compile_backend=backend)
        for label in ("ours", "ours+autotune", "ours+cudagraphs", "nanoGPT+cudagraphs"):
            gpu_probe.Contender(label, 2, args, compiled=True)
    assert modes == [None, "max-autotune-no-cudagraphs", "reduce-overhead", "reduce-overhead", None, None, None, None]

    contender = gpu_probe.Contender("ours+coordinate_descent", 2, args, compiled=False)
    assert not inductor_config.coordinate_descent_tuning
    with contender.step_context():
        assert inductor_config.coordinate_descent_tuning
    assert not inductor_config.coordinate_descent_tuning
    for group in (gpu_probe.COMPILE_CANDIDATES, gpu_probe.MEMORY_CANDIDATES):
        assert set(group) <= set(gpu_probe.CONTENDERS) and group[0] == "nanoGPT"  # each side by side with nanoGPT
    # ours is timed as the training loop calls it (the loss alone), "ours+logits" as it was called before
    assert gpu_probe.Contender("ours", 2, args, compiled=False).loss_alone
    assert not gpu_probe.Contender("ours+logits", 2, args, compiled=False).loss_alone
    assert not gpu_probe.Contender("nanoGPT", 2, args, compiled=False).loss_alone
    # dynamo reuses a compiled forward across instances of one class: every candidate but the plain models has a
    # class of its own, so it compiles under its own settings
    classes = {label: type(gpu_probe.Contender(label, 2, args, compiled=False).model)
               for label in (*gpu_probe.COMPILE_CANDIDATES, *gpu_probe.MEMORY_CANDIDATES)}
    assert len(set(classes.values())) == len(classes)
