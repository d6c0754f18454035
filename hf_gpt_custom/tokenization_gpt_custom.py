"""GPTCustomTokenizerFast: byte-level BPE with GPT-2's byte alphabet and split pattern, on the `tokenizers` backend.

Training lives in tokenizer_training.py and the pure-Python oracle in bpe_reference.py. This module imports only
the standard library, `tokenizers`, `transformers` and its sibling tiktoken_engine.py (which imports `tiktoken`,
when installed, as the engine of `encode_ids_batch`): `save_pretrained` copies both next to the tokenizer files as
remote code, so they must load where hf_gpt_custom is not installed.
"""

from __future__ import annotations

import functools
import json
import os

from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers
from tokenizers.models import BPE
from transformers import BatchEncoding, PreTrainedTokenizerFast
from transformers.tokenization_utils_base import TruncationStrategy
from transformers.utils import PaddingStrategy
from .errors import MissingFileError, UserError

ENDOFTEXT = "<|endoftext|>"

# GPT-2's pre-tokenisation split (openai/gpt-2 src/encoder.py). `pre_tokenizers.ByteLevel(use_regex=True)` applies
# exactly this pattern in Rust; it is spelled out here for the reference BPE and for tiktoken.
GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Options that need the generic transformers path (extra outputs, pairs, pre-split words, chat sanitising).
_OPTIONS_NEEDING_GENERIC_PATH = (
    "is_split_into_words",
    "return_token_type_ids",
    "return_overflowing_tokens",
    "return_special_tokens_mask",
    "return_offsets_mapping",
    "return_length",
    "sanitize_control_tokens",
)

VOCAB_FILES_NAMES = {"vocab_file": "vocab.json", "merges_file": "merges.txt", "tokenizer_file": "tokenizer.json"}


@functools.lru_cache
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map, so every byte string is a readable vocab entry.

    Printable Latin-1 bytes map to themselves; the other 68 (control bytes, space, 0x7F-0xA0, 0xAD) map to
    U+0100 onwards in byte order. Space (0x20) becomes 'Ġ', newline (0x0A) becomes 'Ċ'.
    """
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    byte_to_char = {byte: chr(byte) for byte in printable}
    next_code_point = 256
    for byte in range(256):
        if byte not in byte_to_char:
            byte_to_char[byte] = chr(next_code_point)
            next_code_point += 1
    return byte_to_char


@functools.lru_cache
def _unicode_to_bytes() -> dict[str, int]:
    return {char: byte for byte, char in bytes_to_unicode().items()}


def token_to_bytes(token: str) -> bytes:
    """The raw bytes behind a byte-level vocab entry, e.g. 'Ġthe' -> b' the'."""
    char_to_byte = _unicode_to_bytes()
    return bytes(char_to_byte[char] for char in token)


def _read_vocab(vocab: str | os.PathLike | dict[str, int] | None) -> dict[str, int] | None:
    if vocab is None or isinstance(vocab, dict):
        return vocab
    with open(vocab, encoding="utf-8") as handle:
        return json.load(handle)


def _read_merges(merges: str | os.PathLike | list | None) -> list[tuple[str, str]]:
    if merges is None:
        return []
    if isinstance(merges, (str, os.PathLike)):
        with open(merges, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
        # merges.txt starts with a "#version: 0.2" header, as GPT-2's does
        merges = [line for line in lines if line and not line.startswith("#version")]
    return [tuple(merge.split(" ")) if isinstance(merge, str) else tuple(merge) for merge in merges]


def _build_backend(vocab: dict[str, int], merges: list[tuple[str, str]], add_prefix_space: bool) -> Tokenizer:
    """The Rust pipeline: GPT-2's split and byte alphabet, then plain BPE."""
    backend = Tokenizer(
        BPE(
            vocab=vocab,
            merges=merges,
            dropout=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
        )
    )
    # ByteLevel(use_regex=True) splits with GPT2_SPLIT_PATTERN, then maps bytes to printable characters.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    return backend


