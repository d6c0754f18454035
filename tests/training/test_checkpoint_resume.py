"""Exact resume: a run stopped part-way (SIGKILL, or simply resumed from an older checkpoint) ends with weights
bitwise identical to the uninterrupted run — dropout on, gradient accumulation across epoch boundaries included —
having trained on exactly the micro-batches the seeded sampler's contract gives. Damaged checkpoints are refused
with the name of the last complete one, and never deleted; resuming an older checkpoint keeps the branch being
trained and sets the other history aside."""

import datetime
import json
import pickle
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

import hf_gpt_custom.training.checkpoint as checkpoint
import hf_gpt_custom.training.loop as loop_module
from hf_gpt_custom import manifest
from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.checkpoint import (
    check_random_states, find_checkpoint, list_checkpoints, read_training_state, verify_checkpoint,
)
from hf_gpt_custom.training.config import REPO_ROOT, load_train_config, save_train_config
from hf_gpt_custom.training.data import prepare_datasets
from hf_gpt_custom.training.loop import _batch_digest
import hf_gpt_custom.training.train as train_module
from hf_gpt_custom.training.train import train
from tests.helpers import hash_folder

from tests.helpers import tiny_run_overrides


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


def test_a_streamed_run_with_dropout_resumes_exactly(make_config, shakespeare_path, tmp_path, monkeypatch):
    """The streamed loader had no generator of its own: the iterator made to skip to the resumed position drew its
    seed from the global RNG right after the checkpoint restored it, so every later dropout mask moved (losses off
    from the first resumed step, final bits per byte too). The uninterrupted run is the reference."""
    from hf_gpt_custom.training import data

    monkeypatch.setattr(data, "STREAMING_VAL_DOCUMENTS", 20)
    corpus = tmp_path / "streamed.txt"
    corpus.write_text("\n\n".join(shakespeare_path.read_text(encoding="utf-8").split("\n\n")[:300]) + "\n")
    common = [f"dataset={corpus}", "streaming=true", "max_steps=8", "checkpoint_interval=4", "keep_checkpoints=5",
              "eval_interval=8", "eval_batches=1", "model.resid_pdrop=0.1", "model.embd_pdrop=0.1",
              "model.attn_pdrop=0.1"]
    full = train(make_config(*common, run_name="streamed_full"))
    resumed_config = make_config(*common, "resume_from_checkpoint=latest", run_name="streamed_resumed")
    (resumed_config.run_dir / "checkpoints").mkdir(parents=True)
    shutil.copytree(full / "checkpoints" / "step_000004", resumed_config.run_dir / "checkpoints" / "step_000004")
    resumed = train(resumed_config)
    full_log, resumed_log = _train_log(full), _train_log(resumed)
    assert [r["step"] for r in resumed_log] == list(range(5, 9))
    for a, b in zip(full_log[4:], resumed_log):
        assert a["data_digests"] == b["data_digests"]
        assert a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"]
    _assert_bitwise_equal(_weights(full), _weights(resumed))


def test_a_new_run_over_an_old_one_checkpoints_its_own_weights(make_config):
    """Same step numbers and batch counts as the run before it in the folder (started over), other weights: each
    save replaces."""
    common = ["max_steps=4", "checkpoint_interval=2", "keep_checkpoints=5", "eval_interval=4", "eval_batches=1"]
    train(make_config(*common, "learning_rate=1e-3", run_name="reused"))
    run_dir = train(make_config(*common, "learning_rate=3e-3", run_name="reused"), start_over=True)
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


def test_checkpoints_past_step_999999_are_listed_in_step_order(tmp_path):
    """Names are zero-padded to 6 digits, so step_1000000 sorts before step_999999 as text: listing by name made
    "latest" and rotation (which deletes the oldest) pick the wrong folder after a million steps. Expected order by
    hand: by step number."""
    for step in (1_000_000, 999_999, 10, 12_000_000):
        (tmp_path / checkpoint.checkpoint_name(step)).mkdir()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000010", "step_999999", "step_1000000",
                                                            "step_12000000"]


