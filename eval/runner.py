"""evaluate(model, tokenizer, tasks, shots) -> Results: the whole eval pipeline for any causal LM.

task YAML -> docs -> few-shot prompts -> Requests -> scores -> per-doc metrics -> aggregate rows (+ report files).
Model loading accepts a local folder (loaded strictly by hf_gpt_custom.model_folder, which also registers our
classes with the Auto classes), a Hub id or an already-loaded model with its tokenizer.
"""

from __future__ import annotations

import copy
import logging
import math
import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hf_gpt_custom.eval.auto_batch import AUTO, largest_batch_that_fits
from hf_gpt_custom.eval.fewshot import ContextTooShortError, Prompt, build_prompts
from hf_gpt_custom.eval.metrics import METRICS, aggregate_metric
from hf_gpt_custom.eval.output_types import OUTPUT_TYPES
from hf_gpt_custom.eval.requests import Request, ScoredRequest
from hf_gpt_custom.eval.scoring import CausalLMScorer, scoring_window
from hf_gpt_custom.eval.sharding import check_every_process_asks_the_same, score_across_processes
from hf_gpt_custom.eval.task import TaskSpec, default_data_dir, load_tasks, tasks_fingerprint
from hf_gpt_custom.eval.task_data import BUILT_IN_DATA_DIR, resolve_data_dir
from hf_gpt_custom.eval.tokens import encode_pairs
from hf_gpt_custom.errors import MissingFileError, UserError, check_listed_once
from hf_gpt_custom.manifest import MANIFEST_NAME, weights_fingerprint
from hf_gpt_custom.model_folder import check_model_folder, is_hub_repo_id, load_model_folder, saved_task_head_class
from hf_gpt_custom.training.devices import join_launched_processes
from hf_gpt_custom.training.run_lock import lock_output_folder
from hf_gpt_custom.versions import scoring_code_sha256

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TOKENIZER_FILE_SETS = (("tokenizer.json",), ("vocab.json", "merges.txt"))  # either set is a complete BPE vocabulary


@dataclass
class Results:
    model: str
    config: dict[str, Any]
    results: list[dict[str, Any]]  # one row per task x K x metric (results.json schema)
    examples: list[dict[str, Any]] = field(default_factory=list)  # one per doc x K (examples.jsonl)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # {"task", "num_fewshot", "reason"} not evaluated
    # manifest.weights_fingerprint of a local folder scored (None: a Hub id or a loaded model); a card checks it
    model_weights_sha256: str | None = None
    # task.tasks_fingerprint of each of config["tasks"], and the data root they were read from when it is not the
    # built-in one: export refuses to publish scores of task or data files edited since
    # (task.benchmarks_changed_since). The root is a local path: the published results.json leaves it out.
    benchmarks_sha256: list[str] | None = None
    data_dir: str | None = None
    scoring_code_sha256: str | None = None  # versions.scoring_code_sha256 as the evaluation started

    def to_dict(self) -> dict[str, Any]:
        from hf_gpt_custom.versions import software_versions

        return {"model": self.model, "model_weights_sha256": self.model_weights_sha256, "config": self.config,
                "results": self.results, "skipped": self.skipped, "benchmarks_sha256": self.benchmarks_sha256,
                "data_dir": self.data_dir, "software": software_versions(),
                "scoring_code_sha256": self.scoring_code_sha256}

    def value(self, task: str, metric: str, num_fewshot: int = 0) -> float:
        for row in self.results:
            if (row["task"], row["metric"], row["num_fewshot"]) == (task, metric, num_fewshot):
                return row["value"]
        there = sorted({(row["task"], row["metric"], row["num_fewshot"]) for row in self.results})
        raise KeyError(f"no result for task={task} metric={metric} num_fewshot={num_fewshot}; the results hold "
                       + ", ".join(f"({name}, {what}, {k})" for name, what, k in there))


