"""FinetuneConfig: a training config plus a `task:` section saying what the labelled data is and which of GPT-1's
input transformations turns it into token sequences.

Everything the training loop reads keeps its TrainConfig name and meaning (learning_rate, batch_size, max_steps,
checkpoint_interval, ...); `init_from` is the model folder to start from (required), `dataset` the labelled file or
Hub dataset, `val_fraction` the seeded held-out fraction and `block_size` the longest input sequence in tokens.
Settings that only pre-training reads (the corpus, tokenizer training, the `model:` section) are refused when set.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from dataclasses import dataclass
from typing import Any

from hf_gpt_custom.errors import UserError, did_you_mean
from hf_gpt_custom.training.config import TrainConfig, _setting, load_train_config

FORMATS = ("classification", "pair", "multiple_choice")
# How many text columns each format reads: the text; premise and hypothesis; the context (answers are choice_columns).
TEXT_COLUMNS_PER_FORMAT = {"classification": 1, "pair": 2, "multiple_choice": 1}
GPT1_LM_LOSS_WEIGHT = 0.5  # λ in L3 = L2 + λ·L1 (Radford et al. 2018, section 4.1)

# TrainConfig settings that only pre-training reads: the tokenizer and the architecture come from init_from, and the
# data are labelled examples, not a corpus cut into blocks.
PRETRAINING_ONLY_SETTINGS = (
    "tokenizer", "tokenizer_vocab_size", "text_field", "text_sample_by", "val_dataset", "val_split", "val_holdout",
    "streaming", "shift_block_boundaries", "data_cache_dir", "model", "benchmark_tasks", "benchmark_shots", "benchmark_limit",
)

TASK_KEYS_HELP = {
    "format": "classification (text -> label), pair (premise, hypothesis -> label) or multiple_choice (context + "
              "each answer, softmax over the answers)",
    "text_columns": "columns holding the text: [text]; [premise, hypothesis]; or [context] for multiple_choice",
    "choice_columns": "multiple_choice: the columns holding the answers, one per column",
    "label_column": "the column holding the label (default: label); for multiple_choice the 0-based index of the "
                    "right answer",
    "labels": "classification/pair: the label set, in class-index order, e.g. [\"false\", \"true\"]",
    "max_choices": "multiple_choice: the most answers an example may have (default: the number of choice_columns)",
    "lm_loss_weight": f"GPT-1's λ: the auxiliary language-modelling loss weight (default {GPT1_LM_LOSS_WEIGHT}; 0 = off)",
}


@dataclass(frozen=True)
class TaskSection:
    """The validated `task:` section."""

    format: str
    text_columns: tuple[str, ...]
    label_column: str
    labels: tuple[str, ...] | None  # classification/pair
    choice_columns: tuple[str, ...] | None  # multiple_choice
    max_choices: int | None  # multiple_choice
    lm_loss_weight: float

    @property
    def is_multiple_choice(self) -> bool:
        return self.format == "multiple_choice"

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column an example needs."""
        return (*self.text_columns, *(self.choice_columns or ()), self.label_column)

    def to_dict(self) -> dict[str, Any]:
        return {key: list(value) if isinstance(value, tuple) else value
                for key, value in dataclasses.asdict(self).items() if value is not None}


