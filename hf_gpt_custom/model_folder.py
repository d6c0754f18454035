"""Model folders as our own commands read them: checked, complete, and verified against their manifest.

Our commands (`eval`, `train --init_from`, `finetune`, `export`) load through `load_model_folder`, which checks the
folder before loading (a model type we can load, its manifest: manifest.py), refuses a missing head weight and other
architectures' folders, and loads a fine-tuned head as the class that saved it. Imports torch and the model only
inside the functions that load, so the console script stays light.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .auto_classes import CHECKPOINT_CONVERTERS
from .errors import MissingFileError, UserError
from .manifest import check_manifest, raise_if_incomplete

# model_type values `GPTCustomForCausalLM.from_pretrained` accepts: ours, and the checkpoints it converts on load.
LOADABLE_MODEL_TYPES = ("gpt_custom", *CHECKPOINT_CONVERTERS)
# What from_pretrained reads, one file or an index of shards (checkpoint_files.py reads each the same way).
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


# PEFT's adapters that add tokens or a prefix rather than changing weights: nothing to merge (no merge_and_unload)
PROMPT_LEARNING_PEFT_TYPES = ("PROMPT_TUNING", "PREFIX_TUNING", "P_TUNING", "MULTITASK_PROMPT_TUNING", "CPT",
                              "ADAPTION_PROMPT")


def _adapter_advice(folder: Path) -> str:
    """What to do with a PEFT adapter folder given where a model folder belongs: merge a weight adapter (LoRA...)
    into its base, or score a prompt-learning one on its base in Python, where nothing can be merged."""
    try:
        peft_type = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8")).get("peft_type")
    except (OSError, ValueError, AttributeError):
        peft_type = None
    said = f"{folder} is a PEFT adapter (adapter_config.json{f', {peft_type}' if peft_type else ''}), not a model"
    if peft_type in PROMPT_LEARNING_PEFT_TYPES:
        return (f"{said}, and its learned tokens cannot be merged into weights: evaluate it on its base in Python "
                f"(hf_gpt_custom.eval.runner.evaluate(PeftModel.from_pretrained(base_model, {str(folder)!r}), tokenizer, "
                "tasks=[...])) or in lm-eval (--model_args pretrained=BASE,peft=DIR)")
    return (f"{said}: merge it into its base and save that (PeftModel.from_pretrained(base_model, {str(folder)!r})"
            ".merge_and_unload().save_pretrained(DIR), and the tokenizer into DIR), then pass DIR")


def refuse_an_adapter_inside(folder: str | os.PathLike, action: str) -> None:
    """A UserError for a model folder that also holds a PEFT adapter, where `action` (training from it, exporting it)
    would save the model again: from_pretrained attaches the adapter (as transformers does), and save_pretrained of a
    model carrying one writes the adapter alone."""
    folder = Path(folder)
    if (folder / "adapter_config.json").is_file() and (folder / "config.json").is_file():
        raise UserError(
            f"{folder} holds a PEFT adapter beside its model (adapter_config.json), which loading attaches and "
            f"{action} cannot keep apart from the base: move adapter_config.json and the adapter's weights "
            "(adapter_model.safetensors) into a folder of their own, merge them (PeftModel.from_pretrained("
            f"GPTCustomForCausalLM.from_pretrained({str(folder)!r}), ADAPTER_DIR).merge_and_unload()"
            ".save_pretrained(DIR), and the tokenizer into DIR), then pass DIR"
        )


def check_model_folder(path: str | os.PathLike, any_model_type: bool = False, verify_manifest: bool = True) -> Path:
    """The folder as a Path after checking what can be checked before loading; raises a UserError naming the fix.
    `any_model_type` lets through folders of other architectures (for eval, which scores any causal LM).
    `verify_manifest=False` checks the folder's shape only (no hashing): the console script's check at start-up,
    before the loader checks it all again."""
    folder = Path(path)
    if not folder.exists():
        raise MissingFileError(
            f"model folder {str(path)!r} does not exist; pass a folder written by save_pretrained (e.g. runs/<name>/final "
            "or runs/<name>/export)"
        )
    if not folder.is_dir():
        raise UserError(f"{path} is a file, not a model folder; pass the folder that holds config.json")
    config_path = folder / "config.json"
    if not config_path.is_file():
        if (folder / "adapter_config.json").is_file():  # PEFT's save_pretrained: an adapter, without its base
            raise UserError(_adapter_advice(folder))
        hint = _model_inside(folder) or "pass a folder written by save_pretrained"
        raise MissingFileError(f"{folder} has no config.json; {hint}")
    try:
        model_type = json.loads(config_path.read_text(encoding="utf-8")).get("model_type")
    except (json.JSONDecodeError, AttributeError) as err:
        raise UserError(f"{config_path} is not a JSON object ({err}); save the model again") from err
    if model_type is None:
        raise UserError(f"{config_path} has no model_type, so it is no model's config; pass a folder written by "
                        "save_pretrained")
    if model_type not in LOADABLE_MODEL_TYPES and not any_model_type:
        raise UserError(
            f"{folder} holds a {model_type!r} model; hf-gpt-custom loads model_type "
            f"{' or '.join(repr(t) for t in LOADABLE_MODEL_TYPES)} (GPT-2, OpenAI GPT and Llama folders are converted on load)"
        )
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise MissingFileError(f"{folder} has no weights ({' / '.join(WEIGHT_FILES)}); it holds a config only")
    if verify_manifest:
        check_manifest(folder)
    return folder


def _model_inside(folder: Path) -> str:
    """"did you mean runs/x/final? ..." when `folder` is a run folder (its model is in final/ or export/), else ""."""
    inside = next((folder / name for name in ("final", "export") if (folder / name / "config.json").is_file()), None)
    return f"did you mean {inside}? (a run folder keeps its model in {inside.name}/)" if inside is not None else ""


def load_model_folder(path: str | os.PathLike, model_class=None, any_causal_lm: bool = False, **kwargs):
    """`model_class.from_pretrained(path, **kwargs)` (GPTCustomForCausalLM by default) for a local folder, strictly:
    every weight the model has must be in the file (a missing one is an error, not a random init), no tensor may
    have the wrong shape, and a folder with a manifest must match it (documentation aside, see is_documentation).

    `any_causal_lm=True` (eval) also loads other architectures, through AutoModelForCausalLM and just as strictly:
    a BERT folder then fails on its missing LM head instead of scoring with a random one."""
    if model_class is None:
        from .modeling_gpt_custom import GPTCustomForCausalLM as model_class  # noqa: N813
    folder = check_model_folder(path, any_model_type=any_causal_lm)
    model_type = _model_type(folder)
    if model_type == "gpt_custom":
        model, info = model_class.from_pretrained(folder, output_loading_info=True, **kwargs)
    elif model_type in LOADABLE_MODEL_TYPES:  # converted on load: strict already (convert_common.py)
        model, info = model_class.from_pretrained(folder, **kwargs), {}
    else:
        from transformers import AutoModelForCausalLM

        try:
            model, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True, **kwargs)
        except ValueError as err:  # "Unrecognized configuration class ... for AutoModelForCausalLM"
            raise UserError(f"{folder} holds a {model_type!r} model, which is not a causal language model "
                            f"transformers can load ({str(err).splitlines()[0][:200]})") from err
    raise_if_incomplete(folder, model, info, whole_model=True)
    return model


# The transformers families a folder is converted from on load (auto_classes.CHECKPOINT_CONVERTERS' model types)
_CHECKPOINT_FAMILIES = {"gpt2": "convert_gpt2.GPT2", "openai-gpt": "convert_openai_gpt.OPENAI_GPT",
                        "llama": "convert_llama.LLAMA"}


def folder_model_config(path: str | os.PathLike):
    """The GPTCustomConfig a model folder loads as (a GPT-2, OpenAI GPT or Llama config.json converted), its weights
    unread: what `train init_from=` compares the model: section with before any stage runs. None for another type."""
    from .auto_classes import resolve
    from .configuration_gpt_custom import GPTCustomConfig

    folder = Path(path)
    model_type = _model_type(folder)
    if model_type == "gpt_custom":
        return GPTCustomConfig.from_pretrained(folder)
    if model_type in _CHECKPOINT_FAMILIES:
        from .convert_common import converted_config

        return converted_config(resolve(_CHECKPOINT_FAMILIES[model_type]), _read_config(folder / "config.json"))
    return None


def saved_task_head_name(folder: str | os.PathLike) -> str | None:
    """The name of the task-head class a model folder was saved from ("GPTCustomForSequenceClassification"), or None
    for a causal LM; read from its config.json alone (no torch)."""
    saved = _read_config(Path(folder) / "config.json").get("architectures") or []
    return next((name for name in saved if name.startswith("GPTCustomFor") and name != "GPTCustomForCausalLM"), None)


def saved_task_head_class(folder: str | os.PathLike):
    """The task-head class (GPTCustomFor<Task>, not ...ForCausalLM) a model folder was saved from, or None.

    A head folder loaded as a causal LM loads without complaint and loses its head, so export and fine-tuning's
    init_from must load it as the class that saved it."""
    head = saved_task_head_name(folder)
    if head is None:
        return None
    from . import heads_gpt_custom  # torch and the model: imported only when a head folder is loaded

    if not hasattr(heads_gpt_custom, head):
        raise UserError(f"{folder}/config.json names the class {head}, which this version of hf-gpt-custom does not "
                        "have; load it with the version that saved it")
    return getattr(heads_gpt_custom, head)


# Text the tokenizer of a folder and ours must encode alike before ours stands in for it: whitespace runs,
# contractions, digits, accents and other scripts, an emoji and the end-of-text token inside a word.
_SAME_IDS_PROBE = ["Hello, world!  It's 2024:\tthey'll pay 1,234.5 €.\n\nNext line", "héllo wörld ☃ 你好 🙂",
                   "  two leading spaces", "x<|endoftext|>y"]


def load_folder_tokenizer(folder: str | os.PathLike):
    """The tokenizer a model folder holds, as our class (GPTCustomTokenizerFast: GPT-1's task template, our
    truncation rule) when it encodes exactly as the folder's own, else as the folder's own class. Loaded as ours
    regardless, a tokenizer of another kind (LLaMA's SentencePiece pieces) would be rebuilt around GPT-2's byte-level
    rules from its vocabulary and merges: other ids, another decoding."""
    from transformers import AutoTokenizer

    from .tokenization_gpt_custom import GPTCustomTokenizerFast

    theirs = AutoTokenizer.from_pretrained(str(folder))
    if isinstance(theirs, GPTCustomTokenizerFast):
        return theirs
    try:
        ours = GPTCustomTokenizerFast.from_pretrained(str(folder))
    except Exception:  # noqa: BLE001  (whatever our class cannot read is not ours: keep the folder's own class)
        return theirs
    same = ours.get_vocab() == theirs.get_vocab() and all(
        ours(text)["input_ids"] == theirs(text)["input_ids"] for text in _SAME_IDS_PROBE)
    return ours if same else theirs


def set_tokenizer_sides(tokenizer, padding_side: str | None = None, truncation_side: str | None = None) -> None:
    """Set the side a tokenizer pads and cuts on so that its folder keeps it. transformers' save_pretrained writes
    only the attributes that were init kwargs: a side set on a loaded tokenizer of a class that does not declare it
    (a Llama or word-level folder's own) came back as "right" on reload, and the folder cut text other than
    fine-tuning had."""
    for key, value in (("padding_side", padding_side), ("truncation_side", truncation_side)):
        if value is not None:
            setattr(tokenizer, key, value)
            tokenizer.init_kwargs[key] = value


def is_hub_repo_id(value) -> bool:
    """True for strings shaped like a Hub repository id ("gpt2", "alice/tiny"); says nothing about existence.

    The one "local path or Hub id?" test (CLI, tokenizer trainer, eval loader, push): huggingface_hub's own rule, the
    one from_pretrained and load_dataset apply, so "runs/x/final", "./model" or "/abs/path" are never taken for ids.
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id  # transformers' own dependency

    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return isinstance(value, str) and bool(value)


def _read_config(path: Path) -> dict:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserError(f"{path} is not valid JSON ({err}); save the model again") from err
    if not isinstance(config, dict):
        raise UserError(f"{path} is not a JSON object; save the model again")
    return config


def _model_type(folder: Path) -> str | None:
    return _read_config(folder / "config.json").get("model_type")


__all__ = ["LOADABLE_MODEL_TYPES", "check_model_folder", "is_hub_repo_id", "load_model_folder", "saved_task_head_class"]
