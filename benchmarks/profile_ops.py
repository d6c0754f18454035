"""torch.profiler top-ops tables for one benchmark figure: where ours and the anchor spend the time.

    python -m benchmarks.profile_ops generate --size small --batch 1     # -> results/profile_generate_small_b1.txt
    python -m benchmarks.profile_ops train --size gpt2                   # -> results/profile_train_gpt2.txt
    python -m benchmarks.profile_ops generate --size gpt2 --batch 16 --cache static --device cuda
                                                  # -> results/profile_generate_gpt2_b16_static_cuda.txt

Each table profiles ours and the anchor (transformers' GPT-2) on the same weights and inputs, after a warm-up call,
one after the other; with a static cache also our model in transformers' own decoding loop, which separates what our
loop (static_decoding.py) gives from what the model gives. On the CPU the tables are sorted by self CPU time. On a
GPU the models run in bf16, the tables are sorted by device time, and each section starts with a step's wall time
against its device-busy time (kernels, copies, CUDA-graph replays): a step whose device is busy for most of its wall
time is the device's, one that is mostly idle is the host's (Python, launches, reads back to the host).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.bench_decode_loop import OURS_IN_TRANSFORMERS_LOOP, transformers_loop
from benchmarks.bench_generate import GENERATE_KWARGS, NEW_TOKENS, PROMPT_LEN
from benchmarks.bench_train import BATCH_SHAPES, make_step, random_batch
from benchmarks.common import RESULTS_DIR, SIZES, device_rows, make_pair, pin_threads

ROWS = 15
# Host-side CUDA runtime calls worth counting per step: launches, graph replays, and the waits a read back to the
# host costs (a synchronising copy or a stream synchronisation).
RUNTIME_CALLS = ("cudaLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync", "cudaStreamSynchronize")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _profile(fn, device: torch.device, steps: int) -> tuple[str, str]:
    """(the summary line, the top-ops table) of one call of `fn` after a warm-up call; `steps` divides the totals."""
    fn()  # warm-up (and compilation, for a compiled or static-cache generate)
    _synchronize(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        fn()
        _synchronize(device)
        wall_ms = (time.perf_counter() - start) * 1e3
    averages = prof.key_averages()
    summary = f"wall {wall_ms / steps:.3f} ms per step"
    if device.type == "cuda":
        busy_ms = sum(event.self_device_time_total for event in device_rows(averages)) / 1e3
        counts = {event.key: event.count for event in averages if event.key in RUNTIME_CALLS}
        summary += (f", device busy {busy_ms / steps:.3f} ms per step ({busy_ms / wall_ms:.0%} of the wall time); "
                    + ", ".join(f"{name} {counts.get(name, 0) / steps:.1f}" for name in RUNTIME_CALLS) + " per step")
        table = averages.table(sort_by="self_device_time_total", row_limit=ROWS)
    else:
        summary += f", self CPU total {sum(event.self_cpu_time_total for event in averages) / 1e3 / steps:.3f} ms"
        table = averages.table(sort_by="self_cpu_time_total", row_limit=ROWS)
    return summary, table


def _generate_calls(size: dict, batch: int, cache: str, device: torch.device, new_tokens: int) -> dict:
    ours, anchor = make_pair(size)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # bench_gpu.py's generation rows: bf16
    ours, anchor = (model.to(device=device, dtype=dtype).eval() for model in (ours, anchor))
    prompt = torch.randint(1, size["vocab_size"], (batch, PROMPT_LEN), generator=torch.Generator().manual_seed(0))
    prompt = prompt.to(device)
    kwargs = {**GENERATE_KWARGS, "max_new_tokens": new_tokens, "min_new_tokens": new_tokens,
              **({"cache_implementation": "static"} if cache == "static" else {})}
    calls = {"ours": lambda: ours.generate(prompt, **kwargs)}
    if cache == "static":
        def ours_in_transformers_loop():
            with transformers_loop():
                return ours.generate(prompt, **kwargs)

        calls[OURS_IN_TRANSFORMERS_LOOP] = ours_in_transformers_loop
    calls["anchor"] = lambda: anchor.generate(prompt, **kwargs)
    return calls


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["generate", "train"])
    parser.add_argument("--size", default="small", choices=list(SIZES))
    parser.add_argument("--batch", type=int, default=1, help="generate: batch size (default: 1)")
    parser.add_argument("--cache", default="dynamic", choices=["dynamic", "static"],
                        help="generate: the cache (default: dynamic; static compiles the forward as generate does)")
    parser.add_argument("--device", default="cpu", help="generate: cpu or cuda (default: cpu)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS, help=f"generate (default: {NEW_TOKENS})")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="folder for the table (default: results/)")
    args = parser.parse_args(argv)
    pin_threads(args.threads)
    size = SIZES[args.size]
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch {torch.__version__} sees no CUDA device here; run it on the GPU "
                     "machine (bash benchmarks/gpu_session.sh generation-profile) or pass --device cpu")
    if args.what == "generate":
        calls = _generate_calls(size, args.batch, args.cache, device, args.new_tokens)
        steps = args.new_tokens
        label = f"generate {args.size} batch {args.batch}, {args.cache} cache, {args.new_tokens} new tokens"
        stem = f"profile_generate_{args.size}_b{args.batch}"
        stem += ("_static" if args.cache == "static" else "") + ("" if device.type == "cpu" else f"_{device.type}")
    else:
        if device.type != "cpu":
            parser.error("train profiles the CPU step; GPU training is profiled by benchmarks/gpu_probe.py")
        ours, anchor = make_pair(size)
        input_ids = random_batch(size["vocab_size"], *BATCH_SHAPES[args.size])
        calls = {"ours": make_step(ours, input_ids), "anchor": make_step(anchor, input_ids)}
        steps = 1
        label = f"train step {args.size} {'x'.join(map(str, BATCH_SHAPES[args.size]))}"
        stem = f"profile_train_{args.size}"
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{args.threads} CPU thread(s)"
    sections = [f"# torch.profiler, {label}, {where}, torch {torch.__version__}: top {ROWS} ops\n"]
    with torch.inference_mode(args.what == "generate"):
        for name, fn in calls.items():
            summary, table = _profile(fn, device, steps)
            sections.append(f"## {name}: {summary}\n{table}")
            print(f"{name}: {summary}", flush=True)
    text = "\n".join(sections)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{stem}.txt"
    path.write_text(text)
    print(f"wrote {path}")
    return text


if __name__ == "__main__":
    main()
