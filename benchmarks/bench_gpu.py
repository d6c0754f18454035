"""GPU benchmark (issue 23): training speed of transformers' GPT-2, nanoGPT's GPT and ours; generation; and the
project's own training loop against the bare model.

    python benchmarks/bench_gpu.py                                   # every part, on the first CUDA device
    python benchmarks/bench_gpu.py --parts train --modes compile --sweep 16,32
    python benchmarks/bench_gpu.py --smoke [--out DIR]               # tiny shapes on the CPU: proves the script only
    python benchmarks/bench_gpu.py --report-only                     # gpu_results.md/.png from results/gpu_*.json

Training: GPT-2 124M (12 x 768, vocabulary 50,304, 1,024 tokens), bf16 autocast, fused AdamW, gradient clipping at
1.0, dropout 0. The three models hold the same weights and run in one process in rotated rounds (A B C, B C A, ...)
of `--steps` steps, synchronised once per round; a ratio is the median of per-round ratios. First at batch 16, then
a sweep (each model alone; out of memory ends its sweep) finds the batch giving each model the most tokens/s, and the
three run side by side again at those batches. MFU = tokens/s x (6N + 12·L·d·T) / the GPU's peak bf16 FLOP/s
(gpu_report.PEAK_BF16_FLOPS; none for an unknown GPU). Compile warm-up: the first step, compilation included. Peak
memory: the most the allocator held during one step, counting the model's weights and optimizer state, not the
other contenders'.
Generation: `generate()` as a user calls it, greedy, batch 1 and 16, a 32-token prompt and 128 new tokens, the
models in bf16, with the default dynamic cache and with `cache_implementation="static"` (on CUDA, generate then
compiles the decoding forward itself); ms per decoding step, transformers' GPT-2 against ours in rotated rounds.
Loop: `hf-gpt-custom train`'s train() on a local text file at the training shape, its logged step times after
`--loop-skip` steps against the bare model's step (the one above) measured just before and after it.
Writes gpu_train_<mode>.json, gpu_loop_<mode>.json and gpu_generate.json, then gpu_results.md and gpu_results.png
from every gpu_*.json in --out.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as `python benchmarks/bench_gpu.py`
    sys.path.insert(0, str(REPO_ROOT))
# An empty inductor cache: kernels compiled by the tests before (same machine, same call) would load from disk and
# shorten a warm-up. Within the run, ours compiles first (WARM_UP_ORDER), so no contender reuses kernels ours needs.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="bench_gpu_inductor_"))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402

from benchmarks import gpu_report  # noqa: E402
from benchmarks.bench_decode_loop import OURS_IN_TRANSFORMERS_LOOP, transformers_loop  # noqa: E402
from benchmarks.common import NO_DROPOUT, RESULTS_DIR, param_count  # noqa: E402
from benchmarks.nanogpt_model import NanoGPT, nanogpt_from_gpt2  # noqa: E402
from hf_gpt_custom.training.workload import language_model_loss  # noqa: E402

GPT2_124M = {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024, "vocab_size": 50304}
SMOKE_SHAPE = {"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 64, "vocab_size": 512}
MODELS = ("transformers GPT-2", "nanoGPT", "ours")
# Compiled in this order: ours first, cold; the others may then reuse kernels of its (identical) matmuls, which can
# only shorten their warm-ups, never ours' (ours compiled last had measured 20.9 s at batch 64 beside nanoGPT's 1.3 s).
WARM_UP_ORDER = ("ours", "nanoGPT", "transformers GPT-2")
RATIOS = (("ours", "nanoGPT"), ("ours", "transformers GPT-2"), ("nanoGPT", "transformers GPT-2"))
STEP_SETTINGS = ("Step: bf16 autocast, fused AdamW (the training recipe's groups), gradient clipping at 1.0, "
                 "dropout 0; each model called as its own training code calls it (ours with return_logits=False, "
                 "as training/workload.py does; nanoGPT's and GPT-2's forwards return their logits).")
SHARED_TEXT = REPO_ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
CARRIED_TEXT = REPO_ROOT / ".gpu_carry" / "tinyshakespeare" / "input.txt"  # where gpu_session.sh puts it


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def graph_breaks() -> int:
    """Graph breaks dynamo has counted in this process so far."""
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


def build_model(name: str, shape: dict, device: torch.device) -> torch.nn.Module:
    """One contender with the weights every contender gets: transformers' GPT-2 initialised from seed 0 (sdpa),
    nanoGPT's GPT or ours converted from it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.convert_gpt2 import from_gpt2_model

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(**shape, **NO_DROPOUT, bos_token_id=0, eos_token_id=0,
                                      attn_implementation="sdpa"))
    model = {"transformers GPT-2": lambda: gpt2, "nanoGPT": lambda: nanogpt_from_gpt2(gpt2),
             "ours": lambda: from_gpt2_model(gpt2, GPTCustomForCausalLM)}[name]()
    return model.to(device).train()


