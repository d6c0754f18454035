"""The pieces GPTCustomConfig's block variants choose from: norms, position encodings, residual orderings, GQA.

modeling_gpt_custom.py picks one of each in `__init__` (from the config fields) and every path — training, the KV
cache, generate()'s fast steps (decode_step.py) — calls the same function, so each variant's arithmetic exists once.
RMSNorm, RoPE and repeat_kv follow transformers' Llama arithmetic exactly (tests/hf_gpt_custom/test_block_variants.py
compares them with LlamaRMSNorm, LlamaAttention and OpenAIGPT's Block). Shipped as remote code: imports only torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn


class GPTCustomRMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019) as LLaMA computes it: x / sqrt(mean(x²) + eps) · weight, no mean, no bias.

    Like transformers' LlamaRMSNorm, the statistics are taken in float32 and the weight is applied after casting
    back to the input dtype, so bf16/fp16 models match LLaMA's numbers."""

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


def make_norm(config) -> nn.Module:
    """The norm `config.norm_type` names, with `layer_norm_epsilon`."""
    if config.norm_type == "rmsnorm":
        return GPTCustomRMSNorm(config.n_embd, eps=config.layer_norm_epsilon)
    return nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)


def sinusoidal_table(n_positions: int, d_model: int) -> torch.Tensor:
    """The Transformer's position encoding (Vaswani et al. 2017, section 3.5), (n_positions, d_model) float32:
    PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).
    Computed in float64 and rounded once, so the table is the formula to float32 precision."""
    position = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (n_positions, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model / 2,)
    angle = position / 10000.0 ** (two_i / d_model)  # (n_positions, d_model / 2)
    table = torch.empty(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return table.float()


class GPTCustomSinusoidalPositions(nn.Module):
    """Fixed sinusoidal positions added to the token embedding: a buffer, not a parameter, never saved (it is
    recomputed from the config), any position below n_positions.

    As in the paper ("we multiply those weights by √d_model", section 3.4) the token embeddings are scaled by
    √n_embd first: with GPT-2's N(0, 0.02) initialisation the unscaled tokens would be ~35x smaller than the
    unit-amplitude encoding at d=512, and the first LayerNorm would see almost nothing but the position."""

    def __init__(self, config):
        super().__init__()
        self.n_positions, self.d_model = config.n_positions, config.n_embd
        self.embedding_scale = math.sqrt(config.n_embd)
        self.register_buffer("table", self.compute_table(), persistent=False)

    def compute_table(self) -> torch.Tensor:
        return sinusoidal_table(self.n_positions, self.d_model)

    def forward(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return inputs_embeds * self.embedding_scale + self.table[position_ids].to(inputs_embeds.dtype)


class GPTCustomRotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021) angles as transformers' LlamaRotaryEmbedding (default rope type) computes them: per
    position, cos and sin of position · theta^(-2i/head_dim), each frequency twice (rotate_half layout)."""

    def __init__(self, config):
        super().__init__()
        self.head_dim, self.rope_theta = config.head_dim, float(config.rope_theta)
        self.register_buffer("inv_freq", self.compute_inv_freq(), persistent=False)

    def compute_inv_freq(self) -> torch.Tensor:
        return 1.0 / (self.rope_theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float) / self.head_dim))

    @torch.no_grad()
    def forward(self, hidden_states: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin), each (batch or 1, seq, head_dim) in hidden_states' dtype; computed in float32."""
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=hidden_states.device, dtype=torch.float)
        angles = torch.cat((freqs, freqs), dim=-1)
        return angles.cos().to(hidden_states.dtype), angles.sin().to(hidden_states.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last dimension (LLaMA's / GPT-NeoX's layout)."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rotate_queries_and_keys(
    query: torch.Tensor, key: torch.Tensor, position_embeddings: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE on (batch, heads, seq, head_dim) queries and keys, before keys enter the cache (as LlamaAttention)."""
    cos, sin = (part.unsqueeze(1) for part in position_embeddings)  # (batch or 1, 1, seq, head_dim)
    return query * cos + rotate_half(query) * sin, key * cos + rotate_half(key) * sin


def keep_queries_and_keys(query: torch.Tensor, key: torch.Tensor, position_embeddings: None):
    """Learned and sinusoidal positions were added to the input: attention leaves queries and keys alone."""
    return query, key


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(batch, kv_heads, seq, head_dim) -> (batch, kv_heads·n_rep, seq, head_dim), each kv head serving n_rep
    consecutive query heads (transformers' Llama repeat_kv; no copy when n_rep is 1)."""
    if n_rep == 1:
        return hidden_states
    batch, kv_heads, seq_len, head_dim = hidden_states.shape
    hidden_states = hidden_states[:, :, None].expand(batch, kv_heads, n_rep, seq_len, head_dim)
    return hidden_states.reshape(batch, kv_heads * n_rep, seq_len, head_dim)


def pre_norm_residual_step(block, hidden_states, attention: Callable, feed_forward: Callable, attention_mask,
                           past_key_values, **kwargs) -> torch.Tensor:
    """GPT-2/3 and LLaMA: x + attn(ln_1(x)), then x + mlp(ln_2(x)); the model ends with ln_f."""
    attn_output, _ = attention(block.ln_1(hidden_states), attention_mask, past_key_values, **kwargs)
    hidden_states = hidden_states + attn_output
    return hidden_states + feed_forward(block.ln_2(hidden_states))


def post_norm_residual_step(block, hidden_states, attention: Callable, feed_forward: Callable, attention_mask,
                            past_key_values, **kwargs) -> torch.Tensor:
    """GPT-1 and the Transformer's Add & Norm: x = ln_1(x + attn(x)), then ln_2(x + mlp(x)); no final norm."""
    attn_output, _ = attention(hidden_states, attention_mask, past_key_values, **kwargs)
    hidden_states = block.ln_1(hidden_states + attn_output)
    return block.ln_2(hidden_states + feed_forward(hidden_states))


def vocabulary_logits(lm_head: Callable[[torch.Tensor], torch.Tensor], hidden_states: torch.Tensor,
                      vocab_size: int) -> torch.Tensor:
    """lm_head's logits over the real vocabulary, (..., vocab_size), for the module path and decode_step.py alike.

    With pad_vocab_size_to_multiple_of the head has padded rows (nanoGPT's 50257 -> 50304 keeps the matmul on
    efficient sizes); their columns are cut here rather than set to -inf, so `logits.shape[-1] == vocab_size` as
    every transformers consumer assumes (the loss's view, generate's processors, lm-eval) and a padded id has no
    column to be sampled from. Without padding the slice is the tensor itself (no copy).
    """
    return lm_head(hidden_states)[..., :vocab_size].contiguous()


RESIDUAL_STEPS = {"pre": pre_norm_residual_step, "post": post_norm_residual_step}
POSITION_ROTATIONS = {"learned": keep_queries_and_keys, "sinusoidal": keep_queries_and_keys,
                      "rope": rotate_queries_and_keys}
# Modules the variants add to the model, for decode_step.py's list of what it reproduces exactly.
VARIANT_MODULES = (GPTCustomRMSNorm, GPTCustomSinusoidalPositions, GPTCustomRotaryEmbedding)

__all__ = [
    "GPTCustomRMSNorm", "GPTCustomRotaryEmbedding", "GPTCustomSinusoidalPositions", "POSITION_ROTATIONS",
    "RESIDUAL_STEPS", "VARIANT_MODULES", "make_norm", "post_norm_residual_step", "pre_norm_residual_step",
    "repeat_kv", "rotate_half", "rotate_queries_and_keys", "sinusoidal_table", "vocabulary_logits",
]
