"""The model card: front-matter the Hub parses back (model-index round trip), and every section filled from the run.

`make_tiny_run` (tests/helpers.py) fabricates a finished run folder (STYLE §11) as training leaves it — absolute
local paths in config.yaml and training_summary.json, a tokenizer_config.json with transformers' load-time keys — from a
tiny model saved with save_pretrained, and eval results with eval/report.py's row keys.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huggingface_hub import EvalResult, ModelCard, metadata_load
from huggingface_hub.repocard_data import model_index_to_eval_results

from tests.helpers import RESULT_ROWS, make_tiny_run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    return make_tiny_run(tmp_path_factory.mktemp("runs") / "tiny-shakespeare")


def test_card_metadata_parses_back_with_huggingface_hub(tiny_run, tmp_path):
    from hf_gpt_custom.model_cards.card import build_model_card

    path = tmp_path / "README.md"
    build_model_card(tiny_run).save(path)

    metadata = metadata_load(path)
    assert metadata["library_name"] == "transformers"
    assert metadata["pipeline_tag"] == "text-generation"
    assert metadata["license"] == "apache-2.0"
    assert metadata["datasets"] == ["karpathy/tiny_shakespeare"]
    assert {"hf-gpt-custom", "gpt_custom", "text-generation"} <= set(metadata["tags"])

    # Every results.json row, by hand: (task, Hub dataset, config, metric, K, value rounded to 4 places).
    expected = [
        ("lambada", "EleutherAI/lambada_openai", "default", "acc", 0, 0.125),
        ("lambada", "EleutherAI/lambada_openai", "default", "perplexity", 0, 4321.9877),
        ("lambada", "EleutherAI/lambada_openai", "default", "acc", 3, 0.1875),
        ("arc_easy", "allenai/ai2_arc", "ARC-Easy", "acc_norm", 0, 0.3125),
        ("arc_easy", "allenai/ai2_arc", "ARC-Easy", "acc_norm", 3, 0.25),
    ]
    model_name, parsed = model_index_to_eval_results(metadata["model-index"])
    assert model_name == "tiny-shakespeare"
    assert [
        (r.task_name, r.dataset_type, r.dataset_config, r.metric_type, r.metric_args["num_fewshot"], r.metric_value)
        for r in parsed
    ] == expected
    assert all(r.task_type == "text-generation" for r in parsed)


def test_model_index_round_trip_equals_what_went_in(tiny_run, tmp_path):
    from hf_gpt_custom.model_cards.card import build_eval_results, build_model_card

    path = tmp_path / "README.md"
    build_model_card(tiny_run).save(path)
    went_in = build_eval_results(RESULT_ROWS, model_name="tiny-shakespeare", limit=16)  # the tiny run's --limit
    assert len(went_in) == len(RESULT_ROWS)  # one EvalResult per row

    loaded = ModelCard.load(path)
    assert loaded.data.model_name == "tiny-shakespeare"
    assert loaded.data.eval_results == went_in
    assert model_index_to_eval_results(metadata_load(path)["model-index"]) == ("tiny-shakespeare", went_in)


def test_two_k_of_one_metric_stay_two_results():
    from hf_gpt_custom.model_cards.card import build_eval_results
    from huggingface_hub.repocard_data import eval_results_to_model_index

    rows = [dict(RESULT_ROWS[0], num_fewshot=k, value=0.1 * (k + 1)) for k in (0, 1, 5)]
    results = build_eval_results(rows, model_name="m")
    _, back = model_index_to_eval_results(eval_results_to_model_index("m", results))
    assert [(r.metric_args["num_fewshot"], r.metric_value, r.metric_name) for r in back] == [
        (0, 0.1, "acc (0-shot)"), (1, 0.2, "acc (1-shot)"), (5, 0.6, "acc (5-shot)"),
    ]


def test_two_tasks_on_one_dataset_each_name_their_task_in_the_model_index():
    """copa and a task file of one's own on the same Hub split became one model-index entry named copa, holding both
    scores as "acc (0-shot)" (0.57 and 0.54): nothing said which was copa's. Reference: huggingface_hub's own parser
    of the model-index; a dataset scored by one task keeps its plain names."""
    from hf_gpt_custom.model_cards.card import build_eval_results
    from huggingface_hub.repocard_data import eval_results_to_model_index

    copa = {"dataset": {"path": "super_glue", "name": "copa", "split": "validation"}, "num_fewshot": 0,
            "metric": "acc", "n": 100}
    rows = [{**copa, "task": "copa", "value": 0.57}, {**copa, "task": "copa_alt", "value": 0.54},
            {**RESULT_ROWS[0], "value": 0.5}]
    _, back = model_index_to_eval_results(eval_results_to_model_index("m", build_eval_results(rows, model_name="m")))
    named = {(r.metric_name, r.metric_args.get("task"), r.metric_value) for r in back}
    assert {("copa: acc (0-shot)", "copa", 0.57), ("copa_alt: acc (0-shot)", "copa_alt", 0.54)} <= named
    assert ("acc (0-shot)", None, 0.5) in named


def test_a_score_on_the_first_documents_only_says_so_in_the_model_index(tmp_path):
    """benchmark_limit=4 published `acc: 1.0` on COPA's validation split as if scored on all of it."""
    run_dir = make_tiny_run(tmp_path / "run")
    payload = json.loads((run_dir / "eval" / "results.json").read_text())
    assert payload["config"]["limit"] == 16  # make_tiny_run's eval scored the first 16 documents
    path = tmp_path / "README.md"
    from hf_gpt_custom.model_cards.card import build_model_card

    build_model_card(run_dir).save(path)
    _, results = model_index_to_eval_results(metadata_load(path)["model-index"])
    rows = {(row["task"], row["num_fewshot"], row["metric"]): row for row in payload["results"]}
    assert results and all(rows[(r.task_name, r.metric_args["num_fewshot"], r.metric_type)]["n_truncated"] == 0
                           for r in results if "prompts_cut_to_fit" not in r.metric_args)
    uncut = [r for r in results if "prompts_cut_to_fit" not in r.metric_args]
    assert len(uncut) == 4 and all(r.metric_args == {"num_fewshot": r.metric_args["num_fewshot"], "limit": 16}
                                   for r in uncut)
    assert all(r.metric_name == f"{r.metric_type} ({r.metric_args['num_fewshot']}-shot, first "
                                 f"{rows[(r.task_name, r.metric_args['num_fewshot'], r.metric_type)]['n']} documents)"
               for r in uncut)


