"""Run every benchmark at each thread count and write benchmarks/results/RESULTS.md + results.json.

    python -m benchmarks.run_all --threads 1,2           # everything at 1 and at 2 threads
    python -m benchmarks.run_all --threads 1,2 --quick   # fewer rounds, small model only: a smoke run, written to
                                                         # benchmarks/results_quick/ unless --out says otherwise
    python -m benchmarks.run_all --threads 1,2 --only train,generate,bf16
    python -m benchmarks.run_all --threads 1,2 --report-only   # rebuild the tables from results/*.json

Each benchmark runs in its own process per thread count (a clean allocator and thread pool) and writes
results/<bench>_threads<N>.json; the tokenizer and eval benchmarks are owned by their helpers and called when present.
Where CUDA is visible, bench_gpu.py runs once after them (`--only gpu` runs it alone) and writes gpu_*.json,
gpu_results.md and gpu_results.png, linked from RESULTS.md.
When any benchmark fails, run_all names it and exits 1 without rewriting RESULTS.md and results.json.
Ratios are speed ours/anchor (higher is better) except memory, ours/anchor peak RSS (lower is better). Every row names
the machine it was measured on (CPU, family/model, ISA flags, threads) and the load average during its run; a result
file that does not record its machine is listed as not measured here rather than shown.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.bench_decode_loop import OURS_IN_TRANSFORMERS_LOOP
from benchmarks.common import (
    QUICK_RESULTS_DIR, RESULTS_DIR, describe_machine, load_average, machine_info, result_name, within_noise,
)

REPO_ROOT = RESULTS_DIR.parents[1]
BENCH_DIR = REPO_ROOT / "benchmarks"
# The training target is judged on our default path, eager (TrainConfig.compile = False): every model's linear layers
# run F.linear (MKL) there. torch.compile rows exist on request (bench_train --modes), unjudged.
DEFAULT_TRAIN_MODE = "eager"
# Issue 12: training ≥ 1.3x transformers' GPT-2 and above nanoGPT's model (small size); batch-1 generation ≥ 2x.
TARGETS = {"train": 1.3, "train_vs_nanogpt": 1.0, "generate": 2.0, "memory": 1.0, "tokenizer": 1.0, "eval": 2.0}
BENCHES = ("train", "generate", "decode_floor", "decode_loop", "bf16", "forward", "memory", "tokenizer", "eval")
GPU_BENCH = "gpu"  # once per run, not per thread count, and only where CUDA is visible


def gpu_bench_command(quick: bool, out: Path = RESULTS_DIR) -> list[str] | None:
    """bench_gpu.py's command line where CUDA is visible, else None (the CPU tables do not wait for a GPU)."""
    import torch

    if not torch.cuda.is_available():
        return None
    quick_args = ["--rounds", "2", "--sweep", "16,32", "--loop-steps", "25"] if quick else []
    return [sys.executable, str(BENCH_DIR / "bench_gpu.py"), "--out", str(out), *quick_args]


def bench_command(name: str, threads: int, quick: bool, out: Path = RESULTS_DIR, check_trajectory: bool = True
                  ) -> list[str] | None:
    """The command line of one benchmark at one thread count, or None when the benchmark is not in this checkout.

    `check_trajectory=False` skips training's loss-trajectory check (run_all runs it at the first thread count only:
    it checks arithmetic, not speed, and costs as much as the timing itself)."""
    python = [sys.executable]
    common = ["--threads", str(threads), "--out", str(out)] + (["--quick"] if quick else [])
    sizes = ["--sizes", "small"] if quick else []
    commands = {
        "train": python + ["-m", "benchmarks.bench_train", *common, *sizes] + (
            (["--trajectory-steps", "5"] if quick else []) if check_trajectory else ["--trajectory-steps", "0"]),
        "generate": python + ["-m", "benchmarks.bench_generate", *common, *sizes],
        "decode_floor": python + ["-m", "benchmarks.bench_decode_floor", *common, *sizes],
        "decode_loop": python + ["-m", "benchmarks.bench_decode_loop", *common] + (["--sizes", "tiny"] if quick else []),
        "bf16": python + ["-m", "benchmarks.bench_bf16", *common],
        "forward": python + ["-m", "benchmarks.bench_forward", *common, *sizes],
        "memory": python + ["-m", "benchmarks.bench_memory", "--threads", str(threads), "--out", str(out), *sizes],
        "tokenizer": python + [str(BENCH_DIR / "bench_tokenizer.py"), "--threads", str(threads), "--out", str(out)] + (
            ["--rounds", "3"] if quick else []),
        "eval": python + [str(BENCH_DIR / "bench_eval.py"), "--threads", str(threads), "--out", str(out)] + (
            ["--limit", "40"] if quick else []),
    }
    if name in ("tokenizer", "eval") and not (BENCH_DIR / f"bench_{name}.py").exists():
        return None
    return commands[name]


