"""Which device and precision a run trains with, decided before the run folder is touched: `mixed_precision: auto`
is bf16 on a GPU with bf16 units and fp32 elsewhere, and a request this machine cannot meet (bf16 on an older GPU,
fp16 on a CPU, a GPU that is not there, torch.compile without its compiler) is one line naming the fix. GPUs are
stood in for by patching torch.cuda: the decisions are what is tested, on any machine."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.config import REPO_ROOT
from hf_gpt_custom.training.devices import (
    check_compiler_available, resolve_mixed_precision, training_device_type,
)


@pytest.fixture
def gpu(monkeypatch):
    """A stand-in GPU: `gpu(name, capability, count=1)` makes torch.cuda report it."""

    def install(name="NVIDIA H100 80GB HBM3", capability=(9, 0), count=1):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: name)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: capability)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                            lambda including_emulation=True: capability[0] >= 8)

    return install


def test_auto_is_bf16_on_a_gpu_with_bf16_units_and_fp32_elsewhere(gpu):
    assert resolve_mixed_precision("auto", "cpu") == "no"
    gpu(capability=(9, 0))
    assert resolve_mixed_precision("auto", "cuda") == "bf16"
    gpu(name="Tesla V100-SXM2-16GB", capability=(7, 0))
    assert resolve_mixed_precision("auto", "cuda") == "no"
    assert resolve_mixed_precision("fp16", "cuda") == "fp16" and resolve_mixed_precision("no", "cuda") == "no"


def test_bf16_on_a_gpu_without_bf16_units_names_the_gpu_and_the_fix(gpu):
    gpu(name="Tesla V100-SXM2-16GB", capability=(7, 0))
    with pytest.raises(UserError, match=r"mixed_precision=bf16 but Tesla V100-SXM2-16GB \(compute capability 7\.0\) "
                                        r"has no bf16 units .*; use mixed_precision=fp16, or auto"):
        resolve_mixed_precision("bf16", "cuda")


def test_a_gpu_launch_on_a_machine_without_a_gpu_says_it_trains_on_the_cpu(monkeypatch, caplog):
    """accelerate launch --config_file multi_gpu_ddp.yaml where torch sees no GPU trained 8 CPU processes over gloo
    without a word. A CPU launch that says so (cpu=true, a one-process --cpu, or GPUs hidden as
    cpu_two_processes.yaml hides them) stays quiet, as does one process."""
    import logging

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("RANK", "0")
    with caplog.at_level(logging.WARNING, logger="hf_gpt_custom.training.devices"):
        assert training_device_type(None) == "cpu"
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith("8 processes were launched and torch sees no GPU: training on the CPU (gloo)")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_gpt_custom.training.devices"):
        assert training_device_type(True) == "cpu"
        monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
        assert training_device_type(None) == "cpu"
        monkeypatch.delenv("ACCELERATE_USE_CPU")
        for hidden in ("-1,-1", "-1", ""):
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
            assert training_device_type(None) == "cpu"
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
        monkeypatch.setenv("WORLD_SIZE", "1")
        assert training_device_type(None) == "cpu"
    assert not caplog.records


def test_a_gpu_launch_that_cannot_use_a_gpu_says_so(monkeypatch, caplog):
    """fsdp.yaml where torch sees no GPU trains plain DDP on gloo (accelerate shards on GPUs only); one_gpu_bf16.yaml
    (CUDA_VISIBLE_DEVICES=0) with a CPU-only torch trained on the CPU without a word."""
    import logging

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    for name in ("ACCELERATE_USE_CPU", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # what the launcher exports for fsdp.yaml
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with caplog.at_level(logging.WARNING, logger="hf_gpt_custom.training.devices"):
        assert training_device_type(None) == "cpu"
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "training on the CPU (gloo). FSDP is off there (accelerate shards on GPUs only)" in warning
    caplog.clear()
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # one_gpu_bf16.yaml's gpu_ids
    with caplog.at_level(logging.WARNING, logger="hf_gpt_custom.training.devices"):
        assert training_device_type(None) == "cpu"
        assert training_device_type(True) == "cpu"  # the CPU asked for: quiet
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")  # hidden on purpose: quiet
        assert training_device_type(None) == "cpu"
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith("CUDA_VISIBLE_DEVICES=0 names a GPU, but this torch was built without CUDA: training "
                              "on the CPU. Install a CUDA build of torch")


def test_fp16_on_a_cpu_is_refused_with_the_fix():
    with pytest.raises(UserError, match="mixed_precision=fp16 needs a GPU .*; use mixed_precision=no or bf16"):
        resolve_mixed_precision("fp16", "cpu")


def test_a_gpu_that_is_not_there_is_named(gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with pytest.raises(UserError, match="CUDA_VISIBLE_DEVICES=3 names no GPU this machine has"):
        training_device_type(None)
    assert training_device_type(True) == "cpu"  # asked for the CPU: no GPU needed
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert training_device_type(None) == "cpu"
    with pytest.raises(UserError, match="cpu=false asks for a GPU, but no CUDA device is visible; set cpu=true"):
        training_device_type(False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1,-1")  # hidden on purpose: the CPU, no complaint about the index
    assert training_device_type(None) == "cpu"
    with pytest.raises(UserError, match="cpu=false asks for a GPU, but CUDA_VISIBLE_DEVICES=-1,-1 hides every GPU"):
        training_device_type(False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    gpu(count=1)
    monkeypatch.setenv("LOCAL_RANK", "3")  # a launch with 4 processes on a one-GPU machine
    with pytest.raises(UserError, match="LOCAL_RANK=3 has no GPU of its own: this machine shows 1 .*--num_processes 1"
                                        r".*for processes on the CPU, hide the GPUs \(CUDA_VISIBLE_DEVICES=-1"):
        training_device_type(None)
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert training_device_type(None) == "cuda"


def test_a_cpu_launch_trains_on_the_cpu_of_a_gpu_machine(gpu, monkeypatch):
    """A one-process accelerate launch with --cpu (or use_cpu: true) sets ACCELERATE_USE_CPU, which Accelerator()
    obeys whatever it is given: the run must choose the CPU too, not a GPU. (A multi-process launch does not pass it
    on: test_multiprocess.py holds the shipped CPU config to hiding the GPUs instead.)"""
    gpu(count=1)
    monkeypatch.setenv("LOCAL_RANK", "1")  # the second of two CPU ranks on a one-GPU machine
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")  # what accelerate's simple launcher writes
    assert training_device_type(None) == "cpu" and training_device_type(True) == "cpu"
    with pytest.raises(UserError, match="cpu=false asks for a GPU, but the launcher asks for the CPU .*drop one"):
        training_device_type(False)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "False")  # a GPU launch: the rank needs a GPU of its own
    with pytest.raises(UserError, match="LOCAL_RANK=1 has no GPU of its own"):
        training_device_type(None)


def test_compile_without_its_compiler_is_named(monkeypatch):
    import torch._inductor.cpp_builder as cpp_builder
    import torch.utils._triton as triton_utils

    def no_compiler():
        raise RuntimeError("no working C++ compiler found")

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", no_compiler)
    with pytest.raises(UserError, match="compile=true but torch.compile finds no C\\+\\+ compiler for the CPU .*; "
                                        "install one .* or set compile=false"):
        check_compiler_available("cpu")
    monkeypatch.setattr(triton_utils, "has_triton", lambda: False)
    with pytest.raises(UserError, match="compile=true but Triton, which torch.compile needs on a GPU, is not "
                                        "installed .*; pip install triton .* or set compile=false"):
        check_compiler_available("cuda")


DEVICE_REQUESTS = {  # override -> what the one line says
    "cpu=false": "cpu=false asks for a GPU, but",
    "mixed_precision=fp16": "mixed_precision=fp16 needs a GPU",
    "mixed_precision=fp32": "mixed_precision: unknown value 'fp32'",
}
COMMANDS = ("train", "run")  # run: refused before its tokenizer stage, not after it

# Each case in a process of its own, as a user's command runs (no accelerate state made before it): one driver
# imports the CLI and the libraries it loads once, then forks a child per case with its stderr in a file.
_DRIVER = """
import json, os, sys
import accelerate, datasets, torch, transformers  # noqa: F401  (loaded once, before the children are forked)
import hf_gpt_custom.run, hf_gpt_custom.training.train  # noqa: F401
from hf_gpt_custom.cli import main
for index, args in enumerate(json.loads(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.path.join(sys.argv[2], "%d.err" % index), os.O_WRONLY | os.O_CREAT), 2)
        try:
            main(args)
            code = 0
        except SystemExit as exited:
            code = exited.code if isinstance(exited.code, int) else 1
        sys.stderr.flush()
        os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


