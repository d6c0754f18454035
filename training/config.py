"""TrainConfig: every knob of a training run, loaded from YAML plus `key=value` overrides and validated on entry.

The `model:` section is passed through to `GPTCustomConfig` as keyword arguments (one source of truth for the
architecture); this module only checks its keys and values by building a config from it. Derived numbers such as
`tokens_per_step` are computed, never configured.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hf_gpt_custom.errors import MissingFileError, UserError

REPO_ROOT = Path(__file__).resolve().parents[1]

MIXED_PRECISION_CHOICES = ("no", "bf16", "fp16")
TEXT_SAMPLE_BY_CHOICES = ("paragraph", "line", "document")

# Peak dense FLOP/s used for the MFU estimate when `peak_flops` is not set. Measured on this project's 2-core CPU
# with a large matmul on both cores: fp32 ~420 GFLOP/s in oneDNN, which our linear layers call (MKL, torch.mm's
# fp32 library, reaches ~190), bf16 ~860 GFLOP/s. Set `peak_flops` for your own hardware.
DEFAULT_PEAK_FLOPS = {"no": 420e9, "bf16": 860e9, "fp16": 860e9}


@dataclass
class TrainConfig:
    # --- run -----------------------------------------------------------------------------------------------------
    run_name: str = "run"
    out_dir: str | None = None  # default: runs/<run_name> under the working directory
    seed: int = 1337
    # --- data ----------------------------------------------------------------------------------------------------
    dataset: str = ""  # local file/folder (.txt .jsonl .json .parquet) or a Hub dataset name
    dataset_config: str | None = None
    dataset_split: str = "train"
    text_field: str = "text"
    text_sample_by: str = "paragraph"  # how a .txt file becomes documents: paragraph (blank-line separated) | line | document
    val_split: str | None = None  # a split of the source to validate on; None = hold out val_fraction of the documents
    val_fraction: float = 0.1
    streaming: bool = False  # Hub corpora that don't fit on disk: tokenise and pack on the fly (no cache, no shuffle)
    num_proc: int = 1  # processes for Dataset.map tokenisation
    data_cache_dir: str | None = None  # default: $HF_HOME/hf_gpt_custom/packed (shared by runs)
    # --- tokenizer -----------------------------------------------------------------------------------------------
    tokenizer: str | None = None  # a tokenizer folder; None = train one into <out_dir>/tokenizer
    tokenizer_vocab_size: int = 8192
    # --- model ---------------------------------------------------------------------------------------------------
    model: dict[str, Any] = field(default_factory=dict)  # GPTCustomConfig kwargs; `preset:` allowed
    init_from: str | None = None  # fine-tune from a model folder (ours or a transformers GPT-2 folder)
    block_size: int = 256
    # --- optimisation --------------------------------------------------------------------------------------------
    batch_size: int = 8  # sequences per micro-batch per process
    gradient_accumulation_steps: int = 1
    max_steps: int = 1000  # optimizer steps
    learning_rate: float = 6e-4
    min_lr_ratio: float = 0.1  # cosine decays to learning_rate * min_lr_ratio (nanoGPT/Chinchilla use 0.1)
    warmup_steps: int = 100
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    grad_clip: float = 1.0  # max global grad norm; 0 disables clipping
    mixed_precision: str = "no"
    compile: bool = False
    cpu: bool | None = None  # None = CPU when no CUDA device is visible
    torch_threads: int | None = None  # intra-op CPU threads during train(); None = torch's default (one per core)
    # --- evaluation, logging, checkpoints ------------------------------------------------------------------------
    eval_interval: int = 100  # steps between validation passes (and one at the end)
    eval_batches: int | None = None  # validate on the first eval_batches * batch_size blocks; None = all of them
    log_with: str | None = "tensorboard"
    peak_flops: float | None = None  # for MFU; None = DEFAULT_PEAK_FLOPS[mixed_precision]
    checkpoint_interval: int = 0  # steps between checkpoints; 0 = only at the end
    keep_checkpoints: int = 2
    resume_from_checkpoint: str | None = None  # "latest" or a checkpoint folder
    # --- read only by `hf-gpt-custom run` (the main job) ---------------------------------------------------------
    benchmark_tasks: list[str] = field(default_factory=list)
    benchmark_shots: list[int] = field(default_factory=lambda: [0])
    benchmark_limit: int | None = None

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) if self.out_dir else Path("runs") / self.run_name

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --- loading -------------------------------------------------------------------------------------------------------


def load_train_config(path: str | os.PathLike | None, overrides: list[str] | None = None) -> TrainConfig:
    """Read a training YAML, apply `key=value` overrides (`model.n_layer=4` for the model section), validate.

    Relative local paths (dataset, tokenizer, init_from) are looked up in the working directory first and then in
    the repository root, so `training/configs/shakespeare.yaml` works from anywhere; they are stored absolute.
    """
    values: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise MissingFileError(f"training config {path} not found; try training/configs/smoke.yaml")
        with open(path, encoding="utf-8") as f:
            try:
                loaded = yaml.safe_load(f) or {}
            except yaml.YAMLError as err:
                raise UserError(f"{path}: not valid YAML ({err})") from err
        if not isinstance(loaded, dict):
            raise UserError(f"{path}: expected a mapping of key: value at the top level, got {type(loaded).__name__}")
        values.update(loaded)
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    for key in values:
        _check_known_key(key, fields)
    values = {key: _convert(key, value, fields[key].type) for key, value in values.items()}
    values["model"] = dict(values.get("model") or {})
    for override in overrides or []:
        key, sep, raw = override.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise UserError(f"override {override!r} is not key=value; e.g. max_steps=200 or model.n_layer=4")
        if key.startswith("model."):
            values["model"][key[len("model."):]] = _parse_scalar(raw)
        else:
            _check_known_key(key, fields)
            values[key] = _convert(key, raw, fields[key].type, from_string=True)
    for key in ("dataset", "tokenizer", "init_from"):
        if values.get(key):
            values[key] = _resolve_local_path(key, str(values[key]))
    return TrainConfig(**values)


def save_train_config(config: TrainConfig, path: str | os.PathLike) -> None:
    """Write the resolved config as YAML (what `load_train_config(path, [])` reads back to an equal config)."""
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(config.to_dict(), f, sort_keys=False)


def _check_known_key(key: str, fields: dict) -> None:
    if key in fields:
        return
    suggestion = difflib.get_close_matches(key, fields, n=1)
    hint = f"did you mean {suggestion[0]!r}? " if suggestion else ""
    raise UserError(f"unknown training config key {key!r}; {hint}known keys: {', '.join(sorted(fields))}")


def _resolve_local_path(key: str, value: str) -> str:
    """Absolute path if `value` names an existing file/folder (cwd first, then repo root); else a Hub name."""
    candidate = Path(value).expanduser()
    for base in (Path.cwd(), REPO_ROOT):
        full = candidate if candidate.is_absolute() else base / candidate
        if full.exists():
            return str(full.resolve())
    looks_local = value.startswith((".", "/", "~")) or Path(value).suffix in (".txt", ".jsonl", ".json", ".parquet")
    if looks_local:
        raise MissingFileError(
            f"{key}={value!r} not found in {Path.cwd()} or {REPO_ROOT}; give an existing path or a Hub name"
        )
    return value  # a Hub dataset/model name such as "HuggingFaceFW/fineweb-edu"


# --- type conversion -----------------------------------------------------------------------------------------------

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _parse_scalar(raw: str) -> Any:
    """A `model.x=...` value: int, float, bool, null or string (GPTCustomConfig validates it afterwards)."""
    text = raw.strip()
    if text.lower() in ("null", "none", "~"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def _convert(key: str, value: Any, declared: Any, from_string: bool = False) -> Any:
    """Convert `value` to the field's declared type, or raise ValueError naming the key."""
    if isinstance(declared, str):
        declared = eval(declared, {**vars(typing), "Any": Any})  # annotations are strings (`from __future__`)
    origin = typing.get_origin(declared)
    args = typing.get_args(declared)
    if origin in (typing.Union, types.UnionType):
        non_none = [arg for arg in args if arg is not type(None)]
        if value is None or (from_string and str(value).strip().lower() in ("null", "none", "~", "")):
            return None
        return _convert(key, value, non_none[0], from_string)
    if value is None:
        raise UserError(f"{key} must not be null; give a value of type {getattr(declared, '__name__', declared)}")
    try:
        if declared is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE | _FALSE:
                return text in _TRUE
            raise ValueError
        if declared is int:
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError
                return int(value)
            try:
                return int(str(value).strip().replace("_", ""))
            except ValueError:
                raise ValueError from None
        if declared is float:
            if isinstance(value, bool):
                raise ValueError
            try:
                return float(str(value).strip()) if isinstance(value, str) else float(value)
            except (TypeError, ValueError):
                raise ValueError from None
        if declared is str:
            if isinstance(value, (dict, list)):
                raise ValueError
            return str(value)
        if origin is list:
            if isinstance(value, str):
                text = value.strip()
                parsed = yaml.safe_load(text) if text.startswith("[") else [v for v in text.split(",") if v.strip()]
                value = parsed if parsed is not None else []
            if not isinstance(value, (list, tuple)):
                raise ValueError
            return [_convert(f"{key}[{i}]", item, args[0], from_string) for i, item in enumerate(value)]
        if origin is dict:
            if from_string:
                raise UserError(f"set {key} entries one by one, e.g. {key}.n_layer=4")
            if not isinstance(value, dict):
                raise ValueError
            return dict(value)
    except ValueError as err:
        if str(err):
            raise
        type_name = getattr(declared, "__name__", str(declared))
        raise UserError(f"{key}={value!r} is not a valid {type_name}") from None
    return value


