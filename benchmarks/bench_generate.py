"""Greedy generation with the KV cache, new tokens/s: ours vs GPT2LMHeadModel.generate on the same weights.

Prompt 32 tokens, 128 new tokens, batch 1 by default (`--batches 1,8`). Every variant's tokens are checked identical
to the anchor's before it is timed. Variants of ours: `default` (plain `generate`, what the target is judged on) and,
on request, `static` (`cache_implementation="static"`; generate compiles it on CUDA only, so here it runs eagerly).
The GPU's figures come from benchmarks/bench_gpu.py.
Run: python -m benchmarks.bench_generate --threads 2 [--sizes small,gpt2] [--batches 1,8] [--variants default,static]
"""

from __future__ import annotations

import argparse
import time

import torch

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
PROMPT_LEN = 32
NEW_TOKENS = 128


GENERATE_KWARGS = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "do_sample": False, "pad_token_id": 0}
# variant -> extra arguments of our generate() call
VARIANTS = {
    "default": {},
    "static": {"cache_implementation": "static"},
}


def bench(size_name: str, batches: list[int], variants: list[str], rounds: int) -> list[dict]:
    size = SIZES[size_name]
    ours, anchor = make_pair(size)
    ours.eval()
    anchor.eval()
    results = []
    for batch in batches:
        generator = torch.Generator().manual_seed(batch)
        prompt = torch.randint(1, size["vocab_size"], (batch, PROMPT_LEN), generator=generator)
        anchor_kwargs = kwargs = GENERATE_KWARGS
        with torch.inference_mode():
            reference = anchor.generate(prompt, **anchor_kwargs)
            for variant in variants:
                kwargs = {**GENERATE_KWARGS, **VARIANTS[variant]}
                start = time.perf_counter()
                tokens = ours.generate(prompt, **kwargs)
                first_call_s = time.perf_counter() - start
                identical = torch.equal(tokens, reference)
                print(f"generate {size_name} batch {batch} {variant}: tokens identical to the anchor: {identical}"
                      f" (first call {first_call_s:.1f} s)")
                comparison = compare_interleaved(
                    f"generate {size_name} batch {batch} {variant}",
                    lambda: ours.generate(prompt, **kwargs),
                    lambda: anchor.generate(prompt, **anchor_kwargs),
                    work=batch * NEW_TOKENS,
                    rounds=rounds,
                    warmup=1,
                    unit="new tok/s",
                )
                results.append({
                    **comparison.summary(), "size": size_name, "batch": batch, "variant": variant,
                    "tokens_identical": identical, "first_call_s": first_call_s,
                })
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = add_common_args(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--sizes", default="small,gpt2", help="comma-separated: small, gpt2 (default: both)")
    parser.add_argument("--batches", default="1", help="comma-separated batch sizes (default: 1)")
    parser.add_argument("--variants", default="default", help=f"comma-separated of {', '.join(VARIANTS)} "
                        "(default: default)")
    parser.add_argument("--rounds", type=int, default=None, help="timed A/B rounds (default: 8 small, 3 gpt2)")
    args = parser.parse_args(argv)
    pin_threads(args.threads)
    payload = {"machine": machine_info(args.threads), "prompt_len": PROMPT_LEN, "new_tokens": NEW_TOKENS, "results": []}
    batches = [int(batch) for batch in args.batches.split(",")]
    for size_name in args.sizes.split(","):
        rounds = args.rounds or ({"small": 8, "gpt2": 3}[size_name] // (2 if args.quick else 1))
        payload["results"] += bench(size_name, batches, args.variants.split(","), max(rounds, 1))
    write_json(result_name("generate", args.threads), payload, args.out)
    return payload


if __name__ == "__main__":
    main()
