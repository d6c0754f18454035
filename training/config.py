"""TrainConfig: every knob of a training run, loaded from YAML plus `key=value` overrides and validated on entry.

The `model:` section is passed through to `GPTCustomConfig` as keyword arguments (one source of truth for the
architecture); model_section.py checks it and builds the GPTCustomConfig. Derived numbers such as `tokens_per_step`
are computed, never configured. How raw YAML and `key=value` text become typed values is config_values.py's.
"""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hf_gpt_custom.errors import MissingFileError, UserError, check_listed_once, did_you_mean
from hf_gpt_custom.training.corpus import held_out_split_files, list_corpus_files, reader_for, shared_corpus_file
from hf_gpt_custom.training.model_section import check_model_section
from hf_gpt_custom.training.config_values import (  # noqa: F401  (REPO_ROOT, read_config_yaml: imported from here too)
    REPO_ROOT, check_known_key, convert_override, convert_value, declared_types, is_text_type, parse_override_value,
    read_config_file, read_config_yaml, resolve_local_path, write_config_yaml,
)

# auto: bf16 on a GPU that supports it, fp32 ("no") on a CPU or an older GPU (devices.resolve_mixed_precision)
MIXED_PRECISION_CHOICES = ("auto", "no", "bf16", "fp16")
TEXT_SAMPLE_BY_CHOICES = ("paragraph", "line", "document")
# Which val_fraction of the documents is held out: a seeded random sample, or the last ones in file order (nanoGPT's
# split of tiny Shakespeare, the way results on it are usually quoted).
VAL_HOLDOUT_CHOICES = ("random", "tail")

# Peak dense FLOP/s used for the MFU estimate on a CPU when `peak_flops` is not set: a large matmul on the 2-core CPU
# this project is developed on (GPUs use their datasheet peak, training/devices.py). Set `peak_flops` for your own.
DEFAULT_PEAK_FLOPS = {"no": 420e9, "bf16": 860e9, "fp16": 860e9}


