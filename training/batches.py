"""Batches: packed blocks -> shuffled training batches (a fresh permutation each epoch) and fixed validation batches.

Sharding across processes is Accelerate's (accelerator.prepare); resuming mid-epoch skips batches in train.py.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Sampler

from hf_gpt_custom.training.config import TrainConfig


class EpochShuffleSampler(Sampler[int]):
    """A fresh permutation per epoch from `seed + epoch`, owning its generator.

    Unlike RandomSampler it never draws from the global RNG, so dropout's random stream is the same whether or
    not the run was resumed, and every process computes the same permutation (Accelerate then shards batches).
    """

    def __init__(self, num_samples: int, seed: int):
        self.num_samples = num_samples
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        yield from torch.randperm(self.num_samples, generator=generator).tolist()


def collate_blocks(rows: list[dict]) -> dict[str, torch.Tensor]:
    return {key: torch.tensor([row[key] for row in rows], dtype=torch.long) for key in ("input_ids", "labels")}


def build_loaders(config: TrainConfig, data, collate_fn=collate_blocks) -> tuple[DataLoader, DataLoader]:
    """Training batches (reshuffled each epoch, or in stream order) and the fixed validation batches.

    `data` has `.train` and `.val` datasets (`datasets.Dataset`s; `.val` is cut to eval_batches with .select);
    `collate_fn` turns a list of rows into a batch (default: packed blocks; fine-tuning pads examples)."""
    if config.streaming:
        train_loader = DataLoader(data.train, batch_size=config.batch_size, collate_fn=collate_fn, drop_last=True)
    else:
        train_loader = DataLoader(
            data.train, batch_size=config.batch_size, sampler=EpochShuffleSampler(len(data.train), config.seed),
            collate_fn=collate_fn, drop_last=True,
            generator=torch.Generator().manual_seed(config.seed),  # the loader draws a seed per epoch: not from the global RNG
        )
    val_data = data.val
    if config.eval_batches is not None:
        # the same blocks whatever the number of processes, so validation numbers stay comparable
        val_data = val_data.select(range(min(len(val_data), config.eval_batches * config.batch_size)))
    val_loader = DataLoader(val_data, batch_size=config.batch_size, collate_fn=collate_fn,
                            generator=torch.Generator().manual_seed(config.seed))
    return train_loader, val_loader
