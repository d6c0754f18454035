"""The data: documents -> tokenised documents -> packed blocks (cached on disk) -> batches.

Each stage is a plain function (tokenize_documents, pack_into_blocks, build_loaders); prepare_datasets chains them
after holding out a validation split (split_documents) and caches the packed result under a key that hashes the
tokenizer files, the data and every setting that changes the blocks. Reading files into documents is corpus.py's;
sharding batches across processes is Accelerate's, and a resumed run skips the batches it had (loop.py).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import os
import shutil
import time
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import datasets
import torch
from torch.utils.data import DataLoader, Sampler

from hf_gpt_custom.errors import UserError, no_room_cause, write_failure_fix
from hf_gpt_custom.training.config import TrainConfig
from hf_gpt_custom.training.corpus import fingerprint_local_source, load_text_dataset
from hf_gpt_custom.training.fingerprints import tokenizer_file_sha256s, vocabulary_file_sha256s
from hf_gpt_custom.training.run_lock import claim_build_folder
from hf_gpt_custom.training.token_bytes import TokenBytes

logger = logging.getLogger(__name__)

# Bump when the packing or caching logic changes so old caches are not reused. 4: version 3 could store the text of
# a replaced file's old contents under its new contents' key (the raw-text cache knew files by path and mtime). 5: a
# byte-order mark, blank records and hidden files in a folder are no longer documents. 7: validation blocks carry
# byte_counts (token_bytes.py). 8: those counts are the text's as written under a normalizer (offsets), and the
# table's only where it is exact token by token (a cache of 7 may hold either earlier rule's counts).
CACHE_FORMAT_VERSION = 8
# Streaming sources have no length: without a validation split, the first documents are held out.
STREAMING_VAL_DOCUMENTS = 1000

# --- tokenising and packing ----------------------------------------------------------------------------------------


def tokenize_documents(dataset, tokenizer, num_proc: int = 1, count_bytes: bool = False):
    """Dataset{text} -> Dataset{input_ids}: each document's ids as the tokenizer wraps a text, then end-of-text.

    The end-of-text token after every document is GPT-2's separator: packed blocks then never run two documents
    together without a boundary the model can see. A tokenizer that puts its own tokens around a text (a Llama's
    BOS) gets them around every document (document_template), as transformers' run_clm.py trains.
    `count_bytes` (validation): also `byte_counts`, the bytes of text each token stands for, summing to each
    document's UTF-8 length (token_bytes.py): the denominator of val_bits_per_byte.
    """
    eos_token_id = tokenizer.eos_token_id
    if eos_token_id is None:
        raise UserError(f"tokenizer {tokenizer.name_or_path!r} has no eos_token; documents need an end-of-text separator")
    encode_ids = document_encoder(tokenizer)
    before, after = document_template(tokenizer)
    after = after if after[-1:] == [eos_token_id] else [*after, eos_token_id]  # one separator, the tokenizer's own

    table = TokenBytes.of(tokenizer) if count_bytes else None
    # offsets into the text as written: the exact bytes each token covers (a fast tokenizer's backend, as it
    # encodes documents); without them, the table's counts scaled to each document's length
    backend = _document_backend(tokenizer.backend_tokenizer) if count_bytes and tokenizer.is_fast else None
    # The table's counts are a document's own only where they are right token by token: every probe counted
    # exactly, and a text the normalizer leaves as it is. A total that merely matches is no proof (WordPiece's "##"
    # pieces and dropped spaces; NFKC lengthening "½" and shortening "m²"): a block cut inside the document would
    # divide by bytes its tokens do not cover. (A document that begins with a space, one byte short under a dummy
    # prefix, is caught by its total.)
    table_is_exact = table is not None and not table.check(encode_ids, with_leading_space=False)
    normalizer = backend.normalizer if backend is not None else None

    def encode(batch: dict[str, list]) -> dict[str, list]:
        texts_ids = encode_ids(batch["text"])
        documents = [before + ids + after for ids in texts_ids]
        if table is None:
            return {"input_ids": documents}
        return {"input_ids": documents, "byte_counts": _byte_counts(batch["text"], texts_ids, documents)}

    def _byte_counts(texts: list[str], texts_ids: list[list[int]], documents: list[list[int]]) -> list[list[int]]:
        counts = []
        for text, ids, document in zip(texts, texts_ids, documents):
            from_table = table.table_counts(document, len(before))
            if (table_is_exact and sum(from_table) == len(text.encode("utf-8"))
                    and (normalizer is None or normalizer.normalize_str(text) == text)):
                counts.append(from_table)  # our tokenizer's, GPT-2's, SentencePiece's (no normalizer)
                continue
            encoding = None  # the offsets say what each token covers as written
            if backend is not None:
                backend.encode_special_tokens = True  # set on every call: pickling (num_proc workers) drops it
                encoding = backend.encode(text, add_special_tokens=False)
            counts.append(table.written_counts(text, encoding.offsets, len(before), len(after))
                          if encoding is not None and encoding.ids == ids  # the offsets are of these very tokens
                          else table.document_counts(document, text, len(before)))
        return counts

    if isinstance(dataset, datasets.IterableDataset):
        return dataset.map(encode, batched=True, remove_columns=["text"])
    # never datasets' own cache of a map: its fingerprint hashes `encode`, not the code it calls (token_bytes.py, the
    # tokenizer's engine), so a rebuild after CACHE_FORMAT_VERSION moved would read the old results back
    return dataset.map(encode, batched=True, num_proc=num_proc if num_proc > 1 else None, remove_columns=["text"],
                       desc="tokenizing", load_from_cache_file=False)


def document_template(tokenizer) -> tuple[list[int], list[int]]:
    """The special ids `tokenizer(text)` puts before and after a text of its own accord: a Llama's [BOS] before
    (its post-processor's "<s> $A"), nothing for GPT-2's. Continued pre-training of a Llama without its BOS trained
    on documents unlike every prompt its tokenizer then encodes (generation, evaluation and the card's snippets all
    start with BOS)."""
    for probe in _TEMPLATE_PROBES:  # the first the tokenizer encodes to something: an empty text locates nothing
        plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
        if not plain:
            continue
        wrapped = tokenizer(probe)["input_ids"]
        for start in range(len(wrapped) - len(plain) + 1):
            if wrapped[start:start + len(plain)] == plain:
                return list(wrapped[:start]), list(wrapped[start + len(plain):])
        return [], []  # the text itself changed (a normalizer that acts on whole texts): no tokens of its own to add
    return [], []


# Texts whose tokens document_template looks for inside tokenizer(text): Latin, digits, Cyrillic, CJK, a byte
_TEMPLATE_PROBES = ("a", "The", "0", ".", "Я", "的", "\x00")


def document_encoder(tokenizer) -> Callable[[list[str]], list[list[int]]]:
    """texts -> each text's ids, no special tokens added, none cut or padded, and special-token text such as a
    literal "<|endoftext|>" kept as text (only the separator tokenize_documents appends is a boundary): how documents
    are tokenised (token_bytes.py checks its table with it). Ids only, no Python BatchEncoding per document:
    our tokenizer's encode_ids_batch (tiktoken's engine when the vocabulary allows, ~4x the Rust batch call), else a
    copy of any fast tokenizer's Rust backend (`_document_backend`)."""
    encode_ids = getattr(tokenizer, "encode_ids_batch", None)
    if encode_ids is None:
        backend = _document_backend(tokenizer.backend_tokenizer)

        def encode_ids(texts: list[str]) -> list[list[int]]:
            # set on every call: pickling the backend (datasets' num_proc workers) drops this flag
            if not backend.encode_special_tokens:
                backend.encode_special_tokens = True
            return [encoding.ids for encoding in backend.encode_batch_fast(texts, add_special_tokens=False)]

    return lambda texts: _encode_with_fallback(tokenizer, encode_ids, texts)


