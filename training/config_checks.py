"""TrainConfig's checks, run when a config is made: each setting that cannot work is one line naming the fix, before
any file is written or torch is imported. A config that passes here can still meet its machine's limits (devices.py)
and its run folder's history (resume.py); those are checked when the run starts.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_gpt_custom.errors import MissingFileError, UserError, check_listed_once, did_you_mean
from hf_gpt_custom.training.config_values import declared_types
from hf_gpt_custom.training.corpus import (files_datasets_guesses_held_out, held_out_split_files, list_corpus_files,
                                          reader_for, shared_corpus_file)
from hf_gpt_custom.training.model_section import check_model_section

if TYPE_CHECKING:
    from hf_gpt_custom.training.config import TrainConfig

logger = logging.getLogger(__name__)

# auto: bf16 on a GPU that supports it, fp32 ("no") on a CPU or an older GPU (devices.resolve_mixed_precision)
MIXED_PRECISION_CHOICES = ("auto", "no", "bf16", "fp16")
TEXT_SAMPLE_BY_CHOICES = ("paragraph", "line", "document")
# Which val_fraction of the documents is held out: a seeded random sample, or the last ones in file order (nanoGPT's
# split of tiny Shakespeare, the way results on it are usually quoted).
VAL_HOLDOUT_CHOICES = ("random", "tail")


def check_train_config(config: TrainConfig) -> None:
    """Raise a one-line UserError naming the first setting of `config` that cannot work, with the fix."""
    if not config.dataset:
        raise UserError("dataset is not set; give a text file/folder or a Hub dataset name, e.g. dataset=../shared/data/tinyshakespeare/input.txt")
    for name, declared in declared_types(type(config)).items():  # NaN and inf pass every `<` check below: refuse them first
        value = getattr(config, name)
        if declared in (float, float | None) and value is not None and not math.isfinite(value):
            raise UserError(f"{name}={value} is not a finite number; give a real value (default: "
                            f"{_default_of(config, name)})")
    if not 0 <= config.seed < 2**32:
        raise UserError(f"seed={config.seed} is outside 0..{2**32 - 1} (numpy's seed range, which set_seed seeds); "
                        f"give a seed in that range, e.g. seed=1337")
    if config.init_from and not Path(config.init_from).is_dir():
        raise MissingFileError(f"init_from={config.init_from} is not a folder; give a model folder (e.g. "
                               f"runs/<name>/final) that holds config.json and the weights")
    if config.init_from:
        from hf_gpt_custom.model_folder import check_model_folder, refuse_an_adapter_inside

        check_model_folder(config.init_from, verify_manifest=False)  # a loadable model type, weights: before any import
        refuse_an_adapter_inside(config.init_from, "training from it")
        if not hasattr(config, "task"):  # language modelling (fine-tuning loads a head folder as its head)
            _refuse_a_task_head_to_train_as_a_language_model(config.init_from)
            _refuse_a_model_section_that_init_from_contradicts(config)
    if config.block_size < 2:
        raise UserError(f"block_size={config.block_size} must be >= 2: each token is trained to predict the next one "
                        f"in its block, so a block of one token has nothing to predict (256 is typical)")
    _validate_run_name(config.run_name)
    # eval_interval and log_interval are step moduli in the training loop: 0 would divide by zero mid-run
    for name in ("batch_size", "gradient_accumulation_steps", "max_steps", "eval_interval", "log_interval",
                 "keep_checkpoints", "num_proc", "tokenizer_vocab_size"):
        value = getattr(config, name)
        if value < 1:
            raise UserError(f"{name}={value} must be >= 1, e.g. {name}={_default_of(config, name)}")
    _validate_tokenizer_vocab_size(config)
    for name in ("warmup_steps", "checkpoint_interval", "weight_decay", "grad_clip"):
        value = getattr(config, name)
        if value < 0:
            raise UserError(f"{name}={value} must be >= 0")
    # eps 0 divides 0 by 0 for every weight whose gradient is exactly 0 (positions past block_size, padded vocabulary
    # rows): NaN weights on the first step, at any learning rate
    if not config.adam_eps > 0:
        raise UserError(f"adam_eps={config.adam_eps} must be > 0, e.g. adam_eps=1e-8 (AdamW's default)")
    if config.warmup_steps > config.max_steps:
        raise UserError(f"warmup_steps={config.warmup_steps} exceeds max_steps={config.max_steps}; lower warmup_steps")
    if not config.learning_rate > 0:
        raise UserError(f"learning_rate={config.learning_rate} must be > 0; GPT-2 small uses 6e-4")
    if not 0 <= config.min_lr_ratio <= 1:
        raise UserError(f"min_lr_ratio={config.min_lr_ratio} must be in [0, 1]")
    for name in ("adam_beta1", "adam_beta2"):
        if not 0 <= getattr(config, name) < 1:
            raise UserError(f"{name}={getattr(config, name)} must be in [0, 1)")
    if not 0 < config.val_fraction < 1:
        raise UserError(f"val_fraction={config.val_fraction} must be between 0 and 1 (exclusive); 0.1 holds out 10%")
    if config.compile_memory_budget is not None:
        if not 0 < config.compile_memory_budget <= 1:
            raise UserError(f"compile_memory_budget={config.compile_memory_budget} must be in (0, 1] or null (keep "
                            f"every activation that is cheaper to keep than to recompute)")
        if not config.compile:
            raise UserError(f"compile_memory_budget={config.compile_memory_budget} applies to a compiled step only; "
                            f"set compile=true, or drop compile_memory_budget")
    if config.torch_threads is not None and config.torch_threads < 1:
        raise UserError(f"torch_threads={config.torch_threads} must be >= 1 or null (torch's default)")
    if config.eval_batches is not None and config.eval_batches < 1:
        raise UserError(f"eval_batches={config.eval_batches} must be >= 1 or null (the whole validation set)")
    if config.peak_flops is not None and not config.peak_flops > 0:
        raise UserError(f"peak_flops={config.peak_flops} must be > 0 (FLOP/s), e.g. 312e12 for an A100 in bf16")
    _check_choice("mixed_precision", config.mixed_precision, MIXED_PRECISION_CHOICES)
    _check_choice("text_sample_by", config.text_sample_by, TEXT_SAMPLE_BY_CHOICES)
    _check_choice("val_holdout", config.val_holdout, VAL_HOLDOUT_CHOICES)
    _validate_validation_source(config)
    _validate_local_dataset(config)
    if config.log_with is not None and config.log_with not in ("tensorboard", "wandb", "all", "none"):
        raise UserError(f"log_with={config.log_with!r} must be tensorboard, wandb, all, none or null")
    if config.resume_from_checkpoint is not None and not config.resume_from_checkpoint.strip():
        raise UserError("resume_from_checkpoint is empty; give 'latest' or a checkpoint folder")
    from hf_gpt_custom.eval.task import available_tasks, load_tasks, task_file  # eval/tasks: the one list of tasks

    for task in config.benchmark_tasks:
        if task.endswith((".yaml", ".yml")):
            task_file(task)  # a task file of your own: it must exist
        else:
            _check_choice("benchmark_tasks", task, tuple(available_tasks()))
    if any(task.endswith((".yaml", ".yml")) for task in config.benchmark_tasks):
        load_tasks(config.benchmark_tasks)  # one `task:` name in two files: refused now, not after the training
    if config.benchmark_tasks and not config.benchmark_shots:  # else the eval stage fails after all the training
        raise UserError("benchmark_shots is empty; give the K values to evaluate, e.g. benchmark_shots=0,1,5, or "
                        "benchmark_tasks=[] to skip evaluation")
    check_listed_once("benchmark_tasks", config.benchmark_tasks)
    check_listed_once("benchmark_shots", config.benchmark_shots)
    for shots in config.benchmark_shots:
        if shots < 0:
            raise UserError(f"benchmark_shots contains {shots}; the number of examples K must be >= 0")
    limit = config.benchmark_limit
    if limit is not None and not (limit >= 1 and float(limit).is_integer() or 0 < limit < 1):
        raise UserError(f"benchmark_limit={limit} must be a number of documents (300), a fraction of each benchmark's "
                        f"documents between 0 and 1 (0.1), or null (all documents)")
    check_model_section(config)
    for name, why in settings_without_effect(config).items():
        value = getattr(config, name)
        if value != _default_of(config, name):
            note_without_effect(name, value if not isinstance(value, list) else tuple(value), why)


def _refuse_a_task_head_to_train_as_a_language_model(folder: str) -> None:
    """A fine-tuned head's folder loads as a causal LM (its head dropped), but its tokenizer wraps every text in the
    task's template: the run trained on, and saved beside final/, a tokenizer that adds <|extract|> to a prompt."""
    from hf_gpt_custom.model_folder import saved_task_head_name

    head = saved_task_head_name(folder)
    if head is not None:
        raise UserError(f"init_from={folder} holds a fine-tuned {head}, whose tokenizer wraps every text in its "
                        f"task's template, so language-model training from it would learn and ship that template; "
                        f"start from the folder it was fine-tuned from (its init_from), or fine-tune it further with "
                        f"`hf-gpt-custom finetune`")


