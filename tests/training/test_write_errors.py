"""Folders that cannot be written: a read-only run folder or checkpoints folder, and a full disk while a checkpoint
is saved, stop the run with a message naming the folder and the cause; the checkpoints saved before stay complete
and the half-written one is removed."""

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from accelerate import Accelerator

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.checkpoint import verify_checkpoint
from hf_gpt_custom.training.config import REPO_ROOT, save_train_config
from hf_gpt_custom.training.train import train

CHECKPOINTED = ("max_steps=4", "checkpoint_interval=2", "keep_checkpoints=5", "eval_interval=4", "eval_batches=1")
# Runs each config in one interpreter and prints what it raised (or null): one Python start-up for several runs.
TRAIN_EACH = """import json, sys
from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.config import load_train_config
from hf_gpt_custom.training.train import train
for path in sys.argv[1:]:
    try:
        train(load_train_config(path, []))
        print(json.dumps(None), flush=True)
    except UserError as err:
        print(json.dumps(str(err)), flush=True)
"""


def _train_without_permission_override(*config_paths) -> list[str | None]:
    """Run TRAIN_EACH so that chmod binds: as root, with the capabilities that bypass file permissions dropped."""
    prefix = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: chmod cannot make a folder read-only for this process")
        prefix = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]
    result = subprocess.run([*prefix, sys.executable, "-c", TRAIN_EACH, *map(str, config_paths)], cwd=REPO_ROOT,
                            env={**os.environ, "TQDM_DISABLE": "1"}, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith(("null", '"'))]


def test_read_only_folders_are_named_and_earlier_checkpoints_stay_good(make_config, tmp_path):
    # a run whose checkpoints folder turned read-only after its step-2 checkpoint, resumed (with the same settings:
    # a resume may not change max_steps, so the run went to step 4 and its step-4 checkpoint is removed)
    config = make_config(*CHECKPOINTED, run_name="checkpoints_read_only")
    checkpoints = train(config) / "checkpoints"
    shutil.rmtree(checkpoints / "step_000004")
    resumed = make_config(*CHECKPOINTED, "resume_from_checkpoint=latest", run_name="checkpoints_read_only")
    save_train_config(resumed, tmp_path / "resumed.yaml")
    # a run whose out_dir lies in a read-only folder
    (tmp_path / "read_only").mkdir()
    fresh = make_config(*CHECKPOINTED, f"out_dir={tmp_path / 'read_only' / 'run'}")
    save_train_config(fresh, tmp_path / "fresh.yaml")
    # a finished run whose run folder turned read-only (its lock file and checkpoints/ still writable): rerunning
    # it used to train nothing and fail with a PermissionError traceback writing final.tmp
    finished = make_config(*CHECKPOINTED, run_name="run_folder_read_only")
    finished_dir = train(finished)
    save_train_config(finished, tmp_path / "finished.yaml")
    os.chmod(checkpoints, 0o555)
    os.chmod(tmp_path / "read_only", 0o555)
    os.chmod(finished_dir, 0o555)
    try:
        checkpoint_error, run_folder_error, finished_error = _train_without_permission_override(
            tmp_path / "resumed.yaml", tmp_path / "fresh.yaml", tmp_path / "finished.yaml")
    finally:
        os.chmod(checkpoints, 0o755)
        os.chmod(tmp_path / "read_only", 0o755)
        os.chmod(finished_dir, 0o755)
    # found before a step is trained: nothing is lost, nothing changed
    assert checkpoint_error.startswith(f"cannot write to the checkpoints folder {checkpoints}: Permission denied; "
                                       f"make it writable")
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000002"]
    assert verify_checkpoint(checkpoints / "step_000002") is None
    assert run_folder_error.startswith(f"cannot write to the run folder {tmp_path / 'read_only' / 'run'}: "
                                       f"Permission denied; choose a writable out_dir")
    assert finished_error.startswith(f"cannot write to the run folder {finished_dir}: Permission denied")
    assert verify_checkpoint(finished_dir / "checkpoints" / "step_000004") is None and (finished_dir / "final").is_dir()