class Trainer:
    """One contender's training step at one batch shape, on a fixed random batch already on the device."""

    def __init__(self, name: str, model: torch.nn.Module, batch: int, seq_len: int, device: torch.device,
                 compile_backend: str | None, compile_mode: str | None = None):
        from hf_gpt_custom.training.config import TrainConfig
        from hf_gpt_custom.training.train import build_optimizer

        from hf_gpt_custom import GPTCustomForCausalLM

        self.name, self.model, self.batch, self.seq_len, self.device = name, model, batch, seq_len, device
        self.loss_alone = isinstance(model, GPTCustomForCausalLM)
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(model, TrainConfig(dataset="random token batches"))  # data not read
        self.forward = torch.compile(model, backend=compile_backend, mode=compile_mode, dynamic=False) \
            if compile_backend else model
        vocab_size = model.config.vocab_size
        generator = torch.Generator().manual_seed(batch)
        self.input_ids = torch.randint(0, vocab_size, (batch, seq_len), generator=generator).to(device)
        self.targets = self.input_ids.roll(-1, dims=1)  # nanoGPT's targets: the same work as shifted labels
        self.warmup_s = self.graph_breaks = self.peak_memory_gb = None

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len

    def step_context(self):
        """What a step runs under: bf16 autocast (gpu_probe.py's contenders add their attention backends to it)."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def step(self) -> None:
        with self.step_context():
            if isinstance(self.model, NanoGPT):
                loss = self.forward(self.input_ids, self.targets)[1]
            elif self.loss_alone:  # ours as the training loop calls it: no logits returned
                loss = language_model_loss(self.forward, self.input_ids, self.input_ids)
            else:
                loss = self.forward(input_ids=self.input_ids, labels=self.input_ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.parameters, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()
        synchronize(self.device)

    def warm_up(self, steps: int = 2) -> None:
        """First step timed apart (compilation, cuBLAS and allocator warm-up), then `steps` more untimed; then the
        peak memory of one step."""
        breaks_before = graph_breaks()
        start = time.perf_counter()
        self.run(1)
        self.warmup_s = time.perf_counter() - start
        self.graph_breaks = graph_breaks() - breaks_before if self.forward is not self.model else None
        self.run(steps)
        self.peak_memory_gb = self.step_peak_memory_gb()

    def resident_bytes(self) -> int:
        """Bytes this contender keeps between steps: weights and buffers (tied once), optimizer state, its batch."""
        tensors = {id(t): t for t in (*self.model.parameters(), *self.model.buffers())}
        for state in self.optimizer.state.values():
            tensors.update({id(v): v for v in state.values() if isinstance(v, torch.Tensor)})
        tensors.update({id(t): t for t in (self.input_ids, self.targets)})
        return sum(t.numel() * t.element_size() for t in tensors.values())

    def step_peak_memory_gb(self) -> float | None:
        if self.device.type != "cuda":
            return None  # the CPU has no per-allocation peak to read
        gc.collect()
        others = torch.cuda.memory_allocated(self.device) - self.resident_bytes()  # the other contenders' state
        torch.cuda.reset_peak_memory_stats(self.device)
        self.run(1)
        return (torch.cuda.max_memory_allocated(self.device) - others) / 1e9


def release(device: torch.device) -> None:
    """Hand the memory of dropped contenders back to the GPU before the next one is built."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


