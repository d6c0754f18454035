"""The corpus: which files a local source is made of, how each is read, and how its text becomes documents.

One set of rules for the tokenizer trainer (hf_gpt_custom/tokenizer_training.py) and for training (data.py), so
`hf-gpt-custom tokenizer train wiki.test.raw` and `hf-gpt-custom train ... dataset=wiki.test.raw` read the same
text. A folder contributes its files with a corpus suffix, recursively, in sorted order (so not its README.md or
PROVENANCE.md); a file named explicitly is read by its suffix, and any other suffix is plain text. A .gz, .bz2 or .xz
file is read through its compression, by the suffix before it (C4's .json.gz shards are JSON lines). Files a user
gets wrong (empty, binary, not UTF-8, a bad JSON line) are named with the fix, before anything is read into a
dataset. Light to import: `datasets` loads inside.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_gpt_custom.errors import MissingFileError, UserError, no_room_cause, write_failure_fix
from hf_gpt_custom.manifest import cached_sha256, sha256_file

if TYPE_CHECKING:
    import datasets

TEXT_SUFFIXES = (".txt", ".text", ".raw")
# A compressed file is read through its compression, as `datasets` reads it, and its kind is the suffix before
# (C4's c4-train.00000-of-01024.json.gz is JSON lines; read as "any other suffix", it trained on the raw JSON).
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma"}
# rows are documents; a column (text_field) is the text
RECORD_READERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
CORPUS_SUFFIXES = (*TEXT_SUFFIXES, *RECORD_READERS)
# Words in a file's path (relative to the folder) that name a held-out split: WikiText's wiki.test.raw, the Hub's
# validation-00000-of-00001.parquet, a valid/ subfolder. A folder is read whole, so one holding these is refused.
HELD_OUT_SPLIT_WORDS = frozenset({"test", "testing", "val", "valid", "validation", "dev", "eval", "evaluation",
                                  "heldout"})
# Files of a dataset folder that are about the data, not data: datasets' own FILES_TO_IGNORE (its loaders skip them)
# and save_to_disk's state.json. Read as JSON records, dataset_info.json failed with a CastError naming nothing.
METADATA_FILES = frozenset({"README.md", "config.json", "dataset_info.json", "dataset_infos.json",
                            "dataset_dict.json", "state.json"})

# A paragraph break: a line that is empty or holds only spaces/tabs (WikiText's blank lines hold one space). Lines
# of spaces before a paragraph's text (WikiText's first line) are dropped; empty ones are kept as datasets keeps them
# ("a\n\n\nb" -> "a", "\nb"), so text without space-holding lines gives exactly datasets' paragraphs.
_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n")
_LEADING_SPACE_LINES = re.compile(r"\A(?:[^\S\n]+\n)+")


def reader_for(path: str | os.PathLike) -> str:
    """"text", "json", "parquet" or "csv": the `datasets` builder that reads this file."""
    return RECORD_READERS.get(kind_suffix(path), "text")


def kind_suffix(path: str | os.PathLike) -> str:
    """The suffix that says how a file is read, a compression suffix aside: "x.jsonl.gz" -> ".jsonl"."""
    path = Path(path)
    return (path.with_suffix("") if path.suffix.lower() in COMPRESSIONS else path).suffix.lower()


def open_text(path: str | os.PathLike):
    """A text file opened as training reads it: through its compression, UTF-8 with or without a byte-order mark,
    universal newlines."""
    import importlib

    compression = COMPRESSIONS.get(Path(path).suffix.lower())
    opener = open if compression is None else importlib.import_module(compression).open
    return opener(path, "rt", encoding="utf-8-sig")


def _read_bytes(path: Path) -> bytes:
    """A file's bytes, decompressed where its suffix says it is compressed; a broken archive is named."""
    return b"".join(_byte_chunks(path, size=-1))


def _byte_chunks(path: Path, size: int = 1 << 20):
    """A file's bytes in chunks of `size` (-1: one), decompressed where its suffix says it is compressed; a broken
    archive is named."""
    import importlib
    import lzma

    compression = COMPRESSIONS.get(path.suffix.lower())
    opener = open if compression is None else importlib.import_module(compression).open
    try:
        with opener(path, "rb") as handle:
            yield from iter(lambda: handle.read(size), b"")
    except (OSError, EOFError, ValueError, lzma.LZMAError) as err:  # gzip.BadGzipFile is an OSError
        if compression is None:
            raise
        raise UserError(f"{path} is not a readable {compression} file ({err}); check the download") from err


