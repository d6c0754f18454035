"""shift_block_boundaries on and off, in the regime it is for: many epochs over a small corpus.

Run by hand (not collected by pytest); it reports, it does not pass or fail:

    python -m benchmarks.bench_shifted_blocks --jobs 2               # 2 seeds x on/off (~15 min a run at 1 thread)
    python -m benchmarks.bench_shifted_blocks --report-only          # rebuild the table and plot from the run folders

Each run is a real `hf-gpt-custom train training/configs/shakespeare-gpu.yaml` (its own process) with a model small
enough for a CPU (3 layers, 192 wide, dropout 0.2, 256-token blocks, batch 16) trained on the first `--fraction` of
tiny Shakespeare's training speeches, so that 800 steps are ~38 epochs: the GPU recipe's regime (~28 epochs, where it
overfits), at a CPU's size. Validation is the recipe's: the last 10% of the speeches, scored by the training code
itself at every eval_interval. The tokenizer is the recipe's (2,048 tokens, trained on the training 90%).
Results: benchmarks/results/shifted_blocks.{json,md,png}, with the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import RESULTS_DIR, add_run_sweep_args, describe_machine, machine_info, write_json

REPO_ROOT = RESULTS_DIR.parents[1]
GPU_RECIPE = REPO_ROOT / "training" / "configs" / "shakespeare-gpu.yaml"
CPU_SIZED = ["model.n_layer=3", "model.n_head=4", "model.n_embd=192", "model.resid_pdrop=0.2", "model.embd_pdrop=0.2",
             "model.attn_pdrop=0.2", "block_size=256", "batch_size=16", "warmup_steps=50", "weight_decay=0.5",
             "eval_interval=100", "mixed_precision=no", "checkpoint_interval=0", "log_with=none", "torch_threads=1"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2", help="comma-separated seeds; each trains with the setting off and on")
    parser.add_argument("--steps", type=int, default=800, help="optimizer steps per run (default 800)")
    parser.add_argument("--fraction", type=float, default=0.25, help="share of the training speeches trained on")
    return add_run_sweep_args(parser, "shifted_blocks").parse_args(argv)


def prepare_inputs(work_dir: Path, fraction: float) -> tuple[Path, Path, Path]:
    """(training file, validation file, tokenizer folder): the recipe's tail split and tokenizer, less training text."""
    from hf_gpt_custom.training.config import load_train_config
    from hf_gpt_custom.training.data import split_documents
    from hf_gpt_custom.training.workload import prepare_tokenizer

    recipe = load_train_config(GPU_RECIPE, [f"out_dir={work_dir / 'tokenizer_run'}"])
    tokenizer = prepare_tokenizer(recipe)
    train_documents, val_documents = split_documents(recipe)
    kept = train_documents.select(range(math.ceil(len(train_documents) * fraction)))
    train_file, val_file = work_dir / "train_speeches.txt", work_dir / "val_speeches.txt"
    # documents are paragraphs without blank lines: joined by one blank line, the same paragraphs come back
    train_file.write_text("\n\n".join(kept["text"]) + "\n", encoding="utf-8")
    val_file.write_text("\n\n".join(val_documents["text"]) + "\n", encoding="utf-8")
    print(f"{len(kept)} of {len(train_documents)} training speeches; {len(val_documents)} held out", flush=True)
    return train_file, val_file, tokenizer


def run_name(seed: int, shifted: bool) -> str:
    return f"{'shifted' if shifted else 'fixed'}_seed{seed}"