def time_rotating(calls: dict[str, Callable[[], object]], rounds: int, warmup: int = 0) -> dict[str, list[float]]:
    """Seconds per call of each, `rounds` times, the order rotated by one every round (A B C, B C A, C A B, ...);
    common.time_rotating without its gc.collect(), which costs seconds per call in a process holding these models.
    Each call ends with a device synchronisation, so a host clock times it."""
    names = list(calls)
    for _ in range(warmup):
        for name in names:
            calls[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - start)
    return times


def measure_side_by_side(trainers: dict[str, Trainer], rounds: int, steps: int, flops_per_token: float,
                         peak_flops: float | None) -> dict:
    """Rotated rounds of `steps` steps each; per model the median tokens/s, per pair the median per-round ratio."""
    times = time_rotating({name: (lambda t=t: t.run(steps)) for name, t in trainers.items()}, rounds, warmup=0)
    rates = {name: [trainers[name].tokens * steps / s for s in seconds] for name, seconds in times.items()}
    models = {}
    for name, trainer in trainers.items():
        tokens_per_s = statistics.median(rates[name])
        models[name] = {"batch": trainer.batch, "tokens_per_s": tokens_per_s, "round_tokens_per_s": rates[name],
                        "mfu": gpu_report.mfu(tokens_per_s, flops_per_token, peak_flops),
                        "warmup_s": trainer.warmup_s, "peak_memory_gb": trainer.peak_memory_gb,
                        "graph_breaks": trainer.graph_breaks}
    ratios = {}
    for a, b in RATIOS:
        if a in rates and b in rates:
            per_round = [x / y for x, y in zip(rates[a], rates[b])]
            ratios[f"{a} / {b}"] = {"median": statistics.median(per_round), "min": min(per_round),
                                    "max": max(per_round)}
    return {"rounds": rounds, "steps_per_round": steps, "models": models, "ratios": ratios}


def sweep_batches(measure: Callable[[int], float], batches: list[int]) -> list[dict]:
    """tokens/s at each batch size in order; the first out-of-memory ends the sweep (larger batches need more)."""
    points = []
    for batch in batches:
        try:
            points.append({"batch": batch, "tokens_per_s": measure(batch)})
        except torch.cuda.OutOfMemoryError:
            points.append({"batch": batch, "oom": True})
            break
    return points


def best_batch(points: list[dict]) -> int | None:
    fitted = [p for p in points if not p.get("oom")]
    return max(fitted, key=lambda p: p["tokens_per_s"])["batch"] if fitted else None


