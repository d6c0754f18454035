"""Model folders as our own commands read them: checked, complete, and verified against their manifest.

`from_pretrained` is lenient on purpose (a missing tensor is initialised at random with a log line, any model_type
loads into its own class, a flipped bit in model.safetensors goes unnoticed). That is right for a library and wrong
for `hf-gpt-custom eval`, `train --init_from` and `export`, which would then report numbers for a model that is not
the one on disk. They load through `load_model_folder`. The manifest (size and sha256 of every file) is the one
training writes into each checkpoint and into final/; `write_manifest`/`verify_manifest` are its one home.
Not shipped as remote code: nothing in configuration/modeling/tokenization imports it.
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


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: str | os.PathLike, **fields) -> Path:
    """Write folder/manifest.json listing the size and sha256 of every other file (written last, atomically)."""
    folder = Path(folder)
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_NAME):
        if path.name.endswith(".partial"):
            continue
        files[path.relative_to(folder).as_posix()] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = {"format": MANIFEST_FORMAT, **fields, "files": files}
    partial = folder / f"{MANIFEST_NAME}.partial"
    partial.write_text(json.dumps(manifest, indent=2))
    os.replace(partial, folder / MANIFEST_NAME)
    return folder / MANIFEST_NAME


def verify_manifest(folder: str | os.PathLike, quick: bool = False) -> str | None:
    """None when every file folder/manifest.json lists is present with its size and (unless `quick`) its sha256;
    otherwise a sentence saying what is wrong. A folder without a manifest gives "it has no manifest.json"."""
    folder = Path(folder)
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        return f"it has no {MANIFEST_NAME}"
    try:
        files = json.loads(manifest_path.read_text())["files"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        return f"its {MANIFEST_NAME} is unreadable ({err})"
    for name, expected in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != expected["size"]:
            return f"{name} has {path.stat().st_size} bytes, the manifest says {expected['size']}"
        if not quick and sha256_file(path) != expected["sha256"]:
            return f"{name} does not match its sha256 in the manifest (the file changed or is corrupt)"
    return None


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
    if (folder / MANIFEST_NAME).is_file() and (problem := verify_manifest(folder)) is not None:
        raise UserError(f"{folder} is damaged: {problem}; save or copy the folder again")
    return folder


def load_model_folder(path: str | os.PathLike, model_class=None, any_causal_lm: bool = False, **kwargs):
    """`model_class.from_pretrained(path, **kwargs)` (GPTCustomForCausalLM by default) for a local folder, strictly:
    every weight the model has must be in the file (a missing one is an error, not a random init), no tensor may
    have the wrong shape, and a folder with a manifest must match it byte for byte.

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
    tied = set(getattr(model, "_tied_weights_keys", None) or {}) if model.config.tie_word_embeddings else set()
    missing = [key for key in info.get("missing_keys", ()) if key not in tied]
    mismatched = [str(item) for item in info.get("mismatched_keys", ())]
    if missing or mismatched:
        detail = ", ".join([*missing[:5], *mismatched[:5]])
        raise UserError(
            f"{folder} does not hold every weight of its config: missing {len(missing)}, wrong shape "
            f"{len(mismatched)} ({detail}); the file is from another architecture or incomplete — save it again"
        )
    return model


def _model_type(folder: Path) -> str | None:
    return json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")


__all__ = [
    "MANIFEST_NAME",
    "check_model_folder",
    "load_model_folder",
    "sha256_file",
    "verify_manifest",
    "write_manifest",
]
