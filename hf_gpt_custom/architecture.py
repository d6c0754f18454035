"""The architecture's rules in plain Python: the block variants' choices, the presets and the checks a config must pass.

GPTCustomConfig (configuration_gpt_custom.py) declares the fields and runs `check_architecture` on construction. The
rules live here, apart from the class, because the class needs transformers (and so torch, ~5 s to import) while the
CLI must name a bad `model:` value in a training config at once (training/model_section.py checks it with this module
alone). Ships as remote code beside configuration_gpt_custom.py: imports only the standard library and errors.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .errors import UserError, did_you_mean

# The MLP's activations by transformers' names. "gelu_new" is GPT-2's tanh approximation; we compute it with PyTorch's
# fused kernel (same formula, one op instead of five). "gelu" is the exact erf form.
ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu", "relu", "silu")
# The block variants, each a choice of one field (the first value of each is GPT-2's, the default).
POSITION_EMBEDDING_TYPES = ("learned", "sinusoidal", "rope")
# transformers' generic config names and the GPT-2 field each stands for (GPTCustomConfig.attribute_map): generation
# and other libraries read them; a training YAML's `model:` section takes the fields themselves.
GENERIC_NAMES = {
    "hidden_size": "n_embd",
    "max_position_embeddings": "n_positions",
    "num_attention_heads": "n_head",
    "num_hidden_layers": "n_layer",
    "intermediate_size": "n_inner",
    "num_key_value_heads": "n_kv_head",
    "rms_norm_eps": "layer_norm_epsilon",  # one epsilon for whichever norm_type is chosen
}
NORM_POSITIONS = ("pre", "post")
NORM_TYPES = ("layernorm", "rmsnorm")
MLP_TYPES = ("standard", "swiglu")

# LLaMA's settings shared by the LLaMA-shaped presets (Touvron et al. 2023, section 2.2): pre-RMSNorm (eps 1e-6),
# SwiGLU, rotary positions (theta 10,000), no biases, an untied output head, no dropout; tokenizer bos 1, eos 2.
_LLAMA = {"position_embedding_type": "rope", "norm_type": "rmsnorm", "layer_norm_epsilon": 1e-6,
          "mlp_type": "swiglu", "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
          "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "bos_token_id": 1, "eos_token_id": 2}

# Constructing a preset allocates no weights. The GPT-2/GPT-3 rows use the default (GPT-2) block.
PRESETS: dict[str, dict] = {
    # GPT-2 (Radford et al. 2019), vocabulary 50257, context 1024.
    "gpt2": {"n_layer": 12, "n_head": 12, "n_embd": 768},  # 124,439,808 parameters
    "gpt2-medium": {"n_layer": 24, "n_head": 16, "n_embd": 1024},
    "gpt2-large": {"n_layer": 36, "n_head": 20, "n_embd": 1280},
    "gpt2-xl": {"n_layer": 48, "n_head": 25, "n_embd": 1600},
    # GPT-3 paper, Table 2.1 (Brown et al. 2020): n_layers, d_model, n_heads (d_head = d_model / n_heads), 2048 context.
    "gpt3-small": {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 2048},  # d_head 64
    "gpt3-medium": {"n_layer": 24, "n_head": 16, "n_embd": 1024, "n_positions": 2048},  # d_head 64
    "gpt3-large": {"n_layer": 24, "n_head": 16, "n_embd": 1536, "n_positions": 2048},  # d_head 96
    # The table's XL row (24 heads, d_head 128, d_model 2048) cannot all hold: 24 × 128 = 3072. We keep d_model 2048
    # (it fixes the 1.3B parameter count) and d_head 128, hence 16 heads, as GPT-NeoX 1.3B and Pythia-1.4B do.
    "gpt3-xl": {"n_layer": 24, "n_head": 16, "n_embd": 2048, "n_positions": 2048},  # d_head 128
    "gpt3-2.7b": {"n_layer": 32, "n_head": 32, "n_embd": 2560, "n_positions": 2048},  # d_head 80
    "gpt3-6.7b": {"n_layer": 32, "n_head": 32, "n_embd": 4096, "n_positions": 2048},  # d_head 128
    # The paper's table prints d_model 5140 for 13B, but it also gives 40 heads of d_head 128 = 5120, and 5140 is
    # not divisible by 40; 5120 is the consistent reading (and matches the 13B parameter count).
    "gpt3-13b": {"n_layer": 40, "n_head": 40, "n_embd": 5120, "n_positions": 2048},  # d_head 128
    "gpt3-175b": {"n_layer": 96, "n_head": 96, "n_embd": 12288, "n_positions": 2048},  # d_head 128
    # GPT-1 (Radford et al. 2018): post-LayerNorm, learned positions, 12 layers, 768 wide, 12 heads, 3072 inner,
    # 512 context. Its GELU is the tanh approximation ("gelu_new"): OpenAIGPTConfig says afn="gelu", but
    # transformers' modeling_openai maps that name to gelu_new, as the original finetune-transformer-lm code computed
    # it (the exact erf form differs by up to ~1e-3 per activation). Vocabulary 40,478 as in the released checkpoint
    # (openai-gpt): the paper's "40,000 merges" plus the 478 base symbols the merges start from; with 40,478 the
    # released weights load into this preset unchanged.
    "gpt1": {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_inner": 3072, "vocab_size": 40478, "n_positions": 512,
             "activation_function": "gelu_new", "norm_position": "post", "bos_token_id": None, "eos_token_id": None},
    # "Attention Is All You Need" (Vaswani et al. 2017), the base model's block as a decoder-only LM: post-LayerNorm
    # (Add & Norm), sinusoidal positions, ReLU, 6 layers x 512, 8 heads, 2048 inner, dropout 0.1 (the defaults).
    "transformer-decoder": {"n_layer": 6, "n_head": 8, "n_embd": 512, "n_inner": 2048, "activation_function": "relu",
                            "norm_position": "post", "position_embedding_type": "sinusoidal"},
    # LLaMA-1 7B: 32 x 4096, 32 heads, SwiGLU 11,008 (the default rule below), vocabulary 32,000, 2,048 context.
    # 6,738,415,616 parameters.
    "llama-7b": {"n_layer": 32, "n_head": 32, "n_embd": 4096, "vocab_size": 32000, "n_positions": 2048, **_LLAMA},
    # The same block at the main job's size (4 x 128), trainable on a CPU in minutes; multiple_of 8 keeps LLaMA's
    # 2.6875·d inner width (344) instead of rounding 341 up to 512.
    "llama-small": {"n_layer": 4, "n_head": 4, "n_embd": 128, "multiple_of": 8, "vocab_size": 32000,
                    "n_positions": 256, **_LLAMA},
}


def _check_positive(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UserError(f"{name}={value!r} must be a positive integer")


def _check_choice(name: str, value, choices: tuple[str, ...]) -> None:
    if value not in choices:
        hint = did_you_mean(value, choices)
        raise UserError(f"{name}={value!r} is not supported; {hint}choose one of {', '.join(choices)}")


def _check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise UserError(f"{name}={value!r} must be true or false")


def swiglu_inner_dim(n_embd: int, multiple_of: int) -> int:
    """LLaMA's SwiGLU width: 2/3 of GPT's 4·d (three matrices at the parameter count of two), rounded up to a
    multiple of `multiple_of`. d=4096, multiple_of=256: int(2·16384/3) = 10922 -> 11008 (= 2.6875·d)."""
    hidden = int(2 * (4 * n_embd) / 3)
    return multiple_of * math.ceil(hidden / multiple_of)



def _check_probability(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise UserError(f"{name}={value!r} must be a dropout probability in [0, 1)")


def _check_positive_number(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise UserError(f"{name}={value!r} must be a positive number")


def _check_token_id(name: str, value, list_allowed: bool = False) -> None:
    ids = value if list_allowed and isinstance(value, list) else [value]
    if value is not None and not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        kind = "a token id (an integer >= 0), a list of them" if list_allowed else "a token id (an integer >= 0)"
        raise UserError(f"{name}={value!r} must be {kind} or null")


def check_architecture(fields: Mapping[str, Any]) -> dict[str, int]:
    """Check a whole set of GPTCustomConfig fields (every field present, defaults filled in); return the derived
    fields that were left None: {"head_dim": n_embd // n_head, "n_kv_head": n_head} by default, as LlamaConfig
    derives them. A bad value raises a UserError that names the field and what it may be."""
    for name in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "multiple_of"):
        _check_positive(name, fields[name])
    for name in ("n_inner", "head_dim", "n_kv_head", "pad_vocab_size_to_multiple_of", "max_choices"):
        if fields[name] is not None:
            _check_positive(name, fields[name])
    n_embd, n_head = fields["n_embd"], fields["n_head"]
    if fields["head_dim"] is None and n_embd % n_head != 0:
        suggestion = max(n_head, round(n_embd / n_head) * n_head)
        raise UserError(f"n_embd={n_embd} must be divisible by n_head={n_head}; try n_embd={suggestion}")
    head_dim = fields["head_dim"] or n_embd // n_head
    n_kv_head = fields["n_kv_head"] or n_head
    for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
        _check_probability(name, fields[name])
    for name in ("layer_norm_epsilon", "initializer_range"):
        _check_positive_number(name, fields[name])
    for name in ("attention_bias", "mlp_bias", "tie_word_embeddings", "scale_attn_weights", "use_cache"):
        _check_bool(name, fields[name])
    for name in ("bos_token_id", "pad_token_id", "eos_token_id"):
        _check_token_id(name, fields[name], list_allowed=name == "eos_token_id")
    _check_choice("activation_function", fields["activation_function"], ACTIVATIONS)
    _check_choice("position_embedding_type", fields["position_embedding_type"], POSITION_EMBEDDING_TYPES)
    _check_choice("norm_position", fields["norm_position"], NORM_POSITIONS)
    _check_choice("norm_type", fields["norm_type"], NORM_TYPES)
    _check_choice("mlp_type", fields["mlp_type"], MLP_TYPES)
    theta = fields["rope_theta"]
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 1.0 < theta < float("inf"):
        raise UserError(f"rope_theta={theta!r} must be a number > 1 (LLaMA: 10000.0)")
    if fields["position_embedding_type"] == "rope" and head_dim % 2:
        raise UserError(
            f"position_embedding_type='rope' rotates pairs of dimensions, but head_dim={head_dim} is odd; "
            "choose an even head_dim (n_embd / n_head by default)"
        )
    if fields["position_embedding_type"] == "sinusoidal" and n_embd % 2:
        raise UserError(f"position_embedding_type='sinusoidal' pairs sin and cos dimensions, but n_embd={n_embd} is "
                        "odd; use an even n_embd")
    if n_head % n_kv_head:
        divisors = [k for k in range(1, n_head + 1) if n_head % k == 0]
        nearest = sorted(divisors, key=lambda k: (abs(k - n_kv_head), k))[:2]
        raise UserError(
            f"n_head={n_head} must be divisible by n_kv_head={n_kv_head} (each key/value head serves a whole group "
            f"of query heads); try n_kv_head={' or '.join(map(str, sorted(nearest)))}"
        )
    return {"head_dim": head_dim, "n_kv_head": n_kv_head}


def fields_without_effect(fields: Mapping[str, Any]) -> dict[str, str]:
    """The fields this architecture never reads (field -> why), so that a value given for one of them can be named
    as having no effect, and a change of it does not count as another architecture."""
    unused = {}
    if fields["position_embedding_type"] != "rope":
        unused["rope_theta"] = "it is read only with position_embedding_type=rope"
    if fields["mlp_type"] != "swiglu" or fields["n_inner"] is not None:
        unused["multiple_of"] = "it rounds SwiGLU's default inner width (mlp_type=swiglu without n_inner)"
    if fields["mlp_type"] == "swiglu":
        unused["activation_function"] = "SwiGLU's gate is SiLU whatever it says"
    return unused


__all__ = [
    "ACTIVATIONS", "MLP_TYPES", "NORM_POSITIONS", "NORM_TYPES", "POSITION_EMBEDDING_TYPES", "PRESETS",
    "check_architecture", "fields_without_effect", "swiglu_inner_dim",
]
