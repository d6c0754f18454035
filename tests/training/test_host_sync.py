"""The training loop reads nothing back from the device inside a step: loss, gradient norm and token counts stay on
it until the loop logs (every log_interval steps), as a GPU needs to stay busy. Counted on the CPU, where the same
code runs, with a dispatch mode that sees every scalar read (`aten::_local_scalar_dense`: .item(), float(t),
int(t), bool(t)). The model here is a stub whose forward reads nothing back, so only what the loop adds is counted
(the model's own forward is checked by the model tests)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import hf_gpt_custom.training.loop as loop_module
import hf_gpt_custom.training.train as train_module
import hf_gpt_custom.training.workload as workload_module

SCALAR_READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default,
                torch.ops.aten.is_nonzero.default}


def _in_the_data_loader() -> bool:
    """torch's DataLoader draws each epoch's base seed from its CPU generator with .item(): a host tensor, never a
    device read, so it is not counted."""
    import traceback

    return any("torch/utils/data/" in frame.filename for frame in traceback.extract_stack())


class CountScalarReads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in SCALAR_READS and not _in_the_data_loader():
            self.count += 1
        return func(*args, **(kwargs or {}))


def _stub_model_class():
    from hf_gpt_custom import GPTCustomForCausalLM

    class EmbeddingOnlyLM(GPTCustomForCausalLM):
        """Embedding -> tied head, loss by F.cross_entropy: a forward that reads nothing back."""

        def forward(self, input_ids=None, labels=None, **kwargs):
            from transformers.modeling_outputs import CausalLMOutput

            logits = self.lm_head(self.transformer.wte(input_ids))
            loss = None
            if labels is not None:
                loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1))
            return CausalLMOutput(loss=loss, logits=logits)

    return EmbeddingOnlyLM


@pytest.fixture
def counted_steps(make_config, monkeypatch):
    """Run a short training with the stub model; return (scalar reads inside each optimizer step, inside each
    flush of the log window, the run folder)."""
    stub_class = _stub_model_class()
    real_load_model = workload_module._load_model

    def load_stub(config, tokenizer):
        model = real_load_model(config, tokenizer)
        return stub_class(model.config)

    monkeypatch.setattr(workload_module, "_load_model", load_stub)
    counter = CountScalarReads()
    per_step, per_flush = [], []

    def counted(function, into):
        def wrapper(*args, **kwargs):
            before = counter.count
            try:
                return function(*args, **kwargs)
            finally:
                into.append(counter.count - before)
        return wrapper

    monkeypatch.setattr(loop_module, "_optimizer_step", counted(loop_module._optimizer_step, per_step))
    monkeypatch.setattr(loop_module, "_flush", counted(loop_module._flush, per_flush))

    def run(*overrides):
        config = make_config("max_steps=7", "log_interval=3", "eval_interval=100", "warmup_steps=0",
                             "gradient_accumulation_steps=2", *overrides)
        with counter:
            run_dir = train_module.train(config)
        return per_step, per_flush, run_dir

    return run


def test_no_step_reads_a_value_back_from_the_device(counted_steps):
    per_step, per_flush, run_dir = counted_steps()
    assert per_step == [0] * 7
    # flushes after the first step (timed alone), at steps 3 and 6, and at the end (7): each step logged once
    assert len(per_flush) == 4
    steps = [json.loads(line)["step"] for line in (run_dir / "run_log.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "train"]
    assert steps == list(range(1, 8))


def test_the_count_sees_a_read_back_in_a_step(counted_steps, monkeypatch):
    """The counter is not blind: a workload that reads its token count back (int(mask.sum()), as fine-tuning once
    did) shows one read per micro-batch."""
    real_count = workload_module.LanguageModelling.count_tokens
    monkeypatch.setattr(workload_module.LanguageModelling, "count_tokens",
                        lambda self, batch: int(torch.ones_like(batch["input_ids"]).sum()) or real_count(self, batch))
    per_step, _, _ = counted_steps()
    assert per_step == [2] * 7  # gradient_accumulation_steps=2


def test_a_step_without_fused_optimizer_is_checked_on_the_host(counted_steps, monkeypatch):
    """Where the optimizer cannot skip an update on the device (not fused), each step is checked on the host before
    its update, one read per step: slower, never wrong."""
    real_build = train_module.build_optimizer

    def unfused(model, config):
        optimizer = real_build(model, config)
        return torch.optim.AdamW(optimizer.param_groups, lr=config.learning_rate, fused=False)

    monkeypatch.setattr(train_module, "build_optimizer", unfused)
    per_step, _, _ = counted_steps()
    assert per_step == [1] * 7