@pytest.fixture(scope="module")
def device_requests(tmp_path_factory):
    """{(command, override): (exit status, stderr, the run folder)} for every case, from one driver process."""
    import json

    tmp_path = tmp_path_factory.mktemp("device_requests")
    cases = [(command, override) for command in COMMANDS for override in DEVICE_REQUESTS]
    arguments = [[command, str(REPO_ROOT / "training" / "configs" / "smoke.yaml"), f"out_dir={tmp_path / str(index)}",
                  override] for index, (command, override) in enumerate(cases)]
    (tmp_path / "driver.py").write_text(_DRIVER)
    completed = subprocess.run([sys.executable, str(tmp_path / "driver.py"), json.dumps(arguments), str(tmp_path)],
                               capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-2000:]
    # what importing the libraries printed (a warning a user would see as a line of its own) is no child's
    assert completed.stderr == "", completed.stderr[-2000:]
    codes = [int(line) for line in completed.stdout.split()]
    return {case: (codes[index], (tmp_path / f"{index}.err").read_text(), tmp_path / str(index))
            for index, case in enumerate(cases)}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("override", DEVICE_REQUESTS)
def test_the_cli_names_a_device_request_this_machine_cannot_meet_in_one_line(device_requests, override, command):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the requests are valid here")
    code, stderr, run_folder = device_requests[command, override]
    assert code == 2, stderr[-2000:]
    assert DEVICE_REQUESTS[override] in stderr and len(stderr.strip().splitlines()) == 1
    assert not run_folder.exists()  # refused before the run folder was made


