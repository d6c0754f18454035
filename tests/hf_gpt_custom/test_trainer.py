"""transformers' Trainer on our classes gives what it gives transformers' GPT-2 classes with the same weights: where
Trainer decides by class name (label smoothing), and where it trusts the model's loss under gradient accumulation."""

import pytest
import torch
from torch.utils.data import Dataset
from transformers import (
    GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments,
)

from hf_gpt_custom import GPTCustomForCausalLM, GPTCustomForSequenceClassification
from hf_gpt_custom.convert_gpt2 import from_gpt2_model
from tests.helpers import row_position_ids

PAD = 96


class _Rows(Dataset):
    """24 rows of 3..19 ids, each with a float target and 3 multi-label targets."""

    def __init__(self):
        g = torch.Generator().manual_seed(1)
        self.rows = [torch.randint(1, PAD, (int(torch.randint(3, 20, (1,), generator=g)),), generator=g)
                     for _ in range(24)]
        self.targets = [torch.randn(1, generator=g) for _ in range(24)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i], "target": self.targets[i]}


def _causal_lm_batch(items):
    """Right-padded, padding labelled -100."""
    width = max(len(item["input_ids"]) for item in items)
    ids = torch.full((len(items), width), PAD)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    for row, item in enumerate(items):
        ids[row, :len(item["input_ids"])] = item["input_ids"]
        mask[row, :len(item["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def _regression_batch(items):
    batch = _causal_lm_batch(items)
    batch["labels"] = torch.cat([item["target"] for item in items])
    return batch


class _Losses(TrainerCallback):
    def __init__(self):
        self.losses = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])


def _train(model, tmp_path, collate, **arguments) -> list[float]:
    losses = _Losses()
    args = TrainingArguments(str(tmp_path), report_to="none", use_cpu=True, seed=0, save_strategy="no",
                             logging_steps=1, lr_scheduler_type="constant", disable_tqdm=True,
                             remove_unused_columns=False, **arguments)  # the collators read "target"
    Trainer(model=model, args=args, train_dataset=_Rows(), data_collator=collate, callbacks=[losses]).train()
    return losses.losses


def _gpt2_pair(gpt2_class, ours_class, **fields):
    torch.manual_seed(0)
    gpt2 = gpt2_class(GPT2Config(vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=0,
                                 eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **fields))
    return from_gpt2_model(gpt2, ours_class), gpt2


def test_label_smoothing_scores_each_position_against_the_next_token_as_for_gpt2(tmp_path):
    """Trainer shifts the labels for label_smoothing_factor only for class names in transformers' causal-LM table,
    which AutoModelForCausalLM.register does not fill: each position was scored against its own input token (4.92
    against GPT-2's 4.54 on the first step) and 60 steps taught the model to copy its input. Reference: GPT-2 with
    the same weights (its loss_type set, so that Trainer counts tokens alike)."""
    ours, gpt2 = _gpt2_pair(GPT2LMHeadModel, GPTCustomForCausalLM)
    gpt2.loss_type = "ForCausalLM"
    settings = {"per_device_train_batch_size": 4, "max_steps": 3, "learning_rate": 1e-2, "label_smoothing_factor": 0.1}
    got = _train(ours, tmp_path / "ours", _causal_lm_batch, **settings)
    want = _train(gpt2, tmp_path / "gpt2", _causal_lm_batch, **settings)
    assert got == pytest.approx(want, abs=2e-4)


def test_regression_under_gradient_accumulation_takes_the_whole_batch_step(tmp_path):
    """Trainer sums the micro-batches' losses without dividing by their number when the model takes
    num_items_in_batch; transformers' regression loss ignored it (a micro-batch mean), so accumulating 2 micro-batches
    of 2 took twice the step of one batch of 4 (GPT-2's head does the same). Plain SGD, no clipping: the step is the
    gradient itself. Reference: the one batch of 4, through transformers' own MSE."""
    def trained(accumulation, batch_size, folder):
        model, _ = _gpt2_pair(GPT2ForSequenceClassification, GPTCustomForSequenceClassification, num_labels=1,
                              pad_token_id=PAD, problem_type="regression")
        _train(model, folder, _regression_batch, per_device_train_batch_size=batch_size,
               gradient_accumulation_steps=accumulation, max_steps=1, learning_rate=0.5, optim="sgd",
               max_grad_norm=0.0)
        return model.state_dict()

    whole, accumulated = trained(1, 4, tmp_path / "whole"), trained(2, 2, tmp_path / "accumulated")
    for name, value in whole.items():
        torch.testing.assert_close(accumulated[name], value, rtol=1e-4, atol=1e-6, msg=name)



def _left_padded_causal_lm_batch(items):
    """Left-padded, padding labelled -100 (DataCollatorForLanguageModeling with a tokenizer that pads on the left,
    as an export's does), with the positions each row has alone, for GPT-2 (ours derives them from the mask)."""
    width = max(len(item["input_ids"]) for item in items)
    ids = torch.full((len(items), width), PAD)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    for row, item in enumerate(items):
        ids[row, width - len(item["input_ids"]):] = item["input_ids"]
        mask[row, width - len(item["input_ids"]):] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100),
            "position_ids": row_position_ids(mask)}


