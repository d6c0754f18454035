"""The GPT family as a native transformers model: attention, MLPs, block, GPTCustomModel, GPTCustomForCausalLM.

Read top to bottom like nanoGPT's model.py. The default config is GPT-2's block; the variants (post-LN, RMSNorm,
SwiGLU, sinusoidal/rotary positions, no biases, grouped-query attention, untied/padded head) choose their pieces
once in `__init__` from block_variants.py, whose functions every path calls. Everything transformers users expect
plugs in here: the attention interface (eager = the textbook formula, sdpa, flash), transformers' causal/padding
masks and Cache classes, GenerationMixin, gradient checkpointing, `_no_split_modules` for device_map="auto", tied
embeddings.
Weight names are GPT-2's, so convert_gpt2.py is a key-for-key map with one transpose (Conv1D -> nn.Linear).
The block's arithmetic lives once, here: generate()'s fast decoding steps (decode_step.py) call the same
`residual_step`/`attend`/`feed_forward` methods the module forward calls, with the loop's linear kernels passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn
from transformers import CompileConfig, GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import can_return_tuple, logging
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .block_variants import (
    POSITION_ROTATIONS,
    RESIDUAL_STEPS,
    VARIANT_MODULES,
    GPTCustomRMSNorm,
    GPTCustomRotaryEmbedding,
    GPTCustomSinusoidalPositions,
    make_norm,
    repeat_kv,
    vocabulary_logits,
)
from .causal_lm_loss import causal_lm_loss
from .configuration_gpt_custom import GPTCustomConfig
from .convert_common import foreign_checkpoint_loader
from .decode_step import DecodeStep, supports_decode_step
from .dropout import GPTCustomDropout, apply_dropout, draws_uniform_mask, sdpa_mask_as_additive
from .kv_cache import preallocate
from .transformers_compat import CACHE_NAME, accepts_cache_kwarg, cache_kwarg, output_cache
from .errors import UserError

logger = logging.get_logger(__name__)

# Every model class by the transformers Auto class that loads it, as "module.Class" — the form auto_map takes.
# Registered in-process (hf_gpt_custom/__init__.py) and written to every saved config's auto_map. The task heads live
# in heads_gpt_custom.py, which save_pretrained ships beside this file.
AUTO_MODEL_CLASSES = {
    "AutoModel": "modeling_gpt_custom.GPTCustomModel",
    "AutoModelForCausalLM": "modeling_gpt_custom.GPTCustomForCausalLM",
    "AutoModelForSequenceClassification": "heads_gpt_custom.GPTCustomForSequenceClassification",
    "AutoModelForTokenClassification": "heads_gpt_custom.GPTCustomForTokenClassification",
    "AutoModelForQuestionAnswering": "heads_gpt_custom.GPTCustomForQuestionAnswering",
    "AutoModelForMultipleChoice": "heads_gpt_custom.GPTCustomForMultipleChoice",
}


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The textbook formula softmax(Q·Kᵀ·scaling + mask)·V; the reference every other implementation must match.

    `attention_mask` is transformers' additive float mask (0 where allowed, dtype-min where not) of shape
    (batch, 1, q_len, kv_len), already combining causality with padding. Keys and values may have fewer heads
    (grouped-query attention): each serves `module.num_key_value_groups` query heads. Returns the output as
    (batch, q_len, heads, head_dim) and the attention weights as (batch, heads, q_len, kv_len).
    """
    key = repeat_kv(key, module.num_key_value_groups)  # (batch, heads, kv_len, head_dim)
    value = repeat_kv(value, module.num_key_value_groups)
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling  # (batch, heads, q_len, kv_len)
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    weights = apply_dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value)  # (batch, heads, q_len, head_dim)
    return output.transpose(1, 2), weights


