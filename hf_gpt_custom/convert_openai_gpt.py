"""GPT-1 weights both ways: transformers' OpenAIGPTLMHeadModel (model_type "openai-gpt") <-> our post-LN block.

GPT-1 is GPT-2's layout one version earlier: the same Conv1D layers under the same names (transposed here, as in
convert_gpt2), but post-LayerNorm (x = ln_1(x + attn(x)), then ln_2(x + mlp(x)), no final norm), the embeddings
named tokens_embed / positions_embed, and the activation in `afn`, where "gelu" means GPT-2's tanh form.
"""

from __future__ import annotations

import os

import torch

from .configuration_gpt_custom import GPTCustomConfig
from .convert_common import (
    CONV1D_SUFFIXES,
    CheckpointFamily,
    convert_model,
    generic_config_fields,
    load_converted_checkpoint,
    read_as_transformers_does,
    refuse_inexpressible,
    refuse_options,
    refuse_unsupported_summary,
    require_causal_lm,
    same_names,
    transformers_model_with_weights,
)

EMBEDDING_NAMES = {"tokens_embed.": "wte.", "positions_embed.": "wpe."}
# Old checkpoints carry the causal mask (attn.bias) and position_ids as buffers.
IGNORED_KEYS = (".attn.bias", "position_ids")
# transformers' modeling_openai: ACT_FNS = {"relu": ReLU, "silu": silu, "gelu": gelu_new, "swish": silu}.
ACTIVATIONS_FROM_AFN = {"gelu": "gelu_new", "relu": "relu", "silu": "silu", "swish": "silu"}
AFN_FROM_ACTIVATION = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "relu": "relu", "silu": "silu"}
FIELDS_CARRIED_OVER = (
    "vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "resid_pdrop", "embd_pdrop", "attn_pdrop",
    "layer_norm_epsilon", "initializer_range", "bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings",
)
# What GPT-1 is in our config's terms (every other family field at its default: learned positions, LayerNorm,
# GELU-style MLP of 4·n_embd, biases, full multi-head attention).
GPT1_BLOCK = {"norm_position": "post"}


def _renamed(name: str, prefixes: dict[str, str]) -> str:
    for old, new in prefixes.items():
        if name.startswith(old):
            return new + name.removeprefix(old)
    return name


def config_from_openai_gpt(openai_config: dict) -> GPTCustomConfig:
    """Our config for the same architecture as an OpenAIGPTConfig dict (read as OpenAIGPTConfig reads it: a field
    config.json leaves out is transformers' default, no bos/eos, not GPT-2's)."""
    from transformers import OpenAIGPTConfig

    openai_config = read_as_transformers_does(OpenAIGPTConfig, openai_config, "OpenAI GPT").to_dict()
    afn = openai_config["afn"]
    refuse_options("OpenAI GPT", {"afn": afn} if afn not in ACTIVATIONS_FROM_AFN else {},
                   f"afn must be one of {', '.join(ACTIVATIONS_FROM_AFN)}")
    if "OpenAIGPTDoubleHeadsModel" in (openai_config.get("architectures") or ()):
        refuse_unsupported_summary("OpenAIGPTDoubleHeadsModel", openai_config)
    fields = {key: openai_config.get(key) for key in FIELDS_CARRIED_OVER}
    return GPTCustomConfig(**fields, **GPT1_BLOCK, activation_function=ACTIVATIONS_FROM_AFN[afn])


