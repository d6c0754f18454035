"""Score Requests with any causal LM: loglikelihood, rolling loglikelihood and greedy generate_until.

Token arithmetic follows lm-evaluation-harness 0.4.13 exactly (`_encode_pair`, left truncation to
max_length + 1, `get_rolling_token_windows`), so numbers agree with it. Two things make it faster:
choices that share a context are scored from one pass over that context (its KV cache is copied per choice),
and the LM head + log-softmax run only on the positions that are scored, not on every position of every row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import DynamicCache

from eval.requests import Request, ScoredRequest

DEFAULT_MAX_LENGTH = 2048  # lm-eval's fallback when neither config nor tokenizer gives a context length


# --- tokens ------------------------------------------------------------------------------------------------------


def resolve_max_length(model, tokenizer) -> int:
    """Context window in tokens: config n_positions / max_position_embeddings / n_ctx, then the tokenizer."""
    for attribute in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(model.config, attribute, None)
        if isinstance(value, int) and value > 0:
            return value
    model_max_length = getattr(tokenizer, "model_max_length", None)
    if isinstance(model_max_length, int) and 0 < model_max_length < 1_000_000_000:
        return model_max_length
    return DEFAULT_MAX_LENGTH


def prefix_token_id(tokenizer) -> int:
    """The token an empty context stands for (BOS, else EOS), as lm-eval's `prefix_token_id`."""
    token_id = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if token_id is None:
        raise ValueError("the tokenizer has neither a BOS nor an EOS token; set tokenizer.eos_token to score empty contexts")
    return token_id


