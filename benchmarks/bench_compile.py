"""torch.compile warm-up of one training step (forward, loss, backward): ours vs transformers' GPT-2, same weights.

The warm-up shows what the compiler is given: a loss computed as a Python loop over blocks of rows would be unrolled
into one huge graph (issue 23 measured 203 s on an H100 for that), one fused loss compiles in seconds. The shape has a
tiny body and GPT-2's vocabulary (50,304) with 4 x 1,024 tokens, so the loss is a large part of the graph, as in
GPT-2 training. Each model compiles in a process of its own with an empty inductor cache, and the order alternates
between runs: in one process the second model reused the first's kernels (a model compiled in 2.3-3.6 s after one
with the same kernels, 4.7 s after an unrelated one). The compiled steps are then timed side by side in one process,
rotated round by round, so their ratios compare calls made seconds apart. "ours" is called as the training loop calls
it, for the loss alone (return_logits=False); "ours, logits returned" as before, which hands the compiled backward a
zero gradient the size of the logits (pytorch/pytorch#131794).
Run: python -m benchmarks.bench_compile --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import torch

from hf_gpt_custom.training.workload import language_model_loss
from benchmarks.common import (
    add_common_args, machine_info, make_pair, pin_threads, result_name, time_call, time_rotating, write_json,
)

SHAPE = {"n_layer": 2, "n_head": 4, "n_embd": 128, "n_positions": 1024, "vocab_size": 50304,
         "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
BATCH, SEQ_LEN = 4, 1024


CONTENDERS = ("ours", "ours, logits returned", "transformers GPT-2")


def compiled_step(name: str, models: tuple[torch.nn.Module, torch.nn.Module], input_ids: torch.Tensor):
    """One compiled training step (forward, loss, backward) of contender `name`, as a function of no arguments."""
    ours, anchor = models
    model = (anchor if name == "transformers GPT-2" else ours).train()
    step = torch.compile(model)

    def train_step() -> None:
        if name == "ours":  # as the training loop calls it: the loss alone
            loss = language_model_loss(step, input_ids, input_ids)
        else:
            loss = step(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)

    return train_step


def compiled_step_times(train_step, steps: int) -> dict:
    """Seconds of the first compiled step (compilation included) and the median of the next `steps` steps."""
    warm_up_s = time_call(train_step)
    steady = sorted(time_call(train_step) for _ in range(steps))
    return {"warm_up_s": warm_up_s, "step_s": steady[len(steady) // 2]}


def _input_ids() -> torch.Tensor:
    return torch.randint(0, SHAPE["vocab_size"], (BATCH, SEQ_LEN), generator=torch.Generator().manual_seed(0))


def _measure_here(name: str, threads: int, steps: int) -> dict:
    """Compile and time contender `name` in this process (the child of main)."""
    pin_threads(threads)
    # The first compilation in a process also pays for loading the compiler itself: spend that on a toy function.
    torch.compile(lambda x: (x * 2).sum())(torch.ones(4))
    return compiled_step_times(compiled_step(name, make_pair(SHAPE), _input_ids()), steps)


def _steps_side_by_side(threads: int, rounds: int) -> dict:
    """Every contender compiled in this process (each its own model), then their steps in rotated rounds: per-round
    ratios of ours to each other contender (above 1: ours is faster)."""
    pin_threads(threads)
    input_ids = _input_ids()
    steps = {name: compiled_step(name, make_pair(SHAPE), input_ids) for name in CONTENDERS}
    times = time_rotating(steps, rounds, warmup=2)
    return {"rounds": rounds, "step_s": {name: statistics.median(seconds) for name, seconds in times.items()},
            "ours_speedup_each": {name: [other / mine for mine, other in zip(times["ours"], times[name])]
                                  for name in CONTENDERS if name != "ours"}}


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
    parser.add_argument("--step-rounds", type=int, default=9, help="rotated rounds of the side-by-side steps")
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
    side_by_side = _steps_side_by_side(args.threads, 3 if args.quick else args.step_rounds)
    for name, ratios in side_by_side["ours_speedup_each"].items():
        print(f"compiled step, side by side: ours {statistics.median(ratios):.2f}x {name} (rounds "
              f"{min(ratios):.2f}-{max(ratios):.2f})", flush=True)
    payload = {"machine": machine_info(args.threads), "shape": {**SHAPE, "batch": BATCH, "seq_len": SEQ_LEN},
               "method": f"warm-up: each model in {rounds} fresh process(es) with an empty inductor cache, order "
                         "alternating, the lower median; steps: all models in one process, rotated rounds",
               "results": results, "steps_side_by_side": side_by_side}
    path = write_json(result_name("compile", args.threads), payload, args.out)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
