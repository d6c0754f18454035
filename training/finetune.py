"""finetune(config): GPT-1-style supervised fine-tuning of a pre-trained model folder on a labelled dataset.

The objective is GPT-1's L3 = L2 + λ·L1 (task loss plus λ times the language-modelling loss on the same inputs),
computed by the task heads in hf_gpt_custom (GPTCustomForSequenceClassification, GPTCustomForMultipleChoice). The
loop is train()'s own (train.py, loop.py) — Accelerate, checkpoints with manifests, exact resume, the
settings-change refusal, the run lock, run_log.jsonl, loss_curve.png, final/ — driven through the FinetuneWorkload
below; input sequences and batches are finetune_data.py's, the config finetune_config.py's.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from hf_gpt_custom import GPTCustomTokenizerFast
from hf_gpt_custom.errors import UserError
from hf_gpt_custom.heads_gpt_custom import untied_lm_loss_message
from hf_gpt_custom.manifest import weights_fingerprint
from hf_gpt_custom.model_folder import check_model_folder, load_model_folder, set_tokenizer_sides
from hf_gpt_custom.training.data import build_loaders
from hf_gpt_custom.training.config_checks import warn_once
from hf_gpt_custom.training.finetune_config import FinetuneConfig, TaskSection
from hf_gpt_custom.training.finetune_data import (
    PadExamples, add_task_tokens, encode_examples, heldout_also_trained_on, labelled_records_with_places,
    load_task_tokenizer, split_heldout,
)
from hf_gpt_custom.training.train import train
from hf_gpt_custom.training.workload import PreparedWork, without_attention_maps


def finetune(config: FinetuneConfig, start_over: bool = False) -> Path:
    """Fine-tune `config.init_from` on `config.dataset` as the `task:` section says; return the run folder.

    Everything that can fail on the user's input — the model folder, its tokenizer, the columns, every label,
    block_size — is checked before the run folder is touched, so a refused run leaves nothing on disk. A run folder
    holding a run is continued or refused as `train` does (`start_over` trains from step 0).
    """
    from hf_gpt_custom.training.hub_revision import pin_dataset_revision

    config = pin_dataset_revision(config, start_over)  # the records are read now, at the commit train() records
    return train(config, FinetuneWorkload(config), start_over=start_over)


class FinetuneWorkload:
    """Labelled examples through a task head; validation = the objective, task loss and accuracy on the held-out part."""

    # A batch's task loss is a handful of examples: two confident mistakes in a batch of 4 lift it from a best of 0.3
    # (or 1e-6, once the training set is memorised) past any multiple of it, and the run is healthy. So only a loss
    # or gradient that stops being finite stops fine-tuning (transformers' Trainer stops on neither).
    loss_blowup_is_divergence = False

    def __init__(self, config: FinetuneConfig):
        from accelerate.utils import set_seed

        self.config, self.task = config, config.task_section
        self.sequences_per_example = len(self.task.choice_columns) if self.task.is_multiple_choice else 1
        self.packs_blocks = False  # an example padded to its batch's longest, cut at block_size
        self.computes_lm_head = self.task.lm_loss_weight > 0  # GPT-1's λ·L1: the LM logits only when it counts
        self.loss_name = "task cross-entropy (nats / example)" + (
            f" + {self.task.lm_loss_weight:g} × LM loss (nats / token)" if self.computes_lm_head else "")
        where = Path(config.dataset).name if Path(config.dataset).exists() else config.dataset
        folder = check_model_folder(config.init_from)
        # a fine-tuned head of another kind is refused before the data is read; one of this kind is trained further
        self.continues_a_head = saved_head(config.init_from, self.task) is not None
        # the weights as the tokenizer is read: a base retrained in between (train --start_over in its run) gave a
        # fine-tune of the new weights under the old tokenizer, its embedding resized in silence (the concurrency hunt)
        init_weights = weights_fingerprint(folder)
        try:
            self.tokenizer = load_task_tokenizer(_tokenizer_folder_of(folder))
        except (OSError, ValueError) as err:
            if isinstance(err, UserError) and "init_from=" in str(err):
                raise
            raise UserError(f"init_from={config.init_from} has no tokenizer files the model can be fine-tuned with "
                            f"({str(err).splitlines()[0]}); save the tokenizer it was trained with into the folder "
                            f"(tokenizer.save_pretrained)") from err
        known = set(self.tokenizer.get_vocab())
        self.tokens = add_task_tokens(self.tokenizer)
        # what the card says of the task tokens: how many, and whether the embedding grew for them
        self.task_tokens_added = sorted(set(self.tokenizer.get_vocab()) - known, key=self.tokenizer.convert_tokens_to_ids)
        records, places = labelled_records_with_places(config.dataset, config.dataset_config, config.dataset_split,
                                                       config.dataset_revision, task=self.task)
        examples = encode_examples(records, self.task, self.tokenizer, self.tokens, config.block_size, where, places)
        if not self.task.is_multiple_choice:
            seen = {example["label"] for example in examples}
            unused = [label for index, label in enumerate(self.task.labels) if index not in seen]
            if unused:  # a misspelt or extra label: a class the head learns never to predict, said nowhere else
                warn_once(f"{where}: task.labels {unused} occur in no record; the head still gets a class for each "
                          f"({len(self.task.labels)} classes), which it learns never to predict; drop them from "
                          f"task.labels unless the task has them")
        train_ids, heldout_ids = split_heldout(len(examples), config.val_fraction, config.seed)
        self.train_examples = [examples[i] for i in train_ids]
        self.heldout_examples = [examples[i] for i in heldout_ids]
        if len(self.train_examples) < config.batch_size:  # the loop drops a short last batch: nothing to train on
            raise UserError(f"{len(self.train_examples)} training examples, fewer than batch_size={config.batch_size}; "
                            f"lower batch_size or val_fraction, or add data")
        # the summary and the card say so too: the card's "never trained on" would be wrong for these
        self.heldout_repeated = repeated = heldout_also_trained_on(self.train_examples, self.heldout_examples)
        if repeated:
            warn_once(f"{where}: {repeated} of the {len(self.heldout_examples)} held-out examples are also training "
                      f"examples (the same input, e.g. repeated rows), so the held-out accuracy counts inputs the model "
                      f"was trained on; remove the repeated rows for a score on unseen data")
        self.n_cut = {"train": sum(e["cut"] for e in self.train_examples),
                      "heldout": sum(e["cut"] for e in self.heldout_examples)}
        set_seed(config.seed)  # the new head's initialisation, as train() seeds a model built from scratch
        base_vocab_size = json.loads(Path(config.init_from, "config.json").read_text(encoding="utf-8"))["vocab_size"]
        self.model = build_task_model(config, self.task, self.tokenizer)
        self.new_embedding_rows = self.model.config.vocab_size - base_vocab_size  # 0: the rows were there already
        if weights_fingerprint(folder) != init_weights:
            raise UserError(f"init_from={config.init_from} was replaced while it was being read (a training run wrote "
                            f"a new one): its tokenizer and weights may be two models'; fine-tune again once that run "
                            f"has finished")

    # --- the Workload protocol (training/workload.py) ---

    def prepare(self, config: FinetuneConfig, accelerator) -> PreparedWork:
        from datasets import Dataset

        data = SimpleNamespace(train=Dataset.from_list(self.train_examples), val=Dataset.from_list(self.heldout_examples))
        accelerator.print(
            f"data: {len(self.train_examples)} training / {len(self.heldout_examples)} held-out examples "
            f"({self.task.format}; {self.n_cut['train']} / {self.n_cut['heldout']} cut to block_size={config.block_size})"
        )
        # GPT-1 reports accuracy on the whole dev set, and the summary and card put this accuracy beside the count and
        # the majority class of the whole held-out part: eval_batches (a pre-training cut) would score a subset.
        every_record = copy.copy(config)
        every_record.eval_batches = None
        if config.eval_batches is not None:
            accelerator.print(f"eval_batches={config.eval_batches} is not applied: every evaluation of fine-tuning "
                              f"scores all {len(self.heldout_examples)} held-out examples")
        train_loader, val_loader = build_loaders(every_record, data, collate_fn=PadExamples(self.tokens.pad))
        return PreparedWork(self.tokenizer, self.model, train_loader, val_loader)

    def loss(self, model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(**batch, lm_loss_weight=self.task.lm_loss_weight, return_dict=True).loss  # GPT-1's L3 = L2 + λ·L1

    def count_tokens(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return batch["attention_mask"].sum()  # padding is not trained on; stays on the device (no host read)

    @torch.no_grad()
    def evaluate(self, model, val_loader, accelerator) -> dict[str, float]:
        """Over the held-out examples: the objective (val_loss, L2 + λ·L1 as the training loss), the task loss (nats
        per example), the LM loss and accuracy with its standard error. The LM loss is the training's L1 (add_lm_loss):
        each row's loss per token, averaged over the rows (a multiple-choice example has one row per answer). Pooled
        over all tokens instead, long rows weighed more: another figure than the loss training logs (BoolQ's held-out
        L1: 5.34694 pooled, 5.34609 per row)."""
        from hf_gpt_custom.eval.metrics import mean_stderr

        model.eval()
        head = accelerator.unwrap_model(model)
        with_lm = self.task.lm_loss_weight > 0
        task_losses, correct, lm_row_losses, lm_rows = [], [], 0.0, 0
        for batch in val_loader:
            output = model(**batch, output_hidden_states=with_lm, return_dict=True)
            losses = F.cross_entropy(output.logits.float(), batch["labels"], reduction="none")
            hits = (output.logits.argmax(-1) == batch["labels"]).float()
            per_example = (losses, hits)
            if with_lm:  # per example (a multiple-choice example: all its choices), so that the gather below can
                # drop the examples Accelerate repeats to even out the last batch across processes, as it does for
                # the task loss (a sum over each process's batch could not)
                ids = batch["input_ids"]
                mask = batch.get("attention_mask")
                nats, targets = head.lm_nats(output.hidden_states[-1], ids.flatten(0, -2),
                                             None if mask is None else mask.flatten(0, -2))
                row_losses = (nats / targets.clamp_min(1)).view(ids.shape[0], -1)  # add_lm_loss's per-row loss
                per_example += (row_losses.sum(-1), torch.full_like(row_losses[:, 0], row_losses.shape[1]))
            gathered = accelerator.gather_for_metrics(per_example)
            task_losses += gathered[0].tolist()
            correct += gathered[1].tolist()
            if with_lm:
                lm_row_losses += float(gathered[2].double().sum())
                lm_rows += int(gathered[3].sum())
        model.train()
        task_loss = sum(task_losses) / len(task_losses)
        lm_loss = lm_row_losses / lm_rows if lm_rows > 0 else None
        result = {
            "val_loss": task_loss + self.task.lm_loss_weight * (lm_loss or 0.0),
            "val_task_loss": task_loss,
            "val_accuracy": sum(correct) / len(correct),
            "val_accuracy_stderr": mean_stderr(correct),
            "val_examples": len(correct),
        }
        if lm_loss is not None:
            result["val_lm_loss"] = lm_loss
        return result

    def majority_class_accuracy(self) -> float:
        """The accuracy of always answering the held-out part's most common label: what an accuracy is read against."""
        labels = [example["label"] for example in self.heldout_examples]
        return max(labels.count(label) for label in set(labels)) / len(labels)

    def describe(self, result: dict[str, float]) -> str:
        return (f"held-out accuracy {result['val_accuracy']:.4f} ± {result['val_accuracy_stderr'] or 0:.4f} "
                f"({result['val_examples']} examples; the majority class {self.majority_class_accuracy():.4f}), "
                f"task loss {result['val_task_loss']:.4f}, objective {result['val_loss']:.4f}")

    def summary_fields(self, last_eval: dict[str, float]) -> dict[str, Any]:
        # the count and the majority class below describe the records the accuracy was computed on
        assert last_eval["val_examples"] == len(self.heldout_examples), (last_eval["val_examples"],
                                                                        len(self.heldout_examples))
        majority = self.majority_class_accuracy()
        return {
            "fine_tuned_from": str(Path(self.config.init_from).absolute()),
            # init_from held a head of this kind already (fine-tuning further): its head and task tokens were trained
            # on, not drawn new (the model card says which)
            "continued_a_fine_tuned_head": self.continues_a_head,
            "task_tokens_added": self.task_tokens_added,  # to the tokenizer, with their ids
            "new_embedding_rows": self.new_embedding_rows,  # drawn by resize_token_embeddings for them
            "dataset": self.config.dataset,
            "task": self.task.to_dict(),
            "train_examples": len(self.train_examples),
            "heldout_examples": len(self.heldout_examples),
            "heldout_fraction": self.config.val_fraction,
            "heldout_seed": self.config.seed,
            "heldout_repeating_training_inputs": self.heldout_repeated,  # inputs also trained on (repeated rows)
            "examples_cut_to_block_size": self.n_cut,
            "val_task_loss": last_eval["val_task_loss"],
            "val_lm_loss": last_eval.get("val_lm_loss"),
            "val_accuracy": last_eval["val_accuracy"],
            "val_accuracy_stderr": last_eval["val_accuracy_stderr"],
            "majority_class_accuracy": majority,
            "tokenizer": str(Path(self.config.init_from).absolute()),
        }

    def save_into_checkpoint(self, folder: Path, model_config) -> None:
        """The tokenizer with the task tokens, as in final/: a checkpoint as init_from (fine-tuning further, what a
        refused resume advises) must hold the tokenizer its head was trained with, as transformers' Trainer writes
        it into its checkpoint-N."""
        self.save_beside_model(folder, model_config)

    def save_beside_model(self, folder: Path, model_config) -> None:
        """The tokenizer with the task tokens, model_max_length = block_size, padding on the RIGHT with the token
        config.pad_token_id names (eos, or the base tokenizer's own pad token).

        The heads read the last token that is not config.pad_token_id: padding with any other token would be read as
        text. Saved causal LMs pad on the left for batched generation; a task head does not generate, and right
        padding gives a padded row the logits it gets alone even when the caller passes input_ids without their
        attention_mask (with the mask either side does: positions then come from it)."""
        tokenizer = copy.deepcopy(self.tokenizer)
        # what fine-tuning cut every example to (and scored held-out accuracy at): truncation=True cuts the same way
        tokenizer.model_max_length = self.config.block_size
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(model_config.pad_token_id)
        set_tokenizer_sides(tokenizer, padding_side="right")
        if not isinstance(tokenizer, GPTCustomTokenizerFast):
            # fine-tuning read "</s>" or "<|extract|>" in the data as text (split_special_tokens): a kept class (a
            # Llama folder's) matched them as the special tokens in final/, feeding the head other ids than it was
            # trained and scored on (the finetune2 hunt); ours refuses such text
            tokenizer.split_special_tokens = True
            tokenizer.init_kwargs["split_special_tokens"] = True
        tokenizer.save_pretrained(folder)


