"""The same folders whatever wrapper trained the model: weights under the model's own names (DDP's "module.",
torch.compile's "_orig_mod." stripped, FSDP's shards gathered), a model folder saved as the unwrapped class would
save it, and accelerate's checkpoints made to write and read those names. Checkpoint rotation, verification and
resume live in checkpoint.py; this module only decides what the weights are called."""

from __future__ import annotations

import collections
import copy
from pathlib import Path

# What wrappers put in front of the model's own parameter names: DDP, torch.compile's OptimizedModule.
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def unwrapped_state_dict(accelerator, model) -> dict:
    """The model's weights under its own names, whatever wraps it: DDP, torch.compile, FSDP (whose shards every
    rank gathers here: call it on all ranks)."""
    state_dict = accelerator.get_state_dict(model)  # unwraps DDP; gathers FSDP; keeps torch.compile's prefix
    # an OrderedDict, as state_dict() returns: accelerate's save de-duplicates tied tensors only in one
    return collections.OrderedDict((_strip_wrapper_prefixes(key), value) for key, value in state_dict.items())


def _strip_wrapper_prefixes(key: str) -> str:
    while key.startswith(_WRAPPER_PREFIXES):
        key = key.split(".", 1)[1]
    return key.replace("._orig_mod.", ".")


def save_model_folder(model_class: type, model_config, state_dict: dict, folder: Path,
                      generation_config=None) -> None:
    """save_pretrained as an unwrapped `model_class` would write it (weights, config.json, the remote-code files,
    generation_config.json: the trained model's, e.g. an init_from folder's eos list and penalties, which transformers
    keeps when it saves a model it loaded; the one config.json implies was written in its place).

    Saved from a fresh instance on the meta device, not from the trained module: FSDP2 swaps that module's class
    for a generated FSDP<name> subclass, and save_pretrained would then map AutoModelForCausalLM to torch's own
    `_fsdp_init` files instead of modeling_gpt_custom.py. The meta instance costs no memory; the weights come from
    `state_dict`.
    """
    import torch

    with torch.device("meta"):
        clean = model_class(model_config)
    if generation_config is not None and clean.can_generate():
        clean.generation_config = copy.deepcopy(generation_config)
    clean.save_pretrained(folder, state_dict=state_dict)


def save_checkpoints_without_wrappers(accelerator) -> None:
    """Make `accelerator.save_state` write model.safetensors under the model's own names, and `load_state` read it
    back into the unwrapped model: a checkpoint then loads as init_from and resumes whatever wraps the model
    (DDP's "module.", torch.compile's "_orig_mod."). Under FSDP, accelerate saves its own sharded files for the
    resume and the gathered weights are written beside them as model.safetensors."""

    def save_hook(models, weights, output_dir) -> None:
        if weights:  # DDP / one process / torch.compile: replace the wrapped state dicts accelerate collected
            weights[:] = [unwrapped_state_dict(accelerator, model) for model in models]
            return
        from accelerate.utils import save  # FSDP: accelerate saved its shards for the resume; add the whole model

        for index, model in enumerate(models):
            gathered = unwrapped_state_dict(accelerator, model)  # a collective: every rank runs the hook
            name = "model.safetensors" if index == 0 else f"model_{index}.safetensors"
            save(gathered, Path(output_dir, name), safe_serialization=True)  # main process only

    def load_hook(models, input_dir) -> None:
        weights_file = Path(input_dir, "model.safetensors")
        if not weights_file.is_file() or _has_wrapper_prefixes(weights_file):
            return  # FSDP's own files, or a checkpoint written before this hook: load as accelerate saved it
        models[:] = [accelerator.unwrap_model(model, keep_torch_compile=False) for model in models]

    accelerator.register_save_state_pre_hook(save_hook)
    accelerator.register_load_state_pre_hook(load_hook)


def _has_wrapper_prefixes(weights_file: Path) -> bool:
    from safetensors import safe_open

    with safe_open(str(weights_file), framework="pt") as handle:
        return any(key.startswith(_WRAPPER_PREFIXES) for key in handle.keys())
