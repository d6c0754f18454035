"""Metrics equal hand computations and lm-eval's own functions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hf_gpt_custom.eval.metrics import (
    aggregate_metric,
    bits_per_byte,
    exact_match,
    generation_values,
    mean_stderr,
    multiple_choice_values,
    perplexity,
    token_f1,
    weighted_perplexity,
)


def test_multiple_choice_metrics_by_hand():
    # Choice 0: ll -4 over 2 chars (-2/char); choice 1: ll -6 over 6 chars (-1/char); gold is 1.
    # Unconditional lls -5 and -3: -4 - -5 = +1 beats -6 - -3 = -3.
    values = multiple_choice_values([-4.0, -6.0], ["ab", "abcdef"], gold=1, n_tokens=[1, 4], uncond_loglikelihoods=[-5.0, -3.0])
    assert values == {"acc": 0.0, "acc_norm": 1.0, "acc_norm_tokens": 1.0, "acc_uncond": 0.0}
    # Ties go to the first choice, like numpy / lm-eval.
    assert multiple_choice_values([-1.0, -1.0], ["a", "b"], gold=0)["acc"] == 1.0


@pytest.mark.parametrize("lls, choices", [
    ([-3.3, -4.0], ["ééé", "abcd"]),  # per character: -1.1 vs -1.0; per UTF-8 byte: -0.55 vs -1.0
    ([-6.0, -5.0, -9.0], ["naïve café", "über", "日本語のテキスト"]),
])
def test_acc_norm_divides_by_characters_as_lm_eval_does(lls, choices):
    """acc_norm is log-likelihood per character of the choice (lm-eval's completion_len = len(choice)), not per byte:
    the two disagree as soon as a choice is not ASCII, and every test choice so far was. Reference: lm-eval's own
    MultipleChoiceTask.process_results on the same numbers, for every gold."""
    from lm_eval.api.task import MultipleChoiceTask

    for gold in range(len(choices)):
        theirs = MultipleChoiceTask.process_results(None, {"choices": choices, "gold": gold}, [(ll, False) for ll in lls])
        ours = multiple_choice_values(lls, choices, gold)
        assert (ours["acc"], ours["acc_norm"]) == (theirs["acc"], theirs["acc_norm"]), gold


def test_perplexities_and_bits_per_byte_by_hand():
    assert perplexity([-1.0, -3.0]) == pytest.approx(math.exp(2.0))
    # Two docs: total ll -10 over 4 + 6 words -> exp(1); over 20 bytes -> bits = 10 / 20 / ln 2.
    items = [(-4.0, 4), (-6.0, 6)]
    assert weighted_perplexity(items) == pytest.approx(math.e)
    assert bits_per_byte([(-4.0, 8), (-6.0, 12)]) == pytest.approx(0.5 / math.log(2))


def test_mean_stderr_matches_lm_eval():
    from lm_eval.api.metrics import mean_stderr as lm_eval_mean_stderr

    items = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    assert mean_stderr(items) == pytest.approx(lm_eval_mean_stderr(items))
    # By hand: mean 4/7, sample variance (4*(3/7)^2 + 3*(4/7)^2) / 6 = 2/7.
    assert mean_stderr(items) == pytest.approx(math.sqrt(2 / 7) / math.sqrt(7))
    value, stderr = aggregate_metric("acc", items)
    assert value == pytest.approx(4 / 7) and stderr == pytest.approx(mean_stderr(items))


def test_bootstrap_stderr_of_perplexity_is_deterministic_and_positive():
    value, stderr = aggregate_metric("perplexity", [-1.0, -2.0, -0.5, -3.0, -1.5])
    assert value == pytest.approx(math.exp(1.6))
    assert stderr == aggregate_metric("perplexity", [-1.0, -2.0, -0.5, -3.0, -1.5])[1] and stderr > 0


def test_perplexity_stderr_is_the_bootstraps_exact_value_on_heavy_tailed_documents():
    """Drawn at random, the bootstrap stderr of perplexity was good to its order of magnitude only on a few
    heavy-tailed documents (ours 0.02x, lm-eval's 0.28x the value at 16 LAMBADA docs: the lmevalparity4 hunt).
    Reference: every one of the 6^6 equally likely resamples of 6 documents, enumerated, and its exp(-mean)'s
    standard deviation."""
    import itertools

    items = [-0.5, -1.0, -2.5, -4.0, -30.0, -45.0]  # two documents far in the tail, as a weak model's LAMBADA
    resampled = [math.exp(-sum(draw) / len(draw)) for draw in itertools.product(items, repeat=len(items))]
    assert aggregate_metric("perplexity", items)[1] == pytest.approx(float(np.std(resampled)), rel=1e-9)
    assert aggregate_metric("perplexity", [-2.0] * 4)[1] == 0.0  # one value: no spread
    for bad in (math.nan, -math.inf):  # a float16 overflow: nan, as lm-eval's bootstrap gives (not 0.0)
        assert math.isnan(aggregate_metric("perplexity", [-1.0, bad, -2.0])[1])


def test_perplexity_stderr_is_lm_evals_bootstrap(monkeypatch):
    """lm-eval bootstraps LAMBADA's perplexity with 100,000 draws; ours drew 1,000, ~2% off by chance alone.
    Reference: lm-eval's own bootstrap_stderr on the same items (single-process, its 100,000 draws)."""
    from lm_eval.api.metrics import bootstrap_stderr, perplexity as lm_eval_perplexity

    monkeypatch.setenv("DISABLE_MULTIPROC", "1")
    items = [float(x) for x in -np.random.default_rng(0).gamma(2.0, 1.5, size=40)]
    theirs = bootstrap_stderr(lm_eval_perplexity, items, iters=100_000)
    value, ours = aggregate_metric("perplexity", items)
    assert value == pytest.approx(lm_eval_perplexity(items))
    assert ours == pytest.approx(theirs, rel=0.015)  # lm-eval's draws are within ~0.5% of the exact value here


def test_a_metric_has_a_stderr_exactly_where_lm_eval_gives_one():
    """WikiText's word/byte perplexity and bits per byte carried a bootstrap stderr where lm-eval reports "N/A"."""
    from lm_eval.api import metrics as lm

    lm_eval_aggregation = {"acc": lm.mean, "acc_norm": lm.mean, "exact_match": lm.mean, "perplexity": lm.perplexity,
                           "word_perplexity": lm.weighted_perplexity, "byte_perplexity": lm.weighted_perplexity,
                           "bits_per_byte": lm.bits_per_byte}
    items = {"acc": [1.0, 0.0, 1.0], "acc_norm": [1.0, 0.0, 1.0], "exact_match": [0.0, 1.0, 1.0],
             "perplexity": [-1.0, -2.0, -0.5]}
    for name, aggregation in lm_eval_aggregation.items():
        theirs = lm.stderr_for_metric(aggregation, bootstrap_iters=100_000)
        _, ours = aggregate_metric(name, items.get(name, [(-4.0, 3), (-6.0, 5), (-1.0, 2)]))
        assert (ours is None) == (theirs is None), name


def test_exact_match_matches_lm_eval_rules():
    from lm_eval.api.metrics import exact_match_hf_evaluate

    cases = [("The Beatles!", "the beatles"), ("Paris", "paris."), ("Onion", "Onions"), ("", "")]
    for prediction, reference in cases:
        theirs = exact_match_hf_evaluate([prediction], [reference], ignore_case=True, ignore_punctuation=True)["exact_match"]
        assert exact_match(prediction, reference, ignore_case=True, ignore_punctuation=True) == theirs
    assert exact_match("Paris", "paris") == 0.0


@pytest.mark.parametrize("options", [
    {"regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"]},
    {"ignore_numbers": True},
    {"regexes_to_ignore": ["the "], "ignore_case": True, "ignore_punctuation": True, "ignore_numbers": True},
], ids=["regexes", "numbers", "all"])
def test_every_exact_match_option_of_lm_eval_is_applied_as_lm_eval_applies_it(options):
    """regexes_to_ignore (gsm8k's "," and "$") and ignore_numbers were accepted in a task file and ignored."""
    from lm_eval.api.metrics import exact_match_hf_evaluate

    cases = [("$1,000", "1000"), ("72.", "72"), ("1,234,567", "1234567"), ("The 3 Beatles", "the beatles"),
             ("so #### 42", "42"), ("Paris", "paris."), ("onions 7", "onions ")]
    for prediction, reference in cases:
        theirs = exact_match_hf_evaluate([prediction], [reference], **options)["exact_match"]
        assert exact_match(prediction, reference, **options) == theirs, (prediction, reference)
    assert any(exact_match(p, r, **options) and not exact_match(p, r) for p, r in cases)  # each option does something


def test_f1_and_best_alias_by_hand():
    # "the eiffel tower" vs "eiffel tower in paris": articles dropped -> 2 common of 2 predicted, 4 reference
    # tokens: precision 1, recall 1/2, F1 = 2/3.
    assert token_f1("the Eiffel Tower", "Eiffel Tower in Paris") == pytest.approx(2 / 3)
    values = generation_values("  Onion", ["Allium cepa", "Onion"], strip=True, ignore_case=True,
                               ignore_punctuation=True)
    assert values == {"exact_match": 1.0, "f1": 1.0}
    # without lm-eval's remove_whitespace filter the generation is scored as generated, as lm-eval scores it
    assert generation_values("  Onion", ["Onion"])["exact_match"] == 0.0
    assert generation_values("red onion", ["Onion"]) == {"exact_match": 0.0, "f1": pytest.approx(2 / 3)}


def test_a_doc_without_answers_scores_zero_as_in_lm_eval():
    """An unanswerable question (aliases: []) ended the task, after every generation, in `max() arg is an empty
    sequence`. lm-eval's multiple-target rule: exact_match over no references is nan, and `1.0 if scores > 0.0 else
    0.0` makes it 0."""
    import warnings

    from lm_eval.api.metrics import exact_match_hf_evaluate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy's mean of an empty list
        theirs = exact_match_hf_evaluate(predictions=[], references=[])["exact_match"]
    assert (1.0 if theirs > 0.0 else 0.0) == generation_values("Paris", [])["exact_match"] == 0.0
    assert generation_values("Paris", [])["f1"] == 0.0


def test_unknown_metric_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown metric 'accuracy'; known metrics: acc, acc_norm"):
        aggregate_metric("accuracy", [1.0])


def test_a_perplexity_past_floats_range_is_inf_not_an_overflow_that_loses_the_evaluation():
    """A diverged model's mean log-likelihood under -709 nats: math.exp raised OverflowError after every request of
    every task was scored (lm-eval's too). The row says inf (results.json stores non-finite values as null)."""
    assert aggregate_metric("perplexity", [-800.0, -900.0])[0] == math.inf
    assert aggregate_metric("word_perplexity", [(-3000.0, 2), (-10.0, 1)])[0] == math.inf
    assert aggregate_metric("perplexity", [-700.0, -700.0])[0] == pytest.approx(math.exp(700.0))  # still a number
    assert aggregate_metric("bits_per_byte", [(-1500.0, 2)])[0] == pytest.approx(1500.0 / 2 / math.log(2))
