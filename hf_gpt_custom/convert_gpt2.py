"""Bring real GPT-2 weights: a transformers GPT-2 checkpoint (model_type "gpt2", Conv1D layout) -> our state dict.

The names are the same key for key; the one real change is the transpose, because transformers' Conv1D stores
weights as (in_features, out_features) and nn.Linear as (out_features, in_features). Shipped as remote code next to
the modeling file, so it imports only torch, transformers, safetensors and its siblings.
"""

from __future__ import annotations

import json
import os

import torch

from .configuration_gpt_custom import GPTCustomConfig
from .errors import MissingFileError, UserError

# The GPT-2 layers that are Conv1D in transformers and nn.Linear here.
CONV1D_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# Buffers old GPT-2 checkpoints carry (the causal mask); we build masks on the fly.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")
# GPT2Config fields that carry over unchanged (everything else, e.g. the double-heads summary_* fields, is dropped).
GPT2_CONFIG_FIELDS = (
    "vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "activation_function", "resid_pdrop",
    "embd_pdrop", "attn_pdrop", "layer_norm_epsilon", "initializer_range", "scale_attn_weights", "use_cache",
    "bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings",
)
UNSUPPORTED_GPT2_OPTIONS = ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention")


def _hub_kwargs(kwargs: dict) -> dict:
    keys = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder")
    return {key: kwargs[key] for key in keys if key in kwargs}


def _read_gpt2_config_dict(path: str | os.PathLike, **kwargs) -> dict | None:
    """config.json of a local folder or Hub repo, or None when there is none (never raises for a missing file)."""
    from transformers.utils import cached_file

    try:
        config_file = cached_file(
            str(path), "config.json", _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False, **_hub_kwargs(kwargs),
        )
    except (OSError, ValueError):
        return None
    if config_file is None:
        return None
    with open(config_file, encoding="utf-8") as handle:
        return json.load(handle)


def is_gpt2_checkpoint(path: str | os.PathLike, **kwargs) -> bool:
    """True when `path` holds a transformers GPT-2 checkpoint rather than one of ours."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    config = _read_gpt2_config_dict(path, **kwargs)
    return config is not None and config.get("model_type") == "gpt2"


def config_from_gpt2(gpt2_config: dict) -> GPTCustomConfig:
    """Our config for the same architecture as a GPT2Config dict."""
    enabled = [name for name in UNSUPPORTED_GPT2_OPTIONS if gpt2_config.get(name)]
    if enabled:
        raise UserError(
            f"this GPT-2 checkpoint enables {', '.join(enabled)}, which GPTCustom does not implement; load it with "
            "transformers' GPT2LMHeadModel instead"
        )
    return GPTCustomConfig(**{key: gpt2_config[key] for key in GPT2_CONFIG_FIELDS if key in gpt2_config})


def convert_gpt2_state_dict(gpt2_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel / GPT2Model state dict -> GPTCustomForCausalLM state dict.

    Accepts keys with the "transformer." prefix (GPT2LMHeadModel) or without it (GPT2Model, as in the original
    openai-community/gpt2 files). lm_head is dropped: it is tied to wte.
    """
    converted = {}
    for key, tensor in gpt2_state.items():
        if key.endswith(IGNORED_SUFFIXES) or key == "lm_head.weight":
            continue
        name = key if key.startswith("transformer.") else f"transformer.{key}"
        converted[name] = tensor.t().contiguous() if name.endswith(CONV1D_SUFFIXES) else tensor
    return converted


def _load_gpt2_weights(path: str | os.PathLike, **kwargs) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    from transformers.utils import cached_file

    hub_kwargs = _hub_kwargs(kwargs)
    for name, loader in (
        ("model.safetensors", load_file),
        ("pytorch_model.bin", lambda file: torch.load(file, map_location="cpu", weights_only=True)),
    ):
        weights_file = cached_file(
            str(path), name, _raise_exceptions_for_missing_entries=False, **hub_kwargs
        )
        if weights_file is not None:
            try:
                return loader(weights_file)
            except Exception as err:  # safetensors / pickle errors don't name the file
                raise UserError(f"cannot read GPT-2 weights from {weights_file}: {err}") from err
    raise MissingFileError(
        f"{path} has a GPT-2 config.json but no model.safetensors or pytorch_model.bin (sharded GPT-2 checkpoints: "
        "load them with GPT2LMHeadModel and call convert_gpt2_state_dict on its state_dict())"
    )


def load_gpt2_checkpoint(path: str | os.PathLike, model_class=None, **kwargs):
    """A GPTCustomForCausalLM (or `model_class`) with the weights of a transformers GPT-2 folder or Hub repo.

    `dtype=` and `attn_implementation=` are honoured as in `from_pretrained`.
    """
    if model_class is None:
        from .modeling_gpt_custom import GPTCustomForCausalLM as model_class  # noqa: N813 (lazy: avoids a cycle)

    config = config_from_gpt2(_read_gpt2_config_dict(path, **kwargs))
    if kwargs.get("attn_implementation"):
        config._attn_implementation = kwargs["attn_implementation"]
    weights = _load_gpt2_weights(path, **kwargs)
    model = _model_with_gpt2_weights(config, weights, model_class, source=f"GPT-2 checkpoint {path}")
    dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
    if isinstance(dtype, str) and dtype != "auto":
        dtype = getattr(torch, dtype)
    if isinstance(dtype, torch.dtype):
        model = model.to(dtype)
    model.eval()
    return model


def from_gpt2_model(gpt2_model, model_class=None):
    """Our model (GPTCustomForCausalLM or `model_class`), in eval mode, holding the weights of an in-memory
    transformers GPT2LMHeadModel / GPT2Model, with its config and attention implementation."""
    if model_class is None:
        from .modeling_gpt_custom import GPTCustomForCausalLM as model_class  # noqa: N813 (lazy: avoids a cycle)

    config = config_from_gpt2(gpt2_model.config.to_dict())
    config._attn_implementation = gpt2_model.config._attn_implementation
    return _model_with_gpt2_weights(config, gpt2_model.state_dict(), model_class, source="GPT-2 model").eval()


def _model_with_gpt2_weights(config: GPTCustomConfig, gpt2_state: dict, model_class, source: str):
    """`model_class(config)` loaded with the converted GPT-2 weights; every body weight must be there."""
    state = convert_gpt2_state_dict(gpt2_state)
    model = model_class(config)
    prefix = model_class.base_model_prefix + "."
    if not hasattr(model, model_class.base_model_prefix):  # the bare GPTCustomModel: its keys have no prefix
        state = {key.removeprefix(prefix): tensor for key, tensor in state.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # lm_head is tied to wte (filled by tie_weights); a task head's own weights are new, as transformers does it.
    body_keys = prefix if hasattr(model, model_class.base_model_prefix) else ""
    missing = [key for key in missing if key != "lm_head.weight" and key.startswith(body_keys)]
    if missing or unexpected:
        raise UserError(f"{source} does not match its config: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model


__all__ = ["config_from_gpt2", "convert_gpt2_state_dict", "from_gpt2_model", "is_gpt2_checkpoint", "load_gpt2_checkpoint"]
