"""torch.compile warm-up of one training step (forward, loss, backward): ours vs transformers' GPT-2, same weights.

The warm-up shows what the compiler is given: a loss computed as a Python loop over blocks of rows would be unrolled
into one huge graph (issue 23 measured 203 s on an H100 for that), one fused loss compiles in seconds. The shape has a
tiny body and GPT-2's vocabulary (50,304) with 4 x 1,024 tokens, so the loss is a large part of the graph, as in
GPT-2 training. Each model is compiled in a fresh dynamo cache; the steady step after warm-up is timed too.
Run: python -m benchmarks.bench_compile --threads 2
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

# A fresh inductor cache: a graph compiled by an earlier run would otherwise load from disk in a fraction of the time.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_compile_")

import torch  # noqa: E402

from benchmarks.common import (  # noqa: E402
    add_common_args, machine_info, make_pair, pin_threads, result_name, write_json,
)

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


def main(argv: list[str] | None = None) -> dict:
    parser = add_common_args(argparse.ArgumentParser(description=__doc__))
    args = parser.parse_args(argv)
    pin_threads(args.threads)
    ours, anchor = make_pair(SHAPE)
    input_ids = torch.randint(0, SHAPE["vocab_size"], (BATCH, SEQ_LEN), generator=torch.Generator().manual_seed(0))
    steps = 1 if args.quick else 3
    # The first compilation in a process also pays for loading the compiler itself: spend that on a toy function.
    torch.compile(lambda x: (x * 2).sum())(torch.ones(4))
    results = {}
    for name, model in (("ours", ours.train()), ("transformers GPT-2", anchor.train())):
        results[name] = compiled_step_times(model, input_ids, steps)
        print(f"compile {name}: warm-up {results[name]['warm_up_s']:.1f} s, then {results[name]['step_s']:.2f} s/step",
              flush=True)
    payload = {"machine": machine_info(args.threads), "shape": {**SHAPE, "batch": BATCH, "seq_len": SEQ_LEN},
               "results": results}
    path = write_json(result_name("compile", args.threads), payload, args.out)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
