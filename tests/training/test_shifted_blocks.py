"""shift_block_boundaries: each epoch the training text is cut into blocks at a new offset.

The reference is the packed token stream itself: every trained batch is looked up among all windows of the stream
(every offset, every block), so the test sees which tokens were trained on, in which window, epoch by epoch — not
what the sampler says it did.
"""

from __future__ import annotations

import shutil

import datasets
import pytest
import torch
from accelerate.data_loader import BatchSamplerShard
from torch.utils.data import BatchSampler

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.data import ShiftedBlocks, ShiftingBlockSampler
from hf_gpt_custom.training.train import train
from tests.helpers import batch_digest, packed_train_blocks, train_records, write_first_speeches


def test_a_shifted_block_is_the_tail_of_one_packed_block_and_the_head_of_the_next():
    packed = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]],
                                         "labels": [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]})
    blocks = ShiftedBlocks(packed)
    assert len(blocks) == 2  # one fewer than packed: the last block has no next one to borrow from
    assert blocks[0, 1] == {"input_ids": [2, 3, 4, 5], "labels": [2, 3, 4, 5]}
    assert blocks[1, 3]["input_ids"] == [8, 9, 10, 11]
    assert blocks[1, 0]["input_ids"] == [5, 6, 7, 8]  # offset 0: the packed block itself


def test_each_epoch_is_every_block_once_at_one_offset_drawn_from_seed_and_epoch():
    sampler = ShiftingBlockSampler(num_packed_blocks=11, block_size=32, seed=7)
    offsets, orders = [], []
    for epoch in range(6):
        sampler.set_epoch(epoch)
        items = list(sampler)
        orders.append([block for block, _ in items])
        assert sorted(orders[-1]) == list(range(10)) != orders[-1]  # every block once, shuffled
        assert len({offset for _, offset in items}) == 1
        offsets.append(items[0][1])
        assert all(0 <= offset < 32 for offset in offsets)
        again = ShiftingBlockSampler(num_packed_blocks=11, block_size=32, seed=7)
        again.set_epoch(epoch)
        assert list(again) == items  # a function of seed and epoch alone: a resumed run, every process
    assert len(set(offsets)) > 1  # the cut moves between epochs
    assert len({tuple(order) for order in orders}) == 6  # and the order is drawn again


def test_two_processes_split_each_batch_of_one_offset_as_accelerate_shards_it():
    """The (block, offset) pairs pass through Accelerate's batch sharding whole: the two ranks' halves of a batch are
    the one-process batch, at the same offset."""
    sampler = ShiftingBlockSampler(num_packed_blocks=17, block_size=8, seed=3)
    single = list(BatchSampler(sampler, batch_size=4, drop_last=True))
    ranks = [list(BatchSamplerShard(BatchSampler(sampler, batch_size=2, drop_last=True), num_processes=2,
                                    process_index=rank, split_batches=False)) for rank in range(2)]
    assert [a + b for a, b in zip(*ranks)] == single


@pytest.fixture
def small_run(make_config, tmp_path, shakespeare_path):
    corpus = write_first_speeches(tmp_path / "speeches.txt", shakespeare_path, n_speeches=20)

    def make(*overrides: str, run_name: str = "shifted"):
        return make_config(f"dataset={corpus}", f"data_cache_dir={tmp_path / 'cache'}", "eval_batches=1",
                           "batch_size=1", *overrides, run_name=run_name)

    return make


def _windows_of_the_stream(blocks: torch.Tensor) -> dict[int, tuple[int, int]]:
    """digest -> (block, offset) for every block_size window of the packed stream that starts inside block 0..n-2."""
    n, size = blocks.shape
    stream = blocks.reshape(-1)
    return {batch_digest(stream[k * size + offset:(k + 1) * size + offset][None]): (k, offset)
            for k in range(n - 1) for offset in range(size)}


def test_a_run_trains_on_every_window_of_one_offset_per_epoch_and_the_offset_moves(small_run):
    config = small_run("shift_block_boundaries=true", "max_steps=1", "warmup_steps=0")
    blocks = packed_train_blocks(config)
    n = len(blocks)
    windows = _windows_of_the_stream(blocks)
    assert n >= 10 and len(windows) == (n - 1) * blocks.shape[1]  # no two windows alike: each digest names one

    config = small_run("shift_block_boundaries=true", f"max_steps={3 * (n - 1)}", "warmup_steps=0",
                       "eval_interval=1000")
    trained = [windows[record["data_digests"][0][0]] for record in train_records(train(config))]
    epochs = [trained[e * (n - 1):(e + 1) * (n - 1)] for e in range(3)]
    offsets = []
    for epoch in epochs:
        order = [block for block, _ in epoch]
        assert sorted(order) == list(range(n - 1)) != order  # every window of the epoch once, shuffled
        (offset,) = {offset for _, offset in epoch}
        offsets.append(offset)
    assert len(set(offsets)) > 1  # with this seed the three epochs are not all cut alike


def test_without_the_setting_the_packed_blocks_are_trained_as_they_are(small_run):
    config = small_run("max_steps=6", "warmup_steps=0", "eval_interval=1000")
    packed = {batch_digest(row[None]) for row in packed_train_blocks(config)}
    assert all(record["data_digests"][0][0] in packed for record in train_records(train(config)))


