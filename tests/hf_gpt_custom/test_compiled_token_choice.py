"""static_decoding.py's compiled token choice (greedy decoding on a GPU): the processors, argmax, padding of finished
rows and stopping criteria compiled into one call. Held here on the CPU: the tokens are transformers' `_sample`'s on
the same model and GPT2LMHeadModel's with the same weights, one graph serves every length, and every transformers
processor and criterion it may take traces whole."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.generation import logits_process, stopping_criteria

from hf_gpt_custom import GPTCustomForCausalLM, static_decoding
from hf_gpt_custom.convert_gpt2 import from_gpt2_model
from tests.helpers import TINY_GPT2, compiled_forward, make_gpt2_pair, padded_batch, randomize_

EOS = torch.tensor([7])
PROMPT_LENGTH = 8






def test_the_compiled_choice_gives_the_tokens_of_transformers_loop_and_of_gpt2(gpu_code_path, monkeypatch):
    """Left-padded and full rows, min_new_tokens then eos free, n-grams banned, tokens suppressed: inductor's argmax,
    masks and criteria give `_sample`'s tokens on the same model, and GPT-2's with the same weights (which runs in
    transformers' own loop). Two prompt lengths and two batch sizes after the first call compile nothing new."""
    ours, reference = make_gpt2_pair("sdpa", seed=8)
    prompt, attention_mask = padded_batch()
    prompt, attention_mask = prompt[[0, 2]], attention_mask[[0, 2]]
    choices = []
    real_choice = static_decoding._choice_to_compile
    monkeypatch.setattr(static_decoding, "_choice_to_compile",
                        lambda *a: choices.append(real_choice(*a)) or choices[-1])
    kwargs = dict(attention_mask=attention_mask, do_sample=False, max_new_tokens=14, min_new_tokens=6,
                  no_repeat_ngram_size=2, suppress_tokens=[3, 6], pad_token_id=0, eos_token_id=5)
    tokens = ours.generate(prompt, cache_implementation="static", compile_config=compiled_forward(), **kwargs)
    assert choices == list(static_decoding._compiled_choices.values())  # the compiled choice ran
    # one graph for the forward, two for the choice over 13 lengths (the last token is chosen eagerly):
    # min_new_tokens not reached and reached; never one per length
    assert counters["stats"]["unique_graphs"] <= 3
    assert tokens.tolist() == reference.generate(prompt, **kwargs).tolist()
    with monkeypatch.context() as patch:
        patch.setattr("hf_gpt_custom.modeling_gpt_custom.uses_static_decoding", lambda *a, **k: False)
        assert tokens.tolist() == ours.generate(prompt, cache_implementation="static", **kwargs).tolist()

    graphs = []
    for length in (20, 12, 9):  # the same cache (prompt + new tokens = 33), so the same compiled forward
        prompt = torch.randint(0, 99, (2, length))
        kwargs = dict(do_sample=False, max_new_tokens=33 - length, min_new_tokens=6, no_repeat_ngram_size=2,
                      suppress_tokens=[3, 6], pad_token_id=0, eos_token_id=5)
        tokens = ours.generate(prompt, cache_implementation="static", compile_config=compiled_forward(), **kwargs)
        assert tokens.tolist() == reference.generate(prompt, **kwargs).tolist()
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[1:] == graphs[:1] * 2  # a new prompt length compiles neither the forward nor the choice again


def test_the_choice_stays_eager_off_the_gpu_path(monkeypatch):
    """Where the step is not launch-bound or the choice might not be `_sample`'s: on the CPU, an eager forward,
    sampling, a criterion that runs on the host (the clock), arithmetic a compiler may round otherwise, banned words
    (a list the compiled code would hold as constants), and a caller who asked torch to refuse recompiling."""
    ours, _ = make_gpt2_pair("sdpa", seed=8)
    prompt = torch.randint(0, 99, (2, 6))
    seen = []
    real_choice = static_decoding._choice_to_compile
    monkeypatch.setattr(static_decoding, "_choice_to_compile", lambda *a: seen.append(real_choice(*a)) or seen[-1])
    greedy = dict(do_sample=False, max_new_tokens=4, pad_token_id=0, cache_implementation="static")
    ours.generate(prompt, **greedy)  # the CPU
    monkeypatch.setattr(static_decoding, "STOP_LATE_DEVICES", ("cpu",))
    monkeypatch.setattr(static_decoding, "COMPILED_CHOICE_DEVICES", ("cpu",))
    ours.generate(prompt, **greedy)  # the forward not compiled
    eager_forward = compiled_forward("eager")
    ours.generate(prompt, compile_config=eager_forward, **{**greedy, "do_sample": True})
    ours.generate(prompt, max_time=60.0, compile_config=eager_forward, **greedy)
    ours.generate(prompt, repetition_penalty=1.3, compile_config=eager_forward, **greedy)  # a division
    ours.generate(prompt, renormalize_logits=True, compile_config=eager_forward, **greedy)  # log_softmax
    ours.generate(prompt, bad_words_ids=[[3]], compile_config=eager_forward, **greedy)  # a list held as constants
    with torch._dynamo.config.patch(error_on_recompile=True):
        ours.generate(prompt, compile_config=eager_forward, **greedy)
    assert seen == [static_decoding.choose_next_tokens] * 8
    ours.generate(prompt, compile_config=eager_forward, **greedy)  # (the same call otherwise takes the compiled one)
    assert seen[-1] is not static_decoding.choose_next_tokens


# transformers' pure processors and criteria (static_decoding's list), with arguments that make each act within a few
# steps; the compiled choice takes those exact when compiled.
PROCESSORS = {
    "MinLengthLogitsProcessor": lambda: logits_process.MinLengthLogitsProcessor(PROMPT_LENGTH + 4, EOS),
    "MinNewTokensLengthLogitsProcessor": lambda: logits_process.MinNewTokensLengthLogitsProcessor(PROMPT_LENGTH, 3,
                                                                                                  EOS),
    "RepetitionPenaltyLogitsProcessor": lambda: logits_process.RepetitionPenaltyLogitsProcessor(1.3),
    "NoRepeatNGramLogitsProcessor": lambda: logits_process.NoRepeatNGramLogitsProcessor(2),
    "SequenceBiasLogitsProcessor": lambda: logits_process.SequenceBiasLogitsProcessor({(3,): -2.0, (4, 5): 1.0}),
    "NoBadWordsLogitsProcessor": lambda: logits_process.NoBadWordsLogitsProcessor([[3], [4, 5]], EOS),
    "ForcedBOSTokenLogitsProcessor": lambda: logits_process.ForcedBOSTokenLogitsProcessor(2),
    "ForcedEOSTokenLogitsProcessor": lambda: logits_process.ForcedEOSTokenLogitsProcessor(PROMPT_LENGTH + 5, EOS),
    "InfNanRemoveLogitsProcessor": lambda: logits_process.InfNanRemoveLogitsProcessor(),
    "ExponentialDecayLengthPenalty": lambda: logits_process.ExponentialDecayLengthPenalty((2, 1.5), EOS,
                                                                                          PROMPT_LENGTH),
    "LogitNormalization": lambda: logits_process.LogitNormalization(),
    "SuppressTokensAtBeginLogitsProcessor": lambda: logits_process.SuppressTokensAtBeginLogitsProcessor(
        [3, 4], PROMPT_LENGTH),
    "SuppressTokensLogitsProcessor": lambda: logits_process.SuppressTokensLogitsProcessor([3, 4]),
    "TemperatureLogitsWarper": lambda: logits_process.TemperatureLogitsWarper(0.7),
    "TopKLogitsWarper": lambda: logits_process.TopKLogitsWarper(5),
    "TopPLogitsWarper": lambda: logits_process.TopPLogitsWarper(0.9),
    "MinPLogitsWarper": lambda: logits_process.MinPLogitsWarper(0.1),
    "TypicalLogitsWarper": lambda: logits_process.TypicalLogitsWarper(0.9),
    "EpsilonLogitsWarper": lambda: logits_process.EpsilonLogitsWarper(0.01),
    "EtaLogitsWarper": lambda: logits_process.EtaLogitsWarper(0.01),
    "MaxLengthCriteria": lambda: stopping_criteria.MaxLengthCriteria(PROMPT_LENGTH + 10),
    "EosTokenCriteria": lambda: stopping_criteria.EosTokenCriteria(EOS),
}


def test_every_processor_and_criterion_the_choice_may_take_is_listed_here():
    assert static_decoding.EXACT_WHEN_COMPILED <= set(PROCESSORS) <= static_decoding.PURE_PROCESSORS_AND_CRITERIA


@pytest.mark.parametrize("name", sorted(static_decoding.EXACT_WHEN_COMPILED))
def test_each_processor_and_criterion_traces_whole_and_gives_the_eager_choice(name):
    """fullgraph=True: a graph break would fail here. Ten steps of one batch, with a tie in the logits: the same
    tokens, flags and sequences as the eager choice, from at most two graphs (a branch that flips, e.g. at a minimum
    length; never one graph per length)."""
    torch._dynamo.reset()
    counters.clear()
    item = PROCESSORS[name]()
    is_criterion = isinstance(item, stopping_criteria.StoppingCriteria)
    processors = logits_process.LogitsProcessorList([] if is_criterion else [item])
    criteria = stopping_criteria.StoppingCriteriaList(
        [item] if is_criterion else [stopping_criteria.MaxLengthCriteria(PROMPT_LENGTH + 10),
                                     stopping_criteria.EosTokenCriteria(EOS)])
    compiled = torch.compile(static_decoding.choose_next_tokens, dynamic=True, fullgraph=True, backend="eager")
    generator = torch.Generator().manual_seed(0)
    sequences = torch.randint(0, 64, (3, PROMPT_LENGTH + 11), generator=generator)
    expected_sequences = sequences.clone()
    unfinished = expected_unfinished = torch.ones(3, dtype=torch.long)
    pad = torch.tensor(0)
    for length in range(PROMPT_LENGTH, PROMPT_LENGTH + 10):
        logits = torch.randn(3, 1, 64, generator=generator)
        logits[0, 0, 3] = logits[0, 0, 5] = 20.0  # a tie: the first index wins, as eager
        got = compiled(processors, criteria, sequences[:, :length + 1], logits, unfinished, pad, True, False)
        expected = static_decoding.choose_next_tokens(processors, criteria, expected_sequences[:, :length + 1], logits,
                                                      expected_unfinished, pad, True, False)
        for got_tensor, expected_tensor in zip(got, expected):
            assert torch.equal(got_tensor, expected_tensor)
        unfinished, expected_unfinished = got[1], expected[1]
    assert torch.equal(sequences, expected_sequences)
    assert counters["stats"]["unique_graphs"] <= 2
    torch._dynamo.reset()

def transformers_loop(monkeypatch, model, *args, **kwargs):
    with monkeypatch.context() as patch:
        patch.setattr("hf_gpt_custom.modeling_gpt_custom.uses_static_decoding", lambda *a, **k: False)
        return model.generate(*args, **kwargs)


def cache_entries() -> list[int]:
    """Each compiled choice's graphs (dynamo's cache entries of its code object)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return [len(_debug_get_cache_entry_list(compiled._torchdynamo_orig_callable.__code__))
            for compiled in static_decoding._compiled_choices.values()]


VOCAB = 50257  # GPT-2's: a batch-1 row this wide is a split reduction under inductor


def crafted_logits(seed: int) -> torch.Tensor:
    """Random logits with the maximum at 0 and token 5 half an ulp of logsumexp below it: after log_softmax the two
    are equal or one ulp apart depending on the last bit of logsumexp."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(VOCAB, generator=generator) * 3
    logits = logits - logits.max()
    c = -logits.log_softmax(-1)[int(logits.argmax())]
    logits[5] = -(torch.nextafter(c, torch.tensor(float("inf"))) - c) / 2
    return logits


@pytest.mark.parametrize("seed", [7, 8])
def test_renormalized_greedy_tokens_equal_transformers_loop(gpu_code_path, monkeypatch, seed):
    """renormalize_logits=True adds LogitNormalization (log_softmax). ln_f gives the constant e_0, so every step's
    logits are exactly wte[:, 0] (the crafted row), in eager and inductor forwards alike. Eager log_softmax (`_sample`,
    GPT-2) and inductor's differ in the last bit of logsumexp at batch 1 and this vocab, so compiled, a near-tie went
    the other way (token 5 for the maximum): such arithmetic is now chosen eagerly. (Found by a review.)"""
    torch.manual_seed(0)
    reference = GPT2LMHeadModel(GPT2Config(**{**TINY_GPT2, "vocab_size": VOCAB}, attn_implementation="sdpa"))
    randomize_(reference).eval()
    with torch.no_grad():
        reference.transformer.ln_f.weight.zero_()
        reference.transformer.ln_f.bias.zero_()
        reference.transformer.ln_f.bias[0] = 1.0
        reference.transformer.wte.weight[:, 0] = crafted_logits(seed)
    ours = from_gpt2_model(reference, GPTCustomForCausalLM)
    prompt = torch.tensor([[11, 12, 13, 14]])
    kwargs = dict(do_sample=False, max_new_tokens=3, renormalize_logits=True, pad_token_id=0,
                  cache_implementation="static", compile_config=compiled_forward())
    expected = transformers_loop(monkeypatch, ours, prompt, **kwargs)
    assert expected.tolist() == reference.generate(prompt, **{k: v for k, v in kwargs.items()
                                                               if k != "compile_config"}).tolist()
    got = ours.generate(prompt, **kwargs)
    assert static_decoding._compiled_choices == {}  # log_softmax is chosen eagerly
    assert got.tolist() == expected.tolist()


def test_first_generate_call_does_not_recompile(gpu_code_path, monkeypatch):
    """torch._dynamo.config.error_on_recompile=True (a user's guard against recompiles): transformers' loop with the
    same compiled forward runs, and so does ours (the compiled choice raised RecompileError on its first call, a
    second graph at the last step where MaxLengthCriteria flips: the last token is now chosen eagerly, and the choice
    is not compiled under that setting, since a minimum length reached flips a branch too). The eager backend:
    dynamo's guards and error_on_recompile are every backend's alike, as in the recompile-limit test below."""
    ours, _ = make_gpt2_pair("sdpa", seed=8)
    prompt = torch.randint(1, 98, (2, 10), generator=torch.Generator().manual_seed(1))
    kwargs = dict(do_sample=False, max_new_tokens=8, pad_token_id=0, cache_implementation="static",
                  compile_config=compiled_forward("eager"))
    with torch._dynamo.config.patch(error_on_recompile=True):
        expected = transformers_loop(monkeypatch, ours, prompt, **kwargs)
        assert ours.generate(prompt, **kwargs).tolist() == expected.tolist()


def test_recompiles_of_the_choice_stay_below_the_recompile_limit(gpu_code_path, monkeypatch):
    """Same batch, same prompt length, same max_new_tokens; only ordinary generation options differ between five
    calls. With one compiled function for all of them the fifth hit torch._dynamo's recompile_limit (8), and every
    later option set ran the choice eagerly for the rest of the process; each set now compiles its own function.
    (The eager backend: dynamo's guards and recompile_limit are every backend's alike; inductor's tokens are the
    tests above.)"""
    ours, _ = make_gpt2_pair("sdpa", seed=8)
    prompt = torch.randint(1, 98, (2, 10), generator=torch.Generator().manual_seed(1))
    base = dict(do_sample=False, max_new_tokens=8, pad_token_id=0, cache_implementation="static",
                compile_config=compiled_forward("eager"))
    counts = []
    for options in (dict(eos_token_id=5), dict(eos_token_id=[5, 6]), dict(bad_words_ids=[[3]]),
                    dict(min_new_tokens=4, eos_token_id=5), dict(no_repeat_ngram_size=2), dict(suppress_tokens=[4]),
                    dict(min_length=14, eos_token_id=5), dict(forced_bos_token_id=3)):
        tokens = ours.generate(prompt, **base, **options)
        assert tokens.tolist() == transformers_loop(monkeypatch, ours, prompt, **base, **options).tolist()
        counts.append(cache_entries())
    assert len(static_decoding._compiled_choices) >= 4 and max(counts[-1]) < torch._dynamo.config.recompile_limit
