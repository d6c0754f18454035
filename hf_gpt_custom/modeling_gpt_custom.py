"""The GPT family as a native transformers model: attention, MLPs, block, GPTCustomModel, GPTCustomForCausalLM.

Read top to bottom like nanoGPT's model.py: the block first (eager_attention_forward, GPTCustomAttention, the MLPs,
GPTCustomBlock), then loading and weight init (GPTCustomPreTrainedModel), then GPTCustomModel (embeddings, positions,
the mask, the stack of blocks) and GPTCustomForCausalLM (the LM head, the loss, generation).

- The default config is GPT-2's block. The variants (post-norm, RMSNorm, SwiGLU, sinusoidal or rotary positions, no
  biases, grouped-query attention, untied or padded head) choose their modules once in `__init__`; norms, positions,
  RoPE's rotation and repeat_kv live in block_variants.py; the checks of ids, masks and positions, and the positions
  a padding mask implies, in model_inputs.py.
- Everything transformers users expect plugs in here: the attention interface (eager = the textbook formula, sdpa,
  flash, flex), transformers' masks and Cache classes, GenerationMixin, gradient checkpointing, `_no_split_modules`
  for device_map="auto", tied embeddings, and transformers' own causal-LM loss.
- Weight names are GPT-2's, so convert_gpt2.py is a key-for-key map with one transpose (Conv1D -> nn.Linear).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# first: it refuses a transformers too old, before one of the modules below is missing there
from .transformers_compat import MIN_TRANSFORMERS  # noqa: F401
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import can_return_tuple, logging
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .adapter_folders import adapter_to_attach, load_with_adapter
from .auto_classes import AUTO_MODEL_CLASSES, CHECKPOINT_CONVERTERS, refuse_another_head, resolve
from .block_variants import (
    POSITION_MODULES,
    GPTCustomRMSNorm,
    GPTCustomSinusoidalPositions,
    apply_rotary,
    make_norm,
    repeat_kv,
)
from .causal_lm_loss import causal_lm_loss
from .checkpoint_files import one_weight_layout, read_config_dict
from .configuration_gpt_custom import GPTCustomConfig
from .errors import UserError
from .manifest import (  # checked on load, kept current on save, dropped from a repo push_to_hub replaces
    before_a_save_that_pushes, drop_hub_manifest, from_pretrained_checked, manifest_kept_current, save_options,
)
from .model_inputs import (
    check_attention_mask, check_cache_shape, check_is_tensor, check_position_ids, check_token_ids, position_ids_for,
)
from .static_decoding import decode_with_static_cache, uses_static_decoding
from .transformers_compat import (
    accepts_cache_kwarg,
    cache_kwarg,
    output_cache,
    refuse_peft_prompt_with_a_cache,
    slice_logits_to_keep,
)

logger = logging.get_logger(__name__)


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
    (batch, 1, q_len, kv_len), already combining causality with padding, or a bool one (True = attend) that the
    caller passed as it is. Keys and values may have fewer heads
    (grouped-query attention): each serves `module.num_key_value_groups` query heads. Returns the output as
    (batch, q_len, heads, head_dim) and the attention weights as (batch, heads, q_len, kv_len).
    """
    key = repeat_kv(key, module.num_key_value_groups)  # (batch, heads, kv_len, head_dim)
    value = repeat_kv(value, module.num_key_value_groups)
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling  # (batch, heads, q_len, kv_len)
    if attention_mask is not None and attention_mask.dtype == torch.bool:  # a 4-D mask the caller passed: True = attend
        # masked scores set to the dtype's minimum: added as 0/1, a bool mask would mask nothing
        scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    elif attention_mask is not None:
        # float16's minimum (the mask) plus a score below about -16 overflows to -inf: a left pad's query, masked from
        # every key, then got a NaN row, which the next layer spread to the real tokens (0 x NaN; GPT-2's eager path
        # does the same). Added in float32, as the softmax runs: the batchinvariance2 hunt.
        scores = (scores.float() if scores.dtype == torch.float16 else scores) + attention_mask
    # softmax in float32, then back to the values' dtype: in bf16/fp16 the small weights would round away (as
    # Llama's eager path does)
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value)  # (batch, heads, q_len, head_dim)
    return output.transpose(1, 2), weights


