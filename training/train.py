"""train(config): pre-train or fine-tune with Accelerate — set up, loop, finish, each readable on its own.

The same function runs on a laptop CPU, one GPU, or many processes under `accelerate launch` / torchrun: Accelerate
owns devices, precision, DDP/FSDP wrapping and gradient accumulation; this file owns the loop (accumulation,
clipping, divergence stop), logging and exact resume. What is trained — data, model, loss, validation figures —
comes from a workload (workload.py): language modelling here by default, fine-tuning in finetune.py. Elsewhere: the recipe (AdamW groups, schedule) in recipe.py,
validation figures in evaluation.py, batching in batches.py, data in data.py, the tokenizer stage in
tokenizer_stage.py, checkpoint files in checkpoint.py, resume checks in resume_check.py, divergence rules in
divergence.py, the log/summary/plot in run_log.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

# EpochShuffleSampler and collate_blocks are imported from here by older callers (tests, benchmarks) too
from hf_gpt_custom.training.batches import EpochShuffleSampler, build_loaders, collate_blocks  # noqa: F401
from hf_gpt_custom.training.checkpoint import (
    TrainingState, load_checkpoint, save_checkpoint, save_checkpoints_without_wrappers, save_model_folder,
    set_aside_other_histories, unwrapped_state_dict, write_errors_named,
)
from hf_gpt_custom.training.launcher import (
    check_compiler_available, mixed_precision_for_run, resolve_mixed_precision, training_device_type,
    warn_if_bf16_is_emulated,
)
from hf_gpt_custom.training.run_lock import check_folder_writable, lock_run_folder
from hf_gpt_custom.training.config import (
    DEFAULT_PEAK_FLOPS, TrainConfig, build_model_config, requested_architecture, save_train_config,
)
from hf_gpt_custom.training.data import prepare_datasets, token_byte_lengths
from hf_gpt_custom.training.evaluation import evaluate_loss
from hf_gpt_custom.training.divergence import DivergenceGuard, TrainingDivergedError, UpdateGate
from hf_gpt_custom.training.recipe import build_optimizer, build_scheduler, flops_per_token
from hf_gpt_custom.training.resume_check import find_resume_point, record_settings_in_checkpoints
from hf_gpt_custom.training.workload import PreparedWork, Workload
from hf_gpt_custom.training.run_log import (
    LOSS_CURVE_NAME, RUN_LOG_NAME, SUMMARY_NAME, RunLog, plot_loss_curve, read_run_log, summarize_train_steps,
    write_training_summary,
)
from hf_gpt_custom.training.tokenizer_stage import prepare_tokenizer
from hf_gpt_custom.errors import UserError
from hf_gpt_custom.model_folder import check_model_folder, load_model_folder, write_manifest

logger = logging.getLogger(__name__)


# --- pieces of the loop --------------------------------------------------------------------------------------------


def _batch_digest(input_ids: torch.Tensor) -> int:
    """48-bit fingerprint of a batch: logged per rank so a test (or a person) can see who trained on what. Taken from
    the loader's host copy, before the batch moves to the device: it never waits for the device."""
    return int.from_bytes(hashlib.blake2b(input_ids.cpu().numpy().tobytes(), digest_size=6).digest(), "little")


def _next_batches(accelerator, train_loader, state: TrainingState):
    """Endless stream of (training micro-batch on the device, its digest) that keeps `state.epoch` and
    `state.batches_in_epoch` current.

    A resumed run skips the batches this epoch already consumed (counted in micro-batches, so gradient
    accumulation is covered) instead of replaying them. The loader is prepared without device placement: each batch
    is fingerprinted on the host, then copied with non_blocking (from pinned memory on a GPU).
    """
    from accelerate.utils import send_to_device

    while True:
        loader = train_loader
        if state.batches_in_epoch:
            loader = accelerator.skip_first_batches(train_loader, state.batches_in_epoch)
        loader.set_epoch(state.epoch)
        produced = False
        for batch in loader:
            produced = True
            state.batches_in_epoch += 1
            digest = _batch_digest(batch["input_ids"])
            yield send_to_device(batch, accelerator.device, non_blocking=True), digest
        if not produced and state.batches_in_epoch == 0:
            raise UserError("the training data gave no batch; lower batch_size or block_size, or add data")
        state.epoch += 1
        state.batches_in_epoch = 0