# --- validation ----------------------------------------------------------------------------------------------------


def _validate(config: TrainConfig) -> None:
    if not config.dataset:
        raise UserError("dataset is not set; give a text file/folder or a Hub dataset name, e.g. dataset=../shared/data/tinyshakespeare/input.txt")
    for name in ("block_size", "batch_size", "gradient_accumulation_steps", "max_steps", "eval_interval",
                 "keep_checkpoints", "num_proc", "tokenizer_vocab_size"):
        value = getattr(config, name)
        if value < 1:
            raise UserError(f"{name}={value} must be >= 1")
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
    if config.torch_threads is not None and config.torch_threads < 1:
        raise UserError(f"torch_threads={config.torch_threads} must be >= 1 or null (torch's default)")
    if config.eval_batches is not None and config.eval_batches < 1:
        raise UserError(f"eval_batches={config.eval_batches} must be >= 1 or null (the whole validation set)")
    if config.peak_flops is not None and not config.peak_flops > 0:
        raise UserError(f"peak_flops={config.peak_flops} must be > 0 (FLOP/s), e.g. 312e12 for an A100 in bf16")
    _check_choice("mixed_precision", config.mixed_precision, MIXED_PRECISION_CHOICES)
    _check_choice("text_sample_by", config.text_sample_by, TEXT_SAMPLE_BY_CHOICES)
    if config.log_with is not None and config.log_with not in ("tensorboard", "wandb", "all", "none"):
        raise UserError(f"log_with={config.log_with!r} must be tensorboard, wandb, all, none or null")
    if config.resume_from_checkpoint is not None and not config.resume_from_checkpoint.strip():
        raise UserError("resume_from_checkpoint is empty; give 'latest' or a checkpoint folder")
    from eval.task import available_tasks, task_file  # the task YAML folder is the one list of tasks

    for task in config.benchmark_tasks:
        if task.endswith((".yaml", ".yml")):
            task_file(task)  # a task file of your own: it must exist
        else:
            _check_choice("benchmark_tasks", task, tuple(available_tasks()))
    for shots in config.benchmark_shots:
        if shots < 0:
            raise UserError(f"benchmark_shots contains {shots}; the number of examples K must be >= 0")
    if config.benchmark_limit is not None and config.benchmark_limit < 1:
        raise UserError(f"benchmark_limit={config.benchmark_limit} must be >= 1 or null (all documents)")
    _validate_model_section(config)


