"""GPTCustomTokenizerFast: byte-level BPE with GPT-2's byte alphabet and split pattern, on the `tokenizers` backend.

Training lives in tokenizer_training.py, the pure-Python oracle in bpe_reference.py. `save_pretrained` ships this
module with its siblings (batch_output.py, byte_level.py, task_template.py, tiktoken_engine.py, errors.py) as remote
code, so they import only the standard library, `tokenizers`, `transformers` and, when installed, `tiktoken`.
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

from .batch_output import (BatchEncodingWithLazyEncodings, as_text_batch, backend_encodings, copy_text_input,
                           cut_to_length, pad_rows)
from .byte_level import GPT2_SPLIT_PATTERN, bytes_to_unicode, token_to_bytes
from .errors import MissingFileError, UserError
from .manifest import before_a_save_that_pushes, drop_hub_manifest, manifest_kept_current, save_options
from .task_template import TaskTemplate, read_task_template
from .tiktoken_engine import ENGINES, TiktokenEngine, build_tiktoken_engine, resolve_num_threads

ENDOFTEXT = "<|endoftext|>"
# The BPE model's settings that change its ids without changing its vocabulary (tokenizers.models.BPE's attributes)
_BPE_SETTINGS = ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", "byte_fallback",
                 "ignore_merges")

# Options whose outputs come from the `tokenizers` Encoding objects: such calls take transformers' own path.
_OPTIONS_NEEDING_ENCODINGS = (
    "is_split_into_words",
    "return_token_type_ids",
    "return_overflowing_tokens",
    "return_special_tokens_mask",
    "return_offsets_mapping",
    "return_length",
    "sanitize_control_tokens",
)

VOCAB_FILES_NAMES = {"vocab_file": "vocab.json", "merges_file": "merges.txt", "tokenizer_file": "tokenizer.json"}


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

    `tokenizer(texts)` gives transformers' output (ids, attention mask, padding, truncation, tensors, Encoding
    objects) with the ids made by the fastest engine that gives the same ones: tiktoken where the vocabulary allows
    (see tiktoken_engine.py), else the `tokenizers` backend, which also takes every call that needs more than ids
    (offsets, overflowing tokens, pre-split words, pairs without a task template).

    A fine-tuned task tokenizer (the `finetune` command saves one) adds GPT-1's template itself: `tokenizer(text)` is
    `start text extract`, `tokenizer(first, second)` is `start first delim second extract` (task_template.py), the
    very ids fine-tuning trained on. Truncation never cuts the template: like fine-tuning it cuts the first part from
    its start, whatever `truncation_side` says, and `.encodings` are then None. Special-token text in such a call is
    refused, since the data fine-tuning read kept it as text: pass the raw text, or `split_special_tokens=True`.

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

    def update_post_processor(self) -> None:
        """transformers rebuilds the post-processor from `add_bos_token` / `add_eos_token` whenever one is set, or
        given to from_pretrained: on a fine-tuned task tokenizer that removed GPT-1's template without a word
        (`add_eos_token=False`, meant as "add nothing", gave `text` for `start text extract`), and the task head
        read the last text token instead of the extract token. A task tokenizer keeps its template; asking it to add
        bos or eos as well is refused, since the template's start and extract tokens are what the head was trained
        on."""
        backend = getattr(self, "_tokenizer", None)
        if backend is None or read_task_template(backend) is None:
            super().update_post_processor()
            return
        if self.add_bos_token or self.add_eos_token:
            asked = "add_bos_token" if self.add_bos_token else "add_eos_token"
            object.__setattr__(self, "_add_bos_token", False)
            object.__setattr__(self, "_add_eos_token", False)
            raise UserError(f"{asked}=True on a fine-tuned task tokenizer: it adds GPT-1's template itself (start "
                            "text extract, the ids its head was trained on), which bos/eos would replace; leave "
                            f"{asked} unset")

    def save_pretrained(self, *args, **kwargs):
        # transformers writes a tokenizer's init kwargs, so a side set as an attribute after loading (padding_side =
        # "left" for batched generation) came back "right" on reload; GPT2TokenizerFast kept it only by way of its
        # backend's padding state, after a padded call
        self.init_kwargs.update(padding_side=self.padding_side, truncation_side=self.truncation_side)
        options = save_options(PreTrainedTokenizerFast.save_pretrained, self, *args, **kwargs)
        folder = options.get("save_directory")
        if options.get("push_to_hub"):
            before_a_save_that_pushes(folder, kwargs.get("token"), kwargs)
        with manifest_kept_current(folder):  # saved into an export or final/: its manifest follows
            return super().save_pretrained(*args, **kwargs)

    def push_to_hub(self, repo_id, *args, **kwargs):
        drop_hub_manifest(repo_id, token=kwargs.get("token"), revision=kwargs.get("revision"),
                          create_pr=kwargs.get("create_pr", False))
        return super().push_to_hub(repo_id, *args, **kwargs)

    # -- encoding ---------------------------------------------------------------------------------------------------

    def _encode_plus(self, text, text_pair=None, **options):
        _refuse_negative_lengths(options)  # negative: cut from the other end, or a Rust OverflowError
        _check_text_input(text, "text")
        if text_pair is not None:
            _check_text_input(text_pair, "text_pair")
        template = read_task_template(self._tokenizer) if options.get("add_special_tokens", True) else None
        try:
            if template is not None and isinstance(text, str) and isinstance(text_pair, str) and not text_pair:
                # transformers reads tokenizer("a", "") as no pair, but fine-tuning built a record's empty second part
                # as one (start first delim extract), as the batched call does: a one-row batch, unbatched
                return _one_row(self._encode_with_template(template, [text], [text_pair], options), options)
            if template is not None:
                return self._encode_with_template(template, text, text_pair, options)
            adds_tokens = options.get("add_special_tokens", True) and self._tokenizer.num_special_tokens_to_add(False)
            encoded = None if adds_tokens else self._encode_on_fastest_engine(text, text_pair, None, options)
            return encoded if encoded is not None else super()._encode_plus(text, text_pair, **options)
        except (TypeError, UnicodeEncodeError) as err:
            _raise_if_unencodable(text, text_pair, err)
            raise

    def pad(self, encoded_inputs, padding=True, max_length=None, pad_to_multiple_of=None, **options):
        # negative: no padding at all, silently (GPT2TokenizerFast's behaviour)
        _refuse_negative_lengths({"max_length": max_length, "pad_to_multiple_of": pad_to_multiple_of})
        return super().pad(encoded_inputs, padding, max_length, pad_to_multiple_of, **options)

    def _encode_with_template(self, template: TaskTemplate, text, text_pair, options: dict) -> BatchEncoding:
        """A task tokenizer's call: GPT-1's template around the text, cut as fine-tuning cut it."""
        split_special_tokens = options.get("split_special_tokens")
        if not (self.split_special_tokens if split_special_tokens is None else split_special_tokens):
            self._refuse_special_token_text(text, text_pair)
        truncation = options.get("truncation_strategy", TruncationStrategy.DO_NOT_TRUNCATE)
        if truncation == TruncationStrategy.ONLY_SECOND:
            raise UserError("truncation='only_second' is not how this task model was fine-tuned (the first part loses "
                            "its start, the second part is kept); use truncation=True")
        encoded = self._encode_on_fastest_engine(text, text_pair, template, options)
        if encoded is not None:
            return encoded
        if truncation != TruncationStrategy.DO_NOT_TRUNCATE:
            asked = [name for name in _OPTIONS_NEEDING_ENCODINGS if options.get(name)]
            raise UserError(f"{', '.join(asked) or 'this input'} and truncation do not go together on a task "
                            "tokenizer, which cuts inputs as fine-tuning did; drop one of the two")
        return super()._encode_plus(text, text_pair, **options)  # the backend's post-processor adds the template

    def _encode_on_fastest_engine(self, text, text_pair, template: TaskTemplate | None,
                                  options: dict) -> BatchEncoding | None:
        """transformers' `_encode_plus` output for calls that need only ids and masks, or None for the others.

        The ids come from `_encode_ids` (tiktoken where it gives the `tokenizers` ids); template, truncation and
        padding are applied here exactly as the Rust backend applies them. The Encoding objects are made by the Rust
        backend if and when someone asks for them (`.tokens()`, `.word_ids()`, `batch[0]`).
        """
        batch = as_text_batch(text, text_pair)
        if batch is None or any(options.get(name) for name in _OPTIONS_NEEDING_ENCODINGS):
            return None
        firsts, seconds, is_batched = batch
        truncation = options.get("truncation_strategy", TruncationStrategy.DO_NOT_TRUNCATE)
        padding = options.get("padding_strategy", PaddingStrategy.DO_NOT_PAD)
        max_length = options.get("max_length")
        is_truncated = truncation != TruncationStrategy.DO_NOT_TRUNCATE
        if max_length is None and (is_truncated or padding == PaddingStrategy.MAX_LENGTH):
            return None
        split_special_tokens = options.get("split_special_tokens")
        if split_special_tokens is None:
            split_special_tokens = self.split_special_tokens
        state = self._pipeline_state()
        if template is None:
            # the backend validates stride and cuts pairs across both parts; and without tiktoken it is as fast
            if seconds is not None or (is_truncated and (truncation == TruncationStrategy.ONLY_SECOND or options.get(
                    "stride"))) or not self._tiktoken_engine(state).can_encode(split_special_tokens):
                return None
        ids = self._encode_ids(firsts + (seconds or []), split_special_tokens, resolve_num_threads(None, True), state)
        if template is not None:
            pairs = zip(ids[: len(firsts)], ids[len(firsts):] if seconds is not None else [None] * len(firsts))
            rows = [template.build(first, second, max_length if is_truncated else None)[0] for first, second in pairs]
        elif is_truncated:
            rows = [cut_to_length(row, max_length, self.truncation_side) for row in ids]
        else:
            rows = ids
        padding_side = options.get("padding_side") or self.padding_side
        rows, masks = pad_rows(rows, padding, max_length, options.get("pad_to_multiple_of"), padding_side,
                           self.pad_token_id)
        data = {"input_ids": rows}
        return_attention_mask = options.get("return_attention_mask")
        if return_attention_mask or (return_attention_mask is None and "attention_mask" in self.model_input_names):
            data["attention_mask"] = masks
        for row in rows:
            self._eventual_warn_about_too_long_sequence(row, max_length, options.get("verbose", True))
        return_tensors = options.get("return_tensors")
        if not is_batched and return_tensors is None:
            data = {key: value[0] for key, value in data.items()}
        # The backend's Encodings for the same call, made later with the settings of now (refused if the tokenizer
        # changed since); a task template's cut is not the backend's, so those calls have none (`.encodings` is
        # None, as for a Python tokenizer).
        settings = {**options, "split_special_tokens": split_special_tokens, "padding_side": padding_side}
        make_encodings = None if template is not None and is_truncated else functools.partial(
            backend_encodings, self, copy_text_input(text), copy_text_input(text_pair), settings, self.truncation_side,
            state, self.pad_token)
        why_none = None if make_encodings is not None else (
            "a task tokenizer's truncated call cuts the input as fine-tuning did, keeping the template whole, which "
            "is not the backend's cut; call it without truncation for tokens, word ids and offsets")
        return BatchEncodingWithLazyEncodings(data, make_encodings, return_tensors, 1 if seconds is None else 2,
                                              why_none)

    def _refuse_special_token_text(self, text, text_pair) -> None:
        specials = [token.content for token in self._tokenizer.get_added_tokens_decoder().values() if token.special]
        for item in _strings_in(text, text_pair):
            found = next((special for special in specials if special in item), None)
            if found is not None:
                raise UserError(
                    f"text {item[:40]!r}{'...' if len(item) > 40 else ''} contains {found!r}: this fine-tuned "
                    "tokenizer adds GPT-1's template (start, [delimiter,] extract) itself and fine-tuning kept such "
                    "strings as text; pass the raw text, with split_special_tokens=True to keep special-token text as "
                    "text (add_special_tokens=False to write the template yourself)"
                )

    def encode_ids_batch(
        self, texts: list[str], split_special_tokens: bool = True, num_threads: int | None = None
    ) -> list[list[int]]:
        """Token ids for many texts at once: no special tokens added, no padding, no truncation.

        The same ids as `tokenizer(texts, split_special_tokens=split_special_tokens)["input_ids"]` (on a tokenizer
        without a task template), without attention masks and `BatchEncoding` — the corpus path of the training
        pipeline, which appends `eos_token_id` after each document. Unlike `__call__`, special-token text such as a
        literal "<|endoftext|>" stays text by default (`split_special_tokens=True`), whatever the tokenizer was
        loaded with: a corpus that mentions the string cannot fake document boundaries. Pass False to match it.

        The engine is tiktoken when the vocabulary is verified to encode identically on it (`encode_ids_engine()`),
        else the `tokenizers` backend; speeds in benchmarks/results/bench_tokenizer_threads1.md. `num_threads`
        (tiktoken engine only; default: 1, or RAYON_NUM_THREADS / all CPUs when TOKENIZERS_PARALLELISM is switched
        on) encodes chunks of `texts` in parallel: tiktoken releases the GIL while it works.
        """
        if isinstance(texts, str):
            raise UserError(
                f"encode_ids_batch expects a list of strings, got one string {texts[:40]!r}; wrap it in a list"
            )
        texts = list(texts)
        _check_text_input(texts, "texts")
        try:
            return self._encode_ids(texts, split_special_tokens, resolve_num_threads(num_threads))
        except (TypeError, UnicodeEncodeError) as err:
            _raise_if_unencodable(texts, None, err)
            raise

    def _encode_ids(self, texts: list[str], split_special_tokens: bool, num_threads: int,
                    state: tuple | None = None) -> list[list[int]]:
        """Ids of each text with no special tokens added: on tiktoken where it gives the backend's ids. `state`:
        `_pipeline_state()` when the caller has it already."""
        engine = self._tiktoken_engine(state)
        if engine.can_encode(split_special_tokens):
            try:
                return engine.encode_batch(
                    texts,
                    split_special_tokens,
                    num_threads,
                    encode_elsewhere=functools.partial(self._encode_ids_on_tokenizers, split_special_tokens),
                )
            except TypeError:
                pass  # a (text, pair) item: tiktoken takes str only, the backend knows pairs
        return self._encode_ids_on_tokenizers(split_special_tokens, texts)

    def _encode_ids_on_tokenizers(self, split_special_tokens: bool, texts: list[str]) -> list[list[int]]:
        # An earlier `tokenizer(..., padding=True)` leaves padding on in the Rust tokenizer: switch it off
        self.set_truncation_and_padding(PaddingStrategy.DO_NOT_PAD, TruncationStrategy.DO_NOT_TRUNCATE, None, 0, None, None)
        # The backend is shared (libraries call backend_tokenizer.encode): its special-token matching is put back
        previous, self._tokenizer.encode_special_tokens = self._tokenizer.encode_special_tokens, split_special_tokens
        try:
            return [encoding.ids for encoding in self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
        finally:
            self._tokenizer.encode_special_tokens = previous

    def encode_ids_engine(self, split_special_tokens: bool = True) -> str:
        """Which library `encode_ids_batch` runs on: "tiktoken" or "tokenizers" (see tiktoken_engine.py)."""
        return "tiktoken" if self._tiktoken_engine().can_encode(split_special_tokens) else "tokenizers"

    def _pipeline_state(self) -> tuple:
        """What turns text into ids: the added tokens, the normalizer, the pre-tokenizer, the BPE model's settings
        and size, and the post-processor (a task template), in that order. Added tokens are compared in full, flags
        included: re-adding an existing token or changing its lstrip/rstrip leaves the vocabulary size as it was but
        changes the ids. The model is compared by its settings (BPE-dropout switched on after a first call, byte
        fallback...), vocabulary size and 16 of its learned tokens, spread from the last, not all its merges:
        serialising them costs ~1.4 ms a call at 8,192 entries, the 16 tokens ~3 us. Without the tokens, a BPE model
        of another vocabulary of the same size and settings put in `backend_tokenizer.model` kept the old engine and
        its ids, in silence."""
        backend = self._tokenizer
        model, size = backend.model, backend.get_vocab_size(with_added_tokens=False)
        model_settings = (type(model).__name__, size, *(getattr(model, name, None) for name in _BPE_SETTINGS),
                          *(model.id_to_token(i) for i in range(size - 1, 255, -max(1, (size - 256) // 16))))
        return (repr(sorted(backend.get_added_tokens_decoder().items())),
                *(part.__getstate__() if part is not None else None
                  for part in (backend.normalizer, backend.pre_tokenizer)),
                model_settings,
                backend.post_processor.__getstate__() if backend.post_processor is not None else None)

    def _tiktoken_engine(self, state: tuple | None = None) -> TiktokenEngine:
        """Built on first use and kept per instance, outside `__dict__` so that pickles and `datasets` fingerprints of
        the tokenizer do not change; rebuilt when an added token, the normalizer, the pre-tokenizer or the BPE model's
        settings change (`_pipeline_state()`, passed as `state` by a caller that has it)."""
        backend = self._tokenizer
        pipeline_key = (state or self._pipeline_state())[:4]  # the post-processor adds ids after the engine's
        engine = ENGINES.get(self)
        if engine is None or engine.pipeline_key != pipeline_key:
            engine = build_tiktoken_engine(json.loads(backend.to_str()), pipeline_key)
            ENGINES[self] = engine
        return engine

    # -- saving -----------------------------------------------------------------------------------------------------

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        """tokenizer.json (the full pipeline) plus GPT-2-style vocab.json and merges.txt for other tools, and, when
        tokens were added (`add_tokens`, `add_special_tokens`, a task template), the two records of them that a
        loader of vocab.json + merges.txt (GPT2Tokenizer, this class without tokenizer.json) reads: without them it
        splits an added token into bytes, other ids in silence.
        - added_tokens.json, transformers' legacy file: content -> id of the non-special ones (tokenizer_config.json
          names the special ones);
        - `added_tokens_decoder` in tokenizer_config.json, as transformers' Python tokenizers write it: every added
          token with its lstrip/rstrip/single_word/normalized flags, which added_tokens.json cannot carry (a token
          added with lstrip=True took the space before it under tokenizer.json only). transformers drops the key for
          tokenizers-backed classes, whose tokenizer.json holds the same."""
        file_names = super()._save_pretrained(save_directory, file_names, legacy_format, filename_prefix)
        file_names = file_names + self.save_vocabulary(str(save_directory), filename_prefix)
        base_size = self._tokenizer.get_vocab_size(with_added_tokens=False)
        # a non-special token added with a text the vocabulary already holds keeps its learned id but is matched
        # before BPE: recorded too, or a loader of the GPT-2 files split it by the merges (the tokhostile2 hunt)
        # (a special one with single_word/lstrip/rstrip too: without the record it was re-added bare, matched inside
        # words)
        if any(token_id >= base_size or not token.special or token.single_word or token.lstrip or token.rstrip
               for token_id, token in self.added_tokens_decoder.items()):
            self._record_added_tokens_in_config(file_names)
        added = {token.content: token_id for token_id, token in sorted(self.added_tokens_decoder.items())
                 if not token.special}
        if added:
            prefix = f"{filename_prefix}-" if filename_prefix else ""
            added_path = os.path.join(str(save_directory), prefix + "added_tokens.json")
            with open(added_path, "w", encoding="utf-8") as handle:
                json.dump(added, handle, indent=2, ensure_ascii=False)
                handle.write("\n")
            file_names = file_names + (added_path,)
        return file_names

    def _record_added_tokens_in_config(self, file_names: tuple[str, ...]) -> None:
        config_path = next((name for name in file_names if name.endswith("tokenizer_config.json")), None)
        if config_path is None:
            return
        with open(config_path, encoding="utf-8") as handle:
            config = json.load(handle)
        config["added_tokens_decoder"] = {str(token_id): token.__getstate__()
                                          for token_id, token in sorted(self.added_tokens_decoder.items())}
        with open(config_path, "w", encoding="utf-8") as handle:  # transformers' own layout for this file
            handle.write(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n")

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


def _one_row(batched: BatchEncoding, options: dict) -> BatchEncoding:
    """A one-row batch's output as transformers returns a single input's: each list of one row is that row (kept
    batched under return_tensors or return_overflowing_tokens, as transformers keeps them)."""
    if options.get("return_tensors") is not None or options.get("return_overflowing_tokens"):
        return batched
    data = {key: value[0] if value and isinstance(value[0], list) else value for key, value in batched.items()}
    if isinstance(batched, BatchEncodingWithLazyEncodings):
        return BatchEncodingWithLazyEncodings(data, lambda: batched._encodings, None, batched.n_sequences,
                                              batched._why_none)
    return BatchEncoding(data, batched.encodings, n_sequences=batched.n_sequences)


def _strings_in(*items):
    """Every str in the (nested lists of) inputs."""
    pending = list(reversed(items))
    while pending:
        item = pending.pop()
        if isinstance(item, (list, tuple)):
            pending.extend(reversed(item))
        elif isinstance(item, str):
            yield item


def _refuse_negative_lengths(options: dict) -> None:
    for name in ("max_length", "pad_to_multiple_of"):
        if options.get(name) is not None and options[name] < 0:
            raise UserError(f"{name}={options[name]} is negative; give a number of tokens >= 0 (or None)")


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
    for item in _strings_in(text, text_pair):
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
