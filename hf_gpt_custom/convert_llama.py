"""Llama weights both ways: transformers' LlamaForCausalLM (model_type "llama") <-> our RoPE/RMSNorm/SwiGLU block.

Llama's block is ours with position_embedding_type="rope", norm_type="rmsnorm", mlp_type="swiglu" and no biases.
The map is key for key except attention: Llama's separate q_proj/k_proj/v_proj become our one fused c_attn, rows
stacked q then k then v (n_head + 2·n_kv_head heads of head_dim). Both sides rotate with transformers' convention
(rotate_half: the first and second halves of each head pair up), so no row permutation is needed — unlike Meta's
original files, whose interleaved pairs transformers' own conversion script permutes. head_dim carries over both
ways (heads wider or narrower than hidden_size / num_attention_heads). Llama options we cannot reproduce exactly
(RoPE scaling, partial rotary, another activation) are refused by name. Training-only difference: LlamaModel's
embedding gives the pad_token_id row no gradient; ours trains every row.
"""

from __future__ import annotations

import os
import re

import torch

from .configuration_gpt_custom import GPTCustomConfig
from .convert_common import (
    CheckpointFamily,
    convert_model,
    generic_config_fields,
    load_converted_checkpoint,
    read_as_transformers_does,
    refuse_inexpressible,
    refuse_options,
    require_causal_lm,
    same_names,
    transformers_model_with_weights,
)
from .errors import UserError

QKV_MODULES = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
LAYER_MODULES = {  # Llama's name inside a decoder layer -> ours inside a block
    "input_layernorm": "ln_1",
    "post_attention_layernorm": "ln_2",
    "self_attn.o_proj": "attn.c_proj",
    "mlp.gate_proj": "mlp.c_gate",
    "mlp.up_proj": "mlp.c_fc",
    "mlp.down_proj": "mlp.c_proj",
}
TOP_MODULES = {"embed_tokens": "wte", "norm": "ln_f"}
LAYER_KEY = re.compile(r"layers\.(\d+)\.(.+)\.(weight|bias)")
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # a buffer old checkpoints saved; recomputed from rope_theta
# What Llama is in our config's terms; Llama has no residual or embedding dropout.
LLAMA_BLOCK = {"position_embedding_type": "rope", "norm_position": "pre", "norm_type": "rmsnorm",
               "mlp_type": "swiglu", "resid_pdrop": 0.0, "embd_pdrop": 0.0}
LLAMA_FIELDS = {  # LlamaConfig name -> ours
    "vocab_size": "vocab_size", "max_position_embeddings": "n_positions", "hidden_size": "n_embd",
    "num_hidden_layers": "n_layer", "num_attention_heads": "n_head", "num_key_value_heads": "n_kv_head",
    "intermediate_size": "n_inner", "head_dim": "head_dim", "rms_norm_eps": "layer_norm_epsilon",
    "attention_dropout": "attn_pdrop",
    "attention_bias": "attention_bias", "mlp_bias": "mlp_bias", "initializer_range": "initializer_range",
    "tie_word_embeddings": "tie_word_embeddings", "use_cache": "use_cache", "bos_token_id": "bos_token_id",
    "eos_token_id": "eos_token_id", "pad_token_id": "pad_token_id",
}
ALTERNATIVE = "load it with transformers' LlamaForCausalLM instead"


def config_from_llama(llama_config: dict) -> GPTCustomConfig:
    """Our config for the same architecture as a LlamaConfig dict (UserError for what we cannot reproduce)."""
    from transformers import LlamaConfig

    config = read_as_transformers_does(LlamaConfig, llama_config, "Llama")
    rope = dict(config.rope_parameters or {})
    actual = {
        "rope_parameters.rope_type": rope.get("rope_type", "default"),  # linear, dynamic, yarn, llama3 scaling
        "rope_parameters.partial_rotary_factor": rope.get("partial_rotary_factor", 1.0),
        "hidden_act": config.hidden_act,
    }
    supported = {"rope_parameters.rope_type": "default", "rope_parameters.partial_rotary_factor": 1.0,
                 "hidden_act": "silu"}
    refuse_options("Llama", {name: value for name, value in actual.items() if value != supported[name]}, ALTERNATIVE)
    fields = {ours: getattr(config, theirs) for theirs, ours in LLAMA_FIELDS.items()}
    return GPTCustomConfig(**fields, **LLAMA_BLOCK, rope_theta=rope.get("rope_theta", 10000.0))


