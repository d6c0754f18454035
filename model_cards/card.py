"""build_model_card(run_dir): a Hugging Face model card filled from a run folder's real files.

This module gathers facts — from final/ (config + tokenizer), training_summary.json, config.yaml and
eval/results.json (STYLE §11) — and templates/model_card.md holds every sentence, so what the card says about
scratch vs fine-tuning, the schedule or the data is decided in one readable place. It renders through
huggingface_hub's ModelCard / ModelCardData, so the front-matter — including the `model-index` with every evaluation
result — is written by the library the Hub itself parses. The evaluation table is eval/report.py's renderer. Nothing
is computed here that the run did not record, and no local path reaches the card: a local file is named by its
base name, a known corpus by its Hub id.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from hf_gpt_custom.errors import MissingFileError, UserError
from hf_gpt_custom.model_cards.task_card import base_model_name

TEMPLATE_PATH = Path(__file__).parent / "templates" / "model_card.md"

# Local training corpora (folder name under ../shared/data) -> (Hub dataset id, short name, example prompt), all
# English (KNOWN_DATASET_LANGUAGE: the card's `language` when export is given none).
KNOWN_TRAINING_DATASETS: dict[str, tuple[str, str, str]] = {
    "tinyshakespeare": ("karpathy/tiny_shakespeare", "tiny Shakespeare", "ROMEO:"),
    "wikitext-2-raw": ("Salesforce/wikitext", "WikiText-2 (raw)", "The history of"),
}
KNOWN_DATASET_LANGUAGE = ["en"]  # of every dataset this file and task_card.py know by content or folder


logger = logging.getLogger(__name__)

DEFAULT_LICENSE = "apache-2.0"  # the project's: a model trained from scratch here; `export --license` sets another


def hub_base_model(summary: dict, train_config: dict) -> str | None:
    """The Hub model the run started from (its init_from, when that is a Hub id): the card's `base_model`, whose
    license a fine-tuned model usually carries. None for a local folder or a run from scratch."""
    from hf_gpt_custom.model_folder import is_hub_repo_id

    source = str(summary.get("fine_tuned_from") or train_config.get("init_from") or "")
    is_local = source.startswith((".", "/", "~")) or Path(source).exists()
    return source if source and not is_local and is_hub_repo_id(source) else None


def read_run_results(run_dir: Path) -> dict | None:
    """The run's eval/results.json, None without one; a UserError when it scored other weights than final/'s, or
    task or data files that changed since.

    `hf-gpt-custom eval --model OTHER --out RUN/eval` (another model, or one of the run's checkpoints) overwrote the
    run's scores, and export put them in the card and its model-index as this model's. An evaluation records the
    weights it scored (manifest.weights_fingerprint), each task's files (task.benchmarks_changed_since) and the
    scoring code (versions.scoring_code_sha256: other or unrecorded code is a warning, its figures may well be the
    same); results written before it recorded weights or files carry none of those and are taken as they are."""
    from hf_gpt_custom.eval.task import benchmarks_changed_since
    from hf_gpt_custom.hub import read_json
    from hf_gpt_custom.manifest import scored_other_weights
    from hf_gpt_custom.training.config_checks import warn_once
    from hf_gpt_custom.versions import scoring_code_sha256

    path = Path(run_dir) / "eval" / "results.json"
    if not path.is_file():
        return None
    results = read_json(path)
    if scored_other_weights(results, Path(run_dir) / "final"):
        raise UserError(f"{path} scored other weights than {Path(run_dir) / 'final'} (it names "
                        f"{results.get('model')}), so its numbers would be published as this model's; evaluate "
                        f"this run's model into it (hf-gpt-custom eval --model {Path(run_dir) / 'final'} --out "
                        f"{path.parent} ...), or move {path.parent} aside to export without benchmark scores")
    changed, unchecked = benchmarks_changed_since(results)
    if changed:
        raise UserError(f"{path} scored {', '.join(changed)} on task or data files that have changed since, so its "
                        f"numbers would be published for files they were not measured on; evaluate again (rerun "
                        f"`hf-gpt-custom run` with the run's config, or hf-gpt-custom eval --model "
                        f"{Path(run_dir) / 'final'} --out {path.parent} ...), or move {path.parent} aside to export "
                        f"without benchmark scores")
    # export reads the results twice (the card, the published copy): each warning is said once
    if unchecked:
        warn_once(f"{path}: the task or data files of {', '.join(unchecked)} are not found here, so the card shows "
                  f"their scores without checking that those files are unchanged since")
    if results.get("scoring_code_sha256") != scoring_code_sha256():
        version = (results.get("software") or {}).get("hf-gpt-custom") or "version unknown"
        which = ("another version" if results.get("scoring_code_sha256") else
                 "an older version (one that did not record its code)")
        warn_once(f"{path} was scored by {which} of hf-gpt-custom's evaluation or model code ({version}): "
                  f"evaluate again to publish this version's figures (`hf-gpt-custom run` does so by itself)")
    return results


def build_model_card(
    run_dir: str | Path, repo_id: str | None = None, license: str = DEFAULT_LICENSE, package_source: str | None = None,
    license_name: str | None = None, license_link: str | None = None, language: list[str] | None = None,
) -> ModelCard:
    """The model card for the run in `run_dir` (needs final/ and training_summary.json; eval/ is optional).

    `repo_id` is only used in the card's loading snippets (default: "<your-username>/<run_name>"); `package_source`
    is the pip requirement for the hf-gpt-custom package (default: none; the card then says to install it from its
    source repository, without making up a URL). `language` is the card's list of ISO 639 codes (default: English
    for a dataset this module knows, else none: a local corpus of unknown language is not called English). Image links
    (loss_curve.png, shots_curve.png) are relative to the exported folder, where `export_folder` puts them.
    """
    from hf_gpt_custom.eval.report import format_results_table
    from hf_gpt_custom import GPTCustomConfig  # imported here: the card module must not load torch at import
    from hf_gpt_custom.hub import read_json
    from hf_gpt_custom.publish_checks import publishes_our_tokenizer, remote_code_files

    run_dir = Path(run_dir)
    final_dir = run_dir / "final"
    summary_path = run_dir / "training_summary.json"
    for required in (final_dir / "config.json", summary_path):
        if not required.is_file():
            raise MissingFileError(
                f"cannot build a model card: {required} not found; {run_dir} must be a finished training run "
                "(run `hf-gpt-custom train CONFIG` first)"
            )
    summary = read_json(summary_path)
    train_config = _read_train_config(run_dir, summary)
    model_config = GPTCustomConfig.from_pretrained(final_dir)
    run_name = str(summary.get("run_name") or train_config.get("run_name") or run_dir.name)
    ships_ours = publishes_our_tokenizer(final_dir)
    code_files = sorted(remote_code_files(ships_ours))  # the tokenizer's only if it is ours
    if summary.get("task"):  # a fine-tuned task head (hf-gpt-custom finetune): its own card, task_card.py
        from hf_gpt_custom.model_cards.task_card import build_task_model_card
        from hf_gpt_custom.training.finetune_config import PRETRAINING_ONLY_SETTINGS

        rows = [row for row in _hyperparameter_rows(train_config) if row[0].split(".")[0] not in PRETRAINING_ONLY_SETTINGS]
        rows += _dropout_rows(model_config)
        facts = {"model_name": run_name, "n_params_human": _human_count(summary.get("n_params")),
                 "code_files": code_files, "hyperparameters": rows,
                 "transformers_requirement": transformers_requirement(),
                 "loss_curve": "loss_curve.png" if (run_dir / "loss_curve.png").is_file() else None,
                 "duration": _training_facts(summary, train_config)["duration"]}
        return build_task_model_card(run_dir, summary, train_config, model_config, repo_id,
                                     {"license": license, "license_name": license_name, "license_link": license_link},
                                     facts, language)

    results = read_run_results(run_dir)
    eval_rows = results["results"] if results else []
    trained_on = tasks_scored_on_training_data(eval_rows, summary, train_config)
    if trained_on:
        logger.warning("%s scored documents this model was trained on (the same data files); the card says so and "
                       "leaves %s out of its model-index, where the Hub would read them as held-out scores",
                       " and ".join(trained_on), "it" if len(trained_on) == 1 else "them")
    dataset = _training_dataset_facts(str(summary.get("dataset") or train_config.get("dataset") or ""), train_config)
    breakdown = model_config.parameter_breakdown()

    # rows on local files only give no model-index
    eval_results = build_eval_results([row for row in eval_rows if row["task"] not in trained_on], model_name=run_name,
                                      limit=results.get("config", {}).get("limit")) if eval_rows else []
    card_data = ModelCardData(
        language=language or (KNOWN_DATASET_LANGUAGE if dataset["known"] else None),
        license=license,
        license_name=license_name,  # the Hub's fields for `license: other`: an id and a link to its text
        license_link=license_link,
        base_model=hub_base_model(summary, train_config),
        library_name="transformers",
        pipeline_tag="text-generation",
        tags=["hf-gpt-custom", "gpt_custom", *architecture_tags(model_config), "causal-lm", "custom_code",
              "text-generation"],
        datasets=[dataset["hub_id"]] if dataset["hub_id"] else None,
        metrics=sorted({row["metric"] for row in eval_rows if row["task"] not in trained_on}) or None,
        # the model-index's name: without one, huggingface_hub writes it as a key of its own, no Hub metadata field
        model_name=run_name if eval_results else None,
        eval_results=eval_results or None,
    )
    return ModelCard.from_template(
        card_data,
        template_path=str(TEMPLATE_PATH),
        model_name=run_name,
        repo_id=repo_id or f"your-username/{run_name}",
        package_source=package_source,  # the pip requirement, when the exporter gives one: never a made-up URL
        code_files=code_files,
        transformers_requirement=transformers_requirement(),
        example_prompt=dataset["example_prompt"],
        example_max_new_tokens=_example_max_new_tokens(dataset["example_prompt"], model_config.n_positions),
        n_params_human=_human_count(breakdown["total"]),
        tokens_seen_human=_human_count(summary.get("tokens_seen")),
        dataset=dataset,
        arch={
            "n_layer": model_config.n_layer,
            "n_embd": model_config.n_embd,
            "n_head": model_config.n_head,
            "head_dim": model_config.head_dim,
            "inner_dim": model_config.inner_dim,
            "n_positions": model_config.n_positions,
            "vocab_size": model_config.vocab_size,
            "block": model_config.describe_block(),
            "tied_head": model_config.tie_word_embeddings,
            # the names PEFT's target_modules take, and the norms' class: a SwiGLU MLP adds its gate
            "swiglu": model_config.mlp_type == "swiglu",
            "linear_names": ["c_attn", "c_proj", "c_fc", *(["c_gate"] if model_config.mlp_type == "swiglu" else [])],
            "norm_class": "LayerNorm" if model_config.norm_type == "layernorm" else "RMSNorm",
        },
        parameters=[(PARAMETER_ROWS.get(name, name), f"{count:,}") for name, count in breakdown.items()],
        tokenizer=_tokenizer_facts(final_dir, summary, train_config, model_config.n_positions, ships_ours),
        training=_training_facts(summary, train_config),
        hyperparameters=[*_hyperparameter_rows(train_config, never_read=_settings_never_read(train_config)),
                         *_dropout_rows(model_config)],
        training_results=_training_result_rows(summary),
        loss_curve="loss_curve.png" if (run_dir / "loss_curve.png").is_file() else None,
        shots_curve="shots_curve.png" if (run_dir / "eval" / "shots_curve.png").is_file() else None,
        eval=(_eval_facts(results, format_results_table, trained_on)
              if eval_rows or (results or {}).get("skipped") else None),
    )


def transformers_requirement() -> str:
    """The transformers pin the package declares (pyproject.toml, as installed), e.g. "transformers>=5,<5.25"."""
    import importlib.metadata

    from packaging.requirements import Requirement

    for line in importlib.metadata.requires("hf-gpt-custom") or []:
        requirement = Requirement(line)
        if requirement.name == "transformers" and not requirement.marker:
            # lower bounds first, as people write them: "transformers>=5,<5.25"
            specifiers = sorted(requirement.specifier, key=lambda spec: (not spec.operator.startswith(">"), str(spec)))
            return "transformers" + ",".join(str(spec) for spec in specifiers)
    raise AssertionError("the hf-gpt-custom package metadata declares no transformers requirement")


def _scored_how(row: dict[str, Any], k: int, limit: int | float | None) -> tuple[str, dict[str, Any]]:
    """A metric's display-name suffix and its `args`: K, and what makes the score other than the split's K-shot one —
    the first `limit` documents (eval's --limit), a local file that is a sample of the split (triviaqa), prompts
    cut to fit the context (examples dropped or the context cut from the left: a "2-shot" score with every prompt
    cut is mostly a 1- or 0-shot one)."""
    n = row["n"]
    sample = isinstance(row.get("dataset"), dict) and bool(row["dataset"].get("sample_of_split"))
    words, args = [f"{k}-shot"], {"num_fewshot": k}
    if limit is not None:
        words.append(f"first {n} documents" + (" of a sample of the split" if sample else ""))
        args["limit"] = n  # what the limit scored: 100 of a limit of 300 on COPA's 100, 10 of a fraction 0.1
    elif sample:
        words.append(f"a {n:,}-document sample of the split")
    if sample:
        args["sample_of_split"] = True
    cut = row.get("n_truncated") or 0
    if cut:
        words.append(f"{cut} of {n} documents cut to fit")
        args["prompts_cut_to_fit"] = cut
    return ", ".join(words), args


def tasks_scored_on_training_data(rows: list[dict[str, Any]], summary: dict, train_config: dict) -> list[str]:
    """The tasks whose scored data files are among the model's training files (same sha256): wiki.test.raw trained
    on, WikiText-2's test perplexity then measures memorised text. The model's training files are this run's and
    those of the runs its init_from came from (training_history)."""
    files, hub_splits = training_history(summary, train_config)
    overlapping = (row["task"] for row in rows if isinstance(row.get("dataset"), dict)
                   and (files.intersection(row["dataset"].get("local_files_sha256") or ())
                        or _hub_split(row["dataset"]) in hub_splits))
    return list(dict.fromkeys(overlapping))


def _hub_split(dataset: dict) -> tuple[str | None, str | None, str | None]:
    return dataset.get("path"), dataset.get("name"), dataset.get("split")


def training_history(summary: dict, train_config: dict, runs_back: int = 8) -> tuple[set[str], set[tuple]]:
    """What the model was trained on: the sha256 of every local training file (training_summary.json records them;
    a run from before it did is hashed where its data still is) and every Hub (dataset, config, split) — this run's,
    then, through init_from, the earlier runs' (a model continued from the WikiText-2 model of
    finetune_pretrain_wikitext2.yaml has seen wiki.test.raw too)."""
    dataset = train_config.get("dataset")
    hub_splits = set()
    if dataset and not Path(str(dataset)).exists() and not str(dataset).startswith((".", "/", "~")):
        hub_splits.add((str(dataset), train_config.get("dataset_config"), train_config.get("dataset_split") or "train"))
    trained = summary.get("dataset_files_sha256")
    if trained is None and train_config.get("dataset"):
        from hf_gpt_custom.training.fingerprints import local_file_sha256s

        try:
            trained = local_file_sha256s(str(train_config["dataset"]))
        except (UserError, OSError):  # moved, unreadable or mixed: nothing left to compare
            trained = None
    found = set(trained or ())
    earlier = _run_of_model_folder(train_config.get("init_from"))
    if earlier is not None and runs_back > 0:
        from hf_gpt_custom.hub import read_json

        earlier_summary = read_json(earlier / "training_summary.json")
        files, splits = training_history(earlier_summary, _read_train_config(earlier, earlier_summary), runs_back - 1)
        found, hub_splits = found | files, hub_splits | splits
    return found, hub_splits


def _run_of_model_folder(init_from: Any) -> Path | None:
    """The folder holding the training_summary.json of the run that made `init_from`: an export holds its own, a
    run's final/ sits in its run folder, a checkpoint two levels down; None for a Hub id or a folder of no run."""
    if not init_from or not Path(str(init_from)).is_dir():
        return None
    folder = Path(str(init_from))
    return next((candidate for candidate in (folder, folder.parent, folder.parent.parent)
                 if (candidate / "training_summary.json").is_file()), None)


