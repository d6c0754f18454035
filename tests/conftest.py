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


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` (tests/gpu/) run where CUDA is visible and are skipped, saying why, where it is not."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="gpu test: needs CUDA; no CUDA device is visible")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # not `"gpu" in item.keywords`: that matches tests/gpu/ itself
            item.add_marker(skip)


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

    from tests.helpers import TINY_GPT2

    return GPTCustomConfig(**TINY_GPT2)


# Prepended to every script run by `python_without_project`: the interpreter starts with `-I -S` (isolated mode and no
# `site`, so no .pth file runs: the editable install's finder lives in one), gets the virtualenv's site-packages back
# by hand, and proves that none of the project's packages can be imported before the script does anything.
_WITHOUT_PROJECT_PRELUDE = """\
import importlib.util as _util, sys as _sys
_sys.path.extend({site_packages!r})
for _name in ("hf_gpt_custom", "training", "eval", "model_cards"):
    assert _util.find_spec(_name) is None, _name + " is importable in the clean interpreter"
"""


def _python_without_project(tmp_path: Path):
    """python_without_project's runner, its module cache and working folder under `tmp_path`."""
    import json
    import subprocess
    import sys
    import sysconfig

    site_packages = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    prelude = _WITHOUT_PROJECT_PRELUDE.format(site_packages=site_packages)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir(exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"), HF_MODULES_CACHE=str(tmp_path / "modules"))

    def run(script: str, *args: str) -> dict:
        completed = subprocess.run(
            [sys.executable, "-I", "-S", "-c", prelude + script, *map(str, args)],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        return json.loads(completed.stdout.strip().splitlines()[-1])

    return run


@pytest.fixture
def python_without_project(tmp_path):
    """Run a Python script where none of this project's packages is importable (as on a user's machine that only
    has torch/transformers): `run(script, *args) -> dict`, the JSON object the script prints on its last line.

    The process starts outside the repository, offline, with its remote-code module cache under tmp_path, so a
    folder saved with its code files must load through `trust_remote_code=True` alone."""
    return _python_without_project(tmp_path)


@pytest.fixture(scope="module")
def module_python_without_project(tmp_path_factory):
    """python_without_project for a module-scoped fixture (one clean process shared by several tests)."""
    return _python_without_project(tmp_path_factory.mktemp("without_project"))