def evaluate(
    model,
    tokenizer=None,
    tasks: list[str] | tuple[str, ...] = ("lambada",),
    shots: list[int] | tuple[int, ...] = (0,),
    limit: int | float | None = None,
    batch_size: int | str = 16,
    device: str | None = None,
    dtype: str | None = None,
    seed: int = 1234,
    out_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    show_progress: bool = True,
    share_context: bool = True,
    skip_unfittable: bool = False,
    protocol: str = "ours",
    data_parallel: bool = False,
) -> Results:
    """Evaluate `model` on each task at each K; with out_dir, write results.json, table.md, examples.jsonl and
    shots_curve.png there. `model` is a folder, a Hub id or a loaded causal LM (then pass `tokenizer` unless the
    model's `name_or_path` has one). `device` None is CUDA when available, else the CPU, for a folder or Hub id; a
    loaded model then stays on its own device (as lm-eval's HFLM keeps a model object where it is). `dtype` None
    loads a folder or Hub id in float32 and scores a loaded model in its own dtype; a loaded model asked for another
    dtype is scored as a converted copy, never cast in place (that rounded the caller's float32 weights to bfloat16
    for good). It comes back in the train/eval mode it had (scoring is in eval mode).
    Rolling-loglikelihood tasks (wikitext) are run at K=0 only.

    A K whose examples cannot fit the model's context even once is a ValueError naming the task; with
    `skip_unfittable=True` (used by the main job's sweep over many tasks) it is skipped instead and listed under
    "skipped" in results.json and table.md. protocol="lm-eval" scores every task as lm-eval does (its target
    delimiters, all K examples kept and the prompt cut from the left, generation as the model's generation_config
    says apart from sampling; eval/tasks/README.md).
    `data_parallel=True` in the N processes `accelerate launch --num_processes N` or torchrun started (the `eval`
    command and `run` pass it) shares the documents out: each returns the whole Results (eval/sharding.py), the main
    process writes out_dir. Every process must make the same call: one that differs is refused. Without it each
    process evaluates alone, as a call made on the main process only does."""
    # None: a loaded model stays where it is; a folder or Hub id goes to CUDA when there is one
    device = resolve_device(device) if device is not None or isinstance(model, (str, Path)) else None
    # Under `accelerate launch --num_processes N` (or torchrun) the documents are shared out (eval/sharding.py): each
    # process on its own GPU where "cuda" (or nothing) was asked for, the main process alone writing the report.
    on_cpu = torch.device(device).type == "cpu" if device is not None else not torch.cuda.is_available()
    processes = join_launched_processes(on_cpu) if data_parallel else None
    if processes is not None and device == "cuda":  # "cuda:1" asked for by name stays that device
        device = str(processes.device)
    writes = out_dir is not None and (processes is None or processes.is_main_process)
    show_progress = show_progress and (processes is None or processes.is_main_process)
    tasks = [tasks] if isinstance(tasks, str) else list(tasks)
    shots = [shots] if isinstance(shots, int) else list(shots)
    if not tasks:
        raise UserError("no tasks given; pass e.g. tasks=['lambada', 'hellaswag']")
    if not shots or any(not isinstance(k, int) or k < 0 for k in shots):
        raise UserError(f"shots must be non-negative integers like [0, 1, 5], got {shots!r}")
    check_listed_once("tasks", tasks)
    check_listed_once("shots", shots)
    if writes:
        from hf_gpt_custom.errors import check_writable

        check_writable(out_dir, "the --out folder", "choose an --out folder you can write")  # before any scoring
    check_limit(limit)
    if batch_size != AUTO and (not isinstance(batch_size, int) or batch_size < 1):
        raise UserError(f"batch_size={batch_size!r} must be a positive number of requests per forward pass, e.g. 16, "
                        f"or 'auto' (the largest the GPU holds)")
    if dtype is not None and dtype not in DTYPES:
        raise UserError(f"dtype={dtype!r} is not one of {', '.join(DTYPES)}")
    specs = load_tasks(tasks, protocol=protocol)  # unknown task names fail here, before the model loads
    data_dir = resolve_data_dir(data_dir, "data_dir=") if data_dir else default_data_dir()
    benchmarks = [tasks_fingerprint([name], data_dir, protocol) for name in tasks]  # the files as they are scored
    code = scoring_code_sha256()  # the code that scores, not the code on disk when the report is written
    # One evaluation writes an --out folder at a time, from before the model loads to the last file: two would
    # mix their reports (one's results.json beside the other's table.md)
    lock = lock_output_folder(out_dir, "the evaluation folder", "another --out") if writes else nullcontext()
    with lock, training_modes_kept(model):
        # The weights scored, taken as they are loaded: taken after planning (seconds to minutes), a training run
        # writing a new final/ meanwhile gave the old model's scores the new weights' name, and export published them
        # as the new model's (the concurrency hunt). Taken before and after loading: the same, or refused.
        scored_folder = Path(os.path.expanduser(model)) if isinstance(model, (str, Path)) else None
        scored_folder = scored_folder if scored_folder is not None and scored_folder.is_dir() else None  # else a Hub id
        weights = weights_fingerprint(scored_folder) if scored_folder is not None else None
        model_obj, tokenizer, model_name = load_model_and_tokenizer(model, tokenizer, device, dtype)
        if weights is not None and weights_fingerprint(scored_folder) != weights:
            raise UserError(f"{scored_folder} was replaced while it was being read (a training run wrote a new one): "
                            f"the scores would be named after weights they are not of; evaluate again once that run "
                            f"has finished")
        if batch_size == AUTO:
            # rows as long as the scorer's: a prompt-learning model's learned tokens come before each (a row of the
            # whole context ran past its last position on a GPU: the roundreview27 hunt)
            batch_size = largest_batch_that_fits(model_obj, scoring_window(model_obj, tokenizer))
        # A context shared between choices (run once, its cache copied) rounds otherwise than lm-eval's one full row
        # per choice: in float32 by ~1e-6, in bfloat16/float16 by up to 0.6 nats, as accurate against float32 but not
        # lm-eval's numbers, which --protocol lm-eval promises (the halfprec hunt: 0.002 on COPA at batch 1)
        if protocol == "lm-eval" and getattr(model_obj, "dtype", torch.float32) != torch.float32:
            share_context = False
        scorer = CausalLMScorer(model_obj, tokenizer, batch_size=batch_size, share_context=share_context,
                                obeys_generation_config=protocol == "lm-eval")
        # Every task and K is planned before any is scored: one that cannot fit stops the run before hours of scoring,
        # not after them.
        plans, skipped, unfittable = [], [], []
        for spec in specs:
            docs = spec.docs("test", data_dir)
            docs = docs[: documents_to_score(limit, len(docs))]
            if not docs:  # every metric would be the mean of nothing: nan, in a table that looks like a result
                raise UserError(f"task {spec.task} has no documents in {data_dir} (its data file is empty); restore it "
                                f"(eval/tasks/README.md names each source), or leave the task out")
            for k in shots:
                if k > 0 and not OUTPUT_TYPES[spec.output_type].supports_fewshot:
                    reason = f"task {spec.task} ({spec.output_type}) is scored without examples: K=0 only"
                    logger.warning("%s; few-shot K=%d skipped", reason, k)
                    skipped.append({"task": spec.task, "num_fewshot": k, "reason": reason})
                    continue
                try:
                    plans.append(plan_task(spec, docs, k, scorer, seed, data_dir))
                except ContextTooShortError as err:
                    if not skip_unfittable:
                        unfittable.append(err)  # each one said at once, not one per try (the newcomer3 walk)
                        continue
                    logger.warning("skipped: %s", err)
                    skipped.append({"task": spec.task, "num_fewshot": k, "reason": str(err)})
        if len(unfittable) == 1:
            raise unfittable[0]
        if unfittable:  # each task and K named, each piece of advice once (the newcomer4 walk: six times over)
            advice = "; or ".join(dict.fromkeys(err.advice for err in unfittable if err.advice))
            raise ContextTooShortError(f"{len(unfittable)} tasks or K values cannot fit: "
                                       + "; ".join(err.what for err in unfittable), advice or None)
        if not plans and not skip_unfittable:  # the main job's sweep reports an empty table with what it skipped
            raise UserError("nothing to evaluate: " + "; ".join(f"{row['reason']} (K={row['num_fewshot']})"
                                                                 for row in skipped))
        if processes is not None:  # each scores a share of what it planned: all must have planned the same
            check_every_process_asks_the_same(processes, {
                "model": weights or model_name, "tasks": tasks, "shots": shots, "limit": limit, "seed": seed,
                "protocol": protocol, "benchmarks": benchmarks, "requests": [len(plan.requests) for plan in plans]})
        rows, examples = [], []
        for plan in plans:
            task_rows, task_examples = score_task(plan, scorer, show_progress, processes)
            rows += task_rows
            examples += task_examples
        results = Results(
            model=model_name,
            model_weights_sha256=weights,
            # what changes the numbers, as lm-eval records its model arguments: dtype and device change log-likelihoods
            # in their last digits (the data root is a local path: a published results.json carries none)
            config={"tasks": tasks, "shots": shots, "limit": limit, "seed": seed, "batch_size": batch_size,
                    "protocol": protocol, "dtype": str(next(model_obj.parameters()).dtype).removeprefix("torch."),
                    "device": str(next(model_obj.parameters()).device.type),
                    "processes": 1 if processes is None else processes.num_processes},
            results=rows,
            examples=examples,
            skipped=skipped,
            benchmarks_sha256=benchmarks,
            scoring_code_sha256=code,
            # (the built-in root is found again by export; any other, $HF_GPT_CUSTOM_DATA_DIR's too, is recorded,
            # except in the eval/ of a model folder that push publishes as it is, which nothing reads it from: there
            # it was a local path push refused, after push itself had asked for that evaluation: roundreview25)
            data_dir=None if data_dir.resolve() == BUILT_IN_DATA_DIR.resolve() or _inside_a_published_folder(out_dir)
            else str(data_dir.resolve()),
        )
        if writes:
            from hf_gpt_custom.eval.report import write_report

            write_report(results, out_dir)
    if processes is not None:
        processes.wait_for_everyone()  # the report is written before any process returns
    return results