def test_a_k_shot_score_whose_prompts_were_cut_says_how_many_in_the_model_index(tmp_path):
    """hellaswag at K=2 dropped examples for all 6 documents; the model-index still filed "acc (2-shot)", equal to
    the 0-shot score, with nothing to say it was mostly a 1- or 0-shot one. The count is results.json's
    n_truncated (the table's last column), read back through huggingface_hub's own parser."""
    run_dir = make_tiny_run(tmp_path / "run")
    path = tmp_path / "README.md"
    from hf_gpt_custom.model_cards.card import build_model_card

    build_model_card(run_dir).save(path)
    _, results = model_index_to_eval_results(metadata_load(path)["model-index"])
    (cut,) = [r for r in results if "prompts_cut_to_fit" in r.metric_args]
    assert (cut.task_name, cut.metric_type, cut.metric_args) == (
        "lambada", "acc", {"num_fewshot": 3, "limit": 16, "prompts_cut_to_fit": 2})  # RESULT_ROWS: 2 of 16 cut
    assert cut.metric_name == "acc (3-shot, first 16 documents, 2 of 16 documents cut to fit)"


def test_a_score_on_a_sample_of_the_split_says_so_in_the_model_index():
    """triviaqa's local file holds 3,000 of validation's 17,944 questions and was filed as the whole split."""
    from hf_gpt_custom.model_cards.card import build_eval_results
    from huggingface_hub.repocard_data import eval_results_to_model_index

    dataset = {"path": "mandarjoshi/trivia_qa", "name": "rc.nocontext", "split": "validation", "sample_of_split": True}
    row = {"task": "triviaqa", "dataset": dataset, "num_fewshot": 0, "metric": "exact_match", "value": 0.01,
           "n": 3000, "n_truncated": 0}
    whole = {**row, "dataset": {**dataset, "sample_of_split": None}}
    _, back = model_index_to_eval_results(eval_results_to_model_index("m", build_eval_results([row], "m")))
    assert [(r.metric_name, r.metric_args) for r in back] == [
        ("exact_match (0-shot, a 3,000-document sample of the split)", {"num_fewshot": 0, "sample_of_split": True})]
    (limited,) = build_eval_results([{**row, "n": 6}], "m", limit=6)
    assert (limited.metric_name, limited.metric_args) == (
        "exact_match (0-shot, first 6 documents of a sample of the split)",
        {"num_fewshot": 0, "limit": 6, "sample_of_split": True})
    assert build_eval_results([whole], "m")[0].metric_name == "exact_match (0-shot)"
    (fraction,) = build_eval_results([{**row, "n": 300}], "m", limit=0.1)  # eval --limit 0.1, as lm-eval's
    assert (fraction.metric_name, fraction.metric_args) == (
        "exact_match (0-shot, first 300 documents of a sample of the split)",
        {"num_fewshot": 0, "limit": 300, "sample_of_split": True})


def _wikitext_row(sha256: str, metric: str = "word_perplexity") -> dict:
    return {"task": "wikitext", "num_fewshot": 0, "metric": metric, "value": 812.5, "stderr": None,
            "n": 2, "higher_is_better": False, "n_truncated": 0,
            "dataset": {"path": "EleutherAI/wikitext_document_level", "name": "wikitext-2-raw-v1", "split": "test",
                        "local_files_sha256": [sha256]}}


@pytest.mark.parametrize("recorded", ["summary", "older-run", "init-from"],
                         ids=["summary-records-the-files", "older-run-data-still-there", "through-init-from"])