def test_auto_trains_in_fp32_on_a_cpu_and_records_what_it_chose(make_config):
    import yaml

    from hf_gpt_custom.training.train import train

    run_dir = train(make_config("mixed_precision=auto", "cpu=true", "max_steps=1", "warmup_steps=0",
                                "eval_interval=1", "eval_batches=1"))
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["mixed_precision"] == "no"


@pytest.mark.parametrize("name, mixed_precision, expected", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989e12),
    ("NVIDIA H100 PCIe", "bf16", 756e12),  # the narrower name wins over "H100"
    ("NVIDIA A100-SXM4-80GB", "fp16", 312e12),
    ("NVIDIA H100 80GB HBM3", "no", None),  # fp32 on a GPU: no datasheet figure taken, so no MFU
    ("Some Future GPU", "bf16", None),  # unlisted: no MFU rather than a CPU figure ~1,000x too small
])
def test_the_mfu_denominator_on_a_gpu_is_its_datasheet_peak_or_none(gpu, name, mixed_precision, expected):
    from types import SimpleNamespace

    from hf_gpt_custom.training.train import Session

    gpu(name)
    session = SimpleNamespace(config=SimpleNamespace(peak_flops=None, mixed_precision=mixed_precision),
                              accelerator=SimpleNamespace(device=torch.device("cuda", 0), num_processes=1))
    assert Session.peak_flops.fget(session) == expected
    if expected is None:
        assert Session.mfu(SimpleNamespace(peak_flops=None), 1e6) is None


