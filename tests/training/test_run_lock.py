"""One process per run folder: a second training process on it stops at once with the holder's PID; a lock left
by a killed process is taken over; ranks other than 0 of a launch take no lock. Build folders a killed data-packing
process left in the shared cache are removed, those of live processes and other hosts are not."""

import fcntl
import json
import logging
import os
import signal
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.data import prepare_datasets
from hf_gpt_custom.training.run_lock import LOCK_NAME, lock_run_folder, process_is_alive, remove_stale_build_folders
from hf_gpt_custom.training.train import train
from tests.conftest import REPO_ROOT



def _hold_lock_in_another_process(run_dir) -> subprocess.Popen:
    """A process (util-linux flock(1), which takes the same flock(2) lock) holding run_dir's lock, with its PID and
    host recorded in the file as lock_run_folder records them. Fast: no Python start-up."""
    run_dir.mkdir(parents=True)
    script = ('printf \'{"pid": %d, "host": "%s", "started": "2026-01-01 00:00:00 UTC"}\' $$ "$(hostname)" > "$0"; '
              'exec flock -o "$0" sh -c "echo held; exec sleep 120"')
    holder = subprocess.Popen(["sh", "-c", script, str(run_dir / LOCK_NAME)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def _dead_pid() -> int:
    """The PID of a process that has exited (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert not process_is_alive(process.pid)
    return process.pid


def test_a_second_process_on_a_run_folder_is_refused_naming_the_holder_then_takes_over_when_it_dies(make_config,
                                                                                                    caplog):
    config = make_config("max_steps=2", "warmup_steps=1")
    holder = _hold_lock_in_another_process(config.run_dir)
    try:
        with pytest.raises(UserError, match=rf"the run folder {config.run_dir} is in use by process {holder.pid} on "
                                            rf"{socket.gethostname()} .*stop it \(kill {holder.pid}\) and run the same command again to resume"):
            train(config)
        assert not (config.run_dir / "config.yaml").exists()  # stopped before writing anything
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # the holder and its sleeping child
        holder.wait()
    with caplog.at_level(logging.INFO, logger="hf_gpt_custom.training.run_lock"):
        with lock_run_folder(config.run_dir):  # the kernel dropped the dead holder's lock: taken over
            pass
    assert f"taking over the lock of process {holder.pid}" in caplog.text


def test_the_lock_excludes_other_holders_while_held_and_nests_in_one_process(tmp_path):
    run_dir = tmp_path / "run"
    with lock_run_folder(run_dir):
        assert json.loads((run_dir / LOCK_NAME).read_text())["pid"] == os.getpid()  # what a refused process is told
        with lock_run_folder(run_dir):  # the main job holds the folder, then train() inside it
            pass
        with open(run_dir / LOCK_NAME) as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)  # held exclusively (not even a shared lock), still
    with open(run_dir / LOCK_NAME) as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released


def test_only_rank_zero_of_a_launch_takes_the_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    with lock_run_folder(tmp_path / "run"):
        assert not (tmp_path / "run" / LOCK_NAME).exists()


def test_packing_removes_build_folders_of_dead_processes_only(make_config, tmp_path, shakespeare_tokenizer_dir):
    cache = tmp_path / "cache"
    dead, host = _dead_pid(), socket.gethostname()
    stale = [cache / f"0123456789abcdef0123.tmp{dead}", cache / f"0123456789abcdef0123.tmp{dead}@{host}"]
    kept = [cache / f"0123456789abcdef0123.tmp{dead}@another-host",  # its PID means nothing on this machine
            cache / f"0123456789abcdef0123.tmp{os.getppid()}@{host}",  # a live process is still packing
            cache / "raw"]
    for folder in stale + kept:
        (folder / "train_build").mkdir(parents=True)
    from transformers import AutoTokenizer

    config = make_config("block_size=16", f"data_cache_dir={cache}")
    data = prepare_datasets(config, AutoTokenizer.from_pretrained(str(shakespeare_tokenizer_dir)),
                            shakespeare_tokenizer_dir)
    assert not any(folder.exists() for folder in stale)
    assert all(folder.is_dir() for folder in kept)
    assert sorted(p.name for p in cache.iterdir()) == sorted([data.cache_dir.name] + [f.name for f in kept])
    assert remove_stale_build_folders(cache) == []


def test_the_main_job_is_refused_on_a_run_folder_another_process_holds(tmp_path):
    from hf_gpt_custom.run import run_pipeline

    config_path = tmp_path / "run.yaml"
    run_dir = tmp_path / "runs" / "held"
    config_path.write_text(f"run_name: held\nout_dir: {run_dir}\ndataset: ../shared/data/tinyshakespeare/input.txt\n")
    holder = _hold_lock_in_another_process(run_dir)
    try:
        with pytest.raises(UserError, match=rf"is in use by process {holder.pid}"):
            run_pipeline(config_path)
        assert not (run_dir / "run_state.json").exists() and not list(run_dir.glob("*.json"))  # nothing written
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def test_a_live_process_of_another_user_counts_as_alive_and_keeps_its_build_folder(tmp_path, monkeypatch):
    """kill(pid, 0) on another user's live process fails with EPERM (kill(2)): the process exists, so its build folder
    is still in use. Simulated: the tests may run as root, which may signal anyone."""
    import errno

    others_pid = 4242424  # not ours, not our parent

    def kill(pid, sig):
        assert sig == 0
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "kill", kill)
    assert process_is_alive(others_pid)
    building = tmp_path / f"0123456789abcdef0123.tmp{others_pid}@{socket.gethostname()}"
    building.mkdir()
    assert remove_stale_build_folders(tmp_path) == [] and building.is_dir()


def test_an_output_folder_held_by_another_process_is_refused_naming_it_and_keeps_no_lock_file(tmp_path):
    """An evaluation's --out, an export or a tokenizer folder: one writer at a time (tests/test_concurrent_writers.py
    shows what two at once did). The lock file lives in the folder while held and is gone after."""
    from hf_gpt_custom.training.run_lock import OUTPUT_LOCK_NAME, lock_output_folder

    out = tmp_path / "eval"
    script = ('printf \'{"pid": %d, "host": "%s", "started": "2026-01-01 00:00:00 UTC"}\' $$ "$(hostname)" > "$0"; '
              'exec flock -o "$0" sh -c "echo held; exec sleep 120"')
    out.mkdir()
    holder = subprocess.Popen(["sh", "-c", script, str(out / OUTPUT_LOCK_NAME)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert holder.stdout.readline().strip() == "held"
    try:
        with pytest.raises(UserError, match=rf"^the evaluation folder {out} is being written by process {holder.pid} "
                                            rf"on {socket.gethostname()} .*; wait for it to finish, or give this one "
                                            rf"another --out$"):
            with lock_output_folder(out, "the evaluation folder", "another --out"):
                pass
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    with lock_output_folder(out, "the evaluation folder", "another --out"):  # the dead holder's lock is taken over
        with lock_output_folder(out, "the evaluation folder", "another --out"):  # re-entrant in one process
            assert (out / OUTPUT_LOCK_NAME).is_file()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["eval"] and not any(out.iterdir())  # nothing left


def test_an_output_lock_taken_on_a_file_its_holder_removed_meanwhile_is_taken_again_on_the_file_there(tmp_path):
    """A holder of an output lock deletes the file as it lets go: a process that opened the file just before holds,
    once it gets the lock, a lock on a deleted file, which a third process (opening the path anew) would not see. It
    takes the lock again on the file at the path. Checked with util-linux flock(1) from outside."""
    from hf_gpt_custom.training import run_lock

    out, lock_file = tmp_path / "export", tmp_path / ".export.lock"
    opened = []

    def open_then_lose_the_file():  # the first file opened is removed before it is locked
        handle = open(lock_file, "a+", encoding="utf-8")
        if not opened:
            lock_file.unlink()
        opened.append(handle)
        return handle

    with run_lock._held_lock(lock_file, open_then_lose_the_file, lambda who, pid: "busy", remove_when_released=True):
        assert len(opened) == 2 and lock_file.is_file()
        assert subprocess.run(["flock", "-n", str(lock_file), "true"]).returncode == 1  # locked, seen from outside
    assert not lock_file.exists() and not out.exists()


_INTO_WRITABLE_FOLDER_OF_READ_ONLY_PARENT = r"""
set -e
mkdir -p "$RW"
mount --bind "$PARENT" "$PARENT" && mount -o remount,bind,ro "$PARENT" && mount --bind "$RW" "$PARENT/out"
touch "$PARENT/out/probe" && rm "$PARENT/out/probe"
exec "$PYTHON" -c "
from hf_gpt_custom.tokenizer_training import train_tokenizer
train_tokenizer(['$CORPUS'], out_dir='$PARENT/out', vocab_size=300, show_progress=False)
print('trained')
"
"""


def test_tokenizer_trains_into_a_writable_folder_whose_parent_is_read_only(tmp_path):
    """A writable --out inside a read-only folder (a volume mounted under /, `--out .` in a home folder) was refused
    while the lock file lived beside the folder: it lives in it."""
    parent, corpus = tmp_path / "readonly_parent", tmp_path / "corpus.txt"
    (parent / "out").mkdir(parents=True)
    corpus.write_text("the cat sat on the mat\n" * 200, encoding="utf-8")
    env = {**os.environ, "PARENT": str(parent), "RW": str(tmp_path / "writable"), "CORPUS": str(corpus),
           "PYTHON": sys.executable, "PYTHONPATH": str(REPO_ROOT)}
    if os.geteuid() == 0:  # root writes anywhere: a read-only bind mount in a private mount namespace
        if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"]).returncode != 0:
            pytest.skip("no mount namespace here")
        result = subprocess.run(["unshare", "-m", "sh", "-c", _INTO_WRITABLE_FOLDER_OF_READ_ONLY_PARENT], env=env,
                                capture_output=True, text=True, timeout=120)
    else:
        os.chmod(parent, 0o555)
        try:
            result = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
                from hf_gpt_custom.tokenizer_training import train_tokenizer
                train_tokenizer([{str(corpus)!r}], out_dir={str(parent / 'out')!r}, vocab_size=300,
                                show_progress=False)
                print('trained')""")], env=env, capture_output=True, text=True, timeout=120)
        finally:
            os.chmod(parent, 0o755)
    assert "trained" in result.stdout, result.stderr[-600:]


@pytest.mark.parametrize("replaced_whole", [False, True], ids=["in_the_folder", "beside_it"])
def test_the_output_lock_holds_through_a_symlink(tmp_path, replaced_whole):
    """The lock was taken for the path as spelled: a symlink to a folder another process writes took a second one."""
    from hf_gpt_custom.training.run_lock import lock_output_folder

    (tmp_path / "real").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "link").symlink_to(tmp_path / "real")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom hf_gpt_custom.training.run_lock import lock_output_folder\n"
         f"with lock_output_folder({str(tmp_path / 'real')!r}, 'the evaluation folder', 'another --out', "
         f"replaced_whole={replaced_whole}):\n"
         "    print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match="is being written by"):
            with lock_output_folder(tmp_path / "elsewhere" / "link", "the evaluation folder", "another --out",
                                    replaced_whole=replaced_whole):
                pass
    finally:
        holder.kill()
        holder.wait()
