"""train(config): pre-train or fine-tune with Accelerate — set up the run, run the loop, finish it.

The same function runs on a laptop CPU, one GPU, or many processes under `accelerate launch` / torchrun: Accelerate
owns devices, precision, DDP/FSDP wrapping and gradient accumulation. This file sets a run up (the device and
precision, which checkpoint it continues from, config.yaml, the workload's model and loaders, the optimisation
recipe) and finishes it (the last evaluation and checkpoint, final/, the summary and loss curve). The loop itself is
loop.py's; what is trained comes from a workload (workload.py: language modelling by default, finetune.py for
fine-tuning); data in data.py and corpus.py, checkpoints in checkpoint.py and resume.py (the weights' names, whatever
wraps the model, in unwrapped.py), the log in run_log.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.manifest import sync_to_disk, weights_fingerprint, write_manifest
from hf_gpt_custom.model_folder import check_model_folder
from hf_gpt_custom.versions import software_versions
from hf_gpt_custom.training.checkpoint import (
    TrainingState, check_random_states_on_every_rank, list_checkpoints, load_checkpoint, outputs_not_being_written,
    replaces_the_run, save_checkpoint, set_aside_other_histories, set_aside_replaced_outputs, write_errors_named,
)
from hf_gpt_custom.training.config import TrainConfig, save_train_config
from hf_gpt_custom.training.corpus import check_local_source_readable
from hf_gpt_custom.training.devices import (
    accumulation_steps_for_run, check_compiler_available, drop_float32_output_copies, measured_cpu_peak_flops,
    mixed_precision_for_run, peak_bf16_flops, resolve_mixed_precision, training_device_type, warn_if_bf16_is_emulated,
)
from hf_gpt_custom.training.loop import LoopResult, check_weights_finite, evaluate_and_log, run_loop
from hf_gpt_custom.training.hub_revision import check_every_process_reads_one_revision, pin_dataset_revision
from hf_gpt_custom.training.resume import find_resume_point, record_settings_in_checkpoints
from hf_gpt_custom.training.run_lock import check_folder_writable, lock_run_folder
from hf_gpt_custom.training.run_log import (
    LOSS_CURVE_NAME, RUN_LOG_NAME, SUMMARY_NAME, RunLog, loss_curve_title, plot_loss_curve, read_run_log,
    summarize_train_steps, write_training_summary,
)
from hf_gpt_custom.training.unwrapped import save_checkpoints_without_wrappers, save_model_folder, unwrapped_state_dict
from hf_gpt_custom.training.workload import LanguageModelling, Workload


def train(config: TrainConfig, workload: Workload | None = None, start_over: bool = False) -> Path:
    """Train as `config` says; return the run folder (config.yaml, run_log.jsonl, checkpoints/, final/, summary, PNG).

    `workload` says what is trained (default: language modelling on `config.dataset`, workload.LanguageModelling).
    A run folder that already holds checkpoints is continued from the latest one when its settings are this
    config's, and refused naming the differences when not (resume.find_resume_point); `start_over=True`
    trains from step 0 instead, moving the old checkpoints aside."""
    config, device_type = check_machine_can_train(config)  # before the run folder is created
    config = pin_dataset_revision(config, start_over)  # a Hub dataset is read at one commit, resumes included
    previous_threads = torch.get_num_threads()
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    # torch.compile partitions the step when it first runs, inside _train: the budget must hold then (and only
    # for this run: the caller's setting comes back).
    import torch._functorch.config as functorch_config

    budget = contextlib.nullcontext() if config.compile_memory_budget is None else \
        functorch_config.patch(activation_memory_budget=config.compile_memory_budget)
    try:
        with lock_run_folder(config.run_dir), budget:  # one process per run folder (run_lock.py)
            return _train(config, workload or LanguageModelling(), start_over, device_type)
    finally:
        torch.set_num_threads(previous_threads)  # the caller (e.g. the main job's evaluation) gets its setting back


def check_machine_can_train(config: TrainConfig) -> tuple[TrainConfig, str]:
    """(config with mixed_precision resolved, device type), or the one-line UserError naming what this machine
    cannot do: its init_from folder, `cpu=false` without a GPU, the precision, the compiler. `run` calls it before
    its tokenizer stage, so that a run it cannot finish stops before any work."""
    if config.init_from:
        check_model_folder(config.init_from)
    device_type = training_device_type(config.cpu)
    config = dataclasses.replace(config, mixed_precision=resolve_mixed_precision(config.mixed_precision, device_type))
    if config.compile:
        check_compiler_available(device_type)
    return config, device_type


def _train(config: TrainConfig, workload: Workload, start_over: bool, device_type: str) -> Path:
    start_time = time.time()
    session = _set_up(config, workload, start_over, device_type)
    session.started_at, session.wall_time_before_s = start_time, session.state.wall_time_s
    loop = run_loop(session)
    _finish(session, loop)
    return session.run_dir


@dataclass
class Session:
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
    started_at: float = 0.0  # time.time() when this train() call began
    wall_time_before_s: float = 0.0  # the run's earlier sessions, from the checkpoint it resumed
    made_process_group: bool = True  # False: a launched `run` made it before training, for its eval stage
    generation_config: Any = None  # the model's before any wrapper: what final/ saves beside it

    def end_training(self) -> None:
        """accelerate's end_training (trackers finished, the process group destroyed), except that a process group
        made before this train() call stays: `run` made it, and its eval stage shares the documents over it."""
        if self.made_process_group:
            self.accelerator.end_training()
            return
        for tracker in self.accelerator.trackers:
            tracker.finish()

    def stamp_wall_time(self) -> TrainingState:
        """The state with the run's wall time so far, the earlier sessions and this one: set before each
        checkpoint and read by the summary."""
        self.state.wall_time_s = self.wall_time_before_s + time.time() - self.started_at
        return self.state

    @property
    def checkpoints_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def tokens_per_step(self) -> int:
        """Tokens one optimizer step holds at most (exactly, for packed blocks; a multiple-choice example holds one
        sequence per answer)."""
        config = self.config
        return (config.batch_size * config.block_size * self.workload.sequences_per_example
                * config.gradient_accumulation_steps * self.accelerator.num_processes)

    @property
    def peak_flops(self) -> float | None:
        """The MFU denominator: `peak_flops` if set; on a GPU its datasheet bf16/fp16 peak (None for an unlisted GPU or
        fp32, so no MFU is shown rather than a wrong one); on a CPU a large matmul's FLOP/s measured at the run's
        thread count and precision (measured_cpu_peak_flops; _set_up measures it before the first step)."""
        if self.config.peak_flops:
            return self.config.peak_flops
        device = self.accelerator.device
        if device.type == "cuda":
            if self.config.mixed_precision not in ("bf16", "fp16"):
                return None
            return peak_bf16_flops(torch.cuda.get_device_name(device))
        if device.type == "cpu" and self.config.mixed_precision in ("no", "bf16"):  # (fp16 is refused on a CPU)
            return measured_cpu_peak_flops(self.config.mixed_precision, torch.get_num_threads())
        return None

    def mfu(self, tokens_per_s: float, seq_len: float | None = None) -> float | None:
        """Model FLOPs utilisation at `tokens_per_s`, the tokens attending over `seq_len` positions on average
        (padded batches are as long as their longest row; packed blocks are block_size long, the default)."""
        if self.peak_flops is None:
            return None
        flops = flops_per_token(self.model_config, self.n_params, seq_len or self.config.block_size,
                                lm_head=self.workload.computes_lm_head)
        return flops * tokens_per_s / (self.peak_flops * self.accelerator.num_processes)


# --- setting up ------------------------------------------------------------------------------------------------------


def _set_up(config: TrainConfig, workload: Workload, start_over: bool, device_type: str) -> Session:
    """Accelerator, resume checks, config.yaml, the workload's model and loaders, optimizer, schedule, restored state."""
    import hf_gpt_custom  # noqa: F401  (registers the Auto classes)
    from accelerate.utils import set_seed

    run_dir = config.run_dir.absolute()
    log_with = None if config.log_with in (None, "none") else config.log_with
    check_tracker_installed(log_with)
    check_folder_writable(run_dir / "checkpoints", "the checkpoints folder")
    # before config.yaml is rewritten: it may be the record of what the folder's checkpoints were trained with
    resume_folder = find_resume_point(config, run_dir, start_over)
    if resume_folder is None and (list_checkpoints(run_dir / "checkpoints") or (run_dir / "final").exists()):
        # this run replaces the one in its folder, whose outputs are set aside below: bad data must stop it first
        for source in (config.dataset, config.val_dataset):
            check_local_source_readable(source)
    group_before = _process_group_exists()
    accelerator = _make_accelerator(config, device_type, run_dir, log_with)
    if resume_folder is not None:  # before newer checkpoints and final/ are set aside below: a resume refused for
        # another process count or an unloadable random state moved them, and the run could not be exported (the
        # distributed3 hunt)
        check_random_states_on_every_rank(accelerator, resume_folder)
    check_every_process_reads_one_revision(accelerator, config)
    warn_if_bf16_is_emulated(accelerator.device.type, accelerator.mixed_precision)
    # Checkpoint rotation then sees only this branch, and no output of a replaced run passes for this one's. Before
    # config.yaml is rewritten: a kill in between left the replaced run's final/ and summary under the new settings
    # (an export then gave the old model a card of the new hyperparameters).
    with outputs_not_being_written(run_dir, accelerator.is_main_process and replaces_the_run(run_dir, resume_folder)):
        abandoned = set_aside_other_histories(accelerator, run_dir / "checkpoints", resume_folder)
        set_aside_replaced_outputs(accelerator, run_dir, resume_folder, abandoned)
    if accelerator.is_main_process:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_train_config(config, run_dir / "config.yaml")
    set_seed(config.seed)

    prepared = workload.prepare(config, accelerator)
    if accelerator.num_processes > 1:
        # Initialisation and the data order are shared (the sampler owns its seed); dropout is not: with one seed
        # every rank drew the same masks for different blocks, where one process with their global batch draws a
        # mask per row. Each rank's stream is then its own (nanoGPT's seed + rank), and checkpoints keep each one.
        set_seed(config.seed + accelerator.process_index)
    model, tokenizer, train_loader, val_loader = prepared.model, prepared.tokenizer, prepared.train_loader, \
        prepared.val_loader
    # the class and config before any wrapper (DDP, FSDP2's in-place class swap, torch.compile) touches the model:
    # what every saved folder is written as (unwrapped.save_model_folder)
    model_class, model_config, n_params = type(model), model.config, model.num_parameters()
    # an init_from folder's eos list and penalties, kept in checkpoints and final/ (a task head has none)
    generation_config = model.generation_config if model.can_generate() else None
    if config.compile:
        model = torch.compile(model)
    optimizer = build_optimizer(model, config)
    scheduler = build_scheduler(optimizer, config)
    given_to_prepare = model
    model, optimizer, val_loader, scheduler = accelerator.prepare(model, optimizer, val_loader, scheduler)
    drop_float32_output_copies(given_to_prepare)  # accelerate's float32 copy of the logits, every step
    train_loader.pin_memory = accelerator.device.type == "cuda"  # for the non-blocking copies of _next_batches
    train_loader = accelerator.prepare_data_loader(train_loader, device_placement=False)
    record_settings_in_checkpoints(accelerator, config, model_class, model_config, workload.save_into_checkpoint,
                                   generation_config)
    save_checkpoints_without_wrappers(accelerator)

    state = TrainingState() if resume_folder is None else _restore(accelerator, resume_folder)
    finished = resume_folder is not None and state.step >= config.max_steps  # _finish evaluates it again
    if finished:
        accelerator.print(f"the run is complete (step {state.step} of max_steps={config.max_steps}): nothing left to "
                          f"train; evaluating and writing final/ again (--start_over trains it anew)")
    run_log = RunLog(run_dir / RUN_LOG_NAME, resume_step=state.step if resume_folder else None,
                     evaluation_redone=finished) if accelerator.is_main_process else None
    if log_with:
        accelerator.init_trackers(config.run_name, config=_tracker_config(config))
    session = Session(config, workload, accelerator, run_dir, tokenizer, model, model_class, model_config, optimizer,
                      scheduler, train_loader, val_loader, n_params, state, resume_folder, run_log,
                      made_process_group=not group_before, generation_config=generation_config)
    _ = session.peak_flops  # a CPU's is measured now, not inside the first logged interval's time
    return session


