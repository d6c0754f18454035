"""Few-shot sampling: deterministic, never the scored doc, the same draws as lm-eval's sampler; prompts that do
not fit drop examples (never the target) and say so; impossible requests are clear ValueErrors."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from hf_gpt_custom.eval.fewshot import build_prompts, sample_fewshot_examples
from hf_gpt_custom.eval.task import load_task


@pytest.fixture(scope="module")
def copa(shared_data_dir):
    spec = load_task("copa")
    return spec, spec.docs("test", shared_data_dir)


def test_sampling_is_deterministic_for_a_seed(copa, tiny_model_and_tokenizer):
    spec, docs = copa
    _, tokenizer = tiny_model_and_tokenizer
    first = build_prompts(spec, docs[:30], docs, 3, 1234, tokenizer, 1024)
    again = build_prompts(spec, docs[:30], docs, 3, 1234, tokenizer, 1024)
    other_seed = build_prompts(spec, docs[:30], docs, 3, 99, tokenizer, 1024)
    assert first == again
    assert first != other_seed
    assert all(p.n_examples == 3 and p.n_dropped == 0 for p in first)


def test_examples_never_include_the_scored_doc(copa, tiny_model_and_tokenizer):
    spec, docs = copa
    _, tokenizer = tiny_model_and_tokenizer
    # K = pool size - 1: every other doc must be drawn, so the scored doc would show up if it could.
    prompts = build_prompts(spec, docs[:10], docs, len(docs) - 1, 0, tokenizer, 100_000)
    for doc, prompt in zip(docs, prompts):
        own_example = spec.fewshot_example(doc).removesuffix(spec.fewshot_delimiter)
        context = prompt.contexts[0]
        assert context.endswith(spec.text(doc))  # the target question is last and intact
        examples = context[: -len(spec.text(doc))].split(spec.fewshot_delimiter)[:-1]
        assert len(examples) == len(docs) - 1 and own_example not in examples


def test_sampler_reproduces_lm_eval_context_sampler(copa):
    """Same seed, same pool, same doc order: the same examples as lm-eval 0.4.13's ContextSampler."""
    from lm_eval.api.samplers import ContextSampler

    _, docs = copa
    theirs = ContextSampler(list(docs), rnd=1234)
    rnd = random.Random(1234)
    for doc in docs[:25]:
        assert sample_fewshot_examples(list(docs), 5, rnd, exclude=doc) == list(theirs.sample(5, eval_doc=doc))


def test_k_larger_than_the_pool_is_a_clear_error(copa):
    _, docs = copa
    with pytest.raises(ValueError, match=r"K=100 few-shot examples requested but the few-shot pool has only 99 docs"):
        sample_fewshot_examples(list(docs), 100, random.Random(0), exclude=docs[0])


def test_long_prompts_drop_examples_not_the_target(shared_data_dir, tiny_model_and_tokenizer):
    spec = load_task("boolq")  # passages of a few hundred tokens with this small vocabulary
    docs = spec.docs("test", shared_data_dir)
    _, tokenizer = tiny_model_and_tokenizer
    prompts = build_prompts(spec, docs[:8], docs, 4, 1234, tokenizer, max_length=1024)
    assert any(p.n_dropped > 0 for p in prompts)
    for doc, prompt in zip(docs, prompts):
        assert prompt.n_examples + prompt.n_dropped == 4
        assert prompt.contexts[0].endswith(spec.text(doc))
        assert len(tokenizer.encode(prompt.contexts[0] + " yes")) <= 1024 + 1 or prompt.n_examples == 0


def test_a_prompt_too_long_drops_its_first_examples_and_keeps_those_nearest_the_target(shared_data_dir,
                                                                                        tiny_model_and_tokenizer):
    """The examples dropped to fit are the farthest from the target (the first ones drawn), as the docstring says:
    the kept ones are the last n_examples of lm-eval's ContextSampler draw for the same seed, rendered as lm-eval
    renders an example (text, target_delimiter, answer) and joined by fewshot_delimiter before the doc's own text."""
    from lm_eval.api.samplers import ContextSampler

    spec = load_task("boolq")
    docs = spec.docs("test", shared_data_dir)
    _, tokenizer = tiny_model_and_tokenizer
    prompts = build_prompts(spec, docs[:8], docs, 4, 1234, tokenizer, max_length=1024)
    assert any(0 < p.n_dropped < 4 for p in prompts)  # some doc keeps part of its examples
    sampler = ContextSampler(list(docs), rnd=1234)
    for doc, prompt in zip(docs, prompts):
        drawn = list(sampler.sample(4, eval_doc=doc))
        kept = drawn[prompt.n_dropped:]
        expected = "".join(spec.text(d) + spec.target_delimiter + spec.choices(d)[spec.target(d)] + spec.fewshot_delimiter
                           for d in kept) + spec.text(doc)
        assert prompt.contexts[0] == spec.description_for(doc) + expected


