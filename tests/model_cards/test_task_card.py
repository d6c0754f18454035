"""The card of a fine-tuned export: fine-tuned from what, on what data and held-out part, with which λ, and the
held-out accuracy in the model-index with the task type the Hub expects; never "trained from scratch"."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from huggingface_hub import metadata_load
from huggingface_hub.repocard_data import model_index_to_eval_results


from hf_gpt_custom.model_cards.task_card import KNOWN_TASK_DATASETS

REAL_KNOWN_TASK_DATASETS = dict(KNOWN_TASK_DATASETS)


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def base_model(tmp_path_factory) -> Path:
    """A tiny causal LM saved as a pre-training run's final/ (bytes-only tokenizer: 257 tokens)."""
    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM, GPTCustomTokenizerFast

    folder = tmp_path_factory.mktemp("runs") / "wiki-base" / "final"
    tokenizer = GPTCustomTokenizerFast.bytes_only()
    config = GPTCustomConfig(vocab_size=len(tokenizer), n_positions=96, n_embd=32, n_layer=2, n_head=4,
                             bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    GPTCustomForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _finetune(tmp_path: Path, base: Path, dataset: Path, *overrides: str) -> Path:
    from hf_gpt_custom.training.finetune import finetune
    from hf_gpt_custom.training.finetune_config import load_finetune_config

    return finetune(load_finetune_config(None, [
        f"init_from={base}", f"dataset={dataset}", f"out_dir={tmp_path}", "run_name=tiny-boolq", "block_size=96",
        "batch_size=8", "max_steps=3", "warmup_steps=0", "eval_interval=3", "val_fraction=0.25", "log_with=none",
        "seed=5", *overrides,
    ]))


@pytest.fixture(scope="module")
def forty_record_splits():
    """KNOWN_TASK_DATASETS with BoolQ's and PIQA's splits of 40 records: a card recognises a known copy by holding
    every record of its split (3,270 and 1,838), which tiny fine-tuning runs do not train on."""
    from hf_gpt_custom.model_cards import task_card

    known = dict(task_card.KNOWN_TASK_DATASETS)
    for name in ("boolq", "piqa"):
        hub_id, config, split, description, _, fields = known[name]
        known[name] = (hub_id, config, split, description, 40, fields)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(task_card, "KNOWN_TASK_DATASETS", known)
        yield


@pytest.fixture(scope="module")
def boolq_export(tmp_path_factory, base_model, shared_data_dir, forty_record_splits) -> tuple[Path, Path]:
    from hf_gpt_custom.hub import export_folder

    lines = (shared_data_dir / "boolq" / "val.jsonl").read_text().splitlines()[:40]
    data = _write_jsonl(tmp_path_factory.mktemp("data") / "boolq" / "val.jsonl", [json.loads(l) for l in lines])
    run = _finetune(tmp_path_factory.mktemp("ft") / "run", base_model, data, "task.format=pair",
                    "task.text_columns=passage,question", "task.labels=false,true", "task.lm_loss_weight=0.25")
    return run, export_folder(run, run.parent / "export")


def test_fine_tuned_card_names_base_data_lambda_and_never_scratch(boolq_export, tmp_path_factory):
    run, export = boolq_export
    text = (export / "README.md").read_text(encoding="utf-8")
    assert "fine-tuned from the pre-trained model `wiki-base/final`" in text  # its run and folder, not its path
    assert "scratch" not in text.lower()
    assert "λ = 0.25" in text and "BoolQ (SuperGLUE dev)" in text and "`val.jsonl`" in text
    min_lr_ratio = json.loads((run / "training_summary.json").read_text())["config"]["min_lr_ratio"]
    assert f"then cosine decay to {min_lr_ratio} × the peak, in" in " ".join(text.split())  # its floor (figuretruth)
    assert "25% of its records (10), drawn with seed\n  5," in text or "25% of its records (10), drawn with seed 5" in \
        " ".join(text.split())
    assert "AutoModelForSequenceClassification" in text and "AutoModelForCausalLM" not in text
    assert str(run.parent) not in text
    from hf_gpt_custom.model_cards.card import transformers_requirement

    assert f"(`{transformers_requirement()}`, torch, tokenizers)" in text  # the pin, rendered
    saved = json.loads((export / "config.json").read_text())  # the dropout fine-tuning ran with, as saved
    assert f"| `model.resid_pdrop` | {saved['resid_pdrop']:g} |" in text
    assert "classifier_dropout" not in text  # a sequence-classification head has no dropout to name (as GPT-2's)


def test_a_card_of_fine_tuning_further_says_the_head_was_trained_on_not_drawn_new(boolq_export, tmp_path):
    """init_from a fine-tuned folder of the same head: its head and task-token embeddings were trained further, and
    the card said "a new linear head" and "two new token embeddings drawn" (found by a hunt). The first run's card
    still says them."""
    from hf_gpt_custom.hub import export_folder

    run, export = boolq_export
    data = run / "config.yaml"
    dataset = next(line.split(": ", 1)[1] for line in data.read_text().splitlines() if line.startswith("dataset:"))
    further = _finetune(tmp_path / "further", run / "final", Path(dataset.strip("'\"")), "task.format=pair",
                        "task.text_columns=passage,question", "task.labels=false,true", "task.lm_loss_weight=0.25")
    text = " ".join((export_folder(further, tmp_path / "export") / "README.md").read_text(encoding="utf-8").split())
    assert "fine-tuned further from `run/final`, a model already fine-tuned with this head" in text
    assert "its weights, head and task-token embeddings, all trained further; nothing drawn new" in text
    assert "new linear head" not in text and "new token embeddings" not in text
    # its held-out records are this run's: the run it continued may have trained on them (a docs pass)
    assert "never trained on" not in text and "is held out from this run only" in text
    first = " ".join((export / "README.md").read_text(encoding="utf-8").split())
    assert "a new linear head read at the extract token" in first
    assert "for the task tokens (`<|delim|>`, `<|extract|>`), 2 new token embeddings drawn" in first
    assert "were held out and never trained on" in first


def test_a_card_says_how_many_held_out_records_repeat_a_training_input(boolq_export, tmp_path):
    """Its held-out accuracy counted inputs also trained on (a file with repeated rows: 21 of 30 in the newuser5 walk)
    while the card said "held out and never trained on"; only the terminal warned."""
    import shutil

    from hf_gpt_custom.hub import export_folder

    run, _ = boolq_export
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    summary_path = copy / "training_summary.json"
    summary = json.loads(summary_path.read_text())
    assert summary["heldout_repeating_training_inputs"] == 0  # the run's own count: no repeated rows in its file
    summary_path.write_text(json.dumps({**summary, "heldout_repeating_training_inputs": 3}))
    export = export_folder(copy, tmp_path / "export")
    text = " ".join((export / "README.md").read_text(encoding="utf-8").split())
    assert "never trained on" not in text
    assert ("were held out of training, but 3 of them repeat a training input (the same text, e.g. a row the file "
            "holds twice), so the accuracy below counts inputs the model was trained on;") in text
    assert "heldout_repeating_training_inputs: 3" in text  # the model-index entry's dataset args
    # fine-tuning further: the sentence of a continued head, and the count beside it
    summary_path.write_text(json.dumps({**summary, "heldout_repeating_training_inputs": 3,
                                        "continued_a_fine_tuned_head": True}))
    text = " ".join((export_folder(copy, tmp_path / "export2") / "README.md").read_text(encoding="utf-8").split())
    assert ("3 of the held-out records repeat an input of this run's training (the same text). The model it "
            "continued from was fine-tuned before") in text


def test_fine_tuned_card_model_index_holds_the_heldout_accuracy(boolq_export):
    run, export = boolq_export
    summary = json.loads((run / "training_summary.json").read_text())
    metadata = metadata_load(export / "README.md")
    assert metadata["pipeline_tag"] == "text-classification" and metadata["datasets"] == ["aps/super_glue"]
    assert "gpt2" in metadata["tags"]  # the tiny base has GPT-2's block
    _, [result] = model_index_to_eval_results(metadata["model-index"])
    assert (result.task_type, result.dataset_type, result.dataset_config, result.dataset_split) == (
        "text-classification", "aps/super_glue", "boolq", "validation")
    assert result.metric_type == "accuracy"
    assert result.metric_value == round(summary["val_accuracy"], 4)
    assert result.dataset_args == {"heldout_fraction": 0.25, "heldout_seed": 5, "heldout_examples": 10}


def test_a_task_on_a_local_file_of_no_known_hub_copy_has_no_model_index_entry(boolq_export, tmp_path):
    """A model-index entry's dataset type is a Hub dataset id; the file's stem (`train`) named an unrelated dataset.
    As transformers' Trainer does without a dataset, the entry is left out; the card's text keeps the accuracy."""
    from hf_gpt_custom.model_cards.card import build_model_card

    run, _ = boolq_export
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    summary = json.loads((copy / "training_summary.json").read_text())
    local_file = str(tmp_path / "mine" / "train.jsonl")
    (copy / "training_summary.json").write_text(json.dumps({**summary, "dataset": local_file}))
    card = build_model_card(copy)
    assert "model-index" not in card.data.to_dict() and card.data.datasets is None
    assert f"{summary['val_accuracy']:.4f}" in card.text and "`train.jsonl`" in card.text


def test_fine_tuned_export_loads_as_its_head_with_the_task_tokens(boolq_export):
    import hf_gpt_custom  # noqa: F401
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    run, export = boolq_export
    model = AutoModelForSequenceClassification.from_pretrained(export)
    tokenizer = AutoTokenizer.from_pretrained(export)
    assert type(model).__name__ == "GPTCustomForSequenceClassification"
    assert model.config.id2label == {0: "false", 1: "true"}  # λ stays with the run (card), not the model
    assert tokenizer.convert_tokens_to_ids(["<|delim|>", "<|extract|>"]) == [257, 258]
    assert model.config.vocab_size == len(tokenizer) == 259
    final = AutoModelForSequenceClassification.from_pretrained(run / "final")
    for key, value in final.state_dict().items():
        assert torch.equal(value, model.state_dict()[key]), key  # the head is exported, not dropped


def test_the_export_pads_on_its_fine_tuning_side_so_a_pipeline_batch_scores_each_text_as_alone(boolq_export):
    """Issue 22.1: export forced left padding on a head fine-tuned (and carded) with right padding; with learned
    positions pipeline(batch_size=2) then gave another P(true) than one text at a time."""
    import hf_gpt_custom  # noqa: F401
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    run, export = boolq_export
    tokenizer = AutoTokenizer.from_pretrained(export)
    assert tokenizer.padding_side == AutoTokenizer.from_pretrained(run / "final").padding_side == "right"
    model = AutoModelForSequenceClassification.from_pretrained(export).eval()
    classify = pipeline("text-classification", model=model, tokenizer=tokenizer, top_k=None)
    texts = ["is the sky blue", "does a cat have nine lives in the old stories", "no", "can fish climb trees"]
    alone = [{score["label"]: score["score"] for score in classify([text])[0]} for text in texts]
    batched = [{score["label"]: score["score"] for score in scores} for scores in classify(texts, batch_size=2)]
    for one, in_batch in zip(alone, batched):
        assert in_batch == pytest.approx(one, abs=1e-6)


def test_multiple_choice_card_uses_the_multiple_choice_task_type(base_model, tmp_path, forty_record_splits):
    from hf_gpt_custom.model_cards.card import build_model_card

    rows = [{"goal": f"goal {i}", "sol1": "yes a", "sol2": "no b", "label": i % 2} for i in range(40)]
    data = _write_jsonl(tmp_path / "data" / "piqa_valid_labelled.jsonl", rows)  # any folder: the records tell
    run = _finetune(tmp_path / "run", base_model, data, "task.format=multiple_choice", "task.text_columns=goal",
                    "task.choice_columns=sol1,sol2", "task.lm_loss_weight=0")
    card = build_model_card(run)
    _, [result] = model_index_to_eval_results(card.data.to_dict()["model-index"])
    assert result.task_type == "multiple-choice" and result.dataset_type == "baber/piqa"
    assert "AutoModelForMultipleChoice" in card.text and "λ = 0.0" in card.text
    assert "scratch" not in card.text.lower()


def test_model_index_value_is_the_recorded_heldout_accuracy_not_another_figure(boolq_export, tmp_path):
    """Distinct recorded figures (a tiny model's accuracy often equals the majority class), so the card's number can
    only come from val_accuracy."""
    import shutil

    from hf_gpt_custom.model_cards.card import build_model_card

    run, _ = boolq_export
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("checkpoints"))
    summary = json.loads((copy / "training_summary.json").read_text())
    summary.update(val_accuracy=0.612345, val_accuracy_stderr=0.0191, majority_class_accuracy=0.7)
    (copy / "training_summary.json").write_text(json.dumps(summary))
    card = build_model_card(copy)
    _, [result] = model_index_to_eval_results(card.data.to_dict()["model-index"])
    assert result.metric_value == 0.6123
    assert "| accuracy | 0.6123 ± 0.0191 |" in card.text and "| 0.7000 |" in card.text


