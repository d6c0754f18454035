"""Our task files as lm-evaluation-harness 0.4.13 task YAMLs: eval/lm_eval_tasks/gptc_<task>.yaml.

lm-eval cannot read eval/tasks/*.yaml as they are (`data_files`, `data_format`, `process_docs` by name and
`multiple_input` are our fields), and their names would shadow lm-eval's built-in tasks. The files written here
load in lm-eval under `gptc_<task>`, get their docs from our own loaders (lm-eval's `custom_dataset`, so the data
root is found as ours finds it, not relative to the working directory) and use our templates with the
`lm_eval_overrides` of each task, so lm-eval on `gptc_<task>` gives what `protocol="lm-eval"` gives here.
Regenerate after changing a task file:  python -m hf_gpt_custom.eval.lm_eval_export

lm-eval stops at an assertion when an answer is longer than the model's context, which a short-context model meets
(PIQA's answers on a 64-position model): `check_lm_eval_fit` refuses such a model by name before lm-eval runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from hf_gpt_custom.eval.fewshot import build_prompts
from hf_gpt_custom.eval.output_types import OUTPUT_TYPES, stop_sequences
from hf_gpt_custom.eval.task import TaskSpec, available_tasks, load_task
from hf_gpt_custom.eval.tokens import encode_pairs, encode_texts, resolve_max_length
from hf_gpt_custom.errors import UserError

LM_EVAL_TASKS_DIR = Path(__file__).resolve().parent / "lm_eval_tasks"
TASK_PREFIX = "gptc_"
DATA_MODULE = "gptc_data"  # eval/lm_eval_tasks/gptc_data.py, imported by lm-eval through `!function`
FEWSHOT_SPLIT = "fewshot"  # gptc_data.load_docs' split of a task's few-shot pool when it is another split's docs
# Our metrics lm-eval also has under the same name and rule; acc_norm_tokens, acc_uncond and token F1 are ours only.
LM_EVAL_METRICS = ("acc", "acc_norm", "perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte", "exact_match")
_MEAN_METRICS = ("acc", "acc_norm", "exact_match")
BOUNDARY_TOKENS = 8  # how many more tokens an answer may take after its context than alone


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
        # The scored docs as the pool: lm-eval then leaves out the scored doc, as ours does; without fewshot_split it
        # draws from the test docs keeping it (fewshot_excludes_scored_doc: false, lambada_openai's way). A pool of
        # another split (fewshot_split: train) is load_docs' FEWSHOT_SPLIT: left out, lm-eval drew from the test docs
        # and a doc could be its own example, showing it its answer.
        **({"fewshot_split": "test"} if spec.excludes_scored_doc else
           {} if spec.fewshot_pool_is_the_scored_split else {"fewshot_split": FEWSHOT_SPLIT}),
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
    if spec.output_type == "generate_until":  # `until` written out: what stops ours stops lm-eval's
        config["generation_kwargs"] = {**spec.generation_kwargs, "until": list(stop_sequences(spec)), "do_sample": False}
        if spec.filter_list is not None:  # the task's own (triviaqa's is lm-eval's); none: scored as generated
            config["filter_list"] = spec.filter_list
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


def check_lm_eval_fit(name: str, docs: list[dict], pretrained, tokenizer=None, max_length: int | None = None,
                      **load_kwargs) -> None:
    """Raise a UserError naming gptc_<name> and the model when lm-eval cannot score `docs` with it: an answer longer
    than the context (lm-eval asserts `len(continuation) <= max_length`) or max_gen_toks that leave no room for a
    prompt. `pretrained`, `tokenizer` and `max_length` are lm-eval's model arguments (a path, Hub id or object)."""
    from transformers import AutoConfig, AutoTokenizer

    model_name = pretrained if isinstance(pretrained, str) else getattr(pretrained, "name_or_path", type(pretrained).__name__)
    config = AutoConfig.from_pretrained(pretrained, **load_kwargs) if isinstance(pretrained, str) else pretrained.config
    if tokenizer is None or isinstance(tokenizer, str):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer or model_name, **load_kwargs)
    max_length = int(max_length or resolve_max_length(config, tokenizer))  # lm-eval's HFLM rule
    spec = load_task(name, protocol="lm-eval")
    prompts = build_prompts(spec, docs, [], 0, 0, tokenizer, max_length)
    output_type = OUTPUT_TYPES[spec.output_type]
    requests = [request for doc, prompt in zip(docs, prompts) for request in output_type.build_requests(spec, doc, prompt)]
    task_name = TASK_PREFIX + name
    for request in requests:
        if request.request_type == "generate_until" and request.max_gen_toks >= max_length:
            raise UserError(
                f"{task_name} cannot run on {model_name}: it generates up to {request.max_gen_toks} tokens, which leaves "
                f"no room for a prompt in the model's context of {max_length}; leave {task_name} out for this model"
            )
    # Only answers of more bytes than the context has positions can be too long (a token holds at least one byte; the
    # slack covers where an answer meets its context). The longest is checked first: usually it decides alone.
    scored = [request for request in requests if request.request_type == "loglikelihood"]
    n_bytes = [len(request.continuation.encode("utf-8")) for request in scored]
    maybe_long = sorted((i for i in range(len(scored)) if n_bytes[i] > max_length - BOUNDARY_TOKENS), key=lambda i: -n_bytes[i])
    if not maybe_long:
        return
    _refuse_a_too_long_answer(scored[maybe_long[0]], tokenizer, max_length, task_name, model_name)
    alone = [len(ids) for ids in encode_texts(tokenizer, [scored[i].continuation for i in maybe_long[1:]])]
    for index, n_tokens in zip(maybe_long[1:], alone):
        if n_tokens > max_length - BOUNDARY_TOKENS:
            _refuse_a_too_long_answer(scored[index], tokenizer, max_length, task_name, model_name)


def _refuse_a_too_long_answer(request, tokenizer, max_length: int, task_name: str, model_name: str) -> None:
    (_, continuation), = encode_pairs(tokenizer, [(request.context, request.continuation)])  # lm-eval's split
    if len(continuation) > max_length:
        raise UserError(
            f"{task_name} cannot run on {model_name}: the answer of doc {request.doc_id} is {len(continuation)} tokens, "
            f"longer than the model's context of {max_length}, and lm-eval needs every answer to fit (it stops at an "
            f"assertion; every doc is checked, --limit or not, as lm-eval does not tell the task which it scores); "
            f"leave {task_name} out for this model, or score it with `hf-gpt-custom eval --protocol lm-eval "
            f"--tasks {task_name.removeprefix(TASK_PREFIX)}`, which keeps an answer's last {max_length} tokens and "
            "counts the doc as truncated"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="Write eval/lm_eval_tasks/gptc_<task>.yaml for lm-eval.")
    parser.add_argument("tasks", nargs="*", help="task names (default: every file in eval/tasks)")
    args = parser.parse_args()
    for path in write_lm_eval_task_files(LM_EVAL_TASKS_DIR, args.tasks or None):
        print(path)


if __name__ == "__main__":
    main()
