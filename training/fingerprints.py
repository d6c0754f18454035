"""What a run reads from files, as sha256 fingerprints: its local training and validation data, its tokenizer files and
its init_from folder. A checkpoint records them beside its settings (resume.py), so the same path with other contents
is a change a resume names, as a changed learning_rate is. Hub datasets are named by name/config/split, which the
settings hold already. Light to import: check_run_folder compares these before torch loads.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from hf_gpt_custom.manifest import MANIFEST_NAME, cached_sha256, is_documentation
from hf_gpt_custom.training.config import TrainConfig
from hf_gpt_custom.training.corpus import fingerprint_local_source, list_local_files

# The files a tokenizer folder is loaded from: the byte-level BPE's, what the recorded `tokenizer` fingerprint has
# hashed since it was first recorded (a run resumes against it).
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "tokenizer.model")  # AutoTokenizer reads the last two too: they change ids
# The vocabulary files transformers' other tokenizer classes read (their VOCAB_FILES_NAMES: WordPiece's vocab.txt,
# SentencePiece models, ...) and *.tiktoken: an edited vocab.txt reused the packed data of the old ids and its resume
# was not refused (found by the staleness hunt). Recorded as a role of their own, `tokenizer_vocabulary`, so the
# `tokenizer` fingerprint of a run recorded before stays what it was (a checkpoint without the new role is not
# compared on it, as for any role added since).
VOCABULARY_FILES = ("vocab.txt", "spiece.model", "sentencepiece.bpe.model", "sentencepiece.model", "spm.model",
                    "source.spm", "target.spm", "bpe.codes", "dict.txt", "entity_vocab.json", "normalizer.json",
                    "vocab-src.json", "vocab-tgt.json")


def tokenizer_file_sha256s(folder: str | os.PathLike) -> dict[str, str]:
    """name -> sha256 of each of TOKENIZER_FILES present in `folder`, in TOKENIZER_FILES order (empty: none)."""
    folder = Path(folder)
    return {name: cached_sha256(folder / name) for name in TOKENIZER_FILES if (folder / name).is_file()}


def vocabulary_file_sha256s(folder: str | os.PathLike) -> dict[str, str]:
    """name -> sha256 of each of VOCABULARY_FILES present in `folder`, then its *.tiktoken files by name."""
    folder = Path(folder)
    files = [name for name in VOCABULARY_FILES if (folder / name).is_file()]
    files += sorted(path.name for path in folder.glob("*.tiktoken") if path.is_file()) if folder.is_dir() else []
    return {name: cached_sha256(folder / name) for name in files}


def run_tokenizer_folder(config: TrainConfig) -> Path:
    """The folder workload.prepare_tokenizer reads this run's tokenizer from (it may not exist yet)."""
    if config.tokenizer and Path(config.tokenizer).is_dir():
        return Path(config.tokenizer)
    if not config.tokenizer and config.init_from and Path(config.init_from, "tokenizer.json").is_file():
        return Path(config.init_from)
    if not config.tokenizer and config.init_from:  # a checkpoint: the tokenizer its run trained with
        from hf_gpt_custom.errors import UserError
        from hf_gpt_custom.training.workload import checkpoint_run_tokenizer

        try:
            return checkpoint_run_tokenizer(Path(config.init_from))
        except (UserError, OSError):  # prepare_tokenizer refuses it by name; nothing to fingerprint
            return config.run_dir / "tokenizer"
    return config.run_dir / "tokenizer"


def model_folder_fingerprint(folder: str | os.PathLike) -> str:
    """sha256 over a model folder's files but its documentation: their sha256s as its manifest lists them (readers
    verify a folder against its manifest before loading it), else each file hashed."""
    folder = Path(folder)
    manifest = folder / MANIFEST_NAME
    if manifest.is_file():
        listed = json.loads(manifest.read_text(encoding="utf-8"))["files"]
        files = {name: entry["sha256"] for name, entry in listed.items()}
    else:
        files = {path.relative_to(folder).as_posix(): cached_sha256(path)
                 for path in folder.rglob("*") if path.is_file()}
    return combined_sha256({name: sha256 for name, sha256 in files.items() if not is_documentation(name)})


def input_fingerprints(config: TrainConfig) -> dict[str, str]:
    """role -> sha256 of what `config` reads from files: dataset, val_dataset (local ones), tokenizer, init_from.

    A role without files yet (the run's own tokenizer before it is trained) is left out: it is made from the data
    and settings, which are compared themselves.
    """
    fingerprints = {}
    for role, source in (("dataset", config.dataset), ("val_dataset", config.val_dataset)):
        if source is not None and Path(source).exists():
            fingerprints[role] = fingerprint_local_source(source)
    tokenizer_folder = run_tokenizer_folder(config)
    tokenizer_files = tokenizer_file_sha256s(tokenizer_folder)
    if tokenizer_files:
        fingerprints["tokenizer"] = combined_sha256(tokenizer_files)
    vocabulary_files = vocabulary_file_sha256s(tokenizer_folder)
    if vocabulary_files:
        fingerprints["tokenizer_vocabulary"] = combined_sha256(vocabulary_files)
    if config.init_from:
        fingerprints["init_from"] = model_folder_fingerprint(config.init_from)
    return fingerprints


def local_file_sha256s(source: str | None) -> list[str] | None:
    """The sha256 of each file of a local data source, None for a Hub dataset. training_summary.json records them for
    the training data, so an export can tell a benchmark whose documents the model was trained on (wiki.test.raw
    trained on, then WikiText-2's test perplexity published as if held out)."""
    if source is None or not Path(source).exists():
        return None
    return [cached_sha256(path) for path in list_local_files(source)]


def combined_sha256(sha256s: dict[str, str]) -> str:
    """One sha256 for a set of named files' sha256s (order-independent)."""
    digest = hashlib.sha256()
    for name in sorted(sha256s):
        digest.update(f"{name}={sha256s[name]};".encode())
    return digest.hexdigest()
