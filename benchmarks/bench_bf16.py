"""Can this CPU train in bf16? fp32 vs bf16 matmul GFLOP/s at the small model's training shapes, and what torch says.

bf16 autocast (`mixed_precision: bf16`) pays on a CPU only where bf16 matmuls outrun fp32 ones: with AVX512-BF16 or
AMX, oneDNN's bf16 kernels run at about twice fp32; without them bf16 is converted in software and runs far slower
than fp32. This measures `F.linear` — the call autocast makes for every linear layer — in both dtypes on the linear
layers of one training step of the small model (8 x 256 tokens = 2048 rows; 6 x 384, vocab 8192), and records
`torch.ops.mkldnn._is_mkldnn_bf16_supported()` and torch's CPU capability. It does not train: where bf16 runs at a
fraction of fp32, a bf16 training run would only measure that fraction again, hours later.
Run: python -m benchmarks.bench_bf16 --threads 2 [--quick]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

from benchmarks.common import (
    SIZES,
    add_common_args,
    machine_info,
    pin_threads,
    result_name,
    time_call,
    write_json,
)

ROWS = 8 * 256  # bench_train.BATCH_SHAPES["small"]: the tokens of one training step


def linear_shapes(size: dict) -> dict[str, tuple[int, int]]:
    """(in, out) of each distinct linear layer of a GPT-2 block stack of this size, and of the LM head."""
    width = size["n_embd"]
    return {
        "attn.c_attn": (width, 3 * width),
        "attn.c_proj": (width, width),
        "mlp.c_fc": (width, 4 * width),
        "mlp.c_proj": (4 * width, width),
        "lm_head": (width, size["vocab_size"]),
    }


def linear_gflops(rows: int, n_in: int, n_out: int, dtype: torch.dtype, rounds: int) -> float:
    """Median GFLOP/s of F.linear(x (rows, in), weight (out, in)) in `dtype`, after a warm-up call."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, n_in, generator=generator).to(dtype)
    weight = torch.randn(n_out, n_in, generator=generator).to(dtype)
    F.linear(x[:64], weight)  # warm-up on a few rows: kernel selection, without paying a slow full-size call
    seconds = statistics.median(time_call(lambda: F.linear(x, weight)) for _ in range(rounds))
    return 2 * rows * n_in * n_out / seconds / 1e9


def bf16_support() -> dict:
    """What torch reports: oneDNN's native-bf16 check (AVX512-BF16/AMX) and the ISA level ATen's kernels use."""
    return {
        "mkldnn_bf16_supported": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def measure(size: dict, rows: int, fp32_rounds: int, bf16_rounds: int) -> list[dict]:
    results = []
    for layer, (n_in, n_out) in linear_shapes(size).items():
        fp32 = linear_gflops(rows, n_in, n_out, torch.float32, fp32_rounds)
        bf16 = linear_gflops(rows, n_in, n_out, torch.bfloat16, bf16_rounds)
        results.append({"layer": layer, "rows": rows, "in": n_in, "out": n_out, "fp32_gflops": fp32,
                        "bf16_gflops": bf16, "bf16_over_fp32": bf16 / fp32})
        print(f"F.linear {layer:<12} {rows}x{n_in} -> {n_out}: fp32 {fp32:7.1f} GFLOP/s, bf16 {bf16:7.2f} GFLOP/s "
              f"({bf16 / fp32:.3f}x)", flush=True)
    return results


def step_linear_ratio(results: list[dict], size: dict) -> float:
    """bf16/fp32 speed of all linear layers of one forward (each block layer n_layer times, the LM head once)."""
    def seconds(key: str) -> float:
        return sum(2 * row["rows"] * row["in"] * row["out"] / (row[key] * 1e9)
                   * (1 if row["layer"] == "lm_head" else size["n_layer"]) for row in results)

    return seconds("fp32_gflops") / seconds("bf16_gflops")


def main(argv: list[str] | None = None) -> dict:
    parser = add_common_args(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--rows", type=int, default=ROWS, help=f"rows of each matmul (default: {ROWS})")
    args = parser.parse_args(argv)
    pin_threads(args.threads)
    size = SIZES["small"]
    payload = {"machine": machine_info(args.threads), "support": bf16_support()}
    print(f"torch: mkldnn bf16 supported = {payload['support']['mkldnn_bf16_supported']}, "
          f"CPU capability {payload['support']['cpu_capability']}", flush=True)
    payload["results"] = measure(size, args.rows, fp32_rounds=3 if args.quick else 5, bf16_rounds=1 if args.quick else 2)
    payload["step_linear_bf16_over_fp32"] = step_linear_ratio(payload["results"], size)
    print(f"all linear layers of a small-model forward: bf16 runs at {payload['step_linear_bf16_over_fp32']:.3f}x "
          "fp32's speed", flush=True)
    write_json(result_name("bf16", args.threads), payload, args.out)
    return payload


if __name__ == "__main__":
    main()
