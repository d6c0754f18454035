"""Resuming continues the same run: a changed recipe, data or architecture is refused naming each change and the
way out (init_from the checkpoint's weights); settings that only change speed, saving or logging stay changeable."""

import dataclasses
import json
import shutil

import pytest
import torch
import yaml

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.config import load_train_config, own_folder_fix
from hf_gpt_custom.training.resume import changed_settings
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
    ("block_size=16", "block_size: 32 -> 16, model.n_positions: 32 -> 16"),  # n_positions defaults to block_size
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
    # the weights cannot load into another architecture: init_from is advised only where they can (a review)
    advised = f"start a new run from its weights (fresh optimizer and schedule) with init_from={checkpoint}"
    assert (advised in message) == ("model." not in shown)
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


def test_settings_the_run_never_reads_are_named_and_may_change_on_resume(resumable, caplog):
    """The tiny run names its tokenizer folder and has learned positions and GPT-2's MLP: tokenizer_vocab_size,
    model.rope_theta and model.multiple_of are never read. Given, each was accepted without a word, and a later
    change refused the resume as another run."""
    import logging

    from hf_gpt_custom.training.config_checks import note_without_effect

    run_dir, _, config_with = resumable
    note_without_effect.cache_clear()
    with caplog.at_level(logging.WARNING):
        config = config_with("tokenizer_vocab_size=1024", "model.rope_theta=500.0", "model.multiple_of=32")
    said = caplog.text
    assert "tokenizer_vocab_size=1024 has no effect: it sizes the tokenizer a run trains when tokenizer and " \
           "init_from are null (it may stay in the config)" in said
    assert "model.rope_theta=500.0 has no effect: it is read only with position_embedding_type=rope" in said
    assert "model.multiple_of=32 has no effect: it rounds SwiGLU's default inner width" in said
    train(config)  # resumed, not refused
    assert json.loads((run_dir / "training_summary.json").read_text())["steps"] == 4
    with pytest.raises(ValueError, match=r"these settings differ from the ones it was trained with \(model.head_dim: "
                                         r"16 -> 8, model.n_head: 2 -> 4, model.n_kv_head: 2 -> 4\)"):
        train(config_with("model.rope_theta=500.0", "model.n_head=4"))  # a setting that is read still counts
    with pytest.raises(ValueError, match=r"\(model.activation_function: 'gelu_new' -> 'silu', model.mlp_type: "
                                         r"'standard' -> 'swiglu', model.multiple_of: 256 -> 32\)"):
        # read by the new architecture, not by the old: a change
        train(config_with("model.mlp_type=swiglu", "model.multiple_of=32", "model.activation_function=silu"))


@pytest.mark.parametrize("content", [b"", b"\x00\x01binary", "caf\u00e9".encode("latin-1")], ids=["empty", "binary", "latin1"])
def test_start_over_on_unreadable_data_stops_before_it_sets_the_finished_run_aside(finished_run, make_config,
                                                                                   tmp_path, content):
    """--start_over moved the finished run's final/, checkpoints and log aside and rewrote config.yaml, then failed
    on the new data: the same command as before then trained from step 0 instead of finding its run."""
    run_dir = make_config(*STEPS).run_dir
    shutil.copytree(finished_run, run_dir)
    before = sorted(str(path.relative_to(run_dir)) for path in run_dir.rglob("*"))
    bad = tmp_path / "new.txt"
    bad.write_bytes(content)
    with pytest.raises(ValueError, match=rf"^{bad} is "):
        train(make_config(*STEPS, f"dataset={bad}"), start_over=True)
    assert sorted(str(path.relative_to(run_dir)) for path in run_dir.rglob("*")) == before
    train(make_config(*STEPS))  # the original command still finds its complete run


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


@pytest.mark.parametrize("change, shown", [
    ("val_holdout=tail", "val_holdout: 'random' -> 'tail'"),
    ("shift_block_boundaries=true", "shift_block_boundaries: False -> True"),
])
def test_a_setting_an_older_checkpoint_predates_reads_as_what_that_code_did(resumable, change, shown):
    """A run folder config.yaml written before val_holdout (2026-11-24) or shift_block_boundaries existed lacks the
    key. That code held out a random sample and cut fixed blocks, so a resume asking for the tail split (other
    training documents) or shifted blocks is a change, not an unknown that trains the rest of the run another way."""
    run_dir, checkpoint, config_with = resumable
    (checkpoint / "training_settings.json").unlink()
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    del manifest["files"]["training_settings.json"]
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))
    recorded = yaml.safe_load((run_dir / "config.yaml").read_text())
    for key in ("val_dataset", "val_holdout", "shift_block_boundaries"):
        del recorded[key]
    (run_dir / "config.yaml").write_text(yaml.safe_dump(recorded, sort_keys=False))
    with pytest.raises(ValueError, match=rf"these settings differ .* \({shown}\)"):
        train(config_with(change))
    assert train(config_with()).is_dir()  # as that code trained: resumes


