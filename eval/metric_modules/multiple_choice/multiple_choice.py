"""acc and acc_norm of multiple-choice questions from the log-likelihood of each choice, lm-eval's rules.

acc: the choice with the highest log-likelihood is the gold one (ties go to the first). acc_norm: the same after
dividing each log-likelihood by the length of its choice in characters (lm-eval; GPT-3 divided by tokens).
`choices` are the answer texts without the delimiter before them; for a row of examples.jsonl whose answer was cut to
fit the context, pass its `acc_norm_choices` (the part scored) instead. Returns means and standard errors.

    >>> metric = evaluate.load("eval/metric_modules/multiple_choice")
    >>> metric.compute(loglikelihoods=[[-4.0, -6.0]], choices=[["ab", "abcdef"]], gold=[1])
    {'acc': 0.0, 'acc_stderr': None, 'acc_norm': 1.0, 'acc_norm_stderr': None}
"""

import datasets
import evaluate

from hf_gpt_custom.eval.hf_evaluate import aggregated, metric_info
from hf_gpt_custom.eval.metrics import multiple_choice_values


class MultipleChoice(evaluate.Metric):
    def _info(self):
        return metric_info(__doc__, {
            "loglikelihoods": datasets.Sequence(datasets.Value("float64")),
            "choices": datasets.Sequence(datasets.Value("string")),
            "gold": datasets.Value("int64"),
        })

    def _compute(self, loglikelihoods, choices, gold):
        per_doc = [multiple_choice_values(lls, texts, answer) for lls, texts, answer in zip(loglikelihoods, choices, gold)]
        return {**aggregated("acc", [v["acc"] for v in per_doc]), **aggregated("acc_norm", [v["acc_norm"] for v in per_doc])}
