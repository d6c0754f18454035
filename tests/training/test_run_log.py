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
    assert one_step == {"final_train_loss": 19.0, "tokens_per_s": 1000.0}
    assert summarize_train_steps([]) == {"final_train_loss": None, "tokens_per_s": None}
