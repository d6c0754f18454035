"""The loop: optimizer steps until max_steps — accumulation, clipping, the update, logging windows, evaluation and
checkpoint intervals — and when it must stop because the run diverged.

Nothing is read back from the device inside a step (a GPU would wait): values are read once per logging window.
Divergence is still caught at the step it happens: its rule (divergence.py) runs on the device too (UpdateGate) and
holds every later update back. train.py builds what the loop works with (the Session) and finishes the run after it.

Divergence and safe checkpoints: a step's loss is computed with the weights the previous update left, so
checkpoint k (saved after update k) is known to be good only once the loss of step k+1 — the loss of exactly those
weights — came out finite and not blown up. A huge learning rate shows why: the update that ruins the weights leaves
a finite loss behind it, so "the checkpoint before the first NaN" can hold weights of 1e6. The guard's memory (the
best loss, the last good checkpoint) travels in each checkpoint, so a resumed run stops where the uninterrupted one
would have.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.progress import progress_bar
from hf_gpt_custom.training.checkpoint import TrainingState, checkpoint_step, list_checkpoints, save_checkpoint
from hf_gpt_custom.training.data import ShiftedBlocks
from hf_gpt_custom.training.divergence import DivergenceGuard, TrainingDivergedError, UpdateGate, full_value
from hf_gpt_custom.training.run_log import RUN_LOG_NAME, read_run_log

if TYPE_CHECKING:
    from hf_gpt_custom.training.train import Session

logger = logging.getLogger(__name__)

# --- the loop -------------------------------------------------------------------------------------------------------


@dataclass
class LoopResult:
    resumed_step: int  # where this session started
    last_eval: dict | None = None
    last_checkpoint: Path | None = None
    train_time_s: float = 0.0
    advice_if_diverged: str = ""  # which checkpoint is safe, should the final weights turn out broken


@dataclass
class _StepOnDevice:
    """One optimizer step as the device left it: read back only when the loop flushes its window of steps."""

    loss: torch.Tensor  # mean over the accumulation window and the processes
    grad_norm: torch.Tensor
    is_diverged: torch.Tensor  # the device's verdict (UpdateGate); the update was skipped when true
    update_skipped: bool  # fp16's gradient scaler found inf/nan gradients and skipped the update (the run goes on)
    tokens: torch.Tensor | int  # this process's trained tokens
    span_tokens: torch.Tensor | int  # Σ tokens × their batch's length: the positions attention spans, for MFU
    digests: list[int]  # this process's micro-batches
    lr: float
    epoch: int


@dataclass
class _Window:
    """The steps since the loop last read values back from the device, and when that window began."""

    first_step: int
    started: float = dataclasses.field(default_factory=time.perf_counter)
    steps: list[_StepOnDevice] = dataclasses.field(default_factory=list)


def run_loop(s: Session) -> LoopResult:
    """Optimizer steps until max_steps: each one logged, evaluated and checkpointed on its interval.

    Nothing is read back from the device inside a step: loss, gradient norm and token counts stay on it until the
    window of steps is flushed — every log_interval steps, after the session's first step (timed alone: it holds
    the warm-up), and before each evaluation, checkpoint and the end. Divergence is still caught at the step it
    happens: the device skips that update and every later one (UpdateGate), and the flush stops the run
    naming the step, before any checkpoint could hold what came after it.
    """
    config, accelerator, state = s.config, s.accelerator, s.state
    accelerator.print(
        f"model: {s.n_params:,} parameters; {accelerator.num_processes} process(es); "
        f"{'' if s.workload.packs_blocks else 'at most '}{s.tokens_per_step:,} tokens per optimizer step"
        f"{'' if s.workload.packs_blocks else ' (rows are padded to their batch: padding is not trained on)'}; "
        f"{config.max_steps} steps"
    )
    batches = _next_batches(accelerator, s.train_loader, state)
    progress = progress_bar(show=accelerator.is_local_main_process, total=config.max_steps, initial=state.step,
                            desc="training", dynamic_ncols=True)
    result = LoopResult(resumed_step=state.step, last_checkpoint=s.resume_folder)
    guard = _guard_as_the_run_left_it(s)
    gate = UpdateGate(s.optimizer, accelerator.device, overflow_is_normal=accelerator.scaler is not None,
                      best_loss=guard.best_loss, loss_blowup_is_divergence=guard.loss_blowup_is_divergence)
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
            result.train_time_s += _flush(s, window, guard, progress,
                                          warm_up=window.first_step == result.resumed_step + 1)
            window = None
        if is_eval:
            result.last_eval = _evaluate_and_log(s, progress)
        if is_checkpoint:
            check_weights_finite(s, guard.advice(s.checkpoints_dir), progress)
            guard.remember_in(state)
            result.last_checkpoint = save_checkpoint(accelerator, s.checkpoints_dir, s.stamp_wall_time(),
                                                     config.keep_checkpoints)
            guard.checkpoint_saved(result.last_checkpoint)
    progress.close()
    guard.remember_in(state)  # for the checkpoint train.py saves at the end
    result.advice_if_diverged = guard.advice(s.checkpoints_dir)
    return result


def _guard_as_the_run_left_it(s: Session) -> DivergenceGuard:
    """The divergence guard with the memory the resumed checkpoint recorded (a fresh one for a new run). Without it,
    a resumed run measured "twice the best loss" against its own first steps and trained through the blow-up the
    uninterrupted run stopped at. A checkpoint written before that memory was recorded gets it from the run log."""
    folder, state = s.resume_folder, s.state
    blowup = s.workload.loss_blowup_is_divergence
    if folder is None:
        return DivergenceGuard(loss_blowup_is_divergence=blowup)
    best_loss, last_good = state.best_loss, state.last_good_checkpoint
    if best_loss is None and state.step < s.config.max_steps:  # (a complete run has no step left to judge)
        best_loss, last_good = _guard_memory_from_run_log(folder, state.step)
        if s.accelerator.is_main_process:
            logger.warning("%s records no best loss (written by an older version): the divergence guard takes %s",
                           folder, f"the best loss {best_loss:.6g} of the run log's steps up to {state.step}"
                           if best_loss is not None else "no best loss either: the run log has no steps up to it")
    return DivergenceGuard(resumed_from=folder, best_loss=math.inf if best_loss is None else best_loss,
                           last_good=folder.parent / last_good if last_good else None, loss_blowup_is_divergence=blowup)


def _guard_memory_from_run_log(folder: Path, step: int) -> tuple[float | None, str | None]:
    """(best loss, last good checkpoint) for the checkpoint `folder` at `step`, from its run's log and folder: every
    logged training step was healthy (a diverged one gets an error record), so each older checkpoint is good."""
    log = folder.parent.parent / RUN_LOG_NAME
    losses = [r["loss"] for r in read_run_log(log) if r.get("kind") == "train" and r["step"] <= step] \
        if log.is_file() else []
    older = [f.name for f in list_checkpoints(folder.parent) if checkpoint_step(f) < step]
    return (min(losses) if losses else None), (older[-1] if older else None)


def _optimizer_step(s: Session, batches, gate: UpdateGate, guard: DivergenceGuard, progress) -> _StepOnDevice:
    """One accumulation window and the update after it, with nothing read back from the device (unless the
    optimizer cannot skip an update on the device: then the step is checked on the host, as it goes)."""
    accelerator, model, accum = s.accelerator, s.model, s.config.gradient_accumulation_steps
    loss_sum = torch.zeros((), device=accelerator.device)
    # Host integers while the counts are (packed blocks: a shape); device tensors once a count is one (padded rows:
    # the mask's sum), so no count is read back, and packed blocks add no kernel per micro-batch
    n_tokens: torch.Tensor | int = 0
    span_tokens: torch.Tensor | int = 0
    digests = []
    for _ in range(accum):
        batch, digest = next(batches)
        digests.append(digest)
        batch_tokens = s.workload.count_tokens(batch)
        n_tokens = n_tokens + batch_tokens
        span_tokens = span_tokens + batch_tokens * batch["input_ids"].shape[-1]  # the width is a shape
        with accelerator.accumulate(model):
            loss = s.workload.loss(model, batch)
            accelerator.backward(loss)
            loss_sum += loss.detach().float()
            if accelerator.sync_gradients:
                step_loss = accelerator.reduce(loss_sum / accum, reduction="mean")  # a collective, not a host read
                max_norm = s.config.grad_clip if s.config.grad_clip > 0 else float("inf")  # inf: measure, don't clip
                grad_norm = full_value(accelerator.clip_grad_norm_(model.parameters(), max_norm)).detach().float()
                is_diverged = gate.check(step_loss, grad_norm)
                if not gate.skips_on_device and bool(is_diverged):  # the host check, before the update
                    loss_value, norm_value = float(step_loss), float(grad_norm)
                    problem = guard.problem(loss_value, norm_value, overflow_is_normal=gate.overflow_is_normal)
                    stop_diverged(s, s.state.step + 1, f"{problem or 'the loss diverged'} (this update was not "
                                  f"applied)", loss_value, norm_value, guard.advice(s.checkpoints_dir), progress)
                applied_lr = s.scheduler.get_last_lr()[0]  # the rate this update uses (after it: the next one's)
                update_skipped = _step_unless_the_scaler_skips(s)
                s.optimizer.zero_grad(set_to_none=True)
    return _StepOnDevice(step_loss, grad_norm, is_diverged, update_skipped, n_tokens, span_tokens, digests,
                         applied_lr, s.state.epoch)


def _step_unless_the_scaler_skips(s: Session) -> bool:
    """The update and the schedule's step; True when fp16's gradient scaler skipped the update instead.

    The scaler skips an update whose gradients overflowed and halves its scale: the schedule then holds, as it does
    under Accelerate's scheduler and transformers' Trainer, and the step is logged as skipped. A falling scale is
    the one sign of it that holds for every optimizer (a fused AdamW takes the scaler's verdict inside its kernel,
    so accelerate's `step_was_skipped` reads False there). Reading the scale waits for the device; an fp16 step is
    read back at once anyway (UpdateGate.skips_on_device is False under a scaler). bf16 and fp32 read nothing."""
    scaler = s.accelerator.scaler
    scale_before = scaler.get_scale() if scaler is not None else None
    s.optimizer.step()
    if scaler is not None and scaler.get_scale() < scale_before:
        return True
    s.scheduler.step()
    return False


def _flush(s: Session, window: _Window, guard: DivergenceGuard, progress, warm_up: bool = False) -> float:
    """Read the window's steps back from the device in one go, judge them in order, write one log record per step;
    return the window's training time. Stops the run at the first step the device (or the host) found diverged.
    `warm_up`: the window is a session's first step, timed alone (compilation, allocator, caches), so the summary's
    rate leaves it out — for a resumed session as for step 1."""
    accelerator, state = s.accelerator, s.state
    if not window.steps:
        return 0.0
    steps = window.steps
    tokens = accelerator.reduce(torch.stack([torch.as_tensor(step.tokens, device=accelerator.device)
                                             for step in steps]), reduction="sum")
    span_tokens = accelerator.reduce(torch.stack([torch.as_tensor(step.span_tokens, device=accelerator.device)
                                                  for step in steps]), reduction="sum")
    digests = accelerator.gather(torch.tensor([step.digests for step in steps], dtype=torch.int64,
                                              device=accelerator.device))  # (processes * steps, accumulation)
    values = torch.stack([torch.stack([step.loss.double(), step.grad_norm.double(), step.is_diverged.double()])
                          for step in steps]).tolist()  # the one read of the window
    tokens, digests = tokens.tolist(), digests.view(accelerator.num_processes, len(steps), -1).tolist()
    elapsed_s = time.perf_counter() - window.started
    tokens_per_s = sum(tokens) / elapsed_s
    mean_span = sum(span_tokens.tolist()) / max(sum(tokens), 1)  # the window's tokens attend this far on average
    for offset, (step, (loss, grad_norm, is_diverged)) in enumerate(zip(steps, values)):
        number = window.first_step + offset
        problem = guard.problem(loss, grad_norm, overflow_is_normal=accelerator.scaler is not None)
        if is_diverged or problem is not None:
            stop_diverged(s, number, f"{problem or 'the loss diverged'} (this update was not applied)", loss,
                          grad_norm, guard.advice(s.checkpoints_dir), progress)
        guard.record_healthy_step(loss)
        state.tokens_seen += tokens[offset]
        record = {
            "kind": "train", "step": number, "epoch": step.epoch, "loss": loss, "lr": step.lr,
            "grad_norm": grad_norm, "tokens_per_s": tokens_per_s, "mfu": s.mfu(tokens_per_s, mean_span),
            "peak_flops": s.peak_flops,  # the MFU's denominator: a later session may measure another
            "tokens_seen": state.tokens_seen, "step_time_s": elapsed_s / len(steps),
            "data_digests": [rank[offset] for rank in digests],
            **({"update_skipped": True} if step.update_skipped else {}),  # fp16's scaler: no update, schedule held
            **({"warm_up": True} if warm_up else {}),
        }
        if s.run_log is not None:
            s.run_log.write(record)
        logged = ("loss", "lr", "grad_norm", "tokens_per_s", "mfu")  # mfu is None where the peak is unknown
        accelerator.log({f"train/{key}": record[key] for key in logged if record[key] is not None}, step=number)
    # read once per log_interval window: the figures name the step they are of (the bar showed step 1's "lr=0" for
    # the first ten steps as if current: the newcomer3 walk)
    progress.set_postfix(loss=f"{values[-1][0]:.4f}", lr=f"{steps[-1].lr:.2e}", of_step=window.first_step + len(steps) - 1)
    return elapsed_s


def evaluate_and_log(s: Session) -> dict:
    """The workload's validation figures at this step, written to run_log.jsonl and the trackers."""
    result = {**s.workload.evaluate(s.model, s.val_loader, s.accelerator), "step": s.state.step}
    if s.run_log is not None:
        s.run_log.write({"kind": "eval", **result})
    s.accelerator.log({f"val/{k[4:]}": v for k, v in result.items() if k.startswith("val_")}, step=s.state.step)
    return result


def _evaluate_and_log(s: Session, progress) -> dict:
    result = evaluate_and_log(s)
    if s.accelerator.is_main_process:
        progress.write(f"step {s.state.step}: {s.workload.describe(result)}")
    return result


def _no_batch_error(loader) -> UserError:
    """The training data gave no batch: say how many blocks there are and what would give one."""
    dataset, fixes = loader.dataset, "lower batch_size or block_size, or add data"
    if isinstance(dataset, ShiftedBlocks):
        size = (f"its {len(dataset.packed)} block(s) make {len(dataset)} an epoch with shift_block_boundaries=true "
                f"(one fewer), which is")
        if len(dataset.packed) >= (getattr(loader, "total_batch_size", None) or loader.batch_size):
            fixes += ", or set shift_block_boundaries=false"  # the packed blocks alone make a batch
    else:
        try:
            size = f"its {len(dataset)} block(s) are"
        except TypeError:  # a stream: its first documents went to validation
            from hf_gpt_custom.training.data import STREAMING_VAL_DOCUMENTS

            size = f"its blocks after the first {STREAMING_VAL_DOCUMENTS:,} documents (held out for validation) are"
    return UserError(f"the training data gave no batch: {size} fewer than one batch (an incomplete last batch is "
                     f"dropped); {fixes}")


def _next_batches(accelerator, train_loader, state: TrainingState):
    """Endless stream of (training micro-batch on the device, its digest) that keeps `state.epoch` and
    `state.batches_in_epoch` current.

    A resumed run skips the batches this epoch already consumed (counted in micro-batches, so gradient
    accumulation is covered) instead of replaying them. The loader is prepared without device placement: each batch
    is fingerprinted on the host, then copied with non_blocking (from pinned memory on a GPU).
    """
    from accelerate.utils import send_to_device

    while True:
        # The epoch is set on the prepared loader, which reaches the sampler through Accelerate's per-process shard;
        # the skipping loader of a resume nests one level deeper, where Accelerate's set_epoch no longer reaches it,
        # and a resume of several processes inside epoch >= 1 went on in epoch 0's order.
        train_loader.set_epoch(state.epoch)
        loader = train_loader
        if state.batches_in_epoch:
            loader = accelerator.skip_first_batches(train_loader, state.batches_in_epoch)
            loader.set_epoch(state.epoch)  # a new loader counts its epochs from 0, and sets that on one process
        produced = False
        for batch in loader:
            produced = True
            state.batches_in_epoch += 1
            digest = _batch_digest(batch["input_ids"])
            yield send_to_device(batch, accelerator.device, non_blocking=True), digest
        if not produced and state.batches_in_epoch == 0:
            raise _no_batch_error(train_loader)
        state.epoch += 1
        state.batches_in_epoch = 0


def _batch_digest(input_ids: torch.Tensor) -> int:
    """48-bit fingerprint of a batch: logged per rank so a test (or a person) can see who trained on what. Taken from
    the loader's host copy, before the batch moves to the device: it never waits for the device."""
    return int.from_bytes(hashlib.blake2b(input_ids.cpu().numpy().tobytes(), digest_size=6).digest(), "little")


def check_weights_finite(s: Session, advice: str, progress) -> None:
    """Stop instead of checkpointing weights that are no longer finite (they would push good checkpoints out)."""
    accelerator = s.accelerator
    # each process checks the weights it holds (under FSDP2 its shards: a DTensor cannot enter the all-reduce)
    local = (p.to_local() if hasattr(p, "to_local") else p for p in s.model.parameters())
    finite = torch.stack([torch.isfinite(p).all() for p in local]).all().float()  # one read below
    if accelerator.reduce(finite, reduction="sum").item() < accelerator.num_processes:
        stop_diverged(s, s.state.step, "the weights stopped being finite", float("nan"), float("nan"), advice,
                      progress)


def stop_diverged(s: Session, step: int, problem: str, loss: float, grad_norm: float, advice: str,
                  progress) -> None:
    """Log the error record, end the trackers, and raise TrainingDivergedError naming the step and the advice."""
    if progress is not None:
        progress.close()
    if s.run_log is not None:
        s.run_log.write({"kind": "error", "step": step, "problem": problem,
                         "loss": loss if math.isfinite(loss) else str(loss),
                         "grad_norm": grad_norm if math.isfinite(grad_norm) else str(grad_norm),
                         "advice": advice})  # repeated by a rerun, which refuses to train into it again (resume.py)
        s.run_log.close()
    s.end_training()
    raise TrainingDivergedError(f"training stopped at step {step}: {problem}; {advice}")
