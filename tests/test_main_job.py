"""The main job, `hf-gpt-custom run CONFIG`, end to end on the real tiny-Shakespeare corpus and the real COPA file.

A tiny override of training/configs/smoke.yaml (2 layers × 32 wide, a few dozen steps, COPA with 4 documents at
K=0 and K=1). The run is killed mid-training (SIGKILL, like a crash), resumed by rerunning the same command, and the
exported folder is loaded in a fresh interpreter where hf_gpt_custom cannot be imported.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_gpt_custom.errors import UserError
from tests.helpers import assert_export_matches_in_process, hash_folder

REPO_ROOT = Path(__file__).resolve().parents[1]
SMOKE_CONFIG = REPO_ROOT / "training" / "configs" / "smoke.yaml"
PROMPT = "ROMEO:"
NEW_TOKENS = 8


def _overrides(tmp_path: Path) -> list[str]:
    return [
        f"out_dir={tmp_path / 'runs' / 'tiny'}",
        f"data_cache_dir={tmp_path / 'cache'}",
        "max_steps=40", "checkpoint_interval=4", "keep_checkpoints=2", "eval_interval=20", "eval_batches=2",
        "model.n_positions=128",  # COPA 1-shot prompts fit without truncation (block_size stays 64)
        "log_with=none",
        "benchmark_tasks=copa", "benchmark_shots=0,1", "benchmark_limit=4",
    ]


def _start_and_kill_at_first_checkpoint(overrides: list[str], run_dir: Path, env: dict, cwd: Path) -> None:
    """Run `hf-gpt-custom run` in a subprocess and SIGKILL it as soon as a complete checkpoint exists."""
    script = Path(sys.executable).parent / "hf-gpt-custom"
    process = subprocess.Popen(
        [str(script), "run", str(SMOKE_CONFIG), *overrides],
        cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and process.poll() is None:
            # Checkpoints are written to step_NNNNNN.tmp and renamed, so a step_* folder is a complete one.
            if any(not p.name.endswith(".tmp") for p in (run_dir / "checkpoints").glob("step_*")):
                break
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be interrupted"


@pytest.mark.slow
def test_main_job_resumes_after_a_kill_and_exports_a_folder_that_loads_anywhere(tmp_path, capsys, monkeypatch,
                                                                                python_without_project):
    from huggingface_hub import ModelCard

    from hf_gpt_custom.run import run_pipeline

    overrides = _overrides(tmp_path)
    run_dir = tmp_path / "runs" / "tiny"
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home")}
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.chdir(tmp_path)

    # 1. Crash in the middle of training.
    _start_and_kill_at_first_checkpoint(overrides, run_dir, env, cwd=tmp_path)
    state = json.loads((run_dir / "pipeline_state.json").read_text())
    assert state["stages"]["tokenizer"]["status"] == "done"
    assert "train" not in state["stages"]
    assert not (run_dir / "final").exists()
    tokenizer_record = state["stages"]["tokenizer"]

    # 2. The same command again: the tokenizer stage is skipped, training resumes from its latest checkpoint.
    capsys.readouterr()
    assert run_pipeline(SMOKE_CONFIG, overrides) == run_dir
    out = capsys.readouterr().out
    assert "resumed from" in out and "checkpoints/step_" in out
    state = json.loads((run_dir / "pipeline_state.json").read_text())
    assert state["stages"]["tokenizer"] == tokenizer_record
    assert [state["stages"][stage]["status"] for stage in ("tokenizer", "train", "eval", "export")] == ["done"] * 4
    summary = json.loads((run_dir / "training_summary.json").read_text())
    assert summary["steps"] == 40

    # 3. What the run leaves: results, plots, a card whose model-index holds every result row.
    export = run_dir / "export"
    for name in ("model.safetensors", "config.json", "README.md", "loss_curve.png", "shots_curve.png",
                 "eval/results.json", "training_summary.json", "modeling_gpt_custom.py"):
        assert (export / name).is_file(), name
    rows = json.loads((run_dir / "eval" / "results.json").read_text())["results"]
    assert {(row["task"], row["num_fewshot"]) for row in rows} == {("copa", 0), ("copa", 1)}
    card = ModelCard.load(export / "README.md")
    assert len(card.data.eval_results) == len([row for row in rows if row["value"] is not None])
    assert {(r.task_name, r.metric_args["num_fewshot"], r.metric_type) for r in card.data.eval_results} == {
        (row["task"], row["num_fewshot"], row["metric"]) for row in rows if row["value"] is not None
    }

    # 4. The export loads without the package and generates exactly what the trained model generates in-process.
    assert_export_matches_in_process(run_dir, export, python_without_project)

    # 5. Once more: every stage is finished, nothing runs, nothing changes.
    before = hash_folder(export)
    capsys.readouterr()
    run_pipeline(SMOKE_CONFIG, overrides)
    out = capsys.readouterr().out
    assert "running" not in out and out.count("[  done  ]") == 4
    assert hash_folder(export) == before


def test_rerun_with_a_different_config_is_refused_naming_the_change(tmp_path):
    from hf_gpt_custom import run_state
    from hf_gpt_custom.run import run_pipeline
    from hf_gpt_custom.training.config import load_train_config

    overrides = _overrides(tmp_path)
    config = load_train_config(SMOKE_CONFIG, overrides)
    run_dir = tmp_path / "runs" / "tiny"
    run_dir.mkdir(parents=True)
    fingerprint = run_state.fingerprint(config)
    (run_dir / "pipeline_state.json").write_text(json.dumps({"config": fingerprint, "stages": {}}))
    (run_dir / "final").mkdir()  # a model trained under the saved settings

    with pytest.raises(ValueError, match=r"was started with a different config \(max_steps: 40 -> 99\)"):
        run_pipeline(SMOKE_CONFIG, [*overrides, "max_steps=99"])


def test_a_start_that_failed_before_training_binds_no_settings(tmp_path, monkeypatch):
    """A run refused in its tokenizer stage (a Hub tokenizer while offline) left pipeline_state.json: the corrected
    command, with another model width, was refused as "started with a different config" though nothing was trained
    (found by the shipped-configs hunt). Reference: the folder afterwards holds the new width's model."""
    from hf_gpt_custom.run import run_pipeline

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run_dir = tmp_path / "runs" / "tiny"
    quick = [*_overrides(tmp_path), "max_steps=4", "warmup_steps=1", "checkpoint_interval=2", "benchmark_tasks=[]"]
    with pytest.raises(UserError, match="could not be loaded from the Hub"):
        run_pipeline(SMOKE_CONFIG, [*quick, "tokenizer=no-such-user/no-such-tokenizer"])
    assert (run_dir / "pipeline_state.json").is_file()
    run_pipeline(SMOKE_CONFIG, [*quick, "model.n_embd=48"])
    assert json.loads((run_dir / "final" / "config.json").read_text())["n_embd"] == 48
    with pytest.raises(ValueError, match=r"was started with a different config \(model.n_embd: 48 -> 32\)"):
        run_pipeline(SMOKE_CONFIG, quick)  # trained now: the settings bind