def _inside_a_published_folder(out_dir) -> bool:
    """Whether the report goes into a subfolder of a model folder with a manifest (an export's eval/)."""
    from hf_gpt_custom.manifest import MANIFEST_NAME

    return out_dir is not None and (Path(out_dir).absolute().parent / MANIFEST_NAME).is_file()


@contextmanager
def training_modes_kept(model):
    """A loaded model passed in comes back with each module in the train/eval mode it had: scoring switches it to
    eval (dropout off), and a notebook loop that called model.train() once, before its loop, then trained without
    dropout after its first evaluate (the sideeffects hunt; lm-eval's HFLM leaves eval behind, Trainer's evaluate
    sets train again at its next step)."""
    modes = [(module, module.training) for module in model.modules()] if isinstance(model, torch.nn.Module) else []
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def check_limit(limit: int | float | None) -> None:
    """A UserError unless `limit` is None, a positive count or a fraction between 0 and 1 (lm-eval's --limit)."""
    if limit is None or (isinstance(limit, int) and limit >= 1) or \
            (isinstance(limit, float) and (0 < limit < 1 or (limit >= 1 and limit.is_integer()))):
        return
    raise UserError(f"limit={limit!r} must be a number of documents (300) or a fraction of each task's documents "
                    f"between 0 and 1 (0.1), or None for all")


