"""What a run trains: the Workload protocol the loop drives, and language modelling, the default one.

The loop (loop.py, train.py) owns the optimizer, schedule, accumulation, clipping, divergence stop, checkpoints,
exact resume, the run lock, the JSONL log and the loss curve. A workload owns the rest: the tokenizer, the model it
starts from, the batches, the loss of a batch, the validation figures and the files that ship beside the weights
in final/. Pre-training is `LanguageModelling` below (with its tokenizer stage, which `hf-gpt-custom run` also runs
on its own); GPT-1-style fine-tuning is `FinetuneWorkload` (finetune.py).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from hf_gpt_custom.errors import MissingFileError, UserError
from hf_gpt_custom.manifest import write_text_atomically
from hf_gpt_custom.model_folder import load_model_folder
from hf_gpt_custom.training.config import TrainConfig, own_folder_fix
from hf_gpt_custom.training.model_section import build_model_config, requested_architecture
from hf_gpt_custom.training.fingerprints import local_file_sha256s
from hf_gpt_custom.training.data import (build_loaders, document_encoder, prepare_datasets,
                                         val_blocks_scored)
from hf_gpt_custom.training.token_bytes import TokenBytes

logger = logging.getLogger(__name__)


@dataclass
class PreparedWork:
    """What a workload hands the loop before accelerator.prepare: the model and both loaders are unwrapped."""

    tokenizer: Any
    model: torch.nn.Module
    train_loader: torch.utils.data.DataLoader
    val_loader: torch.utils.data.DataLoader


class Workload(Protocol):
    # Whether a finite loss far above the run's best is divergence (divergence.py): true of a language-modelling loss,
    # which moves smoothly; not of a classifier's batch loss, where a few confident mistakes in one batch are noise.
    loss_blowup_is_divergence: bool
    # Token sequences one example trains on: 1, or one per answer of a multiple-choice example (the most tokens one
    # optimizer step can hold is batch_size x block_size x this x accumulation x processes).
    sequences_per_example: int
    # Whether every row is block_size tokens (packed blocks), or as long as its batch's longest (fine-tuning's padded
    # examples): tokens_per_step is then exact, else the most a step can hold
    packs_blocks: bool
    # Whether a training step computes the language-model head (V·d per token): MFU counts the FLOPs that run, and a
    # fine-tuned head with lm_loss_weight 0 never computes it
    computes_lm_head: bool
    # What `loss` and `val_loss` are, as the loss curve's axis names them
    loss_name: str

    def prepare(self, config, accelerator) -> PreparedWork:
        """Tokenizer, data, model (after set_seed, so its initialisation is seeded) and the two loaders."""

    def loss(self, model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The scalar the loop backpropagates and logs as `loss`."""

    def count_tokens(self, batch: dict[str, torch.Tensor]) -> int | torch.Tensor:
        """Tokens this micro-batch trains on: an int, or a 0-d tensor left on the device (the loop sums them over
        accumulation and processes and reads them back only when it logs)."""

    def evaluate(self, model, val_loader, accelerator) -> dict[str, float]:
        """Validation figures on every process; `val_loss` must be among them (the loss curve plots it)."""

    def describe(self, result: dict[str, float]) -> str:
        """One line for people: `val loss 4.36, 2.28 bits/byte` after each evaluation and at the end."""

    def summary_fields(self, last_eval: dict[str, float]) -> dict[str, Any]:
        """The workload's own entries of training_summary.json (data, final validation figures)."""

    def save_beside_model(self, folder: Path, model_config) -> None:
        """Write what ships with the weights in final/ (the tokenizer) into `folder`."""

    def save_into_checkpoint(self, folder: Path, model_config) -> None:
        """Write what a checkpoint carries besides weights, states, settings and config.json into `folder`."""