def test_changing_only_benchmark_settings_reruns_eval_and_export(tmp_path):
    from hf_gpt_custom import run_state
    from hf_gpt_custom.training.config import load_train_config

    config = load_train_config(SMOKE_CONFIG, _overrides(tmp_path))
    fingerprint = run_state.fingerprint(config)
    done = {"status": "done", "output": None, "wall_time_s": 1.0}
    run_dir = tmp_path / "runs" / "tiny"
    run_dir.mkdir(parents=True)
    stages = {stage: dict(done) for stage in ("tokenizer", "train", "eval", "export")}
    (run_dir / "pipeline_state.json").write_text(json.dumps({"config": fingerprint, "stages": stages}))

    state = run_state.load_state(run_dir, {**fingerprint, "benchmark_limit": 8})
    assert sorted(state["stages"]) == ["tokenizer", "train"]
    assert state["config"]["benchmark_limit"] == 8
    faster = run_state.fingerprint(
        load_train_config(SMOKE_CONFIG, [*_overrides(tmp_path), "num_proc=2", "torch_threads=2"]))
    assert faster == fingerprint  # how fast it runs is not what it trains


def test_a_setting_added_to_the_code_since_the_run_started_is_not_a_change(tmp_path):
    from hf_gpt_custom import run_state
    from hf_gpt_custom.training.config import load_train_config

    config = load_train_config(SMOKE_CONFIG, _overrides(tmp_path))
    fingerprint = run_state.fingerprint(config)
    old_fingerprint = {k: v for k, v in fingerprint.items() if k != "learning_rate"}  # as if the field were new
    run_dir = tmp_path / "runs" / "tiny"
    run_dir.mkdir(parents=True)
    stages = {"tokenizer": {"status": "done", "output": None, "wall_time_s": 1.0}}
    (run_dir / "pipeline_state.json").write_text(json.dumps({"config": old_fingerprint, "stages": stages}))

    assert run_state.load_state(run_dir, fingerprint)["stages"] == stages


