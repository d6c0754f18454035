"""A SIGKILL at the wrong moment (no handler runs) must leave a state the next call either resumes correctly or
refuses: these tests leave the exact partial state such a kill leaves, then make the next call."""

from __future__ import annotations

import json
import shutil

import pytest


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after the point where it is raised runs."""


def _tokenizer_files(folder) -> dict[str, str]:
    return {name: (folder / name).read_text(encoding="utf-8") for name in ("tokenizer.json", "vocab.json", "merges.txt")}


def test_a_tokenizer_retrain_killed_before_its_marker_is_not_taken_for_the_old_tokenizer(
        make_config, tmp_path, monkeypatch):
    """`run --start_over tokenizer_vocab_size=B` retrains <run>/tokenizer in place while the old run's
    training_source.json (size A) is still there; the marker is written only after save_pretrained. Killed in
    between, the folder holds B's files under A's marker, and the next `run --start_over tokenizer_vocab_size=A`
    (the user going back) reuses them as A's: observed, a model with vocab_size B trained silently, rc 0.
    Reference: the tokenizer of size A trained from scratch in another run folder."""
    from hf_gpt_custom import tokenizer_training
    from hf_gpt_custom.training.workload import prepare_tokenizer

    settings = ("tokenizer=null", "val_fraction=0.1", "val_holdout=tail")
    first = make_config(*settings, "tokenizer_vocab_size=280", run_name="run")
    folder = prepare_tokenizer(first)
    assert json.loads((folder / "training_source.json").read_text())["vocab_size"] == 280

    real = tokenizer_training.train_tokenizer

    def killed_after_saving(*args, **kwargs):
        real(*args, **kwargs)  # the new tokenizer's files are in the folder ...
        raise _Killed  # ... and the process dies before prepare_tokenizer writes the new marker

    monkeypatch.setattr(tokenizer_training, "train_tokenizer", killed_after_saving)
    with pytest.raises(_Killed):
        prepare_tokenizer(make_config(*settings, "tokenizer_vocab_size=320", run_name="run"), start_over=True)
    monkeypatch.setattr(tokenizer_training, "train_tokenizer", real)

    again = prepare_tokenizer(make_config(*settings, "tokenizer_vocab_size=280", run_name="run"), start_over=True)
    fresh = prepare_tokenizer(make_config(*settings, "tokenizer_vocab_size=280", run_name="fresh"))
    assert _tokenizer_files(again) == _tokenizer_files(fresh), \
        "the half-finished size-320 retrain was reused as the size-280 tokenizer its stale marker names"


def test_an_export_killed_while_deleting_the_previous_export_can_be_rerun(tmp_path, monkeypatch, caplog):
    """export_folder replaced a previous export by shutil.rmtree(out_dir), then os.replace(staging, out_dir). Killed
    inside the rmtree (README.md already gone), the next export - which `hf-gpt-custom run` reruns after
    benchmark_limit changed - refused forever: "the folder exists and is not an earlier export; choose a new or
    empty folder", which `run` cannot do. Now the old export is moved aside in one step and deleted once the new one
    is in place: the kill below (in that deletion, after one file) leaves the new export whole, and the next export
    runs, naming the leftover."""
    from hf_gpt_custom import hub
    from hf_gpt_custom.hub import export_folder
    from tests.helpers import make_tiny_run

    def files(folder):
        return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny")
    out_dir = export_folder(run_dir, run_dir / "export")
    expected = files(out_dir)

    def killed_while_deleting(path, *args, **kwargs):
        (path / "README.md").unlink()
        raise _Killed

    monkeypatch.setattr(hub.shutil, "rmtree", killed_while_deleting)
    with pytest.raises(_Killed):
        export_folder(run_dir, run_dir / "export")
    monkeypatch.undo()
    assert files(out_dir) == expected  # the new export, whole
    (leftover,) = out_dir.parent.glob("export.replaced*")
    again = export_folder(run_dir, run_dir / "export")
    assert files(again) == expected and str(leftover) in caplog.text