def test_the_card_counts_the_examples_of_an_optimizer_step(boolq_export, tmp_path):
    """Said "batches of 8 examples" for 8 per micro-batch × 2 accumulated × 3 processes = 48 per step."""
    from hf_gpt_custom.model_cards.card import build_model_card

    run, _ = boolq_export
    assert "batches of 8 examples, peak" in " ".join(build_model_card(run).text.split())
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    summary = json.loads((copy / "training_summary.json").read_text())
    (copy / "training_summary.json").write_text(json.dumps({**summary, "num_processes": 3}))
    config = (copy / "config.yaml").read_text().replace("gradient_accumulation_steps: 1", "gradient_accumulation_steps: 2")
    (copy / "config.yaml").write_text(config)
    text = " ".join(build_model_card(copy).text.split())
    assert "batches of 48 (8 per micro-batch × 2 accumulated × 3 processes) examples" in text
    (copy / "config.yaml").write_text(config.replace("gradient_accumulation_steps: 2", "gradient_accumulation_steps: 1"))
    assert "batches of 24 (8 per micro-batch × 3 processes) examples" in " ".join(build_model_card(copy).text.split())


def test_the_cards_snippet_runs_as_written_on_a_passage_longer_than_the_context(boolq_export):
    """The pair snippet used undefined `premise, hypothesis` and no truncation: a real BoolQ passage (783 tokens)
    was refused past the 256-token context. The snippet is run as the card writes it, with the export's path for
    the repository id and a long passage for each "..."."""
    import re

    import hf_gpt_custom  # noqa: F401  (the registered classes: trust_remote_code then uses the package's code)

    _, export = boolq_export
    card = (export / "README.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", card, re.S).group(1)
    assert "passage, question = " in snippet and "truncation=True" in snippet
    repo_id = re.search(r'from_pretrained\("([^"]+)"', snippet).group(1)
    code = snippet.replace(f'"{repo_id}"', repr(str(export))).replace('"..."', repr("a long passage " * 300))
    printed = []
    exec(code, {"print": printed.append})  # noqa: S102 - the card's own example
    assert printed[0] in ("false", "true")