def settings_without_effect(config: TrainConfig) -> dict[str, str]:
    """The settings this config's run never reads (name -> why): a value given for one is named when the config is
    made (note_without_effect), and a change of one is no change of the run (resume.changed_settings). Those whose
    other value is refused outright (a Hub dataset's split for local data) are here too, for the resume."""
    unused = {}
    is_local = Path(config.dataset).exists()
    if config.val_dataset is not None or config.val_split is not None:
        unused["val_fraction"] = f"validation comes from {'val_dataset' if config.val_dataset else 'val_split'}"
        unused["val_holdout"] = unused["val_fraction"]
    elif config.streaming:  # (val_holdout=tail is refused with streaming)
        from hf_gpt_custom.training.data import STREAMING_VAL_DOCUMENTS

        unused["val_fraction"] = (f"a stream holds out its first {STREAMING_VAL_DOCUMENTS:,} documents for "
                                  f"validation (or give val_dataset or val_split)")
        unused["val_holdout"] = unused["val_fraction"]
    if config.tokenizer is not None or config.init_from:
        unused["tokenizer_vocab_size"] = "it sizes the tokenizer a run trains when tokenizer and init_from are null"
    if is_local:
        for name in ("dataset_config", "dataset_split", "dataset_revision"):
            unused[name] = "it picks a part of a Hub dataset, and a local dataset is read whole"
    readers = [_readers(source) for source in (config.dataset, config.val_dataset) if source is not None]
    if not any("text" in kinds for kinds in readers):
        unused["text_sample_by"] = "it cuts plain text files into documents, and this data has none"
    elif all(kinds == {"text"} for kinds in readers):
        unused["text_field"] = "it names a column, and plain text has none"
    return unused


