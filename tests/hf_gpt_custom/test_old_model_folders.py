"""Folders saved by older releases, read by today's code: the same numbers, or a refusal naming the problem.

Each test writes the old format's files directly (config.json keys as the older code wrote them)."""

import json
import logging
import warnings

import pytest
import torch

from hf_gpt_custom import GPTCustomConfig
from hf_gpt_custom.errors import UserError
from hf_gpt_custom.heads_gpt_custom import GPTCustomForMultipleChoice, GPTCustomForSequenceClassification

TINY = dict(vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2,
            pad_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def _inputs(head_class):
    ids = torch.randint(3, 97, (2, 12), generator=torch.Generator().manual_seed(5))
    if head_class is GPTCustomForMultipleChoice:
        return dict(input_ids=torch.stack([ids, ids.flip(0)]), labels=torch.tensor([0, 1]))
    return dict(input_ids=ids, labels=torch.tensor([0, 2]))


@pytest.mark.parametrize("head_class", [GPTCustomForSequenceClassification, GPTCustomForMultipleChoice])
def test_a_head_folder_whose_config_sets_lm_loss_weight_is_not_silently_trained_without_it(tmp_path, caplog,
                                                                                          head_class):
    """From dc4d996 to 311d88f (2026-11-25) GPT-1's auxiliary LM loss weight was a config field: save_pretrained wrote
    "lm_loss_weight": 0.5 into config.json and every forward with labels returned task_loss + 0.5 * lm_loss (e81a9d6:
    4.59 on this kind of input where the task loss alone is 1.74). Today the weight is a forward argument defaulting
    to 0, and the key in an old config.json is kept as an attribute nobody reads: Trainer or a user's loop continuing
    that fine-tuning optimises another loss, without a word. Expected: the old weight is honoured, or loading names
    lm_loss_weight (refusal or warning with the fix: pass lm_loss_weight=... to forward / task.lm_loss_weight)."""
    model = head_class(GPTCustomConfig(**TINY, num_labels=3)).eval()
    model.save_pretrained(tmp_path)
    config_file = tmp_path / "config.json"
    saved = json.loads(config_file.read_text())
    saved["lm_loss_weight"] = 0.5  # as the config of dc4d996..311d88f saved it
    config_file.write_text(json.dumps(saved))

    caplog.set_level(logging.WARNING)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            loaded = head_class.from_pretrained(tmp_path).eval()
        except UserError as err:
            assert "lm_loss_weight" in str(err)
            return
    said = caplog.text + " ".join(str(w.message) for w in caught)
    if "lm_loss_weight" in said:
        return  # named on load: not silent
    inputs = _inputs(head_class)
    with torch.no_grad():
        old_loss = loaded(**inputs, lm_loss_weight=0.5).loss  # what the code that saved the folder computed
        loss = loaded(**inputs).loss
    assert old_loss > loss + 0.1  # the auxiliary term is not negligible here
    torch.testing.assert_close(loss, old_loss)
