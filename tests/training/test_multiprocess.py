"""The same training script as two CPU processes (gloo) through `accelerate launch`: two ranks really start, each
trains on different blocks, the loss trajectory equals one process with the same global batch, and the folders it
writes are those of one process (DDP's "module." never reaches them). The shipped CPU accelerate config starts two
ranks and hides the GPUs from both; a launcher precision that differs from the training YAML's is named in a
warning."""

import json
import logging
import os
import shutil
import socket
import subprocess
from types import SimpleNamespace

import pytest
import torch

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.config import REPO_ROOT, save_train_config
from hf_gpt_custom.training.devices import accumulation_steps_for_run, mixed_precision_for_run
from hf_gpt_custom.training.data import prepare_datasets
from hf_gpt_custom.training.data import EpochShuffleSampler
from hf_gpt_custom.training.loop import _batch_digest
from hf_gpt_custom.training.train import train


def _records(run_dir, kind):
    return [r for r in map(json.loads, (run_dir / "run_log.jsonl").read_text().splitlines()) if r["kind"] == kind]


@pytest.mark.slow
def test_two_cpu_ranks_match_one_process_with_the_same_global_batch(make_config, tmp_path, shakespeare_tokenizer_dir,
                                                                   assert_plain_model_folders):
    if shutil.which("accelerate") is None:
        pytest.fail("the accelerate launcher is not on PATH; install the project as README says")
    # dropout off: the two layouts draw different random masks, everything else must agree
    common = ["max_steps=5", "warmup_steps=1", "eval_interval=5", "model.resid_pdrop=0.0",
              "model.embd_pdrop=0.0", "model.attn_pdrop=0.0"]
    single = train(make_config(*common, "batch_size=8", "eval_batches=2", run_name="single"))  # 16 val blocks

    config = make_config(*common, "batch_size=4", "eval_batches=4", run_name="two_ranks")  # the same 16 blocks
    save_train_config(config, tmp_path / "two_ranks.yaml")
    # --multi_gpu with no GPU visible: two gloo processes (`--cpu --num_processes 2` would start just one); the GPUs
    # of a GPU machine are hidden, or each rank would look for one of its own
    command = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29517",
               "-m", "hf_gpt_custom.cli", "train", str(tmp_path / "two_ranks.yaml")]
    result = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, "TQDM_DISABLE": "1", "CUDA_VISIBLE_DEVICES": ""},
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    two = config.run_dir

    summary = json.loads((two / "training_summary.json").read_text())
    assert summary["num_processes"] == 2 and summary["tokens_seen"] == 5 * 2 * 4 * 32
    single_steps, two_steps = _records(single, "train"), _records(two, "train")
    for a, b in zip(single_steps, two_steps, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-5)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], abs=1e-5)
        rank0, rank1 = b["data_digests"]
        assert rank0 != rank1  # each rank trained on different blocks
    assert _records(two, "eval")[-1]["val_loss"] == pytest.approx(_records(single, "eval")[-1]["val_loss"], abs=1e-5)
    # DDP wrapped the model: its checkpoint and final/ are still the plain folders one process writes
    assert_plain_model_folders(two)
    assert json.loads((two / "final" / "config.json").read_text()) == \
        json.loads((single / "final" / "config.json").read_text())

    # Which blocks: the single process's first batch of 8 is rank 0's batch of 4 followed by rank 1's.
    import hf_gpt_custom  # noqa: F401
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(shakespeare_tokenizer_dir))
    blocks = prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir).train
    first_eight = list(EpochShuffleSampler(len(blocks), config.seed))[:8]
    batch = torch.tensor(blocks.select(first_eight)["input_ids"])
    assert single_steps[0]["data_digests"] == [[_batch_digest(batch)]]
    assert two_steps[0]["data_digests"] == [[_batch_digest(batch[:4])], [_batch_digest(batch[4:])]]


