"""Bring real GPT-2 weights: a transformers GPT-2 checkpoint (model_type "gpt2", Conv1D layout) -> our state dict.

The names are the same key for key; the one real change is the transpose, because transformers' Conv1D stores
weights as (in_features, out_features) and nn.Linear as (out_features, in_features). Shipped as remote code next to
the modeling file, so it imports only torch, transformers, safetensors and its siblings.
"""

from __future__ import annotations

import os

import torch

from .configuration_gpt_custom import GPTCustomConfig
from .convert_common import convert_model, load_converted_checkpoint, read_config_dict, refuse_options

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


def is_gpt2_checkpoint(path: str | os.PathLike, **kwargs) -> bool:
    """True when `path` holds a transformers GPT-2 checkpoint rather than one of ours."""
    config = read_config_dict(path, **kwargs)
    return config is not None and config.get("model_type") == "gpt2"


def config_from_gpt2(gpt2_config: dict) -> GPTCustomConfig:
    """Our config for the same architecture as a GPT2Config dict."""
    enabled = {name: gpt2_config[name] for name in UNSUPPORTED_GPT2_OPTIONS if gpt2_config.get(name)}
    refuse_options("GPT-2", enabled, "load it with transformers' GPT2LMHeadModel instead")
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


def load_gpt2_checkpoint(path: str | os.PathLike, model_class=None, **kwargs):
    """A GPTCustomForCausalLM (or `model_class`) with the weights of a transformers GPT-2 folder or Hub repo.

    `dtype=` and `attn_implementation=` are honoured as in `from_pretrained`.
    """
    return load_converted_checkpoint(path, model_class, "GPT-2", config_from_gpt2, convert_gpt2_state_dict, **kwargs)


def from_gpt2_model(gpt2_model, model_class=None):
    """Our model (GPTCustomForCausalLM or `model_class`), in eval mode, holding the weights of an in-memory
    transformers GPT2LMHeadModel / GPT2Model, with its config and attention implementation."""
    return convert_model(gpt2_model, model_class, "GPT-2", config_from_gpt2, convert_gpt2_state_dict)


__all__ = ["config_from_gpt2", "convert_gpt2_state_dict", "from_gpt2_model", "is_gpt2_checkpoint", "load_gpt2_checkpoint"]
