"""bf16 autocast training against fp32: the main job's first 200 steps, same data, seed and schedule, loss by loss.

Run by hand (not collected by pytest); it reports, it does not pass or fail:

    python -m benchmarks.bench_bf16_trajectory                 # ~3 min fp32 + ~20 min bf16 at 1 thread here
    python -m benchmarks.bench_bf16_trajectory --report-only   # rebuild from the run folders

Both runs are `hf-gpt-custom train training/configs/shakespeare.yaml` (420-step schedule, so the first 200 steps
are the main job's) with `mixed_precision=no` and `bf16`, stopped once step 200 is logged. Single-step losses of
two precisions drift apart as rounding compounds, so the comparison is of 20-step means: the largest relative
difference between the two runs' means, against issue 12's 1%. On a CPU without AVX512-BF16/AMX bf16 matmuls are
emulated and several times slower (bench_bf16.py), so only the arithmetic is checked here, not the speed.
Results: benchmarks/results/bf16_trajectory.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

from benchmarks.common import RESULTS_DIR, describe_machine, machine_info, write_json

REPO_ROOT = RESULTS_DIR.parents[1]
MAIN_JOB_CONFIG = REPO_ROOT / "training" / "configs" / "shakespeare.yaml"
STEPS, WINDOW, TOLERANCE = 200, 20, 0.01


def run_until(precision: str, run_dir: Path, tokenizer: str | None) -> None:
    """Train with the main job's config until step STEPS is in the run log, then stop the process."""
    command = ["hf-gpt-custom", "train", str(MAIN_JOB_CONFIG), f"out_dir={run_dir}", f"mixed_precision={precision}",
               "torch_threads=1", "checkpoint_interval=100000", "eval_interval=100000"]
    if tokenizer:
        command.append(f"tokenizer={tokenizer}")
    log_path = run_dir / "run_log.jsonl"
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / f"{run_dir.name}.log", "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        while process.poll() is None and len(losses(log_path)) < STEPS:
            time.sleep(5)
        process.terminate()
        process.wait()
    print(f"{precision}: {len(losses(log_path))} steps logged in {run_dir}", flush=True)


def losses(log_path: Path) -> list[float]:
    if not log_path.exists():
        return []
    rows = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    return [row["loss"] for row in rows if row.get("kind") == "train"][:STEPS]


def compare(fp32: list[float], bf16: list[float]) -> dict:
    means = {name: [sum(values[i:i + WINDOW]) / WINDOW for i in range(0, STEPS, WINDOW)]
             for name, values in (("fp32", fp32), ("bf16", bf16))}
    relative = [abs(b - f) / f for f, b in zip(means["fp32"], means["bf16"])]
    return {"steps": STEPS, "window": WINDOW, "window_means": means, "max_relative_difference": max(relative),
            "relative_differences": relative, "tolerance": TOLERANCE, "passed": max(relative) <= TOLERANCE,
            "losses": {"fp32": fp32, "bf16": bf16}}


def write_report(result: dict, machine: dict, out: Path) -> None:
    write_json("bf16_trajectory", {"machine": machine, **result}, out)
    means = result["window_means"]
    lines = ["# bf16 autocast vs fp32: the main job's first 200 steps", "",
             f"Measured on {describe_machine(machine)}. 20-step mean training loss (nats/token) of each run; "
             f"largest relative difference {result['max_relative_difference']:.2%} (issue 12: within 1%).", "",
             "| steps | fp32 | bf16 | relative difference |", "|---|---:|---:|---:|"]
    for index, (f, b, r) in enumerate(zip(means["fp32"], means["bf16"], result["relative_differences"])):
        lines.append(f"| {index * WINDOW + 1}-{(index + 1) * WINDOW} | {f:.4f} | {b:.4f} | {r:.2%} |")
    (out / "bf16_trajectory.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    for name in ("fp32", "bf16"):
        axis.plot(range(1, STEPS + 1), result["losses"][name], label=name, alpha=0.8)
    axis.set_xlabel("step")
    axis.set_ylabel("training loss (nats/token)")
    axis.set_title(f"bf16 autocast vs fp32, max 20-step-mean difference {result['max_relative_difference']:.2%}")
    axis.legend()
    figure.tight_layout()
    figure.savefig(out / "bf16_trajectory.png", dpi=120)
    print(f"wrote {out / 'bf16_trajectory.md'}, .json and .png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, default=Path("runs") / "bf16_trajectory", help="run folders")
    parser.add_argument("--tokenizer", default=None, help="a tokenizer folder (default: each run trains the main job's)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="results folder (default: benchmarks/results)")
    parser.add_argument("--report-only", action="store_true", help="rebuild the table and plot from the run folders")
    args = parser.parse_args(argv)
    if not args.report_only:
        for precision in ("no", "bf16"):
            run_until(precision, args.work_dir / f"precision_{precision}", args.tokenizer)
    fp32, bf16 = (losses(args.work_dir / f"precision_{p}" / "run_log.jsonl") for p in ("no", "bf16"))
    if min(len(fp32), len(bf16)) < STEPS:
        raise SystemExit(f"need {STEPS} logged steps of each run, have fp32 {len(fp32)}, bf16 {len(bf16)}")
    write_report(compare(fp32, bf16), machine_info(1), args.out)


if __name__ == "__main__":
    main()
