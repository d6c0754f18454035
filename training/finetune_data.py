"""Labelled records -> GPT-1's input sequences -> padded batches, and the seeded held-out split.

GPT-1 (Radford et al. 2018, section 3.3) turns every task into token sequences the pre-trained model reads left to
right, with a start token, a delimiter between the parts and an extract token whose final hidden state the linear
head reads:
    classification   start text extract
    pair (entailment) start premise delim hypothesis extract
    multiple choice  for each answer: start context delim answer extract   (one score each, softmax over answers)
The template, its tokens and the rule that cuts an input to block_size live in hf_gpt_custom/task_template.py: the
tokenizer fine-tuning saves adds the same template to raw text, and cuts it the same way. Model building and the
training loop live in finetune.py.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hf_gpt_custom.errors import MissingFileError, UserError
from hf_gpt_custom.task_template import TaskTemplate, install_task_template
from hf_gpt_custom.training.corpus import check_record_files_utf8, content_cache_dir, literal_data_files
from hf_gpt_custom.training.finetune_config import TaskSection, label_key

# Local labelled files by suffix -> the `datasets` builder that reads them.
RECORD_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


@dataclass(frozen=True)
class TaskTokens:
    template: TaskTemplate
    pad: int


def load_task_tokenizer(folder: str | Path):
    """The tokenizer to fine-tune with and save beside the head: the folder's own, as our class when it encodes
    exactly as ours (hf_gpt_custom.model_folder.load_folder_tokenizer).

    Our class adds GPT-1's template and cuts an input exactly as fine-tuning did (task_template.py); another class
    (a converted GPT-2 folder's GPT2Tokenizer) keeps the template but truncates by its own rule (the text's end, both
    parts of a pair), so `tokenizer(text, truncation=True)` would feed the head other tokens than it was trained on.
    A folder whose tokenizer our byte-level class encodes differently (a Llama SentencePiece one) keeps its own class,
    cutting single texts from the left as fine-tuning does."""
    from hf_gpt_custom import GPTCustomTokenizerFast
    from hf_gpt_custom.model_folder import load_folder_tokenizer, set_tokenizer_sides

    tokenizer = load_folder_tokenizer(folder)
    if not isinstance(tokenizer, GPTCustomTokenizerFast):
        set_tokenizer_sides(tokenizer, truncation_side="left")  # saved with it: final/ cuts as fine-tuning cut
    return tokenizer


def add_task_tokens(tokenizer) -> TaskTokens:
    """Add the delimiter and extract tokens as special tokens and GPT-1's template as the tokenizer's post-processor
    (a no-op when a fine-tuned tokenizer has them) and set pad = eos when the tokenizer has no pad token (a new
    `<|pad|>` without eos: padding is never attended to). Resize the model's embedding to len(tokenizer) afterwards."""
    template = install_task_template(tokenizer)
    if tokenizer.pad_token is None and tokenizer.eos_token is None:
        tokenizer.add_special_tokens({"pad_token": "<|pad|>"})
    elif tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return TaskTokens(template, tokenizer.pad_token_id)


# --- records -------------------------------------------------------------------------------------------------------


def load_labelled_records(dataset: str, dataset_config: str | None = None, split: str = "train",
                          revision: str | None = None, task: TaskSection | None = None) -> list[dict]:
    """Every record of a local .jsonl/.json/.csv/.parquet file, or of split `split` of a Hub dataset (at `revision`).

    With `task`, a label column that is a datasets ClassLabel (a Hub dataset's, a parquet file's) gives its names
    when task.labels are those names (glue/sst2's negative/positive), as `features[column].int2str` reads them;
    stored as 0/1, labels written as names were refused as "label=0 is not in the label set"."""
    return labelled_records_with_places(dataset, dataset_config, split, revision, task)[0]


def labelled_records_with_places(dataset: str, dataset_config: str | None = None, split: str = "train",
                                 revision: str | None = None,
                                 task: TaskSection | None = None) -> tuple[list[dict], list[str]]:
    """load_labelled_records's records, and where each one is for an error to name: "line N" of a JSON Lines or CSV
    file (the line a user opens; a record's number pointed past blank lines and a CSV's header), "record N" of a
    JSON array, "row N" (1-based, in split order) of a parquet file or a Hub split."""
    path = Path(dataset)
    if path.is_file():  # a Windows-1252 CSV or a UTF-16 file was a bare UnicodeDecodeError
        check_record_files_utf8([path])
    if path.is_file() and path.suffix.lower() in (".jsonl", ".json"):
        read = _json_records(path)
        if read is not None:
            return read
    rows = _load_records(dataset, dataset_config, split, revision)
    records = rows.to_list() if task is None else _with_class_names(rows, task)
    places = _csv_lines(path) if path.is_file() and path.suffix.lower() == ".csv" else None
    if places is None or len(places) != len(records):  # a layout the line count cannot follow: the record's number
        places = [f"row {number}" for number in range(1, len(records) + 1)]
    return records, places