def _process_group_exists() -> bool:
    """Whether this process has joined a process group (a launched run's, made by `run` or an earlier Accelerator)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _make_accelerator(config: TrainConfig, device_type: str, run_dir: Path, log_with: str | None):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import GradientAccumulationPlugin, ProjectConfiguration

    # Accelerate keeps one device and mixed precision per process: a second run in the same process (a notebook, the
    # test suite) asking for others failed with "AcceleratorState has already been initialized ... restart your
    # runtime". Each run starts from a fresh state until a process group exists: a launcher only sets the
    # environment, and the group is made by the first Accelerator of a launched process; after that the state is
    # the group's and stays.
    if not _process_group_exists():
        AcceleratorState._reset_state(reset_partial_state=True)
    return Accelerator(
        cpu=device_type == "cpu",
        mixed_precision=mixed_precision_for_run(config.mixed_precision),  # warns if the launcher says otherwise
        # sync_with_dataloader=False: an accumulation window may straddle an epoch boundary instead of being cut
        # short there, so every optimizer step sees exactly gradient_accumulation_steps micro-batches.
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=accumulation_steps_for_run(config.gradient_accumulation_steps), sync_with_dataloader=False
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


def check_tracker_installed(log_with: str | None) -> None:
    """Refuse a tracker that is not installed: Accelerate would silently drop it and the run would log nowhere."""
    from accelerate.utils import is_tensorboard_available, is_wandb_available

    installed = {"tensorboard": is_tensorboard_available, "wandb": is_wandb_available}
    if log_with in installed and not installed[log_with]():
        package = "tensorboard" if log_with == "tensorboard" else "wandb"
        raise UserError(f"log_with={log_with} but the {package} package is not installed; pip install {package}, "
                        f"or set log_with=none (the run log and loss curve are written either way)")


def _tracker_config(config: TrainConfig) -> dict:
    flat = {key: value for key, value in config.to_dict().items()
            if isinstance(value, (int, float, str, bool)) and key != "model"}
    flat.update({f"model.{key}": value for key, value in config.model.items() if isinstance(value, (int, float, str, bool))})
    return flat


# --- the optimisation recipe -----------------------------------------------------------------------------------------


def build_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on every 2-D weight (matmuls and embeddings, as nanoGPT/GPT-2), none on biases/LayerNorm."""
    parameters = [p for p in model.parameters() if p.requires_grad]  # tied weights appear once
    groups = [
        {"params": [p for p in parameters if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0},
    ]
    # The fused kernel updates every tensor in one pass (benchmarks/results/NOTES.md), and its found_inf input lets
    # the loop skip a diverged update without reading the loss back (divergence.UpdateGate). CPU and CUDA have it.
    fused = all(p.device.type in ("cpu", "cuda") for p in parameters)
    return torch.optim.AdamW(groups, lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                             eps=config.adam_eps, fused=fused)


def build_scheduler(optimizer, config: TrainConfig):
    """Linear warmup over warmup_steps, then cosine down to learning_rate * min_lr_ratio at max_steps."""
    from transformers import get_cosine_with_min_lr_schedule_with_warmup

    return get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, num_warmup_steps=config.warmup_steps, num_training_steps=config.max_steps,
        min_lr_rate=config.min_lr_ratio,
    )