def bench_train(args, mode: str, meta: dict, save: Callable[[dict], None] = lambda payload: None) -> dict:
    """The three models side by side at --batch, then the sweep and the best batches. `save` gets the payload after
    each of those, so a run cut short (the device tool's time caps) keeps what it measured."""
    device, shape, seq_len = args.device, args.shape, args.shape["n_positions"]
    backend = args.compile_backend if mode == "compile" else None
    flops = flops_per_token(shape, seq_len)
    peak = meta["peak_bf16_flops"]

    def make(name: str, batch: int) -> Trainer:
        trainer = Trainer(name, build_model(name, shape, device), batch, seq_len, device, backend)
        trainer.warm_up()
        return trainer

    torch._dynamo.reset()
    warmed = {name: make(name, args.batch) for name in WARM_UP_ORDER}
    trainers = {name: warmed[name] for name in MODELS}  # tables in MODELS order
    batch16 = measure_side_by_side(trainers, args.rounds, args.steps, flops, peak)
    print_table(f"train {mode}, batch {args.batch}", batch16)
    sweep, kept = {}, {}

    def payload(best: dict | None, finished: bool) -> dict:
        return {"part": "train", "mode": mode, "meta": meta, "shape": {**shape, "seq_len": seq_len},
                "flops_per_token": flops, "compile_backend": backend, "settings": STEP_SETTINGS,
                "batch16": batch16, "sweep": sweep, "best": best,
                **({} if finished else {"unfinished": "cut short during the batch-size sweep"})}

    save(payload(None, finished=False))
    for name in MODELS:
        if name not in args.sweep_models:  # not swept: measured at --batch only, absent from the best-batch table
            trainers.pop(name)
            continue
        candidates = {args.batch: trainers.pop(name)}

        def measure(batch: int, name=name, candidates=candidates) -> float:
            if batch not in candidates:
                try:
                    candidates[batch] = make(name, batch)
                except torch.cuda.OutOfMemoryError:
                    release(device)
                    raise
            times = time_rotating({name: lambda: candidates[batch].run(args.steps)}, args.rounds, warmup=0)[name]
            return candidates[batch].tokens * args.steps / statistics.median(times)

        sweep[name] = sweep_batches(measure, args.sweep)
        best = best_batch(sweep[name]) or args.batch
        kept[name] = candidates.pop(best)
        candidates.clear()
        release(device)
        print(f"  sweep {name}: " + ", ".join(f"{p['batch']}: {'OOM' if p.get('oom') else round(p['tokens_per_s'])}"
                                             for p in sweep[name]) + f" -> best batch {best}", flush=True)
        save(payload(None, finished=False))
    try:
        best = measure_side_by_side(kept, args.rounds, args.steps, flops, peak)
        print_table(f"train {mode}, best batches", best)
    except torch.cuda.OutOfMemoryError:
        best = None
        print("  the three models at their best batches did not fit side by side; see the sweep", flush=True)
    kept.clear()
    release(device)
    return payload(best, finished=True)


def flops_per_token(shape: dict, seq_len: int) -> float:
    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM

    with torch.device("meta"):  # parameters counted without allocating them
        ours = GPTCustomForCausalLM(GPTCustomConfig(**shape))
    return gpu_report.flops_per_token(param_count(ours), ours.transformer.wpe.weight.numel(), shape["n_layer"],
                                      shape["n_embd"], seq_len)


def print_table(title: str, table: dict) -> None:
    print(f"{title}: " + "; ".join(f"{name} {row['tokens_per_s']:,.0f} tok/s (batch {row['batch']}, MFU "
                                   f"{'—' if row['mfu'] is None else format(row['mfu'], '.1%')})"
                                   for name, row in table["models"].items()), flush=True)
    print("  " + "; ".join(f"{pair} {ratio['median']:.2f}x" for pair, ratio in table["ratios"].items()), flush=True)