def list_corpus_files(path: str | os.PathLike, what: str = "corpus") -> list[Path]:
    """The files of a local corpus: the file itself, or every corpus file under a folder (sorted, recursive)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise MissingFileError(f"{what} {str(path)!r} not found; give a file or a folder of "
                               f"{', '.join(CORPUS_SUFFIXES)} files")
    # hidden files and folders are skipped, as datasets skips them: Jupyter's .ipynb_checkpoints/ holds copies of the
    # data, which trained on the validation text of the tail holdout
    _refuse_a_saved_dataset(path)
    files = sorted(p for p in path.rglob("*") if p.is_file() and kind_suffix(p) in CORPUS_SUFFIXES
                   and p.name not in METADATA_FILES
                   and not any(part.startswith((".", "__")) for part in p.relative_to(path).parts))
    if not files:
        raise MissingFileError(f"{what} folder {path} has no {', '.join(CORPUS_SUFFIXES)} files; point at the files "
                               f"themselves")
    return files


def _refuse_a_saved_dataset(folder: Path) -> None:
    """A folder `Dataset.save_to_disk` wrote holds its data as .arrow files, which no text/JSON/parquet/CSV reader
    reads: its JSON metadata was read as the corpus instead (a CastError naming nothing)."""
    if (folder / "dataset_dict.json").is_file() or ((folder / "state.json").is_file() and any(folder.glob("*.arrow"))):
        raise UserError(f"dataset folder {folder} was written by datasets' save_to_disk (.arrow files); training "
                        f"reads text, .jsonl, .json, .parquet or .csv files: write the training split with "
                        f"datasets.load_from_disk(...)['train'].to_parquet('train.parquet') and point dataset at it")


def held_out_split_files(path: str | os.PathLike) -> list[Path]:
    """The corpus files under a folder that belong to a held-out split; [] for a file. A split is held out when its
    files' names say so (HELD_OUT_SPLIT_WORDS) or when `datasets.load_dataset(folder)` would put them in a split
    other than a training one (_files_of_other_splits)."""
    root = Path(path)
    if not root.is_dir():
        return []  # a file named explicitly is what the user chose, wiki.test.raw included
    try:
        files = list_corpus_files(root)
    except UserError:
        return []
    other_splits = _files_of_other_splits(root, files)
    return [file for file in files if _names_a_split(file.relative_to(root)) or file in other_splits]


def _files_of_other_splits(root: Path, files: list[Path]) -> set[Path]:
    """The files `datasets.load_dataset(root)` puts in a held-out split, where the folder names its splits the Hub's
    way: shards `{split}-00000-of-00002.*` (MNLI's validation_matched, test_sft) or a README.md whose `configs:`
    assigns files to splits. Those splits were trained on, in silence. A split counts as held out when its name
    holds a split word (test_matched, validation, dev_clean): shards of a corpus (book-00001-of-00020.txt, which
    datasets names split "book") are training text, and a split word inside a plain file name (dev_notes.txt) is
    left to the name rule, since datasets' keyword guess over a plain folder would call it a validation split."""
    import datasets
    from datasets.data_files import get_data_patterns

    if not _readme_assigns_splits(root):
        try:
            patterns = get_data_patterns(str(root))
        except Exception:  # noqa: BLE001 — no data files datasets recognises: the name rule alone
            return set()
        if not all("-of-" in pattern for split_patterns in patterns.values() for pattern in split_patterns):
            return set()  # datasets' keyword guess, not a layout that names its splits
    try:
        by_split = datasets.load_dataset_builder(str(root)).config.data_files or {}
    except Exception:  # noqa: BLE001 — a layout datasets cannot read (mixed kinds, .raw): the name rule alone
        return set()
    resolved = {file.resolve(): file for file in files}
    return {resolved[Path(name).resolve()] for split, names in by_split.items() if _is_held_out_split(str(split))
            for name in names if Path(name).resolve() in resolved}


def files_datasets_guesses_held_out(path: str | os.PathLike) -> dict[Path, str]:
    """Files of a folder that datasets' keyword guess (`datasets.data_files.get_data_patterns`) would read as a
    held-out split, {file: split}. Asked once held_out_split_files refused nothing: these names do not say so to the
    name rule (test_matched.jsonl, eval_notes.txt), so they are trained on; the caller says so, since a datasets user
    expects `load_dataset(folder)` to keep them out of "train"."""
    from datasets.data_files import DataFilesDict, get_data_patterns

    root = Path(path)
    if not root.is_dir() or _readme_assigns_splits(root):  # datasets reads the README's split map, not the names
        return {}
    try:
        files = list_corpus_files(root)
        by_split = DataFilesDict.from_patterns(get_data_patterns(str(root)), base_path=str(root))
    except Exception:  # noqa: BLE001 — no data files datasets recognises, or no files at all: nothing to say
        return {}
    resolved = {file.resolve(): file for file in files}
    return {resolved[Path(name).resolve()]: str(split) for split, names in by_split.items()
            if _is_held_out_split(str(split)) for name in names if Path(name).resolve() in resolved}


def _readme_assigns_splits(root: Path) -> bool:
    """Whether root/README.md's YAML front matter has `configs:` (the Hub's way to map files to splits)."""
    readme = root / "README.md"
    if not readme.is_file():
        return False
    from huggingface_hub import metadata_load

    try:
        return bool((metadata_load(readme) or {}).get("configs"))
    except Exception:  # noqa: BLE001 — no front matter or broken YAML: datasets would not read configs either
        return False


def _is_held_out_split(name: str) -> bool:
    """test, validation_matched, test_sft, dev-clean: a split name holding a split word (HELD_OUT_SPLIT_WORDS)."""
    return bool(HELD_OUT_SPLIT_WORDS & set(re.split(r"[-_.\s]+", name.lower())))


def _names_a_split(relative: Path) -> bool:
    """A folder named as a split (valid/, or a split word first in its name: test_set/, validation-split/, as datasets'
    folder patterns read them), or a dot-separated part of the file name where a split word stands as a
    word of its own: alone or after - or _, and then at the end or before a shard number (wiki.test.raw,
    corpus_test.txt, data-test-00000-of-00001.parquet, books_val_part1.txt, test1.txt). Not a word that begins a
    longer name (dev_notes.txt, test_driven_design.txt) or sits inside one (latest.txt, contest/)."""
    folders, name = [part.lower() for part in relative.parts[:-1]], relative.name.lower()
    dotted = name.split(".")[:-1] or [name]
    words = "|".join(sorted(HELD_OUT_SPLIT_WORDS))
    split_name = rf"(?:.*[-_])?(?:{words})(?:[-_]?(?:part|shard)?[-_]?\d.*)?"
    folder_first_words = {re.split(r"[-_. ]", folder)[0] for folder in folders}
    return bool(HELD_OUT_SPLIT_WORDS & folder_first_words) or any(re.fullmatch(split_name, part) for part in dotted)


# --- reading: files -> documents -------------------------------------------------------------------------------------


def list_local_files(path: str | os.PathLike) -> list[Path]:
    """The data files of a local source (training/corpus.py's rules), all read by one `datasets` builder."""
    files = list_corpus_files(path, what="dataset")
    builders = {reader_for(p) for p in files}
    if len(builders) > 1:
        raise UserError(f"dataset folder {path} mixes file kinds ({', '.join(sorted(builders))}); keep one kind per folder")
    return files


def literal_data_files(files: list[Path]) -> list[str]:
    """`files` as `datasets.load_dataset(data_files=...)` reads them one by one: it takes each entry as a glob pattern,
    so `notes[1].txt` read `notes1.txt` and `b*.txt` read `bz.txt` too, in silence (the cache key and the run's
    fingerprint hashed the right files). glob.escape keeps `[`, `*` and `?` literal; fsspec reads `::` as a chained
    URL, which no escape turns off, so such a name is refused."""
    import glob

    for file in files:
        if "::" in str(file):
            raise UserError(f"{file}: the datasets library reads '::' in a path as a chained URL and cannot open this "
                            f"file; rename it (or its folder) without '::'")
    return [glob.escape(str(file)) for file in files]


def fingerprint_local_source(path: str | os.PathLike) -> str:
    """sha256 over a local source's files: each file's name (relative to a folder) and the sha256 of its bytes."""
    root = Path(path)
    digest = hashlib.sha256()
    for file in list_local_files(root):
        name = file.relative_to(root).as_posix() if root.is_dir() else file.name
        digest.update(f"{name}={cached_sha256(file)};".encode())
    return digest.hexdigest()


def content_cache_dir(path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """The `cache_dir` for `datasets.load_dataset` of a local source: one folder per content, under `cache_dir` (or
    datasets' own cache). datasets tells local files apart by path and mtime only, so a file replaced with its mtime
    kept (cp -p, rsync -t, tar) gave the old text back from a shared cache."""
    import datasets

    base = Path(cache_dir) if cache_dir is not None else Path(datasets.config.HF_DATASETS_CACHE)
    return str(base / "by_content" / fingerprint_local_source(path)[:20])


def load_text_dataset(
    source: str,
    text_field: str = "text",
    dataset_config: str | None = None,
    split: str = "train",
    streaming: bool = False,
    sample_by: str = "paragraph",
    cache_dir: str | os.PathLike | None = None,
    revision: str | None = None,
) -> datasets.Dataset | datasets.IterableDataset:
    """A dataset with one column, "text", one row per document.

    `source` is a local file/folder or a Hub dataset name (then `dataset_config`, `split` and `revision` apply; a
    local source is one split, read whole, and TrainConfig refuses those settings and split-named folders for it). A
    .txt file becomes documents by `sample_by`: "paragraph" (the default: text between lines that are empty or hold only
    spaces — a Shakespeare speech, a Wikipedia paragraph), "line", or "document" (the whole file).
    .jsonl/.json/.parquet/.csv rows are documents and `text_field` names the column.
    """
    import datasets  # here, not at the top: config.py and the tokenizer trainer read this module's file rules

    if Path(source).exists():
        files = list_local_files(source)
        builder = reader_for(files[0])
        kwargs: dict[str, Any] = {"data_files": literal_data_files(files), "split": "train", "streaming": streaming}
        if builder == "text":
            kwargs["sample_by"] = sample_by
            kwargs["encoding"] = "utf-8-sig"  # a byte-order mark is no text (it trained as the tokens ï » ¿)
            text_field = "text"
        if not streaming:
            kwargs["cache_dir"] = content_cache_dir(source, cache_dir)
        if builder == "text":  # before loading, not after a failure: UTF-16 or an empty file loads without one
            _raise_first_unreadable_text_file(files)
        else:
            check_record_files_utf8(files)
        try:
            dataset = datasets.load_dataset(builder, **kwargs)
        except Exception as err:  # datasets wraps parse errors in several types; find the file and line ourselves
            full = no_room_cause(err)
            if full is not None and kwargs.get("cache_dir"):  # datasets writes its arrow copy there: not a read error
                # (checked first: the JSON diagnosis ends in "could not read <file>" when no line is bad)
                setting = "data_cache_dir" if cache_dir is not None else "HF_DATASETS_CACHE"  # who chose the folder
                raise UserError(f"could not prepare dataset {source} in the cache {kwargs['cache_dir']}: "
                                f"{full.strerror}; {write_failure_fix(full, 'that folder', f'set {setting} to a folder')}"
                                " (nothing was trained)") from err
            if builder == "json":
                raise_first_bad_json_line(files, text_field, err)
            if builder == "text":
                _raise_first_unreadable_text_file(files, err)
            raise UserError(f"could not read dataset {source}: {_cause(err)}") from err
        if builder == "text" and sample_by == "paragraph":
            dataset = _split_paragraphs_at_whitespace_lines(dataset)
        if builder == "text" and sample_by == "line":  # (a file of whitespace alone was refused above)
            dataset = _drop_blank_lines(dataset)
        if builder == "text" and not streaming and len(dataset) == 0:
            _raise_first_unreadable_text_file(files)
        if builder != "text" and not streaming and text_field in dataset.column_names \
                and dataset.data.column(text_field).null_count:  # arrow's count: no pass over the rows
            if builder == "json":
                raise_first_bad_json_line(files, text_field, ValueError(f"a null {text_field!r}"))  # file and line
            row = dataset.data.column(text_field).is_null().index(True).as_py()
            raise UserError(
                f"dataset {source}: row {row + 1} (counting from 1 over {', '.join(f.name for f in files)}) has no "
                f"{text_field!r} text; a CSV cell that is empty or reads as missing (NA, N/A, None, null, nan) is null "
                "here, as in pandas and datasets: fill it, or drop the row")
        description = str(source)
    else:
        builder = None  # a Hub dataset: records
        try:
            dataset = datasets.load_dataset(source, dataset_config, split=split, streaming=streaming,
                                            cache_dir=None if cache_dir is None else str(cache_dir), revision=revision)
        except FileNotFoundError as err:
            raise MissingFileError(
                f"dataset {source!r} is neither a local path nor a reachable Hub dataset ({err}); check the name, "
                "or download it first (tests and offline machines need local files)"
            ) from err
        except ConnectionError as err:  # the Hub is unreachable, or HF_HUB_OFFLINE=1 forbids asking it
            raise MissingFileError(
                f"dataset {source!r} is not a local path, and the Hub cannot be reached to load it ({err}); give a "
                "local file or folder, or download the dataset while online (offline mode: HF_HUB_OFFLINE/"
                "HF_DATASETS_OFFLINE)"
            ) from err
        description = f"{source} ({dataset_config or 'default'}/{split}{f' at {revision}' if revision else ''})"
    columns = dataset.column_names
    if columns is not None and text_field not in columns:
        raise UserError(f"dataset {description} has no column {text_field!r}; set text_field to one of {columns}")
    feature = (dataset.features or {}).get(text_field)
    # a Value has a dtype; a list of strings (a List or Sequence feature) has none and was taken for text: two-item
    # rows were read as a text pair, trained as one run-on document
    lists = tuple(getattr(datasets, name) for name in ("List", "LargeList", "Sequence") if hasattr(datasets, name))
    kind = f"{type(feature).__name__} (list)" if isinstance(feature, lists) else getattr(feature, "dtype", "string")
    if kind not in ("string", "large_string"):  # all numbers or booleans: the tokenizer named neither file nor column
        raise UserError(f"dataset {description}: column {text_field!r} holds {kind} values, not text; set text_field "
                        f"to the column that holds the documents (columns: {', '.join(columns or [])})")
    # a streamed CSV knows no columns before it is read: selected lazily all the same, or the rename below met the
    # file's own "text" column ("Error when renaming ['body'] to ['text']") where the same file loaded whole worked
    if columns is not None or isinstance(dataset, datasets.IterableDataset):
        dataset = dataset.select_columns([text_field])
    if text_field != "text":
        dataset = dataset.rename_column(text_field, "text")
    if builder != "text":  # records, local or Hub: a blank row (WikiText's) is no document either
        dataset = _drop_blank_lines(dataset)
    return dataset


def _split_paragraphs_at_whitespace_lines(dataset):
    """datasets' paragraph mode cuts only at "\n\n"; a line of spaces (WikiText's blank lines) is a break too, and a
    paragraph of whitespace alone is no document. Text without such lines keeps exactly datasets' paragraphs."""

    def split(batch: dict[str, list]) -> dict[str, list]:
        parts = (_LEADING_SPACE_LINES.sub("", part) for text in batch["text"] for part in _PARAGRAPH_BREAK.split(text))
        return {"text": [part for part in parts if part.strip()]}

    import datasets

    if isinstance(dataset, datasets.IterableDataset):
        return dataset.map(split, batched=True)
    return dataset.map(split, batched=True, desc="paragraphs")


def _drop_blank_lines(dataset):
    """A line or record empty or of spaces alone is no document (transformers' run_clm --line_by_line drops it too):
    kept, each became a lone <|endoftext|> in the packed blocks and counted toward val_fraction. A row whose text is
    not a string (null) is kept, for the tokenizing step to name it."""
    import datasets

    def is_text(batch: dict[str, list]) -> list[bool]:
        return [not isinstance(text, str) or bool(text.strip()) for text in batch["text"]]

    if isinstance(dataset, datasets.IterableDataset):
        return dataset.filter(is_text, batched=True)
    return dataset.filter(is_text, batched=True, desc="blank lines")


def _cause(err: Exception) -> str:
    """The innermost error's message: datasets wraps the real cause in "An error occurred while generating"."""
    while err.__cause__ is not None or err.__context__ is not None:
        err = err.__cause__ or err.__context__
    return f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200] if str(err).strip() else ''}"