def test_the_mfu_denominator_on_a_cpu_is_a_matmul_measured_at_the_runs_threads_and_a_set_peak_wins():
    """A fixed 420 GFLOP/s was 4.4x what this project's CPU reaches on one thread, so every CPU MFU was that much too
    low. Reference: a 2048³ float32 product timed here, at the thread count the run uses."""
    import time
    from types import SimpleNamespace

    from hf_gpt_custom.training.devices import measured_cpu_peak_flops
    from hf_gpt_custom.training.train import Session

    cpu = SimpleNamespace(device=torch.device("cpu"), num_processes=1)
    default = SimpleNamespace(config=SimpleNamespace(peak_flops=None, mixed_precision="no"), accelerator=cpu)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    ratios = []
    try:
        a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
        torch.mm(a, b)

        def time_here():
            best = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                torch.mm(a, b)
                best = min(best, time.perf_counter() - started)
            return 2 * 2048 ** 3 / best

        # A neighbour's load comes and goes (0.67 once, 1.49 once beside a CI run), so a pair of measurements taken at
        # a quiet moment settles it: up to three tries, each timing here before and after a fresh measurement. Two
        # threads would read ~2x and the old constant 4.4x on every try.
        for _ in range(3):
            here = time_here()
            measured_cpu_peak_flops.cache_clear()
            peak = Session.peak_flops.fget(default)
            ratios.append(peak / max(here, time_here()))
            if 0.5 < ratios[-1] < 1.4:
                break
    finally:
        torch.set_num_threads(previous)
    assert 0.5 < ratios[-1] < 1.4, ratios
    given = SimpleNamespace(config=SimpleNamespace(peak_flops=5e12, mixed_precision="no"), accelerator=cpu)
    assert Session.peak_flops.fget(given) == 5e12


def test_the_session_asks_for_the_roof_at_the_runs_thread_count_and_precision(monkeypatch):
    from types import SimpleNamespace

    from hf_gpt_custom.training import train as train_module

    asked = []
    monkeypatch.setattr(train_module, "measured_cpu_peak_flops", lambda precision, threads: asked.append(
        (precision, threads)) or 1e9)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for precision in ("bf16", "no"):
            session = SimpleNamespace(config=SimpleNamespace(peak_flops=None, mixed_precision=precision),
                                      accelerator=SimpleNamespace(device=torch.device("cpu"), num_processes=1))
            assert train_module.Session.peak_flops.fget(session) == 1e9
    finally:
        torch.set_num_threads(previous)
    assert asked == [("bf16", 2), ("no", 2)]


def test_the_cpu_peak_is_measured_in_the_runs_precision_and_thread_count(monkeypatch):
    from hf_gpt_custom.training import devices

    calls = []
    monkeypatch.setattr(torch, "mm", lambda a, b: calls.append((a.dtype, a.shape, torch.get_num_threads())) or a)
    devices.measured_cpu_peak_flops.cache_clear()
    try:
        devices.measured_cpu_peak_flops("bf16", 2)
        devices.measured_cpu_peak_flops("no", 1)
    finally:
        devices.measured_cpu_peak_flops.cache_clear()
    size = (2048, 2048)
    assert calls == [(torch.bfloat16, size, 2)] * 4 + [(torch.float32, size, 1)] * 4


def test_accelerates_float32_output_copy_is_dropped_also_from_a_compiled_model():
    """torch.compile's wrapper gets accelerate's patch as a plain function, a module as a method: both lose the
    float32 copy and keep the autocast. Without mixed precision there is nothing to drop."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
    from hf_gpt_custom.training.devices import drop_float32_output_copies

    config = GPTCustomConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=99, n_positions=32)
    input_ids = torch.randint(0, 99, (2, 8))
    for mixed_precision, wrap in (("bf16", lambda m: torch.compile(m, backend="eager")), ("bf16", lambda m: m),
                                  ("no", lambda m: m)):
        AcceleratorState._reset_state(reset_partial_state=True)
        model = wrap(GPTCustomForCausalLM(config))
        prepared = Accelerator(cpu=True, mixed_precision=mixed_precision).prepare(model)
        assert drop_float32_output_copies(model) is (mixed_precision == "bf16")
        output = prepared(input_ids=input_ids, labels=input_ids)
        expected = torch.bfloat16 if mixed_precision == "bf16" else torch.float32
        assert output.logits.dtype == expected and output.loss.dtype == torch.float32
    AcceleratorState._reset_state(reset_partial_state=True)


def test_the_compile_memory_budget_holds_while_the_step_compiles_and_only_for_the_run(make_config, monkeypatch):
    """torch.compile partitions forward and backward when the first step runs, so the budget must be torch's
    setting at every training forward (where that happens), and the caller's again after the run."""
    import torch._functorch.config as functorch_config

    from hf_gpt_custom.training.train import train

    seen = []

    def recording_compile(model, *args, **kwargs):  # stands in for torch.compile: no compilation, the setting seen
        forward = model.forward

        def recorded(*a, **k):
            if torch.is_grad_enabled():
                seen.append(functorch_config.activation_memory_budget)
            return forward(*a, **k)

        model.forward = recorded
        return model

    monkeypatch.setattr(torch, "compile", recording_compile)
    before = functorch_config.activation_memory_budget
    train(make_config("compile=true", "compile_memory_budget=0.4", "max_steps=2", "warmup_steps=1"))
    assert seen and set(seen) == {0.4}
    assert functorch_config.activation_memory_budget == before
    seen.clear()
    train(make_config("compile=true", "max_steps=2", "warmup_steps=1", run_name="no_budget"))
    assert seen and set(seen) == {before}


