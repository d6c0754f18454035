"""Greedy generation with the KV cache, new tokens/s: ours vs GPT2LMHeadModel.generate on the same weights.

Prompt 32 tokens, 128 new tokens, batch 1 by default (`--batches 1,8`). Every variant's tokens are checked identical
to the anchor's before it is timed. Variants of ours: `default` (plain `generate`, what the target is judged on) and,
on request, `static` (StaticCache, eager) and `static-compiled` (the opt-in `model.set_fast_decode()`: StaticCache +
torch.compile of the decode step; its one-off compile time is reported as the first call, not timed).
The first `generate` call in the process also times oneDNN against F.linear once per decoding shape
(hf_gpt_custom/onednn_linear.py); it falls in the untimed first call, and the kernel chosen per shape is recorded.
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
from hf_gpt_custom import onednn_linear

PROMPT_LEN = 32
NEW_TOKENS = 128


GENERATE_KWARGS = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "do_sample": False, "pad_token_id": 0}
# variant -> arguments of GPTCustomForCausalLM.set_fast_decode
VARIANTS = {
    "default": {"enabled": False},
    "static": {"enabled": True, "compile": False},
    "static-compiled": {"enabled": True, "compile": True},
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
                ours.set_fast_decode(**VARIANTS[variant])
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
            ours.set_fast_decode(enabled=False)
    return results


def decoding_kernel_choices() -> list[dict]:
    """Per decoding shape timed in this process: oneDNN's speed-up over F.linear and which kernel generate used."""
    return [
        {"rows": rows, "in": n_in, "out": n_out, "threads": threads, "onednn_speedup": round(speedup, 3),
         "kernel": "oneDNN" if speedup >= onednn_linear.REQUIRED_SPEEDUP else "F.linear"}
        for (rows, n_in, n_out, _dtype, threads), speedup in sorted(onednn_linear._speedups.items(), key=str)
    ]


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
    payload["decoding_kernels"] = decoding_kernel_choices()
    write_json(result_name("generate", args.threads), payload, args.out)
    return payload


if __name__ == "__main__":
    main()
