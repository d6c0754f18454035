"""Examples per second: our evaluator vs lm-evaluation-harness 0.4.13 on the same model folder, docs and K.

Run by hand (not collected by pytest):  python benchmarks/bench_eval.py [--limit 100] [--shots 0,5]
Builds a small random GPT-2 (transformers GPT2LMHeadModel, 4 layers x 256, vocab 8192 from a BPE tokenizer trained
on tiny Shakespeare) in a temp folder, mirrors our task files as lm-eval tasks over the same processed docs
(tests/eval/lm_eval_tasks.py), then times both harnesses on each task and K, interleaved (ours, lm-eval, lm-eval,
ours, ours, lm-eval, ...; benchmarks.common.compare_interleaved) after one untimed run each, which gives the
accuracies printed side by side; the speedup is the median of per-round ratios. lm-eval's per-call bookkeeping that
is no scoring (its environment report runs torch's collect_env: 0.6-2 s a call, against ~2.5 s for piqa K=0) is
switched off for the timed calls, so both sides time the same work.
Writes benchmarks/results/bench_eval.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))


def build_model_folder(folder: Path, data_dir: Path) -> Path:
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

    bpe = ByteLevelBPETokenizer()
    text = (data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    bpe.train_from_iterator([text], vocab_size=8192, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save_model(str(folder))
    tokenizer = GPT2TokenizerFast.from_pretrained(str(folder), bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    tokenizer.save_pretrained(str(folder))
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=1024, n_embd=256, n_layer=4, n_head=4,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    GPT2LMHeadModel(config).save_pretrained(str(folder))
    return folder


def find_data_dir() -> Path:
    """The benchmark data folder eval reads ($HF_GPT_CUSTOM_DATA_DIR or ../shared/data); exits 2 naming it when it is
    missing. Checked before lm-eval is imported: a missing folder was a FileNotFoundError traceback after it."""
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.eval.task import default_data_dir

    try:
        folder = default_data_dir()
    except UserError as err:  # $HF_GPT_CUSTOM_DATA_DIR names no folder
        print(f"bench_eval: {err}", file=sys.stderr)
        raise SystemExit(2) from err
    if not (folder / "tinyshakespeare" / "input.txt").is_file():
        what = f"the data folder {folder} does not exist" if not folder.is_dir() else \
            f"{folder / 'tinyshakespeare' / 'input.txt'} not found"
        print(f"bench_eval: {what}; put the shared data there (README: ../shared/data, beside the checkout) or set "
              "$HF_GPT_CUSTOM_DATA_DIR", file=sys.stderr)
        raise SystemExit(2)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="hellaswag,piqa", help="comma-separated tasks (default: hellaswag,piqa)")
    parser.add_argument("--shots", default="0,5", help="comma-separated K values (default: 0,5)")
    parser.add_argument("--limit", type=int, default=100, help="docs per task (default: 100)")
    parser.add_argument("--batch-size", type=int, default=16, help="requests per forward pass for both (default: 16)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs per harness, interleaved; the median is reported (default: 3: with 2 the "
                             "median is a mean, and one run slowed by another agent on the shared machine moves it)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for both harnesses (default: 1; the 2-core machine is shared, so more threads "
                             "only add noise)")
    parser.add_argument("--out", default=str(REPO_ROOT / "benchmarks" / "results"), help="where to write bench_eval.json/.md")
    args = parser.parse_args()
    data_dir = find_data_dir()

    import lm_eval
    import torch
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.common import compare_interleaved, describe_machine, machine_info
    from hf_gpt_custom.eval.runner import evaluate
    from tests.eval.lm_eval_tasks import write_lm_eval_tasks

    import lm_eval.evaluator

    lm_eval.evaluator.add_env_info = lambda results: None  # collect_env: timed as lm-eval's scoring, it is not
    lm_eval.evaluator.get_git_commit_hash = lambda: None
    torch.set_num_threads(args.threads)
    machine = machine_info(args.threads)  # at the start: its load average is the load the run began under
    tasks = [t for t in args.tasks.split(",") if t]
    shots = [int(k) for k in args.shots.split(",") if k]
    work = Path(tempfile.mkdtemp(prefix="bench_eval_"))
    (work / "model").mkdir()
    model_dir = build_model_folder(work / "model", data_dir)
    names = write_lm_eval_tasks(tasks, work / "lm_eval_tasks")
    task_manager = TaskManager(include_path=str(work / "lm_eval_tasks"), include_defaults=False)
    lm = HFLM(pretrained=str(model_dir), batch_size=args.batch_size, device="cpu", dtype="float32")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))

    def run_lm_eval(task: str, k: int, limit: int = args.limit) -> dict:
        out = lm_eval.simple_evaluate(model=lm, tasks=[names[task]], num_fewshot=k, limit=limit,
                                      task_manager=task_manager, bootstrap_iters=0, log_samples=False,
                                      fewshot_random_seed=1234, verbosity="ERROR")
        return {m: out["results"][names[task]][f"{m},none"] for m in ("acc", "acc_norm") if f"{m},none" in out["results"][names[task]]}

    def run_ours(task: str, k: int, limit: int = args.limit) -> dict:
        results = evaluate(model, tokenizer, tasks=[task], shots=[k], limit=limit, batch_size=args.batch_size,
                           show_progress=False)
        return {row["metric"]: row["value"] for row in results.results if row["metric"] in ("acc", "acc_norm")}

    rows = []
    for task in tasks:
        for k in shots:
            # One untimed full run of each gives the accuracies and warms up data loading and caches; then the timed
            # rounds alternate the two harnesses (A B, B A, ...) like every other benchmark here.
            accuracies = {"lm_eval": run_lm_eval(task, k), "ours": run_ours(task, k)}
            comparison = compare_interleaved(f"few-shot eval {task} K={k}", lambda: run_ours(task, k),
                                             lambda: run_lm_eval(task, k), work=args.limit, rounds=args.repeats,
                                             warmup=0, unit="examples/s")
            summary = comparison.summary()
            row = {
                "task": task, "num_fewshot": k, "n_docs": args.limit,
                "lm_eval_examples_per_s": summary["anchor"], "ours_examples_per_s": summary["ours"],
                "speedup": summary["ratio"], "speedup_iqr": summary["ratio_iqr"],
                "lm_eval_seconds": summary["anchor_s"], "ours_seconds": summary["ours_s"],
                "lm_eval_acc": accuracies["lm_eval"], "ours_acc": accuracies["ours"],
                "accuracies_identical": accuracies["lm_eval"] == accuracies["ours"],
            }
            rows.append(row)
            print(f"  acc ours {accuracies['ours']} lm-eval {accuracies['lm_eval']} "
                  f"identical={row['accuracies_identical']}", flush=True)

    meta = {"model": "random GPT2LMHeadModel 4x256, vocab 8192, n_positions 1024 (float32, CPU)",
            "torch_threads": args.threads, "machine": {**machine, "load_average_at_end": os.getloadavg()},
            "load_average_at_end": os.getloadavg(), "limit": args.limit, "batch_size": args.batch_size, "repeats": args.repeats}
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_eval.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = ["# Eval throughput: ours vs lm-evaluation-harness 0.4.13", "", f"{meta['model']}; batch size {args.batch_size}; "
             f"measured on {describe_machine(machine)}; speedup = median of per-round ratios over {args.repeats} interleaved rounds (A B, B A, ...) after an untimed run each; load average at end {meta['load_average_at_end'][0]:.1f}.", "",
             "Ours (eval/scoring.py) runs each context once, together with the tokens all its choices start with, and "
             "copies its KV cache per choice; batches rows longest first within a token budget; and applies the LM head "
             "and log-softmax only to scored positions, in cache-sized chunks. lm-eval runs one padded row per choice "
             "and the head on every position. Both sides time scoring alone: lm-eval's environment report (torch's "
             "collect_env, 0.6-2 s a call) is switched off for the run.", "",
             "| task | K | docs | ours ex/s | lm-eval ex/s | speedup | acc ours | acc lm-eval | identical |", "|---|---:|---:|---:|---:|---:|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['num_fewshot']} | {r['n_docs']} | {r['ours_examples_per_s']:.2f} | {r['lm_eval_examples_per_s']:.2f} | "
                     f"{r['speedup']:.2f}x | {r['ours_acc']} | {r['lm_eval_acc']} | {r['accuracies_identical']} |")
    (out_dir / "bench_eval.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out_dir / 'bench_eval.json'} and {out_dir / 'bench_eval.md'}")


if __name__ == "__main__":
    main()