def _load(name: str, results_dir: Path = RESULTS_DIR) -> dict | None:
    path = results_dir / name
    return json.loads(path.read_text()) if path.exists() else None


def _machine(payload: dict) -> dict | None:
    """The machine record of a result file, or None for files written before benchmarks recorded the CPU."""
    machine = payload.get("machine") or payload.get("meta", {}).get("machine")
    return machine if machine and "cpu_family" in machine else None


def _row(figure, ours, anchor, unit, ratio, spread=None, target=None, met=None, note="") -> dict:
    return {"figure": figure, "ours": ours, "anchor": anchor, "unit": unit, "ratio": ratio, "spread": spread,
            "target": target, "met": met, "note": note}


def collect_rows(threads: int, results_dir: Path = RESULTS_DIR) -> tuple[list[dict], list[str]]:
    """The table rows of every result file at this thread count, and the files skipped for not naming a machine."""
    rows, skipped = [], []
    loaders = (("train", _train_rows), ("generate", _generate_rows), ("decode_floor", _decode_floor_rows),
               ("decode_loop", _decode_loop_rows),
               ("bf16", _bf16_rows), ("forward", _forward_rows),
               ("memory", _memory_rows), ("bench_tokenizer", _tokenizer_rows), ("bench_eval", _eval_rows))
    for stem, to_rows in loaders:
        file_name = f"{stem}.json" if stem == "bench_eval" else f"{result_name(stem, threads)}.json"
        payload = _load(file_name, results_dir)
        if payload is None:
            continue
        machine = _machine(payload)
        if machine is None or machine.get("threads", machine.get("torch_threads")) != threads:
            skipped.append(file_name)
            continue
        for row in to_rows(payload):
            row["measured_on"] = describe_machine(machine)
            row["load_average"] = [machine.get("load_average"), machine.get("load_average_at_end")]
            rows.append(row)
    return rows, skipped


def _train_rows(train: dict) -> list[dict]:
    rows = []
    for result in train["results"]:
        contender, anchor_name = result.get("contender", "ours"), result.get("anchor_name", "transformers GPT-2")
        target = None
        if result["mode"] == DEFAULT_TRAIN_MODE and contender == "ours":
            if anchor_name == "nanoGPT":
                target = TARGETS["train_vs_nanogpt"] if result["size"] == "small" else None
            else:
                target = TARGETS["train"]
        note = f"MFU {contender} {result['mfu_ours']:.0%}, {anchor_name} {result['mfu_anchor']:.0%}"
        met = None if target is None else (result["ratio"] > target if anchor_name == "nanoGPT" else
                                           result["ratio"] >= target)
        rows.append(_row(f"{result['name']}: {contender} vs {anchor_name}", result["ours"], result["anchor"],
                         result["unit"], result["ratio"], result["ratio_iqr"], target, met, note))
    for check in train["trajectory"]:
        label = "compiled ours vs eager GPT-2" if check["compiled_ours"] else "ours vs transformers GPT-2"
        rows.append(_row(f"loss trajectory small {check['steps']} steps ({label})", None, None, "max abs diff",
                         check["max_abs_diff"], None, "≤ 1e-4", check["passed"]))
    return rows


