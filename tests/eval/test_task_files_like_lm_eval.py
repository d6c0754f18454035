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


def _both(tmp_path, fields: dict, docs: list[dict] = DOCS):
    """(our TaskSpec, lm-eval's ConfigurableTask) of one YAML over `docs` in a local JSONL file."""
    from lm_eval.api.task import ConfigurableTask

    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
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
        assert spec.fewshot_example(doc) == spec.text(doc) + spec.target_delimiter + answer + spec.fewshot_delimiter


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
    ("loglikelihood_rolling", {}, r"reads the text to score \(e.g. doc_to_target: page; it is scored from an empty context, doc_to_text is not "
                                     r"read\)"),
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


# --- found by the lmeval3 hunt, each against lm-eval's own code -----------------------------------------------------


@pytest.mark.parametrize("output_type, extra", [
    ("generate_until", {"doc_to_target": "ans", "generation_kwargs": {"until": ["\n"]}}),
    ("loglikelihood", {"doc_to_target": "ans"}),
])
def test_a_few_shot_example_without_an_answer_is_its_question_alone_as_in_lm_eval(tmp_path, output_type, extra):
    """lm-eval's build_qa_turn gives a doc whose answer is "" or null its question alone: no target_delimiter, no
    answer, no fewshot_delimiter. Ours wrote `A: ` + "\n\n" (and `A: None` for null): 4 of 5 prompts differed."""
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.api.utils import messages_to_text

    from hf_gpt_custom.eval.fewshot import build_prompts

    docs = [*DOCS, {**DOCS[0], "q": "Blood is", "ans": ""}, {**DOCS[1], "q": "Coal is", "ans": None}]
    spec, theirs = _both(tmp_path, {**GENERATE, "output_type": output_type, **extra,
                                    "target_delimiter": " -> ", "fewshot_delimiter": "\n##\n", "fewshot_split": "test"}, docs)
    ours = spec.docs("test", tmp_path)
    for doc, their_doc in zip(ours, theirs.test_docs()):
        turn = ConfigurableTask.build_qa_turn(theirs, q=theirs.doc_to_text(their_doc),
                                              a=theirs.doc_to_target(their_doc), tgt_delim=" -> ", few_delim="\n##\n")
        assert spec.fewshot_example(doc) == messages_to_text(turn)
    assert spec.fewshot_example(ours[2]) == "Q: Blood is\nA:" and spec.fewshot_example(ours[3]) == "Q: Coal is\nA:"

    class Words:  # a tokenizer is only asked for lengths, and every prompt fits
        def __call__(self, texts, **kwargs):
            return {"input_ids": [text.split() for text in texts]}

    prompts = build_prompts(spec, ours, ours, 3, 1234, Words(), 10**6)
    theirs.set_fewshot_seed(1234)
    for doc, their_doc, prompt in zip(ours, theirs.test_docs(), prompts):
        assert prompt.contexts[0] == theirs.fewshot_context(their_doc, 3)


@pytest.mark.parametrize("fields, says", [
    ({"doc_to_text": "choices"}, r"doc_to_text 'choices' gives a list, \"\['blue', 'green', 'red'\]\", not text"),
    ({"doc_to_text": "q", "description": "choices"}, r"description 'choices' names a field holding a list"),
    ({"doc_to_text": "n"}, r"doc_to_text 'n' gives the number 7 and the task has choices: lm-eval reads that as a "
                           r"multiple-input task .*add `multiple_input: true`"),
    ({"doc_to_text": "{{label}}"}, r"doc_to_text '\{\{label\}\}' gives the number '0' .*add `multiple_input: true`"),
], ids=["list-text", "list-description", "int-text", "digits-template"])
def test_a_prompt_field_that_is_not_text_is_refused_naming_it(tmp_path, fields, says):
    """`doc_to_text: choices` (a list field) was scored as the prompt "['blue', 'green', 'red']", and an int
    doc_to_text, lm-eval's sign of a multiple-input task (Winogrande's layout), as the prompt "7"."""
    spec, theirs = _both(tmp_path, {"task": "mine", "output_type": "multiple_choice", "doc_to_choice": "choices",
                                    "doc_to_target": "label", **fields})
    with pytest.raises(UserError, match=rf"record 1: cannot build the prompt for task mine .*{says}"):
        spec.docs("test", tmp_path)
    if "number" in says:  # what the message says lm-eval does with it
        assert theirs.multiple_input == 3
    else:
        with pytest.raises((AssertionError, TypeError)):  # lm-eval refuses it too
            theirs.fewshot_context(theirs.test_docs()[0], 0)


