"""What a fine-tuned run reports and ships about its held-out part and its padding: the summary's and card's accuracy,
count and majority class are of the same records (all of the held-out part, whatever eval_batches says), and the
saved and exported tokenizers pad with the token the head skips (config.pad_token_id), also when the base tokenizer
has a pad token of its own. References: the records themselves, final/ scored one record at a time."""

import json
import re
import shutil

import pytest
import torch

from hf_gpt_custom.training.finetune import finetune
from hf_gpt_custom.training.finetune_config import load_finetune_config
from hf_gpt_custom.training.finetune_data import load_labelled_records, split_heldout
from tests.helpers import PAIR_WORDS as WORDS

HELDOUT_FRACTION, SEED = 0.25, 7


def _finetune(out_dir, base, dataset, *overrides):
    return finetune(load_finetune_config(None, [
        f"init_from={base}", f"dataset={dataset}", f"out_dir={out_dir}", "run_name=ft", "block_size=32",
        "batch_size=8", "max_steps=6", "learning_rate=3e-3", "warmup_steps=1", "eval_interval=3",
        "checkpoint_interval=0", f"val_fraction={HELDOUT_FRACTION}", "log_with=none", f"seed={SEED}",
        "task.format=pair", "task.text_columns=premise,hypothesis", "task.labels=no,yes", *overrides,
    ]))


def _heldout_records(dataset):
    records = load_labelled_records(str(dataset))
    _, heldout = split_heldout(len(records), HELDOUT_FRACTION, SEED)
    return [records[i] for i in heldout]


def _load(folder):
    import hf_gpt_custom  # noqa: F401  (registers the Auto classes)
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    return AutoTokenizer.from_pretrained(folder), AutoModelForSequenceClassification.from_pretrained(folder).eval()