def flops_per_token(model_config, n_params: int, seq_len: float, lm_head: bool = True) -> float:
    """Training FLOPs per token: 6N for the weights plus 12·L·T·H·Q for attention (PaLM appendix B, as nanoGPT's
    estimate_mfu): H query heads of width Q, which is n_embd unless `head_dim` sets another width.

    N excludes what is a lookup, not a matmul: the learned position table (rope and sinusoidal positions have none)
    and, when the head is untied, the input token embedding (a tied one is the head's matmul as well); and the head's
    matmul itself when the step does not compute it (`lm_head` False: a fine-tuned head with lm_loss_weight 0).
    """
    parts = model_config.parameter_breakdown()
    lookups = parts["position_embedding"] + (0 if model_config.tie_word_embeddings else parts["token_embedding"])
    # a tied embedding is counted as the head's matmul above: out when the head does not run; an untied body's
    # embedding is already out as a lookup, and a task model has no head of its own then
    head = model_config.padded_vocab_size * model_config.n_embd if not lm_head and model_config.tie_word_embeddings else 0
    n_matmul = n_params - lookups - head
    attention_width = model_config.n_head * model_config.head_dim
    return 6 * n_matmul + 12 * model_config.n_layer * seq_len * attention_width


# --- finishing ------------------------------------------------------------------------------------------------------


