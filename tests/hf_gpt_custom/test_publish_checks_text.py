"""Text the publish check reads: a pickle of protocol 0 or 1 (no opening mark) whatever follows it, and a person's
home folder in documentation, refused; conventional paths that are no one's home, published."""

import collections
import json
import pickle

import pytest

from hf_gpt_custom.errors import UserError


@pytest.mark.parametrize("payload", [
    pickle.dumps({"a": 1}, protocol=0) + b"\n",  # a line end, as an editor or `echo >>` adds
    pickle.dumps(collections.OrderedDict(a=1), protocol=0) + b"\nnotes after it",  # calls a class; pickle.load
    pickle.dumps(collections.OrderedDict(a=1), protocol=1) * 2,                    # ignores what follows STOP
], ids=["line_end", "text_after_a_call", "two_pickles"])
def test_a_text_protocol_pickle_is_found_whatever_follows_it(tmp_path, payload):
    """Found only when STOP was the file's very last byte: one trailing newline hid it, and pickle.load still loads
    it (a payload calling os.system ran)."""
    from hf_gpt_custom.publish_checks import is_pickle

    pickle.loads(payload)
    path = tmp_path / "notes.json"
    path.write_bytes(payload)
    assert is_pickle(path)


@pytest.mark.parametrize("text", ["N.B. the loss is per token.\n", ".\n", "I think so.\n"])
def test_text_that_opens_like_a_data_pickle_is_no_pickle(tmp_path, text):
    from hf_gpt_custom.publish_checks import is_pickle

    path = tmp_path / "NOTES.md"
    path.write_text(text)
    assert not is_pickle(path)


def test_a_card_with_a_docker_cache_mount_is_publishable(tmp_path, monkeypatch):
    """Conventional paths that are no one's home (Docker's /root/.cache/huggingface mount, a Space's /home/user/app)
    were refused, with no way to keep them."""
    from hf_gpt_custom.publish_checks import _check_no_local_paths

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # this machine's home is another rule
    monkeypatch.chdir(tmp_path)
    card = tmp_path / "README.md"
    card.write_text("## Docker\n\n```\ndocker run -v ~/.cache/huggingface:/root/.cache/huggingface image\n```\n"
                    "In a Space the app runs in /home/user/app.\n")
    _check_no_local_paths(card, "README.md", [])


def test_a_windows_home_folder_in_a_documentation_json_is_refused(tmp_path, monkeypatch):
    """A Windows home folder inside a sentence of training_summary.json or eval/*.json (documentation, which a person
    may edit) passed: JSON doubles the backslashes the pattern expected single."""
    from hf_gpt_custom.publish_checks import _check_no_local_paths

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    unix, windows = tmp_path / "unix.json", tmp_path / "windows.json"
    unix.write_text(json.dumps({"note": "data copied from /home/bob/corpus"}))
    windows.write_text(json.dumps({"note": "data copied from C:\\Users\\bob\\corpus"}))
    with pytest.raises(UserError, match="/home/bob'"):
        _check_no_local_paths(unix, "training_summary.json", [])
    with pytest.raises(UserError, match=r"local path 'C:\\\\\\\\Users\\\\\\\\bob'"):
        _check_no_local_paths(windows, "training_summary.json", [])


@pytest.mark.parametrize("text", [
    "Versions:\ntorch 2.13.0\ntransformers 5.24\n",       # 'V' line, then t(uple) o(bj) r<4 bytes> STOP
    "NVIDIA H100 80GB HBM3\ntorch 2.13.0+cu130\n",         # benchmarks/results/gpu_probe_log.txt opens so
], ids=["versions", "gpu_log"])
def test_notes_naming_a_torch_version_are_no_pickle(tmp_path, text):
    """Documentation a person adds to an export (ENVIRONMENT.md) was refused as a pickle: it parses as opcodes to a
    STOP reached through OBJ ("torch 2." is TUPLE, OBJ, LONG_BINPUT "ch 2", STOP), which pickle.load cannot load
    (OBJ without a MARK). 90e32e0 published it."""
    from hf_gpt_custom.publish_checks import is_pickle

    with pytest.raises(Exception):
        pickle.loads(text.encode())
    path = tmp_path / "ENVIRONMENT.md"
    path.write_text(text)
    assert not is_pickle(path)


@pytest.mark.parametrize("text", ["data was copied from /home/alice.\n", "see /home/alice/ for the corpus\n",
                                  "copied from /Users/bob\n", "run in `/home/alice`\n"])
def test_a_persons_home_folder_itself_in_documentation_is_refused(tmp_path, monkeypatch, text):
    """A home folder named without a path inside it (no '/x' after the name) passed; 90e32e0 refused it."""
    from hf_gpt_custom.publish_checks import _check_no_local_paths

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    notes = tmp_path / "NOTES.md"
    notes.write_text(text)
    with pytest.raises(UserError, match="local path"):
        _check_no_local_paths(notes, "NOTES.md", [])
