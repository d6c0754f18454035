"""`hf-gpt-custom eval` and the main job's evaluation stage: the device they choose (CUDA when there is one, checked
against this machine), one line for a K the model cannot hold, and no tokenizer warning about long texts that the
evaluation windows itself. CUDA is simulated with monkeypatched torch.cuda functions: CI has no GPU."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import pytest
import torch

from hf_gpt_custom.cli import main
from hf_gpt_custom.eval import runner
from hf_gpt_custom.errors import MissingFileError, UserError


def _fake_cuda(monkeypatch, device_count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: device_count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: device_count)


@pytest.mark.parametrize("device_count, requested, chosen", [
    (0, None, "cpu"), (1, None, "cuda"), (2, None, "cuda"),
    (1, "cpu", "cpu"), (1, "cuda", "cuda"), (1, "cuda:0", "cuda:0"), (2, "cuda:1", "cuda:1"),
])
def test_the_device_is_cuda_when_there_is_one_unless_asked_otherwise(monkeypatch, device_count, requested, chosen):
    _fake_cuda(monkeypatch, device_count)
    assert runner.resolve_device(requested) == chosen


@pytest.mark.parametrize("device_count, requested, message", [
    (1, "cuda:3", r"--device cuda:3: this machine has 1 CUDA device \(cuda:0\); use --device cuda:0"),
    (2, "cuda:2", r"--device cuda:2: this machine has 2 CUDA devices \(cuda:0 to cuda:1\); use --device cuda:0"),
    (0, "cuda", r"--device cuda: .* on this machine; use --device cpu"),
    (0, "cuda:0", r"--device cuda:0: .* on this machine; use --device cpu"),
    (1, "gpu0", r"--device 'gpu0' is not a torch device"),
    (1, "xpu", r"--device xpu: evaluation runs on cpu, cuda or mps"),  # these three were tracebacks (a hunt)
    (1, "hpu", r"--device hpu: evaluation runs on cpu, cuda or mps"),
    (1, "meta", r"--device meta: evaluation runs on cpu, cuda or mps"),
])
def test_a_device_this_machine_lacks_is_one_line_naming_the_fix(monkeypatch, device_count, requested, message):
    _fake_cuda(monkeypatch, device_count)
    with pytest.raises(UserError, match=message) as caught:
        runner.resolve_device(requested)
    assert "\n" not in str(caught.value)


class _Loaded(Exception):
    """Raised by the stand-in loader: the device evaluate asked for, without moving a model to a GPU we lack."""


@pytest.fixture
def loaded_device(monkeypatch):
    """Replace the model loader; `evaluate` then stops with _Loaded(device) where it would load the model."""
    def load(model, tokenizer, device, dtype):
        raise _Loaded(device)

    monkeypatch.setattr(runner, "load_model_and_tokenizer", load)


def test_evaluate_and_the_main_jobs_eval_stage_use_cuda_when_available(monkeypatch, loaded_device, tmp_path):
    from hf_gpt_custom.run import _stage_eval

    _fake_cuda(monkeypatch, 1)
    with pytest.raises(_Loaded, match="^cuda$"):
        runner.evaluate(str(tmp_path), tasks=["copa"])
    config = SimpleNamespace(benchmark_tasks=["copa"], benchmark_shots=[0], benchmark_limit=2, cpu=False)
    with pytest.raises(_Loaded, match="^cuda$"):
        _stage_eval(config, tmp_path, {})
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")  # run under a launch that asks for the CPU: trained there
    with pytest.raises(_Loaded, match="^cpu$"):
        _stage_eval(SimpleNamespace(**{**vars(config), "cpu": None}), tmp_path, {})
    monkeypatch.delenv("ACCELERATE_USE_CPU")
    _fake_cuda(monkeypatch, 0)
    with pytest.raises(_Loaded, match="^cpu$"):
        _stage_eval(config, tmp_path, {})


def test_the_eval_command_uses_cuda_when_available_and_device_overrides(monkeypatch, loaded_device, tmp_path):
    _fake_cuda(monkeypatch, 1)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "gpt_custom"}')
    (tmp_path / "model" / "model.safetensors").write_text("")  # the shape the CLI checks; the load is faked
    base = ["eval", "--model", str(tmp_path / "model"), "--tasks", "copa", "--out", str(tmp_path / "out")]
    with pytest.raises(_Loaded, match="^cuda$"):
        main(base)
    with pytest.raises(_Loaded, match="^cpu$"):
        main([*base, "--device", "cpu"])


def _one_line_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("hf-gpt-custom ")]  # progress bars aside
    assert exited.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_eval_on_a_cuda_index_this_machine_lacks_is_one_line(monkeypatch, tmp_path, capsys):
    _fake_cuda(monkeypatch, 1)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "gpt_custom"}')
    (tmp_path / "model" / "model.safetensors").write_text("")  # the shape the CLI checks; the load is faked
    err = _one_line_error(["eval", "--model", str(tmp_path / "model"), "--tasks", "copa", "--device", "cuda:3",
                           "--out", str(tmp_path / "out")], capsys)
    assert "this machine has 1 CUDA device (cuda:0); use --device cuda:0" in err
    assert not (tmp_path / "out").exists()


def test_a_few_shot_k_the_context_cannot_hold_is_one_line_naming_the_fix(short_context_model, tmp_path, capsys):
    err = _one_line_error(["eval", "--model", str(short_context_model), "--tasks", "lambada", "--shots", "1",
                           "--limit", "2", "--out", str(tmp_path / "out")], capsys)
    assert err.startswith("hf-gpt-custom eval: error: task lambada at K=1: the model's context of 64 tokens cannot "
                          "hold even one few-shot example")
    assert "--shots 0" in err
    # two such tasks and two K: each named with its K in one error, not one per try (the newcomer3 walk), and the
    # advice said once, not once per task and K (the newcomer4 walk)
    err = _one_line_error(["eval", "--model", str(short_context_model), "--tasks", "copa,piqa,lambada", "--shots",
                           "0,1,5", "--limit", "2", "--out", str(tmp_path / "out")], capsys)
    named = re.findall(r"task (\w+) at K=(\d): the model's context of 64 tokens cannot hold even one few-shot example",
                       err)
    assert err.startswith(f"hf-gpt-custom eval: error: {len(named)} tasks or K values cannot fit: task ")
    assert {("piqa", "1"), ("piqa", "5"), ("lambada", "1"), ("lambada", "5")} <= set(named)
    assert err.count("--shots 0") == 1


def test_long_documents_scored_in_windows_print_no_tokenizer_length_warning(short_context_model):
    """wikitext pages are far longer than 64 tokens: the evaluation windows them itself, so transformers' "Token
    indices sequence length is longer than the specified maximum" would only be noise. A user's own call still warns."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as transformers_logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    library_logger = transformers_logging.get_logger("transformers")
    library_logger.addHandler(handler)
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_warning()  # another test's import may have set TRANSFORMERS_VERBOSITY=error
    try:
        tokenizer = AutoTokenizer.from_pretrained(short_context_model)
        tokenizer.model_max_length = 64
        runner.evaluate(str(short_context_model), tokenizer, tasks=["wikitext"], limit=1, show_progress=False)
        assert not [r for r in records if "sequence length is longer" in r.getMessage()]
        tokenizer("x" * 100)
        assert [r for r in records if "sequence length is longer" in r.getMessage()]
    finally:
        library_logger.removeHandler(handler)
        transformers_logging.set_verbosity(verbosity)


