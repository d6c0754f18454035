"""The main job's figures follow its settings: mixed_precision=auto is compared as train() records it, and a change of
eval_batches or peak_flops (which change no weight) rewrites the summary and the export instead of being skipped; an
export is made again whenever the run folder's summary, results or config changed since.

Real tiny runs of training/configs/smoke.yaml (4 steps, no benchmarks: the eval stage is skipped), seconds each.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
import yaml

from hf_gpt_custom.run import run_pipeline

REPO_ROOT = Path(__file__).resolve().parents[1]
SMOKE_CONFIG = REPO_ROOT / "training" / "configs" / "smoke.yaml"


@pytest.fixture
def overrides(tmp_path, monkeypatch) -> list[str]:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    return [f"out_dir={tmp_path / 'run'}", f"data_cache_dir={tmp_path / 'cache'}", "max_steps=4", "eval_interval=4",
            "checkpoint_interval=0", "eval_batches=2", "log_with=none", "torch_threads=1", "benchmark_tasks=[]"]


def _stages_run(capsys) -> list[str]:
    """The stages the last run_pipeline call ran, from its printed stage list."""
    out = capsys.readouterr().out
    return [line.split()[-1] for line in out.splitlines() if "[running ]" in line]


def _summary(folder: Path) -> dict:
    return json.loads((folder / "training_summary.json").read_text())


def test_run_accepts_the_config_yaml_its_train_stage_wrote_from_auto_precision(overrides, tmp_path, capsys):
    """`train` records mixed_precision=auto resolved (fp32 on a CPU): the folder's own config.yaml was refused as
    'mixed_precision: auto -> no', and so was the same setting spelled out."""
    run_dir = run_pipeline(SMOKE_CONFIG, [*overrides, "mixed_precision=auto"])
    recorded = (run_dir / "config.yaml").read_text()
    resolved = "no" if not torch.cuda.is_available() else "bf16"  # the documented meaning of auto
    assert f"mixed_precision: '{resolved}'" in recorded or f"mixed_precision: {resolved}" in recorded
    capsys.readouterr()
    run_pipeline(run_dir / "config.yaml")
    assert _stages_run(capsys) == []
    run_pipeline(SMOKE_CONFIG, [*overrides, f"mixed_precision={resolved}"])
    assert _stages_run(capsys) == []
    # a state written before `run` resolved auto still continues with the same command
    state_file = run_dir / "pipeline_state.json"
    state = json.loads(state_file.read_text())
    state["config"]["mixed_precision"] = "auto"
    state_file.write_text(json.dumps(state))
    run_pipeline(SMOKE_CONFIG, [*overrides, "mixed_precision=auto"])
    assert _stages_run(capsys) == []


def _validation_loss_by_hand(run_dir: Path, n_batches: int) -> float:
    """The mean loss of final/ on the first n_batches * batch_size validation blocks, computed here."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import hf_gpt_custom  # noqa: F401
    from hf_gpt_custom.training.config import load_train_config
    from hf_gpt_custom.training.data import prepare_datasets

    config = load_train_config(run_dir / "config.yaml")
    model = AutoModelForCausalLM.from_pretrained(run_dir / "final").eval()
    tokenizer = AutoTokenizer.from_pretrained(run_dir / "final")
    blocks = torch.tensor(prepare_datasets(config, tokenizer, run_dir / "tokenizer").val["input_ids"]
                          [: n_batches * config.batch_size])
    with torch.no_grad():
        return model(input_ids=blocks, labels=blocks).loss.item()


