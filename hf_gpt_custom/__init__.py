"""hf-gpt-custom: a GPT-2 family language model native to the Hugging Face ecosystem.

Importing this package registers the config, the models and the tokenizer with transformers' Auto classes (and
marks them for `auto_map`, so a folder written by `save_pretrained` loads with `trust_remote_code=True` anywhere),
and gives PEFT default LoRA targets for `gpt_custom`. It does so without importing torch or transformers itself,
which would cost the console script (`hf-gpt-custom --help`, a config error) seconds. The public classes load on
first use (PEP 562 `__getattr__`). Registration needs transformers, so it runs when transformers is imported: at once
if it already is, otherwise right after its package finishes loading. Python has no post-import callback, so that one
case is an import hook (`_AfterImport`); tests/hf_gpt_custom/test_package_import.py shows each import order it serves.
`register_auto_classes()` registers explicitly.
"""

from __future__ import annotations

import importlib
import sys

# Public name -> the submodule that defines it; imported on first access.
_LAZY_NAMES = {
    "PRESETS": "configuration_gpt_custom",
    "GPTCustomConfig": "configuration_gpt_custom",
    "GPTCustomModel": "modeling_gpt_custom",
    "GPTCustomForCausalLM": "modeling_gpt_custom",
    "GPTCustomPreTrainedModel": "modeling_gpt_custom",
    "GPTCustomForSequenceClassification": "heads_gpt_custom",
    "GPTCustomForTokenClassification": "heads_gpt_custom",
    "GPTCustomForQuestionAnswering": "heads_gpt_custom",
    "GPTCustomForMultipleChoice": "heads_gpt_custom",
    "GPTCustomTokenizerFast": "tokenization_gpt_custom",
}

# Our layers carry GPT-2's names (c_attn, c_proj, c_fc, ln_1, ln_2, ln_f), so PEFT's GPT-2 defaults fit us exactly.
PEFT_MODEL_TYPE_WITH_OUR_LAYER_NAMES = "gpt2"

_registered = {"transformers": False, "peft": False}


def __getattr__(name: str):
    if name not in _LAZY_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY_NAMES})


def register_auto_classes() -> None:
    """Register GPTCustom* with AutoConfig / AutoModel / AutoModelForCausalLM / AutoTokenizer and for auto_map.
    Idempotent; imports torch and transformers."""
    import transformers
    from transformers import AutoConfig, AutoTokenizer

    from . import auto_classes
    from .configuration_gpt_custom import GPTCustomConfig
    from .tokenization_gpt_custom import GPTCustomTokenizerFast

    AutoConfig.register(GPTCustomConfig.model_type, GPTCustomConfig, exist_ok=True)
    AutoTokenizer.register(GPTCustomConfig, fast_tokenizer_class=GPTCustomTokenizerFast, exist_ok=True)
    # Recorded in config.json / tokenizer_config.json `auto_map` on save, so remote code finds every class.
    GPTCustomConfig.register_for_auto_class()
    GPTCustomTokenizerFast.register_for_auto_class("AutoTokenizer")
    # AutoModel, AutoModelForCausalLM and the task heads' Auto classes: one table in auto_classes.py.
    for auto_class_name, location in auto_classes.AUTO_MODEL_CLASSES.items():
        module_name, class_name = location.split(".")
        model_class = getattr(importlib.import_module(f".{module_name}", __name__), class_name)
        getattr(transformers, auto_class_name).register(GPTCustomConfig, model_class, exist_ok=True)
        model_class.register_for_auto_class(auto_class_name)
    _registered["transformers"] = True


def register_peft_target_modules() -> None:
    """Give `gpt_custom` PEFT's GPT-2 default target modules, so `LoraConfig(task_type="CAUSAL_LM")` needs no
    `target_modules` (LoRA: c_attn). PEFT picks defaults by `model_type` from dicts in peft.utils.constants, one per
    method (LoRA, IA3, AdaLoRA, ...; most are copies made at import), so every dict with a GPT-2 entry gets ours."""
    from peft.utils import constants

    for name, mapping in vars(constants).items():
        if name.startswith("TRANSFORMERS_MODELS_TO_") and isinstance(mapping, dict):
            if PEFT_MODEL_TYPE_WITH_OUR_LAYER_NAMES in mapping:
                mapping.setdefault("gpt_custom", mapping[PEFT_MODEL_TYPE_WITH_OUR_LAYER_NAMES])
    _registered["peft"] = True


_REGISTER = {"transformers": register_auto_classes, "peft": register_peft_target_modules}


def _ours_initializing(except_name: str) -> bool:
    """True while one of our submodules is half-imported: registering then would import it half-done."""
    return any(
        name.startswith(__name__ + ".") and name != except_name
        and getattr(getattr(module, "__spec__", None), "_initializing", False)
        for name, module in list(sys.modules.items())
    )


def _register_what_is_imported(just_loaded: str = "") -> None:
    if _ours_initializing(just_loaded):
        return  # the submodule being imported triggers this again when it is complete
    for package, register in _REGISTER.items():
        if not _registered[package] and package in sys.modules:
            _registered[package] = True  # set first: registering imports modules that reach this hook again
            try:
                register()
            except BaseException:
                _registered[package] = False
                raise
    if all(_registered.values()) and _after_import in sys.meta_path:
        sys.meta_path.remove(_after_import)


class _AfterImport:
    """Runs `_register_what_is_imported` after transformers' or peft's top-level package (or one of our
    submodules) finishes executing. It finds nothing itself: it asks the other finders for the spec and wraps that
    loader's exec_module, so the module, its loader and its spec are exactly what they would be without it."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _REGISTER and not fullname.startswith(__name__ + "."):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        # Only a loader object of this one module (a file loader), never a class shared by many (builtins, frozen).
        if loader is not None and not isinstance(loader, type) and hasattr(loader, "exec_module"):

            def exec_then_register(module, _loader=loader, _name=fullname):
                del _loader.exec_module  # the loader's own method again
                _loader.exec_module(module)
                _register_what_is_imported(_name)

            loader.exec_module = exec_then_register
        return spec


_after_import = _AfterImport()
sys.meta_path.insert(0, _after_import)
_register_what_is_imported()

__all__ = [*_LAZY_NAMES, "register_auto_classes", "register_peft_target_modules"]