def _check_choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value in choices:
        return
    suggestion = difflib.get_close_matches(value, choices, n=1)
    hint = f"did you mean {suggestion[0]!r}? " if suggestion else ""
    raise UserError(f"{key}: unknown value {value!r}; {hint}choose from {', '.join(choices)}")


def _validate_model_section(config: TrainConfig) -> None:
    """Check the `model:` keys against GPTCustomConfig and its values by building one (with a stand-in vocab)."""
    from hf_gpt_custom import PRESETS, GPTCustomConfig

    model = dict(config.model)
    preset = model.pop("preset", None)
    if preset is not None and preset not in PRESETS:
        _check_choice("model.preset", str(preset), tuple(PRESETS))
    known = set(GPTCustomConfig.__annotations__)  # the architecture fields (generic PretrainedConfig ones excluded)
    for key in model:
        if key not in known:
            suggestion = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean 'model.{suggestion[0]}'? " if suggestion else ""
            raise UserError(f"unknown model key 'model.{key}'; {hint}known: {', '.join(sorted(known))}")
    if config.init_from:
        return
    built = build_model_config(config, vocab_size=model.get("vocab_size") or config.tokenizer_vocab_size,
                               eos_token_id=0)
    if built.n_positions < config.block_size:
        raise UserError(
            f"block_size={config.block_size} exceeds model.n_positions={built.n_positions}; lower block_size or "
            f"raise model.n_positions"
        )


def build_model_config(config: TrainConfig, vocab_size: int, eos_token_id: int):
    """GPTCustomConfig from the `model:` section; n_positions defaults to block_size, vocab from the tokenizer."""
    from hf_gpt_custom import GPTCustomConfig

    model = dict(config.model)
    preset = model.pop("preset", None)
    kwargs = {"vocab_size": vocab_size, "bos_token_id": eos_token_id, "eos_token_id": eos_token_id}
    if preset is None:
        kwargs["n_positions"] = config.block_size
    kwargs.update(model)
    if preset is not None:
        return GPTCustomConfig.from_preset(preset, **kwargs)
    return GPTCustomConfig(**kwargs)
