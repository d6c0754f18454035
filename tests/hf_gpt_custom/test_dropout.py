"""dropout.py: the CPU dropout mask drawn as `rand >= p`, checked against dropout's definition (keep with probability
1 - p, scale by 1 / (1 - p), the same mask in the gradient), against torch's sdpa for the mask conventions, and
through the model (sdpa vs eager with the same seed; gradient checkpointing's recomputation is in test_modeling.py)."""

import pytest
import torch
import torch.nn.functional as F

from hf_gpt_custom import GPTCustomForCausalLM
from hf_gpt_custom.dropout import GPTCustomDropout, apply_dropout, sdpa_mask_as_additive


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_kept_elements_are_scaled_and_the_rest_are_zero_at_rate_p(p):
    torch.manual_seed(0)
    x = torch.rand(1000, 1000) + 0.5  # no zeros of its own: a zero in the output is a dropped element
    out = apply_dropout(x, p)
    kept = out != 0
    dropped_fraction = 1 - kept.double().mean().item()
    assert abs(dropped_fraction - p) < 5 * (p * (1 - p) / x.numel()) ** 0.5  # five binomial standard deviations
    torch.testing.assert_close(out[kept], x[kept] / (1 - p), rtol=1e-6, atol=0)
    # Dropout keeps the expectation: E[out] = x, measured on a constant input, with the same tolerance as F.dropout.
    ones = torch.ones(1000, 1000)
    ours, native = apply_dropout(ones, p), F.dropout(ones, p, training=True)
    assert abs(ours.mean().item() - 1) < 5 * (p / (1 - p) / ones.numel()) ** 0.5
    assert abs(ours.var().item() - native.var().item()) < 0.02 * native.var().item()  # p / (1 - p), both


def test_the_gradient_is_the_same_mask_and_scale():
    torch.manual_seed(1)
    x = (torch.rand(64, 300) + 0.5).requires_grad_()
    out = apply_dropout(x, 0.3)
    upstream = torch.randn_like(out)
    out.backward(upstream)
    expected = upstream * (out.detach() != 0) / 0.7
    torch.testing.assert_close(x.grad, expected, rtol=1e-6, atol=0)


def test_the_same_seed_draws_the_same_mask():
    x = torch.randn(32, 32)
    torch.manual_seed(7)
    first = apply_dropout(x, 0.2)
    torch.manual_seed(7)
    torch.testing.assert_close(apply_dropout(x, 0.2), first, rtol=0, atol=0)


def test_eval_mode_and_p_zero_return_the_input_untouched():
    x = torch.randn(4, 5)
    assert apply_dropout(x, 0.5, training=False) is x
    assert apply_dropout(x, 0.0) is x
    module = GPTCustomDropout(0.5).eval()
    assert module(x) is x and isinstance(module, torch.nn.Dropout)


@pytest.mark.parametrize("q_len, kv_len, masked", [(6, 6, "none"), (1, 6, "none"), (6, 6, "bool"), (6, 6, "float")])
def test_sdpa_masks_become_the_additive_mask_that_gives_sdpas_result(q_len, kv_len, masked):
    """For each convention transformers uses with sdpa: no mask (causal when q_len > 1, none for one decoding query),
    a boolean mask (True = attend), an additive float mask."""
    torch.manual_seed(2)
    query, key, value = (torch.randn(2, 3, n, 8) for n in (q_len, kv_len, kv_len))
    if masked == "none":
        mask = None
    else:
        allowed = torch.rand(2, 1, q_len, kv_len) > 0.3
        allowed[..., 0] = True  # every query sees at least one key
        mask = allowed if masked == "bool" else torch.where(allowed, 0.0, torch.finfo(torch.float32).min)
    expected = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=mask is None and q_len > 1)
    additive = sdpa_mask_as_additive(mask, q_len, kv_len, torch.float32, query.device)
    scores = query @ key.transpose(-1, -2) / 8**0.5
    if additive is not None:
        scores = scores + additive
    torch.testing.assert_close(scores.softmax(-1) @ value, expected, rtol=1e-5, atol=1e-6)


def _train_mode_logits(config, attn_implementation, input_ids, attention_mask=None, seed=0):
    torch.manual_seed(0)
    model = GPTCustomForCausalLM(config).train()
    model.set_attn_implementation(attn_implementation)
    torch.manual_seed(seed)
    return model(input_ids, attention_mask=attention_mask).logits


def test_sdpa_with_dropout_on_cpu_draws_the_masks_eager_draws(tiny_config):
    """Under sdpa, training with attention dropout runs eager's arithmetic with our mask: with one seed both
    implementations give the same logits, with and without a padding mask; a second seed gives others."""
    tiny_config.embd_pdrop = tiny_config.resid_pdrop = tiny_config.attn_pdrop = 0.2
    input_ids = torch.randint(0, 99, (2, 12))
    padding = torch.ones(2, 12, dtype=torch.long)
    padding[1, :4] = 0
    for attention_mask in (None, padding):
        eager = _train_mode_logits(tiny_config, "eager", input_ids, attention_mask)
        sdpa = _train_mode_logits(tiny_config, "sdpa", input_ids, attention_mask)
        torch.testing.assert_close(sdpa, eager, rtol=1e-5, atol=1e-5)
    other_seed = _train_mode_logits(tiny_config, "sdpa", input_ids, seed=1)
    assert (other_seed - _train_mode_logits(tiny_config, "sdpa", input_ids)).abs().max() > 1e-3



def test_other_devices_use_f_dropout(monkeypatch):
    """Off the CPU (here the meta device, which needs no GPU) the mask is F.dropout's: CUDA's is one fused kernel."""
    calls = []
    monkeypatch.setattr(F, "dropout", lambda x, p, training: calls.append((x.device.type, p)) or x)
    apply_dropout(torch.empty(4, 4, device="meta"), 0.3)
    assert calls == [("meta", 0.3)]
    apply_dropout(torch.ones(4, 4), 0.3)  # CPU: ours, F.dropout not called
    assert calls == [("meta", 0.3)]