class GPTCustomAttention(nn.Module):
    """Causal self-attention with one fused q/k/v projection, as in GPT-2: multi-head, or grouped-query with
    n_kv_head < n_head (c_attn then outputs n_head query heads, then n_kv_head key and n_kv_head value heads)."""

    def __init__(self, config: GPTCustomConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx  # which slot of the KV cache this layer owns
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.n_head // config.n_kv_head  # read by transformers' sdpa integration
        # 1/√head_dim; GPT-2's scale_attn_weights=False (unscaled scores) only for checkpoints trained that way
        self.scaling = self.head_dim**-0.5 if config.scale_attn_weights else 1.0
        self.is_causal = True  # read by transformers' sdpa/flash integrations
        query_width, kv_width = config.n_head * self.head_dim, config.n_kv_head * self.head_dim
        self.split_sizes = [query_width, kv_width, kv_width]  # q, k, v in c_attn's output
        self.c_attn = nn.Linear(config.n_embd, sum(self.split_sizes), bias=config.attention_bias)
        self.c_proj = nn.Linear(query_width, config.n_embd, bias=config.attention_bias)
        self.c_proj.is_residual_projection = True  # init std / √(2·n_layer), GPT-2's (see _init_weights)
        # Never called: its rate (.p) goes to the attention function, which drops attention weights. Kept as a
        # module, as in GPT-2, so code that turns dropout off module by module (TRL's disable_dropout_in_model: m.p = 0
        # for every nn.Dropout) turns this one off too; like every layer's, the rate is fixed when the model is built.
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None,
        attention_mask: torch.Tensor | None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Output (batch, seq, n_embd) and the attention weights (None from sdpa/flash).
        `position_embeddings`: RoPE's (cos, sin) for these positions, None for learned/sinusoidal positions.
        `attention_mask`: transformers' 4-D mask, causality and padding combined (GPTCustomModel._causal_mask); None
        where the kernel's causal flag is the whole mask (e.g. sdpa without a padding mask, a cache or given positions:
        uses_sdpa_causal_flag; transformers' create_causal_mask decides for the other kernels).
        `kwargs`: the attention interface's other arguments (position_ids, which flash/flex read for packed rows)."""
        batch, seq_len, _ = hidden_states.shape
        query, key, value = self.c_attn(hidden_states).split(self.split_sizes, dim=-1)
        query = query.view(batch, seq_len, -1, self.head_dim).transpose(1, 2)  # (batch, heads, seq, head_dim)
        key = key.view(batch, seq_len, -1, self.head_dim).transpose(1, 2)  # (batch, kv_heads, seq, head_dim)
        value = value.view(batch, seq_len, -1, self.head_dim).transpose(1, 2)
        if position_embeddings is not None:  # rotated before caching: the cache holds rotated keys, as Llama's does
            query, key = apply_rotary(query, key, *position_embeddings)
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)  # (batch, kv_heads, past + seq, head_dim)

        # eager_attention_forward above, or sdpa (the default), flash or flex by config._attn_implementation: the same
        # shapes in and out
        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attn_dropout.p if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        output = output.reshape(batch, seq_len, -1)  # (batch, seq, heads · head_dim): heads side by side again
        return self.resid_dropout(self.c_proj(output)), weights


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The MLP's nonlinearity by transformers' name. GPT-2's "gelu_new" is the tanh approximation
    0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), which PyTorch computes as one fused op (approximate="tanh")."""
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return functools.partial(F.gelu, approximate="tanh")  # a partial, not a lambda: torch.save(model) pickles it
    return {"gelu": F.gelu, "relu": F.relu, "silu": F.silu}[name]


class GPTCustomMLP(nn.Module):
    """n_embd -> inner_dim -> n_embd with `activation_function` (GELU in GPT-1/2/3, ReLU in the original Transformer),
    the position-wise feed-forward network. inner_dim: n_inner, else 4·n_embd."""

    def __init__(self, config: GPTCustomConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.inner_dim, bias=config.mlp_bias)
        self.c_proj = nn.Linear(config.inner_dim, config.n_embd, bias=config.mlp_bias)
        self.c_proj.is_residual_projection = True  # init std / √(2·n_layer), GPT-2's (see _init_weights)
        self.act = activation(config.activation_function)
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(hidden_states))))


class GPTCustomSwiGLU(nn.Module):
    """LLaMA's feed-forward (Shazeer 2020): c_proj(silu(c_gate(x)) * c_fc(x)), three matrices. The names map to
    LlamaMLP's as c_fc = up_proj, c_gate = gate_proj, c_proj = down_proj. inner_dim: n_inner, else LLaMA's
    2/3·4·n_embd rounded up to multiple_of."""

    def __init__(self, config: GPTCustomConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.inner_dim, bias=config.mlp_bias)
        self.c_gate = nn.Linear(config.n_embd, config.inner_dim, bias=config.mlp_bias)
        self.c_proj = nn.Linear(config.inner_dim, config.n_embd, bias=config.mlp_bias)
        self.c_proj.is_residual_projection = True  # init std / √(2·n_layer), GPT-2's (see _init_weights)
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.silu(self.c_gate(hidden_states)) * self.c_fc(hidden_states)))


class GPTCustomBlock(GradientCheckpointingLayer):
    """Transformer block: attention then MLP, each with a residual connection and a norm (LayerNorm or RMSNorm).
    GradientCheckpointingLayer: model.gradient_checkpointing_enable() recomputes the block in the backward pass."""

    def __init__(self, config: GPTCustomConfig, layer_idx: int):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.ln_1 = make_norm(config)
        self.attn = GPTCustomAttention(config, layer_idx)
        self.ln_2 = make_norm(config)
        self.mlp = GPTCustomSwiGLU(config) if config.mlp_type == "swiglu" else GPTCustomMLP(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> torch.Tensor:
        # The attention weights (its second output) reach output_attentions through transformers' capture_outputs
        # hook on GPTCustomAttention (_can_record_outputs), so the block drops them.
        if self.pre_norm:
            # GPT-2/3 and LLaMA: x + attn(ln_1(x)), then x + mlp(ln_2(x)); the model ends with ln_f.
            attn_output, _ = self.attn(self.ln_1(hidden_states), position_embeddings, attention_mask,
                                       past_key_values, **kwargs)
            hidden_states = hidden_states + attn_output
            return hidden_states + self.mlp(self.ln_2(hidden_states))
        # GPT-1 and the Transformer's Add & Norm: ln_1(x + attn(x)), then ln_2(x + mlp(x)); no final norm.
        attn_output, _ = self.attn(hidden_states, position_embeddings, attention_mask, past_key_values, **kwargs)
        hidden_states = self.ln_1(hidden_states + attn_output)
        return self.ln_2(hidden_states + self.mlp(hidden_states))


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
        """GPT-2 initialisation: N(0, initializer_range) for weights, zeros for biases, norms at identity; the
        sinusoid table is recomputed (from_pretrained builds the model on the meta device, buffers included)."""
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
        old_vocab_size = self.config.vocab_size
        vocab_size = old_vocab_size if new_num_tokens is None else new_num_tokens
        embeddings = super().resize_token_embeddings(vocab_size, multiple, mean_resizing)
        self.config.vocab_size = vocab_size
        if vocab_size > old_vocab_size:
            self._init_rows_of_new_tokens(old_vocab_size, vocab_size, mean_resizing)
        return embeddings

    @torch.no_grad()
    def _init_rows_of_new_tokens(self, old_vocab_size: int, new_vocab_size: int, mean_resizing: bool) -> None:
        """New ids of a padded vocabulary take over padding rows, which transformers leaves as they were (never
        trained) or, past the old padding, fills from a mean over padding rows too. Give them what an unpadded
        model's new rows get: the mean of the real rows (transformers samples within 1e-9 of it) or a fresh init."""
        matrices = [self.get_input_embeddings().weight]
        head = self.get_output_embeddings()
        if head is not None and head.weight is not matrices[0]:  # an untied LM head has rows of its own
            matrices.append(head.weight)
        for weight in matrices:
            new_rows = weight[old_vocab_size:new_vocab_size]
            if mean_resizing:
                new_rows.copy_(weight[:old_vocab_size].float().mean(0).to(weight.dtype).expand_as(new_rows))
            else:
                init.normal_(new_rows, mean=0.0, std=self.config.initializer_range)

    def save_pretrained(self, save_directory, *args, **kwargs):
        # transformers records only the saved class in auto_map; list every Auto class so that AutoModel, the causal
        # LM and every task head resolve from the folder with trust_remote_code=True (auto_classes.py ships their code).
        self.config.auto_map = {
            **(getattr(self.config, "auto_map", None) or {}),
            "AutoConfig": "configuration_gpt_custom.GPTCustomConfig",
            **AUTO_MODEL_CLASSES,
        }
        options = save_options(PreTrainedModel.save_pretrained, self, save_directory, *args, **kwargs)
        if options.get("push_to_hub") and options.get("is_main_process", True):
            before_a_save_that_pushes(save_directory, options.get("token"), kwargs)
        # saved into an export or final/: its manifest follows, after the stale weight layout is gone (the main
        # process's save only: another rank writes nothing)
        layout = one_weight_layout(save_directory, options.get("variant")) if options.get("is_main_process", True) \
            else contextlib.nullcontext()
        with manifest_kept_current(save_directory), layout:
            return super().save_pretrained(save_directory, *args, **kwargs)

    def push_to_hub(self, repo_id, *args, **kwargs):
        drop_hub_manifest(repo_id, token=kwargs.get("token"), revision=kwargs.get("revision"),
                          create_pr=kwargs.get("create_pr", False))
        return super().push_to_hub(repo_id, *args, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """Load our checkpoint, or convert a transformers GPT-2, OpenAI GPT or Llama checkpoint on the fly. A folder
        holding another task head than `cls` is refused by name (transformers would drop its head). A PEFT adapter
        transformers would attach is attached to the base loaded so (adapter_folders.py)."""
        if (adapter := adapter_to_attach(pretrained_model_name_or_path, kwargs)) is not None:
            return load_with_adapter(cls.from_pretrained, pretrained_model_name_or_path, adapter, *model_args, **kwargs)
        saved = None if model_args else read_config_dict(pretrained_model_name_or_path, **kwargs)
        converter = CHECKPOINT_CONVERTERS.get((saved or {}).get("model_type"))
        if converter is not None:
            return resolve(converter)(pretrained_model_name_or_path, cls, **kwargs)
        model_type = (saved or {}).get("model_type")
        if model_type not in (None, cls.config_class.model_type) and "config" not in kwargs:
            # transformers would load it into our layout wherever names and shapes happen to match: a gpt_bigcode
            # folder (heads interleaved in c_attn) loaded with no error and other logits
            raise UserError(
                f"{pretrained_model_name_or_path} holds a {model_type!r} model (config.json's model_type); "
                f"{cls.__name__} loads {cls.config_class.model_type!r} folders and converts "
                f"{', '.join(sorted(CHECKPOINT_CONVERTERS))}; load it with its own class "
                "(AutoModelForCausalLM.from_pretrained)"
            )
        refuse_another_head(cls.__name__, pretrained_model_name_or_path, (saved or {}).get("architectures"))
        refuse_another_vocabulary(pretrained_model_name_or_path, saved, kwargs)
        try:
            return from_pretrained_checked(super().from_pretrained, pretrained_model_name_or_path, *model_args, **kwargs)
        except Exception as err:
            # A truncated or corrupt weights file surfaces as a bare SafetensorError deep inside loading.
            if type(err).__name__ != "SafetensorError":
                raise
            raise UserError(
                f"cannot read the safetensors weights in {pretrained_model_name_or_path}: {err}. A weights file "
                "(model.safetensors or a shard) is truncated or corrupt; save or download it again."
            ) from err


def refuse_another_vocabulary(path, saved: dict | None, kwargs: dict) -> None:
    """A UserError when from_pretrained is asked for another vocab_size than the folder was saved with (a
    `vocab_size=` keyword, or a config given with another one). A padded folder (pad_vocab_size_to_multiple_of) has
    the same number of rows either way, so its never-trained padding rows would silently become the new tokens (or
    ids past the smaller size silently drop); an unpadded one fails on the rows' shape. resize_token_embeddings
    is the way: it starts new rows at the mean of the trained ones."""
    from transformers import PretrainedConfig

    given_config = kwargs.get("config")
    if isinstance(given_config, PretrainedConfig):
        requested = given_config.vocab_size
    else:  # a config given by its folder or file takes the keyword's vocab_size too, as transformers reads it
        from_path = None
        if isinstance(given_config, (str, os.PathLike)) and os.path.isfile(given_config):
            try:
                from_path = json.loads(Path(given_config).read_text(encoding="utf-8"))
            except json.JSONDecodeError as err:
                raise UserError(f"config={given_config} is not valid JSON ({err}); give a config.json, its folder, or "
                                "a config object") from err
        elif isinstance(given_config, (str, os.PathLike)):  # a folder or a Hub id, read as the model's files are
            from_path = read_config_dict(given_config, **kwargs)
        requested = kwargs.get("vocab_size", (from_path or {}).get("vocab_size"))
    recorded = (saved or {}).get("vocab_size")
    if requested is None or recorded is None or requested == recorded:
        return
    raise UserError(
        f"{path} was saved with vocab_size={recorded}, not {requested}: its weights hold rows for {recorded} tokens, "
        f"so the other ids would get untrained rows or be dropped; load it as saved, then call "
        f"model.resize_token_embeddings({requested}) (new rows start at the mean of the trained ones)"
    )


def uses_sdpa_causal_flag(
    config: GPTCustomConfig,
    attention_mask: torch.Tensor | None,
    past_key_values: Cache | None,
    given_position_ids: torch.Tensor | None,
) -> bool:
    """True when attention needs no mask tensor: sdpa, no padding mask, no cache holding anything, no caller positions
    (which can mark packed sequences) — a training step, an eval forward. Then SDPA's `is_causal=True` is the mask.

    transformers' create_causal_mask returns no mask in this case too, except under torch.compile before torch 2.14:
    there dynamo turned its `torch.compiler.is_exporting()` check into a constant True, so the compiled step built a
    (batch, 1, seq, seq) mask and SDPA ran its masked, non-causal kernels — on an H200 (torch 2.11) the attention's
    backward took 2.3x as long and the compiled step ran at 0.88x nanoGPT's speed (benchmarks/results/gpu_probe.json).
    """
    return (
        config._attn_implementation == "sdpa"
        and attention_mask is None
        and past_key_values is None
        and given_position_ids is None
    )


class GPTCustomModel(GPTCustomPreTrainedModel):
    """The decoder stack: token embeddings and positions, n_layer blocks, final norm (pre-norm blocks only).
    Returns hidden states."""

    def __init__(self, config: GPTCustomConfig):
        super().__init__(config)
        config.check_architecture()  # again: the config may have been edited since it was built (config.n_head = 8)
        self.wte = nn.Embedding(config.padded_vocab_size, config.n_embd)
        # Positions by config.position_embedding_type: a learned table (GPT-2), a fixed sinusoid (the Transformer) or
        # rotary angles that every attention layer applies to its queries and keys (LLaMA). See block_variants.py.
        self.wpe = POSITION_MODULES[config.position_embedding_type](config)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([GPTCustomBlock(config, layer_idx) for layer_idx in range(config.n_layer)])
        # Post-norm blocks already end in a norm (GPT-1 has no final LayerNorm); Identity has no weights.
        self.ln_f = make_norm(config) if config.norm_position == "pre" else nn.Identity()
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def set_input_embeddings(self, new_embeddings: nn.Embedding) -> None:
        self.wte = new_embeddings

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
        token_type_ids: torch.LongTensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """Hidden states after ln_f; `output_hidden_states` (True, or indices such as [0, 2, -1]) and
        `output_attentions` are collected by transformers' capture_outputs hooks (`_can_record_outputs`).

        Without `position_ids` each row's positions count its real tokens (`position_ids_for`), so a left-padded row
        gives the logits it gives alone, for every position type. transformers' GPT-2 numbers positions 0..n-1
        whatever the padding.
        """
        self._refuse_what_is_not_supported(input_ids, inputs_embeds, attention_mask, kwargs)
        inputs_embeds = self._embed(input_ids, inputs_embeds, token_type_ids)  # (batch, seq, n_embd)
        batch, seq_len = inputs_embeds.shape[:2]
        use_cache, past_key_values = self._cache_for_this_call(use_cache, past_key_values, batch)
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        check_attention_mask(attention_mask, batch, past_length, seq_len,  # also when position_ids are given
                             static_cache=getattr(past_key_values, "is_compileable", False))
        positions_given = position_ids is not None
        position_ids = self._positions(position_ids, attention_mask, past_key_values, past_length, inputs_embeds)
        causal_mask = self._causal_mask(attention_mask, past_key_values, past_length,
                                        position_ids if positions_given else None, inputs_embeds)
        kwargs.pop("output_hidden_states", None)  # collected by capture_outputs' hooks
        self._warn_if_attentions_cannot_be_returned(kwargs.pop("output_attentions", None))

        hidden_states, position_embeddings = self.wpe(inputs_embeds, position_ids)  # RoPE: (cos, sin) for attention
        hidden_states = self.drop(hidden_states)
        for block in self.h:
            hidden_states = block(hidden_states, position_embeddings=position_embeddings, attention_mask=causal_mask,
                                  past_key_values=past_key_values, position_ids=position_ids, **kwargs)
        hidden_states = self.ln_f(hidden_states)
        return BaseModelOutputWithPast(
            last_hidden_state=hidden_states, **cache_kwarg(past_key_values if use_cache else None)
        )

    # The steps of forward, in its order: each checks its own inputs before torch would fail on them opaquely.

    def _refuse_what_is_not_supported(self, input_ids, inputs_embeds, attention_mask, kwargs) -> None:
        if (input_ids is None) == (inputs_embeds is None):
            raise UserError("pass exactly one of input_ids or inputs_embeds")
        if kwargs.get("is_causal") is False or getattr(self.config, "is_causal", None) is False:
            # transformers' switch to bidirectional attention (LLM2Vec-style embeddings): GPT-2 and Llama honour it;
            # here the sdpa causal flag, the eager mask and the cache all assume causal attention, and honouring it
            # on some paths only gave a padded batch other numbers than the same rows unpadded
            raise UserError("is_causal=False (bidirectional attention) is not supported: GPTCustom attends causally "
                            "on every path; drop is_causal from the call and the config")
        if (self.config._attn_implementation == "flex_attention" and isinstance(attention_mask, torch.Tensor)
                and attention_mask.dim() == 4):
            # transformers' flex score_mod indexes the tensor at flex's padded block sizes, past its end: on a CPU
            # the process aborted on a corrupted heap (LlamaForCausalLM too), and a bool mask would be added as 0/1
            raise UserError("a 4-D attention_mask tensor is not supported with attn_implementation='flex_attention'; "
                            "pass a 2-D padding mask (or a flex BlockMask), or use attn_implementation='sdpa'")
        if kwargs.get("encoder_hidden_states") is not None:  # GPT-2 refuses it too, without cross-attention layers
            raise UserError("encoder_hidden_states was given, but GPTCustom has no cross-attention layers: it would be "
                            "ignored; drop it")

    def _embed(self, input_ids, inputs_embeds, token_type_ids) -> torch.Tensor:
        """The token embeddings (plus GPT-1's and GPT-2's segment embeddings), their ids and shapes checked."""
        if inputs_embeds is None:
            check_token_ids("input_ids", input_ids, self.config.vocab_size, table_rows=self.config.padded_vocab_size)
            inputs_embeds = self.wte(input_ids)
        elif not isinstance(inputs_embeds, torch.Tensor) or not inputs_embeds.dtype.is_floating_point:
            raise UserError(f"inputs_embeds must be a floating-point tensor (batch, seq_len, n_embd), got "
                            f"{getattr(inputs_embeds, 'dtype', type(inputs_embeds).__name__)}")
        elif inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != self.config.n_embd or not inputs_embeds.numel():
            raise UserError(f"inputs_embeds must be (batch, seq_len, n_embd={self.config.n_embd}) with at least one "
                            f"token per row, got shape {tuple(inputs_embeds.shape)}; for one sequence add the batch "
                            "dimension")
        if token_type_ids is None:
            return inputs_embeds
        batch, seq_len = inputs_embeds.shape[:2]
        if token_type_ids.dim() == 1:  # one row of types for every row, as GPT-2 takes them
            token_type_ids = token_type_ids.unsqueeze(0).expand(batch, -1)
        if tuple(token_type_ids.shape) != (batch, seq_len):
            raise UserError(f"token_type_ids has shape {tuple(token_type_ids.shape)} but the input has {batch} "
                            f"row(s) of {seq_len} tokens; give one type id per input token")
        check_token_ids("token_type_ids", token_type_ids, self.config.vocab_size,
                        table_rows=self.config.padded_vocab_size)
        return inputs_embeds + self.wte(token_type_ids)  # GPT-2's and GPT-1's segments: rows of the token table

    def _cache_for_this_call(self, use_cache: bool | None, past_key_values: Cache | None, batch: int):
        """(use_cache, past_key_values) as this call uses them: a new DynamicCache when caching starts here."""
        # Caching only helps decoding; during training it would hold every layer's keys and values for nothing.
        if use_cache is None:
            use_cache = self.config.use_cache and not self.training
        if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
            # The backward pass recomputes each block, which would write its keys and values into the cache twice.
            if past_key_values is not None and past_key_values.get_seq_length() > 0:
                raise UserError("past_key_values holds keys and values, but gradient checkpointing recomputes each "
                                "block and would write into it twice; call model.gradient_checkpointing_disable() to "
                                "train with a cache (e.g. a prefix), or pass no past_key_values")
            if use_cache:
                logger.warning_once("use_cache=True is incompatible with gradient checkpointing in training: setting "
                                    "use_cache=False (transformers' behaviour)")
            return False, None
        if use_cache and past_key_values is None:
            return use_cache, DynamicCache(config=self.config)
        if past_key_values is not None:
            check_cache_shape(past_key_values, self.config.n_kv_head, self.config.head_dim, batch)
        return use_cache, past_key_values

    def _positions(self, position_ids, attention_mask, past_key_values, past_length, inputs_embeds) -> torch.Tensor:
        """The given positions, checked, or each row's count of its real tokens (`position_ids_for`)."""
        batch, seq_len = inputs_embeds.shape[:2]
        given = position_ids is not None
        if given and position_ids.dim() == 1:  # one row of positions for every row, as GPT-2 takes them
            position_ids = position_ids.unsqueeze(0)
        if not given:
            position_ids = position_ids_for(attention_mask, past_length, seq_len, self.config.n_positions,
                                            inputs_embeds.device)
        columns = past_length + seq_len  # no position derived from a mask passes the last column
        if isinstance(past_length, torch.Tensor):  # a static cache counts on the device; the host knows its length
            columns = past_key_values.layers[0].get_max_length()
        check_position_ids(position_ids, self.config.n_positions, batch, seq_len, columns=columns, given=given)
        return position_ids

    def _causal_mask(self, attention_mask, past_key_values, past_length, given_position_ids, inputs_embeds):
        """The mask the attention layers get: None where sdpa's is_causal flag is the whole mask, else transformers'."""
        # An empty dynamic cache (a forward in eval mode, a prefill) masks exactly as no cache; shown as none, the
        # mask builder also honours packed positions there, so eval mode gives the logits train mode gives.
        mask_cache = None if isinstance(past_key_values, DynamicCache) and past_length == 0 else past_key_values
        if uses_sdpa_causal_flag(self.config, attention_mask, mask_cache, given_position_ids):
            return None  # sdpa then runs is_causal=True: the flash/cuDNN kernels, no (seq x seq) mask
        # transformers' mask builder reads given position_ids for packed sequences (positions restarting at 0 inside
        # a row, as DataCollatorWithFlattening makes them): a host read, done only for positions the caller passed.
        return create_causal_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            **cache_kwarg(mask_cache),
            position_ids=given_position_ids,
        )

    def _warn_if_attentions_cannot_be_returned(self, output_attentions: bool | None) -> None:
        if output_attentions is None:
            output_attentions = self.config.output_attentions
        if output_attentions and self.config._attn_implementation != "eager":
            # transformers' behaviour (GPT-2 too): go on and return no attention weights, with one warning.
            logger.warning_once(
                f"output_attentions=True returns no attention weights with attn_implementation="
                f"{self.config._attn_implementation!r}; load the model with attn_implementation='eager' or call "
                "model.set_attn_implementation('eager') to get them"
            )


