"""How many bytes of text each token stands for: the denominator of validation bits per byte.

Bits per byte = total nats / (ln 2 · UTF-8 bytes of the predicted tokens), as lm-evaluation-harness divides by
`len(text.encode("utf-8"))`. The bytes come from a table by token id, exact when every token stands for a fixed run
of the text's bytes:

- byte-level BPE (GPT-2's alphabet, this project's tokenizer): one character of the token per byte;
- SentencePiece pieces (LLaMA, Mistral): `▁` is a space and `<0xNN>` one byte (byte fallback); decoding a single
  piece would drop its leading space and turn a lone byte into U+FFFD's three;
- a tokenizer that prepends a space to every text it encodes (SentencePiece's dummy prefix, `add_prefix_space`):
  the first token of a document stands for one byte less, so the table has a second column for that position.

Special tokens stand for 0 bytes: in training data the only ones are those data.py puts around documents (the
end-of-text separator, a Llama's BOS), because documents are encoded with special-token text as text (a literal
"<|endoftext|>" is 13 bytes of tokens).

`check()` tokenises probe texts as the data pipeline does and compares the counts with the real UTF-8 lengths, so
a tokenizer outside these rules is reported instead of giving a silently wrong figure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from hf_gpt_custom.tokenization_gpt_custom import bytes_to_unicode

_BYTE_FALLBACK = re.compile(r"<0x[0-9A-Fa-f]{2}>")
_SENTENCEPIECE_SPACE = "\u2581"  # ▁
# Texts the counts must reproduce: words, a leading space, runs of spaces, newlines, accents, an emoji (byte
# fallback in a small SentencePiece vocabulary), CJK.
PROBES = ("ROMEO: But, soft! what light through yonder window breaks?", " leading space", "a\nb  c\n\n  d",
          "naïve café — “quoted” ünïcödé", "masks 🎭 and 漢字")


@dataclass
class TokenBytes:
    """UTF-8 bytes per token id: `within` a document, and `at_start` (a document's first token)."""

    within: torch.Tensor  # (vocab,) int64
    at_start: torch.Tensor  # (vocab,) int64
    probes: tuple[str, ...] = PROBES  # check()'s texts: PROBES, and each special token's text inside a sentence

    @classmethod
    def of(cls, tokenizer, vocab_size: int | None = None) -> TokenBytes:
        """The tables for `tokenizer`, padded with 0 up to `vocab_size` (ids past the tokenizer never occur)."""
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
        padding = [0] * max(0, (vocab_size or 0) - len(within))
        # a special token's text in a document must count its bytes, not 0 as the special token would
        special_probes = tuple(f"it says {token} in the text" for token in dict.fromkeys(tokenizer.all_special_tokens))
        added_probes = tuple(f"it says {text} in the text" for text in added.values())
        return cls(torch.tensor(within + padding), torch.tensor(at_start + padding),
                   PROBES + special_probes + added_probes)

    def to(self, device) -> TokenBytes:
        return TokenBytes(self.within.to(device), self.at_start.to(device), self.probes)

    def count(self, targets: torch.Tensor, previous: torch.Tensor, starts_after: int | tuple[int, ...]) -> torch.Tensor:
        """Bytes of each row of `targets` (rows, n), on the tables' device; `previous` holds the token before each
        target: after one of `starts_after` (the end-of-text separator, a Llama's BOS: data.document_starts_after)
        a target starts a document."""
        after = torch.tensor(starts_after if isinstance(starts_after, tuple) else (starts_after,), device=previous.device)
        starts = torch.isin(previous, after)
        return torch.where(starts, self.at_start[targets], self.within[targets]).sum(dim=1)

    def check(self, encode: Callable[[list[str]], list[list[int]]]) -> list[str]:
        """Probe texts whose counted bytes differ from their UTF-8 length ([] when the tables are exact); `encode`
        tokenises documents as the data pipeline does."""
        problems = []
        for text, ids in zip(self.probes, encode(list(self.probes))):
            counted = sum(int(self.at_start[i]) if position == 0 else int(self.within[i])
                          for position, i in enumerate(ids))
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
