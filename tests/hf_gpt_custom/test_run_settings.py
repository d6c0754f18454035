"""The main job's bookkeeping: which settings a resumed run must keep (read from TrainConfig field metadata, the
one list of settings that do not change training) and what it prints at the end."""

from __future__ import annotations

import dataclasses
import json

import pytest

from hf_gpt_custom import run, run_state
from hf_gpt_custom.training.config import settings_that_do_not_change_training


@dataclasses.dataclass
class FakeConfig:
    """Three kinds of field, as training/config.py marks them: changes training, does not, no metadata at all."""

    learning_rate: float = dataclasses.field(default=6e-4, metadata={"help": "peak lr", "changes_training": True})
    keep_checkpoints: int = dataclasses.field(default=2, metadata={"help": "kept", "changes_training": False})
    benchmark_limit: int | None = dataclasses.field(default=None, metadata={"changes_training": False})
    seed: int = 1337

    def to_dict(self):
        return dataclasses.asdict(self)


@pytest.fixture(autouse=True)
def _no_files_read(monkeypatch):
    """FakeConfig names no data, tokenizer or model folder: the fingerprint's `contents.*` part is empty."""
    monkeypatch.setattr("hf_gpt_custom.training.fingerprints.input_fingerprints", lambda config: {})


def test_settings_not_changing_training_come_from_field_metadata():
    assert settings_that_do_not_change_training(FakeConfig) == {"keep_checkpoints", "benchmark_limit"}


def test_the_real_train_config_marks_only_fields_it_has():
    from hf_gpt_custom.training.config import TrainConfig

    names = {field.name for field in dataclasses.fields(TrainConfig)}
    assert settings_that_do_not_change_training() <= names
    assert "learning_rate" not in settings_that_do_not_change_training()


def test_the_fingerprint_keeps_training_and_benchmark_settings_only():
    fingerprint = run_state.fingerprint(FakeConfig())
    assert fingerprint == {"learning_rate": 6e-4, "benchmark_limit": None, "seed": 1337}


@pytest.mark.parametrize(("change", "accepted"), [
    ({"keep_checkpoints": 5}, True),     # does not change training: resumes
    ({"benchmark_limit": 10}, True),     # evaluation only: resumes, re-runs eval and export
    ({"learning_rate": 1e-3}, False),    # changes training: refused
    ({"seed": 1}, False),                # no metadata: counts as changing training
])
def test_a_resumed_run_accepts_exactly_the_changes_that_keep_the_trained_model(tmp_path, change, accepted):
    stages = {"train": {"status": "done"}, "eval": {"status": "done"}}
    run_state.save_state(tmp_path, {"config": run_state.fingerprint(FakeConfig()), "stages": stages})
    changed = run_state.fingerprint(FakeConfig(**change))
    if not accepted:
        with pytest.raises(ValueError, match=f"was started with a different config \\({next(iter(change))}"):
            run_state.load_state(tmp_path, changed)
        return
    state = run_state.load_state(tmp_path, changed)
    assert state["stages"]["train"] == {"status": "done"}
    assert ("eval" in state["stages"]) == ("benchmark_limit" not in change)


def test_the_end_of_a_run_prints_the_results_table_and_the_paths(tmp_path, capsys):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "table.md").write_text("| copa | 0 | acc ↑ | 0.5000 |\n", encoding="utf-8")
    (tmp_path / "eval" / "results.json").write_text(json.dumps({"results": []}))
    (tmp_path / "final").mkdir()
    run._print_outputs(tmp_path)
    out = capsys.readouterr().out
    assert "| copa | 0 | acc ↑ | 0.5000 |" in out
    assert f"trained model     {tmp_path / 'final'}" in out and f"evaluation        {tmp_path / 'eval' / 'results.json'}" in out
    assert "model card" not in out  # not written yet: not listed


@pytest.mark.parametrize(("now", "accepted"), [(False, True), (True, False)])
def test_a_run_started_before_shift_block_boundaries_existed_trained_without_it(tmp_path, now, accepted):
    """A pipeline state saved before the setting existed has no such key. Its code cut blocks one way only, so the
    key reads as false: turning it on over that run is a change, not an unknown (which resumed the rest of the run
    shifted, recorded the new value, then refused the original command)."""
    stages = {"train": {"status": "done"}, "eval": {"status": "done"}}
    run_state.save_state(tmp_path, {"config": run_state.fingerprint(FakeConfig()), "stages": stages})
    with_setting = {**run_state.fingerprint(FakeConfig()), "shift_block_boundaries": now}
    if not accepted:
        with pytest.raises(ValueError, match=r"different config \(shift_block_boundaries: False -> True\)"):
            run_state.load_state(tmp_path, with_setting)
        return
    assert run_state.load_state(tmp_path, with_setting)["stages"]["train"] == {"status": "done"}


@pytest.mark.parametrize(("saved", "now", "accepted"), [(True, True, True), (True, False, False)])
def test_a_recorded_shift_block_boundaries_is_compared_as_recorded(tmp_path, saved, now, accepted):
    stages = {"train": {"status": "done"}}
    fingerprint = run_state.fingerprint(FakeConfig())
    run_state.save_state(tmp_path, {"config": {**fingerprint, "shift_block_boundaries": saved}, "stages": stages})
    with_setting = {**fingerprint, "shift_block_boundaries": now}
    if not accepted:
        with pytest.raises(ValueError, match=r"\(shift_block_boundaries: True -> False\)"):
            run_state.load_state(tmp_path, with_setting)
        return
    assert run_state.load_state(tmp_path, with_setting)["stages"]["train"] == {"status": "done"}


def test_a_start_over_that_failed_before_its_first_checkpoint_takes_the_corrected_config(tmp_path):
    """`run --start_over` with a tokenizer it could not load stopped in its tokenizer stage and said to rerun without
    --start_over; the corrected command was then refused as "started with a different config" (found by a review of
    this round). It goes on as the same start-over: the replaced run's checkpoints are still the ones to set aside."""
    stages = {"tokenizer": {"status": "done"}}
    saved = {"config": run_state.fingerprint(FakeConfig(learning_rate=1e-3)), "stages": stages,
             "starting_over_from": run_state.checkpoint_identities(tmp_path)}
    run_state.save_state(tmp_path, saved)
    (tmp_path / "final").mkdir()  # the run being replaced
    corrected = run_state.fingerprint(FakeConfig())
    state = run_state.load_state(tmp_path, corrected)
    assert state == {"config": corrected, "stages": {}, "starting_over_from": saved["starting_over_from"]}
    assert run_state.still_starting_over(state, tmp_path)
    del saved["starting_over_from"]  # not a start-over: the trained run's settings bind
    run_state.save_state(tmp_path, {**saved, "stages": {"train": {"status": "done"}}})
    with pytest.raises(ValueError, match="was started with a different config"):
        run_state.load_state(tmp_path, corrected)