def convert_openai_gpt_state_dict(openai_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An OpenAI GPT model's body and LM head -> GPTCustomForCausalLM's (keys with or without "transformer.").

    lm_head.weight keeps its name (left out on load when tied). OpenAIGPTDoubleHeadsModel ties the other way round
    and saves only lm_head.weight: the token embedding is then that matrix.
    """
    converted = {}
    for key, tensor in openai_state.items():
        name = key.removeprefix("transformer.")
        if name.endswith(IGNORED_KEYS):
            continue
        if name == "lm_head.weight":
            converted[name] = tensor
            continue
        name = _renamed(name, EMBEDDING_NAMES)
        converted[f"transformer.{name}"] = tensor.t().contiguous() if name.endswith(CONV1D_SUFFIXES) else tensor
    if "transformer.wte.weight" not in converted and "lm_head.weight" in converted:
        converted["transformer.wte.weight"] = converted["lm_head.weight"]
    return converted


# transformers' OpenAI GPT classes -> ours, with their head weights' names -> ours (the bodies as mapped above).
# OpenAIGPTDoubleHeadsModel's multiple-choice bias adds one constant to every choice: it cancels in the softmax.
OPENAI_GPT_CLASSES = {
    "OpenAIGPTModel": ("GPTCustomModel", {}),
    "OpenAIGPTLMHeadModel": ("GPTCustomForCausalLM", {}),
    "OpenAIGPTForSequenceClassification": ("GPTCustomForSequenceClassification", same_names("score.weight")),
    "OpenAIGPTDoubleHeadsModel": (
        "GPTCustomForMultipleChoice",
        {"multiple_choice_head.summary.weight": "score.weight", "multiple_choice_head.summary.bias": None},
    ),
}
OPENAI_GPT = CheckpointFamily("OpenAI GPT", config_from_openai_gpt, convert_openai_gpt_state_dict, OPENAI_GPT_CLASSES)


def load_openai_gpt_checkpoint(path: str | os.PathLike, model_class, **kwargs):
    """`model_class` (ours) with the weights of a transformers openai-gpt folder or Hub repo (a class in
    OPENAI_GPT_CLASSES)."""
    return load_converted_checkpoint(path, model_class, OPENAI_GPT, **kwargs)


def from_openai_gpt_model(openai_model, model_class):
    """`model_class` (ours), in eval mode, holding the weights of an in-memory OpenAI GPT model (a class in
    OPENAI_GPT_CLASSES)."""
    return convert_model(openai_model, model_class, OPENAI_GPT)


# --- ours -> transformers ------------------------------------------------------------------------------------------


def openai_gpt_config_from(config: GPTCustomConfig):
    """transformers' OpenAIGPTConfig for our config, which must describe a GPT-1 block (UserError naming every field
    that OpenAIGPTLMHeadModel cannot express)."""
    from transformers import OpenAIGPTConfig

    required = {
        "norm_position": "post", "position_embedding_type": "learned", "norm_type": "layernorm",
        "mlp_type": "standard", "attention_bias": True, "mlp_bias": True,
        "scale_attn_weights": True, "inner_dim": 4 * config.n_embd, "n_kv_head": config.n_head,
    }
    wrong = {name: getattr(config, name) for name, value in required.items() if getattr(config, name) != value}
    if config.activation_function not in AFN_FROM_ACTIVATION:
        wrong["activation_function"] = config.activation_function
    if config.head_dim * config.n_head != config.n_embd:  # OpenAIGPTConfig has no head_dim: heads split n_embd
        wrong["head_dim"] = config.head_dim
    refuse_inexpressible("OpenAIGPTLMHeadModel", wrong, "it is a post-LayerNorm block with learned positions, heads "
                         f"of n_embd / n_head and a {', '.join(AFN_FROM_ACTIVATION)} MLP of 4·n_embd with biases; "
                         "export a model of that block (e.g. the gpt1 preset), or keep this one as "
                         "GPTCustom")
    fields = {key: getattr(config, key) for key in FIELDS_CARRIED_OVER}
    return OpenAIGPTConfig(**fields, **generic_config_fields(config),
                           afn=AFN_FROM_ACTIVATION[config.activation_function])


def to_openai_gpt_state_dict(state: dict[str, torch.Tensor], config: GPTCustomConfig) -> dict[str, torch.Tensor]:
    """GPTCustomForCausalLM state dict (GPT-1 block) -> OpenAIGPTLMHeadModel state dict (lm_head included: the token
    embedding when tied, its own rows when untied, which transformers 5's OpenAIGPTLMHeadModel keeps too).

    A padded vocabulary (pad_vocab_size_to_multiple_of) is cut back to vocab_size rows: our padding rows are never
    looked up nor predicted, so the logits stay the same."""
    converted = {}
    for key, tensor in state.items():
        name = key.removeprefix("transformer.")
        if name == "lm_head.weight":
            continue
        if name == "wte.weight":
            tensor = tensor[: config.vocab_size]
        name = _renamed(name, {ours: theirs for theirs, ours in EMBEDDING_NAMES.items()})
        converted[f"transformer.{name}"] = tensor.t().contiguous() if name.endswith(CONV1D_SUFFIXES) else tensor
    untied = not config.tie_word_embeddings and "lm_head.weight" in state
    converted["lm_head.weight"] = (state["lm_head.weight"][: config.vocab_size] if untied
                                   else converted["transformer.tokens_embed.weight"])
    return converted


def to_openai_gpt_model(model):
    """transformers' OpenAIGPTLMHeadModel, in eval mode, holding the weights of our GPT-1-block causal LM."""
    require_causal_lm(model, "to_openai_gpt_model")
    from transformers import OpenAIGPTLMHeadModel

    state = to_openai_gpt_state_dict(model.state_dict(), model.config)
    return transformers_model_with_weights(OpenAIGPTLMHeadModel, openai_gpt_config_from(model.config), state,
                                           model.generation_config)


__all__ = [
    "OPENAI_GPT_CLASSES",
    "config_from_openai_gpt",
    "convert_openai_gpt_state_dict",
    "from_openai_gpt_model",
    "load_openai_gpt_checkpoint",
    "openai_gpt_config_from",
    "to_openai_gpt_model",
    "to_openai_gpt_state_dict",
]
