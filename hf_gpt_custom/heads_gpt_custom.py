"""Task heads on GPTCustomModel, as transformers' gpt2 file has them: sequence and token classification, extractive
question answering, multiple choice. The classification and multiple-choice heads read a sequence at its last real
token (GPT-1's extract token, GPT2ForSequenceClassification's pooling). Their `loss` is the task's; fine-tuning may
add GPT-1's auxiliary language-modelling loss with the forward argument `lm_loss_weight` (L3 = L2 + λ·L1).
Shipped beside modeling_gpt_custom.py, so a head loads with trust_remote_code where the package is absent.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.cache_utils import Cache
from transformers.loss.loss_utils import fixed_cross_entropy
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutputWithPast,
    TokenClassifierOutput,
)
from transformers.utils import can_return_tuple, logging

from .configuration_gpt_custom import GPTCustomConfig
from .errors import UserError
from .model_inputs import checks_values
from .modeling_gpt_custom import GPTCustomModel, GPTCustomPreTrainedModel
from .transformers_compat import accepts_cache_kwarg, cache_kwarg, output_cache

logger = logging.get_logger(__name__)


def last_non_padding_index(
    input_ids: torch.Tensor | None, pad_token_id: int | None, rows: int, attention_mask: torch.Tensor | None = None,
    seq_len: int | None = None,
) -> torch.Tensor | int:
    """Position of each row's last token that is not `pad_token_id`, exactly as GPT2ForSequenceClassification finds it.

    The rightmost non-pad position, so left and right padding both work: with pad 0, row [0, 0, 5, 7] gives 3 and
    row [5, 7, 0, 0] gives 1. Without a pad_token_id, GPT-2 refuses a batch of several rows, and with inputs_embeds
    it reads every row at its last position; we read the padding from `attention_mask` instead when there is one. A
    single row without either is read at position -1.

    With both, a position must be unmasked too: a row holding only pad ids (pad = eos, a text of `<|endoftext|>`) has
    no such token, and GPT-2 then reads its position 0, which is the row's first token alone or right-padded, but a
    pad under left padding (an export's tokenizer pads left): such a row is read at its first unmasked position, as
    it is alone. A row padded with another id than pad_token_id is read at its last unmasked token too. Otherwise, and
    wherever the mask marks the padding GPT-2 finds by its id, the position is GPT-2's.

    The mask read is (batch, seq): with a cache it also covers the cached columns, and its last `seq_len` columns are
    the input's (`seq_len`, the input's length, defaults to input_ids'). A 4-D mask says which keys each query sees,
    not which tokens are padding: it is left out, as GPT-2 leaves every mask out.
    """
    if attention_mask is not None:
        if attention_mask.dim() == 2:
            attention_mask = attention_mask[:, -(seq_len if seq_len is not None else input_ids.shape[-1]):]
        else:
            attention_mask = None
    if input_ids is not None and pad_token_id is not None:
        is_real_token = input_ids != pad_token_id
        if attention_mask is not None:
            unmasked = attention_mask.bool()
            is_real_token = is_real_token & unmasked
            positions = torch.arange(input_ids.shape[-1], device=input_ids.device, dtype=torch.int32)
            last_real = (positions * is_real_token.to(torch.int32)).argmax(-1)
            return torch.where(is_real_token.any(-1), last_real, unmasked.to(torch.int32).argmax(-1))
        is_real_token = is_real_token.to(torch.int32)
    elif attention_mask is not None:  # no pad id to look for, or no ids to look in: the mask says where padding is
        is_real_token = attention_mask.bool().to(torch.int32)  # any non-zero value is a real token, as in attention
    elif pad_token_id is None:
        if rows != 1:
            raise UserError(
                f"config.pad_token_id is not set, so the last real token of each of the {rows} rows cannot be found; "
                "set model.config.pad_token_id to the tokenizer's pad_token_id, pass a (batch, seq) attention_mask, "
                "or pass one row at a time"
            )
        return -1
    else:
        logger.warning_once("padding cannot be detected in inputs_embeds without a (batch, seq) attention_mask; every "
                            "row is read at its last position")
        return -1
    positions = torch.arange(is_real_token.shape[-1], device=is_real_token.device, dtype=torch.int32)
    return (positions * is_real_token).argmax(-1)  # (rows,)


def checked_mc_token_ids(mc_token_ids: torch.Tensor, batch: int, n_choices: int, seq_len: int) -> torch.Tensor:
    """`mc_token_ids` as the multiple-choice head reads it, or a UserError naming what is wrong: shape and dtype
    always, the range where input values are read (model_inputs.checks_values)."""
    if mc_token_ids.dtype.is_floating_point or mc_token_ids.dtype == torch.bool or \
            tuple(mc_token_ids.shape) != (batch, n_choices):
        raise UserError(f"mc_token_ids must hold one integer position per choice, shape (batch, n_choices) = "
                        f"{(batch, n_choices)}; got {mc_token_ids.dtype} of shape {tuple(mc_token_ids.shape)}")
    if checks_values(mc_token_ids):
        lowest, highest = (int(value) for value in torch.aminmax(mc_token_ids))
        if lowest < 0 or highest >= seq_len:
            raise UserError(f"mc_token_ids holds position {lowest if lowest < 0 else highest}, outside the "
                            f"{seq_len} positions of each choice (0..{seq_len - 1})")
    return mc_token_ids


def check_class_labels(name: str, labels: torch.Tensor, num_classes: int, ignore_index: int | None = None) -> None:
    """Raise a UserError naming a label outside 0..num_classes-1 (or `ignore_index`) before it reaches the loss,
    where it would be a CUDA assert or a silently wrong loss. The dtype always; the values only where reading them
    costs no device sync (model_inputs.checks_values: the CPU, not while compiling)."""
    if labels.dtype not in (torch.long, torch.uint8):  # what cross_entropy takes: int32 failed deep in torch
        raise UserError(f"{name} must hold class indices as torch.long, got dtype {labels.dtype}; convert with .long()")
    if labels.numel() == 0 or not checks_values(labels):
        return
    kept = labels[labels != ignore_index] if ignore_index is not None else labels.flatten()
    invalid = kept[(kept < 0) | (kept >= num_classes)]
    if invalid.numel():
        allowed = f" (or {ignore_index} to ignore a position)" if ignore_index is not None else ""
        raise UserError(
            f"{name} holds {int(invalid[0])} but there are {num_classes} classes; labels must be "
            f"0..{num_classes - 1}{allowed} (check num_labels / the number of choices)"
        )


def check_answer_positions(name: str, positions, batch_size: int) -> None:
    """Raise a UserError for QA answer positions the loss would refuse from deep inside torch or Python: a list, int32
    (torch.from_numpy of an int32 array), floats, or another batch size. Positions past the input stay allowed: as in
    transformers, the loss ignores them (an answer truncated away)."""
    if not isinstance(positions, torch.Tensor):
        raise UserError(f"{name} must be a tensor of token positions, got {type(positions).__name__}; pass "
                        f"torch.tensor({name}) (shape (batch,))")
    if positions.dtype != torch.long:
        raise UserError(f"{name} must hold token positions as torch.long, got dtype {positions.dtype}; convert "
                        "with .long()")
    if tuple(positions.shape) not in ((batch_size,), (batch_size, 1)):  # (batch, 1): squeezed by the loss
        raise UserError(f"{name} has shape {tuple(positions.shape)} but the batch has {batch_size} rows; give one "
                        "position per row, shape (batch,)")


def _real_columns_only(start_logits, end_logits, start_positions, end_positions, attention_mask):
    """The QA loss's arguments with the padding taken out of each row's softmax: pad columns' logits at the dtype's
    minimum, except a pad column a position labels. transformers' run_qa.py labels an unanswerable example with its
    first bos token, which is the first pad column where pad = bos (GPT-2's tokenizers, ours): ignoring that label
    left every unanswerable example untrained, and a batch of them with a nan loss (roundreview30). On the device,
    with no host read; a mask other than (batch, seq) of 0/1 is left to the model as given."""
    if attention_mask is None or attention_mask.dim() != 2 or attention_mask.shape != start_logits.shape:
        return start_logits, end_logits, start_positions, end_positions
    padding = attention_mask == 0
    seq_len = start_logits.shape[1]
    columns = torch.arange(seq_len, device=start_logits.device)

    def real_or_labelled(logits, positions):
        positions = positions.view(-1).clamp(0, seq_len)  # transformers' clamp: seq_len (past the end) is ignored
        labelled = columns[None, :] == positions[:, None]
        return logits.masked_fill(padding & ~labelled, torch.finfo(logits.dtype).min), positions

    (start_logits, start_positions), (end_logits, end_positions) = (
        real_or_labelled(start_logits, start_positions), real_or_labelled(end_logits, end_positions))
    return start_logits, end_logits, start_positions, end_positions


def check_sequence_labels(labels: torch.Tensor, pooled_logits: torch.Tensor, config: GPTCustomConfig) -> None:
    """Raise a UserError for sequence-classification labels whose shape or dtype the loss would broadcast or refuse
    from deep inside torch, before transformers' loss sets config.problem_type from them (a failed call left it set
    for good: uint8 class indices made the model multi-label, and every later call failed). Regression targets of
    another shape than the logits were broadcast by MSELoss into a loss of every example against every target, in
    silence (GPT-2's head does the same). Shapes and dtypes only, so nothing syncs with the device; class-index values
    as check_class_labels reads them."""
    rows, num_labels = pooled_logits.shape
    problem = config.problem_type
    inferred = problem is None
    if inferred:  # transformers' rule (loss_utils.ForSequenceClassificationLoss), read without setting it
        problem = ("regression" if num_labels == 1 else "single_label_classification"
                   if labels.dtype in (torch.long, torch.int) else "multi_label_classification")
    told = (f"; problem_type is unset, so it was read from the labels as {problem!r} (integer class indices: "
            "torch.long; set config.problem_type to say which)") if inferred else ""
    if problem == "single_label_classification":
        if labels.numel() != rows:
            raise UserError(f"labels of shape {tuple(labels.shape)} for {rows} examples: single-label classification "
                            f"takes one class index per example, shape ({rows},){told}")
        check_class_labels("labels", labels, num_labels, ignore_index=-100)  # -100: skipped, as GPT-2
        return
    expected = (rows,) if problem == "regression" and num_labels == 1 else (rows, num_labels)
    fits = labels.numel() == rows if expected == (rows,) else tuple(labels.shape) == expected
    what = "one target per example" if expected == (rows,) else f"num_labels={num_labels} targets per example"
    if not fits:
        hint = (" (for class indices, convert them with .long())"
                if inferred and labels.dim() == 1 and num_labels > 1 else "")
        raise UserError(f"labels of shape {tuple(labels.shape)} for {problem} with {what}: expected shape "
                        f"{expected}{hint}{told}")
    if problem == "multi_label_classification" and not labels.dtype.is_floating_point:  # BCE takes float targets
        raise UserError(f"{problem} labels must be floats, got dtype {labels.dtype}; convert with .float(){told}")


def untied_lm_loss_message(config: GPTCustomConfig) -> str:
    return (
        "lm_loss_weight > 0 (GPT-1's auxiliary LM loss) needs the LM head tied to the token embedding, and this model's "
        "is untied (tie_word_embeddings=False, as LLaMA's); a task head keeps no separate LM head, so that loss cannot "
        "be computed right. Use lm_loss_weight=0 (finetune: task.lm_loss_weight=0)"
    )


def _tuple_without_loss_parts(output) -> tuple:
    """The output as a tuple (return_dict=False, `output[i]`) without task_loss and lm_loss, the loss's parts: GPT-2's
    own head's tuple, so that out[-1] is still the attentions and a 5-way unpacking still unpacks (the parts stay
    attributes of the returned object)."""
    return tuple(output[key] for key in output.keys() if key not in ("task_loss", "lm_loss"))


@dataclass
class GPTCustomSequenceClassifierOutput(SequenceClassifierOutputWithPast):
    """`loss` = task_loss + lm_loss_weight · lm_loss (GPT-1's L3 = L2 + λ·L1); the parts are kept for logging."""

    task_loss: torch.FloatTensor | None = None
    lm_loss: torch.FloatTensor | None = None

    to_tuple = _tuple_without_loss_parts


@dataclass
class GPTCustomMultipleChoiceOutput(MultipleChoiceModelOutput):
    """`loss` = task_loss + lm_loss_weight · lm_loss (GPT-1's L3 = L2 + λ·L1); the parts are kept for logging."""

    task_loss: torch.FloatTensor | None = None
    lm_loss: torch.FloatTensor | None = None

    to_tuple = _tuple_without_loss_parts


class GPTCustomTaskHeadModel(GPTCustomPreTrainedModel):
    """What the task heads share: the body as `self.transformer` and GPT-1's auxiliary LM loss. (Loading a folder
    saved from another head is refused in GPTCustomPreTrainedModel.from_pretrained.)"""

    def add_lm_loss(
        self,
        task_loss: torch.Tensor | None,
        hidden_states: torch.Tensor,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        lm_loss_weight: float,
        examples: int | torch.Tensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        scored_rows: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(task_loss + λ·lm_loss, lm_loss), GPT-1's L3 = L2 + λ·L1 with λ = lm_loss_weight (0, or no task loss:
        (task_loss, None)).

        L1 is the next-token loss on the head's own inputs (hidden_states: (rows, seq, n_embd), input_ids: (rows,
        seq)) through the LM head tied to the token embedding, over the real tokens only (`lm_nats`): the same
        rows give the same L1 padded on either side or not at all. It is the mean over rows of each row's loss per
        token (a row with nothing to predict adds 0), so it splits by example exactly as the task loss does: k
        micro-batches accumulated give the whole batch's L1, in this project's loop and in Trainer's. (Pooled over
        the batch's tokens, as GPT2DoubleHeadsModel pools them, a micro-batch of short rows weighed as much as one
        of long rows, and accumulation changed the gradient by a quarter.) Refused for an untied body.

        Under gradient accumulation transformers' Trainer passes `num_items_in_batch` (the examples of all the
        micro-batches): the task loss is then a sum over this micro-batch's `examples` divided by it, so λ·L1 is
        weighted as this micro-batch's share too (examples / num_items_in_batch). Without that, λ acted as k·λ over
        k micro-batches. Regression and multi-label count label elements (rows × labels), as Trainer does; a task
        loss with no count (examples=None) keeps λ·L1 a mean too. The returned lm_loss is the micro-batch's L1.

        `scored_rows` (rows,), bool: the rows whose example counts. A row labelled -100 is skipped by the task loss
        (as GPT-2 skips it) and so by L1 too, and `examples` counts only the others, as Trainer's num_items_in_batch
        does; else λ·L1 over all rows, divided by the labelled count, weighed λ as λ·rows/labelled.
        """
        if task_loss is None or lm_loss_weight == 0:
            return task_loss, None
        if input_ids is None:
            raise UserError("lm_loss_weight > 0 needs input_ids (the LM loss predicts them); pass input_ids, not inputs_embeds")
        nats, targets = self.lm_nats(hidden_states, input_ids, attention_mask)
        row_losses = nats / targets.clamp_min(1)  # each row's loss per token, averaged over the (scored) rows
        lm_loss = row_losses.mean() if scored_rows is None else \
            (row_losses * scored_rows).sum() / scored_rows.sum().clamp_min(1)
        share = 1.0 if num_items_in_batch is None or examples is None else examples / num_items_in_batch
        return task_loss + lm_loss_weight * share * lm_loss, lm_loss


    def lm_nats(self, hidden_states: torch.Tensor, input_ids: torch.Tensor,
                attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(nats, targets), each (rows,): the LM loss summed over each row's scored tokens, and their number. Scored:
        every real token predicted from a real token, so neither a pad's own prediction nor a left-padded row's last
        pad predicting its first token counts (lm_targets). Through the LM head tied to the token embedding (its
        padded vocabulary rows left out); refused for an untied body."""
        if not self.config.tie_word_embeddings:
            # An untied body (LLaMA) predicts through an lm_head of its own, which a task head does not keep: the
            # token embedding in its place would be a matrix never trained as an output layer, a wrong loss.
            raise UserError(untied_lm_loss_message(self.config))
        targets = lm_targets(input_ids, attention_mask, self.config.pad_token_id)
        weight = self.transformer.wte.weight[: self.config.vocab_size]
        lm_logits = F.linear(hidden_states.to(weight.dtype), weight)  # called outside autocast too (evaluation)
        nats = F.cross_entropy(lm_logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100,
                               reduction="none").view(targets.shape).sum(-1)
        return nats, (targets != -100).sum(-1)


