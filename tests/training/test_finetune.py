"""GPT-1-style fine-tuning (training/finetune*.py): input transformations, the loop end to end with resume, the
saved folder, and every kind of bad input refused before the run folder is touched."""

import json
import re

import pytest
import torch

import hf_gpt_custom.training.loop as loop_module
from hf_gpt_custom.errors import UserError
from hf_gpt_custom.task_template import DELIMITER_TOKEN, EXTRACT_TOKEN, TaskTemplate
from hf_gpt_custom.training.finetune import finetune
from hf_gpt_custom.training.finetune_config import load_finetune_config
from hf_gpt_custom.training.finetune_data import (
    PadExamples, add_task_tokens, encode_examples, load_labelled_records, split_heldout,
)
from tests.helpers import PAIR_WORDS as WORDS



def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_a_labelled_file_replaced_with_its_mtime_kept_is_read_anew(tmp_path):
    """datasets' cache knew local files by path and mtime: new rows of the same size, the mtime kept (cp -p), came
    back as the old rows. Reference: the rows written."""
    import os

    path = _write_jsonl(tmp_path / "labelled.jsonl", [{"text": "the old row", "label": "no"}])
    status = path.stat()
    assert load_labelled_records(str(path)) == [{"text": "the old row", "label": "no"}]
    _write_jsonl(path, [{"text": "a new row!!", "label": "no"}])
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert path.stat().st_size == status.st_size
    assert load_labelled_records(str(path)) == [{"text": "a new row!!", "label": "no"}]


def test_a_csv_is_read_as_the_text_it_holds(tmp_path):
    """pandas typed the columns of a .csv: an answer of 1.50 or 007 trained as "1.5" or "7.0", a 20-digit id as
    "1.2345678901234567e+19", and None or NA (real answers) were refused as empty cells. Reference: Python's csv module
    on the same file."""
    import csv

    path = tmp_path / "answers.csv"
    path.write_text("question,a0,a1,label\n"
                    "three halves as a decimal,1.50,1.05,0\n"
                    "James Bond's number,007,7,1\n"
                    "a big id,12345678901234567891,1,0\n"
                    "which box is empty,None,NA,1\n", encoding="utf-8")
    with open(path, newline="", encoding="utf-8") as file:
        assert load_labelled_records(str(path)) == list(csv.DictReader(file))


def test_a_jsonl_file_is_read_as_the_text_it_holds(tmp_path):
    """datasets gave a JSON column one type: an answer column of 7 and 2.50 trained as "7.0" and "2.5", a 20-digit
    number as "1.2345678901234567e+19" (the ftdata hunt), and a column whose type changed after the first ~10 MB was
    refused as "check the file's format". Reference: each number's text as the file holds it, and Python's json for
    everything else. true/false stay booleans; a byte-order mark and CRLF line ends are not part of a record."""
    import re as regex

    lines = ['{"question": "seven", "answer": 7, "label": 1}',
             '{"question": "two and a half", "answer": 2.50, "label": true}',
             '{"question": "a big id", "answer": 12345678901234567890, "label": 0.0}',
             '{"question": "line\u2028separator inside", "answer": "text", "label": "yes"}']
    path = tmp_path / "answers.jsonl"
    path.write_text("\ufeff" + "\r\n".join(lines) + "\r\n\n", encoding="utf-8")
    records = load_labelled_records(str(path))
    written = [regex.search(r'"answer": ("?)([^,"]*)\1', line).group(2) for line in lines]
    assert [str(record["answer"]) for record in records] == written == ["7", "2.50", "12345678901234567890", "text"]
    assert [record["question"] for record in records] == [json.loads(line)["question"] for line in lines]
    assert records[1]["label"] is True
    big = tmp_path / "big.jsonl"  # the answer column turns from whole numbers to text after ~11 MB
    rows = [json.dumps({"question": "q" * 180, "answer": n, "label": 0}) for n in range(60_000)]
    big.write_text("\n".join([*rows, json.dumps({"question": "last", "answer": "seven", "label": 1})]) + "\n",
                   encoding="utf-8")
    assert big.stat().st_size > 11_000_000
    records = load_labelled_records(str(big))
    assert len(records) == 60_001 and records[-1]["answer"] == "seven" and records[0]["answer"] == "0"


def test_a_jsonl_record_that_is_not_one_object_is_named_by_line(tmp_path):
    for text, match in (('{"text": "x", "text": "y", "label": 0}\n', r"line 1 .*'text' appear twice"),
                        ('{"text": "x", "label": 0}\n[1, 2]\n', "line 2 is list, not a record"),
                        ('{"text": "x", "label": 0}\n\n{"text": "y" "label": 0}\n', "line 3 is not a JSON record")):
        (tmp_path / "bad.jsonl").write_text(text, encoding="utf-8")
        with pytest.raises(UserError, match=match):
            load_labelled_records(str(tmp_path / "bad.jsonl"))


def test_labels_in_other_scripts_digits_are_not_read_as_ascii_digits():
    """label_key read "١" (Arabic-Indic one) as "1", so task.labels ["١", "٢"] were saved as the head's "1" and "2";
    a multiple-choice label "²" passed the digit check and failed in int() with a bare ValueError."""
    from types import SimpleNamespace

    from hf_gpt_custom.training.finetune_config import label_key
    from hf_gpt_custom.training.finetune_data import _class_index

    assert [label_key(value) for value in ("١", "٢", "1", "01", "1.0", 1.0, True)] == \
        ["١", "٢", "1", "1", "1", "1", "true"]
    # a JSON file's numbers are read as written: 1e2 is the label 100, as datasets read it, and 1e-1 is no integer
    assert [label_key(value) for value in ("1e2", "1.5E1", "-2e0", "1e-1")] == ["100", "15", "-2", "1e-1"]
    task = SimpleNamespace(is_multiple_choice=True, choice_columns=("a0", "a1", "a2"), label_column="label")
    assert _class_index("2", task, "data.jsonl", "line 4") == 2
    for value in ("²", "١"):
        with pytest.raises(UserError, match=r"data.jsonl line 4: label=.* is not the index of one of the 3 answers"):
            _class_index(value, task, "data.jsonl", "line 4")


def test_csv_labels_match_the_label_set_as_json_labels_do():
    """Read as written, a CSV's labels are text: True/False and 1.0 must still match task.labels [false, true] and
    [0, 1], as JSON's booleans and numbers do."""
    from hf_gpt_custom.training.finetune_config import label_key

    assert [label_key(v) for v in ("True", "FALSE", " true ", True, False)] == ["true", "false", "true", "true", "false"]
    assert [label_key(v) for v in ("1.0", "01", "-2", 1.0, 3, "1.5", "one")] == ["1", "1", "-2", "1", "3", "1.5", "one"]