@functools.lru_cache(maxsize=16)  # every dataclasses.replace makes the config again: list a big folder once
def _readers(source: str) -> frozenset[str]:
    """How the files of a local `source` are read ("text", "json", ...); none for a Hub dataset or a folder without
    corpus files (data loading names that)."""
    if not Path(source).exists():
        return frozenset()
    try:
        return frozenset(reader_for(file) for file in list_corpus_files(source))
    except UserError:
        return frozenset()


@functools.lru_cache(maxsize=None)  # a config is made again by every dataclasses.replace: said once per process
def note_without_effect(name: str, value: Any, why: str) -> None:
    logger.warning("%s=%r has no effect: %s (it may stay in the config)", name, value, why)


@functools.lru_cache(maxsize=None)  # a config is made again by every dataclasses.replace: said once per process
def warn_once(message: str) -> None:
    """A warning about the run's setup, said once per process however often the config is made or checked."""
    logger.warning("%s", message)


def _validate_run_name(run_name: str) -> None:
    """run_name is one folder name under runs/: empty would be runs/ itself, a path would write outside it."""
    if not run_name.strip() or run_name in (".", "..") or "/" in run_name or "\\" in run_name:
        raise UserError(f"run_name={run_name!r} must be a folder name under runs/ (no '/', '\\' or '..', not empty), "
                        f"e.g. run_name=shakespeare; to write the run elsewhere set out_dir=<folder>")


