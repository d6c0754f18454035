"""The speed paths give the plain path's numbers: static-cache and compiled decoding, compiled training, autocast.

Speed itself is measured by benchmarks/ (python -m benchmarks.run_all), never asserted here.
"""

import pytest
import torch

from tests.helpers import make_gpt2_pair

GREEDY = dict(do_sample=False, max_new_tokens=10, min_new_tokens=10, pad_token_id=0)


@pytest.fixture
def pair():
    return make_gpt2_pair("sdpa", seed=5)


@pytest.mark.parametrize("batch", [1, 3])
def test_static_cache_decoding_gives_the_tokens_of_transformers_gpt2(pair, batch):
    """A static cache (what generate compiles on a GPU) decodes GPT-2's tokens; on the CPU it runs eagerly."""
    ours, reference = pair
    prompt = torch.randint(0, 98, (batch, 7))
    static = ours.generate(prompt, cache_implementation="static", **GREEDY)
    assert static.tolist() == reference.generate(prompt, **GREEDY).tolist()


@pytest.mark.slow
def test_compiled_static_cache_decoding_gives_the_tokens_of_transformers_gpt2(pair):
    """generate() with a static cache and transformers' compile config (CUDA's default, forced here on the CPU)."""
    from transformers import CompileConfig

    ours, reference = pair
    prompt = torch.randint(0, 98, (2, 7))
    compile_config = CompileConfig(fullgraph=True)
    compile_config._compile_all_devices = True  # transformers compiles only on CUDA unless told
    with torch.inference_mode():
        expected = reference.generate(prompt, **GREEDY).tolist()
        for _ in range(2):  # the second call reuses the compiled forward
            tokens = ours.generate(prompt, cache_implementation="static", compile_config=compile_config, **GREEDY)
            assert tokens.tolist() == expected


def _train_losses(model, batches, compile_model=False):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    forward = torch.compile(model) if compile_model else model
    model.train()
    losses = []
    for input_ids in batches:
        loss = forward(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


@pytest.mark.slow
def test_compiled_training_follows_the_eager_loss_trajectory():
    batches = [torch.randint(0, 98, (2, 16)) for _ in range(5)]
    eager, _ = make_gpt2_pair("sdpa", seed=1, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    compiled, _ = make_gpt2_pair("sdpa", seed=1, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.testing.assert_close(
        _train_losses(compiled, batches, compile_model=True), _train_losses(eager, batches), rtol=0, atol=1e-4
    )


def test_training_with_fused_adamw_follows_transformers_gpt2():
    """The benchmark's optimizer (fused AdamW) on both models: 8 steps, same losses within 1e-4."""
    batches = [torch.randint(0, 98, (2, 16)) for _ in range(8)]
    no_dropout = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ours, reference = make_gpt2_pair("sdpa", seed=2, **no_dropout)
    torch.testing.assert_close(_train_losses(ours, batches), _train_losses(reference, batches), rtol=0, atol=1e-4)


def test_bf16_autocast_gives_fp32_loss_close_to_the_fp32_one(pair):
    """Under autocast (Accelerate's mixed_precision="bf16") matmuls run in bf16 but the loss stays fp32."""
    ours, _ = pair
    input_ids = torch.randint(0, 98, (2, 16))
    ours.train()
    fp32_loss = ours(input_ids=input_ids, labels=input_ids).loss
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output = ours(input_ids=input_ids, labels=input_ids)
    assert output.loss.dtype == torch.float32 and output.logits.dtype == torch.bfloat16
    output.loss.backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in ours.parameters())
    torch.testing.assert_close(output.loss, fp32_loss, rtol=0.02, atol=0.0)
