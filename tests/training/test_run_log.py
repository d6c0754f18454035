"""The summary's averages from the run log, worked out by hand."""

import pytest

from hf_gpt_custom.training.run_log import summarize_train_steps


def test_summary_averages_skip_the_warm_up_step_and_use_the_last_ten_losses():
    records = [{"kind": "train", "step": step, "loss": 20.0 - step, "tokens_per_s": 1000.0 if step == 1 else 100.0 * step}
               for step in range(1, 13)]
    records.insert(5, {"kind": "eval", "step": 5, "val_loss": 3.0})
    summary = summarize_train_steps(records)
    assert summary["final_train_loss"] == pytest.approx(sum(20.0 - step for step in range(3, 13)) / 10)
    assert summary["tokens_per_s"] == pytest.approx(sum(100.0 * step for step in range(2, 13)) / 11)  # not step 1's
    one_step = summarize_train_steps(records[:1])
    assert one_step == {"final_train_loss": 19.0, "final_train_loss_steps": 1, "tokens_per_s": 1000.0, "mfu": None,
                        "peak_flops": None, "peak_flops_range": None, "train_time_s": None, "skipped_updates": 0}
    assert summarize_train_steps([]) == {"final_train_loss": None, "final_train_loss_steps": 0, "tokens_per_s": None,
                                         "mfu": None, "peak_flops": None, "peak_flops_range": None,
                                         "train_time_s": None, "skipped_updates": 0}


def test_the_summary_rate_is_all_tokens_over_all_time_not_a_mean_of_window_rates():
    """Two logging windows, as the loop writes them: each step carries its window's rate and its share of the
    window's time. A window of 3 steps at 1,000 tokens/s (3 s) and one of 1 step at 4,000 tokens/s (0.25 s):
    4,000 tokens in 3.25 s (1,231 tokens/s), not the mean of the steps' rates, 1,750."""
    records = [{"kind": "train", "step": 1, "loss": 5.0, "tokens_per_s": 10.0, "step_time_s": 9.0}]
    records += [{"kind": "train", "step": step, "loss": 4.0, "tokens_per_s": 1000.0, "step_time_s": 1.0}
                for step in (2, 3, 4)]
    records += [{"kind": "train", "step": 5, "loss": 3.0, "tokens_per_s": 4000.0, "step_time_s": 0.25}]
    assert summarize_train_steps(records)["tokens_per_s"] == pytest.approx(4000.0 / 3.25)
    assert summarize_train_steps(records)["train_time_s"] == pytest.approx(9.0 + 3.0 + 0.25)  # every step's time


def test_the_summary_rate_leaves_out_every_sessions_warm_up_step():
    """A resumed session's first step holds its own warm-up (compilation under compile: true): it was counted,
    and the summary's tokens/s and MFU came out low. By hand: steps 2-3 and 5 at 1,000 tokens/s, step 4 (the
    second session's first) at 10 tokens/s over 9 s."""
    records = [{"kind": "train", "step": 1, "loss": 5.0, "tokens_per_s": 10.0, "step_time_s": 9.0, "warm_up": True}]
    records += [{"kind": "train", "step": step, "loss": 4.0, "tokens_per_s": 1000.0, "step_time_s": 1.0}
                for step in (2, 3)]
    records += [{"kind": "train", "step": 4, "loss": 4.0, "tokens_per_s": 10.0, "step_time_s": 9.0, "warm_up": True},
                {"kind": "train", "step": 5, "loss": 4.0, "tokens_per_s": 1000.0, "step_time_s": 1.0}]
    assert summarize_train_steps(records)["tokens_per_s"] == pytest.approx(1000.0)
    assert summarize_train_steps(records)["train_time_s"] == pytest.approx(21.0)  # still every step's time