def test_the_fine_tuned_card_carries_the_exporters_license(boolq_export, tmp_path):
    """export --license reaches a fine-tuned card's metadata as it does a pre-trained one's (read back with
    huggingface_hub's metadata_load)."""
    from hf_gpt_custom.hub import export_folder

    run, _ = boolq_export
    out = export_folder(run, tmp_path / "export-mit", license="mit")
    assert metadata_load(out / "README.md")["license"] == "mit"
    own = export_folder(run, tmp_path / "export-own", license="other", license_name="my-license-1.0",
                        license_link="https://example.org/my-license")
    metadata = metadata_load(own / "README.md")
    assert (metadata["license"], metadata["license_name"], metadata["license_link"]) == (
        "other", "my-license-1.0", "https://example.org/my-license")


def test_the_multiple_choice_cards_snippet_runs_as_written_on_a_context_longer_than_the_context(base_model, tmp_path):
    """The multiple-choice snippet has no truncation=True (the pair one has): a context longer than block_size is
    scored whole, not as fine-tuning cut it, and past n_positions it is refused, so the card's snippet neither runs
    on a long PIQA/HellaSwag context nor gives the predictions the held-out accuracy was measured on."""
    import re

    import hf_gpt_custom  # noqa: F401
    from hf_gpt_custom.hub import export_folder

    rows = [{"goal": f"goal {i}", "sol1": "yes a", "sol2": "no b", "label": i % 2} for i in range(40)]
    data = _write_jsonl(tmp_path / "mine" / "mc.jsonl", rows)
    run = _finetune(tmp_path / "run", base_model, data, "task.format=multiple_choice", "task.text_columns=goal",
                    "task.choice_columns=sol1,sol2", "task.lm_loss_weight=0")
    export = export_folder(run, tmp_path / "export")
    snippet = re.search(r"```python\n(.*?)```", (export / "README.md").read_text(), re.S).group(1)
    repo_id = re.search(r'from_pretrained\("([^"]+)"', snippet).group(1)
    code = snippet.replace(f'"{repo_id}"', repr(str(export))).replace('"..."', repr("a long context " * 300), 1)
    printed = []
    exec(code, {"print": printed.append})  # noqa: S102 - the card's own example
    assert printed[0] in (0, 1)


