"""Mirror our task files as lm-evaluation-harness 0.4.13 task YAMLs over the same processed docs.

Used by the agreement test and benchmarks/bench_eval.py: our docs (after process_docs) are written to JSONL, and
each YAML reads them with `dataset_path: json` and uses the same templates, delimiters and few-shot split, so both
harnesses see the same prompts and any disagreement is in the scoring.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from eval.task import load_task

LM_EVAL_METRICS = {"acc", "acc_norm", "perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte", "exact_match"}


def write_lm_eval_tasks(task_names: list[str], out_dir: Path, data_dir: Path | None = None) -> dict[str, str]:
    """Write <out_dir>/<task>.jsonl + ours_<task>.yaml for each task; return our name -> lm-eval task name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = {}
    for name in task_names:
        spec = load_task(name)
        docs_path = out_dir / f"{name}.jsonl"
        with open(docs_path, "w", encoding="utf-8") as handle:
            for doc in spec.docs("test", data_dir):
                handle.write(json.dumps(doc) + "\n")
        config = {
            "task": f"ours_{name}",
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"test": str(docs_path)}, "cache_dir": str(out_dir / "hf_datasets_cache")},
            "test_split": "test",
            "fewshot_split": "test",
            "output_type": spec.output_type,
            "doc_to_text": spec.doc_to_text,
            "doc_to_target": spec.doc_to_target,
            "target_delimiter": spec.target_delimiter,
            "fewshot_delimiter": spec.fewshot_delimiter,
            "metric_list": [
                {"metric": m, **({"aggregation": "mean", "higher_is_better": True} if m in ("acc", "acc_norm") else {})}
                for m in spec.metric_names
                if m in LM_EVAL_METRICS
            ],
        }
        if spec.doc_to_choice is not None:
            config["doc_to_choice"] = spec.doc_to_choice
        if spec.description:
            config["description"] = spec.description
        if spec.generation_kwargs:
            config["generation_kwargs"] = {**spec.generation_kwargs, "do_sample": False}
        (out_dir / f"ours_{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        names[name] = f"ours_{name}"
    return names


def run_lm_eval(model_dir: Path, task_dir: Path, lm_eval_names: list[str], num_fewshot: int, limit: int, batch_size: int = 16) -> dict:
    """lm_eval.simple_evaluate with HFLM on a local folder, offline; returns its results dict (with samples)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    return lm_eval.simple_evaluate(
        model="hf",
        model_args={"pretrained": str(model_dir), "dtype": "float32"},
        tasks=lm_eval_names,
        num_fewshot=num_fewshot,
        limit=limit,
        batch_size=batch_size,
        device="cpu",
        task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
        log_samples=True,
        bootstrap_iters=0,
        fewshot_random_seed=1234,
        verbosity="ERROR",
    )
