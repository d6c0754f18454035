"""static_decoding.py: generate()'s loop for a static cache gives, token for token, what transformers' own `_sample`
gives on the same model, and what GPT2LMHeadModel gives with the same weights; whatever it does not cover runs
`_sample` itself."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationMixin, StaticCache
from transformers.generation.stopping_criteria import MaxLengthCriteria, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
from hf_gpt_custom import model_inputs, static_decoding
from hf_gpt_custom.transformers_compat import CACHE_NAME, cache_kwarg
from tests.helpers import make_gpt2_pair, padded_batch, randomize_

STATIC = dict(cache_implementation="static", pad_token_id=0)

# The project's static decoding loop runs on transformers >= 5.24 only (generate() hands the cache as `cache=`);
# on 5.23 generate()'s own loop runs, which tests/transformers_common checks against GPT-2
pytestmark = pytest.mark.skipif(CACHE_NAME != "cache", reason="the static decoding loop runs on transformers 5.24+")


@pytest.fixture
def pair():
    return make_gpt2_pair("sdpa", seed=8)  # a seed whose greedy rows are not one token repeated


@pytest.fixture
def loops(monkeypatch):
    """Count the calls of our loop and of transformers' `_sample`, so that no equality below holds by a fallback."""
    calls = {"ours": 0, "transformers": 0}
    ours, theirs = static_decoding.decode_with_static_cache, GenerationMixin._sample

    def counted_ours(*args, **kwargs):
        calls["ours"] += 1
        return ours(*args, **kwargs)

    def counted_theirs(model, *args, **kwargs):
        calls["transformers"] += isinstance(model, GPTCustomForCausalLM)  # not GPT-2's own calls
        return theirs(model, *args, **kwargs)

    monkeypatch.setattr("hf_gpt_custom.modeling_gpt_custom.decode_with_static_cache", counted_ours)
    monkeypatch.setattr(GenerationMixin, "_sample", counted_theirs)
    return calls


def with_transformers_loop(monkeypatch, model, *args, **kwargs) -> torch.Tensor:
    """generate() as transformers runs it: our `_sample` handing every call to GenerationMixin._sample."""
    with monkeypatch.context() as patch:
        patch.setattr("hf_gpt_custom.modeling_gpt_custom.uses_static_decoding", lambda *a, **k: False)
        return model.generate(*args, **kwargs)


def eos_for_row_0(model, prompt, attention_mask) -> tuple[int, int]:
    """(token, n): a token that row 0 generates greedily first as its n-th new token (n >= 2) and every other row
    later or never: as eos, it stops row 0 first, after n tokens. (Tiny random models repeat a few tokens.)"""
    tokens = model.generate(prompt, attention_mask=attention_mask, do_sample=False, max_new_tokens=12,
                            min_new_tokens=12, **STATIC)[:, prompt.shape[1]:].tolist()
    for index in range(1, 12):
        token = tokens[0][index]
        if token not in tokens[0][:index] and all(token not in row[:index + 1] for row in tokens[1:]):
            return token, index + 1
    raise AssertionError(f"no token of row 0 can stop it alone: {tokens}")


SETTINGS = {
    "greedy": dict(do_sample=False, max_new_tokens=12),
    "greedy with processors": dict(do_sample=False, max_new_tokens=12, repetition_penalty=1.4,
                                   no_repeat_ngram_size=2, min_new_tokens=5),
    "sampling": dict(do_sample=True, max_new_tokens=12, temperature=0.7, top_k=20, top_p=0.9),
}


@pytest.mark.parametrize("stop_late", [False, True], ids=["flag-read-each-step", "flag-read-one-step-late"])
@pytest.mark.parametrize("setting", SETTINGS)
def test_our_loop_gives_the_tokens_of_transformers_loop(pair, loops, monkeypatch, setting, stop_late):
    """Left-padded rows, one of them stopped early by eos (then padded), on the same model: every token equal. With
    `stop_late` the loop reads its stop flag one step late, as on a GPU, here on the CPU."""
    if stop_late:
        monkeypatch.setattr(static_decoding, "STOP_LATE_DEVICES", ("cpu",))
    ours, _ = pair
    prompt, attention_mask = padded_batch()
    prompt, attention_mask = prompt[[0, 2]], attention_mask[[0, 2]]  # left-padded and full rows
    eos, stops_after = eos_for_row_0(ours, prompt, attention_mask)
    loops["ours"] = 0
    kwargs = dict(attention_mask=attention_mask, eos_token_id=eos, **SETTINGS[setting], **STATIC)
    torch.manual_seed(3)
    expected = with_transformers_loop(monkeypatch, ours, prompt, **kwargs)
    torch.manual_seed(3)
    tokens = ours.generate(prompt, **kwargs)
    assert loops == {"ours": 1, "transformers": 1}
    assert tokens.tolist() == expected.tolist()
    if setting == "greedy":  # the eos token stopped row 0 alone; pad_token_id fills the rest of its row
        assert tokens.shape[1] > prompt.shape[1] + stops_after  # the other row went on
        assert tokens[0, prompt.shape[1] + stops_after - 1] == eos
        assert (tokens[0, prompt.shape[1] + stops_after:] == 0).all()


