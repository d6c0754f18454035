"""Scoring rules checked against lm-evaluation-harness's own definitions, through evaluate() and build_prompts.

- TriviaQA exact match: lm-eval's triviaqa task (its default.yaml metric options, its remove_whitespace filter and
  its exact_match function) decides each doc; our pipeline, from the task YAML to the per-doc metric, must agree.
- Token F1: the official SQuAD F1 as lm-eval ships it.
- Few-shot fitting: lm-eval feeds context + continuation without its last token (a loglikelihood request of n
  tokens fits in n - 1 positions) and gives a generation max_gen_toks positions after the context. A prompt that
  needs exactly max_length positions keeps every example; one position fewer drops one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hf_gpt_custom.eval.fewshot import build_prompts
from hf_gpt_custom.eval.runner import evaluate
from hf_gpt_custom.eval.task import load_task

TRIVIAQA_FILE = Path("triviaqa") / "triviaqa_sm_sub_llmfoundry.jsonl"


def _lm_eval_triviaqa_exact_match_options() -> dict:
    import lm_eval

    task = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "triviaqa" / "default.yaml").read_text())
    (entry,) = [entry for entry in task["metric_list"] if entry["metric"] == "exact_match"]
    return {key: entry[key] for key in ("ignore_case", "ignore_punctuation") if key in entry}


def _write_triviaqa(data_dir: Path, docs: list[dict]) -> None:
    path = data_dir / TRIVIAQA_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(doc) + "\n" for doc in docs), encoding="utf-8")


def test_triviaqa_exact_match_follows_lm_eval_rules_case_included(tiny_model_folder, shared_data_dir, tmp_path):
    from lm_eval.api.metrics import exact_match_hf_evaluate
    from lm_eval.filters.extraction import WhitespaceFilter

    lines = (shared_data_dir / TRIVIAQA_FILE).read_text(encoding="utf-8").splitlines()[:12]
    docs = [json.loads(line) for line in lines]
    _write_triviaqa(tmp_path / "first", docs)  # two folders: docs are cached per path within a process
    first = evaluate(str(tiny_model_folder), tasks=["triviaqa"], shots=[0], data_dir=tmp_path / "first",
                     show_progress=False)
    # The random model's answers, each made the only alias with every letter's case flipped.
    generations = [example["prediction"] for example in first.examples]
    flipped = [
        dict(doc, answer=text.strip().swapcase(), aliases=[text.strip().swapcase()])
        for doc, text in zip(docs, generations)
        if text.strip() != text.strip().swapcase()
    ]
    assert len(flipped) >= 3, generations
    _write_triviaqa(tmp_path / "second", flipped)
    second = evaluate(str(tiny_model_folder), tasks=["triviaqa"], shots=[0], data_dir=tmp_path / "second",
                      show_progress=False)
    assert len(second.examples) == len(flipped)

    options = _lm_eval_triviaqa_exact_match_options()
    assert options.get("ignore_case") is True  # the rule this test is about
    for example, doc in zip(second.examples, flipped):
        ((prediction,),) = WhitespaceFilter().apply([[example["prediction"]]], [doc])  # lm-eval's remove_whitespace
        expected = exact_match_hf_evaluate([prediction], doc["aliases"], **options)["exact_match"]
        assert example["metrics"]["exact_match"] == expected == 1.0, (prediction, doc["aliases"])
    assert second.value("triviaqa", "exact_match") == 1.0


def _positions_needed(spec, tokenizer, context: str, doc: dict) -> int:
    """Model positions lm-eval needs for this context: the longest choice's tokens minus the last one, or the
    generation budget."""
    if spec.output_type == "generate_until":
        return len(tokenizer(context)["input_ids"]) + int(spec.generation_kwargs["max_gen_toks"])
    continuations = [spec.target_delimiter + choice for choice in spec.choices(doc)]
    return max(len(tokenizer(context + continuation)["input_ids"]) for continuation in continuations) - 1


@pytest.mark.parametrize("task", ["arc_easy", "triviaqa"])
def test_a_prompt_that_fits_exactly_keeps_all_examples_and_one_token_less_drops_one(
    task, tiny_model_and_tokenizer, shared_data_dir
):
    _, tokenizer = tiny_model_and_tokenizer
    spec = load_task(task)
    docs = spec.docs("test", shared_data_dir)[:1]
    pool = spec.fewshot_docs(shared_data_dir)
    k, seed = 3, 1234

    def prompt(max_length: int):
        (built,) = build_prompts(spec, docs, pool, k, seed, tokenizer, max_length,
                                 exclude_scored_doc=spec.fewshot_split == "test")
        return built

    unlimited = prompt(10**6)
    assert unlimited.n_examples == k
    needed = _positions_needed(spec, tokenizer, unlimited.contexts[0], docs[0])
    exact = prompt(needed)
    assert (exact.n_examples, exact.n_dropped, exact.contexts) == (k, 0, unlimited.contexts)
    one_short = prompt(needed - 1)
    assert one_short.n_dropped >= 1 and one_short.n_examples == k - one_short.n_dropped
    # The examples farthest from the question go first: what is left is the end of the full prompt.
    assert unlimited.contexts[0].endswith(one_short.contexts[0][len(spec.description):])


# Articles, punctuation, case, repeated and missing words: each case exercises one step of SQuAD's normalisation.
F1_CASES = [
    ("An onion", "onion"), ("the Eiffel Tower", "Eiffel Tower in Paris"), ("a red, red rose", "Red rose!"),
    ("The Beatles", "Beatles (band)"), ("an apple a day", "The apple"), ("New York City", "new-york"),
    ("Thea", "the a"), ("answer: anne", "Anne"), ("U.S.A.", "USA"), ("Paris, France", "france"),
    ("", ".a"), ("the", "(a"), ("", "Paris"), ("Paris", ""),  # nothing left after normalising: no token in common
]


@pytest.mark.parametrize("prediction, reference", F1_CASES)
def test_token_f1_is_the_official_squad_f1(prediction, reference):
    from lm_eval.tasks.mlqa.utils import f1_score  # the SQuAD v1.1 script as lm-eval ships it (English)

    from hf_gpt_custom.eval.metrics import generation_values

    assert generation_values(prediction, [reference])["f1"] == pytest.approx(f1_score(prediction, reference, "en"))


@pytest.mark.parametrize("generation, aliases", [
    (" Paris ", ["paris"]), ("\tThe Beatles  ", ["the beatles!", "Beatles"]), ("onion", ["Onion skins", "ONION"]),
    ("New-York", ["new york"]), (" red onion", ["Onion"]),
])
def test_triviaqa_exact_match_of_a_raw_generation_is_lm_evals(generation, aliases):
    """The raw generation through our task's options and metric equals lm-eval's filter + exact_match + best alias."""
    from lm_eval.api.metrics import exact_match_hf_evaluate
    from lm_eval.filters.extraction import WhitespaceFilter

    from hf_gpt_custom.eval.metrics import generation_values

    spec = load_task("triviaqa")
    (ours,) = [entry for entry in spec.metric_list if entry["metric"] == "exact_match"]
    options = {key: ours[key] for key in ("ignore_case", "ignore_punctuation") if key in ours}
    ((filtered,),) = WhitespaceFilter().apply([[generation]], [{}])
    expected = max(exact_match_hf_evaluate([filtered], [alias], **_lm_eval_triviaqa_exact_match_options())["exact_match"]
                   for alias in aliases)
    assert spec.strips_generation  # triviaqa.yaml's filter_list is lm-eval's remove_whitespace
    assert generation_values(generation, aliases, strip=spec.strips_generation, **options)["exact_match"] == expected
