"""Exact match of a generated answer against its references (best of several aliases), lm-eval's rules.

The prediction is stripped of surrounding whitespace (lm-eval's remove_whitespace filter), then compared with each
reference after lm-eval's optional steps (`regexes_to_ignore`, `ignore_case`, `ignore_punctuation`,
`ignore_numbers`), as lm-eval's `exact_match_hf_evaluate`. Returns the mean over predictions and its standard error.

    >>> metric = evaluate.load("eval/metric_modules/exact_match")
    >>> metric.compute(predictions=[" Paris", "Rome"], references=[["paris", "Paris, France"], ["Milan"]], ignore_case=True)
    {'exact_match': 0.5, 'exact_match_stderr': 0.5}
"""

import datasets
import evaluate

from hf_gpt_custom.eval.hf_evaluate import aggregated, metric_info
from hf_gpt_custom.eval.metrics import generation_values


class ExactMatch(evaluate.Metric):
    def _info(self):
        return metric_info(__doc__, {"predictions": datasets.Value("string"), "references": datasets.Sequence(datasets.Value("string"))})

    def _compute(self, predictions, references, regexes_to_ignore=None, ignore_case=False, ignore_punctuation=False,
                 ignore_numbers=False):
        options = {"regexes_to_ignore": regexes_to_ignore, "ignore_case": ignore_case,
                   "ignore_punctuation": ignore_punctuation, "ignore_numbers": ignore_numbers}
        return aggregated("exact_match", [generation_values(p, r, strip=True, **options)["exact_match"] for p, r in zip(predictions, references)])
