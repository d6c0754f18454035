"""Evaluation forward tokens/s (no grad, full logits): ours vs transformers' GPT2LMHeadModel (sdpa), same weights.

Same sizes and batch shapes as bench_train.py, eager by default (`--modes eager,compile` adds torch.compile). Logits
are checked equal (1e-4) first. Run: python -m benchmarks.bench_forward --threads 2 [--sizes small,gpt2] [--quick]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.bench_train import BATCH_SHAPES, random_batch
from benchmarks.common import (
    SIZES,
    add_common_args,
    compare_interleaved,
    machine_info,
    make_pair,
    pin_threads,
    result_name,
    write_json,
)


def bench_size(size_name: str, modes: list[str], rounds: int) -> list[dict]:
    size = SIZES[size_name]
    batch, seq_len = BATCH_SHAPES[size_name]
    input_ids = random_batch(size["vocab_size"], batch, seq_len)
    ours, anchor = make_pair(size)
    ours.eval()
    anchor.eval()
    results = []
    with torch.inference_mode():
        max_diff = (ours(input_ids).logits - anchor(input_ids).logits).abs().max().item()
        print(f"forward {size_name}: max |logits ours - anchor| = {max_diff:.1e}")
        for mode in modes:
            ours_forward = torch.compile(ours) if mode == "compile" else ours
            anchor_forward = torch.compile(anchor) if mode == "compile" else anchor
            comparison = compare_interleaved(
                f"forward {size_name} {batch}x{seq_len} {mode}",
                lambda: ours_forward(input_ids),
                lambda: anchor_forward(input_ids),
                work=batch * seq_len,
                rounds=rounds,
                warmup=1,
            )
            results.append({**comparison.summary(), "size": size_name, "mode": mode, "max_logit_diff": max_diff})
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = add_common_args(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--sizes", default="small,gpt2", help="comma-separated: small, gpt2 (default: both)")
    parser.add_argument("--modes", default="eager", help="comma-separated: eager, compile (default: eager)")
    parser.add_argument("--rounds", type=int, default=None, help="timed A/B rounds (default: 10 small, 4 gpt2)")
    args = parser.parse_args(argv)
    pin_threads(args.threads)
    payload = {"machine": machine_info(args.threads), "results": []}
    for size_name in args.sizes.split(","):
        rounds = args.rounds or ({"small": 10, "gpt2": 4}[size_name] // (2 if args.quick else 1))
        payload["results"] += bench_size(size_name, args.modes.split(","), rounds)
    write_json(result_name("forward", args.threads), payload, args.out)
    return payload


if __name__ == "__main__":
    main()