def language_model_loss(model, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """A training step's loss, as the loop asks for it (the benchmarks time this same call): only the loss leaves the
    forward, since compiled, returned logits would be handed a zero gradient of their size (return_logits). Outputs by
    name whatever the folder's config.return_dict says (a converted folder may say false)."""
    return model(input_ids=input_ids, labels=labels, return_logits=False, return_dict=True).loss


# --- language modelling: the default workload ------------------------------------------------------------------------


class LanguageModelling:
    """The default workload: next-token prediction on packed blocks of `config.dataset` (pre-training, or
    continued training from `init_from`); validation loss, perplexity and bits per byte."""

    loss_blowup_is_divergence = True
    sequences_per_example = 1  # a packed block
    packs_blocks = True
    computes_lm_head = True
    loss_name = "cross-entropy loss (nats / token)"

    def prepare(self, config: TrainConfig, accelerator) -> PreparedWork:
        with accelerator.main_process_first():
            self.tokenizer_dir = Path(prepare_tokenizer(config))
            tokenizer = load_run_tokenizer(self.tokenizer_dir)
            self.data = prepare_datasets(config, tokenizer, self.tokenizer_dir)
        accelerator.print(
            f"data: {self.data.stats.get('train_blocks', '?')} train / {self.data.stats['val_blocks']} val blocks of "
            f"{config.block_size} tokens ({'cache hit' if self.data.is_cache_hit else 'tokenised'}; "
            f"{self.data.cache_dir})"
            + ("; shift_block_boundaries: one block fewer an epoch, cut at a new offset each epoch"
               if config.shift_block_boundaries else "")
        )
        model = _load_model(config, tokenizer)
        problems = TokenBytes.of(tokenizer).check(document_encoder(tokenizer))
        if problems:  # the validation blocks' byte_counts are still the text's as written (token_bytes.py)
            logger.info("this tokenizer's tokens do not stand for fixed bytes of the text (%s): val_bits_per_byte "
                        "counts the bytes of each validation document as written that each token covers (the "
                        "tokenizer's offsets)", "; ".join(problems))
        self.config, self.eos_token, self.eos_token_id = config, tokenizer.eos_token, tokenizer.eos_token_id
        train_loader, val_loader = build_loaders(config, self.data)
        return PreparedWork(tokenizer, model, train_loader, val_loader)

    def loss(self, model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return language_model_loss(model, batch["input_ids"], batch["labels"])

    def count_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return batch["input_ids"].numel()  # packed blocks: no padding

    def evaluate(self, model, val_loader, accelerator) -> dict[str, float]:
        # the blocks scored go in the run log's eval record: a rerun with another eval_batches scores another set,
        # which the loss curve draws apart
        scored = self.data.stats.get("val_blocks")
        return {**evaluate_loss(model, val_loader, accelerator),
                **({"blocks_scored": val_blocks_scored(scored, self.config)} if scored is not None else {})}

    def describe(self, result: dict[str, float]) -> str:
        return (f"val loss {result['val_loss']:.4f}, perplexity {result['val_perplexity']:.2f}, "
                f"{result['val_bits_per_byte']:.4f} bits/byte")

    def summary_fields(self, last_eval: dict[str, float]) -> dict[str, Any]:
        return {
            "val_perplexity": last_eval["val_perplexity"],
            "val_bits_per_byte": last_eval["val_bits_per_byte"],
            "dataset": self.config.dataset,
            "dataset_files_sha256": local_file_sha256s(self.config.dataset),
            "train_blocks": self.data.stats.get("train_blocks"),
            "val_blocks": self.data.stats.get("val_blocks"),
            # what the validation figures were computed on: eval_batches cuts the split to its first blocks
            "val_blocks_scored": (None if self.data.stats.get("val_blocks") is None
                                  else val_blocks_scored(self.data.stats["val_blocks"], self.config)),
            "tokenizer": str(self.tokenizer_dir.absolute()),
            "data_cache": str(self.data.cache_dir) if self.data.cache_dir else None,
        }

    def save_beside_model(self, folder: Path, model_config) -> None:
        tokenizer_for_model(self.tokenizer_dir, self.eos_token, model_config.n_positions).save_pretrained(folder)

    def save_into_checkpoint(self, folder: Path, model_config) -> None:
        """Nothing: a language-modelling run's checkpoints find their tokenizer in the run folder, checked against
        the fingerprint they record."""


def without_attention_maps(model_config, init_from: str) -> None:
    """Turn off a folder's `output_attentions: true` (a converted GPT-2's config may carry it) for training, with a
    warning. Training never reads attention maps, and transformers refuses to save that setting beside sdpa attention:
    kept, every step trained and then final/ could not be written."""
    if getattr(model_config, "output_attentions", False):
        logger.warning("init_from=%s asks for attention maps (output_attentions: true in its config.json), which "
                       "training never reads and transformers cannot save beside sdpa attention: training without "
                       "them. To get them from the trained model, load it with output_attentions=True and "
                       "attn_implementation=\"eager\"", init_from)
        model_config.output_attentions = False


def _load_model(config: TrainConfig, tokenizer):
    from hf_gpt_custom import GPTCustomForCausalLM

    if config.init_from:
        # strict: a missing tensor is an error, not a random init; a folder with a manifest must match it. In float32
        # whatever the folder holds: a bf16 folder trained bf16 weights, and most AdamW updates (98% of a smoke run's
        # at lr 1e-5) were below bf16's resolution; mixed_precision decides the compute dtype, as from scratch.
        model = load_model_folder(config.init_from, dtype=torch.float32)  # ours, checkpoints, transformers folders
        for key, value in requested_architecture(config).items():
            if getattr(model.config, key) != value:
                raise UserError(
                    f"model.{key}={value!r} but init_from={config.init_from} has {key}={getattr(model.config, key)!r}; "
                    f"the architecture comes from init_from — drop model.{key} (from the YAML's model: section too; "
                    "the override model={} empties it)"
                )
        if model.config.n_positions < config.block_size:
            raise UserError(
                f"block_size={config.block_size} exceeds n_positions={model.config.n_positions} of "
                f"init_from={config.init_from}; lower block_size"
            )
        without_attention_maps(model.config, config.init_from)
    else:
        model_config = build_model_config(config, vocab_size=config.model.get("vocab_size") or len(tokenizer),
                                          eos_token_id=tokenizer.eos_token_id)
        model = GPTCustomForCausalLM(model_config)
    if model.config.vocab_size < len(tokenizer):
        fix = "leave tokenizer unset (init_from's own is used)" if config.init_from else "raise model.vocab_size"
        raise UserError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {model.config.vocab_size}; "
            f"use the model's own tokenizer or {fix}"
        )
    return model


@torch.no_grad()
def evaluate_loss(model, val_loader, accelerator) -> dict[str, float]:
    """Validation loss (nats/token), perplexity and bits per byte over the whole validation loader.

    Bits per byte = total nats / (ln 2 · UTF-8 bytes of the predicted text): the blocks' `byte_counts` give each
    token's bytes, summing to each document's length as written (token_bytes.py). Each block predicts its tokens
    1..T-1 (token 0 has no context inside the block); the end-of-text separator is predicted and carries only what
    no token of its document covered (usually nothing).
    """
    model.eval()
    # summed on the device and read back once at the end: the GPU never waits for the host between batches
    total_nats = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    total_bytes = torch.zeros((), dtype=torch.int64, device=accelerator.device)
    total_tokens = 0
    for batch in val_loader:
        logits = model(input_ids=batch["input_ids"], return_dict=True).logits
        targets = batch["labels"][:, 1:]
        nats = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.size(-1)), targets.reshape(-1),
                               reduction="none").view(targets.shape).sum(dim=1)
        n_bytes = batch["byte_counts"][:, 1:].sum(dim=1)
        nats, n_bytes = accelerator.gather_for_metrics((nats, n_bytes))
        total_nats += nats.double().sum()
        total_bytes += n_bytes.sum()
        total_tokens += targets.size(1) * nats.numel()
    model.train()
    total_nats, total_bytes = float(total_nats), int(total_bytes)
    val_loss = total_nats / max(total_tokens, 1)
    return {
        "val_loss": val_loss,
        "val_perplexity": _exp_or_inf(val_loss),
        "val_bits_per_byte": total_nats / (math.log(2) * max(total_bytes, 1)),
        "val_tokens": total_tokens,
        "val_bytes": total_bytes,
    }