def test_the_loss_curve_draws_the_last_evaluation_of_a_step(tmp_path, monkeypatch):
    """A finished run rerun on another eval_batches appends a second evaluation of its last step: the curve shows
    that one (the summary's), one point per step, in step order."""
    import matplotlib.axes

    from hf_gpt_custom.training.run_log import plot_loss_curve

    drawn = []
    real_plot = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot",
                        lambda self, *args, **kwargs: drawn.append((kwargs.get("label"), args)) or real_plot(
                            self, *args, **kwargs))
    records = [{"kind": "train", "step": step, "loss": 5.0 - step / 10} for step in (1, 2, 3, 4)]
    records += [{"kind": "eval", "step": 2, "val_loss": 4.5}, {"kind": "eval", "step": 4, "val_loss": 4.2},
                {"kind": "eval", "step": 4, "val_loss": 4.3}]
    plot_loss_curve(records, tmp_path / "curve.png")
    assert dict(drawn)["validation"] == ((2, 4), (4.5, 4.3))


def test_the_loss_curve_draws_validation_points_of_other_blocks_apart(tmp_path, monkeypatch):
    """A rerun with another eval_batches scores another set of blocks: its point was joined to the earlier ones in one
    line, as if the loss had moved (the reports hunt). Hand-written records: steps 2 and 4 on 8 blocks, step 4
    rescored on 2 (which supersedes the first step-4 record), step 6 on 2."""
    import matplotlib.axes

    from hf_gpt_custom.training.run_log import plot_loss_curve

    drawn = []
    real_plot = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot",
                        lambda self, *args, **kwargs: drawn.append((kwargs.get("label"), args)) or real_plot(
                            self, *args, **kwargs))
    records = [{"kind": "train", "step": step, "loss": 5.0} for step in range(1, 7)]
    records += [{"kind": "eval", "step": 2, "val_loss": 4.5, "blocks_scored": 8},
                {"kind": "eval", "step": 4, "val_loss": 4.2, "blocks_scored": 8},
                {"kind": "eval", "step": 4, "val_loss": 4.3, "blocks_scored": 2},
                {"kind": "eval", "step": 6, "val_loss": 4.1, "blocks_scored": 2}]
    plot_loss_curve(records, tmp_path / "curve.png")
    lines = dict(drawn)
    assert lines["validation (8 blocks)"] == ((2,), (4.5,)) and lines["validation (2 blocks)"] == ((4, 6), (4.3, 4.1))
    drawn.clear()
    plot_loss_curve([r for r in records if r.get("blocks_scored") != 2], tmp_path / "curve.png")
    assert dict(drawn)["validation"] == ((2, 4), (4.5, 4.2))  # one set: one line, as before
    drawn.clear()  # eval_batches cut the split: the image says so, as the card's table does (the figuretruth hunt)
    plot_loss_curve([r for r in records if r.get("blocks_scored") != 2], tmp_path / "curve.png", val_blocks=850)
    assert dict(drawn)["validation (first 8 of 850 blocks)"] == ((2, 4), (4.5, 4.2))
    drawn.clear()
    plot_loss_curve([r for r in records if r.get("blocks_scored") != 2], tmp_path / "curve.png", val_blocks=8)
    assert dict(drawn)["validation"] == ((2, 4), (4.5, 4.2))  # the whole split


def test_the_loss_curve_draws_each_train_loss_at_its_own_step(tmp_path, monkeypatch):
    """A log that starts at step 11 (logging every 10 steps) with evaluations between: each train point sits at the
    step its record names (hand-written records), not at its position in the file."""
    import matplotlib.axes

    from hf_gpt_custom.training.run_log import plot_loss_curve

    drawn = []
    real_plot = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot",
                        lambda self, *args, **kwargs: drawn.append((kwargs.get("label"), args)) or real_plot(
                            self, *args, **kwargs))
    records = [{"kind": "train", "step": 11, "loss": 4.0}, {"kind": "eval", "step": 20, "val_loss": 3.9},
               {"kind": "train", "step": 21, "loss": 3.5}, {"kind": "train", "step": 31, "loss": 3.2}]
    plot_loss_curve(records, tmp_path / "curve.png")
    assert dict(drawn)["train"] == ((11, 21, 31), (4.0, 3.5, 3.2))


