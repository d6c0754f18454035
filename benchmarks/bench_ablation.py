"""Ablation: the default (GPT-2) block and each one-option change, trained with the main job's recipe and budget.

Run by hand (not collected by pytest); it reports, it does not pass or fail:

    python -m benchmarks.bench_ablation                        # every variant, one after another (~5 min each)
    python -m benchmarks.bench_ablation --jobs 2               # two trainings at a time (each keeps its threads)
    python -m benchmarks.bench_ablation --variants default,rope --max-steps 200   # a subset, a smaller budget
    python -m benchmarks.bench_ablation --report-only          # rebuild the table and plot from the JSON

Every variant is a real `hf-gpt-custom train training/configs/shakespeare.yaml` run (its own process) with one
`model.` override on top of the GPT-2 block, the same tokenizer (trained once), the same data, seed and token
budget (the config's max_steps x tokens per step unless --max-steps), so the validation figure is the training
code's own: bits per byte on the config's held-out split (`val_holdout: tail`, the last 10% of tiny Shakespeare).
Tokens/s comes twice: the mean over the training run (it drifts with whatever else the machine runs), and an
interleaved step timing of all variants in one process afterwards (a few optimizer steps each, the order rotated
every round, as benchmarks/common.py times contenders), whose ratios to the default are the figures to compare.
SwiGLU gets the MLP width that matches the default's parameter count; GQA halves the key/value heads.
Results: benchmarks/results/ablation_threads<N>.{json,md,png}, with the machine (CPU, family/model, ISA flags,
threads) and the load average at the start and end of every training run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import (
    RESULTS_DIR, describe_machine, load_average, machine_info, pin_threads, result_name, time_rotating, write_json,
)

REPO_ROOT = RESULTS_DIR.parents[1]
MAIN_JOB_CONFIG = REPO_ROOT / "training" / "configs" / "shakespeare.yaml"

# One option changed each; the values are GPTCustomConfig's (issue 15's field names). "default" changes nothing.
# swiglu's n_inner and gqa's n_kv_head depend on the base block's size and are filled in by variant_overrides.
VARIANTS: dict[str, dict] = {
    "default": {},
    "sinusoidal": {"position_embedding_type": "sinusoidal"},
    "rope": {"position_embedding_type": "rope"},
    "post_ln": {"norm_position": "post"},
    "rmsnorm": {"norm_type": "rmsnorm"},
    "swiglu": {"mlp_type": "swiglu"},
    "no_bias": {"attention_bias": False, "mlp_bias": False},
    "gqa": {},
}
LABELS = {
    "default": "default (GPT-2 block)", "sinusoidal": "sinusoidal positions", "rope": "RoPE", "post_ln": "post-LN",
    "rmsnorm": "RMSNorm", "swiglu": "SwiGLU (equal params)", "no_bias": "no biases", "gqa": "GQA (n_kv_head = n_head/2)",
}
# The block options a main-job config may set; the ablation's base block puts each back to GPTCustomConfig's default.
BLOCK_OPTION_KEYS = ("position_embedding_type", "rope_theta", "norm_position", "norm_type", "mlp_type", "n_inner",
                     "multiple_of", "attention_bias", "mlp_bias", "n_kv_head")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=MAIN_JOB_CONFIG, help="the training recipe (default: the main job's)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {','.join(VARIANTS)}")
    parser.add_argument("--max-steps", type=int, default=None, help="optimizer steps (default: the config's)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per run (default: the config's torch_threads)")
    parser.add_argument("--jobs", type=int, default=1, help="training runs at a time (default: 1)")
    parser.add_argument("--timing-rounds", type=int, default=5, help="rounds of the interleaved step timing (default: 5)")
    parser.add_argument("--work-dir", type=Path, default=Path("runs") / "ablation", help="run folders (default: runs/ablation)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="results folder (default: benchmarks/results)")
    parser.add_argument("--report-only", action="store_true", help="rebuild the markdown table and plot from the JSON")
    return parser.parse_args(argv)


# --- what each variant trains ----------------------------------------------------------------------------------------


def base_block(model_section: dict) -> dict:
    """The config's `model:` section with every block option put back to GPTCustomConfig's default (the GPT-2 block)."""
    from hf_gpt_custom import GPTCustomConfig

    defaults = GPTCustomConfig()
    return {**model_section, **{key: getattr(defaults, key) for key in BLOCK_OPTION_KEYS if key in model_section}}


def swiglu_inner_for_equal_parameters(model_kwargs: dict) -> int:
    """The SwiGLU inner width whose block has the parameter count nearest the standard MLP's (3·d·h vs 2·d·4d)."""
    from hf_gpt_custom import GPTCustomConfig

    target = GPTCustomConfig(**model_kwargs).parameter_breakdown()["total"]
    n_embd = GPTCustomConfig(**model_kwargs).n_embd
    guess = round(8 * n_embd / 3)
    candidates = range(max(1, guess - 16), guess + 17)
    return min(candidates, key=lambda inner: abs(
        GPTCustomConfig(**{**model_kwargs, "mlp_type": "swiglu", "n_inner": inner}).parameter_breakdown()["total"] - target))