def _free_port() -> int:
    with socket.socket() as probe:  # other test runs share this machine: never assume 29500 is free
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# Each rank of the launch below says what it sees, then runs the CLI exactly as `-m hf_gpt_custom.cli` would.
_PROBE_THEN_CLI = """
import json, os, runpy, sys
import torch
from hf_gpt_custom.training.devices import gpus_hidden_on_purpose
print("probe:", json.dumps([os.environ["LOCAL_RANK"], torch.cuda._parse_visible_devices(), gpus_hidden_on_purpose()]),
      flush=True)
sys.argv = ["hf_gpt_custom.cli", *sys.argv[1:]]
runpy.run_module("hf_gpt_custom.cli", run_name="__main__", alter_sys=True)
"""


@pytest.fixture(scope="module")
def shipped_cpu_config_smoke_launch(tmp_path_factory, shakespeare_tokenizer_dir, shared_data_cache):
    """One launch of training/configs/accelerate/cpu_two_processes.yaml training the smoke config for 2 steps, with
    CUDA_VISIBLE_DEVICES unset (the config alone must hide the GPUs); each rank first prints what it sees. Shared by
    the two tests below (one 2-rank launch instead of two)."""
    if shutil.which("accelerate") is None:
        pytest.fail("the accelerate launcher is not on PATH; install the project as README says")
    folder = tmp_path_factory.mktemp("shipped_cpu_config")
    probe = folder / "probe_then_cli.py"
    probe.write_text(_PROBE_THEN_CLI)
    run_dir = folder / "smoke"
    command = ["accelerate", "launch", "--config_file", "training/configs/accelerate/cpu_two_processes.yaml",
               "--main_process_port", str(_free_port()), str(probe), "train",
               "training/configs/smoke.yaml", f"out_dir={run_dir}", f"tokenizer={shakespeare_tokenizer_dir}",
               f"data_cache_dir={shared_data_cache}", "max_steps=2", "warmup_steps=1", "eval_interval=2",
               "eval_batches=2",
               "checkpoint_interval=1"]
    environment = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
    result = subprocess.run(command, cwd=REPO_ROOT, env={**environment, "TQDM_DISABLE": "1"}, capture_output=True,
                            text=True, timeout=300)
    return result, run_dir


@pytest.mark.slow  # its launch trains the smoke config on two ranks (the fixture, shared with the test below)
def test_the_shipped_cpu_config_hides_the_gpus_from_every_rank(shipped_cpu_config_smoke_launch):
    """accelerate tells the processes a multi-process launch starts nothing of use_cpu (ACCELERATE_USE_CPU reaches
    one-process launches only): on a GPU machine the second rank of cpu_two_processes.yaml looked for a GPU of its
    own and the run stopped. Its gpu_ids must hide every GPU from each rank by torch's own reading of
    CUDA_VISIBLE_DEVICES, and the trainer must take that as a request for the CPU (no 'sees no GPU' warning)."""
    result, _ = shipped_cpu_config_smoke_launch
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = sorted(json.loads(line.removeprefix("probe: ")) for line in result.stdout.splitlines()
                   if line.startswith("probe: "))
    assert ranks == [["0", [], True], ["1", [], True]]
    assert "sees no GPU" not in result.stderr


@pytest.mark.slow  # three Python processes start torch: ~60 s on the shared 2-core machine
def test_shipped_cpu_config_starts_two_ranks_on_the_smoke_config(shipped_cpu_config_smoke_launch):
    result, run_dir = shipped_cpu_config_smoke_launch
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "training_summary.json").read_text())
    assert summary["num_processes"] == 2
    for record in _records(run_dir, "train"):
        rank0, rank1 = record["data_digests"]  # one row per rank: both trained, on different batches
        assert rank0 != rank1
    # both ranks wrote their own RNG state into the checkpoint (and only rank 0 held the run-folder lock)
    assert sorted(p.name for p in (run_dir / "checkpoints" / "step_000001").glob("random_states_*.pkl")) == \
        ["random_states_0.pkl", "random_states_1.pkl"]
    assert "mixed_precision" not in result.stderr  # the shipped config agrees with smoke.yaml: no warning
    assert "sees no GPU" not in result.stderr  # the config asks for the CPU: no warning that it trains there


