"""How a value enters a training config: YAML read with YAML 1.2's core schema (and written so it reads back the
same), `key=value` overrides read as YAML values, conversion to the field's declared type, and relative paths
resolved. What the values may be is checked in config.py, which calls these; nothing here knows TrainConfig's fields.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from hf_gpt_custom.errors import MissingFileError, UserError, did_you_mean
from hf_gpt_custom.training.corpus import CORPUS_SUFFIXES

REPO_ROOT = Path(__file__).resolve().parents[1]


# Plain scalars resolve by YAML 1.2.2's core schema (spec section 10.3.2), which the config files promise: PyYAML
# implements YAML 1.1, where yes/no/on/off are booleans, 010 is octal 8, 1:40 is sexagesimal 100, 1_000 is 1000,
# 2001-12-14 a date and 1e3 a string. In the core schema 010 is 10 and 1:40, 1_000, 0b101 and dates stay strings;
# 0x1F and 0o17 are ints (31, 15) there, so they are here too. An int field still accepts 1_000 (convert_value).
_STR, _NULL = "tag:yaml.org,2002:str", "tag:yaml.org,2002:null"
_CORE_SCHEMA = (  # (tag, the whole plain scalar, the first characters it can start with)
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("tag:yaml.org,2002:int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
    ("tag:yaml.org,2002:float", r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                                r"|[-+]?(?:\.inf|\.Inf|\.INF)|\.nan|\.NaN|\.NAN", "-+.0123456789"),
)


class _ConfigLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's core schema for plain scalars, and duplicate keys refused: YAML 1.1 readers keep
    the last of two `learning_rate:` lines without a word, so an edit near the top of a file silently did nothing."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):  # before flatten_mapping: a key may override one a `<<:` merge brings
            first_seen: dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key, mark = self.construct_object(key_node), key_node.start_mark
                if key in first_seen:
                    raise UserError(f"{mark.name} line {mark.line + 1}: duplicate key {key!r} (first on line "
                                    f"{first_seen[key].line + 1}); YAML would keep only the last value, so remove one")
                first_seen[key] = mark
        return super().construct_mapping(node, deep=deep)


def _construct_core_int(loader: _ConfigLoader, node: yaml.ScalarNode) -> int:
    """An int by the core schema: decimal even with leading zeros (010 is 10, not YAML 1.1's octal 8), 0o/0x."""
    text = loader.construct_scalar(node)
    try:
        if text.startswith(("0o", "0x")):
            return int(text[2:], 8 if text[1] == "o" else 16)
        return int(text, 10)
    except ValueError:  # only an explicit `!!int` tag gets here with other text
        raise yaml.constructor.ConstructorError(None, None, f"{text!r} is not a YAML 1.2 int", node.start_mark) from None


_ConfigLoader.yaml_implicit_resolvers = {  # SafeLoader's null (~, null, empty) and `<<` merge are the core schema's
    first: [(tag, regexp) for tag, regexp in resolvers if tag in (_NULL, "tag:yaml.org,2002:merge")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _tag, _pattern, _first in _CORE_SCHEMA:
    _ConfigLoader.add_implicit_resolver(_tag, re.compile(rf"^(?:{_pattern})$"), list(_first))
_ConfigLoader.add_constructor("tag:yaml.org,2002:int", _construct_core_int)


def read_config_yaml(stream) -> Any:
    """A training YAML (or one override value) as Python values, read with YAML 1.2's core schema."""
    return yaml.load(stream, Loader=_ConfigLoader)  # noqa: S506 - a SafeLoader subclass


def read_config_file(stream) -> tuple[Any, dict[str, str]]:
    """read_config_yaml's value, and for each top-level key whose value is a plain scalar, that scalar as written:
    a text field keeps `run_name: 007` as "007" (the number 7 is what the YAML value says)."""
    loader = _ConfigLoader(stream)
    try:
        node = loader.get_single_node()
        value = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    written = {}
    for key_node, value_node in node.value if isinstance(node, yaml.MappingNode) else []:
        if isinstance(key_node, yaml.ScalarNode) and isinstance(value_node, yaml.ScalarNode) \
                and value_node.style is None and value_node.tag != _NULL:
            written[key_node.value] = value_node.value
    return value, written


class _ConfigDumper(yaml.SafeDumper):
    """safe_dump that also quotes each string our loader would read as something else ('1e-3', a float to YAML 1.2
    only): what save_train_config writes must read back equal. SafeDumper already quotes YAML 1.1's ('yes', '1:40'),
    which keeps the file right for other YAML readers too."""


def _represent_text(dumper: _ConfigDumper, text: str) -> yaml.ScalarNode:
    read_as = _ConfigLoader("").resolve(yaml.ScalarNode, text, (True, False))
    return dumper.represent_scalar(_STR, text, style=None if read_as == _STR else "'")


_ConfigDumper.add_representer(str, _represent_text)


def write_config_yaml(values: dict[str, Any], stream) -> None:
    """`values` as YAML that read_config_yaml reads back equal, in the given key order."""
    yaml.dump(values, stream, Dumper=_ConfigDumper, sort_keys=False)


def is_text_type(declared: Any) -> bool:
    """str or str | None: a field whose value is the text as written, never a number or a bool read from it."""
    non_none = [arg for arg in typing.get_args(declared) if arg is not type(None)]
    return declared is str or (typing.get_origin(declared) in (typing.Union, types.UnionType) and non_none == [str])


def declared_types(config_class: type) -> dict[str, Any]:
    """Field name -> declared type, resolved from the annotation strings that `from __future__` leaves. Settings
    only: class-level constants (typing.ClassVar, e.g. example_config) are not keys a YAML may set."""
    hints = typing.get_type_hints(config_class)
    return {field.name: hints[field.name] for field in dataclasses.fields(config_class)}


# transformers' TrainingArguments names for settings this config spells its own way: the key (or key=value) here,
# or what to give instead where the setting has no twin. docs/training.md's table is this dict (a test checks both,
# and that each name on the left is a TrainingArguments field).
TRAINING_ARGUMENTS_NAMES = {
    "output_dir": "out_dir",
    "per_device_train_batch_size": "batch_size",
    "adam_epsilon": "adam_eps",
    "max_grad_norm": "grad_clip",
    "bf16": "mixed_precision=bf16",
    "fp16": "mixed_precision=fp16",
    "use_cpu": "cpu",
    "torch_compile": "compile",
    "logging_steps": "log_interval",
    "eval_steps": "eval_interval",
    "save_steps": "checkpoint_interval",
    "save_total_limit": "keep_checkpoints",
    "report_to": "log_with",
    "lr_scheduler_kwargs": "min_lr_ratio",
    "lr_scheduler_type": "no setting here, the schedule is always cosine_with_min_lr (warmup_steps, min_lr_ratio)",
    "num_train_epochs": "no setting here, give max_steps (optimizer steps) instead",
}


def transformers_name_hint(key: Any) -> str:
    """"TrainingArguments' per_device_train_batch_size is batch_size here; " for a name Trainer users type, or ""."""
    ours = TRAINING_ARGUMENTS_NAMES.get(str(key))
    if ours is None:
        return ""
    if " " in ours:
        return f"TrainingArguments' {key}: {ours}; "
    return f"TrainingArguments' {key} is {ours if '=' in ours else ours + '=VALUE'} here; "


def check_known_key(key: Any, fields: dict) -> None:
    if key in fields:
        return
    hint = transformers_name_hint(key) or did_you_mean(key, fields)
    if str(key).split(".")[0] == "task" and "task" not in fields:  # a fine-tuning YAML given to train or run
        hint = "a `task:` section is a fine-tuning config: run it with `hf-gpt-custom finetune`; "
    raise UserError(f"unknown training config key {key!r}; {hint}known keys: {', '.join(sorted(fields))}")


# Paths the shipped configs name that a command of the project makes: a missing one says which.
MADE_BY = {
    "runs/finetune_experiment/pretrain/": "python -m benchmarks.finetune_experiment",
    "runs/finetune_experiment/data/": "python -m benchmarks.finetune_experiment --data-only",
}


# Shipped configs' data that no command makes: where it comes from (README, "The two commands")
FETCHED_FROM = {
    "../shared/data/tinyshakespeare/input.txt": "char-rnn's tiny Shakespeare: karpathy/char-rnn's "
                                                "data/tinyshakespeare/input.txt, put at ../shared/data/tinyshakespeare/"
                                                "input.txt beside the checkout",
}


def _made_by(value: str) -> str:
    command = next((command for prefix, command in MADE_BY.items() if value.startswith(prefix)), None)
    if command:
        return f" (`{command}` makes it)"
    return f" (it is {FETCHED_FROM[value]})" if value in FETCHED_FROM else ""


def searched_places() -> str:
    """Where find_local_path looks, as an error names them: "<working directory> or <repository root>"."""
    return " or ".join(dict.fromkeys(str(base) for base in (Path.cwd(), REPO_ROOT)))


def find_local_path(value: str) -> Path | None:
    """The existing file or folder `value` names, looked up in the working directory, then in the repository root
    (so ../shared/data/... works from anywhere); None when neither has it. train's data paths and tokenizer train's
    inputs both use this rule."""
    candidate = Path(os.path.expanduser(value))
    for base in (Path.cwd(), REPO_ROOT):
        full = candidate if candidate.is_absolute() else base / candidate
        if full.exists():
            return full.resolve()
    return None


def resolve_local_path(key: str, value: str) -> str:
    """Absolute path if `value` names an existing file/folder (find_local_path); else a Hub name."""
    found = find_local_path(value)
    if found is not None:
        return str(found)
    # init_from is read from a local folder only (a Hub model: download it first); a dataset may be a Hub name
    looks_local = value.startswith((".", "/", "~")) or Path(value).suffix.lower() in CORPUS_SUFFIXES
    searched = searched_places()
    if key == "init_from":
        raise MissingFileError(
            f"init_from={value!r} not found in {searched}{_made_by(value)}; give a model folder (e.g. "
            f"runs/<name>/final, a checkpoint folder, or a transformers GPT-2 folder saved with save_pretrained)"
        )
    if looks_local:
        raise MissingFileError(f"{key}={value!r} not found in {searched}{_made_by(value)}; give an existing path or "
                               "a Hub name")
    return value  # a Hub dataset/model name such as "HuggingFaceFW/fineweb-edu"


# --- to the declared type -----------------------------------------------------------------------------------------------

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def parse_override_value(key: str, raw: str) -> Any:
    """The value of `key=raw` read as it would be in the YAML: `[no, yes]` and `'["no","yes"]'` are lists of two
    strings, 4 an int, 6e-4 a float, true a bool, null/None None; anything else stays the text."""
    text = raw.strip()
    if text.lower() in ("null", "none", "~", ""):
        return None
    try:
        return read_config_yaml(text)
    except yaml.YAMLError as err:
        problem = str(err).splitlines()[0]
        raise UserError(f"override {key}={raw!r} is not a valid value ({problem}); quote it, or write a list as "
                        f"{key}=[a, b]") from None


def convert_override(key: str, raw: str, declared: Any) -> Any:
    """A top-level `key=raw` override converted by the field's declared type. Text fields take the text as written
    (run_name=007 stays "007"); every other field takes the YAML value, so lists may be written [a, b] or a,b."""
    if is_text_type(declared):
        return convert_value(key, raw, declared, from_string=True)
    value = parse_override_value(key, raw)
    return convert_value(key, raw if isinstance(value, str) else value, declared, from_string=isinstance(value, str))


def convert_value(key: str, value: Any, declared: Any, from_string: bool = False) -> Any:
    """Convert `value` to the field's declared type, or raise ValueError naming the key."""
    origin = typing.get_origin(declared)
    args = typing.get_args(declared)
    if origin in (typing.Union, types.UnionType):
        non_none = [arg for arg in args if arg is not type(None)]
        if value is None or (from_string and str(value).strip().lower() in ("null", "none", "~", "")):
            return None
        for alternative in non_none[:-1]:  # int | float: 300 is the count 300, 0.1 the fraction
            try:
                return convert_value(key, value, alternative, from_string)
            except UserError:
                pass
        return convert_value(key, value, non_none[-1], from_string)
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
                # "copa, piqa" is ["copa", "piqa"], as `eval --tasks "copa, piqa"` reads it
                items = [item.strip() for item in text.split(",") if item.strip()]
                parsed = read_config_yaml(text) if text.startswith("[") else items
                value = parsed if parsed is not None else []
            if isinstance(value, (int, float, bool)):  # benchmark_shots=5 (or `: 5` in the YAML): the list [5]
                value = [value]
            if not isinstance(value, (list, tuple)):
                raise ValueError
            return [convert_value(f"{key}[{i}]", item, args[0], from_string) for i, item in enumerate(value)]
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