def _exp_or_inf(value: float) -> float:
    """exp(value), inf past float's range (709.78...; nan stays nan)."""
    try:
        return math.exp(value)
    except OverflowError:
        return math.inf


# --- its tokenizer ---------------------------------------------------------------------------------------------------


_TOKENIZER_SOURCE_NAME = "training_source.json"  # beside a tokenizer we trained: what it was trained on


def load_run_tokenizer(folder: Path):
    """AutoTokenizer of the run's tokenizer folder; a folder without a loadable tokenizer is one clear error."""
    import hf_gpt_custom  # noqa: F401  (registers our tokenizer class with AutoTokenizer)
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError, TypeError) as err:
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise UserError(
            f"tokenizer folder {folder} holds no tokenizer transformers can load ({first_line}); point tokenizer= at "
            "a folder written by tokenizer.save_pretrained (tokenizer.json, or vocab.json with merges.txt), or leave "
            "tokenizer unset to train one on the data"
        ) from err


def prepare_tokenizer(config: TrainConfig, start_over: bool = False) -> Path:
    """A local tokenizer folder for this run.

    `tokenizer:` set -> that folder (a Hub name is downloaded once and saved to <out_dir>/tokenizer). Unset with
    `init_from` holding a tokenizer -> the init_from folder, so fine-tuning keeps the model's vocabulary; with
    `init_from` a checkpoint -> the tokenizer its run trained with (never a new one under loaded weights). Unset
    without init_from -> a byte-level BPE of `tokenizer_vocab_size` trained into <out_dir>/tokenizer on the dataset's
    training documents (without the documents val_fraction holds out), reused when a previous call trained it on the
    same documents with the same size. A trained tokenizer that checkpoints or final/ in the run folder were trained
    with is never replaced by another: that is refused, unless `start_over` (the caller then sets those outputs aside).
    """
    run_dir = config.run_dir
    target = run_dir / "tokenizer"
    if config.tokenizer:
        if Path(config.tokenizer).is_dir():
            if config.init_from:
                refuse_another_tokenizer_than_init_froms(Path(config.init_from), Path(config.tokenizer),
                                                         "tokenizer=", "leave tokenizer unset")
            return Path(config.tokenizer)
        import hf_gpt_custom  # noqa: F401  (registers our tokenizer class with AutoTokenizer)
        from transformers import AutoTokenizer

        # Called under main_process_first: the main process saves, the others find the marker and read the files.
        marker, source = target / _TOKENIZER_SOURCE_NAME, {"tokenizer": config.tokenizer}
        if _read_marker(marker) != source:
            marker.unlink(missing_ok=True)  # a kill while saving must not leave new files under the old marker
            try:
                tokenizer = AutoTokenizer.from_pretrained(config.tokenizer)
            except OSError as err:  # not a local folder, and the Hub is unreachable or has no such repository
                raise MissingFileError(
                    f"tokenizer={config.tokenizer!r} is not a local folder and could not be loaded from the Hub "
                    f"({str(err).strip().splitlines()[0][:200]}); give a tokenizer folder, or download it while "
                    f"online"
                ) from err
            tokenizer.save_pretrained(target)  # its errors are the run folder's (a full disk), not the Hub's
            write_text_atomically(marker, json.dumps(source))
        return target
    if config.init_from and Path(config.init_from, "tokenizer.json").is_file():
        return Path(config.init_from)
    if config.init_from:  # a tokenizer trained now would give the loaded weights other token ids than they learnt
        return checkpoint_run_tokenizer(Path(config.init_from))
    # Held-out validation documents stay unseen: merges fitted to them make the tokenizer compress the validation
    # text better than any unseen text, which flatters validation bits per byte, the more so the larger the
    # vocabulary (tiny Shakespeare's tail, 8192 entries: 3.53 vs 3.29 bytes per validation token, 2.33 vs 2.59
    # bits per byte after 105 steps of the same run).
    holds_out_validation = config.val_dataset is None and config.val_split is None
    local = Path(config.dataset).exists()  # else a Hub dataset name
    source = {"dataset": config.dataset, "dataset_config": config.dataset_config, "split": config.dataset_split,
              "text_field": config.text_field, "vocab_size": config.tokenizer_vocab_size}
    if config.dataset_revision is not None:  # the Hub commit the run reads (hub_revision.py)
        source["revision"] = config.dataset_revision
    if local:  # the same path with other contents is other documents (the data cache's key)
        from hf_gpt_custom.training.corpus import fingerprint_local_source

        source["dataset_sha256"] = fingerprint_local_source(config.dataset)
    if holds_out_validation and config.streaming:  # the stream's first documents are its validation set
        from hf_gpt_custom.training.data import STREAMING_VAL_DOCUMENTS

        source["trained_on"] = {"documents": f"all but the first {STREAMING_VAL_DOCUMENTS}",
                                "text_sample_by": config.text_sample_by}
    elif holds_out_validation:
        source["trained_on"] = {"documents": "training split", "text_sample_by": config.text_sample_by,
                                "val_fraction": config.val_fraction, "val_holdout": config.val_holdout,
                                "seed": config.seed}
    elif local:  # validation is val_dataset: every document, as training splits them
        source["trained_on"] = {"documents": "all", "text_sample_by": config.text_sample_by}
    marker = target / _TOKENIZER_SOURCE_NAME
    recorded = _read_marker(marker)
    if recorded is not None and _same_source(recorded, source):
        return target
    if recorded is not None and not start_over and _recorded_by_the_old_rule(recorded, source) \
            and _outputs_trained_with_tokenizer(run_dir, target):
        # Retrained by today's rule it would come out other than the one the run's weights were trained with
        logger.warning("keeping the run's tokenizer %s: an older version trained it on %s by its own rule (every "
                       "document, held-out ones included, or the files read whole), and the run's checkpoints were "
                       "trained with it; --start_over trains a new one on the documents training reads",
                       target, config.dataset)
        return target
    from hf_gpt_custom.tokenizer_training import train_tokenizer

    # Replaced in place, the tokenizer would give the weights of the folder's checkpoints and final/ other token ids
    # than they were trained on. It is trained beside them instead, and kept only if it comes out the same (training
    # is deterministic: a marker written by older code, without dataset_sha256, then still resumes).
    trained_with_old = [] if start_over else _outputs_trained_with_tokenizer(run_dir, target)
    out_dir = target.with_name("tokenizer.retrained") if trained_with_old else target
    if trained_with_old:
        shutil.rmtree(out_dir, ignore_errors=True)  # left by an interrupted call
    else:  # retrained in place: a kill before the new marker must not leave the new files under the old one
        if start_over:
            _keep_the_replaced_tokenizer(run_dir, target)
        marker.unlink(missing_ok=True)

    if holds_out_validation and config.streaming:
        from hf_gpt_custom.training.corpus import load_text_dataset
        from hf_gpt_custom.training.data import STREAMING_VAL_DOCUMENTS

        documents = load_text_dataset(config.dataset, config.text_field, config.dataset_config, config.dataset_split,
                                      streaming=True, sample_by=config.text_sample_by,
                                      revision=config.dataset_revision)
        inputs = (record["text"] for record in documents.skip(STREAMING_VAL_DOCUMENTS))
    elif holds_out_validation or local:
        from hf_gpt_custom.training.data import split_documents

        # The documents training reads (text_sample_by), never a local file whole: its blank lines between
        # paragraphs would take merges for "\n\n", which training, with <|endoftext|> between documents, never sees.
        train_documents, _ = split_documents(config)
        inputs = (text for text in train_documents["text"])  # a generator: texts, never read as paths or Hub names
    else:  # a Hub dataset with its own validation split: the tokenizer trainer streams the training split
        inputs = config.dataset
    folder = train_tokenizer(
        inputs,
        source=f"the training documents of {config.dataset} ({config.text_field!r}, in training's order)",
        out_dir=out_dir,
        vocab_size=config.tokenizer_vocab_size,
        text_field=config.text_field,
        dataset_config=config.dataset_config,
        split=config.dataset_split,
        revision=config.dataset_revision,
    )
    if trained_with_old:
        from hf_gpt_custom.training.fingerprints import tokenizer_file_sha256s

        is_same = tokenizer_file_sha256s(folder) == tokenizer_file_sha256s(target)
        shutil.rmtree(folder)
        if not is_same:
            recorded = recorded or {}
            # the keys it recorded (an older version's marker records fewer: those are not changes)
            what = ", ".join(key for key in source if key in recorded and recorded[key] != source[key]) \
                or "its training source"
            raise UserError(
                f"the run folder {run_dir} holds {', '.join(trained_with_old)} trained with the tokenizer in {target}, "
                f"and the data it would be trained on now ({what} changed) gives another one; put back the data it "
                f"was trained on, {own_folder_fix(config)}, or pass --start_over to train from step 0 (the old "
                f"checkpoints are moved aside, not deleted)"
            )
        folder = target
    write_text_atomically(Path(folder, _TOKENIZER_SOURCE_NAME), json.dumps(source, indent=2))
    return Path(folder)


