"""GPT-1's experiment at our scale: fine-tuning (λ = 0 and λ = 0.5) against zero- and few-shot prompting of the same
pre-trained model, on the same held-out documents of BoolQ and PIQA.

    python -m benchmarks.finetune_experiment            # ~8 min on a shared 2-core CPU, one thread

1. The pre-trained model: training/configs/finetune_pretrain_wikitext2.yaml (4 layers x 128, WikiText-2 raw), trained
   into runs/finetune_experiment/pretrain unless it is already there.
2. For each task, training.finetune_data.split_heldout holds out val_fraction of the file (seeded): the documents
   fine-tuning never sees and the ones every figure here is measured on.
3. `eval.runner.evaluate` (what `hf-gpt-custom eval` runs) scores the pre-trained model at K = 0, 1, 5 on exactly
   those documents (written as the task's data files into a data folder of their own; few-shot examples come from the
   same held-out documents, never the one being scored, as lm-evaluation-harness draws them).
4. `hf-gpt-custom finetune` (training.finetune) with training/configs/finetune_{boolq,piqa}.yaml at λ = 0 and 0.5.
Writes benchmarks/results/finetune_experiment.{json,md,png}. Not a test: it reports what it measures.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from benchmarks.common import RESULTS_DIR, describe_machine, load_average, machine_info

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT.parent / "shared" / "data"
PRETRAIN_CONFIG = REPO_ROOT / "training" / "configs" / "finetune_pretrain_wikitext2.yaml"
TASKS = {  # experiment name -> (fine-tuning YAML, eval task)
    "boolq": (REPO_ROOT / "training" / "configs" / "finetune_boolq.yaml", "boolq"),
    "piqa": (REPO_ROOT / "training" / "configs" / "finetune_piqa.yaml", "piqa"),
}
LM_LOSS_WEIGHTS = (0.0, 0.5)
SHOTS = (0, 1, 5)


def pretrained_model(work_dir: Path) -> Path:
    from hf_gpt_custom.training.config import load_train_config
    from hf_gpt_custom.training.train import train

    run_dir = work_dir / "pretrain"
    # Always through train(): a finished run is only evaluated again, an interrupted one continues, and one trained
    # with other settings is refused by name (a kept final/ was reused whatever the YAML said)
    train(load_train_config(PRETRAIN_CONFIG, [f"out_dir={run_dir}"]))
    return run_dir / "final"


def write_piqa_labelled(path: Path) -> Path:
    """PIQA's valid.jsonl joined with valid-labels.lst (one label per line) into records fine-tuning can read."""
    goals = [json.loads(line) for line in (DATA_DIR / "piqa" / "valid.jsonl").read_text().splitlines() if line.strip()]
    labels = [int(line) for line in (DATA_DIR / "piqa" / "valid-labels.lst").read_text().split()]
    assert len(goals) == len(labels) == 1838
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({**goal, "label": label}) + "\n" for goal, label in zip(goals, labels)))
    return path


def write_heldout_eval_data(task: str, heldout: list[int], eval_data: Path) -> None:
    """The held-out documents as the eval task's own data files (same layout as ../shared/data)."""
    if task == "boolq":
        lines = (DATA_DIR / "boolq" / "val.jsonl").read_text().splitlines()
        (eval_data / "boolq").mkdir(parents=True, exist_ok=True)
        (eval_data / "boolq" / "val.jsonl").write_text("".join(lines[i] + "\n" for i in heldout))
    else:
        lines = (DATA_DIR / "piqa" / "valid.jsonl").read_text().splitlines()
        labels = (DATA_DIR / "piqa" / "valid-labels.lst").read_text().split()
        (eval_data / "piqa").mkdir(parents=True, exist_ok=True)
        (eval_data / "piqa" / "valid.jsonl").write_text("".join(lines[i] + "\n" for i in heldout))
        (eval_data / "piqa" / "valid-labels.lst").write_text("".join(labels[i] + "\n" for i in heldout))


