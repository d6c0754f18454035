"""Docs and results functions the gptc_<task>.yaml files name (lm-eval imports this file through `!function`).

Docs come from our loader (eval.task), so lm-eval scores exactly the docs we score; the data root is ours
(<repo>/../shared/data, $HF_GPT_CUSTOM_DATA_DIR, or `--metadata '{"data_dir": "..."}'` on lm-eval's command line).
lm-eval passes its model arguments here too (its CLI, and simple_evaluate without a TaskManager of your own): a model
whose context cannot hold the task is then refused by name instead of failing an assertion inside lm-eval.
"""

from __future__ import annotations

_LOAD_KWARGS = ("trust_remote_code", "revision")  # model arguments AutoConfig / AutoTokenizer also take


def load_docs(task: str, data_dir: str | None = None, pretrained=None, tokenizer=None, max_length=None, **metadata):
    """{"test": Dataset} of our processed docs of `task` (lm-eval's `custom_dataset` hook), and {"fewshot": ...} its
    few-shot pool when that is another split (the exported file's fewshot_split), after checking that the model in
    `pretrained` (when lm-eval passes it) can be scored on them."""
    import datasets

    from hf_gpt_custom.eval.lm_eval_export import FEWSHOT_SPLIT
    from hf_gpt_custom.eval.task import load_task

    spec = load_task(task, protocol="lm-eval")  # the protocol the exported file is written for (overrides applied)
    docs = spec.docs("test", data_dir)
    splits = {"test": datasets.Dataset.from_list(docs)}
    if not spec.fewshot_pool_is_the_scored_split:
        splits[FEWSHOT_SPLIT] = datasets.Dataset.from_list(spec.fewshot_docs(data_dir))
    if pretrained is not None:
        from hf_gpt_custom.eval.lm_eval_export import check_lm_eval_fit

        load_kwargs = {key: metadata[key] for key in _LOAD_KWARGS if metadata.get(key) is not None}
        check_lm_eval_fit(task, docs, pretrained, tokenizer=tokenizer, max_length=max_length, **load_kwargs)
    return datasets.DatasetDict(splits)


def count_on_page(doc: dict, results: list[float]) -> dict[str, tuple[float, int]]:
    """Words and bytes counted on the raw page before detokenization, as lm-eval's wikitext does."""
    from hf_gpt_custom.eval.metrics import count_words, rolling_values

    (loglikelihood,) = results
    return rolling_values(loglikelihood, count_words(doc["page"]), len(doc["page"].encode("utf-8")))
