"""The pieces GPTCustomConfig's block variants choose from: the two norms, the three kinds of positions (with RoPE's
rotation of queries and keys) and grouped-query attention's repeat_kv.

modeling_gpt_custom.py picks one of each in `__init__`. Every positions module has the same call,
`(token embeddings, position_ids) -> (first hidden state, RoPE's (cos, sin) or None)`, so the model calls whichever it
holds without asking which it is. RMSNorm, RoPE and repeat_kv follow transformers' Llama arithmetic
(tests/hf_gpt_custom/test_block_variants.py compares them with LlamaRMSNorm, LlamaAttention and OpenAIGPT's Block).
Shipped as remote code: imports only torch.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class GPTCustomRMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019) as LLaMA computes it: x / sqrt(mean(x²) + eps) · weight, no mean, no bias.

    Like LlamaRMSNorm, the statistics are taken in float32 and the weight is applied after casting back to the input
    dtype, so bf16/fp16 models match LLaMA's numbers."""

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


class GPTCustomLearnedPositions(nn.Embedding):
    """GPT-2's learned position table, added to the token embeddings. An nn.Embedding, so its weight keeps GPT-2's
    name (`transformer.wpe.weight`) and initialisation."""

    def __init__(self, config):
        super().__init__(config.n_positions, config.n_embd)

    def forward(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, None]:
        return inputs_embeds + super().forward(position_ids), None


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
    """Fixed sinusoidal positions added to the token embeddings: a buffer recomputed from the config, never saved.

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

    def _apply(self, fn, recurse=True):
        """`model.to(torch.bfloat16)` casts every floating buffer; the table stays float32 (forward rounds it to the
        embeddings' dtype as it adds it, as before). Cast, it kept bf16's rounding for good: a later
        `.to(torch.float32)` gave other logits than the same model saved and loaded (2e-3 off in the table)."""
        super()._apply(fn, recurse)
        if self.table.dtype != torch.float32 and not self.table.is_meta:
            self.table = self.compute_table().to(self.table.device)
        return self

    def forward(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, None]:
        return inputs_embeds * self.embedding_scale + self.table[position_ids].to(inputs_embeds.dtype), None


class GPTCustomRotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021): leaves the token embeddings alone and returns, per position, the cos and sin of
    position · theta^(-2i/head_dim), each frequency twice (rotate_half layout), as LlamaRotaryEmbedding computes them.

    The frequencies are computed in float32 on every call instead of living in a buffer: `model.to(torch.bfloat16)`
    casts every floating buffer, and bf16 frequencies put positions off by whole radians at long contexts."""

    def __init__(self, config):
        super().__init__()
        self.head_dim, self.rope_theta = config.head_dim, float(config.rope_theta)

    def inverse_frequencies(self, device: torch.device) -> torch.Tensor:
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=device) / self.head_dim
        return 1.0 / (self.rope_theta**exponents)

    def forward(
        self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """(inputs_embeds, (cos, sin)), cos and sin (batch or 1, seq, head_dim) in the embeddings' dtype."""
        with torch.no_grad():
            freqs = position_ids[..., None].float() * self.inverse_frequencies(inputs_embeds.device)
            angles = torch.cat((freqs, freqs), dim=-1)
            cos, sin = angles.cos().to(inputs_embeds.dtype), angles.sin().to(inputs_embeds.dtype)
        return inputs_embeds, (cos, sin)


# config.position_embedding_type -> the module GPTCustomModel holds as `wpe`.
POSITION_MODULES = {
    "learned": GPTCustomLearnedPositions,
    "sinusoidal": GPTCustomSinusoidalPositions,
    "rope": GPTCustomRotaryEmbedding,
}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last dimension (LLaMA's / GPT-NeoX's layout)."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(
    query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE on (batch, heads, seq, head_dim) queries and keys, before keys enter the cache (as LlamaAttention)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (batch or 1, 1, seq, head_dim)
    return query * cos + rotate_half(query) * sin, key * cos + rotate_half(key) * sin


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(batch, kv_heads, seq, head_dim) -> (batch, kv_heads·n_rep, seq, head_dim), each kv head serving n_rep
    consecutive query heads (transformers' Llama repeat_kv; no copy when n_rep is 1)."""
    if n_rep == 1:
        return hidden_states
    batch, kv_heads, seq_len, head_dim = hidden_states.shape
    hidden_states = hidden_states[:, :, None].expand(batch, kv_heads, n_rep, seq_len, head_dim)
    return hidden_states.reshape(batch, kv_heads * n_rep, seq_len, head_dim)


__all__ = [
    "POSITION_MODULES", "GPTCustomLearnedPositions", "GPTCustomRMSNorm", "GPTCustomRotaryEmbedding",
    "GPTCustomSinusoidalPositions", "apply_rotary", "make_norm", "repeat_kv", "rotate_half", "sinusoidal_table",
]