def test_the_summary_mfu_weighs_each_step_by_its_time():
    """Two sessions' steps at other peaks (a resumed run on another thread count): 3 steps of 1 s at MFU 0.30 and one
    of 0.25 s at 0.10 give (0.9 + 0.025) / 3.25, not the mean of the steps' figures; a step without an MFU (an
    unknown peak) leaves the run's figure unknown."""
    records = [{"kind": "train", "step": 1, "loss": 5.0, "tokens_per_s": 10.0, "step_time_s": 9.0, "mfu": 0.01,
                "warm_up": True}]
    records += [{"kind": "train", "step": step, "loss": 4.0, "tokens_per_s": 1000.0, "step_time_s": 1.0, "mfu": 0.3}
                for step in (2, 3, 4)]
    records += [{"kind": "train", "step": 5, "loss": 3.0, "tokens_per_s": 400.0, "step_time_s": 0.25, "mfu": 0.1}]
    assert summarize_train_steps(records)["mfu"] == pytest.approx((3 * 0.3 + 0.25 * 0.1) / 3.25)
    records[-1]["mfu"] = None
    assert summarize_train_steps(records)["mfu"] is None


def test_a_stated_peak_restates_every_steps_mfu_by_it():
    """peak_flops set on a rerun (`run` re-runs train's finishing step for it) holds for the whole run: each step's
    model FLOP/s (its MFU times the peak it was computed with) over the stated peak, time-weighted."""
    records = [{"kind": "train", "step": step, "loss": 4.0, "tokens_per_s": 1000.0, "step_time_s": time,
                "mfu": mfu, "peak_flops": peak}
               for step, time, mfu, peak in ((2, 1.0, 0.3, 1e11), (3, 3.0, 0.2, 2e11))]
    assert summarize_train_steps(records, peak_flops=1e9)["mfu"] == pytest.approx(
        (1.0 * 0.3 * 1e11 / 1e9 + 3.0 * 0.2 * 2e11 / 1e9) / 4.0)
    assert summarize_train_steps([{k: v for k, v in r.items() if k != "peak_flops"} for r in records],
                                 peak_flops=1e9)["mfu"] is None  # an older log: train.py recomputes it


def test_the_loss_curve_names_its_axis_as_the_workload_says(tmp_path, monkeypatch):
    import matplotlib.axes

    from hf_gpt_custom.training.run_log import plot_loss_curve

    named = []
    monkeypatch.setattr(matplotlib.axes.Axes, "set_ylabel", lambda self, label, *args, **kwargs: named.append(label))
    records = [{"kind": "train", "step": 1, "loss": 4.0}, {"kind": "eval", "step": 1, "val_loss": 3.9}]
    plot_loss_curve(records, tmp_path / "curve.png")
    plot_loss_curve(records, tmp_path / "curve.png", loss_name="task cross-entropy (nats / example)")
    assert named == ["cross-entropy loss (nats / token)", "task cross-entropy (nats / example)"]


def test_a_non_finite_figure_is_strict_json_and_reads_inf_on_the_card(tmp_path):
    """A validation loss past 709 nats overflowed exp(): perplexity was capped at exp(700) = 1.01e304, and a non-finite
    figure became null with nothing saying so, and the card left its row out. Reference: math.exp overflows past
    709.78 (float's range), and the values given."""
    import json
    import math

    from hf_gpt_custom.model_cards.card import _training_result_rows
    from hf_gpt_custom.training.run_log import write_training_summary

    with pytest.raises(OverflowError):
        math.exp(750.0)
    write_training_summary(tmp_path / "s.json", {"steps": 4, "final_val_loss": 750.0, "val_perplexity": math.inf,
                                                 "val_bits_per_byte": math.nan})
    summary = json.loads((tmp_path / "s.json").read_text(),
                         parse_constant=lambda name: pytest.fail(f"{name} in the summary: not strict JSON"))
    assert summary["val_perplexity"] is None and summary["non_finite"] == {"val_perplexity": "inf",
                                                                          "val_bits_per_byte": "nan"}
    rows = dict(_training_result_rows(summary))
    assert rows["validation perplexity"] == "inf" and rows["validation bits per byte"] == "nan"