def test_a_card_without_a_model_index_does_not_point_to_one(boolq_export, tmp_path):
    """A local file of no known Hub copy gets no model-index entry, yet the card's text still says "The accuracy
    is also in the `model-index` metadata above"."""
    from hf_gpt_custom.model_cards.card import build_model_card

    run, _ = boolq_export
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    summary = json.loads((copy / "training_summary.json").read_text())
    (copy / "training_summary.json").write_text(json.dumps({**summary, "dataset": str(tmp_path / "mine" / "t.jsonl")}))
    card = build_model_card(copy)
    assert "model-index" not in card.data.to_dict()
    assert "model-index` metadata above" not in card.text
    # huggingface_hub wrote the model-index's name as a top-level `model_name:` key, which no Hub field is
    card.save(tmp_path / "README.md")
    assert "model_name" not in metadata_load(tmp_path / "README.md")


def test_a_file_is_not_claimed_as_a_hub_split_for_the_name_of_its_folder(tmp_path, shared_data_dir, monkeypatch):
    """The card's model-index names aps/super_glue boolq *validation* for any file in a folder called boolq: a
    300-record subset (or a user's own train file) is published as the held-out part of the SuperGLUE dev split,
    which nobody can reproduce from the Hub with the recorded fraction and seed."""
    from hf_gpt_custom.model_cards import task_card
    from hf_gpt_custom.model_cards.task_card import task_dataset_facts

    monkeypatch.setattr(task_card, "KNOWN_TASK_DATASETS", REAL_KNOWN_TASK_DATASETS)  # (forty_record_splits may be on)

    lines = (shared_data_dir / "boolq" / "val.jsonl").read_text().splitlines()[:300]
    subset = tmp_path / "boolq" / "my_subset.jsonl"
    subset.parent.mkdir()
    subset.write_text("\n".join(lines) + "\n")
    assert task_dataset_facts(str(subset))["hub_id"] is None
    assert task_dataset_facts(str(shared_data_dir / "boolq" / "val.jsonl"))["hub_id"] == "aps/super_glue"
    # the PIQA copy finetune_experiment.py joins (records of the validation split with their labels), in any folder
    goals = (shared_data_dir / "piqa" / "valid.jsonl").read_text().splitlines()
    labels = (shared_data_dir / "piqa" / "valid-labels.lst").read_text().split()
    joined = _write_jsonl(tmp_path / "runs" / "data" / "piqa_valid_labelled.jsonl",
                          [{**json.loads(goal), "label": int(label)} for goal, label in zip(goals, labels)])
    assert task_dataset_facts(str(joined))["hub_id"] == "baber/piqa"


