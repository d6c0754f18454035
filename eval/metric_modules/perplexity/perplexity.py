"""Perplexity from log-likelihoods a model already gave (no model runs here), lm-eval's rules.

Without `weights`: exp(-mean log-likelihood), one item per doc (LAMBADA's perplexity of the target word). With
`weights` (words or UTF-8 bytes per doc): exp(-sum of log-likelihoods / sum of weights), lm-eval's
word_perplexity / byte_perplexity. The standard error, as lm-eval's: bootstrapped over docs without
`weights`, none with them.

    >>> metric = evaluate.load("eval/metric_modules/perplexity")
    >>> metric.compute(loglikelihoods=[-4.0, -6.0], weights=[4, 6])["perplexity"]   # e
"""

import datasets
import evaluate

from hf_gpt_custom.eval.hf_evaluate import aggregated, metric_info


class Perplexity(evaluate.Metric):
    def _info(self):
        return metric_info(__doc__, {"loglikelihoods": datasets.Value("float64")})

    def _compute(self, loglikelihoods, weights=None):
        if weights is None:
            return aggregated("perplexity", loglikelihoods)
        result = aggregated("word_perplexity", list(zip(loglikelihoods, weights)))  # the weighted rule
        return {"perplexity": result["word_perplexity"], "perplexity_stderr": result["word_perplexity_stderr"]}
