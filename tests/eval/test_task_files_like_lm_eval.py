"""Task files a user writes the way lm-eval 0.4.13 reads them: the same YAML gives the same gold, few-shot answers,
generation scores and metrics here as in lm-eval's own ConfigurableTask (the reference), or is refused by name.
(Found by a custom-task hunt: a generation was always stripped, `doc_to_choice` was ignored by generate_until, and a
file without metric_list scored every request and reported nothing.)"""

from __future__ import annotations

import json
import logging

import pytest
import yaml

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.eval.output_types import OUTPUT_TYPES
from hf_gpt_custom.eval.requests import Request, ScoredRequest
from hf_gpt_custom.eval.task import load_task

DOCS = [{"q": "The sky is", "choices": ["blue", "green", "red"], "label": 0, "ans": "blue", "n": 7},
        {"q": "Grass is", "choices": ["purple", "green", "gold"], "label": 1, "ans": "green", "n": 12}]
GENERATE = {"task": "mine", "output_type": "generate_until", "doc_to_text": "Q: {{q}}\nA:",
            "generation_kwargs": {"until": ["\n"], "max_gen_toks": 8, "do_sample": False}}


def _both(tmp_path, fields: dict):
    """(our TaskSpec, lm-eval's ConfigurableTask) of one YAML over DOCS in a local JSONL file."""
    from lm_eval.api.task import ConfigurableTask

    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(doc) + "\n" for doc in DOCS))
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({**fields, "data_files": {"test": str(data)}}))
    spec = load_task(str(tmp_path / "mine.yaml"))
    logging.disable(logging.WARNING)
    try:
        theirs = ConfigurableTask(config={**fields, "test_split": "test", "dataset_path": "json", "dataset_kwargs": {
            "data_files": {"test": str(data)}, "cache_dir": str(tmp_path / "cache")}})
    finally:
        logging.disable(logging.NOTSET)
    return spec, theirs


def _our_scores(spec, doc, generation):
    scored = ScoredRequest(Request(0, "", "", request_type="generate_until"), 0.0, True, 1, generation=generation)
    values, _ = OUTPUT_TYPES["generate_until"].doc_metric_values(spec, doc, [scored])
    return {name: values[name] for name in spec.metric_names}


@pytest.mark.parametrize("fields, generations", [
    ({"doc_to_target": "ans", "metric_list": [{"metric": "exact_match"}]}, [" blue", "green "]),  # no filter_list
    ({"doc_to_target": "ans", "metric_list": [{"metric": "exact_match"}], "filter_list": [
        {"name": "remove_whitespace", "filter": [{"function": "remove_whitespace"}, {"function": "take_first"}]}]},
     [" blue", "green "]),
    ({"doc_to_target": "{{label}}", "doc_to_choice": "choices"}, ["blue", "gold"]),  # mmlu's *_generative layout
    ({"doc_to_target": "label", "doc_to_choice": "choices", "metric_list": [{"metric": "exact_match"}]},
     ["blue", "green"]),
    ({"doc_to_target": "n", "metric_list": [{"metric": "exact_match"}]}, ["7", "13"]),  # a number as the gold
], ids=["no-filter", "remove-whitespace", "generative-choices", "choice-index-field", "number-target"])
def test_a_generation_scores_as_lm_eval_scores_it(tmp_path, fields, generations):
    spec, theirs = _both(tmp_path, {**GENERATE, **fields})
    for doc, their_doc, generation in zip(spec.docs("test", tmp_path), theirs.test_docs(), generations):
        responses = [[generation]]
        for make_filter in theirs._filters[0].filters:  # lm-eval's evaluator filters before process_results
            responses = [r if isinstance(r, str) else list(r) for r in make_filter().apply(responses, [their_doc])]
        filtered = responses[0] if isinstance(responses[0], str) else responses[0][0]
        assert _our_scores(spec, doc, generation) == theirs.process_results(their_doc, [filtered])


def test_a_generative_choice_tasks_few_shot_answer_is_the_choice_text(tmp_path):
    """lm-eval renders a solved example's answer as choices[index]; the example read `A: 1` here."""
    spec, theirs = _both(tmp_path, {**GENERATE, "doc_to_target": "{{label}}", "doc_to_choice": "choices"})
    for doc, their_doc in zip(spec.docs("test", tmp_path), theirs.test_docs()):
        ((_, answer),) = [(None, theirs.doc_to_choice(their_doc)[theirs.doc_to_target(their_doc)])]
        assert spec.fewshot_example(doc) == spec.text(doc) + spec.target_delimiter + answer


@pytest.mark.parametrize("output_type, extra", [
    ("multiple_choice", {"doc_to_target": "label", "doc_to_choice": "choices"}),
    ("generate_until", {"doc_to_target": "ans", "generation_kwargs": {"until": ["\n"]}}),
    ("loglikelihood", {"doc_to_target": " {{ans}}"}),
])
def test_a_task_file_without_metric_list_gets_lm_evals_metrics(tmp_path, output_type, extra):
    """Every request was scored, then nothing reported: results [] and a table of headers. lm-eval takes its
    defaults for the output type."""
    spec, theirs = _both(tmp_path, {"task": "mine", "output_type": output_type, "doc_to_text": "{{q}}", **extra})
    assert spec.metric_names == list(theirs._metric_fn_list)


