"""Recipe sweep: the main job with one training setting changed, and with 4x its budget, on the tail split.

Run by hand (not collected by pytest); it reports, it does not pass or fail:

    python -m benchmarks.bench_recipe --jobs 2                       # every variant (~5-25 min each at 1 thread)
    python -m benchmarks.bench_recipe --variants default,steps_x4    # a subset
    python -m benchmarks.bench_recipe --report-only                  # rebuild the table and plot from the run folders

Each variant is a real `hf-gpt-custom train training/configs/shakespeare.yaml` run (its own process) with the
overrides below and a tokenizer of its vocabulary size trained once on the training 90% of the speeches (the main
job's tokenizer stage). Validation is the training code's own: bits per byte on the last 10% of tiny Shakespeare at
every eval_interval. The question it answers: is the main job's 2.31 bits per byte limited by a setting that a
5-minute budget could change, or by the budget (and the 1M-byte corpus it sees three times)?
Results: benchmarks/results/recipe_sweep.{json,md,png}, with the machine and the CPU-seconds of each run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import RESULTS_DIR, add_run_sweep_args, describe_machine, machine_info, write_json

REPO_ROOT = RESULTS_DIR.parents[1]
MAIN_JOB_CONFIG = REPO_ROOT / "training" / "configs" / "shakespeare.yaml"
DROPOUT = ["model.resid_pdrop=0.1", "model.embd_pdrop=0.1", "model.attn_pdrop=0.1"]
STEPS_X4 = ["max_steps=1680", "eval_interval=210"]
VARIANTS: dict[str, list[str]] = {
    "default": [],
    "dropout_0.1": DROPOUT,
    "min_lr_0": ["min_lr_ratio=0.0"],
    "lr_5e-3": ["learning_rate=5e-3"],
    "vocab_4096": ["tokenizer_vocab_size=4096"],
    "vocab_16384": ["tokenizer_vocab_size=16384"],
    "steps_x4": STEPS_X4,
    "steps_x4_dropout_0.1": STEPS_X4 + DROPOUT,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {','.join(VARIANTS)}")
    return add_run_sweep_args(parser, "recipe_sweep").parse_args(argv)


def vocab_size(overrides: list[str]) -> int:
    sizes = [int(item.split("=")[1]) for item in overrides if item.startswith("tokenizer_vocab_size=")]
    return sizes[0] if sizes else 8192  # the main job's


def prepare_tokenizers(names: list[str], work_dir: Path) -> dict[int, Path]:
    """One tokenizer per vocabulary size, trained as the main job's tokenizer stage does (training documents only)."""
    from hf_gpt_custom.training.config import load_train_config
    from hf_gpt_custom.training.workload import prepare_tokenizer

    folders = {}
    for size in sorted({vocab_size(VARIANTS[name]) for name in names}):
        config = load_train_config(MAIN_JOB_CONFIG, [f"tokenizer_vocab_size={size}", f"out_dir={work_dir / f'tokenizer_{size}'}"])
        folders[size] = prepare_tokenizer(config)
        print(f"tokenizer {size}: {folders[size]}", flush=True)
    return folders


def train(name: str, work_dir: Path, tokenizer: Path) -> None:
    command = ["hf-gpt-custom", "train", str(MAIN_JOB_CONFIG), f"tokenizer={tokenizer}", f"out_dir={work_dir / name}",
               "torch_threads=1", "checkpoint_interval=100000", *VARIANTS[name]]
    print(f"{name}: {' '.join(command[3:])}", flush=True)
    with open(work_dir / f"{name}.log", "w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def collect(name: str, work_dir: Path) -> dict | None:
    log = work_dir / name / "run_log.jsonl"
    if not log.exists():
        return None
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    evals = [(row["step"], row["val_bits_per_byte"]) for row in rows if row.get("kind") == "eval"]
    steps = [row for row in rows if row.get("kind") == "train"]
    last_val = [row["val_loss"] for row in rows if row.get("kind") == "eval"][-1]
    return {"variant": name, "overrides": VARIANTS[name], "curve": evals, "final_bits_per_byte": evals[-1][1],
            "final_train_loss": sum(row["loss"] for row in steps[-20:]) / len(steps[-20:]), "final_val_loss": last_val,
            "steps": steps[-1]["step"], "tokens": steps[-1]["tokens_seen"],
            "training_seconds": sum(row["step_time_s"] for row in steps)}


def write_report(results: list[dict], machine: dict, out: Path) -> None:
    write_json("recipe_sweep", {"machine": machine, "results": results}, out)
    default = next((r["final_bits_per_byte"] for r in results if r["variant"] == "default"), None)
    lines = [
        "# Recipe sweep on tiny Shakespeare (main job, one setting changed)", "",
        f"`training/configs/shakespeare.yaml` with the overrides shown, 1 thread per run, validation on the last 10% "
        f"of the speeches (bits per byte of the raw text). Measured on {describe_machine(machine)}; other runs shared "
        "the 2 cores, so training seconds are wall time per step summed, not CPU time.", "",
        "Train/val loss: nats per token at the end (training: mean of the last 20 steps); the gap is what the model "
        "learned about the training plays that does not carry to the held-out ones.", "",
        "| variant | overrides | steps | tokens | training s | val bits/byte at each eval | final | Δ vs default "
        "| train / val loss |",
        "|---|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in results:
        curve = ", ".join(f"{bpb:.3f}" for _, bpb in r["curve"])
        delta = "" if default is None else f"{r['final_bits_per_byte'] - default:+.3f}"
        lines.append(f"| {r['variant']} | {' '.join(r['overrides']) or '-'} | {r['steps']} | {r['tokens']:,} | "
                     f"{r['training_seconds']:.0f} | {curve} | {r['final_bits_per_byte']:.3f} | {delta} | "
                     f"{r['final_train_loss']:.2f} / {r['final_val_loss']:.2f} |")
    (out / "recipe_sweep.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5))
    for r in results:
        axis.plot([tokens_at(r, step) for step, _ in r["curve"]], [bpb for _, bpb in r["curve"]], marker="o",
                  label=r["variant"])
    axis.axhline(2.10, color="gray", linestyle="--", label="issue 15 target (2.10)")
    axis.set_xlabel("training tokens")
    axis.set_ylabel("validation bits per byte (tail 10%)")
    axis.set_title("Main job recipe sweep")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "recipe_sweep.png", dpi=120)
    print(f"wrote {out / 'recipe_sweep.md'}, .json and .png")


def tokens_at(result: dict, step: int) -> int:
    return step * result["tokens"] // result["steps"]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    names = args.variants.split(",")
    unknown = set(names) - set(VARIANTS)
    if unknown:
        sys.exit(f"unknown variant(s) {', '.join(sorted(unknown))}; known: {', '.join(VARIANTS)}")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        tokenizers = prepare_tokenizers(names, args.work_dir)
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda name: train(name, args.work_dir, tokenizers[vocab_size(VARIANTS[name])]), names))
    results = [result for result in (collect(name, args.work_dir) for name in names) if result]
    write_report(results, machine_info(1), args.out)


if __name__ == "__main__":
    main()