def test_turning_evaluation_off_removes_the_old_results_the_card_would_show(tmp_path, capsys):
    from hf_gpt_custom.run import _stage_eval
    from hf_gpt_custom.training.config import load_train_config

    config = load_train_config(SMOKE_CONFIG, [*_overrides(tmp_path), "benchmark_tasks=[]"])
    assert not config.benchmark_tasks
    old_results = tmp_path / "runs" / "tiny" / "eval" / "results.json"
    old_results.parent.mkdir(parents=True)
    old_results.write_text("{}")
    assert _stage_eval(config, tmp_path / "runs" / "tiny", {}) == (None, "skipped")
    assert not old_results.parent.exists()
    assert "eval skipped: benchmark_tasks is empty" in capsys.readouterr().out  # a [skipped] stage says why


def test_a_stage_whose_output_was_moved_aside_runs_again(tmp_path, monkeypatch):
    """`train --start_over` in a main-job folder moves final/, eval/ and export/ aside; `run` must then train,
    evaluate and export again rather than count those stages done from its saved state."""
    from hf_gpt_custom import run as run_module
    from hf_gpt_custom import run_state, versions
    from hf_gpt_custom.training.config import load_train_config

    config = load_train_config(SMOKE_CONFIG, _overrides(tmp_path))
    run_dir = config.run_dir
    (run_dir / "tokenizer").mkdir(parents=True)
    outputs = {"tokenizer": run_dir / "tokenizer", "train": run_dir / "final", "eval": run_dir / "eval",
               "export": run_dir / "export"}
    stages = {stage: {"status": "done", "output": str(path), "wall_time_s": 1.0} for stage, path in outputs.items()}
    (run_dir / "pipeline_state.json").write_text(json.dumps({"config": run_state.fingerprint(config),
                                                             "stages": stages}))
    ran = []

    def stage_function(stage):
        def run_stage(config, run_dir, state, start_over=False):
            ran.append(stage)
            outputs[stage].mkdir(exist_ok=True)
            if stage == "export":  # an export is whole while its manifest's files are there (none here), and
                # made by this version's export code while the manifest says so
                (outputs[stage] / "manifest.json").write_text(json.dumps(
                    {"files": {}, "export_code_sha256": versions.export_code_sha256()}))
            return outputs[stage], "done"
        return run_stage

    monkeypatch.setattr(run_module, "_STAGE_FUNCTIONS", {stage: stage_function(stage) for stage in outputs})
    run_module._run_stages(config)
    assert ran == ["train", "eval", "export"]
    run_module._run_stages(config)
    assert ran == ["train", "eval", "export"]  # all there now: nothing runs twice


def test_the_train_stage_is_done_while_final_is_there(tmp_path, monkeypatch):
    """The train stage's recorded output is the trained model, final/: what `train --start_over` moves aside."""
    from hf_gpt_custom import run as run_module
    from hf_gpt_custom.training import train as train_module

    monkeypatch.setattr(train_module, "train", lambda config, start_over=False: tmp_path / "runs" / "tiny")
    output, status = run_module._stage_train(None, tmp_path / "runs" / "tiny", {})
    assert (output, status) == (tmp_path / "runs" / "tiny" / "final", "done")


