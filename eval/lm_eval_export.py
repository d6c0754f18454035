"""Our task files as lm-evaluation-harness 0.4.13 task YAMLs: eval/lm_eval_tasks/gptc_<task>.yaml.

lm-eval cannot read eval/tasks/*.yaml as they are (`data_files`, `data_format`, `process_docs` by name and
`multiple_input` are our fields), and their names would shadow lm-eval's built-in tasks. The files written here
load in lm-eval under `gptc_<task>`, get their docs from our own loaders (lm-eval's `custom_dataset`, so the data
root is found as ours finds it, not relative to the working directory) and use our templates with the
`lm_eval_overrides` of each task, so lm-eval on `gptc_<task>` gives what `protocol="lm-eval"` gives here.
Regenerate after changing a task file:  python -m hf_gpt_custom.eval.lm_eval_export
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from hf_gpt_custom.eval.task import TaskSpec, available_tasks, load_task
from hf_gpt_custom.errors import UserError

LM_EVAL_TASKS_DIR = Path(__file__).resolve().parent / "lm_eval_tasks"
TASK_PREFIX = "gptc_"
DATA_MODULE = "gptc_data"  # eval/lm_eval_tasks/gptc_data.py, imported by lm-eval through `!function`
# Our metrics lm-eval also has under the same name and rule; acc_norm_tokens, acc_uncond and token F1 are ours only.
LM_EVAL_METRICS = ("acc", "acc_norm", "perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte", "exact_match")
_MEAN_METRICS = ("acc", "acc_norm", "exact_match")


class LmEvalFunction(str):
    """A function of gptc_data.py, written as lm-eval's `!function module.name` tag."""


def _represent_function(dumper: yaml.SafeDumper, value: LmEvalFunction) -> yaml.ScalarNode:
    return dumper.represent_scalar("!function", f"{DATA_MODULE}.{value}", style="")


def _represent_text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Prompts with newlines read best as one double-quoted line with \n, as lm-eval's own task files write them.
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"' if "\n" in value else None)


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(LmEvalFunction, _represent_function)
_Dumper.add_representer(str, _represent_text)


def lm_eval_task_config(spec: TaskSpec, task_name: str) -> dict[str, Any]:
    """The lm-eval config fields that define prompts and scoring for `spec` (no data source: the caller adds it)."""
    config: dict[str, Any] = {
        "task": task_name,
        "test_split": "test",
        "fewshot_split": "test",  # the only split on disk; lm-eval then leaves out the scored doc, as ours does
        "output_type": spec.output_type,
        "doc_to_text": spec.doc_to_text,
        "doc_to_target": spec.doc_to_target,
        "target_delimiter": spec.target_delimiter,
        "fewshot_delimiter": spec.fewshot_delimiter,
    }
    if spec.doc_to_choice is not None:
        config["doc_to_choice"] = spec.doc_to_choice
    if spec.description:
        config["description"] = spec.description
    if spec.generation_kwargs:
        config["generation_kwargs"] = {**spec.generation_kwargs, "do_sample": False}
        # lm-eval's triviaqa filter: our generation_values strips the generation the same way.
        config["filter_list"] = [{"name": "remove_whitespace", "filter": [{"function": "remove_whitespace"}, {"function": "take_first"}]}]
    if spec.count_field is not None:
        if spec.count_field != "page":
            raise UserError(f"{spec.source_file}: count_field {spec.count_field!r} has no lm-eval export; only 'page' has")
        config["process_results"] = LmEvalFunction("count_on_page")
    metrics = []
    for entry in spec.metric_list:
        if entry["metric"] in LM_EVAL_METRICS:
            extra = {"aggregation": "mean", "higher_is_better": True} if entry["metric"] in _MEAN_METRICS else {}
            metrics.append({**entry, **extra})
    config["metric_list"] = metrics
    return config


def shipped_task_config(name: str) -> dict[str, Any]:
    """gptc_<name>.yaml's content: the lm-eval protocol of our task, docs from our loader."""
    spec = load_task(name, protocol="lm-eval")
    config = lm_eval_task_config(spec, TASK_PREFIX + name)
    config = {
        "task": config.pop("task"),
        "custom_dataset": LmEvalFunction("load_docs"),
        "dataset_kwargs": {"task": name},
        **config,
        "metadata": {"version": 1.0},
    }
    return config


def render_task_file(name: str) -> str:
    header = f"# Generated from eval/tasks/{name}.yaml by `python -m hf_gpt_custom.eval.lm_eval_export`; do not edit by hand.\n"
    return header + yaml.dump(shipped_task_config(name), Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def write_lm_eval_task_files(out_dir: str | Path = LM_EVAL_TASKS_DIR, names: list[str] | None = None) -> list[Path]:
    """Write gptc_<task>.yaml for each task (default: every task file) into out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names or available_tasks():
        path = out_dir / f"{TASK_PREFIX}{name}.yaml"
        path.write_text(render_task_file(name), encoding="utf-8")
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description="Write eval/lm_eval_tasks/gptc_<task>.yaml for lm-eval.")
    parser.add_argument("tasks", nargs="*", help="task names (default: every file in eval/tasks)")
    args = parser.parse_args()
    for path in write_lm_eval_task_files(LM_EVAL_TASKS_DIR, args.tasks or None):
        print(path)


if __name__ == "__main__":
    main()