def test_generation_that_cannot_leave_room_for_a_prompt_is_refused_naming_the_task(tmp_path):
    """triviaqa generates up to 32 tokens: a 32-position model has no room left for the question. The main job's
    sweep (skip_unfittable) lists it as skipped instead of failing."""
    from hf_gpt_custom import GPTCustomTokenizerFast
    from hf_gpt_custom.eval.fewshot import ContextTooShortError
    from tests.helpers import save_tiny_model

    tokenizer = GPTCustomTokenizerFast.bytes_only()
    save_tiny_model(tmp_path / "m32", len(tokenizer), n_positions=32, seed=0, bos_token_id=tokenizer.eos_token_id,
                    eos_token_id=tokenizer.eos_token_id)
    tokenizer.save_pretrained(tmp_path / "m32")
    with pytest.raises(ContextTooShortError, match=r"task triviaqa at K=0: it generates up to 32 tokens.*context of "
                                                    r"32 tokens"):
        runner.evaluate(str(tmp_path / "m32"), tasks=["triviaqa"], limit=2, show_progress=False)
    results = runner.evaluate(str(tmp_path / "m32"), tasks=["triviaqa"], limit=2, show_progress=False, skip_unfittable=True)
    assert [(row["task"], row["num_fewshot"]) for row in results.skipped] == [("triviaqa", 0)]


@pytest.mark.parametrize("show_progress, tqdm_disable, shown", [
    (True, None, True), (True, "1", False), (False, None, False)])
