"""Textbook byte-level BPE in pure Python: train, encode, decode. The oracle the fast tokenizer is tested against.

Slow on purpose (it recounts every pair after every merge) and short enough to check by eye. It does no special
tokens, no caching and no files; GPTCustomTokenizerFast and tokenizer_training.py are the tools to use.

What makes it a meaningful oracle
---------------------------------
Token ids are the same everywhere: id b is the single byte b (0-255), id 256 + k is the k-th distinct token the
merges create — the layout `train_tokenizer` writes. A merge list (`Merges`) fully determines the encoder, so there
are two independent checks (tests/hf_gpt_custom/test_bpe_reference.py):

1. Encoding. Given the merges the fast trainer learned, `encode` — pre-split with GPT-2's pattern, then in each
   chunk apply the lowest-ranked merge present until none applies — must give the same ids as the Rust BPE model
   and as tiktoken on held-out text. This checks the fast tokenizer's split regex, byte alphabet, vocabulary
   layout and merge application against an implementation with nothing in common with it.
2. Training. With `tie_break="tokenizers"`, `train` must learn the same merges, in the same order, as the
   `tokenizers` BpeTrainer on the same text. Both pick the most frequent pair (occurrences counted within
   pre-tokenised chunks, overlapping ones too, weighted by how often the chunk occurs); they differ only in how
   they break ties between equally frequent pairs, which is common once counts get small (on 30 KB of Shakespeare
   the two rules part ways at merge 34 of 243). The textbook rule (`tie_break="first"`, used for the hand-checked
   example) takes the pair that occurs first in the stream; the Rust trainer takes the smallest (left id, right id)
   in its own numbering, where the 256 bytes are sorted by their GPT-2 printable character (so '!' comes first and
   the space byte, drawn as 'Ġ', comes late) and merged tokens follow in creation order. Emulating that ordering is
   all it takes to agree merge for merge.

Encoding rule, as in GPT-2's encoder.py and the `tokenizers` BPE model: inside one chunk, repeatedly find the
adjacent pair whose merge was learned earliest and merge all of its non-overlapping occurrences left to right;
stop when no adjacent pair has a merge. Chunks never merge across each other.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import regex

from .byte_level import GPT2_SPLIT_PATTERN, bytes_to_unicode, token_to_bytes
from .errors import UserError


@dataclass
class Merges:
    """The learned merges in rank order: `pairs[rank] = ((left_id, right_id), new_id)`.

    `vocab` maps every id to its bytes. Two merges can create the same bytes (e.g. 'a'+'bc' and 'ab'+'c'); they then
    share one id, as in the `tokenizers` trainer.
    """

    pairs: list[tuple[tuple[int, int], int]] = field(default_factory=list)
    vocab: dict[int, bytes] = field(default_factory=lambda: {byte: bytes([byte]) for byte in range(256)})

    def rank_of(self) -> dict[tuple[int, int], tuple[int, int]]:
        """pair -> (rank, new_id), the lookup table `encode` uses."""
        return {pair: (rank, new_id) for rank, (pair, new_id) in enumerate(self.pairs)}


def split_into_chunks(text: str, split_pattern: str | None) -> list[bytes]:
    """GPT-2 pre-tokenisation: regex chunks of the text, as UTF-8 bytes. No pattern: the whole text is one chunk."""
    if split_pattern is None:
        return [text.encode("utf-8")] if text else []
    return [chunk.encode("utf-8") for chunk in regex.findall(split_pattern, text)]


def merge_pair(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every non-overlapping occurrence of `pair`, scanning left to right: [a, a, a] with (a, a) -> [aa, a]."""
    merged = []
    position = 0
    while position < len(ids):
        if position + 1 < len(ids) and (ids[position], ids[position + 1]) == pair:
            merged.append(new_id)
            position += 2
        else:
            merged.append(ids[position])
            position += 1
    return merged


def count_pairs(chunks: dict[tuple[int, ...], int]) -> Counter:
    """Occurrences of each adjacent pair, overlapping ones included, weighted by how often each chunk occurs."""
    counts: Counter = Counter()
    for ids, chunk_count in chunks.items():
        for pair in zip(ids, ids[1:]):
            counts[pair] += chunk_count
    return counts


def tokenizers_byte_order() -> dict[int, int]:
    """byte -> its id in the `tokenizers` trainer, which sorts the initial alphabet by character.

    The alphabet is GPT-2's byte -> printable character map, so byte 0x21 '!' gets 0 and the space byte ('Ġ',
    U+0120) gets 221. Only used to reproduce the Rust trainer's tie-breaking.
    """
    byte_to_char = bytes_to_unicode()
    by_char = sorted(range(256), key=lambda byte: byte_to_char[byte])
    return {byte: trainer_id for trainer_id, byte in enumerate(by_char)}