def _finish(s: Session, loop: LoopResult) -> None:
    """The last evaluation and checkpoint, final/ (weights, tokenizer, manifest), the summary and the loss curve."""
    accelerator, state, config = s.accelerator, s.state, s.config
    last_eval = loop.last_eval
    if last_eval is None or last_eval["step"] != state.step:  # e.g. resuming a run that had already finished
        # logged as the loop logs it: the log, its curve and the trackers show the figure the summary gives
        last_eval = evaluate_and_log(s)
    if loop.last_checkpoint is None or state.step != loop.resumed_step:  # a resumed run with no step left keeps its own
        check_weights_finite(s, loop.advice_if_diverged, None)
        save_checkpoint(accelerator, s.checkpoints_dir, s.stamp_wall_time(), config.keep_checkpoints)
    _save_final_folder(s)
    if accelerator.is_main_process:
        with write_errors_named(s.run_dir, None, "the training summary"):
            _write_summary_and_plot(s, loop, last_eval)
        accelerator.print(f"done: {s.workload.describe(last_eval)}{_part_scored(s, last_eval)}; {s.run_dir}")
    s.end_training()


def _part_scored(s: Session, last_eval: dict) -> str:
    """" (on the first 64 of 850 validation blocks: eval_batches=8)" when eval_batches cut the split, else "": the
    final line's figures are then of a part, which the newcomer2 walk took for the whole split's."""
    fields = s.workload.summary_fields(last_eval)
    scored, blocks = fields.get("val_blocks_scored"), fields.get("val_blocks")
    if scored is None or blocks is None or scored >= blocks:
        return ""
    return f" (on the first {scored} of {blocks} validation blocks: eval_batches={s.config.eval_batches})"


