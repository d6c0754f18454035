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
    (OBJ without a MARK)."""
    from hf_gpt_custom.publish_checks import is_pickle

    with pytest.raises(Exception):
        pickle.loads(text.encode())
    path = tmp_path / "ENVIRONMENT.md"
    path.write_text(text)
    assert not is_pickle(path)


@pytest.mark.parametrize("text", [
    "data was copied from /home/alice.\n", "see /home/alice/ for the corpus\n", "copied from /Users/bob\n",
    "run in `/home/alice`\n",  # the folder alone, no path inside it: passed once
    "data in c:\\users\\alice\\corpus\n",  # Windows paths are case-insensitive
    "data in /mnt/c/Users/alice/corpus\n", "data in /c/Users/alice/corpus\n",  # as WSL and Git Bash reach C:\\Users
    "data in /var/home/alice/corpus\n",  # Fedora Atomic's homes
])
def test_a_persons_home_folder_in_documentation_is_refused(tmp_path, monkeypatch, text):
    from hf_gpt_custom.publish_checks import _check_no_local_paths

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    notes = tmp_path / "NOTES.md"
    notes.write_text(text)
    with pytest.raises(UserError, match="local path"):
        _check_no_local_paths(notes, "NOTES.md", [])


# --- what the unpickler of the check does with what a pickle names ---------------------------------------------
_GADGET = (b"cbuiltins\ngetattr\n(cbuiltins\n__import__\n(Vos\ntRVsystem\ntR"  # getattr(__import__('os'), 'system')
           b"(Vecho pwned\ntR.")                                              # ...('echo pwned'): a REDUCE result called


class _Outer:
    import enum as _enum

    class Color(_enum.Enum):
        RED = 1


@pytest.mark.parametrize("payload", [
    _GADGET,
    _GADGET.replace(b"(Vecho pwned\ntR.", b"(Vtrue\ntR.") + b"\nnotes",
    pickle.dumps(_Outer.Color.RED, protocol=0),  # protocol < 4: getattr(_Outer, 'Color') REDUCE, then called
    pickle.dumps(_Outer.Color.RED, protocol=1),
    # NEWOBJ on a class a call returned: cls.__new__(cls) on the stand-in
    b"cbuiltins\ngetattr\n(cbuiltins\n__import__\n(Vcollections\ntRVOrderedDict\ntR)\x81.",
], ids=["getattr_gadget", "gadget_text_after", "nested_enum_p0", "nested_enum_p1", "newobj_on_a_call"])
def test_a_pickle_that_calls_what_a_call_returned_is_found(tmp_path, payload):
    """A stand-in instance returned by REDUCE could not be called, so the check's load failed and is_pickle said
    False, while pickle.load runs os.system: whatever a pickle calls is now the one callable stand-in."""
    from hf_gpt_custom.publish_checks import is_pickle

    path = tmp_path / "notes.json"
    path.write_bytes(payload)
    assert is_pickle(path)


def test_a_legacy_torch_save_of_protocol_0_is_found(tmp_path):
    """torch.save(_use_new_zipfile_serialization=False, pickle_protocol=0) opens with the magic-number pickle
    'L1195...L\\n.' (names nothing, data follows), and torch.load unpickles the pickles after it."""
    import io

    torch = pytest.importorskip("torch")
    from hf_gpt_custom.publish_checks import is_pickle

    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, buffer, _use_new_zipfile_serialization=False, pickle_protocol=0)
    path = tmp_path / "extra.data"
    path.write_bytes(buffer.getvalue())
    assert is_pickle(path)


@pytest.mark.parametrize("payload", [b"Np10000000\n.", b"Nr\x80\x96\x98\x00."], ids=["PUT", "LONG_BINPUT"])
def test_a_tiny_file_does_not_make_the_check_allocate_a_huge_memo(tmp_path, payload):
    """A 13-byte file made the C unpickler grow (and zero) its memo to 2x the index: 160 MB here, 3 GB for
    b'Nr\\x00\\x00\\x00\\x0c.', up to 64 GB for a 4-byte index. The check's unpickler keeps a dict."""
    path = tmp_path / "notes.txt"
    path.write_bytes(payload)
    assert _peak_bytes_of_the_check(path) < 32 << 20


def test_a_small_gzip_is_not_decompressed_whole(tmp_path):
    """The decompressed stream was read whole: a 100 KB .gz opening with '(' became 100 MB in memory (6 MB -> 6 GB).
    The check reads at most _MOST_READ bytes."""
    import zlib

    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = compressor.compress(b"(") + b"".join(compressor.compress(bytes(1 << 20)) for _ in range(100))
    path = tmp_path / "notes.gz"
    path.write_bytes(data + compressor.flush())
    assert _peak_bytes_of_the_check(path) < 32 << 20


def _peak_bytes_of_the_check(path) -> int:
    """The most memory Python allocated while is_pickle read `path`."""
    import tracemalloc

    from hf_gpt_custom.publish_checks import is_pickle

    tracemalloc.start()
    try:
        is_pickle(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_windows_all_users_is_no_ones_home(tmp_path, monkeypatch):
    """'C:\\Users\\All Users\\...' (Windows' shared profile) is no one's home."""
    from hf_gpt_custom.publish_checks import _check_no_local_paths

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    notes = tmp_path / "NOTES.md"
    notes.write_text("CUDA samples live in C:\\Users\\All Users\\NVIDIA Corporation\\ on the build box.\n")
    _check_no_local_paths(notes, "NOTES.md", [])


def test_a_pickle_longer_than_the_check_reads_is_found_by_what_it_named_first(tmp_path, monkeypatch):
    """Reads stop at _MOST_READ: a pickle that named a class before them is one (its value need not be read)."""
    from hf_gpt_custom import publish_checks

    monkeypatch.setattr(publish_checks, "_MOST_READ", 64)
    payload = pickle.dumps(collections.OrderedDict(text="x" * 500), protocol=0)
    pickle.loads(payload)
    path = tmp_path / "notes.json"
    path.write_bytes(payload)
    assert publish_checks.is_pickle(path)