def test_a_benchmark_scored_on_the_training_files_is_named_and_left_out_of_the_model_index(tmp_path, caplog,
                                                                                           recorded):
    """finetune_pretrain_wikitext2.yaml trains on wiki.test.raw; with benchmark_tasks=[wikitext] its export published
    WikiText-2's test perplexity in the model-index as a held-out score, the card never saying the documents were
    trained on. The file's sha256 is computed here by hand; a run from before the summary recorded it is checked
    against its training file where that still is."""
    import hashlib
    import logging

    from hf_gpt_custom.model_cards.card import build_model_card

    if recorded == "init-from":  # continued from a model trained on the files (finetune_pretrain_wikitext2's)
        base = make_tiny_run(tmp_path / "base" / "run", with_eval=False)
        base_summary = json.loads((base / "training_summary.json").read_text())
        trained_sha256 = hashlib.sha256(Path(base_summary["dataset"]).read_bytes()).hexdigest()
        (base / "training_summary.json").write_text(json.dumps({**base_summary,
                                                                "dataset_files_sha256": [trained_sha256]}))
        run_dir = make_tiny_run(tmp_path / "run", init_from=str(base / "final"))
        summary_path = run_dir / "training_summary.json"
        summary = json.loads(summary_path.read_text())
        summary["dataset_files_sha256"] = ["f" * 64]  # its own data: another file
        summary_path.write_text(json.dumps(summary))
    else:
        run_dir = make_tiny_run(tmp_path / "run")
        summary_path = run_dir / "training_summary.json"
        summary = json.loads(summary_path.read_text())
        trained_sha256 = hashlib.sha256(Path(summary["dataset"]).read_bytes()).hexdigest()
    if recorded == "summary":
        summary["dataset_files_sha256"] = [trained_sha256]
        summary_path.write_text(json.dumps(summary))
    results_path = run_dir / "eval" / "results.json"
    payload = json.loads(results_path.read_text())
    payload["results"] = payload["results"] + [_wikitext_row(trained_sha256, "bits_per_byte"),
                                               _wikitext_row("0" * 64) | {"task": "wikitext_other"}]
    results_path.write_text(json.dumps(payload))

    with caplog.at_level(logging.WARNING):
        card = build_model_card(run_dir)
    card.save(tmp_path / "README.md")
    _, results = model_index_to_eval_results(metadata_load(tmp_path / "README.md")["model-index"])
    tasks = {r.task_name for r in results}
    assert "wikitext" not in tasks and {"wikitext_other", "lambada", "arc_easy"} <= tasks
    assert "bits_per_byte" not in metadata_load(tmp_path / "README.md")["metrics"]  # only the left-out task's
    text = " ".join(card.text.split())
    assert "**Scored on training data:** wikitext scored documents this model was trained on" in text
    assert "It is left out of the `model-index`" in text and "(there without those scored on training data)" in text
    assert "wikitext_other" not in text.split("**Scored on training data:**")[1].split(".")[0]
    assert "wikitext scored documents this model was trained on" in caplog.text


def test_a_run_that_did_not_train_on_a_benchmark_has_no_such_sentence(tmp_path):
    from hf_gpt_custom.model_cards.card import build_model_card

    text = build_model_card(make_tiny_run(tmp_path / "run")).text
    assert "Scored on training data" not in text and "without those scored on training data" not in text


def test_a_limit_above_the_benchmarks_size_states_the_documents_scored():
    """benchmark_limit=300 on COPA's 100 documents published `limit: 300` beside the name "first 100 documents"."""
    from hf_gpt_custom.model_cards.card import build_eval_results

    rows = [{**RESULT_ROWS[0], "task": "copa", "metric": "acc", "n": 100}]
    (result,) = build_eval_results(rows, model_name="tiny", limit=300)
    assert result.metric_args == {"num_fewshot": 0, "limit": 100} and "first 100 documents" in result.metric_name


@pytest.mark.parametrize("protocol, said", [
    ("lm-eval", "scored as lm-evaluation-harness scores its own tasks (`--protocol lm-eval`)"),
    ("ours", "the project's protocol, whose K > 0 prompts differ from lm-evaluation-harness's"),
])
def test_the_card_and_the_table_say_which_protocol_scored_the_run(tmp_path, protocol, said):
    """Only results.json recorded it: a run card's LAMBADA K > 0 rows read as lm-eval-comparable."""
    from hf_gpt_custom.eval.report import format_table
    from hf_gpt_custom.model_cards.card import build_model_card

    run_dir = make_tiny_run(tmp_path / "run")
    results = run_dir / "eval" / "results.json"
    payload = json.loads(results.read_text())
    payload["config"]["protocol"] = protocol
    results.write_text(json.dumps(payload))
    text = " ".join(build_model_card(run_dir).text.split())
    assert said in text
    assert ("all K are kept and the prompt is cut from the left" in text) is (protocol == "lm-eval")
    assert ("examples are dropped (then the prompt cut)" in text) is (protocol == "ours")
    assert f"· protocol: {protocol}\n" in format_table(payload)


