"""Fixtures of the CUDA tests: the device, and float32 matmuls in full float32 precision for their tolerances."""

import pytest
import torch


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda")


@pytest.fixture(autouse=True)
def _float32_matmuls_in_float32():
    # torch's default, set explicitly: with TF32 ("high") a float32 matmul rounds its inputs to 10 mantissa bits and
    # the float32 tolerances below would measure that rounding, not the code.
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(previous)