def bench_generate(args, meta: dict, save: Callable[[dict], None] = lambda payload: None) -> dict:
    """ms per decoding step of `generate()`, transformers' GPT-2 against ours, dynamic then static cache; `save` gets
    the payload after every row, marked unfinished until the last (a time cap then still leaves a result file)."""
    device, shape = args.device, args.shape
    torch._dynamo.reset()
    models = {name: build_model(name, shape, device).to(torch.bfloat16).eval() for name in ("transformers GPT-2", "ours")}
    base = {"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens, "do_sample": False,
            "pad_token_id": 0}
    results = []
    for batch in args.gen_batches:
        generator = torch.Generator().manual_seed(batch)
        prompt = torch.randint(1, shape["vocab_size"], (batch, args.prompt_len), generator=generator).to(device)
        tokens_by_cache = {}
        for cache in ("dynamic", "static"):
            kwargs = {**base, **({"cache_implementation": "static"} if cache == "static" else {})}
            calls = {name: (lambda m=model: (m.generate(prompt, **kwargs), synchronize(device))[0])
                     for name, model in models.items()}
            if cache == "static":  # what our decoding loop (static_decoding.py) alone gives: ours in transformers'
                calls[OURS_IN_TRANSFORMERS_LOOP] = lambda: _in_transformers_loop(calls["ours"])
                # and what compiling the token choice gives: our loop with the choice eager
                calls[OURS_EAGER_CHOICE] = lambda: _with_eager_choice(calls["ours"])
            first_call_s, tokens = {}, {}
            with torch.inference_mode():
                for name, call in calls.items():
                    start = time.perf_counter()
                    tokens[name] = call()
                    first_call_s[name] = time.perf_counter() - start
                times = time_rotating(calls, args.gen_rounds, warmup=1)
            tokens_by_cache[cache] = tokens["ours"]
            ms = {name: statistics.median(seconds) * 1e3 / args.new_tokens for name, seconds in times.items()}
            speedups = [g / o for g, o in zip(times["transformers GPT-2"], times["ours"])]
            row = {
                "batch": batch, "cache": cache, "gpt2_ms_per_step": ms["transformers GPT-2"],
                "ours_ms_per_step": ms["ours"], "speedup": statistics.median(speedups),
                "ours_transformers_loop_ms_per_step": ms.get(OURS_IN_TRANSFORMERS_LOOP),
                "ours_eager_choice_ms_per_step": ms.get(OURS_EAGER_CHOICE),
                "speedup_min": min(speedups), "speedup_max": max(speedups), "first_call_s": first_call_s,
                # generate() keeps the forward it compiled for a static cache as `_compiled_call`
                "ours_compiled": cache == "static" and vars(models["ours"]).get("_compiled_call") is not None,
                "gpt2_compiled": cache == "static" and vars(models["transformers GPT-2"]).get("_compiled_call")
                is not None,
                "tokens_equal_fraction": _equal_fraction(tokens["ours"], tokens["transformers GPT-2"], args.prompt_len),
            }
            if cache == "static":
                row["ours_static_equal_dynamic_fraction"] = _equal_fraction(
                    tokens_by_cache["static"], tokens_by_cache["dynamic"], args.prompt_len)
            row["tokens_equal_fraction_fp32"] = _fp32_tokens_equal(shape, device, prompt, kwargs, args)
            results.append(row)
            save(_generate_payload(args, meta, results, unfinished=f"stopped after the batch-{batch} {cache} row"))
            print(f"generate batch {batch} {cache}: GPT-2 {row['gpt2_ms_per_step']:.2f} ms/step, ours "
                  f"{row['ours_ms_per_step']:.2f} -> {row['speedup']:.2f}x (ours with the token choice eager: "
                  f"{row['ours_eager_choice_ms_per_step'] or float('nan'):.2f}; compiled: {row['ours_compiled']}; "
                  f"tokens equal {row['tokens_equal_fraction']:.0%})", flush=True)
    models.clear()
    release(device)
    return _generate_payload(args, meta, results)


def _generate_payload(args, meta: dict, results: list[dict], unfinished: str | None = None) -> dict:
    payload = {"part": "generate", "meta": meta, "dtype": "bfloat16", "prompt_len": args.prompt_len,
               "new_tokens": args.new_tokens, "results": list(results),
               "settings": f"Models in bf16, eval mode; {args.gen_rounds} rotated rounds after one warm-up call; the "
                           "first call (compilation included) is timed apart. Static rows also time our model in "
                           "transformers' own decoding loop."}
    return payload if unfinished is None else {**payload, "unfinished": unfinished}


def _in_transformers_loop(call: Callable[[], torch.Tensor]) -> torch.Tensor:
    with transformers_loop():
        return call()


