"""The device and precision a run trains with, checked before the Accelerator exists: what `accelerate launch` /
torchrun say through the environment (rank, precision), which device the config asks for and whether this machine
has it, what `mixed_precision: auto` means here, and whether torch.compile can compile here.

Precision has one source of truth: the training YAML's `mixed_precision`, which config.yaml records and MFU uses.
An accelerate config (or `--mixed_precision`) that says otherwise is overridden with a warning naming both values.
A launcher's `--gradient_accumulation_steps` reaches a run only in a DeepSpeed launch, whose engine then uses it
whatever the Accelerator is told: one that differs from the YAML's is refused.
One helper runs after the Accelerator exists: `drop_float32_output_copies`, which keeps its autocast but not its
float32 copy of the model's outputs. `join_launched_processes` joins a launch's process group for the commands that
share work between ranks without an Accelerator of their own (eval, and run before its training).
"""

from __future__ import annotations

import functools
import logging
import os
import re

from hf_gpt_custom.errors import UserError

logger = logging.getLogger(__name__)

# Where launchers put the global rank: torchrun / accelerate (RANK), Open MPI, MPICH/Intel MPI, MVAPICH.
_RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK")


# ...and the number of processes it started
_WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")


def launch_rank() -> int:
    """This process's global rank as the launcher set it; 0 when started without a launcher."""
    return _launcher_value(_RANK_VARIABLES, default=0)


def launched_processes() -> int:
    """How many processes the launcher started (accelerate launch, torchrun, MPI); 1 without a launcher."""
    return _launcher_value(_WORLD_SIZE_VARIABLES, default=1)


def world_size_variable() -> str | None:
    """The variable launched_processes read (WORLD_SIZE, an MPI one), None without one: a message names it, since a
    variable left exported, not a launcher, may have set it."""
    return _launcher_variable(_WORLD_SIZE_VARIABLES)


def _launcher_value(variables: tuple[str, ...], default: int) -> int:
    """The number in the first of `variables` a launcher set to one, else `default`."""
    name = _launcher_variable(variables)
    return default if name is None else int(os.environ[name].strip())


def _launcher_variable(variables: tuple[str, ...]) -> str | None:
    return next((name for name in variables if os.environ.get(name, "").strip().isdigit()), None)


def join_launched_processes(on_cpu: bool):
    """accelerate's PartialState when a launcher started more than one process (it joins their process group: NCCL
    on GPUs, gloo on CPUs), None for a plain process: how `run` and `eval` share work between ranks (train's
    Accelerator joins the same group). `on_cpu`: the work runs on the CPU (accelerate looks for a GPU backend
    otherwise, and without one each process would go on alone, doing everything)."""
    if launched_processes() == 1:
        return None
    from accelerate import PartialState

    variable, launched = world_size_variable(), launched_processes()
    fix = f"start the command with accelerate launch or torchrun, or unset {variable} if no launcher started it"
    environment = dict(os.environ)
    try:
        state = PartialState(cpu=on_cpu)
    except ValueError as err:  # no MASTER_ADDR, say: accelerate's traceback from deep inside its setup
        # accelerate was half way: its state made and RANK, LOCAL_RANK, ... set, which a later PartialState or
        # Accelerator in this process (a Python caller's) would take for a launch
        PartialState._reset_state()
        os.environ.clear()
        os.environ.update(environment)
        raise UserError(f"{variable}={launched} says a launcher started {launched} processes, but they cannot be "
                        f"joined ({err}); {fix}") from err
    if state.num_processes != launched:  # each would do all the work on its own
        raise UserError(f"{variable}={launched} says a launcher started {launched} processes, but this one joined "
                        f"a group of {state.num_processes}; {fix}")
    return state


def mixed_precision_for_run(configured: str) -> str:
    """The precision to train in: `configured` (the training YAML's), with a warning when the launcher said otherwise.

    `accelerate launch` passes its config file's `mixed_precision` (or the flag) as ACCELERATE_MIXED_PRECISION, and an
    explicit `Accelerator(mixed_precision=...)` overrides that silently. The warning names both and says which wins.
    """
    launcher = os.environ.get("ACCELERATE_MIXED_PRECISION")
    if launcher is not None and launcher.lower() != configured.lower() and launch_rank() == 0:
        # `no` is also what a plain `accelerate launch` passes when neither its config nor a flag sets a precision:
        # a bf16 YAML launched that way is no disagreement worth a warning, only a note.
        log = logger.info if launcher.lower() == "no" else logger.warning
        log(
            "accelerate launch says mixed_precision=%s (its --config_file or --mixed_precision; `no` when neither "
            "sets it) but the training config says mixed_precision=%s (after resolving `auto` for this device); "
            "training in %s, the training config's value. To train in %s set mixed_precision=%s in the training YAML "
            "(or on the command line); make the two agree to silence this.",
            launcher, configured, configured, launcher, launcher,
        )
    return configured