def documents_to_score(limit: int | float | None, total: int) -> int:
    """How many of a task's `total` documents `limit` scores, by lm-eval's rule (evaluator_utils.get_sample_size):
    below 1 a fraction of them, rounded up; else a count."""
    if limit is None:
        return total
    return min(total, math.ceil(total * limit) if limit < 1 else int(limit))


def resolve_device(device: str | None) -> str:
    """`device`, checked against this machine, or "cuda" when it is None and CUDA is available, else "cpu"."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except RuntimeError as err:
        raise UserError(f"--device {device!r} is not a torch device ({err}); use cpu, cuda or cuda:0") from err
    if parsed.type not in ("cpu", "cuda", "mps"):  # xpu, hpu, meta: a traceback from deep in torch or the scorer
        raise UserError(f"--device {device}: evaluation runs on cpu, cuda or mps; use one of them")
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            reason = "torch was built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            raise UserError(f"--device {device}: {reason} on this machine; use --device cpu")
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            raise UserError(f"--device {device}: this machine has {count} CUDA device{'s' * (count != 1)} "
                            f"(cuda:0{f' to cuda:{count - 1}' if count > 1 else ''}); use --device cuda:0, or leave "
                            "--device out to use the first one")
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"--device {device}: MPS is not available on this machine; use --device cpu")
    return device


def load_model_and_tokenizer(model, tokenizer, device: str | None, dtype: str | None):
    """(model in eval mode on device, tokenizer, display name) from a local folder, a Hub id or loaded objects
    (device None: a loaded model stays on its device).

    A local folder loads strictly (hf_gpt_custom.model_folder: ours, a transformers GPT-2, OpenAI GPT or Llama
    folder converted on load, or any other causal LM through AutoModelForCausalLM; a missing tensor or a damaged
    file is an error) and must hold its tokenizer's vocabulary files. A Hub id goes through AutoModelForCausalLM.from_pretrained, as lm-eval loads it.
    """
    from transformers import AutoModelForCausalLM

    folder = manifest_before = None
    if isinstance(model, (str, Path)):
        name = str(model)
        folder = local_model_path(name)
        if folder is not None:
            head = saved_task_head_class(folder)
            if head is not None:  # it would load as a bare LM without its head, its tokenizer adding the template
                raise UserError(
                    f"{folder} holds a fine-tuned {head.__name__}, whose tokenizer wraps every text in the task's "
                    f"template: evaluation scores language models; pass the folder it was fine-tuned from (its "
                    f"init_from); its held-out accuracy is in its run's training_summary.json and its export's card"
                )
            manifest_before = _manifest_text(folder)
            model = load_model_folder(folder, any_causal_lm=True, dtype=DTYPES[dtype or "float32"])
        else:
            try:
                model = AutoModelForCausalLM.from_pretrained(name, dtype=DTYPES[dtype or "float32"])
            except OSError as err:
                raise MissingFileError(
                    f"model {name!r} is not a local folder and could not be loaded as a Hub id "
                    f"({str(err).splitlines()[0]}); pass a folder written by save_pretrained or a reachable Hub id"
                ) from err
        trained_with = folder if folder is not None and has_tokenizer_files(folder) else checkpoint_tokenizer(
            folder, given=tokenizer)
        if tokenizer is not None and trained_with is not None:
            tokenizer = load_tokenizer(str(tokenizer)) if isinstance(tokenizer, (str, Path)) else tokenizer
            refuse_another_tokenizer(trained_with, tokenizer, folder)
        tokenizer = (trained_with or name) if tokenizer is None else tokenizer
    else:
        name = getattr(model, "name_or_path", None) or type(model).__name__
        if tokenizer is None:
            if not getattr(model, "name_or_path", None):
                raise UserError("a loaded model without name_or_path needs tokenizer=...; pass the tokenizer or a folder")
            tokenizer = model.name_or_path
        if dtype is not None and next(model.parameters()).dtype != DTYPES[dtype]:
            # a copy: Module.to casts in place, and float32 weights rounded to bfloat16 do not come back
            logger.info("scoring a %s copy of the model; the model object passed in is left as it is", dtype)
            model = _copy_in_dtype(model, DTYPES[dtype])
    if isinstance(tokenizer, (str, Path)):
        tokenizer = load_tokenizer(str(tokenizer))
    if folder is not None and _manifest_text(folder) != manifest_before:
        # a training run finishing in its folder replaced final/ between the weights and the tokenizer: the two
        # would be different models' (read one after the other, each checked on its own)
        raise UserError(f"{folder} was replaced while it was being read (a training run wrote a new one): its weights "
                        f"and tokenizer may be two models'; evaluate again once that run has finished")
    model = model.to(device) if device is not None else model
    return model.eval(), tokenizer, name


def _copy_in_dtype(model, dtype):
    """A copy of `model` in `dtype` (Module.to casts in place; the object passed in is left as it is), holding in
    float32 the buffers and parameters that from_pretrained(dtype=...) holds in float32: transformers' Llama keeps
    RoPE's inv_freq so, and .to(bfloat16) rounded it, the rotary angles drifting with the position (0.18 rad at
    position 1000: the dtypes2 hunt); DeepSeek-V3's router weights (_keep_in_fp32_modules) are kept so too, or the
    experts chosen change (0.07 nats per token: the roundreview19 hunt). A deep copy keeps everything else the
    object has: hooks, adapters injected in place, its generation_config, a config edited since it was built (a copy
    rebuilt from the config lost them). Each tensor is cast as it is copied (deepcopy's memo), so no full-precision
    duplicate is ever held, and tied weights stay tied."""
    import torch
    from torch import nn

    kept = set(_tensors_built_in_float32(model, dtype))
    memo: dict[int, torch.Tensor] = {}
    for name, tensor in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        if id(tensor) in memo:
            continue
        cast = tensor.detach().to(dtype, copy=True) if tensor.is_floating_point() and name not in kept \
            else tensor.detach().clone()
        memo[id(tensor)] = nn.Parameter(cast, requires_grad=tensor.requires_grad) \
            if isinstance(tensor, nn.Parameter) else cast
    return copy.deepcopy(model, memo)


def _tensors_built_in_float32(model, dtype) -> list[str]:
    """The floating-point buffers and parameters that the model's transformers class (the outermost one: a PEFT
    wrapper's is the model it wraps), built in `dtype` as from_pretrained builds it (on the meta device: no memory,
    no weights), still holds in float32; none where it cannot be built that way."""
    import torch
    from transformers import PreTrainedModel

    if dtype == torch.float32:
        return []
    prefix, inner = next(((name, module) for name, module in model.named_modules()
                          if isinstance(module, PreTrainedModel)), (None, None))
    if inner is None:
        return []
    try:
        with torch.device("meta"):
            built = type(inner)._from_config(copy.deepcopy(inner.config), dtype=dtype)
    except Exception:  # noqa: BLE001  a class that cannot be built from its config alone: cast as Module.to casts
        return []
    own = {**dict(inner.named_parameters()), **dict(inner.named_buffers())}
    return [f"{prefix}.{name}" if prefix else name
            for name, tensor in [*built.named_parameters(), *built.named_buffers()]
            if tensor.dtype == torch.float32 and name in own and own[name].dtype == torch.float32]


def _manifest_text(folder: Path) -> str | None:
    """The folder's manifest as it is now (None without one): which files, sizes and hashes a save wrote."""
    try:
        return (folder / MANIFEST_NAME).read_text(encoding="utf-8")
    except OSError:
        return None


