"""GPT-2's byte-level conventions, the one home of each: the split pattern and the byte <-> printable character map.

The tokenizer (tokenization_gpt_custom.py), its tiktoken engine (tiktoken_engine.py) and the reference BPE
(bpe_reference.py) all import them from here. Standard library only: shipped as remote code with the tokenizer.
"""

from __future__ import annotations

import functools

# GPT-2's pre-tokenisation split (openai/gpt-2 src/encoder.py). `pre_tokenizers.ByteLevel(use_regex=True)` applies
# exactly this pattern in Rust; it is spelled out here for the reference BPE and for tiktoken.
GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


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
