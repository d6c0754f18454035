"""The training recipe against independent expectations, not against the code itself: the learning rate of every
step from the warmup + cosine formula, the first update from AdamW's formula with the clipped gradient computed
here, the weight-decay groups from the GPT-2 rule, and the data order epoch by epoch from the batch fingerprints.

Each test trains a 2-layer, 32-wide model for a few steps on a few thousand characters of real Shakespeare.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from hf_gpt_custom import GPTCustomForCausalLM
from tests.helpers import (
    batch_digest, packed_train_blocks, save_dropout_free_model, train_records, write_first_speeches,
)
from hf_gpt_custom.training.train import build_optimizer, train


@pytest.fixture
def small_run(make_config, tmp_path, shakespeare_path):
    """make_config for a run over a small corpus (its own packed-data cache)."""
    corpus = write_first_speeches(tmp_path / "speeches.txt", shakespeare_path, n_speeches=20)

    def make(*overrides: str, run_name: str = "small", **kwargs):
        return make_config(f"dataset={corpus}", f"data_cache_dir={tmp_path / 'cache'}", "eval_batches=1",
                           *overrides, run_name=run_name, **kwargs)

    return make


def cosine_with_warmup_lr(peak: float, completed_steps: int, warmup_steps: int, max_steps: int, min_lr_ratio: float):
    """Linear warmup from 0, then half a cosine from `peak` down to `peak * min_lr_ratio` at `max_steps`
    (the schedule README names: transformers' cosine-with-min-lr, as in the GPT-3 paper's recipe)."""
    if completed_steps < warmup_steps:
        return peak * completed_steps / warmup_steps
    progress = (completed_steps - warmup_steps) / (max_steps - warmup_steps)
    return peak * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def test_logged_lr_follows_linear_warmup_then_cosine_down_to_min_lr_ratio(small_run):
    peak, warmup, steps, floor = 3e-3, 3, 12, 0.25
    config = small_run(f"learning_rate={peak}", f"warmup_steps={warmup}", f"max_steps={steps}",
                       f"min_lr_ratio={floor}", "eval_interval=100")
    records = train_records(train(config))
    # The lr logged with step k is the rate update k applied: the schedule after k - 1 optimizer steps (it was the
    # rate of update k + 1, so the log showed the peak a step early and a floor no update used). Update 1 warms up
    # from 0; the peak is reached at update 4; the floor is where the schedule ends, after the last update.
    expected = [cosine_with_warmup_lr(peak, k - 1, warmup, steps, floor) for k in range(1, steps + 1)]
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    assert [r["lr"] for r in records] == pytest.approx(expected, rel=1e-9, abs=0)
    assert records[0]["lr"] == 0.0 and records[warmup]["lr"] == pytest.approx(peak)
    assert records[-1]["lr"] > peak * floor


def test_first_update_is_adamw_on_the_gradient_clipped_to_grad_clip(small_run, tmp_path):
    """AdamW's first step is p -= lr * g / (|g| + eps) whatever the scale of g, so with the usual eps clipping would
    be invisible; eps = 1 makes the update proportional to the clipped gradient, which this test computes itself."""
    lr, eps, clip = 1.0, 1.0, 1e-3
    init = save_dropout_free_model(tmp_path / "init", small_run().tokenizer)
    config = small_run(f"init_from={init}", "batch_size=1", "max_steps=1", "warmup_steps=0", "weight_decay=0",
                       f"learning_rate={lr}", f"adam_eps={eps}", f"grad_clip={clip}", with_model_section=False)
    run_dir = train(config)
    (record,) = train_records(run_dir)

    blocks = packed_train_blocks(config)
    (block,) = [row for row in blocks if batch_digest(row[None]) == record["data_digests"][0][0]]
    model = GPTCustomForCausalLM.from_pretrained(init)
    logits = model(input_ids=block[None]).logits[0]
    F.cross_entropy(logits[:-1], block[1:]).backward()  # next-token loss, mean over the block's 31 predictions
    named = dict(model.named_parameters())  # the tied head appears once, as wte
    grad_norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in named.values())).item()
    assert record["grad_norm"] == pytest.approx(grad_norm, rel=1e-4)  # logged before clipping
    assert grad_norm > 100 * clip  # so clipping changes the update a lot

    scale = min(1.0, clip / (grad_norm + 1e-6))  # torch.nn.utils.clip_grad_norm_
    trained = dict(GPTCustomForCausalLM.from_pretrained(run_dir / "final").named_parameters())
    for name, parameter in named.items():
        clipped = parameter.grad * scale
        expected_update = -lr * clipped / (clipped.abs() + eps)
        update = trained[name].detach() - parameter.detach()
        torch.testing.assert_close(update, expected_update, rtol=0, atol=lr * clip * 1e-3, msg=name)


def test_weight_decay_applies_to_every_2d_weight_and_to_no_bias_or_layer_norm(small_run, tiny_config):
    config = small_run("weight_decay=0.1")
    model = GPTCustomForCausalLM(tiny_config)
    optimizer = build_optimizer(model, config)
    # GPT-2/nanoGPT rule, by name: matmul weights and the embeddings decay; biases and LayerNorm parameters do not.
    decayed = {name for name, _ in model.named_parameters() if name.endswith(".weight") and ".ln_" not in name}
    assert decayed == {"transformer.wte.weight", "transformer.wpe.weight"} | {
        f"transformer.h.{i}.{layer}.weight" for i in range(2)
        for layer in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
    }
    names = {id(p): name for name, p in model.named_parameters()}
    decay_of = {}
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            assert names[id(parameter)] not in decay_of, f"{names[id(parameter)]} is in two groups"
            decay_of[names[id(parameter)]] = group["weight_decay"]
    assert set(decay_of) == set(names.values())  # every trainable parameter, the tied head once
    assert {name for name, decay in decay_of.items() if decay == 0.1} == decayed
    assert {name for name, decay in decay_of.items() if decay == 0.0} == set(names.values()) - decayed


def test_the_optimizer_steps_as_adamw_built_by_hand_from_the_config(small_run, tiny_config):
    """adam_beta1, adam_beta2 and adam_eps reach the optimizer as named: swapped betas trained every run with another
    momentum and second-moment horizon, and no test read them (the mutsweep hunt). Reference: torch's own AdamW
    built from the config's numbers on a copy of the model, three steps on the same gradients, bit for bit."""
    import copy

    config = small_run("weight_decay=0.1", "adam_beta1=0.8", "adam_beta2=0.97", "adam_eps=1e-6", "learning_rate=0.01")
    model = GPTCustomForCausalLM(tiny_config)
    reference_model = copy.deepcopy(model)
    optimizer = build_optimizer(model, config)
    params = list(reference_model.parameters())
    reference = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=0.01, betas=(0.8, 0.97), eps=1e-6, fused=True)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        for ours, theirs in zip(model.parameters(), reference_model.parameters()):
            ours.grad = torch.randn(ours.shape, generator=generator)
            theirs.grad = ours.grad.clone()
        optimizer.step()
        reference.step()
    for (name, ours), theirs in zip(model.named_parameters(), reference_model.parameters()):
        assert torch.equal(ours, theirs), name