def _decode_floor_rows(floor: dict) -> list[dict]:
    """Batch-1 decoding in ms per token: ours against GPT-2, next to the fp32 matrix-vector floor under both."""
    rows = []
    for result in floor["results"]:
        ms = result["ms_per_token"]
        note = (f"floor {ms['floor']:.1f} ms/token (weights read at {result['floor_bandwidth_gbs']:.1f} GB/s): no fp32 "
                f"implementation can beat GPT-2 by more than {result['best_possible_speedup_over_gpt2']:.2f}x here")
        rows.append(_row(f"decode floor {result['size']} batch 1: ours vs transformers GPT-2", ms["ours"], ms["gpt2"],
                         "ms/token", result["ours_speedup_over_gpt2"], None, None, None, note))
    return rows


def _decode_loop_rows(loop: dict) -> list[dict]:
    """Static-cache decoding in ms per step: ours (our loop) against GPT-2, and what the loop alone gives."""
    rows = []
    for result in loop["results"]:
        ms, speedup = result["ms_per_step"], result["ours_speedup"]
        note = (f"ours in transformers' loop {ms[OURS_IN_TRANSFORMERS_LOOP]:.3f} ms: the loop alone "
                f"{speedup[OURS_IN_TRANSFORMERS_LOOP]:.2f}x; "
                + ("tokens identical" if result["tokens_identical"] else "TOKENS DIFFER"))
        rows.append(_row(f"decode loop {result['size']} {result['mode']} batch {result['batch']}, static cache: ours "
                         "vs transformers GPT-2", ms["ours"], ms["transformers GPT-2"], "ms/step",
                         speedup["transformers GPT-2"], tuple(result["ours_speedup_range"]["transformers GPT-2"]),
                         note=note))
    return rows


def _generate_rows(generate: dict) -> list[dict]:
    rows = []
    for result in generate["results"]:
        # The target is judged on plain `generate` at batch 1; the static-cache variant is listed.
        judged = result["variant"] == "default" and result["batch"] == 1
        target = TARGETS["generate"] if judged else None
        met = result["ratio"] >= TARGETS["generate"] and result["tokens_identical"] if judged else None
        note = "tokens identical" if result["tokens_identical"] else "TOKENS DIFFER"
        if result["variant"] != "default":
            note += f"; {result['variant']} cache, first call {result['first_call_s']:.0f} s"
        rows.append(_row(f"{result['name']}: ours vs transformers GPT-2", result["ours"], result["anchor"],
                         result["unit"], result["ratio"], result["ratio_iqr"], target, met, note))
    return rows


def _bf16_rows(bf16: dict) -> list[dict]:
    support = bf16["support"]
    note = (f"torch: mkldnn bf16 supported {support['mkldnn_bf16_supported']}, CPU capability "
            f"{support['cpu_capability']}")
    rows = [_row(f"bf16 vs fp32 F.linear {r['layer']} {r['rows']}x{r['in']}→{r['out']}", r["bf16_gflops"],
                 r["fp32_gflops"], "GFLOP/s (bf16 / fp32)", r["bf16_over_fp32"], note=note) for r in bf16["results"]]
    rows.append(_row("bf16 vs fp32: all linear layers of a small-model forward", None, None, "speed bf16 / fp32",
                     bf16["step_linear_bf16_over_fp32"], note="what bf16 autocast would do to the matmuls"))
    return rows


def _forward_rows(forward: dict) -> list[dict]:
    return [_row(f"{r['name']}: ours vs transformers GPT-2", r["ours"], r["anchor"], r["unit"], r["ratio"],
                 r["ratio_iqr"], note=f"max logit diff {r['max_logit_diff']:.0e}") for r in forward["results"]]


