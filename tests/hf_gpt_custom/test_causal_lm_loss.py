"""causal_lm_loss.py against transformers' ForCausalLMLoss (F.cross_entropy): the same loss and the same gradient for
every way transformers calls it, in float32 and bf16, in one block of rows and across several."""

import pytest
import torch
from transformers.loss.loss_utils import ForCausalLMLoss

import hf_gpt_custom.causal_lm_loss as loss_module
from hf_gpt_custom import GPTCustomForCausalLM
from hf_gpt_custom.causal_lm_loss import causal_lm_loss

VOCAB = 37


def _loss_and_grad(loss_fn, logits, labels, **kwargs):
    logits = logits.detach().clone().requires_grad_()
    loss = loss_fn(logits, labels, vocab_size=VOCAB, **kwargs)
    (loss * 3.0).backward()  # a non-unit upstream gradient
    return loss.detach(), logits.grad


def _labels(batch=3, seq=11, ignored=0.0, seed=0):
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, VOCAB, (batch, seq), generator=generator)
    return labels.masked_fill(torch.rand(batch, seq, generator=generator) < ignored, -100)


@pytest.mark.parametrize("ignored", [0.0, 0.3])
@pytest.mark.parametrize("kwargs", [{}, {"num_items_in_batch": 17}, {"num_items_in_batch": torch.tensor(17)}],
                         ids=["mean", "num_items_int", "num_items_tensor"])
@pytest.mark.parametrize("block_elements", [1 << 22, 2 * VOCAB + 5], ids=["one_block", "blocks_of_2_rows"])
def test_loss_and_gradient_equal_transformers(ignored, kwargs, block_elements, monkeypatch):
    monkeypatch.setattr(loss_module, "_BLOCK_ELEMENTS", block_elements)
    logits = torch.randn(3, 11, VOCAB) * 4
    labels = _labels(ignored=ignored)
    expected_loss, expected_grad = _loss_and_grad(ForCausalLMLoss, logits, labels, **kwargs)
    loss, grad = _loss_and_grad(causal_lm_loss, logits, labels, **kwargs)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-7)


def test_shift_labels_given_and_a_custom_ignore_index():
    logits = torch.randn(2, 9, VOCAB)
    shift_labels = _labels(2, 9, ignored=0.3, seed=1).masked_fill(_labels(2, 9, seed=2) < 5, 7)
    for kwargs in ({"shift_labels": shift_labels}, {"ignore_index": 7}):
        expected = _loss_and_grad(ForCausalLMLoss, logits, _labels(2, 9, seed=3), **kwargs)
        got = _loss_and_grad(causal_lm_loss, logits, _labels(2, 9, seed=3), **kwargs)
        for ours, theirs in zip(got, expected):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


def test_bf16_logits_give_the_float32_loss_and_a_bf16_gradient():
    logits = (torch.randn(2, 8, VOCAB) * 3).bfloat16()
    labels = _labels(2, 8)
    expected_loss, expected_grad = _loss_and_grad(ForCausalLMLoss, logits, labels)
    loss, grad = _loss_and_grad(causal_lm_loss, logits, labels)
    assert loss.dtype == torch.float32 and grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss, expected_loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-2, atol=1e-3)  # both rounded to bf16 once


def test_no_counted_position_gives_nan_as_transformers_does():
    labels = torch.full((1, 5), -100)
    logits = torch.randn(1, 5, VOCAB)
    assert ForCausalLMLoss(logits, labels, vocab_size=VOCAB).isnan()
    assert causal_lm_loss(logits, labels, vocab_size=VOCAB).isnan()


def test_the_model_uses_it_and_a_loss_the_user_sets_wins(tiny_config):
    model = GPTCustomForCausalLM(tiny_config).eval()
    assert model.loss_function is causal_lm_loss
    input_ids = torch.randint(0, 99, (2, 10))
    with torch.no_grad():
        output = model(input_ids, labels=input_ids)
        expected = ForCausalLMLoss(output.logits, input_ids, vocab_size=99)
    torch.testing.assert_close(output.loss, expected, rtol=1e-6, atol=1e-6)
    model.loss_function = lambda logits, labels, **kwargs: logits.sum() * 0 + 42.0
    with torch.no_grad():
        assert model(input_ids, labels=input_ids).loss.item() == 42.0
