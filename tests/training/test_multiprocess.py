"""The same training script as two CPU processes (gloo) through `accelerate launch`: two ranks really start, each
trains on different blocks, and the loss trajectory equals one process with the same global batch."""

import json
import os
import shutil
import subprocess

import pytest
import torch

from training.config import REPO_ROOT, save_train_config
from training.data import prepare_datasets
from training.train import EpochShuffleSampler, _batch_digest, train


def _records(run_dir, kind):
    return [r for r in map(json.loads, (run_dir / "run_log.jsonl").read_text().splitlines()) if r["kind"] == kind]


@pytest.mark.slow
def test_two_cpu_ranks_match_one_process_with_the_same_global_batch(make_config, tmp_path, shakespeare_tokenizer_dir):
    if shutil.which("accelerate") is None:
        pytest.fail("the accelerate launcher is not on PATH; install the project as README says")
    # dropout off: the two layouts draw different random masks, everything else must agree
    common = ["max_steps=5", "warmup_steps=1", "eval_interval=5", "model.resid_pdrop=0.0",
              "model.embd_pdrop=0.0", "model.attn_pdrop=0.0"]
    single = train(make_config(*common, "batch_size=8", "eval_batches=2", run_name="single"))  # 16 val blocks

    config = make_config(*common, "batch_size=4", "eval_batches=4", run_name="two_ranks")  # the same 16 blocks
    save_train_config(config, tmp_path / "two_ranks.yaml")
    # --multi_gpu on a CPU-only machine: two gloo processes (`--cpu --num_processes 2` would start just one)
    command = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29517",
               "-m", "hf_gpt_custom.cli", "train", str(tmp_path / "two_ranks.yaml")]
    result = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, "TQDM_DISABLE": "1"}, capture_output=True,
                            text=True)
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

    # Which blocks: the single process's first batch of 8 is rank 0's batch of 4 followed by rank 1's.
    import hf_gpt_custom  # noqa: F401
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(shakespeare_tokenizer_dir))
    blocks = prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir).train
    first_eight = list(EpochShuffleSampler(len(blocks), config.seed))[:8]
    batch = torch.tensor(blocks.select(first_eight)["input_ids"])
    assert single_steps[0]["data_digests"] == [[_batch_digest(batch)]]
    assert two_steps[0]["data_digests"] == [[_batch_digest(batch[:4])], [_batch_digest(batch[4:])]]