@pytest.mark.parametrize("stop_late", [False, True], ids=["flag-read-each-step", "flag-read-one-step-late"])
def test_when_every_row_stops_early_the_sequences_end_where_transformers_ends_them(pair, loops, monkeypatch,
                                                                                   stop_late):
    """One row, stopped by eos after n of 12 tokens: the output is n tokens longer than the prompt, not n + 1 (the
    late read's extra step is dropped) and not 12."""
    if stop_late:
        monkeypatch.setattr(static_decoding, "STOP_LATE_DEVICES", ("cpu",))
    ours, _ = pair
    prompt = torch.randint(0, 98, (1, 6))
    eos, stops_after = eos_for_row_0(ours, prompt, None)
    kwargs = dict(eos_token_id=eos, do_sample=False, max_new_tokens=12, **STATIC)
    expected = with_transformers_loop(monkeypatch, ours, prompt, **kwargs)
    loops["ours"] = 0
    tokens = ours.generate(prompt, **kwargs)
    assert loops["ours"] == 1
    assert tokens.shape == (1, 6 + stops_after) and tokens.tolist() == expected.tolist()


def test_our_loop_gives_the_tokens_of_transformers_gpt2_for_left_padded_rows(pair, loops):
    """An independent model with the same weights, in transformers' own loop: GPT-2's greedy tokens."""
    ours, reference = pair
    prompt, attention_mask = padded_batch()
    prompt, attention_mask = prompt[[0, 2]], attention_mask[[0, 2]]
    kwargs = dict(attention_mask=attention_mask, do_sample=False, max_new_tokens=15, min_new_tokens=15, pad_token_id=0)
    tokens = ours.generate(prompt, cache_implementation="static", **kwargs)
    assert loops["ours"] == 1
    assert tokens.tolist() == reference.generate(prompt, **kwargs).tolist()


def test_a_row_stopped_by_eos_is_filled_with_pad_token_id_as_gpt2_fills_it(pair, loops):
    """After its eos a finished row gets pad_token_id, not token 0 (every other test pads with 0, where the two
    agree). Reference: GPT2LMHeadModel with the same weights in transformers' own loop."""
    ours, reference = pair
    prompt, attention_mask = padded_batch()
    prompt, attention_mask = prompt[[0, 2]], attention_mask[[0, 2]]
    eos, stops_after = eos_for_row_0(ours, prompt, attention_mask)
    pad = 97 if eos != 97 else 96
    kwargs = dict(attention_mask=attention_mask, eos_token_id=eos, pad_token_id=pad, do_sample=False,
                  max_new_tokens=12)
    loops["ours"] = 0
    tokens = ours.generate(prompt, cache_implementation="static", **kwargs)
    assert loops["ours"] == 1
    assert tokens.tolist() == reference.generate(prompt, **kwargs).tolist()
    assert tokens.shape[1] > prompt.shape[1] + stops_after  # the other row went on
    assert (tokens[0, prompt.shape[1] + stops_after:] == pad).all()