def test_a_csv_without_a_header_or_with_a_repeated_column_is_refused(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(UserError, match="has no header row"):
        load_labelled_records(str(empty))
    repeated = tmp_path / "repeated.csv"
    repeated.write_text("text,label,text\na,no,b\n", encoding="utf-8")
    with pytest.raises(UserError, match="column 'text' appears more than once"):
        load_labelled_records(str(repeated))


def _config(tmp_path, base_model_dir, dataset, *overrides, task=None):
    task = task or {"format": "pair", "text_columns": "premise,hypothesis", "labels": "no,yes"}
    task_overrides = [f"task.{key}={value}" for key, value in task.items()]
    return load_finetune_config(None, [
        f"init_from={base_model_dir}", f"dataset={dataset}", f"out_dir={tmp_path / 'run'}", "run_name=ft",
        "block_size=32", "batch_size=8", "max_steps=20", "learning_rate=3e-3", "warmup_steps=2", "eval_interval=10",
        "checkpoint_interval=10", "keep_checkpoints=3", "val_fraction=0.25", "log_with=none", "seed=7",
        *task_overrides, *overrides,
    ])


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "run_log.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def finetuned_run(tmp_path_factory, base_model_dir, learnable_pairs):
    tmp_path = tmp_path_factory.mktemp("ft")
    return finetune(_config(tmp_path, base_model_dir, learnable_pairs))


# --- the loop end to end ---------------------------------------------------------------------------------------


def test_finetuning_lowers_the_loss_and_scores_the_heldout_part(finetuned_run, learnable_pairs):
    train_losses = [r["loss"] for r in _records(finetuned_run) if r["kind"] == "train"]
    assert len(train_losses) == 20
    assert sum(train_losses[-5:]) / 5 < sum(train_losses[:5]) / 5 - 0.05
    summary = json.loads((finetuned_run / "training_summary.json").read_text())
    assert (summary["train_examples"], summary["heldout_examples"]) == (90, 30)  # 25% of 120 held out
    evals = [r for r in _records(finetuned_run) if r["kind"] == "eval"]
    assert [r["val_examples"] for r in evals] == [30, 30]
    assert summary["val_accuracy"] == evals[-1]["val_accuracy"]
    assert summary["val_accuracy"] * 30 == pytest.approx(round(summary["val_accuracy"] * 30))  # a count of 30 docs
    # the objective is GPT-1's L3 = L2 + λ·L1 with λ = 0.5
    last = evals[-1]
    assert last["val_loss"] == pytest.approx(last["val_task_loss"] + 0.5 * last["val_lm_loss"])
    assert (finetuned_run / "loss_curve.png").is_file()
    # and so the curve's axis is named (it said "nats / token", the pre-training loss; the newuser5 walk)
    assert summary["loss_name"] == "task cross-entropy (nats / example) + 0.5 × LM loss (nats / token)"


def test_the_fine_tuning_loss_curve_is_drawn_with_its_own_axis(tmp_path, base_model_dir, learnable_pairs,
                                                                monkeypatch):
    import hf_gpt_custom.training.train as train_module

    drawn = []
    monkeypatch.setattr(train_module, "plot_loss_curve", lambda *args, **kwargs: drawn.append(kwargs))
    task = {"format": "pair", "text_columns": "premise,hypothesis", "labels": "no,yes", "lm_loss_weight": 0}
    finetune(_config(tmp_path, base_model_dir, learnable_pairs, "max_steps=2", "eval_interval=2", task=task))
    assert drawn[0]["loss_name"] == "task cross-entropy (nats / example)"


def test_heldout_accuracy_is_the_saved_models_accuracy_on_the_heldout_records(finetuned_run, learnable_pairs):
    """Recompute the held-out accuracy from final/ alone, through the Auto classes and the raw records."""
    import hf_gpt_custom  # noqa: F401
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(finetuned_run / "final").eval()
    tokenizer = AutoTokenizer.from_pretrained(finetuned_run / "final")
    records = load_labelled_records(str(learnable_pairs))
    _, heldout = split_heldout(len(records), 0.25, 7)
    hits = 0
    for index in heldout:
        record = records[index]
        # raw text: the saved tokenizer adds GPT-1's template itself
        with torch.no_grad():
            logits = model(**tokenizer(record["premise"], record["hypothesis"], return_tensors="pt")).logits
        hits += model.config.id2label[int(logits.argmax())] == record["label"]
    summary = json.loads((finetuned_run / "training_summary.json").read_text())
    assert hits / len(heldout) == pytest.approx(summary["val_accuracy"])
    # the saved tokenizer pads on the right, so a padded batch scores each row as it scores alone
    pairs = [(records[i]["premise"], records[i]["hypothesis"]) for i in heldout[:4]]
    assert tokenizer.padding_side == "right"
    with torch.no_grad():
        batched = model(**tokenizer(pairs, padding=True, return_tensors="pt")).logits
        alone = torch.cat([model(**tokenizer(*pair, return_tensors="pt")).logits for pair in pairs])
    torch.testing.assert_close(batched, alone, rtol=0, atol=1e-5)
    assert model.config.id2label == {0: "no", 1: "yes"}
    # λ is the finetune command's objective, not the model's: the saved head reports its task loss (issue 22.6)
    assert json.loads((finetuned_run / "final" / "config.json").read_text()).get("lm_loss_weight", 0) == 0


def test_training_loss_is_task_loss_plus_lambda_times_the_lm_loss_of_the_same_inputs(tmp_path, base_model_dir,
                                                                                     learnable_pairs):
    """GPT-1's L3 = L2 + λ·L1, against an independent L1: GPTCustomForCausalLM with the same body (its tied head)
    on each row alone, without its padding, averaged over the rows (the heads' L1, which splits by example)."""
    import torch.nn.functional as F

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.training.finetune import FinetuneWorkload

    config = _config(tmp_path, base_model_dir, learnable_pairs, "task.lm_loss_weight=0.3")
    work = FinetuneWorkload(config)
    assert not config.run_dir.exists()  # everything above is checked before the run folder is made
    batch = PadExamples(work.tokens.pad)(work.train_examples[:4])
    assert batch["attention_mask"].min() == 0  # rows of different lengths: padding is present
    model = work.model.eval()
    language_model = GPTCustomForCausalLM(model.config).eval()
    language_model.transformer.load_state_dict(model.transformer.state_dict())
    with torch.no_grad():
        loss = work.loss(model, batch)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        rows = [ids[mask.bool()][None] for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]
        lm_loss = torch.stack([language_model(input_ids=row, labels=row).loss for row in rows]).mean()
    torch.testing.assert_close(loss, F.cross_entropy(logits, batch["labels"]) + 0.3 * lm_loss)
    assert work.count_tokens(batch) == int(batch["attention_mask"].sum()) < batch["input_ids"].numel()
    # the held-out examples are the records split_heldout(val_fraction, seed) names: the experiment scores those
    records = load_labelled_records(str(learnable_pairs))
    _, heldout = split_heldout(len(records), 0.25, 7)
    expected = encode_examples([records[i] for i in heldout], config.task_section, work.tokenizer, work.tokens, 32, "d")
    assert work.heldout_examples == expected


def test_resume_from_a_checkpoint_ends_with_the_uninterrupted_weights(finetuned_run, tmp_path, base_model_dir,
                                                                      learnable_pairs):
    from safetensors.torch import load_file

    uninterrupted = load_file(finetuned_run / "final" / "model.safetensors")
    resumed_dir = tmp_path / "run"
    config = _config(tmp_path, base_model_dir, learnable_pairs)

    class Stop(Exception):
        pass

    real_save = loop_module.save_checkpoint

    def save_then_stop(accelerator, checkpoints_dir, state, keep_last):
        folder = real_save(accelerator, checkpoints_dir, state, keep_last)
        if state.step == 10:
            raise Stop
        return folder

    loop_module.save_checkpoint = save_then_stop
    try:
        with pytest.raises(Stop):
            finetune(config)
    finally:
        loop_module.save_checkpoint = real_save
    assert not (resumed_dir / "final").exists()
    finetune(_config(tmp_path, base_model_dir, learnable_pairs))  # the same command continues: no flag needed
    assert not list((resumed_dir / "checkpoints").glob("abandoned_*"))  # it resumed, it did not start over
    assert [r["step"] for r in _records(resumed_dir) if r["kind"] == "train"] == list(range(1, 21))
    resumed = load_file(resumed_dir / "final" / "model.safetensors")
    assert resumed.keys() == uninterrupted.keys()
    for key in resumed:
        assert torch.equal(resumed[key], uninterrupted[key]), key


def test_an_untied_base_model_with_the_auxiliary_lm_loss_is_refused_before_training(tmp_path, base_model_dir,
                                                                                   learnable_pairs):
    """GPT-1's λ > 0 on an untied body would train against a wrong loss (the task head has no lm_head): refused
    before any step, naming the override that fixes it; λ = 0 fine-tunes."""
    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.manifest import write_manifest

    untied = tmp_path / "untied"
    model = GPTCustomForCausalLM.from_pretrained(base_model_dir)
    model.config.tie_word_embeddings = False
    GPTCustomForCausalLM(model.config).save_pretrained(untied)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (base_model_dir / name).exists():
            (untied / name).write_bytes((base_model_dir / name).read_bytes())
    write_manifest(untied)
    with pytest.raises(UserError, match=rf"^init_from={untied}: .*untied.*task\.lm_loss_weight=0"):  # finetune's own
        finetune(_config(tmp_path, untied, learnable_pairs, "max_steps=2"))
    assert not (tmp_path / "run" / "checkpoints").exists()
    finetune(_config(tmp_path, untied, learnable_pairs, "max_steps=2", "task.lm_loss_weight=0",
                     "checkpoint_interval=0"))


def test_resume_with_another_lm_loss_weight_is_refused_naming_it(finetuned_run, base_model_dir, learnable_pairs):
    config = _config(finetuned_run.parent, base_model_dir, learnable_pairs, "task.lm_loss_weight=0",
                     "resume_from_checkpoint=latest")
    with pytest.raises(UserError, match=r"task\.lm_loss_weight: 0\.5 -> 0\.0"):
        finetune(config)


@pytest.mark.parametrize("spike, stops", [(5.0, False), (float("nan"), True)])
def test_a_noisy_batch_loss_does_not_stop_fine_tuning_a_non_finite_one_does(tmp_path, base_model_dir, learnable_pairs,
                                                                          monkeypatch, spike, stops):
    """A classifier's batch loss is a few examples: a hunt's healthy run (batch 4, λ = 0, lr 3e-3) was stopped as
    diverged at step 120, its loss 1.35859 against a best of 0.303686, by pre-training's rule (more than the best
    above the best, at least 1 nat). Fine-tuning stops on a non-finite loss only. The spike is added to step 12's
    loss as a constant, so the gradients stay the run's own; pre-training's rule is held by test_train.py's
    test_huge_learning_rate_names_the_checkpoint_that_is_really_safe."""
    from hf_gpt_custom.training.divergence import TrainingDivergedError
    from hf_gpt_custom.training.finetune import FinetuneWorkload

    loss, calls = FinetuneWorkload.loss, []

    def loss_with_a_spike(self, model, batch):
        calls.append(batch)
        return loss(self, model, batch) + (spike if len(calls) == 12 else 0.0)

    monkeypatch.setattr(FinetuneWorkload, "loss", loss_with_a_spike)
    config = _config(tmp_path, base_model_dir, learnable_pairs, "task.lm_loss_weight=0", "checkpoint_interval=0")
    if stops:
        with pytest.raises(TrainingDivergedError, match="^training stopped at step 12: loss became nan"):
            finetune(config)
        return
    run_dir = finetune(config)
    losses = [r["loss"] for r in _records(run_dir) if r["kind"] == "train"]
    assert len(losses) == 20 and losses[11] - min(losses[:11]) > max(min(losses[:11]), 1.0)  # a blow-up by that rule
    assert (run_dir / "final" / "config.json").is_file()


def test_fine_tuning_a_bf16_head_further_trains_float32_weights(finetuned_run, tmp_path, learnable_pairs):
    """A fine-tuned head saved in bf16 and fine-tuned further loaded as bf16 (transformers 5 keeps the saved dtype):
    its AdamW updates mostly fell below bf16's resolution. Loaded in float32, as a new head is built."""
    from safetensors import safe_open
    from transformers import AutoTokenizer

    from hf_gpt_custom import GPTCustomForSequenceClassification

    GPTCustomForSequenceClassification.from_pretrained(finetuned_run / "final").to(torch.bfloat16).save_pretrained(
        tmp_path / "bf16_head")
    AutoTokenizer.from_pretrained(finetuned_run / "final").save_pretrained(tmp_path / "bf16_head")
    run_dir = finetune(_config(tmp_path, tmp_path / "bf16_head", learnable_pairs, "max_steps=2", "eval_interval=2",
                               "checkpoint_interval=0"))
    with safe_open(run_dir / "final" / "model.safetensors", "pt") as weights:
        assert {weights.get_tensor(name).dtype for name in weights.keys()} == {torch.float32}


# --- GPT-1's input transformations -----------------------------------------------------------------------------


@pytest.fixture
def task_tokenizer(base_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_model_dir)
    return tokenizer, add_task_tokens(tokenizer)


def test_each_format_builds_gpt1s_sequence(task_tokenizer, shared_data_dir):
    """BoolQ as pairs and PIQA as multiple choice, checked against the tokenizer reading the special tokens written
    into the text (add_special_tokens=False: the template is the text's own)."""
    from hf_gpt_custom.training.finetune_config import parse_task_section

    tokenizer, tokens = task_tokenizer
    template = tokens.template
    assert (template.start, tokens.pad) == (tokenizer.eos_token_id, tokenizer.eos_token_id)
    assert {template.delimiter, template.extract} == {len(tokenizer) - 2, len(tokenizer) - 1}
    boolq = load_labelled_records(str(shared_data_dir / "boolq" / "val.jsonl"))[:3]
    pair = parse_task_section({"format": "pair", "text_columns": ["passage", "question"], "labels": [False, True]})
    examples = encode_examples(boolq, pair, tokenizer, tokens, 10_000, "boolq")
    for record, example in zip(boolq, examples):
        text = f"<|endoftext|>{record['passage']}{DELIMITER_TOKEN}{record['question']}{EXTRACT_TOKEN}"
        assert example["input_ids"] == tokenizer(text, add_special_tokens=False)["input_ids"]
        assert example["label"] == (record["label"] == "true")
    piqa = [{"goal": "Open a jar", "sol1": "twist the lid", "sol2": "eat the lid", "label": 0}]
    choice = parse_task_section({"format": "multiple_choice", "text_columns": ["goal"],
                                 "choice_columns": ["sol1", "sol2"]})
    [example] = encode_examples(piqa, choice, tokenizer, tokens, 10_000, "piqa")
    assert example["input_ids"] == [tokenizer(f"<|endoftext|>Open a jar{DELIMITER_TOKEN}{answer}{EXTRACT_TOKEN}",
                                              add_special_tokens=False)["input_ids"]
                                    for answer in ("twist the lid", "eat the lid")]
    single = parse_task_section({"format": "classification", "text_columns": ["question"], "labels": ["false", "true"]})
    [example] = encode_examples(boolq[:1], single, tokenizer, tokens, 10_000, "boolq")
    assert example["input_ids"] == tokenizer(f"<|endoftext|>{boolq[0]['question']}{EXTRACT_TOKEN}",
                                             add_special_tokens=False)["input_ids"]


def test_special_token_text_inside_the_data_stays_text(task_tokenizer):
    from hf_gpt_custom.training.finetune_config import parse_task_section

    tokenizer, tokens = task_tokenizer
    task = parse_task_section({"format": "classification", "text_columns": ["text"], "labels": ["a", "b"]})
    [example] = encode_examples([{"text": f"x{EXTRACT_TOKEN}y", "label": "a"}], task, tokenizer, tokens, 100, "d")
    extract = tokens.template.extract
    assert example["input_ids"].count(extract) == 1 and example["input_ids"][-1] == extract


def test_a_long_first_part_is_cut_from_the_left_keeping_delimiter_second_part_and_extract():
    template = TaskTemplate(start=0, delimiter=90, extract=91)
    assert template.build([1, 2, 3], [4], 6) == ([0, 2, 3, 90, 4, 91], True)
    assert template.build([1, 2, 3], [4], 7) == ([0, 1, 2, 3, 90, 4, 91], False)
    assert template.build([1, 2, 3], None, 3) == ([0, 3, 91], True)
    assert template.build([1, 2], [4, 5], 5) == ([0, 90, 4, 5, 91], True)  # nothing of the first part left
    assert template.build([1], [4, 5, 6], 5) == ([0, 90, 4, 5, 91], True)  # a second part too long alone
    assert template.build([], [4], 4) == ([0, 90, 4, 91], False)
    assert template.build([1, 2, 3], [4]) == ([0, 1, 2, 3, 90, 4, 91], False)  # no max_length: nothing is cut
    with pytest.raises(UserError, match="max_length=3 leaves no room"):
        template.build([1], [4], 3)


def test_cut_examples_are_counted_and_fit_block_size(task_tokenizer, shared_data_dir):
    from hf_gpt_custom.training.finetune_config import parse_task_section

    tokenizer, tokens = task_tokenizer
    boolq = load_labelled_records(str(shared_data_dir / "boolq" / "val.jsonl"))[:20]
    task = parse_task_section({"format": "pair", "text_columns": ["passage", "question"], "labels": ["false", "true"]})
    examples = encode_examples(boolq, task, tokenizer, tokens, 64, "boolq")
    assert all(len(e["input_ids"]) <= 64 for e in examples) and all(e["cut"] for e in examples)
    question = tokenizer(boolq[0]["question"], add_special_tokens=False)["input_ids"]
    assert examples[0]["input_ids"][-len(question) - 2:] == [tokens.template.delimiter, *question,
                                                               tokens.template.extract]
    passage = tokenizer(boolq[0]["passage"], add_special_tokens=False)["input_ids"]
    kept = examples[0]["input_ids"][1:-len(question) - 2]
    assert len(examples[0]["input_ids"]) == 64 and passage[-len(kept):] == kept


def test_heldout_split_is_seeded_disjoint_and_covers_every_record():
    train, heldout = split_heldout(100, 0.2, 3)
    assert len(heldout) == 20 and sorted(train + heldout) == list(range(100))
    assert split_heldout(100, 0.2, 3) == (train, heldout) and split_heldout(100, 0.2, 4)[1] != heldout


@pytest.mark.parametrize("n_records, fraction, n_heldout", [(10, 0.17, 2), (9, 0.3, 3), (40, 0.1, 4), (7, 0.2, 1)])
def test_the_heldout_part_is_the_fraction_rounded_to_whole_records(n_records, fraction, n_heldout):
    """round(fraction * n) records, as the docstring and the card say (1.7 -> 2, 2.7 -> 3, 1.4 -> 1); a truncating
    int() held out one record fewer whenever the product is not whole. Counts by hand."""
    train, heldout = split_heldout(n_records, fraction, 0)
    assert len(heldout) == n_heldout and sorted(train + heldout) == list(range(n_records))


# --- the saved tokenizer: GPT-1's template on raw text, cut as fine-tuning cut it ------------------------------


def _training_ids(records, task_settings, max_length, base_model_dir):
    """The input_ids finetune_data builds for `records`, from the pre-trained folder's tokenizer as fine-tuning does."""
    from transformers import AutoTokenizer

    from hf_gpt_custom.training.finetune_config import parse_task_section

    tokenizer = AutoTokenizer.from_pretrained(base_model_dir)
    task = parse_task_section(task_settings)
    examples = encode_examples(records, task, tokenizer, add_task_tokens(tokenizer), max_length, "d")
    return [example["input_ids"] for example in examples]


@pytest.fixture(scope="module")
def gpt2_base_dir(tmp_path_factory, shared_data_dir):
    """A transformers GPT2LMHeadModel folder with its GPT2Tokenizer (fine-tuning converts it on load)."""
    from tests.helpers import build_tiny_model_folder

    return build_tiny_model_folder(tmp_path_factory.mktemp("gpt2") / "gpt2", shared_data_dir, n_positions=64)


@pytest.fixture(scope="module", params=["from_ours", "from_transformers_gpt2"])
def finetuned_case(request, learnable_pairs, tmp_path_factory):
    """(the pre-trained folder, the tokenizer its fine-tuned final/ saved): fine-tuned from our folder, and from a
    transformers GPT-2 folder, whose GPT2Tokenizer truncated raw text by its own rule, not fine-tuning's."""
    from transformers import AutoTokenizer

    if request.param == "from_ours":
        base, run = request.getfixturevalue("base_model_dir"), request.getfixturevalue("finetuned_run")
    else:
        base = request.getfixturevalue("gpt2_base_dir")
        run = finetune(_config(tmp_path_factory.mktemp("ft_gpt2"), base, learnable_pairs, "max_steps=2"))
    return base, AutoTokenizer.from_pretrained(run / "final")


@pytest.fixture(scope="module")
def saved_tokenizer(finetuned_case):
    return finetuned_case[1]


@pytest.mark.parametrize("max_length", [None, 40, 7])
def test_saved_tokenizer_gives_the_ids_fine_tuning_built_from_raw_text(finetuned_case, shared_data_dir, max_length):
    """Real BoolQ passages and questions (pairs and single texts) and PIQA answers, whole and cut to max_length."""
    base_model_dir, saved_tokenizer = finetuned_case
    boolq = load_labelled_records(str(shared_data_dir / "boolq" / "val.jsonl"))[:6]
    passages, questions = [r["passage"] for r in boolq], [r["question"] for r in boolq]
    options = {} if max_length is None else {"truncation": True, "max_length": max_length}
    limit = max_length or 10_000
    pair = {"format": "pair", "text_columns": ["passage", "question"], "labels": ["false", "true"]}
    expected = _training_ids(boolq, pair, limit, base_model_dir)
    assert saved_tokenizer(passages, questions, **options)["input_ids"] == expected
    assert [saved_tokenizer(p, q, **options)["input_ids"] for p, q in zip(passages, questions)] == expected
    single = {"format": "classification", "text_columns": ["question"], "labels": ["false", "true"]}
    assert saved_tokenizer(questions, **options)["input_ids"] == _training_ids(boolq, single, limit, base_model_dir)
    piqa = [json.loads(line) for line in (shared_data_dir / "piqa" / "valid.jsonl").read_text().splitlines()[:4]]
    choice = {"format": "multiple_choice", "text_columns": ["goal"], "choice_columns": ["sol1", "sol2"]}
    for record, ids in zip(piqa, _training_ids([{**r, "label": 0} for r in piqa], choice, limit, base_model_dir)):
        assert saved_tokenizer([record["goal"]] * 2, [record["sol1"], record["sol2"]], **options)["input_ids"] == ids
    extract = saved_tokenizer.convert_tokens_to_ids(EXTRACT_TOKEN)
    if max_length is not None:
        assert all(ids[-1] == extract and len(ids) <= max_length for ids in expected)


def test_saved_tokenizer_truncation_keeps_the_template_and_cuts_the_first_part_from_its_start(saved_tokenizer):
    tokenizer = saved_tokenizer
    start, delimiter, extract = tokenizer.convert_tokens_to_ids(["<|endoftext|>", DELIMITER_TOKEN, EXTRACT_TOKEN])
    first_text, second_text = "the king rode a horse to the castle by the river", "the queen sang"
    first = tokenizer(first_text, add_special_tokens=False)["input_ids"]
    second = tokenizer(second_text, add_special_tokens=False)["input_ids"]
    assert tokenizer(first_text)["input_ids"] == [start, *first, extract]
    assert tokenizer(first_text, truncation=True, max_length=5)["input_ids"] == [start, *first[-3:], extract]
    fits = len(second) + 5  # room for two tokens of the first part
    assert tokenizer(first_text, second_text, truncation=True, max_length=fits)["input_ids"] == [
        start, *first[-2:], delimiter, *second, extract]
    assert tokenizer(first_text, second_text, truncation=True, max_length=5)["input_ids"] == [
        start, delimiter, *second[:2], extract]  # the second part alone is too long: it keeps its first tokens
    batch = tokenizer([first_text, "a"], truncation=True, max_length=6, padding=True, return_tensors="pt")
    assert batch["input_ids"][0].tolist() == [start, *first[-4:], extract]
    assert batch["input_ids"][1, batch["attention_mask"][1].sum() - 1] == extract
    with pytest.raises(UserError, match="max_length=2 leaves no room"):
        tokenizer(first_text, truncation=True, max_length=2)


def test_saved_tokenizer_refuses_special_token_text_it_would_read_otherwise_than_training(saved_tokenizer):
    """The old recipe (the template written into the text) would double the start and extract tokens."""
    written = f"<|endoftext|>the king{DELIMITER_TOKEN}king{EXTRACT_TOKEN}"
    with pytest.raises(UserError, match="adds GPT-1's template .* itself.*split_special_tokens=True"):
        saved_tokenizer(written)
    assert saved_tokenizer(written, add_special_tokens=False)["input_ids"] == saved_tokenizer("the king", "king")[
        "input_ids"]
    as_text = saved_tokenizer(written, split_special_tokens=True)["input_ids"]
    assert as_text.count(saved_tokenizer.convert_tokens_to_ids(EXTRACT_TOKEN)) == 1  # only the template's


def test_text_classification_pipeline_on_raw_text_scores_like_the_head_on_training_ids(finetuned_run, base_model_dir,
                                                                                       learnable_pairs):
    from transformers import pipeline

    from hf_gpt_custom import GPTCustomForSequenceClassification

    folder = finetuned_run / "final"
    model = GPTCustomForSequenceClassification.from_pretrained(folder).eval()
    classify = pipeline("text-classification", model=str(folder), device="cpu", top_k=None)
    records = load_labelled_records(str(learnable_pairs))[:3]

    def head_probabilities(ids: list[int]) -> dict[str, float]:
        with torch.no_grad():
            probabilities = model(torch.tensor([ids])).logits[0].softmax(-1).tolist()
        return {model.config.id2label[index]: p for index, p in enumerate(probabilities)}

    def scores(result) -> dict[str, float]:
        entries = result[0] if isinstance(result[0], list) else result  # a dict input comes back as a batch of one
        return {entry["label"]: entry["score"] for entry in entries}

    pair_task = {"format": "pair", "text_columns": ["premise", "hypothesis"], "labels": ["no", "yes"]}
    pairs = _training_ids(records, pair_task, 32, base_model_dir)
    singles = _training_ids(records, {"format": "classification", "text_columns": ["premise"], "labels": ["no", "yes"]},
                            5, base_model_dir)
    for record, pair_ids, single_ids in zip(records, pairs, singles):
        result = classify({"text": record["premise"], "text_pair": record["hypothesis"]})
        assert scores(result) == pytest.approx(head_probabilities(pair_ids), abs=1e-6)
        assert scores(classify(record["premise"], truncation=True, max_length=5)) == pytest.approx(
            head_probabilities(single_ids), abs=1e-6)


def test_pretraining_tokenizer_adds_no_template(base_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_model_dir)
    text = "the king <|endoftext|> rode"
    assert tokenizer(text)["input_ids"] == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer(text)["input_ids"] == tokenizer.encode_ids_batch([text], split_special_tokens=False)[0]
    assert tokenizer.num_special_tokens_to_add(pair=False) == tokenizer.num_special_tokens_to_add(pair=True) == 0


# --- the model: embedding, pooling, saved folder ---------------------------------------------------------------


def test_resizing_for_the_task_tokens_keeps_the_lm_head_tied(base_model_dir, task_tokenizer):
    from hf_gpt_custom import GPTCustomForCausalLM

    tokenizer, _ = task_tokenizer
    model = GPTCustomForCausalLM.from_pretrained(base_model_dir)
    before = model.transformer.wte.weight[:5].clone()
    model.resize_token_embeddings(len(tokenizer))
    assert model.transformer.wte.weight.shape[0] == len(tokenizer) == model.config.vocab_size
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    assert torch.equal(model.transformer.wte.weight[:5], before)


def test_finetuned_model_reads_the_extract_token_under_left_and_right_padding(finetuned_run):
    """Pooling at the last non-pad token: the same logits for a row alone, right-padded and left-padded (with the
    positions a left-padded row needs), although the start token is the pad token (both <|endoftext|>)."""
    from hf_gpt_custom import GPTCustomForSequenceClassification

    model = GPTCustomForSequenceClassification.from_pretrained(finetuned_run / "final").eval()
    pad = model.config.pad_token_id
    short, long = [pad, 60, 70, 512, 80, 513], [pad, 61, 62, 63, 64, 65, 512, 81, 513]
    right = PadExamples(pad)([{"input_ids": short, "label": 0}, {"input_ids": long, "label": 1}])
    width = len(long)
    left_ids = torch.tensor([[pad] * (width - len(short)) + short, long])
    left_mask = torch.tensor([[0] * (width - len(short)) + [1] * len(short), [1] * width])
    left_positions = (left_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        alone = torch.cat([model(torch.tensor([row])).logits for row in (short, long)])
        right_logits = model(input_ids=right["input_ids"], attention_mask=right["attention_mask"]).logits
        left_logits = model(input_ids=left_ids, attention_mask=left_mask, position_ids=left_positions).logits
    torch.testing.assert_close(right_logits, alone, rtol=0, atol=1e-5)
    torch.testing.assert_close(left_logits, alone, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_finetuned_folder_loads_with_remote_code_only(finetuned_run, python_without_project):
    script = """
import json, sys, torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
folder = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
ids = tokenizer("the king", "king", return_tensors="pt")
with torch.no_grad():
    logits = model(**ids).logits[0].tolist()
print(json.dumps({"class": type(model).__name__, "logits": logits, "ids": ids["input_ids"][0].tolist()}))
"""
    from hf_gpt_custom import GPTCustomForSequenceClassification
    from transformers import AutoTokenizer

    out = python_without_project(script, finetuned_run / "final")
    model = GPTCustomForSequenceClassification.from_pretrained(finetuned_run / "final").eval()
    tokenizer = AutoTokenizer.from_pretrained(finetuned_run / "final")
    assert out["class"] == "GPTCustomForSequenceClassification"
    assert out["ids"] == tokenizer("<|endoftext|>the king<|delim|>king<|extract|>", add_special_tokens=False)[
        "input_ids"]
    with torch.no_grad():
        expected = model(torch.tensor([out["ids"]])).logits[0]
    torch.testing.assert_close(torch.tensor(out["logits"]), expected, rtol=0, atol=1e-5)


# --- bad input: an error naming the problem, and no run folder ---------------------------------------------------


def _refused(config, match):
    with pytest.raises(UserError, match=match):
        finetune(config)
    assert not config.run_dir.exists(), "a refused run must leave nothing on disk"


def test_the_card_says_how_many_task_token_embeddings_were_drawn_and_which_rows_were_already_there(
        tmp_path, shakespeare_tokenizer_dir, learnable_pairs):
    """The card said "the two new token embeddings drawn ... at the mean" of every new head: a base whose vocab_size
    exceeds its tokenizer (a padded vocabulary, as nanoGPT's 50304 for 50257) is not resized, its task tokens taking
    rows it had, as they were (the ftread hunt). Reference: the embedding's rows before and after, by hand."""
    import shutil

    from hf_gpt_custom.model_cards.card import build_model_card
    from tests.helpers import save_tiny_base_model, save_tiny_model

    base = save_tiny_base_model(tmp_path / "base", shakespeare_tokenizer_dir)
    n_tokens = json.loads((base / "config.json").read_text())["vocab_size"]
    padded = tmp_path / "padded"
    shutil.copytree(base, padded)
    save_tiny_model(padded, n_tokens + 64, seed=0, bos_token_id=0, eos_token_id=0)
    from hf_gpt_custom.manifest import write_manifest

    write_manifest(padded)
    one_spare = tmp_path / "one_spare"  # one row past the tokenizer: one task token takes it, one is drawn
    shutil.copytree(base, one_spare)
    save_tiny_model(one_spare, n_tokens + 1, seed=0, bos_token_id=0, eos_token_id=0)
    write_manifest(one_spare)
    for folder, rows in ((base, 2), (padded, 0), (one_spare, 1)):
        run_dir = finetune(_config(tmp_path / folder.name, folder, learnable_pairs, "max_steps=2", "eval_interval=2",
                                   "checkpoint_interval=0"))
        summary = json.loads((run_dir / "training_summary.json").read_text())
        assert summary["task_tokens_added"] == ["<|delim|>", "<|extract|>"]
        assert summary["new_embedding_rows"] == rows
        assert json.loads((run_dir / "final" / "config.json").read_text())["vocab_size"] == n_tokens + (2, 64)[rows == 0]
        text = " ".join(build_model_card(run_dir).text.split())
        if rows == 2:
            assert "for the task tokens (`<|delim|>`, `<|extract|>`), 2 new token embeddings drawn by transformers'" in text
        elif rows == 1:
            assert "1 new token embedding drawn by transformers'" in text
            assert "and 1 row the base's embedding already had past its tokenizer, taken as it was)" in text
        else:
            assert ("no new token embedding: the task tokens (`<|delim|>`, `<|extract|>`) took rows the base's "
                    "embedding already had past its tokenizer") in text and "drawn by" not in text


def test_a_label_outside_the_label_set_names_the_row(tmp_path, base_model_dir):
    rows = [{"premise": "a b", "hypothesis": "a", "label": "yes"}] * 5 + [{"premise": "c", "hypothesis": "d",
                                                                          "label": "maybe"}]
    data = _write_jsonl(tmp_path / "d.jsonl", rows)
    _refused(_config(tmp_path, base_model_dir, data), r"d\.jsonl line 6: label='maybe' is not in the label set \['no', 'yes'\]")


@pytest.mark.parametrize("layout, place", [("jsonl", "line 7"), ("csv", "line 6"), ("json", "record 3"),
                                           ("parquet", "row 3")])
def test_a_refused_record_is_named_by_the_line_a_user_opens(tmp_path, base_model_dir, layout, place):
    """A refusal said "row 2" for the record on line 4 of a JSON Lines file with blank lines, and for a CSV's line 3
    (its header is line 1): the record's number, which a user reads as the line to fix (the finetune2 hunt).
    Reference: the files written here by hand, and the line an editor shows for the bad record."""
    import pandas as pd

    good, bad = {"premise": "a b", "hypothesis": "a", "label": "yes"}, {"premise": "c", "hypothesis": "d",
                                                                        "label": "maybe"}
    path = tmp_path / f"d.{layout}"
    if layout == "jsonl":  # records on lines 1, 3, 4 (after a blank line), 7 (after two more)
        path.write_text("\n".join([json.dumps(good), "", json.dumps(good), json.dumps(good), "", "  ",
                                    json.dumps(bad), json.dumps(good), ""]), encoding="utf-8")
    elif layout == "csv":  # header on line 1; the second record's premise spans lines 3-4; line 5 is blank
        path.write_text('premise,hypothesis,label\na b,a,yes\n"c\nd",a,yes\n\nc,d,maybe\na b,a,yes\n',
                        encoding="utf-8")
    elif layout == "json":
        path.write_text(json.dumps([good, good, bad, good]), encoding="utf-8")
    else:
        pd.DataFrame([good, good, bad, good]).to_parquet(path)
    _refused(_config(tmp_path, base_model_dir, path), rf"d\.{layout} {place}: label='maybe' is not in the label set")


def test_an_empty_cell_in_a_csvs_first_record_is_named_by_line_2(tmp_path, base_model_dir):
    """The header is line 1, so the first record is line 2; the empty-cell refusal names lines as the label one does.
    Reference: the file written here by hand."""
    path = tmp_path / "d.csv"
    path.write_text("premise,hypothesis,label\na b,,yes\n" + "a b,a,yes\n" * 5, encoding="utf-8")
    _refused(_config(tmp_path, base_model_dir, path), r"d\.csv line 2: column 'hypothesis' is empty")


def test_a_csv_cell_past_the_csv_modules_limit_is_read_with_records_numbered(tmp_path):
    """The line numbers are read with Python's csv module, whose cells stop at 131,072 characters: a longer passage,
    which datasets reads, crashed fine-tuning with a bare _csv.Error (the roundreview28 hunt). Reference: the
    records as written, numbered as a JSON array's are."""
    from hf_gpt_custom.training.finetune_data import labelled_records_with_places

    passage = "word " * 30_000  # 150,000 characters
    path = tmp_path / "long.csv"
    path.write_text(f"premise,hypothesis,label\n{passage},a,yes\nb,c,no\n", encoding="utf-8")
    records, places = labelled_records_with_places(str(path))
    assert [record["premise"] for record in records] == [passage, "b"] and places == ["row 1", "row 2"]


@pytest.mark.parametrize("value, kind", [(["fire"], "list"), ({"words": ["stone"]}, "dict"), (True, "bool")])
def test_a_text_column_that_is_not_text_is_refused_naming_the_row(tmp_path, base_model_dir, value, kind):
    """A hypothesis of ["fire"] was trained on as the text "['fire']" (and true as "True"), with no message; an
    empty one is refused, and evaluation refuses a prompt field that is not text (the ftread hunt). Numbers are text
    a CSV gives: kept."""
    rows = [{"premise": "a b", "hypothesis": "a", "label": "yes"}] * 5 + [{"premise": "c", "hypothesis": value,
                                                                          "label": "no"}]
    data = _write_jsonl(tmp_path / "d.jsonl", rows)
    _refused(_config(tmp_path, base_model_dir, data), rf"d\.jsonl line 6: column 'hypothesis' holds a {kind}, .*not "
                                                      rf"text")


def test_data_without_the_configured_columns_is_refused_naming_them(tmp_path, base_model_dir):
    data = _write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "answer": "yes"}] * 8)
    _refused(_config(tmp_path, base_model_dir, data), r"no column 'premise', 'hypothesis', 'label'.*columns are answer, text")