def _validate_tokenizer_vocab_size(config: TrainConfig) -> None:
    """Checked here, not when the tokenizer is trained: by then the run folder's earlier outputs were moved aside."""
    from hf_gpt_custom.tokenizer_training import BYTE_TOKENS, smallest_vocab_size

    smallest = smallest_vocab_size()
    if config.tokenizer is None and config.tokenizer_vocab_size < smallest:
        raise UserError(f"tokenizer_vocab_size={config.tokenizer_vocab_size} is too small for a byte-level BPE "
                        f"tokenizer: it holds the {BYTE_TOKENS} byte tokens and <|endoftext|>; give "
                        f"tokenizer_vocab_size >= {smallest} (8192 is typical)")


def _default_of(config: TrainConfig, name: str) -> Any:
    declared = next(f for f in dataclasses.fields(config) if f.name == name)
    return declared.default


def _splits_overlap(first: str, second: str) -> bool:
    """Whether two Hub split names (datasets' slicing syntax: `train[:5%]`, `train+test`) surely share documents:
    the same name, or a whole split and a part of it; `all` is every split joined (datasets' Split.ALL). Two slices
    of one split (`train[:90%]`, `train[90%:]`) may be disjoint and are not judged."""
    def parts(name: str) -> list[tuple[str, bool]]:  # (split, whole?) of each part joined by "+"
        return [(part.split("[")[0].strip(), "[" not in part) for part in name.split("+")]

    return first.strip() == second.strip() or any(
        (a == b or "all" in (a, b)) and (whole_a or whole_b)
        for a, whole_a in parts(first) for b, whole_b in parts(second))


def _validate_validation_source(config: TrainConfig) -> None:
    """Validation documents come from exactly one place, and never from the training documents by accident."""
    dataset_is_local = Path(config.dataset).exists()
    if config.val_split is not None and dataset_is_local:
        raise UserError(
            f"val_split={config.val_split!r} names a split of a Hub dataset, but dataset={config.dataset} is a local "
            f"path, which has one split; name a separate validation file with val_dataset=<path>, or drop val_split "
            f"to hold out val_fraction of the documents"
        )
    if config.val_dataset is not None and config.val_split is not None:
        raise UserError(f"val_dataset={config.val_dataset} and val_split={config.val_split!r} both name the validation "
                        f"data; keep one")
    if config.val_split is not None and _splits_overlap(config.val_split, config.dataset_split):
        raise UserError(f"val_split={config.val_split!r} reads documents of the split training reads "
                        f"(dataset_split={config.dataset_split!r}), so validation would score the documents the model "
                        f"trains on; name another split of {config.dataset} (validation, test), or drop val_split to "
                        f"hold out val_fraction of the documents")
    if config.val_dataset is not None and not Path(config.val_dataset).exists():
        raise MissingFileError(f"val_dataset={config.val_dataset!r} not found; give a local validation file or folder")
    if config.val_dataset is not None and dataset_is_local:
        shared = shared_corpus_file(config.dataset, config.val_dataset)
        if shared is not None:
            raise UserError(
                f"val_dataset={config.val_dataset} {shared}, so validation would score text the model trains on; "
                f"name a separate validation file, or drop val_dataset to hold out val_fraction of dataset"
            )
    has_own_validation = config.val_dataset is not None or config.val_split is not None
    if config.val_holdout != "random" and has_own_validation:
        raise UserError(f"val_holdout={config.val_holdout!r} splits the training documents, but validation comes from "
                        f"{'val_dataset' if config.val_dataset else 'val_split'}; drop val_holdout")
    if config.shift_block_boundaries and config.streaming:
        raise UserError("shift_block_boundaries=true re-cuts the packed training blocks each epoch; a streamed corpus "
                        "is cut once, as it arrives — set streaming=false, or shift_block_boundaries=false")
    if config.val_holdout == "tail" and config.streaming:
        raise UserError("val_holdout='tail' needs the whole corpus; a streamed corpus has no end to hold out — set "
                        "val_split, or streaming=false")


