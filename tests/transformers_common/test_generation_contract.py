"""What transformers' GenerationTesterMixin checks of a decoder-only model, run on GPT2LMHeadModel and on ours.

transformers 5.23.0's source distribution does not ship tests/generation/test_utils.py (README.md), so these tests
restate the mixin's contract for a decoder-only LM instead of vendoring it: output structure of
`return_dict_in_generate` (scores, logits, attentions, hidden states, the cache), cache on/off agreement for every
decoding strategy, continuing from a returned cache, left padding, `inputs_embeds`, static cache, assisted and
prompt-lookup decoding, eager vs sdpa. Every test runs on transformers' GPT-2 too ("gpt2" parameter): a failure
there means the test is wrong, a failure on "gpt_custom" alone means our model departs from transformers.

Sizes are GPT2ModelTester's (vocab 99, 32 wide, 2 layers, 4 heads, 37 inner; generation on batch 2 × 7 tokens,
3 new tokens). eos is unset, as the mixin does, so length checks cannot stop early.
"""

import copy

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.cache_utils import Cache, DynamicCache

from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM, GPTCustomModel
from hf_gpt_custom.transformers_compat import cache_kwarg, output_cache

VOCAB, HIDDEN, LAYERS, HEADS, INNER = 99, 32, 2, 4, 37
BATCH, PROMPT_LEN, NEW_TOKENS = 2, 7, 3
FAMILIES = {"gpt2": (GPT2Config, GPT2LMHeadModel), "gpt_custom": (GPTCustomConfig, GPTCustomForCausalLM)}
# The logits processors the mixin adds to every call: they touch every score, so a cache bug changes tokens.
PROCESSORS = dict(bad_words_ids=[[1, 0]], repetition_penalty=1.2, remove_invalid_values=True)
SAMPLING = dict(do_sample=True, top_k=10, top_p=0.7, temperature=0.7)
STRATEGIES = {
    "greedy": dict(do_sample=False, num_beams=1),
    "sample": dict(**SAMPLING, num_beams=1, num_return_sequences=2),
    "beam_search": dict(do_sample=False, num_beams=2, num_return_sequences=2, length_penalty=2.0),
    "beam_sample": dict(**SAMPLING, num_beams=2, num_return_sequences=2, length_penalty=2.0),
}


def make_model(family: str, attn_implementation: str = "sdpa", seed: int = 0):
    config_class, model_class = FAMILIES[family]
    config = config_class(
        vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=INNER, n_positions=512,
        bos_token_id=VOCAB - 1, eos_token_id=None, pad_token_id=VOCAB - 1,
    )
    torch.manual_seed(seed)
    return model_class._from_config(config, attn_implementation=attn_implementation).eval()


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


@families
def test_returned_cache_holds_batch_heads_positions_head_dim_per_layer(family):
    out = generate(make_model(family), prompt_inputs(), return_dict_in_generate=True)
    cache = output_cache(out)
    assert isinstance(cache, DynamicCache) and len(cache.layers) == LAYERS
    for layer in cache.layers:
        expected = (BATCH, HEADS, PROMPT_LEN + NEW_TOKENS - 1, HIDDEN // HEADS)
        assert tuple(layer.keys.shape) == tuple(layer.values.shape) == expected


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


@families
def test_static_cache_generation_matches_the_dynamic_cache(family):
    model = make_model(family)
    dynamic = generate(model, prompt_inputs())
    static = generate(model, prompt_inputs(), cache_implementation="static", disable_compile=True)
    assert torch.equal(static, dynamic)


@families
@pytest.mark.parametrize("helper", ["assistant_model", "prompt_lookup_num_tokens"])
def test_assisted_and_prompt_lookup_decoding_match_greedy(family, helper):
    model = make_model(family)
    inputs = {"input_ids": prompt_inputs()["input_ids"][:1], "attention_mask": prompt_inputs()["attention_mask"][:1]}
    greedy = generate(model, inputs, max_new_tokens=2 * NEW_TOKENS)
    setting = {"assistant_model": make_model(family, seed=5)} if helper == "assistant_model" else {helper: 2}
    assisted = generate(model, inputs, max_new_tokens=2 * NEW_TOKENS, **setting)
    assert torch.equal(assisted, greedy)


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