def _setting(default: Any = dataclasses.MISSING, *, help: str, changes_training: bool, factory: Any = None):
    """A TrainConfig field with its one-line help and whether changing it changes what is trained.

    `changes_training=False` marks settings that only say where files go, how fast the run goes, how often it
    saves or logs, or what is evaluated afterwards: a run may be resumed with another value for them.
    """
    metadata = {"help": help, "changes_training": changes_training}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class TrainConfig:
    # The YAML an error about a missing config points to (a subclass names its own kind of run).
    example_config: typing.ClassVar[str] = "training/configs/smoke.yaml"

    # --- run -----------------------------------------------------------------------------------------------------
    run_name: str = _setting("run", help="name of the run; the run folder is runs/<run_name> unless out_dir is set",
                             changes_training=False)
    out_dir: str | None = _setting(None, help="run folder (default: runs/<run_name> under the working directory)",
                                   changes_training=False)
    seed: int = _setting(1337, help="seed for initialisation, dropout, shuffling and the random validation split "
                         "(0 to 2**32-1)", changes_training=True)
    # --- data ----------------------------------------------------------------------------------------------------
    dataset: str = _setting("", help="training text: a local file/folder (.txt .text .raw .jsonl .json .parquet .csv) "
                                     "or a Hub dataset name", changes_training=True)
    dataset_config: str | None = _setting(None, help="Hub dataset configuration name", changes_training=True)
    dataset_split: str = _setting("train", help="Hub dataset split to train on", changes_training=True)
    text_field: str = _setting("text", help="column holding the text in .jsonl/.json/.parquet/.csv/Hub data",
                               changes_training=True)
    text_sample_by: str = _setting("paragraph", help="how a text file becomes documents: paragraph (cut at lines "
                                   "that are empty or hold only spaces), line or document (the whole file)", changes_training=True)
    val_dataset: str | None = _setting(None, help="a separate local validation file/folder (the usual train/validation "
                                       "files); then all of dataset is trained on", changes_training=True)
    val_split: str | None = _setting(None, help="a split of the Hub dataset to validate on (local files have one "
                                     "split: use val_dataset)", changes_training=True)
    val_fraction: float = _setting(0.1, help="without val_dataset/val_split: the fraction of documents held out",
                                   changes_training=True)
    val_holdout: str = _setting("random", help="which documents val_fraction holds out: random (seeded) or tail (the "
                                "last ones in file order, whole documents)", changes_training=True)
    streaming: bool = _setting(False, help="tokenise and pack Hub corpora on the fly (no cache, no shuffle)",
                               changes_training=True)
    num_proc: int = _setting(1, help="processes for tokenisation (Dataset.map)", changes_training=False)
    data_cache_dir: str | None = _setting(None, help="packed-data cache (default: $HF_HOME/hf_gpt_custom/packed, "
                                          "shared by runs)", changes_training=False)
    # --- tokenizer -----------------------------------------------------------------------------------------------
    tokenizer: str | None = _setting(None, help="a tokenizer folder or Hub name; null = train one into "
                                     "<run folder>/tokenizer", changes_training=True)
    tokenizer_vocab_size: int = _setting(8192, help="vocabulary size of the tokenizer trained when tokenizer is null",
                                         changes_training=True)
    # --- model ---------------------------------------------------------------------------------------------------
    model: dict[str, Any] = _setting(help="GPTCustomConfig keyword arguments (model.n_layer=4); preset: allowed",
                                     changes_training=True, factory=dict)
    init_from: str | None = _setting(None, help="fine-tune from a model folder (ours, a transformers GPT-2 folder, or "
                                     "a checkpoint folder)", changes_training=True)
    block_size: int = _setting(256, help="tokens per training sequence", changes_training=True)
    # --- optimisation --------------------------------------------------------------------------------------------
    batch_size: int = _setting(8, help="sequences per micro-batch per process", changes_training=True)
    gradient_accumulation_steps: int = _setting(1, help="micro-batches per optimizer step", changes_training=True)
    max_steps: int = _setting(1000, help="optimizer steps (the cosine schedule ends here)", changes_training=True)
    learning_rate: float = _setting(6e-4, help="peak learning rate after warmup", changes_training=True)
    min_lr_ratio: float = _setting(0.1, help="cosine decays to learning_rate * min_lr_ratio (nanoGPT/Chinchilla: 0.1)",
                                   changes_training=True)
    warmup_steps: int = _setting(100, help="optimizer steps of linear warmup", changes_training=True)
    weight_decay: float = _setting(0.1, help="AdamW weight decay on 2-D weights (none on biases and LayerNorm)",
                                   changes_training=True)
    adam_beta1: float = _setting(0.9, help="AdamW beta1", changes_training=True)
    adam_beta2: float = _setting(0.95, help="AdamW beta2", changes_training=True)
    adam_eps: float = _setting(1e-8, help="AdamW epsilon", changes_training=True)
    grad_clip: float = _setting(1.0, help="max global gradient norm; 0 disables clipping", changes_training=True)
    mixed_precision: str = _setting("no", help="no (fp32), bf16, fp16 (autocast) or auto (bf16 on a GPU that has it, "
                                    "else fp32)", changes_training=True)
    compile: bool = _setting(False, help="torch.compile the model (speed only)", changes_training=False)
    compile_memory_budget: float | None = _setting(
        None, help="with compile: the share (0-1] of the activations the compiled step keeps for its backward; the "
        "rest is recomputed there (torch's activation_memory_budget). null = 1, keep what is cheapest. 0.5 on GPT-2 "
        "124M, one H200: 0.71x nanoGPT's peak memory at 0.88x its speed", changes_training=False)
    cpu: bool | None = _setting(None, help="force the CPU; null = CPU when no CUDA device is visible or the launcher "
                                "asks for it (accelerate's use_cpu / --cpu); false with such a launch is refused",
                                changes_training=False)
    torch_threads: int | None = _setting(None, help="intra-op CPU threads during training; null = torch's default",
                                         changes_training=False)
    # --- evaluation, logging, checkpoints ------------------------------------------------------------------------
    eval_interval: int = _setting(100, help="steps between validation passes (and one at the end)",
                                  changes_training=False)
    log_interval: int = _setting(10, help="steps between reads of loss and gradient norm from the device: the run log "
                                 "still has every step, divergence is found at the next read (before any checkpoint)",
                                 changes_training=False)
    eval_batches: int | None = _setting(None, help="validate on the first eval_batches * batch_size blocks; null = all",
                                        changes_training=False)
    log_with: str | None = _setting("tensorboard", help="tracker: tensorboard, wandb, all, none", changes_training=False)
    peak_flops: float | None = _setting(None, help="peak FLOP/s for the MFU figure; null = a measured CPU default",
                                        changes_training=False)
    checkpoint_interval: int = _setting(0, help="steps between checkpoints; 0 = only at the end",
                                        changes_training=False)
    keep_checkpoints: int = _setting(2, help="how many of the newest checkpoints to keep", changes_training=False)
    resume_from_checkpoint: str | None = _setting(None, help="'latest' or a checkpoint folder to continue from",
                                                  changes_training=False)
    # --- read only by `hf-gpt-custom run` (the main job) ---------------------------------------------------------
    benchmark_tasks: list[str] = _setting(help="benchmarks `hf-gpt-custom run` evaluates", changes_training=False,
                                          factory=list)
    benchmark_shots: list[int] = _setting(help="few-shot K values `hf-gpt-custom run` evaluates",
                                          changes_training=False, factory=lambda: [0])
    benchmark_limit: int | None = _setting(None, help="documents per benchmark; null = all", changes_training=False)

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) if self.out_dir else Path("runs") / self.run_name

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def settings_that_do_not_change_training(config_class: type = None) -> frozenset[str]:
    """Names of the TrainConfig fields a run can change between resumes (speed, logging, saving, evaluation): the
    one list, read from the fields' `changes_training` metadata; a field without it counts as changing training."""
    fields = dataclasses.fields(config_class or TrainConfig)
    return frozenset(f.name for f in fields if not f.metadata.get("changes_training", True))