def local_model_path(name: str) -> Path | None:
    """The folder `name` names, or None for a Hub id ("gpt2", "owner/model") with no such local folder.

    A name that cannot be a Hub id ("runs/smoke/final", "./model", "/abs/path") is a local path even if it does not
    exist, so that the error names the missing folder instead of complaining about the id's format.
    """
    path = Path(os.path.expanduser(name))
    if path.exists():
        return path
    if not is_hub_repo_id(name):
        return check_model_folder(path)  # a path that does not exist: raises MissingFileError naming it
    return None


def has_tokenizer_files(folder: Path) -> bool:
    """Whether `folder` holds a BPE vocabulary: tokenizer.json, or vocab.json + merges.txt."""
    return any(all((folder / name).is_file() for name in names) for names in TOKENIZER_FILE_SETS)


def refuse_another_tokenizer(trained_with: Path, tokenizer, folder: Path) -> None:
    """The model in `folder` was trained with the tokenizer in `trained_with` (the folder's own, or for a checkpoint
    its run's): --tokenizer naming one with another vocabulary scored other ids than the model knows (a smaller one
    silently; a larger one only where an id passed its vocabulary), and nothing in the results said which tokenizer
    was used."""
    own = load_tokenizer(str(trained_with))
    where = (f"the tokenizer {folder} was saved with" if trained_with == folder
             else f"the tokenizer {folder} was trained with ({trained_with})")
    from hf_gpt_custom.training.workload import vocabulary_difference

    differs = vocabulary_difference(own, tokenizer, where)
    if differs:
        raise UserError(f"--tokenizer {tokenizer.name_or_path} has another vocabulary {differs}, so the model would "
                        "score ids it was not trained on; drop --tokenizer (the one it was trained with is then used)")


