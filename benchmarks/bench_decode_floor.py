"""How fast can batch-1 decoding be on this CPU? The floor under any fp32 implementation, next to ours and GPT-2's.

At batch 1 every new token multiplies one row by every weight matrix of the model: 12 x (c_attn, c_proj, c_fc,
mlp.c_proj) + lm_head at GPT-2 124M, ~124M fp32 weights = ~0.5 GB read from memory per token. Whatever else an
implementation does (Python, cache updates, attention over the prompt) comes on top. So the time of exactly those
matrix-vector products, run back to back with `F.linear` on the same shapes, is a floor for any implementation
that computes the same fp32 arithmetic with the same kernels, and

    best possible speed-up over transformers' GPT-2 = GPT-2's time per token / floor time per token.

If that number is under 2, the issue's ">= 2x transformers' GPT-2 at batch 1" cannot be met in fp32 on this machine
by removing overhead; only a faster matrix-vector kernel than MKL's, or fewer bytes per weight (bf16, int8), can.
Also reported: the bandwidth the floor achieves (weight bytes / floor time) next to a plain `copy_` of 512 MB,
i.e. how close MKL's GEMV already is to what the memory system delivers.

All timings interleaved in one process (floor, ours, GPT-2 rotate each round); every result records the machine.
Run: python -m benchmarks.bench_decode_floor --threads 1 [--sizes small,gpt2]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

from benchmarks.common import SIZES, add_common_args, machine_info, make_pair, pin_threads, result_name, time_rotating, write_json

PROMPT_LEN = 32
NEW_TOKENS = 64
GENERATE_KWARGS = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "do_sample": False, "pad_token_id": 0}


def decoding_matrices(model: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """(weight, bias) of every nn.Linear a decoding step runs, in order, each once (the tied head counted once)."""
    return [(module.weight, module.bias) for module in model.modules() if isinstance(module, torch.nn.Linear)]


def matvec_floor(matrices: list[tuple[torch.Tensor, torch.Tensor | None]]):
    """One token's worth of row-times-matrix products, with F.linear as the model calls it."""
    rows = {weight.shape[1]: torch.randn(1, weight.shape[1]) for weight, _ in matrices}

    def step():
        for weight, bias in matrices:
            F.linear(rows[weight.shape[1]], weight, bias)

    return step


def copy_bandwidth_gbs(megabytes: int = 512, rounds: int = 5) -> float:
    """Best GB/s of a plain tensor copy (bytes read + bytes written): what the memory system delivers to torch."""
    source = torch.randn(megabytes * 2**20 // 4)
    target = torch.empty_like(source)
    target.copy_(source)
    best = min(time_rotating({"copy": lambda: target.copy_(source)}, rounds, warmup=1)["copy"])
    return 2 * source.numel() * 4 / best / 1e9


def bench(size_name: str, rounds: int) -> dict:
    ours, anchor = make_pair(SIZES[size_name])
    ours.eval()
    anchor.eval()
    matrices = decoding_matrices(ours)
    weight_bytes = sum(w.numel() * w.element_size() + (b.numel() * b.element_size() if b is not None else 0)
                       for w, b in matrices)
    prompt = torch.randint(1, SIZES[size_name]["vocab_size"], (1, PROMPT_LEN), generator=torch.Generator().manual_seed(0))
    floor = matvec_floor(matrices)
    with torch.inference_mode():
        times = time_rotating({
            "floor": lambda: [floor() for _ in range(NEW_TOKENS)],
            "ours": lambda: ours.generate(prompt, **GENERATE_KWARGS),
            "gpt2": lambda: anchor.generate(prompt, **GENERATE_KWARGS),
        }, rounds, warmup=1)
    per_token_ms = {name: 1000 * statistics.median(values) / NEW_TOKENS for name, values in times.items()}
    # Per-round ratios, as everywhere in the benchmarks: calls seconds apart share the same load.
    best_possible = statistics.median(g / f for g, f in zip(times["gpt2"], times["floor"]))
    ours_ratio = statistics.median(g / o for g, o in zip(times["gpt2"], times["ours"]))
    result = {
        "size": size_name,
        "weight_mb_per_token": weight_bytes / 2**20,
        "ms_per_token": per_token_ms,
        "floor_bandwidth_gbs": weight_bytes / (per_token_ms["floor"] / 1000) / 1e9,
        "best_possible_speedup_over_gpt2": best_possible,
        "ours_speedup_over_gpt2": ours_ratio,
        "rounds": rounds,
        "seconds": times,
    }
    print(f"{size_name}: per token floor {per_token_ms['floor']:.2f} ms, ours {per_token_ms['ours']:.2f} ms, GPT-2 "
          f"{per_token_ms['gpt2']:.2f} ms; best possible fp32 speed-up over GPT-2 {best_possible:.2f}x, ours "
          f"{ours_ratio:.2f}x; the floor reads {result['floor_bandwidth_gbs']:.1f} GB/s of weights", flush=True)
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = add_common_args(argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("--sizes", default="small,gpt2", help="comma-separated: small, gpt2 (default: both)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds, each runs floor, ours and GPT-2 (default: 5)")
    args = parser.parse_args(argv)
    pin_threads(args.threads)
    payload = {"machine": machine_info(args.threads), "prompt_len": PROMPT_LEN, "new_tokens": NEW_TOKENS,
               "copy_bandwidth_gbs": copy_bandwidth_gbs(), "results": []}
    print(f"plain copy: {payload['copy_bandwidth_gbs']:.1f} GB/s at {args.threads} thread(s)")
    rounds = 2 if args.quick else args.rounds
    payload["results"] = [bench(size_name, rounds) for size_name in args.sizes.split(",")]
    path = write_json(result_name("decode_floor", args.threads), payload, args.out)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