def training_settings(config: TrainConfig) -> dict[str, Any]:
    """The values of every setting that changes what is trained: what a checkpoint records and a resume compares."""
    unchanged = settings_that_do_not_change_training()
    return {key: value for key, value in config.to_dict().items() if key not in unchanged}


def setting_help() -> dict[str, str]:
    """Field name -> one-line help, in declaration order (what `hf-gpt-custom train --help` lists)."""
    return {f.name: f.metadata["help"] for f in dataclasses.fields(TrainConfig)}


# --- loading -------------------------------------------------------------------------------------------------------


def load_train_config(path: str | os.PathLike | None, overrides: list[str] | None = None,
                      config_class: type[TrainConfig] = TrainConfig) -> TrainConfig:
    """Read a training YAML, apply `key=value` overrides (`model.n_layer=4` for the model section), validate.

    `config_class` is TrainConfig or a subclass with more fields (fine-tuning's FinetuneConfig adds `task:`); every
    mapping-typed field takes dotted overrides the way `model:` does (`task.lm_loss_weight=0`).

    Relative local paths (dataset, tokenizer, init_from) are looked up in the working directory first and then in
    the repository root, so `training/configs/shakespeare.yaml` works from anywhere; they are stored absolute.
    """
    values: dict[str, Any] = {}
    written: dict[str, str] = {}  # top-level plain scalars as written: what a text field takes
    if path is not None:
        path = Path(path)
        if path.is_dir():
            raise UserError(f"training config {path} is a folder; pass a YAML file in it, e.g. "
                            f"{config_class.example_config}")
        if not path.is_file():
            raise MissingFileError(f"training config {path} not found; try {config_class.example_config}")
        with open(path, encoding="utf-8") as f:
            try:
                loaded, written = read_config_file(f)
                loaded = {} if loaded is None else loaded
            except yaml.YAMLError as err:
                raise UserError(f"{path}: not valid YAML ({err})") from err
        if not isinstance(loaded, dict):
            raise UserError(f"{path}: expected a mapping of key: value at the top level, got {type(loaded).__name__}")
        values.update(loaded)
    fields = declared_types(config_class)
    for key in values:
        check_known_key(key, fields)
    values = {key: convert_value(key, written[key] if key in written and is_text_type(fields[key]) else value,
                                 fields[key]) for key, value in values.items()}
    sections = [name for name, declared in fields.items() if typing.get_origin(declared) is dict]  # model: ...
    for name in sections:
        values[name] = dict(values.get(name) or {})
    for override in overrides or []:
        key, sep, raw = override.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise UserError(f"override {override!r} is not key=value; e.g. max_steps=200 or model.n_layer=4")
        section, dot, sub_key = key.partition(".")
        if dot and section in sections:
            values[section][sub_key] = parse_override_value(key, raw)
        else:
            check_known_key(key, fields)
            values[key] = convert_override(key, raw, fields[key])
    for key in ("dataset", "val_dataset", "tokenizer", "init_from"):
        if values.get(key):
            values[key] = resolve_local_path(key, str(values[key]))
    return config_class(**values)


def save_train_config(config: TrainConfig, path: str | os.PathLike) -> None:
    """Write the resolved config as YAML (what `load_train_config(path, [])` reads back to an equal config)."""
    with open(path, "w", encoding="utf-8") as f:
        write_config_yaml(config.to_dict(), f)


