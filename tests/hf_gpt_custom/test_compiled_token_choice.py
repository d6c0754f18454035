"""static_decoding.py's compiled token choice (greedy decoding on a GPU): the processors, argmax, padding of finished
rows and stopping criteria compiled into one call. Held here on the CPU: the tokens are transformers' `_sample`'s on
the same model and GPT2LMHeadModel's with the same weights, one graph serves every length, and every transformers
processor and criterion it may take traces whole."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters
from transformers import CompileConfig
from transformers.generation import logits_process, stopping_criteria

from hf_gpt_custom import static_decoding
from tests.helpers import make_gpt2_pair, padded_batch

EOS = torch.tensor([7])
PROMPT_LENGTH = 8


@pytest.fixture
def gpu_code_path(monkeypatch):
    """The code path a GPU takes, on the CPU: the flag read one step late and the token choice compiled."""
    monkeypatch.setattr(static_decoding, "STOP_LATE_DEVICES", ("cpu",))
    monkeypatch.setattr(static_decoding, "COMPILED_CHOICE_DEVICES", ("cpu",))
    monkeypatch.setattr(static_decoding, "_compiled_choices", {})
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def compiled_forward(backend: str = "inductor") -> CompileConfig:
    config = CompileConfig(backend=backend, mode="default" if backend == "inductor" else None)
    config._compile_all_devices = True  # generate() compiles the forward only on accelerators unless told
    return config


def test_the_compiled_choice_gives_the_tokens_of_transformers_loop_and_of_gpt2(gpu_code_path, monkeypatch):
    """Left-padded and full rows, min_new_tokens then eos free, a repetition penalty: inductor's argmax, where and
    criteria give `_sample`'s tokens on the same model, and GPT-2's with the same weights (which runs in
    transformers' own loop). Two prompt lengths and two batch sizes after the first call compile nothing new."""
    ours, reference = make_gpt2_pair("sdpa", seed=8)
    prompt, attention_mask = padded_batch()
    prompt, attention_mask = prompt[[0, 2]], attention_mask[[0, 2]]
    choices = []
    real_choice = static_decoding._choice_to_compile
    monkeypatch.setattr(static_decoding, "_choice_to_compile",
                        lambda *a: choices.append(real_choice(*a)) or choices[-1])
    kwargs = dict(attention_mask=attention_mask, do_sample=False, max_new_tokens=14, min_new_tokens=6,
                  repetition_penalty=1.3, pad_token_id=0, eos_token_id=5)
    tokens = ours.generate(prompt, cache_implementation="static", compile_config=compiled_forward(), **kwargs)
    assert choices == [static_decoding._compiled_choices["inductor"]]  # the compiled choice ran
    # one graph for the forward, three for the choice over 14 lengths: min_new_tokens not reached and reached, and
    # the last step (max_length reached: MaxLengthCriteria's other branch); never one per length
    assert counters["stats"]["unique_graphs"] <= 4
    assert tokens.tolist() == reference.generate(prompt, **kwargs).tolist()
    with monkeypatch.context() as patch:
        patch.setattr("hf_gpt_custom.modeling_gpt_custom.uses_static_decoding", lambda *a, **k: False)
        assert tokens.tolist() == ours.generate(prompt, cache_implementation="static", **kwargs).tolist()

    graphs = []
    for length in (20, 12, 9):  # the same cache (prompt + new tokens = 33), so the same compiled forward
        prompt = torch.randint(0, 99, (2, length))
        kwargs = dict(do_sample=False, max_new_tokens=33 - length, min_new_tokens=6, pad_token_id=0, eos_token_id=5)
        tokens = ours.generate(prompt, cache_implementation="static", compile_config=compiled_forward(), **kwargs)
        assert tokens.tolist() == reference.generate(prompt, **kwargs).tolist()
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[1:] == graphs[:1] * 2  # a new prompt length compiles neither the forward nor the choice again


def test_the_choice_stays_eager_off_the_gpu_path(monkeypatch):
    """Where the step is not launch-bound or the choice would not be `_sample`'s: on the CPU, sampling, an eager
    forward, a criterion that runs on the host (the clock)."""
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
    assert seen == [static_decoding.choose_next_tokens] * 4
    ours.generate(prompt, compile_config=eager_forward, **greedy)  # (the same call otherwise takes the compiled one)
    assert seen[-1] is not static_decoding.choose_next_tokens


# Every transformers processor and criterion the compiled choice may take (static_decoding's pure ones but the host's),
# with arguments that make it act within a few steps.
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
    assert set(PROCESSORS) == static_decoding.PURE_PROCESSORS_AND_CRITERIA - static_decoding.HOST_CRITERIA


@pytest.mark.parametrize("name", sorted(PROCESSORS))
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
