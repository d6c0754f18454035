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


@pytest.mark.parametrize("version, refused", [("5.22.2", True), ("5.4.0", True), ("5.23.0.dev0", False),
                                              ("5.23.0", False), ("5.24.0", False)])
def test_a_transformers_older_than_the_pin_is_refused_on_import_naming_the_upgrade(version, refused):
    """The remote code meets whatever transformers a Hub user has: releases the old pin (>=5) admitted failed to
    import (5.0), load (5.4-5.9) or ran silently wrong (5.4-5.21.0: `config.n_head = 8` kept the old head width;
    the versionmatrix hunt). Reference: the package's own pin, read from its metadata."""
    import importlib.metadata
    import subprocess
    import sys

    from packaging.requirements import Requirement

    (pin,) = [Requirement(line) for line in importlib.metadata.requires("hf-gpt-custom")
              if Requirement(line).name == "transformers"]
    if "dev" not in version:  # a development build of 5.23 runs it (pip's pin would not pick one)
        assert pin.specifier.contains(version) is not refused
    code = (f"import transformers; transformers.__version__ = {version!r}\n"
            "from hf_gpt_custom.configuration_gpt_custom import GPTCustomConfig\nprint('imported')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if refused:
        assert result.returncode != 0 and (
            f"ImportError: this model needs transformers >= 5.23, and transformers {version} is installed") in result.stderr
        assert 'pip install -U "transformers>=5.23,<5.25"' in result.stderr
    else:
        assert result.returncode == 0 and result.stdout.strip() == "imported", result.stderr


REMOTE_CODE_ON_AN_OLD_TRANSFORMERS = """
import json, sys
import transformers
transformers.__version__ = "5.22.2"
from transformers import AutoConfig, AutoModelForCausalLM
said = {}
for name, load in (("config", AutoConfig), ("model", AutoModelForCausalLM)):
    try:
        load.from_pretrained(sys.argv[1], trust_remote_code=True)
        said[name] = "loaded"
    except ImportError as err:
        said[name] = str(err)
print(json.dumps(said))
"""


def test_a_saved_folder_refuses_an_old_transformers_as_remote_code(tmp_path, tiny_config, python_without_project):
    """Where the package is not installed, the folder's own code files must refuse the release, the config's first
    (AutoConfig loads it alone, and config edits were what older releases got silently wrong)."""
    from hf_gpt_custom import GPTCustomForCausalLM

    GPTCustomForCausalLM(tiny_config).save_pretrained(tmp_path / "ours")
    said = python_without_project(REMOTE_CODE_ON_AN_OLD_TRANSFORMERS, tmp_path / "ours")
    for name in ("config", "model"):
        assert said[name].startswith("this model needs transformers >= 5.23, and transformers 5.22.2 is installed"), said
