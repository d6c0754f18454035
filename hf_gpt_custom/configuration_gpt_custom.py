"""GPTCustomConfig: the architecture of a GPT-family model, its fields, presets and parameter count.

Field names are GPT-2's (`n_embd`, `n_layer`, ...) because checkpoints use them; `attribute_map` exposes the generic
names (`hidden_size`, `num_key_value_heads`, `rms_norm_eps`, ...) that generation and other libraries read. The block
variants (GPT-1's post-LayerNorm, the original Transformer's sinusoidal positions, LLaMA's RoPE/RMSNorm/SwiGLU/no
biases, grouped-query attention) are plain fields here, checked on construction by the rules in architecture.py
(which also holds PRESETS: both are plain Python there, so the CLI checks a training config's `model:` section
without importing transformers). Only architecture lives here: training settings are in training/config.py. Ships as
remote code: imports only transformers, architecture.py and errors.py.
"""

from __future__ import annotations

import math
import warnings

from transformers import PretrainedConfig

from .transformers_compat import MIN_TRANSFORMERS  # noqa: F401  refuses a transformers too old (edits were ignored)
from .architecture import (
    ACTIVATIONS, GENERIC_NAMES, MLP_TYPES, NORM_POSITIONS, NORM_TYPES, POSITION_EMBEDDING_TYPES, PRESETS,
    check_architecture, swiglu_inner_dim,
)
from .errors import UserError, did_you_mean


# Fields of other transformers configs that change what a model computes, and this one does not implement or names
# otherwise: given (other than None, False or a value in HARMLESS_VALUES), they were stored and silently ignored. Each
# with what to do instead.
UNSUPPORTED_FIELDS = {
    "sliding_window": "every layer attends to the whole context; drop it",
    "attention_chunk_size": "every layer attends to the whole context; drop it",
    "layer_types": "every layer is full attention; drop it",
    "use_sliding_window": "every layer attends to the whole context; drop it",
    "scale_attn_by_inverse_layer_idx": "not implemented (GPT-2's option); drop it",
    "reorder_and_upcast_attn": "not implemented (GPT-2's option; softmax already runs in float32); drop it",
    "rope_scaling": "only plain RoPE is implemented: drop the scaling, or set rope_theta",
    "pretraining_tp": "not implemented (LlamaConfig's option); drop it",
    "attention_dropout": "this config's name for it is attn_pdrop",
    "hidden_dropout": "this config's names are resid_pdrop and embd_pdrop",
    "hidden_act": "this config's name for it is activation_function",
    "afn": "this config's name for it is activation_function (OpenAI GPT's afn='gelu' is gelu_new); a folder of "
           "OpenAI GPT's loads with GPTCustomForCausalLM.from_pretrained, which converts it",
    "add_cross_attention": "there are no cross-attention layers (GPT2Config's option builds them); drop it",
    "partial_rotary_factor": "RoPE turns every dimension of each head (a factor of 1.0); drop it",
}
HARMLESS_VALUES = {"pretraining_tp": 1, "partial_rotary_factor": 1.0}  # what the model computes anyway
# Fields an older version of this config had and read, which nothing reads now: a folder saved then still holds them
# (and keeps them), and is named on load with what to do instead.
RETIRED_FIELDS = {
    # 2026-11-25: `finetune` saved task.lm_loss_weight here, and the task heads' forward added it by default
    "lm_loss_weight": "GPT-1's auxiliary LM loss weight, which the task heads' forward no longer reads from the config "
                      "(its argument lm_loss_weight defaults to 0): pass lm_loss_weight={value} to forward (finetune: "
                      "task.lm_loss_weight={value}) for the objective this folder was fine-tuned with",
}


def refuse_unsupported_fields(values: dict, where: str) -> None:
    """A UserError for the first of UNSUPPORTED_FIELDS set in `values` (None, False and HARMLESS_VALUES are unset)."""
    for name, fix in UNSUPPORTED_FIELDS.items():
        value = values.get(name)
        if name == "rope_scaling" and _is_plain_rope(value):  # {"type": "default"}: plain RoPE, read as rope_parameters
            continue
        harmless = name in HARMLESS_VALUES and value == HARMLESS_VALUES[name]
        if value is not None and value is not False and not harmless:
            raise UserError(f"{where} {name}={value!r}, which other transformers configs have and this model does not "
                            f"implement: it would be stored and ignored; {fix}")


