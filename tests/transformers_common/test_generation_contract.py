"""What transformers' GenerationTesterMixin checks of a decoder-only model, run on GPT2LMHeadModel and on ours.

transformers 5.23.0's source distribution does not ship tests/generation/test_utils.py (README.md), so these tests
restate the mixin's contract for a decoder-only LM instead of vendoring it: output structure of
`return_dict_in_generate` (scores, logits, attentions, hidden states, the cache), cache on/off agreement for every
decoding strategy, continuing from a returned cache, left padding, `inputs_embeds`, static cache, assisted and
prompt-lookup decoding, eager vs sdpa. Every test runs on transformers' GPT-2 too ("gpt2" parameter): a failure
there means the test is wrong, a failure on "gpt_custom" alone means our model departs from transformers.

The cache's layout is checked the way the mixin's `_check_past_key_values_for_generate` checks it: every layer holds
(batch, config.num_key_value_heads, positions, config.head_dim), the two numbers read from the config (GPT2Config has
neither field, so n_head and n_embd // n_head). That runs for a forward call, greedy and beam search, the static cache
and assisted decoding, on GPT-2 and ours and, for grouped-query heads and a head width other than n_embd / n_head
(GPT-2 has neither), on transformers' Llama and ours with the same settings ("layout" parameter).

Sizes are GPT2ModelTester's (vocab 99, 32 wide, 2 layers, 4 heads, 37 inner; generation on batch 2 × 7 tokens,
3 new tokens). eos is unset, as the mixin does, so length checks cannot stop early.
"""

import copy
import warnings

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from transformers.cache_utils import Cache, DynamicCache, StaticCache

from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM, GPTCustomModel
from hf_gpt_custom.transformers_compat import CACHE_NAME, cache_kwarg, output_cache

