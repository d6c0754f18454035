"""eval/metric_modules load with `evaluate.load(<local path>)` offline and give lm-eval's numbers: its own metric
and aggregation functions where it has them, hand computations where it does not (token F1)."""

from __future__ import annotations

import math

import pytest

from pathlib import Path

METRIC_MODULES_DIR = Path(__file__).resolve().parents[2] / "eval" / "metric_modules"
MODULES = ("exact_match", "token_f1", "multiple_choice", "perplexity", "bits_per_byte")


@pytest.fixture(scope="module")
def metrics(tmp_path_factory):
    import sys

    mp = pytest.MonkeyPatch()
    # evaluate copies a loaded script into its modules cache: keep that out of the user's home during tests. It then
    # imports `evaluate_modules.metrics.<name>` from sys.path, where an earlier in-process trust_remote_code load put
    # transformers' default modules folder (~/.cache/huggingface/modules) first: a stale evaluate_modules package
    # there shadowed this one (ModuleNotFoundError, depending on test order). This folder goes first, fresh.
    modules = tmp_path_factory.mktemp("hf_modules")
    mp.setenv("HF_MODULES_CACHE", str(modules))
    mp.syspath_prepend(str(modules))
    for name in [name for name in sys.modules if name == "evaluate_modules" or name.startswith("evaluate_modules.")]:
        mp.delitem(sys.modules, name)
    import evaluate

    yield {name: evaluate.load(str(METRIC_MODULES_DIR / name)) for name in MODULES}
    mp.undo()


def test_every_module_folder_is_loaded():
    assert sorted(p.name for p in METRIC_MODULES_DIR.iterdir() if (p / f"{p.name}.py").is_file()) == sorted(MODULES)


def test_exact_match_equals_lm_eval(metrics):
    from lm_eval.api.metrics import exact_match_hf_evaluate, mean_stderr

    predictions = ["The Beatles!", "Paris", "Onion", "", "New York"]
    references = ["the beatles", "paris.", "Onions", "", "new york"]
    for options in ({"ignore_case": True, "ignore_punctuation": True}, {}, {"ignore_case": True}):
        theirs = exact_match_hf_evaluate(predictions, references, **options)["exact_match"]
        per_doc = [exact_match_hf_evaluate([p], [r], **options)["exact_match"] for p, r in zip(predictions, references)]
        ours = metrics["exact_match"].compute(predictions=predictions, references=[[r] for r in references], **options)
        assert ours["exact_match"] == pytest.approx(theirs)
        assert ours["exact_match_stderr"] == pytest.approx(mean_stderr(per_doc))
    # Aliases: the best one counts; surrounding whitespace is stripped like lm-eval's remove_whitespace filter.
    ours = metrics["exact_match"].compute(predictions=[" Paris", "Rome"], references=[["paris", "Paris, France"], ["Milan"]], ignore_case=True)
    assert ours["exact_match"] == 0.5


def test_token_f1_by_hand(metrics):
    # "the eiffel tower" vs "eiffel tower in paris": articles dropped, 2 common tokens of 2 predicted and 4
    # reference: precision 1, recall 1/2, F1 2/3. Second doc: exact alias, F1 1. Mean 5/6.
    ours = metrics["token_f1"].compute(
        predictions=["the Eiffel Tower", "Onion"], references=[["Eiffel Tower in Paris"], ["Allium cepa", "onion"]]
    )
    assert ours["f1"] == pytest.approx(5 / 6)


def test_multiple_choice_equals_lm_eval_rules(metrics):
    from lm_eval.api.metrics import mean, mean_stderr

    loglikelihoods = [[-4.0, -6.0], [-1.0, -1.0], [-3.0, -2.0, -9.0], [-10.0, -12.0]]
    choices = [["ab", "abcdef"], ["a", "b"], ["yes", "no", "maybe"], ["short", "a much longer answer"]]
    gold = [1, 0, 1, 1]
    ours = metrics["multiple_choice"].compute(loglikelihoods=loglikelihoods, choices=choices, gold=gold)
    # lm-eval's multiple_choice process_results: argmax of lls, and of lls / len(choice) in characters.
    acc = [float(max(range(len(l)), key=l.__getitem__) == g) for l, g in zip(loglikelihoods, gold)]
    acc_norm = [
        float(max(range(len(l)), key=lambda i: l[i] / len(c[i])) == g) for l, c, g in zip(loglikelihoods, choices, gold)
    ]
    # By hand: doc 3 normalised is a tie (-3/3 = -2/2), which goes to the first choice, not gold.
    assert acc == [0.0, 1.0, 1.0, 0.0] and acc_norm == [1.0, 1.0, 0.0, 1.0]
    assert ours["acc"] == pytest.approx(mean(acc)) and ours["acc_stderr"] == pytest.approx(mean_stderr(acc))
    assert ours["acc_norm"] == pytest.approx(mean(acc_norm))


def test_perplexity_and_bits_per_byte_equal_lm_eval(metrics):
    from lm_eval.api.metrics import bits_per_byte, perplexity, weighted_perplexity

    lls, weights = [-4.0, -6.0, -2.5], [4, 6, 3]
    assert metrics["perplexity"].compute(loglikelihoods=lls)["perplexity"] == pytest.approx(perplexity(lls))
    weighted = metrics["perplexity"].compute(loglikelihoods=lls, weights=weights)
    assert weighted["perplexity"] == pytest.approx(weighted_perplexity(list(zip(lls, weights))))
    assert weighted["perplexity"] == pytest.approx(math.exp(12.5 / 13))  # by hand
    ours = metrics["bits_per_byte"].compute(loglikelihoods=[-4.0, -6.0], n_bytes=[8, 12])
    assert ours["bits_per_byte"] == pytest.approx(bits_per_byte([(-4.0, 8), (-6.0, 12)]))
    assert ours["bits_per_byte"] == pytest.approx(0.5 / math.log(2))
    assert ours["bits_per_byte_stderr"] is None and weighted["perplexity_stderr"] is None  # lm-eval: "N/A"