def check_token_ids(name: str, token_ids: torch.Tensor, vocab_size: int, ignore_index: int | None = None) -> None:
    """Raise a UserError naming what is wrong with `token_ids` (input_ids or labels) before it becomes a cryptic
    IndexError deep in an embedding or the loss. One min/max pass over the ids; skipped under torch.compile and
    torch.jit.trace (which would record the check as constants)."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return
    if token_ids.dtype.is_floating_point or token_ids.dtype.is_complex or token_ids.dtype == torch.bool:
        raise UserError(f"{name} must hold integer token ids, got dtype {token_ids.dtype}; convert with .long()")
    if token_ids.dim() != 2:
        raise UserError(
            f"{name} must be 2-D (batch, seq_len), got shape {tuple(token_ids.shape)}; for one sequence add the "
            f"batch dimension ({name}[None] or .unsqueeze(0))"
        )
    if token_ids.numel() == 0:
        raise UserError(f"{name} is empty (shape {tuple(token_ids.shape)}); pass at least one token per row")
    lowest, highest = (int(value) for value in torch.aminmax(token_ids))
    if highest >= vocab_size:
        raise UserError(
            f"{name} holds token id {highest} but vocab_size is {vocab_size}; ids must be 0..{vocab_size - 1} (was "
            "the text tokenized with another tokenizer?)"
        )
    if lowest < 0:
        negative = token_ids[token_ids < 0]
        invalid = negative[negative != ignore_index] if ignore_index is not None else negative
        if invalid.numel():
            allowed = f" or {ignore_index} to ignore a position" if ignore_index is not None else ""
            raise UserError(f"{name} holds token id {int(invalid.min())}; ids must be 0..{vocab_size - 1}{allowed}")


class GPTCustomAttention(nn.Module):
    """Causal self-attention with one fused q/k/v projection, as in GPT-2: multi-head, or grouped-query with
    n_kv_head < n_head (c_attn then outputs n_head query heads, then n_kv_head key and n_kv_head value heads)."""

    def __init__(self, config: GPTCustomConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx  # which slot of the KV cache this layer owns
        self.num_heads = config.n_head
        self.num_kv_heads = config.kv_heads
        self.num_key_value_groups = config.n_head // config.kv_heads  # read by transformers' sdpa integration
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5 if config.scale_attn_weights else 1.0
        self.is_causal = True  # read by transformers' sdpa/flash integrations
        kv_width = self.num_kv_heads * self.head_dim
        self.split_sizes = [self.num_heads * self.head_dim, kv_width, kv_width]  # q, k, v in c_attn's output
        self.c_attn = nn.Linear(config.n_embd, sum(self.split_sizes), bias=config.attention_bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.attention_bias)
        self.c_proj.is_residual_projection = True  # scaled at init, see _init_weights
        self.resid_dropout = GPTCustomDropout(config.resid_pdrop)
        # RoPE rotates queries and keys here; learned/sinusoidal positions were added to the input instead.
        self.apply_positions = POSITION_ROTATIONS[config.position_embedding_type]

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.attend(hidden_states, attention_mask, past_key_values, self.c_attn, self.c_proj, **kwargs)

    def attend(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        past_key_values: Cache | None,
        c_attn: Callable[[torch.Tensor], torch.Tensor],
        c_proj: Callable[[torch.Tensor], torch.Tensor],
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """forward's arithmetic with the two projections passed in: forward passes its own Linear modules,
        generate()'s fast decoding steps the kernels chosen for their loop (decode_step.py).
        `position_embeddings`: RoPE's (cos, sin) for these positions (GPTCustomModel.embed), else None."""
        batch, seq_len, _ = hidden_states.shape
        query, key, value = c_attn(hidden_states).split(self.split_sizes, dim=-1)
        query = query.view(batch, seq_len, -1, self.head_dim).transpose(1, 2)  # (batch, heads, seq, head_dim)
        key = key.view(batch, seq_len, -1, self.head_dim).transpose(1, 2)  # (batch, kv_heads, seq, head_dim)
        value = value.view(batch, seq_len, -1, self.head_dim).transpose(1, 2)
        query, key = self.apply_positions(query, key, position_embeddings)
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)  # (batch, kv_heads, past + seq, head_dim)

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        dropout = self.config.attn_pdrop if self.training else 0.0
        if dropout > 0.0 and draws_uniform_mask(query) and self.config._attn_implementation == "sdpa":
            # torch's CPU sdpa has no fused kernel with dropout: it runs this same textbook arithmetic with a slower
            # mask (dropout.py). Same arithmetic here, our mask; and no weights returned, as from sdpa.
            attention_mask = sdpa_mask_as_additive(attention_mask, query.shape[2], key.shape[2], query.dtype,
                                                   query.device)
            output, _ = eager_attention_forward(self, query, key, value, attention_mask, self.scaling, dropout)
            weights = None
        else:
            output, weights = attention_interface(
                self, query, key, value, attention_mask, dropout=dropout, scaling=self.scaling, **kwargs
            )
        output = output.reshape(batch, seq_len, -1)  # (batch, seq, n_embd): heads side by side again
        return self.resid_dropout(c_proj(output)), weights


