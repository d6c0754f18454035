"""The preallocated KV cache layer holds exactly what transformers' DynamicLayer holds, through every cache operation."""

import pytest
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from hf_gpt_custom.kv_cache import PreallocatedLayer, preallocate

from tests.helpers import make_gpt2_pair


def _states(batch, length, seed):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 2, length, 4, generator=generator), torch.randn(batch, 2, length, 4, generator=generator)


def _assert_same(ours: PreallocatedLayer, reference: DynamicLayer):
    assert ours.get_seq_length() == reference.get_seq_length()
    assert torch.equal(ours.keys, reference.keys) and torch.equal(ours.values, reference.values)


def test_updates_crop_select_reorder_and_repeat_match_dynamic_layer():
    ours, reference = PreallocatedLayer(capacity=6), DynamicLayer()
    operations = [
        ("update", 3), ("update", 1), ("update", 1),
        ("crop", -2),                 # assisted decoding rejects drafted tokens
        ("update", 2),
        ("update", 4),                # past the capacity: the buffer grows
        ("reorder", [2, 0, 0]),       # beam search
        ("update", 1),
        ("select", [0, 2]),           # a finished row dropped
        ("update", 1),
        ("repeat", 2),                # batch expansion
        ("update", 2),
    ]
    for seed, (operation, argument) in enumerate(operations):
        if operation == "update":
            batch = reference.keys.shape[0] if reference.is_initialized and reference.keys.numel() else 3
            keys, values = _states(batch, argument, seed)
            returned = ours.update(keys, values)
            expected = reference.update(keys, values)
            assert all(torch.equal(a, b) for a, b in zip(returned, expected))
        elif operation == "crop":
            ours.crop(argument), reference.crop(argument)
        elif operation == "reorder":
            ours.reorder_cache(torch.tensor(argument)), reference.reorder_cache(torch.tensor(argument))
        elif operation == "select":
            ours.batch_select_indices(torch.tensor(argument)), reference.batch_select_indices(torch.tensor(argument))
        elif operation == "repeat":
            ours.batch_repeat_interleave(argument), reference.batch_repeat_interleave(argument)
        _assert_same(ours, reference)


def test_a_decoding_step_writes_in_place_without_reallocating():
    layer = PreallocatedLayer(capacity=10)
    layer.update(*_states(1, 4, 0))
    buffer = layer._key_buffer
    for step in range(6):
        layer.update(*_states(1, 1, step + 1))
    assert layer._key_buffer is buffer and layer.get_seq_length() == 10


def test_preallocate_swaps_only_a_fresh_default_dynamic_cache():
    ours, _ = make_gpt2_pair()
    fresh = DynamicCache(config=ours.config)
    preallocate(fresh, capacity=8)
    assert all(type(layer) is PreallocatedLayer for layer in fresh.layers)

    users = DynamicCache(config=ours.config)
    users._is_user_defined = True
    filled = DynamicCache(config=ours.config)
    filled.update(*_states(1, 2, 0), layer_idx=0)
    offloaded = DynamicCache(config=ours.config, offloading=True)
    for cache in (users, filled, offloaded):
        preallocate(cache, capacity=8)
        assert all(type(layer) is not PreallocatedLayer for layer in cache.layers)


@pytest.mark.parametrize("strategy", [dict(do_sample=False), dict(num_beams=3, do_sample=False)])
def test_generate_uses_it_and_gives_the_tokens_of_a_plain_dynamic_cache(strategy):
    ours, _ = make_gpt2_pair(seed=4)
    prompt = torch.randint(0, 98, (2, 5))
    kwargs = dict(max_new_tokens=12, min_new_tokens=12, pad_token_id=0, **strategy)
    output = ours.generate(prompt, return_dict_in_generate=True, **kwargs)
    assert type(output.past_key_values.layers[0]) is PreallocatedLayer
    plain = ours.generate(prompt, past_key_values=DynamicCache(config=ours.config), **kwargs)  # user cache: untouched
    assert output.sequences.tolist() == plain.tolist()


def test_generate_preallocates_only_the_key_value_heads_of_grouped_query_attention(monkeypatch):
    """With n_kv_head=1 the buffers generate() allocates hold one head per layer, not n_head (4): the memory GQA
    exists to save."""
    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM, kv_cache
    from tests.helpers import TINY_GPT2

    model = GPTCustomForCausalLM(GPTCustomConfig(**TINY_GPT2, n_kv_head=1)).eval()
    caches = []
    original = kv_cache.preallocate
    monkeypatch.setattr("hf_gpt_custom.modeling_gpt_custom.preallocate",
                        lambda cache, capacity: caches.append(cache) or original(cache, capacity))
    with torch.no_grad():
        model.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=4, do_sample=False, pad_token_id=0)
    layers = caches[0].layers
    assert all(type(layer) is PreallocatedLayer for layer in layers)
    # (batch, kv heads, capacity, head_dim); capacity 3 + 4 - 1: the last new token is never fed back
    assert [tuple(layer._key_buffer.shape) for layer in layers] == [(1, 1, 6, 8)] * 2