def test_measuring_the_cpu_roof_leaves_the_training_random_stream_alone(make_config):
    """The roof's random matrices came from the global generator after set_seed and after a resume's restore: a
    resumed run's dropout masks moved off the checkpoint's, and `peak_flops` (a report setting) changed the weights.
    Reference: the same run with the roof not measured at all (peak_flops given)."""
    from safetensors.torch import load_file

    from hf_gpt_custom.training import devices
    from hf_gpt_custom.training.train import train

    dropout = ["model.resid_pdrop=0.1", "model.attn_pdrop=0.1", "model.embd_pdrop=0.1", "max_steps=3"]
    devices.measured_cpu_peak_flops.cache_clear()  # measured inside this run, as in a fresh process
    measured = train(make_config(*dropout, run_name="measured"))
    given = train(make_config(*dropout, "peak_flops=1e12", run_name="given"))
    weights = [load_file(folder / "final" / "model.safetensors") for folder in (measured, given)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


@pytest.mark.parametrize("name, expected", [
    # NVIDIA's datasheets, dense bf16 tensor-core TFLOP/s (the "with sparsity" figures are twice these)
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H200", 989e12), ("NVIDIA H200 NVL", 835e12), ("NVIDIA GH200 480GB", 989e12),
    ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA A100 80GB PCIe", 312e12), ("NVIDIA L40S", 362e12),
    ("NVIDIA L4", 121e12),
    ("NVIDIA L40", None),  # not listed (not "L4", not "L40S"): no MFU rather than another GPU's peak
])
def test_every_row_of_the_peak_table_is_the_datasheets_dense_figure(name, expected):
    from hf_gpt_custom.training.devices import peak_bf16_flops

    assert peak_bf16_flops(name) == expected


def test_the_mfu_of_a_launch_is_its_global_rate_over_the_peak_of_every_process():
    """MFU (PaLM, appendix B) is the FLOPs achieved over the peak of all the chips used: the logged tokens_per_s is
    summed over the launch's processes (loop.py reduces the tokens), so the denominator is num_processes x one
    device's peak. By hand for a 2-layer, 32-wide GPT-2: 6 x (parameters - the position table) + 12 L T d."""
    from types import SimpleNamespace

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
    from hf_gpt_custom.training.train import Session

    config = GPTCustomConfig(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    n_params = GPTCustomForCausalLM(config).num_parameters()
    by_hand = 6 * (n_params - 32 * 32) + 12 * 2 * 32 * 32
    for processes in (1, 4):
        session = SimpleNamespace(peak_flops=1e12, model_config=config, n_params=n_params,
                                  config=SimpleNamespace(block_size=32), workload=SimpleNamespace(computes_lm_head=True),
                                  accelerator=SimpleNamespace(num_processes=processes))
        assert Session.mfu(session, 5e4) == pytest.approx(by_hand * 5e4 / (1e12 * processes), rel=1e-12)
