"""GPTCustomConfig: the architecture of a GPT-2 family model, its presets and its parameter count.

Field names are GPT-2's (`n_embd`, `n_layer`, ...) because checkpoints use them; `attribute_map` exposes the generic
names (`hidden_size`, ...) that generation and other libraries read. Only architecture lives here: training
settings are in training/config.py. This module imports nothing but transformers: it ships as remote code.
"""

from __future__ import annotations

from transformers import PretrainedConfig
from .errors import UserError, did_you_mean

# GELU variants by transformers' names. "gelu_new" is GPT-2's tanh approximation; we compute it with PyTorch's fused
# kernel (same formula, one op instead of five). "gelu" is the exact erf form.
ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu", "relu", "silu")

# Sizes only; every preset uses this project's pre-LayerNorm GPT-2 block. Constructing one allocates no weights.
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
    # GPT-1 (Radford et al. 2018): 12 layers, 768 wide, 12 heads, 3072 inner, 40,000 BPE vocabulary, 512 context.
    # (GPT-1 itself was post-LayerNorm; the preset gives its sizes in our pre-LN block.)
    "gpt1": {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_inner": 3072, "vocab_size": 40000, "n_positions": 512,
             "activation_function": "gelu"},
}


def _check_positive(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UserError(f"{name}={value!r} must be a positive integer")


class GPTCustomConfig(PretrainedConfig):
    """Configuration of a GPT-2 family decoder. Defaults are GPT-2 small (124M)."""

    model_type = "gpt_custom"
    keys_to_ignore_at_inference = ["past_key_values"]
    attribute_map = {
        "hidden_size": "n_embd",
        "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
        "intermediate_size": "n_inner",
    }

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None  # None means 4 * n_embd, as in GPT-2
    activation_function: str = "gelu_new"
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    scale_attn_weights: bool = True
    use_cache: bool = True
    bos_token_id: int | None = 50256
    eos_token_id: int | list[int] | None = 50256
    pad_token_id: int | None = None
    tie_word_embeddings: bool = True
    # Task heads (modeling_gpt_custom.py). lm_loss_weight is GPT-1's λ in L3 = L2 + λ·L1: the classification and
    # multiple-choice heads add λ × the language-modelling loss on their own inputs (0 turns it off; GPT-1 used 0.5).
    lm_loss_weight: float = 0.0
    max_choices: int | None = None  # the multiple-choice head refuses more choices per example (None: any number)

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self._validate_architecture_fields()

    def _validate_architecture_fields(self) -> None:
        for name in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
            _check_positive(name, getattr(self, name))
        if self.n_inner is not None:
            _check_positive("n_inner", self.n_inner)
        if self.n_embd % self.n_head != 0:
            suggestion = max(self.n_head, round(self.n_embd / self.n_head) * self.n_head)
            raise UserError(
                f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}; try n_embd={suggestion}"
            )
        if self.activation_function not in ACTIVATIONS:
            hint = did_you_mean(self.activation_function, ACTIVATIONS)
            raise UserError(
                f"activation_function={self.activation_function!r} is not supported; {hint}"
                f"choose one of {', '.join(ACTIVATIONS)}"
            )
        for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise UserError(f"{name}={value!r} must be a dropout probability in [0, 1)")
        for name in ("layer_norm_epsilon", "initializer_range"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise UserError(f"{name}={value!r} must be a positive number")

        value = self.lm_loss_weight
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < float("inf"):
            raise UserError(f"lm_loss_weight={value!r} must be a number >= 0 (0 turns the auxiliary LM loss off; GPT-1 "
                            "used 0.5)")
        if self.max_choices is not None:
            _check_positive("max_choices", self.max_choices)

    @classmethod
    def from_preset(cls, name: str, **overrides) -> GPTCustomConfig:
        """A config by preset name (see PRESETS), with any field overridden: `from_preset("gpt2", n_layer=6)`."""
        if name not in PRESETS:
            hint = did_you_mean(name, PRESETS)
            raise UserError(f"unknown preset {name!r}; {hint}known presets: {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def inner_dim(self) -> int:
        return self.n_inner if self.n_inner is not None else 4 * self.n_embd

    def parameter_breakdown(self) -> dict[str, int]:
        """Parameter counts by component, computed from the config alone (no weights are allocated).

        "textbook" is the usual 12·d²·L + V·d + T·d (weight matrices only, 4d inner width); "total" counts every
        parameter — biases, LayerNorms, the tied head once — and equals `model.num_parameters()`.
        GPT-2 small: textbook 124,318,464; total 124,439,808.
        """
        d, layers, inner = self.n_embd, self.n_layer, self.inner_dim
        token_embedding = self.vocab_size * d
        position_embedding = self.n_positions * d
        attention = (d * 3 * d + 3 * d) + (d * d + d)  # c_attn (q, k, v) and c_proj, with biases
        mlp = (d * inner + inner) + (inner * d + d)  # c_fc and c_proj, with biases
        layer_norms = 2 * (2 * d)  # ln_1 and ln_2: weight and bias each
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * d
        total = (
            token_embedding + position_embedding + layers * (attention + mlp + layer_norms) + 2 * d + lm_head
        )
        return {
            "token_embedding": token_embedding,
            "position_embedding": position_embedding,
            "attention": layers * attention,
            "mlp": layers * mlp,
            "layer_norm": layers * layer_norms + 2 * d,
            "lm_head": lm_head,
            "total": total,
            "textbook": 12 * d * d * layers + token_embedding + position_embedding,
        }


__all__ = ["ACTIVATIONS", "PRESETS", "GPTCustomConfig"]
