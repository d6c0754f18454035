"""run_all's outcome, with every benchmark process faked: where a quick run writes, what a failed benchmark does to the
tables and the exit status, and the one-line refusal of the data-reading benchmarks when the data folder is missing
(found by the newcomer4 hunt: a smoke run replaced the measured files the docs link, and a failure exited 0)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import run_all

REPO_ROOT = Path(run_all.__file__).resolve().parents[1]


def fake_benchmarks(monkeypatch, failing: tuple[str, ...] = ()) -> list[list[str]]:
    """Replace each benchmark's process by one that exits 1 when its script or module names one of `failing`, else 0."""
    commands = []

    def run(command, cwd):
        commands.append(command)
        failed = any(f"bench_{name}" in part for name in failing for part in command)
        return subprocess.CompletedProcess(command, 1 if failed else 0)

    monkeypatch.setattr(run_all.subprocess, "run", run)
    return commands


def measured_results(folder: Path) -> dict[str, str]:
    """A results folder as committed: the tables of an earlier full run."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "RESULTS.md").write_text("# measured, 7 rounds\n")
    (folder / "results.json").write_text('{"measured": true}\n')
    return {path.name: path.read_text() for path in folder.iterdir()}


def test_a_quick_run_writes_to_its_scratch_folder_and_leaves_the_measured_results_alone(tmp_path, monkeypatch, capsys):
    results, quick = tmp_path / "results", tmp_path / "results_quick"
    before = measured_results(results)
    monkeypatch.setattr(run_all, "RESULTS_DIR", results)
    monkeypatch.setattr(run_all, "QUICK_RESULTS_DIR", quick, raising=False)
    commands = fake_benchmarks(monkeypatch)
    run_all.main(["--quick", "--only", "forward,tokenizer"])
    assert {path.name: path.read_text() for path in results.iterdir()} == before
    assert all(command[command.index("--out") + 1] == str(quick) for command in commands) and len(commands) == 2
    assert "A quick run" in (quick / "RESULTS.md").read_text()
    assert json.loads((quick / "results.json").read_text())["quick"] is True
    assert f"results folder: {quick}" in capsys.readouterr().out


def test_a_quick_run_writes_where_out_says_and_marks_its_tables_as_quick(tmp_path, monkeypatch):
    commands = fake_benchmarks(monkeypatch)
    run_all.main(["--quick", "--only", "forward", "--out", str(tmp_path)])
    (command,) = commands
    assert command[command.index("--out") + 1] == str(tmp_path)
    assert "A quick run" in (tmp_path / "RESULTS.md").read_text()
    run_all.main(["--only", "forward", "--out", str(tmp_path)])  # a full run's tables are not marked
    assert "A quick run" not in (tmp_path / "RESULTS.md").read_text()
    assert json.loads((tmp_path / "results.json").read_text())["quick"] is False


def test_a_failed_benchmark_exits_1_names_it_and_leaves_the_tables_as_they_were(tmp_path, monkeypatch, capsys):
    before = measured_results(tmp_path)
    fake_benchmarks(monkeypatch, failing=("tokenizer",))
    with pytest.raises(SystemExit) as exit_info:
        run_all.main(["--only", "forward,tokenizer", "--threads", "1,2", "--out", str(tmp_path)])
    assert exit_info.value.code == 1
    assert {path.name: path.read_text() for path in tmp_path.iterdir()} == before
    error = capsys.readouterr().err
    assert "2 benchmark(s) failed: tokenizer (1 threads), tokenizer (2 threads)" in error
    assert "not rewritten" in error and "forward" not in error


def test_the_quick_results_folder_is_git_ignored():
    ignored = (REPO_ROOT / ".gitignore").read_text().splitlines()
    assert run_all.QUICK_RESULTS_DIR.relative_to(REPO_ROOT).as_posix() + "/" in ignored


def test_the_tokenizer_benchmark_names_a_missing_data_folder_in_one_line(tmp_path):
    missing = tmp_path / "shared" / "data"
    completed = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "bench_tokenizer.py"), "--data-dir",
                                str(missing), "--out", str(tmp_path / "out")],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2 and "Traceback" not in completed.stderr
    (line,) = completed.stderr.splitlines()
    assert f"the data folder {missing} does not exist" in line and "--data-dir" in line
    assert not (tmp_path / "out").exists()


def test_the_eval_benchmark_names_a_missing_data_folder_in_one_line(tmp_path, monkeypatch, capsys):
    from benchmarks import bench_eval
    from hf_gpt_custom.eval import task_data

    missing = tmp_path / "shared" / "data"
    monkeypatch.delenv(task_data.DATA_DIR_ENV, raising=False)
    monkeypatch.setattr(task_data, "BUILT_IN_DATA_DIR", missing)
    monkeypatch.setattr(sys, "argv", ["bench_eval.py", "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as exit_info:
        bench_eval.main()
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"the data folder {missing} does not exist" in line and "HF_GPT_CUSTOM_DATA_DIR" in line
    assert not (tmp_path / "out").exists()


def test_a_failed_gpu_benchmark_exits_1_and_leaves_the_tables_as_they_were(tmp_path, monkeypatch, capsys):
    """(mutant: the gpu run's failure not counted). CUDA faked visible: gpu_bench_command gives bench_gpu.py's line."""
    before = measured_results(tmp_path)
    monkeypatch.setattr(run_all, "gpu_bench_command",
                        lambda quick, out: ["python", str(run_all.BENCH_DIR / "bench_gpu.py"), "--out", str(out)])
    fake_benchmarks(monkeypatch, failing=("gpu",))
    with pytest.raises(SystemExit) as exit_info:
        run_all.main(["--only", "gpu", "--out", str(tmp_path)])
    assert exit_info.value.code == 1
    assert {path.name: path.read_text() for path in tmp_path.iterdir()} == before
    assert "1 benchmark(s) failed: gpu" in capsys.readouterr().err


def test_the_loss_trajectory_is_checked_at_the_first_thread_count_only(tmp_path, monkeypatch):
    """(mutant: checked at the last thread count). bench_command's docstring: the first thread count only."""
    commands = fake_benchmarks(monkeypatch)
    run_all.main(["--only", "train", "--threads", "1,2", "--out", str(tmp_path)])
    by_threads = {command[command.index("--threads") + 1]: command for command in commands}
    assert "--trajectory-steps" not in by_threads["1"]  # a full run: bench_train's own default
    assert by_threads["2"][by_threads["2"].index("--trajectory-steps") + 1] == "0"
