"""Every folder a run writes is the same whatever wraps the model while it trains: final/ maps the Auto classes to
modeling_gpt_custom.py and loads as remote code where the package is absent, and checkpoints hold the weights under
the model's own names (they load as init_from). FSDP2 swaps the model's class for a generated FSDP<name> subclass
(stood in for on the CPU with torch's own function that does it), torch.compile wraps it in an OptimizedModule,
DDP in a DistributedDataParallel (two CPU ranks: tests/training/test_multiprocess.py). The real FSDP and DDP
configs run on a GPU in the `gpu` tests at the end."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from types import SimpleNamespace

import pytest
import torch

from hf_gpt_custom.training.config import REPO_ROOT
from hf_gpt_custom.training.train import train

STEPS = ("max_steps=2", "warmup_steps=1", "eval_interval=2", "eval_batches=1", "checkpoint_interval=1",
         "keep_checkpoints=3")


def test_an_fsdp2_class_swap_does_not_reach_the_saved_folder(make_config, monkeypatch,
                                                               assert_plain_model_folders):
    """Under the FSDP accelerate config final/config.json mapped AutoModelForCausalLM to
    `_fsdp_init.FSDPGPTCustomForCausalLM` and the folder held torch's _fsdp_*.py files instead of ours."""
    from accelerate import Accelerator
    from torch.distributed.fsdp._fully_shard._fsdp_init import _apply_to_module
    from torch.distributed.fsdp._fully_shard._fully_shard import FSDPModule, _unimplemented_deepcopy

    real_prepare = Accelerator.prepare

    def prepare_as_fsdp2_does(self, *objects, **kwargs):
        prepared = real_prepare(self, *objects, **kwargs)
        for item in prepared if isinstance(prepared, tuple) else (prepared,):
            if isinstance(item, torch.nn.Module):  # what fully_shard does to the module it shards
                _apply_to_module((item,), {}, FSDPModule, "FSDP", _unimplemented_deepcopy)
                assert type(item).__name__ == "FSDPGPTCustomForCausalLM"
        return prepared

    monkeypatch.setattr(Accelerator, "prepare", prepare_as_fsdp2_does)
    run_dir = train(make_config(*STEPS))
    monkeypatch.undo()
    assert_plain_model_folders(run_dir)


@pytest.mark.slow  # dynamo traces the model: ~20 s on the shared 2-core machine (inductor's codegen is skipped)
def test_a_compiled_model_writes_the_same_folders_and_resumes(make_config, monkeypatch, assert_plain_model_folders):
    """torch.compile's OptimizedModule put "_orig_mod." before every name in the checkpoints, which then resumed
    only under compile and did not load as init_from. Dynamo's eager backend wraps the model exactly as the default
    one does, without minutes of C++ code generation on a CPU."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    run_dir = train(make_config(*STEPS, "compile=true"))
    assert_plain_model_folders(run_dir)
    # the same run resumed without compile continues from the compiled run's checkpoint
    shutil.rmtree(run_dir / "final")
    shutil.rmtree(run_dir / "checkpoints" / "step_000002")
    monkeypatch.undo()
    train(make_config(*STEPS, "compile=false"))
    assert (run_dir / "final" / "model.safetensors").is_file()


def test_the_update_gate_and_the_finite_weights_check_take_fsdp2s_dtensors(tiny_config):
    """Under the FSDP config on a GPU the first step failed inside the gate: FSDP2's parameters are DTensors, so
    clip_grad_norm_ returns the norm as a DTensor, which the gate's plain tensors could not take in; then the check
    before a checkpoint all-reduced a DTensor. Real FSDP2 (fully_shard) on one CPU rank; the fused AdamW skips or
    applies the update as the gate says."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.training.divergence import TrainingDivergedError, UpdateGate
    from hf_gpt_custom.training.loop import check_weights_finite

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = GPTCustomForCausalLM(tiny_config)
        for block in model.transformer.h:
            fully_shard(block)
        fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
        gate = UpdateGate(optimizer, torch.device("cpu"))
        assert gate.skips_on_device
        input_ids = torch.randint(0, tiny_config.vocab_size, (2, 8))
        for loss_scale, expect_update in ((1.0, True), (float("nan"), False)):
            optimizer.zero_grad()
            loss = model(input_ids, labels=input_ids).loss * loss_scale
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            assert isinstance(grad_norm, DTensor)
            diverged = gate.check(loss.detach().float(), grad_norm.detach().float())
            assert bool(diverged) is not expect_update
            before = model.transformer.wte.weight.full_tensor().clone()
            optimizer.step()
            changed = not torch.equal(model.transformer.wte.weight.full_tensor(), before)
            assert changed is expect_update
        # before each checkpoint: are the weights finite? (each process looks at its own shards)
        def all_reduce(tensor, reduction):  # what accelerator.reduce runs under a launcher
            dist.all_reduce(tensor)
            return tensor

        one_process = SimpleNamespace(reduce=all_reduce, num_processes=1, end_training=lambda: None)
        session = SimpleNamespace(accelerator=one_process, model=model, run_log=None, state=SimpleNamespace(step=1),
                                  end_training=one_process.end_training)
        check_weights_finite(session, "advice", None)
        with torch.no_grad():
            model.transformer.h[0].mlp.c_fc.weight.to_local()[0, 0] = float("nan")
        with pytest.raises(TrainingDivergedError, match="the weights stopped being finite"):
            check_weights_finite(session, "advice", None)
    finally:
        dist.destroy_process_group()


