"""Bring real GPT-2 weights: a transformers GPT-2 checkpoint (model_type "gpt2", Conv1D layout) -> our state dict.

The names are the same key for key; the one real change is the transpose, because transformers' Conv1D stores
weights as (in_features, out_features) and nn.Linear as (out_features, in_features). Shipped as remote code next to
the modeling file, so it imports only torch, transformers, safetensors and its siblings.
"""

from __future__ import annotations

import os

import torch

from .configuration_gpt_custom import GPTCustomConfig
from .convert_common import (
    CONV1D_SUFFIXES,
    CheckpointFamily,
    convert_model,
    load_converted_checkpoint,
    read_as_transformers_does,
    refuse_options,
    refuse_unsupported_summary,
    same_names,
)

# Buffers old GPT-2 checkpoints carry (the causal mask); we build masks on the fly.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")
# GPT2Config fields that carry over unchanged (convert_common.converted_config adds the task fields and
# PretrainedConfig's generic ones; the options in UNSUPPORTED_GPT2_OPTIONS are refused; the rest, e.g. the
# double-heads summary_* fields, is dropped).
GPT2_CONFIG_FIELDS = (
    "vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "activation_function", "resid_pdrop",
    "embd_pdrop", "attn_pdrop", "layer_norm_epsilon", "initializer_range", "scale_attn_weights", "use_cache",
    "bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings",
)
UNSUPPORTED_GPT2_OPTIONS = ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention")


def config_from_gpt2(gpt2_config: dict) -> GPTCustomConfig:
    """Our config for the same architecture as a GPT2Config dict (read as GPT2Config reads it)."""
    from transformers import GPT2Config

    gpt2_config = read_as_transformers_does(GPT2Config, gpt2_config, "GPT-2").to_dict()
    enabled = {name: gpt2_config[name] for name in UNSUPPORTED_GPT2_OPTIONS if gpt2_config.get(name)}
    refuse_options("GPT-2", enabled, "load it with transformers' GPT2LMHeadModel instead")
    if "GPT2DoubleHeadsModel" in (gpt2_config.get("architectures") or ()):
        refuse_unsupported_summary("GPT2DoubleHeadsModel", gpt2_config)
    return GPTCustomConfig(**{key: gpt2_config[key] for key in GPT2_CONFIG_FIELDS if key in gpt2_config})


def convert_gpt2_state_dict(gpt2_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel / GPT2Model state dict -> GPTCustomForCausalLM state dict.

    Accepts keys with the "transformer." prefix (GPT2LMHeadModel) or without it (GPT2Model, as in the original
    openai-community/gpt2 files). lm_head.weight keeps its name (left out on load when tied to wte).
    """
    converted = {}
    for key, tensor in gpt2_state.items():
        if key.endswith(IGNORED_SUFFIXES):
            continue
        if key == "lm_head.weight":
            converted[key] = tensor
            continue
        name = key if key.startswith("transformer.") else f"transformer.{key}"
        converted[name] = tensor.t().contiguous() if name.endswith(CONV1D_SUFFIXES) else tensor
    return converted


# transformers' GPT-2 classes -> ours, with their head weights' names -> ours (the bodies match key for key).
# GPT2DoubleHeadsModel's multiple-choice bias adds one constant to every choice: it cancels in the softmax.
GPT2_CLASSES = {
    "GPT2Model": ("GPTCustomModel", {}),
    "GPT2LMHeadModel": ("GPTCustomForCausalLM", {}),
    "GPT2ForSequenceClassification": ("GPTCustomForSequenceClassification", same_names("score.weight")),
    "GPT2ForTokenClassification": (
        "GPTCustomForTokenClassification", same_names("classifier.weight", "classifier.bias")
    ),
    "GPT2ForQuestionAnswering": ("GPTCustomForQuestionAnswering", same_names("qa_outputs.weight", "qa_outputs.bias")),
    "GPT2DoubleHeadsModel": (
        "GPTCustomForMultipleChoice",
        {"multiple_choice_head.summary.weight": "score.weight", "multiple_choice_head.summary.bias": None},
    ),
}
GPT2 = CheckpointFamily("GPT-2", config_from_gpt2, convert_gpt2_state_dict, GPT2_CLASSES)


def load_gpt2_checkpoint(path: str | os.PathLike, model_class, **kwargs):
    """`model_class` (ours) with the weights of a transformers GPT-2 folder or Hub repo of any class in GPT2_CLASSES.

    from_pretrained's loading arguments (`config=`, `dtype=`, `device_map=`, `output_loading_info=`...) are taken as
    `load_converted_checkpoint` describes; the folder's generation_config.json comes along.
    """
    return load_converted_checkpoint(path, model_class, GPT2, **kwargs)


def from_gpt2_model(gpt2_model, model_class):
    """`model_class` (ours), in eval mode, holding the weights of an in-memory transformers GPT-2 model (any class in
    GPT2_CLASSES), with its config, dtype and attention implementation."""
    return convert_model(gpt2_model, model_class, GPT2)


__all__ = ["GPT2_CLASSES", "config_from_gpt2", "convert_gpt2_state_dict", "from_gpt2_model", "load_gpt2_checkpoint"]
