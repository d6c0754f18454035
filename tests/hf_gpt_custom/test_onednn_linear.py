"""Our oneDNN linear layer computes what F.linear computes, forward and backward, trained or packed for inference."""

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F

from hf_gpt_custom import onednn_linear
from hf_gpt_custom.onednn_linear import Linear, use_onednn_linear

from .conftest import make_gpt2_pair

pytestmark = pytest.mark.skipif(not onednn_linear.onednn_linear_active(), reason="this torch build has no oneDNN")


@pytest.fixture(autouse=True)
def default_switches():
    yield
    use_onednn_linear(True, pack_weights=True)


def _grads(layer, x):
    x = x.detach().clone().requires_grad_(True)
    (layer(x).square() * torch.linspace(-1, 1, layer.out_features)).sum().backward()
    grads = x.grad, layer.weight.grad, layer.bias.grad if layer.bias is not None else None
    layer.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5, 24), (3, 7, 24), (2, 3, 4, 24)])
def test_forward_and_backward_match_f_linear(shape, bias):
    torch.manual_seed(0)
    layer = Linear(24, 40, bias=bias)
    x = torch.randn(shape)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    ours = _grads(layer, x)
    use_onednn_linear(False)
    reference = _grads(layer, x)
    for got, expected in zip(ours, reference):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_non_contiguous_input_and_a_last_position_slice():
    layer = Linear(16, 8)
    transposed = torch.randn(7, 3, 16).transpose(0, 1)
    last_position = torch.randn(3, 7, 16)[:, -1:, :]
    for x in (transposed, last_position):
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


def test_switched_off_it_is_exactly_f_linear():
    layer = Linear(16, 8)
    x = torch.randn(4, 16)
    use_onednn_linear(False)
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))


def test_autocast_and_other_dtypes_keep_the_f_linear_path():
    layer = Linear(16, 8)
    x = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x).dtype == torch.bfloat16  # autocast's bf16 kernel, as with nn.Linear
    double = Linear(16, 8).double()
    assert torch.equal(double(x.double()), F.linear(x.double(), double.weight, double.bias))


def test_inference_packs_the_weight_once_and_repacks_after_an_update():
    layer = Linear(16, 8)
    x = torch.randn(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
        packed = layer._packed[1]
        layer(x)
        assert layer._packed[1] is packed  # reused, not repacked
    optimizer = torch.optim.SGD(layer.parameters(), lr=1.0)
    layer(x).sum().backward()
    assert layer._packed is None  # a forward with autograd drops the inference copy
    optimizer.step()
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        layer.weight.mul_(-1.0)  # an in-place change without autograd: the version counter catches it
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


def test_frozen_forward_is_forward_with_the_choices_made_once():
    layer, x = Linear(16, 8), torch.randn(3, 1, 16)
    with torch.no_grad():
        frozen = layer.frozen_forward()
        assert frozen != layer.forward and layer._packed is not None  # the oneDNN kernel on the packed weight
        assert torch.equal(frozen(x), layer(x))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert layer.frozen_forward() == layer.forward  # autocast wants its own kernels
        use_onednn_linear(True, pack_weights=False)
        assert layer.frozen_forward() == layer.forward
    assert layer.frozen_forward() == layer.forward  # with autograd: no packed copy


def test_pack_weights_off_keeps_no_copy():
    layer = Linear(16, 8)
    use_onednn_linear(True, pack_weights=False)
    with torch.no_grad():
        layer(torch.randn(2, 16))
    assert layer._packed is None


def test_the_packed_copy_is_not_copied_or_pickled():
    layer = Linear(16, 8)
    with torch.no_grad():
        layer(torch.randn(2, 16))
    assert copy.deepcopy(layer)._packed is None
    assert pickle.loads(pickle.dumps(layer))._packed is None
    assert set(layer.state_dict()) == {"weight", "bias"}


def test_training_follows_the_f_linear_loss_trajectory_and_weights():
    """Ten AdamW steps with oneDNN and with F.linear (MKL): the same losses within 1e-5, the same weights."""
    no_dropout = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    runs = {}
    for enabled in (True, False):
        use_onednn_linear(enabled)
        model, _ = make_gpt2_pair("sdpa", seed=3, **no_dropout)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        generator = torch.Generator().manual_seed(0)
        losses = []
        for _ in range(10):
            input_ids = torch.randint(0, 98, (2, 16), generator=generator)
            loss = model(input_ids=input_ids, labels=input_ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
        runs[enabled] = losses, model.state_dict()
    torch.testing.assert_close(runs[True][0], runs[False][0], rtol=0, atol=1e-5)
    for name, weight in runs[True][1].items():
        torch.testing.assert_close(weight, runs[False][1][name], rtol=0, atol=1e-4, msg=name)


def test_tracing_and_export_see_f_linear():
    """torch.jit.trace (and the TorchScript ONNX exporter) records F.linear, not the oneDNN op."""
    layer = Linear(16, 8).eval()
    x = torch.randn(2, 16)
    traced = torch.jit.trace(layer, x)
    assert "mkldnn" not in str(traced.graph) and "linear" in str(traced.graph)
    torch.testing.assert_close(traced(x), F.linear(x, layer.weight, layer.bias))
