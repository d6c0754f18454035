"""TrainConfig: every knob of a training run, loaded from YAML plus `key=value` overrides and validated on entry
(config_checks.py).

The `model:` section is passed through to `GPTCustomConfig` as keyword arguments (one source of truth for the
architecture); model_section.py checks it and builds the GPTCustomConfig. Derived numbers such as `tokens_per_step`
are computed, never configured. How raw YAML and `key=value` text become typed values is config_values.py's.
"""

from __future__ import annotations

import dataclasses
import io
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hf_gpt_custom.errors import MissingFileError, UserError
from hf_gpt_custom.manifest import write_text_atomically
from hf_gpt_custom.training.config_checks import check_train_config
from hf_gpt_custom.training.config_values import (  # noqa: F401  (REPO_ROOT, read_config_yaml: imported from here too)
    REPO_ROOT, check_known_key, convert_override, convert_value, declared_types, is_text_type, parse_override_value,
    read_config_file, read_config_yaml, resolve_local_path, searched_places, write_config_yaml,
)

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
    dataset_revision: str | None = _setting(None, help="Hub dataset commit, branch or tag; null = the commit the run "
                                            "starts on, recorded and read again on resume", changes_training=True)
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
    init_from: str | None = _setting(None, help="start from a model folder (ours, a transformers GPT-2, OpenAI GPT or "
                                     "Llama folder converted on load, or a checkpoint folder)", changes_training=True)
    block_size: int = _setting(256, help="tokens per training sequence", changes_training=True)
    shift_block_boundaries: bool = _setting(
        False, help="each epoch, cut the training text into blocks at a new offset (drawn from seed and epoch), so "
        "a run of many epochs over little text sees other windows of the same tokens, not the same blocks again; "
        "one block fewer per epoch; validation blocks stay as they are", changes_training=True)
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
        "rest is recomputed there (torch's activation_memory_budget). null = 1, keep what is cheapest. On GPT-2 "
        "124M, one H200: 0.8 gives 0.59x nanoGPT's peak memory at 0.93x its speed, 0.65 gives 0.55x at 0.95x",
        changes_training=False)
    cpu: bool | None = _setting(None, help="force the CPU; null = CPU when no CUDA device is visible or the launcher "
                                "asks for it (a one-process --cpu; CUDA_VISIBLE_DEVICES=-1); false with such a "
                                "launch is refused",
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
    peak_flops: float | None = _setting(None, help="peak FLOP/s of one device (process) for the MFU figure; null = "
                                        "the GPU's datasheet peak, or a CPU's matmul FLOP/s measured at the run's "
                                        "threads",
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
    benchmark_limit: int | float | None = _setting(
        None, help="documents per benchmark, or a fraction of each benchmark's below 1 (0.1: a tenth, rounded up, as "
                   "lm-eval's --limit); null = all", changes_training=False)

    def __post_init__(self) -> None:
        check_train_config(self)

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) if self.out_dir else Path("runs") / self.run_name

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Settings added after runs were trained, each with what the code before it did: a checkpoint or run folder that does
# not record one trained as this value, so turning the setting on over an older run is a change (refused), not an
# unknown that resumes the rest of the run another way. val_dataset and val_holdout came on 2026-11-24 (651ddc1):
# before them validation was always a seeded random val_fraction of the documents.
BEHAVIOUR_BEFORE_THE_SETTING: dict[str, Any] = {"val_dataset": None, "val_holdout": "random",
                                                "shift_block_boundaries": False}


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


def training_keys_help() -> str:
    """Every TrainConfig key with its default and its one-line help: the epilog of `train --help` and `run --help`."""
    rows = []
    for setting in dataclasses.fields(TrainConfig):
        default = setting.default_factory() if setting.default is dataclasses.MISSING else setting.default
        rows.append((setting.name, _yaml_value(default), setting.metadata.get("help", "")))
    rows.append(("model.<field>", "", "any GPTCustomConfig field (n_layer, n_head, n_embd, n_positions, ...) or model.preset"))
    name_width = max(len(name) for name, _, _ in rows)
    default_width = max(len(default) for _, default, _ in rows)
    lines = [f"  {name:<{name_width}}  {default:<{default_width}}  {text}".rstrip() for name, default, text in rows]
    return "training keys (in the YAML, or key=value after it; default shown):\n" + "\n".join(lines)


def _yaml_value(value) -> str:
    """How a default is written in a training YAML: null, true, [0], "" for an empty string."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if value == "":
        return '""'
    if isinstance(value, list):
        return "[" + ", ".join(str(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    return str(value)



# --- loading -------------------------------------------------------------------------------------------------------


def find_config_file(path: str | os.PathLike, what: str, example: str) -> Path:
    """The YAML `path` names: from the working directory, else (relative) from the repository root, as data paths
    are found, so `training/configs/smoke.yaml` works from anywhere. A folder, or a file in neither place, is one
    line naming where it looked and a file that exists."""
    path = Path(path)
    if not path.exists() and not path.is_absolute() and (REPO_ROOT / path).exists():
        path = REPO_ROOT / path
    if path.is_dir():
        raise UserError(f"{what} {path} is a folder; pass a YAML file, e.g. {REPO_ROOT / example}")
    if not path.is_file():
        searched = searched_places()
        raise MissingFileError(f"{what} {path} not found (looked in {searched}); pass a YAML file, e.g. "
                               f"{REPO_ROOT / example}")
    return path


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
        path = find_config_file(path, "training config", config_class.example_config)
        with open(path, encoding="utf-8") as f:
            try:
                loaded, written = read_config_file(f)
                loaded = {} if loaded is None else loaded
            except yaml.YAMLError as err:
                raise UserError(f"{path}: not valid YAML ({err})") from err
            except UnicodeDecodeError as err:  # a binary or Latin-1 file given where the YAML belongs
                raise UserError(f"{path} is not a UTF-8 text file (byte 0x{err.object[err.start]:02x} at offset "
                                f"{err.start}), so not a training config; pass a training YAML, e.g. "
                                f"{config_class.example_config}") from err
        if not isinstance(loaded, dict):
            raise UserError(f"{path}: expected a mapping of key: value at the top level, got {type(loaded).__name__}")
        values.update(loaded)
    fields = declared_types(config_class)
    for key in values:
        check_known_key(key, fields)
    values = {key: convert_value(key, written[key] if key in written and is_text_type(fields[key]) else value,
                                 fields[key]) for key, value in values.items()}
    given = {override.partition("=")[0].strip().lstrip("-") for override in overrides or []}
    if path is not None and "out_dir" not in given and is_a_run_folders_config(path):
        # Its out_dir was recorded as typed (relative to that command's working directory, or null for
        # runs/<run_name>): given back from another directory, or as a copied folder's, it named another run
        # folder, which was then edited or trained from step 0 (the paths hunt). It is this folder (a link's
        # target's), absolute: recorded as "." from inside it, it meant the working directory of a later command.
        # With run_name= the command names a new run, runs/<run_name>, whatever the file recorded: its recorded
        # out_dir renamed this run in place, or (".") trained into the working directory.
        values["out_dir"] = None if "run_name" in given else str(Path(os.path.realpath(path)).parent)
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
    for key in ("out_dir", "data_cache_dir"):  # a YAML value is never expanded by a shell: `~/runs/x` made ./~/runs/x
        if isinstance(values.get(key), str) and values[key].startswith("~"):
            values[key] = os.path.expanduser(values[key])
    return config_class(**values)


# The first line of the config.yaml a run writes into its folder: what tells it from a user's own config.yaml (a
# project folder may hold checkpoints/ or final/ of its own: taken for a run folder, it was trained into)
RUN_CONFIG_HEADER = "# hf-gpt-custom: the resolved config of the run in this folder"


def is_a_run_folders_config(path: str | os.PathLike) -> bool:
    """True for the config.yaml a run wrote into its folder (save_train_config: its header; one written before the
    header, beside the pipeline_state.json of `run`)."""
    path = Path(path)
    if path.name != "config.yaml":
        return False
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.readline().startswith(RUN_CONFIG_HEADER):
                return True
    except (OSError, UnicodeDecodeError):
        return False
    return (path.parent / "pipeline_state.json").is_file()


def refuse_a_key_given_twice(overrides: list[str]) -> None:
    """A command line that sets one key twice to different values (`max_steps=200 ... max_steps=20`): argparse would
    let the later one win, but a command edited twice is a mistake to name, not to guess. (Code that layers
    overrides, later ones on purpose over earlier ones, calls load_train_config directly.)"""
    given: dict[str, str] = {}  # key -> the override that set it
    for override in overrides:
        key, sep, raw = override.partition("=")
        key = key.strip().lstrip("-")
        if sep and key in given and given[key].partition("=")[2].strip() != raw.strip():
            raise UserError(f"{key} is given twice, as {given[key]!r} and {override!r}; give it once")
        given.setdefault(key, override)


def save_train_config(config: TrainConfig, path: str | os.PathLike) -> None:
    """Write the resolved config as YAML (what `load_train_config(path, [])` reads back to an equal config, but for
    resume_from_checkpoint), through a file beside it renamed into place: a kill while writing left a 0-byte
    config.yaml (the interrupts hunt). resume_from_checkpoint is one command's instruction, not the run's setting:
    recorded, the file given back later resumed that old checkpoint again, setting every later one aside."""
    write_text_atomically(path, run_config_text({**config.to_dict(), "resume_from_checkpoint": None}))


def own_folder_fix(config: TrainConfig) -> str:
    """How a refusal tells the user to give this run another folder: run_name= names runs/<name> only where no
    out_dir is set (following "run_name=" beside an out_dir gave the same refusal again)."""
    return ("give this run its own folder (out_dir=<new folder>)" if config.out_dir
            else "give this run its own folder (run_name=<new name> or out_dir=...)")


def run_config_text(values: dict[str, Any]) -> str:
    """A run folder's config.yaml: RUN_CONFIG_HEADER, then `values` as YAML."""
    text = io.StringIO()
    text.write(f"{RUN_CONFIG_HEADER} (given back to run or train, it names this folder)\n")
    write_config_yaml(values, text)
    return text.getvalue()