def _write_summary_and_plot(s: Session, loop: LoopResult, last_eval: dict) -> None:
    accelerator, state, config = s.accelerator, s.state, s.config
    s.run_log.close()
    records = read_run_log(s.run_dir / RUN_LOG_NAME)
    steps = summarize_train_steps(records, peak_flops=config.peak_flops)
    workload_fields = s.workload.summary_fields(last_eval)  # the summary's and the plot's (the corpus hashed once)
    write_training_summary(s.run_dir / SUMMARY_NAME, {
        "run_name": config.run_name,
        "config": config.to_dict(),
        "n_params": s.n_params,
        "tokens_seen": state.tokens_seen,
        "steps": state.step,
        "skipped_updates": steps["skipped_updates"],
        "wall_time_s": s.stamp_wall_time().wall_time_s,  # every session of the run, not only this one
        "train_time_s": steps["train_time_s"] if steps["train_time_s"] is not None else loop.train_time_s,
        "final_train_loss": steps["final_train_loss"],
        "final_train_loss_steps": steps["final_train_loss_steps"],  # the card's label: a mean of how many steps
        "final_val_loss": last_eval["val_loss"],
        "loss_name": s.workload.loss_name,  # what loss and val_loss are (fine-tuning's: task + λ·LM), as plotted
        "tokens_per_s": steps["tokens_per_s"],
        # the logged steps' own figures, time-weighted: each session's by its own measured peak (a rerun measures
        # another), all by peak_flops when it is set
        "mfu": steps["mfu"] if steps["mfu"] is not None or steps["tokens_per_s"] is None
        else s.mfu(steps["tokens_per_s"]),  # a log written before its records had mfu and peak_flops
        # the peak that mfu is a share of: a rerun that trained no step measured another, which labelled the
        # earlier sessions' figure (a CPU's 0.136 TFLOP/s run read "of 0.114 TFLOP/s peak")
        "peak_flops": steps["peak_flops"] if steps["mfu"] is not None else s.peak_flops,
        "peak_flops_range": steps["peak_flops_range"],
        "num_processes": accelerator.num_processes,
        **workload_fields,
        # the weights these figures are of: export refuses a final/ saved over since (a merged adapter's weights got
        # the trained ones' figures in their card: the crossfeature hunt)
        "final_weights_sha256": weights_fingerprint(s.run_dir / "final"),
        "loss_curve": LOSS_CURVE_NAME,
        "software": software_versions(),  # of the session that finished the run
    })
    plot_loss_curve(records, s.run_dir / LOSS_CURVE_NAME, title=loss_curve_title(config.run_name, s.n_params),
                    loss_name=s.workload.loss_name, val_blocks=workload_fields.get("val_blocks"))