def test_a_resumed_shifting_run_trains_what_the_uninterrupted_one_did(small_run):
    """Checkpoint mid-epoch 2 with dropout on: the resumed run's windows, losses and weights are the full run's."""
    from safetensors.torch import load_file

    common = ["shift_block_boundaries=true", "warmup_steps=0", "checkpoint_interval=25", "keep_checkpoints=5",
              "eval_interval=1000", "model.resid_pdrop=0.1", "model.embd_pdrop=0.1", "model.attn_pdrop=0.1"]
    n = len(packed_train_blocks(small_run(*common, "max_steps=1")))
    steps = 2 * (n - 1) + 3
    assert 25 > n - 1  # the checkpoint lies inside the second epoch
    full = train(small_run(*common, f"max_steps={steps}", run_name="full"))
    resumed_config = small_run(*common, f"max_steps={steps}", "resume_from_checkpoint=latest", run_name="resumed")
    (resumed_config.run_dir / "checkpoints").mkdir(parents=True)
    shutil.copytree(full / "checkpoints" / "step_000025", resumed_config.run_dir / "checkpoints" / "step_000025")
    resumed = train(resumed_config)
    full_log, resumed_log = train_records(full), train_records(resumed)
    assert [r["step"] for r in resumed_log] == list(range(26, steps + 1))
    for a, b in zip(full_log[25:], resumed_log):
        assert a["data_digests"] == b["data_digests"] and a["loss"] == b["loss"]
    a, b = load_file(str(full / "final" / "model.safetensors")), load_file(str(resumed / "final" / "model.safetensors"))
    assert a.keys() == b.keys() and all(a[name].equal(b[name]) for name in a)


def test_a_resume_that_changes_the_setting_is_refused(small_run):
    common = ["warmup_steps=0", "max_steps=4", "checkpoint_interval=2", "eval_interval=1000"]
    train(small_run(*common, run_name="changed"))
    with pytest.raises(UserError, match="shift_block_boundaries"):
        train(small_run(*common, "shift_block_boundaries=true", "max_steps=6", "resume_from_checkpoint=latest",
                        run_name="changed"))


def test_streaming_with_shifted_blocks_is_refused_in_one_line(make_config):
    with pytest.raises(UserError, match=r"shift_block_boundaries=true .* set streaming=false"):
        make_config("streaming=true", "shift_block_boundaries=true")


@pytest.mark.parametrize("now", [False, True])
def test_a_checkpoint_from_before_the_setting_resumes_only_without_it(small_run, now):
    """A checkpoint written before the setting existed records no value for it; that code trained fixed blocks only,
    so resuming it with the blocks shifted is a change (it resumed in silence, the epoch position counted in blocks
    of the other cut)."""
    import json

    from hf_gpt_custom.manifest import write_manifest

    common = ["warmup_steps=0", "max_steps=6", "checkpoint_interval=2", "keep_checkpoints=5", "eval_interval=1000"]
    run_dir = train(small_run(*common, run_name="before"))
    resumed = small_run(*common, f"shift_block_boundaries={str(now).lower()}", "resume_from_checkpoint=latest",
                        run_name="after")
    checkpoint = resumed.run_dir / "checkpoints" / "step_000004"
    shutil.copytree(run_dir / "checkpoints" / "step_000004", checkpoint)
    settings = json.loads((checkpoint / "training_settings.json").read_text())
    del settings["shift_block_boundaries"]
    (checkpoint / "training_settings.json").write_text(json.dumps(settings))
    write_manifest(checkpoint, step=4)  # as the older code wrote it: a complete checkpoint
    if now:
        with pytest.raises(UserError, match=r"shift_block_boundaries: False -> True"):
            train(resumed)
    else:  # the old run's own batches, as without the setting
        assert [r["data_digests"] for r in train_records(train(resumed))] == \
            [r["data_digests"] for r in train_records(run_dir)][4:]


def test_too_few_blocks_for_one_shifted_batch_names_the_setting(make_config, tmp_path, shakespeare_path):
    """Exactly batch_size packed blocks train without the setting and make one block too few with it: the error
    counts both and names the setting among the fixes."""
    corpus = write_first_speeches(tmp_path / "speeches.txt", shakespeare_path, n_speeches=20)
    config = make_config(f"dataset={corpus}", f"data_cache_dir={tmp_path / 'cache'}", "max_steps=1",
                         "warmup_steps=0", "eval_batches=1", run_name="sizes")
    n = len(packed_train_blocks(config))
    fixed = make_config(f"dataset={corpus}", f"data_cache_dir={tmp_path / 'cache'}", f"batch_size={n}",
                        "max_steps=1", "warmup_steps=0", "eval_batches=1", run_name="fixed")
    assert train_records(train(fixed))
    shifted = make_config(f"dataset={corpus}", f"data_cache_dir={tmp_path / 'cache'}", f"batch_size={n}",
                          "max_steps=1", "warmup_steps=0", "eval_batches=1", "shift_block_boundaries=true",
                          run_name="shifted")
    with pytest.raises(UserError, match=rf"its {n} block\(s\) make {n - 1} an epoch with shift_block_boundaries=true "
                                        r"\(one fewer\), which is fewer than one batch .* or set "
                                        r"shift_block_boundaries=false"):
        train(shifted)

    # one block fewer still: no cut makes a batch, and the error no longer offers the setting as a way out
    short = make_config(f"dataset={corpus}", f"data_cache_dir={tmp_path / 'cache'}", f"batch_size={n + 1}",
                        "max_steps=1", "warmup_steps=0", "eval_batches=1", "shift_block_boundaries=true",
                        run_name="short")
    with pytest.raises(UserError, match=r"or add data$"):
        train(short)