def test_more_choices_than_max_choices_is_refused(tmp_path, base_model_dir):
    data = _write_jsonl(tmp_path / "d.jsonl", [{"q": "a", "x": "b", "y": "c", "z": "d", "label": 0}] * 20)
    with pytest.raises(UserError, match="3 answers but task.max_choices=2"):
        _config(tmp_path, base_model_dir, data, task={"format": "multiple_choice", "text_columns": "q",
                                                      "choice_columns": "x,y,z", "max_choices": 2})
    mc2 = finetune(_config(tmp_path, base_model_dir, data, "max_steps=1", "warmup_steps=0", "batch_size=4",
                           task={"format": "multiple_choice", "text_columns": "q", "choice_columns": "x,y"}))
    more = _config(tmp_path, base_model_dir, data, f"init_from={mc2 / 'final'}", f"out_dir={tmp_path / 'again'}",
                   task={"format": "multiple_choice", "text_columns": "q", "choice_columns": "x,y,z"})
    _refused(more, "3 answers per example but init_from=.* max_choices=2")


def test_fewer_training_examples_than_a_batch_is_refused_before_the_run_starts(tmp_path, base_model_dir,
                                                                                 learnable_pairs):
    _refused(_config(tmp_path, base_model_dir, learnable_pairs, "batch_size=100"),
             "90 training examples, fewer than batch_size=100")


