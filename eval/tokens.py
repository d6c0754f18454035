"""Token arithmetic shared by scoring and few-shot fitting, exactly as lm-evaluation-harness 0.4.13 does it.

The context/continuation split (`_encode_pair`), the prefix token that stands for an empty context, the context
window of a model, and rolling windows for perplexity. No model runs here: eval/scoring.py does that.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from hf_gpt_custom.errors import UserError

DEFAULT_MAX_LENGTH = 2048  # lm-eval's fallback when neither config nor tokenizer gives a context length


def resolve_max_length(config, tokenizer) -> int:
    """Context window in tokens: config n_positions / max_position_embeddings / n_ctx, then the tokenizer. A
    composite config's (Gemma 3's, which AutoModelForCausalLM loads) text model's own, under text_config, as lm-eval
    reads it: the top level holds none there, or a vision encoder's."""
    text_config = getattr(config, "text_config", None) or config
    for attribute in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(text_config, attribute, None)
        if isinstance(value, int) and value > 0:
            return value
    model_max_length = getattr(tokenizer, "model_max_length", None)
    if isinstance(model_max_length, int) and 0 < model_max_length < 1_000_000_000:
        return model_max_length
    return DEFAULT_MAX_LENGTH


def prefix_token_id(tokenizer, needed_for: str | None = None) -> int | None:
    """The token an empty context and a rolling window's first token stand after (BOS, else EOS), as lm-eval's
    `prefix_token_id`. None where the tokenizer has neither (OpenAI GPT's): only what is `needed_for` refuses it, so
    the tasks that never score such a request still run (lm-eval's HFLM fails on such a tokenizer whatever the task)."""
    bos, eos = getattr(tokenizer, "bos_token_id", None), getattr(tokenizer, "eos_token_id", None)  # any tokenizer
    token_id = bos if bos is not None else eos
    if token_id is None and needed_for is not None:
        raise UserError(f"the tokenizer has neither a BOS nor an EOS token, which {needed_for} start with (as in "
                        f"lm-eval); give the model folder a tokenizer with one (tokenizer.eos_token = ..., then "
                        f"save_pretrained), or evaluate tasks without them")
    return token_id


def padding_token_id(tokenizer) -> int:
    """The id padding columns hold. They are never attended to or scored, so any id will do: the prefix token, as
    lm-eval pads, else the tokenizer's pad, else its unk, else 0."""
    for token_id in (prefix_token_id(tokenizer), tokenizer.pad_token_id, tokenizer.unk_token_id):
        if token_id is not None:
            return token_id
    return 0


def encode_texts(tokenizer, texts: Sequence[str], special_tokens: bool = True) -> list[list[int]]:
    """Token ids of each text, in batched calls (the fast tokenizer parallelises them).

    With the tokenizer's own special tokens (a Llama tokenizer's BOS), except on a text that already starts with the
    prefix token's text ("<s>Question: ..."), which would get a second one: lm-eval's `tok_encode` encodes that
    without them. `special_tokens=False` never adds them (lm-eval's empty-context continuations). Texts longer
    than the model's context are expected here (the callers truncate or window them), so the tokenizer's "sequence
    length is longer than the specified maximum" warning is turned off (`verbose=False`)."""
    if not texts:
        return []
    prefix = prefix_token_id(tokenizer)
    starts_with_prefix = tokenizer.decode([prefix]) if special_tokens and prefix is not None else None
    plain = [not special_tokens or (starts_with_prefix is not None and text.startswith(starts_with_prefix))
             for text in texts]
    ids: list[list[int] | None] = [None] * len(texts)
    for add_special_tokens in (True, False):
        chosen = [i for i, is_plain in enumerate(plain) if is_plain != add_special_tokens]
        if chosen:
            encoded = tokenizer([texts[i] for i in chosen], add_special_tokens=add_special_tokens, verbose=False)
            for i, row in zip(chosen, encoded["input_ids"]):
                ids[i] = list(row)
    return ids  # type: ignore[return-value]


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """(context ids, continuation ids) exactly as lm-eval's `_encode_pair` / `loglikelihood` split them.

    Trailing spaces of the context move to the continuation; then the whole string is encoded and cut at the
    length of the encoded context, so the continuation's ids are the ones the model would produce after the
    context. Example with GPT-2: ("The cat", " sat") -> [464, 3797] and [3332] (" sat" is one token).
    An empty context becomes the prefix token (BOS/EOS), and so does one of whitespace only once its spaces moved.
    lm-eval's HFLM encodes that empty context instead: [BOS] with a tokenizer that adds only a BOS (the same split),
    no token with GPT-2's, where it fails, and other splits with a tokenizer that also appends an EOS or adds a
    token other than its bos_token (it then loses a continuation token); we keep the empty context's rule there.
    """
    return encode_pairs(tokenizer, [(context, continuation)])[0]


