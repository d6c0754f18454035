"""Greedy and sampled decoding with a static KV cache, with less host work per token than transformers' `_sample`.

Why: with `generate(..., cache_implementation="static")` a decoding step's device work is one compiled forward (on a
GPU, a CUDA-graph replay), so the step takes as long as the host needs to issue it. transformers' loop rebuilds the
inputs every step — `prepare_inputs_for_generation` slices and clones the ids and builds the 4-D mask over the whole
cache on the host, `_update_model_kwargs_for_generation` concatenates the attention mask and positions, the ids grow
by `torch.cat` — and reads a stop flag back from the device after every token, so the host and the device take turns
instead of overlapping. That loop, not the model, is most of a step: on a 2-core CPU, with a tiny model's forward
compiled as generate compiles it on CUDA, a step takes 1.62 ms in transformers' loop and 1.09 ms in this one
(benchmarks/bench_decode_loop.py).

What stays as in `_sample`, token for token (tests/hf_gpt_custom/test_static_decoding.py checks it against `_sample`
and against GPT2LMHeadModel with the same weights): the prefill is transformers' own; each step the model gets the same
ids, positions and mask values; the logits processors and stopping criteria run once per token on the sequence so far;
the token is the argmax or one `torch.multinomial` draw; a finished row gets `pad_token_id`.

What changes: ids, positions and the key mask live in buffers allocated once. The mask over a static cache's slots is
the prompt's padding mask plus each slot as it is written — decoding one token at a time, that is exactly the causal and
padding mask transformers builds. On CUDA and XPU (STOP_LATE_DEVICES), for greedy decoding with every module in eval
mode and transformers' pure processors and criteria (no random draw, no state, no user code) the stop flag is copied
without waiting and read one step late, and the extra step's token is dropped: the host queues the next step while the
device runs this one. Everything else (the CPU, sampling, a dropout layer in train mode, a user's processor or
criterion, or one that calls user code) reads the flag every step, as `_sample` does; so does a step whose position
would pass n_positions.

On a GPU (CUDA or XPU), greedy decoding with transformers' processors and criteria that only select, mask or fill
(`EXACT_WHEN_COMPILED`: min lengths, banned n-grams, forced and suppressed tokens, eos and max length) also compiles
the choice of each token — the processors, the argmax, the padding of finished rows, the stopping criteria — into
one call of a few fused kernels, where eager they are two dozen small kernels a token, each launched from Python.
With the forward a CUDA-graph replay, launching those was most of a step: a profile of GPT-2 small at batch 16 on an
H200 counted 34 launches a step besides the graph's, the device busy for under a third of the step. Compiled, a step
took 0.63 ms at batch 16 and 0.58 at batch 1, against 1.09 and 0.99 eager (bf16, 128 new tokens;
benchmarks/results/gpu_h200/gpu_results.md). With dynamic shapes one graph serves every length; a processor's branch
that flips (a minimum length reached) adds one, each set of options compiles its own, and the last token is chosen
eagerly (max length's branch). The tokens stay those of `_sample`: selections, masks and the argmax are exact, ties
included. Arithmetic a compiler may round otherwise (log_softmax, a division) and banned-word lists or biases (which
the compiled code would hold as constants, compiling again for every other list) keep the choice eager, and so does
the CPU, where each eager op costs microseconds.

Anything this loop does not cover — another cache, another attention implementation than sdpa, a streamer, scores or
hidden states returned, inputs_embeds, a cache passed in by the caller — runs transformers' `_sample` unchanged
(`uses_static_decoding` says which).
"""

from __future__ import annotations

import types

import torch
from transformers.cache_utils import StaticCache, StaticLayer
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import StoppingCriteriaList

# What `_sample` may hand the model besides the ids; any other key (token_type_ids, a user's forward kwarg) means the
# forward needs something this loop does not carry from step to step, so `_sample` runs.
MODEL_KWARGS_KEPT = {"cache", "attention_mask", "position_ids", "use_cache", "logits_to_keep"}

# Devices that run ahead of the host, where reading the stop flag one step late lets the host queue the next step. On
# the CPU every op has finished when it returns, so the read costs nothing and the late read would only add a step. A
# test adds "cpu" to hold the late read's code path on a CPU.
STOP_LATE_DEVICES = ("cuda", "xpu")


