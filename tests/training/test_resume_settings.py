"""Resuming continues the same run: a changed recipe, data or architecture is refused naming each change and the
way out (init_from the checkpoint's weights); settings that only change speed, saving or logging stay changeable."""

import json
import shutil

import pytest
import yaml

from hf_gpt_custom.training.config import load_train_config
from hf_gpt_custom.training.train import train

from tests.helpers import tiny_run_overrides

STEPS = ("max_steps=4", "checkpoint_interval=2", "keep_checkpoints=3", "eval_interval=4", "eval_batches=1")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, shakespeare_path, shakespeare_tokenizer_dir, shared_data_cache):
    out_dir = tmp_path_factory.mktemp("resume_settings") / "run"
    overrides = tiny_run_overrides(out_dir, shakespeare_path, shakespeare_tokenizer_dir, shared_data_cache)
    return train(load_train_config(None, overrides + list(STEPS)))


@pytest.fixture
def resumable(finished_run, make_config):
    """A private copy of the run, and a factory for configs resuming it from step 2."""
    run_dir = make_config(*STEPS).run_dir
    shutil.copytree(finished_run, run_dir)
    checkpoint = run_dir / "checkpoints" / "step_000002"

    def config_with(*changes):
        return make_config(*STEPS, f"resume_from_checkpoint={checkpoint}", *changes)

    return run_dir, checkpoint, config_with


@pytest.mark.parametrize("change, shown", [
    ("learning_rate=1e-3", "learning_rate: 0.003 -> 0.001"),
    ("batch_size=8", "batch_size: 4 -> 8"),
    ("gradient_accumulation_steps=2", "gradient_accumulation_steps: 1 -> 2"),
    ("block_size=16", "block_size: 32 -> 16"),
    ("max_steps=6", "max_steps: 4 -> 6"),
    ("val_holdout=tail", "val_holdout: 'random' -> 'tail'"),
    ("model.n_layer=3", "model.n_layer: 2 -> 3"),
])
def test_a_changed_training_setting_is_refused_naming_it_and_the_way_out(resumable, change, shown):
    run_dir, checkpoint, config_with = resumable
    config_before = (run_dir / "config.yaml").read_text()
    with pytest.raises(ValueError) as err:
        train(config_with(change))
    message = str(err.value)
    assert message.startswith(f"cannot resume from {checkpoint}: these settings differ from the ones it was trained "
                              f"with ({shown})")
    assert f"start a new run from its weights (fresh optimizer and schedule) with init_from={checkpoint}" in message
    assert (run_dir / "config.yaml").read_text() == config_before  # the record of what was trained is unchanged
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000002", "step_000004"]


def test_speed_and_logging_settings_may_change_on_resume(resumable):
    run_dir, _, config_with = resumable
    config = config_with("num_proc=2", "torch_threads=1", "eval_interval=1", "checkpoint_interval=1",
                         "keep_checkpoints=4", "log_with=none", "eval_batches=2")
    train(config)
    recorded = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert recorded["eval_interval"] == 1 and recorded["num_proc"] == 2
    evals = [r["step"] for r in map(json.loads, (run_dir / "run_log.jsonl").read_text().splitlines())
             if r["kind"] == "eval"]
    assert evals == [3, 4]  # the new eval_interval applies from the resumed step on


def test_checkpoint_records_its_settings_and_loads_as_a_model_folder(finished_run):
    from hf_gpt_custom.model_folder import load_model_folder

    checkpoint = finished_run / "checkpoints" / "step_000002"
    settings = json.loads((checkpoint / "training_settings.json").read_text())
    assert settings["learning_rate"] == 3e-3 and settings["model"] == {"n_layer": 2, "n_head": 2, "n_embd": 32}
    assert "num_proc" not in settings and "resume_from_checkpoint" not in settings
    manifest = json.loads((checkpoint / "manifest.json").read_text())["files"]
    assert {"training_settings.json", "config.json"} <= set(manifest)  # written before the manifest: verified too
    model = load_model_folder(checkpoint)
    assert model.config.n_layer == 2 and model.config.n_embd == 32


def test_an_older_checkpoint_is_checked_against_its_run_folder_config(resumable):
    """Checkpoints written before training_settings.json existed: the run folder's config.yaml is the record."""
    run_dir, checkpoint, config_with = resumable
    (checkpoint / "training_settings.json").unlink()
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    del manifest["files"]["training_settings.json"]
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"these settings differ .* \(learning_rate: 0.003 -> 0.001\)"):
        train(config_with("learning_rate=1e-3"))