def test_validation_perplexity_overflows_to_inf_not_a_cap(cpu_accelerator):
    import math

    import torch

    from hf_gpt_custom.training.workload import evaluate_loss

    class Huge(torch.nn.Module):  # logits that put `nats` (plus log 5, ~1.6) on every target
        def __init__(self, nats):
            super().__init__()
            self.nats = nats

        def forward(self, input_ids, **options):  # return_dict=True, as the loop asks
            logits = torch.zeros(*input_ids.shape, 5, dtype=torch.float64)
            logits[..., 0] = self.nats
            return type("Out", (), {"logits": logits})()

        def eval(self):
            return self

        def train(self, mode=True):
            return self

    ids = torch.tensor([[1, 2, 3, 4]])
    for nats, expected in ((1000.0, math.inf), (709.5, None)):  # exp is finite up to 709.78
        result = evaluate_loss(Huge(nats), [{"input_ids": ids, "labels": ids, "byte_counts": torch.ones_like(ids)}],
                               cpu_accelerator)
        assert result["val_loss"] == pytest.approx(nats + math.log(4 * math.exp(-nats) + 1), rel=1e-9)
        assert result["val_perplexity"] == (expected or math.exp(result["val_loss"]))
    assert 709.0 < result["val_loss"] < math.log(1.7976931348623157e308)  # the old cut at 709.0 read inf here


@pytest.mark.parametrize("steps", [1, 3, 10, 40])
def test_the_cards_training_loss_row_names_the_steps_the_summary_averaged(steps):
    """The card said "mean of the last 10 steps" for a 3-step run, whose figure is the mean of its 3. Reference: the
    summary's own average, from a log of `steps` steps worked out by hand."""
    from hf_gpt_custom.model_cards.card import _format_number, _training_result_rows

    records = [{"kind": "train", "step": step, "loss": float(step), "tokens_per_s": 100.0}
               for step in range(1, steps + 1)]
    averaged = min(10, steps)
    summary = {"steps": steps, **summarize_train_steps(records)}
    assert summary["final_train_loss"] == pytest.approx(sum(range(steps - averaged + 1, steps + 1)) / averaged)
    label = "training loss of the one step" if steps == 1 else f"training loss, mean of the last {averaged} steps"
    assert dict(_training_result_rows(summary))[label + " (nats/token)"] == _format_number(summary["final_train_loss"])
    if steps >= 10:  # resumed 5 steps before the end without its run log: 5 records (the roundreview10 hunt)
        resumed = {"steps": steps, **summarize_train_steps(records[-5:])}
        assert resumed["final_train_loss"] == pytest.approx(sum(range(steps - 4, steps + 1)) / 5)
        assert dict(_training_result_rows(resumed))["training loss, mean of the last 5 steps (nats/token)"] == \
            _format_number(resumed["final_train_loss"])


def test_resuming_without_the_run_log_says_what_the_figures_leave_out(tmp_path, caplog):
    """A run folder whose run_log.jsonl was deleted resumed in silence: the loss curve and train_time_s then cover the
    resumed session only (the interrupts hunt). A resumed log is kept up to the checkpoint, a fresh run's replaced."""
    from hf_gpt_custom.training.run_log import RunLog, read_run_log

    path = tmp_path / "run_log.jsonl"
    with caplog.at_level("WARNING", logger="hf_gpt_custom.training.run_log"):
        RunLog(path, resume_step=6).close()
    assert f"{path} is missing: the run resumes at step 6" in caplog.text
    caplog.clear()
    path.write_text("".join(f'{{"kind": "train", "step": {step}, "loss": 1.0}}\n' for step in range(1, 9)))
    with caplog.at_level("WARNING", logger="hf_gpt_custom.training.run_log"):
        RunLog(path, resume_step=6).close()
        RunLog(tmp_path / "fresh.jsonl").close()
    assert caplog.text == "" and [r["step"] for r in read_run_log(path)] == [1, 2, 3, 4, 5, 6]