def _unscored_after_padding(labels: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """`labels` with -100 where the predicting position is padding: under left padding the last pad column
    "predicts" each row's first token, which a row alone never scores, so the batch's loss moved with the pad id and
    the amount of padding (4.910 to 4.991 against 5.035 for the rows alone; found by the batch-invariance hunt).
    transformers' GPT-2 scores that prediction; a DataCollatorForLanguageModeling batch from our tokenizers, which
    pad on the left for generation, then trained on it. A mask over cached and new tokens (a cache, or PEFT's prefix
    tuning, which adds its virtual tokens' columns in front) is read over its last columns, the new tokens'.
    No mask, a 4-D one, or no padding: as given. Not applied under Trainer's num_items_in_batch (see forward)."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2 \
            or attention_mask.shape[0] != labels.shape[0] or attention_mask.shape[1] < labels.shape[1]:
        return labels
    new_tokens = attention_mask[:, attention_mask.shape[1] - labels.shape[1]:]
    from_padding = torch.zeros_like(labels, dtype=torch.bool)
    from_padding[:, 1:] = new_tokens[:, :-1] == 0
    return labels.masked_fill(from_padding, -100)


class GPTCustomForCausalLM(GPTCustomPreTrainedModel, GenerationMixin):
    """GPTCustomModel plus the language-modelling head: tied to the token embedding (stored once on save) unless
    config.tie_word_embeddings is False (LLaMA). The loss is transformers' ForCausalLMLoss (`self.loss_function`)."""

    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, config: GPTCustomConfig):
        super().__init__(config)
        self.transformer = GPTCustomModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.padded_vocab_size, bias=False)
        self.post_init()  # ties lm_head to wte when tie_word_embeddings; without it the head stays silently untied

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
        token_type_ids: torch.LongTensor | None = None,
        return_logits: bool = True,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """`labels` are the input ids themselves (-100 to ignore a position); the model shifts them.

        `logits_to_keep=k` computes logits for the last k positions only (generation asks for 1, which skips a
        (batch, seq, vocab) matmul over the whole prompt); 0 keeps all. A tensor is read as transformers reads it
        (slice_logits_to_keep): 1-D, those positions of every row; 2-D integer (batch, k), each row's own; 2-D bool
        (batch, seq), the True positions, flattened to (count, vocab).

        `return_logits=False` (with `labels`) returns the loss without the logits (`logits` is None), for a training
        step that reads only the loss: under torch.compile every tensor the compiled forward returns is given a
        gradient in backward, and autograd makes a zero (batch, seq, vocab) one for logits nobody reads
        (pytorch/pytorch#131794), a pass over the largest tensor of the step. The project's training loop passes it.
        As with any field that is None, a tuple output (return_dict=False) then has no logits entry: (loss, ...).
        """
        if not return_logits and labels is None:
            raise UserError("return_logits=False returns only the loss, which needs labels; pass labels=input_ids, "
                            "or keep return_logits=True")
        outputs: BaseModelOutputWithPast = self.transformer(
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            token_type_ids=token_type_ids,
            return_dict=True,  # the body's output by name; this forward's own return_dict is can_return_tuple's
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        if labels is not None:
            check_is_tensor("labels", labels)  # before its shape is read
        if labels is not None and labels.shape != hidden_states.shape[:2]:
            raise UserError(
                f"labels has shape {tuple(labels.shape)} but the input has {tuple(hidden_states.shape[:2])} (batch, "
                "seq_len); labels are the input ids themselves, -100 where a position is not scored (the model "
                "shifts them)"
            )
        hidden_states = slice_logits_to_keep(hidden_states, logits_to_keep)  # transformers' reading, as Llama's
        logits = self.lm_head(hidden_states)  # (batch, seq, padded_vocab_size)
        if self.config.padded_vocab_size != self.config.vocab_size:
            # pad_vocab_size_to_multiple_of gave the head padded rows (nanoGPT's 50257 -> 50304 keeps the matmul on
            # efficient sizes); their columns are cut, so `logits.shape[-1] == vocab_size` as every consumer assumes
            # (the loss, generate's processors, lm-eval) and a padded id is never sampled.
            logits = logits[..., : self.config.vocab_size].contiguous()

        loss = None
        if labels is not None:
            check_token_ids("labels", labels, self.config.vocab_size, ignore_index=-100)
            if labels.dtype != torch.long:  # input_ids may be int32; the loss pads labels with -100 and takes int64
                raise UserError(f"labels must hold integer token ids as torch.long, got dtype {labels.dtype}; "
                                "convert with .long()")
            if kwargs.get("num_items_in_batch") is None:
                # With num_items_in_batch (transformers' Trainer) the caller has counted the labels it gave as the
                # loss's denominator, before the model ran, over every micro-batch: leaving one out here made the
                # loss, eval_loss and gradient of a left-padded batch smaller by that share (4% in the Trainer hunt).
                # Then every counted label is scored, as in transformers' models.
                labels = _unscored_after_padding(labels, attention_mask)
            # transformers' causal-LM loss: shift by one, ignore -100, and honour num_items_in_batch (gradient
            # accumulation) so accumulated losses average over tokens, not micro-batches.
            # On CUDA a compiled copy of it (causal_lm_loss.py): the same float32 arithmetic, fused.
            loss = causal_lm_loss(self.loss_function, logits, labels, vocab_size=self.config.vocab_size, **kwargs)

        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits if return_logits else None,
            **cache_kwarg(output_cache(outputs)),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )

    def adjust_generation_fn(self, generation_config, from_auto_class, from_pipeline, pretrained_model_name_or_path,
                             *args, subfolder: str = "", **kwargs):
        """from_pretrained's reading of generation_config.json, from a local folder's subfolder itself: transformers
        5.24's GenerationConfig.from_pretrained(folder, subfolder=...) reads an absolute folder's own file when it
        has one, so a model saved in a subfolder of another stopped at the other model's eos."""
        if subfolder and isinstance(pretrained_model_name_or_path, (str, os.PathLike)) \
                and os.path.isdir(os.path.join(pretrained_model_name_or_path, subfolder)):
            pretrained_model_name_or_path, subfolder = os.path.join(pretrained_model_name_or_path, subfolder), ""
        return super().adjust_generation_fn(generation_config, from_auto_class, from_pipeline,
                                            pretrained_model_name_or_path, *args, subfolder=subfolder, **kwargs)

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        """transformers' cache set-up, after refusing a cache PEFT's prompt learning cannot see (the reason:
        transformers_compat.refuse_peft_prompt_with_a_cache). generate() calls it once, with or without a cache."""
        refuse_peft_prompt_with_a_cache(self, generation_config)
        return super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)

    def _get_candidate_generator(self, generation_config, *args, **kwargs):
        """transformers' candidate generator, prompt lookup's capped at max_length - 1 tokens as the assistant
        model's drafts are: it proposed up to prompt_lookup_num_tokens past max_length, so a call that fits the
        context (prompt + max_new_tokens <= n_positions + 1) was refused past the last position (GPT-2 failed with an
        IndexError; the genparity3 hunt). Its tokens stay greedy's: candidates are only proposals."""
        from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

        generator = super()._get_candidate_generator(generation_config, *args, **kwargs)
        if isinstance(generator, PromptLookupCandidateGenerator):
            propose = generator.get_candidates

            def within_max_length(input_ids, *more, **options):
                candidates, logits = propose(input_ids, *more, **options)
                return candidates[:, :max(generator.max_length - 1, input_ids.shape[1])], logits

            generator.get_candidates = within_max_length
        return generator

    def _expand_inputs_for_generation(self, expand_size=1, is_encoder_decoder=False, input_ids=None, **model_kwargs):
        """transformers' expansion for beams and num_return_sequences, after giving one row of `position_ids` (shape
        (seq_len,) or (1, seq_len), which forward takes for every row, as GPT-2 does) a row per input row: expanded
        as given, (seq_len,) became each position repeated ([0, 0, 1, 1, ...]), read as packed documents, and the
        tokens were silently other than without positions (Llama refuses the call; the genparity3 hunt)."""
        positions = model_kwargs.get("position_ids")
        if (expand_size > 1 and isinstance(positions, torch.Tensor) and input_ids is not None
                and positions.dim() <= 2 and (positions.dim() == 1 or positions.shape[0] == 1)):
            model_kwargs["position_ids"] = positions.reshape(1, -1).expand(input_ids.shape[0], -1)
        return super()._expand_inputs_for_generation(expand_size, is_encoder_decoder, input_ids, **model_kwargs)

    def _sample(self, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False,
                streamer=None, **model_kwargs):
        """generate()'s greedy and sampling loop: with a static cache, static_decoding.py's loop (the same tokens with
        less host work per token; on a GPU the host then keeps ahead of the device); otherwise transformers' own."""
        if uses_static_decoding(self, input_ids, stopping_criteria, generation_config, model_kwargs, synced_gpus,
                                streamer):
            return decode_with_static_cache(self, input_ids, logits_processor, stopping_criteria, generation_config,
                                            model_kwargs)
        return super()._sample(input_ids, logits_processor, stopping_criteria, generation_config,
                               synced_gpus=synced_gpus, streamer=streamer, **model_kwargs)


def _name_as_a_causal_lm() -> None:
    """Put GPTCustomForCausalLM in transformers' table of causal-LM class names. Trainer reads that table by class
    name (trainer.py, compute_loss) to shift the labels for `label_smoothing_factor`; `AutoModelForCausalLM.register`
    does not add to it, so a label-smoothed Trainer scored each position's logits against its own input token and
    trained the model to copy it. Here, at import, so that the folder's remote code (without this package) gets it too."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.setdefault(GPTCustomConfig.model_type, GPTCustomForCausalLM.__name__)


_name_as_a_causal_lm()

__all__ = ["GPTCustomForCausalLM", "GPTCustomModel", "GPTCustomPreTrainedModel"]
