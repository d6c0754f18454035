"""torch.profiler top-ops tables for one benchmark figure: where ours and the anchor spend the time.

    python -m benchmarks.profile_ops generate --size small --batch 1     # -> results/profile_generate_small_b1.txt
    python -m benchmarks.profile_ops train --size gpt2                   # -> results/profile_train_gpt2.txt

Each table is sorted by self CPU time and profiles ours and the anchor on the same weights and inputs, after a
warm-up call, one after the other.
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.bench_generate import GENERATE_KWARGS, PROMPT_LEN
from benchmarks.bench_train import BATCH_SHAPES, make_step, random_batch
from benchmarks.common import RESULTS_DIR, SIZES, make_pair, pin_threads

ROWS = 15


def _table(fn) -> tuple[str, float]:
    fn()  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    averages = prof.key_averages()
    total_ms = sum(event.self_cpu_time_total for event in averages) / 1e3
    return averages.table(sort_by="self_cpu_time_total", row_limit=ROWS), total_ms


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["generate", "train"])
    parser.add_argument("--size", default="small", choices=list(SIZES))
    parser.add_argument("--batch", type=int, default=1, help="generate: batch size (default: 1)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    pin_threads(args.threads)
    size = SIZES[args.size]
    ours, anchor = make_pair(size)
    if args.what == "generate":
        ours.eval()
        anchor.eval()
        prompt = torch.randint(1, size["vocab_size"], (args.batch, PROMPT_LEN), generator=torch.Generator().manual_seed(0))
        calls = {name: (lambda model=model: model.generate(prompt, **GENERATE_KWARGS)) for name, model in
                 (("ours", ours), ("anchor", anchor))}
        label, stem = f"generate {args.size} batch {args.batch}", f"profile_generate_{args.size}_b{args.batch}"
    else:
        input_ids = random_batch(size["vocab_size"], *BATCH_SHAPES[args.size])
        calls = {"ours": make_step(ours, input_ids), "anchor": make_step(anchor, input_ids)}
        label, stem = f"train step {args.size} {'x'.join(map(str, BATCH_SHAPES[args.size]))}", f"profile_train_{args.size}"
    sections = [f"# torch.profiler, {label}, {args.threads} thread(s): top {ROWS} ops by self CPU time\n"]
    with torch.inference_mode(args.what == "generate"):
        for name, fn in calls.items():
            table, total_ms = _table(fn)
            sections.append(f"## {name} (self CPU total {total_ms:.0f} ms)\n{table}")
    text = "\n".join(sections)
    path = RESULTS_DIR / f"{stem}.txt"
    path.write_text(text)
    print(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
