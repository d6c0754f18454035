"""Write an evaluation's files: results.json (the schema in notes/CONTRACTS.md, read by the model card),
table.md, examples.jsonl (prompt, choices, log-likelihoods, prediction, gold per doc) and shots_curve.png
(metric against K for each task, like the GPT-3 paper's few-shot curves)."""

from __future__ import annotations

import json
import math
from pathlib import Path

RESULT_KEYS = ("task", "dataset", "num_fewshot", "metric", "value", "stderr", "n", "higher_is_better", "n_truncated")


def _finite(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_report(results, out_dir: str | Path) -> Path:
    """Write the four files into out_dir (created if needed) and return it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = results.to_dict()
    payload["results"] = [{key: _finite(row[key]) for key in RESULT_KEYS} for row in payload["results"]]
    (out_dir / "results.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    (out_dir / "table.md").write_text(format_table(payload), encoding="utf-8")
    with open(out_dir / "examples.jsonl", "w", encoding="utf-8") as handle:
        for example in results.examples:
            handle.write(json.dumps(example, ensure_ascii=False) + "\n")
    plot_shots_curve(payload["results"], out_dir / "shots_curve.png")
    return out_dir


def format_table(payload: dict) -> str:
    """Markdown table, one line per task x K x metric."""
    lines = [
        f"Model: `{payload['model']}` · limit: {payload['config']['limit']} · seed: {payload['config']['seed']}",
        "",
        "| task | K | metric | value | ± stderr | n | prompts truncated |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for row in payload["results"]:
        arrow = "↑" if row["higher_is_better"] else "↓"
        stderr = "" if row["stderr"] is None else f"{row['stderr']:.4f}"
        value = "nan" if row["value"] is None else f"{row['value']:.4f}"
        lines.append(
            f"| {row['task']} | {row['num_fewshot']} | {row['metric']} {arrow} | {value} | {stderr} | {row['n']} | {row['n_truncated']} |"
        )
    for skip in payload.get("skipped", []):
        lines.append(f"\nNot evaluated: {skip['task']} at K={skip['num_fewshot']}: {skip['reason']}")
    return "\n".join(lines) + "\n"


def plot_shots_curve(rows: list[dict], path: str | Path) -> Path:
    """One panel per task: each higher-is-better metric against K (perplexity-only tasks: bits per byte)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(row["task"] for row in rows))
    n_cols = min(4, max(1, len(tasks)))
    n_rows = max(1, math.ceil(len(tasks) / n_cols))
    figure, axes = plt.subplots(n_rows, n_cols, figsize=(4 * n_cols, 3.2 * n_rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        task_rows = [row for row in rows if row["task"] == task and row["value"] is not None]
        metrics = list(dict.fromkeys(row["metric"] for row in task_rows if row["higher_is_better"]))
        if not metrics:  # perplexity-only task (wikitext): perplexities differ by orders of magnitude, show one
            lower = list(dict.fromkeys(row["metric"] for row in task_rows))
            metrics = ["bits_per_byte"] if "bits_per_byte" in lower else lower[:1]
            ax.set_ylabel("lower is better")
        for metric in metrics:
            points = sorted((row["num_fewshot"], row["value"], row["stderr"] or 0.0) for row in task_rows if row["metric"] == metric)
            ks, values, errors = zip(*points)
            ax.errorbar(ks, values, yerr=errors, marker="o", capsize=3, label=metric)
            if len(ks) == 1:
                ax.annotate(f"{values[0]:.3g}", (ks[0], values[0]), textcoords="offset points", xytext=(6, 6))
        ax.set_title(task)
        ax.set_xlabel("K (examples in the prompt)")
        ax.set_xticks(sorted({row["num_fewshot"] for row in task_rows}))
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    figure.suptitle("zero-, one- and few-shot results")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return Path(path)
