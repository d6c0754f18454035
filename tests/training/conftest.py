"""Fixtures for the training tests: a small tokenizer trained on real Shakespeare, a tiny-run config factory, and the
check that a run's folders are plain model folders whatever wrapped the model."""

import json
import os
from pathlib import Path

import pytest
import torch

from tests.helpers import save_tiny_base_model, tiny_run_overrides, write_learnable_pairs
from hf_gpt_custom.training.config import load_train_config


@pytest.fixture(scope="package", autouse=True)
def _one_thread():
    """One intra-op thread here and in the subprocesses we start: the models are tiny (threads only add barrier
    waits), timing is steadier on a shared 2-core machine, and runs that are compared bitwise use the same setting."""
    threads, env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    yield
    torch.set_num_threads(threads)
    if env is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = env


@pytest.fixture
def cpu_accelerator():
    """An `Accelerator(cpu=True)` whatever an earlier test in this process chose: accelerate keeps one process-wide
    state and refuses to change its device (on a CUDA machine an earlier test's run leaves it on the GPU)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield Accelerator(cpu=True)
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture(scope="session")
def shakespeare_path(shared_data_dir) -> Path:
    return shared_data_dir / "tinyshakespeare" / "input.txt"


@pytest.fixture(scope="session")
def shakespeare_tokenizer_dir(tmp_path_factory, shakespeare_path) -> Path:
    """A 512-token byte-level BPE trained with the project's own trainer on tiny Shakespeare (once per session)."""
    from hf_gpt_custom.tokenizer_training import train_tokenizer

    return train_tokenizer([str(shakespeare_path)], tmp_path_factory.mktemp("tokenizer"), vocab_size=512,
                           show_progress=False)


@pytest.fixture(scope="session")
def shared_data_cache(tmp_path_factory) -> Path:
    """One packed-data cache for the session, so tests after the first reuse the tokenised blocks."""
    return tmp_path_factory.mktemp("data_cache")


@pytest.fixture
def make_config(tmp_path, shakespeare_path, shakespeare_tokenizer_dir, shared_data_cache):
    """TrainConfig factory for a tiny run writing to tmp_path/<run_name>; extra overrides win."""

    def make(*overrides: str, run_name: str = "tiny", with_model_section: bool = True):
        base = tiny_run_overrides(tmp_path / run_name, shakespeare_path, shakespeare_tokenizer_dir, shared_data_cache,
                                  run_name)
        if not with_model_section:  # e.g. with init_from, where the folder defines the architecture
            base = [override for override in base if not override.startswith("model.")]
        return load_train_config(None, base + list(overrides))

    return make


# Runs under the `python_without_project` fixture (tests/conftest.py): only torch and transformers are importable.
LOAD_AS_REMOTE_CODE = """
import json, sys
import torch
from transformers import AutoModelForCausalLM

folder, input_ids = sys.argv[1], torch.tensor(json.loads(sys.argv[2]))
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
with torch.no_grad():
    logits = model(input_ids).logits
print(json.dumps({"module": type(model).__module__, "class": type(model).__name__, "logits": logits.tolist()}))
"""


def _assert_plain_model_folders(run_dir, python_without_project) -> None:
    """final/ is what an unwrapped GPTCustomForCausalLM.save_pretrained writes and loads as remote code with the
    trained weights; each checkpoint's weights carry the model's own names and load as a model folder."""
    from safetensors import safe_open

    from hf_gpt_custom.model_folder import load_model_folder

    final = run_dir / "final"
    config = json.loads((final / "config.json").read_text())
    assert config["architectures"] == ["GPTCustomForCausalLM"]
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_gpt_custom.GPTCustomForCausalLM"
    files = set(os.listdir(final))
    assert "modeling_gpt_custom.py" in files and not {name for name in files if name.startswith("_")}, files
    local = load_model_folder(final).eval()
    input_ids = torch.randint(0, local.config.vocab_size, (2, 9))
    remote = python_without_project(LOAD_AS_REMOTE_CODE, final, json.dumps(input_ids.tolist()))
    assert remote["module"].startswith("transformers_modules.") and remote["class"] == "GPTCustomForCausalLM"
    with torch.no_grad():
        assert torch.equal(torch.tensor(remote["logits"]), local(input_ids).logits)
    for checkpoint in sorted((run_dir / "checkpoints").glob("step_*")):
        with safe_open(str(checkpoint / "model.safetensors"), framework="pt") as weights:
            keys = set(weights.keys())
        assert keys and not {key for key in keys if key.startswith(("module.", "_orig_mod."))}, checkpoint
        load_model_folder(checkpoint)  # strict: every weight present under its name


@pytest.fixture
def assert_plain_model_folders(python_without_project):
    """`check(run_dir)`: final/ and the checkpoints are what an unwrapped model writes (see the function above)."""
    return lambda run_dir: _assert_plain_model_folders(run_dir, python_without_project)


@pytest.fixture(scope="module")
def base_model_dir(tmp_path_factory, shakespeare_tokenizer_dir):
    """A tiny pre-trained-shaped causal LM folder (2 layers, 32 wide, 64 positions) with its tokenizer."""
    return save_tiny_base_model(tmp_path_factory.mktemp("base") / "final", shakespeare_tokenizer_dir)


@pytest.fixture(scope="module")
def learnable_pairs(tmp_path_factory):
    """120 pair records a tiny model learns in a few steps: the label says whether the hypothesis word is in the
    premise."""
    return write_learnable_pairs(tmp_path_factory.mktemp("data") / "pairs.jsonl")
