"""The host's share of a static-cache decoding step: our loop (static_decoding.py) against transformers' `_sample`.

On a GPU, `generate(..., cache_implementation="static")` compiles the forward into CUDA graphs, so a step costs the
device little and the host the rest: the decoding loop's own Python and small ops. A CPU shows that host work
directly when the model is tiny (2 layers, 64 wide: its forward is a few tenths of a millisecond). Three contenders
run the same generate() call, side by side in rotated rounds of one process, and must give the same tokens first:

- `ours`: our model, our loop (what generate() runs for a static cache);
- `ours, transformers' loop`: our model, transformers' `_sample` — the loop alone makes the difference to `ours`;
- `transformers GPT-2`: GPT2LMHeadModel with the same weights, in its own loop.

Forwards run eagerly, and compiled the way generate compiles them on CUDA (its CompileConfig, forced on the CPU with
the default inductor mode: CUDA graphs do not exist here). Greedy, 32-token prompt, 128 new tokens (min_new_tokens as
bench_gpu.py's generation part). GPU figures come from bench_gpu.py, which runs generate() and so our loop.
Run: python -m benchmarks.bench_decode_loop --threads 2 [--sizes tiny,small] [--modes eager,compiled]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from pathlib import Path
from unittest import mock

import torch

from benchmarks.common import (
    SIZES,
    add_common_args,
    describe_machine,
    machine_info,
    make_pair,
    pin_threads,
    result_name,
    time_rotating,
    write_json,
)

PROMPT_LEN = 32
NEW_TOKENS = 128
# The host-bound case: a forward this small costs the CPU about what a CUDA-graph replay costs a GPU's host.
TINY = dict(SIZES["small"], n_layer=2, n_embd=64, n_head=4)
BENCH_SIZES = {"tiny": TINY, **SIZES}
OURS_IN_TRANSFORMERS_LOOP = "ours, transformers' loop"
GREEDY = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "do_sample": False, "pad_token_id": 0,
          "cache_implementation": "static"}


def transformers_loop():
    """Our model in transformers' `_sample`: every call is handed on, as for a call our loop does not cover."""
    return mock.patch("hf_gpt_custom.modeling_gpt_custom.uses_static_decoding", lambda *args, **kwargs: False)


def generate_kwargs(mode: str) -> dict:
    if mode == "eager":
        return {**GREEDY, "disable_compile": True}
    from transformers import CompileConfig

    compile_config = CompileConfig(mode="default")  # CUDA's default is "reduce-overhead": CUDA graphs
    compile_config._compile_all_devices = True  # generate compiles only on accelerators unless told
    return {**GREEDY, "compile_config": compile_config}


def bench(size_name: str, mode: str, batch: int, rounds: int) -> dict:
    ours, gpt2 = make_pair(BENCH_SIZES[size_name])
    ours.eval()
    gpt2.eval()
    prompt = torch.randint(1, BENCH_SIZES[size_name]["vocab_size"], (batch, PROMPT_LEN),
                           generator=torch.Generator().manual_seed(batch))
    kwargs = generate_kwargs(mode)

    def ours_in_transformers_loop():
        with transformers_loop():
            return ours.generate(prompt, **kwargs)

    contenders = {
        "ours": lambda: ours.generate(prompt, **kwargs),
        OURS_IN_TRANSFORMERS_LOOP: ours_in_transformers_loop,
        "transformers GPT-2": lambda: gpt2.generate(prompt, **kwargs),
    }
    torch._dynamo.reset()
    with torch.inference_mode():
        tokens = {name: call() for name, call in contenders.items()}  # (compiles, where compiled)
        identical = all(torch.equal(tokens["transformers GPT-2"], other) for other in tokens.values())
        times = time_rotating(contenders, rounds, warmup=1)
    ms = {name: statistics.median(seconds) * 1e3 / NEW_TOKENS for name, seconds in times.items()}
    per_round = {name: [other / mine for other, mine in zip(times[name], times["ours"])]
                 for name in contenders if name != "ours"}
    result = {
        "size": size_name, "mode": mode, "batch": batch, "ms_per_step": ms, "tokens_identical": identical,
        "ours_speedup": {name: statistics.median(ratios) for name, ratios in per_round.items()},
        "ours_speedup_range": {name: [min(ratios), max(ratios)] for name, ratios in per_round.items()},
    }
    print(f"decode loop {size_name} {mode} batch {batch}: " + ", ".join(f"{name} {value:.3f}" for name, value in
          ms.items()) + f" ms/step; ours is {result['ours_speedup']['transformers GPT-2']:.2f}x GPT-2, "
          f"{result['ours_speedup'][OURS_IN_TRANSFORMERS_LOOP]:.2f}x its own model in "
          f"transformers' loop; tokens identical: {identical}", flush=True)
    return result