def label_key(value: Any) -> str:
    """How a label is compared with the label set: JSON true/false, "true"/"false" and a CSV's True/False agree; 1.0,
    "1.0" and "01" are "1" (a CSV's cells arrive as text, JSON's and YAML's as numbers or booleans)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    key = str(value).strip()
    if key.lower() in ("true", "false"):
        return key.lower()
    if re.fullmatch(r"[+-]?[0-9]+(\.0*)?", key):  # ASCII digits: int() also reads Arabic-Indic ones as these
        return str(int(key.split(".")[0]))
    if re.fullmatch(r"[+-]?[0-9]+(\.[0-9]*)?[eE][+-]?[0-9]+", key) and float(key).is_integer():
        return str(int(float(key)))  # 1e2, as a JSON file may write a number (read as written): the label 100
    return key


def _names(key: str, value: Any) -> tuple[str, ...]:
    """A list of names from YAML ([a, b]) or from an override (a,b)."""
    if isinstance(value, str):
        value = [part for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)) or not value:
        raise UserError(f"task.{key}={value!r} must be a non-empty list, e.g. task.{key}=[a, b] in the YAML or "
                        f"task.{key}=a,b on the command line")
    return tuple(label_key(item) for item in value)


def parse_task_section(section: dict[str, Any]) -> TaskSection:
    """Check the `task:` section key by key; raise a UserError naming the key and the fix."""
    if not section:
        raise UserError("the task: section is empty; set at least task.format (classification, pair or "
                        "multiple_choice), task.text_columns and task.labels or task.choice_columns")
    for key in section:
        if key not in TASK_KEYS_HELP:
            raise UserError(f"unknown task key 'task.{key}'; {did_you_mean(key, TASK_KEYS_HELP, prefix='task.')}"
                            f"known: {', '.join(TASK_KEYS_HELP)}")
    task_format = section.get("format")
    if task_format not in FORMATS:
        raise UserError(f"task.format={task_format!r} must be one of {', '.join(FORMATS)}; "
                        f"{did_you_mean(str(task_format), FORMATS)}".rstrip("; "))
    text_columns = _names("text_columns", section.get("text_columns"))
    expected = TEXT_COLUMNS_PER_FORMAT[task_format]
    if len(text_columns) != expected:
        what = {1: "one column", 2: "two columns (premise, hypothesis)"}[expected]
        raise UserError(f"task.format={task_format} reads {what} of text, but task.text_columns has "
                        f"{len(text_columns)}: {list(text_columns)}")
    labels = choice_columns = max_choices = None
    if task_format == "multiple_choice":
        if "labels" in section:
            raise UserError("task.labels is for classification/pair; a multiple_choice label is the index of the "
                            "right answer among task.choice_columns — drop task.labels")
        choice_columns = _names("choice_columns", section.get("choice_columns"))
        if len(choice_columns) < 2:
            raise UserError(f"task.choice_columns={list(choice_columns)} needs at least two answers")
        max_choices = section.get("max_choices", len(choice_columns))
        if isinstance(max_choices, bool) or not isinstance(max_choices, int) or max_choices < 2:
            raise UserError(f"task.max_choices={max_choices!r} must be an integer >= 2")
        if len(choice_columns) > max_choices:
            raise UserError(f"task.choice_columns has {len(choice_columns)} answers but task.max_choices={max_choices}; "
                            f"drop answer columns or raise task.max_choices")
    else:
        for key in ("choice_columns", "max_choices"):
            if key in section:
                raise UserError(f"task.{key} is for format multiple_choice, not {task_format}; drop it")
        labels = _names("labels", section.get("labels"))
        if len(labels) < 2 or len(set(labels)) != len(labels):
            raise UserError(f"task.labels={list(labels)} must name at least two different labels")
    weight = section.get("lm_loss_weight", GPT1_LM_LOSS_WEIGHT)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
        raise UserError(f"task.lm_loss_weight={weight!r} must be a number >= 0 (GPT-1: {GPT1_LM_LOSS_WEIGHT}; 0 = off)")
    label_column = str(section.get("label_column", "label"))
    return TaskSection(task_format, text_columns, label_column, labels, choice_columns, max_choices, float(weight))


@dataclass
class FinetuneConfig(TrainConfig):
    example_config: typing.ClassVar[str] = "training/configs/finetune_boolq.yaml"

    task: dict[str, Any] = _setting(help="what the labelled data is: task.format, task.text_columns, task.labels, ... "
                                    "(hf-gpt-custom finetune --help)", changes_training=True, factory=dict)

    def __post_init__(self) -> None:
        if not self.init_from:
            raise UserError("init_from is not set; fine-tuning starts from a pre-trained model folder, e.g. "
                            "init_from=runs/shakespeare/final")
        defaults = TrainConfig(dataset="-")
        for name in PRETRAINING_ONLY_SETTINGS:
            if getattr(self, name) != getattr(defaults, name):
                raise UserError(f"{name} is a pre-training setting that fine-tuning does not read (the tokenizer and "
                                f"architecture come from init_from); drop it from the config")
        super().__post_init__()
        # resolved, defaults included: config.yaml and each checkpoint's recorded settings then say what was trained
        self.task = parse_task_section(self.task).to_dict()

    @property
    def task_section(self) -> TaskSection:
        return parse_task_section(self.task)


def load_finetune_config(path, overrides: list[str] | None = None) -> FinetuneConfig:
    """Read a fine-tuning YAML (a training YAML with a `task:` section) plus `key=value` / `task.key=value` overrides."""
    return load_train_config(path, overrides, config_class=FinetuneConfig)