def checkpoint_tokenizer(folder: Path | None, given=None) -> Path | None:
    """The tokenizer folder a training checkpoint's run trained with (it has no tokenizer files of its own; its
    training_settings.json records the run's), as `train init_from=CHECKPOINT` finds it; None for another folder.
    When that tokenizer is no longer where the run left it, or changed: refused by name without `given` (--tokenizer),
    and a `given` folder is checked against the tokenizer files' sha256 the checkpoint recorded (None then)."""
    if folder is None:
        return None
    from hf_gpt_custom.training.resume import recorded_settings
    from hf_gpt_custom.training.workload import checkpoint_run_tokenizer, refuse_another_tokenizer_than_init_froms

    if recorded_settings(folder) is None:  # named like a checkpoint, but no run recorded what trained it
        return None
    try:
        return checkpoint_run_tokenizer(folder, fix="pass --tokenizer <the folder it was trained with, or moved to>",
                                        label="--model ")
    except UserError:  # its tokenizer moved or changed since, or it is not under <run>/checkpoints any more
        if given is None:
            raise
        if isinstance(given, (str, Path)) and Path(given).is_dir():
            refuse_another_tokenizer_than_init_froms(folder, Path(given), "--tokenizer ", "drop --tokenizer")
        return None


def load_tokenizer(source: str):
    """AutoTokenizer for a local folder (refused without vocabulary files, see check_tokenizer_files) or a Hub id."""
    from transformers import AutoTokenizer

    path = Path(os.path.expanduser(source))
    if path.exists():
        check_tokenizer_files(path)
        source = str(path)
    return AutoTokenizer.from_pretrained(source)


