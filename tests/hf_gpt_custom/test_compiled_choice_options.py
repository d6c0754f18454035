"""Generation options that vary from call to call must not compile the token choice again (static_decoding.py's GPU
code path, held on the CPU as in test_compiled_token_choice.py). Found by a hunt: tracing
SequenceBiasLogitsProcessor / NoBadWordsLogitsProcessor (`_prepare_bias_variables`, run on the first step) guarded
on the bias dict's keys and values, so every call with other banned words or biases compiled a new graph, and the
8th distinct value hit torch._dynamo's recompile_limit (a warning, then the choice ran eagerly for every new value).
Tokens matched `_sample` throughout. Banned words and biases now keep the choice eager."""

from __future__ import annotations

import logging
from unittest import mock

import pytest
import torch
import torch._dynamo
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

import hf_gpt_custom.modeling_gpt_custom as modeling
from hf_gpt_custom import static_decoding
from tests.helpers import compiled_forward, make_gpt2_pair






def graphs_per_choice() -> list[int]:
    return [len(_debug_get_cache_entry_list(compiled._torchdynamo_orig_callable.__code__))
            for compiled in static_decoding._compiled_choices.values()]


def transformers_loop(model, *args, **kwargs):
    with mock.patch.object(modeling, "uses_static_decoding", lambda *a, **k: False):
        return model.generate(*args, **kwargs)


@pytest.mark.parametrize("options", [lambda i: dict(bad_words_ids=[[3 + i]]),
                                     lambda i: dict(sequence_bias={(3,): float(i + 1)})],
                         ids=["bad_words_ids", "sequence_bias"])
def test_other_banned_words_or_biases_do_not_compile_the_choice_again(gpu_code_path, options):
    """Same batch, prompt and length; only the banned word (or the bias value) differs between calls: each of the
    three calls compiled a graph of its own (2, 3, 4 graphs), seconds each under inductor on the CPU. (aot_eager:
    the guards decide the count, not inductor's code. Not the eager backend: there a sequence bias compiled into the
    choice added no graphs, as it does under inductor and aot_eager. Inductor's tokens are
    test_compiled_token_choice.py's.)"""
    ours, _ = make_gpt2_pair("sdpa", seed=8)
    prompt = torch.randint(1, 98, (2, 10), generator=torch.Generator().manual_seed(1))
    base = dict(do_sample=False, max_new_tokens=8, pad_token_id=0, cache_implementation="static",
                compile_config=compiled_forward("aot_eager"))
    counts = []
    for i in range(3):
        tokens = ours.generate(prompt, **base, **options(i))
        assert tokens.tolist() == transformers_loop(ours, prompt, **base, **options(i)).tolist()
        counts.append(graphs_per_choice())
    assert counts[1:] == counts[:1] * 2  # got e.g. [[2], [3], [4]]


def test_nine_different_banned_words_stay_below_the_recompile_limit(gpu_code_path, caplog):
    """Nine calls differing only in bad_words_ids: the 8th distinct word hits recompile_limit (8), dynamo warns, and
    the choice is eager for every later word. (The eager backend: the guards, not inductor, decide this.)"""
    ours, _ = make_gpt2_pair("sdpa", seed=8)
    prompt = torch.randint(1, 98, (2, 10), generator=torch.Generator().manual_seed(1))
    base = dict(do_sample=False, max_new_tokens=8, pad_token_id=0, cache_implementation="static",
                compile_config=compiled_forward("aot_eager"))
    with caplog.at_level(logging.WARNING):
        for i in range(9):
            tokens = ours.generate(prompt, bad_words_ids=[[3 + i]], **base)
            assert tokens.tolist() == transformers_loop(ours, prompt, bad_words_ids=[[3 + i]], **base).tolist()
    assert max(graphs_per_choice(), default=0) < torch._dynamo.config.recompile_limit
    assert "recompile_limit" not in caplog.text