@pytest.mark.parametrize("bad_value", [None, float("inf")], ids=["null", "inf"])
def test_non_finite_value_is_in_the_table_but_not_the_model_index(tmp_path, bad_value):
    from hf_gpt_custom.model_cards.card import build_eval_results, build_model_card

    rows = [RESULT_ROWS[0], dict(RESULT_ROWS[1], value=bad_value)]  # eval/report.py writes non-finite values as null
    results = build_eval_results(rows, model_name="m")
    assert [r.metric_type for r in results] == ["acc"] and isinstance(results[0], EvalResult)

    run_dir = make_tiny_run(tmp_path / "run")
    payload = json.loads((run_dir / "eval" / "results.json").read_text())
    payload["results"] = rows
    (run_dir / "eval" / "results.json").write_text(json.dumps(payload))
    card = build_model_card(run_dir)
    shown = "nan" if bad_value is None else "inf"
    assert f"| lambada | 0 | perplexity ↓ | {shown} | – | 16 | 0 |" in card.text
    assert [r.metric_type for r in card.data.eval_results] == ["acc"]


def test_a_skipped_task_is_named_with_the_reason_evaluation_recorded(tmp_path):
    from hf_gpt_custom.model_cards.card import build_model_card

    run_dir = make_tiny_run(tmp_path / "run")
    payload = json.loads((run_dir / "eval" / "results.json").read_text())
    payload["skipped"] = [{"task": "boolq", "num_fewshot": 5, "reason": "5 examples need 900 tokens; n_positions is 64"}]
    (run_dir / "eval" / "results.json").write_text(json.dumps(payload))
    assert "Not evaluated: boolq at K=5 (5 examples need 900 tokens; n_positions is 64)." in build_model_card(run_dir).text


def test_card_body_has_every_section_filled_from_the_run(tiny_run):
    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.model_cards.card import build_model_card

    text = build_model_card(tiny_run, repo_id="alice/tiny-shakespeare").text
    for heading in ("## How to load it", "## Architecture", "## Tokenizer", "## Training data",
                    "## Training procedure", "## Evaluation", "## Intended use", "## Limitations and biases"):
        assert heading in text
    total = GPTCustomForCausalLM.from_pretrained(tiny_run / "final").num_parameters()
    assert f"| total | {total:,} |" in text  # parameter_breakdown()["total"] == num_parameters()
    # the textbook formula is named as a formula: it counts a learned position table this model may not have
    assert "| for comparison: GPT-2's textbook 12·d²·L + V·d + T·d" in text
    assert "with 257 tokens" in text  # the saved tokenizer's vocabulary
    assert "| `learning_rate` | 0.0006 |" in text and "| `block_size` | 64 |" in text and "| `seed` | 1337 |" in text
    assert "with 256 tokens per optimizer step" in text  # batch_size 4 × block_size 64
    assert "| final validation loss (nats/token) | 5.500 |" in text
    assert "![Training and validation loss](loss_curve.png)" in text
    assert "(shots_curve.png)" in text
    # One table line per results.json row, grouped by task then K.
    assert "| lambada | 3 | acc ↑ | 0.1875 | 0.1008 | 16 | 2 |" in text
    assert "| lambada | 0 | perplexity ↓ | 4321.9877 | – | 16 | 0 |" in text
    table_lines = [line for line in text.splitlines() if line.startswith(("| lambada |", "| arc_easy |"))]
    assert len(table_lines) == len(RESULT_ROWS)
    # Loading with and without the package.
    assert 'AutoModelForCausalLM.from_pretrained("alice/tiny-shakespeare", trust_remote_code=True)' in text
    assert "import hf_gpt_custom" in text


def test_card_of_an_unevaluated_run_says_so(tmp_path):
    from hf_gpt_custom.model_cards.card import build_model_card

    run_dir = make_tiny_run(tmp_path / "run", with_eval=False)
    card = build_model_card(run_dir)
    assert card.data.eval_results is None
    assert "model-index" not in card.data.to_dict()
    assert "has not been evaluated" in card.text
    assert "see the table" not in card.text  # the limitations pointed at a table the card did not have
    assert "see the table" in build_model_card(make_tiny_run(tmp_path / "evaluated")).text


def test_card_of_an_unfinished_run_names_the_missing_file(tmp_path):
    from hf_gpt_custom.model_cards.card import build_model_card

    with pytest.raises(FileNotFoundError, match=r"final/config.json not found"):
        build_model_card(tmp_path)


# --- the card tells the truth about this run ------------------------------------------------------------------------