def accumulation_steps_for_run(configured: int) -> int:
    """The micro-batches per optimizer step: `configured` (the training YAML's), or a UserError when the launcher
    says otherwise. `accelerate launch --gradient_accumulation_steps N` passes N as
    ACCELERATE_GRADIENT_ACCUMULATION_STEPS only in a DeepSpeed launch (other launches drop the flag), and there
    DeepSpeed's plugin reads it and the Accelerator takes DeepSpeed's value over ours: the engine would accumulate N
    micro-batches while this loop runs `configured`, so the two must agree."""
    launcher = os.environ.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "").strip()
    if launcher and launcher != str(configured):
        raise UserError(
            f"accelerate launch says gradient_accumulation_steps={launcher} but the training config says "
            f"gradient_accumulation_steps={configured}; a DeepSpeed engine would take the launcher's while the "
            f"training loop runs the config's. Set gradient_accumulation_steps={launcher} in the training YAML (or "
            f"on the command line), or drop the launcher's --gradient_accumulation_steps")
    return configured


# bf16/fp16 dense (no sparsity) tensor-core FLOP/s from NVIDIA's datasheets, by a piece of torch.cuda.get_device_name();
# the first match wins, so the narrower names come first. A GPU not listed gets no MFU rather than a guessed one
# (set `peak_flops` in the training config, or pass bench_gpu.py --peak-tflops).
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM: "NVIDIA H100 80GB HBM3"
    ("H200 NVL", 835e12),
    ("H200", 989e12),  # SXM
    ("GH200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
)


def peak_bf16_flops(device_name: str) -> float | None:
    """The table's peak for this GPU name, or None when the name matches no row. A row matches whole words of the
    name ("L4" is not "NVIDIA L40", whose peak is not in the table), the first matching row wins."""
    words = re.findall(r"[a-z0-9]+", device_name.lower())
    for piece, flops in PEAK_BF16_FLOPS:
        piece_words = re.findall(r"[a-z0-9]+", piece.lower())
        if any(words[i:i + len(piece_words)] == piece_words for i in range(len(words))):
            return flops
    return None


def matmul_flops(dtype=None, size: int = 2048, rounds: int = 3) -> float:
    """The best FLOP/s of a square size³ `torch.mm` over `rounds` (after one untimed product, in which oneDNN picks and
    packs its kernel) at this process's thread count: the roof a CPU's MFU is measured against. The best, not the
    median: the roof is what the hardware does when nothing else is using it."""
    import time

    import torch

    # A generator of its own: drawing from the global one moved a resumed run's dropout stream off the checkpoint's.
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(dtype or torch.float32)
    b = torch.randn(size, size, generator=generator).to(dtype or torch.float32)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - started)
    return 2 * size ** 3 / best


@functools.lru_cache(maxsize=None)
def measured_cpu_peak_flops(mixed_precision: str, threads: int) -> float:
    """This CPU's matmul_flops at `threads` torch threads in the run's compute dtype (bf16 under mixed precision, fp32
    without), measured once per process (under 1 s at 1 thread). A CPU has no datasheet peak a program can read
    (clock, vector width and core count vary by part and by load), so its MFU is taken against what a large matmul
    reaches on it, as the GPU figures' 8192³ product shows the GPU's; the fixed figure used before was 4.4x the
    1-thread roof of the CPU the project is developed on."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mixed_precision, torch.float32)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return matmul_flops(dtype)
    finally:
        torch.set_num_threads(previous)


def warn_if_bf16_is_emulated(device_type: str, mixed_precision: str) -> bool:
    """Warn (and return True) when bf16 autocast would run on a CPU without bf16 matmul units (no AVX512-BF16/AMX).

    There bf16 matmuls are emulated and run several times slower than fp32, with nothing gained
    (benchmarks/results/bf16_threads1.json).
    """
    import torch

    if device_type != "cpu" or mixed_precision != "bf16":
        return False
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    logger.warning(
        "mixed_precision=bf16 on a CPU without bf16 matmul support (no AVX512-BF16 or AMX): bf16 matmuls are emulated "
        "and run several times slower than fp32 here; set mixed_precision=no to train in fp32."
    )
    return True


def launcher_asks_for_cpu() -> bool:
    """A one-process `accelerate launch --cpu` (or `use_cpu: true` in its config) sets ACCELERATE_USE_CPU, and
    Accelerator() then runs on the CPU whatever it is given: the run's device choices (training, run's evaluation)
    follow it. The processes a multi-process launch starts (through torchrun) are not told about use_cpu: a CPU
    config for several processes hides the GPUs instead (gpus_hidden_on_purpose)."""
    from accelerate.utils import parse_flag_from_env

    return parse_flag_from_env("ACCELERATE_USE_CPU")


def gpus_hidden_on_purpose() -> bool:
    """CUDA_VISIBLE_DEVICES hides every GPU the way CUDA documents: empty, or its first index -1 (an invalid index
    hides itself and every one after it). cpu_two_processes.yaml does this through gpu_ids: "-1,-1"."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible is not None and visible.split(",")[0].strip() in ("", "-1")


