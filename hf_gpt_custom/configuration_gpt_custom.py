"""GPTCustomConfig: the architecture of a GPT-family model, its presets and its parameter count.

Field names are GPT-2's (`n_embd`, `n_layer`, ...) because checkpoints use them; `attribute_map` exposes the generic
names (`hidden_size`, `num_key_value_heads`, `rms_norm_eps`, ...) that generation and other libraries read. The block
variants (GPT-1's post-LayerNorm, the original Transformer's sinusoidal positions, LLaMA's RoPE/RMSNorm/SwiGLU/no
biases, grouped-query attention) are plain fields here, validated on construction. Only architecture lives here:
training settings are in training/config.py. Ships as remote code: imports only transformers and errors.py.
"""

from __future__ import annotations

import math

from transformers import PretrainedConfig
from .errors import UserError, did_you_mean

# GELU variants by transformers' names. "gelu_new" is GPT-2's tanh approximation; we compute it with PyTorch's fused
# kernel (same formula, one op instead of five). "gelu" is the exact erf form.
ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu", "relu", "silu")
# The block variants, each a choice of one field (the first value of each is GPT-2's, the default).
POSITION_EMBEDDING_TYPES = ("learned", "sinusoidal", "rope")
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


class GPTCustomConfig(PretrainedConfig):
    """Configuration of a GPT-2 family decoder. Defaults are GPT-2 small (124M)."""

    model_type = "gpt_custom"
    keys_to_ignore_at_inference = ["past_key_values", "cache"]  # the KV cache output: its name before and from transformers 5.24
    attribute_map = {
        "hidden_size": "n_embd",
        "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
        "intermediate_size": "n_inner",
        "num_key_value_heads": "n_kv_head",
        "rms_norm_eps": "layer_norm_epsilon",  # one epsilon for whichever norm_type is chosen
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
    tie_word_embeddings: bool = True  # False: a separate lm_head (LLaMA)
    # Block variants (docs/model.md, "Block variants"). Defaults are GPT-2's block.
    position_embedding_type: str = "learned"  # "learned" (GPT-2), "sinusoidal" (Transformer), "rope" (LLaMA)
    rope_theta: float = 10000.0  # RoPE base; read only with position_embedding_type="rope"
    norm_position: str = "pre"  # "pre": x + f(norm(x)), final ln_f (GPT-2/3); "post": norm(x + f(x)), no ln_f (GPT-1)
    norm_type: str = "layernorm"  # or "rmsnorm" (LLaMA); both use layer_norm_epsilon
    mlp_type: str = "standard"  # "standard": c_proj(act(c_fc(x))); "swiglu": c_proj(silu(c_gate(x)) * c_fc(x))
    multiple_of: int = 256  # SwiGLU's default inner width is rounded up to this (LLaMA's rule, see inner_dim)
    attention_bias: bool = True  # biases of c_attn and attn.c_proj (OPT/GPT-2: on, LLaMA: off)
    mlp_bias: bool = True  # biases of c_fc, c_gate and mlp.c_proj
    n_kv_head: int | None = None  # key/value heads for grouped-query attention; None -> n_head (multi-head)
    head_dim: int | None = None  # width of one attention head; None -> n_embd // n_head (as LlamaConfig)
    pad_vocab_size_to_multiple_of: int | None = None  # embedding rows padded up (nanoGPT: 50257 -> 50304 with 64)
    # Task heads (heads_gpt_custom.py).
    max_choices: int | None = None  # the multiple-choice head refuses more choices per example (None: any number)

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self._validate_architecture_fields()
        # Derived fields take a value here, once, as LlamaConfig does: generic code (generation's cache shapes,
        # attention kernels) reads num_key_value_heads and head_dim and must never see None.
        if self.head_dim is None:
            self.head_dim = self.n_embd // self.n_head
        if self.n_kv_head is None:
            self.n_kv_head = self.n_head
        self._validate_block_variants()

    def _validate_architecture_fields(self) -> None:
        for name in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
            _check_positive(name, getattr(self, name))
        if self.n_inner is not None:
            _check_positive("n_inner", self.n_inner)
        if self.head_dim is not None:
            _check_positive("head_dim", self.head_dim)
        elif self.n_embd % self.n_head != 0:
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

        if self.max_choices is not None:
            _check_positive("max_choices", self.max_choices)

    def _validate_block_variants(self) -> None:
        _check_choice("position_embedding_type", self.position_embedding_type, POSITION_EMBEDDING_TYPES)
        _check_choice("norm_position", self.norm_position, NORM_POSITIONS)
        _check_choice("norm_type", self.norm_type, NORM_TYPES)
        _check_choice("mlp_type", self.mlp_type, MLP_TYPES)
        for name in ("attention_bias", "mlp_bias", "tie_word_embeddings"):
            _check_bool(name, getattr(self, name))
        _check_positive("multiple_of", self.multiple_of)
        if self.pad_vocab_size_to_multiple_of is not None:
            _check_positive("pad_vocab_size_to_multiple_of", self.pad_vocab_size_to_multiple_of)
        theta = self.rope_theta
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 1.0 < theta < float("inf"):
            raise UserError(f"rope_theta={theta!r} must be a number > 1 (LLaMA: 10000.0)")
        if self.position_embedding_type == "rope" and self.head_dim % 2:
            raise UserError(
                f"position_embedding_type='rope' rotates pairs of dimensions, but head_dim={self.head_dim} is odd; "
                "choose an even head_dim (n_embd / n_head by default)"
            )
        if self.position_embedding_type == "sinusoidal" and self.n_embd % 2:
            raise UserError(f"position_embedding_type='sinusoidal' pairs sin and cos dimensions, but n_embd="
                            f"{self.n_embd} is odd; use an even n_embd")
        _check_positive("n_kv_head", self.n_kv_head)
        if self.n_head % self.n_kv_head:
            divisors = [k for k in range(1, self.n_head + 1) if self.n_head % k == 0]
            nearest = sorted(divisors, key=lambda k: (abs(k - self.n_kv_head), k))[:2]
            raise UserError(
                f"n_head={self.n_head} must be divisible by n_kv_head={self.n_kv_head} (each key/value head serves "
                f"a whole group of query heads); try n_kv_head={' or '.join(map(str, sorted(nearest)))}"
            )

    @classmethod
    def from_preset(cls, name: str, **overrides) -> GPTCustomConfig:
        """A config by preset name (see PRESETS), with any field overridden: `from_preset("gpt2", n_layer=6)`."""
        if name not in PRESETS:
            hint = did_you_mean(name, PRESETS)
            raise UserError(f"unknown preset {name!r}; {hint}known presets: {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    @property
    def inner_dim(self) -> int:
        """n_inner, or by default 4·n_embd (GPT) / LLaMA's 2/3·4·n_embd rounded up to multiple_of (SwiGLU)."""
        if self.n_inner is not None:
            return self.n_inner
        return swiglu_inner_dim(self.n_embd, self.multiple_of) if self.mlp_type == "swiglu" else 4 * self.n_embd

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the token embedding (and untied lm_head): vocab_size rounded up to pad_vocab_size_to_multiple_of.
        The padded rows are never predicted: logits keep vocab_size columns."""
        multiple = self.pad_vocab_size_to_multiple_of or 1
        return multiple * math.ceil(self.vocab_size / multiple)

    def describe_block(self) -> str:
        """The architecture in one sentence, from the fields (what a model card says the model is).

        >>> GPTCustomConfig().describe_block()  # GPT-2
        'Pre-norm decoder: learned absolute position embeddings, LayerNorm, gelu_new MLP, biases in the attention and MLP projections, 12 attention heads, output head tied to the token embedding'
        """
        positions = {
            "learned": "learned absolute position embeddings",
            "sinusoidal": "sinusoidal position encodings (no parameters)",
            "rope": f"rotary position embeddings (RoPE, theta {self.rope_theta:g})",
        }[self.position_embedding_type]
        norm = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[self.norm_type]
        mlp = "SwiGLU MLP" if self.mlp_type == "swiglu" else f"{self.activation_function} MLP"
        biases = {(True, True): "biases in the attention and MLP projections", (False, False): "no biases",
                  (True, False): "biases in the attention projections only",
                  (False, True): "biases in the MLP projections only"}[(self.attention_bias, self.mlp_bias)]
        heads = (f"{self.n_head} attention heads" if self.n_kv_head == self.n_head else
                 f"grouped-query attention ({self.n_head} query heads, {self.n_kv_head} key/value heads)")
        head = "output head tied to the token embedding" if self.tie_word_embeddings else "untied output head"
        if self.padded_vocab_size != self.vocab_size:
            head += f" (vocabulary padded to {self.padded_vocab_size} rows, padded logits never predicted)"
        placement = "Pre-norm" if self.norm_position == "pre" else "Post-norm (Add & Norm)"
        return f"{placement} decoder: {positions}, {norm}, {mlp}, {biases}, {heads}, {head}"

    def parameter_breakdown(self) -> dict[str, int]:
        """Parameter counts by component, computed from the config alone (no weights are allocated).

        "total" counts every parameter — biases, norms, padded embedding rows, the tied head once — and equals
        `model.num_parameters()` for every combination of the block variants. "textbook" is GPT-2's usual
        12·d²·L + V·d + T·d (weight matrices only, 4d inner width, learned positions), whatever the variant.
        GPT-2 small: textbook 124,318,464; total 124,439,808. LLaMA-7B shape: total 6,738,415,616.
        """
        d, layers, inner, head_dim = self.n_embd, self.n_layer, self.inner_dim, self.head_dim
        vocab_rows = self.padded_vocab_size
        token_embedding = vocab_rows * d
        position_embedding = self.n_positions * d if self.position_embedding_type == "learned" else 0
        qkv_width = (self.n_head + 2 * self.n_kv_head) * head_dim  # c_attn: q, then k and v of the kv heads
        attention = d * qkv_width + self.n_head * head_dim * d  # c_attn and c_proj
        attention += (qkv_width + d) if self.attention_bias else 0
        inputs_of_width_inner = 2 if self.mlp_type == "swiglu" else 1  # c_fc (and c_gate)
        mlp = (inputs_of_width_inner + 1) * d * inner
        mlp += (inputs_of_width_inner * inner + d) if self.mlp_bias else 0
        norm = 2 * d if self.norm_type == "layernorm" else d  # LayerNorm: weight and bias; RMSNorm: weight
        final_norm = norm if self.norm_position == "pre" else 0  # post-norm blocks end normalised: no ln_f
        lm_head = 0 if self.tie_word_embeddings else vocab_rows * d
        total = token_embedding + position_embedding + layers * (attention + mlp + 2 * norm) + final_norm + lm_head
        return {
            "token_embedding": token_embedding,
            "position_embedding": position_embedding,
            "attention": layers * attention,
            "mlp": layers * mlp,
            "layer_norm": layers * 2 * norm + final_norm,
            "lm_head": lm_head,
            "total": total,
            "textbook": 12 * d * d * layers + self.vocab_size * d + self.n_positions * d,
        }


__all__ = [
    "ACTIVATIONS", "MLP_TYPES", "NORM_POSITIONS", "NORM_TYPES", "POSITION_EMBEDDING_TYPES", "PRESETS",
    "GPTCustomConfig", "swiglu_inner_dim",
]