def test_an_input_longer_than_block_size_is_cut_keeping_the_extract_token(tmp_path, base_model_dir, learnable_pairs,
                                                                           task_tokenizer):
    from hf_gpt_custom.training.finetune_config import parse_task_section

    tokenizer, tokens = task_tokenizer
    task = parse_task_section({"format": "pair", "text_columns": ["premise", "hypothesis"], "labels": ["no", "yes"]})
    long_hypothesis = " ".join(WORDS * 4)
    [example] = encode_examples([{"premise": "a b", "hypothesis": long_hypothesis, "label": "no"}], task, tokenizer,
                                tokens, 32, "d")
    hypothesis = tokenizer(long_hypothesis, add_special_tokens=False)["input_ids"]
    template = tokens.template
    assert example["cut"] and example["input_ids"] == [template.start, template.delimiter, *hypothesis[:29],
                                                       template.extract]
    with pytest.raises(UserError, match="block_size=128 exceeds n_positions=64"):
        finetune(_config(tmp_path, base_model_dir, learnable_pairs, "block_size=128"))
    for block_size in (2, 3):  # a pair needs 3 special tokens and one token of text
        _refused(_config(tmp_path, base_model_dir, learnable_pairs, f"block_size={block_size}"),
                 f"pairs.jsonl: block_size={block_size} leaves no room")