def test_a_hub_datasets_config_and_split_reach_its_model_index_entry():
    """A fine-tune on nyu-mll/glue sst2 wrote a model-index entry with no config and no split: ambiguous across GLUE's
    ten configs (the ftread hunt). Reference: the run's dataset_config and dataset_split, as the pre-training card
    reads them."""
    from hf_gpt_custom.model_cards.task_card import task_dataset_facts, task_eval_result

    facts = task_dataset_facts("nyu-mll/glue", "sst2", "train")
    summary = {"heldout_fraction": 0.1, "heldout_seed": 0, "heldout_examples": 10, "val_accuracy": 0.5}
    entry = task_eval_result(summary, facts, "text-classification")
    assert (entry.dataset_type, entry.dataset_config, entry.dataset_split) == ("nyu-mll/glue", "sst2", "train")
    assert facts["description"] == "the Hub dataset `nyu-mll/glue`, config `sst2`, split `train`"


def test_a_fine_tuned_runs_card_names_the_hub_config_and_split_it_read(boolq_export, tmp_path):
    """The same through the card of a run folder: its recorded dataset settings made Hub ones (no network here)."""
    import re
    import shutil

    from hf_gpt_custom.model_cards.card import build_model_card

    run = tmp_path / "hub_run"
    shutil.copytree(boolq_export[0], run)
    hub = {"dataset": "nyu-mll/glue", "dataset_config": "sst2", "dataset_split": "validation"}
    summary = json.loads((run / "training_summary.json").read_text())
    summary["dataset"] = hub["dataset"]
    summary.get("config", {}).update(hub)
    (run / "training_summary.json").write_text(json.dumps(summary))
    text = (run / "config.yaml").read_text()
    for key, value in hub.items():
        text = re.sub(rf"(?m)^{key}:.*$", f"{key}: {value}", text)
    (run / "config.yaml").write_text(text)
    (entry,) = build_model_card(run).data.eval_results
    assert (entry.dataset_type, entry.dataset_config, entry.dataset_split) == ("nyu-mll/glue", "sst2", "validation")