def run(work_dir: Path) -> dict:
    import torch

    from hf_gpt_custom.eval.runner import evaluate
    from hf_gpt_custom.training.finetune import finetune
    from hf_gpt_custom.training.finetune_config import load_finetune_config
    from hf_gpt_custom.training.finetune_data import load_labelled_records, split_heldout

    torch.set_num_threads(1)
    started = time.time()
    meta = machine_info(threads=1)
    base = pretrained_model(work_dir)
    pretrain_summary = json.loads((base.parent / "training_summary.json").read_text())
    piqa_file = write_piqa_labelled(work_dir / "data" / "piqa_valid_labelled.jsonl")
    report = {"machine": meta, "pretrained": {
        "config": str(PRETRAIN_CONFIG.relative_to(REPO_ROOT)), "n_params": pretrain_summary["n_params"],
        "steps": pretrain_summary["steps"], "tokens_seen": pretrain_summary["tokens_seen"],
        "val_bits_per_byte": pretrain_summary["val_bits_per_byte"], "wall_time_s": pretrain_summary["wall_time_s"],
    }, "tasks": {}}
    for name, (yaml_path, eval_task) in TASKS.items():
        dataset = [] if name == "boolq" else [f"dataset={piqa_file}"]
        base_overrides = [f"init_from={base}", *dataset]
        config = load_finetune_config(yaml_path, base_overrides + [f"out_dir={work_dir / name}"])
        records = load_labelled_records(config.dataset)
        _, heldout = split_heldout(len(records), config.val_fraction, config.seed)
        eval_data = work_dir / f"eval_data_{name}"
        write_heldout_eval_data(name, heldout, eval_data)
        t0 = time.time()
        eval_dir = work_dir / f"eval_{name}"
        kept = json.loads((eval_dir / "results.json").read_text()) if (eval_dir / "results.json").is_file() else None
        if kept is not None and _scored_this_base(kept, base):  # a run interrupted after this stage: kept
            results = kept
        else:  # none yet, or another base model's or other shots' (the base was trained again since)
            results = evaluate(str(base), tasks=[eval_task], shots=list(SHOTS), data_dir=eval_data,
                               out_dir=eval_dir, show_progress=False, skip_unfittable=True).to_dict()
        rows = {}
        for row in results["results"]:
            if row["metric"] == "acc":
                assert row["n"] == len(heldout), (row["n"], len(heldout))
                rows[f"{row['num_fewshot']}-shot"] = {"acc": row["value"], "stderr": row["stderr"], "n": row["n"],
                                                      "n_truncated": row.get("n_truncated", 0)}
        entry = {"dataset": config.dataset.replace(str(REPO_ROOT.parent) + "/", "../"), "heldout_fraction":
                 config.val_fraction, "seed": config.seed, "heldout_docs": len(heldout), "train_docs":
                 len(records) - len(heldout), "prompting": rows, "eval_wall_time_s": time.time() - t0,
                 "skipped": results["skipped"], "finetuned": {}}
        for weight in LM_LOSS_WEIGHTS:
            run_dir = work_dir / f"{name}_lambda{weight}"
            # a finished run is evaluated again, one from another base or with other settings refused by name
            finetune(load_finetune_config(yaml_path, base_overrides + [
                f"out_dir={run_dir}", f"task.lm_loss_weight={weight}"]))
            summary = json.loads((run_dir / "training_summary.json").read_text())
            assert summary["heldout_examples"] == len(heldout)
            entry["finetuned"][f"lambda={weight}"] = {
                "acc": summary["val_accuracy"], "stderr": summary["val_accuracy_stderr"], "n": summary["heldout_examples"],
                "task_loss": summary["val_task_loss"], "steps": summary["steps"], "wall_time_s": summary["wall_time_s"],
                "examples_cut_to_block_size": summary["examples_cut_to_block_size"],
            }
            entry["majority_class_acc"] = summary["majority_class_accuracy"]
            entry["finetune_settings"] = {key: summary["config"][key] for key in (
                "block_size", "batch_size", "max_steps", "learning_rate", "warmup_steps", "weight_decay")}
        report["tasks"][name] = entry
    report["wall_time_s"] = time.time() - started
    report["load_average_end"] = load_average()
    return report


def _scored_this_base(results: dict, base: Path) -> bool:
    """Whether kept results.json scored these weights at every K of SHOTS (scored or skipped as unfittable)."""
    from hf_gpt_custom.manifest import weights_fingerprint

    shots = {row["num_fewshot"] for row in [*results["results"], *results.get("skipped", [])]}
    return results.get("model_weights_sha256") == weights_fingerprint(base) and set(SHOTS) <= shots


