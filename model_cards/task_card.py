"""The model card of a fine-tuned run (`hf-gpt-custom finetune`): what it was fine-tuned from, on which data and
held-out part, with which λ, and its held-out accuracy in the model-index.

card.build_model_card sends a run whose training_summary.json records a `task` here; the sentences are in
templates/task_model_card.md. As in card.py, no local path reaches the card: the base model is named by its folder
(with its run's name when the folder is a run's final/ or export/), the data by its base name or Hub id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

TEMPLATE_PATH = Path(__file__).parent / "templates" / "task_model_card.md"

# Local labelled files (folder under ../shared/data) -> the Hub dataset (path, config, split) they are a copy of,
# as eval/tasks/*.yaml name them.
# Hub splits whose whole copy (../shared/data, or PIQA's with its labels joined by benchmarks/finetune_experiment.py)
# a card may name: (hub id, config, split, description, records, fields a record holds). A file is taken for one by
# its contents, every record of the split, not by its folder's name: a 300-record subset in a boolq/ folder is no
# SuperGLUE dev split, and nobody could rebuild its held-out part from the Hub with the recorded fraction and seed.
KNOWN_TASK_DATASETS: dict[str, tuple[str, str | None, str, str, int, frozenset[str]]] = {
    "boolq": ("aps/super_glue", "boolq", "validation", "BoolQ (SuperGLUE dev)", 3270,
              frozenset({"question", "passage", "label"})),
    "piqa": ("baber/piqa", None, "validation", "PIQA (validation)", 1838, frozenset({"goal", "sol1", "sol2", "label"})),
    "copa": ("aps/super_glue", "copa", "validation", "COPA (SuperGLUE dev)", 100,
             frozenset({"premise", "choice1", "choice2", "question", "label"})),
}
# head class -> (Auto class, Hub task type, pipeline tag, description)
HEADS = {
    "GPTCustomForSequenceClassification": ("AutoModelForSequenceClassification", "text-classification",
                                           "text-classification", "sequence-classification"),
    "GPTCustomForMultipleChoice": ("AutoModelForMultipleChoice", "multiple-choice", None, "multiple-choice"),
}
FORMAT_NAMES = {"classification": "classification", "pair": "text pairs (entailment)",
                "multiple_choice": "multiple choice"}
DEFAULT_START = "<|endoftext|>"  # the start token of ours; a Llama's is its bos, <s> (install_task_template)
INPUT_FORMATS = {
    "classification": "<|endoftext|>{text}<|extract|>",
    "pair": "<|endoftext|>{premise}<|delim|>{hypothesis}<|extract|>",
    "multiple_choice": "for each answer: <|endoftext|>{context}<|delim|>{answer}<|extract|>",
}


def build_task_model_card(run_dir: Path, summary: dict, train_config: dict, model_config, repo_id: str | None,
                          license: dict[str, str | None], facts: dict[str, Any],
                          language: list[str] | None = None) -> ModelCard:
    """The card of a fine-tuned run; `facts` are the ones card.py gathers for every card (name, size, code files)."""
    head_name = next(name for name in (model_config.architectures or []) if name in HEADS)
    auto_class, task_type, pipeline_tag, description = HEADS[head_name]
    task = summary["task"]
    dataset = task_dataset_facts(str(summary.get("dataset") or ""), train_config.get("dataset_config"),
                                 train_config.get("dataset_split") or "train")
    run_name = facts["model_name"]
    from hf_gpt_custom.model_cards.card import KNOWN_DATASET_LANGUAGE, architecture_tags, hub_base_model

    card_data = ModelCardData(
        language=language or (KNOWN_DATASET_LANGUAGE if dataset["known"] else None),
        **license,  # license, and for `license: other` its license_name and license_link
        base_model=hub_base_model(summary, train_config),
        library_name="transformers",
        pipeline_tag=pipeline_tag,
        tags=["hf-gpt-custom", "gpt_custom", *architecture_tags(model_config), "custom_code", "gpt1-fine-tuning",
              task_type],
        datasets=[dataset["hub_id"]] if dataset["hub_id"] else None,
        metrics=["accuracy"],
        # the model-index's name; without a model-index huggingface_hub would write it as a key of its own, which
        # no Hub metadata field is
        model_name=run_name if dataset["hub_id"] else None,
        # a model-index entry's dataset type is a Hub dataset id: a local file of no known Hub copy gets none (the
        # card's text gives its accuracy), as transformers' Trainer leaves out results without a dataset
        eval_results=[task_eval_result(summary, dataset, task_type)] if dataset["hub_id"] else None,
    )
    fraction = float(summary["heldout_fraction"])
    saved_tokenizer = _saved_tokenizer_facts(run_dir, task, model_config)
    return ModelCard.from_template(
        card_data,
        template_path=str(TEMPLATE_PATH),
        repo_id=repo_id or f"your-username/{run_name}",
        head={"auto_class": auto_class, "description": description, "format_name": FORMAT_NAMES[task["format"]],
              # summaries written before the field: always a new head
              "continued": bool(summary.get("continued_a_fine_tuned_head")),
              "tokens": _task_token_facts(summary)},
        base_model=base_model_name(str(summary.get("fine_tuned_from") or train_config.get("init_from") or "")),
        dataset=dataset,
        task=task,
        input_format=INPUT_FORMATS[task["format"]].replace(DEFAULT_START, saved_tokenizer["start_token"]),
        usage_example=_usage_example(task, model_config),
        block_size=train_config.get("block_size"),
        pad_token=saved_tokenizer["pad_token"],
        saved_tokenizer=saved_tokenizer,
        heldout={"fraction_percent": f"{fraction:.0%}", "examples": summary["heldout_examples"],
                 "train_examples": summary["train_examples"], "seed": summary["heldout_seed"],
                 # None in summaries written before the count: nothing known, the card says what it always said
                 "repeated": summary.get("heldout_repeating_training_inputs")},
        training={"steps": summary.get("steps"), "examples_per_step": _examples_per_step(train_config, summary),
                  "learning_rate": f"{train_config.get('learning_rate', float('nan')):g}",
                  "warmup_steps": train_config.get("warmup_steps"), "duration": facts["duration"],
                  # the cosine's floor: the card said "cosine decay" alone, read as decay to 0 (the figuretruth hunt)
                  "min_lr_ratio": train_config.get("min_lr_ratio")},
        results={"accuracy": _with_stderr(summary["val_accuracy"], summary.get("val_accuracy_stderr")),
                 "majority": f"{summary['majority_class_accuracy']:.4f}",
                 "task_loss": f"{summary['val_task_loss']:.4f}"},
        hyperparameters=[row for row in facts["hyperparameters"]  # a local file has no Hub split or config
                         if not (dataset["local_file"] and row[0] in ("dataset_split", "dataset_config"))],
        **{key: facts[key] for key in ("model_name", "n_params_human", "code_files", "loss_curve",
                                       "transformers_requirement")},
    )


def _task_token_facts(summary: dict) -> dict[str, Any] | None:
    """The task tokens added to the tokenizer (`names`), how many rows the embedding grew by for them (`drawn`), and
    how many took rows it already had (`reused`: a base whose vocab_size exceeds its tokenizer, which is not
    resized). "Two new embeddings drawn" was said of every run: OpenAI GPT's folder gets four tokens, and a padded
    vocabulary none. None for a summary written before the record (the card then says what it always said)."""
    added = summary.get("task_tokens_added")
    if added is None:
        return None
    drawn = max(0, int(summary.get("new_embedding_rows") or 0))
    return {"names": ", ".join(f"`{token}`" for token in added), "drawn": drawn, "reused": max(0, len(added) - drawn)}


def _examples_per_step(train_config: dict, summary: dict) -> str:
    """How many examples one optimizer step learns from: "8", or "48 (8 per micro-batch × 3 accumulated × 2
    processes)" when gradient accumulation or several processes multiply the micro-batch."""
    batch = int(train_config.get("batch_size") or 0)
    accumulation = int(train_config.get("gradient_accumulation_steps") or 1)
    processes = int(summary.get("num_processes") or 1)
    if accumulation == 1 and processes == 1:
        return f"{batch:,}"
    parts = [f"{batch:,} per micro-batch", f"{accumulation} accumulated" if accumulation > 1 else "",
             f"{processes} processes" if processes > 1 else ""]
    return f"{batch * accumulation * processes:,} ({' × '.join(part for part in parts if part)})"