def test_with_eval_batches_the_summary_and_card_report_every_heldout_record(tmp_path, base_model_dir, learnable_pairs,
                                                                           capfd):
    """eval_batches=1 of batch_size 8 scored the first 8 of 30 held-out records, while the summary and card gave
    that accuracy as the one on all 30 and put the majority class of all 30 beside it. Reference: final/ scoring
    each held-out record alone from raw text, and the records' own labels."""
    from hf_gpt_custom.model_cards.card import build_model_card

    run_dir = _finetune(tmp_path / "run", base_model_dir, learnable_pairs, "eval_batches=1")
    heldout = _heldout_records(learnable_pairs)
    tokenizer, model = _load(run_dir / "final")
    with torch.no_grad():
        predicted = [model.config.id2label[int(model(**tokenizer(r["premise"], r["hypothesis"],
                                                                  return_tensors="pt")).logits.argmax())]
                     for r in heldout]
    accuracy = sum(p == r["label"] for p, r in zip(predicted, heldout)) / len(heldout)
    labels = [r["label"] for r in heldout]
    majority = max(labels.count(label) for label in set(labels)) / len(labels)

    summary = json.loads((run_dir / "training_summary.json").read_text())
    assert len(heldout) == 30
    assert summary["heldout_examples"] == 30
    assert summary["val_accuracy"] == pytest.approx(accuracy, abs=1e-9)
    assert summary["majority_class_accuracy"] == pytest.approx(majority, abs=1e-9)
    evals = [json.loads(line) for line in (run_dir / "run_log.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "eval"]
    assert [record["val_examples"] for record in evals] == [30, 30]
    card = str(build_model_card(run_dir))
    assert "On the 30 held-out records" in card
    assert re.search(r"\| accuracy \| ([0-9.]+) ±", card).group(1) == f"{accuracy:.4f}"
    assert f"| majority class (always the most frequent label) | {majority:.4f} |" in card
    # the command's last line too: an accuracy is read against it (a new user took 0.55 for learning on 55/45 labels)
    done = [line for line in capfd.readouterr().out.splitlines() if line.startswith("done: ")]
    assert len(done) == 1 and f"the majority class {majority:.4f}" in done[0], done


def _heldout_lm_loss_alone(folder, dataset) -> float:
    """GPT-1's auxiliary LM loss on the held-out records, each scored alone from raw text (no padding), as training
    computes it: each record's nats per predicted token through the LM head tied to the token embedding, averaged
    over the records (not pooled over their tokens: the objective training logs)."""
    tokenizer, model = _load(folder)
    row_losses = []
    with torch.no_grad():
        for record in _heldout_records(dataset):
            ids = tokenizer(record["premise"], record["hypothesis"], return_tensors="pt")["input_ids"]
            hidden = model.transformer(ids).last_hidden_state[0, :-1]
            logits = torch.nn.functional.linear(hidden, model.transformer.wte.weight[: model.config.vocab_size])
            row_losses.append(float(torch.nn.functional.cross_entropy(logits, ids[0, 1:])))
    return sum(row_losses) / len(row_losses)


_TWO_PROCESS_FINETUNE = """
import sys
from hf_gpt_custom.training.finetune import finetune
from hf_gpt_custom.training.finetune_config import load_finetune_config

finetune(load_finetune_config(None, sys.argv[1:]))
"""


@pytest.mark.slow
def test_the_heldout_lm_loss_is_the_records_own_on_one_and_on_two_processes(tmp_path, base_model_dir, learnable_pairs):
    """val_lm_loss summed each process's batch means, so on two processes the examples Accelerate repeats to even out
    the last batch (30 held-out records, 2 × 8 per step: 2 repeated) counted twice. Reference: final/ scoring each
    held-out record alone."""
    import os
    import subprocess

    from tests.training.test_multiprocess import _free_port

    one = _finetune(tmp_path / "one", base_model_dir, learnable_pairs, "max_steps=3", "eval_interval=3")
    summary = json.loads((one / "training_summary.json").read_text())
    assert summary["heldout_examples"] == 30
    assert summary["val_lm_loss"] == pytest.approx(_heldout_lm_loss_alone(one / "final", learnable_pairs), rel=1e-5)

    if shutil.which("accelerate") is None:
        pytest.fail("the accelerate launcher is not on PATH; install the project as README says")
    script = tmp_path / "finetune_two.py"
    script.write_text(_TWO_PROCESS_FINETUNE)
    two = tmp_path / "two"
    overrides = [f"init_from={base_model_dir}", f"dataset={learnable_pairs}", f"out_dir={two}", "run_name=ft",
                 "block_size=32", "batch_size=8", "max_steps=3", "learning_rate=3e-3", "warmup_steps=1",
                 "eval_interval=3", "checkpoint_interval=0", f"val_fraction={HELDOUT_FRACTION}", "log_with=none", f"seed={SEED}",
                 "task.format=pair", "task.text_columns=premise,hypothesis", "task.labels=no,yes"]
    command = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
               str(script), *overrides]
    result = subprocess.run(command, env={**os.environ, "TQDM_DISABLE": "1", "CUDA_VISIBLE_DEVICES": ""},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((two / "training_summary.json").read_text())
    assert summary["num_processes"] == 2 and summary["heldout_examples"] == 30
    assert summary["val_lm_loss"] == pytest.approx(_heldout_lm_loss_alone(two / "final", learnable_pairs), rel=1e-5)


@pytest.fixture(scope="module")
def pad_token_run(tmp_path_factory, base_model_dir, learnable_pairs):
    """A fine-tuned run whose base tokenizer has its own pad token, <|pad|> (as a user adds [PAD] to a GPT-2 folder)."""
    from transformers import AutoTokenizer

    from hf_gpt_custom.manifest import write_manifest

    base = tmp_path_factory.mktemp("padbase") / "final"
    shutil.copytree(base_model_dir, base)
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.add_special_tokens({"pad_token": "<|pad|>"})
    tokenizer.save_pretrained(base)
    write_manifest(base)
    return _finetune(tmp_path_factory.mktemp("ftpad") / "run", base, learnable_pairs, "task.lm_loss_weight=0")


def _assert_padded_rows_score_as_alone(folder, learnable_pairs):
    tokenizer, model = _load(folder)
    assert tokenizer.convert_tokens_to_ids("<|pad|>") == model.config.pad_token_id  # the base tokenizer's own pad
    records = _heldout_records(learnable_pairs)[:6]
    texts = ([r["premise"] for r in records], [r["hypothesis"] + " the" * i for i, r in enumerate(records)])
    with torch.no_grad():
        batch = tokenizer(*texts, padding=True, return_tensors="pt")
        batched = model(**batch).logits
        alone = torch.cat([model(**tokenizer(p, h, return_tensors="pt")).logits for p, h in zip(*texts)])
    assert len(set(batch["attention_mask"].sum(-1).tolist())) > 1  # rows of different lengths: padding happened
    torch.testing.assert_close(batched, alone, rtol=0, atol=1e-5)


def test_a_base_pad_token_is_the_saved_tokenizers_pad_and_padded_rows_score_as_alone(pad_token_run, learnable_pairs):
    """The saved tokenizer padded with <|endoftext|> while config.pad_token_id named <|pad|>: the head read the
    last <|endoftext|> pad, not the extract token, of every padded row. Reference: each row alone."""
    _assert_padded_rows_score_as_alone(pad_token_run / "final", learnable_pairs)


def test_the_export_of_a_pad_token_base_pads_with_config_pad_token_id(pad_token_run, learnable_pairs, tmp_path):
    from hf_gpt_custom.hub import export_folder

    out_dir = export_folder(pad_token_run, tmp_path / "export")
    _assert_padded_rows_score_as_alone(out_dir, learnable_pairs)
    assert "Padding: `<|pad|>` on the **right**" in (out_dir / "README.md").read_text()


def test_the_saved_and_exported_tokenizers_cut_a_long_input_where_fine_tuning_cut_it(pad_token_run, learnable_pairs,
                                                                                     tmp_path):
    """Fine-tuning cuts each example to block_size (32 here, the model has 64 positions); the saved tokenizer cut at
    model_max_length = n_positions, so a long premise reached the head with more of its text than the held-out
    accuracy was measured on. Reference: the ids fine-tuning itself built for the record (encode_examples)."""
    import yaml

    from hf_gpt_custom.training.finetune_config import parse_task_section
    from hf_gpt_custom.training.finetune_data import add_task_tokens, encode_examples, load_task_tokenizer

    tokenizer, _ = _load(pad_token_run / "final")
    record = {"premise": " ".join(WORDS * 4), "hypothesis": "sword", "label": "yes"}
    task = parse_task_section({"format": "pair", "text_columns": ["premise", "hypothesis"], "labels": ["no", "yes"]})
    init_from = yaml.safe_load((pad_token_run / "config.yaml").read_text())["init_from"]
    base = load_task_tokenizer(init_from)  # as fine-tuning loaded it
    (trained,) = encode_examples([record], task, base, add_task_tokens(base), 32, "test")
    assert trained["cut"]
    saved = tokenizer(record["premise"], record["hypothesis"], truncation=True)["input_ids"]
    assert tokenizer.model_max_length == 32 and saved == trained["input_ids"]
    from hf_gpt_custom.hub import export_folder

    exported, _ = _load(export_folder(pad_token_run, tmp_path / "export"))
    assert exported(record["premise"], record["hypothesis"], truncation=True)["input_ids"] == trained["input_ids"]


def test_the_heldout_lm_loss_of_multiple_choice_is_every_choices_own(tmp_path, base_model_dir, shared_data_dir, capfd):
    """Multiple choice: GPT-1's L1 over every choice's sequence of every held-out example, each scored alone from raw
    text with the saved tokenizer (no padding), each sequence's loss per token averaged over the sequences (as
    training's L1), is the summary's val_lm_loss."""
    import torch.nn.functional as F

    from hf_gpt_custom import GPTCustomForMultipleChoice

    goals = [json.loads(line) for line in (shared_data_dir / "piqa" / "valid.jsonl").read_text().splitlines()[:40]]
    labels = (shared_data_dir / "piqa" / "valid-labels.lst").read_text().split()[:40]
    data = tmp_path / "piqa.jsonl"
    data.write_text("".join(json.dumps({"goal": r["goal"], "sol1": r["sol1"], "sol2": r["sol2"], "label": int(label)})
                            + "\n" for r, label in zip(goals, labels)))
    run_dir = finetune(load_finetune_config(None, [
        f"init_from={base_model_dir}", f"dataset={data}", f"out_dir={tmp_path / 'run'}", "run_name=mc",
        "block_size=64", "batch_size=4", "max_steps=2", "warmup_steps=1", "eval_interval=2", "checkpoint_interval=0",
        f"val_fraction={HELDOUT_FRACTION}", "log_with=none", f"seed={SEED}", "task.format=multiple_choice",
        "task.text_columns=goal", "task.choice_columns=sol1,sol2"]))
    records = [json.loads(line) for line in data.read_text().splitlines()]
    _, heldout = split_heldout(len(records), HELDOUT_FRACTION, SEED)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run_dir / "final")
    model = GPTCustomForMultipleChoice.from_pretrained(run_dir / "final").eval()
    row_losses = []
    with torch.no_grad():
        for record in (records[i] for i in heldout):
            for choice in ("sol1", "sol2"):
                ids = torch.tensor([tokenizer(record["goal"], record[choice], truncation=True)["input_ids"]])
                hidden = model.transformer(ids).last_hidden_state[0, :-1]
                logits = F.linear(hidden, model.transformer.wte.weight[: model.config.vocab_size])
                row_losses.append(float(F.cross_entropy(logits, ids[0, 1:])))
    summary = json.loads((run_dir / "training_summary.json").read_text())
    assert summary["heldout_examples"] == len(heldout) == 10
    assert summary["val_lm_loss"] == pytest.approx(sum(row_losses) / len(row_losses), rel=1e-5)
    # the most tokens a step holds counts both answers' sequences: 4 examples x 2 answers x 64 (it said 4 x 64, less
    # than the tokens the run's first step had counted)
    assert "model: " in (printed := capfd.readouterr().out) and "at most 512 tokens per optimizer step" in printed
    first = next(json.loads(line) for line in (run_dir / "run_log.jsonl").read_text().splitlines()
                 if json.loads(line)["kind"] == "train")
    assert 256 < first["tokens_seen"] <= 512