def _document_backend(backend):
    """A copy of a `tokenizers.Tokenizer` that encodes whole documents: no truncation, no padding.

    The Rust backend keeps the truncation and padding of the last `tokenizer(...)` call, and a saved tokenizer.json
    brings its "truncation"/"padding" sections back on load: used as it is, it cut every document to max_length or
    padded it with pad ids. A copy, so the caller's tokenizer keeps its settings.
    """
    documents = copy.deepcopy(backend)
    documents.no_truncation()
    documents.no_padding()
    documents.encode_special_tokens = True  # "<|endoftext|>" in a document is text, as our encode_ids_batch has it
    return documents


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
        return tokenizer(text, add_special_tokens=False, split_special_tokens=True, verbose=False)["input_ids"]
    except Exception:
        raise
    except BaseException as err:  # noqa: B036
        if isinstance(err, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        raise UserError(f"a document of {len(text):,} characters (starting {text[:40]!r}) cannot be tokenised "
                        f"({type(err).__name__}: {err}); split or remove it") from err


def _iterate_blocks(documents: Iterator[dict[str, list[int]]], block_size: int) -> Iterator[dict[str, list[int]]]:
    """Blocks of `block_size` from documents' `input_ids` (and `byte_counts`, cut at the same places)."""
    buffer: list[int] = []
    byte_buffer: list[int] = []
    for document in documents:
        buffer.extend(document["input_ids"])
        byte_buffer.extend(document.get("byte_counts", ()))
        start = 0  # blocks are cut at offsets and the consumed prefix dropped once: slicing off each block from
        while len(buffer) - start >= block_size:  # the front would copy the rest of a long document every time
            block = buffer[start : start + block_size]
            row = {"input_ids": block, "labels": list(block)}
            if "byte_counts" in document:
                row["byte_counts"] = byte_buffer[start : start + block_size]
            start += block_size
            yield row
        del buffer[:start]
        del byte_buffer[:start]
    # the tail shorter than block_size is dropped: fewer than block_size tokens of the whole corpus


def _blocks_from_dataset(dataset, block_size: int) -> Iterator[dict[str, list[int]]]:
    yield from _iterate_blocks(_documents(dataset), block_size)


def _documents(dataset) -> Iterator[dict[str, list[int]]]:
    if isinstance(dataset, datasets.IterableDataset):
        yield from dataset
        return
    columns = [name for name in ("input_ids", "byte_counts") if name in dataset.column_names]
    for batch in dataset.iter(batch_size=1000):
        for values in zip(*(batch[name] for name in columns)):
            yield dict(zip(columns, values))


def pack_into_blocks(dataset, block_size: int, cache_dir: str | os.PathLike | None = None):
    """Dataset{input_ids} -> Dataset{input_ids, labels}: all documents concatenated, cut every `block_size` tokens.

    Exactly floor(total_tokens / block_size) blocks; block k is tokens [k*block_size, (k+1)*block_size) of the
    concatenation, carried across document (and map-batch) boundaries, so nothing is padded. Example with
    block_size=4: documents [a b EOS] [c d e EOS] -> blocks [a b EOS c] and [d e EOS]-tail dropped (3 < 4 tokens).
    `labels` equal `input_ids`; the model shifts them. Documents with `byte_counts` (validation) keep them, cut alike.
    """
    if block_size < 1:
        raise UserError(f"block_size={block_size} must be >= 1")
    if isinstance(dataset, datasets.IterableDataset):
        return datasets.IterableDataset.from_generator(
            _blocks_from_dataset, gen_kwargs={"dataset": dataset, "block_size": block_size}
        )
    columns = ["input_ids", "labels"] + (["byte_counts"] if "byte_counts" in dataset.column_names else [])
    features = datasets.Features({name: datasets.List(datasets.Value("int32")) for name in columns})
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
    for name, sha256 in {**tokenizer_file_sha256s(tokenizer_dir), **vocabulary_file_sha256s(tokenizer_dir)}.items():
        add(name, sha256)
    for role, source in (("train", config.dataset), ("val", config.val_dataset)):
        if source is None:
            continue
        if Path(source).exists():
            add(f"{role}:files", fingerprint_local_source(source))
        else:
            add(f"{role}:hub", (source, config.dataset_config, config.dataset_split))
            if config.dataset_revision is not None:  # without one: the key of caches built before revisions
                add(f"{role}:revision", config.dataset_revision)
    # the split's settings only where they pick the documents (split_documents): a seed sweep with val_holdout=tail
    # or a val_dataset tokenized the corpus again for each seed, into identical copies (the dataread hunt)
    holds_out = config.val_dataset is None and config.val_split is None
    used = {"val_fraction": holds_out, "val_holdout": holds_out, "seed": holds_out and config.val_holdout != "tail"}
    for name in ("text_field", "text_sample_by", "val_split", "val_fraction", "val_holdout", "seed", "block_size"):
        add(name, getattr(config, name) if used.get(name, True) else None)
    return digest.hexdigest()


def _count_tokens(tokenized) -> int:
    """Tokens in Dataset{input_ids}, summed in Arrow (no Python list per document)."""
    import pyarrow.compute as pc

    lengths = pc.list_value_length(tokenized.data.column("input_ids"))
    return int(pc.sum(lengths).as_py() or 0)


def default_data_cache_dir() -> Path:
    hf_home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    return hf_home / "hf_gpt_custom" / "packed"


def data_cache_root(config: TrainConfig) -> Path:
    """The folder `data_cache_dir` names (else the default): packed blocks, and under raw/ datasets' copies of the
    local files, so that one setting decides where the data stage writes (and its message's fix is true)."""
    return Path(config.data_cache_dir) if config.data_cache_dir else default_data_cache_dir()


def split_documents(config: TrainConfig, raw_cache: str | os.PathLike | None = None):
    """(train documents, validation documents) as Dataset{text}; no document is in both. `raw_cache`: where datasets
    keeps its copy of local files (default: raw/ under the data cache, so the tokenizer stage and the data stage
    read one copy, in the folder data_cache_dir names).

    Validation comes from `val_dataset` (a separate local file/folder), else from the Hub dataset's `val_split`,
    else from holding out `val_fraction` of the documents: a seeded random sample (`val_holdout: random`) or the
    last ones in file order (`val_holdout: tail`: like nanoGPT's split, but of whole documents, not of characters).
    Either way ceil(n * val_fraction) documents.
    """
    if raw_cache is None:
        raw_cache = data_cache_root(config) / "raw"

    def load(source: str, split: str):
        return load_text_dataset(source, config.text_field, config.dataset_config, split,
                                 sample_by=config.text_sample_by, cache_dir=raw_cache,
                                 revision=None if Path(source).exists() else config.dataset_revision)

    documents = load(config.dataset, config.dataset_split)
    if config.val_dataset is not None:
        return documents, load(config.val_dataset, config.dataset_split)
    if config.val_split is not None:
        return documents, load(config.dataset, config.val_split)
    if len(documents) < 2:
        raise UserError(
            f"dataset {config.dataset} has {len(documents)} document(s), too few to hold out validation"
            + (f"; split it into more documents with text_sample_by=line (now {config.text_sample_by}), add text, "
               if config.text_sample_by != "line" else "; add text, ")
            + "or name a validation file with val_dataset"
        )
    n_val = math.ceil(len(documents) * config.val_fraction)
    if n_val >= len(documents):  # datasets' train_test_split refused it in its own words, the tail split read none
        raise UserError(
            f"val_fraction={config.val_fraction} holds out all {len(documents)} documents of dataset {config.dataset} "
            f"(ceil({len(documents)} x {config.val_fraction}) = {n_val}), leaving none to train on; lower val_fraction "
            f"below {(len(documents) - 1) / len(documents):.3g}, split the text into more documents"
            + (f" with text_sample_by=line (now {config.text_sample_by})" if config.text_sample_by != "line" else "")
            + ", or name a validation file with val_dataset")
    if config.val_holdout == "tail":
        n_train = len(documents) - n_val
        return documents.select(range(n_train)), documents.select(range(n_train, len(documents)))
    split = documents.train_test_split(test_size=config.val_fraction, seed=config.seed, shuffle=True)
    return split["train"], split["test"]


def prepare_datasets(config: TrainConfig, tokenizer, tokenizer_dir: str | os.PathLike) -> PackedData:
    """Packed train and validation blocks for `config`, from the cache when the same tokenizer + data were seen.

    Validation documents: see `split_documents` (split before tokenising, so no document is in both).
    """
    if config.streaming:
        return _prepare_streaming(config, tokenizer)
    cache_root = data_cache_root(config)
    key = compute_cache_key(config, tokenizer_dir)
    folder = cache_root / key[:20]
    marker = folder / "complete.json"
    if marker.is_file():
        try:
            stats = json.loads(marker.read_text())
            loaded = datasets.load_from_disk(str(folder / "train")), datasets.load_from_disk(str(folder / "val"))
        except Exception as error:  # noqa: BLE001 — pyarrow's and datasets' errors for a truncated or missing file
            # derived data only (a disk fault, a file deleted by hand): set aside and built again from the dataset,
            # where a bare pyarrow "Expected to be able to read ... bytes" stopped the run
            aside = folder.with_name(f"{folder.name}.damaged-{os.getpid()}-{time.time_ns()}")
            try:
                os.rename(folder, aside)
            except FileNotFoundError:  # another run found it damaged first and set it aside: build as it does
                pass
            shutil.rmtree(aside, ignore_errors=True)
            logger.warning("the packed-data cache %s was damaged (%s: %s); building it again", folder,
                           type(error).__name__, str(error).splitlines()[0][:200] if str(error) else "")
        else:
            logger.info("packed data from cache %s", folder)
            warn_if_validation_outweighs(config, stats)
            return PackedData(*loaded, folder, True, stats)

    work = claim_build_folder(cache_root, key[:20])  # also removes builds of dead processes (run_lock.py)
    try:
        train_documents, val_documents, packed = _build_packed(config, tokenizer, work, cache_root)
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
    except Exception as err:  # bad data (UserError) or a bug: the half-built folder is ours to remove, not the next run's
        shutil.rmtree(work, ignore_errors=True)
        full = no_room_cause(err)
        if full is not None and not isinstance(err, UserError):  # a bare traceback from inside datasets / fsspec
            raise UserError(f"the packed-data cache {cache_root} could not be written: {full.strerror}; "
                            f"{write_failure_fix(full, 'that folder', 'set data_cache_dir to a folder')} (nothing was "
                            f"trained)") from err
        raise
    warn_if_validation_outweighs(config, stats)
    try:
        os.rename(work, folder)
    except OSError:  # another process finished the same cache first: use theirs
        shutil.rmtree(work, ignore_errors=True)
    return PackedData(datasets.load_from_disk(str(folder / "train")), datasets.load_from_disk(str(folder / "val")),
                      folder, False, stats)


def warn_if_validation_outweighs(config: TrainConfig, stats: dict) -> None:
    """val_fraction counts documents, so a few long ones can put most of the text in validation (a folder of two
    files held out one: 85% of the tokens, and the model trained on the other 15%). Warned when the held-out share of
    the blocks is more than twice val_fraction; a validation file or split of the user's own is left alone."""
    if config.val_dataset is not None or config.val_split is not None:
        return
    share = stats["val_blocks"] / max(1, stats["train_blocks"] + stats["val_blocks"])
    if share > 2 * config.val_fraction:
        logger.warning(
            "validation holds %.0f%% of the text (%d of %d blocks): val_fraction=%g holds out whole documents, "
            "%d of %d (the share rounded up to a whole document, and documents differ in length); split the text "
            "into more documents (a text file: text_sample_by=paragraph or line; a records file: more rows), or "
            "name a validation file with val_dataset",
            100 * share, stats["val_blocks"], stats["train_blocks"] + stats["val_blocks"], config.val_fraction,
            stats["val_documents"], stats["train_documents"] + stats["val_documents"])


def _build_packed(config: TrainConfig, tokenizer, work: Path, cache_root: Path):
    """(train documents, val documents, {"train": blocks, "val": blocks}), the blocks saved under `work`."""
    train_documents, val_documents = split_documents(config, raw_cache=cache_root / "raw")
    packed = {}
    for name, docs in (("train", train_documents), ("val", val_documents)):
        tokenized = tokenize_documents(docs, tokenizer, num_proc=config.num_proc, count_bytes=name == "val")
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
    return train_documents, val_documents, packed


def _prepare_streaming(config: TrainConfig, tokenizer) -> PackedData:
    documents = load_text_dataset(config.dataset, config.text_field, config.dataset_config, config.dataset_split,
                                  streaming=True, sample_by=config.text_sample_by, revision=config.dataset_revision)
    if config.val_dataset is not None or config.val_split is not None:
        val_source, val_split = (config.val_dataset, config.dataset_split) if config.val_dataset else \
            (config.dataset, config.val_split)
        val_documents = load_text_dataset(val_source, config.text_field, config.dataset_config, val_split,
                                          streaming=True, sample_by=config.text_sample_by,
                                          revision=None if config.val_dataset else config.dataset_revision)
        train_documents = documents
    else:
        val_documents = documents.take(STREAMING_VAL_DOCUMENTS)
        train_documents = documents.skip(STREAMING_VAL_DOCUMENTS)
    train = pack_into_blocks(tokenize_documents(train_documents, tokenizer), config.block_size)
    # Validation is re-read on every evaluation pass, so it is materialised once (it is small by construction).
    val_rows = list(pack_into_blocks(tokenize_documents(val_documents, tokenizer, count_bytes=True),
                                     config.block_size))
    if not val_rows:
        raise UserError(f"the streaming validation documents of {config.dataset} give no full block of {config.block_size} tokens")
    val = datasets.Dataset.from_list(val_rows)
    return PackedData(train, val, None, False, {"val_blocks": len(val), "block_size": config.block_size})


# --- batches ---------------------------------------------------------------------------------------------------------


class EpochShuffleSampler(Sampler[int]):
    """A fresh permutation per epoch from `seed + epoch`, owning its generator.

    Unlike RandomSampler it never draws from the global RNG, so dropout's random stream is the same whether or
    not the run was resumed, and every process computes the same permutation (Accelerate then shards batches).
    """

    def __init__(self, num_samples: int, seed: int):
        self.num_samples = num_samples
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        yield from torch.randperm(self.num_samples, generator=generator).tolist()


class ShiftingBlockSampler(EpochShuffleSampler):
    """`shift_block_boundaries`: each epoch a new offset where the training text is cut into blocks.

    Yields (block, offset) pairs for `ShiftedBlocks`: epoch e shuffles blocks 0..n-2 exactly as EpochShuffleSampler
    shuffles n-1 blocks, then draws one offset in [0, block_size) from the same generator. Block k of that epoch is
    tokens [k*block_size + offset, (k+1)*block_size + offset) of the packed text: the tail of packed block k and the
    head of block k+1. One block fewer than packed, whatever the offset, so every epoch has the same length and a
    resumed run knows where it is. The offset depends on seed and epoch only: every process of a multi-process run
    draws the same, and a resumed run the one it had.
    """

    def __init__(self, num_packed_blocks: int, block_size: int, seed: int):
        super().__init__(num_packed_blocks - 1, seed)
        self.block_size = block_size

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.num_samples, generator=generator).tolist()
        offset = int(torch.randint(0, self.block_size, (1,), generator=generator))
        for block in order:
            yield block, offset


