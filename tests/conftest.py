"""Shared fixtures: offline Hub, fixed seeds, a tiny model config and the real data in ../shared/data."""

import os

# Set before transformers/datasets/huggingface_hub are imported anywhere, so no test can reach the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA_DIR = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _fixed_seeds():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """../shared/data beside the checkout: the real corpus and benchmark files (never copied into the repo)."""
    if not SHARED_DATA_DIR.is_dir():
        pytest.fail(f"real data not found at {SHARED_DATA_DIR}; CI and README expect ../shared/data beside the checkout")
    return SHARED_DATA_DIR


@pytest.fixture
def tiny_config():
    """2 layers, 32 wide: big enough to exercise every code path, small enough for milliseconds per step."""
    from hf_gpt_custom import GPTCustomConfig

    return GPTCustomConfig(
        vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=98, eos_token_id=98
    )