VOCAB, HIDDEN, LAYERS, HEADS, INNER = 99, 32, 2, 4, 37
BATCH, PROMPT_LEN, NEW_TOKENS = 2, 7, 3
FAMILIES = {"gpt2": (GPT2Config, GPT2LMHeadModel), "gpt_custom": (GPTCustomConfig, GPTCustomForCausalLM)}
# The same sizes in each family's own field names; Llama is the reference where GPT-2 has no counterpart.
SIZES = {
    "gpt2": dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=INNER, n_positions=512),
    "llama": dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  intermediate_size=INNER, max_position_embeddings=512),
}
MODEL_CLASSES = {**FAMILIES, "llama": (LlamaConfig, LlamaForCausalLM)}
# Cache layouts: (family, config overrides in the family's names, the cache's key/value heads and head width written
# out by hand). Grouped-query heads and head_dim != n_embd / n_head have no GPT-2 counterpart: Llama is the reference.
LAYOUTS = {
    "gpt2": ("gpt2", {}, (HEADS, HIDDEN // HEADS)),
    "gpt_custom": ("gpt_custom", {}, (HEADS, HIDDEN // HEADS)),
    "llama_gqa": ("llama", {"num_key_value_heads": 2}, (2, HIDDEN // HEADS)),
    "gpt_custom_gqa": ("gpt_custom", {"n_kv_head": 2}, (2, HIDDEN // HEADS)),
    "llama_head_dim_16": ("llama", {"head_dim": 16}, (HEADS, 16)),
    "gpt_custom_head_dim_16": ("gpt_custom", {"head_dim": 16}, (HEADS, 16)),
}
# The logits processors the mixin adds to every call: they touch every score, so a cache bug changes tokens.
PROCESSORS = dict(bad_words_ids=[[1, 0]], repetition_penalty=1.2, remove_invalid_values=True)
SAMPLING = dict(do_sample=True, top_k=10, top_p=0.7, temperature=0.7)
STRATEGIES = {
    "greedy": dict(do_sample=False, num_beams=1),
    "sample": dict(**SAMPLING, num_beams=1, num_return_sequences=2),
    "beam_search": dict(do_sample=False, num_beams=2, num_return_sequences=2, length_penalty=2.0),
    "beam_sample": dict(**SAMPLING, num_beams=2, num_return_sequences=2, length_penalty=2.0),
}


def make_model(family: str, attn_implementation: str = "sdpa", seed: int = 0, **overrides):
    config_class, model_class = MODEL_CLASSES[family]
    sizes = SIZES["llama" if family == "llama" else "gpt2"]
    config = config_class(**sizes, **overrides, bos_token_id=VOCAB - 1, eos_token_id=None, pad_token_id=VOCAB - 1)
    torch.manual_seed(seed)
    return model_class._from_config(config, attn_implementation=attn_implementation).eval()


def layout_model(layout: str, attn_implementation: str = "sdpa", seed: int = 0):
    family, overrides, _ = LAYOUTS[layout]
    return make_model(family, attn_implementation, seed, **overrides)


def assert_cache_layout(cache, config, layout: str, batch: int, positions: int) -> None:
    """Every layer's keys and values are (batch, num_key_value_heads, positions, head_dim), the two read from the
    config as transformers' GenerationTesterMixin reads them, and equal to the layout's hand-written numbers."""
    assert isinstance(cache, Cache) and len(cache.layers) == LAYERS
    heads = config.num_attention_heads
    declared = (batch, getattr(config, "num_key_value_heads", heads), positions,
                getattr(config, "head_dim", config.hidden_size // heads))
    kv_heads, head_dim = LAYOUTS[layout][2]
    assert declared == (batch, kv_heads, positions, head_dim)
    for layer in cache.layers:
        assert tuple(layer.keys.shape) == tuple(layer.values.shape) == declared


def prompt_inputs(seed: int = 1) -> dict:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, VOCAB - 1, (BATCH, PROMPT_LEN), generator=generator)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}


def generate(model, inputs: dict, strategy: str = "greedy", **settings):
    torch.manual_seed(0)  # sampling strategies draw from the global generator
    options = {**PROCESSORS, **STRATEGIES[strategy], "max_new_tokens": NEW_TOKENS, **settings}
    with torch.no_grad():
        return model.generate(**inputs, **options)


families = pytest.mark.parametrize("family", FAMILIES)
layouts = pytest.mark.parametrize("layout", LAYOUTS)


@families
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_generate_returns_prompt_plus_new_tokens_per_sequence(family, strategy):
    sequences = generate(make_model(family), prompt_inputs(), strategy)
    copies = STRATEGIES[strategy].get("num_return_sequences", 1)
    assert tuple(sequences.shape) == (BATCH * copies, PROMPT_LEN + NEW_TOKENS)
    prompt = prompt_inputs()["input_ids"].repeat_interleave(copies, dim=0)
    assert torch.equal(sequences[:, :PROMPT_LEN], prompt)


@families
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_cached_and_uncached_generation_agree(family, strategy):
    model = make_model(family)
    cached = generate(model, prompt_inputs(), strategy, use_cache=True, return_dict_in_generate=True,
                      output_scores=True)
    uncached = generate(model, prompt_inputs(), strategy, use_cache=False, return_dict_in_generate=True,
                        output_scores=True)
    assert torch.equal(cached.sequences, uncached.sequences)
    for cached_scores, uncached_scores in zip(cached.scores, uncached.scores, strict=True):
        torch.testing.assert_close(cached_scores, uncached_scores, rtol=1e-5, atol=1e-5)


@families
@pytest.mark.parametrize("use_cache", [True, False])
def test_dict_output_has_scores_logits_attentions_hidden_states_of_every_step(family, use_cache):
    model = make_model(family, "eager")  # sdpa returns no attention weights
    out = generate(model, prompt_inputs(), use_cache=use_cache, return_dict_in_generate=True, output_scores=True,
                   output_logits=True, output_attentions=True, output_hidden_states=True)
    assert len(out.scores) == len(out.logits) == len(out.attentions) == len(out.hidden_states) == NEW_TOKENS
    for step in range(NEW_TOKENS):
        assert tuple(out.scores[step].shape) == tuple(out.logits[step].shape) == (BATCH, VOCAB)
        # With a cache, step 0 sees the prompt and each later step one new token; without, the whole sequence.
        keys = PROMPT_LEN + step
        query = 1 if use_cache and step > 0 else keys
        assert len(out.attentions[step]) == LAYERS
        for weights in out.attentions[step]:
            assert tuple(weights.shape) == (BATCH, HEADS, query, keys)
            torch.testing.assert_close(weights.sum(-1), torch.ones(BATCH, HEADS, query))
        assert len(out.hidden_states[step]) == LAYERS + 1  # the embeddings, then each block's output
        assert all(tuple(h.shape) == (BATCH, query, HIDDEN) for h in out.hidden_states[step])
    if use_cache:
        assert isinstance(output_cache(out), Cache)
        # The last generated token is never fed back, so the cache holds one position less than the sequence.
        assert output_cache(out).get_seq_length() == PROMPT_LEN + NEW_TOKENS - 1
    else:
        assert output_cache(out) is None


@pytest.mark.parametrize(
    ("ours", "llama"), [({}, {}), ({"n_kv_head": 2}, {"num_key_value_heads": 2}), ({"head_dim": 16}, {"head_dim": 16})],
    ids=["multi_head", "gqa", "head_dim_16"],
)
def test_config_fills_num_key_value_heads_and_head_dim_as_llama_config_does(ours, llama):
    """Unset, num_key_value_heads is the head count and head_dim is n_embd // n_head, never None: generic code (the
    cache's shape, attention kernels, the mixin) reads them. Also after a save, and from a folder saved with nulls."""
    config = GPTCustomConfig(n_embd=HIDDEN, n_head=HEADS, **ours)
    reference = LlamaConfig(hidden_size=HIDDEN, num_attention_heads=HEADS, **llama)
    expected = (reference.num_key_value_heads, reference.head_dim)
    assert (config.num_key_value_heads, config.head_dim) == expected
    reloaded = GPTCustomConfig.from_dict(config.to_dict())
    assert (reloaded.num_key_value_heads, reloaded.head_dim) == expected
    if not ours:
        saved_unset = GPTCustomConfig.from_dict({**config.to_dict(), "n_kv_head": None, "head_dim": None})
        assert (saved_unset.num_key_value_heads, saved_unset.head_dim) == expected


@layouts
def test_forward_returns_the_cache_in_transformers_layout(layout):
    """The mixin's test_past_key_values_format: model(..., use_cache=True) returns a cache of the prompt."""
    model = layout_model(layout)
    with torch.no_grad():
        out = model(**prompt_inputs(), use_cache=True)
    assert_cache_layout(output_cache(out), model.config, layout, BATCH, PROMPT_LEN)


@layouts
@pytest.mark.parametrize("strategy", ["greedy", "beam_search"])
def test_generate_returns_the_cache_in_transformers_layout(layout, strategy):
    """The mixin's test_greedy_/test_beam_search_generate_dict_outputs_use_cache: the returned cache holds every
    position but the last generated one, for each sequence decoded (each beam in beam search)."""
    model = layout_model(layout)
    out = generate(model, prompt_inputs(), strategy, use_cache=True, return_dict_in_generate=True,
                   output_scores=True)
    assert out.sequences.shape[1] == PROMPT_LEN + NEW_TOKENS
    assert isinstance(output_cache(out), DynamicCache)
    rows = BATCH * STRATEGIES[strategy].get("num_beams", 1)
    assert_cache_layout(output_cache(out), model.config, layout, rows, PROMPT_LEN + NEW_TOKENS - 1)


@families
def test_greedy_logits_are_the_forward_passs_last_position_logits(family):
    """Without processors, output_logits at each step equal model(sequence so far).logits[:, -1]."""
    model = make_model(family)
    inputs = prompt_inputs()
    with torch.no_grad():
        out = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS, return_dict_in_generate=True,
                             output_logits=True)
        for step in range(NEW_TOKENS):
            prefix = out.sequences[:, : PROMPT_LEN + step]
            expected = model(prefix, attention_mask=torch.ones_like(prefix)).logits[:, -1]
            torch.testing.assert_close(out.logits[step], expected, rtol=1e-4, atol=1e-5)


@families
def test_generation_continues_from_a_returned_cache(family):
    """Generating 3 tokens, then 3 more from the returned cache, gives what 6 tokens in one call give."""
    model = make_model(family)
    inputs = prompt_inputs()
    with torch.no_grad():
        whole = model.generate(**inputs, do_sample=False, max_new_tokens=2 * NEW_TOKENS)
        first = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS, return_dict_in_generate=True)
        cache = copy.deepcopy(output_cache(first))
        second = model.generate(first.sequences, attention_mask=torch.ones_like(first.sequences),
                                **cache_kwarg(cache), do_sample=False, max_new_tokens=NEW_TOKENS)
    assert torch.equal(second, whole)


@families
def test_left_padding_does_not_change_the_next_token_logits(family):
    model = make_model(family)
    inputs = prompt_inputs()
    pad = torch.full((BATCH, 4), VOCAB - 1)
    padded_ids = torch.cat([pad, inputs["input_ids"]], dim=1)
    padded_mask = torch.cat([torch.zeros_like(pad), inputs["attention_mask"]], dim=1)
    with torch.no_grad():
        plain = model.generate(**inputs, do_sample=False, max_new_tokens=1, return_dict_in_generate=True,
                               output_logits=True)
        padded = model.generate(input_ids=padded_ids, attention_mask=padded_mask, do_sample=False,
                                max_new_tokens=1, return_dict_in_generate=True, output_logits=True)
    torch.testing.assert_close(padded.logits[0], plain.logits[0], rtol=1e-4, atol=1e-5)


@families
def test_generation_from_inputs_embeds_matches_generation_from_ids(family):
    model = make_model(family)
    inputs = prompt_inputs()
    embeds = model.get_input_embeddings()(inputs["input_ids"])
    from_ids = generate(model, inputs)
    from_embeds = generate(model, {"inputs_embeds": embeds, "attention_mask": inputs["attention_mask"]})
    assert torch.equal(from_embeds, from_ids[:, PROMPT_LEN:])  # only the new tokens come back
    both = generate(model, {**inputs, "inputs_embeds": embeds})
    assert torch.equal(both, from_ids)


@layouts
def test_static_cache_generation_matches_the_dynamic_cache(layout):
    """The mixin's test_generate_with_static_cache: same tokens and scores as the dynamic cache, and a StaticCache
    of generate's maximum length (the last token is never cached) in transformers' layout."""
    model = layout_model(layout)
    settings = dict(return_dict_in_generate=True, output_scores=True, use_cache=True)
    dynamic = generate(model, prompt_inputs(), **settings)
    static = generate(model, prompt_inputs(), cache_implementation="static", disable_compile=True, **settings)
    assert torch.equal(static.sequences, dynamic.sequences)
    for static_scores, dynamic_scores in zip(static.scores, dynamic.scores, strict=True):
        torch.testing.assert_close(static_scores, dynamic_scores, rtol=1e-5, atol=1e-5)
    assert isinstance(output_cache(static), StaticCache)
    assert_cache_layout(output_cache(static), model.config, layout, BATCH, PROMPT_LEN + NEW_TOKENS - 1)


# (no cache_implementation: "dynamic" is the default, and transformers 5.22-5.23 refuse it by name for assisted
# decoding, for GPT-2 and Llama too: the versionmatrix hunt)
ASSISTED = dict(max_new_tokens=2 * NEW_TOKENS, use_cache=True, return_dict_in_generate=True, output_scores=True)


def assistant(model, layout: str, helper: str) -> dict:
    """generate()'s settings for one helper. As the mixin sets them: the assistant always drafts 2 tokens, so every
    call checks its input preparation; an identical assistant has every draft accepted, a random one none."""
    if helper == "prompt_lookup":
        return {"prompt_lookup_num_tokens": 2}
    helper_model = model if helper == "same_assistant" else layout_model(layout, seed=5)
    helper_model.generation_config.num_assistant_tokens = 2
    helper_model.generation_config.num_assistant_tokens_schedule = "constant"
    return {"assistant_model": helper_model}


@layouts
@pytest.mark.parametrize("helper", ["same_assistant", "random_assistant", "prompt_lookup"])
def test_assisted_and_prompt_lookup_decoding_match_greedy(layout, helper):
    """The mixin's test_assisted_decoding_matches_greedy_search and test_prompt_lookup_decoding_matches_greedy_search:
    same tokens and scores as greedy decoding, and the cache, rolled back after rejected drafts, in transformers'
    layout."""
    model = layout_model(layout)
    inputs = {name: value[:1] for name, value in prompt_inputs().items()}  # assisted decoding takes batch 1
    greedy = generate(model, inputs, **ASSISTED)
    assisted = generate(model, inputs, **ASSISTED, **assistant(model, layout, helper))
    assert torch.equal(assisted.sequences, greedy.sequences)
    for assisted_scores, greedy_scores in zip(assisted.scores, greedy.scores, strict=True):
        torch.testing.assert_close(assisted_scores, greedy_scores, rtol=1e-5, atol=1e-5)
    for out in (greedy, assisted):
        assert_cache_layout(output_cache(out), model.config, layout, 1, PROMPT_LEN + 2 * NEW_TOKENS - 1)


@layouts
def test_assisted_sampling_returns_the_cache_in_transformers_layout(layout):
    """The mixin's test_assisted_decoding_sample (sampled tokens are not compared: drafts change the matmul shapes)."""
    model = layout_model(layout)
    inputs = {name: value[:1] for name, value in prompt_inputs().items()}
    out = generate(model, inputs, "sample", **{**ASSISTED, "num_return_sequences": 1},
                   **assistant(model, layout, "same_assistant"))
    assert tuple(out.sequences.shape) == (1, PROMPT_LEN + 2 * NEW_TOKENS)
    assert_cache_layout(output_cache(out), model.config, layout, 1, PROMPT_LEN + 2 * NEW_TOKENS - 1)


@families
@pytest.mark.parametrize("name", ["past_key_values", "cache"])
def test_forward_takes_the_cache_under_either_name(family, name):
    """transformers 5.24 renamed forward's `past_key_values` to `cache` and still accepts the old name (the mixin's
    test_bc_cache_name_forward); ours takes both on every supported transformers. Continuing from a prompt's cache
    under either name gives the logits of the whole sequence run at once, and the cache grows by the new tokens."""
    if family == "gpt2" and name == "cache" and CACHE_NAME != "cache":
        pytest.skip("transformers before 5.24 knows only past_key_values")
    model = make_model(family)
    input_ids = prompt_inputs()["input_ids"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # GPT-2's deprecation notice for the old name
        with torch.no_grad():
            whole = model(input_ids).logits
            prefix = model(input_ids[:, :-2], use_cache=True)
            step = model(input_ids[:, -2:], use_cache=True, **{name: copy.deepcopy(output_cache(prefix))})
    torch.testing.assert_close(step.logits, whole[:, -2:], rtol=1e-5, atol=1e-5)
    assert output_cache(step).get_seq_length() == PROMPT_LEN


def test_our_past_key_values_argument_is_not_deprecated_and_both_names_at_once_are_refused():
    """A deliberate difference from transformers 5.24 (README.md): its test_bc_cache_name_forward wants
    forward(past_key_values=...) to warn "`past_key_values` is deprecated", as GPT-2 does. Ours does not: it is our
    forward's own parameter and the only name transformers before 5.24 (which the project supports) passes. Given
    both names, GPT-2 keeps `cache` and drops the other with a warning; ours refuses, naming both."""
    model = make_model("gpt_custom")
    input_ids = prompt_inputs()["input_ids"]
    with torch.no_grad():
        cache = output_cache(model(input_ids[:, :-1], use_cache=True))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model(input_ids[:, -1:], past_key_values=copy.deepcopy(cache))
        assert not [w for w in caught if "deprecated" in str(w.message)]
        with pytest.raises(TypeError, match="got both cache= and past_key_values="):
            model(input_ids[:, -1:], past_key_values=copy.deepcopy(cache), cache=copy.deepcopy(cache))


@families
def test_eager_and_sdpa_generate_the_same_tokens(family):
    eager = generate(make_model(family, "eager"), prompt_inputs(), return_dict_in_generate=True, output_scores=True)
    sdpa = generate(make_model(family, "sdpa"), prompt_inputs(), return_dict_in_generate=True, output_scores=True)
    assert torch.equal(eager.sequences, sdpa.sequences)
    for eager_scores, sdpa_scores in zip(eager.scores, sdpa.scores, strict=True):
        torch.testing.assert_close(eager_scores, sdpa_scores, rtol=1e-4, atol=1e-5)


@families
def test_logits_to_keep_is_supported_and_keeps_the_last_positions(family):
    model = make_model(family)
    assert model._supports_logits_to_keep() and model._supports_default_dynamic_cache()
    inputs = prompt_inputs()
    with torch.no_grad():
        full = model(**inputs).logits
        last = model(**inputs, logits_to_keep=1).logits
    assert tuple(last.shape) == (BATCH, 1, VOCAB)
    torch.testing.assert_close(last, full[:, -1:])


def test_only_the_language_model_can_generate():
    assert GPTCustomForCausalLM.can_generate() and GPT2LMHeadModel.can_generate()
    assert not GPTCustomModel.can_generate()