def test_a_head_folder_into_the_wrong_class_is_refused(finetuned_run, tmp_path, base_model_dir, learnable_pairs):
    from hf_gpt_custom import GPTCustomForMultipleChoice, GPTCustomForTokenClassification

    with pytest.raises(UserError, match="holds a fine-tuned GPTCustomForSequenceClassification"):
        GPTCustomForTokenClassification.from_pretrained(finetuned_run / "final")
    # The multiple-choice head's `score` (1 output) has the classifier's name but not its shape (2 outputs):
    # transformers stops on the size mismatch before the head check runs. Refused either way, never loaded.
    with pytest.raises((UserError, RuntimeError), match="GPTCustomForSequenceClassification|ignore_mismatched_sizes"):
        GPTCustomForMultipleChoice.from_pretrained(finetuned_run / "final")
    wrong_task = _config(tmp_path, base_model_dir, learnable_pairs, f"init_from={finetuned_run / 'final'}",
                         task={"format": "multiple_choice", "text_columns": "premise", "choice_columns": "hypothesis,label"})
    _refused(wrong_task, "holds a fine-tuned GPTCustomForSequenceClassification, but task.format=multiple_choice")
    other_labels = _config(tmp_path, base_model_dir, learnable_pairs, f"init_from={finetuned_run / 'final'}",
                           task={"format": "pair", "text_columns": "premise,hypothesis", "labels": "yes,no"})
    _refused(other_labels, r"classifies into \['no', 'yes'\], the task into \['yes', 'no'\]")


