"""Which files a local corpus is made of and how each is read: one set of rules for the tokenizer trainer
(hf_gpt_custom/tokenizer_training.py) and for training (data.py), so `hf-gpt-custom tokenizer train wiki.test.raw`
and `hf-gpt-custom train ... dataset=wiki.test.raw` read the same text.

A folder contributes its files with a corpus suffix, recursively, in sorted order (so not its README.md or
PROVENANCE.md); a file named explicitly is read by its suffix, and any other suffix is plain text.
"""

from __future__ import annotations

import os
from pathlib import Path

from hf_gpt_custom.errors import MissingFileError

TEXT_SUFFIXES = (".txt", ".text", ".raw")
# rows are documents; a column (text_field) is the text
RECORD_READERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
CORPUS_SUFFIXES = (*TEXT_SUFFIXES, *RECORD_READERS)


def reader_for(path: str | os.PathLike) -> str:
    """"text", "json" or "parquet": the `datasets` builder that reads this file."""
    return RECORD_READERS.get(Path(path).suffix.lower(), "text")


def list_corpus_files(path: str | os.PathLike, what: str = "corpus") -> list[Path]:
    """The files of a local corpus: the file itself, or every corpus file under a folder (sorted, recursive)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise MissingFileError(f"{what} {str(path)!r} not found; give a file or a folder of "
                               f"{', '.join(CORPUS_SUFFIXES)} files")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in CORPUS_SUFFIXES)
    if not files:
        raise MissingFileError(f"{what} folder {path} has no {', '.join(CORPUS_SUFFIXES)} files; point at the files "
                               f"themselves")
    return files