def train(
    text: str,
    vocab_size: int,
    split_pattern: str | None = None,
    min_frequency: int = 2,
    tie_break: str = "first",
) -> Merges:
    """Learn merges until the vocabulary (256 bytes + distinct merged tokens) has `vocab_size` entries.

    Each step merges the most frequent adjacent pair, counted within chunks; it stops early when the most frequent
    pair occurs fewer than `min_frequency` times (2 = "stop when no pair occurs twice"). Ties between equally
    frequent pairs: `tie_break="first"` takes the pair that occurs first in the text (the textbook rule);
    `"tokenizers"` takes the smallest pair in the Rust BpeTrainer's id order (see the module docstring).
    """
    if vocab_size < 256:
        raise UserError(f"vocab_size={vocab_size} is below the 256 single bytes; use vocab_size >= 256")
    if tie_break not in ("first", "tokenizers"):
        raise UserError(f"tie_break={tie_break!r} is not known; use 'first' or 'tokenizers'")
    # Counter keeps first-seen order, so iterating chunks walks the text in order of first appearance.
    chunks: dict[tuple[int, ...], int] = dict(Counter(tuple(chunk) for chunk in split_into_chunks(text, split_pattern)))
    merges = Merges()
    id_of_bytes = {token_bytes: token_id for token_id, token_bytes in merges.vocab.items()}
    trainer_order = tokenizers_byte_order()  # byte id -> trainer id; merged ids map to 256 + creation order

    while len(merges.vocab) < vocab_size:
        counts = count_pairs(chunks)
        if not counts:
            break
        best_count = max(counts.values())
        if best_count < min_frequency:
            break
        tied = [pair for pair, count in counts.items() if count == best_count]  # in order of first occurrence
        if tie_break == "first":
            pair = tied[0]
        else:
            pair = min(tied, key=lambda p: (trainer_order.get(p[0], p[0]), trainer_order.get(p[1], p[1])))
        new_bytes = merges.vocab[pair[0]] + merges.vocab[pair[1]]
        new_id = id_of_bytes.get(new_bytes)
        if new_id is None:
            new_id = len(merges.vocab)
            merges.vocab[new_id] = new_bytes
            id_of_bytes[new_bytes] = new_id
        merges.pairs.append((pair, new_id))
        chunks = _merge_in_chunks(chunks, pair, new_id)
    return merges


def _merge_in_chunks(chunks: dict[tuple[int, ...], int], pair: tuple[int, int], new_id: int) -> dict:
    merged: dict[tuple[int, ...], int] = {}
    for ids, chunk_count in chunks.items():
        new_ids = tuple(merge_pair(list(ids), pair, new_id))
        merged[new_ids] = merged.get(new_ids, 0) + chunk_count
    return merged


def encode(text: str, merges: Merges, split_pattern: str | None = GPT2_SPLIT_PATTERN) -> list[int]:
    """Token ids for `text`: split into chunks, then in each chunk apply merges lowest rank first."""
    rank_of = merges.rank_of()
    token_ids: list[int] = []
    for chunk in split_into_chunks(text, split_pattern):
        ids = list(chunk)
        while len(ids) >= 2:
            candidates = [rank_of[pair] for pair in zip(ids, ids[1:]) if pair in rank_of]
            if not candidates:
                break  # no adjacent pair was ever merged: this chunk is done
            rank, new_id = min(candidates)
            ids = merge_pair(ids, merges.pairs[rank][0], new_id)
        token_ids.extend(ids)
    return token_ids


def decode(token_ids: list[int], merges: Merges) -> str:
    """Text for token ids. Invalid UTF-8 (a multi-byte character cut between tokens) becomes U+FFFD, as in GPT-2."""
    return b"".join(merges.vocab[token_id] for token_id in token_ids).decode("utf-8", errors="replace")


def merges_from_tokenizer(tokenizer) -> Merges:
    """The merges of a trained GPTCustomTokenizerFast (or any byte-level BPE with our id layout), in rank order."""
    import json

    model = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    id_of_token = model["vocab"]
    merges = Merges()
    merges.vocab = {token_id: token_to_bytes(token) for token, token_id in id_of_token.items()}
    for merge in model["merges"]:
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        merges.pairs.append(((id_of_token[left], id_of_token[right]), id_of_token[left + right]))
    return merges
