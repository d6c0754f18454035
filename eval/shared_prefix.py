"""Scoring the choices of one context from a single pass over their shared prefix (the KV-cache fast path).

A multiple-choice question asks for log p(choice | context) for 2-5 choices of one context. Scored the plain way
(lm-eval's), the context runs once per choice; here it runs once, with the tokens all choices start with, and each
choice's own tokens run after a copy of that KV cache. eval/scoring.py decides which requests take this path and
owns the model calls and the LM head; this module only lays out the two passes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn.utils.rnn import pad_sequence
from transformers import DynamicCache

from hf_gpt_custom.eval.batching import pad_rows, padded_batches


def score_shared_prefixes(
    scorer, pairs: Sequence[tuple[list[int], list[int]]], groups: Sequence[list[int]]
) -> dict[int, tuple[float, bool]]:
    """(sum of log-probs, is_greedy) of every member of `groups` (lists of indices into `pairs` sharing a context),
    each group's shared prefix run once.

    A group's prefix is its context plus the tokens that all its continuations start with, each continuation
    keeping at least its last token as its own (PIQA's two solutions often open with the same words: 1,086 of
    the 6,235 continuation tokens of its first 100 docs). Pass 1 runs the prefixes and keeps their KV caches;
    pass 2 runs each continuation's own tokens after a copy of its prefix's cache. The head then runs once
    per scored position, a prefix's positions being shared by its group (`scorer.sum_and_greedy`).
    """
    n_shared = [count_shared_tokens([pairs[m][1] for m in members]) for members in groups]
    prefixes = [pairs[members[0]][0] + pairs[members[0]][1][:n] for members, n in zip(groups, n_shared)]
    own = {m: pairs[m][1][n:] for members, n in zip(groups, n_shared) for m in members}
    needs_cache = any(len(tokens) > 1 for tokens in own.values())
    context_lengths = [len(pairs[members[0]][0]) for members in groups]
    prefix_features, prefix_kv = _run_prefixes(scorer, prefixes, context_lengths, needs_cache)
    rows = [(g, m) for g, members in enumerate(groups) for m in members]
    own_features = _run_continuations(scorer, prefixes, prefix_kv, rows, own)
    # Lay all feature blocks end to end; positions[i] lists the rows that predict member i's tokens.
    blocks, positions, n_rows = [], [], 0
    for g, members in enumerate(groups):
        blocks.append(prefix_features[g])
        shared_rows = range(n_rows, n_rows + len(prefix_features[g]))
        n_rows += len(prefix_features[g])
        for m in members:
            if m in own_features:  # absent for a continuation with one own token: the prefix predicts it
                blocks.append(own_features[m])
            positions.append([*shared_rows, *range(n_rows, n_rows + len(own[m]) - 1)])
            n_rows += len(own[m]) - 1
    members = [m for ms in groups for m in ms]
    return dict(zip(members, scorer.sum_and_greedy(torch.cat(blocks), positions, [pairs[m][1] for m in members])))


def count_shared_tokens(continuations: Sequence[list[int]]) -> int:
    """How many leading tokens all continuations share, leaving each at least one token of its own.

    Example: [5, 6, 7], [5, 6, 8, 9] -> 2; [5, 6], [5, 6, 7] -> 1 (the first keeps its last token).
    """
    limit = min(len(continuation) for continuation in continuations) - 1
    n = 0
    while n < limit and all(continuation[n] == continuations[0][n] for continuation in continuations[1:]):
        n += 1
    return n


def _run_prefixes(
    scorer, prefixes: list[list[int]], context_lengths: list[int], needs_cache: bool
) -> tuple[list[torch.Tensor], list[list | None]]:
    """Pass 1: forward the prefixes, right-padded, batched longest first.

    Returns per prefix the features of its positions from the context's last token on (they predict the
    shared tokens, then every continuation's first own token) and, with needs_cache, its KV cache: a list over
    layers of (keys, values) of shape (prefix length, heads, head_dim), sequence first for pad_sequence.
    """
    features: list = [None] * len(prefixes)
    kv: list = [None] * len(prefixes)
    for chunk in padded_batches(list(range(len(prefixes))), lambda g: len(prefixes[g]), scorer.batch_size):
        input_ids, _ = pad_rows([prefixes[g] for g in chunk], scorer.padding_token_id)
        # No mask needed: with right padding, causal attention keeps real positions away from the padding
        # (and sdpa takes its is_causal fast path). Pass 2 masks the padded cache columns.
        output, cache = scorer.forward_features(input_ids.to(scorer.device), use_cache=needs_cache)
        for row, g in enumerate(chunk):
            length = len(prefixes[g])
            features[g] = output[row, context_lengths[g] - 1 : length]
            if needs_cache:
                kv[g] = [(k[row, :, :length].transpose(0, 1), v[row, :, :length].transpose(0, 1)) for k, v, *_ in cache]
    return features, kv


def _run_continuations(
    scorer, prefixes: list[list[int]], prefix_kv: list, rows: list[tuple[int, int]], own: dict[int, list[int]]
) -> dict[int, torch.Tensor]:
    """Pass 2: for each (group, member) row whose own tokens are more than one, forward them minus the last
    after its prefix's cache. Returns member -> features of those positions (len(own) - 1, hidden).

    Rows of all groups in the window are batched together, longest first (little padding); each attends to a
    copy of its own prefix's cache, zero-padded to the batch's longest prefix and masked there, with position
    ids continuing after its real prefix.
    """
    rows = [row for row in rows if len(own[row[1]]) > 1]
    features = {}
    for batch in padded_batches(rows, lambda row: len(own[row[1]]) - 1, scorer.batch_size):
        input_ids, own_mask = pad_rows([own[m][:-1] for _, m in batch], scorer.padding_token_id)
        prefix_lengths = torch.tensor([len(prefixes[g]) for g, _ in batch])
        prefix_mask = (torch.arange(int(prefix_lengths.max()))[None] < prefix_lengths[:, None]).long()
        # Padding columns of short rows would run past the position table: clamp them (they are masked).
        positions = (prefix_lengths[:, None] + torch.arange(input_ids.shape[1])[None]).clamp(max=scorer.max_length - 1)
        cache_data = []
        for layer in range(len(prefix_kv[batch[0][0]])):
            keys, values = (
                pad_sequence([prefix_kv[g][layer][i] for g, _ in batch], batch_first=True).transpose(1, 2) for i in (0, 1)
            )  # (batch, heads, longest prefix, head_dim), zeros after each real prefix
            cache_data.append((keys, values))
        output, _ = scorer.forward_features(
            input_ids.to(scorer.device),
            attention_mask=torch.cat([prefix_mask, own_mask], dim=1).to(scorer.device),
            position_ids=positions.to(scorer.device),
            past_key_values=DynamicCache(ddp_cache_data=cache_data, config=scorer.model.config),
            use_cache=True,
        )
        for r, (_, m) in enumerate(batch):
            features[m] = output[r, : len(own[m]) - 1]
    return features
