"""build_model_card(run_dir): a Hugging Face model card filled from a run folder's real files.

Reads final/ (config + tokenizer), training_summary.json, config.yaml and eval/results.json (STYLE §11) and renders
templates/model_card.md through huggingface_hub's ModelCard / ModelCardData, so the front-matter — including the
`model-index` with every evaluation result — is written by the library the Hub itself parses. Nothing is computed
here that the run did not record; a run without eval/ gets a card that says so.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from hf_gpt_custom.errors import MissingFileError, UserError

TEMPLATE_PATH = Path(__file__).parent / "templates" / "model_card.md"

# Benchmark -> (Hub dataset id, config, split, pretty name) of the official set our local copy stands for, so the
# model-index links to the right Hub dataset. Tasks missing here fall back to the name in results.json.
BENCHMARK_DATASETS: dict[str, tuple[str, str | None, str, str]] = {
    "lambada": ("EleutherAI/lambada_openai", "default", "test", "LAMBADA (OpenAI)"),
    "hellaswag": ("Rowan/hellaswag", None, "validation", "HellaSwag"),
    "piqa": ("ybisk/piqa", None, "validation", "PIQA"),
    "arc_easy": ("allenai/ai2_arc", "ARC-Easy", "test", "ARC-Easy"),
    "arc_challenge": ("allenai/ai2_arc", "ARC-Challenge", "test", "ARC-Challenge"),
    "winogrande": ("allenai/winogrande", "winogrande_xl", "validation", "WinoGrande"),
    "copa": ("aps/super_glue", "copa", "validation", "COPA"),
    "boolq": ("aps/super_glue", "boolq", "validation", "BoolQ"),
    "openbookqa": ("allenai/openbookqa", "main", "test", "OpenBookQA"),
    "wikitext": ("Salesforce/wikitext", "wikitext-2-raw-v1", "test", "WikiText-2"),
    "triviaqa": ("mandarjoshi/trivia_qa", "rc.nocontext", "validation", "TriviaQA"),
}

# Local training corpora (folder name under ../shared/data) -> (Hub dataset id, short name, example prompt).
KNOWN_TRAINING_DATASETS: dict[str, tuple[str, str, str]] = {
    "tinyshakespeare": ("karpathy/tiny_shakespeare", "tiny Shakespeare", "ROMEO:"),
    "wikitext-2-raw": ("Salesforce/wikitext", "WikiText-2 (raw)", "The history of"),
}

# Settings that say where files go or how fast the run goes, not what was trained: left out of the hyperparameter
# table (they stay in training_summary.json). The model section has its own table.
_NOT_HYPERPARAMETERS = {
    "run_name", "out_dir", "model", "resume_from_checkpoint", "tokenizer", "dataset", "data_cache_dir", "num_proc",
    "streaming", "log_with", "peak_flops", "checkpoint_interval", "keep_checkpoints", "cpu", "compile",
    "eval_interval", "eval_batches",
}


def build_model_card(run_dir: str | Path, repo_id: str | None = None, license: str = "apache-2.0") -> ModelCard:
    """The model card for the run in `run_dir` (needs final/ and training_summary.json; eval/ is optional).

    `repo_id` is only used in the card's loading snippets (default: "<your-username>/<run_name>"). Image links
    (loss_curve.png, shots_curve.png) are relative to the exported folder, where `export_folder` puts them.
    """
    from hf_gpt_custom import GPTCustomConfig  # imported here: the card module must not load torch at import

    run_dir = Path(run_dir)
    final_dir = run_dir / "final"
    summary_path = run_dir / "training_summary.json"
    for required in (final_dir / "config.json", summary_path):
        if not required.is_file():
            raise MissingFileError(
                f"cannot build a model card: {required} not found; {run_dir} must be a finished training run "
                "(run `hf-gpt-custom train CONFIG` first)"
            )
    summary = _read_json(summary_path)
    train_config = _read_train_config(run_dir, summary)
    model_config = GPTCustomConfig.from_pretrained(final_dir)
    run_name = str(summary.get("run_name") or train_config.get("run_name") or run_dir.name)

    results_path = run_dir / "eval" / "results.json"
    results = _read_json(results_path) if results_path.is_file() else None
    eval_rows = _sorted_eval_rows(results["results"]) if results else []
    eval_results = build_eval_results(eval_rows, model_name=run_name) if eval_rows else None

    dataset = str(summary.get("dataset") or train_config.get("dataset") or "")
    hub_dataset, dataset_description, example_prompt = _describe_training_dataset(dataset)
    breakdown = model_config.parameter_breakdown()

    card_data = ModelCardData(
        language="en",
        license=license,
        library_name="transformers",
        pipeline_tag="text-generation",
        tags=["hf-gpt-custom", "gpt_custom", "gpt2", "causal-lm", "custom_code", "text-generation"],
        datasets=[hub_dataset] if hub_dataset else None,
        metrics=sorted({row["metric"] for row in eval_rows}) or None,
        model_name=run_name,
        eval_results=eval_results,
    )
    return ModelCard.from_template(
        card_data,
        template_path=str(TEMPLATE_PATH),
        model_name=run_name,
        repo_id=repo_id or f"your-username/{run_name}",
        example_prompt=example_prompt,
        n_params_human=_human_count(breakdown["total"]),
        tokens_seen_human=_human_count(summary.get("tokens_seen")),
        dataset_description=dataset_description,
        arch={
            "n_layer": model_config.n_layer,
            "n_embd": model_config.n_embd,
            "n_head": model_config.n_head,
            "head_dim": model_config.head_dim,
            "inner_dim": model_config.inner_dim,
            "n_positions": model_config.n_positions,
            "vocab_size": model_config.vocab_size,
            "activation_function": model_config.activation_function,
            "tie_word_embeddings": model_config.tie_word_embeddings,
        },
        parameters=[(name, f"{count:,}") for name, count in breakdown.items()],
        tokenizer_description=_describe_tokenizer(final_dir, summary, run_dir),
        training_data_description=_describe_training_data(dataset, hub_dataset, dataset_description, train_config, summary),
        training_overview=_describe_training(summary, train_config),
        hyperparameters=_hyperparameter_rows(train_config),
        training_results=_training_result_rows(summary),
        loss_curve="loss_curve.png" if (run_dir / "loss_curve.png").is_file() else None,
        shots_curve="shots_curve.png" if (run_dir / "eval" / "shots_curve.png").is_file() else None,
        eval_rows=[_format_eval_row(row) for row in eval_rows],
        eval_description=_describe_eval(results) if results else "",
        eval_limit=(results or {}).get("config", {}).get("limit"),
    )


def build_eval_results(rows: list[dict[str, Any]], model_name: str) -> list[EvalResult]:
    """One EvalResult per results.json row with a finite value, in the order the Hub's model-index keeps.

    The model-index groups metrics by (task type, dataset, config, split), so K cannot live in the dataset's
    `args` (two K on one dataset would merge); it goes in each metric's `args` as {"num_fewshot": K} and in the
    metric's display name. Rows are reordered so each dataset's metrics are contiguous, which makes
    `model_index_to_eval_results(eval_results_to_model_index(...))` return exactly this list. Non-finite values
    (a diverged perplexity; null in results.json) stay in the card's table but are left out here: the Hub wants a
    number, and YAML's .nan would not round-trip.
    """
    eval_results = []
    for row in rows:
        value = float("nan") if row["value"] is None else float(row["value"])  # report.py writes non-finite as null
        if not math.isfinite(value):
            continue
        task, k, metric = str(row["task"]), int(row["num_fewshot"]), str(row["metric"])
        dataset_type, dataset_config, dataset_split, dataset_name = _benchmark_dataset(task, row.get("dataset"))
        eval_results.append(
            EvalResult(
                task_type="text-generation",
                task_name=task,
                dataset_type=dataset_type,
                dataset_name=dataset_name,
                dataset_config=dataset_config,
                dataset_split=dataset_split,
                metric_type=metric,
                metric_name=f"{metric} ({k}-shot)",
                metric_value=round(value, 4),
                metric_args={"num_fewshot": k},
            )
        )
    first_seen: dict[tuple, int] = {}
    for position, result in enumerate(eval_results):
        first_seen.setdefault(result.unique_identifier, position)
    return sorted(eval_results, key=lambda result: first_seen[result.unique_identifier])  # stable


# --- reading the run folder ----------------------------------------------------------------------------------------


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserError(f"{path} is not valid JSON ({err}); re-run the stage that writes it") from err


def _read_train_config(run_dir: Path, summary: dict) -> dict:
    """The resolved training config: config.yaml if present, else the copy inside training_summary.json."""
    config_path = run_dir / "config.yaml"
    if config_path.is_file():
        try:
            loaded = yaml.safe_load(config_path.read_text(encoding="utf-8"))
        except yaml.YAMLError as err:
            raise UserError(f"{config_path} is not valid YAML ({err}); re-run training to rewrite it") from err
        if isinstance(loaded, dict):
            return loaded
    return dict(summary.get("config") or {})


def _sorted_eval_rows(rows: list[dict]) -> list[dict]:
    """results.json rows grouped by task (first appearance), then by K; metric order within a K is kept."""
    task_order: dict[str, int] = {}
    for row in rows:
        task_order.setdefault(row["task"], len(task_order))
    return sorted(rows, key=lambda row: (task_order[row["task"]], int(row["num_fewshot"])))


def _benchmark_dataset(task: str, dataset: str | None) -> tuple[str, str | None, str | None, str]:
    if task in BENCHMARK_DATASETS:
        return BENCHMARK_DATASETS[task]
    # An unknown task: its results.json dataset if that reads like a Hub id, else the task name itself.
    looks_like_hub_id = dataset and "/" in dataset and not Path(dataset).exists() and not dataset.startswith(".")
    return (dataset if looks_like_hub_id else task), None, None, task


# --- text for the card ---------------------------------------------------------------------------------------------


def _human_count(count: Any) -> str:
    if not isinstance(count, (int, float)):
        return "an unknown number of"
    for threshold, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= threshold:
            return f"{count / threshold:.1f}{suffix}"
    return str(int(count))


def _format_number(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != 0 and abs(value) < 1e-3:
            return f"{value:.3g}"
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3f}" if abs(value) >= 1 else f"{value:.4f}"
    return str(value)


def _describe_training_dataset(dataset: str) -> tuple[str | None, str, str]:
    """(Hub dataset id or None, a short readable name, an example prompt) for the training `dataset` setting."""
    path = Path(dataset)
    if dataset.startswith((".", "/", "~")) or path.exists():
        name = path.name if path.is_dir() or not path.suffix else path.parent.name  # a folder or a file in one
        if name in KNOWN_TRAINING_DATASETS:
            return KNOWN_TRAINING_DATASETS[name]
        return None, f"the local text corpus `{path.name}`", "The"
    if dataset:
        return dataset, f"the Hub dataset `{dataset}`", "The"
    return None, "an unrecorded dataset", "The"


def _describe_tokenizer(final_dir: Path, summary: dict, run_dir: Path) -> str:
    tokenizer_config_path = final_dir / "tokenizer_config.json"
    tokenizer_config = _read_json(tokenizer_config_path) if tokenizer_config_path.is_file() else {}
    vocab_size = None
    if (final_dir / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        vocab_size = Tokenizer.from_file(str(final_dir / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
    source = str(summary.get("tokenizer") or "")
    trained_here = bool(source) and Path(source).resolve().is_relative_to(run_dir.resolve())
    origin = (
        "trained for this run on its training data with `hf-gpt-custom tokenizer train`"
        if trained_here
        else f"loaded from `{source}`" if source else "shipped with the run"
    )
    eos = tokenizer_config.get("eos_token", "<|endoftext|>")
    if isinstance(eos, dict):
        eos = eos.get("content", "<|endoftext|>")
    size = f"{vocab_size:,} tokens" if vocab_size else "its vocabulary"
    return (
        f"Byte-level BPE (`GPTCustomTokenizerFast`, GPT-2's byte alphabet and pre-tokenization split pattern) with "
        f"{size}, {origin}. `{eos}` separates documents and is both the bos and eos token. Every byte sequence "
        "can be encoded: there is no unknown token."
    )


def _describe_training_data(
    dataset: str, hub_dataset: str | None, name: str, train_config: dict, summary: dict
) -> str:
    if hub_dataset and hub_dataset != dataset:
        source = f"{name} ([{hub_dataset}](https://huggingface.co/datasets/{hub_dataset}), read from the local copy `{dataset}`"
    else:
        source = f"{name} (`{dataset}`"
    if train_config.get("dataset_split"):
        source += f", split `{train_config['dataset_split']}`"
    return (
        f"Trained on {source}). Documents are tokenized with `<|endoftext|>` appended, concatenated and cut into "
        f"blocks of {train_config.get('block_size', 'block_size')} tokens; the model saw "
        f"{_format_number(summary.get('tokens_seen'))} training tokens in {_format_number(summary.get('steps'))} "
        "optimizer steps."
    )


def _describe_training(summary: dict, train_config: dict) -> str:
    wall_time_s = summary.get("wall_time_s")
    minutes = f"{wall_time_s / 60:.1f} minutes" if isinstance(wall_time_s, (int, float)) else "an unrecorded time"
    processes = summary.get("num_processes") or 1
    batch_size, block_size = train_config.get("batch_size"), train_config.get("block_size")
    per_step = ""
    if isinstance(batch_size, int) and isinstance(block_size, int):
        tokens = batch_size * block_size * (train_config.get("gradient_accumulation_steps") or 1) * processes
        per_step = f" with {tokens:,} tokens per optimizer step"
    return (
        f"Pre-trained from scratch with Hugging Face Accelerate (`hf-gpt-custom train`, {processes} process"
        f"{'es' if processes > 1 else ''}) in {minutes}{per_step}: AdamW on the next-token cross-entropy loss, "
        "linear warmup then cosine decay of the learning rate. The full resolved configuration is "
        "`training_summary.json` → `config` in this repository; the architecture is in `config.json`."
    )


def _hyperparameter_rows(train_config: dict) -> list[tuple[str, str]]:
    """Settings as written in the YAML (`0.002`, `1e-08`, seed `1337`), unset (null) ones left out."""
    rows = []
    for key, value in train_config.items():
        if key in _NOT_HYPERPARAMETERS or key.startswith("benchmark_") or value is None:
            continue
        if isinstance(value, dict):
            rows.extend((f"{key}.{sub}", _format_setting(sub_value)) for sub, sub_value in value.items())
        elif isinstance(value, (list, tuple)):
            rows.append((key, ", ".join(str(item) for item in value)))
        else:
            rows.append((key, _format_setting(value)))
    return rows


def _format_setting(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _training_result_rows(summary: dict) -> list[tuple[str, str]]:
    labels = {
        "steps": "optimizer steps",
        "tokens_seen": "training tokens seen",
        "wall_time_s": "wall time (s)",
        "final_train_loss": "final training loss (nats/token)",
        "final_val_loss": "final validation loss (nats/token)",
        "val_perplexity": "validation perplexity",
        "val_bits_per_byte": "validation bits per byte",
        "tokens_per_s": "throughput (tokens/s)",
        "mfu": "model FLOPs utilization",
    }
    return [(label, _format_number(summary[key])) for key, label in labels.items() if summary.get(key) is not None]


def _format_metric(value: Any) -> str:
    """Four decimals (accuracies, bits per byte) until the number gets long (an untrained model's perplexity)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "–"
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4f}" if abs(value) < 1e4 else f"{value:,.1f}"


