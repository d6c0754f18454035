"""Model folders as our own commands read them: checked, complete, and verified against their manifest.

`from_pretrained` alone is lenient (a missing tensor is initialised at random with a log line, any model_type loads
into its own class, a flipped bit in model.safetensors goes unnoticed). Our classes' `from_pretrained` runs
`from_pretrained_checked` (the manifest, and no missing tensor); our commands (`eval`, `train --init_from`,
`finetune`, `export`) load through `load_model_folder`, which also refuses a missing head weight and other
architectures' folders. The manifest (size and sha256 of every file but the documentation) is the one training
writes into each checkpoint and into final/, and export into its folder; `write_manifest`/`verify_manifest` are its
one home. Shipped as remote code beside the modeling file: imports only the standard library, transformers' own
dependencies and siblings.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .auto_classes import CHECKPOINT_CONVERTERS
from .errors import MissingFileError, UserError

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
# model_type values `GPTCustomForCausalLM.from_pretrained` accepts: ours, and the checkpoints it converts on load.
LOADABLE_MODEL_TYPES = ("gpt_custom", *CHECKPOINT_CONVERTERS)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


# What a user may edit after the folder is written (the model card before a push, plots, the run's records): the
# manifest protects everything else — weights, config, code, tokenizer, generation settings, trainer state.
DOCUMENTATION_SUFFIXES = (".md", ".png")
DOCUMENTATION_FILES = ("training_summary.json",)
DOCUMENTATION_FOLDERS = ("eval/",)

# sha256 already checked in this process, by absolute path: (file identity, sha256). The identity (device, inode,
# size, mtime, ctime) changes with any write or replacement, so a file is hashed once per process rather than on every
# load: hashing reads the whole file, which costs more than a warm from_pretrained of it.
_VERIFIED_SHA256: dict[str, tuple[tuple[int, ...], str]] = {}


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def is_documentation(name: str) -> bool:
    """True for a file (path relative to its folder, "/"-separated) that the manifest leaves to the user to edit."""
    return name.endswith(DOCUMENTATION_SUFFIXES) or name in DOCUMENTATION_FILES or name.startswith(DOCUMENTATION_FOLDERS)


def write_manifest(folder: str | os.PathLike, **fields) -> Path:
    """Write folder/manifest.json listing the size and sha256 of every other file but the documentation (written
    last, atomically)."""
    folder = Path(folder)
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_NAME):
        name = path.relative_to(folder).as_posix()
        if path.name.endswith(".partial") or is_documentation(name):
            continue
        files[name] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = {"format": MANIFEST_FORMAT, **fields, "files": files}
    partial = folder / f"{MANIFEST_NAME}.partial"
    partial.write_text(json.dumps(manifest, indent=2))
    os.replace(partial, folder / MANIFEST_NAME)
    return folder / MANIFEST_NAME


def verify_manifest(folder: str | os.PathLike, quick: bool = False) -> str | None:
    """None when every file folder/manifest.json lists (documentation aside) is present with its size and (unless
    `quick`) its sha256; otherwise a sentence saying what is wrong. Without a manifest: "it has no manifest.json"."""
    folder = Path(folder)
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        return f"it has no {MANIFEST_NAME}"
    try:
        files = json.loads(manifest_path.read_text())["files"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        return f"its {MANIFEST_NAME} is unreadable ({err})"
    for name, expected in files.items():
        if is_documentation(name):  # listed by manifests written before the card became editable
            continue
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != expected["size"]:
            return f"{name} has {path.stat().st_size} bytes, the manifest says {expected['size']}"
        if not quick and not _has_sha256(path, expected["sha256"]):
            return f"{name} does not match its sha256 in the manifest (the file changed or is corrupt)"
    return None


def check_manifest(folder: str | os.PathLike) -> None:
    """Raise a UserError naming the damaged file when `folder` has a manifest that it does not match."""
    if (Path(folder) / MANIFEST_NAME).is_file() and (problem := verify_manifest(folder)) is not None:
        raise UserError(f"{folder} is damaged: {problem}; save, copy or export it again")


def _has_sha256(path: Path, sha256: str) -> bool:
    status = path.stat()
    identity = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
    key = str(path.resolve())
    if _VERIFIED_SHA256.get(key) == (identity, sha256):
        return True
    if sha256_file(path) != sha256:
        return False
    _VERIFIED_SHA256[key] = (identity, sha256)
    return True


def check_model_folder(path: str | os.PathLike, any_model_type: bool = False) -> Path:
    """The folder as a Path after checking what can be checked before loading; raises a UserError naming the fix.
    `any_model_type` lets through folders of other architectures (for eval, which scores any causal LM)."""
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
        raise MissingFileError(f"{folder} has no config.json; pass a folder written by save_pretrained")
    try:
        model_type = json.loads(config_path.read_text(encoding="utf-8")).get("model_type")
    except (json.JSONDecodeError, AttributeError) as err:
        raise UserError(f"{config_path} is not a JSON object ({err}); save the model again") from err
    if model_type not in LOADABLE_MODEL_TYPES and not any_model_type:
        raise UserError(
            f"{folder} holds a {model_type!r} model; hf-gpt-custom loads model_type "
            f"{' or '.join(repr(t) for t in LOADABLE_MODEL_TYPES)} (GPT-2, OpenAI GPT and Llama folders are converted on load)"
        )
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise MissingFileError(f"{folder} has no weights ({' / '.join(WEIGHT_FILES)}); it holds a config only")
    check_manifest(folder)
    return folder


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
    _raise_if_incomplete(folder, model, info, whole_model=True)
    return model


def from_pretrained_checked(from_pretrained, path, *model_args, **kwargs):
    """`from_pretrained(path, ...)` for our model classes, with the checks transformers leaves out: a local folder
    with a manifest must match it, and a tensor missing from the file is an error, not a random initialisation.

    One exception, as in transformers: a task head loaded from a folder another class saved (a causal LM folder into
    ...ForSequenceClassification) gets its new head weights initialised; its body must still be complete."""
    if path is not None and (folder := Path(path) / (kwargs.get("subfolder") or "")).is_dir():  # None: weights given
        check_manifest(folder)
    wants_info = kwargs.pop("output_loading_info", False)
    model, info = from_pretrained(path, *model_args, output_loading_info=True, **kwargs)
    same_class = type(model).__name__ in (getattr(model.config, "architectures", None) or ())
    _raise_if_incomplete(path, model, info, whole_model=same_class)
    return (model, info) if wants_info else model


def _raise_if_incomplete(folder, model, info: dict, whole_model: bool) -> None:
    """UserError when loading left a weight of `model` uninitialised or of the wrong shape. With whole_model=False
    only the body counts (the weights under base_model_prefix; all of them for a base model)."""
    tied = set(getattr(model, "_tied_weights_keys", None) or {}) if model.config.tie_word_embeddings else set()
    missing = [key for key in info.get("missing_keys", ()) if key not in tied]
    if not whole_model and getattr(model, "base_model", model) is not model:
        missing = [key for key in missing if key.startswith(f"{model.base_model_prefix}.")]
    mismatched = [str(item) for item in info.get("mismatched_keys", ())]
    if missing or mismatched:
        detail = ", ".join([*sorted(missing)[:5], *mismatched[:5]])
        raise UserError(
            f"{folder} does not hold every weight of its config: missing {len(missing)}, wrong shape "
            f"{len(mismatched)} ({detail}); the file is from another architecture or incomplete — save it again"
        )


def saved_task_head_class(folder: str | os.PathLike):
    """The task-head class (GPTCustomFor<Task>, not ...ForCausalLM) a model folder was saved from, or None.

    A head folder loaded as a causal LM loads without complaint and loses its head, so export and fine-tuning's
    init_from must load it as the class that saved it."""
    saved = _read_config(Path(folder) / "config.json").get("architectures") or []
    head = next((name for name in saved if name.startswith("GPTCustomFor") and name != "GPTCustomForCausalLM"), None)
    if head is None:
        return None
    from . import heads_gpt_custom  # imports the modeling file, which imports this one: not at the top

    if not hasattr(heads_gpt_custom, head):
        raise UserError(f"{folder}/config.json names the class {head}, which this version of hf-gpt-custom does not "
                        "have; load it with the version that saved it")
    return getattr(heads_gpt_custom, head)


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


__all__ = [
    "MANIFEST_NAME",
    "check_manifest",
    "check_model_folder",
    "from_pretrained_checked",
    "is_documentation",
    "is_hub_repo_id",
    "load_model_folder",
    "saved_task_head_class",
    "sha256_file",
    "verify_manifest",
    "write_manifest",
]