class GPTCustomTokenizerFast(PreTrainedTokenizerFast):
    """Byte-level BPE tokenizer for GPT-Custom models: lossless on any Unicode text, GPT-2 compatible files.

    Vocabulary layout (written by `train_tokenizer`): ids 0-255 are the 256 single bytes in byte order (id b is byte
    b, as in minbpe and the reference BPE), then the merged tokens in the order they were learned, then
    `<|endoftext|>` last — GPT-2's convention (50256 is its last id). `<|endoftext|>` is bos, eos and the document
    separator; there is no unk token (every byte is in the vocabulary). `train_tokenizer` folders set pad = eos; a
    model's folder also sets `model_max_length` (= n_positions) and `padding_side="left"` for batched generation.

    Special-token text in input becomes the special token, as in transformers' GPT-2 tokenizer:
    `tokenizer(text + tokenizer.eos_token)` ends with `eos_token_id`. To keep such strings as plain text (so a
    document cannot inject a boundary) pass `split_special_tokens=True` per call or when loading.
    `encode_ids_batch`, the corpus path, keeps them as text unless told otherwise: training data is data, and the
    training pipeline appends `eos_token_id` after each document itself.

    A tokenizer needs its vocabulary: `from_pretrained` on a folder without tokenizer.json or vocab.json +
    merges.txt raises `MissingFileError`; `GPTCustomTokenizerFast.bytes_only()` is the explicit 257-token tokenizer
    (the 256 bytes and `<|endoftext|>`, no merges).
    """

    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]
    model = BPE

    def __init__(
        self,
        vocab: str | dict[str, int] | None = None,
        merges: str | list | None = None,
        bos_token: str | AddedToken = ENDOFTEXT,
        eos_token: str | AddedToken = ENDOFTEXT,
        unk_token: str | AddedToken | None = None,
        pad_token: str | AddedToken | None = None,
        add_prefix_space: bool = False,
        split_special_tokens: bool = False,
        **kwargs,
    ):
        vocab = _read_vocab(vocab if vocab is not None else kwargs.pop("vocab_file", None))
        merges = _read_merges(merges if merges is not None else kwargs.pop("merges_file", None))
        if vocab is not None:
            self._tokenizer = _build_backend(vocab, merges, add_prefix_space)
        elif not os.path.isfile(kwargs.get("tokenizer_file") or ""):  # with tokenizer.json the base class loads it
            raise MissingFileError(
                "GPTCustomTokenizerFast needs a vocabulary: pass vocab= and merges=, load a folder with "
                "from_pretrained, or call GPTCustomTokenizerFast.bytes_only() for the 257-token bytes-only one"
            )
        super().__init__(
            bos_token=bos_token,
            eos_token=eos_token,
            unk_token=unk_token,
            pad_token=pad_token,
            add_prefix_space=add_prefix_space,
            split_special_tokens=split_special_tokens,
            **kwargs,
        )

    @classmethod
    def bytes_only(cls, **kwargs) -> GPTCustomTokenizerFast:
        """The 256 single bytes and `<|endoftext|>`, no merges: lossless but ~4x the tokens of a trained vocabulary.

        For tests and tools that need a real tokenizer without training one; a model trained with one must keep it.
        """
        vocab = {char: byte for byte, char in bytes_to_unicode().items()}
        vocab[ENDOFTEXT] = len(vocab)
        return cls(vocab=vocab, merges=[], **kwargs)

    @classmethod
    def _from_pretrained(cls, resolved_vocab_files, pretrained_model_name_or_path, *args, **kwargs):
        """Refuse a folder without the vocabulary instead of falling back to the bytes-only one (wrong ids)."""
        found = {key for key, path in resolved_vocab_files.items() if path is not None}
        has_vocabulary = "tokenizer_file" in found or {"vocab_file", "merges_file"} <= found
        if not has_vocabulary and kwargs.get("vocab") is None:
            wanted = [VOCAB_FILES_NAMES["tokenizer_file"]] + [
                VOCAB_FILES_NAMES[key] for key in ("vocab_file", "merges_file") if key not in found
            ]
            raise MissingFileError(
                f"{pretrained_model_name_or_path} has no tokenizer vocabulary: missing {', '.join(wanted)} "
                "(tokenizer.json alone, or vocab.json with merges.txt, is enough); save the tokenizer into the folder "
                "with tokenizer.save_pretrained(folder), or load it from the folder it was trained into"
            )
        return super()._from_pretrained(resolved_vocab_files, pretrained_model_name_or_path, *args, **kwargs)

    # -- encoding ---------------------------------------------------------------------------------------------------

    def _encode_plus(self, text, text_pair=None, **kwargs):
        _check_text_input(text, "text")
        if text_pair is not None:
            _check_text_input(text_pair, "text_pair")
        try:
            if text_pair is None and not any(kwargs.get(option) for option in _OPTIONS_NEEDING_GENERIC_PATH):
                return self._encode_texts(text, **kwargs)
            return super()._encode_plus(text, text_pair, **kwargs)
        except (TypeError, UnicodeEncodeError) as err:
            _raise_if_unencodable(text, text_pair, err)
            raise

    def _encode_texts(
        self,
        text: str | list[str],
        add_special_tokens: bool = True,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: TruncationStrategy = TruncationStrategy.DO_NOT_TRUNCATE,
        max_length: int | None = None,
        stride: int = 0,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors=None,
        return_attention_mask: bool | None = None,
        verbose: bool = True,
        split_special_tokens: bool | None = None,
        **_ignored,
    ) -> BatchEncoding:
        """`tokenizer(text)` for the everyday case — text (no pair), input_ids and attention_mask — in one pass.

        Same Rust call and same result as the generic `TokenizersBackend._encode_plus`, minus its per-sequence
        Python bookkeeping (a dict per encoding, then restacking): batches ~1.2x as fast as GPT2TokenizerFast's
        (benchmarks/bench_tokenizer.py).
        """
        is_batched = isinstance(text, (list, tuple))
        self.set_truncation_and_padding(
            padding_strategy, truncation_strategy, max_length, stride, pad_to_multiple_of, padding_side
        )
        if split_special_tokens is None:
            split_special_tokens = self.split_special_tokens
        if self._tokenizer.encode_special_tokens != split_special_tokens:
            self._tokenizer.encode_special_tokens = split_special_tokens
        texts = list(text) if is_batched else [text]
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)
        data = {"input_ids": [encoding.ids for encoding in encodings]}
        if return_attention_mask is not False:  # None = as model_input_names, which lists attention_mask
            data["attention_mask"] = [encoding.attention_mask for encoding in encodings]
        for input_ids in data["input_ids"]:
            self._eventual_warn_about_too_long_sequence(input_ids, max_length, verbose)
        if not is_batched and return_tensors is None:
            return BatchEncoding({key: value[0] for key, value in data.items()}, encodings)
        return BatchEncoding(data, encodings, tensor_type=return_tensors)

    def encode_ids_batch(
        self, texts: list[str], split_special_tokens: bool = True, num_threads: int | None = None
    ) -> list[list[int]]:
        """Token ids for many texts at once: no special tokens added, no padding, no truncation.

        The same ids as `tokenizer(texts, split_special_tokens=split_special_tokens)["input_ids"]`, without
        attention masks, offsets and `BatchEncoding` objects — the fast path for tokenizing a corpus (the training
        pipeline's, which appends `eos_token_id` after each document). Unlike `__call__`, special-token text such as
        a literal "<|endoftext|>" stays text by default (`split_special_tokens=True`), whatever the tokenizer was
        loaded with: a corpus that mentions the string cannot fake document boundaries. Pass False to match it.

        When `tiktoken` is installed and the vocabulary is verified to be one tiktoken encodes identically
        (`encode_ids_engine()`), tiktoken's Rust BPE does the work: on one thread ~4x the speed of the `tokenizers`
        batch call, the speed of a loop of tiktoken's `encode_ordinary` (benchmarks/bench_tokenizer.py). Otherwise,
        and for documents tiktoken cannot take (a whitespace run of 100K+ characters, see tiktoken_engine.py), the
        `tokenizers` backend does, as in `__call__`.

        `num_threads` (tiktoken engine only; default: 1, or RAYON_NUM_THREADS / all CPUs when TOKENIZERS_PARALLELISM
        is switched on) encodes chunks of `texts` in parallel: tiktoken releases the GIL while it works.
        """
        if isinstance(texts, str):
            raise UserError(
                f"encode_ids_batch expects a list of strings, got one string {texts[:40]!r}; wrap it in a list"
            )
        texts = list(texts)
        _check_text_input(texts, "texts")
        engine = self._tiktoken_engine()
        try:
            if engine.can_encode(split_special_tokens):
                try:
                    return engine.encode_batch(
                        texts,
                        split_special_tokens,
                        resolve_num_threads(num_threads),
                        encode_elsewhere=functools.partial(self._encode_ids_on_tokenizers, split_special_tokens),
                    )
                except TypeError:
                    pass  # a (text, pair) item: tiktoken takes str only, the Rust path below knows pairs
            return self._encode_ids_on_tokenizers(split_special_tokens, texts)
        except (TypeError, UnicodeEncodeError) as err:
            _raise_if_unencodable(texts, None, err)
            raise

    def _encode_ids_on_tokenizers(self, split_special_tokens: bool, texts: list[str]) -> list[list[int]]:
        # An earlier `tokenizer(..., padding=True)` leaves padding on in the Rust tokenizer: switch it off
        self.set_truncation_and_padding(PaddingStrategy.DO_NOT_PAD, TruncationStrategy.DO_NOT_TRUNCATE, None, 0, None, None)
        if self._tokenizer.encode_special_tokens != split_special_tokens:
            self._tokenizer.encode_special_tokens = split_special_tokens
        return [encoding.ids for encoding in self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)]

    def encode_ids_engine(self, split_special_tokens: bool = True) -> str:
        """Which library `encode_ids_batch` runs on: "tiktoken" or "tokenizers" (see tiktoken_engine.py)."""
        return "tiktoken" if self._tiktoken_engine().can_encode(split_special_tokens) else "tokenizers"

    def _tiktoken_engine(self) -> TiktokenEngine:
        """Built on first use (~0.1 s for 8K entries) and kept per instance, outside `__dict__` so that pickles and
        `datasets` fingerprints of the tokenizer do not change; rebuilt when an added token, the normalizer or the
        pre-tokenizer changes (~2 us to check). Added tokens are compared in full, flags included: re-adding an
        existing token or changing its lstrip/rstrip leaves the vocabulary size as it was but changes the ids."""
        backend = self._tokenizer
        pipeline_key = (
            repr(sorted(backend.get_added_tokens_decoder().items())),
            backend.normalizer.__getstate__() if backend.normalizer is not None else None,
            backend.pre_tokenizer.__getstate__() if backend.pre_tokenizer is not None else None,
        )
        engine = ENGINES.get(self)
        if engine is None or engine.pipeline_key != pipeline_key:
            engine = build_tiktoken_engine(json.loads(backend.to_str()), pipeline_key)
            ENGINES[self] = engine
        return engine

    # -- saving -----------------------------------------------------------------------------------------------------

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        """tokenizer.json (the full pipeline) plus GPT-2-style vocab.json and merges.txt for other tools."""
        file_names = super()._save_pretrained(save_directory, file_names, legacy_format, filename_prefix)
        return file_names + self.save_vocabulary(str(save_directory), filename_prefix)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, str]:
        prefix = f"{filename_prefix}-" if filename_prefix else ""
        vocab_path = os.path.join(save_directory, prefix + "vocab.json")
        merges_path = os.path.join(save_directory, prefix + "merges.txt")
        model = json.loads(self._tokenizer.to_str())["model"]
        # Like GPT-2's vocab.json, include the special tokens with their ids so the file alone is the whole vocab.
        vocab = dict(model["vocab"])
        for token_id, token in self.added_tokens_decoder.items():
            vocab.setdefault(token.content, token_id)
        with open(vocab_path, "w", encoding="utf-8") as handle:
            json.dump(dict(sorted(vocab.items(), key=lambda item: item[1])), handle, ensure_ascii=False)
            handle.write("\n")
        with open(merges_path, "w", encoding="utf-8") as handle:
            handle.write("#version: 0.2\n")
            for merge in model["merges"]:
                handle.write((merge if isinstance(merge, str) else " ".join(merge)) + "\n")
        return vocab_path, merges_path


