"""How a value enters a training config: YAML read with YAML 1.2's scalars, `key=value` overrides read as YAML
values, conversion to the field's declared type, and relative paths resolved. What the values may be is checked
in config.py, which calls these; nothing here knows TrainConfig's fields.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from hf_gpt_custom.errors import MissingFileError, UserError, did_you_mean
from hf_gpt_custom.training.corpus import CORPUS_SUFFIXES

REPO_ROOT = Path(__file__).resolve().parents[1]


class _ConfigLoader(yaml.SafeLoader):
    """YAML 1.2's plain scalars, as a person reading the file expects: only true/false are booleans (YAML 1.1 also
    takes yes/no/on/off, so `labels: [no, yes]` became [False, True] and `mixed_precision: no` the bool False), and
    6e-4 is a number without a decimal point (YAML 1.1 reads it as a string)."""


_ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                    list("tTfF"))
_ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:float",
                                    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
                                    list("-+0123456789"))


def read_config_yaml(stream) -> Any:
    """A training YAML (or one override value) as Python values, with YAML 1.2's booleans and floats."""
    return yaml.load(stream, Loader=_ConfigLoader)  # noqa: S506 - a SafeLoader subclass


def declared_types(config_class: type) -> dict[str, Any]:
    """Field name -> declared type, resolved from the annotation strings that `from __future__` leaves. Settings
    only: class-level constants (typing.ClassVar, e.g. example_config) are not keys a YAML may set."""
    hints = typing.get_type_hints(config_class)
    return {field.name: hints[field.name] for field in dataclasses.fields(config_class)}


def check_known_key(key: str, fields: dict) -> None:
    if key in fields:
        return
    hint = did_you_mean(key, fields)
    if key.split(".")[0] == "task" and "task" not in fields:  # a fine-tuning YAML given to train or run
        hint = "a `task:` section is a fine-tuning config: run it with `hf-gpt-custom finetune`; "
    raise UserError(f"unknown training config key {key!r}; {hint}known keys: {', '.join(sorted(fields))}")


def resolve_local_path(key: str, value: str) -> str:
    """Absolute path if `value` names an existing file/folder (cwd first, then repo root); else a Hub name."""
    candidate = Path(value).expanduser()
    for base in (Path.cwd(), REPO_ROOT):
        full = candidate if candidate.is_absolute() else base / candidate
        if full.exists():
            return str(full.resolve())
    # init_from is read from a local folder only (a Hub model: download it first); a dataset may be a Hub name
    looks_local = value.startswith((".", "/", "~")) or Path(value).suffix.lower() in CORPUS_SUFFIXES
    searched = " or ".join(dict.fromkeys(str(base) for base in (Path.cwd(), REPO_ROOT)))
    if key == "init_from":
        raise MissingFileError(
            f"init_from={value!r} not found in {searched}; give a model folder (e.g. "
            f"runs/<name>/final, a checkpoint folder, or a transformers GPT-2 folder saved with save_pretrained)"
        )
    if looks_local:
        raise MissingFileError(f"{key}={value!r} not found in {searched}; give an existing path or a Hub name")
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
    non_none = [arg for arg in typing.get_args(declared) if arg is not type(None)]
    if declared is str or (typing.get_origin(declared) in (typing.Union, types.UnionType) and non_none == [str]):
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
        return convert_value(key, value, non_none[0], from_string)
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
                parsed = read_config_yaml(text) if text.startswith("[") else [v for v in text.split(",") if v.strip()]
                value = parsed if parsed is not None else []
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
