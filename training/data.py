"""Text sources -> tokenised documents -> packed blocks, cached on disk.

Each stage is a plain function (load_text_dataset, tokenize_documents, pack_into_blocks); prepare_datasets chains
them, holds out a seeded validation split and caches the packed result under a key that hashes the tokenizer
files, the data, and every setting that changes the blocks. Batching, sharding and shuffling live in train.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import datasets

from hf_gpt_custom.tokenization_gpt_custom import bytes_to_unicode
from hf_gpt_custom.training.config import TrainConfig
from hf_gpt_custom.training.run_lock import claim_build_folder
from hf_gpt_custom.training.corpus import CORPUS_SUFFIXES, list_corpus_files, reader_for
from hf_gpt_custom.errors import MissingFileError, UserError
from hf_gpt_custom.model_folder import sha256_file

logger = logging.getLogger(__name__)

# Bump when the packing or caching logic changes so old caches are not reused.
CACHE_FORMAT_VERSION = 3
# Streaming sources have no length: without a validation split, the first documents are held out.
STREAMING_VAL_DOCUMENTS = 1000
_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json")
# A paragraph break: a line that is empty or holds only spaces/tabs (WikiText's blank lines hold one space). Lines
# of spaces before a paragraph's text (WikiText's first line) are dropped; empty ones are kept as datasets keeps them
# ("a\n\n\nb" -> "a", "\nb"), so text without space-holding lines gives exactly datasets' paragraphs.
_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n")
_LEADING_SPACE_LINES = re.compile(r"\A(?:[^\S\n]+\n)+")


# --- sources -------------------------------------------------------------------------------------------------------


def list_local_files(path: str | os.PathLike) -> list[Path]:
    """The data files of a local source (training/corpus.py's rules), all read by one `datasets` builder."""
    files = list_corpus_files(path, what="dataset")
    builders = {reader_for(p) for p in files}
    if len(builders) > 1:
        raise UserError(f"dataset folder {path} mixes file kinds ({', '.join(sorted(builders))}); keep one kind per folder")
    return files


def load_text_dataset(
    source: str,
    text_field: str = "text",
    dataset_config: str | None = None,
    split: str = "train",
    streaming: bool = False,
    sample_by: str = "paragraph",
    cache_dir: str | os.PathLike | None = None,
) -> datasets.Dataset | datasets.IterableDataset:
    """A dataset with one column, "text", one row per document.

    `source` is a local file/folder or a Hub dataset name (then `dataset_config` and `split` apply). A .txt file
    becomes documents by `sample_by`: "paragraph" (the default: text between lines that are empty or hold only
    spaces — a Shakespeare speech, a Wikipedia paragraph), "line", or "document" (the whole file).
    .jsonl/.json/.parquet/.csv rows are documents and `text_field` names the column.
    """
    if Path(source).exists():
        files = list_local_files(source)
        builder = reader_for(files[0])
        kwargs: dict[str, Any] = {"data_files": [str(f) for f in files], "split": "train", "streaming": streaming}
        if builder == "text":
            kwargs["sample_by"] = sample_by
            text_field = "text"
        if cache_dir is not None:
            kwargs["cache_dir"] = str(cache_dir)
        try:
            dataset = datasets.load_dataset(builder, **kwargs)
        except Exception as err:  # datasets wraps parse errors in several types; find the file and line ourselves
            if builder == "json":
                _raise_first_bad_json_line(files, text_field, err)
            if builder == "text":
                _raise_first_unreadable_text_file(files, err)
            raise UserError(f"could not read dataset {source}: {_cause(err)}") from err
        if builder == "text" and sample_by == "paragraph":
            dataset = _split_paragraphs_at_whitespace_lines(dataset)
        if builder == "text" and not streaming and len(dataset) == 0:
            _raise_first_unreadable_text_file(files)
        description = str(source)
    else:
        try:
            dataset = datasets.load_dataset(source, dataset_config, split=split, streaming=streaming,
                                            cache_dir=None if cache_dir is None else str(cache_dir))
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
        description = f"{source} ({dataset_config or 'default'}/{split})"
    columns = dataset.column_names
    if columns is not None and text_field not in columns:
        raise UserError(f"dataset {description} has no column {text_field!r}; set text_field to one of {columns}")
    if columns is not None:
        dataset = dataset.select_columns([text_field])
    if text_field != "text":
        dataset = dataset.rename_column(text_field, "text")
    return dataset


def _split_paragraphs_at_whitespace_lines(dataset):
    """datasets' paragraph mode cuts only at "\n\n"; a line of spaces (WikiText's blank lines) is a break too, and a
    paragraph of whitespace alone is no document. Text without such lines keeps exactly datasets' paragraphs."""

    def split(batch: dict[str, list]) -> dict[str, list]:
        parts = (_LEADING_SPACE_LINES.sub("", part) for text in batch["text"] for part in _PARAGRAPH_BREAK.split(text))
        return {"text": [part for part in parts if part.strip()]}

    if isinstance(dataset, datasets.IterableDataset):
        return dataset.map(split, batched=True)
    return dataset.map(split, batched=True, desc="paragraphs")


def _cause(err: Exception) -> str:
    """The innermost error's message: datasets wraps the real cause in "An error occurred while generating"."""
    while err.__cause__ is not None or err.__context__ is not None:
        err = err.__cause__ or err.__context__
    return f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200] if str(err).strip() else ''}"


