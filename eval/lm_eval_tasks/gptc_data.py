"""Docs and results functions the gptc_<task>.yaml files name (lm-eval imports this file through `!function`).

Docs come from our loader (eval.task), so lm-eval scores exactly the docs we score; the data root is ours
(<repo>/../shared/data, $HF_GPT_CUSTOM_DATA_DIR, or `--metadata '{"data_dir": "..."}'` on lm-eval's command line).
"""

from __future__ import annotations


def load_docs(task: str, data_dir: str | None = None, **_lm_eval_metadata):
    """{"test": Dataset} of our processed docs of `task` (lm-eval's `custom_dataset` hook)."""
    import datasets

    from hf_gpt_custom.eval.task import load_task

    return datasets.DatasetDict({"test": datasets.Dataset.from_list(load_task(task).docs("test", data_dir))})


def count_on_page(doc: dict, results: list[float]) -> dict[str, tuple[float, int]]:
    """Words and bytes counted on the raw page before detokenization, as lm-eval's wikitext does."""
    from hf_gpt_custom.eval.metrics import count_words, rolling_values

    (loglikelihood,) = results
    return rolling_values(loglikelihood, count_words(doc["page"]), len(doc["page"].encode("utf-8")))
