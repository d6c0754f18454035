"""A resumed run judges divergence as the uninterrupted run did: the divergence guard's memory (best loss, last good
checkpoint) travels in the checkpoint, and rerunning the command of a run that stopped for divergence does not train
into the same blow-up again.

Two recipes, 2 checkpoints kept: learning rate 1.0 warmed up over 10 steps, checkpoints every 5 steps, blows up at
step 12 (~12.7 against a best of ~5.8), two steps after step_000010; learning rate 1e6 warmed up over 3 steps,
checkpoints every step, blows up at step 3 (~1e12), the first step after step_000002, whose weights it ruined — so
the last good checkpoint, step_000001, is known only from what the checkpoint remembers.
"""

from __future__ import annotations

import json

import pytest

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.manifest import sha256_file, write_manifest
from hf_gpt_custom.training.divergence import TrainingDivergedError
from hf_gpt_custom.training.train import train

RECIPES = {
    "blows_up_two_steps_after_a_checkpoint": ("learning_rate=1.0", "warmup_steps=10", "max_steps=30",
                                              "checkpoint_interval=5", "keep_checkpoints=2", "eval_interval=30"),
    "blows_up_right_after_a_checkpoint": ("learning_rate=1e6", "warmup_steps=3", "max_steps=8",
                                          "checkpoint_interval=1", "keep_checkpoints=2", "eval_interval=8"),
}


def _records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "run_log.jsonl").read_text().splitlines()]


def _train_and_get_the_stop_message(config) -> str:
    with pytest.raises(TrainingDivergedError) as err:
        train(config)
    return str(err.value)


def _checkpoint_hashes(run_dir) -> dict[str, str]:
    folders = sorted((run_dir / "checkpoints").glob("step_*"))
    return {folder.name: sha256_file(folder / "manifest.json") for folder in folders}


def _as_if_killed_before_the_divergence(run_dir) -> None:
    """What a kill after the last checkpoint, before the blow-up was read back, leaves: the checkpoints, a log
    without the error record."""
    kept = [record for record in _records(run_dir) if record["kind"] != "error"]
    (run_dir / "run_log.jsonl").write_text("".join(json.dumps(record) + "\n" for record in kept))


@pytest.fixture(params=list(RECIPES))
def diverged_run(request, make_config):
    """(settings, config, the uninterrupted run's stop message, its step, its checkpoints' manifest hashes)."""
    settings = RECIPES[request.param]
    config = make_config(*settings)
    message = _train_and_get_the_stop_message(config)
    records = _records(config.run_dir)
    error = records[-1]
    best_before = min(r["loss"] for r in records if r["kind"] == "train" and r["step"] < error["step"])
    # checked from the log's own numbers, not from the guard: this run really blew up where it stopped
    assert error["kind"] == "error" and error["loss"] > 2 * best_before
    assert message.startswith(f"training stopped at step {error['step']}: loss became ")
    checkpoints = _checkpoint_hashes(config.run_dir)
    assert len(checkpoints) == 2 and all(int(name[5:]) < error["step"] for name in checkpoints)
    return settings, config, message, error["step"], checkpoints


def test_a_run_resumed_before_its_divergence_stops_at_the_same_step_keeping_the_good_checkpoints(diverged_run):
    _, config, message, _, checkpoints = diverged_run
    _as_if_killed_before_the_divergence(config.run_dir)
    assert _train_and_get_the_stop_message(config) == message
    assert _checkpoint_hashes(config.run_dir) == checkpoints  # nothing trained past the blow-up pushed them out


def test_rerunning_a_diverged_run_refuses_naming_the_step_and_the_advice(diverged_run, make_config):
    settings, config, message, step, checkpoints = diverged_run
    log_before = (config.run_dir / "run_log.jsonl").read_text()
    problem, advice = message.removeprefix(f"training stopped at step {step}: ").split("; ", 1)
    with pytest.raises(UserError) as err:
        train(config)
    assert str(err.value).startswith(
        f"the run in {config.run_dir.absolute()} stopped at step {step}: {problem}; continuing it from "
        f"{list(checkpoints)[-1]} with the same settings trains into the same blow-up: {advice}; ")
    assert "--start_over" in str(err.value) and not isinstance(err.value, TrainingDivergedError)
    assert (config.run_dir / "run_log.jsonl").read_text() == log_before  # nothing was trained
    assert _checkpoint_hashes(config.run_dir) == checkpoints
    # asked for on purpose, the retry trains and stops where the uninterrupted run did
    assert _train_and_get_the_stop_message(make_config(*settings, "resume_from_checkpoint=latest")) == message
    assert _checkpoint_hashes(config.run_dir) == checkpoints