def test_the_progress_bars_honour_show_and_tqdm_disable(show_progress, tqdm_disable, shown):
    """tqdm reads TQDM_DISABLE when it is imported, for arguments not given: a fresh process each."""
    import os
    import subprocess
    import sys

    env = {key: value for key, value in os.environ.items() if key != "TQDM_DISABLE"}
    if tqdm_disable is not None:
        env["TQDM_DISABLE"] = tqdm_disable
    code = ("from hf_gpt_custom.progress import progress_bar\n"
            f"bar = progress_bar(show={show_progress}, total=3, desc='scoring')\nbar.update(3)\nbar.close()\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr
    assert ("scoring:" in done.stderr) == shown


def test_every_task_and_k_is_checked_before_any_is_scored(tmp_path, monkeypatch):
    """`eval --tasks copa,triviaqa` on a 32-position model: triviaqa cannot fit, and that must be said before copa
    is scored — after it, the scoring was lost with the error. Nothing left to score is an error too."""
    from hf_gpt_custom import GPTCustomTokenizerFast
    from hf_gpt_custom.eval.fewshot import ContextTooShortError
    from tests.helpers import save_tiny_model

    tokenizer = GPTCustomTokenizerFast.bytes_only()
    save_tiny_model(tmp_path / "m32", len(tokenizer), n_positions=32, seed=0, bos_token_id=tokenizer.eos_token_id,
                    eos_token_id=tokenizer.eos_token_id)
    tokenizer.save_pretrained(tmp_path / "m32")
    scored = []
    real_score_task = runner.score_task
    monkeypatch.setattr(runner, "score_task", lambda plan, *args, **kw: (scored.append(plan.spec.task),
                                                                          real_score_task(plan, *args, **kw))[1])
    with pytest.raises(ContextTooShortError, match="task triviaqa"):
        runner.evaluate(str(tmp_path / "m32"), tasks=["copa", "triviaqa"], limit=2, show_progress=False)
    assert scored == []
    with pytest.raises(UserError, match=r"nothing to evaluate: task wikitext .*K=0 only \(K=1\)"):
        runner.evaluate(str(tmp_path / "m32"), tasks=["wikitext"], shots=[1], limit=2, show_progress=False)
    with pytest.raises(UserError, match=r"batch_size=0 must be a positive number"):
        runner.evaluate(str(tmp_path / "m32"), tasks=["copa"], limit=2, batch_size=0, show_progress=False)


def test_a_fine_tuned_task_head_folder_is_refused_naming_the_model_to_evaluate(tmp_path, capsys):
    """`eval --model <fine-tuned folder>` loaded the classifier as a bare LM (head dropped) and its tokenizer put the
    task template around every context and continuation: COPA scored on those, without a word."""
    import json

    folder = tmp_path / "ft" / "final"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt_custom",
                                                    "architectures": ["GPTCustomForSequenceClassification"]}))
    (folder / "model.safetensors").write_bytes(b"")  # refused on its config, before any weight is read
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--model", str(folder), "--tasks", "copa", "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert f"{folder} holds a fine-tuned GPTCustomForSequenceClassification" in err
    assert "pass the folder it was fine-tuned from (its init_from)" in err
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_is_evaluated_with_the_tokenizer_folder_given(tmp_path, monkeypatch, capsys):
    """A checkpoint holds no tokenizer: the error named evaluate(..., tokenizer=) from Python, which the CLI could not
    pass. --tokenizer reaches the loader, and the error names it."""
    model = tmp_path / "run" / "checkpoints" / "step_000002"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "gpt_custom"}')
    (model / "model.safetensors").write_text("")
    base = ["eval", "--model", str(model), "--tasks", "copa", "--out", str(tmp_path / "out")]
    with pytest.raises(MissingFileError, match=r"pass the folder that holds it: eval --tokenizer <folder> \(a run's "
                                               r"checkpoint: <run>/tokenizer\)"):
        runner.check_tokenizer_files(model)
    seen = {}

    def load(model, tokenizer, device, dtype):
        seen["tokenizer"] = tokenizer
        raise _Loaded("loaded")

    monkeypatch.setattr(runner, "load_model_and_tokenizer", load)
    with pytest.raises(_Loaded):
        main([*base, "--tokenizer", str(tmp_path / "run" / "tokenizer")])
    assert seen["tokenizer"] == str(tmp_path / "run" / "tokenizer")