def _fake_stages(run_module, monkeypatch, ran: list[str], record_scoring_code: bool | None = False) -> None:
    """Stage functions that only write their output folder (train: final/ with a manifest; with record_scoring_code,
    eval: a results.json with the scoring code's hash, as evaluate writes it; None: one without, as versions before
    it wrote) and record that they ran."""
    from hf_gpt_custom import versions

    def stage_function(stage):
        def run_stage(config, run_dir, state, start_over=False):
            ran.append(stage)
            output = run_dir / {"tokenizer": "tokenizer", "train": "final", "eval": "eval", "export": "export"}[stage]
            output.mkdir(parents=True, exist_ok=True)
            if stage == "eval" and record_scoring_code:
                (output / "results.json").write_text(json.dumps({"scoring_code_sha256": versions.scoring_code_sha256()}))
            if stage == "eval" and record_scoring_code is None:
                (output / "results.json").write_text(json.dumps({"results": []}))
            if stage == "train":
                trained = ran.count("train")  # each training writes another model, as a retrained one may be
                (output / "manifest.json").write_text(f'{{"files": {{"model.safetensors": "model {trained}"}}}}')
            if stage == "export":  # an export is whole while its manifest's files are there (none here), and
                # made by this version's export code while the manifest says so
                (output / "manifest.json").write_text(json.dumps(
                    {"files": {}, "export_code_sha256": versions.export_code_sha256()}))
            return output, "done"
        return run_stage

    monkeypatch.setattr(run_module, "_STAGE_FUNCTIONS", {stage: stage_function(stage) for stage in run_module.STAGES})


