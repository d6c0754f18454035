"""train(config): pre-train or fine-tune with Accelerate, readable top to bottom.

The same function runs on a laptop CPU, one GPU, or many processes under `accelerate launch` / torchrun: Accelerate
owns devices, precision, DDP/FSDP wrapping and gradient accumulation; this file owns the recipe (AdamW, warmup +
cosine, clipping), evaluation (loss, perplexity, bits per byte), logging and exact resume. Data preparation is in
data.py, checkpoint files in checkpoint.py, the log/summary/plot in run_log.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Sampler

from training.checkpoint import (
    TrainingState, find_checkpoint, load_checkpoint, save_checkpoint, set_aside_other_histories,
)
from training.config import DEFAULT_PEAK_FLOPS, TrainConfig, build_model_config, save_train_config
from training.data import prepare_datasets, token_byte_lengths
from training.launcher import mixed_precision_for_run
from training.run_lock import lock_run_folder
from training.run_log import (
    LOSS_CURVE_NAME, RUN_LOG_NAME, SUMMARY_NAME, RunLog, plot_loss_curve, read_run_log, write_training_summary,
)
from hf_gpt_custom.errors import UserError

logger = logging.getLogger(__name__)

_TOKENIZER_SOURCE_NAME = "training_source.json"  # beside a tokenizer we trained: what it was trained on


class TrainingDivergedError(ValueError):
    """The loss or gradient norm stopped being finite; the run stopped without saving the broken weights."""


# --- tokenizer -----------------------------------------------------------------------------------------------------


def prepare_tokenizer(config: TrainConfig) -> Path:
    """A local tokenizer folder for this run.

    `tokenizer:` set -> that folder (a Hub name is downloaded once and saved to <out_dir>/tokenizer). Unset with
    `init_from` holding a tokenizer -> the init_from folder, so fine-tuning keeps the model's vocabulary. Unset
    otherwise -> a byte-level BPE of `tokenizer_vocab_size` trained on the dataset into <out_dir>/tokenizer (reused
    when a previous call trained it on the same data with the same size).
    """
    run_dir = config.run_dir
    target = run_dir / "tokenizer"
    if config.tokenizer:
        if Path(config.tokenizer).is_dir():
            return Path(config.tokenizer)
        import hf_gpt_custom  # noqa: F401  (registers our tokenizer class with AutoTokenizer)
        from transformers import AutoTokenizer

        # Called under main_process_first: the main process saves, the others find the marker and read the files.
        marker, source = target / _TOKENIZER_SOURCE_NAME, {"tokenizer": config.tokenizer}
        if not (marker.is_file() and json.loads(marker.read_text()) == source):
            AutoTokenizer.from_pretrained(config.tokenizer).save_pretrained(target)
            marker.write_text(json.dumps(source))
        return target
    if config.init_from and Path(config.init_from, "tokenizer.json").is_file():
        return Path(config.init_from)
    source = {"dataset": config.dataset, "dataset_config": config.dataset_config, "split": config.dataset_split,
              "text_field": config.text_field, "vocab_size": config.tokenizer_vocab_size}
    marker = target / _TOKENIZER_SOURCE_NAME
    if marker.is_file() and json.loads(marker.read_text()) == source:
        return target
    from hf_gpt_custom.tokenizer_training import train_tokenizer

    local = Path(config.dataset).exists()
    folder = train_tokenizer(
        [config.dataset] if local else config.dataset,
        out_dir=target,
        vocab_size=config.tokenizer_vocab_size,
        text_field=config.text_field,
        dataset_config=config.dataset_config,
        split=config.dataset_split,
    )
    Path(folder, _TOKENIZER_SOURCE_NAME).write_text(json.dumps(source, indent=2))
    return Path(folder)


# --- pieces of the loop --------------------------------------------------------------------------------------------


class EpochShuffleSampler(Sampler[int]):
    """A fresh permutation per epoch from `seed + epoch`, owning its generator.

    Unlike RandomSampler it never draws from the global RNG, so dropout's random stream is the same whether or
    not the run was resumed, and every process computes the same permutation (Accelerate then shards batches).
    """

    def __init__(self, num_samples: int, seed: int):
        self.num_samples = num_samples
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        yield from torch.randperm(self.num_samples, generator=generator).tolist()


def collate_blocks(rows: list[dict]) -> dict[str, torch.Tensor]:
    return {key: torch.tensor([row[key] for row in rows], dtype=torch.long) for key in ("input_ids", "labels")}


def build_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on every 2-D weight (matmuls and embeddings, as nanoGPT/GPT-2), none on biases/LayerNorm."""
    parameters = [p for p in model.parameters() if p.requires_grad]  # tied weights appear once
    groups = [
        {"params": [p for p in parameters if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0},
    ]
    # The fused kernel updates every tensor in one pass (measured 47 -> 15 ms per step for 13.9M parameters on this
    # CPU, benchmarks/results/NOTES.md); it exists for CPU and CUDA parameters, the foreach path elsewhere.
    fused = all(p.device.type in ("cpu", "cuda") for p in parameters)
    return torch.optim.AdamW(groups, lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                             eps=config.adam_eps, fused=fused)


def flops_per_token(model_config, n_params: int, seq_len: int) -> float:
    """Training FLOPs per token: 6N for the weights plus 12·L·T·d for attention (PaLM appendix B, as nanoGPT).

    N excludes the position embeddings, which are a lookup, not a matmul.
    """
    n_matmul = n_params - model_config.n_positions * model_config.n_embd
    return 6 * n_matmul + 12 * model_config.n_layer * seq_len * model_config.n_embd


def _batch_digest(input_ids: torch.Tensor) -> int:
    """48-bit fingerprint of a batch: logged per rank so a test (or a person) can see who trained on what."""
    return int.from_bytes(hashlib.blake2b(input_ids.cpu().numpy().tobytes(), digest_size=6).digest(), "little")


def _next_batches(accelerator, train_loader, state: TrainingState):
    """Endless stream of training micro-batches that keeps `state.epoch` and `state.batches_in_epoch` current.

    A resumed run skips the batches this epoch already consumed (counted in micro-batches, so gradient
    accumulation is covered) instead of replaying them.
    """
    while True:
        loader = train_loader
        if state.batches_in_epoch:
            loader = accelerator.skip_first_batches(train_loader, state.batches_in_epoch)
        loader.set_epoch(state.epoch)
        produced = False
        for batch in loader:
            produced = True
            state.batches_in_epoch += 1
            yield batch
        if not produced and state.batches_in_epoch == 0:
            raise UserError("the training data gave no batch; lower batch_size or block_size, or add data")
        state.epoch += 1
        state.batches_in_epoch = 0


@torch.no_grad()
def evaluate_loss(model, val_loader, accelerator, token_bytes: torch.Tensor) -> dict[str, float]:
    """Validation loss (nats/token), perplexity and bits per byte over the whole validation loader.

    Bits per byte = total nats / (ln 2 · UTF-8 bytes of the predicted tokens). Each block predicts its tokens
    1..T-1 (token 0 has no context inside the block); the end-of-text separator is predicted but stands for 0
    bytes, so the figure is, if anything, slightly pessimistic.
    """
    model.eval()
    total_nats = torch.zeros((), dtype=torch.float64)
    total_tokens = 0
    total_bytes = 0
    for batch in val_loader:
        logits = model(input_ids=batch["input_ids"]).logits
        targets = batch["labels"][:, 1:]
        nats = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.size(-1)), targets.reshape(-1),
                               reduction="none").view(targets.shape).sum(dim=1)
        n_bytes = token_bytes.to(targets.device)[targets].sum(dim=1)
        nats, n_bytes = accelerator.gather_for_metrics((nats, n_bytes))
        total_nats += nats.double().sum().cpu()
        total_bytes += int(n_bytes.sum())
        total_tokens += targets.size(1) * nats.numel()
    model.train()
    val_loss = float(total_nats) / max(total_tokens, 1)
    return {
        "val_loss": val_loss,
        "val_perplexity": math.exp(min(val_loss, 700.0)),
        "val_bits_per_byte": float(total_nats) / (math.log(2) * max(total_bytes, 1)),
        "val_tokens": total_tokens,
        "val_bytes": total_bytes,
    }


