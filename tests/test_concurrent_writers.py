"""Two processes on the same output folder must never leave a silently mixed or incomplete result.

Each test starts the first process for real (a subprocess) and holds it at a chosen point of its writing (a hook that
waits for a file, as `kill -STOP` would), then runs the second in this process; the second's own hook lets the first
go on at a chosen point. The expected behaviour is either a clear refusal (a UserError) or two complete, unmixed
outputs. Found by a concurrency pass (hunt_conc/REPORT.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hf_gpt_custom.errors import UserError
from tests.conftest import REPO_ROOT

WAIT_S = 60

# Prepended to each first-process script: wait_for(path) blocks until the test creates `path` (at most WAIT_S).
_PRELUDE = f"""
import sys, time
from pathlib import Path
def wait_for(path, ready):
    Path(ready).touch()
    deadline = time.time() + {WAIT_S}
    while not Path(path).exists() and time.time() < deadline:
        time.sleep(0.05)
"""


def _start(script: str, *args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", _PRELUDE + textwrap.dedent(script), *map(str, args)],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_ready(proc: subprocess.Popen, ready: Path) -> None:
    deadline = time.time() + WAIT_S
    while not ready.exists():
        if proc.poll() is not None:
            pytest.fail(f"the first process ended before its pause point:\n{proc.stdout.read()}")
        assert time.time() < deadline, "the first process never reached its pause point"
        time.sleep(0.05)


def _let_go_and_wait(go: Path, proc: subprocess.Popen) -> tuple[int, str]:
    go.touch()
    output, _ = proc.communicate(timeout=WAIT_S + 60)
    return proc.returncode, output


# --- eval: two evaluations writing the same --out ------------------------------------------------------------------


def _results(model: str, task: str, limit: int):
    import types

    row = {"task": task, "dataset": {"path": task, "name": None, "split": "validation"}, "num_fewshot": 0,
           "metric": "acc", "value": 0.5, "stderr": 0.1, "n": limit, "higher_is_better": True, "n_truncated": 0}
    payload = {"model": model, "config": {"limit": limit, "seed": 1234}, "results": [row]}
    return types.SimpleNamespace(to_dict=lambda: json.loads(json.dumps(payload)), examples=[{"model": model}])


def test_two_evals_writing_one_out_folder_never_mix_their_files(tmp_path, monkeypatch):
    """`eval --out X` twice at once (or a hand eval into <run>/eval while `run` evaluates): both stage in
    X/.report.tmp, so one's results.json was moved in beside the other's table.md and examples.jsonl, and the other
    crashed with a bare FileNotFoundError. Seen for real: results.json of a copa eval beside a piqa table.md."""
    import hf_gpt_custom.eval.report as report

    out, go, ready = tmp_path / "eval", tmp_path / "go", tmp_path / "ready"
    first = _start("""
        import json, types
        import hf_gpt_custom.eval.report as report
        out, go, ready = sys.argv[1:4]
        original = report.plot_shots_curve
        def paused(*args, **kwargs):  # table.md and examples.jsonl are staged; the plot takes a second
            wait_for(go, ready)
            return original(*args, **kwargs)
        report.plot_shots_curve = paused
        row = {"task": "copa", "dataset": {"path": "copa", "name": None, "split": "validation"}, "num_fewshot": 0,
               "metric": "acc", "value": 0.5, "stderr": 0.1, "n": 20, "higher_is_better": True, "n_truncated": 0}
        payload = {"model": "model-A", "config": {"limit": 20, "seed": 1234}, "results": [row]}
        report.write_report(types.SimpleNamespace(to_dict=lambda: payload, examples=[{"model": "model-A"}]), out)
    """, out, go, ready)
    _wait_ready(first, ready)

    original = report.plot_shots_curve
    state = {}

    def let_first_finish(*args, **kwargs):
        state["first"] = _let_go_and_wait(go, first)
        return original(*args, **kwargs)

    monkeypatch.setattr(report, "plot_shots_curve", let_first_finish)
    second_error = None
    try:
        report.write_report(_results("model-B", "piqa", 10), out)
    except Exception as err:  # noqa: BLE001 - judged below
        second_error = err
    finally:
        if "first" not in state:
            state["first"] = _let_go_and_wait(go, first)

    results_model = json.loads((out / "results.json").read_text())["model"]
    table_model = (out / "table.md").read_text().splitlines()[0]
    examples_model = json.loads((out / "examples.jsonl").read_text().splitlines()[0])["model"]
    assert f"`{results_model}`" in table_model and examples_model == results_model, (
        f"results.json is {results_model}'s, table.md says {table_model!r}, examples.jsonl is {examples_model}'s")
    assert second_error is None or isinstance(second_error, UserError), f"bare {second_error!r}"
    rc, output = state["first"]
    assert rc == 0 or "Traceback" not in output, output


# --- export: two exports to one OUT_DIR ----------------------------------------------------------------------------


def test_two_exports_to_one_folder_never_leave_an_incomplete_export(tmp_path, monkeypatch):
    """`export RUN OUT` twice at once (or by hand while `run`'s export stage writes <run>/export): both stage in
    OUT.tmp, and the second takes the first's live staging folder for an interrupted export's and deletes it. Here the
    first then renamed the second's half-written staging into OUT and reported success: OUT held the weights and code
    but no tokenizer, card or manifest, and the complete export that was there before was gone (a rerun of `run`
    then skips its export stage as done)."""
    from hf_gpt_custom import model_folder
    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.publish_checks import check_export
    from tests.helpers import make_tiny_run

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny")
    out, go, ready = tmp_path / "export", tmp_path / "go", tmp_path / "ready"
    first = _start("""
        import hf_gpt_custom.hub as hub
        run_dir, out, go, ready = sys.argv[1:5]
        original = hub._make_world_readable
        def paused(folder):  # OUT.tmp is complete, manifest written: the rename into OUT comes next
            wait_for(go, ready)
            return original(folder)
        hub._make_world_readable = paused
        hub.export_folder(run_dir, out)
        print("first export: done")
    """, run_dir, out, go, ready)
    _wait_ready(first, ready)

    original = model_folder.load_folder_tokenizer
    state = {}

    def let_first_finish(*args, **kwargs):  # the second's staging holds the weights and code, not yet the tokenizer
        state["first"] = _let_go_and_wait(go, first)
        return original(*args, **kwargs)

    monkeypatch.setattr(model_folder, "load_folder_tokenizer", let_first_finish)
    second_error = None
    try:
        export_folder(run_dir, out)
    except Exception as err:  # noqa: BLE001 - judged below
        second_error = err
    finally:
        if "first" not in state:
            state["first"] = _let_go_and_wait(go, first)

    rc, output = state["first"]
    present = sorted(path.name for path in out.iterdir()) if out.is_dir() else []
    assert {"README.md", "tokenizer.json", "manifest.json", "model.safetensors"} <= set(present), (
        f"first export rc={rc} ({output.strip().splitlines()[-1]!r}); {out} holds only {present}")
    check_export(out)
    assert second_error is None or isinstance(second_error, UserError), f"bare {second_error!r}"
    assert not out.with_name(out.name + ".tmp").exists() or second_error is not None


# --- eval of a final/ that a finishing `train` replaces -------------------------------------------------------------


def _model_folder_with_tokenizer(folder: Path, tokenizer_dir: Path | None) -> Path:
    from hf_gpt_custom import GPTCustomTokenizerFast
    from hf_gpt_custom.manifest import write_manifest
    from tests.helpers import save_tiny_model

    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_dir) if tokenizer_dir else \
        GPTCustomTokenizerFast.bytes_only()
    save_tiny_model(folder, len(tokenizer), seed=len(tokenizer), bos_token_id=tokenizer.eos_token_id,
                    eos_token_id=tokenizer.eos_token_id)
    tokenizer.save_pretrained(folder)
    write_manifest(folder)
    return folder


def test_eval_never_pairs_one_final_weights_with_the_next_finals_tokenizer(tmp_path, monkeypatch, shared_data_dir):
    """`eval --model runs/x/final` while `train --start_over tokenizer_vocab_size=...` in runs/x writes its final/
    (rmtree, then rename of final.tmp): eval loaded the old weights (vocab 512) and then the new tokenizer (vocab 384)
    and scored the mix without a word; its log-likelihoods matched neither model's own evaluation."""
    import hf_gpt_custom.eval.runner as runner
    from hf_gpt_custom.tokenizer_training import train_tokenizer

    text = tmp_path / "text.txt"
    text.write_text((shared_data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:40_000])
    bpe = train_tokenizer([str(text)], tmp_path / "bpe", vocab_size=320, show_progress=False)
    run_dir = tmp_path / "run"
    final = _model_folder_with_tokenizer(run_dir / "final", bpe)  # the run's current final/: 320 tokens
    staging = _model_folder_with_tokenizer(run_dir / "final.tmp", None)  # the next one: the 257-token byte tokenizer

    original = runner.load_tokenizer

    def final_replaced_meanwhile(*args, **kwargs):  # as train's _save_final_folder does, between the two loads
        if staging.exists():
            shutil.rmtree(final)
            os.replace(staging, final)
        return original(*args, **kwargs)

    model, tokenizer, _ = runner.load_model_and_tokenizer(str(final), None, "cpu", "float32")  # untouched: loads
    assert model.config.vocab_size == len(tokenizer) == 320
    monkeypatch.setattr(runner, "load_tokenizer", final_replaced_meanwhile)
    try:
        model, tokenizer, _ = runner.load_model_and_tokenizer(str(final), None, "cpu", "float32")
    except UserError as err:
        assert "was replaced while it was being read" in str(err)
        return  # refused: final/ changed while it was being read
    assert model.config.vocab_size == len(tokenizer), (
        f"weights with {model.config.vocab_size} token embeddings scored with a {len(tokenizer)}-token tokenizer")


def test_an_evaluations_weights_record_names_the_weights_it_scored(tmp_path, monkeypatch):
    """The record of the weights scored was taken after every task was planned (seconds to minutes after loading): a
    training run writing a new final/ meanwhile gave the old model's scores the new weights' fingerprint, and export
    published them as the new model's (the concurrency hunt). Reference: the fingerprint of the weights loaded,
    taken before anything changed; a folder replaced while it loads is refused."""
    import hf_gpt_custom.eval.runner as runner
    from hf_gpt_custom.eval.runner import evaluate
    from hf_gpt_custom.manifest import weights_fingerprint, write_manifest

    final = _model_folder_with_tokenizer(tmp_path / "run" / "final", None)
    scored = weights_fingerprint(final)
    from safetensors.torch import load_file, save_file

    retrained = _model_folder_with_tokenizer(tmp_path / "next", None)
    weights = {name: tensor + 1.0 for name, tensor in load_file(retrained / "model.safetensors").items()}
    save_file(weights, retrained / "model.safetensors", metadata={"format": "pt"})
    write_manifest(retrained)  # another model, whole
    original_plan = runner.plan_task

    def retrained_while_planning(*args, **kwargs):  # train's _save_final_folder: final/ replaced whole
        if retrained.exists():
            shutil.rmtree(final)
            os.replace(retrained, final)
        return original_plan(*args, **kwargs)

    monkeypatch.setattr(runner, "plan_task", retrained_while_planning)
    results = evaluate(str(final), tasks=["copa"], limit=2, show_progress=False)
    assert results.model_weights_sha256 == scored != weights_fingerprint(final)

    again = _model_folder_with_tokenizer(tmp_path / "again", None)
    save_file({name: tensor * 2.0 for name, tensor in load_file(again / "model.safetensors").items()},
              again / "model.safetensors", metadata={"format": "pt"})
    write_manifest(again)
    original_load = runner.load_model_and_tokenizer

    def retrained_while_loading(*args, **kwargs):
        loaded = original_load(*args, **kwargs)
        shutil.rmtree(final)
        os.replace(again, final)
        return loaded

    monkeypatch.setattr(runner, "plan_task", original_plan)
    monkeypatch.setattr(runner, "load_model_and_tokenizer", retrained_while_loading)
    with pytest.raises(UserError, match="was replaced while it was being read"):
        evaluate(str(final), tasks=["copa"], limit=2, show_progress=False)


def test_an_export_reads_one_evaluation_of_the_run(tmp_path):
    """export reads eval/results.json for the card and again for the published copy: an `eval --out RUN/eval`
    finishing between the two gave a card of one evaluation beside the results of another (the concurrency hunt).
    Each holds the evaluation folder: whichever comes second is refused, naming the first."""
    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.training.run_lock import lock_output_folder
    from tests.helpers import make_tiny_run

    run_dir = make_tiny_run(tmp_path / "runs" / "r")
    go, ready = tmp_path / "go", tmp_path / "ready"
    holder = _start("""
        from hf_gpt_custom.training.run_lock import lock_output_folder
        with lock_output_folder(sys.argv[1], "the evaluation folder", "another --out"):
            wait_for(sys.argv[2], sys.argv[3])
    """, run_dir / "eval", go, ready)
    _wait_ready(holder, ready)
    try:
        with pytest.raises(UserError, match=r"the run's evaluation folder .* is being written by .*; export reads it: "
                                            r"wait for that evaluation to finish, then export again"):
            export_folder(run_dir, tmp_path / "export")
    finally:
        assert _let_go_and_wait(go, holder)[0] == 0
    assert export_folder(run_dir, tmp_path / "export").is_dir()
    with lock_output_folder(run_dir / "eval", "x", "y"):  # released: no lock file left behind in eval/
        pass
    assert sorted(path.name for path in (run_dir / "eval").iterdir()) == ["results.json", "shots_curve.png", "table.md"]


# --- tokenizer train: two trainings into one --out -----------------------------------------------------------------


def test_two_tokenizer_trainings_into_one_folder_never_mix_their_files(tmp_path, shared_data_dir):
    """`tokenizer train ... --out T` twice at once with other vocabulary sizes: save_pretrained writes straight into
    T, so T ended with tokenizer.json of one (300 entries) beside vocab.json and merges.txt of the other (512)."""
    from hf_gpt_custom.tokenizer_training import train_tokenizer

    text = tmp_path / "text.txt"
    text.write_text((shared_data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:40_000])
    out, go, ready = tmp_path / "tok", tmp_path / "go", tmp_path / "ready"
    first = _start("""
        from hf_gpt_custom import GPTCustomTokenizerFast
        from hf_gpt_custom.tokenizer_training import train_tokenizer
        text, out, go, ready = sys.argv[1:5]
        original = GPTCustomTokenizerFast.save_vocabulary
        def paused(self, *args, **kwargs):  # tokenizer.json and tokenizer_config.json are written
            wait_for(go, ready)
            return original(self, *args, **kwargs)
        GPTCustomTokenizerFast.save_vocabulary = paused
        train_tokenizer([text], out, vocab_size=512, show_progress=False)
    """, text, out, go, ready)
    _wait_ready(first, ready)
    second_error = None
    try:
        train_tokenizer([str(text)], out, vocab_size=300, show_progress=False)
    except UserError as err:
        second_error = err
    finally:
        rc, output = _let_go_and_wait(go, first)
    assert rc == 0 or "Traceback" not in output, output
    fast = len(json.loads((out / "tokenizer.json").read_text())["model"]["vocab"])
    vocab = len(json.loads((out / "vocab.json").read_text()))
    assert fast == vocab, f"tokenizer.json has {fast} entries, vocab.json {vocab} (second refused: {second_error})"


def test_a_run_whose_evaluation_folder_this_user_cannot_write_still_exports(tmp_path):
    """Export holds the run's eval/ while it reads it; on a shared run whose eval/ this user cannot write, taking
    that hold refused the export ("choose a folder you can write"), which only reads there (the roundreview11 hunt).
    Reference: the same export of the folder when it is writable."""
    from tests.helpers import make_tiny_run

    run_dir = make_tiny_run(tmp_path / "runs" / "r")
    prefix = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: chmod cannot make a folder read-only for this process")
        prefix = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]
    (run_dir / "eval").chmod(0o555)
    try:
        script = "import sys; from hf_gpt_custom.hub import export_folder; print(export_folder(sys.argv[1], sys.argv[2]))"
        result = subprocess.run([*prefix, sys.executable, "-c", script, str(run_dir), str(tmp_path / "export")],
                                cwd=REPO_ROOT, capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    finally:
        (run_dir / "eval").chmod(0o755)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads((tmp_path / "export" / "eval" / "results.json").read_text())["results"]