def uses_static_decoding(model, input_ids: torch.Tensor, stopping_criteria: StoppingCriteriaList, generation_config,
                         model_kwargs: dict, synced_gpus: bool, streamer) -> bool:
    """True when `decode_with_static_cache` gives what transformers' `_sample` gives for this call. Before
    transformers 5.24 generate() hands the cache over as `past_key_values`, so `_sample` runs there."""
    cache = model_kwargs.get("cache")
    prompt_mask = model_kwargs.get("attention_mask")
    return (
        type(cache) is StaticCache
        and all(type(layer) is StaticLayer for layer in cache.layers)  # no sliding window: one mask for every layer
        and not getattr(cache, "_is_user_defined", False)  # a caller's cache may hold history; it outlives the call
        and not cache.is_initialized  # (empty: nothing cached before this call)
        and model.config._attn_implementation == "sdpa"  # the boolean 4-D mask below is sdpa's format
        and set(model_kwargs) <= MODEL_KWARGS_KEPT
        and (prompt_mask is None or tuple(prompt_mask.shape) == tuple(input_ids.shape))  # a 2-D mask over the prompt
        and input_ids.device == model.device  # (else transformers moves each step's inputs)
        and model_kwargs.get("use_cache", True)
        and not synced_gpus
        and streamer is None
        and not generation_config.return_dict_in_generate
        and generation_config.prefill_chunk_size is None
        and stopping_criteria.max_length is not None  # (generate() always adds one: it sizes the buffers)
        # a caller's MaxLengthCriteria replaces generate()'s unchecked: at or below the prompt's length, `_sample`
        # still makes one token, which the buffers sized by it have no slot for
        and stopping_criteria.max_length > input_ids.shape[1]
    )


# transformers' processors and stopping criteria that are functions of (ids, scores) (MaxTimeCriteria: and the clock,
# harmless, as the extra step's token is dropped): calling them once more
# after the last token changes nothing. Not here: those that run a user's function (prefix_allowed_tokens_fn), a
# model (unbatched classifier-free guidance) or keep state (watermarking) — and any user class.
PURE_PROCESSORS_AND_CRITERIA = frozenset({
    "MinLengthLogitsProcessor", "MinNewTokensLengthLogitsProcessor", "TemperatureLogitsWarper",
    "RepetitionPenaltyLogitsProcessor", "TopPLogitsWarper", "TopKLogitsWarper", "MinPLogitsWarper",
    "TypicalLogitsWarper", "EpsilonLogitsWarper", "EtaLogitsWarper", "NoRepeatNGramLogitsProcessor",
    "SequenceBiasLogitsProcessor", "NoBadWordsLogitsProcessor", "ForcedBOSTokenLogitsProcessor",
    "ForcedEOSTokenLogitsProcessor", "InfNanRemoveLogitsProcessor", "ExponentialDecayLengthPenalty",
    "LogitNormalization", "SuppressTokensAtBeginLogitsProcessor", "SuppressTokensLogitsProcessor",
    "MaxLengthCriteria", "MaxTimeCriteria", "StopStringCriteria", "EosTokenCriteria",
})


# Of those, the ones the token choice is compiled with: those that only select, mask or fill, which a compiled kernel
# computes to the bit as eager does, and whose settings are no constants of the compiled code. Not: a criterion that
# runs on the host (the clock, a tokenizer's string tables); arithmetic a compiler may round otherwise (log_softmax's
# logsumexp, a fused multiply-add, a division: LogitNormalization, ExponentialDecayLengthPenalty,
# RepetitionPenaltyLogitsProcessor, the warpers), where a near-tie between two tokens could then go the other way;
# banned words and sequence biases, whose lists the compiled code holds as constants, so every other list compiled
# again (and a server whose lists change per request would hit torch's recompile limit).
EXACT_WHEN_COMPILED = frozenset({
    "MinLengthLogitsProcessor", "MinNewTokensLengthLogitsProcessor", "NoRepeatNGramLogitsProcessor",
    "ForcedBOSTokenLogitsProcessor", "ForcedEOSTokenLogitsProcessor", "InfNanRemoveLogitsProcessor",
    "SuppressTokensAtBeginLogitsProcessor", "SuppressTokensLogitsProcessor", "MaxLengthCriteria", "EosTokenCriteria",
})

# Devices where the token choice is compiled: there each eager op is a kernel launch from Python. A test adds "cpu".
COMPILED_CHOICE_DEVICES = ("cuda", "xpu")


def _transformers_own(item) -> bool:
    """Whether a processor or criterion is one of transformers' classes (not a user's, which may run any code)."""
    return type(item).__module__.startswith("transformers.generation.")


