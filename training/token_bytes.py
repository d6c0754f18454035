"""How many bytes of text each token stands for: the denominator of validation bits per byte.

Bits per byte = total nats / (ln 2 · UTF-8 bytes of the predicted text), as lm-evaluation-harness divides by
`len(text.encode("utf-8"))` of the document as written. The validation documents carry a count per token
(stored beside their ids when they are packed; data.tokenize_documents), and a document's counts always sum to its
own UTF-8 length. The table by token id below gives them where it is exact for the document, which it is when every
token stands for a fixed run of the text's bytes:

- byte-level BPE (GPT-2's alphabet, this project's tokenizer): one character of the token per byte;
- SentencePiece pieces (LLaMA, Mistral): `▁` is a space and `<0xNN>` one byte (byte fallback); decoding a single
  piece would drop its leading space and turn a lone byte into U+FFFD's three;
- a tokenizer that prepends a space to every text it encodes (SentencePiece's dummy prefix, `add_prefix_space`):
  the first token of a document stands for one byte less, so the table has a second column for that position.

It is not exact where the tokenizer's normalizer rewrites the text (Qwen2's NFC, NFKC, lower-casing, stripped
accents): the tokens then spell the normalized text, 2.19x the bytes of NFD Korean under NFC. A figure divided by
those bytes would be silently off. There the counts come from the fast tokenizer's offsets into the text as written
(`written_counts`), and without offsets that match the tokens, from the table scaled to the document's length
(`document_counts`): exact over whole documents, in proportion within one.

Special tokens stand for 0 bytes: in training data the only ones are those data.py puts around documents (the
end-of-text separator, a Llama's BOS), because documents are encoded with special-token text as text (a literal
"<|endoftext|>" is 13 bytes of tokens).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from hf_gpt_custom.tokenization_gpt_custom import bytes_to_unicode

_BYTE_FALLBACK = re.compile(r"<0x[0-9A-Fa-f]{2}>")
_SENTENCEPIECE_SPACE = "\u2581"  # ▁
# Texts the table must reproduce: words, a leading space, runs of spaces, newlines, accents, an emoji (byte
# fallback in a small SentencePiece vocabulary), CJK; then text a normalizer rewrites: a combining accent and
# decomposed Hangul (NFC composes them), a ligature and a full-width comma (NFKC replaces them).
PROBES = ("ROMEO: But, soft! what light through yonder window breaks?", " leading space", "a\nb  c\n\n  d",
          "naïve café — “quoted” ünïcödé", "masks 🎭 and 漢字", "cafe\u0301 \u1112\u1161\u11ab", "\ufb01ne\uff0c")


@dataclass
class TokenBytes:
    """UTF-8 bytes per token id: `within` a document, and `at_start` (a document's first token)."""

    within: list[int]  # by token id (Python lists: indexed once per validation token, ~50x faster than a tensor)
    at_start: list[int]
    probes: tuple[str, ...] = PROBES  # check()'s texts: PROBES, and each special token's text inside a sentence

    @classmethod
    def of(cls, tokenizer) -> TokenBytes:
        """The tables for `tokenizer`."""
        tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        special_ids = set(tokenizer.all_special_ids)
        # tokenizer.add_tokens(["señor"]): an added token is its plain text, not byte-level characters ("ñ" is one of
        # those too, so it counted 5 bytes of 6)
        added = {token_id: token.content for token_id, token in tokenizer.added_tokens_decoder.items()
                 if not token.special and token_id not in special_ids}
        byte_alphabet = set(bytes_to_unicode().values())
        is_byte_level = all(token is None or token_id in special_ids or token_id in added
                            or set(token) <= byte_alphabet for token_id, token in enumerate(tokens))
        within = [0 if token is None or token_id in special_ids
                  else len(added[token_id].encode("utf-8")) if token_id in added
                  else len(token) if is_byte_level else _piece_bytes(token)
                  for token_id, token in enumerate(tokens)]
        at_start = list(within)
        prefix = _prepended_space(tokenizer, tokens, within)
        if prefix is not None:
            at_start = [n - 1 if n > 0 and token is not None and token.startswith(prefix) else n
                        for n, token in zip(within, tokens)]
        # a special token's text in a document must count its bytes, not 0 as the special token would
        special_probes = tuple(f"it says {token} in the text" for token in dict.fromkeys(tokenizer.all_special_tokens))
        added_probes = tuple(f"it says {text} in the text" for text in added.values())
        return cls(within, at_start, PROBES + special_probes + added_probes)

    def document_counts(self, ids: list[int], text: str, first_text_token: int) -> list[int]:
        """Bytes each of one document's tokens stands for, summing to `len(text.encode("utf-8"))`: the table's count
        per token (`ids[first_text_token]` as a document's first). Where the table's total differs from the text's
        (a normalizer rewrote it), the counts are scaled to the text's total, rounded so that every prefix of the
        document keeps its share: a block boundary, the dropped tail or the eval_batches cut then takes its part of
        the difference with its tokens. (All of it on the separator was lost whenever the separator went unscored:
        one NFC-normalized Korean document read 6.07 bits per byte for 4.12.)"""
        counts = self.table_counts(ids, first_text_token)
        table_total, text_total = sum(counts), len(text.encode("utf-8"))
        if table_total == text_total or not counts:
            return counts
        if table_total == 0:  # no token spells text (a tokenizer that maps it all to specials): the last carries it
            return counts[:-1] + [counts[-1] + text_total]
        scaled, running, previous = [], 0, 0
        for count in counts:  # cumulative rounding: the sum is exactly text_total, and no count is negative
            running += count
            boundary = (running * text_total + table_total // 2) // table_total
            scaled.append(boundary - previous)
            previous = boundary
        return scaled

    def table_counts(self, ids: list[int], first_text_token: int) -> list[int]:
        """The table's count of each token (`ids[first_text_token]` as a document's first)."""
        counts = [self.within[i] for i in ids]
        if first_text_token < len(ids):
            counts[first_text_token] = self.at_start[ids[first_text_token]]
        return counts

    @staticmethod
    def written_counts(text: str, offsets: list[tuple[int, int]], n_before: int, n_after: int) -> list[int]:
        """Bytes of the text as written that each token covers, from a fast tokenizer's offsets (characters of the
        text before normalization): each token takes the text from where the previous one ended to its own end, so
        a character split over byte-level tokens counts once and a normalizer's rewrite counts as written. The
        `n_before` tokens put before the text (a BOS) count 0; the last of the `n_after` (the separator) takes
        whatever no token covered."""
        counts, end = [0] * n_before, 0
        for _, stop in offsets:
            counts.append(len(text[end:max(stop, end)].encode("utf-8")))
            end = max(stop, end)
        counts += [0] * n_after
        counts[-1] += len(text[end:].encode("utf-8"))
        return counts

    def check(self, encode: Callable[[list[str]], list[list[int]]], with_leading_space: bool = True) -> list[str]:
        """Probe texts whose counted bytes differ from their UTF-8 length ([] when the tables are exact); `encode`
        tokenises documents as the data pipeline does. `with_leading_space=False` leaves out the probes that begin
        with a space: a tokenizer that prepends one (SentencePiece's dummy prefix) counts such a document one byte
        short, at its start, which its total already shows."""
        probes = [text for text in self.probes if with_leading_space or not text[:1].isspace()]
        problems = []
        for text, ids in zip(probes, encode(probes)):
            counted = sum(self.at_start[i] if position == 0 else self.within[i] for position, i in enumerate(ids))
            if counted != len(text.encode("utf-8")):
                problems.append(f"{text!r}: {counted} bytes counted, {len(text.encode('utf-8'))} in the text")
        return problems


def _piece_bytes(token: str) -> int:
    if _BYTE_FALLBACK.fullmatch(token):
        return 1
    return len(token.replace(_SENTENCEPIECE_SPACE, " ").encode("utf-8"))


def _prepended_space(tokenizer, tokens: list[str | None], within: list[int]) -> str | None:
    """The character of the space the tokenizer puts before every text ('▁' or GPT-2's 'Ġ'), if it does one."""
    ids = tokenizer("a", add_special_tokens=False)["input_ids"]
    if not ids or sum(within[i] for i in ids) != 2 or not tokens[ids[0]]:
        return None
    first = tokens[ids[0]][0]
    return first if first in (_SENTENCEPIECE_SPACE, bytes_to_unicode()[ord(" ")]) else None