def _raise_first_unreadable_text_file(files: list[Path], err: Exception | None = None) -> None:
    """Name the first text file that is empty, binary or not UTF-8, with the fix (datasets says only "An error
    occurred while generating the dataset", or reads an empty file as no documents)."""
    for file in files:
        data = _read_bytes(file)
        if not data.strip():
            raise UserError(f"{file} is empty (no text to train on); remove it, or point dataset at files with text"
                            ) from err
        if b"\x00" in data[:65536]:
            raise UserError(f"{file} is not text (it holds NUL bytes: a binary file?); point dataset at text files "
                            f"({', '.join(CORPUS_SUFFIXES)})") from err
        _raise_if_not_utf8(file, data, err)


def _raise_if_not_utf8(file: Path, data: bytes, err: Exception | None = None) -> None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as bad:
        line = data[: bad.start].count(b"\n") + 1
        raise UserError(
            f"{file} is not UTF-8 text: byte 0x{data[bad.start]:02x} at offset {bad.start} (line {line}) cannot "
            f"be decoded; convert the file to UTF-8 (e.g. iconv -f {likely_encoding(data)} -t utf-8 {file.name} > "
            f"{file.stem}.utf8{file.suffix})"
        ) from err


def likely_encoding(data: bytes) -> str:
    """The encoding the conversion hint names: UTF-16 by its byte-order mark; Windows-1252 where bytes 0x80-0x9F
    occur (its curly quotes and dashes; latin1 would turn them into invisible control characters, which then train
    without a word); else latin1."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "utf-16"
    return "cp1252" if re.search(rb"[\x80-\x9f]", data) else "latin1"


def check_record_files_utf8(files: list[Path]) -> None:
    """JSON Lines and CSV must be UTF-8 too: arrow's JSON reader took latin-1 bytes in, and the first filter over the
    rows ended in a bare pyarrow UnicodeDecodeError naming neither file nor line (streaming the same, later)."""
    import codecs

    for file in files:
        if reader_for(file) not in ("json", "csv"):
            continue
        decoder = codecs.getincrementaldecoder("utf-8")()
        try:  # in chunks: a multi-GB .jsonl is not read into memory
            for chunk in _byte_chunks(file):
                decoder.decode(chunk)
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            _raise_if_not_utf8(file, _read_bytes(file))  # read whole only to name the byte, offset and line


def check_local_source_readable(source: str | None) -> None:
    """Raise the error loading a local `source` would raise for a missing, empty, binary or non-UTF-8 text file or a
    folder of mixed kinds, without loading it: checked before a run sets aside the outputs of the run it replaces,
    so that a mistake in the new data never costs the old run. A Hub name, or None, passes."""
    if source is None or not Path(source).exists():
        return
    files = list_local_files(source)
    if reader_for(files[0]) == "text":
        _raise_first_unreadable_text_file(files)
    else:
        check_record_files_utf8(files)


def raise_first_bad_json_line(files: list[Path], text_field: str, err: Exception) -> None:
    """Find the first line that is not a JSON object with a string `text_field` and name its file and line."""
    for file in files:
        if kind_suffix(file) == ".json":
            try:
                with open_text(file) as f:
                    json.loads(f.read())
            except (json.JSONDecodeError, UnicodeDecodeError) as bad:
                raise UserError(f"{file}: not valid JSON ({bad})") from err
            continue
        with open_text(file) as f:  # (through its compression: a .jsonl.gz's lines)
            for line_number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    row = None
                if not isinstance(row, dict) or not isinstance(row.get(text_field), str):
                    raise UserError(
                        f"{file} line {line_number}: expected a JSON object with a string {text_field!r} field, "
                        f"got {line.strip()[:60]!r}"
                    ) from err
                try:
                    row[text_field].encode("utf-8")
                except UnicodeEncodeError as bad:  # a lone surrogate escape such as "\ud800": valid JSON, not text
                    raise UserError(
                        f"{file} line {line_number}: the {text_field!r} field holds an invalid Unicode escape "
                        f"({bad.object[bad.start]!r}, half of a surrogate pair) at character {bad.start}; fix or "
                        f"remove that line"
                    ) from err
    raise UserError(f"could not read {', '.join(map(str, files))}: {_cause(err)}") from err


# --- validation files that are training files ------------------------------------------------------------------------


def shared_corpus_file(dataset: str, val_dataset: str) -> str | None:
    """How the validation files overlap the training files (the same file, or one with the same bytes), or None."""
    try:
        train_files, val_files = list_corpus_files(dataset), list_corpus_files(val_dataset)
    except UserError:
        return None  # a folder without corpus files: data loading names it
    if Path(dataset).resolve() == Path(val_dataset).resolve():
        return "is the training data itself"
    train_paths = {path.resolve() for path in train_files}
    for path in val_files:
        if path.resolve() in train_paths:
            return f"holds {path}, which dataset={dataset} trains on too"
    train_sizes = {path.stat().st_size: path for path in train_files if path.stat().st_size}
    for path in val_files:
        twin = train_sizes.get(path.stat().st_size)
        if twin is not None and sha256_file(twin) == sha256_file(path):
            return f"holds {path}, a byte-for-byte copy of {twin} in dataset={dataset}"
    return None