class GPTCustomMLP(nn.Module):
    """n_embd -> n_inner -> n_embd with `activation_function` (GELU in GPT-1/2/3, ReLU in the original Transformer),
    the position-wise feed-forward network."""

    def __init__(self, config: GPTCustomConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.inner_dim, bias=config.mlp_bias)
        self.c_proj = nn.Linear(config.inner_dim, config.n_embd, bias=config.mlp_bias)
        self.c_proj.is_residual_projection = True  # scaled at init, see _init_weights
        self.activation = _activation(config.activation_function)
        self.dropout = GPTCustomDropout(config.resid_pdrop)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.feed_forward(hidden_states, self.c_fc, self.c_proj)

    def feed_forward(
        self, hidden_states: torch.Tensor, c_fc: Callable[[torch.Tensor], torch.Tensor], c_proj: Callable
    ) -> torch.Tensor:
        """forward's arithmetic with the two projections passed in (see GPTCustomAttention.attend)."""
        return self.dropout(c_proj(self.activation(c_fc(hidden_states))))


class GPTCustomSwiGLU(nn.Module):
    """LLaMA's feed-forward (Shazeer 2020): c_proj(silu(c_gate(x)) * c_fc(x)), three matrices. The names map to
    LlamaMLP's as c_fc = up_proj, c_gate = gate_proj, c_proj = down_proj."""

    def __init__(self, config: GPTCustomConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.inner_dim, bias=config.mlp_bias)
        self.c_gate = nn.Linear(config.n_embd, config.inner_dim, bias=config.mlp_bias)
        self.c_proj = nn.Linear(config.inner_dim, config.n_embd, bias=config.mlp_bias)
        self.c_proj.is_residual_projection = True  # scaled at init, see _init_weights
        self.dropout = GPTCustomDropout(config.resid_pdrop)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.feed_forward(hidden_states, self.c_fc, self.c_proj, self.c_gate)

    def feed_forward(
        self, hidden_states: torch.Tensor, c_fc: Callable, c_proj: Callable, c_gate: Callable
    ) -> torch.Tensor:
        """forward's arithmetic with the three projections passed in (see GPTCustomAttention.attend)."""
        return self.dropout(c_proj(F.silu(c_gate(hidden_states)) * c_fc(hidden_states)))


def _activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    # GPT-2's "gelu_new" is 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). transformers evaluates it as five separate
    # ops; PyTorch's approximate="tanh" kernel computes the same formula fused (within 1e-6, ~1.2x faster training
    # step on CPU and one saved activation tensor instead of several).
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    return {"gelu": F.gelu, "relu": F.relu, "silu": F.silu}[name]


class GPTCustomBlock(GradientCheckpointingLayer):
    """Transformer block. Pre-norm (default): x + attn(ln_1(x)), then x + mlp(ln_2(x)); post-norm (GPT-1):
    ln_1(x + attn(x)), then ln_2(x + mlp(x)). ln_1/ln_2 are LayerNorm or RMSNorm (config.norm_type)."""

    def __init__(self, config: GPTCustomConfig, layer_idx: int):
        super().__init__()
        self.ln_1 = make_norm(config)
        self.attn = GPTCustomAttention(config, layer_idx)
        self.ln_2 = make_norm(config)
        self.mlp = GPTCustomSwiGLU(config) if config.mlp_type == "swiglu" else GPTCustomMLP(config)
        self.residual_order = RESIDUAL_STEPS[config.norm_position]

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> torch.Tensor:
        return self.residual_step(hidden_states, self.attn, self.mlp, attention_mask, past_key_values, **kwargs)

    def residual_step(
        self,
        hidden_states: torch.Tensor,
        attention: Callable,
        feed_forward: Callable[[torch.Tensor], torch.Tensor],
        attention_mask: torch.Tensor | None,
        past_key_values: Cache | None,
        **kwargs,
    ) -> torch.Tensor:
        """The block's arithmetic. forward passes its attn and mlp modules (so hooks on them fire); generate()'s fast
        decoding steps pass their `attend`/`feed_forward` bound to the loop's kernels (decode_step.py)."""
        return self.residual_order(self, hidden_states, attention, feed_forward, attention_mask, past_key_values,
                                   **kwargs)


