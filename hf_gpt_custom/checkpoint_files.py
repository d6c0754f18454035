"""Reading a transformers checkpoint, a local folder or a Hub repo: its config.json, its weights (one file or
shards, safetensors or pytorch_model.bin), the dtype to load them in and its generation config, each as
transformers' from_pretrained reads it. Its own module because reading files is one job and converting what was read
another: convert_common builds our model from these, and the modeling file needs config.json alone, before it knows
whether to convert. Shipped as remote code beside the modeling file: imports only torch, transformers, safetensors,
errors.py and manifest.py.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from contextlib import contextmanager

import torch

from .errors import MissingFileError, UserError
from .manifest import file_identity

HUB_KEYS = ("cache_dir", "force_download", "local_files_only", "proxies", "token", "revision", "subfolder")
SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"  # older checkpoints' shards


WEIGHT_LAYOUTS = ("model.safetensors", SAFETENSORS_INDEX)  # one file, or shards listed by their index


def weight_layouts(variant: str | None = None) -> tuple[str, str]:
    """The two names a safetensors save writes the weights under (WEIGHT_LAYOUTS), with a save's `variant` inserted
    where transformers' `_add_variant` inserts it: model.fp16.safetensors, model.safetensors.index.fp16.json."""
    if not variant:
        return WEIGHT_LAYOUTS
    return f"model.{variant}.safetensors", f"model.safetensors.index.{variant}.json"


@contextmanager
def one_weight_layout(folder: str | os.PathLike, variant: str | None = None):
    """Around a save_pretrained into `folder`: where the save wrote one weight layout (of its `variant`) and the
    other is still there from before, that other one is deleted. transformers' save removes only stale shards, so a
    folder saved whole before and sharded now (max_shard_size) kept its old model.safetensors, which from_pretrained
    reads before the index: the old weights loaded, silently (the roundreview20 hunt). Its old index, the other way
    round. A save that wrote neither name (another variant, an adapter, a rank that is not the main process) deletes
    nothing: deleting "whichever was not written" removed both (the roundreview21 hunt)."""
    names = weight_layouts(variant)
    before = {name: file_identity(os.path.join(folder, name)) for name in names}
    yield
    now = {name: file_identity(os.path.join(folder, name)) for name in names}
    written = [name for name in names if now[name] is not None and now[name] != before[name]]
    if len(written) == 1:
        for name in names:
            if name not in written and now[name] is not None:
                os.remove(os.path.join(folder, name))


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
        try:
            return json.load(handle)
        except json.JSONDecodeError as err:
            raise UserError(f"{config_file} is not valid JSON ({err}); restore it, or save the model there again "
                            "with save_pretrained") from err


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

    def read_bin(file: str) -> dict[str, torch.Tensor]:
        return torch.load(file, map_location="cpu", weights_only=True)

    def read_safetensors(file: str) -> dict[str, torch.Tensor]:  # in name order, as transformers reads the file
        return dict(sorted(load_file(file).items()))

    # transformers' order: safetensors first, one file or its shards, then the pickled format, one file or shards
    for single, index, loader in (("model.safetensors", SAFETENSORS_INDEX, read_safetensors),
                                  ("pytorch_model.bin", BIN_INDEX, read_bin)):
        if (weights_file := find(single)) is not None:
            return read(weights_file, loader)
        if (index_file := find(index)) is not None:
            with open(index_file, encoding="utf-8") as handle:
                shard_names = sorted(set(json.load(handle)["weight_map"].values()))
            state = {}
            for shard_name in shard_names:
                if (shard_file := find(shard_name)) is None:
                    raise MissingFileError(f"{path}: {index} lists the shard {shard_name}, which is missing")
                state.update(read(shard_file, loader))
            return state
    raise MissingFileError(
        f"{path} has a {source} config.json but no model.safetensors or pytorch_model.bin (nor the shards of a "
        f"{SAFETENSORS_INDEX} or {BIN_INDEX}); save the model there with save_pretrained"
    )


def loading_dtype(dtype, weights: dict[str, torch.Tensor], config_dict: dict) -> torch.dtype | None:
    """The torch dtype a from_pretrained `dtype` argument asks for, by transformers 5's rule: "bfloat16",
    torch.bfloat16, {"": torch.bfloat16}, or "auto" (also what dtype=None means there): config.json's `dtype`
    (`torch_dtype` in older files), else the first floating-point tensor's dtype in the checkpoint's own order (a bf16
    file with fp32 norms loads in bf16, as LlamaForCausalLM loads it)."""
    if isinstance(dtype, dict) and set(dtype) == {""}:
        dtype = dtype[""]
    if dtype == "auto":
        saved = config_dict.get("dtype") or config_dict.get("torch_dtype")
        if saved is None:
            return next((tensor.dtype for tensor in weights.values() if tensor.is_floating_point()), None)
        dtype = saved
    if isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype):
        return getattr(torch, dtype)
    if isinstance(dtype, torch.dtype):
        return dtype
    raise UserError(f"dtype={dtype!r} is not a torch dtype; pass 'auto', a torch dtype (torch.bfloat16) or its name "
                    "('bfloat16', 'float16', 'float32')")


def attach_generation_config(model, path: str | os.PathLike, config_dict: dict, **kwargs) -> None:
    """Give `model` the `generation_config=` argument, else the checkpoint's generation_config.json, else the one its
    config.json implies (an older checkpoint keeps repetition_penalty, max_length... there), as transformers'
    from_pretrained does. generate() reads its defaults from there: Llama 3's list of eos ids, sampling settings,
    penalties, max_new_tokens."""
    from transformers import GenerationConfig

    generation_config = kwargs.get("generation_config")
    if generation_config is None:
        generation_config = saved_generation_config(path, **kwargs)
        if generation_config is not None:
            # from_pretrained's arguments that name a generation setting apply to the saved file too, as
            # transformers' GenerationConfig.from_pretrained(folder, **kwargs) applies them: eos_token_id=<an
            # end-of-turn id> changed config.json's copy only, and generate() ran past it
            generation_config.update(**{name: value for name, value in kwargs.items()
                                        if name not in HUB_KEYS and hasattr(generation_config, name)})
    if generation_config is None:
        generation_config = GenerationConfig.from_model_config(dict(config_dict))
    model.generation_config = copy.deepcopy(generation_config)


def saved_generation_config(path: str | os.PathLike, **kwargs):
    """The GenerationConfig in generation_config.json of a folder or Hub repo, or None when it has none."""
    from transformers import GenerationConfig
    from transformers.utils import GENERATION_CONFIG_NAME, cached_file

    found = cached_file(str(path), GENERATION_CONFIG_NAME, _raise_exceptions_for_missing_entries=False,
                        _raise_exceptions_for_connection_errors=False, **hub_kwargs(kwargs))
    # read from the folder the file was found in: transformers 5.24's GenerationConfig.from_pretrained(path,
    # subfolder=...) reads an absolute path's own generation_config.json instead of its subfolder's
    return GenerationConfig.from_pretrained(os.path.dirname(found)) if found is not None else None


__all__ = [
    "BIN_INDEX",
    "HUB_KEYS",
    "SAFETENSORS_INDEX",
    "attach_generation_config",
    "hub_kwargs",
    "load_weights",
    "loading_dtype",
    "read_config_dict",
    "saved_generation_config",
]