def test_new_contents_at_the_data_path_are_refused_naming_the_file(tmp_path, monkeypatch):
    """The same dataset path with other text (cp -p of another file keeps even the modification time) is another
    run: refused like a changed setting, naming the file — not finished stages reused for the old text."""
    from hf_gpt_custom import run as run_module
    from hf_gpt_custom.training.config import load_train_config

    text = tmp_path / "input.txt"
    text.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n")
    config = load_train_config(SMOKE_CONFIG, [*_overrides(tmp_path), f"dataset={text}"])
    ran = []
    _fake_stages(run_module, monkeypatch, ran)
    run_module._run_stages(config)
    run_module._run_stages(config)  # unchanged: nothing runs again
    assert ran == list(run_module.STAGES)
    stat = text.stat()
    text.write_text("Second Citizen:\nWe are accounted poor citizens, the patricians good.\n\nAll:\nAye, aye!\n")
    os.utime(text, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(ValueError, match=rf"the contents of dataset={text} changed since then.*--start_over"):
        run_module._run_stages(config)
    assert ran == list(run_module.STAGES)


def test_edited_files_of_the_runs_own_tokenizer_are_named_with_their_folder(tmp_path, monkeypatch):
    """An edited file in <run>/tokenizer was reported as "the contents of tokenizer=None changed since then; rerun with
    the original settings", naming no folder and a setting no one changed (the orchread hunt)."""
    from hf_gpt_custom import run as run_module
    from hf_gpt_custom.training.config import load_train_config

    config = load_train_config(SMOKE_CONFIG, [*_overrides(tmp_path), "tokenizer=null"])
    tokenizer = config.run_dir / "tokenizer"
    tokenizer.mkdir(parents=True)
    (tokenizer / "tokenizer.json").write_text('{"model": "as trained"}')
    ran = []
    _fake_stages(run_module, monkeypatch, ran)
    run_module._run_stages(config)
    run_module._run_stages(config)
    (tokenizer / "tokenizer.json").write_text('{"model": "edited"}')
    with pytest.raises(ValueError, match=rf"the files of its tokenizer in {tokenizer} changed since then: put back "
                                         rf"the files it was trained with"):
        run_module._run_stages(config)


def test_the_same_data_file_at_another_path_is_the_same_run(tmp_path, monkeypatch, caplog):
    """Paths are stored absolute: a data folder (or the checkout holding it) moved elsewhere was refused as
    'dataset: ... -> ...' although its contents are compared on their own. Moved, it continues; edited, refused."""
    import shutil

    from hf_gpt_custom import run as run_module
    from hf_gpt_custom.training.config import load_train_config

    text = tmp_path / "data" / "input.txt"
    text.parent.mkdir()
    text.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n")
    ran = []
    _fake_stages(run_module, monkeypatch, ran)
    run_module._run_stages(load_train_config(SMOKE_CONFIG, [*_overrides(tmp_path), f"dataset={text}"]))
    moved = tmp_path / "elsewhere" / "input.txt"
    shutil.move(text.parent, moved.parent)
    config = load_train_config(SMOKE_CONFIG, [*_overrides(tmp_path), f"dataset={moved}"])
    run_module._run_stages(config)
    assert ran == list(run_module.STAGES)  # nothing ran again
    assert f"dataset moved from {text} to {moved}: the files hold the same contents" in caplog.text
    moved.write_text(moved.read_text().replace("Citizen", "Senator"))
    with pytest.raises(ValueError, match=rf"the contents of dataset={moved} changed since then"):
        run_module._run_stages(config)


def test_a_final_that_another_train_replaced_is_trained_again_then_scored(tmp_path, monkeypatch):
    """`train --start_over learning_rate=1e-3` in the run folder replaced final/: `run` with the config's 3e-3 then
    counted the train stage as done and evaluated and exported the 1e-3 model (its card said 0.001). The train stage
    runs again (train() resumes what matches this config, or starts over), then eval and export of its model."""
    from hf_gpt_custom import run as run_module
    from hf_gpt_custom.training.config import load_train_config

    config = load_train_config(SMOKE_CONFIG, _overrides(tmp_path))
    ran = []
    _fake_stages(run_module, monkeypatch, ran)
    run_module._run_stages(config)
    (config.run_dir / "final" / "manifest.json").write_text('{"files": {"model.safetensors": "another model"}}')
    run_module._run_stages(config)
    assert ran == [*run_module.STAGES, "train", "eval", "export"]
    run_module._run_stages(config)  # this run's final/ again: nothing to do
    assert ran == [*run_module.STAGES, "train", "eval", "export"]


def test_eval_and_export_run_again_when_a_benchmark_file_changes(tmp_path, monkeypatch):
    """A task file of the user's, the base file it includes, or its data file edited since the eval stage: the scores
    in results.json and the card were of the old files, and a rerun kept them (a fixed label set: acc 0.75 kept where
    `eval` gives 0.25). Each edit runs eval and export again; an untouched rerun runs nothing."""
    from hf_gpt_custom import run as run_module
    from hf_gpt_custom.training.config import load_train_config

    data = tmp_path / "data"
    data.mkdir()
    (data / "mine.jsonl").write_text('{"q": "1 + 1 =", "a": "2"}\n')
    base = tmp_path / "base.yaml"
    base.write_text("output_type: loglikelihood\ndoc_to_text: q\ndoc_to_target: a\ndata_files: {test: mine.jsonl}\n"
                    "metric_list: [{metric: acc}]\n")
    task = tmp_path / "mine.yaml"
    task.write_text("include: base.yaml\ntask: mine\n")
    monkeypatch.setenv("HF_GPT_CUSTOM_DATA_DIR", str(data))
    config = load_train_config(SMOKE_CONFIG, [*_overrides(tmp_path), f"benchmark_tasks=[{task}]", "benchmark_shots=0"])
    ran = []
    _fake_stages(run_module, monkeypatch, ran)
    run_module._run_stages(config)
    assert ran == list(run_module.STAGES)
    for edit in (lambda: (data / "mine.jsonl").write_text('{"q": "1 + 1 =", "a": "3"}\n'),  # a fixed answer
                 lambda: task.write_text("include: base.yaml\ntask: mine\ntarget_delimiter: ''\n"),
                 lambda: base.write_text(base.read_text().replace("doc_to_text: q", "doc_to_text: 'Q: {{q}}'"))):
        ran.clear()
        edit()
        run_module._run_stages(config)
        assert ran == ["eval", "export"]
    ran.clear()
    run_module._run_stages(config)
    assert ran == []


def test_an_evaluation_by_other_scoring_code_is_made_again(tmp_path, monkeypatch, capsys):
    """After an upgrade (the package says 0.1.0 at every commit), a rerun skipped eval and kept the figures the old
    evaluation or model code computed, in results.json and the card, however that code was fixed since. results.json
    records the code's sha256; a rerun under other code evaluates and exports again, then nothing."""
    from hf_gpt_custom import run as run_module
    from hf_gpt_custom import versions
    from hf_gpt_custom.training.config import load_train_config

    config = load_train_config(SMOKE_CONFIG, _overrides(tmp_path))
    ran = []
    _fake_stages(run_module, monkeypatch, ran, record_scoring_code=True)
    run_module._run_stages(config)
    assert ran == list(run_module.STAGES)
    ran.clear()
    run_module._run_stages(config)
    assert ran == []  # the same code: nothing to redo
    monkeypatch.setattr(versions, "scoring_code_sha256", lambda: "0" * 64)  # as an upgrade changes the code
    capsys.readouterr()
    run_module._run_stages(config)
    assert ran == ["eval", "export"]
    assert "eval/results.json was scored by another version of the evaluation or model code" in capsys.readouterr().out
    ran.clear()
    run_module._run_stages(config)
    assert ran == []


def test_results_that_record_no_scoring_code_are_scored_again(tmp_path, monkeypatch, capsys):
    """results.json written before evaluations recorded their scoring code is older code, not "the same": a run
    finished that way kept, and re-published in its card, stderrs today's scoring no longer gives (the upgrade
    hunt), while a run with a recorded hash of other code was scored again."""
    from hf_gpt_custom import run as run_module
    from hf_gpt_custom.training.config import load_train_config

    config = load_train_config(SMOKE_CONFIG, _overrides(tmp_path))
    ran = []
    _fake_stages(run_module, monkeypatch, ran, record_scoring_code=None)
    run_module._run_stages(config)
    ran.clear()
    capsys.readouterr()
    run_module._run_stages(config)
    assert ran[:1] == ["eval"]  # (export too where the new scores differ: these fakes write the same file)
    printed = capsys.readouterr().out
    assert "eval/results.json was scored by a version that did not record its evaluation code" in printed


def test_a_copied_run_folder_counts_its_own_outputs(tmp_path, monkeypatch):
    """pipeline_state.json names outputs relative to its run folder: a copy without eval/ evaluates again instead
    of counting the original's eval/ as its own."""
    import shutil

    from hf_gpt_custom import run as run_module
    from hf_gpt_custom.training.config import load_train_config

    config = load_train_config(SMOKE_CONFIG, _overrides(tmp_path))
    ran = []
    _fake_stages(run_module, monkeypatch, ran)
    run_module._run_stages(config)
    copy = tmp_path / "runs" / "copy"
    shutil.copytree(config.run_dir, copy)
    shutil.rmtree(copy / "eval")
    run_module._run_stages(load_train_config(SMOKE_CONFIG, [*_overrides(tmp_path), f"out_dir={copy}"]))
    assert ran == [*run_module.STAGES, "eval"]


def test_run_start_over_lets_the_tokenizer_stage_replace_the_runs_tokenizer(tmp_path, monkeypatch):
    """`run --start_over` after new data: the tokenizer stage may retrain the run's tokenizer (train() sets the old
    checkpoints aside right after); without start_over it refuses to replace one that checkpoints were trained with."""
    from hf_gpt_custom import run as run_module
    from hf_gpt_custom.training import workload

    calls = []
    monkeypatch.setattr(workload, "prepare_tokenizer",
                        lambda config, start_over=False: calls.append(start_over) or tmp_path / "tokenizer")
    for start_over in (True, False):
        run_module._stage_tokenizer(None, tmp_path, {}, start_over=start_over)
    assert calls == [True, False]


def test_an_interrupted_start_over_resumes_without_the_flag(tmp_path, monkeypatch, capsys):
    """`run --start_over` interrupted: the same command without --start_over was refused or resumed the old run's
    checkpoints; with it, the new run's own progress was set aside again. Until the new training has written a
    checkpoint, the run keeps starting over; after, train continues from that checkpoint. Old checkpoints are known by
    their contents: in a copy (new file times) they still are the run being replaced."""
    import shutil

    from hf_gpt_custom import run as run_module
    from hf_gpt_custom.manifest import MANIFEST_NAME
    from hf_gpt_custom.training.config import load_train_config

    def checkpoint(run_dir, step, contents):
        folder = run_dir / "checkpoints" / f"step_{step:06d}"
        folder.mkdir(parents=True)
        (folder / MANIFEST_NAME).write_text(contents)
        return folder

    config = load_train_config(SMOKE_CONFIG, _overrides(tmp_path))
    ran = []
    _fake_stages(run_module, monkeypatch, ran)
    run_module._run_stages(config)
    old = checkpoint(config.run_dir, 40, '{"the run": "being replaced"}')
    given = []
    fake_train = run_module._STAGE_FUNCTIONS["train"]

    def interrupted_train(config, run_dir, state, start_over=False):
        given.append(start_over)
        if len(given) == 3:  # the third try gets as far as the new run's first checkpoint
            old.rename(tmp_path / "set_aside")
            checkpoint(run_dir, 4, '{"the new run": "step 4"}')
        if len(given) <= 3:
            raise KeyboardInterrupt
        return fake_train(config, run_dir, state, start_over)

    monkeypatch.setitem(run_module._STAGE_FUNCTIONS, "train", interrupted_train)
    with pytest.raises(KeyboardInterrupt):
        run_module._run_stages(config, start_over=True)
    assert "rerun the same command without --start_over to resume" in capsys.readouterr().out
    copy = tmp_path / "runs" / "copy"  # copied with new file times: its step_000040 is still the old run's
    shutil.copytree(config.run_dir, copy, copy_function=shutil.copy)
    copied = load_train_config(SMOKE_CONFIG, [*_overrides(tmp_path), f"out_dir={copy}"])
    with pytest.raises(KeyboardInterrupt):
        run_module._run_stages(copied)
    with pytest.raises(KeyboardInterrupt):
        run_module._run_stages(config)  # nothing of the new run trained yet: still starting over
    run_module._run_stages(config)  # the new run's step_000004 is there: continue it
    assert given == [True, True, True, False]
    assert "starting_over_from" not in json.loads((config.run_dir / "pipeline_state.json").read_text())
    run_module._run_stages(config)
    assert given == [True, True, True, False]
    with pytest.raises(UserError, match=r"interrupted --start_over whose training has written no checkpoint yet: "
                                        r"resume_from_checkpoint=latest would continue the run it replaces"):
        run_module._run_stages(load_train_config(SMOKE_CONFIG, [*_overrides(tmp_path), f"out_dir={copy}",
                                                               "resume_from_checkpoint=latest"]))


@pytest.mark.slow  # a one-process run, then two launches of two processes: ~90 s on the shared 2-core machine
def test_run_under_accelerate_launch_trains_and_evaluates_as_one_process_does(tmp_path):
    """`accelerate launch -m hf_gpt_custom.cli run` (the shipped two-process CPU config): it refused a launch of
    more than one process, and ran its training in one. Now the two ranks share training's batches and the
    evaluation's documents, the main one trains the tokenizer first and alone writes the state and the export.
    Reference: one process with the same global batch (its validation loss and COPA scores), whose own training and
    scoring are checked against transformers and lm-eval elsewhere. A rerun under the launcher redoes nothing."""
    import shutil
    import socket

    from hf_gpt_custom.run import run_pipeline

    if shutil.which("accelerate") is None:
        pytest.fail("the accelerate launcher is not on PATH; install the project as README says")
    common = [f"data_cache_dir={tmp_path / 'cache'}", "max_steps=6", "warmup_steps=1", "eval_interval=6",
              "checkpoint_interval=0", "log_with=none", "torch_threads=1", "model.resid_pdrop=0.0",
              "model.embd_pdrop=0.0", "model.attn_pdrop=0.0", "benchmark_tasks=[copa]", "benchmark_shots=[0]",
              "benchmark_limit=6"]
    alone = run_pipeline(SMOKE_CONFIG, [*common, f"out_dir={tmp_path / 'alone'}", "batch_size=8", "eval_batches=2"])

    def launch() -> subprocess.CompletedProcess:
        with socket.socket() as probe:  # other test runs share this machine: never assume a port is free
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        return subprocess.run(
            ["accelerate", "launch", "--config_file", "training/configs/accelerate/cpu_two_processes.yaml",
             "--main_process_port", str(port), "-m", "hf_gpt_custom.cli", "run", str(SMOKE_CONFIG), *common,
             f"out_dir={tmp_path / 'two'}", "batch_size=4", "eval_batches=4"],  # the same 16 validation blocks
            cwd=REPO_ROOT, env={**os.environ, "TQDM_DISABLE": "1"}, capture_output=True, text=True, timeout=600)

    first = launch()
    assert first.returncode == 0, first.stderr[-3000:]
    two = tmp_path / "two"
    assert first.stdout.count("hf-gpt-custom run: ") == 5  # the stage list, said by the main process alone
    state = json.loads((two / "pipeline_state.json").read_text())
    assert [state["stages"][stage]["status"] for stage in ("tokenizer", "train", "eval", "export")] == ["done"] * 4
    assert (two / "tokenizer" / "vocab.json").read_bytes() == (alone / "tokenizer" / "vocab.json").read_bytes()
    summary, reference = (json.loads((folder / "training_summary.json").read_text()) for folder in (two, alone))
    assert summary["num_processes"] == 2 and summary["tokens_seen"] == reference["tokens_seen"]
    assert summary["final_val_loss"] == pytest.approx(reference["final_val_loss"], abs=1e-5)
    results, reference_results = (json.loads((folder / "eval" / "results.json").read_text()) for folder in (two, alone))
    assert results["config"]["processes"] == 2
    assert [(row["metric"], row["n"]) for row in results["results"]] == \
        [(row["metric"], row["n"]) for row in reference_results["results"]]
    for row, reference_row in zip(results["results"], reference_results["results"]):
        assert row["value"] == pytest.approx(reference_row["value"], abs=1e-4), row
    assert (two / "export" / "model.safetensors").is_file()
    assert sorted(path.name for path in two.glob("export*")) == ["export"]

    again = launch()
    assert again.returncode == 0, again.stderr[-3000:]
    assert "[running ]" not in again.stdout and "[  done  ] 4/4 export" in again.stdout


def test_a_launched_process_besides_the_main_one_says_nothing_writes_no_state_and_leaves_the_export(
        tmp_path, monkeypatch, capsys):
    """Under a launcher every process runs the stages; only the main one reports, saves pipeline_state.json and
    exports. Here the second process of a rerun after an upgrade of the scoring code (eval and export to redo)."""
    import contextlib
    from types import SimpleNamespace

    from hf_gpt_custom import run as run_module
    from hf_gpt_custom import versions
    from hf_gpt_custom.training.config import load_train_config

    config = load_train_config(SMOKE_CONFIG, _overrides(tmp_path))
    ran = []
    _fake_stages(run_module, monkeypatch, ran, record_scoring_code=True)
    run_module._run_stages(config)
    state_file = config.run_dir / "pipeline_state.json"
    saved = state_file.read_bytes()
    monkeypatch.setattr(versions, "scoring_code_sha256", lambda: "0" * 64)
    second = SimpleNamespace(is_main_process=False, wait_for_everyone=lambda: None,
                             main_process_first=contextlib.nullcontext)
    ran.clear()
    capsys.readouterr()
    run_module._run_stages(config, processes=second)
    assert ran == ["eval"]  # its share of the evaluation; the export is the main process's
    assert capsys.readouterr().out == ""
    assert state_file.read_bytes() == saved