def test_an_empty_metric_list_and_filters_not_applied_here_are_refused(tmp_path):
    data = tmp_path / "docs.jsonl"
    data.write_text(json.dumps(DOCS[0]) + "\n")
    cases = [({"metric_list": []}, "metric_list is empty, so nothing would be reported"),
             ({"filter_list": [{"name": "strict", "filter": [{"function": "regex", "regex_pattern": "(\\d+)"}]}]},
              "filter function 'regex' is not one this evaluator applies"),
             ({"filter_list": [{"name": "a", "filter": [{"function": "take_first"}]},
                               {"name": "b", "filter": [{"function": "remove_whitespace"}]}]},
              "filter_list must be one pipeline")]
    for extra, message in cases:
        (tmp_path / "mine.yaml").write_text(yaml.safe_dump({**GENERATE, "doc_to_target": "ans", **extra,
                                                            "data_files": {"test": str(data)}}))
        with pytest.raises(UserError, match=message):
            load_task(str(tmp_path / "mine.yaml"))


@pytest.mark.parametrize("template, says", [("{{q | regex_replace('a', 'b')}}", "No filter named 'regex_replace'"),
                                            ("{{q}", "unexpected '}'")])
def test_a_template_error_names_the_task_file(tmp_path, template, says):
    """A filter Jinja lacks (lm-eval's regex_replace) or a typo gave a raw Jinja traceback naming neither file nor
    field."""
    data = tmp_path / "docs.jsonl"
    data.write_text(json.dumps(DOCS[0]) + "\n")
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({**GENERATE, "doc_to_text": template, "doc_to_target": "ans",
                                                        "data_files": {"test": str(data)}}))
    spec = load_task(str(tmp_path / "mine.yaml"))
    with pytest.raises(UserError, match=rf"cannot build the prompt for task mine of .*mine\.yaml .*{says}"):
        spec.docs("test", tmp_path)


@pytest.mark.parametrize("output_type, extra, says", [
    ("loglikelihood_rolling", {}, r"reads the text to score \(e.g. doc_to_target: page\); doc_to_text is its context"),
    ("generate_until", {}, "reads the answer, or a list of accepted answers"),
    ("multiple_choice", {"doc_to_choice": "choices"}, "reads the right choice's index or text"),
], ids=["rolling", "generation", "multiple_choice"])
def test_a_task_without_doc_to_target_is_refused_when_it_loads(tmp_path, output_type, extra, says):
    """A rolling task with its page in doc_to_text (the natural mistake; both harnesses score doc_to_target) ended
    at the first doc in "error: template missing", naming neither the file nor the field (the lmeval2 hunt)."""
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({"task": "mine", "output_type": output_type,
                                                        "doc_to_text": "{{q}}", **extra,
                                                        "data_files": {"test": "docs.jsonl"}}))
    with pytest.raises(UserError, match=rf"mine\.yaml: doc_to_target is missing; a {output_type} task {says}"):
        load_task(str(tmp_path / "mine.yaml"))


def test_a_multiple_choice_gold_given_as_a_list_is_named_as_such(tmp_path):
    """lm-eval scores any of several right choices; here it was refused as "int() argument must be ... not 'list'"."""
    data = tmp_path / "docs.jsonl"
    data.write_text(json.dumps({"q": "red or blue?", "choices": ["red", "blue", "green"], "gold": [0, 1]}) + "\n")
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({
        "task": "mine", "output_type": "multiple_choice", "doc_to_text": "{{q}}", "doc_to_choice": "choices",
        "doc_to_target": "gold", "data_files": {"test": str(data)}}))
    spec = load_task(str(tmp_path / "mine.yaml"))
    with pytest.raises(UserError, match=r"record 1: cannot build the prompt .*doc_to_target gives a list, \[0, 1\]: "
                                        r"several right choices are not scored here"):
        spec.docs("test", tmp_path)


@pytest.mark.parametrize("field", ["q", "choices"])
def test_a_record_with_half_an_emoji_is_named_when_the_task_loads(tmp_path, field):
    """A lone surrogate escape ("\\ud83d", a truncated emoji pair in scraped JSON) is valid JSON but no text: scoring
    failed later inside the tokenizer (with GPT2TokenizerFast a bare TypeError), naming neither file nor record."""
    bad = {**DOCS[0], **({"q": "bad \ud83d emoji"} if field == "q" else {"choices": ["blue", "\ud83d", "red"]})}
    data = tmp_path / "docs.jsonl"
    data.write_text(json.dumps(DOCS[0]) + "\n" + json.dumps(bad) + "\n")
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({
        "task": "mine", "output_type": "multiple_choice", "doc_to_text": "{{q}}", "doc_to_choice": "choices",
        "doc_to_target": "label", "data_files": {"test": str(data)}}))
    spec = load_task(str(tmp_path / "mine.yaml"))
    with pytest.raises(UserError, match=r"docs\.jsonl record 2: cannot build the prompt .*surrogates not allowed"):
        spec.docs("test", tmp_path)
