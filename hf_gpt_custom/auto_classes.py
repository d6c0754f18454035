"""Which class loads what, by name ("module.attribute", the form config.json's auto_map takes): every model class by
the transformers Auto class that loads it, and the converter for each transformers checkpoint converted on load.

hf_gpt_custom/__init__.py registers AUTO_MODEL_CLASSES, save_pretrained writes it into auto_map, from_pretrained
finds converters here, and model_folder reads the model types without importing torch (this module imports none).
Shipped as remote code beside the modeling file.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .errors import UserError

if TYPE_CHECKING:  # Never run: transformers ships (and fetches) the files a module's text imports relatively.
    from .convert_gpt2 import load_gpt2_checkpoint  # noqa: F401
    from .convert_llama import load_llama_checkpoint  # noqa: F401
    from .convert_openai_gpt import load_openai_gpt_checkpoint  # noqa: F401
    from .heads_gpt_custom import GPTCustomForSequenceClassification  # noqa: F401

AUTO_MODEL_CLASSES = {
    "AutoModel": "modeling_gpt_custom.GPTCustomModel",
    "AutoModelForCausalLM": "modeling_gpt_custom.GPTCustomForCausalLM",
    "AutoModelForSequenceClassification": "heads_gpt_custom.GPTCustomForSequenceClassification",
    "AutoModelForTokenClassification": "heads_gpt_custom.GPTCustomForTokenClassification",
    "AutoModelForQuestionAnswering": "heads_gpt_custom.GPTCustomForQuestionAnswering",
    "AutoModelForMultipleChoice": "heads_gpt_custom.GPTCustomForMultipleChoice",
}
# The task heads' class names by the Auto class that loads each.
TASK_HEAD_AUTO_CLASSES = {
    auto_class: location.split(".")[1]
    for auto_class, location in AUTO_MODEL_CLASSES.items()
    if location.startswith("heads_gpt_custom.")
}
# transformers model_type -> the function converting such a checkpoint on load: f(path, model_class, **kwargs).
CHECKPOINT_CONVERTERS = {
    "gpt2": "convert_gpt2.load_gpt2_checkpoint",
    "openai-gpt": "convert_openai_gpt.load_openai_gpt_checkpoint",
    "llama": "convert_llama.load_llama_checkpoint",
}


def resolve(location: str):
    """The class or function a "module.attribute" entry of these tables names (imports its module)."""
    module_name, name = location.split(".")
    return getattr(importlib.import_module(f".{module_name}", __package__), name)


def refuse_another_head(class_name: str, folder, architectures: list[str] | None, saved_as: str | None = None,
                        in_memory: bool = False) -> None:
    """UserError when `folder` holds a fine-tuned task head (its config's `architectures`, in our class names) and
    `class_name` is another head: transformers would drop the saved head's weights (or fail on their shapes).
    `saved_as` is the transformers class a converted checkpoint was saved as: the message names it, and our class
    to load it with (the Auto class would return transformers' own there); `in_memory`: a model being converted,
    not a folder, which is converted into that class instead."""
    auto_class_of = {name: auto_class for auto_class, name in TASK_HEAD_AUTO_CLASSES.items()}
    saved = next((name for name in architectures or () if name in auto_class_of), None)
    if saved is not None and class_name in auto_class_of and class_name != saved:
        held = f"{saved_as} (our {saved})" if saved_as else saved
        load_with = (f"{saved} as the class to convert it into" if in_memory else f"{saved}.from_pretrained"
                     if saved_as else f"{saved} ({auto_class_of[saved]})")
        raise UserError(
            f"{folder} holds a fine-tuned {held}, not a {class_name}: its head weights would be dropped and a new "
            f"head initialised; load it with {load_with}, or start the new task from the pre-trained causal-LM "
            "folder"
        )


__all__ = ["AUTO_MODEL_CLASSES", "CHECKPOINT_CONVERTERS", "TASK_HEAD_AUTO_CLASSES", "refuse_another_head", "resolve"]