def _validate_local_dataset(config: TrainConfig) -> None:
    """A local dataset is one split, read whole: settings that pick a part of a Hub dataset would be ignored."""
    if not Path(config.dataset).exists():
        return
    for name, default, what in (("dataset_split", "train", "picks a split"),
                                ("dataset_config", None, "names a configuration"),
                                ("dataset_revision", None, "pins a version")):
        value = getattr(config, name)
        if value != default:
            raise UserError(f"{name}={value!r} {what} of a Hub dataset, but dataset={config.dataset} is a local path, "
                            f"which is read whole; point dataset at the file(s) you mean, or drop {name}")
    run_dir = config.run_dir.absolute().resolve()
    for source in (config.dataset, config.val_dataset):
        if source is not None and Path(source).is_dir() and run_dir.is_relative_to(Path(source).resolve()):
            raise UserError(f"the run folder {config.run_dir} is inside the data folder {source}, which is read "
                            f"whole: the run's tokenizer and logs would become training text; put out_dir outside it")
    try:
        files = list_corpus_files(config.dataset)
    except UserError:
        return  # a folder without corpus files: data loading names it
    if config.text_field != "text" and all(reader_for(file) == "text" for file in files):
        raise UserError(f"text_field={config.text_field!r} names a column of .jsonl/.json/.parquet/.csv data, but "
                        f"dataset={config.dataset} is plain text (all of it is the text); drop text_field")
    held_out = held_out_split_files(config.dataset)
    if held_out:
        names = ", ".join(file.relative_to(config.dataset).as_posix() for file in held_out[:3])
        raise UserError(f"dataset folder {config.dataset} holds {names}{', ...' if len(held_out) > 3 else ''}, named "
                        f"as a validation/test split, and a folder is trained on whole; point dataset at the training "
                        f"file(s) and val_dataset at the validation file")
    guessed = files_datasets_guesses_held_out(config.dataset)
    if guessed:
        names = ", ".join(f"{file.relative_to(config.dataset).as_posix()} (split {split!r})"
                          for file, split in list(guessed.items())[:3])
        warn_once(f"dataset folder {config.dataset}: datasets.load_dataset would read {names}"
                   f"{', ...' if len(guessed) > 3 else ''} as a held-out split from the file names, but a folder is "
                   f"trained on whole, so they are training text here; if they are held-out data, move them out of "
                   f"the folder or point dataset at the training file(s)")


def _refuse_a_model_section_that_init_from_contradicts(config: TrainConfig) -> None:
    """The architecture comes from init_from: a `model:` field with another value was refused only once the model
    loaded, after `run` had trained the tokenizer and recorded the settings, so the fix (drop the field) then met
    "started with a different config". Compared here, from the folder's config.json, before anything runs; the
    load compares again (training/workload.py) for what this cannot read."""
    from hf_gpt_custom.model_folder import folder_model_config
    from hf_gpt_custom.training.model_section import requested_architecture

    requested = requested_architecture(config)
    folder_config = folder_model_config(config.init_from) if requested else None
    for key, value in requested.items():
        if folder_config is not None and hasattr(folder_config, key) and getattr(folder_config, key) != value:
            raise UserError(
                f"model.{key}={value!r} but init_from={config.init_from} has {key}={getattr(folder_config, key)!r}; "
                f"the architecture comes from init_from — drop model.{key} (from the YAML's model: section too; "
                "the override model={} empties it)"
            )


def _check_choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value in choices:
        return
    hint = did_you_mean(value, choices)
    raise UserError(f"{key}: unknown value {value!r}; {hint}choose from {', '.join(choices)}")