def _memory_rows(memory: dict) -> list[dict]:
    return [_row(f"{r['name']}: ours vs transformers GPT-2", r["ours"], r["anchor"], "MB (lower is better)",
                 r["ratio"], None, f"≤ {TARGETS['memory']}", r["ratio"] <= TARGETS["memory"],
                 f"step increase ours {r['step_increase_ours_mb']:.0f} MB, GPT-2 {r['step_increase_anchor_mb']:.0f} MB")
            for r in memory["results"]]


def _tokenizer_rows(tokenizer: dict) -> list[dict]:
    """Every ratio bench_tokenizer reports; judged: encode_ids_batch against the run's fastest tiktoken path."""
    rates = {row["name"]: row["mb_per_s_median"] for row in tokenizer["rows"]}
    fastest = tokenizer.get("fastest_tiktoken", "").removesuffix(" (batch)")
    rows = []
    for key, ratio in tokenizer["ratios"].items():
        mode, _, pair = key.partition(": ")
        ours_name, _, anchor_name = pair.partition(" / ")
        judged = ours_name == "ours encode_ids_batch" and anchor_name == fastest
        met = ratio["median"] >= TARGETS["tokenizer"] and tokenizer["ids_identical"] if judged else None
        rows.append(_row(f"tokenizer {mode}: {ours_name} vs {anchor_name}", rates.get(f"{ours_name} ({mode})"),
                         rates.get(f"{anchor_name} ({mode})"), "MB/s", ratio["median"], (ratio["min"], ratio["max"]),
                         TARGETS["tokenizer"] if judged else None, met,
                         f"ids identical: {tokenizer['ids_identical']}; range is min–max"))
    return rows


def _eval_rows(evaluation: dict) -> list[dict]:
    rows = []
    for row in evaluation["rows"]:
        met = row["speedup"] >= TARGETS["eval"] and row["accuracies_identical"]
        rows.append(_row(f"few-shot eval {row['task']} K={row['num_fewshot']} ({row['n_docs']} docs) vs lm-eval",
                         row["ours_examples_per_s"], row["lm_eval_examples_per_s"], "examples/s", row["speedup"],
                         row.get("speedup_iqr"), TARGETS["eval"], met, _accuracy_note(row)))
    return rows


def _accuracy_note(row: dict) -> str:
    def show(accuracies: dict) -> str:
        return ", ".join(f"{metric} {value:.3f}" for metric, value in accuracies.items())

    if row["accuracies_identical"]:
        return f"identical accuracies: {show(row['ours_acc'])}"
    return f"ACCURACIES DIFFER: ours {show(row['ours_acc'])}; lm-eval {show(row['lm_eval_acc'])}"


def _fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e-2 else f"{value:,.1f}"
    return str(value)


def _load_text(rows: list[dict]) -> str:
    """'load 1.9 → 2.1' (1-minute load average at the start and at the end of the benchmark's run)."""
    start, end = rows[0]["load_average"] if rows else (None, None)
    if not start:
        return "load not recorded"
    return f"load {start[0]:.1f} → {end[0]:.1f}" if end else f"load {start[0]:.1f} at start"


def describe_cpu(meta: dict) -> str:
    """describe_machine without the thread count: 'AMD EPYC (family 25, model 1; avx2 fma), 2 logical CPUs'."""
    return describe_machine(meta).rsplit("), ", 1)[0] + f"), {meta.get('logical_cpus', '?')} logical CPUs"


