"""Which loss path the CPU gets: transformers' ForCausalLMLoss eager vs the same function compiled (what CUDA uses).

hf_gpt_custom/causal_lm_loss.py compiles the loss on CUDA, where fusing the float32 upcast into the softmax saved
4 ms of a 47 ms step (benchmarks/results/gpu_probe.json). This measures the same choice on the CPU, at the CPU
recipe's training shape (8 × 256 tokens, vocabulary 8,192, float32) and at GPT-2's vocabulary (2 × 256 × 50,304):
forward + backward of the loss on fixed logits, eager and compiled in alternating rounds, plus the compiled path's
first call (compilation included), which a CPU run pays again for every new batch shape.
Run: python -m benchmarks.bench_loss --threads 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="bench_loss_"))

import torch  # noqa: E402
from transformers.loss.loss_utils import ForCausalLMLoss  # noqa: E402

from benchmarks.common import (  # noqa: E402
    add_common_args, machine_info, pin_threads, result_name, time_rotating, write_json,
)

SHAPES = {"CPU recipe (8 x 256, vocabulary 8,192)": (8, 256, 8192),
          "GPT-2 vocabulary (2 x 256, vocabulary 50,304)": (2, 256, 50304)}


def loss_step(loss_function, logits: torch.Tensor, labels: torch.Tensor, vocab_size: int):
    def step():
        logits.grad = None
        loss_function(logits, labels, vocab_size=vocab_size).backward()
    return step


def main(argv: list[str] | None = None) -> dict:
    args = add_common_args(argparse.ArgumentParser(description=__doc__)).parse_args(argv)
    pin_threads(args.threads)
    rounds = 3 if args.quick else 15
    results = {}
    for title, (batch, seq_len, vocab_size) in SHAPES.items():
        torch._dynamo.reset()
        generator = torch.Generator().manual_seed(0)
        logits = torch.randn(batch, seq_len, vocab_size, generator=generator).requires_grad_()
        labels = torch.randint(0, vocab_size, (batch, seq_len), generator=generator)
        compiled = torch.compile(ForCausalLMLoss, fullgraph=True)
        eager_step = loss_step(ForCausalLMLoss, logits, labels, vocab_size)
        compiled_step = loss_step(compiled, logits, labels, vocab_size)
        start = time.perf_counter()
        compiled_step()
        first_call_s = time.perf_counter() - start
        times = time_rotating({"eager": eager_step, "compiled": compiled_step}, rounds, warmup=2)
        ratios = [e / c for e, c in zip(times["eager"], times["compiled"])]
        results[title] = {"eager_ms": statistics.median(times["eager"]) * 1e3,
                          "compiled_ms": statistics.median(times["compiled"]) * 1e3,
                          "compiled_speedup": statistics.median(ratios), "speedup_range": [min(ratios), max(ratios)],
                          "compiled_first_call_s": first_call_s}
        row = results[title]
        print(f"{title}: eager {row['eager_ms']:.1f} ms, compiled {row['compiled_ms']:.1f} ms -> "
              f"{row['compiled_speedup']:.2f}x (range {min(ratios):.2f}-{max(ratios):.2f}); compiling took "
              f"{first_call_s:.1f} s", flush=True)
    payload = {"benchmark": "loss", "machine": machine_info(args.threads), "rounds": rounds, "results": results}
    path = write_json(result_name("loss", args.threads), payload, args.out)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