# --- the same command after a crash: continue when the settings match, refuse by name when they don't -----------


@pytest.fixture
def crashed(finished_run, make_config):
    """A private copy of the run as a crash after its step-2 checkpoint leaves it (no step-4 checkpoint, no final/)."""
    run_dir = make_config(*STEPS).run_dir
    shutil.copytree(finished_run, run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "step_000004")
    shutil.rmtree(run_dir / "final")
    return run_dir


def test_the_same_command_after_a_crash_continues_the_run(crashed, finished_run, make_config):
    from safetensors.torch import load_file

    train(make_config(*STEPS))  # no resume flag
    assert not list((crashed / "checkpoints").glob("abandoned_*"))  # nothing set aside: it continued
    records = [json.loads(line) for line in (crashed / "run_log.jsonl").read_text().splitlines()]
    original = [json.loads(line) for line in (finished_run / "run_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3, 4]
    assert [r["data_digests"] for r in records if r["kind"] == "train"] == \
        [r["data_digests"] for r in original if r["kind"] == "train"]  # steps 3-4 trained on the batches they had
    resumed, uninterrupted = (load_file(d / "final" / "model.safetensors") for d in (crashed, finished_run))
    assert all(torch.equal(resumed[key], uninterrupted[key]) for key in uninterrupted)


def test_the_same_command_on_a_finished_run_logs_each_evaluation_once_and_ends_an_interrupted_deletion(
        finished_run, make_config):
    """A finished run given again (or killed after its last checkpoint, before `run` marked it done) evaluates again
    for its summary: that row replaces the one already logged at the last step, where it was appended a second time
    (two points at one step on the loss curve). A checkpoint whose rotation was killed mid-delete (`step_*.deleting`)
    is removed at the start, where it waited for a rotation a finished run never makes."""
    run_dir = make_config(*STEPS).run_dir
    shutil.copytree(finished_run, run_dir)
    leftover = run_dir / "checkpoints" / "step_000001.deleting"
    shutil.copytree(run_dir / "checkpoints" / "step_000002", leftover)
    train(make_config(*STEPS))
    records = [json.loads(line) for line in (run_dir / "run_log.jsonl").read_text().splitlines()]
    original = [json.loads(line) for line in (finished_run / "run_log.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in records] == [(r["kind"], r["step"]) for r in original]
    assert [r for r in records if r["kind"] == "eval"][-1]["val_loss"] == pytest.approx(
        json.loads((run_dir / "training_summary.json").read_text())["final_val_loss"])
    assert not leftover.exists()


def test_the_same_folder_with_other_settings_is_refused_naming_them_and_the_ways_out(crashed, make_config):
    before = sorted(p.name for p in (crashed / "checkpoints").iterdir())
    with pytest.raises(ValueError) as err:
        train(make_config(*STEPS, "learning_rate=1e-3", "model.activation_function=relu"))
    message = str(err.value)
    assert message.startswith(f"the run folder {crashed.absolute()} holds checkpoints up to step_000002 trained with "
                              f"other settings (learning_rate: 0.003 -> 0.001, model.activation_function: "
                              f"'gelu_new' -> 'relu')")
    # run_name= does not move a run whose config sets out_dir (following it gave the same refusal: orchread hunt)
    assert "give this run its own folder (out_dir=<new folder>), or pass --start_over" in message
    assert sorted(p.name for p in (crashed / "checkpoints").iterdir()) == before
    without_out_dir = dataclasses.replace(make_config(), out_dir=None)
    assert "(run_name=<new name> or out_dir=...)" in own_folder_fix(without_out_dir)


def test_a_model_field_given_at_its_default_then_left_out_is_the_same_model(crashed, make_config):
    """The model section was also compared as written: model.activation_function=gelu_new (GPT-2's default) given
    once and left out after was refused as "'gelu_new' -> None", though both build the same model, and `run`, which
    compares it resolved, then stuck on a finished run (the orchread hunt). A real change is still refused."""
    defaults = ("model.activation_function=gelu_new", "model.layer_norm_epsilon=1e-05")
    run_dir = train(make_config(*STEPS, *defaults, run_name="defaults"))
    assert changed_settings(make_config(*STEPS, run_name="defaults"), run_dir / "final") == {}
    assert changed_settings(make_config(*STEPS, "model.activation_function=relu", run_name="defaults"),
                            run_dir / "final") == {"model.activation_function": ("gelu_new", "relu")}
    train(make_config(*STEPS, run_name="defaults"))  # the same command without the defaults: resumed, complete
    # the fields the tokenizer gives when the section leaves them out stay compared as written: vocab_size=576 left
    # out builds a 512-row model (it was taken, then failed after the data was tokenized: the roundreview13 hunt)
    padded = train(make_config(*STEPS, "model.vocab_size=576", run_name="padded"))
    assert changed_settings(make_config(*STEPS, run_name="padded"), padded / "final") == {
        "model.vocab_size": (576, None)}


def test_raising_max_steps_is_told_the_way_that_keeps_the_weights(crashed, make_config):
    """Raising max_steps to train longer changes the cosine schedule, so the resume is refused; the message offered a
    new folder or --start_over (both from step 0), while resume_from_checkpoint's offered init_from (found by the
    resume-under-changed-setup hunt). Followed as written, a new run starts from the checkpoint's weights."""
    from safetensors.torch import load_file

    checkpoint = crashed.absolute() / "checkpoints" / "step_000002"
    with pytest.raises(ValueError) as err:
        train(make_config(*STEPS[1:], "max_steps=8"))
    assert "(max_steps: 4 -> 8)" in str(err.value)
    # the config sets out_dir (run_name would not move it): the advice names a new out_dir, followed below
    advice = f"start a new run from its weights (fresh optimizer and schedule) with init_from={checkpoint} out_dir="
    assert advice in str(err.value)
    # one step of linear warmup updates with learning rate 0 (transformers' schedule): the checkpoint's weights
    longer = make_config(*STEPS[1:], "max_steps=1", "warmup_steps=1", f"init_from={checkpoint}", run_name="longer",
                         with_model_section=False)
    final = load_file(train(longer) / "final" / "model.safetensors")
    start = load_file(checkpoint / "model.safetensors")
    assert start and all(torch.equal(final[name], start[name]) for name in start)


def test_the_console_script_names_the_clash_before_torch_loads(crashed, make_config, tmp_path):
    """Was ~6-8 s: the run folder was compared only after torch, transformers and accelerate had loaded."""
    import subprocess
    import sys

    from hf_gpt_custom.training.config import save_train_config

    save_train_config(make_config(*STEPS), tmp_path / "same.yaml")
    code = ("import sys; from hf_gpt_custom.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as exit:\n"
            "    print(exit.code, 'torch' in sys.modules, 'transformers' in sys.modules)")
    changes = ["learning_rate=1e-3", "model.activation_function=relu"]
    completed = subprocess.run([sys.executable, "-c", code, "train", str(tmp_path / "same.yaml"), *changes],
                               capture_output=True, text=True, timeout=120)
    assert completed.stdout.split() == ["2", "False", "False"], completed.stderr[-2000:]
    assert f"the run folder {crashed.absolute()} holds checkpoints up to step_000002 trained with other settings " \
           f"(learning_rate: 0.003 -> 0.001, model.activation_function: 'gelu_new' -> 'relu')" in completed.stderr
    assert len(completed.stderr.strip().splitlines()) == 1


def test_start_over_trains_from_step_zero_and_keeps_the_old_checkpoints_aside(crashed, make_config):
    (crashed / "tensorboard").mkdir()  # log_with=tensorboard: its curves over the same steps would mix two runs
    train(make_config(*STEPS, "learning_rate=1e-3"), start_over=True)
    abandoned = list((crashed / "checkpoints").glob("abandoned_*"))
    # the crashed run's checkpoint, and what it wrote when it stopped (checkpoint.set_aside_replaced_outputs)
    assert len(abandoned) == 1 and sorted(p.name for p in abandoned[0].iterdir()) == [
        "loss_curve.png", "run_log.jsonl", "step_000002", "tensorboard", "training_summary.json"]
    assert yaml.safe_load((crashed / "config.yaml").read_text())["learning_rate"] == 1e-3
    with pytest.raises(ValueError, match="contradict each other"):
        train(make_config(*STEPS, "resume_from_checkpoint=latest"), start_over=True)


@pytest.mark.parametrize("change, shown", [
    ("model.activation_function=relu", "model.activation_function: 'gelu_new' -> 'relu'"),
    ("model.norm_position=post", "model.norm_position: 'pre' -> 'post'"),
    ("model.n_inner=64", "model.n_inner: None -> 64"),
])
def test_a_model_key_the_first_run_left_at_its_default_is_a_change_too(resumable, change, shown):
    """The check compared only the keys the checkpoint's model section named: relu trained on silently, post-norm
    failed with a RuntimeError traceback deep in the weight loading. The resolved architectures are compared."""
    from hf_gpt_custom.manifest import write_manifest

    _, checkpoint, config_with = resumable
    with pytest.raises(ValueError) as err:
        train(config_with(change))
    assert f"these settings differ from the ones it was trained with ({shown})" in str(err.value)
    saved = json.loads((checkpoint / "config.json").read_text())  # a config.json that leaves defaults out, as
    key = change.split("=")[0].removeprefix("model.")             # transformers' diff-only writers do
    saved.pop(key)
    (checkpoint / "config.json").write_text(json.dumps(saved))
    write_manifest(checkpoint)  # an intact checkpoint of such a writer
    with pytest.raises(ValueError, match=f"these settings differ from the ones it was trained with \\({shown}\\)"):
        train(config_with(change))


def test_the_main_job_with_start_over_runs_every_stage_again_where_it_would_refuse(tmp_path, monkeypatch):
    """`run` refuses a folder started with another config (test_main_job.py); --start_over is the way through, the
    same flag as train's, and it reaches the training stage."""
    import hf_gpt_custom.run as run_module
    from hf_gpt_custom.training.config import REPO_ROOT

    calls = []

    def stage(name):
        def run_stage(config, run_dir, state, start_over=False):
            calls.append((name, start_over))
            return None, "done"
        return run_stage

    monkeypatch.setattr(run_module, "_STAGE_FUNCTIONS", {name: stage(name) for name in run_module.STAGES})
    smoke = REPO_ROOT / "training" / "configs" / "smoke.yaml"
    overrides = [f"out_dir={tmp_path / 'run'}", "benchmark_tasks=[]"]
    run_module.run_pipeline(smoke, overrides)
    with pytest.raises(ValueError, match=r"started with a different config \(max_steps: 20 -> 30\); .* or pass "
                                         r"--start_over to run it again here"):
        run_module.run_pipeline(smoke, [*overrides, "max_steps=30"])
    calls.clear()
    run_module.run_pipeline(smoke, [*overrides, "max_steps=30"], start_over=True)
    assert calls == [(name, True) for name in run_module.STAGES]


def test_the_main_jobs_evaluation_runs_on_the_gpu_when_training_did(tmp_path, monkeypatch):
    """The main job evaluated on the CPU beside an idle GPU, and in batches of 16 however large the GPU."""
    import hf_gpt_custom.eval.runner as runner
    import hf_gpt_custom.run as run_module
    from hf_gpt_custom.training.config import REPO_ROOT

    devices = []
    monkeypatch.setattr(runner, "evaluate", lambda *args, **kwargs: devices.append(kwargs["device"])
                        if kwargs["batch_size"] == "auto" and kwargs["data_parallel"] else None)
    smoke = REPO_ROOT / "training" / "configs" / "smoke.yaml"
    for cuda, cpu_setting in ((True, "null"), (False, "null"), (True, "true")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda cuda=cuda: cuda)
        config = load_train_config(smoke, [f"out_dir={tmp_path}", "benchmark_tasks=[copa]", f"cpu={cpu_setting}"])
        run_module._stage_eval(config, tmp_path, {})
    # None lets eval choose (CUDA when present: tests/eval/test_eval_command.py); a run forced onto the CPU stays there.
    assert devices == [None, None, "cpu"]
    from hf_gpt_custom.eval.runner import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert str(resolve_device(None)).startswith("cuda")


def test_the_console_scripts_check_resolves_mixed_precision_auto_as_training_did(crashed, make_config):
    """A checkpoint records the precision `auto` resolved to (fp32, "no", on a CPU): `train` with the same
    `mixed_precision: auto` (shakespeare-gpu.yaml's) continues instead of being refused for 'no' -> 'auto'; an
    explicit other precision is still a change."""
    from hf_gpt_custom.training.resume import check_run_folder

    check_run_folder(make_config(*STEPS, "mixed_precision=auto"))
    with pytest.raises(ValueError, match=r"mixed_precision: 'no' -> 'bf16'"):
        check_run_folder(make_config(*STEPS, "mixed_precision=bf16"))


def test_a_finished_run_without_checkpoints_is_not_trained_again_in_silence(make_config):
    """With final/ kept and the checkpoints deleted for space, the same command trained the whole run again from
    step 0, with only an unrelated warning; `run` refuses it (the orchread hunt)."""
    config = make_config("max_steps=2", "eval_interval=2", "eval_batches=1", run_name="once")
    run_dir = train(config)
    shutil.rmtree(run_dir / "checkpoints")
    weights = (run_dir / "final" / "model.safetensors").read_bytes()
    with pytest.raises(UserError, match=rf"the run folder {run_dir.absolute()} holds a trained model in final/ but no "
                                        r"checkpoint to continue from .*this command would train it again from step "
                                        r"0; .*pass --start_over .*give this run its own folder \(out_dir=<new folder>\)"):
        train(config)
    assert (run_dir / "final" / "model.safetensors").read_bytes() == weights
    train(config, start_over=True)  # asked for: trained again
    assert list((run_dir / "checkpoints").glob("abandoned_*/final"))