def test_rotary_grouped_query_positions_follow_each_rows_padding(loops, monkeypatch):
    """LLaMA-style block (RoPE, grouped-query attention): a left-padded row's positions come from its own tokens in
    every step, so it decodes as transformers' loop decodes it, and as the row alone."""
    torch.manual_seed(0)
    config = GPTCustomConfig.from_preset("llama-small", n_layer=2, n_embd=32, n_head=4, n_kv_head=2, vocab_size=99,
                                         n_positions=64)
    model = randomize_(GPTCustomForCausalLM(config)).eval()
    prompt, attention_mask = padded_batch()
    prompt, attention_mask = prompt[[0, 2]], attention_mask[[0, 2]]
    kwargs = dict(do_sample=False, max_new_tokens=10, min_new_tokens=10, **STATIC)
    tokens = model.generate(prompt, attention_mask=attention_mask, **kwargs)
    assert loops["ours"] == 1
    assert tokens.tolist() == with_transformers_loop(monkeypatch, model, prompt, attention_mask=attention_mask,
                                                     **kwargs).tolist()
    alone = model.generate(prompt[:1, 6:], **kwargs)  # row 0 without its 6 padding columns
    assert tokens[0, 6:].tolist() == alone[0].tolist()


class RecordingStreamer(BaseStreamer):
    def __init__(self):
        self.puts = []

    def put(self, value):
        self.puts.append(value.tolist())

    def end(self):
        pass


@pytest.mark.parametrize("case", ["dynamic cache", "eager attention", "streamer", "scores returned",
                                  "a cache passed in"])
def test_what_our_loop_does_not_cover_runs_transformers_loop(pair, loops, case):
    ours, reference = pair
    prompt = torch.randint(0, 98, (1, 6))
    kwargs = dict(do_sample=False, max_new_tokens=5, min_new_tokens=5, **STATIC)
    if case == "dynamic cache":
        kwargs.pop("cache_implementation")
    elif case == "eager attention":
        ours.set_attn_implementation("eager")
    elif case == "streamer":
        kwargs["streamer"] = RecordingStreamer()
    elif case == "scores returned":
        kwargs.update(return_dict_in_generate=True, output_scores=True)
    elif case == "a cache passed in":
        kwargs.pop("cache_implementation")
        kwargs.update(cache_kwarg(StaticCache(config=ours.config, max_cache_len=16)))
    tokens = ours.generate(prompt, **kwargs)
    sequences = tokens.sequences if case == "scores returned" else tokens
    expected = reference.generate(prompt, do_sample=False, max_new_tokens=5, min_new_tokens=5, pad_token_id=0)
    assert sequences.tolist() == expected.tolist()
    assert loops == {"ours": 0, "transformers": 1}
    if case == "streamer":  # the prompt, then each new token
        assert len(kwargs["streamer"].puts) == 1 + 5


def test_a_model_input_the_loop_does_not_carry_runs_transformers_loop(pair):
    """A forward input besides ids, mask, positions and cache (token types, a user's kwarg) would need updating
    every step, which only transformers' loop does."""
    ours, _ = pair
    prompt = torch.randint(0, 98, (1, 6))
    cache = StaticCache(config=ours.config, max_cache_len=16)
    config = ours.generation_config
    criteria = StoppingCriteriaList([MaxLengthCriteria(max_length=17)])
    kept = dict(cache=cache, attention_mask=torch.ones_like(prompt), use_cache=True, logits_to_keep=1)

    def covered(**changes) -> bool:
        return static_decoding.uses_static_decoding(ours, prompt, criteria, config, {**kept, **changes}, False, None)

    assert covered()
    assert not covered(token_type_ids=prompt)
    assert not covered(attention_mask=torch.ones(1, 9))  # a mask over more than the prompt (a continuation)
    assert not covered(past_key_values=cache)  # transformers < 5.24 passes the cache under this name


@pytest.mark.slow
def test_compiled_decoding_compiles_once_and_gives_transformers_tokens(pair, loops, monkeypatch):
    """The forward that generate compiles for a static cache (CUDA's default, forced here on the CPU) takes our
    loop's inputs without a graph break, and the second call and every step reuse that one graph."""
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    ours, reference = pair
    prompt, attention_mask = padded_batch()
    compile_config = CompileConfig(fullgraph=True, backend="aot_eager")
    compile_config._compile_all_devices = True  # transformers compiles only on CUDA unless told
    kwargs = dict(attention_mask=attention_mask, do_sample=False, max_new_tokens=9, min_new_tokens=9, pad_token_id=0)
    torch._dynamo.reset()
    counters.clear()
    for _ in range(2):
        tokens = ours.generate(prompt, cache_implementation="static", compile_config=compile_config, **kwargs)
        assert tokens.tolist() == reference.generate(prompt, **kwargs).tolist()
    assert loops["ours"] == 2
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("stop_late", [False, True], ids=["flag-read-each-step", "flag-read-one-step-late"])
def test_a_row_stopped_by_its_first_token_ends_there(pair, loops, monkeypatch, stop_late):
    """eos as the very first new token: one token after the prompt, as transformers' loop gives."""
    if stop_late:
        monkeypatch.setattr(static_decoding, "STOP_LATE_DEVICES", ("cpu",))
    ours, _ = pair
    prompt = torch.randint(0, 98, (1, 6))
    first = int(ours.generate(prompt, do_sample=False, max_new_tokens=1, **STATIC)[0, -1])
    kwargs = dict(eos_token_id=first, do_sample=False, max_new_tokens=12, **STATIC)
    expected = with_transformers_loop(monkeypatch, ours, prompt, **kwargs)
    loops["ours"] = 0
    tokens = ours.generate(prompt, **kwargs)
    assert loops["ours"] == 1
    assert tokens.shape == (1, 7) and tokens.tolist() == expected.tolist()


