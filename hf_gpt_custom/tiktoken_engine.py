"""The tiktoken engine of GPTCustomTokenizerFast (`__call__`, `encode_ids_batch`): the `tokenizers` pipeline's ids.

tiktoken encodes a list of documents faster than `tokenizers`' batch call (it builds no offsets or Encoding
objects; benchmarks/results/bench_tokenizer_threads1.md). It is used only when tiktoken is installed and the
vocabulary is proven tiktoken-equivalent (`build_tiktoken_engine`); otherwise the tokenizer stays on `tokenizers`.
Shipped as remote code with tokenization_gpt_custom.py: imports only its siblings byte_level.py and errors.py.
`tiktoken_encoding(tokenizer)` gives the same vocabulary as a plain `tiktoken.Encoding` for benchmarks and tests.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import os
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .byte_level import GPT2_SPLIT_PATTERN, bytes_to_unicode, token_to_bytes
from .errors import UserError

logger = logging.getLogger(__name__)

# Joins a thread's share of texts into one tiktoken call, so the thread holds the GIL once per chunk, not per text.
# A private-use character starts it and appears nowhere else in it: an occurrence cannot straddle a text boundary.
_DOCUMENT_BREAK = "\ue000gpt-custom-document-break"

# tiktoken's regex engine (fancy-regex) keeps one backtracking entry per character of a whitespace run (`\s+(?!\S)`)
# and gives up at 1,000,000 of them; tiktoken then panics (measured: 999,998 characters pass, 999,999 panic, for
# spaces, newlines, U+3000 alike). Documents with a run this long or longer go to `tokenizers`: a 10x margin.
LONGEST_WHITESPACE_RUN_ON_TIKTOKEN = 100_000


@dataclass(frozen=True)
class TiktokenEngine:
    pipeline_key: tuple  # (added tokens, normalizer, pre-tokenizer, BPE model settings) it was built for
    core: object | None  # tiktoken's CoreBPE, or None when the vocabulary is not tiktoken-equivalent
    reason: str  # why core is None ("" when it is not)
    special_tokens: set[str] | None = None  # matched when split_special_tokens=False; None: that needs tokenizers
    break_id: int | None = None  # the id tiktoken gives _DOCUMENT_BREAK; None: threads encode text by text
    ranks: dict[str, int] | None = None  # byte-level token -> rank (= id) the core was built from
    special_token_ids: dict[str, int] | None = None  # the tokenizer's special tokens (without _DOCUMENT_BREAK)

    def can_encode(self, split_special_tokens: bool) -> bool:
        return self.core is not None and (split_special_tokens or self.special_tokens is not None)

    def encode_batch(
        self,
        texts: list[str],
        split_special_tokens: bool,
        num_threads: int,
        encode_elsewhere: Callable[[list[str]], list[list[int]]],
    ) -> list[list[int]]:
        """[ids of text for text in texts]; `encode_elsewhere` (the `tokenizers` path) takes what tiktoken cannot.

        Documents with a long whitespace run never reach tiktoken; should tiktoken panic on anything else (a
        `PanicException`, which is not an `Exception`), the whole batch is encoded elsewhere, with a warning.
        """
        elsewhere = [position for position, text in enumerate(texts) if has_long_whitespace_run(text)]
        if elsewhere:
            skipped = set(elsewhere)
            rest = [text for position, text in enumerate(texts) if position not in skipped]
            on_tiktoken = iter(self.encode_batch(rest, split_special_tokens, num_threads, encode_elsewhere))
            on_tokenizers = iter(encode_elsewhere([texts[position] for position in elsewhere]))
            return [next(on_tokenizers if position in skipped else on_tiktoken) for position in range(len(texts))]
        try:
            return self._encode_batch_on_tiktoken(texts, split_special_tokens, num_threads)
        except BaseException as err:  # noqa: BLE001 — pyo3's PanicException derives from BaseException only
            if type(err).__name__ != "PanicException":
                raise
            logger.warning("tiktoken panicked (%s); encoding these %d texts with tokenizers", err, len(texts))
            return encode_elsewhere(texts)

    def _encode_batch_on_tiktoken(self, texts: list[str], split_special_tokens: bool, num_threads: int) -> list[list[int]]:
        """A plain loop on one thread (tiktoken's fastest way through a list).

        On more threads each takes contiguous chunks of ~64K characters or more, joined by _DOCUMENT_BREAK into one
        call: tiktoken encodes the text between two allowed special tokens on its own, so the ids between breaks are
        exactly each text's ids.
        """
        if split_special_tokens:
            encode, allowed = self.core.encode_ordinary, {_DOCUMENT_BREAK}
        else:
            encode = functools.partial(self.core.encode, allowed_special=self.special_tokens)
            allowed = self.special_tokens | {_DOCUMENT_BREAK}
        total_chars = sum(map(len, texts))
        if num_threads == 1 or total_chars < 2 * _MIN_CHUNK_CHARS:
            return list(map(encode, texts))
        import numpy  # a dependency of transformers; imported here to keep importing the package light

        def encode_chunk(chunk: list[str]) -> list[list[int]]:
            joined = _DOCUMENT_BREAK.join(chunk)
            if self.break_id is None or joined.count(_DOCUMENT_BREAK) != len(chunk) - 1:
                return list(map(encode, chunk))  # a text contains the break string itself
            # ids as a uint32 buffer, not a list: the thread holds the GIL only for the cutting below
            ids = numpy.frombuffer(self.core.encode_to_tiktoken_buffer(joined, allowed), dtype=numpy.uint32)
            ends = [*numpy.flatnonzero(ids == self.break_id).tolist(), len(ids)]
            ids = ids.tolist()
            return [ids[start:end] for start, end in zip([0, *(end + 1 for end in ends[:-1])], ends)]

        # ~4 chunks per thread balance uneven texts; the cap bounds the joined copy of the text
        chunk_chars = min(max(total_chars // (4 * num_threads), _MIN_CHUNK_CHARS), _MAX_CHUNK_CHARS)
        ends = list(itertools.accumulate(map(len, texts)))
        bounds = [0]
        while bounds[-1] < len(texts):
            done = ends[bounds[-1] - 1] if bounds[-1] else 0
            bounds.append(max(bisect.bisect_left(ends, done + chunk_chars) + 1, bounds[-1] + 1))
        bounds[-1] = min(bounds[-1], len(texts))
        with ThreadPoolExecutor(num_threads) as pool:
            chunks = pool.map(encode_chunk, [texts[start:end] for start, end in zip(bounds, bounds[1:])])
            return [ids for chunk in chunks for ids in chunk]


_MIN_CHUNK_CHARS, _MAX_CHUNK_CHARS = 1 << 16, 1 << 22
ENGINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def has_long_whitespace_run(text: str) -> bool:
    """True if `text` has a run of LONGEST_WHITESPACE_RUN_ON_TIKTOKEN or more whitespace characters (and maybe for
    runs half as long), in len(text) / 50,000 steps for ordinary text.

    A run of 2w - 1 or more characters covers a whole window [k*w, (k+1)*w) with w = half the limit, so only the
    first character of each window needs a look. `str.isspace` accepts every Unicode White_Space character, what
    tiktoken's regex matches as whitespace (and a few control characters more: they only send more text elsewhere).
    """
    window = LONGEST_WHITESPACE_RUN_ON_TIKTOKEN // 2
    return len(text) >= window and any(
        text[start].isspace() and text[start : start + window].isspace()
        for start in range(0, len(text) - window + 1, window)
    )


def make_tiktoken_encoding(ranks: dict[str, int], special_tokens: dict[str, int], name: str = "gpt_custom"):
    """A `tiktoken.Encoding` with GPT-2's split over byte-level tokens {'Ġthe': id} ranked by id — the one builder
    of tiktoken encoders from our vocabularies (the engine, `tiktoken_encoding`, tests and benchmarks)."""
    import tiktoken

    return tiktoken.Encoding(
        name,
        pat_str=GPT2_SPLIT_PATTERN,
        mergeable_ranks={token_to_bytes(token): token_id for token, token_id in ranks.items()},
        special_tokens=special_tokens,
    )


def tiktoken_encoding(tokenizer):
    """The `tiktoken.Encoding` giving exactly `tokenizer`'s ids: the vocabulary `encode_ids_batch` runs on tiktoken.

    Raises UserError, with the check that failed, for a tokenizer tiktoken would encode differently.
    """
    engine = tokenizer._tiktoken_engine()
    if engine.core is None:
        raise UserError(f"this tokenizer has no tiktoken equivalent: {engine.reason}")
    return make_tiktoken_encoding(engine.ranks, engine.special_token_ids)


def build_tiktoken_engine(state: dict, pipeline_key: tuple) -> TiktokenEngine:
    """A tiktoken encoder giving exactly the ids of the Rust pipeline `state` (tokenizer.json), if one exists.

    tiktoken runs GPT-2's split regex, then merges, in each chunk, the adjacent pair whose concatenation has the
    lowest id ("rank"), whichever two tokens make it up; `tokenizers` merges the adjacent pair listed earliest in
    `merges`. We require: byte-level BPE with GPT-2's split and nothing else in the pipeline, all 256 bytes in the
    vocabulary, merge results with ids increasing in merge order, and each merge (left, right) being the pair
    tiktoken's own merging of that token's bytes ends on. Then a pair tiktoken could merge but `tokenizers` has no
    rule for never appears, and both make the same merges in the same order — checked on 13.6M characters of real
    and random text and by tests/hf_gpt_custom/test_tokenizer_tiktoken_engine.py. `train_tokenizer` vocabularies
    pass; one that fails a check keeps the `tokenizers` path (the engine's `reason` says which check).
    """

    def unavailable(reason: str) -> TiktokenEngine:
        return TiktokenEngine(pipeline_key, None, reason)

    try:
        import tiktoken  # noqa: F401 — make_tiktoken_encoding imports it; here only to know it is installed
    except ImportError:
        return unavailable("tiktoken is not installed")
    model, pre_tokenizer = state.get("model") or {}, state.get("pre_tokenizer") or {}
    if state.get("normalizer") is not None:
        return unavailable("the tokenizer has a normalizer")
    is_gpt2_split = pre_tokenizer.get("type") == "ByteLevel" and pre_tokenizer.get("use_regex", True)
    if not is_gpt2_split or pre_tokenizer.get("add_prefix_space"):
        return unavailable(f"pre-tokenizer {pre_tokenizer} is not ByteLevel(add_prefix_space=False, use_regex=True)")
    extras = [key for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix") if model.get(key)]
    if model.get("type") != "BPE" or extras:
        return unavailable(f"the model is not plain BPE: type {model.get('type')}, {extras}")
    added_tokens = state.get("added_tokens") or []
    if any(not token["special"] for token in added_tokens):
        return unavailable("non-special added tokens are matched before BPE")
    vocab = model["vocab"]
    ranks = _ranks_if_tiktoken_equivalent(vocab, model["merges"])
    if isinstance(ranks, str):
        return unavailable(ranks)
    added_contents = {token["content"] for token in added_tokens}
    if model.get("ignore_merges") and any(token not in ranks and token not in added_contents for token in vocab):
        return unavailable("ignore_merges with vocabulary entries no merge produces")
    special_tokens = {token["content"]: token["id"] for token in added_tokens}
    # The document break gets an id no real token has; it is never returned. It must not overlap a real special token.
    break_id = None
    if not any(_DOCUMENT_BREAK[0] in content for content in special_tokens):
        break_id = max([*vocab.values(), *special_tokens.values()]) + 1
    try:
        with_break = {**special_tokens, **({_DOCUMENT_BREAK: break_id} if break_id is not None else {})}
        # the Rust object: raises on a lone surrogate, as the tokenizers path does
        core = make_tiktoken_encoding(ranks, with_break)._core_bpe
        core.encode_ordinary, core.encode, core.encode_to_tiktoken_buffer
    except Exception as err:  # a tiktoken version without these internals, duplicate ids: use tokenizers
        return unavailable(f"tiktoken refused the vocabulary: {err!r:.200}")
    # Matching special tokens as tiktoken does (leftmost, first listed) equals tokenizers' (leftmost-longest, with
    # strip options) only for plain tokens none of which contains another.
    contents = list(special_tokens)
    plain = all(not (token["lstrip"] or token["rstrip"] or token["single_word"]) for token in added_tokens)
    nested = any(a != b and a in b for a in contents for b in contents)
    return TiktokenEngine(
        pipeline_key, core, "", set(contents) if plain and not nested else None, break_id, ranks, special_tokens
    )


def _ranks_if_tiktoken_equivalent(vocab: dict[str, int], merges: list) -> dict[str, int] | str:
    """{byte-level token: id} for the 256 bytes and every merge result, or the reason tiktoken would differ."""
    byte_chars = list(bytes_to_unicode().values())
    missing = [char for char in byte_chars if char not in vocab]
    if missing:
        return f"{len(missing)} of the 256 bytes are not in the vocabulary (e.g. {missing[0]!r})"
    ranks = {char: vocab[char] for char in byte_chars}
    previous_id = -1
    for position, merge in enumerate(merges):
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        token = left + right
        token_id = vocab.get(token)
        if token_id is None or token_id <= previous_id or token in ranks:
            return f"merge {position} {left!r} + {right!r}: its result's id does not increase with merge order"
        # tiktoken would build `token` from whichever pair of lower-ranked tokens its own merging reaches first
        if _merge_by_rank(token, ranks) != [left, right]:
            return f"merge {position} {left!r} + {right!r}: tiktoken would reach {token!r} from another pair"
        ranks[token] = previous_id = token_id
    return ranks


def _merge_by_rank(word: str, ranks: dict[str, int]) -> list[str]:
    """tiktoken's BPE on one chunk: repeatedly merge the leftmost adjacent pair with the lowest rank."""
    parts, get, unmergeable = list(word), ranks.get, float("inf")
    while len(parts) > 1:
        pair_ranks = [get(left + right, unmergeable) for left, right in zip(parts, parts[1:])]
        best_rank = min(pair_ranks)
        if best_rank == unmergeable:
            break
        position = pair_ranks.index(best_rank)  # the leftmost of equal ranks, as tiktoken
        parts[position : position + 2] = [parts[position] + parts[position + 1]]
    return parts


def resolve_num_threads(num_threads: int | None, parallel_by_default: bool = False) -> int:
    """An explicit count, else the `tokenizers` switches: TOKENIZERS_PARALLELISM on (or unset, when
    `parallel_by_default`, as `tokenizers` itself treats it) -> RAYON_NUM_THREADS or all CPUs; off -> 1."""
    if num_threads is not None:
        if num_threads < 1:
            raise UserError(f"num_threads={num_threads} must be at least 1; use 1 for no threads")
        return num_threads
    switch = os.environ.get("TOKENIZERS_PARALLELISM", "").strip().lower()
    if switch in ("0", "false", "f", "no", "n", "off") or (switch == "" and not parallel_by_default):
        return 1
    rayon_threads = os.environ.get("RAYON_NUM_THREADS", "")
    return int(rayon_threads) if rayon_threads.isdigit() and int(rayon_threads) > 0 else os.cpu_count() or 1
