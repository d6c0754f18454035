"""What `push` uploads comes from the exported folder: a symlink in it to a file elsewhere on the machine passed
check_export and `push --dry-run` ("would upload ... from <folder>"), and upload_folder sends the target's bytes
(it follows symlinks). No test contacts the network."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import make_tiny_run


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    from hf_gpt_custom.hub import export_folder

    root = tmp_path_factory.mktemp("export")
    run_dir = make_tiny_run(root / "runs" / "tiny-shakespeare")
    return export_folder(run_dir, root / "hub" / "tiny-shakespeare", repo_id="alice/tiny-shakespeare")


@pytest.mark.parametrize("link", ["NOTES.md", "eval/notes.md", "extra.png"])
def test_a_symlink_to_a_file_outside_the_folder_is_refused(link, exported, tmp_path, capsys):
    from hf_gpt_custom.cli import main
    from hf_gpt_custom.publish_checks import check_export

    outside = tmp_path / "private" / "corpus.txt"  # no path inside: the text scan cannot catch it
    outside.parent.mkdir()
    outside.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n")
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    (copy / link).symlink_to(outside)
    with pytest.raises(ValueError, match=link.replace(".", r"\.")):
        check_export(copy)
    with pytest.raises(SystemExit):
        main(["push", str(copy), "--repo-id", "alice/tiny-shakespeare", "--dry-run"])
    assert "would upload" not in capsys.readouterr().out


def test_the_upload_sends_only_files_inside_the_folder(exported, tmp_path, monkeypatch):
    """The real upload path, Hub calls mocked: every file the commit would carry lies inside the folder."""
    from huggingface_hub import HfApi

    from hf_gpt_custom.hub import push_folder

    outside = tmp_path / "elsewhere.md"
    outside.write_text("# notes kept elsewhere\n")
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    (copy / "NOTES.md").symlink_to(outside)

    sent = []

    def upload_folder(self, folder_path, repo_id, **kwargs):
        operations = self._prepare_upload_folder_additions(folder_path, "", ignore_patterns=["**/.git/**", ".git/**"])
        sent.extend(os.path.realpath(operation.path_or_fileobj) for operation in operations)
        return "https://huggingface.co/alice/tiny-shakespeare/commit/0"

    monkeypatch.setenv("HF_TOKEN", "hf_x")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.is_offline_mode", lambda: False)
    for name in ("repo_exists", "create_repo"):
        monkeypatch.setattr(HfApi, name, lambda self, *args, **kwargs: True)
    monkeypatch.setattr(HfApi, "_validate_yaml", lambda self, *args, **kwargs: None)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    try:
        push_folder(copy, "alice/tiny-shakespeare")
    except ValueError:
        return  # refused before uploading: what this test asks for
    inside = os.path.realpath(copy) + os.sep
    assert sent and all(path.startswith(inside) for path in sent), [p for p in sent if not p.startswith(inside)]
