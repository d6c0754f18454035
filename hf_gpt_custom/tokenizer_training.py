"""train_tokenizer(): a corpus -> a folder that AutoTokenizer loads (tokenizer.json, vocab.json, merges.txt, code).

The merges are learned by the `tokenizers` library's BpeTrainer on GPT-2 pre-tokenised text; this module only reads
the corpus, lays out the vocabulary (bytes, merges, special tokens) and saves it. `datasets` and our tokenizer class
(transformers, torch) are imported inside functions so `import hf_gpt_custom` stays fast and the training config
can check tokenizer_vocab_size against `smallest_vocab_size` before torch loads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

from .byte_level import bytes_to_unicode
from .errors import MissingFileError, UserError
from .hub import is_hub_repo_id

logger = logging.getLogger(__name__)

# Which files a local corpus is made of and how each is read live in training/corpus.py, shared with training
# (imported inside the functions that read files, so `import hf_gpt_custom` does not load the trainer's package).
# Plain text is fed to the trainer in blocks of about this many characters (see _read_text_file).
TEXT_BLOCK_CHARS = 1 << 20
# A byte-level BPE vocabulary always holds one token per byte, whatever it learns on top.
BYTE_TOKENS = 256


def train_tokenizer(
    inputs: str | os.PathLike | Iterable[str],
    out_dir: str | os.PathLike,
    vocab_size: int = 8192,
    min_frequency: int = 2,
    special_tokens: list[str] | None = None,
    text_field: str = "text",
    dataset_config: str | None = None,
    split: str = "train",
    show_progress: bool = True,
    source: str | None = None,
    revision: str | None = None,
) -> Path:
    """Train a byte-level BPE tokenizer and save it to `out_dir`; returns `out_dir` as a Path.

    `inputs` is one of
    - local files or folders (a path or a list of paths): .txt/.text/.raw (and any other file named
      explicitly) are plain text; .jsonl/.json/.parquet are records whose `text_field` column is the text. A
      folder contributes every file with one of those suffixes, recursively, in sorted order;
    - a Hub dataset name (`"user/corpus"`; `"Salesforce/wikitext"` with dataset_config="wikitext-2-raw-v1"),
      read with `datasets.load_dataset(name, dataset_config, split=split, revision=revision, streaming=True)`;
    - an iterable of strings, one document each (a generator, a `datasets` column, a list of texts). A list whose
      items are all existing paths is read as files, a one-item list holding a Hub-style name as a Hub dataset.
      `source` names where such documents come from, for errors (e.g. "the training documents of data.jsonl").

    `vocab_size` counts everything: 256 bytes + merges + special tokens. `special_tokens` defaults to
    ["<|endoftext|>"]; "<|endoftext|>" is always the first of them (bos = eos). Layout: ids 0-255 = bytes in byte
    order, then merged tokens in the order they were learned, then the special tokens — GPT-2's convention of
    <|endoftext|> right after the merges. Any other special token whose text occurs in the corpus is refused, as the
    corpus streams by: tokenizer() would read that text as the token, whose embedding training never sees (training
    keeps corpus text as text). If the corpus runs out of pairs occurring `min_frequency` times,
    the vocabulary is smaller than asked (a warning says so); `len(tokenizer)` is always the true size.

    The same corpus and settings give byte-identical files.
    """
    from .tokenization_gpt_custom import ENDOFTEXT, GPTCustomTokenizerFast

    special_tokens = _check_special_tokens(special_tokens)
    if not isinstance(vocab_size, int) or vocab_size < smallest_vocab_size(len(special_tokens)):
        raise UserError(
            f"vocab_size={vocab_size!r} is too small: it must hold the {BYTE_TOKENS} byte tokens and "
            f"{len(special_tokens)} special token(s) {special_tokens}; use vocab_size >= "
            f"{smallest_vocab_size(len(special_tokens))} (8192 is typical)"
        )
    if not isinstance(min_frequency, int) or min_frequency < 1:
        raise UserError(f"min_frequency={min_frequency!r} must be an integer >= 1 (2 = merge only pairs seen twice)")
    _refuse_output_inside_an_input_folder(inputs, Path(out_dir))

    from hf_gpt_custom.training.run_lock import lock_output_folder

    # One training writes a folder at a time: two would leave one's tokenizer.json beside the other's vocab.json
    with lock_output_folder(out_dir, "the tokenizer folder", "another --out"):
        texts = iter_corpus(inputs, text_field=text_field, dataset_config=dataset_config, split=split, source=source,
                            revision=revision)

        # <|endoftext|> is not looked for: a literal one is text to training and the end-of-text token to
        # tokenizer(), GPT-2's convention (docs/tokenizer.md), and its embedding is trained after every document
        counter = _CountingIterator(texts, special_tokens_to_refuse=special_tokens[1:])
        tokenizer = Tokenizer(BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        # The bars are drawn on stderr, and only where it is a terminal: elsewhere (a log file) they would show
        # nothing but the newlines below.
        show_progress = show_progress and _is_a_terminal(sys.stderr)
        trainer = BpeTrainer(
            vocab_size=vocab_size - len(special_tokens),  # specials are appended after the merges, not by the trainer
            min_frequency=min_frequency,
            show_progress=show_progress,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=[],
        )
        with _native_stdout_to_stderr() if show_progress else contextlib.nullcontext():
            tokenizer.train_from_iterator(counter, trainer=trainer)
        if counter.n_chars == 0:
            raise UserError(
                f"the corpus {_describe(inputs)} is empty ({counter.n_texts} documents, 0 characters of text); "
                + _where_the_text_was_looked_for(inputs, text_field, split)
            )

        vocab, merges = _lay_out_vocabulary(json.loads(tokenizer.to_str())["model"], special_tokens)
        if len(vocab) < vocab_size:
            logger.warning(
                "vocabulary has %d entries, fewer than vocab_size=%d: no more pairs occur %d times in %d characters",
                len(vocab), vocab_size, min_frequency, counter.n_chars,
            )
        # pad = eos, as GPT-2 fine-tuning recipes set it, so `tokenizer(texts, padding=True)` works on the bare folder;
        # padding is masked out, so the id it uses does not matter. (A model's folder also sets model_max_length.)
        fast_tokenizer = GPTCustomTokenizerFast(
            vocab=vocab, merges=merges, pad_token=ENDOFTEXT, extra_special_tokens=special_tokens[1:]
        )
        return _save_in_place_of(fast_tokenizer, Path(out_dir).absolute())


def _is_a_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


@contextlib.contextmanager
def _native_stdout_to_stderr():
    """tokenizers' Rust trainer ends each of its progress bars (stderr) with a newline printed to the process's
    stdout: three blank lines at the top of `hf-gpt-custom run ... | tee log`. They go to stderr, with the bars they
    end, while it trains. Where stdout is the terminal too, or closed, nothing is moved. The move is the process's:
    a line another thread writes to fd 1 meanwhile goes to stderr too (Python's own print is buffered)."""
    if sys.stdout is None or _is_a_terminal(sys.stdout):
        yield
        return
    sys.stdout.flush()
    saved = _moved_to_stderr()
    try:
        yield
    finally:
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _moved_to_stderr() -> int | None:
    """fd 1 pointed at stderr; returns a copy of what it was, or None where either is closed (nothing moved)."""
    try:
        saved = os.dup(1)
    except OSError:
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    return saved


def _save_in_place_of(tokenizer, out_dir: Path) -> Path:
    """Save `tokenizer` into `out_dir` through a staging folder in it, moving each file in once all are written
    (tokenizer.json, what AutoTokenizer reads, last): a kill during save_pretrained left a new tokenizer.json beside
    the previous tokenizer's vocab.json and merges.txt, a folder that loads as one tokenizer and reads as another.
    A tokenizer file of the previous one that this one does not write (added_tokens.json) goes first; other files in
    `out_dir` stay. The staging folder is inside `out_dir`, which may be the one writable folder of a read-only
    parent (a mounted volume)."""
    import shutil

    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / ".tokenizer.tmp"
    shutil.rmtree(staging, ignore_errors=True)  # left by an interrupted call
    tokenizer.save_pretrained(staging)
    written = sorted(path.name for path in staging.iterdir())
    for name in TOKENIZER_FILE_NAMES:
        if name not in written and (out_dir / name).is_file():
            (out_dir / name).unlink()
    templates = out_dir / CHAT_TEMPLATES_FOLDER
    if CHAT_TEMPLATES_FOLDER not in written and (templates.is_symlink() or templates.is_dir()):
        templates.unlink() if templates.is_symlink() else shutil.rmtree(templates)  # a link: never what it points at
    for name in sorted(written, key=lambda name: name == "tokenizer.json"):
        os.replace(staging / name, out_dir / name)
    staging.rmdir()
    return out_dir


# What a tokenizer folder's loaders read (AutoTokenizer, GPT2Tokenizer): a previous tokenizer's are replaced or
# removed. The chat templates too: a retrained folder kept the old template, naming tokens the new vocabulary lacks
# (applied as plain bytes, silently: the tokparity3 hunt)
TOKENIZER_FILE_NAMES = ("tokenizer.json", "vocab.json", "merges.txt", "added_tokens.json", "special_tokens_map.json",
                        "tokenizer_config.json", "chat_template.jinja", "chat_template.json")
CHAT_TEMPLATES_FOLDER = "additional_chat_templates"


def smallest_vocab_size(num_special_tokens: int = 1) -> int:
    """The fewest entries train_tokenizer can lay out: the byte tokens and the special tokens (<|endoftext|>, the
    one training uses, and any others): what the training config checks tokenizer_vocab_size against."""
    return BYTE_TOKENS + num_special_tokens


def _check_special_tokens(special_tokens: list[str] | None) -> list[str]:
    from .tokenization_gpt_custom import ENDOFTEXT

    if special_tokens is None:
        return [ENDOFTEXT]
    if isinstance(special_tokens, str) or not all(isinstance(token, str) and token for token in special_tokens):
        raise UserError(f"special_tokens={special_tokens!r} must be a list of non-empty strings, e.g. ['<|pad|>']")
    ordered = [ENDOFTEXT] + [token for token in special_tokens if token != ENDOFTEXT]
    if len(set(ordered)) != len(ordered):
        raise UserError(f"special_tokens={special_tokens!r} has duplicates; list each token once")
    return ordered


def _lay_out_vocabulary(trained_model: dict, special_tokens: list[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Renumber the trainer's vocabulary: bytes in byte order (id b = byte b), merged tokens, then specials.

    The trainer numbers the 256 byte characters by sorting them as characters; merged tokens already follow in
    creation order from id 256. Merges are applied by their rank, not by id, so renumbering changes no split.
    """
    byte_to_char = bytes_to_unicode()
    vocab = {byte_to_char[byte]: byte for byte in range(256)}
    for token, trainer_id in sorted(trained_model["vocab"].items(), key=lambda item: item[1]):
        if trainer_id < 256:
            assert token in vocab, f"trainer alphabet has non-byte token {token!r}"
            continue
        assert trainer_id == len(vocab), "trainer ids after the alphabet must be contiguous"
        vocab[token] = trainer_id
    for token in special_tokens:
        # the vocabulary spells tokens in GPT-2's byte alphabet (" the" is "Ġthe", "\n" is "Ċ"): compare that form
        if token in vocab or "".join(byte_to_char[byte] for byte in token.encode("utf-8")) in vocab:
            raise UserError(
                f"special token {token!r} is also a learned (or byte) token, so it would take that text's place; pick "
                f"a name that cannot occur as text in one GPT-2 chunk, like {_suggested_name(token)!r}"
            )
        vocab[token] = len(vocab)
    merges = [tuple(merge.split(" ")) if isinstance(merge, str) else tuple(merge) for merge in trained_model["merges"]]
    return vocab, merges


def _suggested_name(token: str) -> str:
    """The token's own letters wrapped as <|endoftext|> is, or another name where that is the token itself."""
    name = f"<|{token.strip().strip('<|>') or 'pad'}|>"
    return name if name != token else f"<|{token.strip('<|>')}_token|>"


# --- reading the corpus ------------------------------------------------------------------------------------------


def iter_corpus(
    inputs: str | os.PathLike | Iterable[str],
    text_field: str = "text",
    dataset_config: str | None = None,
    split: str = "train",
    source: str | None = None,
    revision: str | None = None,
) -> Iterator[str]:
    """The documents of `inputs` (see `train_tokenizer`) as strings. Paths are checked before anything is read."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(item, (str, os.PathLike)) for item in inputs):
        kind = _classify_input_list(inputs)
        if kind == "files":
            return _iter_files(_expand_paths(inputs), text_field)
        if kind == "hub":
            return _iter_hub_dataset(str(inputs[0]), text_field, dataset_config, split, revision)
    if isinstance(inputs, (bytes, dict)) or not isinstance(inputs, Iterable):
        raise UserError(
            f"inputs is {type(inputs).__name__}; pass file/folder paths, a Hub dataset name or an iterable of strings"
        )
    return _iter_strings(inputs, source or f"the {type(inputs).__name__} of documents passed as inputs")


def _classify_input_list(items: list) -> str:
    """'files', 'hub' or 'texts' for a list of strings.

    Files when every item exists. Refused, naming the missing one, when the items all look like paths (a corpus
    suffix, or ./ ../ / ~/ in front), or when some exist and every missing one is a single word (shards/part2 beside
    shards/part0): a mistyped path would otherwise be trained on as a document. Any other list is documents (a line
    of code starting with "//" beside ordinary lines, "." beside paragraphs), or one Hub dataset name.
    """
    exists = [_path_exists(item) for item in items]
    if all(exists):
        return "files"
    missing_are_words = all(not str(item).split() or len(str(item).split()) == 1
                            for item, found in zip(items, exists) if not found)
    if (any(exists) and missing_are_words) or all(found or _looks_like_path(item) for item, found in zip(items, exists)):
        missing = next(str(item) for item, found in zip(items, exists) if not found)
        raise MissingFileError(
            f"input file {missing!r} not found (looked in {Path.cwd()}); check the path, or pass a Hub dataset name "
            f"such as 'wikitext' (documents that only look like paths: pass them as an iterator, iter(texts))"
        )
    if len(items) == 1 and is_hub_repo_id(str(items[0])):
        return "hub"
    return "texts"


def _refuse_output_inside_an_input_folder(inputs, out_dir: Path) -> None:
    """A folder input is read whole: a tokenizer saved inside it would be read as corpus text by the next run."""
    items = [inputs] if isinstance(inputs, (str, os.PathLike)) else inputs if isinstance(inputs, (list, tuple)) else []
    if not items or not all(isinstance(item, (str, os.PathLike)) and _path_exists(item) for item in items):
        return  # documents, a Hub name, or a missing path (iter_corpus names it)
    for folder in (Path(item) for item in items if Path(item).is_dir()):
        if out_dir.resolve().is_relative_to(folder.resolve()):
            raise UserError(f"the output folder {out_dir} is inside the corpus folder {folder}, which is read whole: "
                            f"the saved tokenizer files would become training text; save it outside {folder}")


def _looks_like_path(item) -> bool:
    text = str(item)
    return isinstance(item, os.PathLike) or (
        "\n" not in text and len(text) < 4096
        and (_kind_suffix(text) in _corpus_suffixes() or text.startswith(("./", "../", "/", "~/")))
    )


def _path_exists(item) -> bool:
    if not str(item).strip():
        return False  # Path("") is the working directory; an empty string here is an empty document
    try:
        return Path(item).exists()
    except (OSError, ValueError):  # a document, not a path: too long for a file name, or holds a NUL
        return False


def _kind_suffix(text: str) -> str:
    from hf_gpt_custom.training.corpus import kind_suffix

    return kind_suffix(text)


def _corpus_suffixes() -> tuple[str, ...]:
    from hf_gpt_custom.training.corpus import CORPUS_SUFFIXES

    return CORPUS_SUFFIXES


def _expand_paths(paths: list) -> list[Path]:
    from hf_gpt_custom.training.corpus import list_corpus_files

    return [file for path in paths for file in list_corpus_files(path, what="input")]


def _iter_files(files: list[Path], text_field: str) -> Iterator[str]:
    from hf_gpt_custom.training.corpus import reader_for

    for path in files:
        reader = reader_for(path)
        if reader == "text":
            yield from _read_text_file(path)
        else:
            yield from _read_record_file(path, reader, text_field)


def _read_text_file(path: Path) -> Iterator[str]:
    """A plain text file in blocks of ~1 MB (memory stays bounded), each cut between a non-space character and the
    whitespace after it.

    GPT-2's split regex ends a chunk there in the whole file too (no chunk holds whitespace after a non-space
    character), and a chunk that starts with whitespace does not depend on what came before it, so each block
    gives exactly the whole file's chunks and the learned merges do not depend on the block size. (A cut after the
    whitespace would not: "\n\n" at the end of a block is one chunk, while before "First" it is two.)
    """
    from hf_gpt_custom.training.corpus import open_text

    block: list[str] = []
    block_chars = 0
    try:
        # Universal newlines ("\r\n" and "\r" read as "\n"), as datasets' text builder reads the file for training:
        # a vocabulary learned on "\r" that training never sees would spend merges on it. utf-8-sig: a byte-order
        # mark is no text, as training reads it (corpus.py).
        with open_text(path) as handle:  # (through its compression: a .txt.gz is text, as datasets reads it)
            for line in handle:
                cut = _safe_cut(line) if block_chars >= TEXT_BLOCK_CHARS else None
                if cut is not None:
                    yield _BlockCutFromMore("".join(block) + line[:cut])
                    block, block_chars = [], 0
                    line = line[cut:]
                block.append(line)
                block_chars += len(line)
    except UnicodeDecodeError as err:
        from hf_gpt_custom.training.corpus import check_local_source_readable

        check_local_source_readable(str(path))  # training's message: the byte's offset in the file, its line, iconv
        raise UserError(f"{path}: not UTF-8 text ({err.reason}); convert it to UTF-8") from err
    if block:
        yield "".join(block)


class _BlockCutFromMore(str):
    """A block of a text file that the next text continues: text (a special token's) can run across the cut."""


def _safe_cut(line: str) -> int | None:
    """The last index i of `line` where whitespace follows a non-space character, or None: where a block may end
    (see _read_text_file). Never 0: the line before ended with its newline."""
    for i in range(len(line) - 1, 0, -1):
        if _is_split_space(line[i]) and not _is_split_space(line[i - 1]):
            return i
    return None


def _is_split_space(character: str) -> bool:
    """Whitespace as GPT-2's split pattern's \\s sees it (Unicode White_Space): str.isspace() also counts the
    information separators U+001C-U+001F, which the pattern treats as punctuation."""
    return character.isspace() and character not in "\x1c\x1d\x1e\x1f"


def _read_record_file(path: Path, loader: str, text_field: str) -> Iterator[str]:
    from datasets import load_dataset

    from hf_gpt_custom.training.corpus import check_record_files_utf8, literal_data_files, raise_first_bad_json_line

    check_record_files_utf8([path])  # arrow reads latin-1 in, and the first row read failed bare
    # streaming=True reads the file directly: no Arrow cache written next to the user's data or in ~/.cache
    records = load_dataset(loader, data_files=literal_data_files([path]), split="train", streaming=True)
    try:
        yield from _texts_from_records(records, text_field, source=str(path))
    except UserError:
        raise
    except Exception as err:  # pyarrow's bare ArrowInvalid (a lone surrogate escape): name the file and line
        if loader != "json":
            raise
        raise_first_bad_json_line([path], text_field, err)


def _iter_hub_dataset(name: str, text_field: str, dataset_config: str | None, split: str,
                      revision: str | None = None) -> Iterator[str]:
    from datasets import load_dataset

    try:
        records = load_dataset(name, dataset_config, split=split, revision=revision, streaming=True)
    except (FileNotFoundError, ConnectionError) as err:  # offline mode raises ConnectionError
        raise MissingFileError(
            f"{name!r} is neither a local file nor a Hub dataset that could be loaded ({err}); check the name, "
            "your network, or pass a local path"
        ) from err
    # Not a generator itself: a wrong name fails here, before training starts
    return _texts_from_records(records, text_field, source=f"Hub dataset {name!r} split {split!r}")


def _texts_from_records(records, text_field: str, source: str) -> Iterator[str]:
    for row_number, record in enumerate(records, start=1):
        if text_field not in record:
            raise UserError(
                f"{source} record {row_number}: no {text_field!r} field (fields: {sorted(record)}); "
                "pass text_field=<one of them> (--text-field on the command line)"
            )
        text = record[text_field]
        if text is None:
            continue
        if not isinstance(text, str):
            raise UserError(
                f"{source} record {row_number}: field {text_field!r} is {type(text).__name__}, not text; "
                "choose a text column with text_field"
            )
        yield text


def _iter_strings(texts: Iterable, source: str) -> Iterator[str]:
    for document_number, text in enumerate(texts, start=1):
        if not isinstance(text, str):
            raise UserError(
                f"{source}, document {document_number} (counting from 1): {type(text).__name__} {text!r:.60}, not "
                "text; every document must be a string — fix or drop it at its source"
            )
        yield text


class _CountingIterator:
    """Passes documents through to the trainer and counts them, so an empty corpus can be reported; refuses, as the
    text streams by, a special token that occurs in it."""

    def __init__(self, texts: Iterator[str], special_tokens_to_refuse: Iterable[str] = ()):
        self._texts = iter(texts)
        self.n_texts = 0
        self.n_chars = 0
        self._special_tokens = list(special_tokens_to_refuse)
        self._carried = ""  # the end of a file's block, where a token may begin and run on into the next block

    def __iter__(self):
        return self

    def __next__(self) -> str:
        text = next(self._texts)
        self.n_texts += 1
        self.n_chars += len(text)
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as bad:  # a lone surrogate ("\ud83d", half an emoji): tokenizers' bare error
                raise UserError(f"document {self.n_texts} (starting {text[:40]!r}) holds {bad.object[bad.start]!r}, "
                                f"half of a surrogate pair, at character {bad.start}: not text; fix or remove "
                                "it") from None
        if self._special_tokens:
            self._refuse_special_token_text(text)
        return text

    def _refuse_special_token_text(self, text: str) -> None:
        """tokenizer() reads a special token's text anywhere in its input (inside words too: "the" in "other"), but
        training keeps corpus text as text (encode_ids_batch), so the token's embedding would never be trained and
        every prompt holding that text would be fed it. Refused at the first text holding it: one pass, no waiting
        for the merges. Linear: one str.count per token over each text and the few characters carried before it."""
        searched = self._carried + text
        for token in self._special_tokens:
            count = searched.count(token)
            if count:
                position = searched.find(token)
                example = searched[max(0, position - 20):position + len(token) + 20]
                raise UserError(
                    f"special token {token!r} occurs as text in the corpus (at least {count} time"
                    f"{'s' if count > 1 else ''}, e.g. {example!r}), "
                    "where training reads it as text and tokenizer() as the special token, whose embedding training "
                    f"never learns; pick a name that cannot occur as text, like {_suggested_name(token)!r}"
                )
        longest = max(len(token) for token in self._special_tokens)
        is_cut = isinstance(text, _BlockCutFromMore) and longest > 1
        self._carried = searched[max(0, len(searched) - longest + 1):] if is_cut else ""


def _where_the_text_was_looked_for(inputs, text_field: str, split: str) -> str:
    """What to check when a corpus held no text: only the settings that were read for this kind of input."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    kind = "texts"
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(item, (str, os.PathLike)) for item in inputs):
        kind = _classify_input_list(inputs)
    if kind == "texts":
        return "pass documents with text in them"
    if kind == "hub":
        return f"check the split={split!r} and the text_field={text_field!r}"
    from hf_gpt_custom.training.corpus import reader_for

    if all(reader_for(path) == "text" for path in _expand_paths(inputs)):
        return "check the path: its text files hold no text"
    return f"check the path and the text_field={text_field!r} of its records"


def _describe(inputs) -> str:
    if isinstance(inputs, (str, os.PathLike)):
        return repr(str(inputs))
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(item, (str, os.PathLike)) for item in inputs):
        shown = ", ".join(repr(str(item)) for item in inputs[:3])
        return f"[{shown}{', ...' if len(inputs) > 3 else ''}]"
    return f"({type(inputs).__name__} of strings)"