def test_every_epoch_is_a_fresh_seeded_permutation_of_the_training_blocks(small_run):
    blocks = packed_train_blocks(small_run())
    position = {batch_digest(row[None]): i for i, row in enumerate(blocks)}
    n = len(blocks)
    assert len(position) == n >= 10  # distinct blocks, enough of them for orders to differ

    def block_order(run_name: str) -> list[int]:
        config = small_run("batch_size=1", f"max_steps={2 * n + 3}", "warmup_steps=0", "eval_interval=1000",
                           run_name=run_name)
        return [position[r["data_digests"][0][0]] for r in train_records(train(config))]

    order = block_order("first")
    epochs = [order[:n], order[n:2 * n]]
    assert all(sorted(epoch) == list(range(n)) for epoch in epochs)  # each epoch: every block exactly once
    assert epochs[0] != list(range(n))  # shuffled, not the packed order
    assert epochs[1] != epochs[0]  # reshuffled for the second epoch
    assert order[2 * n:] != epochs[1][:3]  # and again for the third
    assert block_order("again") == order  # the order is a function of the seed alone


@pytest.mark.parametrize("variant, lookups", [
    ({}, "positions"),  # GPT-2: the learned position table is a lookup
    ({"position_embedding_type": "rope", "tie_word_embeddings": False}, "tokens"),  # no table; untied wte is a lookup
    ({"position_embedding_type": "sinusoidal"}, "none"),  # no table; the tied wte is also the head's matmul
])
def test_flops_per_token_counts_only_matmul_weights(variant, lookups):
    """6·N + 12·L·T·d (PaLM appendix B), N without the lookups, counted by hand from the layer shapes."""
    from hf_gpt_custom import GPTCustomConfig
    from hf_gpt_custom.training.train import flops_per_token

    d, layers, vocab, positions, seq = 32, 2, 100, 16, 8
    config = GPTCustomConfig(n_layer=layers, n_embd=d, n_head=2, vocab_size=vocab, n_positions=positions, **variant)
    per_block = (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d) + 4 * d  # attn, mlp, 2 LN
    head = 0 if config.tie_word_embeddings else vocab * d
    table = positions * d if lookups == "positions" else 0
    n_params = vocab * d + table + layers * per_block + 2 * d + head
    n_matmul = n_params - {"positions": positions * d, "tokens": vocab * d, "none": 0}[lookups]
    assert flops_per_token(config, n_params, seq) == 6 * n_matmul + 12 * layers * seq * d