def test_a_kill_in_the_middle_of_a_rotation_leaves_no_half_deleted_checkpoint(run_with_checkpoints, monkeypatch):
    """A SIGKILL while rotation deleted step_000006 left a step_* folder missing files, listed as a checkpoint."""
    from hf_gpt_custom.training import checkpoint

    _, run_dir = run_with_checkpoints
    checkpoints = run_dir / "checkpoints"
    real_rmtree = shutil.rmtree

    def killed_halfway(folder, *args, **kwargs):
        next(p for p in folder.iterdir() if p.is_file()).unlink()  # one file gone, then the process dies
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.shutil, "rmtree", killed_halfway)
    with pytest.raises(KeyboardInterrupt):
        checkpoint._delete_old_checkpoints(checkpoints, keep_last=1)
    assert [p.name for p in list_checkpoints(checkpoints)] == ["step_000008"]
    monkeypatch.setattr(checkpoint.shutil, "rmtree", real_rmtree)
    checkpoint._delete_old_checkpoints(checkpoints, keep_last=1)  # the next rotation finishes the deletion
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000008"]


def test_rotation_counts_only_complete_checkpoints_and_leaves_a_damaged_one_for_a_person(run_with_checkpoints):
    """keep_checkpoints counts complete checkpoints; an incomplete folder is neither counted nor deleted (the
    docstring's rule: left for a human). Counting it deleted the damaged step 6 here, and with a damaged newer
    folder it deleted a complete one, leaving fewer complete checkpoints than asked. Expected folders by hand."""
    _, run_dir = run_with_checkpoints
    checkpoints = run_dir / "checkpoints"
    (checkpoints / "step_000006" / "manifest.json").unlink()  # damaged: its save never finished
    checkpoint._delete_old_checkpoints(checkpoints, keep_last=1)
    assert [p.name for p in list_checkpoints(checkpoints)] == ["step_000006", "step_000008"]
    assert verify_checkpoint(checkpoints / "step_000008") is None


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