# --- validation ----------------------------------------------------------------------------------------------------


def _validate(config: TrainConfig) -> None:
    if not config.dataset:
        raise UserError("dataset is not set; give a text file/folder or a Hub dataset name, e.g. dataset=../shared/data/tinyshakespeare/input.txt")
    for name, declared in declared_types(TrainConfig).items():  # NaN and inf pass every `<` check below: refuse them first
        value = getattr(config, name)
        if declared in (float, float | None) and value is not None and not math.isfinite(value):
            raise UserError(f"{name}={value} is not a finite number; give a real value (default: "
                            f"{_default_of(name)})")
    if not 0 <= config.seed < 2**32:
        raise UserError(f"seed={config.seed} is outside 0..{2**32 - 1} (numpy's seed range, which set_seed seeds); "
                        f"give a seed in that range, e.g. seed=1337")
    if config.init_from and not Path(config.init_from).is_dir():
        raise MissingFileError(f"init_from={config.init_from} is not a folder; give a model folder (e.g. "
                               f"runs/<name>/final) that holds config.json and the weights")
    if config.init_from:
        from hf_gpt_custom.model_folder import check_model_folder

        check_model_folder(config.init_from, verify_manifest=False)  # a loadable model type, weights: before any import
    if config.block_size < 2:
        raise UserError(f"block_size={config.block_size} must be >= 2: each token is trained to predict the next one "
                        f"in its block, so a block of one token has nothing to predict (256 is typical)")
    _validate_run_name(config.run_name)
    # eval_interval and log_interval are step moduli in the training loop: 0 would divide by zero mid-run
    for name in ("batch_size", "gradient_accumulation_steps", "max_steps", "eval_interval", "log_interval",
                 "keep_checkpoints", "num_proc", "tokenizer_vocab_size"):
        value = getattr(config, name)
        if value < 1:
            raise UserError(f"{name}={value} must be >= 1, e.g. {name}={_default_of(name)}")
    _validate_tokenizer_vocab_size(config)
    for name in ("warmup_steps", "checkpoint_interval", "weight_decay", "grad_clip", "adam_eps"):
        value = getattr(config, name)
        if value < 0:
            raise UserError(f"{name}={value} must be >= 0")
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
    from hf_gpt_custom.eval.task import available_tasks, task_file  # the task YAML folder is the one list of tasks

    for task in config.benchmark_tasks:
        if task.endswith((".yaml", ".yml")):
            task_file(task)  # a task file of your own: it must exist
        else:
            _check_choice("benchmark_tasks", task, tuple(available_tasks()))
    if config.benchmark_tasks and not config.benchmark_shots:  # else the eval stage fails after all the training
        raise UserError("benchmark_shots is empty; give the K values to evaluate, e.g. benchmark_shots=0,1,5, or "
                        "benchmark_tasks=[] to skip evaluation")
    check_listed_once("benchmark_tasks", config.benchmark_tasks)
    check_listed_once("benchmark_shots", config.benchmark_shots)
    for shots in config.benchmark_shots:
        if shots < 0:
            raise UserError(f"benchmark_shots contains {shots}; the number of examples K must be >= 0")
    if config.benchmark_limit is not None and config.benchmark_limit < 1:
        raise UserError(f"benchmark_limit={config.benchmark_limit} must be >= 1 or null (all documents)")
    check_model_section(config)


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


def _default_of(name: str) -> Any:
    declared = next(f for f in dataclasses.fields(TrainConfig) if f.name == name)
    return declared.default


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
    if config.val_holdout == "tail" and config.streaming:
        raise UserError("val_holdout='tail' needs the whole corpus; a streamed corpus has no end to hold out — set "
                        "val_split, or streaming=false")


def _validate_local_dataset(config: TrainConfig) -> None:
    """A local dataset is one split, read whole: settings that pick a part of a Hub dataset would be ignored."""
    if not Path(config.dataset).exists():
        return
    for name, default, what in (("dataset_split", "train", "picks a split"),
                                ("dataset_config", None, "names a configuration")):
        value = getattr(config, name)
        if value != default:
            raise UserError(f"{name}={value!r} {what} of a Hub dataset, but dataset={config.dataset} is a local path, "
                            f"which is read whole; point dataset at the file(s) you mean, or drop {name}")
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


def _check_choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value in choices:
        return
    hint = did_you_mean(value, choices)
    raise UserError(f"{key}: unknown value {value!r}; {hint}choose from {', '.join(choices)}")
