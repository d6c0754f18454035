"""bf16 autocast on a CPU without bf16 matmul units is emulated and several times slower: the run says so."""

import logging

import pytest
import torch

from hf_gpt_custom.training.devices import warn_if_bf16_is_emulated


@pytest.mark.parametrize("supported, device, precision, warned", [
    (False, "cpu", "bf16", True),
    (True, "cpu", "bf16", False),
    (False, "cpu", "no", False),
    (False, "cuda", "bf16", False),
])
def test_bf16_on_a_cpu_without_bf16_units_is_named(monkeypatch, caplog, supported, device, precision, warned):
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: supported)
    with caplog.at_level(logging.WARNING, logger="hf_gpt_custom.training.devices"):
        assert warn_if_bf16_is_emulated(device, precision) is warned
    assert ("set mixed_precision=no" in caplog.text) is warned


def test_the_check_agrees_with_a_timing_on_this_machine():
    """Where torch reports no native bf16, a bf16 matmul is measurably slower than fp32 (the reason for the warning)."""
    import time

    def seconds(dtype):
        a, b = torch.randn(256, 256, dtype=dtype), torch.randn(256, 256, dtype=dtype)
        a @ b
        start = time.perf_counter()
        for _ in range(5):
            a @ b
        return time.perf_counter() - start

    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("this CPU has native bf16 matmuls")
    assert seconds(torch.bfloat16) > 2 * seconds(torch.float32)
