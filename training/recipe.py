"""The optimisation recipe: AdamW parameter groups, the learning-rate schedule, and training FLOPs per token."""

from __future__ import annotations

import torch

from hf_gpt_custom.training.config import TrainConfig


def build_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on every 2-D weight (matmuls and embeddings, as nanoGPT/GPT-2), none on biases/LayerNorm."""
    parameters = [p for p in model.parameters() if p.requires_grad]  # tied weights appear once
    groups = [
        {"params": [p for p in parameters if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0},
    ]
    # The fused kernel updates every tensor in one pass (measured 47 -> 15 ms per step for 13.9M parameters on this
    # CPU, benchmarks/results/NOTES.md); it exists for CPU and CUDA parameters, the foreach path elsewhere.
    fused = all(p.device.type in ("cpu", "cuda") for p in parameters)
    return torch.optim.AdamW(groups, lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                             eps=config.adam_eps, fused=fused)


def flops_per_token(model_config, n_params: int, seq_len: int) -> float:
    """Training FLOPs per token: 6N for the weights plus 12·L·T·d for attention (PaLM appendix B, as nanoGPT).

    N excludes what is a lookup, not a matmul: the learned position table (rope and sinusoidal positions have none)
    and, when the head is untied, the input token embedding (a tied one is the head's matmul as well).
    """
    parts = model_config.parameter_breakdown()
    lookups = parts["position_embedding"] + (0 if model_config.tie_word_embeddings else parts["token_embedding"])
    n_matmul = n_params - lookups
    return 6 * n_matmul + 12 * model_config.n_layer * seq_len * model_config.n_embd


def build_scheduler(optimizer, config: TrainConfig):
    """Linear warmup over warmup_steps, then cosine down to learning_rate * min_lr_ratio at max_steps."""
    from transformers import get_cosine_with_min_lr_schedule_with_warmup

    return get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, num_warmup_steps=config.warmup_steps, num_training_steps=config.max_steps,
        min_lr_rate=config.min_lr_ratio,
    )
