"""What the checkpoint converters (convert_gpt2, convert_openai_gpt, convert_llama) share: reading a transformers
folder's config.json and weights (local or Hub, one file or shards) and building the model class they are given
from a converted config and state dict. The key maps live in the converter modules, one per architecture; which
converter a folder needs is auto_classes.CHECKPOINT_CONVERTERS. Imports neither the modeling file nor a converter.
Shipped as remote code next to the modeling file: imports only torch, transformers, safetensors and siblings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .auto_classes import refuse_another_head
from .configuration_gpt_custom import GPTCustomConfig
from .errors import MissingFileError, UserError

HUB_KEYS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder")
SAFETENSORS_INDEX = "model.safetensors.index.json"
# The weights that are Conv1D (in x out) in transformers' GPT-2 and OpenAI GPT, and nn.Linear (out x in) here.
CONV1D_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# from_pretrained arguments about how to load, not what the model is (the rest may override config attributes).
LOADING_KWARGS = (*HUB_KEYS, "dtype", "torch_dtype", "attn_implementation", "device_map", "trust_remote_code")


def hub_kwargs(kwargs: dict) -> dict:
    """The `from_pretrained` keyword arguments that say where files come from (revision, cache, token...)."""
    return {key: kwargs[key] for key in HUB_KEYS if key in kwargs}


def read_config_dict(path: str | os.PathLike, **kwargs) -> dict | None:
    """config.json of a local folder or Hub repo, or None when there is none (never raises for a missing file)."""
    from transformers.utils import cached_file

    if not isinstance(path, (str, os.PathLike)):
        return None
    try:
        config_file = cached_file(
            str(path), "config.json", _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False, **hub_kwargs(kwargs),
        )
    except (OSError, ValueError):
        return None
    if config_file is None:
        return None
    with open(config_file, encoding="utf-8") as handle:
        return json.load(handle)


def load_weights(path: str | os.PathLike, source: str, **kwargs) -> dict[str, torch.Tensor]:
    """Every tensor of a transformers checkpoint: model.safetensors, its shards (model.safetensors.index.json, as
    Llama checkpoints ship) or pytorch_model.bin. `source` names the architecture in error messages."""
    from safetensors.torch import load_file
    from transformers.utils import cached_file

    def find(name: str) -> str | None:
        return cached_file(str(path), name, _raise_exceptions_for_missing_entries=False, **hub_kwargs(kwargs))

    def read(weights_file: str, loader: Callable) -> dict[str, torch.Tensor]:
        try:
            return loader(weights_file)
        except Exception as err:  # safetensors / pickle errors don't name the file
            raise UserError(f"cannot read {source} weights from {weights_file}: {err}") from err

    if (weights_file := find("model.safetensors")) is not None:
        return read(weights_file, load_file)
    if (index_file := find(SAFETENSORS_INDEX)) is not None:
        with open(index_file, encoding="utf-8") as handle:
            shard_names = sorted(set(json.load(handle)["weight_map"].values()))
        state = {}
        for shard_name in shard_names:
            if (shard_file := find(shard_name)) is None:
                raise MissingFileError(f"{path}: {SAFETENSORS_INDEX} lists the shard {shard_name}, which is missing")
            state.update(read(shard_file, load_file))
        return state
    if (weights_file := find("pytorch_model.bin")) is not None:
        return read(weights_file, lambda file: torch.load(file, map_location="cpu", weights_only=True))
    raise MissingFileError(
        f"{path} has a {source} config.json but no model.safetensors or pytorch_model.bin (nor the shards of a "
        f"{SAFETENSORS_INDEX}); save the model there with save_pretrained"
    )


@dataclass(frozen=True)
class CheckpointFamily:
    """What one converter module (convert_gpt2, convert_openai_gpt, convert_llama) knows about its architecture."""

    source: str  # the family's name in messages, e.g. "GPT-2"
    config_from: Callable[[dict], GPTCustomConfig]  # its config.json dict -> ours (UserError for what we lack)
    convert_state_dict: Callable[[dict], dict]  # its body and LM-head weights -> ours ("transformer." prefix)
    # transformers class -> (our class, its head's weight names -> ours; None drops a weight that has no effect)
    classes: dict[str, tuple[str, dict[str, str | None]]]


def same_names(*keys: str) -> dict[str, str]:
    """A head-weight map (CheckpointFamily.classes) for weights whose names are already ours."""
    return {key: key for key in keys}


# Config fields the task heads read, the same in every transformers config.
TASK_CONFIG_FIELDS = ("id2label", "label2id", "problem_type", "classifier_dropout")


def converted_config(family: CheckpointFamily, config_dict: dict) -> GPTCustomConfig:
    """Our config for a transformers config dict: the family's fields, the task fields, and `architectures` in our
    class names (None for a transformers class without a counterpart here)."""
    config = family.config_from(config_dict)
    for name in TASK_CONFIG_FIELDS:
        if config_dict.get(name) is not None:
            setattr(config, name, config_dict[name])
    if config_dict.get("id2label") is not None:  # JSON keys are strings; transformers reads them as ints
        config.id2label = {int(index): label for index, label in config_dict["id2label"].items()}
    ours = family.classes.get((config_dict.get("architectures") or [None])[0])
    config.architectures = [ours[0]] if ours else None
    return config


def converted_state_dict(family: CheckpointFamily, state: dict[str, torch.Tensor], architecture: str | None) -> dict:
    """A transformers state dict in our names: the body and LM head by the family's map, the head by its class's."""
    head_names = family.classes.get(architecture, (None, {}))[1]
    converted = family.convert_state_dict({key: tensor for key, tensor in state.items() if key not in head_names})
    converted.update({ours: state[theirs] for theirs, ours in head_names.items() if ours and theirs in state})
    return converted


def model_with_converted_weights(config: GPTCustomConfig, state: dict[str, torch.Tensor], model_class, source: str,
                                 dtype: torch.dtype | None = None, ignore_mismatched_sizes: bool = False):
    """`model_class(config)` built in `dtype`, loaded with `state` (in our names, with GPTCustomForCausalLM's
    "transformer." prefix).

    Built as from_pretrained builds it (default dtype set during __init__), so buffers that transformers keeps in
    float32, such as RoPE's inv_freq, stay float32. Every body weight must be there, and an untied LM head. The task
    head the checkpoint was saved with (config.architectures) loads into that class only; any other class starts a
    new head, as transformers does, and another task head is refused by name. A saved head of another shape (a new
    num_labels) is refused naming ignore_mismatched_sizes=True, with which it starts anew, as in transformers.
    """
    refuse_another_head(model_class.__name__, source, config.architectures)
    model = model_class._from_config(config, dtype=dtype)
    own_keys = set(model.state_dict())
    prefix = model_class.base_model_prefix + "."
    if not hasattr(model, model_class.base_model_prefix):  # the bare body: its keys have no prefix
        state = {key.removeprefix(prefix): tensor for key, tensor in state.items() if key.startswith(prefix)}
        prefix = ""
    keeps_lm_head = "lm_head.weight" in own_keys and not config.tie_word_embeddings  # a tied one is wte
    loads_saved_head = (config.architectures or [None])[0] == model_class.__name__
    head_keys = {key for key in own_keys if not key.startswith(prefix) and key != "lm_head.weight"}

    def belongs_here(key: str) -> bool:
        return keeps_lm_head if key == "lm_head.weight" else key.startswith(prefix) or loads_saved_head

    own_state = model.state_dict()
    resized = sorted(key for key in head_keys if loads_saved_head and key in state
                     and tuple(state[key].shape) != tuple(own_state[key].shape))
    if resized and not ignore_mismatched_sizes:
        raise UserError(f"{source} has a {', '.join(resized)} of another shape than this config's (e.g. another "
                        "num_labels); pass ignore_mismatched_sizes=True to start a new head, as in transformers")
    new_head = set(resized)
    missing, unexpected = model.load_state_dict(
        {k: v for k, v in state.items() if belongs_here(k) and k not in new_head}, strict=False)
    new_keys = (set() if keeps_lm_head else {"lm_head.weight"}) | (new_head if loads_saved_head else head_keys)
    missing = [key for key in missing if key not in new_keys]
    if missing or unexpected:
        raise UserError(f"{source} does not match its config: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model


def load_converted_checkpoint(path: str | os.PathLike, model_class, family: CheckpointFamily, **kwargs):
    """`model_class`, in eval mode, from the transformers checkpoint at `path` (a folder or Hub repo) of `family`.
    `dtype=` (default "auto": the weights' own dtype) and `attn_implementation=` are honoured as in `from_pretrained`,
    and other keyword arguments naming a config attribute override it (num_labels for a new task head)."""
    config_dict = read_config_dict(path, **kwargs)
    config = converted_config(family, config_dict)
    for name, value in kwargs.items():
        if name not in LOADING_KWARGS and hasattr(config, name):
            setattr(config, name, value)
    if kwargs.get("attn_implementation"):
        config._attn_implementation = kwargs["attn_implementation"]
    architecture = (config_dict.get("architectures") or [None])[0]
    state = converted_state_dict(family, load_weights(path, family.source, **kwargs), architecture)
    dtype = kwargs.get("dtype", kwargs.get("torch_dtype", "auto"))
    if dtype == "auto":  # transformers 5's default: the checkpoint's own dtype (Llama files are usually bf16)
        floating = {tensor.dtype for tensor in state.values() if tensor.is_floating_point()}
        dtype = floating.pop() if len(floating) == 1 else None
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    source = f"{family.source} checkpoint {path}"
    return model_with_converted_weights(config, state, model_class, source, dtype=dtype,
                                        ignore_mismatched_sizes=bool(kwargs.get("ignore_mismatched_sizes"))).eval()


def convert_model(reference, model_class, family: CheckpointFamily):
    """`model_class`, in eval mode, holding the weights of the in-memory transformers model `reference` (any class in
    `family.classes`), with its config, dtype and attention implementation."""
    architecture = type(reference).__name__
    config = converted_config(family, {**reference.config.to_dict(), "architectures": [architecture]})
    config._attn_implementation = reference.config._attn_implementation
    state = converted_state_dict(family, reference.state_dict(), architecture)
    return model_with_converted_weights(config, state, model_class, f"{family.source} model ({architecture})",
                                        dtype=reference.dtype).eval()


def transformers_model_with_weights(reference_class, reference_config, state: dict[str, torch.Tensor]):
    """`reference_class(reference_config)` (a transformers model), in eval mode, holding `state`: every weight it
    has, nothing else (the other direction of `model_with_converted_weights`)."""
    reference = reference_class(reference_config)
    reference.load_state_dict(state, strict=True)
    return reference.eval()


# A double-heads model's multiple-choice summary is our head when it is one linear score per choice, no activation.
SUMMARY_AS_OURS = {"summary_use_proj": True, "summary_proj_to_labels": True, "summary_activation": None}


def refuse_unsupported_summary(source: str, config_dict: dict) -> None:
    """A UserError unless a double-heads config's multiple-choice summary is GPTCustomForMultipleChoice's score:
    SUMMARY_AS_OURS, read at one token ("cls_index": mc_token_ids, or "last"). Its dropout acts in training only."""
    wrong = {name: config_dict.get(name) for name, value in SUMMARY_AS_OURS.items()
             if (config_dict.get(name) or None) != value}
    if config_dict.get("summary_type") not in ("cls_index", "last"):
        wrong["summary_type"] = config_dict.get("summary_type")
    refuse_options(source, wrong, "GPTCustomForMultipleChoice scores each choice by one linear map of one token")


def refuse_options(source: str, enabled: dict[str, object], alternative: str) -> None:
    """A UserError naming every option in `enabled` (name -> value) that the converter cannot carry over exactly;
    nothing when it is empty. Converting anyway would give a model with other logits than the original."""
    if enabled:
        listed = ", ".join(f"{name}={value!r}" for name, value in enabled.items())
        raise UserError(f"this {source} checkpoint sets {listed}, which GPTCustom does not implement; {alternative}")


__all__ = [
    "CheckpointFamily",
    "convert_model",
    "converted_config",
    "converted_state_dict",
    "hub_kwargs",
    "load_converted_checkpoint",
    "load_weights",
    "model_with_converted_weights",
    "read_config_dict",
    "refuse_options",
    "refuse_unsupported_summary",
    "same_names",
    "transformers_model_with_weights",
]