def test_a_fine_tuned_head_folder_is_refused_as_a_language_models_init_from(finetuned_run, tmp_path, capsys):
    """`train --init_from <fine-tuned folder>` trained a causal LM and saved the head's tokenizer beside it: every
    prompt then ended in <|extract|> (generate continued after it). Refused when the config loads."""
    from hf_gpt_custom.cli import main
    from hf_gpt_custom.training.config import load_train_config

    message = f"init_from={finetuned_run / 'final'} holds a fine-tuned GPTCustomForSequenceClassification, whose " \
              "tokenizer wraps every text in its task's template"
    with pytest.raises(UserError, match=re.escape(message)):
        load_train_config(None, ["dataset=-", f"init_from={finetuned_run / 'final'}"])
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "training/configs/smoke.yaml", f"init_from={finetuned_run / 'final'}",
              f"out_dir={tmp_path / 'lm'}"])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err and not (tmp_path / "lm").exists()


@pytest.mark.parametrize("override, match", [
    ("task.format=regression", "task.format='regression' must be one of"),
    ("task.text_columns=premise", "reads two columns"),
    ("task.labels=yes", "at least two different labels"),
    ("task.lm_loss_weight=-1", "must be a number >= 0"),
    ("task.lables=a,b", "did you mean 'task.labels'"),
    ("tokenizer_vocab_size=100", "tokenizer_vocab_size is a pre-training setting"),
    ("shift_block_boundaries=true", "shift_block_boundaries is a pre-training setting"),
    ("init_from=null", "init_from is not set"),
])
def test_bad_task_settings_are_refused_when_the_config_loads(tmp_path, base_model_dir, learnable_pairs, override, match):
    with pytest.raises(UserError, match=match):
        _config(tmp_path, base_model_dir, learnable_pairs, override)


def test_cli_prints_one_line_and_exits_2_on_a_bad_label(tmp_path, base_model_dir, capsys):
    from hf_gpt_custom.cli import main

    data = _write_jsonl(tmp_path / "d.jsonl", [{"premise": "a", "hypothesis": "b", "label": "perhaps"}] * 6)
    yaml_path = tmp_path / "ft.yaml"
    yaml_path.write_text(f"init_from: {base_model_dir}\ndataset: {data}\nout_dir: {tmp_path / 'run'}\nblock_size: 32\n"
                         "task:\n  format: pair\n  text_columns: [premise, hypothesis]\n  labels: [\"no\", \"yes\"]\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["finetune", str(yaml_path), "max_steps=2", "warmup_steps=0"])
    assert exit_info.value.code == 2
    last_line = capsys.readouterr().err.strip().splitlines()[-1]  # after the datasets progress bar
    assert last_line.startswith("hf-gpt-custom finetune: error: ")
    assert "line 1: label='perhaps' is not in the label set ['no', 'yes']" in last_line
    assert not (tmp_path / "run").exists()


def test_a_tokenizer_our_class_reads_otherwise_keeps_its_class_and_cuts_text_from_its_start(tmp_path):
    """A folder whose tokenizer is not byte-level BPE (a word-level one here, as a SentencePiece Llama one is not)
    keeps its own class; truncation then keeps the end of the text, as fine-tuning's rule does."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from hf_gpt_custom import GPTCustomTokenizerFast
    from hf_gpt_custom.training.finetune_data import load_task_tokenizer

    words = ["<|endoftext|>", "[UNK]", *WORDS]
    backend = Tokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>", unk_token="[UNK]").save_pretrained(
        tmp_path)
    tokenizer = load_task_tokenizer(tmp_path)
    assert not isinstance(tokenizer, GPTCustomTokenizerFast) and tokenizer.truncation_side == "left"
    tokens = add_task_tokens(tokenizer)
    text = "the king rode the horse to the castle"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    cut = tokenizer(text, truncation=True, max_length=5)["input_ids"]
    assert cut == [tokens.template.start, *ids[-3:], tokens.template.extract]
    assert cut == tokens.template.build(ids, max_length=5)[0]  # fine-tuning's own cut


def test_final_and_export_of_a_tokenizer_of_another_class_cut_as_fine_tuning_cut(tmp_path, learnable_pairs):
    """load_task_tokenizer set truncation_side="left" (and save_beside_model padding_side="right") on a class that
    does not declare them; save_pretrained writes only init kwargs, so final/ and export/ came back cutting the
    passage's end and padding on the left. Reference: the ids fine-tuning trained on, re-encoded from the records."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.training.finetune_config import parse_task_section
    from hf_gpt_custom.training.finetune_data import load_task_tokenizer

    base = tmp_path / "base"
    words = ["<|endoftext|>", "[UNK]", *WORDS]
    backend = Tokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>",
                            unk_token="[UNK]").save_pretrained(base)
    torch.manual_seed(0)
    GPTCustomForCausalLM(GPTCustomConfig(vocab_size=len(words), n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                         bos_token_id=0, eos_token_id=0)).save_pretrained(base)
    config = _config(tmp_path, base, learnable_pairs, "block_size=6", "max_steps=2", "eval_interval=2",
                     "checkpoint_interval=0")
    run = finetune(config)
    export = export_folder(run, tmp_path / "export")

    records = load_labelled_records(str(learnable_pairs))
    fine_tuning = load_task_tokenizer(base)
    trained = encode_examples(records, parse_task_section(config.task), fine_tuning, add_task_tokens(fine_tuning), 6,
                              "pairs")
    assert sum(example["cut"] for example in trained) > 10  # the premises are longer than the 6-token blocks allow
    for folder in (run / "final", export):
        saved = AutoTokenizer.from_pretrained(folder)
        assert (saved.truncation_side, saved.padding_side) == ("left", "right")
        for record, example in zip(records, trained):
            assert saved(record["premise"], record["hypothesis"], truncation=True)["input_ids"] == \
                example["input_ids"]
        # text that reads as a special token stays text, as fine-tuning read it: the kept class matched it as the
        # token in final/ (a "</s>" in a Llama folder's data became eos mid-passage: the finetune2 hunt)
        record = {"premise": "the king <|endoftext|> rode", "hypothesis": "the horse", "label": "yes"}
        expected = encode_examples([record], parse_task_section(config.task), fine_tuning, add_task_tokens(fine_tuning),
                                   32, "pairs")[0]["input_ids"]
        assert saved(record["premise"], record["hypothesis"])["input_ids"] == expected


def test_push_refuses_a_task_heads_card_after_new_weights_naming_a_fix_that_applies(finetuned_run, tmp_path):
    """A fine-tuned head's export with new weights saved into it: push refuses its card (the held-out figures are the
    old model's), and the fix named must not be `hf-gpt-custom eval`, which scores language models only (the
    roundreview23 hunt)."""
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.heads_gpt_custom import GPTCustomForSequenceClassification
    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.publish_checks import check_export

    export = export_folder(finetuned_run, tmp_path / "export", repo_id="alice/ft")
    check_export(export)
    model = GPTCustomForSequenceClassification.from_pretrained(export)
    with torch.no_grad():
        model.score.weight.add_(0.1)
    model.save_pretrained(export)
    with pytest.raises(UserError, match=r"is the one export wrote for other weights .*export the run again, or put "
                                        r"this model's held-out figures into the card") as refused:
        check_export(export)
    assert "hf-gpt-custom eval" not in str(refused.value)


def test_encoding_long_records_does_not_warn_of_indexing_errors_it_prevents(caplog):
    """transformers warned "Token indices sequence length is longer ... will result in indexing errors" for every
    fine-tuning run on long passages, while encode_examples cuts each sequence to block_size itself."""
    import logging

    from hf_gpt_custom import GPTCustomTokenizerFast
    from hf_gpt_custom.training.finetune_data import _encoder

    tokenizer = GPTCustomTokenizerFast.bytes_only()
    tokenizer.model_max_length = 16
    with caplog.at_level(logging.WARNING):
        (ids,) = _encoder(tokenizer)(["a passage much longer than sixteen bytes"])
    assert len(ids) > 16 and "indexing errors" not in caplog.text


@pytest.mark.parametrize("labels", [["yes", "yes"], [True, "true"], [1, 1.0, 2]])
def test_a_label_set_naming_one_label_twice_is_refused(labels):
    """JSON true and "true" (and 1 and 1.0) are one label when the data are compared with the set: a set naming one
    twice gives a class no example can have. Duplicates worked out by hand."""
    from hf_gpt_custom.training.finetune_config import parse_task_section

    with pytest.raises(UserError, match=r"task.labels=.* must name at least two different labels"):
        parse_task_section({"format": "classification", "text_columns": ["text"], "labels": labels})


def test_openai_gpts_own_folder_fine_tunes_with_gpt1s_start_token(tmp_path, learnable_pairs):
    """OpenAI GPT's tokenizer has neither bos nor eos: fine-tuning it, GPT-1-style, was refused ("use the tokenizer the
    model was pre-trained with", which it was). GPT-1 added its start token as it added the delimiter and extract:
    so does fine-tuning here, and a pad token. Reference: the paper's layout, start + first + delim + second + extract,
    built from the transformers tokenizer's own ids; the saved model and tokenizer score as training did."""
    import string

    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, OpenAIGPTConfig,
                              OpenAIGPTLMHeadModel, OpenAIGPTTokenizerFast)

    symbols = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab = {symbol: i for i, symbol in enumerate(symbols + [s + "</w>" for s in symbols])}
    vocab["<unk>"] = len(vocab)
    source = OpenAIGPTTokenizerFast(vocab=vocab, merges=[])
    folder = tmp_path / "openai-gpt"
    source.save_pretrained(folder)
    torch.manual_seed(0)
    OpenAIGPTLMHeadModel(OpenAIGPTConfig(vocab_size=len(source), n_positions=64, n_embd=32, n_layer=2, n_head=4)
                         ).save_pretrained(folder)
    assert source.bos_token is None and source.eos_token is None
    run_dir = finetune(_config(tmp_path, folder, learnable_pairs, "block_size=64", "max_steps=2", "eval_interval=2",
                               "checkpoint_interval=0"))
    tokenizer = AutoTokenizer.from_pretrained(run_dir / "final")
    start, delim, extract = tokenizer.convert_tokens_to_ids(["<|start|>", DELIMITER_TOKEN, EXTRACT_TOKEN])
    assert len({start, delim, extract, tokenizer.pad_token_id}) == 4 and min(start, delim, extract) >= len(source)
    first, second = "the cat sat", "a mat"
    expected = [start, *source(first)["input_ids"], delim, *source(second)["input_ids"], extract]
    assert tokenizer(first, second)["input_ids"] == expected
    model = AutoModelForSequenceClassification.from_pretrained(run_dir / "final").eval()
    assert model.config.vocab_size >= len(tokenizer)
    with torch.no_grad():
        assert model(torch.tensor([expected])).logits.shape == (1, 2)
    from hf_gpt_custom.model_cards.card import build_model_card

    card = " ".join(build_model_card(run_dir).text.split())  # the card names the start token its template adds
    assert "`<|start|>` starts every sequence" in card and "`<|start|>{premise}<|delim|>" in card


