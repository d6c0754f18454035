"""CausalLMScorer: any causal LM as the three scorers lm-eval defines (loglikelihood, loglikelihood_rolling,
generate_until), and score_requests, which sends each Request to the one its request_type names.

Token arithmetic follows lm-evaluation-harness 0.4.13 exactly (eval/tokens.py; left truncation to max_length + 1),
so numbers agree with it. Here: the model split into hidden states + LM head (run only on scored positions, a
cache-sized chunk at a time), plain one-row-per-request scoring, rolling windows. Elsewhere: choices sharing a context
scored from one pass over it (eval/shared_prefix.py), batching and padding (eval/batching.py), the greedy decoding
loop (eval/generation.py), and which requests a kind of task makes (eval/output_types.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from itertools import accumulate

import torch
import torch.nn.functional as F

from hf_gpt_custom.eval.batching import batches, pad_rows, padded_batches
from hf_gpt_custom.eval.generation import generate_greedy
from hf_gpt_custom.eval.requests import Request, ScoredRequest
from hf_gpt_custom.eval.shared_prefix import score_shared_prefixes
from hf_gpt_custom.eval.tokens import (
    encode_pairs, encode_texts, get_rolling_token_windows, padding_token_id, prefix_token_id, resolve_max_length,
)
from hf_gpt_custom.errors import UserError
from hf_gpt_custom.progress import progress_bar
from hf_gpt_custom.transformers_compat import cache_kwarg, output_cache

HEAD_CHUNK_LOGITS = 2**21  # logits per LM-head call: 8 MB of float32, 256 positions of an 8,192-token vocab


# --- the model as two functions: hidden states, and log-probs of selected positions --------------------------------


class CausalLMScorer:
    """Wraps any transformers causal LM for scoring.

    When the model is a base model + output embedding (GPT-2, ours, Llama, ...), it runs the base model and applies
    the head only to scored positions; this is checked once against `model(...).logits` and otherwise falls
    back to the full forward (models with logit scaling or soft-capping).
    """

    def __init__(self, model, tokenizer, batch_size: int = 16, max_length: int | None = None, share_context: bool = True,
                 obeys_generation_config: bool = False):
        """obeys_generation_config: generate_until decodes as the model's generation_config says apart from
        sampling (lm-eval's HFLM: a repetition_penalty there applies); by default it is plain argmax decoding."""
        self.model = model
        self.obeys_generation_config = obeys_generation_config
        self.tokenizer = tokenizer
        self.batch_size = max(1, int(batch_size))
        self.max_length = max_length or scoring_window(model, tokenizer)
        # The shared-prefix pass pads each prefix's KV cache to the longest of its batch; a sliding or local window
        # counted in cache columns then covers other tokens (GPT-Neo, Mistral, Gemma-3, Phi-3: up to 22 nats off).
        # Context tokens whose KV caches are kept at once while their choices are sorted by length: ~50 zero-shot
        # HellaSwag questions, a few 5-shot ones. Bounds memory: GPT-2 small keeps 2048 x 12 layers x 2 x 768
        # floats = 150 MB.
        self.context_tokens_per_window = 2048
        self.device = next(model.parameters()).device
        self.padding_token_id = padding_token_id(tokenizer)
        self.vocab_size = _vocab_size(model)
        self._use_head_split = self._check_head_split()
        # It needs the model's KV cache, which a model without one (transformers' OpenAIGPT) returns as None: a loaded
        # one failed on every multiple-choice task with a bare TypeError (the docsclaims3 hunt)
        # PEFT's prompt learning (prefix, prompt, p-tuning) puts learned tokens before each row, which a cache copied
        # between choices would not carry: such a model is scored one row at a time, as lm-eval scores it
        self.share_context = (share_context and not attends_through_a_window(model.config)
                              and not is_prompt_learning(model) and self._returns_a_cache())

    def forward_features(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        """(features, cache): the final hidden states (head split) or the logits, and the KV cache if use_cache."""
        module = self.model.base_model if self._use_head_split else self.model
        output = module(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            # `cache` from transformers 5.24 on; none given when there is none: an explicit None took the place of
            # the prefix a PEFT prefix-tuned model passes as past_key_values (the adapter was silently not applied)
            **(cache_kwarg(past_key_values) if past_key_values is not None else {}),
            use_cache=use_cache,
            return_dict=True,  # outputs by name, whatever the folder's config.return_dict says
        )
        features = output.last_hidden_state if self._use_head_split else output.logits
        return features, (output_cache(output) if use_cache else None)

    def _log_probs(self, features: torch.Tensor) -> torch.Tensor:
        if self._use_head_split:
            # a padded vocabulary (pad_vocab_size_to_multiple_of) gives the head rows the model's logits leave out:
            # never predictable, they must not take probability mass either
            features = self.model.get_output_embeddings()(features)[..., : self._logit_width]
        return F.log_softmax(features.float(), dim=-1)

    @torch.no_grad()
    def _returns_a_cache(self) -> bool:
        probe = torch.tensor([[self.padding_token_id] * 2], device=self.device)
        try:
            return self.forward_features(probe, use_cache=True)[1] is not None
        except TypeError:  # a forward without use_cache at all
            return False

    @torch.no_grad()
    def _check_head_split(self) -> bool:
        head = self.model.get_output_embeddings()
        base = getattr(self.model, "base_model", None)
        if head is None or base is None or base is self.model:
            return False
        probe = torch.tensor([[self.padding_token_id] * 4], device=self.device)
        try:
            full = self.model(input_ids=probe, return_dict=True).logits
            split = head(base(input_ids=probe, return_dict=True).last_hidden_state)
        except (TypeError, AttributeError):
            return False
        self._logit_width = full.shape[-1]  # the model's own logits may be narrower than the head (padded rows cut)
        split = split[..., : self._logit_width]
        return split.shape == full.shape and bool(torch.allclose(full.float(), split.float(), atol=1e-4, rtol=1e-4))

    # --- loglikelihood ---------------------------------------------------------------------------------------------

    def loglikelihood(self, requests: Sequence[Request], show_progress: bool = True, desc: str = "loglikelihood") -> list[ScoredRequest]:
        """(sum log p(continuation | context), is_greedy) for each request, in the order given."""
        pairs = encode_pairs(self.tokenizer, [(r.context, r.continuation) for r in requests])
        results = self.loglikelihood_tokens(pairs, show_progress=show_progress, desc=desc)
        scored = []
        for request, (loglikelihood, is_greedy), (context, continuation) in zip(requests, results, pairs):
            # a continuation longer than the window is scored on its last max_length tokens (_score_full)
            kept = continuation[-self.max_length :]
            scored.append(ScoredRequest(
                request, loglikelihood, is_greedy, len(kept),
                is_truncated=len(context) + len(continuation) > self.max_length + 1,
                scored_continuation=self.tokenizer.decode(kept) if len(kept) < len(continuation) else None,
            ))
        return scored

    @torch.no_grad()
    def loglikelihood_tokens(
        self, pairs: Sequence[tuple[list[int], list[int]]], show_progress: bool = True, desc: str = "loglikelihood"
    ) -> list[tuple[float, bool]]:
        """Score token-level (context, continuation) pairs; identical contexts share one forward pass."""
        results: list[tuple[float, bool] | None] = [None] * len(pairs)
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        singles: list[int] = []
        for index, (context, continuation) in enumerate(pairs):
            if not continuation:
                raise UserError(f"request {index}: the continuation is empty after tokenization; nothing to score")
            if self.share_context and len(context) + len(continuation) <= self.max_length + 1:
                groups[tuple(context)].append(index)
            else:
                singles.append(index)
        shared = [members for members in groups.values() if len(members) > 1]
        singles += [members[0] for members in groups.values() if len(members) == 1]
        progress = progress_bar(show=show_progress, total=len(pairs), desc=desc)
        # Longest first, as lm-eval: an out-of-memory error happens at once rather than at the end. Contexts are
        # sorted by length (little padding in pass 1), then the choices of a window of contexts by their length.
        shared.sort(key=lambda members: -len(pairs[members[0]][0]))
        for window in batches(shared, self.context_tokens_per_window, size=lambda members: len(pairs[members[0]][0])):
            for index, value in score_shared_prefixes(self, pairs, window).items():
                results[index] = value
            progress.update(sum(len(members) for members in window))
        row_length = lambda i: min(len(pairs[i][0]) + len(pairs[i][1]) - 1, self.max_length)  # noqa: E731
        for batch in padded_batches(singles, row_length, self.batch_size):
            for index, value in zip(batch, self._score_full([pairs[i] for i in batch])):
                results[index] = value
            progress.update(len(batch))
        progress.close()
        return results  # type: ignore[return-value]

    def _score_full(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """The straightforward way (lm-eval's): one right-padded row per pair, context truncated from the left."""
        rows = [(context + continuation)[-(self.max_length + 1) :][:-1] for context, continuation in pairs]
        input_ids, _ = pad_rows(rows, self.padding_token_id)  # right padding: causal attention never reaches it
        features, _ = self.forward_features(input_ids.to(self.device))
        # PEFT's prompt tuning returns a row of logits for each of its virtual tokens before the input's own: a row's
        # positions start after them (lm-eval's offset for "virtual tokens")
        virtual = features.shape[1] - input_ids.shape[1]
        # A continuation longer than the window keeps its last len(row) tokens: the only ones one window can predict
        # (lm-eval's slice goes out of range here). Such a request is reported as truncated.
        kept = [continuation[-len(row) :] for (_, continuation), row in zip(pairs, rows)]
        selected = [features[i, virtual + len(row) - len(tokens) : virtual + len(row)]
                    for i, (tokens, row) in enumerate(zip(kept, rows))]
        ends = list(accumulate(len(tokens) for tokens in kept))
        positions = [range(end - len(tokens), end) for end, tokens in zip(ends, kept)]
        return self.sum_and_greedy(torch.cat(selected), positions, kept)

    def sum_and_greedy(
        self, features: torch.Tensor, positions: Sequence[Sequence[int]], continuations: Sequence[list[int]]
    ) -> list[tuple[float, bool]]:
        """(sum of log-probs, all tokens greedy) per continuation; positions[i][j] is the row of `features` that
        predicts continuations[i][j] (rows may be shared between continuations).

        The head and log-softmax run once per row, HEAD_CHUNK_LOGITS logits at a time: a chunk stays in cache
        between the matmul, the log-softmax and the argmax, where all rows at once (200 MB of logits for 6,000 rows
        x 8,192 vocab) would be written to memory and read back three times."""
        rows = torch.tensor([row for rows in positions for row in rows], device=self.device)
        targets = torch.tensor([token for continuation in continuations for token in continuation], device=self.device)
        assert len(rows) == len(targets), "one feature row per continuation token"
        token_log_probs = torch.empty(len(targets), device=self.device)
        is_greedy = torch.empty(len(targets), dtype=torch.bool, device=self.device)
        chunk_rows = max(64, HEAD_CHUNK_LOGITS // self.vocab_size)  # >= 64: a big vocab still gets an efficient matmul
        for start in range(0, len(features), chunk_rows):
            log_probs = self._log_probs(features[start : start + chunk_rows])  # (chunk rows, vocab)
            picked = ((rows >= start) & (rows < start + chunk_rows)).nonzero().squeeze(-1)
            local_rows, local_targets = rows[picked] - start, targets[picked]
            token_log_probs[picked] = log_probs[local_rows, local_targets]
            is_greedy[picked] = log_probs.argmax(-1)[local_rows] == local_targets
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
        prefix = prefix_token_id(self.tokenizer, needed_for="rolling windows (perplexity tasks)")
        windows, owners = [], []
        for index, tokens in enumerate(token_lists):
            for window in get_rolling_token_windows(tokens, prefix, self.max_length, context_len=1):
                windows.append(window)
                owners.append(index)
        sums = [0.0] * len(requests)
        scored = self.loglikelihood_tokens(windows, show_progress=show_progress, desc=desc)
        for owner, (loglikelihood, _) in zip(owners, scored):
            sums[owner] += loglikelihood
        return [ScoredRequest(r, sums[i], False, len(token_lists[i])) for i, r in enumerate(requests)]

    # --- generation ------------------------------------------------------------------------------------------------

    def generate_until(self, requests: Sequence[Request], show_progress: bool = True, desc: str = "generate_until") -> list[ScoredRequest]:
        """Greedy continuation of each context until a stop sequence (cut there) or max_gen_toks tokens.

        Requests are batched longest context first among those with the same `until` and `max_gen_toks` (one
        `generate` call takes one of each), as lm-eval groups them by generation settings."""
        by_settings: dict[tuple, list[int]] = defaultdict(list)
        for index in sorted(range(len(requests)), key=lambda i: -len(requests[i].context)):
            by_settings[(requests[index].until, requests[index].max_gen_toks)].append(index)
        outputs: list[ScoredRequest | None] = [None] * len(requests)
        progress = progress_bar(show=show_progress, total=len(requests), desc=desc)
        # PEFT's prompt learning: no KV cache (PEFT 0.21 would add its learned tokens again at every step, as under
        # lm-eval's HFLM, generating other tokens than the tuned model predicts) and one row per call (PEFT drops
        # position_ids, so a left-padded GPT-2 row read shifted positions; the roundreview27 hunt)
        prompt_learning = is_prompt_learning(self.model)
        rows_per_call = 1 if prompt_learning else self.batch_size
        for batch in (batch for group in by_settings.values() for batch in batches(group, rows_per_call, size=lambda _: 1)):
            generated = generate_greedy(
                self.model, self.tokenizer, [requests[i] for i in batch], self.max_length, self.padding_token_id,
                self.obeys_generation_config, use_cache=not prompt_learning,
            )
            for index, (text, n_tokens, is_truncated) in zip(batch, generated):
                outputs[index] = ScoredRequest(requests[index], 0.0, True, n_tokens, generation=text, is_truncated=is_truncated)
            progress.update(len(batch))
        progress.close()
        return outputs  # type: ignore[return-value]


def scoring_window(model, tokenizer) -> int:
    """The tokens a scored row holds: the model's context (lm-eval's max_length), less a prompt-learning adapter's
    learned tokens, which take positions before each row's own (lm-eval's HFLM does not leave them room: a full
    window fails past GPT-2's position table with an IndexError, and on a RoPE model scores a longer context)."""
    return resolve_max_length(model.config, tokenizer) - virtual_tokens(model)


def is_prompt_learning(model) -> bool:
    """A PEFT model whose active adapter is prompt learning (prefix tuning, prompt tuning, P-tuning)."""
    config = getattr(model, "active_peft_config", None)
    return bool(getattr(config, "is_prompt_learning", False))


def virtual_tokens(model) -> int:
    """The positions a PEFT prompt-learning adapter's learned tokens take before each row (0 for any other model)."""
    if not is_prompt_learning(model):
        return 0
    config = model.active_peft_config
    return int(config.num_virtual_tokens) * int(getattr(config, "num_transformer_submodules", None) or 1)


def attends_through_a_window(config) -> bool:
    """Whether some layer attends through a sliding, local or chunked window (Mistral's and Phi-3's sliding_window,
    Gemma-3's layer_types, GPT-Neo's local attention_layers, Llama 4's attention chunks), not the whole context."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True) is not False:
        return True  # Qwen2 carries a sliding_window it does not use (use_sliding_window=False)
    kinds = [*(getattr(text, "layer_types", None) or ()), *(getattr(text, "attention_layers", None) or ())]
    return bool(getattr(text, "attention_chunk_size", None)) or any(
        word in str(kind) for kind in kinds for word in ("sliding", "local", "chunked"))


def _vocab_size(model) -> int:
    """Rows of the output embedding (the logits' width); sets how many positions one head call takes."""
    head = model.get_output_embeddings()
    weight = getattr(head, "weight", None)
    if weight is not None:
        return weight.shape[0]
    return getattr(model.config, "vocab_size", None) or 50_257  # GPT-2's, if nothing says: only sizes the chunks


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
            raise UserError(f"request_type {request_type!r} is not one of {', '.join(SCORERS)}")
        label = f"{desc}: {request_type}" if desc else request_type
        for index, scored in zip(indices, SCORERS[request_type](scorer, [requests[i] for i in indices], show_progress, label)):
            results[index] = scored
    return results  # type: ignore[return-value]