def task_eval_result(summary: dict, dataset: dict, task_type: str) -> EvalResult:
    """The held-out accuracy as one model-index entry; the held-out part is named in the dataset's args."""
    return EvalResult(
        task_type=task_type,
        dataset_type=dataset["hub_id"],
        dataset_name=dataset["name"],
        dataset_config=dataset["config"],
        dataset_split=dataset["split"],
        dataset_args={"heldout_fraction": summary["heldout_fraction"], "heldout_seed": summary["heldout_seed"],
                      "heldout_examples": summary["heldout_examples"],
                      **({"heldout_repeating_training_inputs": summary["heldout_repeating_training_inputs"]}
                         if summary.get("heldout_repeating_training_inputs") else {})},
        metric_type="accuracy",
        metric_name="accuracy (held-out)",
        metric_value=round(float(summary["val_accuracy"]), 4),
    )


def base_model_name(init_from: str) -> str:
    """A readable, machine-independent name for the base model folder: `pretrain/final` for a run's final/ or
    export/, `shakespeare/checkpoints/step_000400` for a checkpoint, else the folder's own name; a Hub id as it is."""
    path = Path(init_from)
    if not init_from or not (init_from.startswith((".", "/", "~")) or path.exists()):
        return init_from or "an unrecorded model"
    if path.name in ("final", "export"):
        return f"{path.parent.name}/{path.name}"
    if path.parent.name == "checkpoints":
        return f"{path.parent.parent.name}/checkpoints/{path.name}"
    return path.name