def _tokenizer_folder_of(folder: Path) -> Path:
    """The folder holding init_from's tokenizer: its own, or for a pre-training checkpoint (accelerate's state, no
    tokenizer files) the one its run trained with, as `train init_from=CHECKPOINT` and `eval` find it; that was
    refused with a message cut mid-word (the upgrade and paths hunts)."""
    from hf_gpt_custom.training.resume import recorded_settings
    from hf_gpt_custom.training.workload import checkpoint_run_tokenizer

    if any((folder / name).is_file() for name in ("tokenizer.json", "vocab.json")) or recorded_settings(folder) is None:
        return folder
    return checkpoint_run_tokenizer(folder, fix="save the tokenizer it was trained with into the checkpoint folder, "
                                                "or fine-tune from the run's final/")


def build_task_model(config: FinetuneConfig, task: TaskSection, tokenizer):
    """The head model for `task`: a pre-trained causal-LM folder's body under a new head, or a fine-tuned head
    folder of the same kind (fine-tuning further), loaded strictly; the embedding resized for the task tokens."""
    head_class = _head_class(task)
    if saved_head(config.init_from, task) is not None:
        model = load_model_folder(config.init_from, model_class=head_class, dtype=torch.float32)  # as a new head
        _check_head_fits(model.config, task, config.init_from)
    else:
        if _weights_hold_a_head(config.init_from):
            raise UserError(
                f"init_from={config.init_from} holds a trained task head (score.weight) but its config.json names no "
                f"head class (a fine-tuning checkpoint written before checkpoints recorded it): loaded as a pre-trained "
                f"model its head would be replaced by a random one; start from its run's final/, or set "
                f"\"architectures\": [\"{head_class.__name__}\"] in its config.json")
        body = load_model_folder(config.init_from)  # strict: a missing tensor is an error, not a random init
        model_config = copy.deepcopy(body.config)
        # what the base's config said of its own task (a converted GPT-2's finetuning_task "lm", its pipeline's
        # text-generation settings) is untrue of the classifier: not carried into it
        for name in ("finetuning_task", "task_specific_params"):
            if hasattr(model_config, name):
                delattr(model_config, name)
        if task.is_multiple_choice:
            model_config.max_choices = task.max_choices
        else:
            model_config.id2label = dict(enumerate(task.labels))
            model_config.label2id = {label: index for index, label in enumerate(task.labels)}
            model_config.problem_type = "single_label_classification"
        model = head_class(model_config)
        model.transformer.load_state_dict(body.transformer.state_dict())
    if task.lm_loss_weight > 0 and not model.config.tie_word_embeddings:
        raise UserError(f"init_from={config.init_from}: {untied_lm_loss_message(model.config)}")
    without_attention_maps(model.config, config.init_from)
    model.config.pad_token_id = tokenizer.pad_token_id  # the heads find the extract token as the last non-pad one
    if model.config.n_positions < config.block_size:
        raise UserError(f"block_size={config.block_size} exceeds n_positions={model.config.n_positions} of "
                        f"init_from={config.init_from}; lower block_size")
    if len(tokenizer) > model.config.vocab_size:
        model.resize_token_embeddings(len(tokenizer))  # new rows start at the mean of the old ones (transformers)
    return model