def train(seed: int, shifted: bool, steps: int, work_dir: Path, inputs: tuple[Path, Path, Path]) -> None:
    train_file, val_file, tokenizer = inputs
    name = run_name(seed, shifted)
    command = ["hf-gpt-custom", "train", str(GPU_RECIPE), f"dataset={train_file}", f"val_dataset={val_file}",
               "val_holdout=random", f"tokenizer={tokenizer}", f"out_dir={work_dir / name}", f"seed={seed}",
               f"max_steps={steps}", f"shift_block_boundaries={str(shifted).lower()}", *CPU_SIZED]
    print(f"{name}: {' '.join(command[3:])}", flush=True)
    with open(work_dir / f"{name}.log", "w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    print(f"{name}: done", flush=True)


def collect(seed: int, shifted: bool, work_dir: Path) -> dict | None:
    log = work_dir / run_name(seed, shifted) / "run_log.jsonl"
    if not log.exists():
        return None
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    evals = [(row["step"], row["val_bits_per_byte"], row["val_loss"]) for row in rows if row.get("kind") == "eval"]
    steps = [row for row in rows if row.get("kind") == "train"]
    summary = json.loads((log.parent / "training_summary.json").read_text())
    return {"seed": seed, "shift_block_boundaries": shifted, "curve": evals, "final_bits_per_byte": evals[-1][1],
            "best_bits_per_byte": min(bpb for _, bpb, _ in evals), "final_val_loss": evals[-1][2],
            "final_train_loss": sum(row["loss"] for row in steps[-20:]) / len(steps[-20:]),
            "steps": steps[-1]["step"], "train_blocks": summary.get("train_blocks"),
            "epochs": round(steps[-1]["step"] * summary["config"]["batch_size"] / (summary["train_blocks"] - shifted), 1)}


def write_report(results: list[dict], machine: dict, out: Path, fraction: float) -> None:
    write_json("shifted_blocks", {"machine": machine, "fraction": fraction, "settings": CPU_SIZED,
                                  "results": results}, out)
    lines = [
        "# shift_block_boundaries: the same run with the training blocks cut anew each epoch, and without", "",
        f"`training/configs/shakespeare-gpu.yaml` sized for a CPU ({' '.join(CPU_SIZED[:6])}, 256-token blocks, "
        f"batch 16), trained on the first {fraction:.0%} of the training speeches, validated on the last 10% of "
        f"the speeches (the recipes' tail). Measured on {describe_machine(machine)}, two runs side by side; "
        f"`python -m benchmarks.bench_shifted_blocks --jobs 2`.", "",
        "| seed | shift_block_boundaries | steps | epochs | val bits/byte at each eval | best | final "
        "| train / val loss (nats/token) |",
        "|---:|---|---:|---:|---|---:|---:|---|",
    ]
    for r in results:
        curve = ", ".join(f"{bpb:.3f}" for _, bpb, _ in r["curve"])
        lines.append(f"| {r['seed']} | {str(r['shift_block_boundaries']).lower()} | {r['steps']} | {r['epochs']} | "
                     f"{curve} | {r['best_bits_per_byte']:.4f} | {r['final_bits_per_byte']:.4f} | "
                     f"{r['final_train_loss']:.2f} / {r['final_val_loss']:.2f} |")
    by_seed = {}
    for r in results:
        by_seed.setdefault(r["seed"], {})[r["shift_block_boundaries"]] = r
    pairs = [(p[False], p[True]) for p in by_seed.values() if len(p) == 2]
    if pairs:
        lines += ["", "Shifted minus fixed, per seed (negative: the shifted run is better):", ""]
        for fixed, shifted in pairs:
            lines.append(f"- seed {fixed['seed']}: final {shifted['final_bits_per_byte'] - fixed['final_bits_per_byte']:+.4f} "
                         f"bits/byte, best {shifted['best_bits_per_byte'] - fixed['best_bits_per_byte']:+.4f}")
    (out / "shifted_blocks.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5))
    for r in results:
        axis.plot([step for step, _, _ in r["curve"]], [bpb for _, bpb, _ in r["curve"]], marker="o",
                  linestyle="-" if r["shift_block_boundaries"] else "--",
                  label=f"seed {r['seed']}, {'shifted' if r['shift_block_boundaries'] else 'fixed'} blocks")
    axis.set_xlabel("optimizer step")
    axis.set_ylabel("validation bits per byte (tail 10%)")
    axis.set_title(f"Blocks cut anew each epoch vs fixed, {fraction:.0%} of the training text")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "shifted_blocks.png", dpi=120)
    print(f"wrote {out / 'shifted_blocks.md'}, .json and .png")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    seeds = [int(seed) for seed in args.seeds.split(",")]
    runs = [(seed, shifted) for seed in seeds for shifted in (False, True)]
    args.work_dir.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        inputs = prepare_inputs(args.work_dir, args.fraction)
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda run: train(*run, args.steps, args.work_dir, inputs), runs))
    results = [result for result in (collect(seed, shifted, args.work_dir) for seed, shifted in runs) if result]
    write_report(results, machine_info(1), args.out, args.fraction)


if __name__ == "__main__":
    main()