def task_dataset_facts(dataset: str, hub_config: str | None = None, hub_split: str | None = None) -> dict[str, Any]:
    """hub_id/config/split of a known copy (of a Hub dataset: the run's dataset_config and dataset_split, without
    which a model-index entry of nyu-mll/glue named none of its ten configs), a readable description, the local
    file's base name, and whether the file is a known copy."""
    path = Path(dataset)
    is_local = dataset.startswith((".", "/", "~")) or path.exists()
    if not is_local:
        named = "".join(f", {what} `{value}`" for what, value in (("config", hub_config), ("split", hub_split)) if value)
        return {"hub_id": dataset or None, "config": hub_config, "split": hub_split, "name": dataset or "unrecorded",
                "description": f"the Hub dataset `{dataset}`{named}", "local_file": None,
                "known": dataset in {hub_id for hub_id, *_ in KNOWN_TASK_DATASETS.values()}}
    known = _known_copy(path)
    if known is not None:
        hub_id, config, split, description, _, _ = KNOWN_TASK_DATASETS[known]
        return {"hub_id": hub_id, "config": config, "split": split, "name": known, "description": description,
                "local_file": path.name, "known": True}
    return {"hub_id": None, "config": None, "split": None, "name": path.stem,
            "description": f"the local file `{path.name}`", "local_file": path.name, "known": False}


def _known_copy(path: Path) -> str | None:
    """The KNOWN_TASK_DATASETS entry whose every record `path` holds (a JSONL file of its record count and fields)."""
    if path.suffix.lower() != ".jsonl" or not path.is_file():
        return None
    # split at "\n" only: splitlines() also breaks at U+2028 and the like, which JSON strings may hold unescaped
    lines = [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    try:
        fields = set(json.loads(lines[0])) if lines else set()
    except (json.JSONDecodeError, TypeError):
        return None
    return next((name for name, (*_, records, needed) in KNOWN_TASK_DATASETS.items()
                 if len(lines) == records and needed <= fields), None)


def _saved_tokenizer_facts(run_dir: Path, task: dict, model_config) -> dict:
    """What the card says of the saved tokenizer, read from it once:
    - `pad_token`: the token config.pad_token_id names (the head skips it to find the extract token, so the saved and
      exported tokenizers pad with it: eos, or the base tokenizer's own pad token);
    - `start_token`: the one its template adds (a Llama's `<s>`, a new `<|start|>`, where the card named
      `<|endoftext|>` for every model);
    - `same_cut`: whether its truncation=True cuts an input as fine-tuning cut it. Ours does (task_template.py);
      another class (a Llama's SentencePiece one, kept as it is) cuts a single text from its start as fine-tuning
      did, but a pair by its own rule, both parts (the card said "the same way", and a hunt's Llama fine-tune then
      read other tokens: a class flipped on a BoolQ pair)."""
    from hf_gpt_custom import GPTCustomTokenizerFast
    from hf_gpt_custom.model_folder import load_folder_tokenizer
    from hf_gpt_custom.task_template import read_task_template

    tokenizer = load_folder_tokenizer(run_dir / "final")
    template = read_task_template(tokenizer.backend_tokenizer) if getattr(tokenizer, "is_fast", False) else None
    start = tokenizer.convert_ids_to_tokens(template.start) if template is not None else \
        tokenizer.bos_token or tokenizer.eos_token or DEFAULT_START
    return {"pad_token": tokenizer.convert_ids_to_tokens(model_config.pad_token_id), "start_token": str(start),
            "same_cut": isinstance(tokenizer, GPTCustomTokenizerFast) or task["format"] == "classification",
            "class_name": type(tokenizer).__name__}


def _with_stderr(value: float, stderr: float | None) -> str:
    return f"{value:.4f} ± {stderr:.4f}" if stderr is not None else f"{value:.4f}"


def _usage_example(task: dict, model_config) -> str:
    # the tokenizer adds GPT-1's template (start, delimiter, extract) itself: the example passes raw text. A config
    # saying return_dict=false (carried from a converted base folder) returns tuples: the snippet asks for outputs by
    # name there, or `.logits` failed as written
    by_name = "" if getattr(model_config, "return_dict", True) else ", return_dict=True"
    if task["format"] == "multiple_choice":  # truncation=True: a long context is cut as fine-tuning cut it
        return ('context, answers = "...", ["...", "..."]\n'
                'inputs = tokenizer([context] * len(answers), answers, padding=True, truncation=True, '
                'return_tensors="pt")\n'
                f'scores = model(**{{k: v.unsqueeze(0) for k, v in inputs.items()}}{by_name}).logits  # (1, n_answers)\n'
                'print(int(scores.argmax()))  # the index of the chosen answer')
    # the task's own column names where they are Python names (BoolQ: passage, question); truncation=True cuts a
    # long input as fine-tuning cut it, or the model refuses it past its context
    columns = [str(name) for name in task.get("text_columns") or []]
    default = ["premise", "hypothesis"] if task["format"] == "pair" else ["text"]
    names = columns if len(columns) == len(default) and all(name.isidentifier() for name in columns) else default
    values = ", ".join('"..."' for _ in names)
    return (f"{', '.join(names)} = {values}\n"
            f"inputs = tokenizer({', '.join(names)}, truncation=True, return_tensors=\"pt\")\n"
            f"print(model.config.id2label[int(model(**inputs{by_name}).logits.argmax())])")
