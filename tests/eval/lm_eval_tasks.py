"""Mirror our task files as lm-evaluation-harness 0.4.13 task YAMLs over the same processed docs, for the tests.

Used by the agreement test and benchmarks/bench_eval.py: our docs (after process_docs) are written to JSONL, and
each YAML reads them with `dataset_path: json`; prompts and scoring fields come from eval/lm_eval_export.py (the
code that writes the shipped eval/lm_eval_tasks), here with our own protocol, so both harnesses see the same
prompts as `evaluate` and any disagreement is in the scoring. The shipped files differ only in the data source
(our loader) and protocol (lm-eval's).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from hf_gpt_custom.eval.lm_eval_export import lm_eval_task_config
from hf_gpt_custom.eval.task import load_task


def write_lm_eval_tasks(task_names: list[str], out_dir: Path, data_dir: Path | None = None) -> dict[str, str]:
    """Write <out_dir>/<task>.jsonl + ours_<task>.yaml for each task; return our name -> lm-eval task name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = {}
    for name in task_names:
        spec = load_task(name)
        if spec.count_field is not None:
            raise ValueError(f"task {name}: counting on {spec.count_field!r} needs eval/lm_eval_tasks/gptc_{name}.yaml")
        docs_path = out_dir / f"{name}.jsonl"
        with open(docs_path, "w", encoding="utf-8") as handle:
            for doc in spec.docs("test", data_dir):
                handle.write(json.dumps(doc) + "\n")
        config = lm_eval_task_config(spec, f"ours_{name}")
        config = {
            "task": config.pop("task"),
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"test": str(docs_path)}, "cache_dir": str(out_dir / "hf_datasets_cache")},
            **config,
        }
        (out_dir / f"ours_{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        names[name] = f"ours_{name}"
    return names


def run_lm_eval(model_dir: Path, task_dir: Path, lm_eval_names: list[str], num_fewshot: int, limit: int, batch_size: int = 16,
                dtype: str = "float32") -> dict:
    """lm_eval.simple_evaluate with HFLM on a local folder, offline; returns its results dict (with samples)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    return lm_eval.simple_evaluate(
        model="hf",
        # log-softmax in float32, as ours (HFLM's default is the model's dtype)
        model_args={"pretrained": str(model_dir), "dtype": dtype, "softmax_dtype": "float32"},
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
