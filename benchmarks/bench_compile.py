"""torch.compile warm-up of one training step (forward, loss, backward): ours vs transformers' GPT-2, same weights.

The warm-up shows what the compiler is given: a loss computed as a Python loop over blocks of rows would be unrolled
into one huge graph (issue 23 measured 203 s on an H100 for that), one fused loss compiles in seconds. The shape has a
tiny body and GPT-2's vocabulary (50,304) with 4 x 1,024 tokens, so the loss is a large part of the graph, as in
GPT-2 training. Each model compiles in a process of its own with an empty inductor cache, and the order alternates
between runs: in one process the second model reused the first's kernels (a model compiled in 2.3-3.6 s after one
with the same kernels, 4.7 s after an unrelated one). The steady step after warm-up is timed too.
Run: python -m benchmarks.bench_compile --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

from benchmarks.common import add_common_args, machine_info, make_pair, pin_threads, result_name, write_json

SHAPE = {"n_layer": 2, "n_head": 4, "n_embd": 128, "n_positions": 1024, "vocab_size": 50304,
         "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
BATCH, SEQ_LEN = 4, 1024


def compiled_step_times(model: torch.nn.Module, input_ids: torch.Tensor, steps: int) -> dict:
    """Seconds of the first compiled step (compilation included) and the median of the next `steps` steps."""
    torch._dynamo.reset()
    step = torch.compile(model)

    def train_step() -> float:
        start = time.perf_counter()
        step(input_ids=input_ids, labels=input_ids).loss.backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    warm_up_s = train_step()
    steady = sorted(train_step() for _ in range(steps))
    return {"warm_up_s": warm_up_s, "step_s": steady[len(steady) // 2]}


CONTENDERS = ("ours", "transformers GPT-2")


def _measure_here(name: str, threads: int, steps: int) -> dict:
    """Compile and time contender `name` in this process (the child of main)."""
    pin_threads(threads)
    ours, anchor = make_pair(SHAPE)
    model = {"ours": ours, "transformers GPT-2": anchor}[name].train()
    input_ids = torch.randint(0, SHAPE["vocab_size"], (BATCH, SEQ_LEN), generator=torch.Generator().manual_seed(0))
    # The first compilation in a process also pays for loading the compiler itself: spend that on a toy function.
    torch.compile(lambda x: (x * 2).sum())(torch.ones(4))
    return compiled_step_times(model, input_ids, steps)


def _measure_in_fresh_process(name: str, threads: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_compile_") as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}  # nothing compiled before, by any run
        done = subprocess.run([sys.executable, "-m", "benchmarks.bench_compile", "--contender", name,
                               "--threads", str(threads), "--steps", str(steps)],
                              env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = add_common_args(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--contender", choices=CONTENDERS, help=argparse.SUPPRESS)  # a child process: one model
    parser.add_argument("--steps", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per model, alternating the order")
    args = parser.parse_args(argv)
    if args.contender:
        print(json.dumps(_measure_here(args.contender, args.threads, args.steps)), flush=True)
        return {}
    steps, rounds = (1, 1) if args.quick else (3, args.rounds)
    runs: dict[str, list[dict]] = {name: [] for name in CONTENDERS}
    for round_index in range(rounds):
        for name in (CONTENDERS if round_index % 2 == 0 else CONTENDERS[::-1]):
            runs[name].append(_measure_in_fresh_process(name, args.threads, steps))
            print(f"compile {name}: warm-up {runs[name][-1]['warm_up_s']:.1f} s, then "
                  f"{runs[name][-1]['step_s']:.2f} s/step", flush=True)
    results = {name: {"warm_up_s": sorted(r["warm_up_s"] for r in measured)[(len(measured) - 1) // 2],
                      "step_s": sorted(r["step_s"] for r in measured)[(len(measured) - 1) // 2],
                      "warm_up_s_each": [r["warm_up_s"] for r in measured]}
               for name, measured in runs.items()}
    payload = {"machine": machine_info(args.threads), "shape": {**SHAPE, "batch": BATCH, "seq_len": SEQ_LEN},
               "method": f"each model in {rounds} fresh process(es) with an empty inductor cache, order alternating; "
                         "the lower median of the warm-ups", "results": results}
    path = write_json(result_name("compile", args.threads), payload, args.out)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
