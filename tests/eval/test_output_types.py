"""The output_type table: the tokens a prompt leaves free for each kind of task, and a new kind of task added as
one OUTPUT_TYPES entry."""

from __future__ import annotations

import json

import pytest
import torch

from hf_gpt_custom.eval.fewshot import ContextTooShortError, build_prompts
from hf_gpt_custom.eval.output_types import OUTPUT_TYPES, Loglikelihood
from hf_gpt_custom.eval.runner import evaluate_task
from hf_gpt_custom.eval.scoring import CausalLMScorer
from hf_gpt_custom.eval.task import load_task
from hf_gpt_custom.eval.tokens import encode_pair


def continuation_loglikelihood(model, tokenizer, context: str, continuation: str) -> float:
    """log p(continuation | context) from one forward pass over both, split where the context's tokens end."""
    context_ids, whole = tokenizer.encode(context), tokenizer.encode(context + continuation)
    with torch.no_grad():
        log_probs = model(torch.tensor([whole])).logits[0].log_softmax(-1)
    return sum(float(log_probs[position - 1, whole[position]]) for position in range(len(context_ids), len(whole)))



def test_a_prompt_that_exactly_fills_the_context_keeps_its_example(tiny_model_and_tokenizer, shared_data_dir):
    """The model is fed context + continuation minus its last token: COPA with one example fits a window of exactly
    max over choices of (context tokens + choice tokens - 1), and not one token less."""
    _, tokenizer = tiny_model_and_tokenizer
    spec = load_task("copa")
    docs = spec.docs("test", shared_data_dir)
    (prompt,) = build_prompts(spec, docs[:1], docs, 1, 1234, tokenizer, max_length=100_000)
    needed = max(
        sum(len(ids) for ids in encode_pair(tokenizer, prompt.contexts[0], spec.target_delimiter + choice)) - 1
        for choice in spec.choices(docs[0])
    )
    (fitted,) = build_prompts(spec, docs[:1], docs, 1, 1234, tokenizer, max_length=needed)
    assert (fitted.n_examples, fitted.n_dropped) == (1, 0)
    with pytest.raises(ContextTooShortError):
        build_prompts(spec, docs[:1], docs, 1, 1234, tokenizer, max_length=needed - 1)


def test_generation_reserves_max_gen_toks(tiny_model_and_tokenizer, shared_data_dir):
    _, tokenizer = tiny_model_and_tokenizer
    spec = load_task("triviaqa")
    docs = spec.docs("test", shared_data_dir)[:2]
    assert OUTPUT_TYPES["generate_until"].reserved_tokens(spec, docs, tokenizer) == [spec.generation_kwargs["max_gen_toks"]] * 2


def test_wikitext_words_and_bytes_are_counted_as_lm_eval_counts_them(shared_data_dir):
    """word_perplexity and bits_per_byte divide by the raw page's words and UTF-8 bytes, counted as lm-eval's
    ConfigurableTask counts them (re.split on whitespace, which counts the empty piece before a leading space;
    len(text.encode("utf-8"))). WikiText pages start with a space and hold non-ASCII text, so str.split() or a
    character count would give other figures. Reference: lm-eval's own count_words / count_bytes."""
    from lm_eval.api.task import ConfigurableTask

    from hf_gpt_custom.eval.requests import Request, ScoredRequest

    spec = load_task("wikitext")
    docs = spec.docs("test", shared_data_dir)[:5]
    assert any(len(doc["page"].encode("utf-8")) != len(doc["page"]) for doc in docs)  # the data can tell them apart
    for doc in docs:
        scored = ScoredRequest(Request(0, "", spec.target(doc), request_type="loglikelihood_rolling"), -100.0, False, 1)
        values, _ = OUTPUT_TYPES["loglikelihood_rolling"].doc_metric_values(spec, doc, [scored])
        words, n_bytes = ConfigurableTask.count_words(doc["page"]), ConfigurableTask.count_bytes(doc["page"])
        assert values == {"word_perplexity": (-100.0, words), "byte_perplexity": (-100.0, n_bytes),
                          "bits_per_byte": (-100.0, n_bytes)}


def test_a_new_output_type_is_one_table_entry(tmp_path, monkeypatch, tiny_model_and_tokenizer, shared_data_dir):
    """A kind of task that scores only the gold answer (its log-likelihood as `perplexity`), added as one OUTPUT_TYPES
    entry: the task file validates, few-shot fitting reserves its tokens, and the runner builds and scores its
    requests — equal to scoring the same texts by hand."""
    class GoldChoice(Loglikelihood):
        def continuations(self, spec, doc):
            return [spec.target_delimiter + spec.choices(doc)[spec.gold_index(doc)]]

    monkeypatch.setitem(OUTPUT_TYPES, "gold_choice", GoldChoice())
    copa = load_task("copa")
    (tmp_path / "copa_gold.yaml").write_text(json.dumps({
        "task": "copa_gold", "output_type": "gold_choice", "doc_to_text": copa.doc_to_text, "doc_to_target": copa.doc_to_target,
        "doc_to_choice": copa.doc_to_choice, "data_files": copa.data_files, "process_docs": copa.process_docs,
        "fewshot_split": copa.fewshot_split, "metric_list": [{"metric": "perplexity"}],
    }))
    spec = load_task("copa_gold", tasks_dir=tmp_path)
    docs = spec.docs("test", shared_data_dir)[:3]
    model, tokenizer = tiny_model_and_tokenizer
    scorer = CausalLMScorer(model, tokenizer)
    rows, examples = evaluate_task(spec, docs, 1, scorer, seed=0, data_dir=shared_data_dir, show_progress=False)
    assert [row["metric"] for row in rows] == ["perplexity"]
    by_hand = [continuation_loglikelihood(model, tokenizer, e["prompt"], e["gold"]) for e in examples]
    assert [e["loglikelihoods"][0] for e in examples] == pytest.approx(by_hand, abs=1e-4)
    assert all(e["prompt"].count("\n\n") == 1 for e in examples)  # one few-shot example each


@pytest.mark.parametrize("generation_kwargs", [{}, {"max_gen_toks": 5}, {"until": "\n\n"}, {"until": ["Q:", "\n"]}])
def test_stop_sequences_default_as_lm_evals_do(generation_kwargs):
    """A generate_until task without `until` stopped at "\n\n" here and at its fewshot_delimiter in lm-eval (30 of
    40 triviaqa generations differed with `fewshot_delimiter: "\n"`); one string is one stop sequence, not its
    characters. lm-eval's own TaskConfig is the reference, and the exported task file says `until` outright."""
    from dataclasses import replace

    from lm_eval.config.task import TaskConfig

    from hf_gpt_custom.eval.lm_eval_export import lm_eval_task_config
    from hf_gpt_custom.eval.output_types import stop_sequences

    spec = replace(load_task("triviaqa"), fewshot_delimiter="\n", generation_kwargs=generation_kwargs)
    theirs = TaskConfig(task="t", output_type="generate_until", fewshot_delimiter="\n",
                        generation_kwargs=dict(generation_kwargs) or None).generation_kwargs["until"]
    theirs = [theirs] if isinstance(theirs, str) else theirs
    assert list(stop_sequences(spec)) == theirs
    request, = OUTPUT_TYPES["generate_until"].build_requests(spec, spec.docs()[0], type("P", (), {"doc_id": 0, "contexts": ("x",)})())
    assert list(request.until) == theirs
    assert lm_eval_task_config(spec, "t")["generation_kwargs"]["until"] == theirs
