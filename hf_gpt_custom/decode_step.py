"""generate()'s decoding steps without the nn.Module walk: the same ops, in the same order, on the same parameters.

A batch-1 decoding step of the 6x384 model is 25 small matmuls whose kernels take ~2 ms; calling them through
the module tree (about 70 module calls, no-op dropouts, transformers' attention dispatch and mask builder, output
classes) adds ~0.4-0.9 ms of Python per token, which is why a small model decodes far below its bandwidth. Like
PyTorch's own fast path for `nn.TransformerEncoderLayer`, `DecodeStep` runs the block arithmetic of
modeling_gpt_custom.py straight on the parameters when nothing could observe the difference:

- once per `generate` call (`supports_decode_step`): eval mode, sdpa attention, no hooks anywhere, no module replaced or
  wrapped (adapters, quantized layers, accelerate's device hooks), no attentions or hidden states requested;
- per step (`DecodeStep.applies`): one new token per row, no gradients, our preallocated KV cache, no padding, positions
  inside the context.

Anything else takes the module path. The logits are bitwise those of the module path
(tests/hf_gpt_custom/test_decode_step.py); modeling_gpt_custom.py stays the definition of the model.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers.cache_utils import DynamicCache

from .kv_cache import PreallocatedLayer
from .onednn_linear import Linear

# Module types the step reproduces exactly; the model's own classes are added by the caller.
_PLAIN_MODULES = (nn.Embedding, nn.LayerNorm, nn.Dropout, nn.ModuleList, Linear)


def supports_decode_step(model: nn.Module, model_classes: tuple[type, ...]) -> bool:
    """True when `model` (a GPTCustomForCausalLM in eval mode) is exactly the architecture `DecodeStep` computes."""
    config = model.config
    if model.training or config._attn_implementation != "sdpa":
        return False
    if config.output_attentions or config.output_hidden_states:
        return False
    if nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks:
        return False
    if len({parameter.dtype for parameter in model.parameters()}) != 1:  # the linears get inputs of their own dtype
        return False
    allowed = _PLAIN_MODULES + model_classes
    for module in model.modules():
        if (
            type(module) not in allowed
            or module._forward_hooks
            or module._forward_pre_hooks
            or "forward" in module.__dict__  # accelerate's add_hook_to_module and friends replace forward per instance
        ):
            return False
    return model.transformer.wte.max_norm is None  # max_norm would renormalise the embedding in place


def _layer_norm(module: nn.LayerNorm) -> Callable[[torch.Tensor], torch.Tensor]:
    return partial(F.layer_norm, normalized_shape=module.normalized_shape, weight=module.weight, bias=module.bias,
                   eps=module.eps)


class _Block(NamedTuple):
    """One GPTCustomBlock's parameters and kernels, in the order a step uses them."""

    ln_1: Callable
    c_attn: Callable
    heads: int
    head_dim: int
    scaling: float
    attn_proj: Callable
    ln_2: Callable
    c_fc: Callable
    activation: Callable
    mlp_proj: Callable


class DecodeStep:
    """The decoding steps of one generate() call: modules resolved and kernels chosen once, then plain calls.

    Built when the decoding loop starts (the weights cannot change inside it) and dropped when it ends.
    """

    def __init__(self, model: nn.Module):
        transformer = model.transformer
        self.n_positions = model.config.n_positions
        self.device = model.lm_head.weight.device
        self.embed_tokens, self.embed_positions = transformer.wte.forward, transformer.wpe.forward
        self.blocks = [
            _Block(
                _layer_norm(block.ln_1),
                block.attn.c_attn.frozen_forward(),
                block.attn.num_heads,
                block.attn.head_dim,
                block.attn.scaling,
                block.attn.c_proj.frozen_forward(),
                _layer_norm(block.ln_2),
                block.mlp.c_fc.frozen_forward(),
                block.mlp.activation,
                block.mlp.c_proj.frozen_forward(),
            )
            for block in transformer.h
        ]
        self.ln_f = _layer_norm(transformer.ln_f)
        self.lm_head = model.lm_head.frozen_forward()

    @staticmethod
    def uses(cache) -> bool:
        """True for the cache our generate() sets up (kv_cache.preallocate), filled by the prompt's forward."""
        return type(cache) is DynamicCache and all(
            type(layer) is PreallocatedLayer and layer.is_initialized for layer in cache.layers
        )

    def applies(self, input_ids, attention_mask, position_ids, past_key_values) -> bool:
        """True when a forward call with these arguments (and no others) is one token per row over our
        preallocated cache. A step past the context length is left to the module path, which explains the error.
        """
        if input_ids is None or input_ids.shape[1] != 1 or torch.is_grad_enabled() or not self.uses(past_key_values):
            return False
        if attention_mask is not None and not bool(attention_mask.all()):  # padding: needs the module path's mask
            return False
        if position_ids is None:
            return past_key_values.get_seq_length() < self.n_positions
        return position_ids.shape == input_ids.shape and int(position_ids.max()) < self.n_positions

    def __call__(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None, cache: DynamicCache) -> torch.Tensor:
        """Logits (batch, 1, vocab) for one new token per row, appending its keys/values to `cache`.

        Mirrors GPTCustomModel.forward, GPTCustomBlock/Attention/MLP.forward and transformers' sdpa_attention_forward
        for that case: dropout is the identity in eval mode, and one query attending to every cached position needs
        no mask (create_causal_mask returns None, and sdpa then runs with is_causal=False).
        """
        batch = input_ids.shape[0]
        if position_ids is None:
            past_length = cache.get_seq_length()
            position_ids = torch.arange(past_length, past_length + 1, device=input_ids.device)[None]
        hidden = self.embed_tokens(input_ids) + self.embed_positions(position_ids)
        for (ln_1, c_attn, heads, head_dim, scaling, attn_proj, ln_2, c_fc, activation, mlp_proj), cache_layer in zip(
            self.blocks, cache.layers
        ):
            query, key, value = c_attn(ln_1(hidden)).view(batch, 1, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
            key, value = cache_layer.update(key, value)
            attended = F.scaled_dot_product_attention(query, key, value, dropout_p=0.0, scale=scaling, is_causal=False)
            hidden = hidden + attn_proj(attended.transpose(1, 2).reshape(batch, 1, -1))
            hidden = hidden + mlp_proj(activation(c_fc(ln_2(hidden))))
        return self.lm_head(self.ln_f(hidden))