def test_a_tokenizer_other_than_the_model_folders_own_is_refused(tiny_model_folder, tmp_path, capsys):
    """`eval --tokenizer` with a vocabulary the model was not trained with scored other ids without a word (a smaller
    vocabulary always; a larger one only until an id passed the embedding). The folder's own, given again, is fine."""
    import shutil

    from hf_gpt_custom import GPTCustomTokenizerFast

    other = tmp_path / "bytes"
    GPTCustomTokenizerFast.bytes_only().save_pretrained(other)
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--model", str(tiny_model_folder), "--tokenizer", str(other), "--tasks", "copa", "--limit", "2",
              "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"--tokenizer {other} has another vocabulary (257 tokens)" in err
    assert "drop --tokenizer (the one it was trained with is then used)" in err and not (tmp_path / "out").exists()
    shuffled = tmp_path / "shuffled"  # the same size, other strings behind the ids
    vocab = GPTCustomTokenizerFast.from_pretrained(str(tiny_model_folder)).get_vocab()
    with pytest.raises(UserError, match=rf"has another vocabulary \(the same {len(vocab)} ids for other tokens\) than "
                                        rf"the tokenizer {tiny_model_folder} was saved with, so the model"):
        runner.refuse_another_tokenizer(tiny_model_folder, _SwappedVocabulary(vocab, shuffled), tiny_model_folder)
    same = tmp_path / "same"
    shutil.copytree(tiny_model_folder, same)
    _, given, _ = runner.load_model_and_tokenizer(str(tiny_model_folder), str(same), None, "float32")
    assert given.name_or_path == str(same)


def test_a_benchmark_whose_data_file_is_empty_is_an_error_not_a_nan_table(tiny_model_folder, shared_data_dir,
                                                                         tmp_path, capsys):
    """An emptied data file gave a table row `| copa | 0 | acc | nan |` and exit 0."""
    data = tmp_path / "data" / "copa"
    data.mkdir(parents=True)
    for file in (shared_data_dir / "copa").glob("*.jsonl"):
        (data / file.name).write_text("")
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--model", str(tiny_model_folder), "--tasks", "copa", "--data-dir", str(data.parent), "--out",
              str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"task copa has no documents in {data.parent} (its data file is empty)" in err
    assert not (tmp_path / "out").exists()


class _SwappedVocabulary:
    """A tokenizer's stand-in with `vocab`'s size and two of its ids swapped."""

    def __init__(self, vocab: dict[str, int], name):
        first, second = sorted(vocab, key=vocab.get)[:2]
        self.vocab, self.name_or_path = {**vocab, first: vocab[second], second: vocab[first]}, str(name)

    def get_vocab(self) -> dict[str, int]:
        return self.vocab

    def __len__(self) -> int:
        return len(self.vocab)


@pytest.mark.parametrize("limit", [0.1, 0.33, 0.5, 0.999, 1, 5, 300, 2.0])
@pytest.mark.parametrize("total", [1, 7, 100, 500])
def test_a_limit_scores_as_many_documents_as_lm_evals_limit(limit, total):
    """lm-eval's --limit is a count or, below 1, a fraction of the documents rounded up; `eval --limit 0.1` was an
    argparse error here. Reference: lm-eval's own get_sample_size (it slices the documents to what it returns)."""
    from types import SimpleNamespace

    from lm_eval.evaluator_utils import get_sample_size

    expected = min(get_sample_size(SimpleNamespace(eval_docs=[None] * total), limit), total)
    assert runner.documents_to_score(limit, total) == expected


@pytest.mark.parametrize("limit", [0, -1, 0.0, 1.5, 2.5, -0.5, "10"])
def test_a_limit_that_is_neither_a_count_nor_a_fraction_is_one_line(limit, tiny_model_folder):
    with pytest.raises(UserError, match=r"must be a number of documents \(300\) or a fraction"):
        runner.evaluate(str(tiny_model_folder), tasks=["copa"], limit=limit, show_progress=False)


def test_eval_limit_as_a_fraction_scores_that_share_of_each_task(tiny_model_folder, tmp_path, capsys):
    import json

    main(["eval", "--model", str(tiny_model_folder), "--tasks", "copa", "--limit", "0.05", "--device", "cpu",
          "--out", str(tmp_path)])
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["config"]["limit"] == 0.05 and {row["n"] for row in results["results"]} == {5}  # of COPA's 100
    with pytest.raises(SystemExit):
        main(["eval", "--model", str(tiny_model_folder), "--tasks", "copa", "--limit", "a tenth", "--out",
              str(tmp_path / "x")])
    assert "expected a number of documents like 300 or a fraction like 0.1, got 'a tenth'" in capsys.readouterr().err


@pytest.mark.parametrize("given, parsed", [("300", 300), ("300.0", 300), ("0.1", 0.1), ("1e2", 100)])
def test_a_whole_limit_is_recorded_as_a_count(given, parsed):
    from hf_gpt_custom.cli import _count_or_fraction

    value = _count_or_fraction(given)
    assert value == parsed and type(value) is type(parsed)  # results.json and the card show 300, not 300.0