# --- on a GPU: the shipped FSDP and DDP accelerate configs, world size 1 ----------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("accelerate_config", ["fsdp.yaml", "multi_gpu_ddp.yaml"])
def test_the_shipped_fsdp_and_ddp_configs_train_and_write_plain_folders(accelerate_config, tmp_path,
                                                                        shakespeare_tokenizer_dir, shared_data_cache,
                                                                        assert_plain_model_folders):
    if shutil.which("accelerate") is None:
        pytest.fail("the accelerate launcher is not on PATH; install the project as README says")
    run_dir = tmp_path / "run"
    command = ["accelerate", "launch", "--config_file", f"training/configs/accelerate/{accelerate_config}",
               "--num_processes", "1", "--main_process_port", "29531", "-m", "hf_gpt_custom.cli", "train",
               "training/configs/smoke.yaml", f"out_dir={run_dir}", f"tokenizer={shakespeare_tokenizer_dir}",
               f"data_cache_dir={shared_data_cache}", "mixed_precision=bf16", "log_with=none", *STEPS]
    result = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, "TQDM_DISABLE": "1"}, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_plain_model_folders(run_dir)
    # the same command resumes from the last checkpoint under the same wrapper
    shutil.rmtree(run_dir / "final")
    shutil.rmtree(run_dir / "checkpoints" / "step_000002")
    result = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, "TQDM_DISABLE": "1"}, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed from" in result.stdout + result.stderr and (run_dir / "final" / "model.safetensors").is_file()


def test_a_compiled_models_checkpoint_resumes_under_compile(tmp_path):
    """The load hook must hand accelerate the unwrapped model: the checkpoint holds plain names, and an OptimizedModule
    expects "_orig_mod." before each one (strict load fails). Reference: the weights before they were overwritten."""
    from accelerate import Accelerator

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
    from hf_gpt_custom.training.unwrapped import save_checkpoints_without_wrappers

    torch.manual_seed(0)
    model = GPTCustomForCausalLM(GPTCustomConfig(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
    accelerator = Accelerator(cpu=True)
    save_checkpoints_without_wrappers(accelerator)
    compiled = accelerator.prepare(torch.compile(model, backend="eager"))
    saved = {name: value.clone() for name, value in model.state_dict().items()}
    accelerator.save_state(str(tmp_path / "ckpt"))
    from safetensors import safe_open

    with safe_open(str(tmp_path / "ckpt" / "model.safetensors"), framework="pt") as handle:
        assert set(handle.keys()) <= set(saved) and not any(key.startswith("_orig_mod.") for key in handle.keys())
    with torch.no_grad():
        for parameter in compiled.parameters():
            parameter.add_(1.0)
    accelerator.load_state(str(tmp_path / "ckpt"))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, saved[name], msg=name)


def test_a_model_with_compiled_blocks_saves_under_its_own_names():
    """Compiling blocks one by one (regional compilation) puts "_orig_mod." inside the names
    ("transformer.h.0._orig_mod.attn..."): the saved weights keep the model's own names. Reference: the names before
    compiling."""
    from accelerate import Accelerator

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
    from hf_gpt_custom.training.unwrapped import unwrapped_state_dict

    model = GPTCustomForCausalLM(GPTCustomConfig(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2))
    plain = list(model.state_dict())
    for index, block in enumerate(model.transformer.h):
        model.transformer.h[index] = torch.compile(block, backend="eager")
    assert any("._orig_mod." in name for name in model.state_dict())
    assert list(unwrapped_state_dict(Accelerator(cpu=True), model)) == plain