def _may_run_one_step_more(model, processors: LogitsProcessorList, criteria: StoppingCriteriaList) -> bool:
    """True when one more step after the last token changes nothing the caller sees: no random draw (greedy, and
    every module in eval mode: a dropout layer left in train mode, as Monte-Carlo dropout does, draws), and only
    transformers' pure processors and criteria."""
    return not any(module.training for module in model.modules()) and all(
        _transformers_own(item) and type(item).__name__ in PURE_PROCESSORS_AND_CRITERIA
        for item in [*processors, *criteria]
    )


def choose_next_tokens(logits_processor: LogitsProcessorList, stopping_criteria: StoppingCriteriaList,
                       sequences: torch.LongTensor, logits: torch.Tensor, unfinished: torch.LongTensor,
                       pad_token_id: torch.Tensor | None, has_eos_stopping_criteria: bool, do_sample: bool,
                       contiguous_ids: bool = False):
    """What `_sample` does between two forwards, op for op: the last position's logits in float32 through the
    processors, the argmax or one draw, pad_token_id for a finished row, the stopping criteria on the sequence with the
    new token. `sequences` holds the ids so far and one slot more, at the end, which the new tokens are written to.
    `contiguous_ids`: hand processors and criteria contiguous copies, as `_sample`'s torch.cat makes them (a user's
    class may call .view on them; slices of the buffer are not contiguous when batch > 1).
    Returns (the new tokens, which rows go on, whether none does)."""
    ids = sequences[:, :-1].contiguous() if contiguous_ids else sequences[:, :-1]
    scores = logits_processor(ids, logits[:, -1].to(copy=True, dtype=torch.float32))
    if do_sample:
        next_tokens = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
    else:
        next_tokens = torch.argmax(scores, dim=-1)
    if has_eos_stopping_criteria:
        next_tokens = next_tokens * unfinished + pad_token_id * (1 - unfinished)
    sequences[:, -1] = next_tokens
    # `_sample` passes its collected scores, which are None unless they are returned (never, here)
    unfinished = unfinished & ~stopping_criteria(sequences.contiguous() if contiguous_ids else sequences, None)
    return next_tokens, unfinished, unfinished.max() == 0


_compiled_choices: dict[tuple, object] = {}


def _compiled_choice(backend: str, signature: tuple):
    """`choose_next_tokens` compiled with dynamic shapes, one per backend and set of processors and criteria for the
    whole process. Each gets a code object of its own: dynamo keeps graphs, and counts them against torch's recompile
    limit (8), per code object, so another set of generation options starts its own few graphs rather than using up
    a shared limit (after which the choice would run eagerly)."""
    key = (backend, signature)
    if key not in _compiled_choices:
        code = choose_next_tokens.__code__.replace(co_name=f"choose_next_tokens_{len(_compiled_choices)}")
        function = types.FunctionType(code, choose_next_tokens.__globals__, code.co_name)
        _compiled_choices[key] = torch.compile(function, dynamic=True, backend=backend)
    return _compiled_choices[key]


def _choice_to_compile(model, compiled_forward: bool, logits_processor, stopping_criteria, generation_config,
                       stop_late: bool):
    """The compiled token choice where it pays and gives `_sample`'s tokens, else the eager one: greedy on a GPU with
    the forward compiled (so a step is launch-bound), only processors and criteria exact when compiled, and not
    where the caller asked torch to refuse any recompilation (the choice compiles a graph where a minimum length is
    reached). tests/hf_gpt_custom/test_compiled_token_choice.py compiles each of them."""
    items = [*logits_processor, *stopping_criteria]
    exact = all(_transformers_own(item) and type(item).__name__ in EXACT_WHEN_COMPILED for item in items)
    if (stop_late and compiled_forward and exact and model.device.type in COMPILED_CHOICE_DEVICES
            and not torch._dynamo.config.error_on_recompile):
        backend = getattr(generation_config.compile_config, "backend", None) or "inductor"
        return _compiled_choice(backend, tuple(type(item).__name__ for item in items))
    return choose_next_tokens


class _CopyDone:
    """An event marking that a non-blocking copy to the host has landed; nothing to wait for on the CPU."""

    def __init__(self, device: torch.device):
        self.event = None if device.type == "cpu" else torch.Event(device=device, blocking=True)

    def record(self) -> None:
        if self.event is not None:
            self.event.record()

    def synchronize(self) -> None:
        if self.event is not None:
            self.event.synchronize()


