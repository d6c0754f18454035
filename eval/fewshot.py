"""Few-shot prompts: seeded sampling of solved examples and fitting the prompt into the context window.

Sampling reproduces lm-evaluation-harness 0.4.13's ContextSampler, so the same seed gives the same examples:
one `random.Random(seed)` per task and K, docs visited in order, and when examples come from the scored split,
K + 1 are drawn and the doc being scored is removed. Scoring lives in eval/scoring.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hf_gpt_custom.eval.output_types import OUTPUT_TYPES
from hf_gpt_custom.eval.tokens import encode_texts
from hf_gpt_custom.eval.task import TaskSpec
from hf_gpt_custom.errors import UserError


@dataclass(frozen=True)
class Prompt:
    doc_id: int
    contexts: tuple[str, ...]  # one context; one per choice for multiple-input tasks (Winogrande)
    n_examples: int  # solved examples actually in the prompt
    n_dropped: int  # examples dropped to fit the context window


def sample_fewshot_examples(pool: list[dict], k: int, rnd: random.Random, exclude: dict | None = None) -> list[dict]:
    """k docs from `pool`, never `exclude` (the doc being scored when examples come from its own split)."""
    if k == 0:
        return []
    available = len(pool) - (1 if exclude is not None else 0)  # the scored doc is in the pool it is drawn from
    if k > available:
        raise UserError(
            f"K={k} few-shot examples requested but the few-shot pool has only {available} docs"
            f"{' besides the one being scored' if exclude is not None else ''}; use K <= {available}"
        )
    if exclude is None:
        return rnd.sample(pool, k)
    examples = [doc for doc in rnd.sample(pool, k + 1) if doc != exclude][:k]
    if len(examples) < k:  # the pool holds copies of the scored doc: draw again without any of them
        examples = rnd.sample([doc for doc in pool if doc != exclude], k)
    return examples


class ContextTooShortError(UserError):
    """The model's context cannot hold even one few-shot example of the task: a K-shot score would be 0-shot.
    `what` names the task and K, `advice` the fix: several such errors are said as one, the advice once."""

    def __init__(self, what: str, advice: str | None = None):
        super().__init__(what if advice is None else f"{what}; {advice}")
        self.what, self.advice = what, advice


def build_prompts(
    spec: TaskSpec,
    docs: list[dict],
    pool: list[dict],
    k: int,
    seed: int,
    tokenizer,
    max_length: int,
    exclude_scored_doc: bool | None = None,
) -> list[Prompt]:
    """The prompt of every doc with k solved examples joined by the task's fewshot_delimiter.

    spec.fewshot_fit says what happens when a prompt plus its longest continuation (or max_gen_toks for
    generation) exceeds max_length tokens:
    - "drop-examples" (ours): the examples farthest from the target are dropped one at a time; the target is
      never cut here. If no doc can keep even one example, that is a ValueError: the K-shot result would
      silently be a 0-shot one.
    - "lm-eval": all K examples stay, as in lm-eval; the scorer then keeps the last tokens of the prompt
      (lm-eval's left truncation) and marks the doc truncated.
    """
    if exclude_scored_doc is None:  # the task's rule (TaskSpec.excludes_scored_doc)
        exclude_scored_doc = spec.excludes_scored_doc
    rnd = random.Random(seed)
    drafts = []
    for doc_id, doc in enumerate(docs):
        examples = sample_fewshot_examples(pool, k, rnd, exclude=doc if exclude_scored_doc else None)
        drafts.append([spec.fewshot_example(example) for example in examples])
    prompts = [_render(spec, doc_id, doc, examples, 0) for doc_id, (doc, examples) in enumerate(zip(docs, drafts))]
    if k == 0 or spec.fewshot_fit == "lm-eval":
        return prompts
    reserve = OUTPUT_TYPES[spec.output_type].reserved_tokens(spec, docs, tokenizer)
    lengths = [max(n) for n in _token_counts(prompts, tokenizer)]
    for doc_id, doc in enumerate(docs):
        n_dropped = 0
        while lengths[doc_id] + reserve[doc_id] > max_length and n_dropped < len(drafts[doc_id]):
            n_dropped += 1
            prompts[doc_id] = _render(spec, doc_id, doc, drafts[doc_id][n_dropped:], n_dropped)
            lengths[doc_id] = max(_token_counts([prompts[doc_id]], tokenizer)[0])
    if all(prompt.n_examples == 0 for prompt in prompts):
        # error path only: each doc with the one example kept last (the nearest), and the shortest of those prompts
        needs = [reserve[i] + _length_with_one_example(spec, i, doc, drafts[i], tokenizer) for i, doc in enumerate(docs)]
        best = min(range(len(docs)), key=needs.__getitem__)
        raise ContextTooShortError(
            f"task {spec.task} at K={k}: the model's context of {max_length} tokens cannot hold even one few-shot "
            f"example (the shortest prompt with one, doc {best}'s, needs {needs[best]} tokens)",
            "score it zero-shot (K = 0: eval's --shots 0, run's benchmark_shots), leave the task out, or use a model "
            "with a longer context"
        )
    return prompts


def _render(spec: TaskSpec, doc_id: int, doc: dict, examples: list[str], n_dropped: int) -> Prompt:
    prefix = spec.description_for(doc) + "".join(examples)  # each example ends in its fewshot_delimiter
    if spec.multiple_input:
        contexts = tuple(prefix + choice for choice in spec.choices(doc))
    else:
        contexts = (prefix + spec.text(doc),)
    return Prompt(doc_id, contexts, len(examples), n_dropped)


def _token_counts(prompts: list[Prompt], tokenizer) -> list[list[int]]:
    flat = [context for prompt in prompts for context in prompt.contexts]
    counts = iter(len(ids) for ids in encode_texts(tokenizer, flat))
    return [[next(counts) for _ in prompt.contexts] for prompt in prompts]


def _length_with_one_example(spec: TaskSpec, doc_id: int, doc: dict, examples: list[str], tokenizer) -> int:
    return max(_token_counts([_render(spec, doc_id, doc, examples[-1:], len(examples) - 1)], tokenizer)[0])