def test_changing_eval_batches_or_peak_flops_rewrites_the_summary_and_the_export(overrides, capsys):
    """Both are settings that change no weight, so `run` skipped every stage: summary and card kept the old figures."""
    from hf_gpt_custom.model_cards.card import _format_number
    from hf_gpt_custom.training.train import train
    from hf_gpt_custom.training.config import load_train_config

    run_dir = run_pipeline(SMOKE_CONFIG, overrides)
    before = _summary(run_dir)
    capsys.readouterr()
    changed = [*overrides, "eval_batches=5", "peak_flops=1e9"]
    run_pipeline(SMOKE_CONFIG, changed)
    assert _stages_run(capsys) == ["train", "export"]  # train only evaluates again: the run is complete
    after = _summary(run_dir)
    assert after["steps"] == 4 and after["config"]["eval_batches"] == 5 and after["peak_flops"] == 1e9
    assert after["final_val_loss"] == pytest.approx(_validation_loss_by_hand(run_dir, 5), rel=1e-5)
    assert after["final_val_loss"] != pytest.approx(_validation_loss_by_hand(run_dir, 2), rel=1e-5)
    assert math.isclose(after["mfu"] * 1e9, before["mfu"] * before["peak_flops"], rel_tol=1e-9)  # same tokens/s
    card = (run_dir / "export" / "README.md").read_text()
    blocks = f"first {after['val_blocks_scored']} of {after['val_blocks']:,} blocks: eval_batches"  # 5 batches of 8
    assert after["val_blocks_scored"] == 40 < after["val_blocks"]
    for label, key in ((f"final validation loss ({blocks}) (nats/token)", "final_val_loss"),
                       ("model FLOPs utilization (of 0.001 TFLOP/s peak)", "mfu")):  # peak_flops=1e9 named
        assert f"| {label} | {_format_number(after[key])} |" in card
    exported = _summary(run_dir / "export")
    assert (exported["final_val_loss"], exported["mfu"]) == (after["final_val_loss"], after["mfu"])

    # `train` by hand in the folder, with another eval_batches, rewrites the summary: the next `run` finishes its
    # train stage again (the summary it wrote is gone) and exports the figures of its own settings
    train(load_train_config(SMOKE_CONFIG, [*changed, "eval_batches=3"]))
    assert _summary(run_dir)["val_blocks_scored"] == 24
    capsys.readouterr()
    run_pipeline(SMOKE_CONFIG, changed)
    assert _stages_run(capsys) == ["train", "export"]
    assert _summary(run_dir)["val_blocks_scored"] == _summary(run_dir / "export")["val_blocks_scored"] == 40
    assert _summary(run_dir)["final_val_loss"] == pytest.approx(_validation_loss_by_hand(run_dir, 5), rel=1e-5)
    run_pipeline(SMOKE_CONFIG, changed)
    assert _stages_run(capsys) == []


def test_results_rewritten_or_deleted_by_hand_are_made_again_by_the_next_run(overrides, tmp_path, capsys):
    """A hand `eval --out <run>/eval` (another model, tasks or limit) replaced run's results and the card published
    them as this run's; a deleted results.json left eval "done" and the card without results. Reference: run's own
    settings, and final/ evaluated apart with them."""
    from hf_gpt_custom.eval.runner import evaluate

    settings = [*overrides[:-1], "benchmark_tasks=[copa]", "benchmark_shots=[0]", "benchmark_limit=6"]
    run_dir = run_pipeline(SMOKE_CONFIG, settings)
    truth = evaluate(str(run_dir / "final"), tasks=["copa"], shots=[0], limit=6, device="cpu", show_progress=False)

    def card_results() -> dict:
        results = json.loads((run_dir / "export" / "eval" / "results.json").read_text())
        return {"limit": results["config"]["limit"], "values": [row["value"] for row in results["results"]]}

    expected = {"limit": 6, "values": [row["value"] for row in truth.results]}
    assert card_results() == expected
    evaluate(str(run_dir / "final"), tasks=["copa"], shots=[0], limit=2, device="cpu", show_progress=False,
             out_dir=run_dir / "eval")  # by hand, into the run folder
    capsys.readouterr()
    run_pipeline(SMOKE_CONFIG, settings)
    # eval runs again; its results.json is then byte for byte the one export read, so export has nothing to redo
    assert _stages_run(capsys) == ["eval"] and card_results() == expected
    (run_dir / "eval" / "results.json").unlink()
    run_pipeline(SMOKE_CONFIG, settings)
    assert _stages_run(capsys) == ["eval"] and card_results() == expected
    assert "model-index" in (run_dir / "export" / "README.md").read_text()