def test_an_update_fp16s_gradient_scaler_skips_holds_the_schedule_and_is_logged(small_run, monkeypatch):
    """Under fp16 on a GPU, Accelerate's GradScaler skips an update whose gradients overflowed and the run goes on.
    The schedule then holds, as under Accelerate's scheduler and transformers' Trainer (it advanced, so every later
    update used the next step's rate), and the step is logged as skipped (nothing said so). The scaler is torch's,
    here on the CPU in fp32; an inf gradient at update 5 makes it overflow."""
    import hf_gpt_custom.training.train as train_module
    import hf_gpt_custom.training.workload as workload

    make_accelerator, optimizers = train_module._make_accelerator, []

    def with_a_gradient_scaler(*args):
        accelerator = make_accelerator(*args)
        accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)  # as fp16 builds one on CUDA
        # accelerate unscales only under fp16 autocast: here its scaler is added after the fact
        accelerator.unscale_gradients = lambda optimizer=None: [
            accelerator.scaler.unscale_(getattr(o, "optimizer", o)) for o in optimizers]
        return accelerator

    build_optimizer_ = train_module.build_optimizer
    monkeypatch.setattr(train_module, "_make_accelerator", with_a_gradient_scaler)
    monkeypatch.setattr(train_module, "build_optimizer",
                        lambda *args: optimizers.append(build_optimizer_(*args)) or optimizers[-1])
    loss, calls, overflow_at = workload.LanguageModelling.loss, [], 5

    def overflowing_once(self, model, batch):
        value = loss(self, model, batch)
        calls.append(1)
        if len(calls) == overflow_at:
            value.register_hook(lambda gradient: gradient * float("inf"))
        return value

    monkeypatch.setattr(workload.LanguageModelling, "loss", overflowing_once)
    peak, warmup, steps, floor = 3e-3, 3, 10, 0.25
    config = small_run(f"learning_rate={peak}", f"warmup_steps={warmup}", f"max_steps={steps}",
                       f"min_lr_ratio={floor}", "eval_interval=100", "log_interval=4")
    run_dir = train(config)
    records = train_records(run_dir)
    assert [r["step"] for r in records] == list(range(1, steps + 1))  # the run went on
    assert [r["step"] for r in records if r.get("update_skipped")] == [overflow_at]
    # update k applies the schedule after the updates before it that were applied: one fewer from update 6 on
    applied_before = [k - 1 if k <= overflow_at else k - 2 for k in range(1, steps + 1)]
    expected = [cosine_with_warmup_lr(peak, n, warmup, steps, floor) for n in applied_before]
    assert [r["lr"] for r in records] == pytest.approx(expected, rel=1e-9, abs=0)
    (optimizer,) = optimizers
    assert {float(state["step"]) for state in optimizer.state.values()} == {steps - 1.0}  # the scaler's skip
    import json
    assert json.loads((run_dir / "training_summary.json").read_text())["skipped_updates"] == 1