def format_markdown(report: dict) -> str:
    meta = report["machine"]
    pre = report["pretrained"]
    lines = [
        "# Fine-tuning vs zero-/few-shot prompting (GPT-1's experiment at our scale)",
        "",
        f"Measured on {describe_machine(meta)}, {meta['time_utc']} UTC, load average {meta['load_average']} at the "
        f"start and {report['load_average_end']} at the end (a shared machine). Wall time of each fine-tuning run: "
        + ", ".join(f"{name} λ={key.split('=')[1]} {run['wall_time_s'] / 60:.1f} min"
                    for name, entry in report["tasks"].items() for key, run in entry["finetuned"].items())
        + f"; pre-training {pre['wall_time_s'] / 60:.1f} min. (A second invocation reuses finished runs and "
        f"evaluations; this one took {report['wall_time_s'] / 60:.1f} min.)",
        "",
        f"Pre-trained model: `{pre['config']}`, {pre['n_params']:,} parameters, {pre['steps']} steps "
        f"({pre['tokens_seen']:,} tokens) of WikiText-2 raw, {pre['val_bits_per_byte']:.3f} bits per byte on its "
        "held-out lines. Accuracy on the held-out documents, ± standard error; n = number of documents.",
        "",
        "| task | held-out docs | majority class | 0-shot | 1-shot | 5-shot | fine-tuned λ=0 | fine-tuned λ=0.5 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in report["tasks"].items():
        cells = [name, str(entry["heldout_docs"]), f"{entry['majority_class_acc']:.3f}"]
        for k in SHOTS:
            row = entry["prompting"].get(f"{k}-shot")
            cells.append("skipped" if row is None else _cell(row) + (
                f" ({row['n_truncated']} cut)" if row.get("n_truncated") else ""))
        cells += [_cell(entry["finetuned"][f"lambda={w}"]) for w in LM_LOSS_WEIGHTS]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Fine-tuning settings (both λ): " + "; ".join(
        f"{name}: {entry['finetune_settings']}" for name, entry in report["tasks"].items()),
        "`(k cut)`: prompts that did not fit the 256-token context: few-shot examples dropped whole, then the "
        "passage cut from the left (BoolQ at K = 5: every prompt, so it scores as K = 0). Fine-tuning cut "
        + ", ".join(f"{name} {entry['finetuned']['lambda=0.0']['examples_cut_to_block_size']['heldout']} of "
                    f"{entry['heldout_docs']}" for name, entry in report["tasks"].items())
        + " held-out inputs to block_size (the start of the passage / goal, or of a long solution)."]
    return "\n".join(lines) + "\n"


def _cell(row: dict) -> str:
    stderr = row.get("stderr")
    return f"{row['acc']:.3f} ± {stderr:.3f}" if stderr is not None and math.isfinite(stderr) else f"{row['acc']:.3f}"


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["tasks"])
    columns = [f"{k}-shot" for k in SHOTS] + [f"lambda={w}" for w in LM_LOSS_WEIGHTS]
    labels = [f"{k}-shot" for k in SHOTS] + [f"fine-tuned λ={w:g}" for w in LM_LOSS_WEIGHTS]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    width = 0.8 / len(columns)
    for i, (column, label) in enumerate(zip(columns, labels)):
        values, errors = [], []
        for name in names:
            entry = report["tasks"][name]
            row = entry["prompting"].get(column) or entry["finetuned"].get(column) or {"acc": float("nan")}
            values.append(row["acc"])
            errors.append(row.get("stderr") or 0.0)
        positions = [j + (i - (len(columns) - 1) / 2) * width for j in range(len(names))]
        ax.bar(positions, values, width, yerr=errors, capsize=3, label=label)
    for j, name in enumerate(names):
        ax.hlines(report["tasks"][name]["majority_class_acc"], j - 0.45, j + 0.45, colors="black",
                  linestyles="dashed", label="majority class" if j == 0 else None)
    ax.set_xticks(range(len(names)), [f"{n} (n={report['tasks'][n]['heldout_docs']})" for n in names])
    ax.set_ylabel("accuracy on the held-out documents")
    ax.set_ylim(0.3, 0.8)
    ax.set_title(f"{report['pretrained']['n_params'] / 1e6:.1f}M-parameter GPT: prompting vs fine-tuning (± stderr)")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", default="runs/finetune_experiment", help="run folders (default: %(default)s)")
    parser.add_argument("--report-only", action="store_true", help="rebuild the .md and .png from the .json")
    parser.add_argument("--data-only", action="store_true", help="only write the labelled PIQA file that "
                        "training/configs/finetune_piqa.yaml reads (<work-dir>/data/piqa_valid_labelled.jsonl)")
    args = parser.parse_args()
    json_path = RESULTS_DIR / "finetune_experiment.json"
    if args.data_only:
        path = write_piqa_labelled(Path(args.work_dir) / "data" / "piqa_valid_labelled.jsonl")
        print(f"wrote {path}; fine-tune with `hf-gpt-custom finetune training/configs/finetune_piqa.yaml "
              "init_from=<a pre-trained final/ folder>`")
        return
    if args.report_only:
        report = json.loads(json_path.read_text())
    else:
        report = run(Path(args.work_dir).absolute())
        json_path.write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS_DIR / "finetune_experiment.md").write_text(format_markdown(report))
    plot(report, RESULTS_DIR / "finetune_experiment.png")
    print(format_markdown(report))


if __name__ == "__main__":
    main()