def test_a_final_folder_that_cannot_be_written_is_named_and_the_rerun_writes_it(make_config, monkeypatch):
    """The folder turning unwritable after the last checkpoint: the error names final/ and the cause, the checkpoint
    holding the trained weights stays, and the same command then writes final/ without training again."""
    from transformers import PreTrainedModel

    real_save = PreTrainedModel.save_pretrained

    def denied(self, save_directory, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(save_directory))

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", denied)
    config = make_config(*CHECKPOINTED)
    with pytest.raises(UserError) as err:
        train(config)
    run_dir = config.run_dir.absolute()
    assert str(err.value).startswith(f"cannot write final/ to {run_dir}: Permission denied (EACCES)")
    assert "the complete checkpoints step_000002, step_000004 are untouched" in str(err.value)
    assert "then rerun the same command: it resumes from the latest checkpoint" in str(err.value)
    assert not (run_dir / "final").exists() and not (run_dir / "final.tmp").exists()
    monkeypatch.setattr(PreTrainedModel, "save_pretrained", real_save)
    train(config)
    assert (run_dir / "final" / "model.safetensors").is_file()
    steps = [json.loads(line)["step"] for line in (run_dir / "run_log.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "train"]
    assert steps == [1, 2, 3, 4]  # nothing trained twice


def _safetensor_error(text: str) -> Exception:
    """safetensors' own exception class (an Exception, not an OSError), taken from a real failed save_file."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    try:
        save_file({"x": torch.zeros(1)}, "/nonexistent-folder/x.safetensors")
    except SafetensorError as error:
        return type(error)(text)
    raise AssertionError("save_file wrote into a folder that does not exist")


@pytest.mark.parametrize("failure, cause", [
    # what safetensors raises as accelerate writes model.safetensors on a full disk (the interrupts hunt: a bare
    # traceback, and the partial folder kept its space)
    (_safetensor_error("Error while serializing: I/O error: No space left on device (os error 28)"),
     "No space left on device (ENOSPC)"),
    # what torch's zip writer raises when the disk fills up under it
    (RuntimeError("[enforce fail at inline_container.cc:858] . PytorchStreamWriter failed writing file data/3: file "
                  "write failed"), "torch could not write the file ([enforce fail at inline_container.cc:858]"),
    (RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 1472 vs 1360"),
     "torch could not write the file ([enforce fail at inline_container.cc:626] . unexpected pos 1472 vs 1360)"),
    (OSError(errno.ENOSPC, "No space left on device"), "No space left on device (ENOSPC)"),
], ids=["safetensors", "torch_writer", "torch_position", "oserror"])
def test_a_full_disk_while_checkpointing_is_named_and_earlier_checkpoints_stay_good(make_config, monkeypatch,
                                                                                    failure, cause):
    real_save_state = Accelerator.save_state

    def disk_full_at_step_4(self, output_dir=None, **kwargs):
        if not output_dir.endswith("step_000004.tmp"):
            return real_save_state(self, output_dir, **kwargs)
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        (Path(output_dir) / "model.safetensors").write_bytes(bytes(4096))  # written up to the moment space ran out
        raise failure

    monkeypatch.setattr(Accelerator, "save_state", disk_full_at_step_4)
    config = make_config(*CHECKPOINTED)
    checkpoints = config.run_dir / "checkpoints"
    with pytest.raises(UserError) as err:
        train(config)
    message = str(err.value)
    assert message.startswith(f"cannot write checkpoint step_000004 to {checkpoints}: {cause}")
    assert "MiB free on that filesystem" in message and "the complete checkpoints step_000002 are untouched" in message
    assert err.value.__cause__ is failure  # the original error stays attached for a traceback
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000002"]  # the partial folder is gone
    assert verify_checkpoint(checkpoints / "step_000002") is None


def test_other_runtime_errors_while_checkpointing_keep_their_traceback(make_config, monkeypatch):
    def broken(self, output_dir=None, **kwargs):
        raise RuntimeError("a bug, not a write failure")

    monkeypatch.setattr(Accelerator, "save_state", broken)
    with pytest.raises(RuntimeError, match="a bug, not a write failure") as err:
        train(make_config(*CHECKPOINTED))
    assert not isinstance(err.value, UserError)


def test_the_console_scripts_early_check_names_an_out_dir_that_cannot_be_created(make_config, tmp_path, monkeypatch):
    """check_run_folder runs before torch loads (the console script's first check): an out_dir under a file, or under
    a folder that refuses writes, is named there rather than ~6 s later when the run folder is locked."""
    from hf_gpt_custom.training.resume import check_run_folder

    (tmp_path / "a_file").write_text("x")
    with pytest.raises(UserError, match=f"the run folder {tmp_path / 'a_file' / 'run'} cannot be created: "
                                        f"{tmp_path / 'a_file'} is a file"):
        check_run_folder(make_config(f"out_dir={tmp_path / 'a_file' / 'run'}"))
    parent = tmp_path / "refuses_writes"
    parent.mkdir()
    real_temporary_file = tempfile.TemporaryFile

    def temporary_file(*args, dir=None, **kwargs):  # the probe errors.check_writable makes
        if Path(dir) == parent:
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_temporary_file(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "TemporaryFile", temporary_file)
    with pytest.raises(UserError, match=f"cannot write to the run folder's parent folder {parent}: Permission denied"):
        check_run_folder(make_config(f"out_dir={parent / 'deeper' / 'run'}"))
    check_run_folder(make_config(f"out_dir={tmp_path / 'fine' / 'run'}"))  # creatable: passes, creating nothing
    assert not (tmp_path / "fine").exists()


def test_a_file_in_the_way_of_final_is_named_with_the_fix_that_applies(make_config):
    """A file named final.tmp in the run folder (rmtree skipped it in silence): the message said "make the folder
    writable or free space", which fixes nothing, and named no file (the interrupts hunt). Now it names the file and
    says to move it; the checkpoints stay."""
    config = make_config(*CHECKPOINTED)
    run_dir = config.run_dir.absolute()
    run_dir.mkdir(parents=True)
    (run_dir / "final.tmp").write_text("a note of mine")
    with pytest.raises(UserError) as err:
        train(config)
    message = str(err.value)
    assert message.startswith(f"cannot write final/ to {run_dir}: {run_dir / 'final.tmp'} is a file where a folder "
                              "belongs: move it away")
    assert "free space" not in message and "the complete checkpoints step_000002, step_000004 are untouched" in message
    assert (run_dir / "final.tmp").read_text() == "a note of mine"


@pytest.mark.parametrize("in_the_way", ["file", "folder"])
def test_a_rename_onto_a_path_of_the_wrong_kind_names_the_destination(tmp_path, in_the_way):
    """os.replace(final, final.replaced) with the user's file named final.replaced: the OSError names the source first
    (filename) and the destination second (filename2), and the message said "RUN/final is a file where a folder
    belongs", of a folder, leaving the file unnamed (the roundreview10 hunt). Now the destination is named, in both
    directions (a folder moved onto a file: ENOTDIR; a file onto a folder: EISDIR)."""
    from hf_gpt_custom.errors import file_system_error_message
    from hf_gpt_custom.training.checkpoint import write_errors_named

    ours, theirs = tmp_path / "final", tmp_path / "final.replaced"
    if in_the_way == "file":
        ours.mkdir()
        theirs.write_text("a note of mine")
    else:
        ours.write_text("{}")
        (theirs / "notes").mkdir(parents=True)
    belongs = "folder" if in_the_way == "file" else "file"
    expected = f"{theirs} is a {in_the_way} where a {belongs} belongs: move it away"
    with pytest.raises(UserError) as err, write_errors_named(tmp_path, None, "final/"):
        os.replace(ours, theirs)
    assert f"cannot write final/ to {tmp_path}: {expected}" in str(err.value)
    assert file_system_error_message(err.value.__cause__).startswith(expected)


@pytest.mark.parametrize("kind, number", [("folder", errno.EISDIR), ("file", errno.ENOTDIR)])
def test_the_cli_names_a_file_or_folder_of_the_wrong_kind(tmp_path, kind, number):
    """run_log.jsonl as a folder, checkpoints/ as a file: bare IsADirectoryError / NotADirectoryError tracebacks."""
    from hf_gpt_custom.errors import file_system_error_message

    if kind == "folder":
        (tmp_path / "run_log.jsonl").mkdir()
        error = IsADirectoryError(number, os.strerror(number), str(tmp_path / "run_log.jsonl"))
        expected = f"{tmp_path / 'run_log.jsonl'} is a folder where a file belongs: move it away"
    else:
        (tmp_path / "checkpoints").write_text("")
        error = NotADirectoryError(number, os.strerror(number), str(tmp_path / "checkpoints" / "step_000002"))
        expected = f"{tmp_path / 'checkpoints'} is a file where a folder belongs: move it away"
    assert file_system_error_message(error).startswith(expected)


# --- found by the diskfull hunt (real small tmpfs disks, read-only mounts, ulimit -f) ---------------------------------


def test_a_full_disk_quota_or_size_limit_is_one_line_with_the_fix_that_applies_even_without_a_file_name(tmp_path):
    """write(), flush() and close() report ENOSPC with no file name (only open() names one): the CLI printed a bare
    traceback at the first write of every command (the lock file). A copy's error names its source first (the
    package's own installed file, "free space there") and the file being written second. EDQUOT's limit is the
    quota, not the disk; EFBIG's no free space lifts."""
    from hf_gpt_custom.errors import file_system_error_message, write_failure_fix

    nameless = file_system_error_message(OSError(errno.ENOSPC, "No space left on device"))
    assert nameless.startswith("a file could not be written: No space left on device; free space on the disk of the "
                               "output folder") and "run the same command again" in nameless
    copied = OSError(errno.ENOSPC, "No space left on device", "/site-packages/x.py", None, str(tmp_path / "out.py"))
    assert file_system_error_message(copied).startswith(f"cannot write {tmp_path / 'out.py'}: No space left on device")
    assert "quota" in file_system_error_message(OSError(errno.EDQUOT, "Disk quota exceeded", str(tmp_path / "f")))
    too_large = file_system_error_message(OSError(errno.EFBIG, "File too large", str(tmp_path / "f")))
    assert "limits the size of one file" in too_large and "free space" not in too_large
    assert file_system_error_message(OSError(errno.EFBIG, "File too large")).startswith(
        "a file could not be written: File too large; the file system of the output folder")
    assert file_system_error_message(PermissionError(errno.EACCES, "Permission denied")) is None  # a bug: traceback
    assert write_failure_fix(PermissionError(errno.EROFS, "Read-only file system"), tmp_path).startswith(
        f"make {tmp_path} writable")


def test_the_files_written_after_open_name_themselves_when_a_write_fails(tmp_path):
    """The run log's flush, config.yaml / pipeline_state.json (write_text_atomically) and the lock file's record failed
    with no file name (a full disk fails the write, not the open): a bare traceback; the atomic writes also left their
    .partial behind. Here a real failing write: a process whose file size limit (`ulimit -f`) is 20 bytes."""
    script = f"""
import errno, resource, signal, sys
from pathlib import Path
from hf_gpt_custom.errors import file_system_error_message
from hf_gpt_custom.manifest import write_text_atomically
from hf_gpt_custom.training.run_lock import lock_output_folder
from hf_gpt_custom.training.run_log import RunLog

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG instead of killing the process
resource.setrlimit(resource.RLIMIT_FSIZE, (20, 20))
root = Path({str(tmp_path)!r})
attempts = [lambda: write_text_atomically(root / "config.yaml", "x" * 100),
            lambda: RunLog(root / "run_log.jsonl").write({{"kind": "train", "step": 1, "loss": 1.0}})]
def lock():
    with lock_output_folder(root / "eval", "the evaluation folder", "another --out"):
        pass
for attempt in [*attempts, lock]:
    try:
        attempt()
    except OSError as err:
        print(file_system_error_message(err))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3, result.stdout
    for line, name in zip(lines, ("config.yaml", "run_log.jsonl", "eval/.hf-gpt-custom-writing.lock")):
        assert line.startswith(f"cannot write {tmp_path / name}: File too large; "), line
        assert "limits the size of one file" in line
    assert not list(tmp_path.glob("*.partial"))


def test_a_plot_cut_by_a_full_disk_never_takes_the_plots_name(tmp_path, monkeypatch):
    """savefig wrote straight to loss_curve.png: a full disk left a cut PNG there, which an export then published and
    its card showed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hf_gpt_custom.manifest import save_figure_atomically

    figure = plt.figure()
    path = tmp_path / "loss_curve.png"
    path.write_bytes(b"the previous curve")

    def cut(self, fname, **kwargs):
        Path(fname).write_bytes(b"\x89PNG cut")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(figure), "savefig", cut)
    with pytest.raises(OSError) as err:
        save_figure_atomically(figure, path)
    assert err.value.filename == str(path) and path.read_bytes() == b"the previous curve"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loss_curve.png"]
    monkeypatch.undo()
    save_figure_atomically(figure, path)
    assert path.read_bytes().startswith(b"\x89PNG") and len(path.read_bytes()) > 100
    plt.close(figure)


def test_an_empty_tokenizer_record_left_by_a_full_disk_does_not_block_the_folder(make_config, caplog):
    """tokenizer/training_source.json left at 0 bytes made every later train of the folder end in a bare
    JSONDecodeError, space freed or not. Now it counts as no record: the tokenizer is checked again (trained beside
    the run's checkpoints and kept: the same), and the record is written whole."""
    import logging

    from hf_gpt_custom.training.workload import prepare_tokenizer

    config = make_config("max_steps=2", "eval_interval=2", "eval_batches=1", "tokenizer=null",
                         "tokenizer_vocab_size=300", run_name="marker")
    folder = prepare_tokenizer(config)
    record = (folder / "training_source.json").read_text()
    (folder / "training_source.json").write_text("")
    with caplog.at_level(logging.WARNING, logger="hf_gpt_custom.training.workload"):
        assert prepare_tokenizer(config) == folder
    assert "training_source.json is damaged (empty or cut short)" in caplog.text
    assert json.loads((folder / "training_source.json").read_text()) == json.loads(record)


def test_a_hub_tokenizer_that_cannot_be_saved_is_not_called_unreachable(make_config, monkeypatch):
    """`tokenizer=<Hub name>` on a full run-folder disk said the tokenizer "could not be loaded from the Hub ...
    download it while online": the load and the save shared one `except OSError`."""
    import transformers

    from hf_gpt_custom.errors import MissingFileError, file_system_error_message
    from hf_gpt_custom.training.workload import prepare_tokenizer

    class Loaded:
        def save_pretrained(self, folder):
            raise OSError(errno.ENOSPC, "No space left on device")

    config = make_config("tokenizer=someone/their-tokenizer", run_name="hub")
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda name: Loaded())
    with pytest.raises(OSError) as err:
        prepare_tokenizer(config)
    assert not isinstance(err.value, MissingFileError) and "No space left" in file_system_error_message(err.value)

    def unreachable(name):
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", unreachable)
    with pytest.raises(MissingFileError, match="could not be loaded from the Hub"):
        prepare_tokenizer(config)