def check_tokenizer_files(folder: Path) -> None:
    """Raise MissingFileError unless `folder` holds a BPE vocabulary: tokenizer.json, or vocab.json + merges.txt.

    Without them transformers still builds a tokenizer, with no merges: GPTCustomTokenizerFast falls back to the 256
    bytes + <|endoftext|>, a GPT-2 tokenizer to an empty vocabulary, and every score is silently wrong.
    """
    if has_tokenizer_files(folder):
        return
    missing = [name for names in TOKENIZER_FILE_SETS for name in names if not (folder / name).is_file()]
    raise MissingFileError(
        f"{folder} has no tokenizer vocabulary: missing {', '.join(missing)} (tokenizer.json alone, or vocab.json "
        "with merges.txt, is enough); save the tokenizer the model was trained with into that folder "
        "(tokenizer.save_pretrained), or pass the folder that holds it: eval --tokenizer <folder> (a run's "
        "checkpoint: <run>/tokenizer), evaluate(..., tokenizer=<folder>) from Python"
    )


def build_requests(spec: TaskSpec, doc: dict, prompt: Prompt) -> list[Request]:
    """The Requests of one doc: one per choice (plus GPT-3 unconditional ones), one target, or one generation."""
    return OUTPUT_TYPES[spec.output_type].build_requests(spec, doc, prompt)


def evaluate_task(
    spec: TaskSpec, docs: list[dict], k: int, scorer: CausalLMScorer, seed: int, data_dir: Path, show_progress: bool = True
) -> tuple[list[dict], list[dict]]:
    """Result rows and example logs of one task at one K."""
    return score_task(plan_task(spec, docs, k, scorer, seed, data_dir), scorer, show_progress)


@dataclass
class TaskPlan:
    """One task at one K, its prompts and requests built: what scoring it needs."""

    spec: TaskSpec
    docs: list[dict]
    k: int
    prompts: list
    requests: list
    dataset: dict  # results.json's "dataset": the Hub split, and the local files' sha256 when they were read


def plan_task(spec: TaskSpec, docs: list[dict], k: int, scorer: CausalLMScorer, seed: int, data_dir: Path) -> TaskPlan:
    """The prompts and requests of one task at one K; a ContextTooShortError when the model's context cannot hold
    them. Cheap (tokenisation only): `evaluate` plans every task and K before it scores any."""
    output_type = OUTPUT_TYPES[spec.output_type]
    if output_type.request_type == "generate_until" and output_type.max_gen_toks(spec) >= scorer.max_length:
        raise ContextTooShortError(
            f"task {spec.task} at K={k}: it generates up to {output_type.max_gen_toks(spec)} tokens, which leaves no "
            f"room for a prompt in the model's context of {scorer.max_length} tokens",
            "leave the task out or use a model with a longer context"
        )
    pool = spec.fewshot_docs(data_dir) if k > 0 else []
    prompts = build_prompts(spec, docs, pool, k, seed, scorer.tokenizer, scorer.max_length)
    requests = [request for doc, prompt in zip(docs, prompts) for request in build_requests(spec, doc, prompt)]
    _refuse_answers_without_tokens(spec, k, requests, scorer.tokenizer)
    return TaskPlan(spec, docs, k, prompts, requests, spec.scored_data_info(data_dir))