def _load_model(config: TrainConfig, tokenizer):
    from hf_gpt_custom import PRESETS, GPTCustomForCausalLM

    if config.init_from:
        model = GPTCustomForCausalLM.from_pretrained(config.init_from)  # our folders and transformers GPT-2 folders
        expected = dict(config.model)
        expected = {**PRESETS.get(expected.pop("preset", None), {}), **expected}
        for key, value in expected.items():
            if getattr(model.config, key) != value:
                raise UserError(
                    f"model.{key}={value!r} but init_from={config.init_from} has {key}={getattr(model.config, key)!r}; "
                    f"the architecture comes from init_from — drop model.{key}"
                )
        if model.config.n_positions < config.block_size:
            raise UserError(
                f"block_size={config.block_size} exceeds n_positions={model.config.n_positions} of "
                f"init_from={config.init_from}; lower block_size"
            )
    else:
        model_config = build_model_config(config, vocab_size=config.model.get("vocab_size") or len(tokenizer),
                                          eos_token_id=tokenizer.eos_token_id)
        model = GPTCustomForCausalLM(model_config)
    if model.config.vocab_size < len(tokenizer):
        raise UserError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {model.config.vocab_size}; "
            f"use the model's own tokenizer or raise model.vocab_size"
        )
    return model


def _tracker_config(config: TrainConfig) -> dict:
    flat = {key: value for key, value in config.to_dict().items()
            if isinstance(value, (int, float, str, bool)) and key != "model"}
    flat.update({f"model.{key}": value for key, value in config.model.items() if isinstance(value, (int, float, str, bool))})
    return flat