def build_eval_results(rows: list[dict[str, Any]], model_name: str, limit: int | None = None) -> list[EvalResult]:
    """One EvalResult per results.json row with a finite value, in the order the Hub's model-index keeps.

    The model-index groups metrics by (task type, dataset, config, split), so K cannot live in the dataset's
    `args` (two K on one dataset would merge); it goes in each metric's `args` as {"num_fewshot": K} and in the
    metric's display name. Rows are reordered so each dataset's metrics are contiguous, which makes
    `model_index_to_eval_results(eval_results_to_model_index(...))` return exactly this list. Non-finite values
    (a diverged perplexity; null in results.json) stay in the card's table but are left out here: the Hub wants a
    number, and YAML's .nan would not round-trip. Scored on the first `limit` documents only (eval's --limit,
    benchmark_limit), on a sample of the split, or with documents cut to fit, a metric says so in its name and args
    (_scored_how): a score on 4 documents must not read as the benchmark's.
    """
    eval_results = []
    for row in rows:
        value = float("nan") if row["value"] is None else float(row["value"])  # report.py writes non-finite as null
        if not math.isfinite(value):
            continue
        task, k, metric = str(row["task"]), int(row["num_fewshot"]), str(row["metric"])
        dataset = _benchmark_dataset(row.get("dataset"))
        if dataset is None:  # local data only: the Hub would link its name to an unrelated dataset
            continue
        name, args = _scored_how(row, k, limit)
        eval_results.append(
            EvalResult(
                task_type="text-generation",
                task_name=task,
                dataset_type=dataset["path"],
                dataset_name=task,
                dataset_config=dataset["name"],
                dataset_split=dataset["split"],
                metric_type=metric,
                metric_name=f"{metric} ({name})",
                metric_value=round(value, 4),
                metric_args=args,
            )
        )
    # Two tasks on one dataset (copa and a task file of one's own on the same Hub split) share a model-index entry,
    # named after the first task: each metric then names its own task, or both scores read as the first task's.
    tasks_of: dict[tuple, set[str]] = {}
    for result in eval_results:
        tasks_of.setdefault(result.unique_identifier, set()).add(result.task_name)
    for result in eval_results:
        if len(tasks_of[result.unique_identifier]) > 1:
            result.metric_name = f"{result.task_name}: {result.metric_name}"
            result.metric_args = {"task": result.task_name, **result.metric_args}
    first_seen: dict[tuple, int] = {}
    for position, result in enumerate(eval_results):
        first_seen.setdefault(result.unique_identifier, position)
    return sorted(eval_results, key=lambda result: first_seen[result.unique_identifier])  # stable