def test_context_too_small_for_one_example_is_a_clear_error(shared_data_dir, tiny_model_and_tokenizer):
    spec = load_task("lambada")
    docs = spec.docs("test", shared_data_dir)
    _, tokenizer = tiny_model_and_tokenizer
    with pytest.raises(ValueError, match="cannot hold even one few-shot example") as caught:
        build_prompts(spec, docs[:3], docs, 1, 1234, tokenizer, max_length=200)
    # The figure it names is a one-example prompt's, more than the context (it named the zero-shot length, which
    # fits): by hand, each doc's prompt with its one example, the shortest of the three, plus its answer's tokens
    match = re.search(r"the shortest prompt with one, doc (\d)'s, needs (\d+) tokens", str(caught.value))
    assert match
    # the fix in eval's words and run's (run has no --shots: the newcomer3 walk), as the card repeats it
    assert "score it zero-shot (K = 0: eval's --shots 0, run's benchmark_shots)" in str(caught.value)
    from hf_gpt_custom.eval.fewshot import sample_fewshot_examples

    rnd = random.Random(1234)
    examples = [sample_fewshot_examples(docs, 1, rnd, exclude=doc) for doc in docs[:3]]
    lengths = [len(tokenizer(spec.fewshot_example(ex[0]) + spec.text(doc))["input_ids"])
               for doc, ex in zip(docs[:3], examples)]
    best = min(range(3), key=lengths.__getitem__)
    assert int(match.group(1)) == best and 200 < lengths[best] <= int(match.group(2)) <= lengths[best] + 20


def test_winogrande_examples_use_the_gold_option(shared_data_dir, tiny_model_and_tokenizer):
    spec = load_task("winogrande")
    docs = spec.docs("test", shared_data_dir)
    _, tokenizer = tiny_model_and_tokenizer
    (prompt,) = build_prompts(spec, docs[:1], docs, 1, 1234, tokenizer, 1024)
    # One context per option, sharing the solved example (gold option + continuation) in front.
    assert len(prompt.contexts) == 2
    prefix = prompt.contexts[0][: -len(docs[0]["contexts"][0])]
    assert prompt.contexts[1] == prefix + docs[0]["contexts"][1]
    example = prefix[: -len(spec.fewshot_delimiter)]
    assert any(example == d["contexts"][d["gold"]] + " " + d["continuation"] for d in docs)


def test_triviaqa_examples_show_the_answer_lm_eval_shows(shared_data_dir):
    """lm-eval's triviaqa has `doc_to_target: "{{answer.aliases}}"`, and its build_qa_turn shows the first element of
    a list target. The llm-foundry file keeps lm-eval's alias order; moving the canonical answer first made 2,354
    of the 3,000 examples read differently from lm-eval's ("Onion" where lm-eval shows "Onion skins")."""
    import json

    from lm_eval.api.task import ConfigurableTask
    from lm_eval.api.utils import messages_to_text

    spec = load_task("triviaqa", protocol="lm-eval")
    rows = [json.loads(line) for line in (shared_data_dir / "triviaqa" / "triviaqa_sm_sub_llmfoundry.jsonl")
            .read_text(encoding="utf-8").splitlines()[:200]]
    ours = spec.docs("test", shared_data_dir)[:200]
    differs = 0
    for row, doc in zip(rows, ours):
        # the prompt as lm-eval's template renders the file's raw question (checked below); the answer as lm-eval
        # picks it
        turn = ConfigurableTask.build_qa_turn(None, q=row["context"].removesuffix("\nAnswer:") + "?\nAnswer:",
                                              a=row["aliases"])
        assert spec.fewshot_example(doc) == messages_to_text(turn)  # lm-eval's few-shot delimiter after it
        assert set(spec.target(doc)) == set(row["aliases"])
        differs += row["aliases"][0] != row["answer"]
    assert differs > 100  # the canonical answer is often not lm-eval's first alias: the test can tell them apart


@pytest.mark.parametrize("protocol", ["ours", "lm-eval"])
def test_triviaqa_prompts_are_lm_evals_template_on_the_raw_question(shared_data_dir, protocol):
    """lm-eval renders `Question: {{question}}?\nAnswer:` over the raw question; the llm-foundry file holds that raw
    question (377 of 3,000 end without "?"), and the transform used it as it was: every prompt lacked lm-eval's "?".
    Reference: lm-eval's own triviaqa YAML, rendered with jinja2; and its generation budget, HFLM's default."""
    import json

    import jinja2
    import yaml
    from lm_eval.models.huggingface import HFLM

    import lm_eval

    reference = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "triviaqa" / "default.yaml").read_text())
    template = jinja2.Template(reference["doc_to_text"], keep_trailing_newline=True)
    spec = load_task("triviaqa", protocol=protocol)
    rows = [json.loads(line) for line in (shared_data_dir / "triviaqa" / "triviaqa_sm_sub_llmfoundry.jsonl")
            .read_text(encoding="utf-8").splitlines()[:300]]
    for row, doc in zip(rows, spec.docs("test", shared_data_dir)[:300]):
        raw = row["context"].removeprefix("Question: ").removesuffix("\nAnswer:")
        assert spec.text(doc) == template.render(question=raw)
    if protocol == "lm-eval":
        assert "max_gen_toks" not in reference["generation_kwargs"]  # so HFLM's default applies
        assert spec.generation_kwargs["max_gen_toks"] == HFLM.max_gen_toks.fget(None) == 256


def test_triviaqa_from_the_hub_keeps_lm_evals_aliases_and_order():
    """mandarjoshi/trivia_qa rows as lm-eval reads them: its gold is `answer.aliases` as they are (not the `value`
    added when it is missing), its few-shot answer their first."""
    from hf_gpt_custom.eval.doc_transforms import triviaqa_hub_to_aliases

    rows = [{"question": "Which vegetable", "answer": {"value": "Onion", "aliases": ["Onion skins", "Onion"]}},
            {"question": "Odd one", "answer": {"value": "Not listed", "aliases": ["Listed"]}}]
    assert triviaqa_hub_to_aliases(rows) == [{"question": "Which vegetable?", "aliases": ["Onion skins", "Onion"]},
                                            {"question": "Odd one?", "aliases": ["Listed"]}]