def test_a_rerun_without_benchmarks_sets_the_earlier_evaluation_aside_and_says_where(tmp_path, capsys):
    """`run ... benchmark_tasks=[]` after a run that evaluated deleted eval/ (results, table, examples, plot)."""
    from types import SimpleNamespace

    from hf_gpt_custom.run import _stage_eval

    run_dir = tmp_path / "run"
    (run_dir / "eval").mkdir(parents=True)
    (run_dir / "eval" / "results.json").write_text('{"results": []}')
    assert _stage_eval(SimpleNamespace(benchmark_tasks=[]), run_dir, {}) == (None, "skipped")
    assert not (run_dir / "eval").exists()  # out of the card's way
    (aside,) = run_dir.glob("eval_set_aside_*")
    assert (aside / "results.json").read_text() == '{"results": []}'
    assert f"the earlier evaluation in {run_dir / 'eval'} was moved to {aside}" in capsys.readouterr().out
    assert sorted(path.name for path in aside.iterdir()) == ["results.json"]  # its lock, taken to move it, is gone


def test_a_rerun_without_benchmarks_leaves_an_evaluation_still_writing_in_place(tmp_path):
    """Found reading the code: an `eval --out <run>/eval` still writing went on writing into the folder moved aside
    (its lock moved with it). Now the stage stops, naming the writer; the folder stays where it is."""
    import signal
    import subprocess
    from types import SimpleNamespace

    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.run import _stage_eval
    from hf_gpt_custom.training.run_lock import OUTPUT_LOCK_NAME

    eval_dir = tmp_path / "run" / "eval"
    eval_dir.mkdir(parents=True)
    script = 'printf \'{"pid": %d}\' $$ > "$0"; exec flock -o "$0" sh -c "echo held; exec sleep 120"'
    holder = subprocess.Popen(["sh", "-c", script, str(eval_dir / OUTPUT_LOCK_NAME)], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    assert holder.stdout.readline().strip() == "held"
    try:
        with pytest.raises(UserError, match=rf"^the evaluation folder {eval_dir} is being written by process "
                                            rf"{holder.pid} .*wait for it to finish, then run this command again"):
            _stage_eval(SimpleNamespace(benchmark_tasks=[]), eval_dir.parent, {})
        assert eval_dir.is_dir() and not list(eval_dir.parent.glob("eval_set_aside_*"))
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def test_the_model_section_is_compared_field_by_field_as_train_compares_it(overrides, capsys):
    """`run` compared the section as written: `model.activation_function=gelu_new` (GPT-2's default, which `train`
    accepts) was refused, naming the whole dict. A field changed, or set back to its default, is a change."""
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.training.model_section import architecture_defaults

    assert architecture_defaults()["activation_function"] == "gelu_new"
    run_dir = run_pipeline(SMOKE_CONFIG, overrides)
    capsys.readouterr()
    run_pipeline(SMOKE_CONFIG, [*overrides, "model.activation_function=gelu_new"])
    assert _stages_run(capsys) == []
    with pytest.raises(UserError, match=r"model.n_layer: 2 -> 3\b"):
        run_pipeline(SMOKE_CONFIG, [*overrides, "model.n_layer=3"])
    with pytest.raises(UserError, match=r"model.n_layer: 2 -> 12\b"):  # smoke.yaml's 2 left out: GPTCustom's 12
        run_pipeline(SMOKE_CONFIG, [*overrides, "model={n_head: 2, n_embd: 32}"])
    # a state saved with the section as one dict (before this rule) continues with the same command
    state_file = run_dir / "pipeline_state.json"
    state = json.loads(state_file.read_text())
    state["config"] = {key: value for key, value in state["config"].items() if not key.startswith("model.")}
    state["config"]["model"] = {"n_layer": 2, "n_head": 2, "n_embd": 32}
    state_file.write_text(json.dumps(state))
    run_pipeline(SMOKE_CONFIG, overrides)
    assert _stages_run(capsys) == []
    state["config"]["model"] = {"n_layer": 3, "n_head": 2, "n_embd": 32}  # ... and its change is still named
    state_file.write_text(json.dumps(state))
    with pytest.raises(UserError, match=r"model.n_layer: 3 -> 2\b"):
        run_pipeline(SMOKE_CONFIG, overrides)


def test_model_n_positions_given_as_the_block_size_it_defaults_to_is_no_change(overrides, capsys):
    """Without it in the section, n_positions is block_size (model_config_kwargs); `train` takes an explicit
    model.n_positions=<block_size> as the same model, and `run` refused it ("model.n_positions: None -> 32"), sending
    the user to --start_over. Another value is still a change, named."""
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.training.config import load_train_config

    block_size = load_train_config(SMOKE_CONFIG, overrides).block_size
    run_dir = run_pipeline(SMOKE_CONFIG, overrides)
    capsys.readouterr()
    run_pipeline(SMOKE_CONFIG, [*overrides, f"model.n_positions={block_size}"])
    assert _stages_run(capsys) == []
    with pytest.raises(UserError, match=rf"model.n_positions: {block_size} -> {2 * block_size}\b"):
        run_pipeline(SMOKE_CONFIG, [*overrides, f"model.n_positions={2 * block_size}"])
    # a state saved before this rule (n_positions recorded as None) continues with the explicit value
    state_file = run_dir / "pipeline_state.json"
    state = json.loads(state_file.read_text())
    state["config"]["model.n_positions"] = None
    state_file.write_text(json.dumps(state))
    run_pipeline(SMOKE_CONFIG, [*overrides, f"model.n_positions={block_size}"])
    assert _stages_run(capsys) == []


def test_a_preset_is_compared_as_the_fields_it_stands_for():
    from hf_gpt_custom.architecture import PRESETS
    from hf_gpt_custom.run_state import with_model_keys

    assert PRESETS["gpt2-medium"] == {"n_layer": 24, "n_head": 16, "n_embd": 1024}
    as_preset = with_model_keys({"model": {"preset": "gpt2-medium"}})
    assert as_preset == with_model_keys({"model": {"n_layer": 24, "n_head": 16, "n_embd": 1024}})
    assert as_preset != with_model_keys({"model": {"preset": "gpt2"}})


def test_benchmark_settings_and_run_name_are_written_where_the_run_records_them(overrides, tmp_path, capsys,
                                                                                  monkeypatch):
    """A benchmark_* change re-ran eval and export but left config.yaml and the summary with the old settings, so
    config.yaml given back to `run` evaluated the old benchmarks again; a new run_name alone ran nothing and the card
    kept the old name. Reference: the settings given, read back from the files, and the card's text."""
    from hf_gpt_custom.training import run_log
    from hf_gpt_custom.training.config import load_train_config
    from hf_gpt_custom.training.run_log import read_run_log

    titles, plot = [], run_log.plot_loss_curve
    monkeypatch.setattr(run_log, "plot_loss_curve", lambda records, path, title="", **kwargs: titles.append(
        title) or plot(records, path, title=title, **kwargs))
    run_dir = run_pipeline(SMOKE_CONFIG, overrides)
    weights = (run_dir / "final" / "model.safetensors").read_bytes()
    capsys.readouterr()
    renamed = [*overrides, "benchmark_limit=7", "benchmark_shots=[0, 2]", "run_name=renamed"]
    run_pipeline(SMOKE_CONFIG, renamed)
    assert _stages_run(capsys) == ["eval", "export"]  # eval: skipped again (no tasks); no training step
    recorded = load_train_config(run_dir / "config.yaml")
    assert (recorded.benchmark_limit, recorded.benchmark_shots, recorded.run_name) == (7, [0, 2], "renamed")
    summary = _summary(run_dir)
    assert summary["run_name"] == "renamed" and summary["config"]["benchmark_limit"] == 7
    assert _summary(run_dir / "export")["run_name"] == "renamed"
    assert titles[-1].startswith("renamed: ")  # the loss curve's title names the run too
    card = (run_dir / "export" / "README.md").read_text()
    assert "renamed" in card and "your-username/renamed" in card
    assert (run_dir / "final" / "model.safetensors").read_bytes() == weights
    assert len([r for r in read_run_log(run_dir / "run_log.jsonl") if r.get("kind") == "train"]) == 4  # not retrained
    run_pipeline(run_dir / "config.yaml")  # the folder's own record is this run now
    assert _stages_run(capsys) == []
    run_pipeline(SMOKE_CONFIG, renamed)
    assert _stages_run(capsys) == []
    run_pipeline(SMOKE_CONFIG, [*renamed[:-1], "run_name=again"])
    assert _stages_run(capsys) == ["export"]


def test_a_report_only_change_without_checkpoints_is_refused_not_trained_again(overrides, capsys):
    """eval_batches changed after the checkpoints were deleted by hand: train() found nothing to continue from and
    trained the model again from step 0, where docs/training.md says the run only evaluates."""
    import shutil

    from hf_gpt_custom.errors import UserError

    run_dir = run_pipeline(SMOKE_CONFIG, overrides)
    weights = (run_dir / "final" / "model.safetensors").read_bytes()
    shutil.rmtree(run_dir / "checkpoints")
    with pytest.raises(UserError, match=r"eval_batches changed: .* holds none \(deleted\?\); rerun with "
                                        r"eval_batches=2 .* --start_over"):
        run_pipeline(SMOKE_CONFIG, [*overrides, "eval_batches=3"])
    assert (run_dir / "final" / "model.safetensors").read_bytes() == weights
    capsys.readouterr()
    run_pipeline(SMOKE_CONFIG, [*overrides, "benchmark_limit=3"])  # needs no checkpoint: still accepted
    assert _stages_run(capsys) == ["eval", "export"]


def test_a_deleted_summary_without_checkpoints_is_refused_not_trained_again(overrides, capsys):
    """training_summary.json deleted (or edited) after the checkpoints were: the train stage ran again and, with
    nothing to continue from, trained the model again from step 0."""
    import shutil

    from hf_gpt_custom.errors import UserError

    run_dir = run_pipeline(SMOKE_CONFIG, overrides)
    weights = (run_dir / "final" / "model.safetensors").read_bytes()
    summary = (run_dir / "training_summary.json").read_text()
    shutil.rmtree(run_dir / "checkpoints")
    (run_dir / "training_summary.json").unlink()
    with pytest.raises(UserError, match=r"training_summary.json was changed or deleted since the train stage wrote it: "
                                        r".* holds none \(deleted\?\); put the file back to keep this run"):
        run_pipeline(SMOKE_CONFIG, overrides)
    assert (run_dir / "final" / "model.safetensors").read_bytes() == weights
    (run_dir / "training_summary.json").write_text(summary)
    capsys.readouterr()
    run_pipeline(SMOKE_CONFIG, overrides)
    assert _stages_run(capsys) == []


def test_a_copied_or_moved_run_writes_its_own_folder_and_paths_into_config_yaml(overrides, tmp_path, capsys):
    """A copy's config.yaml named the original's out_dir, so after a rename in the copy `run copy/config.yaml` renamed
    the original; a moved dataset was accepted but config.yaml kept the old path, and `run config.yaml` failed."""
    import shutil

    from hf_gpt_custom.training.config import load_train_config

    data = tmp_path / "data_a" / "input.txt"
    data.parent.mkdir()
    shutil.copy(load_train_config(SMOKE_CONFIG).dataset, data)
    original = run_pipeline(SMOKE_CONFIG, [*overrides, f"dataset={data}"])
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    data.parent.rename(tmp_path / "data_b")
    moved = tmp_path / "data_b" / "input.txt"
    capsys.readouterr()
    run_pipeline(SMOKE_CONFIG, [*overrides, f"out_dir={copy}", f"dataset={moved}", "run_name=the_copy"])
    assert _stages_run(capsys) == ["export"]
    recorded = load_train_config(copy / "config.yaml")
    assert (recorded.out_dir, recorded.dataset, recorded.run_name) == (str(copy), str(moved), "the_copy")
    untouched = yaml.safe_load((original / "config.yaml").read_text())  # (its dataset path is gone: not loadable)
    assert (untouched["run_name"], untouched["out_dir"]) == ("smoke", str(original))
    run_pipeline(copy / "config.yaml")
    assert _stages_run(capsys) == []


def test_an_export_holding_an_older_versions_code_is_made_again(overrides, capsys):
    """A run finished by an older version, run again after an upgrade, skipped every stage and kept export/ with the
    older modeling code, which whoever loads the export with trust_remote_code runs (its bugs included). Reference:
    the package's own files."""
    from hf_gpt_custom.hub import _documentation_hashes
    from hf_gpt_custom.manifest import write_manifest

    run_dir = run_pipeline(SMOKE_CONFIG, overrides)
    export = run_dir / "export"
    shipped = export / "modeling_gpt_custom.py"
    shipped.write_text(shipped.read_text() + "\n# as an older version wrote it\n")
    write_manifest(export, documentation=_documentation_hashes(export))  # as that version's export recorded it
    capsys.readouterr()
    run_pipeline(SMOKE_CONFIG, overrides)
    out = capsys.readouterr().out
    assert "export/ holds an older version's code (modeling_gpt_custom.py): running the export stage again" in out
    assert [line.split()[-1] for line in out.splitlines() if "[running ]" in line] == ["export"]
    package = Path(__import__("hf_gpt_custom").__file__).parent
    assert shipped.read_bytes() == (package / "modeling_gpt_custom.py").read_bytes()
    assert sorted(path.name for path in run_dir.glob("export*")) == ["export"]  # replaced, not kept as an edit
    run_pipeline(SMOKE_CONFIG, overrides)
    assert _stages_run(capsys) == []  # the same code: nothing to redo


@pytest.mark.parametrize("recorded", ["no record", "another version's"])
def test_an_export_written_by_another_versions_card_code_is_made_again(overrides, capsys, recorded):
    """An upgrade that fixed what export writes (the card's snippet, its checks) kept the old export: only the model's
    shipped .py files were compared, so the rerun said "[done] export" in 0 s over a card whose snippet failed (the
    cachekeys hunt). Reference: the manifest's export_code_sha256 against versions.export_code_sha256."""
    from hf_gpt_custom.versions import export_code_sha256

    run_dir = run_pipeline(SMOKE_CONFIG, overrides)
    manifest_path = run_dir / "export" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["export_code_sha256"] == export_code_sha256()
    if recorded == "no record":  # as every export before the record was added
        del manifest["export_code_sha256"]
    else:
        manifest["export_code_sha256"] = "0" * 64
    manifest_path.write_text(json.dumps(manifest))
    capsys.readouterr()
    run_pipeline(SMOKE_CONFIG, overrides)
    out = capsys.readouterr().out
    assert ("export/ was written by another version of the export and model card code: running the export stage "
            "again") in out
    assert [line.split()[-1] for line in out.splitlines() if "[running ]" in line] == ["export"]
    assert json.loads(manifest_path.read_text())["export_code_sha256"] == export_code_sha256()
    run_pipeline(SMOKE_CONFIG, overrides)
    assert _stages_run(capsys) == []  # the same code: nothing to redo


@pytest.mark.parametrize("removed", ["model.safetensors", "README.md", "modeling_gpt_custom.py"])
def test_an_export_missing_a_file_it_wrote_is_made_again(overrides, capsys, removed):
    """A rerun after files were deleted from export/ redid nothing and called the folder Hub-ready; it no longer
    loaded ("model.safetensors is missing"), or had no card to push (found by a hunt). Reference: the manifest
    export wrote, and a load of the folder."""
    from hf_gpt_custom.manifest import check_manifest

    run_dir = run_pipeline(SMOKE_CONFIG, overrides)
    (run_dir / "export" / removed).unlink()
    capsys.readouterr()
    run_pipeline(SMOKE_CONFIG, overrides)
    assert _stages_run(capsys) == ["export"]
    assert (run_dir / "export" / removed).is_file()
    check_manifest(run_dir / "export")
    run_pipeline(SMOKE_CONFIG, overrides)
    assert _stages_run(capsys) == []


def test_a_hand_evaluation_in_a_run_without_benchmarks_is_set_aside_not_published(overrides, tmp_path, capsys,
                                                                                  shared_data_dir):
    """benchmark_tasks is empty, so the eval stage is "skipped"; an `eval --out RUN/eval` by hand afterwards (10% of
    COPA, another data folder) reached the card on the next rerun, which kept the skipped stage and re-exported (found
    by a newcomer's walk). The rerun now runs the eval stage again, which sets the hand results aside."""
    from hf_gpt_custom.eval.runner import evaluate

    run_dir = run_pipeline(SMOKE_CONFIG, overrides)
    evaluate(str(run_dir / "final"), tasks=["copa"], shots=[0], limit=0.05, device="cpu", show_progress=False,
             out_dir=run_dir / "eval", data_dir=shared_data_dir)
    capsys.readouterr()
    run_pipeline(SMOKE_CONFIG, overrides)
    assert _stages_run(capsys) == ["eval"]  # the export was made without results, as the run is again
    assert not (run_dir / "eval").exists() and len(list(run_dir.glob("eval_set_aside_*"))) == 1
    card = (run_dir / "export" / "README.md").read_text()
    assert "copa" not in card
    run_pipeline(SMOKE_CONFIG, overrides)
    assert _stages_run(capsys) == []


def test_benchmark_limit_takes_a_fraction_as_eval_limit_and_lm_eval_do(overrides, tmp_path, capsys):
    """`eval --limit 0.05` (lm-eval's --limit) scores that share of each task's documents, rounded up; run's
    benchmark_limit took a count only, and refused 0.05. Reference: evaluate() with the count lm-eval's
    get_sample_size gives for COPA's documents."""
    from lm_eval.evaluator_utils import get_sample_size

    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.eval.runner import evaluate
    from hf_gpt_custom.eval.task import load_task
    from hf_gpt_custom.training.config import load_train_config as load_config

    documents = len(load_task("copa").docs())
    count = get_sample_size(type("Task", (), {"eval_docs": range(documents)})(), 0.05)
    assert count == math.ceil(documents * 0.05) and count not in (0, documents)
    settings = [*overrides[:-1], "benchmark_tasks=[copa]", "benchmark_shots=[0]", "benchmark_limit=0.05"]
    run_dir = run_pipeline(SMOKE_CONFIG, settings)
    published = json.loads((run_dir / "export" / "eval" / "results.json").read_text())
    truth = evaluate(str(run_dir / "final"), tasks=["copa"], shots=[0], limit=count, device="cpu", show_progress=False)
    assert [(row["n"], row["value"]) for row in published["results"]] == \
        [(row["n"], row["value"]) for row in truth.results]
    assert {row["n"] for row in published["results"]} == {count} and published["config"]["limit"] == 0.05
    assert "the first 0.05 of each task's documents" in (run_dir / "export" / "README.md").read_text()
    for value, parsed in (("300", 300), ("0.1", 0.1), ("300.0", 300)):
        limit = load_config(SMOKE_CONFIG, [f"benchmark_limit={value}"]).benchmark_limit
        assert limit == parsed and type(limit) is type(parsed)
    for value in ("1.5", "0", "-3", "true"):
        with pytest.raises(UserError, match="benchmark_limit"):
            load_config(SMOKE_CONFIG, [f"benchmark_limit={value}"])


def test_the_closing_line_names_the_repository_an_earlier_export_was_given(overrides, capsys):
    """After `export RUN RUN/export --repo-id alice/tiny`, `run` kept alice/tiny in the card but still said to export
    again with --repo-id USER/NAME (the docsclaims2 hunt). It now gives the push command for that repository."""
    from hf_gpt_custom.hub import export_folder

    run_dir = run_pipeline(SMOKE_CONFIG, overrides)
    assert "--repo-id USER/NAME` names your repository in the card" in capsys.readouterr().out
    export_folder(run_dir, run_dir / "export", repo_id="alice/tiny")
    run_pipeline(SMOKE_CONFIG, overrides)
    out = capsys.readouterr().out
    assert f"(to publish it: `hf-gpt-custom push {run_dir / 'export'} --repo-id alice/tiny --dry-run`" in out
    assert "USER/NAME" not in out
