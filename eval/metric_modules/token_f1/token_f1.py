"""SQuAD token-overlap F1 of a generated answer against its references (best of several aliases).

Both texts are normalised as SQuAD v1.1 does (lower case, punctuation and articles removed, single spaces); F1 is
the harmonic mean of token precision and recall. Returns the mean over predictions and its standard error.

    >>> metric = evaluate.load("eval/metric_modules/token_f1")
    >>> metric.compute(predictions=["the Eiffel Tower"], references=[["Eiffel Tower in Paris"]])
    {'f1': 0.666..., 'f1_stderr': None}
"""

import datasets
import evaluate

from hf_gpt_custom.eval.hf_evaluate import aggregated, metric_info
from hf_gpt_custom.eval.metrics import generation_values


class TokenF1(evaluate.Metric):
    def _info(self):
        return metric_info(__doc__, {"predictions": datasets.Value("string"), "references": datasets.Sequence(datasets.Value("string"))})

    def _compute(self, predictions, references):
        return aggregated("f1", [generation_values(p, r, strip=True)["f1"] for p, r in zip(predictions, references)])