class GPTCustomPreTrainedModel(PreTrainedModel):
    config_class = GPTCustomConfig
    config: GPTCustomConfig
    base_model_prefix = "transformer"
    supports_gradient_checkpointing = True
    _no_split_modules = ["GPTCustomBlock"]  # device_map="auto" keeps a block (and its residual) on one device
    _skip_keys_device_placement = ["past_key_values", "cache"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True
    # Collected by transformers' capture_outputs hooks, as in models/gpt2: each block's output is a hidden state,
    # each attention's second output its weights (None under sdpa/flash, which then return no attentions).
    _can_record_outputs = {
        "hidden_states": GPTCustomBlock,
        "attentions": OutputRecorder(GPTCustomAttention, index=1),
    }
    # Old GPT-2 checkpoints store the causal mask as a buffer named attn.bias / attn.masked_bias.
    _keys_to_ignore_on_load_unexpected = [r"\.attn\.bias$", r"\.attn\.masked_bias$"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """GPT-2 initialisation: N(0, initializer_range) for weights, zeros for biases, norms at identity; the fixed
        position buffers are recomputed (from_pretrained builds the model on the meta device, buffers included)."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            # GPT-2 paper, section 2.3: "scale the weights of residual layers at initialization by a factor of 1/√N
            # where N is the number of residual layers" — two per block (attention and MLP), so std/√(2·n_layer).
            # Marked on the Linear itself: transformers skips _init_weights for parameter-less custom-code modules.
            if getattr(module, "is_residual_projection", False):
                std = std / math.sqrt(2 * self.config.n_layer)
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, GPTCustomRMSNorm):
            init.ones_(module.weight)
        elif isinstance(module, GPTCustomSinusoidalPositions):
            init.copy_(module.table, module.compute_table())
        elif isinstance(module, GPTCustomRotaryEmbedding):
            init.copy_(module.inv_freq, module.compute_inv_freq())

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """transformers' resize; with config.pad_vocab_size_to_multiple_of the new embedding is padded as at
        construction and config.vocab_size stays the real vocabulary (transformers' own padding would make the padded
        rows part of it, predictable, and the folder would no longer load: its rows differ from padded_vocab_size)."""
        multiple = self.config.pad_vocab_size_to_multiple_of
        if multiple is None:
            return super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        if pad_to_multiple_of is not None:
            raise UserError(
                f"this model pads its vocabulary itself (pad_vocab_size_to_multiple_of={multiple}); call "
                f"resize_token_embeddings without pad_to_multiple_of={pad_to_multiple_of}, or change "
                "config.pad_vocab_size_to_multiple_of first"
            )
        vocab_size = self.config.vocab_size if new_num_tokens is None else new_num_tokens
        embeddings = super().resize_token_embeddings(vocab_size, multiple, mean_resizing)
        self.config.vocab_size = vocab_size
        return embeddings

    def save_pretrained(self, save_directory, *args, **kwargs):
        # transformers records only the saved class in auto_map; list every Auto class so that AutoModel, the causal
        # LM and every task head resolve from the folder with trust_remote_code=True. transformers copies this file
        # and the files it imports relatively — this import is what ships heads_gpt_custom.py with a causal LM.
        from .heads_gpt_custom import GPTCustomTaskHeadModel  # noqa: F401  (imported so that transformers ships it)

        self.config.auto_map = {
            **(getattr(self.config, "auto_map", None) or {}),
            "AutoConfig": "configuration_gpt_custom.GPTCustomConfig",
            **AUTO_MODEL_CLASSES,
        }
        return super().save_pretrained(save_directory, *args, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """Load our checkpoint, or convert a transformers GPT-2, OpenAI GPT or Llama checkpoint on the fly."""
        loader = None if model_args else foreign_checkpoint_loader(pretrained_model_name_or_path, **kwargs)
        if loader is not None:
            return loader(pretrained_model_name_or_path, model_class=cls, **kwargs)
        from .model_folder import from_pretrained_checked  # the folder's manifest; a missing tensor is an error

        try:
            return from_pretrained_checked(super().from_pretrained, pretrained_model_name_or_path, *model_args, **kwargs)
        except Exception as err:
            # A truncated or corrupt weights file surfaces as a bare SafetensorError deep inside loading.
            if type(err).__name__ != "SafetensorError":
                raise
            raise UserError(
                f"cannot read the weights in {pretrained_model_name_or_path} (model.safetensors): {err}. The file is "
                "truncated or corrupt; save or download it again."
            ) from err


def _add_learned_positions(model: GPTCustomModel, inputs_embeds: torch.Tensor, position_ids: torch.Tensor):
    return inputs_embeds + model.wpe(position_ids), None


def _add_sinusoidal_positions(model: GPTCustomModel, inputs_embeds: torch.Tensor, position_ids: torch.Tensor):
    return model.position_encoding(inputs_embeds, position_ids), None


def _rotary_positions(model: GPTCustomModel, inputs_embeds: torch.Tensor, position_ids: torch.Tensor):
    return inputs_embeds, model.rotary_emb(inputs_embeds, position_ids)  # (cos, sin) for every attention layer


# config.position_embedding_type -> (model, token embeddings, positions) -> (first hidden state, RoPE's (cos, sin)).
ADD_POSITIONS = {"learned": _add_learned_positions, "sinusoidal": _add_sinusoidal_positions,
                 "rope": _rotary_positions}


class GPTCustomModel(GPTCustomPreTrainedModel):
    """The decoder stack: token embeddings and positions, n_layer blocks, final norm (pre-norm blocks only).
    Returns hidden states."""

    def __init__(self, config: GPTCustomConfig):
        super().__init__(config)
        self.wte = nn.Embedding(config.padded_vocab_size, config.n_embd)
        # Positions, by config.position_embedding_type: a learned table (GPT-2), a fixed sinusoid buffer (the
        # Transformer), or rotary angles that every attention layer applies to its queries and keys (LLaMA).
        if config.position_embedding_type == "learned":
            self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        elif config.position_embedding_type == "sinusoidal":
            self.position_encoding = GPTCustomSinusoidalPositions(config)
        else:
            self.rotary_emb = GPTCustomRotaryEmbedding(config)
        self.add_positions = ADD_POSITIONS[config.position_embedding_type]
        self.drop = GPTCustomDropout(config.embd_pdrop)
        self.h = nn.ModuleList([GPTCustomBlock(config, layer_idx) for layer_idx in range(config.n_layer)])
        # Post-norm blocks already end in a norm (GPT-1 has no final LayerNorm); Identity has no weights.
        self.ln_f = make_norm(config) if config.norm_position == "pre" else nn.Identity()
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def set_input_embeddings(self, new_embeddings: nn.Embedding) -> None:
        self.wte = new_embeddings

    def embed(
        self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """The first hidden state (token embeddings with learned or sinusoidal positions added) and RoPE's
        (cos, sin) for the attention layers (None for the other position types). Also decode_step.py's."""
        hidden_states, position_embeddings = self.add_positions(self, inputs_embeds, position_ids)
        return self.drop(hidden_states), position_embeddings

    @accepts_cache_kwarg
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """Hidden states after ln_f; `output_hidden_states` (True, or indices such as [0, 2, -1]) and
        `output_attentions` are collected by transformers' capture_outputs hooks (`_can_record_outputs`)."""
        if (input_ids is None) == (inputs_embeds is None):
            raise UserError("pass exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            check_token_ids("input_ids", input_ids, self.config.vocab_size)
            inputs_embeds = self.wte(input_ids)  # (batch, seq, n_embd)
        batch, seq_len, _ = inputs_embeds.shape

        # Caching only helps decoding; during training it would hold every layer's keys and values for nothing.
        if use_cache is None:
            use_cache = self.config.use_cache and not self.training
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        if position_ids is None:
            if past_length + seq_len > self.config.n_positions:
                cached = f" (after {past_length} cached)" if past_length else ""
                raise UserError(
                    f"input_ids has {seq_len} tokens{cached} but n_positions is {self.config.n_positions}; truncate "
                    "the input or use a longer-context preset"
                )
            position_ids = torch.arange(past_length, past_length + seq_len, device=inputs_embeds.device)[None]
        elif not torch.compiler.is_compiling() and int(position_ids.max()) >= self.config.n_positions:
            # With explicit positions only the positions are bounded: a padded batch's cache can be physically longer
            # than n_positions while every real row fits (generate() and batched scoring pass position_ids).
            longest = int(position_ids.max()) + 1
            raise UserError(
                f"input_ids reach {longest} tokens (position {longest - 1}) but n_positions is "
                f"{self.config.n_positions}; truncate the input or use a longer-context preset"
            )

        kwargs.pop("output_hidden_states", None)  # collected by capture_outputs' hooks
        output_attentions = kwargs.pop("output_attentions", None)
        if output_attentions is None:
            output_attentions = self.config.output_attentions
        if output_attentions and self.config._attn_implementation != "eager":
            # transformers' behaviour (GPT-2 too): go on and return no attention weights, with one warning.
            logger.warning_once(
                f"output_attentions=True returns no attention weights with attn_implementation="
                f"{self.config._attn_implementation!r}; load the model with attn_implementation='eager' or call "
                "model.set_attn_implementation('eager') to get them"
            )

        causal_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            **cache_kwarg(past_key_values),
            position_ids=position_ids,
        )
        hidden_states, position_embeddings = self.embed(inputs_embeds, position_ids)
        for block in self.h:
            hidden_states = block(hidden_states, causal_mask, past_key_values, position_ids=position_ids,
                                  position_embeddings=position_embeddings, **kwargs)
        hidden_states = self.ln_f(hidden_states)
        return BaseModelOutputWithPast(
            last_hidden_state=hidden_states, **cache_kwarg(past_key_values if use_cache else None)
        )


class GPTCustomForCausalLM(GPTCustomPreTrainedModel, GenerationMixin):
    """GPTCustomModel plus the language-modelling head: tied to the token embedding (stored once on save) unless
    config.tie_word_embeddings is False (LLaMA)."""

    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}
    _decode_step: DecodeStep | None = None  # set for the decoding loop of a generate() call

    def __init__(self, config: GPTCustomConfig):
        super().__init__(config)
        self.transformer = GPTCustomModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.padded_vocab_size, bias=False)
        self.post_init()  # ties lm_head to wte when tie_word_embeddings; without it the head stays silently untied

    @property
    def loss_function(self) -> Callable:
        """transformers' causal-LM loss computed without its logits-sized temporaries (causal_lm_loss.py); a loss
        assigned with `model.loss_function = fn` wins, as in transformers."""
        return getattr(self, "_loss_function", causal_lm_loss)

    @loss_function.setter
    def loss_function(self, value: Callable) -> None:
        self._loss_function = value

    def set_fast_decode(self, enabled: bool = True, compile: bool = True, mode: str | None = None) -> None:
        """Make later `generate` calls decode with a StaticCache and, with `compile`, a torch.compile'd decode step.

        A batch-1 decode step is a few small matmuls wrapped in ~70 module calls; compiling the step removes the
        Python between kernels, and the static cache replaces the per-step torch.cat of every layer's keys/values.
        `mode` defaults to "reduce-overhead" on CUDA (each step replayed as a CUDA graph) and "default" elsewhere.
        That is a GPU switch: on CPU plain `generate` (with decode_step.py's fast steps) is faster
        (benchmarks/results/RESULTS.md). The first call pays the compile (10-40 s for the 6x384
        model on CPU); tokens are identical to the plain path (tests/hf_gpt_custom/test_fast_paths.py).
        """
        generation_config = self.generation_config
        generation_config.cache_implementation = "static" if enabled else None
        generation_config.disable_compile = enabled and not compile  # a static cache alone auto-compiles on CUDA
        generation_config.compile_config = None
        if enabled and compile:
            default_mode = "reduce-overhead" if self.device.type == "cuda" else "default"
            generation_config.compile_config = CompileConfig(mode=mode or default_mode)
            generation_config.compile_config._compile_all_devices = True  # else transformers skips compiling on CPU

    def _prepare_cache_for_generation(
        self, generation_config, model_kwargs, generation_mode, batch_size, max_cache_length
    ) -> None:
        # generate's default DynamicCache concatenates every step; ours writes into a buffer sized for the call.
        super()._prepare_cache_for_generation(
            generation_config, model_kwargs, generation_mode, batch_size, max_cache_length
        )
        preallocate(model_kwargs.get(CACHE_NAME), capacity=max_cache_length)

    @contextmanager
    def _optimize_model_for_decode(self) -> Iterator[None]:
        # transformers wraps generate()'s decoding loop in this context: the place to decide, once per call, whether
        # single-token steps may skip the module walk (decode_step.py explains when they may).
        with super()._optimize_model_for_decode():
            model_classes = (type(self), GPTCustomModel, GPTCustomBlock, GPTCustomAttention, GPTCustomMLP,
                             GPTCustomSwiGLU, GPTCustomDropout, *VARIANT_MODULES)
            if supports_decode_step(self, model_classes):
                self._decode_step = DecodeStep(self)
            try:
                yield
            finally:
                self._decode_step = None

    @accepts_cache_kwarg
    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        next_sequence_length: int | None = None,
        past_key_values: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        is_first_iteration: bool | None = False,
        **kwargs,
    ) -> dict:
        # A fast decoding step takes the new token, its position, the cache and the mask. transformers' general
        # version (multimodal inputs, compilable caches, a signature check for custom code) builds the same dict in
        # ~60 µs, 2% of a small model's token; anything but that plain step goes to it.
        step = self._decode_step
        if (
            step is None
            or is_first_iteration
            or next_sequence_length != 1
            or not step.uses(past_key_values)
            or not kwargs.keys() <= {"position_ids", "use_cache", "logits_to_keep"}
            or input_ids.device != step.device
        ):
            return super().prepare_inputs_for_generation(
                input_ids, next_sequence_length, past_key_values, attention_mask, inputs_embeds, is_first_iteration,
                **kwargs,
            )
        inputs = {**kwargs, "input_ids": input_ids[:, -1:].clone(memory_format=torch.contiguous_format)}
        inputs[CACHE_NAME] = past_key_values
        if (position_ids := kwargs.get("position_ids")) is not None:
            inputs["position_ids"] = position_ids[..., -1:].clone(memory_format=torch.contiguous_format)
        if attention_mask is not None:
            inputs["attention_mask"] = attention_mask
        return inputs

    @accepts_cache_kwarg
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """`labels` are the input ids themselves (-100 to ignore a position); the model shifts them.

        `logits_to_keep=k` computes logits for the last k positions only (generation asks for 1, which skips a
        (batch, seq, vocab) matmul over the whole prompt); 0 keeps all.
        """
        # generate()'s decoding steps pass token ids, positions, the cache and maybe a mask (see decode_step.py).
        # Under torch.compile the attribute is not even read, so a new DecodeStep per call cannot cause recompiles.
        plain_step = inputs_embeds is None and labels is None and use_cache is not False
        outputs_requested = kwargs.get("output_attentions") or kwargs.get("output_hidden_states")
        plain_step = plain_step and not outputs_requested and kwargs.keys() <= {"output_attentions", "output_hidden_states"}
        step = None if torch.compiler.is_compiling() else self._decode_step
        if step is not None and plain_step and step.applies(input_ids, attention_mask, position_ids, past_key_values):
            logits = step(input_ids, position_ids, past_key_values)
            return CausalLMOutputWithPast(logits=logits, **cache_kwarg(past_key_values))
        outputs: BaseModelOutputWithPast = self.transformer(
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        if isinstance(logits_to_keep, int):
            hidden_states = hidden_states[:, -logits_to_keep:, :]  # -0: keeps every position
        else:
            hidden_states = hidden_states[:, logits_to_keep, :]
        logits = vocabulary_logits(self.lm_head, hidden_states, self.config.vocab_size)  # (batch, seq, vocab)

        loss = None
        if labels is not None:
            check_token_ids("labels", labels, self.config.vocab_size, ignore_index=-100)
            # transformers' causal-LM loss: shift by one, ignore -100, and honour num_items_in_batch (passed by
            # Trainer-style gradient accumulation) so accumulated losses average over tokens, not micro-batches.
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)

        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            **cache_kwarg(output_cache(outputs)),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


__all__ = ["GPTCustomForCausalLM", "GPTCustomModel", "GPTCustomPreTrainedModel"]
