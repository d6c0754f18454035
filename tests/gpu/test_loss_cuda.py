"""On CUDA the causal-LM loss the model computes from `labels` — whatever implementation it picks on that device —
equals transformers' ForCausalLMLoss on the model's own logits: the loss and every parameter's gradient, in float32
(within 1e-5) and under bf16 autocast (within 2e-2 relative)."""

import pytest
import torch
from transformers.loss.loss_utils import ForCausalLMLoss

from tests.helpers import make_gpt2_pair

pytestmark = pytest.mark.gpu

# (vocab_size, batch, seq_len): the tiny vocabulary, and one whose logits span many rows of a large vocabulary.
SHAPES = {"tiny": (99, 3, 17), "wide_vocab": (5003, 4, 64)}
CASES = {
    "mean": {},
    "ignored_positions": {"ignore": 0.3},
    "num_items_in_batch": {"ignore": 0.3, "num_items_in_batch": 41},  # as gradient accumulation passes it
}


def _batch(vocab_size, batch, seq_len, device, ignore=0.0):
    generator = torch.Generator().manual_seed(7)
    input_ids = torch.randint(0, vocab_size, (batch, seq_len), generator=generator)
    labels = input_ids.masked_fill(torch.rand(batch, seq_len, generator=generator) < ignore, -100)
    return input_ids.to(device), labels.to(device)


def _loss_and_grads(model, input_ids, labels, through_model: bool, dtype: torch.dtype, **kwargs):
    model.zero_grad(set_to_none=True)
    with torch.autocast(input_ids.device.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        if through_model:  # the model's own loss: labels in, loss out
            loss = model(input_ids, labels=labels, **kwargs).loss
        else:  # transformers' loss on the same forward's logits
            logits = model(input_ids).logits
            loss = ForCausalLMLoss(logits, labels, vocab_size=model.config.vocab_size, **kwargs)
    (loss * 3.0).backward()  # a non-unit upstream gradient
    grads = {name: p.grad.detach().float().clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.detach().float(), grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("shape", SHAPES)
def test_model_loss_and_gradients_equal_transformers_on_cuda(shape, case, dtype, device):
    vocab_size, batch, seq_len = SHAPES[shape]
    ours, _ = make_gpt2_pair("sdpa", vocab_size=vocab_size, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ours.to(device).train()  # the training path, without dropout: both forwards must compute the same logits
    settings = dict(CASES[case])
    input_ids, labels = _batch(vocab_size, batch, seq_len, device, ignore=settings.pop("ignore", 0.0))
    loss, grads = _loss_and_grads(ours, input_ids, labels, True, dtype, **settings)
    expected_loss, expected_grads = _loss_and_grads(ours, input_ids, labels, False, dtype, **settings)
    assert loss.dtype == torch.float32 and loss.device == input_ids.device
    assert grads.keys() == expected_grads.keys() and grads
    if dtype == torch.float32:
        torch.testing.assert_close(loss, expected_loss, rtol=0, atol=1e-5)
        for name, grad in grads.items():
            torch.testing.assert_close(grad, expected_grads[name], rtol=0, atol=1e-5, msg=name)
    else:
        assert abs(loss - expected_loss) <= 2e-2 * abs(expected_loss)
        for name, grad in grads.items():
            error = torch.linalg.vector_norm(grad - expected_grads[name])
            assert error <= 2e-2 * torch.linalg.vector_norm(expected_grads[name]), name


def test_on_cuda_the_model_computes_its_loss_through_the_compiled_copy(device, monkeypatch):
    """causal_lm_loss.py's CUDA path is really taken there (the test above checks its numbers)."""
    from hf_gpt_custom import causal_lm_loss

    calls = []
    compiled = causal_lm_loss._compiled
    monkeypatch.setattr(causal_lm_loss, "_compiled", lambda *args: calls.append(args) or compiled(*args))
    ours, _ = make_gpt2_pair(vocab_size=99)
    input_ids, labels = _batch(99, 2, 9, device)
    assert torch.isfinite(ours.to(device)(input_ids, labels=labels).loss)
    assert calls, "the loss did not go through the compiled copy on CUDA"