# --- reading the run folder ----------------------------------------------------------------------------------------


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


def _benchmark_dataset(dataset: Any) -> dict[str, str | None] | None:
    """The row's Hub dataset as {"path", "name", "split"} (results.json carries it from the task's YAML; older
    results have a plain string, kept when it is a Hub id). None for a task on local files only: a model-index entry's
    dataset type is a Hub dataset id, so such a row stays in the card's table and out of the metadata, as
    transformers' Trainer leaves out results without a dataset."""
    if isinstance(dataset, dict) and dataset.get("path"):
        return {"path": str(dataset["path"]), "name": dataset.get("name"), "split": dataset.get("split")}
    if isinstance(dataset, str) and "/" in dataset and not dataset.startswith((".", "/", "~")) and not Path(dataset).suffix:
        return {"path": dataset, "name": None, "split": None}
    return None


# --- facts for the template ----------------------------------------------------------------------------------------


def architecture_tags(model_config) -> list[str]:
    """The Hub tag of the family whose block this model's is: "gpt2" for GPT-2's (pre-LayerNorm, learned positions,
    a plain MLP), "llama" for LLaMA's (pre-norm RMSNorm, RoPE, SwiGLU), none for the others (GPT-1's post-norm block, the
    original Transformer's), which the Hub would otherwise list under a family they are not."""
    if (model_config.norm_position, model_config.norm_type, model_config.position_embedding_type,
            model_config.mlp_type) == ("pre", "layernorm", "learned", "standard"):
        return ["gpt2"]
    if (model_config.norm_position, model_config.position_embedding_type, model_config.norm_type,
            model_config.mlp_type) == ("pre", "rope", "rmsnorm", "swiglu"):
        return ["llama"]
    return []


