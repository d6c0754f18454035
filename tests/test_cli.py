"""The `hf-gpt-custom` console script: help for every subcommand, and a user's mistake -> one line on stderr, exit 2."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hf_gpt_custom.cli import main

SUBCOMMANDS = [["tokenizer", "train"], ["train"], ["eval"], ["export"], ["push"], ["run"]]


def _run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


@pytest.mark.parametrize("subcommand", SUBCOMMANDS, ids=" ".join)
def test_every_subcommand_has_help(subcommand, capsys):
    code, out, _ = _run_main([*subcommand, "--help"], capsys)
    assert code == 0
    assert out.startswith(f"usage: hf-gpt-custom {' '.join(subcommand)}")
    assert "(default:" in out or subcommand in (["export"], ["run"])  # options state their defaults


def test_console_script_lists_every_subcommand():
    script = shutil.which("hf-gpt-custom") or str(Path(sys.executable).parent / "hf-gpt-custom")
    completed = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    for name in ("tokenizer", "train", "eval", "export", "push", "run"):
        assert name in completed.stdout


def _assert_one_line_error(code: int, err: str, command: str, *fragments: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"hf-gpt-custom {command}: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


def test_run_with_a_missing_config_file_is_one_line(tmp_path, capsys):
    missing = tmp_path / "no_such.yaml"
    code, _, err = _run_main(["run", str(missing)], capsys)
    _assert_one_line_error(code, err, "run", str(missing), "not found")


def test_run_with_an_unknown_config_key_is_one_line(tmp_path, capsys):
    config = tmp_path / "typo.yaml"
    config.write_text("run_name: typo\nmax_stesp: 10\n", encoding="utf-8")
    code, _, err = _run_main(["run", str(config), f"out_dir={tmp_path / 'run'}"], capsys)
    _assert_one_line_error(code, err, "run", "unknown training config key 'max_stesp'", "did you mean 'max_steps'?")
    assert not (tmp_path / "run").exists()  # rejected before any stage started


def test_run_with_an_unknown_override_is_one_line(tmp_path, capsys):
    config = tmp_path / "ok.yaml"
    config.write_text("run_name: ok\n", encoding="utf-8")
    code, _, err = _run_main(["run", str(config), "learnig_rate=1e-3"], capsys)
    _assert_one_line_error(code, err, "run", "'learnig_rate'", "did you mean 'learning_rate'?")


def test_export_of_a_missing_run_folder_is_one_line(tmp_path, capsys):
    code, _, err = _run_main(["export", str(tmp_path / "runs" / "nope"), str(tmp_path / "out")], capsys)
    _assert_one_line_error(code, err, "export", "nope/final/config.json not found")
    assert not (tmp_path / "out").exists()


def test_push_of_a_missing_folder_is_one_line(tmp_path, capsys):
    code, _, err = _run_main(["push", str(tmp_path / "nope"), "--repo-id", "alice/x"], capsys)
    _assert_one_line_error(code, err, "push", "hf-gpt-custom export RUN_DIR OUT_DIR")


def test_push_without_a_token_is_one_line(tmp_path, capsys, monkeypatch):
    import huggingface_hub.constants as constants

    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "gpt_custom"}')
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no_token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no_stored_tokens"))
    code, _, err = _run_main(["push", str(folder), "--repo-id", "alice/x"], capsys)
    _assert_one_line_error(code, err, "push", "no Hugging Face token found", "Nothing was changed.")


def test_push_with_a_token_but_offline_is_one_line(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "gpt_custom"}')
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n")
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")  # tests run with HF_HUB_OFFLINE=1 (conftest)
    code, _, err = _run_main(["push", str(folder), "--repo-id", "alice/x"], capsys)
    _assert_one_line_error(code, err, "push", "offline mode is on")


def test_eval_with_bad_shots_exits_2(capsys):
    code, _, err = _run_main(["eval", "--model", "m", "--tasks", "copa", "--shots", "0,one", "--out", "o"], capsys)
    assert code == 2 and "expected comma-separated integers like 0,1,5, got '0,one'" in err
