"""An interrupted or repeated `finetune` (and the export of its run) must end as an uninterrupted one does, or refuse
clearly. Each test leaves the exact partial state a SIGKILL at one moment leaves (found by killing the CLI there with
SIGKILL/SIGINT), then makes the next call."""

from __future__ import annotations

import re
from pathlib import Path

import pytest


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after the point where it is raised runs."""


def _config(run_dir, base_model_dir, dataset, *overrides):
    from hf_gpt_custom.training.finetune_config import load_finetune_config

    return load_finetune_config(None, [
        f"init_from={base_model_dir}", f"dataset={dataset}", f"out_dir={run_dir}", "run_name=ft",
        "block_size=32", "batch_size=8", "max_steps=6", "learning_rate=3e-3", "warmup_steps=2", "eval_interval=3",
        "checkpoint_interval=3", "keep_checkpoints=2", "val_fraction=0.25", "log_with=none", "seed=7",
        "task.format=pair", "task.text_columns=premise,hypothesis", "task.labels=no,yes", *overrides,
    ])


def test_an_export_killed_while_writing_its_manifest_can_be_rerun(tmp_path, monkeypatch):
    """export_folder unlinks its staging marker, hashes every file into manifest.json (seconds for real weights),
    then writes the marker back. A SIGKILL or Ctrl-C in between left <OUT>.tmp without the marker, and every later
    export of the same command was refused: "<OUT>.tmp exists and was not made by export; move or delete it" - it
    was made by export. Reference: the export of the same run into a fresh folder."""
    from hf_gpt_custom import hub
    from hf_gpt_custom.hub import export_folder
    from tests.helpers import make_tiny_run

    def files(folder):
        return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny")
    expected = files(export_folder(run_dir, tmp_path / "reference"))

    def killed_while_hashing(folder, **fields):
        raise _Killed

    monkeypatch.setattr(hub, "write_manifest", killed_while_hashing)
    with pytest.raises(_Killed):
        export_folder(run_dir, tmp_path / "export")
    monkeypatch.undo()
    assert (tmp_path / "export.tmp").is_dir()  # the interrupted export's staging folder
    again = export_folder(run_dir, tmp_path / "export")  # the same command again
    assert files(again) == expected


def test_a_start_over_killed_before_the_old_outputs_are_set_aside_leaves_no_card_of_the_new_settings(
        tmp_path, base_model_dir, learnable_pairs, monkeypatch):
    """_set_up rewrites config.yaml with the new run's settings, then moves the replaced run's checkpoints and
    outputs (final/, training_summary.json) aside. Killed in between, the folder held the old final/ and summary
    under the new config.yaml, and `export` wrote a card whose hyperparameter table (read from config.yaml) gave the
    new learning_rate 0.001 for a model trained at 0.003 (while its text gave the old summary's λ). Reference: the
    finished run's own settings, which its training_summary.json records."""
    import hf_gpt_custom.training.train as train_module
    from hf_gpt_custom.model_cards.card import build_model_card
    from hf_gpt_custom.training.finetune import finetune

    run_dir = finetune(_config(tmp_path / "run", base_model_dir, learnable_pairs))
    assert "| `learning_rate` | 0.003 |" in str(build_model_card(run_dir))

    def killed(*args, **kwargs):
        raise _Killed

    monkeypatch.setattr(train_module, "set_aside_replaced_outputs", killed)  # the later of the two moves
    with pytest.raises(_Killed):
        finetune(_config(tmp_path / "run", base_model_dir, learnable_pairs, "learning_rate=1e-3"), start_over=True)
    monkeypatch.undo()
    try:
        card = str(build_model_card(run_dir))
    except Exception:  # refusing to describe a folder caught between two runs is fine too
        return
    rows = re.findall(r"\| `learning_rate` \| ([^|]+) \|", card)
    assert rows == ["0.003"], f"the card of the model trained at learning_rate 0.003 says {rows}"


def test_final_is_complete_or_absent_when_its_replacement_is_killed_while_deleting_the_old_one(
        tmp_path, base_model_dir, learnable_pairs, monkeypatch):
    """Rerunning the command of a finished run evaluates again and rewrites final/: _save_final_folder deletes the
    old final/ in place (shutil.rmtree) and then renames final.tmp over it, though its docstring promises 'complete
    or absent, never half-written'. Killed inside the rmtree after manifest.json and tokenizer_config.json went (the
    order is the file system's), final/ held weights without a manifest, which nothing then verifies: `export`
    succeeded and shipped a tokenizer with model_max_length 1e30 instead of the fine-tuning block_size 32, and
    without the task tokens in extra_special_tokens. Reference: final/ either absent or matching its manifest."""
    import shutil

    import hf_gpt_custom.training.train as train_module
    from hf_gpt_custom.manifest import verify_manifest
    from hf_gpt_custom.training.finetune import finetune

    config = _config(tmp_path / "run", base_model_dir, learnable_pairs)
    run_dir = finetune(config)
    final = run_dir / "final"
    real_rmtree = shutil.rmtree

    def killed_while_deleting(path, *args, **kwargs):  # the old final/, in place or moved aside first
        if Path(path).name not in ("final", "final.replaced") or not Path(path).exists():
            return real_rmtree(path, *args, **kwargs)
        for name in ("manifest.json", "tokenizer_config.json"):  # the first entries the directory listing gave
            (Path(path) / name).unlink()
        raise _Killed

    monkeypatch.setattr(train_module.shutil, "rmtree", killed_while_deleting)
    with pytest.raises(_Killed):
        finetune(_config(tmp_path / "run", base_model_dir, learnable_pairs))  # the same command again
    monkeypatch.undo()
    assert not final.exists() or verify_manifest(final) is None, \
        f"final/ is half-deleted: {verify_manifest(final)}; files: {sorted(p.name for p in final.iterdir())[:6]}..."
    finetune(config)  # the same command again: the leftover of the killed deletion goes
    assert verify_manifest(final) is None and not (run_dir / "final.replaced").exists()
