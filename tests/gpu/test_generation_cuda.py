"""On CUDA greedy generation gives the same tokens with the KV cache as without it — with the default dynamic cache,
and with `cache_implementation="static"` (generate then compiles the decoding forward on CUDA) — and the same tokens as
transformers' GPT-2 on the same weights."""

import pytest
import torch

from tests.helpers import make_gpt2_pair

pytestmark = pytest.mark.gpu

GREEDY = {"max_new_tokens": 12, "min_new_tokens": 12, "do_sample": False, "pad_token_id": 0}


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_cached_and_uncached_greedy_generation_agree_on_cuda(cache, device):
    ours, reference = make_gpt2_pair("sdpa", seed=3)
    ours.to(device)
    reference.to(device)
    prompt = torch.randint(1, 98, (2, 7), generator=torch.Generator().manual_seed(5)).to(device)
    with torch.no_grad():
        uncached = ours.generate(prompt, use_cache=False, **GREEDY)
        expected = reference.generate(prompt, use_cache=False, **GREEDY)
        settings = {"cache_implementation": "static"} if cache == "static" else {}
        cached = ours.generate(prompt, use_cache=True, **GREEDY, **settings)
        again = ours.generate(prompt, use_cache=True, **GREEDY, **settings)  # a compiled path's second call replays
    assert cached.device == prompt.device and cached.shape == (2, 7 + 12)
    assert uncached.tolist() == expected.tolist()
    assert cached.tolist() == uncached.tolist()
    assert again.tolist() == uncached.tolist()


def test_our_static_loop_stops_where_transformers_loop_stops_on_cuda(device, monkeypatch):
    """static_decoding.py on CUDA, where greedy decoding reads the stop flag one step late (events, pinned memory) and
    the forward is a CUDA-graph replay: left-padded rows, one stopped early by eos, then every row stopped early —
    the tokens and lengths of transformers' `_sample` on the same model."""
    from hf_gpt_custom import static_decoding

    from tests.helpers import padded_batch

    ours, _ = make_gpt2_pair("sdpa", seed=8)
    ours.to(device)
    torch.manual_seed(0)
    prompt, attention_mask = (tensor[[0, 2]].to(device) for tensor in padded_batch())
    used = []
    real = static_decoding.decode_with_static_cache
    monkeypatch.setattr("hf_gpt_custom.modeling_gpt_custom.decode_with_static_cache",
                        lambda *args, **kwargs: used.append(True) or real(*args, **kwargs))
    settings = dict(attention_mask=attention_mask, do_sample=False, max_new_tokens=12, pad_token_id=0,
                    cache_implementation="static")
    with torch.no_grad():
        free = ours.generate(prompt, min_new_tokens=12, **settings)[:, prompt.shape[1]:].tolist()
        for eos in (free[0][3], free[1][0]):  # a token of row 0; the first token of row 1
            tokens = ours.generate(prompt, eos_token_id=eos, **settings)
            with monkeypatch.context() as patch:
                patch.setattr("hf_gpt_custom.modeling_gpt_custom.uses_static_decoding", lambda *a, **k: False)
                expected = ours.generate(prompt, eos_token_id=eos, **settings)
            assert tokens.tolist() == expected.tolist()
    assert len(used) == 3
