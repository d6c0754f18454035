"""transformers' `tokenizer(...)` output assembled from token ids made by any engine: the input read as texts or
pairs, truncation and padding as the `tokenizers` backend does them, masks, and the backend's Encoding objects made
only when asked for. Used by tokenization_gpt_custom.py; shipped with it as remote code.
"""

from __future__ import annotations

from transformers import BatchEncoding, PreTrainedTokenizerFast
from transformers.utils import PaddingStrategy

from .errors import UserError


class BatchEncodingWithLazyEncodings(BatchEncoding):
    """A BatchEncoding whose `tokenizers` Encoding objects are made by `make_encodings` on first use: the ids came
    from another engine, and most callers never read `.tokens()`, `.word_ids()` or `batch[0]`."""

    def __init__(self, data: dict, make_encodings, tensor_type, n_sequences: int, why_none: str | None = None):
        self._make_encodings, self._why_none = make_encodings, why_none
        super().__init__(data, tensor_type=tensor_type, n_sequences=n_sequences)

    @property
    def _encodings(self):
        if self._make_encodings is not None:
            self._made_encodings, self._make_encodings = self._make_encodings(), None
        return self._made_encodings

    @_encodings.setter
    def _encodings(self, encodings) -> None:  # BatchEncoding's __init__ and __setstate__ assign it
        self._made_encodings = encodings
        if encodings is not None:
            self._make_encodings = None

    def __reduce__(self):  # pickled and copied as the plain BatchEncoding transformers would have returned
        try:
            encodings = self._encodings
        except UserError as err:  # the tokenizer changed since the call: the ids stand, their Encodings cannot be made
            return BatchEncodingWithLazyEncodings, (self.data, None, None, self._n_sequences, str(err))
        return BatchEncoding, (self.data, encodings, None, False, self._n_sequences)


def _explained(reader_name: str):
    """BatchEncoding's `reader_name` (tokens(), word_ids()...), which for an output without Encodings says "not
    available when using Python based tokenizers": where the output has none for a reason of its own, that reason."""
    reader = getattr(BatchEncoding, reader_name)

    def read(self, *args, **kwargs):
        if self._why_none is not None and self._encodings is None:
            raise UserError(f"{reader_name}() reads the tokenizers backend's Encodings, and this output has none: "
                            f"{self._why_none}")
        return reader(self, *args, **kwargs)

    read.__name__ = read.__qualname__ = reader_name
    read.__doc__ = reader.__doc__
    return read


for _name in ("tokens", "sequence_ids", "word_ids", "token_to_sequence", "token_to_word", "word_to_tokens",
              "token_to_chars", "char_to_token", "word_to_chars", "char_to_word"):
    setattr(BatchEncodingWithLazyEncodings, _name, _explained(_name))


def backend_encodings(tokenizer: PreTrainedTokenizerFast, text, text_pair, options: dict, truncation_side: str,
                      pipeline_state: tuple | None = None, pad_token: str | None = None):
    """The Encoding objects of transformers' own `_encode_plus` on the `tokenizers` backend, with the settings of the
    call whose ids were made elsewhere (`options`, `truncation_side` and `pad_token` as they were then: a pad token
    set to another existing token since gave Encodings padded with it). A tokenizer changed since
    (`pipeline_state` as it was then: a token added, a template installed) would give Encodings of other ids than
    the call returned: refused."""
    if pipeline_state is not None and tokenizer._pipeline_state() != pipeline_state:
        raise UserError("the tokenizer changed (an added token, a template, a normalizer) after this output was made, "
                        "so its tokens, word_ids and offsets would describe other ids than its input_ids; call the "
                        "tokenizer again and read them from the new output")
    current = tokenizer.truncation_side, tokenizer.pad_token
    tokenizer.truncation_side = truncation_side
    if pad_token is not None:
        tokenizer.pad_token = pad_token
    try:
        return PreTrainedTokenizerFast._encode_plus(tokenizer, text, text_pair, **options).encodings
    finally:
        tokenizer.truncation_side = current[0]
        if pad_token is not None:
            tokenizer.pad_token = current[1]


def copy_text_input(text):
    """`text` with its lists and tuples copied (str is immutable): the lazy Encodings describe the call's text even
    after the caller reuses its list (`batch[0] = ...`) once the call has returned."""
    if isinstance(text, list):
        return [copy_text_input(item) for item in text]
    if isinstance(text, tuple):
        return tuple(copy_text_input(item) for item in text)
    return text


def as_text_batch(text, text_pair) -> tuple[list[str], list[str] | None, bool] | None:
    """(first texts, second texts or None, is_batched) for text and text pairs, as transformers reads them; None for
    any other input (pre-split words, an empty batch, mismatched pairs), which transformers' own path handles."""
    if isinstance(text, str):
        if not text_pair:  # transformers reads tokenizer("a", "") as no pair
            return [text], None, False
        return ([text], [text_pair], False) if isinstance(text_pair, str) else None
    if not isinstance(text, (list, tuple)) or not text:
        return None
    if text_pair is None:
        if all(isinstance(item, str) for item in text):
            return list(text), None, True
        if all(isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(part, str) for part in item)
               for item in text):  # a batch of (text, pair) items
            return [first for first, _ in text], [second for _, second in text], True
        return None
    if isinstance(text_pair, (list, tuple)) and len(text_pair) == len(text) and all(
            isinstance(item, str) for item in (*text, *text_pair)):
        return list(text), list(text_pair), True
    return None


def cut_to_length(ids: list[int], max_length: int, side: str) -> list[int]:
    """The backend's truncation of one sequence to max_length tokens from `side`."""
    if len(ids) <= max_length:
        return ids
    return ids[:max_length] if side == "right" else ids[len(ids) - max_length:]


def pad_rows(rows: list[list[int]], strategy: PaddingStrategy, max_length: int | None, multiple: int | None,
             side: str, pad_id: int | None) -> tuple[list[list[int]], list[list[int]]]:
    """(padded rows, attention masks) as the backend pads: to the longest row or max_length, rounded up to a multiple
    of `multiple`; a row already as long stays as it is."""
    if strategy == PaddingStrategy.DO_NOT_PAD:
        return rows, [[1] * len(row) for row in rows]
    target = max(map(len, rows)) if strategy == PaddingStrategy.LONGEST else max_length
    if multiple and target % multiple:
        target += multiple - target % multiple
    padded, masks = [], []
    for row in rows:
        n_pad = max(target - len(row), 0)
        if side == "right":
            padded.append(row + [pad_id] * n_pad)
            masks.append([1] * len(row) + [0] * n_pad)
        else:
            padded.append([pad_id] * n_pad + row)
            masks.append([0] * n_pad + [1] * len(row))
    return padded, masks
