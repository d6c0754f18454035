"""Exact resume: a run stopped part-way (SIGKILL, or simply resumed from an older checkpoint) ends with weights
bitwise identical to the uninterrupted run — dropout on, gradient accumulation across epoch boundaries included.
Damaged checkpoints are refused with the name of the last complete one, and never deleted."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from safetensors.torch import load_file

from training.checkpoint import find_checkpoint, list_checkpoints, read_training_state, verify_checkpoint
from training.config import REPO_ROOT, load_train_config, save_train_config
from training.train import train

from .conftest import tiny_run_overrides


def _weights(run_dir):
    return load_file(str(run_dir / "final" / "model.safetensors"))


def _assert_bitwise_equal(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].equal(b[name]), f"{name} differs"


def _train_log(run_dir):
    return [r for r in map(json.loads, (run_dir / "run_log.jsonl").read_text().splitlines()) if r["kind"] == "train"]


@pytest.fixture
def small_corpus(tmp_path, shakespeare_path):
    """The first 10 speeches of tiny Shakespeare (real text): a few batches per epoch, so 10 steps cross epochs."""
    text = shakespeare_path.read_text(encoding="utf-8")
    path = tmp_path / "first_speeches.txt"
    path.write_text("\n\n".join(text.split("\n\n")[:10]) + "\n", encoding="utf-8")
    return path


def test_resume_with_gradient_accumulation_matches_uninterrupted_run(make_config, small_corpus, tmp_path):
    # 3 micro-batches per step straddle epoch boundaries; dropout (0.1 in every layer) needs the RNG restored
    common = [f"dataset={small_corpus}", "gradient_accumulation_steps=3", "max_steps=10", "checkpoint_interval=4",
              "keep_checkpoints=5", "eval_interval=5", "eval_batches=1", "val_fraction=0.2",
              "model.resid_pdrop=0.1", "model.embd_pdrop=0.1", "model.attn_pdrop=0.1"]
    full_config = make_config(*common, run_name="full")
    full = train(full_config)
    assert [p.name for p in list_checkpoints(full / "checkpoints")] == ["step_000004", "step_000008", "step_000010"]
    batches_per_epoch = json.loads((full / "training_summary.json").read_text())["train_blocks"] // 4
    state = read_training_state(full / "checkpoints" / "step_000004")
    assert state.step == 4 and state.epoch * batches_per_epoch + state.batches_in_epoch == 12  # 4 steps x 3 micro
    assert state.epoch >= 2  # the position lives in the checkpoint, here past epoch boundaries

    resumed_config = make_config(*common, "resume_from_checkpoint=latest", run_name="resumed")
    (resumed_config.run_dir / "checkpoints").mkdir(parents=True)
    shutil.copytree(full / "checkpoints" / "step_000004", resumed_config.run_dir / "checkpoints" / "step_000004")
    resumed = train(resumed_config)

    _assert_bitwise_equal(_weights(full), _weights(resumed))
    full_log, resumed_log = _train_log(full), _train_log(resumed)
    assert [r["step"] for r in resumed_log] == list(range(5, 11))
    for a, b in zip(full_log[4:], resumed_log):
        assert a["data_digests"] == b["data_digests"]  # the same micro-batches, not replayed ones
        assert a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"]


def test_a_new_run_over_an_old_one_checkpoints_its_own_weights(make_config):
    """Same step numbers and batch counts as the run before it in the folder, other weights: each save replaces."""
    common = ["max_steps=4", "checkpoint_interval=2", "keep_checkpoints=5", "eval_interval=4", "eval_batches=1"]
    train(make_config(*common, "learning_rate=1e-3", run_name="reused"))
    run_dir = train(make_config(*common, "learning_rate=3e-3", run_name="reused"))
    saved = load_file(str(run_dir / "checkpoints" / "step_000004" / "model.safetensors"))
    final = _weights(run_dir)
    shared = saved.keys() & final.keys()
    assert shared and all(saved[name].equal(final[name]) for name in shared)


@pytest.mark.slow
def test_resume_after_kill_matches_uninterrupted_run(make_config, tmp_path):
    def command(config_path, *extra):
        return [sys.executable, "-m", "hf_gpt_custom.cli", "train", str(config_path), *extra]

    overrides = ["max_steps=50", "checkpoint_interval=10", "keep_checkpoints=10", "eval_interval=30",
                 "model.resid_pdrop=0.1", "model.embd_pdrop=0.1", "model.attn_pdrop=0.1"]
    uninterrupted = train(make_config(*overrides, run_name="uninterrupted"))  # same thread count as the subprocesses
    config_path = tmp_path / "killed.yaml"
    save_train_config(make_config(*overrides, run_name="killed"), config_path)
    env = {**os.environ, "TQDM_DISABLE": "1"}
    run_dir = tmp_path / "killed"
    process = subprocess.Popen(command(config_path), cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (run_dir / "checkpoints" / "step_000010").is_dir():
        assert process.poll() is None, "the run ended before its first checkpoint"
        assert time.time() < deadline, "no checkpoint after 300 s"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    assert not (run_dir / "final").exists()  # killed part-way, not at the end
    killed_at = max(r["step"] for r in _train_log(run_dir))
    assert killed_at < 50

    subprocess.run(command(config_path, "--resume_from_checkpoint", "latest"), check=True, cwd=REPO_ROOT, env=env,
                   capture_output=True)
    _assert_bitwise_equal(_weights(uninterrupted), _weights(run_dir))
    full_log, resumed_log = _train_log(uninterrupted), _train_log(run_dir)
    assert [r["step"] for r in resumed_log] == list(range(1, 51))  # steps redone after the kill are logged once
    assert [r["loss"] for r in resumed_log] == [r["loss"] for r in full_log]


CHECKPOINTED = ("max_steps=8", "checkpoint_interval=2", "keep_checkpoints=2", "eval_interval=8")


@pytest.fixture(scope="module")
def checkpointed_run(tmp_path_factory, shakespeare_path, shakespeare_tokenizer_dir, shared_data_cache):
    out_dir = tmp_path_factory.mktemp("checkpointed") / "run"
    overrides = tiny_run_overrides(out_dir, shakespeare_path, shakespeare_tokenizer_dir, shared_data_cache)
    return train(load_train_config(None, overrides + list(CHECKPOINTED)))


@pytest.fixture
def run_with_checkpoints(checkpointed_run, make_config):
    """A private copy of an 8-step run with checkpoints every 2 steps (the last 2 kept), free to damage."""
    config = make_config(*CHECKPOINTED)
    shutil.copytree(checkpointed_run, config.run_dir)
    return config, config.run_dir


def test_only_the_last_k_checkpoints_are_kept(run_with_checkpoints):
    _, run_dir = run_with_checkpoints
    folders = list_checkpoints(run_dir / "checkpoints")
    assert [p.name for p in folders] == ["step_000006", "step_000008"]
    assert all(verify_checkpoint(p) is None for p in folders)
    assert read_training_state(folders[-1]).step == 8


@pytest.mark.parametrize("damage, problem", [
    ("flip_byte", "model.safetensors does not match its sha256 in the manifest"),
    ("truncate", "model.safetensors has"),
    ("no_manifest", "it has no manifest.json"),
])
def test_damaged_checkpoint_is_refused_naming_the_last_complete_one(run_with_checkpoints, damage, problem):
    config, run_dir = run_with_checkpoints
    latest = run_dir / "checkpoints" / "step_000008"
    weights = latest / "model.safetensors"
    if damage == "flip_byte":
        data = bytearray(weights.read_bytes())
        data[-1] ^= 0xFF
        weights.write_bytes(bytes(data))
    elif damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:100])
    else:
        (latest / "manifest.json").unlink()
    expected = (f"checkpoint {latest} is incomplete: {problem}")
    with pytest.raises(ValueError, match="incomplete") as err:
        find_checkpoint(run_dir / "checkpoints", "latest")
    assert str(err.value).startswith(expected)
    assert f"the last complete one is {run_dir / 'checkpoints' / 'step_000006'}" in str(err.value)
    config.resume_from_checkpoint = "latest"
    with pytest.raises(ValueError, match="resume from it, or delete the damaged folder"):
        train(config)
    assert latest.is_dir() and (run_dir / "checkpoints" / "step_000006").is_dir()  # nothing deleted


def test_resuming_from_an_older_checkpoint_keeps_a_damaged_newer_one_aside(run_with_checkpoints):
    config, run_dir = run_with_checkpoints
    latest = run_dir / "checkpoints" / "step_000008"
    (latest / "manifest.json").unlink()
    config.resume_from_checkpoint = str(run_dir / "checkpoints" / "step_000006")
    train(config)
    assert verify_checkpoint(latest) is None  # saved afresh
    assert (run_dir / "checkpoints" / "step_000008.damaged" / "model.safetensors").is_file()  # the old one kept


def test_interrupted_save_leaves_only_a_tmp_folder_that_resume_ignores(run_with_checkpoints):
    config, run_dir = run_with_checkpoints
    # what a kill during save_state leaves: a step_NNNNNN.tmp folder without manifest
    shutil.copytree(run_dir / "checkpoints" / "step_000008", run_dir / "checkpoints" / "step_000010.tmp")
    (run_dir / "checkpoints" / "step_000010.tmp" / "manifest.json").unlink()
    assert find_checkpoint(run_dir / "checkpoints", "latest") == run_dir / "checkpoints" / "step_000008"


def test_resume_without_checkpoints_says_how_to_start(make_config):
    with pytest.raises(FileNotFoundError, match="no checkpoint to resume from .* run without resume_from_checkpoint"):
        train(make_config("resume_from_checkpoint=latest"))