def test_a_launcher_precision_that_differs_from_the_training_yaml_is_named(make_config, monkeypatch, caplog):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # what `accelerate launch` passes from its config file
    with caplog.at_level(logging.WARNING, logger="hf_gpt_custom.training.devices"):
        run_dir = train(make_config("max_steps=1", "warmup_steps=1", "eval_interval=1", "eval_batches=1"))
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "hf_gpt_custom.training.devices"]
    assert "accelerate launch says mixed_precision=bf16" in warning
    assert "training config says mixed_precision=no (after resolving `auto` for this device); training in no" in warning
    assert json.loads((run_dir / "training_summary.json").read_text())["config"]["mixed_precision"] == "no"


def test_a_launcher_accumulation_that_differs_from_the_training_yaml_is_refused(make_config, monkeypatch, caplog):
    """`accelerate launch --gradient_accumulation_steps 4` sets this in a DeepSpeed launch only, and there accelerate
    takes DeepSpeed's value over the Accelerator's ("Using DeepSpeed's value"): the engine would accumulate 4 while
    the loop runs the YAML's 1. A warning said the YAML's value was used; the run is refused before any work."""
    import accelerate.accelerator
    import inspect

    # the accelerate behaviour this rests on, read from the installed source
    assert "Using DeepSpeed's value" in inspect.getsource(accelerate.accelerator.Accelerator._prepare_deepspeed)
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4")
    config = make_config("max_steps=1", "warmup_steps=1", "eval_interval=1", "eval_batches=1")
    with pytest.raises(UserError, match=r"accelerate launch says gradient_accumulation_steps=4 but the training "
                                        r"config says gradient_accumulation_steps=1; .*Set "
                                        r"gradient_accumulation_steps=4 in the training YAML"):
        train(config)
    assert not (config.run_dir / "checkpoints").exists()
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "2")
    with caplog.at_level(logging.WARNING, logger="hf_gpt_custom.training.devices"):
        assert accumulation_steps_for_run(2) == 2 and not caplog.records  # agreeing: silent


def test_the_training_yaml_precision_is_the_one_used(monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    assert mixed_precision_for_run("no") == "no"
    assert mixed_precision_for_run("fp16") == "fp16"


def test_a_plain_launch_of_a_bf16_yaml_is_noted_not_warned(monkeypatch, caplog):
    """A plain `accelerate launch` (no config, no flag) passes mixed_precision=no, its default: a bf16 YAML then drew
    a warning on every launch. It is an info line; a launcher that asks for a precision still gets the warning."""
    from accelerate.commands.launch import launch_command_parser

    launch_args = launch_command_parser().parse_args(["train.py"])
    assert launch_args.mixed_precision is None  # no choice made: accelerate fills in "no" (commands/launch.py)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    with caplog.at_level(logging.INFO, logger="hf_gpt_custom.training.devices"):
        assert mixed_precision_for_run("bf16") == "bf16"
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    caplog.clear()
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")
    with caplog.at_level(logging.INFO, logger="hf_gpt_custom.training.devices"):
        assert mixed_precision_for_run("bf16") == "bf16"
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


def _launch_two_ranks(*arguments):
    command = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
               *map(str, arguments)]
    result = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, "TQDM_DISABLE": "1",
                                                          "CUDA_VISIBLE_DEVICES": ""},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