def _json_records(path: Path) -> tuple[list[dict], list[str]] | None:
    """The objects of a JSON Lines file, or of a JSON array of objects, with every number as the text the file holds,
    and where each is ("line N", "record N"); None for another layout, which datasets reads. datasets (pyarrow) gives a column one type: an answer column of 7
    and 2.5 trained as "7.0" and "2.5", a 20-digit number as "1.2345678901234567e+19", and a column whose type changed
    after the first ~10 MB was refused as "check the file's format". Labels compare as label_key reads them, so "1"
    is the label 1; true and false stay booleans."""
    import json

    def as_written(pairs):
        keys = [key for key, _ in pairs]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise ValueError(f"the key(s) {', '.join(map(repr, repeated))} appear twice in one record")
        return dict(pairs)

    def parse(text: str):
        return json.loads(text, parse_int=str, parse_float=str, object_pairs_hook=as_written)

    text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is not part of the first record
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        try:
            records = parse(text)
        except ValueError as err:
            raise UserError(f"cannot read {path} as a JSON array of records ({err}); check the file's format") from err
        where = [f"record {row}" for row in range(1, len(records) + 1)]
    elif path.suffix.lower() == ".jsonl" or (text.lstrip().startswith("{") and not _one_json_value(text)):
        records, where = [], []
        for number, line in enumerate(text.split("\n"), start=1):  # not splitlines: U+2028 may sit in a string
            if not line.strip():
                continue
            try:
                records.append(parse(line))
            except ValueError as err:
                raise UserError(f"{path} line {number} is not a JSON record ({err}); fix the line") from err
            where.append(f"line {number}")
    else:  # one object for the whole file (a dict of columns, or anything else): datasets reads it, as before
        return None
    for record, place in zip(records, where):
        if not isinstance(record, dict):
            raise UserError(f"{path} {place} is {type(record).__name__}, not a record of named fields like "
                            '{"text": ..., "label": ...}; give one object per record')
    return records, where


def _csv_lines(path: Path) -> list[str] | None:
    """The line each data record of a CSV file starts on ("line N"), as pandas reads them: blank lines are skipped,
    and a quoted cell may span lines. None where the csv module cannot follow the file."""
    import csv

    places = []
    with open(path, encoding="utf-8-sig", newline="") as file:
        reader = csv.reader(file)
        try:
            next(reader, None)  # the header
            start = reader.line_num + 1
            for cells in reader:
                if cells:
                    places.append(f"line {start}")
                start = reader.line_num + 1
        except csv.Error:  # a cell past csv's 131,072-character limit, which datasets reads: records are numbered
            return None
    return places


def _with_class_names(rows, task: TaskSection) -> list[dict]:
    import datasets

    feature = rows.features.get(task.label_column) if rows.features else None
    records = rows.to_list()
    if not isinstance(feature, datasets.ClassLabel) or not task.labels:
        return records
    if set(task.labels) <= set(feature.names) and not set(task.labels) <= {str(i) for i in range(feature.num_classes)}:
        for record in records:  # -1 (a Hub test split's "no label") stays as it is and is refused by row
            value = record[task.label_column]
            if isinstance(value, int) and 0 <= value < feature.num_classes:
                record[task.label_column] = feature.int2str(value)
        return records
    if not set(task.labels) <= {str(i) for i in range(feature.num_classes)}:
        raise UserError(f"task.labels {list(task.labels)} are neither the names of the dataset's ClassLabel column "
                        f"{task.label_column!r} ({feature.names}) nor its ids (0..{feature.num_classes - 1}); use the "
                        f"names, in the order you want as the head's classes")
    return records


def _load_records(dataset: str, dataset_config: str | None, split: str, revision: str | None):
    """The records as a datasets.Dataset (its features say which columns are ClassLabels)."""
    import datasets

    path = Path(dataset)
    if path.exists():
        builder = RECORD_BUILDERS.get(path.suffix.lower())
        if builder is None or not path.is_file():
            raise UserError(f"dataset={dataset}: fine-tuning reads one labelled file ({', '.join(RECORD_BUILDERS)}); "
                            f"got {'a folder' if path.is_dir() else repr(path.suffix)}")
        data_files = literal_data_files([path])
        options = _csv_as_written(path) if builder == "csv" else {}
        try:
            rows = datasets.load_dataset(builder, data_files=data_files, split="train", **options,
                                         cache_dir=content_cache_dir(path))  # new contents: not the old rows
        except Exception as err:  # datasets wraps parse errors in several types
            raise UserError(f"cannot read {path} as {builder} ({type(err).__name__}: "
                            f"{str(err).strip().splitlines()[0][:200]}); check the file's format") from err
        return rows
    if path.suffix.lower() in RECORD_BUILDERS or dataset.startswith((".", "/", "~")):
        raise MissingFileError(f"dataset={dataset} not found; give a labelled file or a Hub dataset name")
    return datasets.load_dataset(dataset, dataset_config, split=split, revision=revision)