def test_the_card_says_the_tokenizer_cuts_as_fine_tuning_did_only_where_it_does(boolq_export, monkeypatch):
    """Ours cuts a pair as fine-tuning did (tests/training/test_finetune.py holds it); another class (a Llama's
    SentencePiece one, kept as it is) cuts both parts of a pair by its own rule, and the card said "the same way"
    for it too: a hunt's Llama fine-tune read other tokens from the card's snippet, a BoolQ class flipped."""
    from hf_gpt_custom import model_folder
    from hf_gpt_custom.model_cards.card import build_model_card

    run, _ = boolq_export
    ours = " ".join(build_model_card(run).text.split())
    assert "the tokenizer cuts yours the same way with `truncation=True`" in ours
    real = model_folder.load_folder_tokenizer

    class LlamaTokenizerFast:  # stands for a kept SentencePiece class: only its name and tokens are read
        def __init__(self, tokenizer):
            self.convert_ids_to_tokens = tokenizer.convert_ids_to_tokens
            self.bos_token, self.eos_token = "<s>", "</s>"

    monkeypatch.setattr(model_folder, "load_folder_tokenizer", lambda folder: LlamaTokenizerFast(real(folder)))
    other = " ".join(build_model_card(run).text.split())
    assert "cuts yours the same way" not in other
    assert ("with `truncation=True` this tokenizer (`LlamaTokenizerFast`) cuts both parts of a longer input by its own "
            "rule") in other
    # its start token is its bos, where the card named <|endoftext|> for every model
    assert "`<s>{passage}<|delim|>{question}<|extract|>`" in other or "`<s>{premise}" in other
    assert "`<s>` starts every sequence" in other and "`<|endoftext|>` starts every sequence" in ours


