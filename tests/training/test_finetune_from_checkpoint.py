"""A fine-tuning run's checkpoint as the start of further fine-tuning (init_from=<checkpoint>, what the resume refusal
advises). Reference: transformers' own AutoModelForMultipleChoice and AutoTokenizer loading that checkpoint folder.
(Found by a kill-and-resume hunt over the multiple-choice format.)"""

from __future__ import annotations

import json
import random
import re
import shutil

import pytest
import torch

from tests.helpers import PAIR_WORDS


def _multiple_choice_data(path):
    """60 records: which of two words (a, b) is in the context."""
    rng = random.Random(1)
    rows = []
    for _ in range(60):
        context = rng.sample(PAIR_WORDS, 4)
        inside, outside = rng.choice(context), rng.choice([w for w in PAIR_WORDS if w not in context])
        label = rng.randint(0, 1)
        a, b = (inside, outside) if label == 0 else (outside, inside)
        rows.append({"ctx": " ".join(context), "a": a, "b": b, "label": label})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _config(run_dir, init_from, dataset, *overrides):
    from hf_gpt_custom.training.finetune_config import load_finetune_config

    return load_finetune_config(None, [
        f"init_from={init_from}", f"dataset={dataset}", f"out_dir={run_dir}", "run_name=ft", "block_size=32",
        "batch_size=4", "max_steps=3", "learning_rate=3e-3", "warmup_steps=1", "eval_interval=2",
        "checkpoint_interval=2", "keep_checkpoints=2", "val_fraction=0.25", "log_with=none", "seed=7",
        "task.format=multiple_choice", "task.text_columns=ctx", "task.choice_columns=a,b", *overrides,
    ])


@pytest.fixture
def checkpoint_of_a_finetuning_run(tmp_path, base_model_dir):
    from hf_gpt_custom.training.finetune import finetune

    data = _multiple_choice_data(tmp_path / "mc.jsonl")
    run_dir = finetune(_config(tmp_path / "run", base_model_dir, data))
    return run_dir / "checkpoints" / "step_000002", data


def test_a_finetuning_checkpoint_as_init_from_keeps_its_trained_head(tmp_path, checkpoint_of_a_finetuning_run):
    """A checkpoint is a model folder as final/ is: config.json names the head class it trained (it named the body's
    GPTCustomForCausalLM, so saved_head() took it for a pre-trained LM, dropped the trained score.weight and drew a
    random head, silently) and the tokenizer ships in it. Fine-tuning further from it starts from the head
    transformers' AutoModelForMultipleChoice loads from it, with the tokenizer AutoTokenizer loads."""
    from transformers import AutoModelForMultipleChoice, AutoTokenizer

    from hf_gpt_custom.training.finetune import FinetuneWorkload

    checkpoint, data = checkpoint_of_a_finetuning_run
    assert json.loads((checkpoint / "config.json").read_text())["architectures"] == ["GPTCustomForMultipleChoice"]
    final = checkpoint.parent.parent / "final"
    assert AutoTokenizer.from_pretrained(checkpoint).get_vocab() == AutoTokenizer.from_pretrained(final).get_vocab()
    reference = AutoModelForMultipleChoice.from_pretrained(checkpoint)
    model = FinetuneWorkload(_config(tmp_path / "further", checkpoint, data)).model
    assert type(model).__name__ == "GPTCustomForMultipleChoice"
    assert torch.equal(model.score.weight, reference.score.weight), "the trained head was replaced by a random one"


def test_the_resume_refusals_advice_to_finetune_from_the_checkpoint_works(tmp_path, checkpoint_of_a_finetuning_run,
                                                                         base_model_dir):
    """A changed setting under resume_from_checkpoint is refused with "start a new run from its weights ... with
    init_from=<checkpoint> run_name=<new name>" (check_resume_settings). For fine-tuning that command was refused in
    turn (a checkpoint held no tokenizer). The fix the one line names must work."""
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.training.finetune import FinetuneWorkload, finetune

    checkpoint, data = checkpoint_of_a_finetuning_run
    run_dir = checkpoint.parent.parent
    with pytest.raises(UserError) as refused:
        finetune(_config(run_dir, base_model_dir, data, "learning_rate=1e-3",
                         f"resume_from_checkpoint={checkpoint}"))
    advised = re.search(r"init_from=(\S+) (?:run_name|out_dir)=", str(refused.value))
    assert advised, str(refused.value)
    assert "out_dir=<new folder>" in str(refused.value)  # the config sets out_dir, which run_name would not move
    FinetuneWorkload(_config(tmp_path / "new", advised.group(1), data, "learning_rate=1e-3"))  # the advised start


def test_a_checkpoint_from_before_the_head_was_recorded_is_refused_not_given_a_random_head(
        tmp_path, checkpoint_of_a_finetuning_run):
    """A fine-tuning checkpoint written before checkpoints named their head class (config.json said
    GPTCustomForCausalLM) holds the trained score.weight all the same: as init_from it would load as a pre-trained
    model and lose its head silently. Refused in one line naming both ways out."""
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.training.finetune import FinetuneWorkload

    checkpoint, data = checkpoint_of_a_finetuning_run
    older = tmp_path / "older"
    shutil.copytree(checkpoint, older)
    config = json.loads((older / "config.json").read_text())
    config["architectures"] = ["GPTCustomForCausalLM"]
    (older / "config.json").write_text(json.dumps(config))
    (older / "manifest.json").unlink()  # (the edit would otherwise be refused as damage first)
    with pytest.raises(UserError, match=r"holds a trained task head \(score\.weight\) but its config\.json names no "
                                        r"head class.*start from its run's final/, or set \"architectures\": "
                                        r"\[\"GPTCustomForMultipleChoice\"\]"):
        FinetuneWorkload(_config(tmp_path / "further", older, data))
