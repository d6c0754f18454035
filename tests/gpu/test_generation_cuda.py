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