def _load_model(config: TrainConfig, tokenizer):
    from hf_gpt_custom import GPTCustomForCausalLM

    if config.init_from:
        # strict: a missing tensor is an error, not a random init; a folder with a manifest must match it
        model = load_model_folder(config.init_from)  # our folders, checkpoints, transformers GPT-2 folders
        for key, value in requested_architecture(config).items():
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


class LanguageModelling:
    """The default workload: next-token prediction on packed blocks of `config.dataset` (pre-training, or
    continued training from `init_from`); validation loss, perplexity and bits per byte."""

    def prepare(self, config: TrainConfig, accelerator) -> PreparedWork:
        from transformers import AutoTokenizer

        with accelerator.main_process_first():
            self.tokenizer_dir = Path(prepare_tokenizer(config))
            tokenizer = AutoTokenizer.from_pretrained(str(self.tokenizer_dir))
            self.data = prepare_datasets(config, tokenizer, self.tokenizer_dir)
        accelerator.print(
            f"data: {self.data.stats.get('train_blocks', '?')} train / {self.data.stats['val_blocks']} val blocks of "
            f"{config.block_size} tokens ({'cache hit' if self.data.is_cache_hit else 'tokenised'}; "
            f"{self.data.cache_dir})"
        )
        model = _load_model(config, tokenizer)
        # bytes per token id for bits per byte; ids past the tokenizer (a padded vocabulary) never occur as targets
        self.token_bytes = torch.tensor(
            token_byte_lengths(tokenizer) + [0] * max(0, model.config.vocab_size - len(tokenizer)))
        self.config, self.eos_token = config, tokenizer.eos_token
        train_loader, val_loader = build_loaders(config, self.data)
        return PreparedWork(tokenizer, model, train_loader, val_loader)

    def loss(self, model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(input_ids=batch["input_ids"], labels=batch["labels"]).loss

    def count_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return batch["input_ids"].numel()  # packed blocks: no padding

    def evaluate(self, model, val_loader, accelerator) -> dict[str, float]:
        return evaluate_loss(model, val_loader, accelerator, self.token_bytes)

    def describe(self, result: dict[str, float]) -> str:
        return (f"val loss {result['val_loss']:.4f}, perplexity {result['val_perplexity']:.2f}, "
                f"{result['val_bits_per_byte']:.4f} bits/byte")

    def summary_fields(self, last_eval: dict[str, float]) -> dict[str, Any]:
        return {
            "val_perplexity": last_eval["val_perplexity"],
            "val_bits_per_byte": last_eval["val_bits_per_byte"],
            "dataset": self.config.dataset,
            "train_blocks": self.data.stats.get("train_blocks"),
            "val_blocks": self.data.stats.get("val_blocks"),
            "tokenizer": str(self.tokenizer_dir.absolute()),
            "data_cache": str(self.data.cache_dir) if self.data.cache_dir else None,
        }

    def save_beside_model(self, folder: Path, model_config) -> None:
        tokenizer_for_model(self.tokenizer_dir, self.eos_token, model_config.n_positions).save_pretrained(folder)


def _tracker_config(config: TrainConfig) -> dict:
    flat = {key: value for key, value in config.to_dict().items()
            if isinstance(value, (int, float, str, bool)) and key != "model"}
    flat.update({f"model.{key}": value for key, value in config.model.items() if isinstance(value, (int, float, str, bool))})
    return flat


# --- the loop ------------------------------------------------------------------------------------------------------


def train(config: TrainConfig, workload: Workload | None = None, start_over: bool = False) -> Path:
    """Train as `config` says; return the run folder (config.yaml, run_log.jsonl, checkpoints/, final/, summary, PNG).

    `workload` says what is trained (default: language modelling on `config.dataset`, LanguageModelling below).
    A run folder that already holds checkpoints is continued from the latest one when its settings are this
    config's, and refused naming the differences when not (resume_check.find_resume_point); `start_over=True`
    trains from step 0 instead, moving the old checkpoints aside."""
    # what this machine cannot do is named before the run folder is created
    if config.init_from:
        check_model_folder(config.init_from)
    device_type = training_device_type(config.cpu)
    config = dataclasses.replace(config, mixed_precision=resolve_mixed_precision(config.mixed_precision, device_type))
    if config.compile:
        check_compiler_available(device_type)
    previous_threads = torch.get_num_threads()
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    try:
        with lock_run_folder(config.run_dir):  # one process per run folder (run_lock.py)
            return _train(config, workload or LanguageModelling(), start_over, device_type)
    finally:
        torch.set_num_threads(previous_threads)  # the caller (e.g. the main job's evaluation) gets its setting back


def _train(config: TrainConfig, workload: Workload, start_over: bool, device_type: str) -> Path:
    start_time = time.time()
    session = _set_up(config, workload, start_over, device_type)
    loop = _run_loop(session)
    _finish(session, loop, wall_time_s=lambda: time.time() - start_time)
    return session.run_dir


@dataclass
class _Session:
    """What one train() call works with: built once by _set_up, then read by the loop and by _finish."""

    config: TrainConfig
    workload: Workload
    accelerator: Any
    run_dir: Path
    tokenizer: Any
    model: Any  # prepared (wrapped) model
    model_class: type  # its class before any wrapper
    model_config: Any
    optimizer: Any
    scheduler: Any
    train_loader: Any
    val_loader: Any
    n_params: int
    state: TrainingState
    resume_folder: Path | None
    run_log: RunLog | None  # main process only

    @property
    def checkpoints_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def tokens_per_step(self) -> int:
        """Tokens one optimizer step holds at most (exactly, for packed blocks)."""
        config = self.config
        return config.batch_size * config.block_size * config.gradient_accumulation_steps * self.accelerator.num_processes

    @property
    def peak_flops(self) -> float:
        return self.config.peak_flops or DEFAULT_PEAK_FLOPS[self.config.mixed_precision]

    def mfu(self, tokens_per_s: float) -> float:
        flops = flops_per_token(self.model_config, self.n_params, self.config.block_size)
        return flops * tokens_per_s / (self.peak_flops * self.accelerator.num_processes)


@dataclass
class _LoopResult:
    resumed_step: int  # where this session started
    last_eval: dict | None = None
    last_checkpoint: Path | None = None
    train_time_s: float = 0.0
    advice_if_diverged: str = ""  # which checkpoint is safe, should the final weights turn out broken


def _set_up(config: TrainConfig, workload: Workload, start_over: bool, device_type: str) -> _Session:
    """Accelerator, resume checks, config.yaml, the workload's model and loaders, optimizer, schedule, restored state."""
    import hf_gpt_custom  # noqa: F401  (registers the Auto classes)
    from accelerate.utils import set_seed

    run_dir = config.run_dir.absolute()
    log_with = None if config.log_with in (None, "none") else config.log_with
    check_tracker_installed(log_with)
    check_folder_writable(run_dir / "checkpoints", "the checkpoints folder")
    # before config.yaml is rewritten: it may be the record of what the folder's checkpoints were trained with
    resume_folder = find_resume_point(config, run_dir, start_over)
    accelerator = _make_accelerator(config, device_type, run_dir, log_with)
    warn_if_bf16_is_emulated(accelerator.device.type, accelerator.mixed_precision)
    if accelerator.is_main_process:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_train_config(config, run_dir / "config.yaml")
    set_aside_other_histories(accelerator, run_dir / "checkpoints", resume_folder)  # rotation then sees only this branch
    set_seed(config.seed)

    prepared = workload.prepare(config, accelerator)
    model, tokenizer, train_loader, val_loader = prepared.model, prepared.tokenizer, prepared.train_loader, \
        prepared.val_loader
    # the class and config before any wrapper (DDP, FSDP2's in-place class swap, torch.compile) touches the model:
    # what every saved folder is written as (checkpoint.save_model_folder)
    model_class, model_config, n_params = type(model), model.config, model.num_parameters()
    if config.compile:
        model = torch.compile(model)
    optimizer = build_optimizer(model, config)
    scheduler = build_scheduler(optimizer, config)
    model, optimizer, val_loader, scheduler = accelerator.prepare(model, optimizer, val_loader, scheduler)
    train_loader.pin_memory = accelerator.device.type == "cuda"  # for the non-blocking copies of _next_batches
    train_loader = accelerator.prepare_data_loader(train_loader, device_placement=False)
    record_settings_in_checkpoints(accelerator, config, model_config)
    save_checkpoints_without_wrappers(accelerator)

    state = TrainingState() if resume_folder is None else _restore(accelerator, resume_folder)
    if resume_folder is not None and state.step >= config.max_steps:
        accelerator.print(f"the run is complete (step {state.step} of max_steps={config.max_steps}): nothing left to "
                          f"train; evaluating and writing final/ again (--start_over trains it anew)")
    run_log = RunLog(run_dir / RUN_LOG_NAME, resume_step=state.step if resume_folder else None) \
        if accelerator.is_main_process else None
    if log_with:
        accelerator.init_trackers(config.run_name, config=_tracker_config(config))
    return _Session(config, workload, accelerator, run_dir, tokenizer, model, model_class, model_config, optimizer,
                    scheduler, train_loader, val_loader, n_params, state, resume_folder, run_log)


def _make_accelerator(config: TrainConfig, device_type: str, run_dir: Path, log_with: str | None):
    from accelerate import Accelerator
    from accelerate.utils import GradientAccumulationPlugin, ProjectConfiguration

    return Accelerator(
        cpu=device_type == "cpu",
        mixed_precision=mixed_precision_for_run(config.mixed_precision),  # warns if the launcher says otherwise
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


def _restore(accelerator, resume_folder: Path) -> TrainingState:
    try:
        state = load_checkpoint(accelerator, resume_folder)
    except RuntimeError as err:  # an older checkpoint without recorded settings, from another architecture
        if "size mismatch" not in str(err) and "Error(s) in loading state_dict" not in str(err):
            raise
        raise UserError(f"checkpoint {resume_folder} holds weights of another architecture than this config's "
                        f"model section ({str(err).splitlines()[-1].strip()}); resume with the model settings it "
                        f"was trained with, or start a new run") from err
    # Checkpoints are taken at the end of an accumulation window: start counting the next window afresh, also
    # if gradient_accumulation_steps changed since (the restored counter would put the sync mid-window).
    accelerator.step = 0
    accelerator.print(f"resumed from {resume_folder} at step {state.step} (epoch {state.epoch}, "
                      f"{state.batches_in_epoch} batches into it)")
    return state


@dataclass
class _StepOnDevice:
    """One optimizer step as the device left it: read back only when the loop flushes its window of steps."""

    loss: torch.Tensor  # mean over the accumulation window and the processes
    grad_norm: torch.Tensor
    is_diverged: torch.Tensor  # the device's verdict (divergence.UpdateGate); the update was skipped when true
    tokens: torch.Tensor | int  # this process's trained tokens
    digests: list[int]  # this process's micro-batches
    lr: float
    epoch: int


@dataclass
class _Window:
    """The steps since the loop last read values back from the device, and when that window began."""

    first_step: int
    started: float = dataclasses.field(default_factory=time.perf_counter)
    steps: list[_StepOnDevice] = dataclasses.field(default_factory=list)


def _run_loop(s: _Session) -> _LoopResult:
    """Optimizer steps until max_steps: each one logged, evaluated and checkpointed on its interval.

    Nothing is read back from the device inside a step: loss, gradient norm and token counts stay on it until the
    window of steps is flushed — every log_interval steps, after the session's first step (timed alone: it holds
    the warm-up), and before each evaluation, checkpoint and the end. Divergence is still caught at the step it
    happens: the device skips that update and every later one (divergence.UpdateGate), and the flush stops the run
    naming the step, before any checkpoint could hold what came after it.
    """
    from tqdm.auto import tqdm

    config, accelerator, state = s.config, s.accelerator, s.state
    accelerator.print(
        f"model: {s.n_params:,} parameters; {accelerator.num_processes} process(es); {s.tokens_per_step:,} tokens "
        f"per optimizer step; {config.max_steps} steps"
    )
    batches = _next_batches(accelerator, s.train_loader, state)
    progress = tqdm(total=config.max_steps, initial=state.step, desc="training",
                    disable=not accelerator.is_local_main_process, dynamic_ncols=True)
    result = _LoopResult(resumed_step=state.step, last_checkpoint=s.resume_folder)
    guard = DivergenceGuard(resumed_from=s.resume_folder)
    gate = UpdateGate(s.optimizer, accelerator.device, overflow_is_normal=accelerator.scaler is not None)
    window = None
    s.model.train()
    while state.step < config.max_steps:
        window = window or _Window(first_step=state.step + 1)  # opened after evaluation and saving: not training time
        window.steps.append(_optimizer_step(s, batches, gate, guard, progress))
        state.step += 1
        progress.update(1)
        is_eval = state.step % config.eval_interval == 0 or state.step == config.max_steps
        is_checkpoint = bool(config.checkpoint_interval) and state.step % config.checkpoint_interval == 0 \
            and state.step < config.max_steps
        if (is_eval or is_checkpoint or state.step % config.log_interval == 0 or state.step == result.resumed_step + 1
                or not gate.skips_on_device):
            result.train_time_s += _flush(s, window, guard, progress)
            window = None
        if is_eval:
            result.last_eval = _evaluate_and_log(s, progress)
        if is_checkpoint:
            _check_weights_finite(s, guard.advice(s.checkpoints_dir), progress)
            result.last_checkpoint = save_checkpoint(accelerator, s.checkpoints_dir, state, config.keep_checkpoints)
            guard.checkpoint_saved(result.last_checkpoint)
    progress.close()
    result.advice_if_diverged = guard.advice(s.checkpoints_dir)
    return result


def _optimizer_step(s: _Session, batches, gate: UpdateGate, guard: DivergenceGuard, progress) -> _StepOnDevice:
    """One accumulation window and the update after it, with nothing read back from the device (unless the
    optimizer cannot skip an update on the device: then the step is checked on the host, as it goes)."""
    accelerator, model, accum = s.accelerator, s.model, s.config.gradient_accumulation_steps
    loss_sum = torch.zeros((), device=accelerator.device)
    n_tokens = torch.zeros((), dtype=torch.int64, device=accelerator.device)
    digests = []
    for _ in range(accum):
        batch, digest = next(batches)
        digests.append(digest)
        n_tokens += s.workload.count_tokens(batch)
        with accelerator.accumulate(model):
            loss = s.workload.loss(model, batch)
            accelerator.backward(loss)
            loss_sum += loss.detach().float()
            if accelerator.sync_gradients:
                step_loss = accelerator.reduce(loss_sum / accum, reduction="mean")  # a collective, not a host read
                max_norm = s.config.grad_clip if s.config.grad_clip > 0 else float("inf")  # inf: measure, don't clip
                grad_norm = accelerator.clip_grad_norm_(model.parameters(), max_norm).detach().float()
                is_diverged = gate.check(step_loss, grad_norm)
                if not gate.skips_on_device and bool(is_diverged):  # the host check, before the update
                    loss_value, norm_value = float(step_loss), float(grad_norm)
                    problem = guard.problem(loss_value, norm_value, overflow_is_normal=gate.overflow_is_normal)
                    _stop_diverged(s, s.state.step + 1, f"{problem or 'the loss diverged'} (this update was not "
                                   f"applied)", loss_value, norm_value, guard.advice(s.checkpoints_dir), progress)
                s.optimizer.step()
                s.scheduler.step()
                s.optimizer.zero_grad(set_to_none=True)
    return _StepOnDevice(step_loss, grad_norm, is_diverged, n_tokens, digests, s.scheduler.get_last_lr()[0],
                         s.state.epoch)


def _flush(s: _Session, window: _Window, guard: DivergenceGuard, progress) -> float:
    """Read the window's steps back from the device in one go, judge them in order, write one log record per step;
    return the window's training time. Stops the run at the first step the device (or the host) found diverged."""
    accelerator, state = s.accelerator, s.state
    if not window.steps:
        return 0.0
    steps = window.steps
    tokens = accelerator.reduce(torch.stack([torch.as_tensor(step.tokens, device=accelerator.device)
                                             for step in steps]), reduction="sum")
    digests = accelerator.gather(torch.tensor([step.digests for step in steps], dtype=torch.int64,
                                              device=accelerator.device))  # (processes * steps, accumulation)
    values = torch.stack([torch.stack([step.loss.double(), step.grad_norm.double(), step.is_diverged.double()])
                          for step in steps]).tolist()  # the one read of the window
    tokens, digests = tokens.tolist(), digests.view(accelerator.num_processes, len(steps), -1).tolist()
    elapsed_s = time.perf_counter() - window.started
    tokens_per_s = sum(tokens) / elapsed_s
    for offset, (step, (loss, grad_norm, is_diverged)) in enumerate(zip(steps, values)):
        number = window.first_step + offset
        problem = guard.problem(loss, grad_norm, overflow_is_normal=accelerator.scaler is not None)
        if is_diverged or problem is not None:
            _stop_diverged(s, number, f"{problem or 'the loss diverged'} (this update was not applied)", loss,
                           grad_norm, guard.advice(s.checkpoints_dir), progress)
        guard.record_healthy_step(loss)
        state.tokens_seen += tokens[offset]
        record = {
            "kind": "train", "step": number, "epoch": step.epoch, "loss": loss, "lr": step.lr,
            "grad_norm": grad_norm, "tokens_per_s": tokens_per_s, "mfu": s.mfu(tokens_per_s),
            "tokens_seen": state.tokens_seen, "step_time_s": elapsed_s / len(steps),
            "data_digests": [rank[offset] for rank in digests],
        }
        if s.run_log is not None:
            s.run_log.write(record)
        accelerator.log({f"train/{key}": record[key] for key in ("loss", "lr", "grad_norm", "tokens_per_s", "mfu")},
                        step=number)
    progress.set_postfix(loss=f"{values[-1][0]:.4f}", lr=f"{steps[-1].lr:.2e}")
    return elapsed_s


def _evaluate_and_log(s: _Session, progress) -> dict:
    result = {**s.workload.evaluate(s.model, s.val_loader, s.accelerator), "step": s.state.step}
    if s.run_log is not None:
        s.run_log.write({"kind": "eval", **result})
    s.accelerator.log({f"val/{k[4:]}": v for k, v in result.items() if k.startswith("val_")}, step=s.state.step)
    if s.accelerator.is_main_process:
        progress.write(f"step {s.state.step}: {s.workload.describe(result)}")
    return result


def _finish(s: _Session, loop: _LoopResult, wall_time_s) -> None:
    """The last evaluation and checkpoint, final/ (weights, tokenizer, manifest), the summary and the loss curve."""
    accelerator, state, config = s.accelerator, s.state, s.config
    last_eval = loop.last_eval
    if last_eval is None or last_eval["step"] != state.step:  # e.g. resuming a run that had already finished
        last_eval = {**s.workload.evaluate(s.model, s.val_loader, accelerator), "step": state.step}
    if loop.last_checkpoint is None or state.step != loop.resumed_step:  # a resumed run with no step left keeps its own
        _check_weights_finite(s, loop.advice_if_diverged, None)
        save_checkpoint(accelerator, s.checkpoints_dir, state, config.keep_checkpoints)
    _save_final_folder(s)
    if accelerator.is_main_process:
        with write_errors_named(s.run_dir, None, "the training summary"):
            _write_summary_and_plot(s, loop, last_eval, wall_time_s)
        accelerator.print(f"done: {s.workload.describe(last_eval)}; {s.run_dir}")
    accelerator.end_training()


def _write_summary_and_plot(s: _Session, loop: _LoopResult, last_eval: dict, wall_time_s) -> None:
    accelerator, state, config = s.accelerator, s.state, s.config
    s.run_log.close()
    records = read_run_log(s.run_dir / RUN_LOG_NAME)
    steps = summarize_train_steps(records)
    write_training_summary(s.run_dir / SUMMARY_NAME, {
        "run_name": config.run_name,
        "config": config.to_dict(),
        "n_params": s.n_params,
        "tokens_seen": state.tokens_seen,
        "steps": state.step,
        "wall_time_s": wall_time_s(),
        "train_time_s": loop.train_time_s,
        "final_train_loss": steps["final_train_loss"],
        "final_val_loss": last_eval["val_loss"],
        "tokens_per_s": steps["tokens_per_s"],
        "mfu": s.mfu(steps["tokens_per_s"]) if steps["tokens_per_s"] is not None else None,
        "peak_flops": s.peak_flops,
        "num_processes": accelerator.num_processes,
        **s.workload.summary_fields(last_eval),
        "loss_curve": LOSS_CURVE_NAME,
    })
    plot_loss_curve(records, s.run_dir / LOSS_CURVE_NAME,
                    title=f"{config.run_name}: {s.n_params / 1e6:.2f}M parameters")


def _save_final_folder(s: _Session) -> None:
    """final/: save_pretrained weights and the shipped tokenizer, with a manifest; complete or absent."""
    accelerator = s.accelerator
    accelerator.wait_for_everyone()
    state_dict = unwrapped_state_dict(accelerator, s.model)  # every rank takes part (FSDP gathers the shards)
    if not accelerator.is_main_process:
        return
    final_dir, staging = s.run_dir / "final", s.run_dir / "final.tmp"  # complete or absent, never half-written
    with write_errors_named(s.run_dir, staging, "final/"):
        shutil.rmtree(staging, ignore_errors=True)
        save_model_folder(s.model_class, s.model_config, state_dict, staging)
        s.workload.save_beside_model(staging, s.model_config)
        write_manifest(staging)  # what eval/export verify final/ against
        shutil.rmtree(final_dir, ignore_errors=True)
        os.replace(staging, final_dir)


def check_tracker_installed(log_with: str | None) -> None:
    """Refuse a tracker that is not installed: Accelerate would silently drop it and the run would log nowhere."""
    from accelerate.utils import is_tensorboard_available, is_wandb_available

    installed = {"tensorboard": is_tensorboard_available, "wandb": is_wandb_available}
    if log_with in installed and not installed[log_with]():
        package = "tensorboard" if log_with == "tensorboard" else "wandb"
        raise UserError(f"log_with={log_with} but the {package} package is not installed; pip install {package}, "
                        f"or set log_with=none (the run log and loss curve are written either way)")


def tokenizer_for_model(tokenizer_dir: str | os.PathLike, eos_token: str, n_positions: int):
    """The tokenizer as it ships beside the model: the model's context length, and padding for batched generation.

    pad = end-of-text (GPT-2 has no pad token) on the left, so every prompt in a batch ends where generation starts.
    Passed to from_pretrained because save_pretrained writes only constructor arguments (and model_max_length).
    """
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir), model_max_length=n_positions, pad_token=eos_token,
                                         padding_side="left")


def _check_weights_finite(s: _Session, advice: str, progress) -> None:
    """Stop instead of checkpointing weights that are no longer finite (they would push good checkpoints out)."""
    accelerator = s.accelerator
    finite = torch.stack([torch.isfinite(p).all() for p in s.model.parameters()]).all().float()  # one read below
    if accelerator.reduce(finite, reduction="sum").item() < accelerator.num_processes:
        _stop_diverged(s, s.state.step, "the weights stopped being finite", float("nan"), float("nan"), advice,
                       progress)


def _stop_diverged(s: _Session, step: int, problem: str, loss: float, grad_norm: float, advice: str,
                   progress) -> None:
    if progress is not None:
        progress.close()
    if s.run_log is not None:
        s.run_log.write({"kind": "error", "step": step, "problem": problem,
                         "loss": loss if math.isfinite(loss) else str(loss),
                         "grad_norm": grad_norm if math.isfinite(grad_norm) else str(grad_norm)})
        s.run_log.close()
    s.accelerator.end_training()
    raise TrainingDivergedError(f"training stopped at step {step}: {problem}; {advice}")
