"""The kinds of task (a YAML's `output_type`), one object each in the OUTPUT_TYPES table.

An output type knows what a doc asks of the model and what the answers mean: the Requests of one doc (and so which
CausalLMScorer method scores them, `request_type`), the tokens a prompt must leave free for them, whether few-shot
examples apply, and the per-doc metric values. A new kind of task is one class here and one entry in OUTPUT_TYPES;
the runner, few-shot fitting and task validation only look things up in the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hf_gpt_custom.eval.metrics import (
    EXACT_MATCH_OPTIONS,
    count_words,
    generation_values,
    multiple_choice_values,
    rolling_values,
)
from hf_gpt_custom.eval.requests import Request, ScoredRequest
from hf_gpt_custom.eval.tokens import encode_texts

if TYPE_CHECKING:
    from hf_gpt_custom.eval.fewshot import Prompt
    from hf_gpt_custom.eval.task import TaskSpec

DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's default
# How many tokens an answer may take, under the names lm-eval reads, first found wins (HF's, vLLM's, OpenAI's).
MAX_GEN_TOKS_ALIASES = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")
# generation_kwargs a task may set: evaluation decodes greedily, so sampling settings would be ignored, not obeyed.
GENERATION_KWARGS = ("until", *MAX_GEN_TOKS_ALIASES, "do_sample", "temperature")


class OutputType:
    """The default shape: one Request per text from `continuations`, after the doc's prompt, scored by the
    `request_type` scorer. Subclasses give `continuations` and `doc_metric_values` and override what differs."""

    request_type = "loglikelihood"  # the CausalLMScorer method that scores this type's requests
    supports_fewshot = True
    metrics: tuple[str, ...] = ()  # what doc_metric_values gives: a task's metric_list may name only these

    def continuations(self, spec: TaskSpec, doc: dict) -> list[str]:
        """The texts scored after the context (the space before a word included)."""
        raise NotImplementedError

    def build_requests(self, spec: TaskSpec, doc: dict, prompt: Prompt) -> list[Request]:
        return [Request(prompt.doc_id, prompt.contexts[0], text, request_type=self.request_type) for text in self.continuations(spec, doc)]

    def reserved_tokens(self, spec: TaskSpec, docs: list[dict], tokenizer) -> list[int]:
        """Tokens each doc needs after its context: its longest continuation, minus the last token, which is
        scored but never fed to the model (an input of n tokens scores n + 1 - len(context) tokens)."""
        per_doc = [self.continuations(spec, doc) for doc in docs]
        counts = iter(len(ids) for ids in encode_texts(tokenizer, [text for texts in per_doc for text in texts]))
        return [max(next(counts) for _ in texts) - 1 for texts in per_doc]

    def doc_metric_values(self, spec: TaskSpec, doc: dict, scored: list[ScoredRequest]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(metric name -> per-doc item, the examples.jsonl fields) for one doc's scored requests."""
        raise NotImplementedError


class MultipleChoice(OutputType):
    """One request per choice (per context for multiple_input tasks such as Winogrande), plus GPT-3's
    unconditional requests when the task asks for acc_uncond."""

    metrics = ("acc", "acc_norm", "acc_norm_tokens", "acc_uncond")

    def continuations(self, spec: TaskSpec, doc: dict) -> list[str]:
        if spec.multiple_input:
            return [spec.target_delimiter + str(spec.target(doc))]
        return [spec.target_delimiter + choice for choice in spec.choices(doc)]

    def build_requests(self, spec: TaskSpec, doc: dict, prompt: Prompt) -> list[Request]:
        doc_id = prompt.doc_id
        if spec.multiple_input:
            (continuation,) = self.continuations(spec, doc)
            return [Request(doc_id, context, continuation, choice_index=i) for i, context in enumerate(prompt.contexts)]
        choices = self.continuations(spec, doc)
        requests = [Request(doc_id, prompt.contexts[0], choice, choice_index=i) for i, choice in enumerate(choices)]
        if "acc_uncond" in spec.metric_names:
            requests += [
                Request(doc_id, spec.uncond_context or "", choice, choice_index=i, is_unconditional=True)
                for i, choice in enumerate(choices)
            ]
        return requests

    def doc_metric_values(self, spec, doc, scored):
        conditional = [s for s in scored if not s.request.is_unconditional]
        unconditional = [s for s in scored if s.request.is_unconditional] or None
        choices = spec.choices(doc)
        gold = spec.gold_index(doc)
        lls = [s.loglikelihood for s in conditional]
        # a choice cut to fit the window is normalised by the part scored (lm-eval fails on such a doc); several
        # inputs (winogrande) share one continuation and are normalised by the inputs, as in lm-eval
        cut = not spec.multiple_input and any(s.scored_continuation is not None for s in conditional)
        lengths = [choice if s.scored_continuation is None else s.scored_continuation
                   for choice, s in zip(choices, conditional)] if cut else choices
        values = multiple_choice_values(
            lls, lengths, gold, n_tokens=[s.n_tokens for s in conditional],
            uncond_loglikelihoods=[s.loglikelihood for s in unconditional] if unconditional else None,
        )
        log = {"choices": choices, "loglikelihoods": lls, "prediction": int(max(range(len(lls)), key=lls.__getitem__)), "gold": gold}
        if lengths is not choices:  # an answer was cut: the texts acc_norm divided by, so the row can be recomputed
            log["acc_norm_choices"] = lengths
        if unconditional:
            log["uncond_loglikelihoods"] = [s.loglikelihood for s in unconditional]
        return values, log