@pytest.mark.parametrize("lm_loss_weight", [0.0, 0.5])
def test_fine_tuning_mfu_counts_the_flops_that_run(tmp_path, base_model_dir, learnable_pairs, lm_loss_weight):
    """Fine-tuning MFU used pre-training's count: the LM head's 6·V·d a token even with lm_loss_weight 0 (the head
    never computes LM logits then) and attention over block_size positions, though a batch is padded only to its
    longest row (1.84x too high on a tiny COPA fine-tune). By PaLM's formula by hand, a step's MFU lies between its
    count over 0 and over block_size positions, strictly below the latter (these pairs are shorter than 32 tokens),
    with the head counted exactly when λ > 0. The summary is the steps' time-weighted mean."""
    import math

    from safetensors.torch import load_file

    from hf_gpt_custom import GPTCustomConfig

    peak = 1e9
    run_dir = finetune(_config(tmp_path, base_model_dir, learnable_pairs, "max_steps=4", f"peak_flops={peak}",
                               f"task.lm_loss_weight={lm_loss_weight}"))
    config = GPTCustomConfig.from_pretrained(run_dir / "final")
    n_params = sum(tensor.numel() for tensor in load_file(str(run_dir / "final" / "model.safetensors")).values())
    d, layers = config.n_embd, config.n_layer
    body = n_params - config.n_positions * d - config.padded_vocab_size * d  # no position table, no head matmul
    weights = 6 * (body + (config.padded_vocab_size * d if lm_loss_weight > 0 else 0))
    records = [r for r in _records(run_dir) if r["kind"] == "train"]
    for record in records:
        per_token = record["mfu"] * peak / record["tokens_per_s"]
        assert weights < per_token < weights + 12 * layers * 32 * d, record
    summary = json.loads((run_dir / "training_summary.json").read_text())
    timed = [r for r in records if not r.get("warm_up")]
    expected = sum(r["mfu"] * r["step_time_s"] for r in timed) / sum(r["step_time_s"] for r in timed)
    assert math.isclose(summary["mfu"], expected, rel_tol=1e-12)


def test_a_classlabel_column_is_read_by_its_names(tmp_path, base_model_dir, learnable_pairs):
    """A parquet (or Hub) label column stored as a datasets ClassLabel arrives as 0/1: task.labels written as its
    names were refused ("label=0 is not in the label set"). Reference: the feature's own int2str; ids as labels
    still read the stored ints, and labels that are neither are refused naming both."""
    import datasets

    rows = [json.loads(line) for line in learnable_pairs.read_text().splitlines()]
    features = datasets.Features({"premise": datasets.Value("string"), "hypothesis": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["no", "yes"])})
    table = datasets.Dataset.from_dict({key: [row[key] for row in rows] for key in ("premise", "hypothesis", "label")},
                                       features=features)
    path = tmp_path / "pairs.parquet"
    table.to_parquet(str(path))
    by_names = _config(tmp_path, base_model_dir, path, "max_steps=2")
    records = load_labelled_records(str(path), task=by_names.task_section)
    assert [r["label"] for r in records] == [features["label"].int2str(i) for i in table["label"]]
    run_dir = finetune(by_names)
    assert json.loads((run_dir / "final" / "config.json").read_text())["id2label"] == {"0": "no", "1": "yes"}
    by_ids = _config(tmp_path / "ids", base_model_dir, path, task={"format": "pair", "text_columns":
                     "premise,hypothesis", "labels": "0,1"})
    assert [r["label"] for r in load_labelled_records(str(path), task=by_ids.task_section)] == table["label"]
    neither = _config(tmp_path / "neither", base_model_dir, path, task={"format": "pair", "text_columns":
                      "premise,hypothesis", "labels": "false,true"})
    with pytest.raises(UserError, match=r"task.labels \['false', 'true'\] are neither the names of the dataset's "
                                        r"ClassLabel column 'label' \(\['no', 'yes'\]\) nor its ids"):
        load_labelled_records(str(path), task=neither.task_section)


def test_held_out_rows_repeated_in_training_are_counted_in_a_warning(tmp_path, base_model_dir, caplog):
    """The split keeps records apart, not texts: a file with repeated rows put 11 of 29 held-out records in training
    too (the ftdata hunt), and the held-out accuracy counted them as unseen. Reference: the split's indices (drawn as
    split_heldout draws them) and the rows' texts compared by hand."""
    import logging

    from hf_gpt_custom.training.finetune import FinetuneWorkload

    rows = [{"premise": f"{WORDS[i % 7]} {WORDS[(3 * i) % 11]}", "hypothesis": WORDS[i % 5], "label": ["no", "yes"][i % 2]}
            for i in range(40)]
    rows += rows[:12]  # 12 rows twice
    data = _write_jsonl(tmp_path / "repeated.jsonl", rows)
    config = _config(tmp_path, base_model_dir, data)
    train_ids, heldout_ids = split_heldout(len(rows), config.val_fraction, config.seed)
    texts = [(row["premise"], row["hypothesis"]) for row in rows]
    expected = sum(texts[i] in {texts[j] for j in train_ids} for i in heldout_ids)
    assert expected > 0
    with caplog.at_level(logging.WARNING):
        workload = FinetuneWorkload(config)
    assert f"{expected} of the {len(heldout_ids)} held-out examples are also training examples" in caplog.text
    # the summary and the card say it too (the newuser5 walk)
    last_eval = {"val_examples": len(heldout_ids), "val_task_loss": 0.7, "val_accuracy": 0.5,
                 "val_accuracy_stderr": 0.1}
    assert workload.summary_fields(last_eval)["heldout_repeating_training_inputs"] == expected
    caplog.clear()
    one = rows[:40] + [None]  # 41 rows, exactly one held-out example repeated in training
    train_ids, heldout_ids = split_heldout(41, config.val_fraction, config.seed)
    one[40] = rows[train_ids[0]] if 40 in heldout_ids else rows[heldout_ids[0]]
    with caplog.at_level(logging.WARNING):
        FinetuneWorkload(_config(tmp_path, base_model_dir, _write_jsonl(tmp_path / "one.jsonl", one)))
    assert f"1 of the {len(heldout_ids)} held-out examples are also training examples" in caplog.text
    caplog.clear()
    unique = _write_jsonl(tmp_path / "unique.jsonl", list({text: row for text, row in zip(texts, rows)}.values()))
    with caplog.at_level(logging.WARNING):
        FinetuneWorkload(_config(tmp_path, base_model_dir, unique))
    assert "held-out examples are also training examples" not in caplog.text


@pytest.mark.parametrize("name, data, encoding", [
    ("windows.csv", "sentence,label\n\u201cgreat\u201d \u2013 fine,pos\n", "cp1252"),
    ("latin.jsonl", '{"sentence": "un caf\xe9", "label": "pos"}\n', "latin1"),
    ("wide.csv", "sentence,label\ngood,pos\n", "utf-16"),
], ids=["cp1252", "latin1", "utf-16"])
def test_a_labelled_file_in_another_encoding_is_named_with_the_conversion_that_keeps_its_text(tmp_path, name, data,
                                                                                            encoding):
    """Fine-tuning's loaders opened a Windows-1252 CSV, a Latin-1 JSONL or a UTF-16 CSV as UTF-8: a bare
    UnicodeDecodeError (the newuser5 walk). And the hint always said `iconv -f latin1`, which turns Windows-1252's
    curly quotes into invisible control characters that then train. Reference: Python's codecs on the bytes."""
    path = tmp_path / name
    path.write_bytes(data.encode(encoding))
    with pytest.raises(UserError, match=rf"{name} is not UTF-8 text: .* \(e.g. iconv -f {encoding} -t utf-8 {name}"):
        load_labelled_records(str(path))
    assert path.read_bytes().decode(encoding) == data  # the named encoding gives the text back
    if encoding == "cp1252":
        assert path.read_bytes().decode("latin1") != data  # what the old hint gave: \x93 and \x94 for the quotes


def test_a_semicolon_separated_csv_is_named_as_such(tmp_path, base_model_dir):
    """It was "has no column 'sentence'; its columns are sentence;sentiment" (the newuser5 walk)."""
    from hf_gpt_custom.training.finetune import FinetuneWorkload

    path = tmp_path / "semi.csv"
    path.write_text("sentence;label\n" + "".join(f"{WORDS[i % 7]} {WORDS[i % 5]};{['no', 'yes'][i % 2]}\n"
                                                 for i in range(20)), encoding="utf-8")
    config = _config(tmp_path, base_model_dir, path, task={"format": "classification", "text_columns": "sentence",
                                                          "labels": "no,yes"})
    with pytest.raises(UserError, match=r"its one column 'sentence;label' holds ';': the file is separated by ';', "
                                        r"and a CSV must be separated by commas"):
        FinetuneWorkload(config)
    records = _write_jsonl(tmp_path / "odd.jsonl", [{"sentence|label": "a|no"}] * 20)  # not a CSV: no such hint
    with pytest.raises(UserError, match="has no column 'sentence'") as refused:
        FinetuneWorkload(_config(tmp_path, base_model_dir, records, task={"format": "classification",
                                                                          "text_columns": "sentence",
                                                                          "labels": "no,yes"}))
    assert "separated" not in str(refused.value)