def _one_json_value(text: str) -> bool:
    """Whether `text` is a single JSON value (not JSON Lines of several)."""
    import json

    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _csv_as_written(path: Path) -> dict[str, Any]:
    """`load_dataset("csv")` options that read every cell as the text the file holds. pandas guesses a column's
    type: an answer column of 1.50 and 007 trained as "1.5" and "7.0", a 20-digit id as "1.2345678901234567e+19", and
    None, NA or null (real answers) were refused as empty cells. Labels are compared as label_key reads them ("1",
    "true"), whether a file holds them as numbers or as text."""
    import csv

    from datasets import Features, Value

    with open(path, encoding="utf-8-sig", newline="") as file:
        header = next(csv.reader(file), None)
    if not header:
        raise UserError(f"{path} has no header row; its first line names the columns (e.g. text,label)")
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise UserError(f"{path}: column {', '.join(map(repr, repeated))} appears more than once in the header; give "
                        f"each column its own name")
    return {"features": Features({name: Value("string") for name in header}), "keep_default_na": False}


def check_columns(records: list[dict], task: TaskSection, where: str) -> None:
    """Refuse data without the configured columns, naming the missing ones and the ones the data has."""
    if not records:
        raise UserError(f"{where} has no records")
    present = set(records[0])
    missing = [column for column in task.columns if column not in present]
    if missing:
        (only,) = present if len(present) == 1 else (None,)
        separator = next((mark for mark in (";", "\t", "|") if only and mark in only and
                          str(where).lower().endswith(".csv")), None)
        hint = (f"; its one column {only!r} holds {separator!r}: the file is separated by {separator!r}, and a CSV "
                f"must be separated by commas (convert it, or save it as .jsonl)") if separator else ""
        raise UserError(f"{where} has no column {', '.join(repr(c) for c in missing)} (configured in the task: "
                        f"section); its columns are {', '.join(sorted(present))} — set task.text_columns / "
                        f"task.label_column / task.choice_columns to them{hint}")