class Loglikelihood(OutputType):
    """The target after the context (LAMBADA's last word): its log-likelihood and whether it is the greedy one."""

    metrics = ("perplexity", "acc")

    def continuations(self, spec: TaskSpec, doc: dict) -> list[str]:
        return [str(spec.target(doc))]

    def doc_metric_values(self, spec, doc, scored):
        (one,) = scored
        values = {"perplexity": one.loglikelihood, "acc": float(one.is_greedy)}
        return values, {"choices": [one.request.continuation], "loglikelihoods": [one.loglikelihood],
                        "prediction": "greedy" if one.is_greedy else "not greedy", "gold": one.request.continuation}


class LoglikelihoodRolling(Loglikelihood):
    """A whole document scored from an empty context in windows (perplexity, bits per byte): K=0 only."""

    request_type = "loglikelihood_rolling"
    supports_fewshot = False
    metrics = ("word_perplexity", "byte_perplexity", "bits_per_byte")

    def build_requests(self, spec: TaskSpec, doc: dict, prompt: Prompt) -> list[Request]:
        return [Request(prompt.doc_id, "", text, request_type=self.request_type) for text in self.continuations(spec, doc)]

    def doc_metric_values(self, spec, doc, scored):
        (one,) = scored
        raw = str(doc[spec.count_field]) if spec.count_field else one.request.continuation
        values = rolling_values(one.loglikelihood, count_words(raw), len(raw.encode("utf-8")))
        return values, {"choices": [], "loglikelihoods": [one.loglikelihood], "prediction": None,
                        "gold": None, "n_tokens": one.n_tokens}


def stop_sequences(spec: TaskSpec) -> tuple[str, ...]:
    """generation_kwargs' `until` (one string or a list), else the fewshot_delimiter, as lm-eval defaults it."""
    until = spec.generation_kwargs.get("until", [spec.fewshot_delimiter])
    return (until,) if isinstance(until, str) else tuple(until)


class GenerateUntil(OutputType):
    """Greedy generation until a stop sequence, compared with the answers (exact match, F1)."""

    request_type = "generate_until"
    metrics = ("exact_match", "f1")

    def build_requests(self, spec: TaskSpec, doc: dict, prompt: Prompt) -> list[Request]:
        until = stop_sequences(spec)
        return [Request(prompt.doc_id, prompt.contexts[0], "", request_type=self.request_type, until=until,
                        max_gen_toks=self.max_gen_toks(spec))]

    def reserved_tokens(self, spec: TaskSpec, docs: list[dict], tokenizer) -> list[int]:
        return [self.max_gen_toks(spec)] * len(docs)

    @staticmethod
    def max_gen_toks(spec: TaskSpec) -> int:
        """max_gen_toks or the first of its aliases, in lm-eval's order (normalize_gen_kwargs)."""
        given = (spec.generation_kwargs.get(key) for key in MAX_GEN_TOKS_ALIASES)
        return int(next((value for value in given if value is not None), DEFAULT_MAX_GEN_TOKS))

    def doc_metric_values(self, spec, doc, scored):
        (one,) = scored
        answers = spec.target(doc)
        answers = answers if isinstance(answers, list) else [answers]
        exact_match_kwargs = next((
            {key: entry[key] for key in EXACT_MATCH_OPTIONS if key in entry}
            for entry in spec.metric_list if entry["metric"] == "exact_match"), {})
        values = generation_values(one.generation or "", answers, strip=spec.strips_generation, **exact_match_kwargs)
        return values, {"choices": [], "loglikelihoods": [], "prediction": one.generation, "gold": answers}


OUTPUT_TYPES: dict[str, OutputType] = {
    "loglikelihood": Loglikelihood(),
    "multiple_choice": MultipleChoice(),
    "loglikelihood_rolling": LoglikelihoodRolling(),
    "generate_until": GenerateUntil(),
}
