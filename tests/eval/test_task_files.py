"""Every task file: loads, reads its real data, renders a prompt, gold among choices — generic over the YAML folder,
so a new task is covered the moment it is added. Plus the errors a user can fix: unknown task, malformed data line,
missing data folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hf_gpt_custom.eval.task import TASKS_DIR, available_tasks, load_task

# Published sizes of the shipped benchmarks' local splits (../shared/data/README.md); WikiText-2 test is 62
# articles. A spot check of the data, not the list of tasks: that is the YAML folder.
PUBLISHED_SIZES = {
    "lambada": 5153, "hellaswag": 10042, "piqa": 1838, "arc_easy": 2376, "arc_challenge": 1172, "winogrande": 1267,
    "copa": 100, "boolq": 3270, "openbookqa": 500, "wikitext": 62, "triviaqa": 3000,
}


def test_the_shipped_benchmarks_have_their_published_sizes(shared_data_dir):
    assert set(PUBLISHED_SIZES) <= set(available_tasks())
    for name, size in PUBLISHED_SIZES.items():
        assert len(load_task(name).docs("test", shared_data_dir)) == size, name


@pytest.mark.parametrize("name", available_tasks())
def test_task_loads_renders_and_gold_is_a_choice(name, shared_data_dir):
    spec = load_task(name)
    docs = spec.docs("test", shared_data_dir)
    assert docs
    for doc in docs[:: max(1, len(docs) // 50)]:
        example = spec.fewshot_example(doc)
        assert isinstance(example, str) and example
        if spec.output_type == "multiple_choice":
            choices = spec.choices(doc)
            assert len(choices) >= 2 and 0 <= spec.gold_index(doc) < len(choices)
            question = choices[spec.gold_index(doc)] if spec.multiple_input else spec.text(doc)
            assert isinstance(question, str) and question
        elif spec.output_type == "loglikelihood":
            assert spec.target(doc).startswith(" ") and spec.text(doc) + spec.target(doc) == doc["text"]
        elif spec.output_type == "generate_until":
            assert spec.text(doc).startswith("Question: ") and spec.target(doc)
        else:
            assert spec.target(doc).strip()


def test_known_answers_of_first_docs(shared_data_dir):
    """Spot checks against the files: label encodings differ per benchmark (PROVENANCE.md)."""
    hellaswag = load_task("hellaswag")
    first = hellaswag.docs("test", shared_data_dir)[0]
    assert hellaswag.text(first) == "Roof shingle removal: A man is sitting on a roof. he"
    assert hellaswag.gold_index(first) == 3
    arc = load_task("arc_easy")
    numeric_key = next(d for d in arc.docs("test", shared_data_dir) if d["id"] and len(d["choices"]) == 5)
    assert 0 <= arc.gold_index(numeric_key) < 5
    boolq = load_task("boolq")
    labels = [boolq.gold_index(d) for d in boolq.docs("test", shared_data_dir)]
    assert labels.count(1) == 2033 and labels.count(0) == 1237  # "true" x 2033, "false" x 1237
    copa = load_task("copa")
    assert copa.text(copa.docs("test", shared_data_dir)[0]) == "The man turned on the faucet therefore"


def test_arc_challenge_includes_arc_easy():
    easy, challenge = load_task("arc_easy"), load_task("arc_challenge")
    assert challenge.doc_to_text == easy.doc_to_text and challenge.uncond_context == "Answer:"
    assert challenge.data_files != easy.data_files


def test_a_missing_include_names_the_including_file_and_the_path(tmp_path):
    """Was a bare FileNotFoundError (a traceback from the CLI) naming only the missing path."""
    from hf_gpt_custom.errors import MissingFileError

    task = tmp_path / "x.yaml"
    task.write_text("include: nothere.yaml\ntask: x\n")
    with pytest.raises(MissingFileError) as caught:
        load_task(str(task))
    message = str(caught.value)
    assert message.startswith(f"{task}: include nothere.yaml not found (looked for {tmp_path / 'nothere.yaml'})")
    assert "give the path of an existing task file" in message and "\n" not in message


def test_unknown_task_suggests_the_closest_name():
    with pytest.raises(ValueError, match=r"unknown task 'hellaswg'; did you mean 'hellaswag'\? known tasks: arc_challenge"):
        load_task("hellaswg")


def test_malformed_data_line_names_file_and_line(tmp_path, shared_data_dir):
    (tmp_path / "copa").mkdir()
    lines = (shared_data_dir / "copa" / "val.jsonl").read_text(encoding="utf-8").splitlines()
    lines[16] = '{"premise": "broken'
    (tmp_path / "copa" / "val.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"copa/val.jsonl line 17: not valid JSON"):
        load_task("copa").docs("test", tmp_path)
    lines[16] = json.dumps({"premise": "No choices here.", "question": "cause", "label": 0})
    (tmp_path / "copa" / "val.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"copa/val.jsonl line 17: record does not fit copa_to_choices \(KeyError"):
        load_task("copa").docs("test", tmp_path)


def test_missing_data_names_the_folder_and_the_override(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"winogrande_dev_llmfoundry.jsonl not found.*HF_GPT_CUSTOM_DATA_DIR"):
        load_task("winogrande").docs("test", tmp_path)


def test_data_root_env_var_overrides_the_default(tmp_path, shared_data_dir, monkeypatch):
    shutil.copytree(shared_data_dir / "copa", tmp_path / "copa")
    monkeypatch.setenv("HF_GPT_CUSTOM_DATA_DIR", str(tmp_path))
    from hf_gpt_custom.eval.task import default_data_dir

    assert default_data_dir() == tmp_path
    assert len(load_task("copa").docs("test")) == 100


def test_hub_transforms_give_the_same_docs_as_the_local_files(shared_data_dir):
    """Users with network load the Hub versions: rebuilt in the Hub's row shape from the local records, each Hub
    transform must give exactly the local docs (so prompts do not depend on the source)."""
    from hf_gpt_custom.eval.doc_transforms import DOC_TRANSFORMS

    arc_rows = [json.loads(line) for line in (shared_data_dir / "arc" / "ARC-Easy-Test.jsonl").read_text().splitlines()[:20]]
    hub_rows = [
        {"id": r["id"], "question": r["question"]["stem"], "answerKey": r["answerKey"],
         "choices": {"text": [c["text"] for c in r["question"]["choices"]], "label": [c["label"] for c in r["question"]["choices"]]}}
        for r in arc_rows
    ]
    assert DOC_TRANSFORMS["arc_hub_to_choices"](hub_rows) == DOC_TRANSFORMS["arc_to_choices"](arc_rows)

    wino = [json.loads(line) for line in (shared_data_dir / "winogrande" / "winogrande_dev_llmfoundry.jsonl").read_text().splitlines()[:20]]
    local = DOC_TRANSFORMS["winogrande_partial"](wino)
    # "Sarah was ... so _ always got the easier cases." with option1 Sarah, option2 Maria, answer "2".
    hub_row = {"sentence": "Sarah was a much better surgeon than Maria so _ always got the easier cases.",
               "option1": "Sarah", "option2": "Maria", "answer": "2"}
    assert DOC_TRANSFORMS["winogrande_hub_partial"]([hub_row]) == local[:1]

    pages = load_task("wikitext").docs("test", shared_data_dir)
    assert DOC_TRANSFORMS["wikitext_hub_pages"]([{"page": p["page"]} for p in pages[:3]]) == pages[:3]


def test_the_default_data_root_is_shared_data_beside_the_checkout(monkeypatch, shared_data_dir):
    from hf_gpt_custom.eval.task import default_data_dir

    monkeypatch.delenv("HF_GPT_CUSTOM_DATA_DIR", raising=False)
    assert default_data_dir() == shared_data_dir


def test_docs_are_read_again_when_the_data_file_changes(tmp_path, shared_data_dir):
    """A notebook fixes a label, then evaluates again in the same process: the new label counts (the cache was
    keyed by path alone and kept the old docs). The file itself is the reference."""
    from hf_gpt_custom.eval.task_data import load_docs

    (tmp_path / "copa").mkdir()
    data = tmp_path / "copa" / "val.jsonl"
    shutil.copy(shared_data_dir / "copa" / "val.jsonl", data)
    spec = load_task("copa")
    before = load_docs(spec, "test", str(tmp_path))
    records = [json.loads(line) for line in data.read_text().splitlines()]
    records[0]["label"] = 1 - records[0]["label"]
    data.write_text("".join(json.dumps(record) + "\n" for record in records))
    after = load_docs(spec, "test", str(tmp_path))
    assert after[0]["gold"] == records[0]["label"] != before[0]["gold"]


def test_docs_are_read_again_when_an_included_base_file_changes(tmp_path, shared_data_dir):
    """The base file a task includes is fixed (HellaSwag's endings were read in the wrong order): reloading the task
    that includes it gave the old docs, the cache being keyed by the task's own file. The spec from the fixed files
    in a fresh cache is the reference."""
    from hf_gpt_custom.eval import task_data

    base, child = tmp_path / "base.yaml", tmp_path / "child.yaml"
    base_text = (Path(TASKS_DIR) / "hellaswag.yaml").read_text()
    fields = "[ctx, label, ending0, ending1, ending2, ending3]"
    assert fields in base_text
    base.write_text(base_text.replace(fields, "[ctx, label, ending1, ending0, ending2, ending3]"))
    child.write_text("include: base.yaml\ntask: child\n")
    before = load_task(str(child)).docs("test", shared_data_dir)[:3]
    base.write_text(base_text)
    after = load_task(str(child)).docs("test", shared_data_dir)[:3]
    task_data._DOCS_CACHE.clear()
    assert after == load_task(str(child)).docs("test", shared_data_dir)[:3]
    assert [doc["choices"][:2] for doc in after] == [doc["choices"][1::-1] for doc in before]


def test_two_specs_of_one_name_that_read_data_differently_get_their_own_docs(shared_data_dir):
    from dataclasses import replace

    spec = load_task("hellaswag")
    swapped = replace(spec, record_fields=["ctx", "label", "ending1", "ending0", "ending2", "ending3"])
    first, second = spec.docs("test", shared_data_dir)[0], swapped.docs("test", shared_data_dir)[0]
    assert second["choices"][:2] == first["choices"][1::-1]


def _count_task(tmp_path) -> Path:
    """Sums whose answer field holds the answer's text, the choices being the texts "0".."3" shuffled."""
    import random

    rnd = random.Random(0)
    with open(tmp_path / "count.jsonl", "w") as handle:
        for _ in range(12):
            a, b = rnd.randint(0, 1), rnd.randint(0, 2)
            choices = [str(x) for x in rnd.sample(range(4), 4)]
            handle.write(json.dumps({"question": f"{a} + {b} =", "choices": choices, "answer": str(a + b),
                                     "id": f"q{a}{b}"}) + "\n")
    task = tmp_path / "count.yaml"
    task.write_text(f"task: count\ndata_files: {{test: {tmp_path / 'count.jsonl'}}}\noutput_type: multiple_choice\n"
                    "doc_to_text: \"Question: {{question}}\\nAnswer:\"\ndoc_to_target: answer\ndoc_to_choice: choices\n"
                    "description: \"Sum {{id}}:\\n\"\nmetric_list: [{metric: acc}]\n")
    return task


def test_a_digit_in_the_target_field_is_the_choice_with_that_text(tmp_path):
    """"2" among the choices ["3", "2", "0", "1"] is choice 1 (lm-eval: choices.index of the field's text); it was
    read as index 2, the choice "0". A rendered template's digits stay an index, as in lm-eval."""
    from dataclasses import replace

    spec = load_task(str(_count_task(tmp_path)))
    docs = spec.docs()
    assert any(doc["choices"].index(doc["answer"]) != int(doc["answer"]) for doc in docs)  # the cases that differ
    for doc in docs:
        assert spec.choices(doc)[spec.gold_index(doc)] == doc["answer"]
    rendered = replace(spec, doc_to_target="{{choices.index(answer)}}")
    assert [rendered.gold_index(doc) for doc in docs] == [doc["choices"].index(doc["answer"]) for doc in docs]


def test_a_templated_description_is_rendered_for_each_doc(tmp_path):
    """lm-eval renders `description` over the doc (MMLU's "... about {{subject}}"); it was pasted as written."""
    from hf_gpt_custom.eval.fewshot import _render

    spec = load_task(str(_count_task(tmp_path)))
    doc = spec.docs()[0]
    prompt = _render(spec, 0, doc, [], 0)
    assert prompt.contexts == (f"Sum {doc['id']}:\nQuestion: {doc['question']}\nAnswer:",)


def test_prompt_text_that_looks_like_a_list_stays_text():
    from dataclasses import replace

    spec = replace(load_task("copa"), doc_to_text="[{{premise}}]")
    doc = {"premise": "1, 2", "choices": ["x", "y"], "gold": 0}
    assert spec.text(doc) == "[1, 2]"  # not the list [1, 2]: lm-eval parses targets and choices that way, not prompts


def test_a_split_reads_its_own_data_files(tmp_path):
    """Each split's docs come from its own files (a fewshot_split "train" must not read the scored "test" file), and
    the benchmark fingerprint `run` keeps covers every split's files."""
    from dataclasses import replace

    (tmp_path / "test.jsonl").write_text('{"premise": "scored", "choices": ["a", "b"], "gold": 0}\n')
    (tmp_path / "train.jsonl").write_text('{"premise": "example", "choices": ["a", "b"], "gold": 1}\n')
    spec = replace(load_task("copa"), data_files={"test": "test.jsonl", "train": ["train.jsonl"]},
                   process_docs=None, doc_to_text="{{premise}}", fewshot_split="train")
    assert spec.data_file_names("test") == ["test.jsonl"] and spec.data_file_names("train") == ["train.jsonl"]
    assert spec.data_file_names() == ["test.jsonl", "train.jsonl"] and spec.data_file_names("validation") == []
    assert [doc["premise"] for doc in spec.fewshot_docs(tmp_path)] == ["example"]
    assert [doc["premise"] for doc in spec.docs("test", tmp_path)] == ["scored"]
    # examples from other files never hold the scored doc: none is left out; a split naming the scored file is
    assert not spec.excludes_scored_doc
    same_file = replace(spec, data_files={"test": "test.jsonl", "validation": "test.jsonl"}, fewshot_split="validation")
    assert same_file.excludes_scored_doc


def test_editing_a_tasks_few_shot_file_changes_its_fingerprint(tmp_path, short_context_model):
    """A task of one's own with its examples in their own file (data_files {test, train}, fewshot_split: train): every
    shipped task has one split file, so a fingerprint of the scored split's files only went unnoticed, and fixing a
    wrong example answer left `run` keeping, and `export` publishing, K-shot scores of prompts the files no longer
    give (found by the mutsweep2 hunt). Reference: the edited file's new answer, seen in a fresh evaluation's 1-shot
    prompt and score."""
    import json

    from hf_gpt_custom.eval.runner import evaluate
    from hf_gpt_custom.eval.task import benchmarks_changed_since, tasks_fingerprint

    data = tmp_path / "data"
    data.mkdir()
    (data / "test.jsonl").write_text('{"q": "2+2=", "a": " 4"}\n{"q": "3+3=", "a": " 6"}\n')
    shots = data / "shots.jsonl"
    shots.write_text('{"q": "1+1=", "a": " 2"}\n')
    task = tmp_path / "sums.yaml"
    task.write_text("task: sums\noutput_type: loglikelihood\ndoc_to_text: '{{q}}'\ndoc_to_target: '{{a}}'\n"
                    "target_delimiter: ''\ndata_files: {test: test.jsonl, train: shots.jsonl}\nfewshot_split: train\n"
                    "metric_list: [{metric: perplexity}]\n")
    settings = dict(tasks=[str(task)], shots=[1], device="cpu", show_progress=False, data_dir=data)
    scored = evaluate(str(short_context_model), out_dir=tmp_path / "eval", **settings)
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert benchmarks_changed_since(results) == ([], [])
    before = tasks_fingerprint([str(task)], data)

    shots.write_text('{"q": "1+1=", "a": " 3"}\n')  # only the examples' file: the scored file is as it was
    fresh = evaluate(str(short_context_model), **settings)
    assert [e["prompt"] for e in fresh.examples] != [e["prompt"] for e in scored.examples]
    assert all(e["prompt"].startswith("1+1= 3") for e in fresh.examples)
    assert fresh.value("sums", "perplexity", 1) != pytest.approx(scored.value("sums", "perplexity", 1))
    assert tasks_fingerprint([str(task)], data) != before
    assert benchmarks_changed_since(results) == ([str(task)], [])


@pytest.mark.parametrize("fewshot_split, excludes", [("validation", True), ("train", False)])
def test_a_hub_task_whose_fewshot_split_is_its_test_split_never_shows_the_scored_doc(
    fewshot_split, excludes, tmp_path, monkeypatch, tiny_model_and_tokenizer, shared_data_dir
):
    """test_split: validation with fewshot_split: validation draws the examples from the scored docs, so the doc
    being scored must be left out, as lm-eval leaves it out whenever its fewshot split equals test_split; only
    fewshot_split "test" was recognised, and 8 of 100 COPA prompts at K=5 held their own answer. The reference is
    lm-eval's own ContextSampler with the same seed."""
    import datasets
    from lm_eval.api.samplers import ContextSampler

    from hf_gpt_custom.eval.fewshot import build_prompts

    rows = [json.loads(line) for line in (shared_data_dir / "copa" / "val.jsonl").read_text().splitlines()]
    monkeypatch.setattr(datasets, "load_dataset", lambda path, name=None, split=None, **kwargs: rows)  # the "Hub"
    (tmp_path / "copa_hub.yaml").write_text(
        "task: copa_hub\ndataset_path: super_glue\ndataset_name: copa\ntest_split: validation\n"
        f"fewshot_split: {fewshot_split}\nhub_process_docs: copa_to_choices\noutput_type: multiple_choice\n"
        "doc_to_text: premise\ndoc_to_target: gold\ndoc_to_choice: choices\nmetric_list: [{metric: acc}]\n")
    spec = load_task(str(tmp_path / "copa_hub.yaml"))
    assert spec.excludes_scored_doc is excludes
    docs, pool = spec.docs("test", tmp_path / "no_local_data"), spec.fewshot_docs(tmp_path / "no_local_data")
    _, tokenizer = tiny_model_and_tokenizer
    prompts = build_prompts(spec, docs, pool, 5, 1234, tokenizer, 10**6)
    sampler = ContextSampler(pool, rnd=1234)
    for doc, prompt in zip(docs, prompts):
        examples = sampler.sample(5, eval_doc=doc if fewshot_split == spec.test_split else None)
        expected = "".join(spec.fewshot_example(e) for e in examples) + spec.text(doc)
        assert prompt.contexts[0] == expected
        if excludes:
            assert spec.fewshot_example(doc) not in prompt.contexts[0]


def _triviaqa_variant(tmp_path, **changes) -> Path:
    """triviaqa.yaml with top-level fields replaced (YAML flow style values)."""
    import yaml

    config = yaml.safe_load((TASKS_DIR / "triviaqa.yaml").read_text())
    config.update(changes)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("changes, message", [
    ({"output_type": "multiple_choice", "doc_to_choice": "aliases"},
     r"metric 'exact_match' is not one an output_type multiple_choice task gives; choose from acc, acc_norm"),
    ({"metric_list": [{"metric": "exact_match", "ignore_whitespace": True}]},
     r"metric 'exact_match' has option\(s\) ignore_whitespace that would be ignored; exact_match takes "
     r"regexes_to_ignore, ignore_case, ignore_punctuation, ignore_numbers"),
    ({"metric_list": [{"metric": "f1", "ignore_case": True}]}, r"metric 'f1' has option\(s\) ignore_case"),
    ({"metric_list": [{"metric": "exact_match", "aggregation": "median"}]},
     r"metric 'exact_match' has aggregation: 'median', but it is computed with aggregation: 'mean'"),
    ({"metric_list": [{"aggregation": "mean"}]}, r"unknown metric None"),
    ({"metric_list": [{"metric": "exact_match"}, {"metric": "exact_match", "regexes_to_ignore": [","]}]},
     r"metric_list names exact_match more than once; a task reports each metric once"),
    ({"generation_kwargs": {"until": ["\n"], "top_p": 0.9}}, r"generation_kwargs top_p would be ignored"),
    ({"generation_kwargs": {"until": ["\n"], "do_sample": True, "temperature": 0.7}},
     r"ask for sampling \(do_sample: True, temperature: 0.7\), but evaluation decodes greedily"),
    ({"generation_kwargs": {"until": None}}, r"generation_kwargs until: None must be a string or a list of strings"),
    ({"generation_kwargs": {"until": 5}}, r"generation_kwargs until: 5 must be a string or a list of strings"),
    ({"generation_kwargs": {"until": ["\n", 7]}}, r"until: \['\\n', 7\] must be a string or a list of strings"),
    # an empty stop: lm-eval finds it in every text and ends each answer after one token; generation here skipped it
    ({"generation_kwargs": {"until": ["", "\n"]}}, r"until: \['', '\\n'\] holds an empty string, which lm-eval"),
    ({"generation_kwargs": {"until": ""}}, r"until: '' holds an empty string"),
    ({"generation_kwargs": {"max_gen_toks": 8}, "fewshot_delimiter": ""},
     r"generation stops at the fewshot_delimiter when generation_kwargs give no until, and it is empty"),
], ids=["mc_exact_match", "unknown_option", "f1_option", "aggregation", "no_metric", "twice", "top_p", "sampling", "until_null",
        "until_number", "until_list_number", "until_empty_in_list", "until_empty", "empty_delimiter_as_stop"])
def test_a_task_setting_that_would_be_ignored_or_fail_late_is_refused_when_it_loads(tmp_path, changes, message):
    """Each of these was accepted: exact_match on a multiple_choice task failed with a KeyError after every
    request was scored; an unknown option, an aggregation or sampling settings were silently not applied."""
    with pytest.raises(ValueError, match=message):
        load_task(str(_triviaqa_variant(tmp_path, **changes)))


def test_acc_uncond_on_a_multiple_input_task_is_refused_when_it_loads(tmp_path):
    """Winogrande's choices are contexts: there is no choice to score without its context. acc_uncond loaded, every
    request of every task was scored, then the run ended in a KeyError (a hunt's finding)."""
    import yaml

    config = yaml.safe_load((TASKS_DIR / "winogrande.yaml").read_text())
    assert config["multiple_input"] is True
    config["metric_list"] = [{"metric": "acc"}, {"metric": "acc_uncond"}]
    path = tmp_path / "winogrande_uncond.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match="acc_uncond scores each choice without its context, but a multiple_input"):
        load_task(str(path))


def test_lm_eval_options_that_are_applied_load():
    """lm-eval's own spellings load: its aggregation and direction stated, gsm8k's regexes, HF's max_new_tokens."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        spec = load_task(str(_triviaqa_variant(
            Path(folder),
            metric_list=[{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                          "regexes_to_ignore": [","], "ignore_numbers": True}],
            generation_kwargs={"until": ["\n"], "max_new_tokens": 3, "do_sample": False, "temperature": 0.0})))
    from hf_gpt_custom.eval.output_types import GenerateUntil

    assert GenerateUntil.max_gen_toks(spec) == 3  # was 256: lm-eval reads max_new_tokens as max_gen_toks
    doc = {"question": "q", "aliases": ["1,000 ships"]}
    values, _ = GenerateUntil().doc_metric_values(spec, doc, [_generated("1000 ships")])
    assert values["exact_match"] == 1.0


def _generated(text: str):
    from hf_gpt_custom.eval.requests import Request, ScoredRequest

    return ScoredRequest(Request(0, "q", "", request_type="generate_until"), 0.0, True, 3, generation=text)


def test_hellaswag_hub_rows_become_the_docs_lm_evals_process_docs_makes():
    """lm-eval's hellaswag/utils.py process_docs capitalises ctx_b before joining it to ctx_a."""
    import datasets
    from lm_eval.tasks.hellaswag.utils import process_docs

    from hf_gpt_custom.eval.doc_transforms import DOC_TRANSFORMS

    rows = [{"activity_label": "Baking cookies", "ctx_a": "A woman puts dough on a tray.", "ctx_b": "she [title] then",
             "endings": ["bakes them.", "eats [step] it."], "label": "1"}]
    theirs = process_docs(datasets.Dataset.from_list(rows))
    assert DOC_TRANSFORMS["hellaswag_hub_to_choices"](rows) == [
        {key: doc[key] for key in ("query", "choices", "gold")} for doc in theirs]


def test_wikihow_rows_with_several_markers_lose_only_the_markers_as_lm_evals_process_docs():
    """The WikiHow half of Rowan/hellaswag carries several [header]/[title]/[step]/[substeps] markers per field; a
    greedy bracket regex removed the text between two markers ("Home and Garden: wait ten minutes."), where rows with
    one marker agree (found by the mutsweep2 hunt). Reference: lm-eval's own hellaswag/utils.py process_docs."""
    import datasets
    from lm_eval.tasks.hellaswag.utils import process_docs

    from hf_gpt_custom.eval.doc_transforms import DOC_TRANSFORMS

    rows = [
        {"activity_label": "Home and Garden", "ctx_a": "[header] How to clean a grill [title] Heat the grill.",
         "ctx_b": "[step] turn it on [substeps] wait ten minutes.", "label": "2",
         "endings": ["[step] Scrub it [substeps] with a brush.", "[title] Rinse it [step] with water.",
                     "Let it cool [substeps] then wipe [step] the grates.", "Cover it."]},
        {"activity_label": "Pets and Animals", "ctx_a": "[header] How to bathe a cat [title] Fill the tub.",
         "ctx_b": "use warm water [title] Wet the cat [step] slowly.", "label": "0",
         "endings": ["[substeps] Lather [step] rinse [title] dry.", "b", "c", "d"]},
    ]
    theirs = process_docs(datasets.Dataset.from_list(rows))
    ours = DOC_TRANSFORMS["hellaswag_hub_to_choices"](rows)
    assert ours == [{key: doc[key] for key in ("query", "choices", "gold")} for doc in theirs]
    assert "Heat the grill" in ours[0]["query"] and "[" not in ours[0]["query"]  # the text between markers stays


def test_wikitext_pages_are_detokenized_as_lm_evals_wikitext_detokenizer(shared_data_dir):
    """Word/byte perplexity are of the detokenized page; a change to any one of its replacement rules (" @,@ " to
    "." instead of ",", the " N " rule dropped) went unnoticed (found by the mutsweep2 hunt). Reference: lm-eval's
    own wikitext/preprocess_wikitext.py wikitext_detokenizer, on every page of the real wiki.test.raw (numbers with
    @,@ and @.@, degrees, headings, brackets, quotes) and, through the Hub rows' path, on a page that reaches every
    rule."""
    from lm_eval.tasks.wikitext.preprocess_wikitext import wikitext_detokenizer

    from hf_gpt_custom.eval.doc_transforms import DOC_TRANSFORMS

    docs = load_task("wikitext").docs("test", shared_data_dir)
    assert len(docs) == 62 and sum(" @,@ " in doc["page"] for doc in docs) > 0
    for doc in docs:
        assert doc["text"] == wikitext_detokenizer({"page": doc["page"]})
    # the real pages never reach the " N " rule (their N stands before "@-@" or after " ° "): a page that reaches
    # every rule, through the Hub rows' path
    page = (" = Robert Boulton = \n \n Robert Boulton is an English film , television and theatre actor . He had a "
            "guest @-@ starring role in 2000 , with 1 @,@ 000 @,@ 000 viewers ; a score of 3 @.@ 5 : fine ! Why ? "
            "The N players ' s text ( a note ) [ 1 ] { x } \" quoted \" ' single ' at 5 ° C . \n \n = = Career = = "
            "\n = = = Early = = = \n = = = = Late = = = = \n It 's done . \n")
    hub_rows = [{"page": page}] + [{"page": doc["page"]} for doc in docs[:3]]
    texts = [doc["text"] for doc in DOC_TRANSFORMS["wikitext_hub_pages"](hub_rows)]
    assert texts == [wikitext_detokenizer(row) for row in hub_rows]
    assert "1,000,000" in texts[0] and "The 1 players" in texts[0]


def test_lambada_context_is_all_but_the_last_word():
    """lm-eval's lambada_openai: doc_to_text is text.split(' ')[:-1] joined, doc_to_target ' ' + the last word."""
    from hf_gpt_custom.eval.doc_transforms import DOC_TRANSFORMS

    text = "he looked at the old map and pointed to the harbor"
    [doc] = DOC_TRANSFORMS["lambada_split_last_word"]([{"text": text}])
    assert (doc["context"], doc["target"]) == (" ".join(text.split(" ")[:-1]), " harbor")


@pytest.mark.parametrize("output_type, target, expected", [
    ("loglikelihood", "aliases", r"gives a list, \"\[' blue', ' azure'\]\", but a loglikelihood task scores one text"),
    ("loglikelihood_rolling", "{{page}}", r"gives a list, \"\['alpha', 'beta'\]\", but a loglikelihood_rolling task"),
])
def test_a_list_target_of_a_task_scoring_one_text_is_refused_not_scored_as_its_python_text(tmp_path, output_type,
                                                                                         target, expected):
    """str() of a list was scored ("[' blue', ' azure']"), its words and bytes counted: a perplexity of no text.
    lm-eval fails on both (a TypeError)."""
    import yaml

    path = tmp_path / "one_text.yaml"
    path.write_text(yaml.safe_dump({"task": "one_text", "output_type": output_type, "doc_to_text": "{{q}}",
                                    "doc_to_target": target}))
    spec = load_task(str(path))
    doc = {"q": "The sky is", "aliases": [" blue", " azure"], "page": '["alpha", "beta"]'}
    with pytest.raises(ValueError, match=expected):
        spec.target(doc)
    assert spec.target({"q": "x", "aliases": " blue", "page": "alpha beta"}) in (" blue", "alpha beta")


def test_the_data_dir_variable_is_found_by_one_rule_for_eval_run_and_evaluate(tmp_path, monkeypatch, capsys,
                                                                               tiny_model_folder):
    """$HF_GPT_CUSTOM_DATA_DIR=../shared/data was found from any working directory by `eval` alone: `run`'s
    evaluation stage and evaluate() read it from the working directory only, and the error named a --data-dir `run`
    does not have (the roundreview27 hunt). Reference: the same task scored with the folder given absolute."""
    import re

    from hf_gpt_custom.cli import main
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.eval.runner import evaluate
    from hf_gpt_custom.eval.task_data import default_data_dir
    from hf_gpt_custom.training.config_values import REPO_ROOT

    shared = (REPO_ROOT / "../shared/data").resolve()
    monkeypatch.chdir(tmp_path)  # no ../shared here
    monkeypatch.setenv("HF_GPT_CUSTOM_DATA_DIR", "../shared/data")
    assert default_data_dir() == shared  # what run's evaluation stage and evaluate() read
    found = evaluate(str(tiny_model_folder), tasks=["copa"], shots=[0], limit=2, device="cpu", show_progress=False)
    given = evaluate(str(tiny_model_folder), tasks=["copa"], shots=[0], limit=2, device="cpu", show_progress=False,
                     data_dir=shared)
    relative = evaluate(str(tiny_model_folder), tasks=["copa"], shots=[0], limit=2, device="cpu",
                        show_progress=False, data_dir="../shared/data")  # data_dir= by the same rule
    assert found.results == given.results == relative.results
    absent = tmp_path / "absent"  # an absolute folder is not looked for elsewhere, and the message says no "in"
    monkeypatch.setenv("HF_GPT_CUSTOM_DATA_DIR", str(absent))
    with pytest.raises(UserError, match=rf"^\$HF_GPT_CUSTOM_DATA_DIR {re.escape(str(absent))} is no folder; give"):
        default_data_dir()
    monkeypatch.setenv("HF_GPT_CUSTOM_DATA_DIR", "no_such_folder")
    with pytest.raises(SystemExit) as exited:
        main(["eval", "--model", str(tiny_model_folder), "--tasks", "copa", "--out", "o"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"hf-gpt-custom eval: error: $HF_GPT_CUSTOM_DATA_DIR no_such_folder is no folder in {tmp_path} or "
        f"{REPO_ROOT}; give the folder holding the benchmark files (README: ../shared/data, beside the checkout)")