# --- the loop ------------------------------------------------------------------------------------------------------


def train(config: TrainConfig) -> Path:
    """Train as `config` says; return the run folder (config.yaml, run_log.jsonl, checkpoints/, final/, summary, PNG)."""
    previous_threads = torch.get_num_threads()
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    try:
        with lock_run_folder(config.run_dir):  # one process per run folder (run_lock.py)
            return _train(config)
    finally:
        torch.set_num_threads(previous_threads)  # the caller (e.g. the main job's evaluation) gets its setting back


def _train(config: TrainConfig) -> Path:
    import hf_gpt_custom  # noqa: F401  (registers the Auto classes)
    from accelerate import Accelerator
    from accelerate.utils import GradientAccumulationPlugin, ProjectConfiguration, set_seed
    from tqdm.auto import tqdm
    from transformers import AutoTokenizer, get_cosine_with_min_lr_schedule_with_warmup

    start_time = time.time()
    run_dir = config.run_dir.absolute()
    checkpoints_dir = run_dir / "checkpoints"
    log_with = None if config.log_with in (None, "none") else config.log_with
    accelerator = Accelerator(
        cpu=config.cpu if config.cpu is not None else not torch.cuda.is_available(),
        mixed_precision=mixed_precision_for_run(config.mixed_precision),  # warns if the launcher differs
        # sync_with_dataloader=False: an accumulation window may straddle an epoch boundary instead of being cut
        # short there, so every optimizer step sees exactly gradient_accumulation_steps micro-batches.
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=config.gradient_accumulation_steps, sync_with_dataloader=False
        ),
        # The schedule is written in optimizer steps; Accelerate's default would step it once per process.
        step_scheduler_with_optimizer=False,
        log_with=log_with,
        project_config=ProjectConfiguration(project_dir=str(run_dir), logging_dir=str(run_dir / "tensorboard")),
    )
    resume_folder = None
    if config.resume_from_checkpoint:  # check before any heavy work
        resume_folder = find_checkpoint(checkpoints_dir, config.resume_from_checkpoint)
    if accelerator.is_main_process:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_train_config(config, run_dir / "config.yaml")
    set_aside_other_histories(accelerator, checkpoints_dir, resume_folder)  # rotation then sees only this branch
    set_seed(config.seed)

    with accelerator.main_process_first():
        tokenizer_dir = prepare_tokenizer(config)
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        data = prepare_datasets(config, tokenizer, tokenizer_dir)
    accelerator.print(
        f"data: {data.stats.get('train_blocks', '?')} train / {data.stats['val_blocks']} val blocks of "
        f"{config.block_size} tokens ({'cache hit' if data.is_cache_hit else 'tokenised'}; {data.cache_dir})"
    )

    model = _load_model(config, tokenizer)
    n_params = model.num_parameters()
    model_flops_per_token = flops_per_token(model.config, n_params, config.block_size)
    # bytes per token id for bits per byte; ids past the tokenizer (a padded vocabulary) never occur as targets
    token_bytes = torch.tensor(token_byte_lengths(tokenizer) + [0] * max(0, model.config.vocab_size - len(tokenizer)))
    if config.compile:
        model = torch.compile(model)
    optimizer = build_optimizer(model, config)
    scheduler = get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, num_warmup_steps=config.warmup_steps, num_training_steps=config.max_steps,
        min_lr_rate=config.min_lr_ratio,
    )

    if config.streaming:
        train_loader = DataLoader(data.train, batch_size=config.batch_size, collate_fn=collate_blocks, drop_last=True)
    else:
        train_loader = DataLoader(
            data.train, batch_size=config.batch_size, sampler=EpochShuffleSampler(len(data.train), config.seed),
            collate_fn=collate_blocks, drop_last=True,
            generator=torch.Generator().manual_seed(config.seed),  # the loader draws a seed per epoch: not from the global RNG
        )
    val_data = data.val
    if config.eval_batches is not None:
        # the same blocks whatever the number of processes, so validation numbers stay comparable
        val_data = val_data.select(range(min(len(val_data), config.eval_batches * config.batch_size)))
    val_loader = DataLoader(val_data, batch_size=config.batch_size, collate_fn=collate_blocks,
                            generator=torch.Generator().manual_seed(config.seed))
    model, optimizer, train_loader, val_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, val_loader, scheduler
    )

    state = TrainingState()
    if resume_folder is not None:
        state = load_checkpoint(accelerator, resume_folder)
        # Checkpoints are taken at the end of an accumulation window: start counting the next window afresh, also
        # if gradient_accumulation_steps changed since (the restored counter would put the sync mid-window).
        accelerator.step = 0
        accelerator.print(f"resumed from {resume_folder} at step {state.step} (epoch {state.epoch}, "
                          f"{state.batches_in_epoch} batches into it)")
    run_log = RunLog(run_dir / RUN_LOG_NAME, resume_step=state.step if resume_folder else None) \
        if accelerator.is_main_process else None
    if log_with:
        accelerator.init_trackers(config.run_name, config=_tracker_config(config))

    accum = config.gradient_accumulation_steps
    tokens_per_step = config.batch_size * config.block_size * accum * accelerator.num_processes
    peak_flops = config.peak_flops or DEFAULT_PEAK_FLOPS[config.mixed_precision]
    accelerator.print(
        f"model: {n_params:,} parameters; {accelerator.num_processes} process(es); {tokens_per_step:,} tokens per "
        f"optimizer step; {config.max_steps} steps"
    )
    batches = _next_batches(accelerator, train_loader, state)
    progress = tqdm(total=config.max_steps, initial=state.step, desc="training",
                    disable=not accelerator.is_local_main_process, dynamic_ncols=True)
    train_time_s = 0.0
    last_eval: dict | None = None
    last_checkpoint, resumed_step = resume_folder, state.step
    model.train()
    while state.step < config.max_steps:
        step_start = time.perf_counter()
        loss_sum = torch.zeros((), device=accelerator.device)
        digests = []
        for _ in range(accum):
            batch = next(batches)
            digests.append(_batch_digest(batch["input_ids"]))
            with accelerator.accumulate(model):
                loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
                accelerator.backward(loss)
                loss_sum += loss.detach().float()
                if accelerator.sync_gradients:
                    step_loss = accelerator.reduce(loss_sum / accum, reduction="mean").item()
                    if config.grad_clip > 0:
                        grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.grad_clip)
                    else:
                        grad_norm = accelerator.clip_grad_norm_(model.parameters(), float("inf"))
                    grad_norm = float(grad_norm)
                    # Under fp16 the gradient scaler overflows now and then by design (an inf norm): it skips that
                    # update and lowers its scale itself. Only a non-finite loss is divergence there.
                    overflow_is_normal = accelerator.scaler is not None
                    if not (math.isfinite(step_loss) and (math.isfinite(grad_norm) or overflow_is_normal)):
                        _stop_diverged(accelerator, run_log, state.step + 1, step_loss, grad_norm, checkpoints_dir,
                                       last_checkpoint, progress)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad(set_to_none=True)
        state.step += 1
        state.tokens_seen += tokens_per_step
        step_time_s = time.perf_counter() - step_start
        train_time_s += step_time_s
        lr = scheduler.get_last_lr()[0]
        tokens_per_s = tokens_per_step / step_time_s
        all_digests = accelerator.gather(torch.tensor(digests, dtype=torch.int64, device=accelerator.device))
        record = {
            "kind": "train", "step": state.step, "epoch": state.epoch, "loss": step_loss, "lr": lr,
            "grad_norm": grad_norm, "tokens_per_s": tokens_per_s,
            "mfu": model_flops_per_token * tokens_per_s / (peak_flops * accelerator.num_processes),
            "tokens_seen": state.tokens_seen, "step_time_s": step_time_s,
            "data_digests": all_digests.view(accelerator.num_processes, accum).tolist(),
        }
        if run_log is not None:
            run_log.write(record)
        accelerator.log({f"train/{key}": record[key] for key in ("loss", "lr", "grad_norm", "tokens_per_s", "mfu")},
                        step=state.step)
        progress.update(1)
        progress.set_postfix(loss=f"{step_loss:.4f}", lr=f"{lr:.2e}")

        if state.step % config.eval_interval == 0 or state.step == config.max_steps:
            last_eval = evaluate_loss(model, val_loader, accelerator, token_bytes)
            last_eval["step"] = state.step
            if run_log is not None:
                run_log.write({"kind": "eval", **last_eval})
            accelerator.log({f"val/{k[4:]}": v for k, v in last_eval.items() if k.startswith("val_")}, step=state.step)
            if accelerator.is_main_process:
                progress.write(f"step {state.step}: val loss {last_eval['val_loss']:.4f}, "
                               f"bits/byte {last_eval['val_bits_per_byte']:.4f}")
        if config.checkpoint_interval and state.step % config.checkpoint_interval == 0 and state.step < config.max_steps:
            last_checkpoint = save_checkpoint(accelerator, checkpoints_dir, state, config.keep_checkpoints)
    progress.close()

    if last_eval is None or last_eval["step"] != state.step:  # e.g. resuming a run that had already finished
        last_eval = {**evaluate_loss(model, val_loader, accelerator, token_bytes), "step": state.step}
    if last_checkpoint is None or state.step != resumed_step:  # a resumed run with no step left keeps its checkpoint
        save_checkpoint(accelerator, checkpoints_dir, state, config.keep_checkpoints)
    accelerator.wait_for_everyone()
    # every rank takes part (under FSDP this gathers the shards); torch.compile's "_orig_mod." prefix is dropped
    state_dict = {key.removeprefix("_orig_mod."): value for key, value in accelerator.get_state_dict(model).items()}
    if accelerator.is_main_process:
        final_dir, staging = run_dir / "final", run_dir / "final.tmp"  # complete or absent, never half-written
        shutil.rmtree(staging, ignore_errors=True)
        accelerator.unwrap_model(model, keep_torch_compile=False).save_pretrained(staging, state_dict=state_dict)
        tokenizer.save_pretrained(staging)
        shutil.rmtree(final_dir, ignore_errors=True)
        os.replace(staging, final_dir)
        run_log.close()
        records = read_run_log(run_dir / RUN_LOG_NAME)
        train_losses = [r["loss"] for r in records if r["kind"] == "train"]
        step_records = [r for r in records if r["kind"] == "train" and r["step"] > 1]  # step 1 includes warm-up
        mean_tokens_per_s = (sum(r["tokens_per_s"] for r in step_records) / len(step_records)) if step_records else tokens_per_s
        write_training_summary(run_dir / SUMMARY_NAME, {
            "run_name": config.run_name,
            "config": config.to_dict(),
            "n_params": n_params,
            "tokens_seen": state.tokens_seen,
            "steps": state.step,
            "wall_time_s": time.time() - start_time,
            "train_time_s": train_time_s,
            "final_train_loss": sum(train_losses[-10:]) / len(train_losses[-10:]) if train_losses else None,
            "final_val_loss": last_eval["val_loss"],
            "val_perplexity": last_eval["val_perplexity"],
            "val_bits_per_byte": last_eval["val_bits_per_byte"],
            "tokens_per_s": mean_tokens_per_s,
            "mfu": model_flops_per_token * mean_tokens_per_s / (peak_flops * accelerator.num_processes),
            "peak_flops": peak_flops,
            "num_processes": accelerator.num_processes,
            "dataset": config.dataset,
            "train_blocks": data.stats.get("train_blocks"),
            "val_blocks": data.stats.get("val_blocks"),
            "tokenizer": str(Path(tokenizer_dir).absolute()),
            "data_cache": str(data.cache_dir) if data.cache_dir else None,
            "loss_curve": LOSS_CURVE_NAME,
        })
        plot_loss_curve(records, run_dir / LOSS_CURVE_NAME, title=f"{config.run_name}: {n_params / 1e6:.2f}M parameters")
        accelerator.print(
            f"done: val loss {last_eval['val_loss']:.4f}, perplexity {last_eval['val_perplexity']:.2f}, "
            f"{last_eval['val_bits_per_byte']:.4f} bits/byte; {run_dir}"
        )
    accelerator.end_training()
    return run_dir


def _stop_diverged(accelerator, run_log, step: int, loss: float, grad_norm: float, checkpoints_dir: Path,
                   last_checkpoint: Path | None, progress) -> None:
    progress.close()
    what = f"loss became {loss}" if not math.isfinite(loss) else f"gradient norm became {grad_norm}"
    if last_checkpoint is not None:
        fix = (f"the last good checkpoint is {last_checkpoint} (kept); lower learning_rate or raise warmup_steps and "
               f"resume from it with resume_from_checkpoint={last_checkpoint}")
    else:
        fix = "no checkpoint was saved before it; lower learning_rate or raise warmup_steps and start again"
    if run_log is not None:
        run_log.write({"kind": "error", "step": step, "loss": loss if math.isfinite(loss) else str(loss),
                       "grad_norm": grad_norm if math.isfinite(grad_norm) else str(grad_norm)})
        run_log.close()
    accelerator.end_training()
    raise TrainingDivergedError(f"training stopped at step {step}: {what} (weights not updated); {fix}")
