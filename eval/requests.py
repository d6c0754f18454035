"""Request and ScoredRequest: the seam between prompting and the model, as `Instance` is in lm-evaluation-harness.

A task turns each doc into one or more Requests (one per choice for multiple choice); eval/scoring.py turns each
Request into a ScoredRequest. Nothing here knows about models or templates.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    doc_id: int
    context: str  # prompt, few-shot examples included ("" for rolling loglikelihood)
    continuation: str  # scored text; the space before a word belongs here (generation: unused)
    request_type: str = "loglikelihood"  # loglikelihood | loglikelihood_rolling | generate_until
    choice_index: int = 0
    is_unconditional: bool = False  # GPT-3's "Answer:"-context request used by acc_uncond
    until: tuple[str, ...] = ()  # generate_until stop sequences
    max_gen_toks: int = 256


@dataclass(frozen=True)
class ScoredRequest:
    request: Request
    loglikelihood: float  # sum of log-probs of the continuation tokens (natural log)
    is_greedy: bool  # every continuation token is the argmax given what precedes it
    n_tokens: int  # continuation tokens scored (generation: tokens generated)
    generation: str | None = None
    is_truncated: bool = False  # cut from the left to fit the context window (the context, or even the continuation)
    # where the continuation alone was longer than the window, the text of its last tokens, the ones scored: what
    # acc_norm divides the log-likelihood by (the whole choice's characters made a cut choice look likelier)
    scored_continuation: str | None = None
