"""Fixtures for the training tests: a small tokenizer trained on real Shakespeare and a tiny-run config factory."""

import os
from pathlib import Path

import pytest
import torch

from tests.helpers import tiny_run_overrides
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
