"""End to end on a tiny model: evaluate() writes results.json (schema: eval/report.py's docstring and RESULT_KEYS),
table.md, examples.jsonl and shots_curve.png, and they parse back; the CLI calls the same function."""

from __future__ import annotations

import hashlib
import json

import pytest

from hf_gpt_custom.eval.report import RESULT_KEYS
from hf_gpt_custom.eval.task import TASKS_DIR
from hf_gpt_custom.eval.runner import evaluate


@pytest.fixture(scope="module")
def report_dir(tiny_model_folder, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("eval_out")
    results = evaluate(
        str(tiny_model_folder), tasks=["copa", "arc_easy", "wikitext", "triviaqa", "lambada"], shots=[0, 1], limit=3,
        batch_size=8, out_dir=out_dir, show_progress=False,
    )
    return out_dir, results


def test_results_json_has_the_documented_schema(report_dir, tiny_model_folder, shared_data_dir):
    out_dir, results = report_dir
    payload = json.loads((out_dir / "results.json").read_text())
    assert set(payload) == {"model", "model_weights_sha256", "config", "results", "skipped", "software",
                            "benchmarks_sha256", "data_dir", "scoring_code_sha256"}
    from hf_gpt_custom.eval.task import tasks_fingerprint
    from hf_gpt_custom.versions import scoring_code_sha256

    # one per task as given, the default data root (not recorded: a local path), the code as it is now
    assert payload["benchmarks_sha256"] == [tasks_fingerprint([name]) for name in payload["config"]["tasks"]]
    assert len(set(payload["benchmarks_sha256"])) == 5 and payload["data_dir"] is None
    assert payload["scoring_code_sha256"] == scoring_code_sha256()
    import importlib.metadata

    import torch
    import transformers

    # the versions that scored it, as lm-eval records its own (checked against the modules themselves)
    assert payload["software"]["transformers"] == transformers.__version__
    assert payload["software"]["torch"] == torch.__version__
    assert payload["software"]["hf-gpt-custom"] == importlib.metadata.version("hf-gpt-custom")
    from hf_gpt_custom.manifest import sha256_file

    weights = sorted(tiny_model_folder.glob("*.safetensors"))  # the fingerprint by hand: name=sha256; per file
    expected = hashlib.sha256("".join(f"{f.name}={sha256_file(f)};" for f in weights).encode()).hexdigest()
    assert payload["model_weights_sha256"] == expected
    assert payload["skipped"] == [{"task": "wikitext", "num_fewshot": 1,  # rolling log-likelihood has no examples
                                   "reason": "task wikitext (loglikelihood_rolling) is scored without examples: K=0 only"}]
    assert payload["config"] == {"tasks": ["copa", "arc_easy", "wikitext", "triviaqa", "lambada"], "shots": [0, 1],
                                 "limit": 3, "seed": 1234, "batch_size": 8, "protocol": "ours", "dtype": "float32",
                                 "device": "cpu", "processes": 1}
    for row in payload["results"]:
        assert tuple(row) == RESULT_KEYS
        assert row["n"] == 3 and isinstance(row["higher_is_better"], bool) and row["n_truncated"] >= 0
    keys = {(r["task"], r["num_fewshot"], r["metric"]) for r in payload["results"]}
    assert ("arc_easy", 1, "acc_uncond") in keys and ("triviaqa", 0, "f1") in keys
    # Perplexity has no few-shot: wikitext appears at K=0 only.
    assert {k for (t, k, _) in keys if t == "wikitext"} == {0}
    assert ("copa", 0, "acc") in keys
    assert payload["results"][0]["dataset"] == {"path": "aps/super_glue", "name": "copa", "split": "validation",
                                                "local_files_sha256": [_sha256_by_hand(shared_data_dir / "copa/val.jsonl")]}
    assert results.value("copa", "acc", 0) == next(r["value"] for r in payload["results"] if (r["task"], r["num_fewshot"], r["metric"]) == ("copa", 0, "acc"))


def _sha256_by_hand(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_each_row_names_the_files_it_scored_and_whether_they_sample_the_split(report_dir, shared_data_dir):
    """An export leaves a benchmark the model was trained on out of its model-index by these sha256 (wiki.test.raw
    trained on, then WikiText-2's test perplexity published as held out), and names triviaqa's 3,000-question file
    a sample of its 17,944-question validation split: both were published as the whole, held-out split."""
    out_dir, _ = report_dir
    datasets = {row["task"]: row["dataset"] for row in json.loads((out_dir / "results.json").read_text())["results"]}
    assert datasets["wikitext"]["local_files_sha256"] == [_sha256_by_hand(shared_data_dir / "wikitext-2-raw/wiki.test.raw")]
    assert datasets["triviaqa"] == {
        "path": "mandarjoshi/trivia_qa", "name": "rc.nocontext", "split": "validation", "sample_of_split": True,
        "local_files_sha256": [_sha256_by_hand(shared_data_dir / "triviaqa/triviaqa_sm_sub_llmfoundry.jsonl")]}
    assert (shared_data_dir / "triviaqa/triviaqa_sm_sub_llmfoundry.jsonl").read_bytes().count(b"\n") == 3000
    assert all("sample_of_split" not in info for task, info in datasets.items() if task != "triviaqa")


def test_examples_table_and_plot_are_written(report_dir):
    out_dir, _ = report_dir
    examples = [json.loads(line) for line in (out_dir / "examples.jsonl").read_text().splitlines()]
    copa = [e for e in examples if e["task"] == "copa" and e["num_fewshot"] == 1]
    assert len(copa) == 3
    for example in copa:
        assert example["prompt"].count("\n\n") == 1  # one solved example, then the question
        assert len(example["choices"]) == len(example["loglikelihoods"]) == 2 and example["gold"] in (0, 1)
        assert example["prediction"] == max(range(2), key=lambda i: example["loglikelihoods"][i])
    trivia = next(e for e in examples if e["task"] == "triviaqa")
    assert isinstance(trivia["prediction"], str) and "Onion" in trivia["gold"]
    table = (out_dir / "table.md").read_text()
    assert "| copa | 1 | acc ↑ |" in table and "| wikitext | 0 | bits_per_byte ↓ |" in table
    assert (out_dir / "shots_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_eval_writes_the_same_report_and_prints_the_table_and_the_paths(tiny_model_folder, tmp_path, capsys):
    from hf_gpt_custom.cli import main

    main(["eval", "--model", str(tiny_model_folder), "--tasks", "copa", "--shots", "0", "--limit", "3", "--out", str(tmp_path)])
    payload = json.loads((tmp_path / "results.json").read_text())
    assert [row["metric"] for row in payload["results"]] == ["acc"]
    out = capsys.readouterr().out
    assert (tmp_path / "table.md").read_text() in out
    assert "| copa | 0 | acc ↑ |" in out
    assert out.rstrip().splitlines()[-1] == "wrote " + ", ".join(
        str(tmp_path / name) for name in ("results.json", "table.md", "examples.jsonl", "shots_curve.png"))


def test_cli_unknown_task_exits_2_with_one_line(tiny_model_folder, tmp_path, capsys):
    from hf_gpt_custom.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--model", str(tiny_model_folder), "--tasks", "hellaswg", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "did you mean 'hellaswag'" in capsys.readouterr().err


def test_bad_arguments_fail_before_loading_the_model(tmp_path):
    with pytest.raises(ValueError, match="shots must be non-negative integers"):
        evaluate(str(tmp_path / "no-model"), tasks=["copa"], shots=[-1])
    with pytest.raises(ValueError, match="unknown task 'lambda'; did you mean 'lambada'"):
        evaluate(str(tmp_path / "no-model"), tasks=["lambda"])
    with pytest.raises(ValueError, match="shots lists 0 more than once; give each once"):  # `--shots 0,0`
        evaluate(str(tmp_path / "no-model"), tasks=["copa"], shots=[0, 5, 0])
    with pytest.raises(ValueError, match="tasks lists copa more than once"):
        evaluate(str(tmp_path / "no-model"), tasks=["copa", "piqa", "copa"])
    mine = tmp_path / "my_copa.yaml"  # another prompt, the same `task:` name: two rows "copa" nobody can tell apart
    mine.write_text(f"include: {TASKS_DIR / 'copa.yaml'}\ndoc_to_text: 'Premise: {{{{premise}}}}'\n")
    with pytest.raises(ValueError, match=rf"tasks copa, {mine} are all named copa \(their `task:` field\)"):
        evaluate(str(tmp_path / "no-model"), tasks=["copa", str(mine)])


def test_unfittable_k_is_an_error_unless_the_sweep_asks_to_skip_it(tmp_path, shared_data_dir):
    """BoolQ passages are ~150-600 tokens: a 128-token model cannot take even one example at K=1."""
    from hf_gpt_custom.eval.fewshot import ContextTooShortError

    from tests.helpers import build_tiny_model_folder

    folder = build_tiny_model_folder(tmp_path / "short", shared_data_dir, n_positions=128)
    with pytest.raises(ContextTooShortError, match="boolq.*cannot hold even one few-shot example"):
        evaluate(str(folder), tasks=["boolq"], shots=[1], limit=2, show_progress=False)
    results = evaluate(str(folder), tasks=["boolq", "copa"], shots=[0, 1], limit=2, show_progress=False,
                       skip_unfittable=True, out_dir=tmp_path / "out")
    assert [(s["task"], s["num_fewshot"]) for s in results.skipped] == [("boolq", 1)]
    assert {(r["task"], r["num_fewshot"]) for r in results.results} == {("boolq", 0), ("copa", 0), ("copa", 1)}
    payload = json.loads((tmp_path / "out" / "results.json").read_text())
    assert payload["skipped"][0]["task"] == "boolq"
    assert "Not evaluated: boolq at K=1" in (tmp_path / "out" / "table.md").read_text()


def test_one_renderer_formats_rows_by_hand():
    """Grouped by task then K whatever the row order; ↑/↓; four decimals, thousands separators for a long number,
    – for a missing stderr, nan for a null value; one sentence per skipped (task, K)."""
    from hf_gpt_custom.eval.report import format_results_table

    rows = [
        {"task": "wikitext", "num_fewshot": 0, "metric": "word_perplexity", "value": 123456.789, "stderr": None,
         "n": 2, "higher_is_better": False, "n_truncated": 0},
        {"task": "copa", "num_fewshot": 1, "metric": "acc", "value": 0.5, "stderr": 0.28867513, "n": 4,
         "higher_is_better": True, "n_truncated": 1},
        {"task": "wikitext", "num_fewshot": 0, "metric": "bits_per_byte", "value": None, "stderr": None, "n": 2,
         "higher_is_better": False, "n_truncated": 0},
        {"task": "copa", "num_fewshot": 0, "metric": "acc", "value": 0.75, "stderr": 0.25, "n": 4,
         "higher_is_better": True, "n_truncated": 0},
    ]
    skipped = [{"task": "boolq", "num_fewshot": 5, "reason": "5 examples need 900 tokens; n_positions is 64"}]
    assert format_results_table(rows, skipped).splitlines()[2:] == [
        "| wikitext | 0 | word_perplexity ↓ | 123,456.8 | – | 2 | 0 |",
        "| wikitext | 0 | bits_per_byte ↓ | nan | – | 2 | 0 |",
        "| copa | 0 | acc ↑ | 0.7500 | 0.2500 | 4 | 0 |",
        "| copa | 1 | acc ↑ | 0.5000 | 0.2887 | 4 | 1 |",
        "",
        "Not evaluated: boolq at K=5 (5 examples need 900 tokens; n_positions is 64).",
    ]


def test_the_rows_of_a_task_are_in_the_numeric_order_of_k():
    """GPT-3's curve (shots 0, 1, 2, 5, 10, 25) has two-digit K; every test used K <= 5, where sorting K as text
    (0, 10, 2, 25) agrees with numbers, so table.md and the card could show the 10-shot row where a reader looks for
    the 2-shot one (found by the mutsweep2 hunt). Reference: the integers, in order by hand."""
    from hf_gpt_custom.eval.report import format_results_table

    rows = [{"task": "copa", "num_fewshot": k, "metric": "acc", "value": 0.5 + k / 100, "stderr": 0.01, "n": 100,
             "higher_is_better": True, "n_truncated": 0} for k in (10, 0, 25, 2, 1, 5)]
    lines = format_results_table(rows).splitlines()[2:]
    assert [line.split(" | ")[1] for line in lines] == ["0", "1", "2", "5", "10", "25"]
    assert lines[4] == "| copa | 10 | acc ↑ | 0.6000 | 0.0100 | 100 | 0 |"


def test_the_card_shows_the_table_md_rows(report_dir, tmp_path):
    """table.md and the model card render the same rows with the same function: the card's lines are table.md's."""
    from hf_gpt_custom.model_cards.card import build_model_card
    from tests.helpers import make_tiny_run

    out_dir, _ = report_dir
    run_dir = make_tiny_run(tmp_path / "run")
    payload = json.loads((out_dir / "results.json").read_text())
    del payload["model_weights_sha256"]  # another model's scores: refused with it (test_hub_export), read as written
    (run_dir / "eval" / "results.json").write_text(json.dumps(payload))

    def result_lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("| ") and (" ↑ |" in line or " ↓ |" in line)]

    card_rows = result_lines(build_model_card(run_dir).text)
    table_rows = result_lines((out_dir / "table.md").read_text())
    assert card_rows == table_rows and len(table_rows) > 5


def test_an_out_folder_that_takes_no_file_is_refused_before_any_scoring(tmp_path, monkeypatch):
    """A read-only --out failed with a PermissionError traceback after every task had been scored."""
    import tempfile

    from hf_gpt_custom.eval import runner

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    monkeypatch.setattr(runner, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("the model was loaded"))
    out = tmp_path / "read_only" / "eval"
    with pytest.raises(ValueError, match=rf"cannot write to the --out folder {out}: {tmp_path} takes no new file "
                                         r"\(Permission denied\); choose an --out folder you can write"):
        evaluate(str(tmp_path / "no-model"), tasks=["copa"], out_dir=out)
    assert not out.parent.exists()


def test_a_report_killed_while_writing_leaves_the_previous_one_whole(report_dir, tmp_path, monkeypatch):
    """The four files were written in place, results.json first: a kill while the plot was drawn left a new
    results.json beside the previous evaluation's table, examples and curve. Now they appear together."""
    import shutil
    from types import SimpleNamespace

    from hf_gpt_custom.eval import report

    class Killed(BaseException):
        pass

    source, _ = report_dir
    out_dir = tmp_path / "eval"
    shutil.copytree(source, out_dir)
    before = {path.name: path.read_bytes() for path in out_dir.iterdir()}
    payload = json.loads(before["results.json"])
    other = SimpleNamespace(to_dict=lambda: {**payload, "model": "another model"}, examples=[{"doc": 1}])

    def killed(*args, **kwargs):
        raise Killed

    monkeypatch.setattr(report, "plot_shots_curve", killed)
    with pytest.raises(Killed):
        report.write_report(other, out_dir)
    assert {path.name: path.read_bytes() for path in out_dir.iterdir() if path.is_file()} == before
    monkeypatch.undo()
    report.write_report(other, out_dir)
    assert json.loads((out_dir / "results.json").read_text())["model"] == "another model"
    assert "another model" in (out_dir / "table.md").read_text()
    assert sorted(path.name for path in out_dir.iterdir()) == sorted(before)  # nothing left beside them


@pytest.mark.parametrize("edited", ["eval/scoring.py", "eval/lm_eval_tasks/gptc_data.py", "modeling_gpt_custom.py",
                                    "block_variants.py", "model_folder.py"])
def test_the_scoring_code_hash_changes_with_the_evaluation_and_the_model_code(edited, monkeypatch):
    """results.json's scoring_code_sha256 is what `run` compares to evaluate again after an upgrade (the package says
    0.1.0 at every commit): an edit of the scorer, the model or a module it imports must change it. A task file is
    not code (each scored one is in benchmarks_sha256): another task added or edited re-evaluates nothing."""
    from pathlib import Path

    from hf_gpt_custom.versions import scoring_code_sha256

    before = scoring_code_sha256()
    read_bytes = Path.read_bytes

    def edited_read(path):
        data = read_bytes(path)
        return data + b"\n# edited\n" if path.as_posix().endswith("/" + edited) else data

    monkeypatch.setattr(Path, "read_bytes", edited_read)
    assert scoring_code_sha256() != before


@pytest.mark.parametrize("edited", ["hf_gpt_custom/hub.py", "hf_gpt_custom/publish_checks.py", "model_cards/card.py",
                                    "model_cards/templates/model_card.md", "hf_gpt_custom/modeling_gpt_custom.py"])
def test_the_export_code_hash_changes_with_the_export_and_card_code(edited, monkeypatch):
    """An export's manifest records export_code_sha256, which `run` compares to export again after an upgrade that
    changed what export writes (the card kept an old snippet: the cachekeys hunt); the eval code is not in it."""
    from pathlib import Path

    from hf_gpt_custom.versions import export_code_sha256

    before = export_code_sha256()
    read_bytes = Path.read_bytes

    def edited_read(path, changed=edited):
        data = read_bytes(path)
        return data + b"\n# edited\n" if path.as_posix().endswith("/" + changed) else data

    monkeypatch.setattr(Path, "read_bytes", edited_read)
    assert export_code_sha256() != before
    monkeypatch.setattr(Path, "read_bytes", lambda path: edited_read(path, "eval/scoring.py"))
    assert export_code_sha256() == before


def test_the_scoring_code_hash_is_of_the_code_that_scored_not_the_code_when_the_report_is_written(
        tiny_model_folder, tmp_path, monkeypatch):
    """An upgrade during a long evaluation (a git pull in an editable install) recorded the new code's hash beside the
    old code's figures, and `run` then kept them (found by a review)."""
    from hf_gpt_custom import versions
    from hf_gpt_custom.eval import report

    write_report = report.write_report
    before = versions.scoring_code_sha256()

    def upgraded_while_scoring(results, out_dir):
        monkeypatch.setattr(versions, "scoring_code_sha256", lambda: "0" * 64)
        return write_report(results, out_dir)

    monkeypatch.setattr(report, "write_report", upgraded_while_scoring)
    evaluate(str(tiny_model_folder), tasks=["copa"], shots=[0], limit=2, out_dir=tmp_path, show_progress=False)
    assert json.loads((tmp_path / "results.json").read_text())["scoring_code_sha256"] == before


def test_a_non_finite_value_reads_back_as_what_was_measured(tmp_path):
    """results.json stores an infinite perplexity as null (strict JSON has no inf), and the table rebuilt from it (the
    model card's) said "nan", as if the log-likelihoods had overflowed. Reference: the values given to write_report."""
    from hf_gpt_custom.eval.report import format_results_table, write_report
    from hf_gpt_custom.eval.runner import Results

    def row(metric, value, stderr=None):
        return {"task": "wikitext", "dataset": None, "num_fewshot": 0, "metric": metric, "value": value,
                "stderr": stderr, "n": 2, "higher_is_better": False, "n_truncated": 0}

    # a perplexity's bootstrap stderr overflows before its value does (exp of a resample's mean): it read "–", the
    # mark of a metric with no stderr at all
    results = Results(model="m", config={"limit": None, "seed": 0},
                      results=[row("word_perplexity", float("inf")), row("bits_per_byte", float("nan")),
                               row("byte_perplexity", 2.5), row("perplexity", 1e300, float("inf"))])
    write_report(results, tmp_path)
    payload = json.loads((tmp_path / "results.json").read_text(),
                         parse_constant=lambda name: pytest.fail(f"results.json holds {name}: not strict JSON"))
    assert [r["value"] for r in payload["results"]] == [None, None, 2.5, 1e300]
    assert [r["stderr"] for r in payload["results"]] == [None] * 4
    assert [r.get("stderr_non_finite") for r in payload["results"]] == [None, None, None, "inf"]
    expected = ["| wikitext | 0 | word_perplexity ↓ | inf | – | 2 | 0 |",
                "| wikitext | 0 | bits_per_byte ↓ | nan | – | 2 | 0 |",
                "| wikitext | 0 | byte_perplexity ↓ | 2.5000 | – | 2 | 0 |",
                "| wikitext | 0 | perplexity ↓ | 1e+300 | inf | 2 | 0 |"]
    assert format_results_table(payload["results"]).splitlines()[2:6] == expected
    assert (tmp_path / "table.md").read_text().splitlines()[4:8] == expected


def test_a_huge_value_is_a_short_cell():
    """A perplexity near float's range printed every digit (a 375-character table cell)."""
    from hf_gpt_custom.eval.report import format_metric

    assert format_metric(1.0142320547350045e304) == "1.014e+304"
    assert format_metric(123456.789) == "123,456.8" and format_metric(2_000_000_000.0) == "2e+09"


def test_the_shots_curve_marks_a_point_whose_prompts_were_cut(tmp_path, monkeypatch):
    """copa's K=1 point was drawn as a 1-shot score although 15 of its 20 prompts had dropped their example to fit
    (the reports hunt); the table said so, the plot did not. Reference: the rows' own n_truncated."""
    import matplotlib.axes

    from hf_gpt_custom.eval.report import plot_shots_curve

    said = []
    real_annotate = matplotlib.axes.Axes.annotate
    monkeypatch.setattr(matplotlib.axes.Axes, "annotate",
                        lambda self, text, *args, **kwargs: said.append((self, text)) or real_annotate(
                            self, text, *args, **kwargs))

    def row(task, k, value, cut):
        return {"task": task, "dataset": None, "num_fewshot": k, "metric": "acc", "value": value, "stderr": 0.1,
                "n": 20, "higher_is_better": True, "n_truncated": cut}

    plot_shots_curve([row("copa", 0, 0.5, 0), row("copa", 1, 0.55, 15), row("piqa", 0, 0.6, 0),
                      row("piqa", 1, 0.62, 0)], tmp_path / "shots.png")
    assert [text for task, text in said if "cut" in text] == ["15 of 20 documents cut"]
    assert [axes.get_title() for axes, text in said if "cut" in text] == ["copa"]  # titled once the panel is drawn


def test_a_full_disk_while_writing_the_report_names_it_and_prints_the_scores(tmp_path, monkeypatch):
    """matplotlib's close raised ENOSPC with no file name: a bare traceback, and the scoring (hours, on a big model)
    was lost with it (the interrupts hunt). Now a one-line cause, and the table of the scores in the message."""
    import errno

    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.eval import report
    from hf_gpt_custom.eval.runner import Results

    row = {"task": "copa", "dataset": None, "num_fewshot": 0, "metric": "acc", "value": 0.625, "stderr": 0.1, "n": 8,
           "higher_is_better": True, "n_truncated": 0}
    results = Results(model="m", config={"limit": None, "seed": 0}, results=[row])

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report, "plot_shots_curve", full)
    with pytest.raises(UserError) as err:
        report.write_report(results, tmp_path / "eval")
    message = str(err.value)
    assert message.startswith(f"cannot write the evaluation report to {tmp_path / 'eval'}: No space left on device "
                              "(ENOSPC); free space on the disk of")
    assert "| copa | 0 | acc ↑ | 0.6250 | 0.1000 | 8 | 0 |" in message
    assert not (tmp_path / "eval" / ".report.tmp").exists() and not (tmp_path / "eval" / "results.json").exists()


@pytest.mark.parametrize("error", [OSError(28 - 1, "File too large"), PermissionError(30, "Read-only file system")],
                         ids=["size-limit", "read-only"])
def test_any_failed_report_write_keeps_the_scores_in_the_message(tmp_path, monkeypatch, error):
    """Only a full disk kept the scores: a size limit (EFBIG) or a folder made read-only meanwhile lost them in a
    bare traceback (the diskfull hunt)."""
    import errno

    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.eval import report
    from hf_gpt_custom.eval.runner import Results

    assert error.errno in (errno.EFBIG, errno.EROFS)
    row = {"task": "copa", "dataset": None, "num_fewshot": 0, "metric": "acc", "value": 0.625, "stderr": 0.1, "n": 8,
           "higher_is_better": True, "n_truncated": 0}

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(report, "plot_shots_curve", fail)
    with pytest.raises(UserError) as err:
        report.write_report(Results(model="m", config={"limit": None, "seed": 0}, results=[row]), tmp_path / "eval")
    assert str(err.value).startswith(f"cannot write the evaluation report to {tmp_path / 'eval'}: ")
    assert ("limits the size of one file" if error.errno == errno.EFBIG else "make ") in str(err.value)
    assert "| copa | 0 | acc ↑ | 0.6250 | 0.1000 | 8 | 0 |" in str(err.value)


def test_replacing_another_models_evaluation_says_so(tmp_path, caplog):
    """`eval --out X` replaced an earlier evaluation of another model in X without a word (the interrupts hunt;
    lm-eval writes a new timestamped file each time). The same model evaluated again replaces its own in silence."""
    from hf_gpt_custom.eval.report import write_report
    from hf_gpt_custom.eval.runner import Results

    row = {"task": "copa", "dataset": None, "num_fewshot": 0, "metric": "acc", "value": 0.5, "stderr": 0.1, "n": 8,
           "higher_is_better": True, "n_truncated": 0}

    def results(model, weights):
        return Results(model=model, config={"limit": None, "seed": 0}, results=[row], model_weights_sha256=weights)

    with caplog.at_level("WARNING", logger="hf_gpt_custom.eval.report"):
        write_report(results("runs/a/final", "aaa"), tmp_path)
        write_report(results("runs/a/final", "aaa"), tmp_path)
        assert caplog.text == ""
        write_report(results("runs/b/final", "bbb"), tmp_path)
        assert f"{tmp_path} held the evaluation of runs/a/final; it is replaced" in caplog.text
        caplog.clear()
        write_report(results("runs/b/final", "ccc"), tmp_path)  # the same folder, retrained since
        assert "held the evaluation of runs/b/final (other weights)" in caplog.text
        caplog.clear()
        # the same weights named by another path (`run` names final/ absolute, `eval --model` relative): the same
        # model, no warning (the roundreview10 hunt)
        write_report(results("/home/me/runs/b/final", "ccc"), tmp_path)
        assert caplog.text == ""


def test_replacing_the_same_models_scores_on_other_tasks_says_which(tmp_path, caplog):
    """`eval --tasks piqa --out X` after `eval --tasks copa --out X` deleted the copa scores in silence (the
    roundreview10 hunt). The warning names the task and shot count whose scores go; a run covering them is silent."""
    from hf_gpt_custom.eval.report import write_report
    from hf_gpt_custom.eval.runner import Results

    def row(task, shots):
        return {"task": task, "dataset": None, "num_fewshot": shots, "metric": "acc", "value": 0.5, "stderr": 0.1,
                "n": 8, "higher_is_better": True, "n_truncated": 0}

    def results(*rows):
        return Results(model="runs/a/final", config={"limit": None, "seed": 0}, results=list(rows),
                       model_weights_sha256="aaa")

    with caplog.at_level("WARNING", logger="hf_gpt_custom.eval.report"):
        write_report(results(row("copa", 0), row("copa", 1)), tmp_path)
        write_report(results(row("copa", 0), row("copa", 1), row("piqa", 0)), tmp_path)
        assert caplog.text == ""
        write_report(results(row("piqa", 0)), tmp_path)
        assert (f"{tmp_path} held this model's scores on copa (0-shot), copa (1-shot), which this evaluation does "
                "not include; they are replaced") in caplog.text


def test_asking_results_for_a_metric_they_lack_names_the_ones_they_hold():
    """`results.value("copa", "acc_norm")` on results without it raised a bare KeyError (the newcomer3 walk)."""
    from hf_gpt_custom.eval.runner import Results

    results = Results(model="m", config={}, results=[
        {"task": "copa", "metric": "acc", "num_fewshot": 0, "value": 0.5},
        {"task": "lambada", "metric": "perplexity", "num_fewshot": 0, "value": 9.0}])
    assert results.value("copa", "acc") == 0.5
    with pytest.raises(KeyError, match=r"no result for task=copa metric=acc_norm num_fewshot=0; the results hold "
                                       r"\(copa, acc, 0\), \(lambada, perplexity, 0\)"):
        results.value("copa", "acc_norm")