_FIRST_MASK_THEN_CLI = """
import hashlib, os, pathlib, runpy, sys
import torch
from hf_gpt_custom.training.workload import LanguageModelling

plain_loss, seen, mask_dir = LanguageModelling.loss, [], pathlib.Path(sys.argv[1])

def loss(self, model, batch):  # the dropout mask this rank's first micro-batch draws: the next draw of its RNG
    if not seen:
        state = torch.get_rng_state()
        mask = torch.nn.functional.dropout(torch.ones(64), 0.5)
        torch.set_rng_state(state)
        seen.append(hashlib.sha1(mask.numpy().tobytes()).hexdigest()[:12])
        (mask_dir / f"rank{os.environ['RANK']}").write_text(seen[0])  # not stdout: lines interleave
    return plain_loss(self, model, batch)

LanguageModelling.loss = loss
sys.argv = ["hf_gpt_custom.cli", *sys.argv[2:]]
runpy.run_module("hf_gpt_custom.cli", run_name="__main__", alter_sys=True)  # as `-m hf_gpt_custom.cli` runs it
"""


@pytest.fixture(scope="module")
def two_ranks_across_an_epoch(tmp_path_factory, shakespeare_path, shakespeare_tokenizer_dir, shared_data_cache):
    """One 2-rank launch (dropout on) of a few steps past the end of the first epoch of a small text, with a
    checkpoint inside epoch 1; each rank also writes the dropout mask its first micro-batch draws to mask_dir/rank<r>.
    Shared by the resume test and the dropout test below (one 2-rank launch instead of two)."""
    if shutil.which("accelerate") is None:
        pytest.fail("the accelerate launcher is not on PATH; install the project as README says")
    import hf_gpt_custom  # noqa: F401
    from transformers import AutoTokenizer

    from hf_gpt_custom.training.config import load_train_config
    from tests.helpers import tiny_run_overrides

    folder = tmp_path_factory.mktemp("two_ranks_across_an_epoch")

    def make_config(*overrides, run_name):
        return load_train_config(None, tiny_run_overrides(folder / run_name, shakespeare_path,
                                                          shakespeare_tokenizer_dir, shared_data_cache, run_name)
                                 + list(overrides))

    small = folder / "small.txt"  # ~60 training blocks of 32 tokens: an epoch is a few steps of 2 ranks × 4 blocks
    small.write_text(shakespeare_path.read_text(encoding="utf-8")[:5_000], encoding="utf-8")
    tokenizer = AutoTokenizer.from_pretrained(str(shakespeare_tokenizer_dir))
    blocks = prepare_datasets(make_config(f"dataset={small}", "val_holdout=tail", run_name="blocks"), tokenizer,
                              shakespeare_tokenizer_dir).train
    steps_per_epoch = len(blocks) // 8
    checkpoint_step, max_steps = steps_per_epoch + 2, steps_per_epoch + 5  # a checkpoint inside epoch 1
    settings = [f"max_steps={max_steps}", "warmup_steps=1", "eval_interval=100",
                f"checkpoint_interval={checkpoint_step}", "keep_checkpoints=5", f"dataset={small}", "val_holdout=tail",
                "model.resid_pdrop=0.1"]
    whole = make_config(*settings, run_name="whole")
    save_train_config(whole, folder / "whole.yaml")
    mask_dir = folder / "masks"
    mask_dir.mkdir()
    script = folder / "first_mask_then_cli.py"
    script.write_text(_FIRST_MASK_THEN_CLI)
    _launch_two_ranks(script, mask_dir, "train", folder / "whole.yaml")
    return SimpleNamespace(whole=whole, settings=settings, blocks=blocks, steps_per_epoch=steps_per_epoch,
                           max_steps=max_steps, mask_dir=mask_dir)