def test_a_description_field_that_is_null_in_a_doc_is_no_description_as_in_lm_eval(tmp_path):
    """lm-eval reads `resolve_field(doc, description) or ""`: a null description is none. Here it put the text
    "None" before the prompt, then (refusing non-text) refused the file (the roundreview13 hunt)."""
    from hf_gpt_custom.eval.fewshot import build_prompts

    for empty in (None, 0, [], False):  # every value `or ""` turns into no description (the roundreview14 hunt)
        docs = [{**DOCS[0], "about": "Colours. "}, {**DOCS[1], "about": empty}]
        spec, theirs = _both(tmp_path, {"task": "mine", "output_type": "multiple_choice", "doc_to_text": "q",
                                        "doc_to_choice": "choices", "doc_to_target": "label", "description": "about"},
                             docs)
        prompts = build_prompts(spec, spec.docs("test", tmp_path), [], 0, 0, None, 10**6)
        assert [prompt.contexts[0] for prompt in prompts] == [theirs.fewshot_context(doc, 0)
                                                              for doc in theirs.test_docs()]
        assert prompts[1].contexts[0] == "Grass is"


def test_test_split_naming_a_data_files_entry_scores_that_entry_or_is_refused_when_both_are_there(tmp_path):
    """`data_files: {test: a, validation: b}` with `test_split: validation` scored a while results.json said
    "validation"; lm-eval scores b. Given alone, the named entry is scored (and is the split few-shot examples of
    `fewshot_split: validation` leave the scored doc out of); with both, the file is refused."""
    for name, docs in (("a", DOCS[:1]), ("b", DOCS)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    fields = {"task": "mine", "output_type": "multiple_choice", "doc_to_text": "q", "doc_to_choice": "choices",
              "doc_to_target": "label", "test_split": "validation", "fewshot_split": "validation"}
    (tmp_path / "one.yaml").write_text(yaml.safe_dump({**fields, "data_files": {"validation": "b.jsonl"}}))
    spec = load_task(str(tmp_path / "one.yaml"))
    assert spec.docs("test", tmp_path) == DOCS and spec.excludes_scored_doc
    assert spec.scored_data_info(tmp_path)["split"] == "validation" and len(
        spec.scored_data_info(tmp_path)["local_files_sha256"]) == 1
    (tmp_path / "two.yaml").write_text(yaml.safe_dump({**fields, "data_files": {"test": "a.jsonl",
                                                                               "validation": "b.jsonl"}}))
    with pytest.raises(UserError, match=r"two\.yaml: data_files has both a `test` and a `validation` entry, and "
                                        r"test_split: validation; lm-eval would score `validation`"):
        load_task(str(tmp_path / "two.yaml"))


def test_a_doc_without_answers_drawn_as_a_few_shot_example_is_named(tmp_path):
    """`[]` (an unanswerable question) scores 0 at K=0; drawn as an example it ended in a bare IndexError (lm-eval's
    too)."""
    from hf_gpt_custom.eval.fewshot import build_prompts

    spec, _ = _both(tmp_path, {**GENERATE, "doc_to_target": "answers"},
                    [{**DOCS[0], "answers": ["blue"]}, {**DOCS[1], "answers": []}])
    docs = spec.docs("test", tmp_path)
    with pytest.raises(UserError, match=r"task mine: a doc with no answer \(doc_to_target gives \[\]\) was drawn as "
                                        r"a few-shot example \('Q: Grass is\\nA:'\).*zero-shot"):
        build_prompts(spec, docs, docs, 1, 0, None, 10**6)
