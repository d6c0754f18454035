"""generate()'s decoding steps without the nn.Module walk, on the block methods the modules themselves call.

A batch-1 decoding step of the 6x384 model is 25 small matmuls whose kernels take ~2 ms; going through the full
module tree (transformers' mask builder, output capturing, output classes, per-layer module dispatch) adds Python
per token. Like PyTorch's own fast path for `nn.TransformerEncoderLayer`, `DecodeStep` skips that walk when nothing
could observe the difference — but it does not restate the arithmetic: it calls GPTCustomModel.embed,
GPTCustomBlock.residual_step, GPTCustomAttention.attend, the MLP's feed_forward and vocabulary_logits
(modeling_gpt_custom.py), passing the linear kernels chosen once for the loop (onednn_linear.decoding_linear: oneDNN
on a packed weight where it measured faster on this machine, else F.linear). A change to the block therefore reaches
generation at once, and so does every block variant of GPTCustomConfig (post-norm, RMSNorm, SwiGLU, sinusoidal and
rotary positions, no biases, grouped-query attention, untied or padded head): they are modules and functions the
step calls like the module path does, so it supports them all rather than stepping aside for any.

- once per `generate` call (`supports_decode_step`): eval mode, sdpa attention, no hooks anywhere except transformers'
  own (inactive) output-capturing hooks, no module replaced or wrapped (adapters, quantized layers, accelerate's device
  hooks), no attentions or hidden states requested;
- per step (`DecodeStep.applies`): one new token per row, no gradients, our preallocated KV cache, no padding, positions
  inside the context.

Anything else takes the module path. With F.linear kernels the logits are bitwise those of the module path; with
oneDNN's, they differ by summation order only (tests/hf_gpt_custom/test_decode_step.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import nn
from transformers.cache_utils import DynamicCache
from transformers.utils import output_capturing

from .block_variants import vocabulary_logits
from .kv_cache import PreallocatedLayer
from .onednn_linear import decoding_linear

# Module types the step reproduces exactly (type-exact: a subclass may change forward); the model's own classes are
# added by the caller.
_PLAIN_MODULES = (nn.Embedding, nn.LayerNorm, nn.Dropout, nn.ModuleList, nn.Linear, nn.Identity)


def _is_output_capturing_hook(hook: Callable) -> bool:
    # transformers' capture_outputs installs these once and for good; they record only while an output is requested,
    # which a decoding step never does.
    return getattr(hook, "__module__", None) == output_capturing.__name__


def _has_foreign_hooks(module: nn.Module) -> bool:
    if module._forward_pre_hooks:
        return True
    return any(not _is_output_capturing_hook(hook) for hook in module._forward_hooks.values())


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
            or _has_foreign_hooks(module)
            or "forward" in module.__dict__  # accelerate's add_hook_to_module and friends replace forward per instance
        ):
            return False
    return model.transformer.wte.max_norm is None  # max_norm would renormalise the embedding in place


def _with_loop_kernels(method: Callable, module: nn.Module, rows: int) -> Callable:
    """`method` with each of `module`'s Linear children passed in by name (attend(c_attn=, c_proj=),
    feed_forward(c_fc=, c_proj=[, c_gate=])) as the kernel chosen for this loop."""
    linears = ((name, child) for name, child in module.named_children() if type(child) is nn.Linear)
    kernels = {name: decoding_linear(child, rows) for name, child in linears}
    return partial(method, **kernels)


class DecodeStep:
    """The decoding steps of one generate() call: kernels chosen once per batch size, then plain calls.

    Built when the decoding loop starts (the weights cannot change inside it) and dropped when it ends, with any
    packed weight copies.
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self.n_positions = model.config.n_positions
        self.device = model.lm_head.weight.device
        self._steps: dict[int, tuple[list, Callable]] = {}  # rows -> (block steps, lm_head kernel)

    def _kernels_for(self, rows: int) -> tuple[list, Callable]:
        if rows not in self._steps:
            blocks = []
            for block in self.model.transformer.h:
                attention = _with_loop_kernels(block.attn.attend, block.attn, rows)
                feed_forward = _with_loop_kernels(block.mlp.feed_forward, block.mlp, rows)
                blocks.append(partial(block.residual_step, attention=attention, feed_forward=feed_forward))
            self._steps[rows] = blocks, decoding_linear(self.model.lm_head, rows)
        return self._steps[rows]

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

        GPTCustomModel.forward for that case: one query attending to every cached position needs no mask
        (create_causal_mask returns None, and sdpa then runs with is_causal=False).
        """
        transformer = self.model.transformer
        blocks, lm_head = self._kernels_for(input_ids.shape[0])
        if position_ids is None:
            past_length = cache.get_seq_length()
            position_ids = torch.arange(past_length, past_length + 1, device=input_ids.device)[None]
        hidden, position_embeddings = transformer.embed(transformer.wte(input_ids), position_ids)
        for residual_step in blocks:
            hidden = residual_step(hidden, attention_mask=None, past_key_values=cache,
                                   position_embeddings=position_embeddings)
        return vocabulary_logits(lm_head, transformer.ln_f(hidden), self.model.config.vocab_size)
