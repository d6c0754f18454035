"""What the log says under gradient accumulation (the shipped 124M config accumulates 32 micro-batches per step).

The expectation is computed here from the weights and the batches alone: a step's logged loss is the mean
next-token loss over all of its micro-batches, evaluated with the weights that step started from (the previous
step's checkpoint), and tokens_seen counts batch_size x accumulation x block_size tokens per optimizer step.
The logged MFU is checked against nanoGPT's estimate from the model's own parameter count.
"""

from __future__ import annotations

import itertools
import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from hf_gpt_custom import GPTCustomForCausalLM
from tests.helpers import (
    batch_digest, packed_train_blocks, save_dropout_free_model, train_records, write_first_speeches,
)
from hf_gpt_custom.training.train import train

BATCH_SIZE, ACCUMULATION, BLOCK_SIZE, STEPS = 2, 4, 32, 3
PEAK_FLOPS = 1e12


def _mean_token_loss(model, batches: list[torch.Tensor]) -> float:
    """Mean next-token cross-entropy over every predicted token of every micro-batch."""
    ids = torch.cat(batches)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1)).item()


def _weights_before_step(step: int, init_dir, run_dir) -> GPTCustomForCausalLM:
    model = GPTCustomForCausalLM.from_pretrained(init_dir).eval()
    if step > 1:  # a checkpoint every step: step_k holds the weights after k updates
        state = load_file(run_dir / "checkpoints" / f"step_{step - 1:06d}" / "model.safetensors")
        missing, unexpected = model.load_state_dict(state, strict=False)
        assert set(missing) <= {"lm_head.weight"} and not unexpected, (missing, unexpected)
        model.tie_weights()
    return model


def test_logged_loss_and_tokens_seen_count_every_micro_batch(make_config, tmp_path, shakespeare_path, capfd):
    corpus = write_first_speeches(tmp_path / "speeches.txt", shakespeare_path)
    base = make_config(f"dataset={corpus}", f"data_cache_dir={tmp_path / 'cache'}")
    init = save_dropout_free_model(tmp_path / "init", base.tokenizer)
    config = make_config(
        f"dataset={corpus}", f"data_cache_dir={tmp_path / 'cache'}", f"init_from={init}",
        f"batch_size={BATCH_SIZE}", f"gradient_accumulation_steps={ACCUMULATION}", f"block_size={BLOCK_SIZE}",
        f"max_steps={STEPS}", "warmup_steps=0", "checkpoint_interval=1", f"keep_checkpoints={STEPS + 1}",
        "eval_interval=100", "eval_batches=1", with_model_section=False,
    )
    run_dir = train(config)
    records = train_records(run_dir)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    # packed blocks: every step holds exactly this many (fine-tuning's padded rows say "at most")
    assert f"; {BATCH_SIZE * ACCUMULATION * BLOCK_SIZE} tokens per optimizer step; " in capfd.readouterr().out

    blocks = packed_train_blocks(config)
    batch_by_digest = {
        batch_digest(blocks[list(rows)]): blocks[list(rows)]
        for rows in itertools.permutations(range(len(blocks)), BATCH_SIZE)
    }
    tokens_per_step = BATCH_SIZE * ACCUMULATION * BLOCK_SIZE  # one process
    for record in records:
        (digests,) = record["data_digests"]
        assert len(digests) == ACCUMULATION
        batches = [batch_by_digest[digest] for digest in digests]
        model = _weights_before_step(record["step"], init, run_dir)
        assert record["loss"] == pytest.approx(_mean_token_loss(model, batches), rel=1e-5), record["step"]
        assert record["tokens_seen"] == record["step"] * tokens_per_step
    summary = json.loads((run_dir / "training_summary.json").read_text())
    assert summary["tokens_seen"] == STEPS * tokens_per_step


def test_logged_mfu_is_nanogpts_estimate(make_config, tmp_path, shakespeare_path):
    """MFU = (6N + 12·L·T·d) · tokens/s / peak FLOP/s, N = parameters without the position table (nanoGPT's
    estimate_mfu, from the PaLM paper's appendix B)."""
    corpus = write_first_speeches(tmp_path / "speeches.txt", shakespeare_path)
    config = make_config(f"dataset={corpus}", f"data_cache_dir={tmp_path / 'cache'}", "max_steps=2",
                         f"peak_flops={PEAK_FLOPS}", "eval_batches=1")
    run_dir = train(config)
    model = GPTCustomForCausalLM.from_pretrained(run_dir / "final")
    d, layers = model.config.n_embd, model.config.n_layer
    n = sum(p.numel() for p in model.parameters()) - model.config.n_positions * d  # tied head counted once
    flops_per_token = 6 * n + 12 * layers * config.block_size * d
    for record in train_records(run_dir):
        assert record["mfu"] == pytest.approx(flops_per_token * record["tokens_per_s"] / PEAK_FLOPS, rel=1e-9)
        assert record["peak_flops"] == PEAK_FLOPS  # the denominator, kept for a rerun that states another peak