OURS_EAGER_CHOICE = "ours, token choice eager"


def _with_eager_choice(call: Callable[[], torch.Tensor]) -> torch.Tensor:
    """Our loop with the token choice left eager, as before it was compiled on GPUs (static_decoding.py)."""
    from hf_gpt_custom import static_decoding

    devices = static_decoding.COMPILED_CHOICE_DEVICES
    static_decoding.COMPILED_CHOICE_DEVICES = ()
    try:
        return call()
    finally:
        static_decoding.COMPILED_CHOICE_DEVICES = devices


def _fp32_tokens_equal(shape: dict, device: torch.device, prompt: torch.Tensor, kwargs: dict, args) -> float:
    """The correctness check of a generation row: the share of ours' greedy new tokens (float32, TF32 off, the row's
    cache) equal to GPT-2's (float32, dynamic cache). In bf16 the random-weight models' near-tied logits flip with the
    kernel, so the bf16 tokens check nothing; float32 leaves gaps far above its rounding. 32 tokens: cheap."""
    short = {**kwargs, "max_new_tokens": min(32, args.new_tokens), "min_new_tokens": min(32, args.new_tokens),
             "disable_compile": True}  # the same tokens compiled or not; not compiling keeps the check seconds long
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.inference_mode():
            gpt2 = build_model("transformers GPT-2", shape, device).eval()
            reference = gpt2.generate(prompt, **{**short, "cache_implementation": None})
            del gpt2
            ours = build_model("ours", shape, device).eval()
            tokens = ours.generate(prompt, **short)
            del ours
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    release(device)
    return _equal_fraction(tokens, reference, prompt.shape[1])


def _equal_fraction(a: torch.Tensor, b: torch.Tensor, prompt_len: int) -> float:
    return (a[:, prompt_len:] == b[:, prompt_len:]).float().mean().item()


def loop_tokens_per_s(records: list[dict], skip: int) -> tuple[float, tuple[int, int]]:
    """tokens/s of the logged training steps after the first `skip` (compilation, warm-up): their tokens over their
    summed step times; and the first and last step counted."""
    steps = [r for r in records if r.get("kind") == "train" and r["step"] > skip]
    if not steps:
        raise ValueError(f"the run logged no training step after step {skip}; raise --loop-steps")
    tokens = sum(r["tokens_per_s"] * r["step_time_s"] for r in steps)
    return tokens / sum(r["step_time_s"] for r in steps), (steps[0]["step"], steps[-1]["step"])


