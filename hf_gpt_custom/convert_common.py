"""What the checkpoint converters (convert_gpt2, convert_openai_gpt, convert_llama) share: reading a transformers
folder's config.json and weights (local or Hub, one file or shards), building our model from a converted state
dict, and choosing the converter by the folder's `model_type` (`foreign_checkpoint_loader`, which modeling's
`from_pretrained` asks first). The key maps themselves live in the converter modules, one per architecture.
Shipped as remote code next to the modeling file: imports only torch, transformers, safetensors and siblings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import torch

from .configuration_gpt_custom import GPTCustomConfig
from .errors import MissingFileError, UserError

HUB_KEYS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder")
SAFETENSORS_INDEX = "model.safetensors.index.json"
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


# The transformers model types converted on load, in the order of foreign_checkpoint_loader's converters.
CONVERTED_MODEL_TYPES = ("gpt2", "openai-gpt", "llama")


def foreign_checkpoint_loader(path: str | os.PathLike, **kwargs) -> Callable | None:
    """The `load_<architecture>_checkpoint(path, model_class=..., **kwargs)` function that converts the transformers
    checkpoint at `path` on load, chosen by its config.json's model_type; None for our own folders (and anything
    else), which `from_pretrained` then loads as usual."""
    # Imported here: each converter imports this module for the helpers below.
    from .convert_gpt2 import load_gpt2_checkpoint
    from .convert_llama import load_llama_checkpoint
    from .convert_openai_gpt import load_openai_gpt_checkpoint

    loaders = dict(zip(CONVERTED_MODEL_TYPES, (load_gpt2_checkpoint, load_openai_gpt_checkpoint, load_llama_checkpoint)))
    config = read_config_dict(path, **kwargs)
    return None if config is None else loaders.get(config.get("model_type"))


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


def model_with_converted_weights(config: GPTCustomConfig, state: dict[str, torch.Tensor], model_class, source: str):
    """`model_class(config)` loaded with `state` (already in our names); every body weight must be there.

    `state` has the "transformer." prefix of GPTCustomForCausalLM; it is dropped for the bare GPTCustomModel. A task
    head's own weights are new (as transformers does it), and so is a tied lm_head, filled by tie_weights.
    """
    if model_class is None:
        from .modeling_gpt_custom import GPTCustomForCausalLM as model_class  # noqa: N813 (lazy: avoids a cycle)
    model = model_class(config)
    if not hasattr(model, "lm_head"):  # a task head or the bare body: an untied LM head has no place there
        state = {key: tensor for key, tensor in state.items() if key != "lm_head.weight"}
    prefix = model_class.base_model_prefix + "."
    has_body_prefix = hasattr(model, model_class.base_model_prefix)
    if not has_body_prefix:
        state = {key.removeprefix(prefix): tensor for key, tensor in state.items() if key.startswith(prefix)}
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied_head = {"lm_head.weight"} if config.tie_word_embeddings else set()
    body_keys = ("lm_head.weight", prefix) if has_body_prefix else ("",)
    missing = [key for key in missing if key not in tied_head and key.startswith(body_keys)]
    if missing or unexpected:
        raise UserError(f"{source} does not match its config: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model


def load_converted_checkpoint(
    path: str | os.PathLike,
    model_class,
    source: str,
    config_from: Callable[[dict], GPTCustomConfig],
    convert_state_dict: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]],
    **kwargs,
):
    """Our model, in eval mode, from the transformers checkpoint at `path`: its config.json through `config_from`,
    its weights through `convert_state_dict`. `dtype=` (default "auto": the weights' own dtype) and
    `attn_implementation=` are honoured as in `from_pretrained`."""
    config = config_from(read_config_dict(path, **kwargs))
    # As from_pretrained does: keyword arguments naming a config attribute override it (num_labels for a task head).
    for name, value in kwargs.items():
        if name not in LOADING_KWARGS and hasattr(config, name):
            setattr(config, name, value)
    if kwargs.get("attn_implementation"):
        config._attn_implementation = kwargs["attn_implementation"]
    state = convert_state_dict(load_weights(path, source, **kwargs))
    model = model_with_converted_weights(config, state, model_class, source=f"{source} checkpoint {path}")
    dtype = kwargs.get("dtype", kwargs.get("torch_dtype", "auto"))
    if dtype == "auto":  # transformers 5's default: the checkpoint's own dtype (Llama files are usually bf16)
        floating = {tensor.dtype for tensor in state.values() if tensor.is_floating_point()}
        dtype = floating.pop() if len(floating) == 1 else None
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    if isinstance(dtype, torch.dtype):
        model = model.to(dtype)
    return model.eval()


def convert_model(
    reference,
    model_class,
    source: str,
    config_from: Callable[[dict], GPTCustomConfig],
    convert_state_dict: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]],
):
    """Our model (GPTCustomForCausalLM or `model_class`), in eval mode, holding the weights of the in-memory
    transformers model `reference`, with its config and attention implementation."""
    config = config_from(reference.config.to_dict())
    config._attn_implementation = reference.config._attn_implementation
    state = convert_state_dict(reference.state_dict())
    return model_with_converted_weights(config, state, model_class, source=f"{source} model").eval()


def transformers_model_with_weights(reference_class, reference_config, state: dict[str, torch.Tensor]):
    """`reference_class(reference_config)` (a transformers model), in eval mode, holding `state`: every weight it
    has, nothing else (the other direction of `model_with_converted_weights`)."""
    reference = reference_class(reference_config)
    reference.load_state_dict(state, strict=True)
    return reference.eval()


def refuse_options(source: str, enabled: dict[str, object], alternative: str) -> None:
    """A UserError naming every option in `enabled` (name -> value) that the converter cannot carry over exactly;
    nothing when it is empty. Converting anyway would give a model with other logits than the original."""
    if enabled:
        listed = ", ".join(f"{name}={value!r}" for name, value in enabled.items())
        raise UserError(f"this {source} checkpoint sets {listed}, which GPTCustom does not implement; {alternative}")


__all__ = [
    "convert_model",
    "foreign_checkpoint_loader",
    "hub_kwargs",
    "load_converted_checkpoint",
    "load_weights",
    "model_with_converted_weights",
    "read_config_dict",
    "refuse_options",
    "transformers_model_with_weights",
]