@pytest.mark.parametrize("head_dim", [None, 64, 8])
def test_flops_per_token_attention_term_uses_the_attention_width_not_n_embd(head_dim):
    """PaLM appendix B (and nanoGPT's estimate_mfu) count attention as 12·L·H·Q·T: H heads of width Q. With
    `head_dim` set ("any width", docs/model.md) n_head·head_dim is not n_embd; torch's FlopCounterMode over a real
    forward + backward is the independent reference for the whole count."""
    from torch.utils.flop_counter import FlopCounterMode

    from hf_gpt_custom import GPTCustomConfig
    from hf_gpt_custom.training.train import flops_per_token

    seq, batch = 128, 2
    config = GPTCustomConfig(n_layer=2, n_embd=64, n_head=4, head_dim=head_dim, vocab_size=128, n_positions=seq)
    model = GPTCustomForCausalLM(config)
    n_params = model.num_parameters()
    n_matmul = n_params - seq * config.n_embd  # the learned position table is a lookup
    palm = 6 * n_matmul + 12 * config.n_layer * seq * config.n_head * config.head_dim
    assert flops_per_token(config, n_params, seq) == palm

    ids = torch.randint(0, 128, (batch, seq))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    assert flops_per_token(config, n_params, seq) == pytest.approx(counter.get_total_flops() / (batch * seq), rel=0.02)


def test_flops_per_token_of_a_fine_tuned_head_without_the_lm_loss_leaves_the_lm_head_out():
    """Fine-tuning MFU charged every token the tied LM head's 6·V·d, though with lm_loss_weight 0 the head never
    computes LM logits (1.84x too high on a tiny COPA fine-tune). torch's FlopCounterMode over the sequence-classification
    head's real forward + backward is the reference; the causal LM's count is far from it."""
    from torch.utils.flop_counter import FlopCounterMode

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForSequenceClassification
    from hf_gpt_custom.training.train import flops_per_token

    seq, batch = 96, 2
    config = GPTCustomConfig(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=seq, num_labels=2,
                             pad_token_id=0, position_embedding_type="rope")
    model = GPTCustomForSequenceClassification(config)
    n_params = model.num_parameters()
    by_hand = 6 * (n_params - 512 * 64) + 12 * 2 * seq * 64  # no position table (RoPE), no LM head matmul
    assert flops_per_token(config, n_params, seq, lm_head=False) == pytest.approx(by_hand, abs=6 * 64 * 2 + 6 * 2)
    ids = torch.randint(1, 512, (batch, seq))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=torch.tensor([0, 1]), lm_loss_weight=0.0).loss.backward()
    measured = counter.get_total_flops() / (batch * seq)
    assert flops_per_token(config, n_params, seq, lm_head=False) == pytest.approx(measured, rel=0.03)
    assert flops_per_token(config, n_params, seq) > 1.2 * measured  # the head counted: 1.28x



def test_flops_per_token_of_an_untied_fine_tuned_body_counts_its_matmuls_once():
    """An untied body's input embedding is a lookup, already left out; the head's V·d was taken out a second time
    when lm_loss_weight is 0 (a converted Llama's fine-tune: 0.75x torch's count on a tiny model). Reference:
    torch's FlopCounterMode over the classification head's forward + backward."""
    from torch.utils.flop_counter import FlopCounterMode

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForSequenceClassification
    from hf_gpt_custom.training.train import flops_per_token

    seq, batch = 96, 2
    config = GPTCustomConfig(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=seq, num_labels=2,
                             pad_token_id=0, position_embedding_type="rope", tie_word_embeddings=False)
    model = GPTCustomForSequenceClassification(config)
    ids = torch.randint(1, 512, (batch, seq))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=torch.tensor([0, 1]), lm_loss_weight=0.0).loss.backward()
    measured = counter.get_total_flops() / (batch * seq)
    assert flops_per_token(config, model.num_parameters(), seq, lm_head=False) == pytest.approx(measured, rel=0.03)
