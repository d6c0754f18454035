"""What a run leaves for people to read: run_log.jsonl (one JSON object per step or evaluation),
training_summary.json, and loss_curve.png (train and validation loss against step).

Writing happens on the main process only; the caller decides that. Plotting uses matplotlib's Agg backend.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from hf_gpt_custom.manifest import failed_write_named, save_figure_atomically, write_text_atomically

logger = logging.getLogger(__name__)

RUN_LOG_NAME = "run_log.jsonl"
SUMMARY_NAME = "training_summary.json"
LOSS_CURVE_NAME = "loss_curve.png"


class RunLog:
    """Append-only JSONL log. Records have "step" and "kind" ("train" or "eval")."""

    def __init__(self, path: str | os.PathLike, resume_step: int | None = None, evaluation_redone: bool = False):
        """`evaluation_redone`: the session evaluates again at `resume_step` (a finished run resumed), so the
        evaluation logged there before is replaced, not kept beside the new one."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            # Steps after the checkpoint were logged by the run that died; they are about to be redone.
            kept = [r for r in read_run_log(self.path) if r.get("step", 0) < resume_step or (
                r.get("step", 0) == resume_step and not (evaluation_redone and r.get("kind") == "eval"))]
            write_text_atomically(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        elif resume_step and not self.path.exists():
            logger.warning("%s is missing: the run resumes at step %d with a log of this session's steps only, so the "
                           "loss curve, train_time_s and the summary's rates leave out the steps before", self.path,
                           resume_step)
        elif resume_step is None and self.path.exists():
            self.path.unlink()  # a fresh run over an old folder starts a fresh log
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        with failed_write_named(self.path):
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_run_log(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All complete records; a torn last line (the process was killed mid-write) is skipped."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def last_run_log_record(path: str | os.PathLike) -> dict[str, Any] | None:
    """The last complete record (None for no log), read from the end of the file: a long run's log is large."""
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as log:
        log.seek(max(0, log.seek(0, os.SEEK_END) - 65536))
        lines = log.read().splitlines()
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:  # a line torn by a kill, or the first one, cut by the seek
            continue
    return None


def write_training_summary(path: str | os.PathLike, summary: dict[str, Any]) -> None:
    """Strict JSON: a non-finite figure is null, and `non_finite` says which it was ("inf", "nan") for the card."""
    non_finite = {key: str(value) for key, value in summary.items()
                  if isinstance(value, float) and not math.isfinite(value)}
    clean = {key: None if key in non_finite else value for key, value in summary.items()}
    if non_finite:
        clean["non_finite"] = non_finite
    write_text_atomically(path, json.dumps(clean, indent=2) + "\n")  # a kill leaves the previous summary whole


def loss_curve_title(run_name: str, n_params: int) -> str:
    return f"{run_name}: {n_params / 1e6:.2f}M parameters"


def plot_loss_curve(records: list[dict[str, Any]], path: str | os.PathLike, title: str = "",
                    loss_name: str = "cross-entropy loss (nats / token)", val_blocks: int | None = None) -> None:
    """Train loss per step and validation loss at each evaluation, on one axis named `loss_name` (the workload's:
    fine-tuning's is a task loss per example, plus λ × the LM loss per token). `val_blocks`, the validation split's
    size, labels a line scored on fewer (eval_batches) "first N of M blocks": the image alone said "validation"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(r["step"], r["loss"]) for r in records if r.get("kind") == "train"]
    evaluations = latest_evaluations(records)
    # a resume or rerun with another eval_batches scores another set of blocks: its points are a line of their own,
    # never joined to the others as if one loss had moved
    scored_sets = list(dict.fromkeys(r.get("blocks_scored") for r in evaluations))
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    if train:
        ax.plot(*zip(*train), label="train", linewidth=1.0, alpha=0.8)
    for scored in scored_sets:
        val = [(r["step"], r["val_loss"]) for r in evaluations if r.get("blocks_scored") == scored]
        if scored is not None and val_blocks is not None and scored < val_blocks:
            label = f"validation (first {scored:,} of {val_blocks:,} blocks)"
        else:
            label = "validation" if len(scored_sets) == 1 else (
                f"validation ({scored:,} blocks)" if scored is not None else "validation (blocks unrecorded)")
        ax.plot(*zip(*val), label=label, marker="o", markersize=3.5, linewidth=1.5)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(loss_name)
    ax.set_title(title or "loss curve")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure_atomically(fig, path)
    plt.close(fig)


def latest_evaluations(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The eval records in step order, the last one of each step: rerunning a finished run evaluates its last step
    again (on another eval_batches, say) and appends that record, which supersedes the earlier one."""
    by_step = {r["step"]: r for r in records if r.get("kind") == "eval"}
    return [by_step[step] for step in sorted(by_step)]


def summarize_train_steps(records: list[dict[str, Any]], peak_flops: float | None = None) -> dict[str, float | None]:
    """final_train_loss (mean of the last 10 steps logged; final_train_loss_steps: how many that is, fewer in a short
    run or one resumed without its log), tokens_per_s (tokens over training time, without each session's
    first step, which includes warm-up: compilation, allocator, caches), mfu (the same steps' time-weighted MFU, each
    by its own session's peak, or by `peak_flops` when given: a peak the user states holds for the whole run; None
    if a step has none) with the peak it is a share of (peak_flops; peak_flops_range where sessions measured
    different ones), train_time_s (all steps) and skipped_updates
    (steps whose update fp16's gradient scaler skipped; the schedule held there) from a run's log records.

    Each record carries its logging window's rate and its share of the window's time (step_time_s), so the rate is
    their time-weighted mean: total tokens / total time. A plain mean of window rates weighs a fast window as much as
    a slow one and comes out high (+1.6% on a 30-step CPU run)."""
    train = [r for r in records if r.get("kind") == "train"]
    train_losses = [r["loss"] for r in train]
    # (a log written before records had "warm_up" marks step 1 alone; a one-step run: its only step is all there is)
    timed = [r for r in train if r["step"] > 1 and not r.get("warm_up")] or train
    tokens_per_s = mfu = None
    # the peak the mfu is a share of: the one given, else the sessions' own when they measured one and the same
    peaks = sorted({r["peak_flops"] for r in timed if r.get("peak_flops")})
    peak = peak_flops or (peaks[0] if len(peaks) == 1 else None)
    if timed and all(r.get("step_time_s") is not None for r in timed):
        tokens_per_s = sum(r["tokens_per_s"] * r["step_time_s"] for r in timed) / sum(r["step_time_s"] for r in timed)
        # each session's steps by the peak that session measured, or restated by a given peak: a step's model
        # FLOP/s is its MFU times the peak it was computed with (a record without its peak cannot be restated)
        restatable = not peak_flops or all(r.get("peak_flops") for r in timed)
        if restatable and all(r.get("mfu") is not None for r in timed):
            rescale = [r["peak_flops"] / peak_flops if peak_flops else 1.0 for r in timed]
            mfu = (sum(r["mfu"] * k * r["step_time_s"] for r, k in zip(timed, rescale))
                   / sum(r["step_time_s"] for r in timed))
    elif timed:  # a log written before records had step_time_s
        tokens_per_s = sum(r["tokens_per_s"] for r in timed) / len(timed)
    return {
        "final_train_loss": sum(train_losses[-10:]) / len(train_losses[-10:]) if train_losses else None,
        "final_train_loss_steps": len(train_losses[-10:]),
        "tokens_per_s": tokens_per_s,
        "mfu": mfu,
        "peak_flops": peak if mfu is not None else None,
        # sessions that measured different peaks (a CPU re-measures its matmul each session): their range
        "peak_flops_range": [peaks[0], peaks[-1]] if mfu is not None and peak is None and len(peaks) > 1 else None,
        # every step of the run, over all its sessions (a resumed log keeps the steps up to its checkpoint)
        "train_time_s": sum(r["step_time_s"] for r in train)
        if train and all(r.get("step_time_s") is not None for r in train) else None,
        "skipped_updates": sum(1 for r in train if r.get("update_skipped")),
    }