def _human_count(count: Any) -> str:
    if not isinstance(count, (int, float)):
        return "an unknown number of"
    for threshold, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= threshold:
            return f"{count / threshold:.1f}{suffix}"
    return str(int(count))


def _duration(seconds) -> str:
    """A wall time as people say it: "40 seconds", "8.3 minutes", "2.5 hours" (a short run was "0.0 minutes")."""
    if not isinstance(seconds, (int, float)) or seconds < 0:
        return "an unrecorded time"
    if seconds < 60:
        return "1 second" if round(seconds) == 1 else f"{seconds:.0f} seconds"
    return f"{seconds / 60:.1f} minutes" if seconds < 3600 else f"{seconds / 3600:.1f} hours"


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


def _is_local(value: str) -> bool:
    return value.startswith((".", "/", "~")) or Path(value).exists()


def _public_name(value: str) -> str:
    """A Hub id as it is; a local path as its base name (the card never shows a path of the training machine)."""
    return Path(value).name if _is_local(value) else value


def _training_dataset_facts(dataset: str, train_config: dict) -> dict[str, Any]:
    """hub_id (or None), description (a readable name), local_file (base name or None), split, example_prompt, known
    (a copy of a KNOWN_TRAINING_DATASETS corpus)."""
    facts = {"hub_id": None, "local_file": None, "split": train_config.get("dataset_split"), "example_prompt": "The",
             "known": False}
    if not dataset:
        return {**facts, "description": "an unrecorded dataset"}
    if not _is_local(dataset):
        return {**facts, "hub_id": dataset, "description": f"the Hub dataset `{dataset}`",
                "known": dataset in {hub_id for hub_id, _, _ in KNOWN_TRAINING_DATASETS.values()}}
    path = Path(dataset)
    folder = path.name if path.is_dir() or not path.suffix else path.parent.name  # a folder or a file in one
    facts.update(local_file=path.name, split=None)  # a local file has no splits
    if folder in KNOWN_TRAINING_DATASETS:
        hub_id, description, prompt = KNOWN_TRAINING_DATASETS[folder]
        return {**facts, "hub_id": hub_id, "description": description, "example_prompt": prompt, "known": True}
    return {**facts, "description": f"the local text corpus `{path.name}`"}