def test_a_scratch_run_says_scratch_and_a_fine_tune_names_its_base(tmp_path):
    from hf_gpt_custom.model_cards.card import build_model_card

    scratch = build_model_card(make_tiny_run(tmp_path / "scratch", with_eval=False)).text
    assert "trained from scratch" in scratch and "Pre-trained from scratch (random initialisation)" in scratch
    assert "Fine-tuned" not in scratch and "fine-tuned from" not in scratch

    base = tmp_path / "models" / "gpt2-shakespeare-base"  # a local folder: named by its base name, not its path
    tuned = build_model_card(make_tiny_run(tmp_path / "tuned", with_eval=False, init_from=str(base))).text
    assert "fine-tuned from `gpt2-shakespeare-base`" in tuned
    assert "Fine-tuned from the weights of `gpt2-shakespeare-base`" in tuned
    assert "from scratch" not in tuned and str(tmp_path) not in tuned

    # a run's final/ is named with its run, as the fine-tuning card names it: "final" alone named no model (crossfeature)
    base = tmp_path / "runs" / "wiki-base" / "final"
    continued = build_model_card(make_tiny_run(tmp_path / "continued", with_eval=False, init_from=str(base))).text
    assert "fine-tuned from `wiki-base/final`" in continued and "`final`" not in continued


@pytest.mark.parametrize(("settings", "sentence"), [
    ({}, "Learning rate: linear warmup from 0 to 0.0006 over 2 steps, then cosine decay to 6e-05 (0.1 × the peak), "
         "reached as step 10 ends (`run_log.jsonl` gives the rate each step used)."),
    ({"warmup_steps": 0}, "Learning rate: no warmup; cosine decay to 6e-05 (0.1 × the peak), reached as step 10 "
                          "ends"),
    ({"min_lr_ratio": 1.0, "learning_rate": 0.001}, "Learning rate: linear warmup from 0 to 0.001 over 2 steps, "
                                                    "then constant at 0.001."),
    ({"min_lr_ratio": 0.0, "max_steps": 40}, "then cosine decay to 0 (0.0 × the peak), reached as step 40 ends"),
], ids=["warmup+cosine", "no-warmup", "constant", "to-zero"])
def test_the_schedule_sentence_is_the_configured_schedule(tmp_path, settings, sentence):
    """lr(step) = peak · (min_ratio + (1 - min_ratio) · ½(1 + cos π·progress)) after warmup (train.py's schedule):
    the card states peak, warmup and end value the way they were configured, worked out by hand above."""
    from hf_gpt_custom.model_cards.card import build_model_card

    text = " ".join(build_model_card(make_tiny_run(tmp_path / "run", with_eval=False, **settings)).text.split())
    assert sentence in text


def test_each_task_names_the_dataset_its_results_row_carries(tmp_path):
    """The dataset of a model-index entry comes from the results row (the task YAML's path/name/split). A row on
    local files only (an older results.json's plain path, a task YAML without a Hub path) has no Hub dataset id to
    name: it stays in the card's table and out of the model-index, instead of naming the task as a dataset."""
    from hf_gpt_custom.model_cards.card import build_model_card

    run_dir = make_tiny_run(tmp_path / "run")
    payload = json.loads((run_dir / "eval" / "results.json").read_text())
    payload["results"] = [
        dict(RESULT_ROWS[0], task="piqa", metric="acc", dataset={"path": "baber/piqa", "name": None, "split": "validation"}),
        dict(RESULT_ROWS[0], task="copa", metric="acc", dataset="copa/val.jsonl"),
        dict(RESULT_ROWS[0], task="mine", metric="acc", dataset={"path": None, "name": None, "split": "test"}),
    ]
    (run_dir / "eval" / "results.json").write_text(json.dumps(payload))
    card = build_model_card(run_dir)
    parsed = ModelCard(card.content).data.eval_results  # parsed back from the front matter
    assert [(r.task_name, r.dataset_type, r.dataset_config, r.dataset_split) for r in parsed] == [
        ("piqa", "baber/piqa", None, "validation"),
    ]
    assert "| copa |" in card.text and "| mine |" in card.text

    payload["results"] = payload["results"][1:]  # local rows only: no model-index at all
    (run_dir / "eval" / "results.json").write_text(json.dumps(payload))
    assert "model-index" not in build_model_card(run_dir).data.to_dict()


def test_the_card_names_every_code_file_that_ships_and_how_to_install(tiny_run):
    from hf_gpt_custom.publish_checks import remote_code_files
    from hf_gpt_custom.model_cards.card import build_model_card

    text = build_model_card(tiny_run, package_source="git+https://example.org/me/hf-gpt-custom@v1").text
    assert len(remote_code_files()) > 3
    for name in remote_code_files():
        assert f"`{name}`" in text
    assert "three" not in text and "pip install hf-gpt-custom" not in text
    assert 'pip install "git+https://example.org/me/hf-gpt-custom@v1"' in text
    assert "pads with `<|endoftext|>`" in text and "on the **left**" in text and "`model_max_length` = 64 tokens" in text
    assert 'target_modules=["c_attn", "c_proj", "c_fc"]' in text


def test_hyperparameter_rows_leave_out_what_the_metadata_says_does_not_change_training(tiny_run, monkeypatch):
    from hf_gpt_custom.training import config as train_config
    from hf_gpt_custom.model_cards.card import build_model_card

    assert "| `warmup_steps` | 2 |" in build_model_card(tiny_run).text
    monkeypatch.setattr(train_config, "settings_that_do_not_change_training", lambda: frozenset({"warmup_steps"}))
    text = build_model_card(tiny_run).text
    assert "| `warmup_steps` |" not in text and "| `learning_rate` | 0.0006 |" in text
    assert "| `benchmark_limit` | 16 |" in text  # no longer left out by a list of its own


