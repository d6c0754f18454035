"""Shared helpers for the benchmarks: thread pinning, interleaved A/B timing, matmul peak, RSS, result files.

Every benchmark times ours and the anchor in the same process, alternating (A B, B A, A B ...) after warm-up, and
reports the median of the per-round ratios with its spread. The machine is shared, so absolute times drift by tens
of percent within a minute; a ratio of two runs taken back to back drifts far less. Nothing here is collected by
pytest.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from hf_gpt_custom.training.devices import matmul_flops as measure_matmul_peak  # noqa: E402,F401  (MFU's roof)

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# Where `run_all --quick` writes unless --out names a folder (git-ignored): a smoke run's few rounds are not figures
# to quote, and written into results/ they would replace the measured files the docs link, unmarked.
QUICK_RESULTS_DIR = RESULTS_DIR.parent / "results_quick"

# The two sizes every model benchmark runs, with the dropout of the training config that uses them: SMALL is
# training/configs/shakespeare.yaml (dropout 0.1, vocab 8192 from our tokenizer), GPT2_SMALL is gpt2-124m.yaml
# (dropout 0 for single-epoch pre-training). Dropout matters for speed: with attn_pdrop > 0, CPU SDPA leaves its
# flash kernel for the math path that materialises the (seq x seq) attention weights, for both models alike.
NO_DROPOUT = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
SMALL = {"n_layer": 6, "n_head": 6, "n_embd": 384, "n_positions": 256, "vocab_size": 8192}
GPT2_SMALL = {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024, "vocab_size": 50257, **NO_DROPOUT}
SIZES = {"small": SMALL, "gpt2": GPT2_SMALL}


def add_common_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    # One thread count per process (run_all.py runs each benchmark once per count). On a loaded machine 2 threads
    # can be slower than 1: OpenMP threads spin-wait on each other whenever one is descheduled.
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, fixed for the run (default: 1)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="results folder (default: benchmarks/results)")
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke run of the benchmark itself")
    return parser


def add_run_sweep_args(parser: argparse.ArgumentParser, work_dir: str) -> argparse.ArgumentParser:
    """--jobs, --work-dir, --out, --report-only: the options of a benchmark made of `hf-gpt-custom train` runs."""
    parser.add_argument("--jobs", type=int, default=1, help="training runs at a time, one thread each (default: 1)")
    parser.add_argument("--work-dir", type=Path, default=Path("runs") / work_dir, help="run folders")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="results folder (default: benchmarks/results)")
    parser.add_argument("--report-only", action="store_true", help="rebuild the table and plot from the run folders")
    return parser


def pin_threads(threads: int) -> None:
    """Fix the intra-op thread count so that every measurement in the run uses the same parallelism."""
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set once in this process (run_all imports several benches)
        pass


@dataclass
class Comparison:
    """Paired timings of ours and the anchor, one pair per round. ratio = anchor time / our time (>1: we win)."""

    name: str
    ours_s: list[float]
    anchor_s: list[float]
    work: float  # units of work per call (tokens, examples ...), to turn seconds into a rate
    unit: str = "tokens/s"
    extra: dict = field(default_factory=dict)

    @property
    def ratios(self) -> list[float]:
        return [anchor / ours for ours, anchor in zip(self.ours_s, self.anchor_s)]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def ratio_spread(self) -> tuple[float, float]:
        """Interquartile range of the per-round ratios (min, max when there are fewer than 4 rounds)."""
        ratios = sorted(self.ratios)
        if len(ratios) < 4:
            return ratios[0], ratios[-1]
        quartiles = statistics.quantiles(ratios, n=4)
        return quartiles[0], quartiles[2]

    def rate(self, times: list[float]) -> float:
        return self.work / statistics.median(times)

    def summary(self) -> dict:
        low, high = self.ratio_spread
        return {
            "name": self.name,
            "unit": self.unit,
            "ours": self.rate(self.ours_s),
            "anchor": self.rate(self.anchor_s),
            "ratio": self.ratio,
            "ratio_iqr": [low, high],
            "rounds": len(self.ours_s),
            "ours_s": self.ours_s,
            "anchor_s": self.anchor_s,
            **self.extra,
        }

    def line(self) -> str:
        low, high = self.ratio_spread
        return (
            f"{self.name:<48} ours {self.rate(self.ours_s):>10.1f} {self.unit:<9} anchor {self.rate(self.anchor_s):>10.1f}"
            f"  ratio {self.ratio:5.2f}x (IQR {low:.2f}-{high:.2f}, {len(self.ours_s)} rounds)"
        )


def time_call(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compare_interleaved(
    name: str,
    ours: Callable[[], object],
    anchor: Callable[[], object],
    work: float,
    rounds: int,
    warmup: int = 2,
    unit: str = "tokens/s",
) -> Comparison:
    """Time `ours` and `anchor` alternately: round i runs A then B, round i+1 B then A (cancels order effects)."""
    times = time_rotating({"ours": ours, "anchor": anchor}, rounds, warmup)
    comparison = Comparison(name, times["ours"], times["anchor"], work, unit)
    print(comparison.line(), flush=True)
    return comparison


def time_rotating(contenders: dict[str, Callable[[], object]], rounds: int, warmup: int = 1) -> dict[str, list[float]]:
    """Seconds per call of each contender, `rounds` times, the calling order rotated by one every round.

    With two contenders that is A B, B A, A B ...; with three, A B C, B C A, C A B ... Each contender runs in every
    position equally often, so a burst of load, a warm cache or a thermal drift hits all of them alike and a
    per-round ratio of any two compares calls made seconds apart.
    """
    names = list(contenders)
    for _ in range(warmup):
        for name in names:
            contenders[name]()
    gc.collect()
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(time_call(contenders[name]))
    return times


def within_noise(spread: tuple | list | None, target: float | None) -> bool:
    """True when the per-round range of a ratio holds the target: the rounds lie on both sides of it, so the median
    alone neither meets nor misses it (a 1.51x median of rounds 1.49x-1.53x does not show 1.5x)."""
    return bool(spread) and target is not None and None not in spread and min(spread) < target < max(spread)


def device_rows(averages) -> list:
    """The profiler's device-side rows (kernels, copies, memsets) of `prof.key_averages()`, the rows whose times add up
    to the device's busy time. A CPU op's self device time repeats the time of the kernels it launched, and a CUDA
    graph's replay repeats every kernel it replays: summing every row counts each kernel twice."""
    from torch.autograd import DeviceType

    return [event for event in averages if event.device_type != DeviceType.CPU]


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def make_pair(size: dict, attn_implementation: str = "sdpa", dropout: float | None = None, seed: int = 0):
    """(ours, anchor): transformers' GPT2LMHeadModel with a fresh init, and our model holding the same weights.

    `dropout=None` keeps the size's dropout; the loss-trajectory check passes 0.0 so that both models do the same
    arithmetic.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.convert_gpt2 import from_gpt2_model

    if dropout is not None:
        size = {**size, "resid_pdrop": dropout, "embd_pdrop": dropout, "attn_pdrop": dropout}
    torch.manual_seed(seed)
    anchor_config = GPT2Config(**size, bos_token_id=0, eos_token_id=0, attn_implementation=attn_implementation)
    anchor = GPT2LMHeadModel(anchor_config)
    # The same strict conversion the model loader uses; it returns eval mode, the benchmarks set the mode they time.
    return from_gpt2_model(anchor, GPTCustomForCausalLM).train(anchor.training), anchor


def param_count(model: torch.nn.Module) -> int:
    """Parameters counted once (tied lm_head = wte), as in 6·N·tokens MFU accounting."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def machine_info(threads: int) -> dict:
    """What a figure was measured on, and how busy the machine was when the measurement started.

    Machines of one kind differ: oneDNN's fp32 matmul was ~2x MKL's on an AVX-512 AMD EPYC and 0.8-1.0x on a Zen 3
    one, bf16 matmuls run at ~2x fp32 where AVX512-BF16 exists and at ~1/50 of it where it does not. So every result
    names the CPU model, family/model, the ISA flags that decide such paths, and the load average (the machine may be
    shared: a load above the core count means another process took part of every core during the run).
    """
    cpu = cpu_info()
    return {
        "cpu": cpu["model_name"],
        "cpu_family": cpu["family"],
        "cpu_model": cpu["model"],
        "isa_flags": cpu["isa_flags"],
        "logical_cpus": os.cpu_count(),
        "threads": threads,
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "python": platform.python_version(),
        "time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "load_average": load_average(),
    }


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (what `uptime` prints), rounded for a report."""
    return [round(value, 2) for value in os.getloadavg()]


def result_name(bench: str, threads: int) -> str:
    """File stem of one benchmark's results at one thread count: train_threads2 -> results/train_threads2.json."""
    return f"{bench}_threads{threads}"