@torch.no_grad()
def decode_with_static_cache(model, input_ids: torch.LongTensor, logits_processor: LogitsProcessorList,
                             stopping_criteria: StoppingCriteriaList, generation_config,
                             model_kwargs: dict) -> torch.LongTensor:
    """The sequences `_sample` returns (prompt and new tokens), for a call `uses_static_decoding` accepts."""
    cache = model_kwargs["cache"]
    batch, prompt_length = input_ids.shape
    max_length = stopping_criteria.max_length  # generate() always adds its MaxLengthCriteria
    do_sample = generation_config.do_sample
    pad_token_id = generation_config._pad_token_tensor
    has_eos_stopping_criteria = any(hasattr(criterion, "eos_token_id") for criterion in stopping_criteria)
    compiled_forward = model._valid_auto_compile_criteria(model_kwargs, generation_config)
    forward = model.get_compiled_call(generation_config.compile_config) if compiled_forward else model.__call__

    outputs = model._prefill(input_ids, generation_config, model_kwargs)  # transformers' own prefill

    device = input_ids.device
    # prompt + generated ids, [:, :length] the sequence so far; int64 whatever the prompt's dtype, as `_sample`'s
    # torch.cat with the argmax's ids returns them
    tokens = torch.zeros((batch, max_length), dtype=torch.long, device=input_ids.device)
    tokens[:, :prompt_length] = input_ids
    slots = cache.layers[0].max_cache_len
    attended = torch.zeros((batch, slots), dtype=torch.bool, device=device)  # which cache slots each row attends
    prompt_mask = model_kwargs.get("attention_mask")
    attended[:, :prompt_length] = True if prompt_mask is None else prompt_mask.bool()
    attention_mask = attended[:, None, None, :]  # (batch, 1, query 1, slots): a view, updated in place each step
    positions = model_kwargs.get("position_ids")
    positions = (positions[..., -1:] if positions is not None  # 1-D or 2-D, as the caller gave them (and `_sample`)
                 else torch.full((batch, 1), prompt_length - 1, dtype=torch.long, device=device))
    # The model's last position: a step past it is refused (or, compiled, indexes past the position table), so the
    # late read must not queue one that `_sample` would not run.
    n_positions = getattr(model.config, "n_positions", None) or max_length
    unfinished = torch.ones(batch, dtype=torch.long, device=device)
    stop_late = (device.type in STOP_LATE_DEVICES and not do_sample
                 and _may_run_one_step_more(model, logits_processor, stopping_criteria))
    if stop_late:
        stop_flags = [torch.zeros((), dtype=torch.bool, pin_memory=device.type == "cuda") for _ in range(2)]
        copied = [_CopyDone(device) for _ in range(2)]
        # How far the caller's positions run ahead of the ids' indices (0 without position_ids): the next step's
        # position is then `length - 1 + ahead`. Read once, before the first step.
        ahead = 0 if "position_ids" not in model_kwargs else int(positions.max()) - (prompt_length - 1)
    choose = _choice_to_compile(model, compiled_forward, logits_processor, stopping_criteria, generation_config,
                                stop_late)
    # transformers' own processors and criteria read the ids through slices; a user's may need them contiguous
    contiguous_ids = batch > 1 and not all(map(_transformers_own, [*logits_processor, *stopping_criteria]))
    length = prompt_length

    while True:
        # the last token eagerly: MaxLengthCriteria and ForcedEOS flip there, a graph of their own for one step
        chooser = choose if length + 1 < max_length else choose_next_tokens
        next_tokens, unfinished, all_finished = chooser(
            logits_processor, stopping_criteria, tokens[:, :length + 1], outputs.logits, unfinished, pad_token_id,
            has_eos_stopping_criteria, do_sample, contiguous_ids)
        del outputs  # a compiled forward's outputs are overwritten by its next call
        length += 1

        if stop_late:
            # Queue this step's flag, then read the previous step's: if every row had finished there, this step's
            # token is one too many.
            step = length % 2
            stop_flags[step].copy_(all_finished, non_blocking=True)
            copied[step].record()
            if length > prompt_length + 1:
                copied[1 - step].synchronize()
                if stop_flags[1 - step]:
                    length -= 1
                    break
            if length == max_length:  # the MaxLengthCriteria: known on the host, nothing to wait for
                copied[step].synchronize()
                break
            if length + ahead > n_positions:  # the next step's position is past the context: run it only if
                copied[step].synchronize()    # `_sample` would
                if stop_flags[step]:
                    break
        elif length == max_length or bool(all_finished):
            break

        attended[:, length - 1] = True  # the slot the new token is written to
        positions = positions + 1
        outputs = forward(input_ids=next_tokens[:, None], attention_mask=attention_mask, position_ids=positions,
                          cache=cache, use_cache=True, logits_to_keep=1, return_dict=True)
    return tokens[:, :length].clone()  # its own memory: a view of one row is "contiguous" and keeps the whole buffer