def training_device_type(cpu: bool | None) -> str:
    """"cuda" or "cpu": what the Accelerator will train on for the config's `cpu` setting, with a one-line error
    when the request cannot be met (cpu=false without a GPU, CUDA_VISIBLE_DEVICES naming a GPU that is not there,
    a launch with more processes on this machine than it has GPUs).

    A one-process launch that asks for the CPU (launcher_asks_for_cpu) gets the CPU, so that the precision and the
    checks are the CPU's too; a multi-process CPU launch hides the GPUs, so torch sees none (gpus_hidden_on_purpose),
    and no warning says it trains on the CPU."""
    import torch

    if launcher_asks_for_cpu():
        if cpu is False:
            raise UserError("cpu=false asks for a GPU, but the launcher asks for the CPU (use_cpu: true in the "
                            "accelerate config, or --cpu: ACCELERATE_USE_CPU=true); drop one of the two")
        return "cpu"
    if cpu:
        return "cpu"
    if torch.cuda.is_available():
        count, local_rank = torch.cuda.device_count(), os.environ.get("LOCAL_RANK", "").strip()
        if local_rank.isdigit() and int(local_rank) >= count:
            raise UserError(f"process with LOCAL_RANK={local_rank} has no GPU of its own: this machine shows {count} "
                            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); launch at most "
                            f"{count} process(es) per machine (accelerate launch --multi_gpu --num_processes {count}), "
                            f"or, for "
                            f"processes on the CPU, hide the GPUs (CUDA_VISIBLE_DEVICES=-1, as "
                            f"training/configs/accelerate/cpu_two_processes.yaml does)")
        return "cuda"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if torch.version.cuda is not None and visible is not None and not gpus_hidden_on_purpose():
        raise UserError(f"CUDA_VISIBLE_DEVICES={visible} names no GPU this machine has (torch sees none); use the "
                        f"index of a GPU that exists (nvidia-smi lists them), or unset it — or set cpu=true to train "
                        f"on the CPU")
    if cpu is False:
        reason = ("torch was built without CUDA" if torch.version.cuda is None
                  else f"CUDA_VISIBLE_DEVICES={visible} hides every GPU" if gpus_hidden_on_purpose()
                  else "no CUDA device is visible")
        raise UserError(f"cpu=false asks for a GPU, but {reason}; set cpu=true (or leave it null: the CPU when no "
                        f"GPU is visible)")
    if cpu is None and launch_rank() == 0 and not gpus_hidden_on_purpose():
        _warn_that_a_gpu_launch_trains_on_the_cpu(visible)
    return "cpu"


