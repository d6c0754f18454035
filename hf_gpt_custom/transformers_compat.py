"""What transformers calls the KV cache, for the model's calls: `past_key_values` up to 5.23, `cache` from 5.24.

transformers 5.24 renamed the argument in model forward signatures, model outputs, `create_causal_mask` and
`prepare_inputs_for_generation`, and `generate` now hands the cache to the model as `cache=`. Our model keeps
`past_key_values` as its own argument name (what every transformers release before 5.24 and most user code pass)
and accepts `cache` too; outputs and mask calls use whichever name the installed transformers declares, so neither
version logs a deprecation warning. Two lists of key names spell out both names themselves: the config's
`keys_to_ignore_at_inference` and the model's `_skip_keys_device_placement`. PEFT's prompt learning still looks for
the cache under the old name, which `refuse_peft_prompt_with_a_cache` turns into a refusal.

The oldest release the model runs on is MIN_TRANSFORMERS, the package's pin: the remote code meets whatever a Hub
user has installed, and older 5.x releases failed to import (5.0, 5.1), failed to build a mask (5.2, 5.3), failed to
load remote code (before 5.10) or ran silently wrong (before 5.21.1, config edits such as `config.n_head = 8` kept
the old head width: the versionmatrix hunt), so the config and model modules refuse them on import, naming the
upgrade (the tokenizer's code does not import this module). Ships with the model as remote code: imports only torch,
transformers (and its dependency packaging) and its sibling errors.py.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping

import transformers
from packaging.version import Version  # a dependency of transformers
from transformers.modeling_outputs import BaseModelOutputWithPast

from .errors import UserError

MIN_TRANSFORMERS = (5, 23)


if Version(transformers.__version__).release < MIN_TRANSFORMERS:  # (5, 23, 0): 5.23.0.dev0 counts as 5.23
    raise ImportError(
        f"this model needs transformers >= {'.'.join(map(str, MIN_TRANSFORMERS))}, and transformers "
        f"{transformers.__version__} is installed (older releases fail or give other numbers); upgrade with "
        f"pip install -U \"transformers>={'.'.join(map(str, MIN_TRANSFORMERS))},<5.25\""
    )

# after the check: older releases lack it (re-exported for the model)
from transformers.modeling_utils import slice_logits_to_keep  # noqa: E402,F401

# The field name transformers' own outputs declare, hence what generate() reads and passes back.
CACHE_NAME = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"


def cache_kwarg(cache: object) -> dict:
    """`{CACHE_NAME: cache}`: splice into a ModelOutput or `create_causal_mask` call as `**cache_kwarg(cache)`."""
    return {CACHE_NAME: cache}


def output_cache(outputs: Mapping) -> object:
    """The cache a model output carries, read under the installed name (the old attribute warns on 5.24)."""
    return outputs.get(CACHE_NAME)


def accepts_cache_kwarg(method: Callable) -> Callable:
    """Let a method whose parameter is `past_key_values` also be called with `cache=` (transformers >= 5.24).

    The wrapper's signature is the method's plus a keyword-only `cache`: transformers reads forward's and
    prepare_inputs_for_generation's signatures, and from 5.24 generate(cache=...) is refused unless one lists `cache`.
    """

    @functools.wraps(method)
    def with_cache_kwarg(*args, **kwargs):
        if "cache" in kwargs:
            cache = kwargs.pop("cache")
            if kwargs.get("past_key_values") is not None and cache is not None:
                # Which one holds the history cannot be told. transformers' own models take `cache` and drop
                # `past_key_values` with a warning, which silently drops a PEFT prefix: peft (0.21) still passes
                # its prefix as past_key_values while generate() passes cache=.
                raise TypeError(f"{method.__qualname__}() got both cache= and past_key_values=, so it cannot tell "
                                f"which holds the history; pass one of them. From transformers 5.24 generate() "
                                f"passes cache=, and PEFT's prefix tuning still adds past_key_values=: for that, "
                                f"generate(..., use_cache=False)")
            if cache is not None or "past_key_values" not in kwargs:
                kwargs["past_key_values"] = cache
        return method(*args, **kwargs)

    parameters = list(inspect.signature(method).parameters.values())
    if "cache" not in (parameter.name for parameter in parameters):
        cache = inspect.Parameter("cache", inspect.Parameter.KEYWORD_ONLY, default=None)
        var_keyword = [p for p in parameters if p.kind is inspect.Parameter.VAR_KEYWORD]
        named = [p for p in parameters if p.kind is not inspect.Parameter.VAR_KEYWORD]
        with_cache_kwarg.__signature__ = inspect.signature(method).replace(parameters=[*named, cache, *var_keyword])
    return with_cache_kwarg


def refuse_peft_prompt_with_a_cache(model, generation_config) -> None:
    """A UserError when generate() runs under PEFT's prompt learning (prompt tuning, p-tuning, prefix tuning) with a
    KV cache on transformers >= 5.24: PEFT (0.21) finds the cache under model_kwargs["past_key_values"], but generate()
    hands it over as `cache`, so PEFT sees none at any step. Prompt and p-tuning then put their virtual tokens in
    front of every new token again (the cache grows by num_virtual_tokens + 1 a step) and generate other tokens than
    the tuned model predicts, without a word (transformers' GPT-2 does the same); prefix tuning passes its prefix
    beside the cache. generate(use_cache=False) runs PEFT's forward on the whole sequence each step, which is right.
    PEFT's generate() sets the model's prepare_inputs_for_generation to its own bound method: that is how it is seen."""
    if CACHE_NAME != "cache" or generation_config.use_cache is False:
        return
    peft_model = getattr(model.prepare_inputs_for_generation, "__self__", model)
    peft_config = getattr(peft_model, "active_peft_config", None) if peft_model is not model else None
    if peft_config is None or not getattr(peft_config, "is_prompt_learning", False):
        return
    kind = getattr(peft_config.peft_type, "value", peft_config.peft_type)
    raise UserError(
        f"PEFT's {kind} cannot generate with a KV cache on transformers >= 5.24: PEFT looks for the cache under "
        "past_key_values while generate() passes cache=, so its virtual tokens would go in again at every step and "
        "other tokens come out than the tuned model predicts; pass generate(..., use_cache=False)"
    )