@pytest.mark.parametrize("accumulation", [1, 2])
def test_left_padded_causal_lm_training_and_eval_loss_equal_gpt2s_under_trainer(tmp_path, accumulation):
    """Trainer divides by its own count of the labels (num_items_in_batch); the pad column's prediction of each row's
    first token, left out outside Trainer, was left out of the sum but not of that count: the logged loss, eval_loss
    and gradient came out smaller (5.408 vs 5.538 at step 1 in the Trainer hunt). Reference: GPT2LMHeadModel with the
    same weights and batches, given the positions our model derives, step by step."""
    ours, gpt2 = _gpt2_pair(GPT2LMHeadModel, GPTCustomForCausalLM)
    # Trainer counts a causal LM's labels from the second column on only when the model's loss_type names the
    # causal-LM loss; GPT2LMHeadModel's is None (its class name lacks "ForCausalLM"), so Trainer also counts each
    # unpadded row's first label, which no position predicts. Ours is counted as a causal LM; so is the reference here.
    gpt2.loss_type = "ForCausalLM"

    def without_positions(items):  # ours derives them; passing them would change nothing
        batch = _left_padded_causal_lm_batch(items)
        del batch["position_ids"]
        return batch

    arguments = dict(per_device_train_batch_size=4, gradient_accumulation_steps=accumulation, max_steps=3,
                     learning_rate=1e-2, optim="sgd")
    torch.testing.assert_close(_train(ours, tmp_path / "ours", without_positions, **arguments),
                               _train(gpt2, tmp_path / "gpt2", _left_padded_causal_lm_batch, **arguments),
                               rtol=1e-4, atol=1e-5)
    evaluation = {}
    for name, model, collate in (("ours", ours, without_positions), ("gpt2", gpt2, _left_padded_causal_lm_batch)):
        args = TrainingArguments(str(tmp_path / f"eval_{name}"), report_to="none", use_cpu=True,
                                 per_device_eval_batch_size=8, remove_unused_columns=False, disable_tqdm=True)
        evaluation[name] = Trainer(model=model, args=args, eval_dataset=_Rows(), data_collator=collate).evaluate()
    assert evaluation["ours"]["eval_loss"] == pytest.approx(evaluation["gpt2"]["eval_loss"], rel=1e-5)


def test_the_documented_decay_rule_leaves_rmsnorm_out_of_weight_decay_as_trainer_does_for_llama(tmp_path):
    """Trainer decides weight decay by nn.LayerNorm type and 'norm' in a name; our RMSNorm is neither (ln_1, ln_2,
    ln_f), so Trainer decays it where LlamaForCausalLM's is left out. docs/model.md gives the override; with it the
    decayed weights are LlamaForCausalLM's under Trainer's own rule (compared as a sum of squares: ours fuses q, k
    and v into one matrix)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from hf_gpt_custom.convert_llama import from_llama_model

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, max_position_embeddings=32))
    ours = from_llama_model(llama, GPTCustomForCausalLM)
    args = TrainingArguments(tmp_path, report_to=[], use_cpu=True)

    class MatrixDecayTrainer(Trainer):  # as docs/model.md gives it
        def get_decay_parameter_names(self, model):
            return [name for name, parameter in model.named_parameters() if parameter.dim() >= 2]

    def decayed(trainer, model):
        names = set(trainer.get_decay_parameter_names(model))
        return sum(p.double().square().sum().item() for n, p in model.named_parameters() if n in names)

    reference = decayed(Trainer(model=llama, args=args), llama)
    assert decayed(MatrixDecayTrainer(model=ours, args=args), ours) == pytest.approx(reference, rel=1e-12)
    # the stock rule also decays 2 layers x 2 norms + the final norm, each 32 ones (the documented difference)
    assert decayed(Trainer(model=ours, args=args), ours) == pytest.approx(reference + 5 * 32, rel=1e-12)
