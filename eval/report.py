"""Write an evaluation's files: results.json (one row per task x K x metric with the keys in RESULT_KEYS; the model
card reads it), table.md, examples.jsonl (prompt, choices, log-likelihoods, prediction, gold per doc) and
shots_curve.png (metric against K for each task, like the GPT-3 paper's few-shot curves).

`format_results_table` is the one renderer of result rows: table.md and the model card both call it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from pathlib import Path

from hf_gpt_custom.manifest import save_figure_atomically

RESULT_KEYS = ("task", "dataset", "num_fewshot", "metric", "value", "stderr", "n", "higher_is_better", "n_truncated")
REPORT_FILES = ("results.json", "table.md", "examples.jsonl", "shots_curve.png")


def _json_row(row: dict) -> dict:
    """A result row for results.json: a non-finite number is null (strict JSON has no inf or nan), and a non-finite
    value also says which it was in `non_finite` ("inf": a perplexity past float's range; "nan": log-likelihoods
    that overflowed), so a table rebuilt from the file shows what was measured; a non-finite stderr (the bootstrap of a
    perplexity past float's range) says so in `stderr_non_finite`, where null alone would read "no stderr applies"."""
    json_row = {key: None if _is_non_finite(row[key]) else row[key] for key in RESULT_KEYS}
    if _is_non_finite(row["value"]):
        json_row["non_finite"] = str(float(row["value"]))
    if _is_non_finite(row["stderr"]):
        json_row["stderr_non_finite"] = str(float(row["stderr"]))
    return json_row


def _is_non_finite(value) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def write_report(results, out_dir: str | Path) -> Path:
    """Write the four files into out_dir (created if needed) and return it.

    They are written beside it first and moved in together, results.json last: a kill while writing (the plot takes
    a second) left a new results.json beside the previous evaluation's table, examples and curve. One process writes
    an out_dir at a time (run_lock.lock_output_folder): a second is refused, naming the first."""
    from hf_gpt_custom.training.run_lock import lock_output_folder

    from hf_gpt_custom.errors import UserError, write_failure_cause, write_failure_fix

    with lock_output_folder(out_dir, "the evaluation folder", "another --out"):  # evaluate() holds it already
        try:
            return _write_report_files(results, Path(out_dir))
        except OSError as error:
            shutil.rmtree(Path(out_dir) / ".report.tmp", ignore_errors=True)
            # Any failed write (a full disk, whose error often names no file: matplotlib's close; a quota, a file
            # size limit, a folder made read-only meanwhile) would lose hours of scoring: the scores go to the
            # console in the message
            why = f"{write_failure_cause(error) or error}; {write_failure_fix(error, out_dir)}"
            raise UserError(f"cannot write the evaluation report to {out_dir}: {why}. The scores, which were not "
                            "saved:\n" + format_results_table(results.results, getattr(results, "skipped", []))
                            ) from error


def _write_report_files(results, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = results.to_dict()
    _warn_if_replacing_another_models_scores(out_dir / "results.json", payload)
    payload["results"] = [_json_row(row) for row in payload["results"]]
    staging = out_dir / ".report.tmp"
    shutil.rmtree(staging, ignore_errors=True)  # left by an interrupted call
    staging.mkdir()
    (staging / "table.md").write_text(format_table(payload), encoding="utf-8")
    with open(staging / "examples.jsonl", "w", encoding="utf-8") as handle:
        for example in results.examples:
            handle.write(json.dumps(example, ensure_ascii=False) + "\n")
    plot_shots_curve(payload["results"], staging / "shots_curve.png")
    (staging / "results.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    for name in ("table.md", "examples.jsonl", "shots_curve.png", "results.json"):
        os.replace(staging / name, out_dir / name)
    staging.rmdir()
    return out_dir


def _warn_if_replacing_another_models_scores(path: Path, payload: dict) -> None:
    """A warning when `path` holds scores this evaluation does not carry over: another model's evaluation, or the
    same model's on tasks or shot counts this one leaves out (lm-eval writes a new timestamped file each time;
    `eval --out` keeps one report per folder, so the earlier one goes). The same weights are the same model whatever
    path named them (`run` names final/ absolute, a later `eval --model runs/x/final` relative)."""
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    then, now = earlier.get("model_weights_sha256"), payload.get("model_weights_sha256")
    same_model = then == now if then and now else earlier.get("model") == payload.get("model") and then == now
    keep_both = "give --out another folder to keep both"
    if not same_model:
        other = " (other weights)" if earlier.get("model") == payload.get("model") else ""
        logging.getLogger(__name__).warning("%s held the evaluation of %s%s; it is replaced by this one (%s)",
                                            path.parent, earlier.get("model"), other, keep_both)
        return
    scored = {(row.get("task"), row.get("num_fewshot")) for row in payload.get("results", [])}
    dropped = sorted({(row.get("task"), row.get("num_fewshot")) for row in earlier.get("results", []) if
                      isinstance(row, dict)} - scored, key=str)
    if dropped:
        logging.getLogger(__name__).warning(
            "%s held this model's scores on %s, which this evaluation does not include; they are replaced (%s, or "
            "evaluate every task and shot count in one call)", path.parent,
            ", ".join(f"{task} ({shots}-shot)" for task, shots in dropped), keep_both)


def format_table(payload: dict) -> str:
    """table.md: which model, limit, seed and protocol, then `format_results_table`."""
    config = payload["config"]
    return (
        f"Model: `{payload['model']}` · limit: {config['limit']} · seed: {config['seed']} · protocol: "
        f"{config.get('protocol', 'ours')}\n\n"
        + format_results_table(payload["results"], payload.get("skipped", []))
    )


def format_results_table(rows: list[dict], skipped: list[dict] = ()) -> str:
    """Markdown: one line per task x K x metric, grouped by task (first appearance) then K, the metric's order
    within a K kept; ↑/↓ says which direction is better. Then one sentence per (task, K) that was not evaluated."""
    task_order: dict[str, int] = {}
    for row in rows:
        task_order.setdefault(row["task"], len(task_order))
    lines = [
        "| task | K (shots) | metric | value | ± stderr | documents | documents cut to fit the context |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for row in sorted(rows, key=lambda row: (task_order[row["task"]], int(row["num_fewshot"]))):
        arrow = "↑" if row.get("higher_is_better", True) else "↓"
        value = row.get("non_finite", "nan") if row["value"] is None else format_metric(row["value"])  # _json_row
        stderr = row.get("stderr")
        stderr = row["stderr_non_finite"] if stderr is None and "stderr_non_finite" in row else format_metric(stderr)
        cells = (row["task"], row["num_fewshot"], f"{row['metric']} {arrow}", value, stderr,
                 row.get("n", "–"), row.get("n_truncated", "–"))
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    lines.extend(
        f"\nNot evaluated: {skip['task']} at K={skip['num_fewshot']} ({skip['reason']})." for skip in skipped
    )
    return "\n".join(lines) + "\n"


def format_metric(value) -> str:
    """Four decimals (accuracies, bits per byte) until the number gets long (an untrained model's perplexity);
    "–" when there is no number (a stderr that does not apply)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "–"
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e9:  # a near-overflow perplexity: 1.01e+304, not a 375-character cell
        return f"{value:.4g}"
    return f"{value:.4f}" if abs(value) < 1e4 else f"{value:,.1f}"


def plot_shots_curve(rows: list[dict], path: str | Path) -> Path:
    """One panel per task: each higher-is-better metric against K (perplexity-only tasks: bits per byte). A point
    some of whose prompts were cut to fit the context (n_truncated: examples dropped, so a "K=1" prompt may hold none)
    is ringed and says how many, as the table does."""
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
            for row in task_rows:
                if row["metric"] == metric and row.get("n_truncated"):
                    ax.plot(row["num_fewshot"], row["value"], marker="o", markersize=11, fillstyle="none",
                            color="tab:red", linestyle="none")
                    ax.annotate(f"{row['n_truncated']} of {row['n']} documents cut", (row["num_fewshot"], row["value"]),
                                textcoords="offset points", xytext=(6, -12), fontsize=7, color="tab:red")
        ax.set_title(task)
        ax.set_xlabel("K (examples in the prompt)")
        ax.set_xticks(sorted({row["num_fewshot"] for row in task_rows}))
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    figure.suptitle("zero-, one- and few-shot results")
    figure.tight_layout()
    save_figure_atomically(figure, path, dpi=100)
    plt.close(figure)
    return Path(path)