class ShiftedBlocks(torch.utils.data.Dataset):
    """The packed training blocks read at an offset: item (k, offset) is block k's tokens from `offset` on, then
    block k+1's first `offset` tokens; offset 0 is block k itself. Labels equal input_ids, as in the packed rows."""

    def __init__(self, packed):
        self.packed = packed

    def __len__(self) -> int:
        return len(self.packed) - 1

    def __getitem__(self, item: tuple[int, int]) -> dict[str, list[int]]:
        block, offset = item
        first, second = self.packed[block : block + 2]["input_ids"]
        ids = first[offset:] + second[:offset]
        return {"input_ids": ids, "labels": list(ids)}


def collate_blocks(rows: list[dict]) -> dict[str, torch.Tensor]:
    keys = ("input_ids", "labels", "byte_counts") if "byte_counts" in rows[0] else ("input_ids", "labels")
    return {key: torch.tensor([row[key] for row in rows], dtype=torch.long) for key in keys}


def val_blocks_scored(val_blocks: int, config: TrainConfig) -> int:
    """The validation blocks an evaluation scores: all of them, or the first eval_batches × batch_size."""
    return val_blocks if config.eval_batches is None else min(val_blocks, config.eval_batches * config.batch_size)


def build_loaders(config: TrainConfig, data, collate_fn=collate_blocks) -> tuple[DataLoader, DataLoader]:
    """Training batches (reshuffled each epoch, cut anew each epoch with shift_block_boundaries, or in stream order)
    and the fixed validation batches.

    `data` has `.train` and `.val` datasets (`datasets.Dataset`s; `.val` is cut to eval_batches with .select);
    `collate_fn` turns a list of rows into a batch (default: packed blocks; fine-tuning pads examples)."""
    # Each loader owns a generator: without one, every new iterator (an epoch, the skip to a resumed position) draws its
    # seed from the global RNG, and a resumed run's dropout masks would no longer be the uninterrupted run's.
    if config.streaming:
        train_loader = DataLoader(data.train, batch_size=config.batch_size, collate_fn=collate_fn, drop_last=True,
                                  generator=torch.Generator().manual_seed(config.seed))
    elif config.shift_block_boundaries:  # pre-training only (fine-tuning refuses the setting)
        train_loader = DataLoader(
            ShiftedBlocks(data.train), batch_size=config.batch_size,
            sampler=ShiftingBlockSampler(len(data.train), config.block_size, config.seed),
            collate_fn=collate_fn, drop_last=True, generator=torch.Generator().manual_seed(config.seed),
        )
    else:
        train_loader = DataLoader(
            data.train, batch_size=config.batch_size, sampler=EpochShuffleSampler(len(data.train), config.seed),
            collate_fn=collate_fn, drop_last=True, generator=torch.Generator().manual_seed(config.seed),
        )
    val_data = data.val
    if config.eval_batches is not None:
        # the same blocks whatever the number of processes, so validation numbers stay comparable
        val_data = val_data.select(range(val_blocks_scored(len(val_data), config)))
    val_loader = DataLoader(val_data, batch_size=config.batch_size, collate_fn=collate_fn,
                            generator=torch.Generator().manual_seed(config.seed))
    return train_loader, val_loader