def _head_class(task: TaskSection):
    from hf_gpt_custom import GPTCustomForMultipleChoice, GPTCustomForSequenceClassification

    return GPTCustomForMultipleChoice if task.is_multiple_choice else GPTCustomForSequenceClassification


def _weights_hold_a_head(folder: str) -> bool:
    """Whether a model folder's weights include a task head's (`score.weight`), whatever its config.json says."""
    import json

    from safetensors import safe_open

    index = Path(folder, "model.safetensors.index.json")
    if index.is_file():
        names = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    elif Path(folder, "model.safetensors").is_file():
        with safe_open(str(Path(folder, "model.safetensors")), framework="pt") as weights:
            names = list(weights.keys())
    else:
        return False  # another format (a converted transformers folder): load_model_folder names any problem
    return "score.weight" in names


def saved_head(folder: str, task: TaskSection) -> str | None:
    """The task head class a fine-tuned folder holds (None for a pre-trained causal LM); one of another kind than
    `task` needs is refused."""
    from hf_gpt_custom.model_folder import saved_task_head_class

    head_class = saved_task_head_class(folder)
    head = head_class.__name__ if head_class is not None else None
    needed = _head_class(task).__name__
    if head is not None and head != needed:
        raise UserError(f"init_from={folder} holds a fine-tuned {head}, but task.format={task.format} needs a "
                        f"{needed}; start from the pre-trained causal-LM folder instead")
    return head


def _check_head_fits(model_config, task: TaskSection, folder: str) -> None:
    if task.is_multiple_choice:
        if model_config.max_choices is not None and len(task.choice_columns) > model_config.max_choices:
            raise UserError(f"the task has {len(task.choice_columns)} answers per example but init_from={folder} was "
                            f"configured for at most max_choices={model_config.max_choices}; start from the "
                            f"pre-trained causal-LM folder, or drop answers")
        return
    saved_labels = [model_config.id2label[i] for i in sorted(model_config.id2label)]
    if saved_labels != list(task.labels):
        raise UserError(f"init_from={folder} classifies into {saved_labels}, the task into {list(task.labels)}; "
                        f"use the same task.labels, or start from the pre-trained causal-LM folder")
