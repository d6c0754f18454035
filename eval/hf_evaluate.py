"""What the `evaluate` modules in eval/metric_modules share: their MetricInfo and the (value, stderr) result.

Each module is a thin `evaluate.Metric` over the functions in eval/metrics.py that our evaluation runs, so a
formula lives in one place: `evaluate.load("eval/metric_modules/exact_match")` computes what `evaluate(...)`
reports. Imported only by those modules: `evaluate` takes seconds to import, and eval runs do not need it.
"""

from __future__ import annotations

from collections.abc import Sequence

from hf_gpt_custom.eval.metrics import aggregate_metric

LM_EVAL_CITATION = """\
@software{eval-harness,
  author = {Gao, Leo and others},
  title = {A framework for few-shot language model evaluation},
  publisher = {Zenodo},
  url = {https://github.com/EleutherAI/lm-evaluation-harness}
}"""


def metric_info(module_doc: str, features: dict):
    """evaluate.MetricInfo whose description and usage are the module's docstring."""
    import datasets
    import evaluate

    summary, _, usage = module_doc.partition("\n\n")
    return evaluate.MetricInfo(
        description=summary,
        citation=LM_EVAL_CITATION,
        inputs_description=usage,
        features=datasets.Features(features),
        reference_urls=["https://github.com/EleutherAI/lm-evaluation-harness/blob/main/lm_eval/api/metrics.py"],
    )


def aggregated(name: str, items: Sequence) -> dict[str, float | None]:
    """{name: value, name_stderr: stderr} exactly as our results.json rows aggregate per-doc items."""
    value, stderr = aggregate_metric(name, items)
    return {name: value, f"{name}_stderr": stderr}
