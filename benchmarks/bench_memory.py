"""Peak RSS of a training step (forward + backward + AdamW): ours vs GPT2LMHeadModel (sdpa), a fresh process each.

Each measurement is its own subprocess so that one model's allocator high-water mark never counts for the other;
ours and the anchor alternate. Reported: peak RSS of the whole process (what the OS sees) and the step's increase
over the RSS just before the first step (model + imports excluded).
Run: python -m benchmarks.bench_memory [--sizes small,gpt2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from benchmarks.common import RESULTS_DIR, add_common_args, machine_info, result_name, write_json

REPO_ROOT = RESULTS_DIR.parents[1]

CHILD = r"""
import json, sys
from benchmarks.common import SIZES, current_rss_mb, peak_rss_mb, pin_threads
from benchmarks.bench_train import BATCH_SHAPES, make_step, random_batch
import torch
which, size_name, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
pin_threads(threads)
size = SIZES[size_name]
torch.manual_seed(0)
if which == "ours":
    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
    model = GPTCustomForCausalLM(GPTCustomConfig(**size, bos_token_id=0, eos_token_id=0))
else:
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(**size, bos_token_id=0, eos_token_id=0, attn_implementation="sdpa"))
batch, seq_len = BATCH_SHAPES[size_name]
step = make_step(model, random_batch(size["vocab_size"], batch, seq_len))
before = current_rss_mb()
for _ in range(2):  # the first step allocates AdamW's moments; the second shows the steady state
    step()
print(json.dumps({"peak_rss_mb": peak_rss_mb(), "before_step_mb": before}))
"""


def measure(which: str, size_name: str, threads: int) -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", CHILD, which, size_name, str(threads)], capture_output=True, text=True, check=True,
        cwd=REPO_ROOT,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = add_common_args(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--sizes", default="small,gpt2", help="comma-separated: small, gpt2 (default: both)")
    parser.add_argument("--repeats", type=int, default=2, help="fresh processes per model and size (default: 2)")
    args = parser.parse_args(argv)
    payload = {"machine": machine_info(args.threads), "results": []}
    for size_name in args.sizes.split(","):
        runs = {"ours": [], "anchor": []}
        for index in range(args.repeats):
            for which in (("ours", "anchor") if index % 2 == 0 else ("anchor", "ours")):
                runs[which].append(measure(which, size_name, args.threads))
        peak = {which: statistics.median(run["peak_rss_mb"] for run in runs[which]) for which in runs}
        step = {
            which: statistics.median(run["peak_rss_mb"] - run["before_step_mb"] for run in runs[which]) for which in runs
        }
        result = {
            "name": f"peak RSS train step {size_name}",
            "size": size_name,
            "unit": "MB",
            "ours": peak["ours"],
            "anchor": peak["anchor"],
            "ratio": peak["ours"] / peak["anchor"],  # memory: ours/anchor, lower is better
            "step_increase_ours_mb": step["ours"],
            "step_increase_anchor_mb": step["anchor"],
            "runs": runs,
        }
        print(
            f"{result['name']:<40} ours {peak['ours']:8.0f} MB  anchor {peak['anchor']:8.0f} MB  ratio "
            f"{result['ratio']:.2f}x (step increase: ours {step['ours']:.0f} MB, anchor {step['anchor']:.0f} MB)",
            flush=True,
        )
        payload["results"].append(result)
    write_json(result_name("memory", args.threads), payload, args.out)
    return payload


if __name__ == "__main__":
    main()