class ScoresSeen(StoppingCriteria):
    """A user's criterion: records what it is given, stops a row only when it is handed scores."""

    def __init__(self):
        self.seen = []

    def __call__(self, input_ids, scores, **kwargs):
        self.seen.append(type(scores).__name__)
        stop = scores is not None
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


def test_stopping_criteria_get_the_scores_transformers_gives_them(pair, loops, monkeypatch):
    """`_sample` hands its collected scores to the criteria: None when they are not returned. A criterion that stops
    on scores (what it would see with output_scores) must not stop here."""
    ours, _ = pair
    prompt = torch.randint(0, 98, (2, 6))
    theirs, mine = ScoresSeen(), ScoresSeen()
    kwargs = dict(do_sample=False, max_new_tokens=6, **STATIC)
    expected = with_transformers_loop(monkeypatch, ours, prompt, stopping_criteria=StoppingCriteriaList([theirs]),
                                      **kwargs)
    tokens = ours.generate(prompt, stopping_criteria=StoppingCriteriaList([mine]), **kwargs)
    assert loops["ours"] == 1
    assert tokens.tolist() == expected.tolist() and tokens.shape == (2, 12)
    assert mine.seen == theirs.seen == ["NoneType"] * 6


def test_the_late_stop_read_never_calls_user_code_once_more(pair, loops, monkeypatch):
    """prefix_allowed_tokens_fn is a user's function (a grammar may raise once it is finished): with the flag read
    late it would run for the extra step, so the late read is off and it runs as often as in transformers' loop."""
    monkeypatch.setattr(static_decoding, "STOP_LATE_DEVICES", ("cpu",))
    ours, _ = pair
    prompt = torch.randint(0, 98, (1, 6))
    free = ours.generate(prompt, do_sample=False, max_new_tokens=12, min_new_tokens=12, **STATIC)[0, 6:].tolist()
    stops_after = next(n for n in range(2, 13) if free[n - 1] not in free[:n - 1])  # a token new at step n >= 2
    eos = free[stops_after - 1]
    loops["ours"] = 0
    calls = {"theirs": 0, "ours": 0}

    def allowed(who):
        def every_token(batch_id, ids):
            calls[who] += 1
            return list(range(99))
        return every_token

    kwargs = dict(do_sample=False, max_new_tokens=12, eos_token_id=eos, **STATIC)
    expected = with_transformers_loop(monkeypatch, ours, prompt, prefix_allowed_tokens_fn=allowed("theirs"), **kwargs)
    tokens = ours.generate(prompt, prefix_allowed_tokens_fn=allowed("ours"), **kwargs)
    assert loops["ours"] == 1
    assert tokens.tolist() == expected.tolist() and tokens.shape == (1, 6 + stops_after)
    assert calls["ours"] == calls["theirs"] == stops_after


def test_an_int32_prompt_gives_int64_sequences_as_transformers_loop_does(pair, loops, monkeypatch):
    ours, _ = pair
    prompt = torch.randint(0, 98, (2, 6), dtype=torch.int32)
    kwargs = dict(do_sample=False, max_new_tokens=4, **STATIC)
    expected = with_transformers_loop(monkeypatch, ours, prompt, **kwargs)
    tokens = ours.generate(prompt, **kwargs)
    assert loops["ours"] == 1
    assert tokens.dtype == expected.dtype == torch.int64 and tokens.tolist() == expected.tolist()