def lm_targets(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, pad_token_id: int | None) -> torch.Tensor:
    """(rows, seq): the id each position's output is scored on by the LM loss (the next token), -100 where that token
    or the position predicting it is padding. Without attention_mask a row is real up to its last non-pad token, as
    the heads read it (last_non_padding_index): masking every pad id would also drop a real eos when pad = eos."""
    if attention_mask is not None and attention_mask.dim() != 2:
        raise UserError(f"lm_loss_weight > 0 reads each row's padding from a (batch, seq) attention_mask; got a mask "
                        f"of shape {tuple(attention_mask.shape)}: pass the 2-D mask, or lm_loss_weight=0")
    if attention_mask is not None:
        real = attention_mask[:, -input_ids.shape[-1]:].bool()  # with a cache it also covers the cached columns
    elif pad_token_id is not None:
        last = last_non_padding_index(input_ids, pad_token_id, input_ids.shape[0])
        real = torch.arange(input_ids.shape[-1], device=input_ids.device) <= last.unsqueeze(-1)
    else:
        real = torch.ones_like(input_ids, dtype=torch.bool)
    targets = input_ids[..., 1:].masked_fill(~(real[..., 1:] & real[..., :-1]), -100)
    return F.pad(targets, (0, 1), value=-100)


class GPTCustomForSequenceClassification(GPTCustomTaskHeadModel):
    """A linear score on the last non-padding token; regression, single- or multi-label by `config.problem_type`
    (inferred from num_labels and the labels' dtype when unset, as transformers does)."""

    def __init__(self, config: GPTCustomConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.transformer = GPTCustomModel(config)
        self.score = nn.Linear(config.n_embd, self.num_labels, bias=False)  # no bias, as GPT2ForSequenceClassification
        self.post_init()

    @accepts_cache_kwarg
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        lm_loss_weight: float = 0.0,
        **kwargs,
    ) -> GPTCustomSequenceClassifierOutput:
        """`labels`: (batch,) class indices, (batch, num_labels) floats for multi-label, (batch,) floats for
        regression. `lm_loss_weight` λ >= 0 adds λ × the LM loss on input_ids to `loss` (GPT-1 trained with 0.5)."""
        outputs: BaseModelOutputWithPast = self.transformer(
            input_ids, attention_mask=attention_mask, position_ids=position_ids, past_key_values=past_key_values,
            inputs_embeds=inputs_embeds, use_cache=use_cache, return_dict=True, **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        rows = hidden_states.shape[0]
        last = last_non_padding_index(input_ids, self.config.pad_token_id, rows, attention_mask,
                                      seq_len=hidden_states.shape[1])
        pooled_logits = self.score(hidden_states[torch.arange(rows, device=hidden_states.device), last])

        task_loss = None
        if labels is not None:
            check_sequence_labels(labels, pooled_logits, self.config)  # before the loss sets config.problem_type
            task_loss = self.loss_function(labels=labels, pooled_logits=pooled_logits, config=self.config, **kwargs)
        # Under gradient accumulation Trainer passes num_items_in_batch (its count of label elements over all the
        # micro-batches) and then sums the micro-batches' losses without dividing by their number. transformers' loss
        # divides by it for single-label classification only; a regression or multi-label loss stays a mean over
        # this micro-batch (as GPT-2's does), and k micro-batches gave k times the gradient. Here it becomes this
        # micro-batch's sum over that count (MSE and BCE average over label elements, as Trainer counts them).
        num_items = kwargs.get("num_items_in_batch")
        per_element = self.config.problem_type in ("regression", "multi_label_classification")
        if task_loss is not None and per_element and num_items is not None:
            task_loss = task_loss * labels.numel() / num_items
        per_item = self.config.problem_type == "single_label_classification"
        labelled = labels.view(-1) != -100 if per_item and labels is not None else None  # -100: the row is skipped
        examples = labelled.sum() if labelled is not None else \
            labels.numel() if per_element and labels is not None else None
        loss, lm_loss = self.add_lm_loss(task_loss, hidden_states, input_ids, attention_mask, lm_loss_weight,
                                         examples=examples, num_items_in_batch=num_items, scored_rows=labelled)
        return GPTCustomSequenceClassifierOutput(
            loss=loss,
            logits=pooled_logits,
            **cache_kwarg(output_cache(outputs)),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            task_loss=task_loss,
            lm_loss=lm_loss,
        )


class GPTCustomForTokenClassification(GPTCustomTaskHeadModel):
    """A linear classifier on every position (dropout before it, as GPT2ForTokenClassification); without a bias where
    config.token_classification_bias is False (a converted LlamaForTokenClassification's option)."""

    def __init__(self, config: GPTCustomConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.transformer = GPTCustomModel(config)
        classifier_dropout = getattr(config, "classifier_dropout", None)
        self.dropout = nn.Dropout(0.1 if classifier_dropout is None else classifier_dropout)  # GPT-2's default
        self.classifier = nn.Linear(config.n_embd, self.num_labels,
                                    bias=getattr(config, "token_classification_bias", True))
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        """`labels`: (batch, seq) class indices, -100 where a position has no label (padding, sub-word pieces)."""
        kwargs.pop("use_cache", None)  # no cache to return (a loop's use_cache= was a TypeError: the heads3 hunt)
        outputs: BaseModelOutputWithPast = self.transformer(
            input_ids, attention_mask=attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds,
            use_cache=False, return_dict=True, **kwargs,
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))  # (batch, seq, num_labels)
        loss = None
        if labels is not None:
            check_class_labels("labels", labels, self.num_labels, ignore_index=-100)
            if labels.shape != logits.shape[:2]:  # flattened by the loss: a (seq, batch) layout scored other tokens
                raise UserError(f"labels has shape {tuple(labels.shape)} but the input has {tuple(logits.shape[:2])} "
                                "(batch, seq_len); give one label per token, -100 where a token has none")
            loss = self.loss_function(logits, labels, config=self.config, **kwargs)
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class GPTCustomForQuestionAnswering(GPTCustomTaskHeadModel):
    """Extractive QA: a start and an end score per position, as GPT2ForQuestionAnswering."""

    def __init__(self, config: GPTCustomConfig):
        super().__init__(config)
        self.transformer = GPTCustomModel(config)
        self.qa_outputs = nn.Linear(config.n_embd, 2)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        **kwargs,
    ) -> QuestionAnsweringModelOutput:
        """`start_positions`/`end_positions`: (batch,) token positions of the answer span. As in transformers, a
        position outside the input (e.g. the answer was truncated away) is ignored by the loss, not an error. The
        loss's softmax runs over each row's real columns, and a padding column a position labels (run_qa.py's
        no-answer label where pad = bos): GPT2ForQuestionAnswering's runs over every pad column, so its loss moved
        with the padding side and the batch's width (1.91 left, 1.91 right, 2.43 at width 12 for rows whose loss
        alone is 1.32: the heads3 hunt). The logits returned are GPT-2's."""
        kwargs.pop("use_cache", None)  # no cache to return, as GPT2ForQuestionAnswering takes the argument
        outputs: BaseModelOutputWithPast = self.transformer(
            input_ids, attention_mask=attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds,
            use_cache=False, return_dict=True, **kwargs,
        )
        logits = self.qa_outputs(outputs.last_hidden_state)  # (batch, seq, 2)
        start_logits, end_logits = (part.squeeze(-1).contiguous() for part in logits.split(1, dim=-1))
        loss = None
        if start_positions is not None and end_positions is not None:
            for name, positions in (("start_positions", start_positions), ("end_positions", end_positions)):
                check_answer_positions(name, positions, batch_size=start_logits.shape[0])
            loss = self.loss_function(*_real_columns_only(start_logits, end_logits, start_positions, end_positions,
                                                          attention_mask), **kwargs)
        return QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class GPTCustomForMultipleChoice(GPTCustomTaskHeadModel):
    """GPT-1's multiple choice: each (context + answer) sequence read at its last real token, one linear score per
    choice, softmax over the choices. Inputs are (batch, n_choices, seq); logits (batch, n_choices)."""

    def __init__(self, config: GPTCustomConfig):
        super().__init__(config)
        self.transformer = GPTCustomModel(config)
        self.score = nn.Linear(config.n_embd, 1, bias=False)  # a bias would cancel in the softmax over choices
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        lm_loss_weight: float = 0.0,
        token_type_ids: torch.LongTensor | None = None,
        mc_token_ids: torch.LongTensor | None = None,
        **kwargs,
    ) -> GPTCustomMultipleChoiceOutput:
        """`labels`: (batch,) index of the right choice, -100 to skip an example. `lm_loss_weight` λ >= 0 adds λ × the
        LM loss over every choice's sequence to `loss` (GPT-1 trained with 0.5). `mc_token_ids`: (batch, n_choices),
        the position each choice is read at, as GPT2DoubleHeadsModel takes it (which converts to this head); by
        default each choice's last real token. `position_ids` may be one row for every choice, as in GPT-2."""
        if "mc_labels" in kwargs:  # GPT2DoubleHeadsModel's name; it was swallowed by **kwargs and no loss came back
            raise UserError("mc_labels is GPT2DoubleHeadsModel's name for the right choice; pass it as labels= (this "
                            "head's loss is the choice's; its LM loss comes with lm_loss_weight=)")
        shaped = input_ids if input_ids is not None else inputs_embeds
        if shaped is None or shaped.dim() != (3 if input_ids is not None else 4):
            shape = None if shaped is None else tuple(shaped.shape)
            raise UserError(
                f"multiple-choice input_ids must be (batch, n_choices, seq), got shape {shape}; stack each "
                "example's choices (padded to one length) along dimension 1"
            )
        batch, n_choices = shaped.shape[:2]
        for name, per_token in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if per_token is not None and tuple(per_token.shape) != tuple(shaped.shape[:3]):
                raise UserError(f"multiple-choice {name} must have the input's shape {tuple(shaped.shape[:3])} "
                                f"(batch, n_choices, seq), got {tuple(per_token.shape)}; pad each choice's {name} "
                                "with its input_ids")
        if self.config.max_choices is not None and n_choices > self.config.max_choices:
            raise UserError(
                f"the input has {n_choices} choices per example but the model was configured for at most "
                f"max_choices={self.config.max_choices}; drop choices or raise config.max_choices"
            )

        if position_ids is not None and position_ids.dim() < 3:
            # (seq,) or (1, seq): one row of positions for every choice, as GPT2DoubleHeadsModel broadcasts it. Only
            # those: expand() would also take a (batch, seq) tensor where batch == n_choices, one row per *choice*.
            one_row = position_ids.dim() == 1 or position_ids.dim() == 2 and position_ids.shape[0] == 1
            if not one_row or position_ids.shape[-1] != shaped.shape[2]:
                raise UserError(f"multiple-choice position_ids must be (batch, n_choices, seq) = "
                                f"{tuple(shaped.shape[:3])}, or one row of seq positions for all; got shape "
                                f"{tuple(position_ids.shape)}")
            position_ids = position_ids.reshape(-1).expand(*shaped.shape[:3])

        def flatten(tensor: torch.Tensor | None, trailing: int) -> torch.Tensor | None:  # (batch·n_choices, ...)
            return None if tensor is None else tensor.reshape(batch * n_choices, *tensor.shape[-trailing:])

        flat_ids, flat_mask = flatten(input_ids, 1), flatten(attention_mask, 1)
        kwargs.pop("use_cache", None)  # no cache to return, as GPT2DoubleHeadsModel takes the argument
        outputs: BaseModelOutputWithPast = self.transformer(
            flat_ids, attention_mask=flat_mask, position_ids=flatten(position_ids, 1),
            inputs_embeds=flatten(inputs_embeds, 2), token_type_ids=flatten(token_type_ids, 1), use_cache=False,
            return_dict=True, **kwargs,
        )
        hidden_states = outputs.last_hidden_state  # (batch·n_choices, seq, n_embd)
        rows = hidden_states.shape[0]
        if mc_token_ids is None:
            read_at = last_non_padding_index(flat_ids, self.config.pad_token_id, rows, flat_mask,
                                             seq_len=hidden_states.shape[1])
        else:
            read_at = checked_mc_token_ids(mc_token_ids, batch, n_choices, hidden_states.shape[1]).reshape(rows)
        pooled = hidden_states[torch.arange(rows, device=hidden_states.device), read_at]
        logits = self.score(pooled).view(batch, n_choices)

        task_loss = labelled = None
        if labels is not None:
            # -100: the example is skipped (GPT2DoubleHeadsModel's cross-entropy ignores it), by the LM loss too,
            # and Trainer leaves it out of num_items_in_batch, so `examples` counts only the others
            check_class_labels("labels", labels, n_choices, ignore_index=-100)
            labels = labels.view(-1).to(logits.device)
            task_loss = fixed_cross_entropy(logits, labels, **kwargs)
            labelled = labels != -100
        loss, lm_loss = self.add_lm_loss(
            task_loss, hidden_states, flat_ids, flat_mask, lm_loss_weight,
            examples=None if labelled is None else labelled.sum(), num_items_in_batch=kwargs.get("num_items_in_batch"),
            scored_rows=None if labelled is None else labelled.repeat_interleave(n_choices),
        )
        return GPTCustomMultipleChoiceOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            task_loss=task_loss,
            lm_loss=lm_loss,
        )


__all__ = [
    "GPTCustomForMultipleChoice",
    "GPTCustomForQuestionAnswering",
    "GPTCustomForSequenceClassification",
    "GPTCustomForTokenClassification",
    "GPTCustomTaskHeadModel",
]
