"""Metrics: per-doc values from scored requests, their aggregation over docs, and standard errors.

Each metric is one entry in METRICS (aggregation, stderr, higher_is_better), as in lm-evaluation-harness. This is
the one home of each formula: eval/metric_modules/ wraps these functions as `evaluate` modules that load offline
with `evaluate.load(<local path>)` (the Hub's exact_match / squad scripts need network), and our runner calls them
directly, so `evaluate` is not imported during an evaluation.
"""

from __future__ import annotations

import collections
import math
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from hf_gpt_custom.errors import UserError



# --- per-doc values ----------------------------------------------------------------------------------------------


def multiple_choice_values(
    loglikelihoods: Sequence[float],
    choices: Sequence[str],
    gold: int,
    n_tokens: Sequence[int] | None = None,
    uncond_loglikelihoods: Sequence[float] | None = None,
) -> dict[str, float]:
    """acc, acc_norm (log-likelihood / characters of the choice, lm-eval), acc_norm_tokens (/ tokens, GPT-3),
    acc_uncond (log p(choice | context) - log p(choice | "Answer:"), GPT-3's ARC / OpenBookQA normalisation).
    Ties go to the first choice (numpy argmax), as in lm-eval."""
    lls = np.asarray(loglikelihoods, dtype=np.float64)
    values = {
        "acc": float(np.argmax(lls) == gold),
        "acc_norm": float(np.argmax(lls / np.array([float(len(c)) for c in choices])) == gold),
    }
    if n_tokens is not None:
        values["acc_norm_tokens"] = float(np.argmax(lls / np.asarray(n_tokens, dtype=np.float64)) == gold)
    if uncond_loglikelihoods is not None:
        values["acc_uncond"] = float(np.argmax(lls - np.asarray(uncond_loglikelihoods, dtype=np.float64)) == gold)
    return values


def _normalize_squad(text: str) -> str:
    """SQuAD v1.1 answer normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD v1.1 token-overlap F1 between two answers after normalisation. No token in common is 0, also when both
    normalise to nothing (an empty generation against the alias ".a"): v2's 1 for two empty answers marks an
    unanswerable question answered as such, which a generation task here never asks."""
    prediction_tokens = _normalize_squad(prediction).split()
    reference_tokens = _normalize_squad(reference).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(reference_tokens)
    n_same = sum(common.values())
    if n_same == 0:
        return 0.0
    precision, recall = n_same / len(prediction_tokens), n_same / len(reference_tokens)
    return 2 * precision * recall / (precision + recall)


# A task's `exact_match` entry in metric_list may set these, as lm-eval's exact_match (hf evaluate's) reads them.
EXACT_MATCH_OPTIONS = ("regexes_to_ignore", "ignore_case", "ignore_punctuation", "ignore_numbers")


def exact_match(prediction: str, reference: str, regexes_to_ignore: Sequence[str] | None = None,
                ignore_case: bool = False, ignore_punctuation: bool = False, ignore_numbers: bool = False) -> float:
    """1.0 if equal after lm-eval's optional steps, in its order: each regex removed ("," in "1,000"), case folded,
    ASCII punctuation removed, digits removed. Python strings, where lm-eval 0.4's uses numpy's fixed-width ones:
    there a lower-cased "İ" (two code points) pushes the last character out and a trailing NUL is dropped, so
    "İstanbul" matches "i̇stanbu"; here it matches "i̇stanbul" (the only texts on which the two differ)."""
    for pattern in regexes_to_ignore or ():
        prediction, reference = re.sub(pattern, "", prediction), re.sub(pattern, "", reference)
    if ignore_case:
        prediction, reference = prediction.lower(), reference.lower()
    if ignore_punctuation:
        table = str.maketrans("", "", string.punctuation)
        prediction, reference = prediction.translate(table), reference.translate(table)
    if ignore_numbers:
        table = str.maketrans("", "", string.digits)
        prediction, reference = prediction.translate(table), reference.translate(table)
    return float(prediction == reference)


def generation_values(generation: str, answers: Sequence[str], strip: bool = False,
                      **exact_match_kwargs) -> dict[str, float]:
    """exact_match and F1 of a generation against the best-matching answer (TriviaQA aliases); `strip`: lm-eval's
    remove_whitespace filter (a task's filter_list), else the generation as generated, as lm-eval scores it. A doc
    with no answer (an unanswerable question: []) scores 0, as in lm-eval, whose best match over nothing is 0."""
    prediction = generation.strip() if strip else generation
    return {
        "exact_match": max((exact_match(prediction, answer, **exact_match_kwargs) for answer in answers), default=0.0),
        "f1": max((token_f1(prediction, answer) for answer in answers), default=0.0),
    }


def rolling_values(loglikelihood: float, words: int, n_bytes: int) -> dict[str, tuple[float, int]]:
    """(loglikelihood, weight) pairs; the weighted aggregation divides total log-likelihood by total weight."""
    return {
        "word_perplexity": (loglikelihood, words),
        "byte_perplexity": (loglikelihood, n_bytes),
        "bits_per_byte": (loglikelihood, n_bytes),
    }