def test_a_known_dataset_copy_is_recognised_when_a_record_holds_a_line_separator(shared_data_dir, tmp_path,
                                                                                   monkeypatch):
    """JSON strings may hold U+2028 unescaped (json.dumps(ensure_ascii=False) leaves it); counting records with
    splitlines() broke there, so a BoolQ copy with one such passage had one record too many and the card cited "the
    local file" instead of BoolQ. Reference: the records json.loads reads, one per "\\n"-ended line."""
    from hf_gpt_custom.model_cards import task_card
    from hf_gpt_custom.model_cards.task_card import _known_copy

    monkeypatch.setattr(task_card, "KNOWN_TASK_DATASETS", REAL_KNOWN_TASK_DATASETS)  # (forty_record_splits may be on)
    text = (shared_data_dir / "boolq" / "val.jsonl").read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.split("\n") if line.strip()]
    records[5]["passage"] += "\u2028Second paragraph."
    path = tmp_path / "val.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    assert "\u2028" in path.read_text(encoding="utf-8")
    assert _known_copy(path) == "boolq"


def _exported_asking_for_tuples(run, out_dir):
    """The run's final/ made to say return_dict=false (as a converted base passes it on), exported: (folder, the
    card's first Python snippet)."""
    import re

    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.manifest import write_manifest

    config = json.loads((run / "final" / "config.json").read_text())
    (run / "final" / "config.json").write_text(json.dumps({**config, "return_dict": False}))
    write_manifest(run / "final")
    export = export_folder(run, out_dir)
    return export, re.search(r"```python\n(.*?)```", (export / "README.md").read_text(), re.S).group(1)


def test_the_cards_snippet_runs_as_written_where_the_config_asks_for_tuples(boolq_export, tmp_path):
    """A base converted from a transformers folder whose config.json says return_dict=false passes it on to the
    fine-tuned export: the card's `model(**inputs).logits` then failed on a tuple (the convflow hunt). The snippet
    asks for outputs by name there, and runs as written (as in the test above)."""
    import re
    import shutil

    import hf_gpt_custom  # noqa: F401

    run, _ = boolq_export
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    export, snippet = _exported_asking_for_tuples(copy, tmp_path / "export")
    assert "model(**inputs, return_dict=True).logits" in snippet
    repo_id = re.search(r'from_pretrained\("([^"]+)"', snippet).group(1)
    printed = []
    exec(snippet.replace(f'"{repo_id}"', repr(str(export))).replace('"..."', repr("a passage")),  # noqa: S102
         {"print": printed.append})
    assert printed[0] in ("false", "true")
    plain = re.search(r"```python\n(.*?)```", (run.parent / "export" / "README.md").read_text(), re.S).group(1)
    assert "return_dict" not in plain  # a usual config's snippet is as before


def test_the_multiple_choice_cards_snippet_runs_as_written_where_the_config_asks_for_tuples(base_model, tmp_path):
    """The pair snippet asks for outputs by name where config.json says return_dict=false (carried from a converted
    base); the multiple-choice one must too, or its `.logits` fails on a tuple as written (the mutation sweep: the
    test above covers the pair snippet only). Reference: the head's own choice, read with return_dict=True."""
    import re

    import hf_gpt_custom  # noqa: F401
    from hf_gpt_custom import GPTCustomForMultipleChoice

    rows = [{"goal": f"goal {i}", "sol1": "yes a", "sol2": "no b", "label": i % 2} for i in range(40)]
    data = _write_jsonl(tmp_path / "mine" / "mc.jsonl", rows)
    run = _finetune(tmp_path / "run", base_model, data, "task.format=multiple_choice", "task.text_columns=goal",
                    "task.choice_columns=sol1,sol2", "task.lm_loss_weight=0")
    export, snippet = _exported_asking_for_tuples(run, tmp_path / "export")
    assert "return_dict=True).logits" in snippet
    repo_id = re.search(r'from_pretrained\("([^"]+)"', snippet).group(1)
    code = snippet.replace(f'"{repo_id}"', repr(str(export))).replace('"..."', repr("a context"), 1)
    printed, names = [], {}
    exec(code, {"print": printed.append, "__name__": "snippet"}, names)  # noqa: S102 - the card's own example
    model = GPTCustomForMultipleChoice.from_pretrained(export).eval()
    assert model.config.return_dict is False
    with torch.no_grad():
        expected = model(**{k: v.unsqueeze(0) for k, v in names["inputs"].items()}, return_dict=True).logits
    assert printed == [int(expected.argmax())]