def encode_texts(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, in one batched call (the fast tokenizer parallelises it)."""
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(list(texts))["input_ids"]]


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """(context ids, continuation ids) exactly as lm-eval's `_encode_pair` / `loglikelihood` split them.

    Trailing spaces of the context move to the continuation; then the whole string is encoded and cut at the
    length of the encoded context, so the continuation's ids are the ones the model would produce after the
    context. Example with GPT-2: ("The cat", " sat") -> [464, 3797] and [3332] (" sat" is one token).
    An empty context becomes the prefix token (BOS/EOS).
    """
    return encode_pairs(tokenizer, [(context, continuation)])[0]


def encode_pairs(tokenizer, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    """`encode_pair` over many pairs with two batched tokenizer calls."""
    moved = []
    for context, continuation in pairs:
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces and context.strip():
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
        prefix = prefix_token_id(tokenizer)
        for i, continuation_ids in zip(empty, encode_texts(tokenizer, [moved[i][1] for i in empty])):
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


# --- the model as two functions: hidden states, and log-probs of selected positions --------------------------------


class CausalLMScorer:
    """Wraps any transformers causal LM for scoring.

    When the model is a base model + output embedding (GPT-2, ours, Llama, ...), it runs the base model and applies
    the head only to scored positions; this is checked once against `model(...).logits` and otherwise falls
    back to the full forward (models with logit scaling or soft-capping).
    """

    def __init__(self, model, tokenizer, batch_size: int = 16, max_length: int | None = None, share_context: bool = True):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = max(1, int(batch_size))
        self.max_length = max_length or resolve_max_length(model, tokenizer)
        self.share_context = share_context
        # Context tokens whose KV caches are kept at once while their choices are sorted by length: ~50 zero-shot
        # HellaSwag questions, a few 5-shot ones. Bounds memory: GPT-2 small keeps 2048 x 12 layers x 2 x 768
        # floats = 150 MB.
        self.context_tokens_per_window = 2048
        self.device = next(model.parameters()).device
        self.prefix_token_id = prefix_token_id(tokenizer)
        self._use_head_split = self._check_head_split()

    # Each call returns (features, cache): features are final hidden states (split mode) or logits.
    def _forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        module = self.model.base_model if self._use_head_split else self.model
        output = module(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
        )
        features = output.last_hidden_state if self._use_head_split else output.logits
        return features, (output.past_key_values if use_cache else None)

    def _log_probs(self, features: torch.Tensor) -> torch.Tensor:
        logits = self.model.get_output_embeddings()(features) if self._use_head_split else features
        return F.log_softmax(logits.float(), dim=-1)

    @torch.no_grad()
    def _check_head_split(self) -> bool:
        head = self.model.get_output_embeddings()
        base = getattr(self.model, "base_model", None)
        if head is None or base is None or base is self.model:
            return False
        probe = torch.tensor([[self.prefix_token_id] * 4], device=self.device)
        try:
            full = self.model(input_ids=probe).logits
            split = head(base(input_ids=probe).last_hidden_state)
        except (TypeError, AttributeError):
            return False
        return bool(torch.allclose(full.float(), split.float(), atol=1e-4, rtol=1e-4))

    # --- loglikelihood ---------------------------------------------------------------------------------------------

    def loglikelihood(self, requests: Sequence[Request], show_progress: bool = True, desc: str = "loglikelihood") -> list[ScoredRequest]:
        """(sum log p(continuation | context), is_greedy) for each request, in the order given."""
        pairs = encode_pairs(self.tokenizer, [(r.context, r.continuation) for r in requests])
        results = self.loglikelihood_tokens(pairs, show_progress=show_progress, desc=desc)
        return [
            ScoredRequest(request, loglikelihood, is_greedy, len(pair[1]), is_truncated=len(pair[0]) + len(pair[1]) > self.max_length + 1)
            for request, (loglikelihood, is_greedy), pair in zip(requests, results, pairs)
        ]

    def loglikelihood_tokens(
        self, pairs: Sequence[tuple[list[int], list[int]]], show_progress: bool = True, desc: str = "loglikelihood"
    ) -> list[tuple[float, bool]]:
        """Score token-level (context, continuation) pairs; identical contexts share one forward pass."""
        results: list[tuple[float, bool] | None] = [None] * len(pairs)
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        singles: list[int] = []
        for index, (context, continuation) in enumerate(pairs):
            if not continuation:
                raise ValueError(f"request {index}: the continuation is empty after tokenization; nothing to score")
            if self.share_context and len(context) + len(continuation) <= self.max_length + 1:
                groups[tuple(context)].append(index)
            else:
                singles.append(index)
        shared = [members for members in groups.values() if len(members) > 1]
        singles += [members[0] for members in groups.values() if len(members) == 1]
        progress = tqdm(total=len(pairs), desc=desc, disable=not show_progress)
        # Longest first, as lm-eval: an out-of-memory error happens at once rather than at the end. Contexts are
        # sorted by length (little padding in pass 1), then the choices of a window of contexts by their length.
        shared.sort(key=lambda members: -len(pairs[members[0]][0]))
        for window in _batches(shared, self.context_tokens_per_window, size=lambda members: len(pairs[members[0]][0])):
            for index, value in self._score_shared_contexts(pairs, window).items():
                results[index] = value
            progress.update(sum(len(members) for members in window))
        singles.sort(key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])))
        for batch in _batches(singles, self.batch_size, size=lambda _: 1):
            for index, value in zip(batch, self._score_full([pairs[i] for i in batch])):
                results[index] = value
            progress.update(len(batch))
        progress.close()
        return results  # type: ignore[return-value]

    @torch.no_grad()
    def _score_full(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """The straightforward way (lm-eval's): one right-padded row per pair, context truncated from the left."""
        rows = [(context + continuation)[-(self.max_length + 1) :][:-1] for context, continuation in pairs]
        width = max(len(row) for row in rows)
        input_ids = torch.full((len(rows), width), self.prefix_token_id, dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
        features, _ = self._forward(input_ids.to(self.device))
        # A continuation longer than the window keeps its last len(row) tokens: the only ones one window can predict
        # (lm-eval's slice goes out of range here). Such a request is reported as truncated.
        kept = [continuation[-len(row) :] for (_, continuation), row in zip(pairs, rows)]
        selected = [features[i, len(row) - len(tokens) : len(row)] for i, (tokens, row) in enumerate(zip(kept, rows))]
        return self._sum_and_greedy(selected, kept)

    @torch.no_grad()
    def _score_shared_contexts(
        self, pairs: Sequence[tuple[list[int], list[int]]], groups: Sequence[list[int]]
    ) -> dict[int, tuple[float, bool]]:
        """Score the continuations of each group of requests from one pass over the group's shared context.

        Pass 1 runs the contexts (right-padded, batch_size per call) with use_cache and keeps each context's
        KV cache; its last position predicts every continuation's first token. Pass 2 runs the continuations
        minus their last token, sorted by length across the whole window (little padding), batch_size rows per
        call, each row attending to a copy of its own context's cache, with position ids continuing after the
        real context and the cache padding masked out. One-token continuations (BoolQ "no"/"yes") need pass 1 only.
        """
        contexts = [pairs[members[0]][0] for members in groups]
        needs_cache = any(len(pairs[m][1]) > 1 for members in groups for m in members)
        last_features, context_kv = [], []  # per group: (1, hidden) features; per layer (keys, values) of its context
        for chunk in _batches(list(range(len(groups))), self.batch_size, size=lambda _: 1):
            width = max(len(contexts[g]) for g in chunk)
            input_ids = torch.full((len(chunk), width), self.prefix_token_id, dtype=torch.long)
            for row, g in enumerate(chunk):
                input_ids[row, : len(contexts[g])] = torch.tensor(contexts[g])
            # No mask needed: with right padding, causal attention keeps real positions away from the padding
            # (and sdpa takes its is_causal fast path). Pass 2 masks the padded cache columns.
            features, cache = self._forward(input_ids.to(self.device), use_cache=needs_cache)
            for row, g in enumerate(chunk):
                last_features.append(features[row, len(contexts[g]) - 1 : len(contexts[g])])
                if needs_cache:
                    context_kv.append([(k[row : row + 1, :, : len(contexts[g])], v[row : row + 1, :, : len(contexts[g])]) for k, v, *_ in cache])
        rows = [(g, m) for g, members in enumerate(groups) for m in members]
        rows.sort(key=lambda row: -len(pairs[row[1]][1]))
        results = {}
        for batch in _batches(rows, self.batch_size, size=lambda _: 1):
            continuations = [pairs[m][1] for _, m in batch]
            width = max(len(c) for c in continuations) - 1
            features = None
            if width > 0:
                context_width = max(len(contexts[g]) for g, _ in batch)
                input_ids = torch.full((len(batch), width), self.prefix_token_id, dtype=torch.long)
                mask = torch.zeros((len(batch), context_width + width), dtype=torch.long)
                positions = torch.zeros((len(batch), width), dtype=torch.long)
                for r, ((g, _), continuation) in enumerate(zip(batch, continuations)):
                    input_ids[r, : len(continuation) - 1] = torch.tensor(continuation[:-1])
                    mask[r, : len(contexts[g])] = 1
                    mask[r, context_width : context_width + len(continuation) - 1] = 1
                    # Padding columns of short rows would run past the position table: clamp them (they are masked).
                    positions[r] = (len(contexts[g]) + torch.arange(width)).clamp(max=self.max_length - 1)
                cache_data = []
                for layer in range(len(context_kv[batch[0][0]])):
                    keys, values = zip(*(_pad_seq(context_kv[g][layer], context_width) for g, _ in batch))
                    cache_data.append((torch.cat(keys), torch.cat(values)))
                cache = DynamicCache(ddp_cache_data=cache_data, config=self.model.config)
                features, _ = self._forward(
                    input_ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    position_ids=positions.to(self.device),
                    past_key_values=cache,
                    use_cache=True,
                )
            selected = []
            for r, ((g, _), continuation) in enumerate(zip(batch, continuations)):
                selected.append(last_features[g])
                if len(continuation) > 1:
                    selected.append(features[r, : len(continuation) - 1])
            for (_, m), value in zip(batch, self._sum_and_greedy(selected, continuations)):
                results[m] = value
        return results

    def _sum_and_greedy(self, selected: list[torch.Tensor], continuations: Sequence[list[int]]) -> list[tuple[float, bool]]:
        """(sum of log-probs, all tokens greedy) per continuation; `selected` holds, in order, the features of the
        positions that predict each continuation's tokens. One head matmul + log-softmax for the whole batch."""
        log_probs = self._log_probs(torch.cat(selected))  # (scored tokens, vocab)
        targets = torch.tensor([token for continuation in continuations for token in continuation], device=self.device)
        token_log_probs = log_probs.gather(-1, targets[:, None]).squeeze(-1)
        is_greedy = log_probs.argmax(-1) == targets
        lengths = [len(continuation) for continuation in continuations]
        return [
            (float(lp.sum()), bool(greedy.all()))
            for lp, greedy in zip(token_log_probs.split(lengths), is_greedy.split(lengths))
        ]

    # --- rolling loglikelihood -----------------------------------------------------------------------------------

    def loglikelihood_rolling(
        self, requests: Sequence[Request], show_progress: bool = True, desc: str = "rolling loglikelihood"
    ) -> list[ScoredRequest]:
        """Log-likelihood of each whole continuation, in windows of max_length tokens (perplexity)."""
        token_lists = encode_texts(self.tokenizer, [r.continuation for r in requests])
        windows, owners = [], []
        for index, tokens in enumerate(token_lists):
            for window in get_rolling_token_windows(tokens, self.prefix_token_id, self.max_length, context_len=1):
                windows.append(window)
                owners.append(index)
        sums = [0.0] * len(requests)
        scored = self.loglikelihood_tokens(windows, show_progress=show_progress, desc=desc)
        for owner, (loglikelihood, _) in zip(owners, scored):
            sums[owner] += loglikelihood
        return [ScoredRequest(r, sums[i], False, len(token_lists[i])) for i, r in enumerate(requests)]

    # --- generation ------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def generate_until(self, requests: Sequence[Request], show_progress: bool = True, desc: str = "generate_until") -> list[ScoredRequest]:
        """Greedy continuation of each context until a stop sequence (cut there) or max_gen_toks tokens."""
        order = sorted(range(len(requests)), key=lambda i: -len(requests[i].context))
        outputs: list[ScoredRequest | None] = [None] * len(requests)
        progress = tqdm(total=len(requests), desc=desc, disable=not show_progress)
        for batch in _batches(order, self.batch_size, size=lambda _: 1):
            for index, (text, n_tokens, is_truncated) in zip(batch, self._generate_batch([requests[i] for i in batch])):
                outputs[index] = ScoredRequest(requests[index], 0.0, True, n_tokens, generation=text, is_truncated=is_truncated)
            progress.update(len(batch))
        progress.close()
        return outputs  # type: ignore[return-value]

    def _generate_batch(self, requests: Sequence[Request]) -> list[tuple[str, int, bool]]:
        max_new = max(r.max_gen_toks for r in requests)
        eos = self.tokenizer.eos_token
        stops = [tuple(r.until) + ((eos,) if eos else ()) for r in requests]
        full_contexts = encode_texts(self.tokenizer, [r.context for r in requests])
        contexts = [ids[-(self.max_length - max_new) :] for ids in full_contexts]
        width = max(len(c) for c in contexts)
        # Left padding: every row's next token is predicted from the last column.
        input_ids = torch.full((len(contexts), width), self.prefix_token_id, dtype=torch.long)
        mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for i, context in enumerate(contexts):
            input_ids[i, width - len(context) :] = torch.tensor(context)
            mask[i, width - len(context) :] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        generated = [[] for _ in requests]
        done = [False] * len(requests)
        cache = None
        for _ in range(max_new):
            output = self.model(
                input_ids=input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
            )
            cache = output.past_key_values
            next_ids = output.logits[:, -1].argmax(-1)
            for i, token_id in enumerate(next_ids.tolist()):
                if done[i]:
                    continue
                generated[i].append(token_id)
                text = self.tokenizer.decode(generated[i])
                if any(stop and stop in text for stop in stops[i]) or len(generated[i]) >= requests[i].max_gen_toks:
                    done[i] = True
            if all(done):
                break
            input_ids = next_ids[:, None]
            positions = positions[:, -1:] + 1
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        results = []
        for i, tokens in enumerate(generated):
            text = self.tokenizer.decode(tokens)
            for stop in stops[i]:
                if stop:
                    text = text.split(stop)[0]
            results.append((text, len(tokens), len(full_contexts[i]) > len(contexts[i])))
        return results


def _pad_seq(key_value: tuple[torch.Tensor, torch.Tensor], length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad cached (keys, values) of shape (1, heads, seq, head_dim) with zeros to `length` positions."""
    keys, values = key_value
    missing = length - keys.shape[2]
    return (F.pad(keys, (0, 0, 0, missing)), F.pad(values, (0, 0, 0, missing))) if missing else (keys, values)


def _batches(items: list, batch_size: int, size: Callable) -> Iterator[list]:
    """Consecutive items whose sizes add up to at most batch_size (an item larger than that goes alone)."""
    batch, used = [], 0
    for item in items:
        if batch and used + size(item) > batch_size:
            yield batch
            batch, used = [], 0
        batch.append(item)
        used += size(item)
    if batch:
        yield batch


SCORERS: dict[str, Callable[..., list[ScoredRequest]]] = {
    "loglikelihood": CausalLMScorer.loglikelihood,
    "loglikelihood_rolling": CausalLMScorer.loglikelihood_rolling,
    "generate_until": CausalLMScorer.generate_until,
}


def score_requests(
    scorer: CausalLMScorer, requests: Sequence[Request], show_progress: bool = True, desc: str | None = None
) -> list[ScoredRequest]:
    """Score mixed requests by their request_type (one scorer per kind, in the SCORERS dict); order kept."""
    by_type: dict[str, list[int]] = defaultdict(list)
    for index, request in enumerate(requests):
        by_type[request.request_type].append(index)
    results: list[ScoredRequest | None] = [None] * len(requests)
    for request_type, indices in by_type.items():
        if request_type not in SCORERS:
            raise ValueError(f"request_type {request_type!r} is not one of {', '.join(SCORERS)}")
        label = f"{desc}: {request_type}" if desc else request_type
        for index, scored in zip(indices, SCORERS[request_type](scorer, [requests[i] for i in indices], show_progress, label)):
            results[index] = scored
    return results  # type: ignore[return-value]
