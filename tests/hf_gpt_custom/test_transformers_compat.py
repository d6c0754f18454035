"""transformers_compat: our model takes and returns the KV cache under the name the installed transformers uses
(`past_key_values` up to 5.23, `cache` from 5.24) and still takes `past_key_values`. Run under both versions."""

import inspect

import pytest
import torch
from transformers import GPT2Model
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

from hf_gpt_custom.transformers_compat import CACHE_NAME, accepts_cache_kwarg, cache_kwarg, output_cache

from tests.helpers import make_gpt2_pair


def test_cache_name_is_what_transformers_gpt2_forward_takes():
    assert CACHE_NAME in inspect.signature(GPT2Model.forward).parameters
    assert cache_kwarg("c") == {CACHE_NAME: "c"}


@pytest.mark.parametrize("name", ["past_key_values", "cache"])
def test_continuing_from_a_cache_under_either_name_gives_gpt2s_logits(name):
    ours, reference = make_gpt2_pair(seed=2)
    ids = torch.randint(0, 98, (2, 9))
    with torch.no_grad():
        expected = reference(ids).logits[:, 5:]
        prefix = ours(ids[:, :5], use_cache=True)
        assert output_cache(prefix).get_seq_length() == 5
        continued = ours(ids[:, 5:], **{name: output_cache(prefix)})
    torch.testing.assert_close(continued.logits, expected, rtol=1e-5, atol=1e-5)
    assert output_cache(continued).get_seq_length() == 9


def test_forward_and_generate_log_no_cache_deprecation_warning():
    """On 5.24 transformers warns once per process when an output is built or read under the old name."""
    ours, _ = make_gpt2_pair(seed=2)
    logging.get_logger().warning_once.cache_clear()  # warning_once is an lru_cache on logging.Logger
    with CaptureLogger(logging.get_logger("transformers.utils.generic")) as captured:
        with torch.no_grad():
            ours(torch.randint(0, 98, (1, 4)), use_cache=True)
        ours.generate(torch.randint(0, 98, (1, 4)), max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert "deprecated" not in captured.out


def test_accepts_cache_kwarg_maps_cache_and_refuses_both():
    @accepts_cache_kwarg
    def forward(input_ids=None, past_key_values=None):
        return past_key_values

    assert forward(cache="c") == "c"
    assert forward(past_key_values="p") == "p"
    assert forward(past_key_values="p", cache=None) == "p"  # generate's "no cache yet" does not erase a passed one
    # transformers reads forward's signature: generate(cache=...) on 5.24 needs `cache` listed there
    assert {"past_key_values", "cache"} <= set(inspect.signature(forward).parameters)
    with pytest.raises(TypeError, match="got both cache= and past_key_values="):
        forward(past_key_values="p", cache="c")


def test_trainer_keeps_only_the_logits_of_an_eval_forward():
    """Trainer.prediction_step keeps the output entries not in config.keys_to_ignore_at_inference (nor "loss"); the
    cache, under either name, must be dropped or evaluation gathers Cache objects as predictions."""
    ours, _ = make_gpt2_pair(seed=2)
    with torch.no_grad():
        outputs = ours(torch.randint(0, 98, (2, 5)), labels=torch.randint(0, 98, (2, 5)), use_cache=True)
    assert CACHE_NAME in outputs.keys()
    ignored = ours.config.keys_to_ignore_at_inference + ["loss"]
    assert [key for key in outputs.keys() if key not in ignored] == ["logits"]