def split_heldout(n_records: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(training indices, held-out indices): round(fraction · n) records drawn with `seed`, both lists in file order.

    The one split of fine-tuning and of the experiment's zero-/few-shot evaluation, so both see the same documents.
    """
    n_heldout = round(fraction * n_records)
    if not 0 < n_heldout < n_records:
        raise UserError(f"val_fraction={fraction} of {n_records} records holds out {n_heldout}; choose a fraction "
                        f"that leaves records on both sides")
    order = torch.randperm(n_records, generator=torch.Generator().manual_seed(seed)).tolist()
    heldout = sorted(order[:n_heldout])
    heldout_set = set(heldout)
    return [i for i in range(n_records) if i not in heldout_set], heldout


def heldout_also_trained_on(train_examples: list[dict], heldout_examples: list[dict]) -> int:
    """How many held-out examples are, token for token, also a training example (a file with repeated rows): the
    split keeps records apart, not texts, so the held-out accuracy would count inputs the model was trained on."""
    def key(example: dict) -> tuple:
        ids = example["input_ids"]
        return tuple(tuple(choice) for choice in ids) if ids and isinstance(ids[0], list) else tuple(ids)

    trained = {key(example) for example in train_examples}
    return sum(key(example) in trained for example in heldout_examples)


# --- sequences -----------------------------------------------------------------------------------------------------


def encode_examples(records: list[dict], task: TaskSection, tokenizer, tokens: TaskTokens, max_length: int,
                    where: str, places: list[str] | None = None) -> list[dict[str, Any]]:
    """Each record as {"input_ids": ids (or one list per answer), "label": class index, "cut": whether the first
    part was cut to fit max_length}.

    Every record is checked before anything is trained: a missing value, a label outside task.labels or an answer
    index outside the answers is an error naming the record: its place in `places` (labelled_records_with_places's
    "line N"), else "row N" (1-based, in file order)."""
    check_columns(records, task, where)
    places = places or [f"row {number}" for number in range(1, len(records) + 1)]
    for row, record in zip(places, records):
        for column in task.columns:
            if record.get(column) is None or (column != task.label_column and not str(record[column]).strip()):
                raise UserError(f"{where} {row}: column {column!r} is empty; fill it in or drop the row")
            value = record[column]
            if column != task.label_column and (isinstance(value, bool) or not isinstance(value, (str, int, float))):
                # str() of it was trained on: its Python text ("['fire']", "True"), not the record's words
                raise UserError(f"{where} {row}: column {column!r} holds a {type(value).__name__}, "
                                f"{str(value)[:60]!r}, not text; give text (join a list of words into one string), "
                                f"or name another column in task.text_columns")
    labels = [_class_index(record[task.label_column], task, where, row) for row, record in zip(places, records)]
    n_special = tokens.template.n_special_tokens(is_pair=len(task.text_columns) == 2 or task.is_multiple_choice)
    if max_length - n_special < 1:
        raise UserError(f"{where}: block_size={max_length} leaves no room for text beside the {n_special} special "
                        f"tokens; raise block_size (at most the model's n_positions)")
    encode = _encoder(tokenizer)
    firsts = encode([str(record[task.text_columns[0]]) for record in records])
    if task.is_multiple_choice:
        answers = [encode([str(record[column]) for record in records]) for column in task.choice_columns]
        seconds_per_choice = list(zip(*answers))  # per record: one token list per answer
    else:
        second = encode([str(record[task.text_columns[1]]) for record in records]) if len(task.text_columns) == 2 \
            else [None] * len(records)
        seconds_per_choice = [(ids,) for ids in second]
    examples = []
    for row, (first, seconds, label) in enumerate(zip(firsts, seconds_per_choice, labels), start=1):
        built = [tokens.template.build(first, second, max_length) for second in seconds]
        ids = [sequence for sequence, _ in built]
        examples.append({"input_ids": ids if task.is_multiple_choice else ids[0], "label": label,
                         "cut": any(cut for _, cut in built)})
    return examples


def _class_index(value: Any, task: TaskSection, where: str, row: str) -> int:
    if task.is_multiple_choice:
        n_choices = len(task.choice_columns)
        key = label_key(value)
        if not (key.isascii() and key.lstrip("-").isdigit()) or not 0 <= int(key) < n_choices:
            raise UserError(f"{where} {row}: {task.label_column}={value!r} is not the index of one of the "
                            f"{n_choices} answers (0..{n_choices - 1}); fix the row")
        return int(key)
    key = label_key(value)
    if key in task.labels:
        return task.labels.index(key)
    # the same text in another Unicode form is the same label: "ne\u0301gatif" (decomposed, as macOS writes names)
    # was refused as not in ['négatif', ...], a message showing two identical-looking strings
    composed = [unicodedata.normalize("NFC", name) for name in task.labels]
    if unicodedata.normalize("NFC", key) in composed:
        return composed.index(unicodedata.normalize("NFC", key))
    raise UserError(f"{where} {row}: {task.label_column}={value!r} is not in the label set "
                    f"{list(task.labels)}; fix the row or add the label to task.labels")


def _encoder(tokenizer):
    """Texts -> token ids with no special tokens added, and special-token text inside the data kept as text (a
    passage mentioning <|endoftext|> must not end the sequence early)."""
    def encode(texts: list[str]) -> list[list[int]]:
        # verbose=False: the model_max_length warning would say "indexing errors", but encode_examples cuts each
        # sequence to max_length itself
        return tokenizer(texts, add_special_tokens=False, split_special_tokens=True, verbose=False)["input_ids"]
    return encode


# --- batches -------------------------------------------------------------------------------------------------------


class PadExamples:
    """Collate: pad each batch on the right to its longest sequence with `pad_id` (attention_mask 0 there).

    Classification rows give input_ids (batch, seq); multiple-choice rows (batch, n_choices, seq). The heads read
    the last non-pad token, the extract token, wherever the padding is."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        sequences = [row["input_ids"] for row in rows]
        nested = isinstance(sequences[0][0], list)
        flat = [seq for group in sequences for seq in group] if nested else sequences
        width = max(len(seq) for seq in flat)
        input_ids = torch.full((len(flat), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(flat), width), dtype=torch.long)
        for i, seq in enumerate(flat):
            input_ids[i, :len(seq)] = torch.tensor(seq, dtype=torch.long)
            attention_mask[i, :len(seq)] = 1
        if nested:
            input_ids = input_ids.view(len(rows), -1, width)
            attention_mask = attention_mask.view(len(rows), -1, width)
        labels = torch.tensor([row["label"] for row in rows], dtype=torch.long)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