def test_tokens_per_step_counts_accumulation_and_processes(tmp_path):
    """batch_size 4 × block_size 64 × 3 accumulation steps × 2 processes = 1,536 tokens per optimizer step."""
    from hf_gpt_custom.model_cards.card import build_model_card

    run_dir = make_tiny_run(tmp_path / "run", with_eval=False, gradient_accumulation_steps=3)
    summary = json.loads((run_dir / "training_summary.json").read_text())
    (run_dir / "training_summary.json").write_text(json.dumps({**summary, "num_processes": 2}))
    text = build_model_card(run_dir).text
    assert "with 1,536 tokens per optimizer step" in text and "2 processes" in text


@pytest.mark.parametrize(("seconds", "said"), [(12.4, "in 12 seconds"), (1.2, "in 1 second"), (498.0, "in 8.3 minutes"),
                                               (9000.0, "in 2.5 hours"), (None, "in an unrecorded time")])
def test_the_training_time_is_said_in_a_unit_that_shows_it(seconds, said):
    """A 12-second run said "in 0.0 minutes"."""
    from hf_gpt_custom.model_cards.card import _duration

    assert f"in {_duration(seconds)}" == said


@pytest.mark.parametrize(("count", "said"), [(1_234_567, "1.2M"), (2_500, "2.5K"), (987, "987"),
                                             (3_400_000_000, "3.4B"), (None, "an unknown number of")])
def test_parameter_and_token_counts_keep_one_decimal(count, said):
    """"A 1.2M-parameter model": rounded to whole units a 1.45M model would read as 1M (hand-computed values)."""
    from hf_gpt_custom.model_cards.card import _human_count

    assert _human_count(count) == said


def test_the_hyperparameters_leave_out_what_the_run_never_read(tmp_path):
    """A run given a tokenizer never reads tokenizer_vocab_size, and a local text file no Hub split or column: the
    card listed `tokenizer_vocab_size | 8192` (the YAML's unused value) while its Tokenizer section said 257 tokens,
    and `dataset_split | train` for a text file. The card follows the run's own rule (settings_without_effect); a
    run that trained its tokenizer keeps the row."""
    from hf_gpt_custom.model_cards.card import build_model_card

    run_dir = tmp_path / "runs" / "given-tokenizer"
    given = build_model_card(make_tiny_run(run_dir, with_eval=False, tokenizer=str(run_dir / "tokenizer"),
                                           tokenizer_vocab_size=8192, dataset_split="train", dataset_config="x",
                                           text_field="text")).text
    assert "with 257 tokens" in given  # the tokenizer the run used
    for never_read in ("tokenizer_vocab_size", "dataset_split", "dataset_config", "text_field"):
        assert f"| `{never_read}` |" not in given
    assert "| `block_size` | 64 |" in given and "| `learning_rate` |" in given
    trained = build_model_card(make_tiny_run(tmp_path / "runs" / "trained", with_eval=False, tokenizer=None,
                                             tokenizer_vocab_size=8192)).text
    assert "| `tokenizer_vocab_size` | 8192 |" in trained


def test_a_card_without_a_model_index_has_no_stray_model_name_key(tmp_path):
    """huggingface_hub keeps `model_name` (the model-index's name) as a top-level key when there is no model-index;
    no Hub metadata field has that name. Read back with huggingface_hub's metadata_load."""
    from hf_gpt_custom.model_cards.card import build_model_card

    build_model_card(make_tiny_run(tmp_path / "run", with_eval=False)).save(tmp_path / "README.md")
    metadata = metadata_load(tmp_path / "README.md")
    assert "model_name" not in metadata and "model-index" not in metadata and metadata["license"] == "apache-2.0"