def _read_marker(marker: Path) -> dict | None:
    """What a tokenizer folder's marker records, None without one. One a full disk left empty or cut (written in
    place by older versions) records nothing: every later train of the folder ended in a JSONDecodeError."""
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        logger.warning("%s is damaged (empty or cut short): the tokenizer beside it is checked as one without a record",
                       marker)
        return None
    return recorded if isinstance(recorded, dict) else None


def _recorded_by_the_old_rule(recorded: dict, source: dict) -> bool:
    """Whether `recorded` is the marker of a tokenizer an older version trained, by its rule, on what `source` names:
    it says nothing of which documents (no `trained_on`: before the held-out documents were left out, or before a
    val_dataset run's documents were split as training splits them) and all it does say is `source`'s (the same
    contents at another path included)."""
    recorded, source = _path_of_the_same_contents_aside(recorded, source)
    return "trained_on" not in recorded and "trained_on" in source and \
        all(source.get(key) == value for key, value in recorded.items())


def _same_source(recorded: dict, source: dict) -> bool:
    """Whether the run's tokenizer was trained on `source`: the same settings and documents."""
    recorded, source = _path_of_the_same_contents_aside(recorded, source)
    return recorded == source


def _path_of_the_same_contents_aside(recorded: dict, source: dict) -> tuple[dict, dict]:
    """Both without the dataset path when they record the same contents (dataset_sha256): the same files moved to
    another path are the same source (resume.py accepts the move too)."""
    if recorded.get("dataset_sha256") is not None and recorded.get("dataset_sha256") == source.get("dataset_sha256"):
        return {**recorded, "dataset": None}, {**source, "dataset": None}
    return recorded, source