def _is_plain_rope(rope) -> bool:
    """rope_parameters without scaling: {} or {"rope_type": "default", "rope_theta": ...}, either key optional;
    "type" is transformers 4's name for rope_type (LlamaConfig reads {"type": "default"} as plain RoPE too)."""
    return isinstance(rope, dict) and not set(rope) - {"rope_type", "type", "rope_theta"} \
        and rope.get("rope_type", rope.get("type", "default")) == "default"


def refuse_rope_scaling(rope: dict, name: str) -> None:
    if not _is_plain_rope(rope):
        raise UserError(f"{name}={rope!r}: only plain RoPE is implemented (rope_type 'default', rope_theta); drop the "
                        "scaling, or set rope_theta")


class GPTCustomConfig(PretrainedConfig):
    """Configuration of a GPT-2 family decoder. Defaults are GPT-2 small (124M)."""

    model_type = "gpt_custom"
    # Output entries Trainer's evaluation must not gather as predictions: the KV cache (its name before and from
    # transformers 5.24) and the task heads' loss parts (GPT-1's L2 and L1), which would turn the logits into a tuple.
    keys_to_ignore_at_inference = ["past_key_values", "cache", "task_loss", "lm_loss"]
    # intermediate_size reads the MLP's real width (inner_dim), as LlamaConfig's does, never n_inner's None default.
    attribute_map = {**GENERIC_NAMES, "intermediate_size": "inner_dim"}

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None  # None: 4 * n_embd (GPT-2); with swiglu LLaMA's rule (inner_dim)
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

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """transformers' from_dict, with other configs' names among the loading keywords read as construction does
        (rope_parameters as rope_theta; attention_dropout, hidden_act... refused naming this config's field).
        transformers sets a keyword on the config only where the config has that attribute and hands the rest to the
        model's __init__, so `from_pretrained(folder, rope_parameters=...)` was a TypeError from deep inside it."""
        read_at_construction = {name: kwargs.pop(name) for name in (*UNSUPPORTED_FIELDS, "rope_parameters")
                                if name in kwargs}
        return super().from_dict({**config_dict, **read_at_construction}, **kwargs)

    def __post_init__(self, **kwargs):
        refuse_unsupported_fields(kwargs, "GPTCustomConfig got")
        for name, meaning in RETIRED_FIELDS.items():
            if kwargs.get(name) not in (None, 0, 0.0):
                warnings.warn(f"this config sets {name}={kwargs[name]!r}, saved by an older version: "
                              + meaning.format(value=kwargs[name]), stacklevel=2)
        # transformers 5's spelling of rope_theta (LlamaConfig), or transformers 4's plain rope_scaling: one of them
        if kwargs.get("rope_parameters") and kwargs.get("rope_scaling"):
            raise UserError(f"GPTCustomConfig got both rope_parameters={kwargs['rope_parameters']!r} and "
                            f"rope_scaling={kwargs['rope_scaling']!r}, two spellings of one setting; give one "
                            "(rope_parameters, or rope_theta)")
        rope = kwargs.pop("rope_parameters", None) or kwargs.pop("rope_scaling", None) or {}
        refuse_rope_scaling(rope, "rope_parameters")
        if "rope_theta" in rope:
            self.rope_theta = float(rope["rope_theta"])
        super().__post_init__(**kwargs)
        # The rules are in architecture.py (plain Python, so the CLI checks a training config without transformers).
        # Derived fields take a value here, once, as LlamaConfig does: generic code (generation's cache shapes,
        # attention kernels) reads num_key_value_heads and head_dim and must never see None.
        self.check_architecture()

    def check_architecture(self) -> None:
        """Refuse a bad combination of fields (a UserError naming it) and fill in head_dim and n_kv_head where None.
        Run on construction, and by the model on a config edited since (see __setattr__).

        Other configs' fields assigned since (`config.rope_scaling = {...}` or `config.sliding_window = 4` before
        from_pretrained(..., config=config), the usual context-extension recipe) are refused as construction refuses
        them: the model was built ignoring them, with the logits of the unscaled model, and saved them. A plain
        `config.rope_parameters = {"rope_type": "default", "rope_theta": ...}` sets rope_theta when it is assigned
        (__setattr__), as at construction."""
        refuse_unsupported_fields({name: getattr(self, name, None) for name in UNSUPPORTED_FIELDS
                                   if name != "rope_scaling"},  # a property of rope_parameters, checked next
                                  "this GPTCustomConfig has")
        rope = vars(self).get("rope_parameters") or {}
        refuse_rope_scaling(rope, "config.rope_parameters (or rope_scaling)")
        derived = check_architecture({name: getattr(self, name) for name in GPTCustomConfig.__annotations__})
        self.head_dim, self.n_kv_head = derived["head_dim"], derived["n_kv_head"]

    def __setattr__(self, key: str, value) -> None:
        """`config.n_head = 8` on a config whose head_dim is n_embd // n_head and n_kv_head is n_head (GPT-2's
        shape, which is what they were derived as) derives them anew, as GPT-2 builds its heads from the config it
        is given; they kept the old values, and the model was silently grouped-query with the old head width. A
        head_dim or n_kv_head of its own (LLaMA's kind) is kept, as LlamaConfig keeps it. Where n_head does not
        divide n_embd, head_dim is None until it does, and building a model then refuses it (check_architecture)."""
        key = self.attribute_map.get(key, key)
        if key == "rope_parameters" and getattr(self, "_post_init_done", False) and _is_plain_rope(value):
            # transformers 5's spelling of rope_theta (what its rope_scaling setter writes too, with the current
            # theta): read now, as construction reads it, and not kept, so that whichever of the two is set last
            # holds (a copy read at build overwrote a later rope_theta). Scaling is stored, and refused at build.
            if value.get("rope_theta") is not None:
                super().__setattr__("rope_theta", float(value["rope_theta"]))
            self.__dict__.pop("rope_parameters", None)
            return
        if key in ("head_dim", "n_kv_head") and value is None and getattr(self, "_post_init_done", False):
            # None is "derive it" (to_dict writes derived values as null, and config.update(other.to_dict()) or
            # from_pretrained(..., head_dim=None) sets it back): a None held here read as "None key/value heads"
            follows = {key: True}
        else:
            follows = self._heads_follow() if key in ("n_head", "n_embd") else {}
        super().__setattr__(key, value)
        if follows.get("head_dim"):
            n_embd, n_head = self.n_embd, self.n_head
            divides = isinstance(n_head, int) and n_head > 0 and isinstance(n_embd, int) and n_embd % n_head == 0
            super().__setattr__("head_dim", n_embd // n_head if divides else None)
        if follows.get("n_kv_head"):
            super().__setattr__("n_kv_head", self.n_head)

    def to_dict(self) -> dict:
        """As PretrainedConfig writes it (config.json, to_dict/from_dict), with head_dim and n_kv_head null where they
        hold what n_embd and n_head derive: written as numbers, an edit of n_head or n_embd in config.json or in the
        dict kept them, and the model built from it was silently grouped-query with the old head width (GPT2Config
        derives its heads from the fields it is given). Read back, null derives the same values; a head_dim or
        n_kv_head of its own is written as it is (LlamaConfig's kind)."""
        output = super().to_dict()
        for name, derived in self._heads_follow().items():
            if derived and name in output:
                output[name] = None
        return output

    def _heads_follow(self) -> dict[str, bool]:
        """Which of head_dim and n_kv_head hold what n_embd and n_head derive (only once __post_init__ has run:
        before, the dataclass is still setting its fields)."""
        if not getattr(self, "_post_init_done", False):
            return {}
        n_embd, n_head, head_dim = self.n_embd, self.n_head, self.head_dim
        return {"head_dim": head_dim is None or (n_embd % n_head == 0 and head_dim == n_embd // n_head),
                "n_kv_head": self.n_kv_head == n_head}

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

    @inner_dim.setter
    def inner_dim(self, width: int | None) -> None:  # config.intermediate_size = 1024 (attribute_map) sets n_inner
        self.n_inner = width

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