# The flags that change which kernels are fast: AVX-512 (wide fp32 units), AVX512-BF16 and AMX (bf16 matmuls).
_ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


def cpu_info() -> dict:
    """Model name, CPU family/model and the ISA flags above, from /proc/cpuinfo (what `lscpu` prints)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    flags = set(fields.get("flags", "").split())
    return {
        "model_name": fields.get("model name") or platform.processor() or "unknown",
        "family": fields.get("cpu family", "unknown"),
        "model": fields.get("model", "unknown"),
        "isa_flags": [flag for flag in _ISA_FLAGS if flag in flags],
    }


def describe_machine(meta: dict) -> str:
    """One line for a report: 'AMD EPYC (family 25, model 1; avx2 fma), 1 of 2 threads'."""
    flags = " ".join(meta.get("isa_flags") or []) or "no AVX2"
    return (f"{meta['cpu']} (family {meta.get('cpu_family', '?')}, model {meta.get('cpu_model', '?')}; {flags}), "
            f"{meta['threads']} of {meta.get('logical_cpus', '?')} threads")


def write_json(name: str, payload: dict, out_dir: Path = RESULTS_DIR) -> Path:
    """benchmarks/results/<name>.json, one file per benchmark and thread count; run_all.py merges them into
    results.json. The load average at the end of the run is added beside the machine's (taken at the start)."""
    if isinstance(payload.get("machine"), dict):
        payload["machine"]["load_average_at_end"] = load_average()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    return path


def _jsonable(value):
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