def count_words(text: str) -> int:
    return len(re.split(r"\s+", text))  # lm-eval counts this way, on the text before detokenization


# --- aggregation over docs ---------------------------------------------------------------------------------------


def mean(items: Sequence[float]) -> float:
    return float(np.mean(items))


def _exp(value: float) -> float:
    """math.exp, inf past float's range (a mean log-likelihood under -709 nats: a diverged model) where math.exp
    raises OverflowError after every request was scored, and every task's results were lost with it."""
    try:
        return math.exp(value)
    except OverflowError:
        return math.inf


def perplexity(items: Sequence[float]) -> float:
    """exp of minus the mean per-doc log-likelihood (LAMBADA: the target word's log-likelihood)."""
    return _exp(-mean(items))


def weighted_perplexity(items: Sequence[tuple[float, int]]) -> float:
    total_ll, total_weight = map(sum, zip(*items))
    return _exp(-total_ll / total_weight)


def bits_per_byte(items: Sequence[tuple[float, int]]) -> float:
    total_ll, total_bytes = map(sum, zip(*items))
    return -total_ll / total_bytes / math.log(2)


def mean_stderr(items: Sequence[float]) -> float | None:
    """Sample standard deviation / sqrt(n), lm-eval's closed form for means."""
    if len(items) < 2:
        return None
    return float(np.std(items, ddof=1) / math.sqrt(len(items)))


def perplexity_stderr(items: Sequence[float]) -> float | None:
    """lm-eval's standard error of perplexity: the standard deviation of exp(-mean) over bootstrap resamples of the
    docs (n drawn with replacement), here in closed form, the value lm-eval's 100,000 random draws estimate. The
    resampled mean is a sum of n independent draws, so E[exp(-k·mean*)] = (mean_i exp(-k·x_i/n))^n for k = 1, 2,
    taken in log space. Drawn at random (as lm-eval, and this function before), the estimate was good to its order
    of magnitude only on a few heavy-tailed docs of a weak model: at 16 LAMBADA docs, lm-eval's was 0.28x the value
    and ours 0.02x (the lmevalparity4 hunt). How close lm-eval's draws come depends on the tail against the number of
    docs: within their noise at 300 docs of LAMBADA-like values, far off with one doc at -200 nats among 50."""
    if len(items) < 2:
        return None
    values = np.asarray(items, dtype=np.float64)
    if not np.isfinite(values).all():  # a NaN or -inf log-likelihood (float16 overflow): no spread to give, as
        return math.nan  # lm-eval's bootstrap gives nan (min(0.0, nan) below read it as no spread: 0.0)
    n = len(values)

    def log_mean_exp(exponents: np.ndarray) -> float:
        top = float(exponents.max())
        return top + math.log(float(np.exp(exponents - top).mean()))

    log_first = n * log_mean_exp(-values / n)  # log E[exp(-mean*)]
    log_second = n * log_mean_exp(-2 * values / n)  # log E[exp(-2 mean*)]
    # variance = E2 - E1^2 = E2 · (1 - exp(2 log E1 - log E2)), without the cancellation of two huge numbers
    spread = -math.expm1(min(0.0, 2 * log_first - log_second))  # Jensen: 2 log E1 <= log E2, rounding aside
    return _exp(log_second / 2) * math.sqrt(spread) if spread > 0 else 0.0


def no_stderr(items: Sequence) -> None:
    """lm-eval reports no standard error for pooled ratios (weighted_perplexity, bits_per_byte: "N/A"), so neither
    does this project: WikiText's rows carry none."""
    return None


@dataclass(frozen=True)
class Metric:
    aggregate: Callable[[list], float]
    stderr: Callable[[list], float | None]
    higher_is_better: bool


METRICS: dict[str, Metric] = {
    "acc": Metric(mean, mean_stderr, True),
    "acc_norm": Metric(mean, mean_stderr, True),
    "acc_norm_tokens": Metric(mean, mean_stderr, True),
    "acc_uncond": Metric(mean, mean_stderr, True),
    "exact_match": Metric(mean, mean_stderr, True),
    "f1": Metric(mean, mean_stderr, True),
    "perplexity": Metric(perplexity, perplexity_stderr, False),
    "word_perplexity": Metric(weighted_perplexity, no_stderr, False),
    "byte_perplexity": Metric(weighted_perplexity, no_stderr, False),
    "bits_per_byte": Metric(bits_per_byte, no_stderr, False),
}


def aggregate_metric(name: str, items: Sequence) -> tuple[float, float | None]:
    """(value, stderr) of metric `name` over per-doc items."""
    if name not in METRICS:
        raise UserError(f"unknown metric {name!r}; known metrics: {', '.join(METRICS)}")
    metric = METRICS[name]
    return metric.aggregate(list(items)), metric.stderr(list(items))