def checkpoint_run_tokenizer(init_from: Path, fix: str = "pass tokenizer=<the folder the model was trained with>",
                             label: str = "init_from=") -> Path:
    """The tokenizer that the run of checkpoint `init_from` (<run>/checkpoints/step_NNNNNN, no tokenizer files of its
    own) trained with: the folder its recorded `tokenizer:` setting names; for a run without that setting started
    from a model folder or checkpoint of its own (init_from), that one's tokenizer, unless <run>/tokenizer is proven
    the run's by the checkpoint's sha256 record, or the checkpoint predates that record and the folder it started from
    has no tokenizer.json (those versions trained <run>/tokenizer for such a run); else <run>/tokenizer (trained
    there, or a Hub tokenizer saved there). Refused when it is not
    found, is not the one the checkpoint recorded, or its size is not the checkpoint's vocab_size; any other
    init_from without tokenizer.json is refused too."""
    from hf_gpt_custom.training.checkpoint import checkpoint_step
    from hf_gpt_custom.training.fingerprints import combined_sha256, tokenizer_file_sha256s
    from hf_gpt_custom.training.resume import CONTENTS, recorded_settings

    if checkpoint_step(init_from) is None or init_from.parent.name != "checkpoints":
        raise UserError(f"{label}{init_from} has no tokenizer.json and is not a checkpoint of a run; {fix}")
    run_dir = init_from.parent.parent
    recorded = recorded_settings(init_from) or {}
    setting, parent = recorded.get("tokenizer"), recorded.get("init_from")
    trained_with = recorded.get(CONTENTS, {}).get("tokenizer")  # absent in checkpoints older than the record
    own_files = tokenizer_file_sha256s(run_dir / "tokenizer")
    # <run>/tokenizer stands in for a folder the run read from elsewhere only where the checkpoint's record proves it
    # holds the same files (a moved run trained with tokenizer=<its own tokenizer/>): otherwise it is an earlier
    # run's, left there by train --start_over, which may have the same size and other merges
    own_proven = bool(own_files) and trained_with is not None and combined_sha256(own_files) == trained_with
    # ...except in a checkpoint older than the record whose run started from a folder without tokenizer.json (a
    # checkpoint, a GPT-2 folder of vocab.json/merges.txt): the versions that wrote those trained the run's own
    # tokenizer into <run>/tokenizer, and its weights learnt those ids
    parent_is_the_tokenizer = bool(parent) and not own_proven and (
        trained_with is not None or not own_files or Path(parent, "tokenizer.json").is_file())
    if setting and Path(setting).is_dir():
        folder = Path(setting)
    elif setting and Path(setting).is_absolute() and not own_proven:
        # a local folder (stored absolute), moved or deleted since: it is the one to find again
        raise MissingFileError(f"{label}{init_from} is a checkpoint without tokenizer files, and the tokenizer its "
                               f"run was trained with, tokenizer={setting}, is no longer there; {fix}")
    elif not setting and parent_is_the_tokenizer:
        # that run started from a model folder too, and used its tokenizer: the same rule one run back
        folder = Path(parent) if Path(parent, "tokenizer.json").is_file() else \
            checkpoint_run_tokenizer(Path(parent), fix, label="the folder it started from, ")
    else:
        folder = run_dir / "tokenizer"
    tokenizer_files = tokenizer_file_sha256s(folder)
    if not tokenizer_files:
        raise MissingFileError(f"{label}{init_from} is a checkpoint without tokenizer files, and {folder}, where "
                               f"its run's tokenizer should be, has none; {fix}")
    if trained_with is not None and combined_sha256(tokenizer_files) != trained_with:
        raise UserError(f"{label}{init_from} was trained with another tokenizer than the one now in {folder} (its "
                        f"files changed since); {fix}")
    vocab_size = json.loads((init_from / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    size = len(load_run_tokenizer(folder))
    # model.vocab_size may have been set above the tokenizer's size; otherwise the run built it from the tokenizer
    if size > vocab_size or (size != vocab_size and "vocab_size" not in recorded.get("model", {})):
        raise UserError(f"{label}{init_from} has vocab_size={vocab_size} but its run's tokenizer in {folder} has "
                        f"{size} tokens; {fix}")
    return folder


def refuse_another_tokenizer_than_init_froms(init_from: Path, tokenizer_dir: Path, option: str, unset: str) -> None:
    """A tokenizer given beside a model folder or checkpoint (`train init_from=M tokenizer=T`, `eval --model M
    --tokenizer T`) with another vocabulary than the model was trained with gave the weights other ids than they
    learnt, in silence (the paths hunt: a moved tokenizer's stand-in of the same size scored copa 0.80, the right one
    0.75). Compared with the folder's own tokenizer, else with the one the checkpoint's run trained with, else (that
    one moved) with the tokenizer files' sha256 the checkpoint recorded; a checkpoint older than that record, whose
    tokenizer is gone, cannot be checked."""
    from hf_gpt_custom.training.fingerprints import combined_sha256, tokenizer_file_sha256s
    from hf_gpt_custom.training.resume import CONTENTS, recorded_settings

    if any((init_from / name).is_file() for name in ("tokenizer.json", "vocab.json")):
        trained_with, where = init_from, f"the tokenizer saved in {init_from}"
    else:
        recorded = (recorded_settings(init_from) or {}).get(CONTENTS, {}).get("tokenizer")
        if recorded is not None and combined_sha256(tokenizer_file_sha256s(tokenizer_dir)) == recorded:
            return  # the very files it was trained with, wherever they are now
        try:
            trained_with = checkpoint_run_tokenizer(init_from)
            where = f"the tokenizer {init_from} was trained with ({trained_with})"
        except UserError:
            if recorded is None:
                return
            raise UserError(f"{option}{tokenizer_dir} is not the tokenizer {init_from} was trained with: its files "
                            f"differ from those the checkpoint recorded, and that tokenizer is not where its run left "
                            f"it; give the folder it was moved to, with its files as the run left them (a copy saved "
                            f"again by save_pretrained differs in tokenizer_config.json)") from None
    # tokens added after the model's keep its ids: the same ids for what it learnt
    given = load_run_tokenizer(tokenizer_dir)
    differs = vocabulary_difference(load_run_tokenizer(trained_with), given, where, added_tokens_allowed=True)
    if differs:
        raise UserError(f"{option}{tokenizer_dir} has another vocabulary {differs}, so the model would read ids it "
                        f"was not trained on; {unset} (the one it was trained with is then used)")
    config_file = init_from / "config.json"
    vocab_size = json.loads(config_file.read_text(encoding="utf-8")).get("vocab_size") if config_file.is_file() \
        else None
    if isinstance(vocab_size, int) and len(given) > vocab_size:  # found only after the data was tokenized, with a
        # fix (raise model.vocab_size) that init_from refuses
        ids = f"id {vocab_size} has" if len(given) == vocab_size + 1 else f"ids {vocab_size}..{len(given) - 1} have"
        raise UserError(f"{option}{tokenizer_dir} adds tokens past the vocab_size={vocab_size} of {init_from} (it "
                        f"has {len(given)}): {ids} no embedding row, and the model is not resized here; {unset}, or "
                        f"remove the added tokens")


def vocabulary_difference(own, given, where: str, added_tokens_allowed: bool = False) -> str | None:
    """How `given`'s vocabulary differs from `own` (the tokenizer a model was trained with, `where` naming it), as
    "(N tokens) than ..." or "(the same N ids for other tokens) than ...", None where it is the same (or, with
    `added_tokens_allowed`, `own`'s with tokens added after it)."""
    own_vocab, given_vocab = own.get_vocab(), given.get_vocab()
    same = all(given_vocab.get(token) == index for token, index in own_vocab.items()) if added_tokens_allowed \
        else own_vocab == given_vocab
    if same:
        return None
    return (f"({len(given)} tokens) than {where} ({len(own)} tokens)" if len(given) != len(own) else
            f"(the same {len(own)} ids for other tokens) than {where}")


def _keep_the_replaced_tokenizer(run_dir: Path, target: Path) -> None:
    """--start_over sets the old checkpoints and final/ aside, kept; the tokenizer they were trained with is retrained
    in place, so keep a copy beside them: it was the only one where the run had no final/ yet, and without it the
    kept checkpoints could be neither resumed nor loaded (the hostilecli hunt)."""
    from hf_gpt_custom.training.checkpoint import new_abandoned_folder

    if not _outputs_trained_with_tokenizer(run_dir, target):
        return
    kept = new_abandoned_folder(run_dir / "checkpoints", "tokenizer_before_new_run") / "tokenizer"
    shutil.copytree(target, kept)
    logger.warning("--start_over retrains the run's tokenizer %s: the one its set-aside checkpoints and final/ were "
                   "trained with is kept in %s (copy it back to %s to resume one of them)", target, kept, target)


def _outputs_trained_with_tokenizer(run_dir: Path, tokenizer_dir: Path) -> list[str]:
    """The checkpoints and final/ of `run_dir` when `tokenizer_dir` holds a tokenizer (what they were trained with)."""
    from hf_gpt_custom.training.checkpoint import list_checkpoints
    from hf_gpt_custom.training.fingerprints import tokenizer_file_sha256s

    if not tokenizer_file_sha256s(tokenizer_dir):
        return []
    outputs = [f"checkpoints/{folder.name}" for folder in list_checkpoints(run_dir / "checkpoints")]
    return outputs + (["final/"] if (run_dir / "final").is_dir() else [])


def tokenizer_for_model(tokenizer_dir: str | os.PathLike, eos_token: str, n_positions: int):
    """The tokenizer as it ships beside the model: the model's context length, and padding for batched generation.

    pad = the tokenizer's own pad token, else end-of-text (GPT-2 has no pad token), on the left, so every prompt in a
    batch ends where generation starts. A Llama's own `<unk>` pad was replaced with eos while config.json kept its id.
    The length and side are passed to from_pretrained because save_pretrained writes only constructor arguments (and
    model_max_length); a pad token set afterwards is saved.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), model_max_length=n_positions, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = eos_token
    return tokenizer