def variant_overrides(name: str, base: dict) -> dict:
    """The model keyword arguments of one variant: the base block plus its one change."""
    from hf_gpt_custom import GPTCustomConfig

    change = dict(VARIANTS[name])
    if name == "swiglu":
        change["n_inner"] = swiglu_inner_for_equal_parameters(base)
    if name == "gqa":
        change["n_kv_head"] = max(1, GPTCustomConfig(**base).n_head // 2)
    return {**base, **change}


def is_implemented(model_kwargs: dict, base: dict) -> bool:
    """Whether this checkout's model does something with the variant's option: the config accepts it and the model
    differs from the same kwargs with the option put back (other tensors, or other logits from the same seed). A
    config that stores an unknown key without using it would otherwise train the default block under another name.
    n_inner is not the option itself (it only sizes SwiGLU), so the comparison keeps it."""
    import torch

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM

    defaults = GPTCustomConfig()
    options = [key for key in model_kwargs if key != "n_inner" and model_kwargs[key] != base.get(key, getattr(defaults, key, None))]
    if not options:
        return True
    reference = {**model_kwargs, **{key: base.get(key, getattr(defaults, key, None)) for key in options}}

    def build(kwargs):
        torch.manual_seed(0)
        model = GPTCustomForCausalLM(GPTCustomConfig(**kwargs)).eval()
        with torch.no_grad():
            logits = model(input_ids=torch.arange(16).view(1, 16) % model.config.vocab_size).logits
        return {key: tuple(value.shape) for key, value in model.state_dict().items()}, logits

    variant, without_option = build(model_kwargs), build(reference)
    return variant[0] != without_option[0] or not torch.equal(variant[1], without_option[1])


# --- running -----------------------------------------------------------------------------------------------------


def train_command(config: Path, run_dir: Path, tokenizer_dir: Path, model_kwargs: dict, args) -> list[str]:
    overrides = [f"out_dir={run_dir}", f"tokenizer={tokenizer_dir}", "log_with=none", "checkpoint_interval=0"]
    if args.max_steps:
        overrides += [f"max_steps={args.max_steps}", f"eval_interval={max(1, args.max_steps // 6)}"]
    if args.threads:
        overrides.append(f"torch_threads={args.threads}")
    overrides += [f"model.{key}={'null' if value is None else value}" for key, value in model_kwargs.items()]
    return [sys.executable, "-m", "hf_gpt_custom.cli", "train", str(config), *overrides]


def run_trainings(commands: dict[str, list[str]], work_dir: Path, jobs: int) -> dict[str, dict]:
    """Run the training commands, `jobs` at a time; per variant: exit code, wall time, load average at start and end."""
    pending, running, done = list(commands), {}, {}
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            log = open(work_dir / f"{name}.log", "w")
            running[name] = (subprocess.Popen(commands[name], stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT),
                             log, time.time(), load_average())
            print(f"[{time.strftime('%H:%M:%S')}] training {name}", flush=True)
        time.sleep(2)
        for name, (process, log, start, load_start) in list(running.items()):
            if process.poll() is None:
                continue
            log.close()
            done[name] = {"returncode": process.returncode, "wall_time_s": time.time() - start,
                          "load_average_at_start": load_start, "load_average_at_end": load_average()}
            del running[name]
            print(f"[{time.strftime('%H:%M:%S')}] {name} finished (exit {process.returncode})", flush=True)
    return done


def read_run(run_dir: Path) -> dict:
    """Final figures of one finished run and its validation curve, from the files the training code wrote."""
    from hf_gpt_custom.training.run_log import latest_evaluations, read_run_log

    summary = json.loads((run_dir / "training_summary.json").read_text())
    curve = [(record["step"], record["val_bits_per_byte"])
             for record in latest_evaluations(read_run_log(run_dir / "run_log.jsonl"))]
    return {
        "val_bits_per_byte": summary["val_bits_per_byte"], "val_loss": summary["final_val_loss"],
        "n_params": summary["n_params"], "tokens_seen": summary["tokens_seen"], "steps": summary["steps"],
        "train_time_s": summary["train_time_s"], "tokens_per_s_in_run": summary["tokens_per_s"],
        "val_bits_per_byte_curve": curve,
    }


def time_steps_interleaved(config, model_kwargs_by_name: dict[str, dict], vocab_size: int, eos_token_id: int,
                           rounds: int, steps_per_call: int = 3) -> dict[str, dict[str, float]]:
    """Training tokens/s of every variant, timed in one process with the calling order rotated each round.

    Each call is `steps_per_call` optimizer steps (forward, backward, clipping, the recipe's AdamW) on a fixed batch
    of the run's shape: the work of training without the data loader. Two clocks: wall time (what a user waits;
    it follows the machine's load) and this process's CPU time (at one thread, close to the wall time of an idle
    machine: other processes' load barely moves it).
    """
    import dataclasses

    import torch

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.training.model_section import build_model_config
    from hf_gpt_custom.training.train import build_optimizer

    torch.manual_seed(config.seed)
    batch = torch.randint(0, vocab_size, (config.batch_size, config.block_size))
    cpu_seconds: dict[str, list[float]] = {name: [] for name in model_kwargs_by_name}

    def make_steps(name, model_kwargs):
        run_config = dataclasses.replace(config, model=model_kwargs)
        model = GPTCustomForCausalLM(build_model_config(run_config, vocab_size, eos_token_id)).train()
        optimizer = build_optimizer(model, run_config)

        def steps():
            cpu_start = time.process_time()
            for _ in range(steps_per_call):
                model(input_ids=batch, labels=batch).loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            cpu_seconds[name].append(time.process_time() - cpu_start)
        return steps

    contenders = {name: make_steps(name, kwargs) for name, kwargs in model_kwargs_by_name.items()}
    wall_seconds = time_rotating(contenders, rounds=rounds, warmup=1)
    tokens = steps_per_call * config.batch_size * config.block_size
    return {name: {"tokens_per_s": tokens / statistics.median(wall_seconds[name]),
                   # the warm-up call is recorded too: drop it
                   "tokens_per_cpu_s": tokens / statistics.median(cpu_seconds[name][1:])}
            for name in model_kwargs_by_name}


# --- report ------------------------------------------------------------------------------------------------------


def render_markdown(result: dict) -> str:
    rows = result["rows"]
    default = rows.get("default")
    lines = [
        f"# Block ablation on tiny Shakespeare ({result['machine']['time_utc']} UTC)",
        "",
        f"`{result['config']}` recipe, {result['tokens_per_run']:,} training tokens per run ({result['steps']} steps), "
        f"validation on the last 10% of the speeches (`val_holdout: tail`), bits per byte of the raw text. "
        f"Measured on {describe_machine(result['machine'])}; {result['jobs']} run(s) at a time; load average "
        f"{result['machine']['load_average']} at the start. Speeds come from an interleaved step timing of all "
        f"variants in one process (order rotated each round): tokens per CPU-second is what one thread does on an idle "
        f"machine, nearly untouched by other processes; wall tokens/s and the in-run mean follow the machine's load.",
        "",
        "| block | parameters | val bits/byte | Δ vs default | tokens/CPU-s | speed vs default | tokens/s wall | "
        "tokens/s in run | load at start → end |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, row in rows.items():
        delta = f"{row['val_bits_per_byte'] - default['val_bits_per_byte']:+.3f}" if default else "–"
        speed = f"{row['tokens_per_cpu_s'] / default['tokens_per_cpu_s']:.2f}x" if default else "–"
        lines.append(
            f"| {LABELS[name]} | {row['n_params']:,} | {row['val_bits_per_byte']:.3f} | {delta} | "
            f"{row['tokens_per_cpu_s']:,.0f} | {speed} | {row['tokens_per_s']:,.0f} | {row['tokens_per_s_in_run']:,.0f} | "
            f"{row['load_average_at_start'][0]} → {row['load_average_at_end'][0]} |")
    if result.get("not_implemented"):
        lines += ["", "Not measured (the option is not implemented in this checkout): "
                  + ", ".join(LABELS[name] for name in result["not_implemented"]) + "."]
    if result.get("failed"):
        lines += ["", "Failed (see the run's log under the work folder): " + ", ".join(result["failed"]) + "."]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    tokens_per_step = result["tokens_per_run"] / result["steps"]
    figure, (curves, bars) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, row in rows.items():
        steps, bpb = zip(*row["val_bits_per_byte_curve"])
        curves.plot([step * tokens_per_step / 1e6 for step in steps], bpb, marker=".", label=LABELS[name])
    curves.set_xlabel("training tokens (millions)")
    curves.set_ylabel("validation bits per byte (tail 10%)")
    curves.set_title("validation during training")
    curves.legend(fontsize=8)
    names = list(rows)
    values = [rows[name]["val_bits_per_byte"] for name in names]
    positions = range(len(names))
    bars.barh(positions, values, color=["tab:gray" if name == "default" else "tab:blue" for name in names])
    bars.set_yticks(list(positions), [LABELS[name] for name in names], fontsize=8)
    bars.invert_yaxis()
    bars.set_xlim(min(values) - 0.05, max(values) + 0.05)
    for position, name in zip(positions, names):
        text = f"{rows[name]['val_bits_per_byte']:.3f}  {rows[name]['tokens_per_cpu_s']:,.0f} tokens/CPU-s"
        bars.text(values[position], position, " " + text, va="center", fontsize=8)
    bars.set_xlabel("final validation bits per byte (lower is better)")
    bars.set_title(f"same budget: {result['tokens_per_run'] / 1e6:.2f}M tokens")
    figure.suptitle(f"block ablation, {describe_machine(result['machine'])}", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_report(result: dict, out_dir: Path, stem: str) -> None:
    write_json(stem, result, out_dir)
    (out_dir / f"{stem}.md").write_text(render_markdown(result))
    plot(result, out_dir / f"{stem}.png")


# --- main --------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from hf_gpt_custom.training.config import load_train_config

    config = load_train_config(args.config, [f"max_steps={args.max_steps}"] if args.max_steps else [])
    threads = args.threads or config.torch_threads or 1
    stem = result_name("ablation", threads)
    if args.report_only:
        result = json.loads((args.out / f"{stem}.json").read_text())
        write_report(result, args.out, stem)
        print(render_markdown(result))
        return
    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")

    base = base_block(config.model)
    kwargs_by_name = {name: _implemented_overrides(name, base) for name in names}
    not_implemented = [name for name in names if kwargs_by_name[name] is None]
    names = [name for name in names if name not in not_implemented]
    for name in not_implemented:
        print(f"skipping {name}: this checkout's model does not implement {VARIANTS[name] or 'it'}", flush=True)

    machine = machine_info(threads)
    work_dir = args.work_dir.absolute()
    work_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_dir = _shared_tokenizer(args.config, work_dir)
    commands = {name: train_command(args.config.absolute(), work_dir / name, tokenizer_dir, kwargs_by_name[name], args)
                for name in names}
    runs = run_trainings(commands, work_dir, args.jobs)
    failed = [name for name, run in runs.items() if run["returncode"] != 0]
    rows = {name: {**read_run(work_dir / name), **runs[name], "model": kwargs_by_name[name]}
            for name in names if name not in failed}

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    pin_threads(threads)
    speeds = time_steps_interleaved(config, {name: kwargs_by_name[name] for name in rows}, len(tokenizer),
                                    tokenizer.eos_token_id, args.timing_rounds) if rows else {}
    for name, speed in speeds.items():
        rows[name].update(speed)
    result = {
        "benchmark": "ablation", "machine": machine, "config": str(args.config.absolute().relative_to(REPO_ROOT))
        if args.config.absolute().is_relative_to(REPO_ROOT) else str(args.config),
        "steps": config.max_steps, "tokens_per_run": config.max_steps * config.batch_size * config.block_size
        * config.gradient_accumulation_steps, "jobs": args.jobs, "timing_rounds": args.timing_rounds,
        "rows": rows, "not_implemented": not_implemented, "failed": failed,
    }
    write_report(result, args.out, stem)
    print(render_markdown(result))


def _implemented_overrides(name: str, base: dict) -> dict | None:
    """The variant's model kwargs, or None when this checkout cannot build it or builds the base block under its name."""
    try:
        model_kwargs = variant_overrides(name, base)
        return model_kwargs if is_implemented(model_kwargs, base) else None
    except Exception as err:  # noqa: BLE001  (a half-built option: report it as missing, keep measuring the rest)
        print(f"  {name}: {type(err).__name__}: {err}", flush=True)
        return None


def _shared_tokenizer(config_path: Path, work_dir: Path) -> Path:
    """Train the config's tokenizer once into the work folder; every variant then reads the same files."""
    from hf_gpt_custom.training.config import load_train_config
    from hf_gpt_custom.training.workload import prepare_tokenizer

    return prepare_tokenizer(load_train_config(config_path, [f"out_dir={work_dir}"])).absolute()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