def convert_llama_state_dict(llama_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A Llama model's body and LM head -> GPTCustomForCausalLM's. The body's keys start with "model.", or nothing
    (LlamaModel), or "transformer." (LlamaForQuestionAnswering)."""
    converted: dict[str, torch.Tensor] = {}
    qkv_parts: dict[str, dict[str, torch.Tensor]] = {}  # our fused c_attn key -> Llama module -> tensor
    for key, tensor in llama_state.items():
        if key.endswith(IGNORED_SUFFIXES):
            continue
        if key == "lm_head.weight":
            converted[key] = tensor
            continue
        name = key.removeprefix("model.").removeprefix("transformer.")
        if match := LAYER_KEY.fullmatch(name):
            layer, module, kind = match.groups()
            if module in QKV_MODULES:
                qkv_parts.setdefault(f"transformer.h.{layer}.attn.c_attn.{kind}", {})[module] = tensor
                continue
            name = f"h.{layer}.{LAYER_MODULES.get(module, module)}.{kind}"
        else:
            module, _, kind = name.rpartition(".")
            name = f"{TOP_MODULES.get(module, module)}.{kind}"
        converted[f"transformer.{name}"] = tensor  # an unknown name stays as it is and is reported as unexpected
    for name, parts in qkv_parts.items():
        missing = [module for module in QKV_MODULES if module not in parts]
        if missing:
            raise UserError(f"the Llama checkpoint has no {', '.join(missing)} for {name}; it is incomplete")
        converted[name] = torch.cat([parts[module] for module in QKV_MODULES])  # rows: q, then k, then v
    return converted


# transformers' Llama classes -> ours, with their head weights' names -> ours (the bodies as mapped above).
LLAMA_CLASSES = {
    "LlamaModel": ("GPTCustomModel", {}),
    "LlamaForCausalLM": ("GPTCustomForCausalLM", {}),
    "LlamaForSequenceClassification": ("GPTCustomForSequenceClassification", same_names("score.weight")),
    "LlamaForTokenClassification": (
        "GPTCustomForTokenClassification", {"score.weight": "classifier.weight", "score.bias": "classifier.bias"}
    ),
    "LlamaForQuestionAnswering": ("GPTCustomForQuestionAnswering", same_names("qa_outputs.weight", "qa_outputs.bias")),
}
LLAMA = CheckpointFamily("Llama", config_from_llama, convert_llama_state_dict, LLAMA_CLASSES)


def load_llama_checkpoint(path: str | os.PathLike, model_class, **kwargs):
    """`model_class` (ours) with the weights of a transformers llama folder or Hub repo (a class in LLAMA_CLASSES)."""
    return load_converted_checkpoint(path, model_class, LLAMA, **kwargs)


def from_llama_model(llama_model, model_class):
    """`model_class` (ours), in eval mode, holding the weights of an in-memory Llama model (a class in
    LLAMA_CLASSES)."""
    return convert_model(llama_model, model_class, LLAMA)


# --- ours -> transformers ------------------------------------------------------------------------------------------


def llama_config_from(config: GPTCustomConfig):
    """transformers' LlamaConfig for our config, which must describe a Llama block (UserError naming every field
    that LlamaForCausalLM cannot express). Residual and embedding dropout, which Llama lacks, only matter in
    training and are not carried over."""
    from transformers import LlamaConfig

    required = {name: getattr(config, name) for name in LLAMA_BLOCK if not name.endswith("pdrop")}
    wrong = {name: value for name, value in required.items() if value != LLAMA_BLOCK[name]}
    if not config.scale_attn_weights:
        wrong["scale_attn_weights"] = False
    refuse_inexpressible("LlamaForCausalLM", wrong, "it is a pre-norm RoPE/RMSNorm/SwiGLU block with scaled attention;"
                         " export a model of that block (e.g. the llama-small preset), or keep this one as GPTCustom")
    fields = {theirs: getattr(config, ours) for theirs, ours in LLAMA_FIELDS.items()}
    fields.update(num_key_value_heads=config.n_kv_head, intermediate_size=config.inner_dim)
    try:
        return LlamaConfig(**fields, **generic_config_fields(config),
                           rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta})
    except Exception as err:  # noqa: BLE001  LlamaConfig's own validators (huggingface_hub's strict dataclass)
        reason = str(err.__cause__ or err).strip().splitlines()[-1].strip().rstrip(".")  # "The hidden size (30)..."
        raise UserError(f"LlamaForCausalLM cannot express this GPTCustom config: {reason}; keep this model as "
                        "GPTCustom") from err


def to_llama_state_dict(state: dict[str, torch.Tensor], config: GPTCustomConfig) -> dict[str, torch.Tensor]:
    """GPTCustomForCausalLM state dict (Llama block) -> LlamaForCausalLM state dict.

    A padded vocabulary (pad_vocab_size_to_multiple_of) is cut back to vocab_size rows: our padding rows are never
    looked up nor predicted, so the logits stay the same."""
    ours_to_theirs = {ours: theirs for theirs, ours in LAYER_MODULES.items()}
    top_to_theirs = {ours: theirs for theirs, ours in TOP_MODULES.items()}
    q_rows = config.n_head * config.head_dim
    kv_rows = config.n_kv_head * config.head_dim
    converted = {}
    for key, tensor in state.items():
        if key in ("lm_head.weight", "transformer.wte.weight"):
            tensor = tensor[: config.vocab_size]
        if key == "lm_head.weight":
            converted[key] = tensor
            continue
        name = key.removeprefix("transformer.")
        if match := re.fullmatch(r"h\.(\d+)\.(.+)\.(weight|bias)", name):
            layer, module, kind = match.groups()
            prefix = f"model.layers.{layer}."
            if module == "attn.c_attn":
                for part, rows in zip(QKV_MODULES, tensor.split([q_rows, kv_rows, kv_rows])):
                    converted[f"{prefix}{part}.{kind}"] = rows.contiguous()
                continue
            converted[f"{prefix}{ours_to_theirs.get(module, module)}.{kind}"] = tensor
        else:
            module, _, kind = name.rpartition(".")
            converted[f"model.{top_to_theirs.get(module, module)}.{kind}"] = tensor
    return converted


def to_llama_model(model):
    """transformers' LlamaForCausalLM, in eval mode, holding the weights of our Llama-block causal LM."""
    require_causal_lm(model, "to_llama_model")
    from transformers import LlamaForCausalLM

    reference_config = llama_config_from(model.config)
    reference_config._attn_implementation = model.config._attn_implementation
    state = to_llama_state_dict(model.state_dict(), model.config)
    return transformers_model_with_weights(LlamaForCausalLM, reference_config, state, model.generation_config)


__all__ = [
    "LLAMA_CLASSES",
    "config_from_llama",
    "convert_llama_state_dict",
    "from_llama_model",
    "llama_config_from",
    "load_llama_checkpoint",
    "to_llama_model",
    "to_llama_state_dict",
]
