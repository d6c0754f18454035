"""PEFT adapters that from_pretrained attaches, loaded the way transformers loads them but onto our checked base.

transformers' from_pretrained attaches a PEFT adapter it finds: one saved inside the model folder (adapter_config.json
beside config.json), or an adapter folder alone, whose base it loads from adapter_config.json's
base_model_name_or_path (the Auto classes find the adapter first and pass it as adapter_kwargs["_adapter_model_path"]).
Left to transformers, our from_pretrained went wrong three ways (the peftround2 hunt):
- a GPT-2, OpenAI GPT or Llama folder is converted by our own loader, which never looked for an adapter: it was
  dropped in silence, and `eval` scored the base where lm-eval scores base + adapter;
- an adapter whose base is such a folder had the base's Conv1D weights loaded unconverted into our Linear layers;
- transformers returns the adapter's loading info instead of the base's, so a tensor missing from the base (or a base
  failing its manifest) loaded at random, past the checks every other load gets.
So the base is loaded first, by our from_pretrained (converted and checked), with transformers' own adapter lookup
switched off for that load (in this thread only: a switch installed once, at import, that reads a ContextVar), and
the adapter is attached after, with transformers' load_adapter.
"""

from __future__ import annotations

import contextvars
import json
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"
_loading_the_base = contextvars.ContextVar("loading_the_base", default=False)


def adapter_to_attach(path, kwargs: dict) -> str | None:
    """The adapter transformers' from_pretrained(path, **kwargs) would attach, or None: the one the Auto classes
    found, else a local folder (its subfolder=, if given) holding adapter_config.json. None while loading a base here,
    and where PEFT is not installed (transformers attaches nothing then either)."""
    from transformers.utils import is_peft_available

    if _loading_the_base.get() or path is None or not is_peft_available():
        return None
    found_by_auto_class = (kwargs.get("adapter_kwargs") or {}).get("_adapter_model_path")
    if found_by_auto_class is not None:
        return str(found_by_auto_class)
    folder = Path(path) / (kwargs.get("subfolder") or "")
    return str(folder) if (folder / ADAPTER_CONFIG).is_file() else None


def load_with_adapter(from_pretrained, path, adapter: str, *model_args, **kwargs):
    """from_pretrained's result for `path`, the base loaded through `from_pretrained` (our class's: converted and
    checked) and `adapter` attached after it, as transformers attaches it. An adapter folder alone names its base;
    a model folder holding an adapter is its own base."""
    adapter_kwargs = dict(kwargs.pop("adapter_kwargs", None) or {})
    adapter_kwargs.pop("_adapter_model_path", None)
    adapter_name = kwargs.pop("adapter_name", "default")
    if kwargs.get("token") is not None:
        adapter_kwargs.setdefault("token", kwargs["token"])
    base = path
    given_folder = Path(str(path)) / (kwargs.get("subfolder") or "")
    if given_folder.resolve() == Path(adapter).resolve() and not (Path(adapter) / "config.json").is_file():
        # an adapter alone names its base; subfolder= found the adapter, inside the folder given, not the base
        base = json.loads((Path(adapter) / ADAPTER_CONFIG).read_text(encoding="utf-8"))["base_model_name_or_path"]
        kwargs.pop("subfolder", None)
    loading = _loading_the_base.set(True)
    try:
        loaded = from_pretrained(base, *model_args, **kwargs)
    finally:
        _loading_the_base.reset(loading)
    model = loaded[0] if kwargs.get("output_loading_info") else loaded
    model.load_adapter(adapter, adapter_name=adapter_name, adapter_kwargs=adapter_kwargs)
    return loaded


def _install_the_adapter_lookup_switch() -> None:
    """Wrap transformers' adapter lookup (modeling_utils.maybe_load_adapters, which from_pretrained calls) so that it
    finds no adapter while this thread loads a base here: it would attach an adapter saved in the folder and hand
    back the adapter's loading info instead of the base's. Installed once per import of this module, never swapped
    in and out around a load, which let another thread's load run with the lookup off (and two overlapping loads
    leave it off for good: roundreview31). A remote-code copy of this module wraps the package's wrapper: each
    reads its own ContextVar."""
    import transformers.modeling_utils as modeling_utils

    lookup = modeling_utils.maybe_load_adapters

    def maybe_load_adapters(pretrained_model_name_or_path, download_kwargs, **adapter_kwargs):
        if _loading_the_base.get():
            return None, pretrained_model_name_or_path, adapter_kwargs
        return lookup(pretrained_model_name_or_path, download_kwargs, **adapter_kwargs)

    modeling_utils.maybe_load_adapters = maybe_load_adapters


_install_the_adapter_lookup_switch()
