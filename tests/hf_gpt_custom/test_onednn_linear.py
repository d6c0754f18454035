"""oneDNN's packed kernel is used in decoding loops only where a timing on this machine says it is faster, and it
computes what F.linear computes; everything else is F.linear."""

import logging
import time
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hf_gpt_custom import onednn_linear
from hf_gpt_custom.onednn_linear import decoding_linear, measure_speedup, use_onednn_linear

needs_onednn = pytest.mark.skipif(not onednn_linear.onednn_linear_active(), reason="this torch build has no oneDNN")


@pytest.fixture(autouse=True)
def fresh_decisions(monkeypatch):
    """Each test starts with no cached timings and the kernel allowed."""
    monkeypatch.setattr(onednn_linear, "_speedups", {})
    yield
    use_onednn_linear(True)


def _is_plain(kernel, layer) -> bool:
    return isinstance(kernel, partial) and kernel.func is F.linear and kernel.keywords["weight"] is layer.weight


@needs_onednn
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("bias", [True, False])
def test_the_packed_kernel_computes_f_linear(rows, bias, monkeypatch):
    monkeypatch.setattr(onednn_linear, "REQUIRED_SPEEDUP", 0.0)  # always choose oneDNN
    layer = nn.Linear(24, 40, bias=bias)
    with torch.no_grad():
        kernel = decoding_linear(layer, rows)
        assert not _is_plain(kernel, layer)
        for x in (torch.randn(rows, 1, 24), torch.randn(rows, 24), torch.randn(1, rows, 24).transpose(0, 1)):
            torch.testing.assert_close(kernel(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


@needs_onednn
@pytest.mark.parametrize("speedup, chooses_onednn", [(0.8, False), (1.0, False), (1.5, True)])
def test_the_faster_kernel_by_measurement_is_chosen(speedup, chooses_onednn, monkeypatch):
    monkeypatch.setattr(onednn_linear, "measure_speedup", lambda *args: speedup)
    layer = nn.Linear(16, 8)
    with torch.no_grad():
        assert _is_plain(decoding_linear(layer, 2), layer) != chooses_onednn


@needs_onednn
@pytest.mark.parametrize("speedup, packs", [(0.8, 0), (1.5, 1)])
def test_a_weight_is_packed_only_when_its_shape_chose_onednn(speedup, packs, monkeypatch):
    """Once a shape is timed, a decoding loop packs (reorders, ~0.1 s per 100M weights) only the weights it will use
    packed: packing every weight on every generate() call made GPT-2 124M's decoding 25% slower than F.linear's."""
    layer = nn.Linear(16, 8)
    with torch.no_grad():
        onednn_linear._speedups[(2, 16, 8, torch.float32, torch.get_num_threads())] = speedup
        reorders = []
        original = onednn_linear.pack_weight
        monkeypatch.setattr(onednn_linear, "pack_weight", lambda weight: reorders.append(1) or original(weight))
        decoding_linear(layer, 2)
    assert len(reorders) == packs


@needs_onednn
def test_the_copy_packed_to_time_a_shape_is_the_one_the_loop_uses(monkeypatch):
    monkeypatch.setattr(onednn_linear, "measure_speedup", lambda *args: 1.5)
    reorders = []
    original = onednn_linear.pack_weight
    monkeypatch.setattr(onednn_linear, "pack_weight", lambda weight: reorders.append(1) or original(weight))
    with torch.no_grad():
        decoding_linear(nn.Linear(16, 8), 2)
    assert len(reorders) == 1


@needs_onednn
def test_each_shape_is_timed_once_per_thread_count_and_logged(monkeypatch, caplog):
    timings = []
    monkeypatch.setattr(onednn_linear, "measure_speedup", lambda *args: timings.append(1) or 1.25)
    layer = nn.Linear(16, 8)
    with torch.no_grad(), caplog.at_level(logging.INFO, logger=onednn_linear.__name__):
        decoding_linear(layer, 2), decoding_linear(nn.Linear(16, 8), 2)
        decoding_linear(layer, 3)
        threads = torch.get_num_threads()
        torch.set_num_threads(threads + 1)
        try:
            decoding_linear(layer, 2)
        finally:
            torch.set_num_threads(threads)
    assert len(timings) == 3  # (2 rows), (3 rows), (2 rows on another thread count)
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 3 and "2 rows x 16 -> 8" in messages[0] and "1.25x" in messages[0]
    assert "using oneDNN" in messages[0]


def test_measure_speedup_reports_the_ratio_of_the_two_times():
    def busy(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    ratio = measure_speedup(lambda x: busy(4e-4), lambda x: busy(2e-4), torch.zeros(1), rounds=5)
    assert 1.5 < ratio < 2.5


def test_autograd_autocast_other_dtypes_and_the_off_switch_get_f_linear(monkeypatch):
    monkeypatch.setattr(onednn_linear, "REQUIRED_SPEEDUP", 0.0)
    layer = nn.Linear(16, 8)
    assert _is_plain(decoding_linear(layer, 1), layer)  # autograd on
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert _is_plain(decoding_linear(layer, 1), layer)
        double = nn.Linear(16, 8).double()
        assert _is_plain(decoding_linear(double, 1), double)
        use_onednn_linear(False)
        assert _is_plain(decoding_linear(layer, 1), layer)


def test_without_the_private_ops_everything_is_f_linear(monkeypatch):
    """A torch build (or CPU) without torch.ops.mkldnn's linear ops: the tested fallback."""
    monkeypatch.setattr(onednn_linear, "_KERNELS", None)
    monkeypatch.setattr(onednn_linear, "REQUIRED_SPEEDUP", 0.0)
    layer = nn.Linear(16, 8)
    with torch.no_grad():
        assert not onednn_linear.onednn_linear_active()
        assert _is_plain(decoding_linear(layer, 1), layer)


@needs_onednn
def test_timing_leaves_the_global_random_state_alone():
    """Seeded sampling must not depend on whether this process already timed a shape."""
    layer = nn.Linear(16, 8)
    state = torch.get_rng_state()
    with torch.no_grad():
        decoding_linear(layer, 1)
    assert torch.equal(torch.get_rng_state(), state)