def _format_eval_row(row: dict) -> dict:
    return {
        "task": row["task"],
        "num_fewshot": row["num_fewshot"],
        "metric": row["metric"] + ("" if row.get("higher_is_better", True) else " ↓"),
        "value": "nan" if row["value"] is None else _format_metric(row["value"]),
        "stderr": _format_metric(row.get("stderr")),
        "n": row.get("n", "–"),
        "n_truncated": row.get("n_truncated", "–"),
    }


def _describe_eval(results: dict) -> str:
    config = results.get("config", {})
    limit = config.get("limit")
    shots = ", ".join(str(k) for k in config.get("shots", []))
    return (
        f"Zero-, one- and few-shot evaluation with `hf-gpt-custom eval` (K = {shots} in-context examples sampled "
        f"with seed {config.get('seed', '?')}"
        + (f", at most {limit} documents per task" if limit else "")
        + "). ↓ marks metrics where lower is better; stderr is the standard error of the mean over documents. "
        "When K examples do not fit the context window, examples are dropped (then the prompt cut) for that "
        "document: the last column counts those documents, so a K with many of them measures fewer shots than K."
        + "".join(
            f" Not evaluated: {skip['task']} at K={skip['num_fewshot']} ({skip['reason']})."
            for skip in results.get("skipped", [])
        )
    )


__all__ = ["BENCHMARK_DATASETS", "build_eval_results", "build_model_card"]
