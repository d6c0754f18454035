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

# Local training corpora (folder name under ../shared/data) -> (Hub dataset id, description, example prompt).
KNOWN_TRAINING_DATASETS: dict[str, tuple[str, str, str]] = {
    "tinyshakespeare": (
        "karpathy/tiny_shakespeare",
        "tiny Shakespeare (Karpathy's char-rnn corpus: 1.1 MB of dialogue from Shakespeare's plays)",
        "ROMEO:",
    ),
    "wikitext-2-raw": ("Salesforce/wikitext", "WikiText-2 (raw)", "The history of"),
}

# Settings that say where files are, not how the model was trained: left out of the hyperparameter table.
_NOT_HYPERPARAMETERS = {"run_name", "out_dir", "model", "resume_from_checkpoint", "tokenizer", "dataset"}


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
            raise FileNotFoundError(
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
        tokenizer_description=_describe_tokenizer(final_dir, summary, run_dir, dataset_description),
        training_data_description=_describe_training_data(dataset, dataset_description, train_config, summary),
        training_overview=_describe_training(summary),
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
    (a diverged perplexity) stay in the card's table but are left out here: YAML's .nan does not round-trip.
    """
    eval_results = []
    for row in rows:
        value = float(row["value"])
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
        raise ValueError(f"{path} is not valid JSON ({err}); re-run the stage that writes it") from err


def _read_train_config(run_dir: Path, summary: dict) -> dict:
    """The resolved training config: config.yaml if present, else the copy inside training_summary.json."""
    config_path = run_dir / "config.yaml"
    if config_path.is_file():
        try:
            loaded = yaml.safe_load(config_path.read_text(encoding="utf-8"))
        except yaml.YAMLError as err:
            raise ValueError(f"{config_path} is not valid YAML ({err}); re-run training to rewrite it") from err
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
        return f"{value:,.4g}" if abs(value) >= 1e4 or (value != 0 and abs(value) < 1e-3) else f"{value:.4f}"
    return str(value)


def _describe_training_dataset(dataset: str) -> tuple[str | None, str, str]:
    """(Hub dataset id or None, a readable description, an example prompt) for the training `dataset` setting."""
    is_local = dataset.startswith((".", "/", "~")) or Path(dataset).exists()
    if is_local:
        name = Path(dataset).name if Path(dataset).is_dir() or not Path(dataset).suffix else Path(dataset).parent.name
        if name in KNOWN_TRAINING_DATASETS:
            return KNOWN_TRAINING_DATASETS[name]
        return None, f"the local text corpus `{Path(dataset).name}`", "The"
    if dataset:
        return dataset, f"the Hub dataset [{dataset}](https://huggingface.co/datasets/{dataset})", "The"
    return None, "an unrecorded dataset", "The"


def _describe_tokenizer(final_dir: Path, summary: dict, run_dir: Path, dataset_description: str) -> str:
    tokenizer_config_path = final_dir / "tokenizer_config.json"
    tokenizer_config = _read_json(tokenizer_config_path) if tokenizer_config_path.is_file() else {}
    vocab_size = None
    if (final_dir / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        vocab_size = Tokenizer.from_file(str(final_dir / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
    source = str(summary.get("tokenizer") or "")
    trained_here = bool(source) and Path(source).resolve().is_relative_to(run_dir.resolve())
    origin = (
        f"trained for this run on the same data ({dataset_description}) with `hf-gpt-custom tokenizer train`"
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


def _describe_training_data(dataset: str, description: str, train_config: dict, summary: dict) -> str:
    details = [f"Trained on {description} (`dataset: {dataset}`"]
    if train_config.get("dataset_split"):
        details.append(f", split `{train_config['dataset_split']}`")
    details.append(").")
    text = "".join(details)
    text += (
        " Documents are tokenized with `<|endoftext|>` appended, concatenated and cut into blocks of "
        f"{train_config.get('block_size', 'block_size')} tokens; the model saw "
        f"{_format_number(summary.get('tokens_seen'))} training tokens in {_format_number(summary.get('steps'))} "
        "optimizer steps."
    )
    return text


def _describe_training(summary: dict) -> str:
    wall_time_s = summary.get("wall_time_s")
    minutes = f"{wall_time_s / 60:.1f} minutes" if isinstance(wall_time_s, (int, float)) else "an unrecorded time"
    return (
        f"Pre-trained from scratch with Hugging Face Accelerate (`hf-gpt-custom train`) in {minutes}, "
        "next-token cross-entropy loss. The resolved configuration is `training_summary.json` → `config` in this "
        "repository; the architecture settings are in `config.json`."
    )


def _hyperparameter_rows(train_config: dict) -> list[tuple[str, str]]:
    rows = []
    for key, value in train_config.items():
        if key in _NOT_HYPERPARAMETERS or key.startswith("benchmark_"):
            continue
        if isinstance(value, dict):
            rows.extend((f"{key}.{sub}", _format_number(sub_value)) for sub, sub_value in value.items())
        elif isinstance(value, (list, tuple)):
            rows.append((key, ", ".join(str(item) for item in value)))
        else:
            rows.append((key, _format_number(value)))
    return rows


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


def _format_eval_row(row: dict) -> dict:
    stderr = row.get("stderr")
    return {
        "task": row["task"],
        "num_fewshot": row["num_fewshot"],
        "metric": row["metric"] + ("" if row.get("higher_is_better", True) else " ↓"),
        "value": _format_number(float(row["value"])),
        "stderr": _format_number(float(stderr)) if isinstance(stderr, (int, float)) else "–",
        "n": row.get("n", "–"),
    }


def _describe_eval(results: dict) -> str:
    config = results.get("config", {})
    limit = config.get("limit")
    shots = ", ".join(str(k) for k in config.get("shots", []))
    return (
        f"Zero-, one- and few-shot evaluation with `hf-gpt-custom eval` (K = {shots} in-context examples sampled "
        f"with seed {config.get('seed', '?')}"
        + (f", at most {limit} documents per task" if limit else "")
        + "). ↓ marks metrics where lower is better; stderr is the standard error of the mean over documents."
    )


__all__ = ["BENCHMARK_DATASETS", "build_eval_results", "build_model_card"]