def bench_loop(args, mode: str, meta: dict) -> dict:
    """train() on a text file at the training shape vs the bare model's step, timed just before and after it."""
    from hf_gpt_custom.training.config import load_train_config
    from hf_gpt_custom.training.run_log import RUN_LOG_NAME, read_run_log
    from hf_gpt_custom.training.train import train

    device, shape, seq_len = args.device, args.shape, args.shape["n_positions"]
    torch._dynamo.reset()
    bare = Trainer("ours", build_model("ours", shape, device), args.batch, seq_len, device,
                   args.compile_backend if mode == "compile" else None)
    bare.warm_up()

    def bare_rate() -> float:
        seconds = time_rotating({"bare": lambda: bare.run(args.steps)}, args.rounds, warmup=0)["bare"]
        return bare.tokens * args.steps / statistics.median(seconds)

    before = bare_rate()
    with tempfile.TemporaryDirectory(prefix="bench_gpu_loop_") as scratch:
        overrides = [
            "run_name=bench_gpu_loop", f"out_dir={scratch}/run", f"data_cache_dir={scratch}/cache",
            f"dataset={args.text_file}", "tokenizer=null", f"tokenizer_vocab_size={args.tokenizer_vocab_size}",
            *(f"model.{key}={value}" for key, value in shape.items()), *(f"model.{k}=0" for k in NO_DROPOUT),
            f"block_size={seq_len}", f"batch_size={args.batch}", "gradient_accumulation_steps=1",
            f"max_steps={args.loop_steps}", "warmup_steps=2", f"eval_interval={args.loop_steps}", "eval_batches=1",
            "checkpoint_interval=0", "log_with=none", "mixed_precision=bf16", "grad_clip=1.0",
            f"compile={mode == 'compile'}", f"cpu={device.type == 'cpu'}",
        ]
        if meta["peak_bf16_flops"]:
            overrides.append(f"peak_flops={meta['peak_bf16_flops']}")
        config = load_train_config(None, overrides)
        run_dir = train(config)
        records = read_run_log(Path(run_dir) / RUN_LOG_NAME)
    loop, timed_steps = loop_tokens_per_s(records, args.loop_skip)
    after = bare_rate()
    del bare
    release(device)
    ratio = loop / statistics.mean([before, after])
    print(f"loop {mode}: train() {loop:,.0f} tok/s (steps {timed_steps[0]}-{timed_steps[1]}), bare {before:,.0f} / "
          f"{after:,.0f} -> {ratio:.3f}", flush=True)
    return {"part": "loop", "mode": mode, "meta": meta, "shape": {**shape, "seq_len": seq_len}, "batch": args.batch,
            "bare_tokens_per_s": [before, after], "loop_tokens_per_s": loop, "ratio": ratio,
            "timed_steps": list(timed_steps), "overrides": overrides,
            "settings": f"{STEP_SETTINGS} train(): `hf-gpt-custom train` with {' '.join(overrides[3:])} (a "
                        f"tokenizer trained on the file); its logged step times after step {args.loop_skip}."}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, a few steps: checks the "
                        "script end to end and measures nothing worth keeping (default --out: a new temporary folder)")
    parser.add_argument("--out", type=Path, default=None, help="results folder (default: benchmarks/results)")
    parser.add_argument("--report-only", action="store_true", help="measure nothing: rebuild gpu_results.md and "
                        "gpu_results.png from the gpu_*.json files in --out")
    parser.add_argument("--parts", default="train,loop,generate", help="comma-separated of train, loop, generate")
    parser.add_argument("--modes", default="eager,compile", help="training modes: eager, compile (default: both)")
    parser.add_argument("--batch", type=int, default=None, help="the common batch size (default: 16; smoke 2)")
    parser.add_argument("--sweep", default=None, help="batch sizes to sweep (default: 16,32,64; smoke 2,4)")
    parser.add_argument("--sweep-models", default=",".join(MODELS), help="the models the sweep and the best-batch "
                        f"table measure (default: all three: {','.join(MODELS)}); the batch-16 table has all three")
    parser.add_argument("--rounds", type=int, default=None, help="rotated rounds (default: 4; smoke 2)")
    parser.add_argument("--steps", type=int, default=None, help="steps per round (default: 10; smoke 2)")
    parser.add_argument("--gen-batches", default=None, help="generation batch sizes (default: 1,16; smoke 1,2)")
    parser.add_argument("--gen-rounds", type=int, default=None, help="generation rounds (default: 5; smoke 1)")
    parser.add_argument("--loop-steps", type=int, default=None, help="train() steps (default: 40; smoke 6)")
    parser.add_argument("--loop-skip", type=int, default=None, help="first train() steps not timed (default: 10; "
                        "smoke 2)")
    parser.add_argument("--text-file", type=Path, default=None, help="train()'s text (default: ../shared/data/"
                        "tinyshakespeare/input.txt, else .gpu_carry/tinyshakespeare/input.txt)")
    parser.add_argument("--compile-backend", default=None, help="torch.compile backend (default: inductor; smoke: "
                        "aot_eager, which traces forward and backward without generating kernels)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="peak bf16 TFLOP/s for MFU (default: the "
                        "table in gpu_report.py by GPU name)")
    args = parser.parse_args(argv)
    smoke = args.smoke
    defaults = {"batch": 2 if smoke else 16, "sweep": "2,4" if smoke else "16,32,64", "rounds": 2 if smoke else 4,
                "steps": 2 if smoke else 10, "gen_batches": "1,2" if smoke else "1,16", "gen_rounds": 1 if smoke else 5,
                "loop_steps": 6 if smoke else 40, "loop_skip": 2 if smoke else 10,
                "compile_backend": "aot_eager" if smoke else "inductor"}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.sweep = [int(b) for b in str(args.sweep).split(",")]
    args.gen_batches = [int(b) for b in str(args.gen_batches).split(",")]
    args.parts, args.modes = args.parts.split(","), args.modes.split(",")
    args.sweep_models = args.sweep_models.split(",")
    for name, given, known in (("--parts", args.parts, ("train", "loop", "generate")),
                               ("--modes", args.modes, ("eager", "compile")),
                               ("--sweep-models", args.sweep_models, MODELS)):
        if set(given) - set(known):
            parser.error(f"{name} {','.join(given)}: unknown {', '.join(sorted(set(given) - set(known)))}; known: "
                         f"{', '.join(known)}")
    if args.report_only:
        args.out = args.out or RESULTS_DIR
        return args
    if not smoke and not torch.cuda.is_available():
        parser.error("no CUDA device is visible: this benchmark measures a GPU; --smoke checks it on the CPU")
    args.device = torch.device("cpu") if smoke else torch.device("cuda", torch.cuda.current_device())
    if smoke:
        torch.set_num_threads(1)  # tiny shapes: a second thread only spins, more so on a shared machine
    args.shape = SMOKE_SHAPE if smoke else GPT2_124M
    args.prompt_len, args.new_tokens = (8, 4) if smoke else (32, 128)
    args.tokenizer_vocab_size = 384 if smoke else 8192
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="bench_gpu_smoke_")) if smoke else RESULTS_DIR
    if "loop" in args.parts:
        args.text_file = args.text_file or (SHARED_TEXT if SHARED_TEXT.is_file() else CARRIED_TEXT)
        if not args.text_file.is_file():
            parser.error(f"--text-file {args.text_file} not found; give a local text file for the loop part")
    return args


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    if args.report_only:
        markdown, _ = gpu_report.write_report(args.out)
        print(markdown.read_text())
        return args.out
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {**gpu_report.device_info(args.device, args.peak_tflops), "smoke": args.smoke}
    print(f"bench_gpu on {gpu_report.describe(meta)}; peak bf16 FLOP/s {meta['peak_bf16_flops']} "
          f"({meta['peak_source']})", flush=True)
    def saver(name: str) -> Callable[[dict], None]:
        return lambda payload: (args.out / f"gpu_{name}.json").write_text(json.dumps(payload, indent=2) + "\n")

    jobs = [(f"train_{mode}", lambda mode=mode: bench_train(args, mode, meta, saver(f"train_{mode}")))
            for mode in args.modes if "train" in args.parts]
    jobs += [(f"loop_{mode}", lambda mode=mode: bench_loop(args, mode, meta)) for mode in args.modes
             if "loop" in args.parts]
    jobs += [("generate", lambda: bench_generate(args, meta, saver("generate")))] if "generate" in args.parts else []
    # Every contender, batch size and mode compiles the same forward code again; dynamo's default limit of 8
    # recompiles per function would silently fall back to eager in the middle of a sweep.
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    with torch._dynamo.config.patch({limit: 256}):
        for name, job in jobs:
            payload = job()
            (args.out / f"gpu_{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    markdown, image = gpu_report.write_report(args.out)
    print(markdown.read_text())
    print(f"wrote {', '.join(f'gpu_{name}.json' for name, _ in jobs)}, {markdown.name} and {image.name} in {args.out}")
    return args.out


if __name__ == "__main__":
    main()