def _example_max_new_tokens(prompt: str, n_positions: int) -> int:
    """40 new tokens, or fewer where the prompt and 40 do not fit the context (a short-context run's card snippet was
    refused past n_positions as written). The prompt counted at its most tokens for any tokenizer the card may ship:
    one per byte (byte-level BPE's worst case) plus a BOS and a leading-space piece."""
    return max(1, min(40, n_positions - len(prompt.encode("utf-8")) - 2))


def _tokenizer_facts(final_dir: Path, summary: dict, train_config: dict, n_positions: int,
                     ships_ours: bool) -> dict[str, Any]:
    from hf_gpt_custom.hub import read_json

    tokenizer_config_path = final_dir / "tokenizer_config.json"
    tokenizer_config = read_json(tokenizer_config_path) if tokenizer_config_path.is_file() else {}
    vocab_size = None
    if (final_dir / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        vocab_size = Tokenizer.from_file(str(final_dir / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
    source = str(summary.get("tokenizer") or "")
    eos = tokenizer_config.get("eos_token", "<|endoftext|>")
    if isinstance(eos, dict):
        eos = eos.get("content", "<|endoftext|>")
    pad = tokenizer_config.get("pad_token") or eos
    if isinstance(pad, dict):
        pad = pad.get("content", eos)
    return {
        "tokenizer_class": tokenizer_config.get("tokenizer_class") or "PreTrainedTokenizerFast",
        "byte_level": ships_ours,  # export keeps another class as it is (publishes_our_tokenizer)
        "vocab_size": vocab_size,
        # trained by the run itself when it was given no tokenizer and no init_from (workload.prepare_tokenizer),
        # wherever the run folder is now: a Hub tokenizer saved into <run>/tokenizer was not trained here
        "trained_here": bool(source) and not train_config.get("tokenizer") and not train_config.get("init_from"),
        "source": base_model_name(source) if source else None,  # a run's final/ as "<run>/final", not "final"
        "eos_token": eos,
        "pad_token": pad,  # export_folder saves the tokenizer with its own pad, else eos, left (GPT-2 recipes)
        "model_max_length": n_positions,
    }


def _training_facts(summary: dict, train_config: dict) -> dict[str, Any]:
    wall_time_s = summary.get("wall_time_s")
    processes = summary.get("num_processes") or 1
    batch_size, block_size = train_config.get("batch_size"), train_config.get("block_size")
    tokens_per_step = None
    if isinstance(batch_size, int) and isinstance(block_size, int):
        tokens_per_step = batch_size * block_size * (train_config.get("gradient_accumulation_steps") or 1) * processes
    init_from = train_config.get("init_from")
    schedule = None
    if isinstance(train_config.get("learning_rate"), (int, float)):
        schedule = {
            "kind": train_config.get("lr_schedule") or "cosine",  # train.py: cosine to min_lr_ratio after warmup
            "peak": train_config["learning_rate"],
            "warmup_steps": train_config.get("warmup_steps") or 0,
            "min_lr_ratio": train_config.get("min_lr_ratio", 0.0),
            "max_steps": train_config.get("max_steps", summary.get("steps")),
        }
    return {
        "fine_tuned_from": base_model_name(str(init_from)) if init_from else None,  # as the fine-tuning card names it
        "processes": processes,
        "duration": _duration(wall_time_s),
        "tokens_per_step": tokens_per_step,
        "block_size": train_config.get("block_size", "block_size"),
        "blocks_shifted_each_epoch": bool(train_config.get("shift_block_boundaries")),
        "tokens_seen": _format_number(summary.get("tokens_seen")),
        "steps": _format_number(summary.get("steps")),
        "schedule": schedule,
    }


# Settings the card shows in their own section (architecture, data, tokenizer, fine-tuning source), not as rows.
_SHOWN_ELSEWHERE = {"model", "dataset", "tokenizer", "init_from", "task"}


def _hyperparameter_rows(train_config: dict, never_read: set[str] = frozenset()) -> list[tuple[str, str]]:
    """Settings that change what is trained, as written in the YAML (`0.002`, `1e-08`, seed `1337`), unset (null)
    ones and `never_read` left out. Paths, speed, logging and checkpoint settings stay in training_summary.json only."""
    from hf_gpt_custom.training.config import settings_that_do_not_change_training

    left_out = settings_that_do_not_change_training() | _SHOWN_ELSEWHERE | set(never_read)
    rows = []
    for key, value in train_config.items():
        if key in left_out or value is None:
            continue
        if isinstance(value, dict):
            rows.extend((f"{key}.{sub}", _format_setting(sub_value)) for sub, sub_value in value.items())
        elif isinstance(value, (list, tuple)):
            rows.append((key, ", ".join(str(item) for item in value)))
        else:
            rows.append((key, _format_setting(_public_name(value) if isinstance(value, str) else value)))
    return rows


def _dropout_rows(model_config) -> list[tuple[str, str]]:
    """The dropout the model trained with, from its config.json (the `model:` section is left out of the rows: a
    default 0.1 set nowhere in the YAML was in no row at all), and the token-classification head's classifier dropout
    (the other heads have none, as GPT-2's: a classifier_dropout in their config is never applied)."""
    rows = [(f"model.{name}", _format_setting(float(getattr(model_config, name))))
            for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop")]
    if "GPTCustomForTokenClassification" in (model_config.architectures or []):  # the one head with a dropout
        classifier = getattr(model_config, "classifier_dropout", None)
        classifier = 0.1 if classifier is None else classifier  # its default, as GPT2ForTokenClassification's
        rows.append(("model.classifier_dropout", _format_setting(float(classifier))))
    return rows


def _settings_never_read(train_config: dict) -> set[str]:
    """The pre-training settings this run never read, by the rule the run itself applied (settings_without_effect):
    a row for one would state a value that played no part, e.g. `tokenizer_vocab_size | 8192` beside the 512-token
    tokenizer the run was given, or a Hub split for a local text file."""
    import dataclasses
    from types import SimpleNamespace

    from hf_gpt_custom.training.config import TrainConfig
    from hf_gpt_custom.training.config_checks import settings_without_effect

    defaults = {field.name: field.default for field in dataclasses.fields(TrainConfig)}
    return set(settings_without_effect(SimpleNamespace(**{**defaults, **train_config})))


# parameter_breakdown()'s keys as the card names them: "textbook" is a formula, not a count of this model's tensors
PARAMETER_ROWS = {
    "textbook": "for comparison: GPT-2's textbook 12·d²·L + V·d + T·d (learned positions, whatever this block has)",
}


def _format_setting(value: Any) -> str:
    """As the YAML config writes it: 0.0006, 1e-08, true."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _training_result_rows(summary: dict) -> list[tuple[str, str]]:
    scored, blocks = summary.get("val_blocks_scored"), summary.get("val_blocks")
    # eval_batches scores the first blocks only: the rows say so rather than pass a subset off as the split
    part = f" (first {scored:,} of {blocks:,} blocks: eval_batches)" if scored and blocks and scored < blocks else ""
    # run_log.summarize_train_steps averages the last 10 logged steps' losses: fewer in a shorter run, or in one
    # resumed without its run log (a summary written before it recorded how many: the steps' rule)
    averaged = summary.get("final_train_loss_steps")
    if not isinstance(averaged, int) or averaged < 1:
        averaged = min(10, summary["steps"]) if isinstance(summary.get("steps"), int) and summary["steps"] > 0 else 10
    labels = {
        "steps": "optimizer steps",
        "tokens_seen": "training tokens seen",
        "wall_time_s": "wall time (s)",
        "final_train_loss": ("training loss of the one step" if averaged == 1 else
                             f"training loss, mean of the last {averaged} steps") + " (nats/token)",
        "final_val_loss": f"final validation loss{part} (nats/token)",
        "val_perplexity": f"validation perplexity{part}",
        "val_bits_per_byte": f"validation bits per byte{part}",
        "tokens_per_s": "throughput (tokens/s)",
        # the denominator named: a GPU's datasheet peak, or on a CPU a matmul measured at the run's threads
        "mfu": "model FLOPs utilization" + _peak_named(summary),
    }
    shown = {**summary, **summary.get("non_finite", {})}  # a diverged figure reads inf or nan, not left out
    return [(label, _format_number(shown[key])) for key, label in labels.items() if shown.get(key) is not None]


def _peak_named(summary: dict) -> str:
    """The denominator of the MFU: one peak, or the range of the peaks the sessions measured, each its own steps'."""
    if summary.get("peak_flops_range"):
        low, high = (peak / 1e12 for peak in summary["peak_flops_range"])
        return f" (each session's steps of its own measured peak, {low:.3g}–{high:.3g} TFLOP/s)"
    return f" (of {summary['peak_flops'] / 1e12:.3g} TFLOP/s peak)" if summary.get("peak_flops") else ""


def _eval_facts(results: dict, format_results_table, trained_on: list[str]) -> dict[str, Any]:
    config = results.get("config", {})
    return {
        "trained_on": trained_on,
        "shots": ", ".join(str(k) for k in config.get("shots", [])),
        "seed": config.get("seed", "?"),
        "limit": config.get("limit"),
        "limit_text": _limit_text(config.get("limit")),
        "protocol": config.get("protocol", "ours"),
        "table": format_results_table(results.get("results", []), results.get("skipped", [])),
    }


def _limit_text(limit: int | float | None) -> str | None:
    """eval's --limit in words: a count of documents, or (below 1, as lm-eval's) a share of them."""
    if limit is None:
        return None
    if limit < 1:
        return f"the first {limit:.4g} of each task's documents (rounded up)"
    return f"at most {int(limit)} documents per task"


__all__ = ["build_eval_results", "build_model_card"]