@pytest.mark.parametrize("dropout_on", ["train mode", "Monte-Carlo dropout"])
def test_in_train_mode_the_random_state_after_greedy_decoding_is_transformers(monkeypatch, loops, dropout_on):
    """Dropout draws random numbers in every forward: the late read's extra forward would leave the global random
    state elsewhere than transformers' loop does, so train mode reads the flag every step. So does a model in eval
    mode whose dropout layers were set back to train (Monte-Carlo dropout): model.training alone said no draw."""
    monkeypatch.setattr(static_decoding, "STOP_LATE_DEVICES", ("cpu",))
    ours, _ = make_gpt2_pair("sdpa", seed=8, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    if dropout_on == "train mode":
        ours.train()
    else:
        for module in ours.modules():
            if isinstance(module, torch.nn.Dropout):
                module.train()
        assert not ours.training
    prompt = torch.randint(0, 98, (1, 6))
    torch.manual_seed(1)
    free = with_transformers_loop(monkeypatch, ours, prompt, do_sample=False, max_new_tokens=12, min_new_tokens=12,
                                  **STATIC)[0, 6:].tolist()
    stops_after = next(n for n in range(2, 13) if free[n - 1] not in free[:n - 1])  # eos stops it before the end
    kwargs = dict(do_sample=False, max_new_tokens=12, eos_token_id=free[stops_after - 1], **STATIC)
    torch.manual_seed(1)
    expected = with_transformers_loop(monkeypatch, ours, prompt, **kwargs)
    assert expected.shape == (1, 6 + stops_after)
    after_theirs = torch.rand(3)
    torch.manual_seed(1)
    tokens = ours.generate(prompt, **kwargs)
    assert loops["ours"] == 1
    assert tokens.tolist() == expected.tolist() and torch.equal(torch.rand(3), after_theirs)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_stop_at_the_last_position_the_context_allows_ends_there_with_the_late_read(pair, loops, monkeypatch,
                                                                                      compiled):
    """Every row stops on the token whose step would be the first past n_positions: transformers' loop ends there.
    The late read queued that step anyway (its flag is read a step later), which the model refused — or, compiled
    (no value checks on a GPU), indexed the position table past its end."""
    monkeypatch.setattr(static_decoding, "STOP_LATE_DEVICES", ("cpu",))
    monkeypatch.setattr("hf_gpt_custom.model_inputs.VALUE_CHECK_DEVICES", ())  # the GPU's checks
    ours, reference = pair
    n_positions, prompt_length = ours.config.n_positions, 10
    assert n_positions == reference.config.n_positions == 64
    prompt = torch.randint(0, 98, (1, prompt_length), generator=torch.Generator().manual_seed(0))
    free = reference.generate(prompt, do_sample=False, max_new_tokens=n_positions - prompt_length,
                              min_new_tokens=n_positions - prompt_length, pad_token_id=0)[0].tolist()
    eos = min(set(range(1, 98)) - set(free))  # a token greedy decoding never reaches on its own
    # one of transformers' pure processors: from there on eos's score is huge, so the token at index n_positions
    # (whose step would read position n_positions) is eos
    kwargs = dict(do_sample=False, max_new_tokens=60, eos_token_id=eos,
                  exponential_decay_length_penalty=(n_positions - prompt_length - 1, 1e9), **STATIC)
    if compiled:
        from transformers import CompileConfig
        monkeypatch.setattr(GPTCustomForCausalLM, "_compile_all_devices", True, raising=False)
        kwargs["compile_config"] = CompileConfig(backend="aot_eager")
    expected = reference.generate(prompt, **{k: v for k, v in kwargs.items() if k != "compile_config"})
    assert expected.shape == (1, n_positions + 1) and expected[0, -1] == eos  # GPT-2 stops there too
    assert with_transformers_loop(monkeypatch, ours, prompt, **kwargs).tolist() == expected.tolist()
    tokens = ours.generate(prompt, **kwargs)
    assert loops["ours"] == 1
    assert tokens.tolist() == expected.tolist()


def test_one_dimensional_position_ids_are_carried_as_transformers_carries_them(pair, loops, monkeypatch):
    ours, reference = pair
    prompt = torch.randint(0, 98, (1, 10), generator=torch.Generator().manual_seed(0))
    kwargs = dict(position_ids=torch.arange(10), do_sample=False, max_new_tokens=6, **STATIC)
    expected = with_transformers_loop(monkeypatch, ours, prompt, **kwargs)
    assert expected.tolist() == reference.generate(prompt, do_sample=False, max_new_tokens=6, pad_token_id=0).tolist()
    tokens = ours.generate(prompt, **kwargs)
    assert loops["ours"] == 1
    assert tokens.tolist() == expected.tolist()


def test_the_sequences_hold_only_their_own_tokens(pair, loops):
    """A one-row result was a view of the (1, max_length) buffer (contiguous, so .contiguous() kept it): torch.save
    wrote the whole buffer, and the buffer lived as long as the result."""
    ours, _ = pair
    prompt = torch.randint(0, 98, (1, 6), generator=torch.Generator().manual_seed(0))
    free = ours.generate(prompt, do_sample=False, max_new_tokens=12, min_new_tokens=12, **STATIC)[0, 6:].tolist()
    stops_after = next(n for n in range(2, 12) if free[n - 1] not in free[:n - 1])  # eos ends it before the buffer
    loops["ours"] = 0
    tokens = ours.generate(prompt, do_sample=False, max_new_tokens=12, eos_token_id=free[stops_after - 1], **STATIC)
    assert loops["ours"] == 1 and tokens.shape == (1, 6 + stops_after)
    assert tokens.untyped_storage().nbytes() == tokens.numel() * tokens.element_size()


@pytest.mark.parametrize("value_checks", [True, False], ids=["cpu-checks", "gpu-checks"])
def test_late_stop_read_never_runs_a_step_past_the_context_for_caller_positions(monkeypatch, value_checks):
    """Caller positions 50..59 on a 64-position model: the 5th new token comes from position 63 and is eos, so
    transformers' loop stops there (no forward at position 64). The late read judges "past the context" by the
    buffer length (15 < 64), not by the positions it feeds, so it queues the extra step at position 64: refused on
    the CPU (UserError), an out-of-range position-table index on the GPU's code path (IndexError here, a
    device-side assert on CUDA). Found by a hunt against `_sample`; the check now adds how far the caller's
    positions run ahead."""
    monkeypatch.setattr(static_decoding, "STOP_LATE_DEVICES", ("cpu",))
    if not value_checks:
        monkeypatch.setattr(model_inputs, "VALUE_CHECK_DEVICES", ())
    ours, _ = make_gpt2_pair("sdpa", seed=8)
    assert ours.config.n_positions == 64
    prompt = torch.randint(1, 98, (1, 10), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(10)[None] + 50
    free = with_transformers_loop(monkeypatch, ours, prompt, position_ids=positions, do_sample=False,
                                  max_new_tokens=5, min_new_tokens=5, **STATIC)[0, 10:].tolist()
    eos = free[-1]
    assert eos not in free[:-1]  # eos first comes as the 5th new token, the one from position 63
    kwargs = dict(position_ids=positions, do_sample=False, max_new_tokens=12, eos_token_id=eos, **STATIC)
    expected = with_transformers_loop(monkeypatch, ours, prompt, **kwargs)
    assert expected.shape == (1, 15) and expected[0, -1] == eos
    assert ours.generate(prompt, **kwargs).tolist() == expected.tolist()


@pytest.mark.parametrize("stop_late", [False, True], ids=["flag-read-each-step", "flag-read-one-step-late"])
@pytest.mark.parametrize("max_length", [5, 6, 7, 9])
def test_a_callers_max_length_criteria_gives_gpt2s_tokens_even_at_or_below_the_prompt(pair, loops, monkeypatch,
                                                                                       stop_late, max_length):
    """transformers lets a caller's MaxLengthCriteria replace generate()'s (a warning) and checks only its own
    max_length against the prompt; at or below the prompt's 7 tokens `_sample` still makes one token. Our loop sized
    its buffers by it: the last prompt token was overwritten (7) or the call failed on a shape (5, 6)."""
    if stop_late:
        monkeypatch.setattr(static_decoding, "STOP_LATE_DEVICES", ("cpu",))
    ours, reference = pair
    prompt = torch.randint(0, 98, (2, 7), generator=torch.Generator().manual_seed(3))

    def generate(model):
        criteria = StoppingCriteriaList([MaxLengthCriteria(max_length=max_length)])
        return model.generate(prompt, do_sample=False, max_new_tokens=6, stopping_criteria=criteria, **STATIC)

    expected = generate(reference)
    assert generate(ours).tolist() == expected.tolist()
    assert expected[:, :7].tolist() == prompt.tolist()
    assert loops["ours"] == (max_length > 7)  # at or below the prompt: transformers' loop


class ViewsTheIds(StoppingCriteria):
    """A user's criterion that reshapes the ids with .view, as code written against `_sample`'s contiguous ids may."""

    def __init__(self):
        self.seen = []

    def __call__(self, input_ids, scores, **kwargs):
        self.seen.append(input_ids.view(-1).tolist())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def test_a_users_processor_and_criterion_get_contiguous_ids_as_in_transformers_loop(pair, loops, monkeypatch):
    """Slices of the (batch, max_length) buffer are not contiguous when batch > 1: a user's `input_ids.view(-1)`
    raised in our loop where transformers' torch.cat hands over contiguous ids."""
    from transformers.generation.logits_process import LogitsProcessor, LogitsProcessorList

    class BansTheLastIdViewed(LogitsProcessor):
        def __call__(self, input_ids, scores):
            last = input_ids.view(-1)[input_ids.shape[1] - 1::input_ids.shape[1]]  # each row's last id, via .view
            return scores.scatter(1, last[:, None], -float("inf"))

    ours, _ = pair
    prompt = torch.randint(0, 98, (2, 5), generator=torch.Generator().manual_seed(5))  # 2: the smallest non-contiguous
    kwargs = dict(do_sample=False, max_new_tokens=6, **STATIC)
    theirs_seen, mine_seen = ViewsTheIds(), ViewsTheIds()
    expected = with_transformers_loop(monkeypatch, ours, prompt, stopping_criteria=StoppingCriteriaList([theirs_seen]),
                                      logits_processor=LogitsProcessorList([BansTheLastIdViewed()]), **kwargs)
    tokens = ours.generate(prompt, stopping_criteria=StoppingCriteriaList([mine_seen]),
                           logits_processor=LogitsProcessorList([BansTheLastIdViewed()]), **kwargs)
    assert loops["ours"] == 1
    assert tokens.tolist() == expected.tolist() and mine_seen.seen == theirs_seen.seen


@pytest.mark.parametrize("value_checks", [True, False])
def test_a_mask_over_the_static_caches_whole_length_gives_the_tokens_their_own_positions(value_checks, monkeypatch):
    """A compiled decoding loop keeps one fixed-shape mask over the whole static cache, 0 past the tokens written.
    On the GPU code path the positions were read from the mask's last columns (unwritten): the new token got the last
    position and other logits, silently; the CPU refused the mask (the batchinvariance2 hunt). Reference: GPT-2 on
    the same tokens without a cache (GPT2LMHeadModel takes the same mask too). A mask narrower than the tokens cached
    stops, on the device where its count is not read."""
    if not value_checks:
        monkeypatch.setattr(model_inputs, "VALUE_CHECK_DEVICES", ())  # the code a GPU runs
    ours, reference = make_gpt2_pair("sdpa", seed=3)
    prompt = torch.randint(1, 99, (2, 6), generator=torch.Generator().manual_seed(1))
    new = torch.tensor([[7], [8]])
    written = torch.ones(2, 7, dtype=torch.long)
    with torch.no_grad():
        expected = reference(torch.cat([prompt, new], 1)).logits[:, -1]
        for mask in (written, torch.cat([written, torch.zeros(2, 9, dtype=torch.long)], 1)):  # 7 used, 16 long
            cache = StaticCache(config=ours.config, max_cache_len=16)
            prefill = ours(prompt, attention_mask=(mask[:, :6] if mask.shape[1] == 7 else  # the prompt's call too
                                                   torch.cat([mask[:, :6], torch.zeros(2, 10, dtype=torch.long)], 1)),
                           past_key_values=cache, use_cache=True).logits
            torch.testing.assert_close(prefill, reference(prompt).logits, rtol=0, atol=1e-5)
            got = ours(new, attention_mask=mask, past_key_values=cache, use_cache=True).logits[:, -1]
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        cache = StaticCache(config=ours.config, max_cache_len=16)
        ours(prompt, past_key_values=cache, use_cache=True)
        with pytest.raises((ValueError, RuntimeError), match="narrower than the cached and new tokens"
                           if not value_checks else r"pass a \(batch, 7\) mask"):
            ours(new, attention_mask=written[:, :5], past_key_values=cache, use_cache=True)