def _save_final_folder(s: Session) -> None:
    """final/: save_pretrained weights and the shipped tokenizer, with a manifest; complete or absent."""
    accelerator = s.accelerator
    accelerator.wait_for_everyone()
    state_dict = unwrapped_state_dict(accelerator, s.model)  # every rank takes part (FSDP gathers the shards)
    if not accelerator.is_main_process:
        return
    final_dir, staging = s.run_dir / "final", s.run_dir / "final.tmp"  # complete or absent, never half-written
    replaced = s.run_dir / "final.replaced"  # the previous final/, moved aside in one step, then deleted
    with write_errors_named(s.run_dir, staging, "final/"):
        for leftover in (staging, replaced):  # left by an interrupted call
            shutil.rmtree(leftover, ignore_errors=True)
        save_model_folder(s.model_class, s.model_config, state_dict, staging, s.generation_config)
        s.workload.save_beside_model(staging, s.model_config)
        write_manifest(staging)  # what eval/export verify final/ against
        sync_to_disk(staging)
        kept = _weights_saved_into_final_since(s.run_dir)
        if kept is not None:  # not this run's to delete: the user's own, saved there after training
            os.replace(final_dir, kept)
            accelerator.print(f"final/ held other weights than this run wrote (saved into it since training); they are "
                              f"kept in {kept}")
        if final_dir.exists():  # deleted in place, a kill left a final/ missing files, its manifest perhaps
            os.replace(final_dir, replaced)
        os.replace(staging, final_dir)
        sync_to_disk(s.run_dir, contents=False)
        shutil.rmtree(replaced, ignore_errors=True)


def _weights_saved_into_final_since(run_dir: Path) -> Path | None:
    """Where to keep final/ when it holds other weights than this run wrote there (a merged adapter saved over
    them): a rerun of train or run rewrote final/ and deleted them (the crossfeature hunt). None when it is the
    run's own."""
    from hf_gpt_custom.hub import edited_name
    from hf_gpt_custom.run_state import final_saved_over_since_training

    return edited_name(run_dir / "final") if final_saved_over_since_training(run_dir) else None