@pytest.mark.parametrize("name", ["config.json", "training_settings.json"])
@pytest.mark.parametrize("damage", ["truncate", "same_size"])
def test_a_damaged_settings_file_is_named_by_the_console_scripts_first_check(run_with_checkpoints, name, damage):
    """The console script's check before torch loads (check_run_folder) parsed a checkpoint's config.json and
    training_settings.json before any manifest check: a truncated one gave a bare JSONDecodeError, where every other
    damaged file is named with the last complete checkpoint (the interrupts hunt)."""
    from hf_gpt_custom.training.resume import check_run_folder

    config, run_dir = run_with_checkpoints
    latest = run_dir / "checkpoints" / "step_000008"
    text = (latest / name).read_text()
    (latest / name).write_text(text[: len(text) // 2] if damage == "truncate" else "{" + "x" * (len(text) - 1))
    with pytest.raises(UserError) as err:
        check_run_folder(config)
    if damage == "truncate":  # the manifest's sizes, checked without hashing
        assert str(err.value).startswith(f"checkpoint {latest} is incomplete: {name} has")
        assert f"the last complete one is {run_dir / 'checkpoints' / 'step_000006'}" in str(err.value)
    else:  # a size the manifest cannot tell apart: named when read
        assert str(err.value).startswith(f"{latest / name} is damaged (")
        assert "resume from an earlier checkpoint" in str(err.value)


def test_resuming_from_an_older_checkpoint_keeps_a_damaged_newer_one_aside(run_with_checkpoints):
    config, run_dir = run_with_checkpoints
    latest = run_dir / "checkpoints" / "step_000008"
    (latest / "manifest.json").unlink()
    config.resume_from_checkpoint = str(run_dir / "checkpoints" / "step_000006")
    train(config)
    assert verify_checkpoint(latest) is None  # saved afresh
    # the damaged step 8 belongs to the abandoned history after step 6: set aside with it, not deleted
    (abandoned,) = (run_dir / "checkpoints").glob("abandoned_after_step_000006_*")
    assert (abandoned / "step_000008" / "model.safetensors").is_file()
    assert verify_checkpoint(abandoned / "step_000008") is not None  # untouched: still the damaged original


def test_interrupted_save_leaves_only_a_tmp_folder_that_resume_ignores(run_with_checkpoints):
    config, run_dir = run_with_checkpoints
    # what a kill during save_state leaves: a step_NNNNNN.tmp folder without manifest
    shutil.copytree(run_dir / "checkpoints" / "step_000008", run_dir / "checkpoints" / "step_000010.tmp")
    (run_dir / "checkpoints" / "step_000010.tmp" / "manifest.json").unlink()
    assert find_checkpoint(run_dir / "checkpoints", "latest") == run_dir / "checkpoints" / "step_000008"


def test_a_killed_saves_tmp_folder_is_removed_by_the_next_session(make_config):
    """A kill during a save leaves step_NNNNNN.tmp; only a save of the same step removed it, so a rerun with another
    checkpoint_interval kept it for good, warned about at every resume (a hunt). The next session, holding the run
    lock, removes it; the complete checkpoints stay."""
    settings = ("max_steps=6", "keep_checkpoints=3", "eval_interval=6", "eval_batches=1")
    run_dir = train(make_config(*settings, "checkpoint_interval=2", run_name="leftover"))
    checkpoints = run_dir / "checkpoints"
    shutil.copytree(checkpoints / "step_000002", checkpoints / "step_000005.tmp")
    (checkpoints / "step_000005.tmp" / "manifest.json").unlink()
    train(make_config(*settings, "checkpoint_interval=3", "resume_from_checkpoint=latest", run_name="leftover"))
    assert sorted(p.name for p in checkpoints.iterdir() if p.name.startswith("step_")) == \
        ["step_000002", "step_000004", "step_000006"]  # no step_000005.tmp


def test_resume_without_checkpoints_says_how_to_start(make_config):
    with pytest.raises(FileNotFoundError,
                       match="no checkpoint to resume from .* run without resume_from_checkpoint .* --start_over"):
        train(make_config("resume_from_checkpoint=latest"))


def test_resuming_from_a_model_folder_says_to_use_init_from_not_to_delete_it(make_config):
    """`--resume_from_checkpoint runs/x/final` used to call final/ an incomplete checkpoint and advise deleting it."""
    finished = train(make_config("max_steps=2", "eval_interval=2", "eval_batches=1", run_name="finished"))
    before = hash_folder(finished / "final")
    with pytest.raises(UserError, match=r"is a model folder, not a training checkpoint.*use init_from=.*final") as err:
        train(make_config(f"resume_from_checkpoint={finished / 'final'}", run_name="other"))
    assert "delete" not in str(err.value)
    assert hash_folder(finished / "final") == before


# --- stopped mid-epoch; branches ------------------------------------------------------------------------------------

DROPOUT = ("model.resid_pdrop=0.1", "model.embd_pdrop=0.1", "model.attn_pdrop=0.1")


class _Stopped(Exception):
    """Raised right after a checkpoint is saved: the run stops there, as a kill at that moment would stop it."""


def _stop_after_checkpoint(monkeypatch, step: int) -> None:
    real_save = loop_module.save_checkpoint

    def save_then_stop(accelerator, checkpoints_dir, state, keep_last):
        folder = real_save(accelerator, checkpoints_dir, state, keep_last)
        if state.step == step:
            raise _Stopped(folder)
        return folder

    monkeypatch.setattr(loop_module, "save_checkpoint", save_then_stop)


def _expected_micro_batches(num_blocks: int, seed: int, batch_size: int, count: int) -> list[list[int]]:
    """Block indices of the first `count` micro-batches of one process, from the sampler's contract alone: epoch e
    visits the blocks in the order torch.randperm(num_blocks) draws from a generator seeded with seed + e, cut into
    full batches of `batch_size` (the short tail dropped), epoch after epoch."""
    batches, epoch = [], 0
    while len(batches) < count:
        order = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
        batches += [order[start:start + batch_size] for start in range(0, num_blocks - batch_size + 1, batch_size)]
        epoch += 1
    return batches[:count]


def _logged_digests(run_dir) -> list[int]:
    return [digest for record in _train_log(run_dir) for digest in record["data_digests"][0]]


def test_resume_stopped_mid_epoch_with_accumulation_trains_on_the_expected_batches(make_config, small_corpus,
                                                                                      monkeypatch):
    accum, batch_size, max_steps = 2, 2, 8
    common = [f"dataset={small_corpus}", f"gradient_accumulation_steps={accum}", f"batch_size={batch_size}",
              f"max_steps={max_steps}", "keep_checkpoints=3", "eval_interval=8", "eval_batches=1", "val_fraction=0.2",
              *DROPOUT]
    config = make_config(*common)
    from transformers import AutoTokenizer

    blocks = prepare_datasets(config, AutoTokenizer.from_pretrained(str(config.tokenizer)), config.tokenizer).train
    batches_per_epoch = len(blocks) // batch_size
    # the first checkpoint past an epoch boundary that falls inside an epoch (not on its edge)
    stop_step = next(step for step in range(1, max_steps)
                     if step * accum > batches_per_epoch and (step * accum) % batches_per_epoch)
    common.append(f"checkpoint_interval={stop_step}")

    uninterrupted = train(make_config(*common, run_name="uninterrupted"))
    _stop_after_checkpoint(monkeypatch, stop_step)
    with pytest.raises(_Stopped):
        train(make_config(*common, run_name="stopped"))
    monkeypatch.undo()
    run_dir = make_config(*common, run_name="stopped").run_dir
    state = read_training_state(run_dir / "checkpoints" / f"step_{stop_step:06d}")
    assert (state.epoch, state.batches_in_epoch) == divmod(stop_step * accum, batches_per_epoch)
    assert state.epoch >= 1 and state.batches_in_epoch > 0  # mid-epoch, after a reshuffle
    train(make_config(*common, "resume_from_checkpoint=latest", run_name="stopped"))

    expected = [_batch_digest(torch.tensor(blocks.select(indices)["input_ids"]))
                for indices in _expected_micro_batches(len(blocks), config.seed, batch_size, max_steps * accum)]
    assert [r["step"] for r in _train_log(run_dir)] == list(range(1, max_steps + 1))
    assert _logged_digests(run_dir) == expected  # neither replayed nor skipped a micro-batch
    assert _logged_digests(uninterrupted) == expected
    _assert_bitwise_equal(_weights(uninterrupted), _weights(run_dir))


def test_resuming_an_older_checkpoint_keeps_its_branch_and_sets_the_newer_history_aside(make_config, monkeypatch):
    common = ["max_steps=8", "eval_interval=8", "eval_batches=1"]
    original = train(make_config(*common, "checkpoint_interval=2", "keep_checkpoints=5", run_name="original"))
    config = make_config(*common, "checkpoint_interval=3", "keep_checkpoints=2", run_name="branch")
    checkpoints_dir = config.run_dir / "checkpoints"
    shutil.copytree(original / "checkpoints", checkpoints_dir)  # steps 2, 4, 6, 8
    (config.run_dir / "tensorboard").mkdir()  # log_with=tensorboard's logs: continued, as run_log.jsonl is
    config.resume_from_checkpoint = str(checkpoints_dir / "step_000002")
    _stop_after_checkpoint(monkeypatch, 3)
    with pytest.raises(_Stopped):
        train(config)
    monkeypatch.undo()

    # rotation kept this branch (where it resumed, and its own new checkpoint), and "latest" is on it
    assert [p.name for p in list_checkpoints(checkpoints_dir)] == ["step_000002", "step_000003"]
    assert find_checkpoint(checkpoints_dir, "latest") == checkpoints_dir / "step_000003"
    (abandoned,) = checkpoints_dir.glob("abandoned_after_step_000002_*")
    assert sorted(p.name for p in abandoned.iterdir()) == ["step_000004", "step_000006", "step_000008"]
    assert all(verify_checkpoint(p) is None for p in abandoned.iterdir())  # moved whole, not deleted
    assert (config.run_dir / "tensorboard").is_dir()

    config.resume_from_checkpoint = "latest"
    train(config)
    _assert_bitwise_equal(_weights(original), _weights(config.run_dir))  # the same training, continued


def test_a_new_run_sets_the_earlier_runs_checkpoints_aside(make_config, monkeypatch):
    common = ["max_steps=4", "eval_interval=4", "eval_batches=1", "keep_checkpoints=5"]
    train(make_config(*common, "checkpoint_interval=2", run_name="reused"))  # steps 2 and 4 of the earlier run
    _stop_after_checkpoint(monkeypatch, 3)
    with pytest.raises(_Stopped):
        train(make_config(*common, "checkpoint_interval=3", "learning_rate=1e-3", run_name="reused"), start_over=True)
    checkpoints_dir = make_config(run_name="reused").run_dir / "checkpoints"
    assert find_checkpoint(checkpoints_dir, "latest") == checkpoints_dir / "step_000003"  # not the earlier run's 4
    (abandoned,) = checkpoints_dir.glob("abandoned_before_new_run_*")
    assert sorted(p.name for p in abandoned.iterdir()) == [
        "final", "loss_curve.png", "run_log.jsonl", "step_000002", "step_000004", "training_summary.json"]


def test_starting_over_moves_the_replaced_runs_outputs_aside_so_nothing_pairs_them_with_the_new_config(
        make_config, monkeypatch, tmp_path):
    """Found by trying the CLI: after `--start_over` was interrupted, final/, its summary and the main job's eval/
    and export/ were still the old run's while config.yaml was the new one, and `export` wrote a card mixing the two
    (the new max_steps beside the old step count, the old weights). They are moved aside whole; export refuses."""
    from hf_gpt_custom.hub import export_folder

    run_dir = train(make_config("max_steps=4", "eval_interval=4", "eval_batches=1", run_name="over"))
    for name in ("eval", "export"):  # what `hf-gpt-custom run` adds
        (run_dir / name).mkdir()
        (run_dir / name / "README.md").write_text(f"the old run's {name}")
    old_weights = hash_folder(run_dir / "final")
    monkeypatch.setattr(train_module, "run_loop", _interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(make_config("max_steps=6", "eval_interval=6", "eval_batches=1", run_name="over"), start_over=True)
    for name in ("final", "eval", "export", "training_summary.json", "loss_curve.png"):
        assert not (run_dir / name).exists(), name
    assert (run_dir / "run_log.jsonl").read_text() == ""  # the new run's log, begun
    (abandoned,) = (run_dir / "checkpoints").glob("abandoned_before_new_run_*")
    assert (abandoned / "run_log.jsonl").read_text().count('"kind"') >= 4  # the old one, kept
    assert hash_folder(abandoned / "final") == old_weights
    assert (abandoned / "export" / "README.md").read_text() == "the old run's export"
    with pytest.raises(UserError, match="final"):
        export_folder(run_dir, tmp_path / "exported")


@pytest.mark.parametrize("busy", ["eval", "export"])
def test_starting_over_while_an_evaluation_or_export_writes_the_old_outputs_waits_for_it(make_config, busy):
    """Found reading the code: `--start_over` moved eval/ aside with an `eval --out <run>/eval` still writing in it
    (the writer's lock moved with the folder), and a second evaluation could begin beside the new run. Now it
    stops, naming the writer, before it moves or trains anything; once the writer is gone it sets both aside and
    leaves no lock file behind."""
    from hf_gpt_custom.training.run_lock import OUTPUT_LOCK_NAME

    run_dir = train(make_config("max_steps=2", "eval_interval=2", "eval_batches=1", run_name="busy"))
    for name in ("eval", "export"):
        (run_dir / name).mkdir()
        (run_dir / name / "README.md").write_text(f"the old run's {name}")
    lock_file = run_dir / "eval" / OUTPUT_LOCK_NAME if busy == "eval" else run_dir / ".export.lock"
    script = 'printf \'{"pid": %d}\' $$ > "$0"; exec flock -o "$0" sh -c "echo held; exec sleep 120"'
    holder = subprocess.Popen(["sh", "-c", script, str(lock_file)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert holder.stdout.readline().strip() == "held"
    try:
        what = "the evaluation folder" if busy == "eval" else "the export folder"
        with pytest.raises(UserError, match=rf"^{what} {run_dir / busy} is being written by process {holder.pid} .*"
                                            rf"wait for it to finish, then run this command again.*nothing was moved or trained"):
            train(make_config("max_steps=3", "eval_interval=3", "eval_batches=1", run_name="busy"), start_over=True)
        assert (run_dir / busy / "README.md").read_text() == f"the old run's {busy}"  # not moved under its writer
        # nor the checkpoints: refused after they were moved, the folder was left with final/ and none (the
        # roundreview13 hunt)
        assert [path.name for path in (run_dir / "checkpoints").iterdir()] == ["step_000002"]
        # a resume that replaces nothing takes no lock: the same command goes on while the writer writes
        train(make_config("max_steps=2", "eval_interval=2", "eval_batches=1", run_name="busy"))
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    lock_file.unlink()
    train(make_config("max_steps=3", "eval_interval=3", "eval_batches=1", run_name="busy"), start_over=True)
    assert not (run_dir / "eval").exists() and not (run_dir / "export").exists()
    set_aside = list((run_dir / "checkpoints").glob("abandoned_*/eval")) + \
        list((run_dir / "checkpoints").glob("abandoned_*/export"))
    assert sorted(path.name for path in set_aside) == ["eval", "export"]
    assert not list(run_dir.rglob(OUTPUT_LOCK_NAME)) and not list(run_dir.rglob(".export.lock"))


def test_resuming_a_set_aside_checkpoint_continues_its_own_log_not_the_other_runs(make_config):
    """Run A, then `--start_over` with another learning rate (run B, shorter), then A resumed from its set-aside
    step 8: the weights were A's, but the log kept B's records below step 8 (another learning rate's losses) and
    lacked A's, so final_train_loss and the loss curve mixed the two runs (a hunt). Reference: A uninterrupted."""
    settings = ("max_steps=12", "checkpoint_interval=4", "keep_checkpoints=4", "eval_interval=4", "eval_batches=1")
    reference = train(make_config(*settings, run_name="reference"))
    run_dir = train(make_config(*settings, run_name="mixed"))
    train(make_config(*settings[1:], "max_steps=6", "learning_rate=1e-2", run_name="mixed"), start_over=True)
    (own,) = (run_dir / "checkpoints").glob("abandoned_before_new_run_*/step_000008")
    resumed = train(make_config(*settings, f"resume_from_checkpoint={own}", run_name="mixed"))

    def records(folder):
        lines = (folder / "run_log.jsonl").read_text().splitlines()
        return [(r["kind"], r["step"], r.get("loss", r.get("val_loss")))
                for r in map(json.loads, lines) if r["kind"] in ("train", "eval")]

    assert records(resumed) == records(reference)
    summaries = [json.loads((folder / "training_summary.json").read_text()) for folder in (reference, resumed)]
    assert summaries[0]["final_train_loss"] == summaries[1]["final_train_loss"]
    assert hash_folder(resumed / "final") == hash_folder(reference / "final")
    # the log it replaced, run B's (6 steps), is kept beside B's checkpoints, not overwritten
    kept = [[json.loads(line)["step"] for line in (folder / "run_log.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "train"]
            for folder in (run_dir / "checkpoints").glob("abandoned_*") if (folder / "run_log.jsonl").is_file()]
    assert [1, 2, 3, 4, 5, 6] in kept


def _interrupted(session):
    raise KeyboardInterrupt


# --- random states; the manifest ------------------------------------------------------------------------------------


def test_resume_refuses_a_random_state_file_it_cannot_load(run_with_checkpoints):
    config, run_dir = run_with_checkpoints
    latest = run_dir / "checkpoints" / "step_000008"
    # a pickle torch.load(weights_only=True) refuses, as it refuses one from another numpy/torch version
    (latest / "random_states_0.pkl").write_bytes(pickle.dumps({"random_state": datetime.date(2026, 1, 1)}))
    manifest.write_manifest(latest, step=8)  # the checkpoint itself verifies: only the RNG file is unusable
    config.resume_from_checkpoint = "latest"
    with pytest.raises(UserError, match=r"cannot load the random state .*random_states_0\.pkl .*would not continue "
                                        r"exactly"):
        train(config)


@pytest.mark.parametrize("damage", ["saved by 2 processes", "unloadable random state"])
def test_a_resume_refused_for_its_random_states_leaves_the_newer_work_in_place(run_with_checkpoints, damage):
    """Resuming an older checkpoint sets the newer checkpoints, final/ and the summary aside: the refusal for the
    checkpoint's process count (or an unloadable random state) came after that, so a refused command left a run that
    could not be exported, and a correct rerun trained the newer steps again (the distributed3 hunt). Reference:
    the folder's files before the command."""
    config, run_dir = run_with_checkpoints
    older = run_dir / "checkpoints" / "step_000006"
    if damage.startswith("saved"):
        shutil.copy(older / "random_states_0.pkl", older / "random_states_1.pkl")
    else:
        (older / "random_states_0.pkl").write_bytes(pickle.dumps({"random_state": datetime.date(2026, 1, 1)}))
    manifest.write_manifest(older, step=6)  # the checkpoint itself verifies: only its random states are refused
    before = sorted(str(path.relative_to(run_dir)) for path in run_dir.rglob("*"))
    config.resume_from_checkpoint = str(older)
    with pytest.raises(UserError, match="saved by 2 process" if damage.startswith("saved") else "cannot load the "
                                                                                              "random state"):
        train(config)
    assert sorted(str(path.relative_to(run_dir)) for path in run_dir.rglob("*")) == before


def test_a_random_state_refused_on_another_rank_stops_this_rank_too(run_with_checkpoints, monkeypatch):
    """Each rank reads only its own random_states_<rank>.pkl: rank 0, whose file loads, set the run's newer work
    aside while rank 1 refused (the roundreview28 hunt). The refusals are gathered first. Reference: rank 1's
    message, as accelerate's gather_object hands it to rank 0 (simulated: CI runs one process here)."""
    import types

    from hf_gpt_custom.training.checkpoint import check_random_states_on_every_rank

    _, run_dir = run_with_checkpoints
    folder = run_dir / "checkpoints" / "step_000006"
    shutil.copy(folder / "random_states_0.pkl", folder / "random_states_1.pkl")  # saved by two processes
    rank_0 = types.SimpleNamespace(process_index=0, num_processes=2)
    said_by_rank_1 = f"cannot load the random state {folder / 'random_states_1.pkl'} (UnpicklingError: ...)"
    gathered = []
    monkeypatch.setattr("accelerate.utils.gather_object",
                        lambda objects: gathered.append(objects) or [objects[0], said_by_rank_1])
    with pytest.raises(UserError) as refused:
        check_random_states_on_every_rank(rank_0, folder)
    assert str(refused.value) == said_by_rank_1 and gathered == [[None]]
    monkeypatch.setattr("accelerate.utils.gather_object", lambda objects: [objects[0], None])
    check_random_states_on_every_rank(rank_0, folder)  # every rank's file loads: nothing said


def test_train_raises_another_ranks_random_state_refusal_before_setting_the_newer_work_aside(run_with_checkpoints,
                                                                                               monkeypatch):
    """train itself asks every rank: with rank 0's own check alone (a one-line revert that the test above cannot see)
    rank 0 set the newer checkpoints aside while rank 1 refused (roundreview30). Two ranks simulated: rank 0's
    accelerator says 2 processes, and gather_object brings rank 1's refusal."""
    config, run_dir = run_with_checkpoints
    older = run_dir / "checkpoints" / "step_000006"
    shutil.copy(older / "random_states_0.pkl", older / "random_states_1.pkl")  # saved by two processes
    manifest.write_manifest(older, step=6)
    said_by_rank_1 = f"cannot load the random state {older / 'random_states_1.pkl'} (UnpicklingError: ...)"
    real_accelerator = train_module._make_accelerator

    def rank_0_of_2(*args, **kwargs):
        accelerator = real_accelerator(*args, **kwargs)
        monkeypatch.setattr(type(accelerator), "num_processes", property(lambda self: 2))
        return accelerator

    monkeypatch.setattr(train_module, "_make_accelerator", rank_0_of_2)
    monkeypatch.setattr("accelerate.utils.gather_object", lambda objects: [objects[0], said_by_rank_1])
    before = sorted(str(path.relative_to(run_dir)) for path in run_dir.rglob("*"))
    config.resume_from_checkpoint = str(older)
    with pytest.raises(UserError) as refused:
        train(config)
    assert str(refused.value) == said_by_rank_1
    assert sorted(str(path.relative_to(run_dir)) for path in run_dir.rglob("*")) == before


def test_resume_with_another_number_of_processes_than_saved_the_checkpoint_is_refused_by_every_rank(
        run_with_checkpoints):
    _, run_dir = run_with_checkpoints
    latest = run_dir / "checkpoints" / "step_000008"
    check_random_states(latest, rank=0, num_processes=1)
    # every rank says the same: rank 1 lacks its file, rank 0 has its own (it went on alone, rewrote the run log, and
    # died in the evaluation's collective); the two ranks said two different things for the one cause (newuser2)
    for rank in (0, 1):
        with pytest.raises(UserError, match=r"was saved by 1 process\(es\) and this run has 2: the ranks would read "
                                            r"other batches .* resume with 1 process\(es\)"):
            check_random_states(latest, rank=rank, num_processes=2)
    # fewer: a 2-process checkpoint resumed by one process trained the batches rank 1 had read again
    shutil.copy(latest / "random_states_0.pkl", latest / "random_states_1.pkl")
    check_random_states(latest, rank=1, num_processes=2)
    with pytest.raises(UserError, match=r"was saved by 2 process\(es\) and this run has 1: .* resume with 2 "
                                        r"process\(es\) \(accelerate launch --multi_gpu --num_processes 2; on a CPU, "
                                        r"torchrun --standalone --nproc_per_node 2\)"):
        check_random_states(latest, rank=0, num_processes=1)
    (latest / "random_states_0.pkl").unlink()  # the count agrees, this rank's own file is gone
    with pytest.raises(UserError, match=r"has no random_states_0\.pkl though 1 process\(es\) saved it; .*would "
                                        r"not continue exactly .* resume from an earlier checkpoint"):
        check_random_states(latest, rank=0, num_processes=1)


def test_a_random_state_without_the_generators_accelerate_restores_is_refused(tmp_path):
    torch.save({"random_state": None, "step": 0}, tmp_path / "random_states_0.pkl")  # loads, but has no RNG states
    with pytest.raises(UserError, match=r"lacks numpy_random_seed, torch_manual_seed"):
        check_random_states(tmp_path, rank=0, num_processes=1)


def test_checkpoint_manifest_has_one_home_in_manifest_py(run_with_checkpoints):
    _, run_dir = run_with_checkpoints
    folder = run_dir / "checkpoints" / "step_000008"
    written = json.loads((folder / "manifest.json").read_text())
    assert written["format"] == 1 and written["step"] == 8
    expected_files = {"training_state.json", "model.safetensors", "optimizer.bin", "random_states_0.pkl"}
    assert expected_files <= written["files"].keys()
    assert written["files"]["model.safetensors"]["sha256"] == manifest.sha256_file(folder / "model.safetensors")
    assert manifest.verify_manifest(folder) is None
    for name in ("sha256_file", "write_manifest", "verify_manifest"):  # none of its own (sha256_file: not needed)
        assert getattr(checkpoint, name, getattr(manifest, name)) is getattr(manifest, name), name


def test_a_resumed_runs_summary_counts_the_time_of_every_session(make_config):
    """The summary (and the card built from it) gives the run's time, not the last session's: train_time_s is the
    sum of every logged step's time, the earlier session's included; wall_time_s adds this session to the wall time
    the resumed checkpoint carries. The first session's figures are set large (its checkpoint, its log rows), so
    that a summary of the second session alone cannot pass for the whole."""
    config = make_config("max_steps=6", "warmup_steps=1", "checkpoint_interval=3", "eval_interval=6")
    train(config)
    checkpoints, log_path = config.run_dir / "checkpoints", config.run_dir / "run_log.jsonl"
    assert 0 < read_training_state(checkpoints / "step_000003").wall_time_s
    shutil.rmtree(checkpoints / "step_000006")  # as if the first session had died after step 3's checkpoint
    state_path = checkpoints / "step_000003" / "training_state.json"
    state_path.write_text(json.dumps({**json.loads(state_path.read_text()), "wall_time_s": 1000.0}))
    rows = [json.loads(line) for line in log_path.read_text().splitlines()]
    log_path.write_text("".join(json.dumps({**r, "step_time_s": 100.0} if r.get("kind") == "train" and r["step"] <= 3
                                           else r) + "\n" for r in rows))
    manifest.write_manifest(state_path.parent, step=3)  # the edited checkpoint stays a complete one
    started = time.time()
    train(config)
    second_session_s = time.time() - started
    summary = json.loads((config.run_dir / "training_summary.json").read_text())
    steps = [r for r in map(json.loads, log_path.read_text().splitlines()) if r.get("kind") == "train"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in steps if r.get("warm_up")] == [1, 4]  # each session's first step, timed alone
    later = sum(r["step_time_s"] for r in steps if r["step"] > 3)
    assert summary["train_time_s"] == pytest.approx(300.0 + later)
    assert 1000.0 + later <= summary["wall_time_s"] <= 1000.0 + second_session_s
    assert 1000.0 < read_training_state(checkpoints / "step_000006").wall_time_s <= summary["wall_time_s"]
