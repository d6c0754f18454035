"""Bits per byte from log-likelihoods (nats) and the UTF-8 bytes they cover, lm-eval's rule.

bits_per_byte = -(sum of log-likelihoods) / (sum of bytes) / ln 2, pooled over docs, so it does not depend on the
tokenizer. No standard error, as lm-eval gives none for this pooled ratio.

    >>> metric = evaluate.load("eval/metric_modules/bits_per_byte")
    >>> metric.compute(loglikelihoods=[-4.0, -6.0], n_bytes=[8, 12])["bits_per_byte"]   # 0.5 / ln 2
"""

import datasets
import evaluate

from hf_gpt_custom.eval.hf_evaluate import aggregated, metric_info


class BitsPerByte(evaluate.Metric):
    def _info(self):
        return metric_info(__doc__, {"loglikelihoods": datasets.Value("float64"), "n_bytes": datasets.Value("int64")})

    def _compute(self, loglikelihoods, n_bytes):
        return aggregated("bits_per_byte", list(zip(loglikelihoods, n_bytes)))