def test_a_checkpoint_from_before_the_guard_memory_takes_it_from_the_run_log(diverged_run, caplog):
    _, config, message, _, checkpoints = diverged_run
    _as_if_killed_before_the_divergence(config.run_dir)
    older, latest = (config.run_dir / "checkpoints" / name for name in checkpoints)
    step = int(latest.name[5:])
    state = json.loads((latest / "training_state.json").read_text())
    best_logged = min(r["loss"] for r in _records(config.run_dir) if r["kind"] == "train" and r["step"] <= step)
    assert state.pop("best_loss") == best_logged and state.pop("last_good_checkpoint") == older.name
    (latest / "training_state.json").write_text(json.dumps(state))
    write_manifest(latest, step=step)  # as the older version wrote it: a complete checkpoint
    assert _train_and_get_the_stop_message(config) == message
    assert f"the best loss {best_logged:.6g} of the run log's steps up to {step}" in caplog.text


def test_the_device_gate_resumes_with_the_runs_best_loss():
    """UpdateGate (the rule on the device, which holds the update back before the host reads the loss) takes the
    resumed guard's best loss: 11 after a best of 5 blows up and is not applied; a fresh gate would apply it."""
    import torch

    from hf_gpt_custom.training.divergence import UpdateGate

    for best_loss, is_blown_up in ((5.0, True), (float("inf"), False)):
        parameter = torch.nn.Parameter(torch.ones(3))
        optimizer = torch.optim.AdamW([parameter], lr=0.1, fused=True)
        gate = UpdateGate(optimizer, "cpu", best_loss=best_loss)
        assert bool(gate.check(torch.tensor(11.0), torch.tensor(1.0))) is is_blown_up
        parameter.grad = torch.ones(3)
        optimizer.step()
        assert torch.equal(parameter.detach(), torch.ones(3)) is is_blown_up


def test_rerunning_a_run_that_diverged_before_its_first_checkpoint_refuses_unless_the_settings_changed(make_config):
    """Diverged before any checkpoint, the same command trained again from step 0 into the same blow-up, in silence
    and every time (docs/training.md said it is refused; the docsclaims2 hunt). The same settings are refused naming
    the step and the advice; the advice followed (another learning rate) trains; --start_over runs it anyway."""
    settings = ("learning_rate=1e6", "warmup_steps=3", "max_steps=8", "checkpoint_interval=0", "eval_interval=8")
    config = make_config(*settings)
    message = _train_and_get_the_stop_message(config)
    step = _records(config.run_dir)[-1]["step"]
    assert not (config.run_dir / "checkpoints").exists() or not list((config.run_dir / "checkpoints").iterdir())
    log_before = (config.run_dir / "run_log.jsonl").read_text()
    problem, advice = message.removeprefix(f"training stopped at step {step}: ").split("; ", 1)
    with pytest.raises(UserError) as err:
        train(config)
    assert str(err.value).startswith(f"the run in {config.run_dir.absolute()} stopped at step {step}, before its "
                                     f"first checkpoint: {problem}; the same settings from step 0 train into the same "
                                     f"blow-up: {advice}; or pass --start_over")
    assert (config.run_dir / "run_log.jsonl").read_text() == log_before  # nothing was trained
    with pytest.raises(TrainingDivergedError, match=f"training stopped at step {step}"):
        train(config, start_over=True)  # asked for: runs, and blows up where it did
    train(make_config(*settings[1:], "learning_rate=1e-3"))  # the advice followed: a new attempt, which trains
    assert _records(config.run_dir)[-1]["kind"] != "error"