def write_report(payload: dict, stem: Path) -> None:
    """<stem>.md (a table) and <stem>.png (ms per step of each contender)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = payload["results"]
    names = list(results[0]["ms_per_step"])
    machine = payload["machine"]
    lines = [f"# Static-cache decoding: the host's share of a step ({describe_machine(machine)})", "",
             f"torch {machine['torch']}, transformers {machine['transformers']}, {machine['time_utc']} UTC, load "
             f"average {machine['load_average'][0]} at the start, {machine['load_average_at_end'][0]} at the end. "
             f"Greedy, {payload['prompt_len']}-token prompt, {payload['new_tokens']} new tokens; median ms per step "
             "over rotated rounds; the speed-ups are medians of per-round ratios.", "",
             "| size | forward | batch | " + " | ".join(f"{name} ms/step" for name in names)
             + " | ours vs GPT-2 | ours vs transformers' loop | tokens identical |",
             "|---|---|---:|" + "---:|" * len(names) + "---:|---:|---|"]
    for result in results:
        speedup = result["ours_speedup"]
        lines.append(f"| {result['size']} | {result['mode']} | {result['batch']} | "
                     + " | ".join(f"{result['ms_per_step'][name]:.3f}" for name in names)
                     + f" | {speedup['transformers GPT-2']:.2f}x | {speedup[names[1]]:.2f}x | "
                       f"{result['tokens_identical']} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")

    figure, axis = plt.subplots(figsize=(8, 3.5))
    labels = [f"{r['size']} {r['mode']} b{r['batch']}" for r in results]
    width = 0.8 / len(names)
    for index, name in enumerate(names):
        axis.bar([x + index * width for x in range(len(results))], [r["ms_per_step"][name] for r in results],
                 width, label=name)
    axis.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(results))], labels)
    axis.set_ylabel("ms per decoding step (lower is better)")
    axis.set_title(f"generate(cache_implementation='static'), {payload['new_tokens']} new tokens\n"
                   f"{describe_machine(payload['machine'])}", fontsize=9)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(stem.with_suffix(".png"), dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> dict:
    parser = add_common_args(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--sizes", default="tiny,small", help=f"comma-separated of {', '.join(BENCH_SIZES)}")
    parser.add_argument("--modes", default="eager,compiled", help="comma-separated: eager, compiled")
    parser.add_argument("--batches", default="1", help="comma-separated batch sizes (default: 1)")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (default: 7)")
    args = parser.parse_args(argv)
    pin_threads(args.threads)
    payload = {"machine": machine_info(args.threads), "prompt_len": PROMPT_LEN, "new_tokens": NEW_TOKENS,
               "results": []}
    rounds = max(args.rounds // (2 if args.quick else 1), 1)
    for size_name in args.sizes.split(","):
        for mode in args.modes.split(","):
            for batch in (int(batch) for batch in args.batches.split(",")):
                payload["results"].append(bench(size_name, mode, batch, rounds))
    path = write_json(result_name("decode_loop", args.threads), payload, args.out)
    write_report(payload, path.with_suffix(""))
    print(f"wrote {path} and its .md/.png")
    return payload


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