def _check_text_input(text, name: str) -> None:
    """Reject a non-string early with its type in the message (transformers' own message names no value)."""
    if isinstance(text, str):
        return
    if isinstance(text, (list, tuple)):
        for position, item in enumerate(text):
            if not isinstance(item, (str, list, tuple)):
                raise UserError(
                    f"{name}[{position}] is {type(item).__name__} {item!r:.60}, but the tokenizer encodes str only; "
                    "convert it with str() or drop it"
                )
        return
    raise UserError(
        f"{name} is {type(text).__name__} {text!r:.60}, but the tokenizer encodes str or a list of str; "
        "convert it with str() first"
    )


def _raise_if_unencodable(text, text_pair, err: Exception) -> None:
    """Turn the backend's error for a lone surrogate into one that points at the character and the fix."""
    pending = [text, text_pair]
    while pending:
        item = pending.pop()
        if isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as encode_err:
                bad = item[encode_err.start]
                raise UserError(
                    f"text contains a lone surrogate {bad!r} (U+{ord(bad):04X}) at position {encode_err.start}, which "
                    "is not valid Unicode and has no UTF-8 bytes; fix the source, or replace it first with "
                    "text.encode('utf-8', 'replace').decode('utf-8')"
                ) from err


__all__ = ["ENDOFTEXT", "GPT2_SPLIT_PATTERN", "GPTCustomTokenizerFast", "bytes_to_unicode", "token_to_bytes"]


# Last, because tiktoken_engine imports this module's byte-level helpers. (A `from .module import` line: it is how
# save_pretrained finds the file to ship with this one as remote code.)
from .tiktoken_engine import ENGINES, TiktokenEngine, build_tiktoken_engine, resolve_num_threads  # noqa: E402