def test_the_cards_advice_for_a_long_prompt_generates_from_its_end(tmp_path):
    """The card said `truncation=True` cuts a long prompt to fit; it keeps the prompt's beginning (right-side
    truncation, as GPT-2's tokenizer) and fills the context, so the card's own generate() call then failed. The
    advice now given is followed here on an export and checked against the prompt's own token ids."""
    import re

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.hub import export_folder

    out = export_folder(make_tiny_run(tmp_path / "run", with_eval=False), tmp_path / "export")
    text = " ".join((out / "README.md").read_text(encoding="utf-8").split())
    tokenizer, model = AutoTokenizer.from_pretrained(out), AutoModelForCausalLM.from_pretrained(out)
    n = model.config.n_positions
    match = re.search(r'`tokenizer.truncation_side = "left"`, then `tokenizer\(text, truncation=True, '
                      r'max_length=(\d+) - max_new_tokens, return_tensors="pt"\)`', text)
    assert match and int(match.group(1)) == n == tokenizer.model_max_length
    prompt = "ROMEO: what light through yonder window breaks " * (n // 8)
    ids = tokenizer(prompt)["input_ids"]
    assert len(ids) > n
    max_new_tokens = 5
    tokenizer.truncation_side = "left"
    inputs = tokenizer(prompt, truncation=True, max_length=n - max_new_tokens, return_tensors="pt")
    assert inputs["input_ids"][0].tolist() == ids[-(n - max_new_tokens):]  # the prompt's end
    out_ids = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    assert out_ids.shape[1] == n
    tokenizer.truncation_side = "right"
    whole = tokenizer(prompt, truncation=True, return_tensors="pt")
    assert whole["input_ids"][0].tolist() == ids[:n]  # truncation=True alone: the beginning, the whole context
    with pytest.raises(UserError, match="n_positions"):
        model.generate(**whole, max_new_tokens=max_new_tokens, do_sample=False)



def test_a_benchmark_whose_hub_split_the_model_was_trained_on_is_left_out(tmp_path):
    """Training on EleutherAI/wikitext_document_level wikitext-2-raw-v1 *test* (a Hub dataset, no local file to
    hash) published its WikiText-2 test perplexity as held out. The row's dataset is compared with the training
    dataset, config and split (a review of this round)."""
    from hf_gpt_custom.model_cards.card import build_model_card

    run_dir = make_tiny_run(tmp_path / "run", dataset="EleutherAI/wikitext_document_level",
                            dataset_config="wikitext-2-raw-v1", dataset_split="test")
    results_path = run_dir / "eval" / "results.json"
    payload = json.loads(results_path.read_text())
    payload["results"] = payload["results"] + [{**_wikitext_row("0" * 64), "dataset": {
        "path": "EleutherAI/wikitext_document_level", "name": "wikitext-2-raw-v1", "split": "test"}}]
    results_path.write_text(json.dumps(payload))
    card = build_model_card(run_dir)
    card.save(tmp_path / "README.md")
    _, results = model_index_to_eval_results(metadata_load(tmp_path / "README.md")["model-index"])
    assert "wikitext" not in {r.task_name for r in results} and "**Scored on training data:** wikitext" in card.text
    other_split = make_tiny_run(tmp_path / "train-split", dataset="EleutherAI/wikitext_document_level",
                                dataset_config="wikitext-2-raw-v1", dataset_split="train")
    (other_split / "eval" / "results.json").write_text(json.dumps(payload))
    assert "Scored on training data" not in build_model_card(other_split).text  # trained on train, scored on test


def test_the_hyperparameters_give_the_dropout_the_model_trained_with(tmp_path):
    """Dropout is in no YAML row when left at GPT-2's default 0.1 (the `model:` section is shown as architecture,
    which has no dropout): the card said nothing of it. Reference: the folder's own config.json."""
    from hf_gpt_custom.model_cards.card import build_model_card

    run_dir = make_tiny_run(tmp_path / "run", with_eval=False)
    config = json.loads((run_dir / "final" / "config.json").read_text())
    config.update(resid_pdrop=0.0, embd_pdrop=0.05, attn_pdrop=0.1)
    (run_dir / "final" / "config.json").write_text(json.dumps(config))
    text = build_model_card(run_dir).text
    for row in ("| `model.resid_pdrop` | 0 |", "| `model.embd_pdrop` | 0.05 |", "| `model.attn_pdrop` | 0.1 |"):
        assert row in text
    assert "classifier_dropout" not in text


def test_a_streamed_runs_card_has_no_val_holdout_row(tmp_path):
    """A stream holds out its first documents whatever val_holdout says: the card listed `val_holdout | random`."""
    from hf_gpt_custom.model_cards.card import build_model_card

    streamed = build_model_card(make_tiny_run(tmp_path / "streamed", with_eval=False, streaming=True,
                                              val_holdout="random", val_fraction=0.1)).text
    assert "| `val_holdout` |" not in streamed and "| `val_fraction` |" not in streamed
    whole = build_model_card(make_tiny_run(tmp_path / "whole", with_eval=False, val_holdout="tail")).text
    assert "| `val_holdout` | tail |" in whole


@pytest.mark.parametrize("limit, said", [(300, "at most 300 documents per task"),
                                         (0.1, "the first 0.1 of each task's documents (rounded up)"), (None, None)])
def test_the_cards_words_for_the_limit_are_a_count_or_a_share(limit, said):
    """After `eval --limit 0.1` (lm-eval's fraction) the card said "at most 0.1 documents per task"."""
    from hf_gpt_custom.model_cards.card import _limit_text

    assert _limit_text(limit) == said


def test_the_cards_first_snippet_runs_as_written_on_a_short_context(tmp_path):
    """The snippet asked for 40 new tokens whatever the context: on a 32-position model (the prompt's 6 byte tokens
    + 40 > 32) it was refused past n_positions as written (the boundaries hunt; GPT-2 fails the same way). It is run
    here as the card writes it, the repo id replaced by the export folder."""
    import re
    import subprocess
    import sys

    from hf_gpt_custom import GPTCustomTokenizerFast
    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.model_cards.card import _example_max_new_tokens
    from tests.helpers import save_tiny_model

    assert _example_max_new_tokens("ROMEO:", 64) == 40  # where it fits, as before
    run = make_tiny_run(tmp_path / "run", with_eval=False)
    tokenizer = GPTCustomTokenizerFast.from_pretrained(run / "final")
    save_tiny_model(run / "final", len(tokenizer), n_positions=32, seed=0, bos_token_id=tokenizer.eos_token_id,
                    eos_token_id=tokenizer.eos_token_id)
    out = export_folder(run, tmp_path / "export")
    snippet = re.search(r"```python\n(.*?)```", (out / "README.md").read_text(encoding="utf-8"), re.S).group(1)
    assert "max_new_tokens=24," in snippet  # 32 positions - 6 byte tokens of "ROMEO:" - 2
    repo_id = re.search(r'from_pretrained\("([^"]+)"', snippet).group(1)
    result = subprocess.run([sys.executable, "-c", snippet.replace(f'"{repo_id}"', repr(str(out)))],
                            capture_output=True, text=True, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("ROMEO:")


def test_the_snippets_new_tokens_count_the_prompt_in_bytes_and_are_never_zero():
    """A prompt of non-ASCII text is more byte-level tokens than characters (counted in characters, the snippet asked
    for more than the context holds), and a context the prompt already fills still asks for one new token:
    transformers refuses max_new_tokens=0 (the mutation sweep). Reference: a byte-level tokenizer's count."""
    from transformers import GenerationConfig

    from hf_gpt_custom import GPTCustomTokenizerFast
    from hf_gpt_custom.model_cards.card import _example_max_new_tokens

    prompt = "ÉTÉ:"
    n_tokens = len(GPTCustomTokenizerFast.bytes_only()(prompt).input_ids)
    assert n_tokens == 6 > len(prompt)
    assert _example_max_new_tokens(prompt, 32) == 32 - n_tokens - 2  # room for a BOS and a leading-space piece
    assert _example_max_new_tokens("ROMEO:", 8) == _example_max_new_tokens("ROMEO:", 4) == 1
    with pytest.raises(ValueError, match="max_new_tokens"):
        GenerationConfig(max_new_tokens=0).validate()


def test_the_snippets_new_tokens_follow_the_context_length_not_another_field(tmp_path):
    """The card reads n_positions: a 40-position model 32 wide asks for 40 - 6 - 2 = 32 new tokens (the short-context
    test above has n_positions = n_embd = 32, where a wrong field gives the same count; the mutation sweep)."""
    import re

    from hf_gpt_custom import GPTCustomTokenizerFast
    from hf_gpt_custom.hub import export_folder
    from tests.helpers import save_tiny_model

    run = make_tiny_run(tmp_path / "run", with_eval=False)
    tokenizer = GPTCustomTokenizerFast.from_pretrained(run / "final")
    model = save_tiny_model(run / "final", len(tokenizer), n_positions=40, seed=0, bos_token_id=tokenizer.eos_token_id,
                            eos_token_id=tokenizer.eos_token_id)
    assert (model.config.n_positions, model.config.n_embd) == (40, 32)
    out = export_folder(run, tmp_path / "export")
    snippet = re.search(r"```python\n(.*?)```", (out / "README.md").read_text(encoding="utf-8"), re.S).group(1)
    assert "max_new_tokens=32," in snippet


@pytest.mark.parametrize("block, family_tag, head_note", [
    ({}, "gpt2", "the tied head is counted once"),
    ({"position_embedding_type": "rope", "norm_type": "rmsnorm", "mlp_type": "swiglu", "tie_word_embeddings": False},
     "llama", "the untied output head is a row of its own"),
    ({"norm_position": "post"}, None, "the tied head is counted once"),  # GPT-1's block: neither family's tag
    # one part of the family's block changed is another block (the mutation sweep: each tag held with one part
    # unread). Reference by hand: GPT-2's positions are learned (GPT2Model's wpe is an nn.Embedding), LLaMA's MLP is
    # SwiGLU (LlamaMLP's gate_proj)
    ({"position_embedding_type": "sinusoidal"}, None, "the tied head is counted once"),
    ({"position_embedding_type": "rope", "norm_type": "rmsnorm"}, None, "the tied head is counted once"),
    ({"position_embedding_type": "rope", "norm_type": "rmsnorm", "mlp_type": "swiglu", "norm_position": "post"}, None,
     "the tied head is counted once"),  # LLaMA's parts in a post-norm block: not LLaMA's (roundreview20)
])
def test_card_names_the_blocks_family_and_how_the_head_is_counted(tmp_path, block, family_tag, head_note):
    """The card's tags and its parameter note follow the block: a LLaMA-style model is tagged llama, not gpt2 (the
    Hub files models by these tags), and an untied head is not said to be tied."""
    from hf_gpt_custom.model_cards.card import build_model_card

    run = make_tiny_run(tmp_path / "runs" / "tiny")
    config_path = run / "final" / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), **block}))
    card = build_model_card(run)
    assert {"gpt2", "llama"} & set(card.data.tags) == ({family_tag} if family_tag else set())
    assert "GPT-family causal language model" in card.text and "GPT-2 family" not in card.text
    assert head_note in card.text