def render_markdown(sections: dict[int, tuple[list[dict], list[str]]], meta: dict, results_dir: Path = RESULTS_DIR,
                    quick: bool = False) -> str:
    lines = [
        "# Benchmark results: ours vs the anchors",
        "",
        *(["**A quick run (`--quick`: fewer rounds, the small model only): a smoke test of the benchmarks, not figures "
           "to quote.**", ""] if quick else []),
        f"Generated by `python -m benchmarks.run_all` at {meta['time_utc']} UTC on {describe_cpu(meta)}, torch "
        f"{meta['torch']}; one table per thread count asked for ({', '.join(str(t) for t in sections)}), each row "
        "measured on the machine and with the load average "
        "(1 minute, at the start → end of that benchmark's run; 2 cores, so a load above 2 means other work shared them) "
        "named in it.",
        "Ratio = ours/anchor, median of per-round ratios of runs in rotating order (A B, B A, … ; three contenders: "
        "A B C, B C A, …) after warm-up; the range is the interquartile range of those ratios (min–max with fewer "
        "than 4 rounds), and a target whose range holds it is \"within noise\", neither met nor missed. Memory ratio is "
        "ours/anchor peak RSS (lower is better). bf16 rows: ours = bf16 GFLOP/s, anchor = fp32 GFLOP/s.",
        f"Training judged on `{DEFAULT_TRAIN_MODE}` (our default, TrainConfig.compile = False) against transformers' "
        f"GPT-2 (≥ {TARGETS['train']}x) and, at the small size, against nanoGPT's model (> 1x); generation judged on "
        f"plain `generate` at batch 1 (≥ {TARGETS['generate']}x, tokens identical).",
    ]
    for threads, (rows, skipped) in sections.items():
        lines += ["", f"## {threads} thread{'s' if threads > 1 else ''}", ""]
        groups: dict[str, list[dict]] = {}
        for row in rows:
            groups.setdefault(row["measured_on"], []).append(row)
        if not groups:
            lines.append("No results at this thread count.")
            continue
        lines.append("Measured on " + "; ".join(sorted(groups)) + ".")
        lines += ["", "| figure | ours | anchor | unit | ratio | IQR (min–max under 4 rounds) | target | met | load | note |",
                  "|---|---:|---:|---|---:|---|---|---|---|---|"]
        for row in rows:
            spread = f"{row['spread'][0]:.2f}–{row['spread'][1]:.2f}" if row["spread"] else "—"
            ratio = f"{row['ratio']:.2e}" if row["unit"] == "max abs diff" else f"{row['ratio']:.2f}x"
            met = {True: "yes", False: "**no**", None: "—"}[row["met"]]
            if row["met"] is not None and isinstance(row["target"], (int, float)) \
                    and within_noise(row["spread"], row["target"]):
                met = "within noise"
            target = row["target"] if isinstance(row["target"], str) else (
                f"≥ {row['target']}x" if row["target"] else "—")
            if row["figure"].endswith("vs nanoGPT") and row["target"]:
                target = f"> {row['target']}x"
            lines.append(f"| {row['figure']} | {_fmt(row['ours'])} | {_fmt(row['anchor'])} | {row['unit']} | {ratio} | "
                         f"{spread} | {target} | {met} | {_load_text([row])} | {row['note']} |")
        if skipped:
            lines += ["", "Not shown (the file does not record the machine it was measured on, or another thread count): "
                      + ", ".join(f"`{name}`" for name in skipped) + "."]
    if (results_dir / "gpu_results.md").exists():
        lines += ["", "GPU figures (training, generation, the training loop; each with its GPU, versions and date): "
                  "[gpu_results.md](gpu_results.md)"]
    if (results_dir / "NOTES.md").exists():
        lines += ["", "What the figures mean, where the speed comes from and where it does not: [NOTES.md](NOTES.md)"]
    details = sorted(path.name for path in results_dir.glob("bench_tokenizer_threads*.md")) + (
        ["bench_eval.md"] if (results_dir / "bench_eval.md").exists() else [])
    if details:
        lines += ["", "Details: " + ", ".join(f"[{name}]({name})" for name in details)]
    return "\n".join(lines) + "\n"


def parse_threads(text: str) -> list[int]:
    """'1,2' -> [1, 2]; 'all' -> [the machine's logical CPU count]."""
    if text == "all":
        return [os.cpu_count() or 1]
    try:
        counts = [int(part) for part in text.split(",") if part]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise ValueError(f"--threads must be positive integers separated by commas or 'all', got {text!r}")
    return counts