def _raise_first_unreadable_text_file(files: list[Path], err: Exception | None = None) -> None:
    """Name the first text file that is empty, binary or not UTF-8, with the fix (datasets says only "An error
    occurred while generating the dataset", or reads an empty file as no documents)."""
    for file in files:
        data = file.read_bytes()
        if not data.strip():
            raise UserError(f"{file} is empty (no text to train on); remove it, or point dataset at files with text"
                            ) from err
        if b"\x00" in data[:65536]:
            raise UserError(f"{file} is not text (it holds NUL bytes: a binary file?); point dataset at text files "
                            f"({', '.join(CORPUS_SUFFIXES)})") from err
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            line = data[: bad.start].count(b"\n") + 1
            raise UserError(
                f"{file} is not UTF-8 text: byte 0x{data[bad.start]:02x} at offset {bad.start} (line {line}) cannot "
                f"be decoded; convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8 {file.name} > "
                f"{file.stem}.utf8{file.suffix})"
            ) from err


def _raise_first_bad_json_line(files: list[Path], text_field: str, err: Exception) -> None:
    """Find the first line that is not a JSON object with a string `text_field` and name its file and line."""
    for file in files:
        if file.suffix == ".json":
            try:
                json.loads(file.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as bad:
                raise UserError(f"{file}: not valid JSON ({bad})") from err
            continue
        with open(file, encoding="utf-8", errors="strict") as f:
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


# --- tokenising and packing ----------------------------------------------------------------------------------------


def tokenize_documents(dataset, tokenizer, num_proc: int = 1):
    """Dataset{text} -> Dataset{input_ids}: each document's ids followed by the end-of-text token.

    The end-of-text token after every document is GPT-2's separator: packed blocks then never run two documents
    together without a boundary the model can see.
    """
    eos_token_id = tokenizer.eos_token_id
    if eos_token_id is None:
        raise UserError(f"tokenizer {tokenizer.name_or_path!r} has no eos_token; documents need an end-of-text separator")
    # Ids only, no Python BatchEncoding per document: our tokenizer's encode_ids_batch (tiktoken's engine when the
    # vocabulary allows, ~4x the Rust batch call), else any fast tokenizer's Rust backend.
    encode_ids = getattr(tokenizer, "encode_ids_batch", None)
    if encode_ids is None:
        backend = tokenizer.backend_tokenizer

        def encode_ids(texts: list[str]) -> list[list[int]]:
            return [encoding.ids for encoding in backend.encode_batch_fast(texts, add_special_tokens=False)]

    def encode(batch: dict[str, list]) -> dict[str, list]:
        return {"input_ids": [ids + [eos_token_id] for ids in _encode_with_fallback(tokenizer, encode_ids, batch["text"])]}

    if isinstance(dataset, datasets.IterableDataset):
        return dataset.map(encode, batched=True, remove_columns=["text"])
    return dataset.map(encode, batched=True, num_proc=num_proc if num_proc > 1 else None, remove_columns=["text"],
                       desc="tokenizing")


def _encode_with_fallback(tokenizer, encode_ids, texts: list[str]) -> list[list[int]]:
    """`encode_ids(texts)`, or document by document through the tokenizer's own __call__ when the fast path panics.

    A Rust panic (tiktoken's stack overflow on ~1M whitespace characters) arrives as pyo3's PanicException, a
    BaseException that `except Exception` lets through: it would end training with a traceback from inside map().
    """
    try:
        return encode_ids(texts)
    except Exception:
        raise
    except BaseException as err:  # noqa: B036 - see the docstring; interpreter exits are re-raised
        if isinstance(err, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        logger.warning("the fast tokenizer path failed (%s: %s); tokenising this batch document by document",
                       type(err).__name__, err)
        return [_encode_one(tokenizer, text) for text in texts]


def _encode_one(tokenizer, text: str) -> list[int]:
    try:
        return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    except Exception:
        raise
    except BaseException as err:  # noqa: B036
        if isinstance(err, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        raise UserError(f"a document of {len(text):,} characters (starting {text[:40]!r}) cannot be tokenised "
                        f"({type(err).__name__}: {err}); split or remove it") from err


def _iterate_blocks(token_lists: Iterator[list[int]], block_size: int) -> Iterator[dict[str, list[int]]]:
    buffer: list[int] = []
    for ids in token_lists:
        buffer.extend(ids)
        start = 0  # blocks are cut at offsets and the consumed prefix dropped once: slicing off each block from
        while len(buffer) - start >= block_size:  # the front would copy the rest of a long document every time
            block = buffer[start : start + block_size]
            start += block_size
            yield {"input_ids": block, "labels": list(block)}
        del buffer[:start]
    # the tail shorter than block_size is dropped: fewer than block_size tokens of the whole corpus


def _blocks_from_dataset(dataset, block_size: int) -> Iterator[dict[str, list[int]]]:
    yield from _iterate_blocks(_token_lists(dataset), block_size)


def _token_lists(dataset) -> Iterator[list[int]]:
    if isinstance(dataset, datasets.IterableDataset):
        for row in dataset:
            yield row["input_ids"]
        return
    for batch in dataset.iter(batch_size=1000):
        yield from batch["input_ids"]


def pack_into_blocks(dataset, block_size: int, cache_dir: str | os.PathLike | None = None):
    """Dataset{input_ids} -> Dataset{input_ids, labels}: all documents concatenated, cut every `block_size` tokens.

    Exactly floor(total_tokens / block_size) blocks; block k is tokens [k*block_size, (k+1)*block_size) of the
    concatenation, carried across document (and map-batch) boundaries, so nothing is padded. Example with
    block_size=4: documents [a b EOS] [c d e EOS] -> blocks [a b EOS c] and [d e EOS]-tail dropped (3 < 4 tokens).
    `labels` equal `input_ids`; the model shifts them.
    """
    if block_size < 1:
        raise UserError(f"block_size={block_size} must be >= 1")
    if isinstance(dataset, datasets.IterableDataset):
        return datasets.IterableDataset.from_generator(
            _blocks_from_dataset, gen_kwargs={"dataset": dataset, "block_size": block_size}
        )
    features = datasets.Features({
        "input_ids": datasets.List(datasets.Value("int32")),
        "labels": datasets.List(datasets.Value("int32")),
    })
    gen_kwargs = {"dataset": dataset, "block_size": block_size}
    if cache_dir is not None:
        return datasets.Dataset.from_generator(_blocks_from_dataset, gen_kwargs=gen_kwargs, features=features,
                                               cache_dir=str(cache_dir))
    with tempfile.TemporaryDirectory() as scratch:  # no cache wanted: build in memory, leave nothing behind
        return datasets.Dataset.from_generator(_blocks_from_dataset, gen_kwargs=gen_kwargs, features=features,
                                               keep_in_memory=True, cache_dir=scratch)


# --- the whole pipeline with a cache -------------------------------------------------------------------------------


@dataclass
class PackedData:
    train: Any  # datasets.Dataset (or IterableDataset when streaming) of {input_ids, labels}
    val: Any
    cache_dir: Path | None  # where the packed blocks live; None when streaming
    is_cache_hit: bool  # True when nothing was tokenised this time
    stats: dict[str, Any]


def compute_cache_key(config: TrainConfig, tokenizer_dir: str | os.PathLike) -> str:
    """sha256 over the tokenizer files, the data (file contents, or Hub name/config/split) and the block settings."""
    digest = hashlib.sha256()

    def add(label: str, value: Any) -> None:
        digest.update(f"{label}={value!r};".encode())

    add("format", CACHE_FORMAT_VERSION)
    tokenizer_dir = Path(tokenizer_dir)
    for name in _TOKENIZER_FILES:
        file = tokenizer_dir / name
        if file.is_file():
            add(name, sha256_file(file))
    for role, source in (("train", config.dataset), ("val", config.val_dataset)):
        if source is None:
            continue
        if Path(source).exists():
            root = Path(source)
            for file in list_local_files(root):
                add(f"{role}:{file.relative_to(root) if root.is_dir() else file.name}", sha256_file(file))
        else:
            add(f"{role}:hub", (source, config.dataset_config, config.dataset_split))
    for name in ("text_field", "text_sample_by", "val_split", "val_fraction", "val_holdout", "seed", "block_size"):
        add(name, getattr(config, name))
    return digest.hexdigest()


def _count_tokens(tokenized) -> int:
    """Tokens in Dataset{input_ids}, summed in Arrow (no Python list per document)."""
    import pyarrow.compute as pc

    lengths = pc.list_value_length(tokenized.data.column("input_ids"))
    return int(pc.sum(lengths).as_py() or 0)


def default_data_cache_dir() -> Path:
    hf_home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    return hf_home / "hf_gpt_custom" / "packed"


def split_documents(config: TrainConfig, raw_cache: str | os.PathLike | None = None):
    """(train documents, validation documents) as Dataset{text}; no document is in both.

    Validation comes from `val_dataset` (a separate local file/folder), else from the Hub dataset's `val_split`,
    else from holding out `val_fraction` of the documents: a seeded random sample (`val_holdout: random`) or the
    last ones in file order (`val_holdout: tail`, nanoGPT's split). Either way ceil(n * val_fraction) documents.
    """
    def load(source: str, split: str):
        return load_text_dataset(source, config.text_field, config.dataset_config, split,
                                 sample_by=config.text_sample_by, cache_dir=raw_cache)

    documents = load(config.dataset, config.dataset_split)
    if config.val_dataset is not None:
        return documents, load(config.val_dataset, config.dataset_split)
    if config.val_split is not None:
        return documents, load(config.dataset, config.val_split)
    if len(documents) < 2:
        raise UserError(
            f"dataset {config.dataset} has {len(documents)} document(s), too few to hold out validation; "
            f"use text_sample_by=paragraph or line, or name a validation file with val_dataset"
        )
    if config.val_holdout == "tail":
        n_train = len(documents) - math.ceil(len(documents) * config.val_fraction)
        return documents.select(range(n_train)), documents.select(range(n_train, len(documents)))
    split = documents.train_test_split(test_size=config.val_fraction, seed=config.seed, shuffle=True)
    return split["train"], split["test"]


def prepare_datasets(config: TrainConfig, tokenizer, tokenizer_dir: str | os.PathLike) -> PackedData:
    """Packed train and validation blocks for `config`, from the cache when the same tokenizer + data were seen.

    Validation documents: see `split_documents` (split before tokenising, so no document is in both).
    """
    if config.streaming:
        return _prepare_streaming(config, tokenizer)
    cache_root = Path(config.data_cache_dir) if config.data_cache_dir else default_data_cache_dir()
    key = compute_cache_key(config, tokenizer_dir)
    folder = cache_root / key[:20]
    marker = folder / "complete.json"
    if marker.is_file():
        stats = json.loads(marker.read_text())
        logger.info("packed data from cache %s", folder)
        return PackedData(datasets.load_from_disk(str(folder / "train")), datasets.load_from_disk(str(folder / "val")),
                          folder, True, stats)

    work = claim_build_folder(cache_root, key[:20])  # also removes builds of dead processes (run_lock.py)
    train_documents, val_documents = split_documents(config, raw_cache=cache_root / "raw")
    packed = {}
    for name, docs in (("train", train_documents), ("val", val_documents)):
        tokenized = tokenize_documents(docs, tokenizer, num_proc=config.num_proc)
        total = _count_tokens(tokenized)
        if total < config.block_size:  # no block: datasets' from_generator would fail ("corresponds to no data")
            source = config.val_dataset if name == "val" and config.val_dataset else config.dataset
            raise UserError(
                f"the {name} split of {source} has {total} tokens, fewer than block_size={config.block_size}; "
                f"lower block_size or add data"
            )
        blocks = pack_into_blocks(tokenized, config.block_size, cache_dir=work / f"{name}_build")
        blocks.save_to_disk(str(work / name))
        packed[name] = blocks
    stats = {
        "train_documents": len(train_documents),
        "val_documents": len(val_documents),
        "train_blocks": len(packed["train"]),
        "val_blocks": len(packed["val"]),
        "block_size": config.block_size,
        "cache_key": key,
    }
    for name in ("train", "val"):
        shutil.rmtree(work / f"{name}_build", ignore_errors=True)
    (work / "complete.json").write_text(json.dumps(stats, indent=2))
    try:
        os.rename(work, folder)
    except OSError:  # another process finished the same cache first: use theirs
        shutil.rmtree(work, ignore_errors=True)
    return PackedData(datasets.load_from_disk(str(folder / "train")), datasets.load_from_disk(str(folder / "val")),
                      folder, False, stats)


def _prepare_streaming(config: TrainConfig, tokenizer) -> PackedData:
    documents = load_text_dataset(config.dataset, config.text_field, config.dataset_config, config.dataset_split,
                                  streaming=True, sample_by=config.text_sample_by)
    if config.val_dataset is not None or config.val_split is not None:
        val_source, val_split = (config.val_dataset, config.dataset_split) if config.val_dataset else \
            (config.dataset, config.val_split)
        val_documents = load_text_dataset(val_source, config.text_field, config.dataset_config, val_split,
                                          streaming=True, sample_by=config.text_sample_by)
        train_documents = documents
    else:
        val_documents = documents.take(STREAMING_VAL_DOCUMENTS)
        train_documents = documents.skip(STREAMING_VAL_DOCUMENTS)
    train = pack_into_blocks(tokenize_documents(train_documents, tokenizer), config.block_size)
    # Validation is re-read on every evaluation pass, so it is materialised once (it is small by construction).
    val_rows = list(pack_into_blocks(tokenize_documents(val_documents, tokenizer), config.block_size))
    if not val_rows:
        raise UserError(f"the streaming validation documents of {config.dataset} give no full block of {config.block_size} tokens")
    val = datasets.Dataset.from_list(val_rows)
    return PackedData(train, val, None, False, {"val_blocks": len(val), "block_size": config.block_size})


# --- bytes per token (for bits per byte) ---------------------------------------------------------------------------


def token_byte_lengths(tokenizer) -> list[int]:
    """UTF-8 bytes each token id stands for; special tokens (end-of-text) count 0 bytes.

    Byte-level BPE tokens are strings over GPT-2's 256-character byte alphabet, one character per byte, so the
    count is exact even for tokens holding part of a multi-byte character. Other tokenizers fall back to decoding
    the single token.
    """
    vocab_size = len(tokenizer)
    special_ids = set(tokenizer.all_special_ids)
    tokens = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
    byte_alphabet = set(bytes_to_unicode().values())
    is_byte_level = all(token is None or token_id in special_ids or set(token) <= byte_alphabet
                        for token_id, token in enumerate(tokens))
    lengths = []
    for token_id, token in enumerate(tokens):
        if token is None or token_id in special_ids:
            lengths.append(0)
        elif is_byte_level:
            lengths.append(len(token))
        else:
            lengths.append(len(tokenizer.decode([token_id]).encode("utf-8")))
    return lengths