def encode_pairs(tokenizer, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    """`encode_pair` over many pairs with two batched tokenizer calls."""
    moved = []
    for context, continuation in pairs:
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:  # a context of whitespace only moves whole, and is then empty (lm-eval moves it too)
            continuation, context = context[-n_spaces:] + continuation, context[:-n_spaces]
        moved.append((context, continuation))
    nonempty = [i for i, (context, _) in enumerate(moved) if context]
    empty = [i for i, (context, _) in enumerate(moved) if not context]
    unique_contexts = sorted({moved[i][0] for i in nonempty})
    context_ids = dict(zip(unique_contexts, encode_texts(tokenizer, unique_contexts)))
    whole_ids = encode_texts(tokenizer, [moved[i][0] + moved[i][1] for i in nonempty])
    result: list[tuple[list[int], list[int]] | None] = [None] * len(pairs)
    for i, whole in zip(nonempty, whole_ids):
        ctx = context_ids[moved[i][0]]
        result[i] = (ctx, whole[len(ctx) :])
    if empty:
        prefix = prefix_token_id(tokenizer, needed_for="empty contexts")
        continuations = encode_texts(tokenizer, [moved[i][1] for i in empty], special_tokens=False)  # lm-eval's
        for i, continuation_ids in zip(empty, continuations):
            # lm-eval: the prefix token is the context unless the continuation already starts with it.
            if continuation_ids and continuation_ids[0] == prefix:
                result[i] = (continuation_ids[:1], continuation_ids[1:])
            else:
                result[i] = ([prefix], continuation_ids)
    return result  # type: ignore[return-value]


def get_rolling_token_windows(
    token_list: list[int], prefix_token: int, max_seq_len: int, context_len: int = 1
) -> Iterator[tuple[list[int], list[int]]]:
    """Disjoint (context, predicted) windows covering every token once (lm-eval's rolling windows).

    Each window feeds at most max_seq_len tokens. Example with max_seq_len=4, context_len=1, tokens 1..10 and
    prefix 0: ([0], [1,2,3,4]), ([4], [5,6,7,8]), ([6,7,8], [9,10]) — the first window predicts from the prefix;
    a later one conditions on at least context_len earlier tokens, and a short last window fills the rest of its
    max_seq_len input with earlier tokens.
    """
    assert 1 <= context_len <= max_seq_len
    if not token_list:
        return
    pred_len = max_seq_len - context_len + 1
    first_seq_len = min(max_seq_len, len(token_list))
    windows = [([prefix_token] + token_list[: first_seq_len - 1], token_list[:first_seq_len])]
    predicted = first_seq_len
    while predicted < len(token_list):
        window_pred_len = min(len(token_list) - predicted, pred_len)
        window_end = predicted + window_pred_len
        windows.append(
            (token_list[window_end - max_seq_len - 1 : window_end - 1], token_list[window_end - window_pred_len : window_end])
        )
        predicted += window_pred_len
    for inputs, predicted_tokens in windows:
        # make the context disjoint from what is predicted (lm-eval make_disjoint_window)
        yield inputs[: len(inputs) - (len(predicted_tokens) - 1)], predicted_tokens