def results_folder(out: Path | None, quick: bool) -> Path:
    """--out when given; else benchmarks/results_quick/ for a quick run, benchmarks/results/ for a full one."""
    if out is not None:
        return out
    return QUICK_RESULTS_DIR if quick else RESULTS_DIR


def _run_bench(label: str, command: list[str]) -> bool:
    """Run one benchmark's process; True when it exited 0."""
    print(f"=== {label}: {' '.join(command[1:])}", flush=True)
    start = time.perf_counter()
    completed = subprocess.run(command, cwd=REPO_ROOT)
    status = "ok" if completed.returncode == 0 else f"FAILED (exit {completed.returncode})"
    print(f"=== {label}: {status} in {time.perf_counter() - start:.0f} s, load average {load_average()}", flush=True)
    return completed.returncode == 0


def run_benches(names: list[str], thread_counts: list[int], quick: bool, out: Path) -> list[str]:
    """Run each benchmark at each thread count (gpu once, where CUDA is visible); the labels of those that failed."""
    failed = []
    print(f"=== load average before: {load_average()}", flush=True)
    for threads in thread_counts:
        for name in names:
            if name == GPU_BENCH:
                continue
            command = bench_command(name, threads, quick, out, check_trajectory=threads == thread_counts[0])
            label = f"{name} ({threads} threads)"
            if command is not None and not _run_bench(label, command):
                failed.append(label)
    if GPU_BENCH in names:
        command = gpu_bench_command(quick, out)
        if command is None:
            print("=== gpu: skipped, no CUDA device is visible", flush=True)
        elif not _run_bench(GPU_BENCH, command):
            failed.append(GPU_BENCH)
    return failed


def write_tables(thread_counts: list[int], out: Path, quick: bool) -> str:
    """results.json and RESULTS.md in `out`, built from the result files there; returns the markdown."""
    meta = machine_info(thread_counts[-1])
    sections = {threads: collect_rows(threads, out) for threads in thread_counts}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(
        {"machine": meta, "quick": quick, "targets": TARGETS, "default_train_mode": DEFAULT_TRAIN_MODE,
         "rows": {str(threads): rows for threads, (rows, _) in sections.items()}}, indent=2) + "\n")
    markdown = render_markdown(sections, meta, out, quick)
    (out / "RESULTS.md").write_text(markdown)
    return markdown


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1", help="comma-separated thread counts, or 'all' (default: 1)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer rounds and the small model only: a smoke run, written to benchmarks/results_quick "
                             "unless --out names a folder")
    parser.add_argument("--only", default=None, help=f"comma-separated subset of {','.join(BENCHES + (GPU_BENCH,))}")
    parser.add_argument("--report-only", action="store_true", help="skip running; rebuild RESULTS.md from results/*.json")
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default: benchmarks/results, or benchmarks/results_quick with --quick)")
    args = parser.parse_args(argv)
    try:
        thread_counts = parse_threads(args.threads)
    except ValueError as error:
        parser.error(str(error))
    known = BENCHES + (GPU_BENCH,)
    names = list(known)
    if args.only:
        unknown = set(args.only.split(",")) - set(known)
        if unknown:
            parser.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: {', '.join(known)}")
        names = [name for name in known if name in args.only.split(",")]
    out = results_folder(args.out, args.quick)
    print(f"=== results folder: {out}" + (" (a quick run: benchmarks/results is left as it is)"
                                          if args.quick and args.out is None else ""), flush=True)
    failed = [] if args.report_only else run_benches(names, thread_counts, args.quick, out)
    if failed:
        # Tables rebuilt now would mix a failed benchmark's older file with this run's under a fresh date.
        print(f"run_all: {len(failed)} benchmark(s) failed: {', '.join(failed)} (their output is above); RESULTS.md "
              f"and results.json in {out} were not rewritten. Fix them and run again, or rebuild the tables from the "
              "files present with --report-only", file=sys.stderr)
        sys.exit(1)
    print(write_tables(thread_counts, out, args.quick))
    print(f"=== wrote RESULTS.md and results.json in {out}", flush=True)


if __name__ == "__main__":
    main()