def _refuse_answers_without_tokens(spec: TaskSpec, k: int, requests: list[Request], tokenizer) -> None:
    """A UserError naming the first answer that tokenizes to nothing after its context: an empty choice, or one the
    tokenizer merges into the context's last token ("my lor" + "d" with target_delimiter ""). lm-eval asserts on
    it too; refused only while scoring, it cost the tasks scored before it and named a flat request index (the
    lmevalparity4 hunt)."""
    scored = [request for request in requests if request.request_type == "loglikelihood"]
    pairs = encode_pairs(tokenizer, [(request.context, request.continuation) for request in scored])
    for request, (_, continuation) in zip(scored, pairs):
        if not continuation:
            raise UserError(
                f"task {spec.task} ({k}-shot), doc {request.doc_id}: the answer {request.continuation!r} has no token "
                f"of its own after the context ending {request.context[-30:]!r} (an empty answer, or one the "
                f"tokenizer merges into the context's last word); give the answers a leading space, or set "
                f"target_delimiter: \" \" in the task file"
            )


def score_task(plan: TaskPlan, scorer: CausalLMScorer, show_progress: bool = True,
               processes=None) -> tuple[list[dict], list[dict]]:
    """Result rows and example logs of a planned task (`processes`: the launched ones that share its documents)."""
    spec, docs, k, prompts, output_type = plan.spec, plan.docs, plan.k, plan.prompts, OUTPUT_TYPES[plan.spec.output_type]
    scored = score_across_processes(scorer, plan.requests, processes, show_progress, desc=f"{spec.task} {k}-shot")
    by_doc: list[list[ScoredRequest]] = [[] for _ in docs]
    for item in scored:
        by_doc[item.request.doc_id].append(item)
    items: dict[str, list] = {name: [] for name in spec.metric_names}
    examples = []
    for doc_id, (doc, prompt, doc_scored) in enumerate(zip(docs, prompts, by_doc)):
        values, log = output_type.doc_metric_values(spec, doc, doc_scored)
        for name in spec.metric_names:
            items[name].append(values[name])
        examples.append({
            "task": spec.task, "num_fewshot": k, "doc_id": doc_id,
            "prompt": prompt.contexts[0] if len(prompt.contexts) == 1 else list(prompt.contexts),
            **log, "n_fewshot_dropped": prompt.n_dropped, "context_truncated": any(s.is_truncated for s in doc_scored),
            "metrics": {name: values[name] for name in spec.metric_names},
        })
    # A doc counts as truncated if few-shot examples were dropped or its context was still cut from the left.
    n_truncated = sum(
        1 for prompt, doc_scored in zip(prompts, by_doc) if prompt.n_dropped or any(s.is_truncated for s in doc_scored)
    )
    # A NaN or infinite log-likelihood (float16 overflow) would still be ranked: argmax over NaN picks the first
    # answer, so accuracy became the share of docs whose gold answer is first. Such a row says nan instead.
    non_finite = sum(1 for item in scored if not math.isfinite(item.loglikelihood))
    if non_finite:
        logger.warning("task %s %d-shot: %d of %d log-likelihoods are NaN or infinite (an overflow: float16's range "
                       "is small); its metrics are reported as nan. Evaluate with --dtype bfloat16 or float32",
                       spec.task, k, non_finite, len(scored))
    rows = []
    for name in spec.metric_names:
        value, stderr = aggregate_metric(name, items[name])
        if non_finite:
            value, stderr = float("nan"), None
        rows.append({
            "task": spec.task, "dataset": plan.dataset, "num_fewshot": k, "metric": name,
            "value": value, "stderr": stderr, "n": len(docs),
            "higher_is_better": METRICS[name].higher_is_better, "n_truncated": n_truncated,
        })
    return rows, examples