def _warn_that_a_gpu_launch_trains_on_the_cpu(visible: str | None) -> None:
    """A launch that asked for GPUs, where torch has none, trains on the CPU: say so (rank 0, cpu: null, GPUs not
    hidden on purpose)."""
    import torch

    world_size = os.environ.get("WORLD_SIZE", "").strip()
    if world_size.isdigit() and int(world_size) > 1:
        # A GPU launch config (multi_gpu_ddp.yaml, fsdp.yaml) on a machine where torch sees no GPU: it would train
        # on the CPU without a word, each process a full copy of the model (accelerate shards with FSDP on GPUs only).
        fsdp = (" FSDP is off there (accelerate shards on GPUs only): each process holds the whole model."
                if os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true") else "")
        logger.warning("%s processes were launched and torch sees no GPU: training on the CPU (gloo).%s If you meant "
                       "the GPUs, check that torch sees them (torch.cuda.is_available()); to train on the CPU on "
                       "purpose, say so with cpu=true or CUDA_VISIBLE_DEVICES=-1 (cpu_two_processes.yaml's gpu_ids)",
                       world_size, fsdp)
    elif visible is not None and torch.version.cuda is None:
        # one_gpu_bf16.yaml (CUDA_VISIBLE_DEVICES=0) with a CPU-only torch: a GPU was asked for
        logger.warning("CUDA_VISIBLE_DEVICES=%s names a GPU, but this torch was built without CUDA: training on the "
                       "CPU. Install a CUDA build of torch to train on the GPU, or set cpu=true to say the CPU is "
                       "meant", visible)


def resolve_mixed_precision(configured: str, device_type: str) -> str:
    """The precision to train in on `device_type`: `auto` is bf16 on a GPU with bf16 units (compute capability 8.0+,
    Ampere and newer), fp32 ("no") elsewhere; an explicit value this device cannot run is refused with the fix."""
    import torch

    has_bf16 = device_type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)
    if configured == "auto":
        return "bf16" if has_bf16 else "no"
    if configured == "bf16" and device_type == "cuda" and not has_bf16:
        name = torch.cuda.get_device_name()
        major, minor = torch.cuda.get_device_capability()
        raise UserError(f"mixed_precision=bf16 but {name} (compute capability {major}.{minor}) has no bf16 units "
                        f"(they need 8.0, Ampere or newer); use mixed_precision=fp16, or auto (fp16 is not chosen "
                        f"for you: it needs loss scaling, and a run in it is not comparable to a bf16 one)")
    if configured == "fp16" and device_type == "cpu":
        raise UserError("mixed_precision=fp16 needs a GPU (autocast on a CPU has no fp16 path); use mixed_precision=no "
                        "or bf16 on a CPU")
    return configured


def check_compiler_available(device_type: str) -> None:
    """`compile: true` needs torch.compile's backend for the device: a C++ compiler on a CPU, Triton on a GPU.
    Without it the first forward fails deep in inductor; here it is one line naming the fix."""
    if device_type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            raise UserError("compile=true but Triton, which torch.compile needs on a GPU, is not installed or does "
                            "not support this GPU; pip install triton (the version your torch names), or set "
                            "compile=false")
        return
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        get_cpp_compiler()
    except Exception as err:  # torch._inductor.exc.InvalidCxxCompiler, or a failed compiler probe
        raise UserError(f"compile=true but torch.compile finds no C++ compiler for the CPU ({type(err).__name__}); "
                        f"install one (g++ or clang++, or point CXX at it), or set compile=false") from err


def drop_float32_output_copies(model) -> bool:
    """Keep Accelerate's autocast around `model.forward` but not its float32 copy of every output; True if removed.

    Under bf16/fp16, `Accelerator.prepare` sets `model.forward = convert_outputs_to_fp32(autocast(forward))`: each
    training step then copies the logits (batch x block x vocabulary; 3.3 GB of float32 at GPT-2's 16 x 1,024) that
    nothing reads, since the model's loss is float32 already and evaluation upcasts what it uses. A bf16 forward and
    backward of a 2 x 64 body with GPT-2's 50,304-token vocabulary, 4 x 256 tokens, took 411 ms instead of 479 (medians
    of 5 rotated rounds; AMD EPYC family 25 model 17, 2 threads, torch 2.13, accelerate 1.15); on a GPU the copy is a
    pass over 5 GB of memory per step at GPT-2's shape (not measured). Call it on the object given to `prepare` (it is
    patched in place, before any DDP wrapper). Where Accelerate wrapped otherwise (no mixed precision, another
    version), nothing changes.
    """
    from types import MethodType

    forward = model.__dict__.get("forward")  # accelerate's patch is an instance attribute
    is_method = hasattr(forward, "__func__")  # a method for a plain module; a function for torch.compile's wrapper
    converter = getattr(forward.__func__ if is_method else forward, "__wrapped__", None)
    if type(converter).__name__ != "ConvertOutputsToFp32" or not callable(getattr(converter, "model_forward", None)):
        return False
    autocast_forward = converter.model_forward  # the autocast-wrapped forward accelerate built
    model.forward = MethodType(autocast_forward, model) if is_method else autocast_forward
    return True