def test_a_label_that_occurs_in_no_record_is_warned_about(tmp_path, base_model_dir, caplog):
    import logging

    from hf_gpt_custom.training.finetune import FinetuneWorkload

    rows = [{"sentence": f"{WORDS[i % 7]} {WORDS[i % 5]}", "label": ["neg", "pos"][i % 2]} for i in range(24)]
    path = _write_jsonl(tmp_path / "two.jsonl", rows)
    task = {"format": "classification", "text_columns": "sentence", "labels": "neg,pos,neutral"}
    with caplog.at_level(logging.WARNING):
        workload = FinetuneWorkload(_config(tmp_path, base_model_dir, path, task=task))
    assert "task.labels ['neutral'] occur in no record; the head still gets a class for each (3 classes)" in caplog.text
    assert workload.model.config.num_labels == 3
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        FinetuneWorkload(_config(tmp_path, base_model_dir, path, task={**task, "labels": "neg,pos"}))
    assert "occur in no record" not in caplog.text


def test_a_label_written_decomposed_is_the_composed_label():
    """"ne\\u0301gatif" (decomposed, as macOS writes names) was refused as not in ['négatif', ...], two strings that
    look the same. Reference: unicodedata says they are canonically equivalent (the same NFC form)."""
    import unicodedata
    from types import SimpleNamespace

    from hf_gpt_custom.training.finetune_data import _class_index

    decomposed, composed = "ne\u0301gatif", "n\u00e9gatif"
    assert decomposed != composed and unicodedata.normalize("NFC", decomposed) == composed
    task = SimpleNamespace(is_multiple_choice=False, labels=("positif", composed), label_column="label")
    assert _class_index(decomposed, task, "data.jsonl", "line 3") == 1
    assert _class_index("positif", task, "data.jsonl", "line 3") == 0
    with pytest.raises(UserError, match=r"data.jsonl line 3: label='neutre' is not in the label set"):
        _class_index("neutre", task, "data.jsonl", "line 3")


def test_resume_across_a_redefined_objective_is_refused_and_an_unrecorded_one_warned(finetuned_run, base_model_dir,
                                                                                       learnable_pairs, caplog):
    """A fine-tune begun by a version that pooled GPT-1's auxiliary LM loss over the batch's tokens, resumed by one
    that takes each row's mean (d105e70), trained its later steps on another objective in silence (the upgrade hunt).
    Checkpoints now record the objective's definition: another is refused naming it, a checkpoint without the record
    (written before it) is a warning when the LM loss counts."""
    import shutil

    from hf_gpt_custom.manifest import write_manifest
    from hf_gpt_custom.training import resume

    checkpoint = sorted((finetuned_run / "checkpoints").glob("step_*"))[-1]
    settings_path = checkpoint / "training_settings.json"
    original = settings_path.read_text()
    settings = json.loads(original)
    assert settings["objective"] == resume.objective(_config(finetuned_run.parent, base_model_dir, learnable_pairs))
    try:
        settings["objective"] = "task cross-entropy (1) + lm_loss_weight x lm loss pooled over the batch's tokens (1)"
        settings_path.write_text(json.dumps(settings))
        write_manifest(checkpoint, step=int(checkpoint.name.split("_")[1]))
        config = _config(finetuned_run.parent, base_model_dir, learnable_pairs, f"resume_from_checkpoint={checkpoint}")
        with pytest.raises(UserError, match=r"objective: .*pooled over the batch's tokens \(1\)\" -> .*each row's mean "
                                            r".*the version of hf-gpt-custom that wrote the checkpoint defined it"):
            finetune(config)
        del settings["objective"]
        settings_path.write_text(json.dumps(settings))
        write_manifest(checkpoint, step=int(checkpoint.name.split("_")[1]))
        resume.note_unrecorded_objective.cache_clear()
        with caplog.at_level("WARNING"):
            assert resume.changed_settings(config, checkpoint) == {}
        assert "was written before checkpoints recorded their objective" in caplog.text
    finally:
        settings_path.write_text(original)
        write_manifest(checkpoint, step=int(checkpoint.name.split("_")[1]))
    shutil.rmtree(finetuned_run.parent / "unused", ignore_errors=True)


def test_a_base_replaced_while_fine_tuning_reads_it_is_refused(tmp_path, base_model_dir, learnable_pairs, monkeypatch,
                                                               shakespeare_tokenizer_dir):
    """Fine-tuning reads init_from's tokenizer, encodes the data, then loads the weights: a base retrained in between
    (train --start_over in its run) was fine-tuned under the previous base's tokenizer, its embedding resized in
    silence (the concurrency hunt). Reference: the weights' fingerprint as the tokenizer was read."""
    import os
    import shutil

    from safetensors.torch import load_file, save_file

    from hf_gpt_custom.manifest import write_manifest
    from hf_gpt_custom.training import finetune as finetune_module
    from tests.helpers import save_tiny_base_model

    base = tmp_path / "base"
    shutil.copytree(base_model_dir, base)
    retrained = save_tiny_base_model(tmp_path / "retrained", shakespeare_tokenizer_dir)
    save_file({name: tensor + 1.0 for name, tensor in load_file(retrained / "model.safetensors").items()},
              retrained / "model.safetensors", metadata={"format": "pt"})
    write_manifest(retrained)
    real = finetune_module.load_task_tokenizer

    def retrained_meanwhile(folder):
        tokenizer = real(folder)
        if retrained.exists():  # train's _save_final_folder: final/ replaced whole
            shutil.rmtree(base)
            os.replace(retrained, base)
        return tokenizer

    monkeypatch.setattr(finetune_module, "load_task_tokenizer", retrained_meanwhile)
    with pytest.raises(UserError, match=rf"init_from={base} was replaced while it was being read"):
        finetune(_config(tmp_path, base, learnable_pairs, "max_steps=2", "checkpoint_interval=0"))
    finetune(_config(tmp_path, base, learnable_pairs, "max_steps=2", "checkpoint_interval=0", "eval_interval=2"))


def test_a_new_head_does_not_carry_what_its_bases_config_says_of_the_bases_own_task(tmp_path, base_model_dir,
                                                                                      learnable_pairs):
    """A converted GPT-2's config says finetuning_task "lm" and its pipeline's text-generation settings: the
    classifier built on it published both as its own (the convflow hunt). transformers' run_glue names the
    fine-tuning task; with no task name here, the base's is dropped rather than kept as the classifier's."""
    import shutil

    from hf_gpt_custom.manifest import write_manifest
    from hf_gpt_custom.training.finetune import build_task_model
    from hf_gpt_custom.training.finetune_data import add_task_tokens, load_task_tokenizer

    base = tmp_path / "base"
    shutil.copytree(base_model_dir, base)
    config = json.loads((base / "config.json").read_text())
    config.update(finetuning_task="lm", task_specific_params={"text-generation": {"max_length": 50}},
                  output_attentions=True)  # which transformers cannot save beside sdpa: off for training
    (base / "config.json").write_text(json.dumps(config))
    write_manifest(base)
    finetune_config = _config(tmp_path, base, learnable_pairs)
    tokenizer = load_task_tokenizer(base)
    add_task_tokens(tokenizer)
    model = build_task_model(finetune_config, finetune_config.task_section, tokenizer)
    assert not {"finetuning_task", "task_specific_params"} & set(json.loads(model.config.to_json_string()))
    assert model.config.num_labels == 2 and not model.config.output_attentions


def test_a_base_whose_config_asks_for_tuples_is_fine_tuned_and_scored_on_its_heldout_part(tmp_path, base_model_dir,
                                                                                          learnable_pairs):
    """A converted base may carry config.json's return_dict=false into the head: the training step reads its loss by
    name whatever the config says, and so must the held-out evaluation ('tuple' object has no attribute 'logits';
    the mutation sweep). Reference: a hand computation from the head's logits read with return_dict=True, each
    row's LM loss from GPTCustomForCausalLM with the same body on the row alone (as the λ test above)."""
    import shutil
    from types import SimpleNamespace

    import torch.nn.functional as F

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.manifest import write_manifest
    from hf_gpt_custom.training.finetune import FinetuneWorkload

    base = tmp_path / "base"
    shutil.copytree(base_model_dir, base)
    config = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**config, "return_dict": False}))
    write_manifest(base)
    finetune_config = _config(tmp_path, base, learnable_pairs, "task.lm_loss_weight=0.5")
    work = FinetuneWorkload(finetune_config)
    model = work.model.eval()
    assert model.config.return_dict is False
    val_loader = work.prepare(finetune_config, SimpleNamespace(print=lambda *args: None)).val_loader
    no_accelerator = SimpleNamespace(unwrap_model=lambda module: module, gather_for_metrics=lambda values: values)
    got = work.evaluate(model, val_loader, no_accelerator)
    model.eval()  # evaluate hands the model back in training mode
    language_model = GPTCustomForCausalLM(model.config).eval()
    language_model.transformer.load_state_dict(model.transformer.state_dict())
    task_losses, hits, lm_losses = [], [], []
    with torch.no_grad():
        for batch in val_loader:
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], return_dict=True).logits
            task_losses += F.cross_entropy(logits, batch["labels"], reduction="none").tolist()
            hits += (logits.argmax(-1) == batch["labels"]).tolist()
            for ids, mask in zip(batch["input_ids"], batch["attention_mask"]):
                row = ids[mask.bool()][None]
                lm_losses.append(float(language_model(input_ids=row, labels=row, return_dict=True).loss))
        assert torch.isfinite(work.loss(model, next(iter(val_loader))))
    assert got["val_examples"] == len(hits) == 30
    assert got["val_task_loss"] == pytest.approx(sum(task_losses) / 30, rel=1e-5)
    assert got["val_accuracy"] == sum(hits) / 30
    assert got["val_lm_loss"] == pytest.approx(sum(lm_losses) / 30, rel=1e-4)
    assert got["val_loss"] == pytest.approx(got["val_task_loss"] + 0.5 * got["val_lm_loss"])