@pytest.mark.slow
def test_two_ranks_resumed_inside_the_second_epoch_train_on_that_epochs_blocks(make_config, tmp_path,
                                                                                two_ranks_across_an_epoch):
    """The resumed loader skips into the epoch one wrapper deeper than Accelerate's set_epoch reaches: two ranks
    resumed inside epoch 1 went on in epoch 0's order (some blocks twice, others never). Reference: the epoch's
    permutation from EpochShuffleSampler itself, batch j of the epoch on rank j % 2, as Accelerate shards it."""
    shared = two_ranks_across_an_epoch
    whole, blocks, steps_per_epoch, max_steps = shared.whole, shared.blocks, shared.steps_per_epoch, shared.max_steps
    resumed = make_config(*shared.settings, run_name="resumed")
    shutil.copytree(whole.run_dir, resumed.run_dir)  # as a crash right after the checkpoint inside epoch 1 leaves it
    shutil.rmtree(resumed.run_dir / "final")
    shutil.rmtree(resumed.run_dir / "checkpoints" / f"step_{max_steps:06d}")
    save_train_config(resumed, tmp_path / "resumed.yaml")
    _launch_two_ranks("-m", "hf_gpt_custom.cli", "train", tmp_path / "resumed.yaml")

    assert steps_per_epoch >= 3
    sampler = EpochShuffleSampler(len(blocks), whole.seed)
    for run_dir in (whole.run_dir, resumed.run_dir):
        for record in _records(run_dir, "train"):
            epoch, step_in_epoch = divmod(record["step"] - 1, steps_per_epoch)
            sampler.set_epoch(epoch)
            order = list(sampler)
            expected = [[_batch_digest(torch.tensor(blocks.select(order[(2 * step_in_epoch + rank) * 4:
                                                                         (2 * step_in_epoch + rank + 1) * 4])
                                                    ["input_ids"]))] for rank in (0, 1)]
            assert record["epoch"] == epoch and record["data_digests"] == expected, (run_dir.name, record["step"])


@pytest.mark.slow
def test_each_rank_draws_its_own_dropout_masks(two_ranks_across_an_epoch):
    """One seed on every rank drew the same dropout masks for different blocks, where one process with the same
    global batch draws one per row (nanoGPT seeds rank r with seed + r). Initialisation stays shared: both ranks'
    checkpoints hold one model."""
    assert two_ranks_across_an_epoch.whole.model["resid_pdrop"] == 0.1  # a run that draws dropout masks
    masks = [(two_ranks_across_an_epoch.mask_dir / f"rank{rank}").read_text() for rank in (0, 1)]
    assert masks[0] != masks[1]


@pytest.mark.slow
def test_a_one_process_run_launched_on_two_ranks_is_refused_by_every_rank_before_rank_0_touches_the_folder(
        make_config, tmp_path):
    """A finished one-process run launched again under two ranks: only rank 1 lacks random_states_1.pkl, so only rank
    1 refused; rank 0 (random_states_0.pkl present, saved_by 1 <= 2) went on, rewrote run_log.jsonl without the final
    evaluation row (a finished run's evaluation is "redone"), said it was evaluating again, and died in the
    evaluation's all_gather with a bare gloo traceback ("Connection closed by peer"). Every rank must refuse in one
    line before rank 0 changes the run folder."""
    if shutil.which("accelerate") is None:
        pytest.fail("the accelerate launcher is not on PATH; install the project as README says")
    config = make_config("max_steps=2", "warmup_steps=1", "eval_interval=2", "checkpoint_interval=2",
                         "batch_size=4", "eval_batches=2", run_name="one_process")
    run_dir = train(config)
    run_log_before = (run_dir / "run_log.jsonl").read_bytes()
    assert _records(run_dir, "eval")[-1]["step"] == 2
    save_train_config(config, tmp_path / "one_process.yaml")
    command = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
               "-m", "hf_gpt_custom.cli", "train", str(tmp_path / "one_process.yaml")]
    result = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, "TQDM_DISABLE": "1", "CUDA_VISIBLE_DEVICES": ""},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    # one message, said by both ranks
    assert result.stderr.count("was saved by 1 process(es) and this run has 2: the ranks would read other batches") == 2
    assert (run_dir / "run_log.jsonl").read_bytes() == run_log_before  # the final evaluation row is still there
    assert "evaluating and writing final/ again" not in result.stdout + result.stderr
    assert "[rank0]: Traceback" not in result.stderr, result.stderr[-3000:]  # rank 0 refuses too, in one line
