"""Where a task's docs come from: local files under the data root, in one of four formats, or a Hub dataset.

The data root is <repo>/../shared/data by default ($HF_GPT_CUSTOM_DATA_DIR or a `data_dir` argument override it).
Records pass through the task's `process_docs` function and every template is rendered once, so a malformed record
fails here with its file and number. Docs are cached per task file, split and data root, and read again when the
task file or a data file changes. TaskSpec (eval/task.py) says what a task is; this module only reads.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2

from hf_gpt_custom.eval.doc_transforms import DOC_TRANSFORMS
from hf_gpt_custom.errors import MissingFileError, UserError
from hf_gpt_custom.manifest import file_identity

if TYPE_CHECKING:
    from hf_gpt_custom.eval.task import TaskSpec

DATA_DIR_ENV = "HF_GPT_CUSTOM_DATA_DIR"


# <repo>/../shared/data, independent of the working directory
BUILT_IN_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def default_data_dir() -> Path:
    """BUILT_IN_DATA_DIR, unless $HF_GPT_CUSTOM_DATA_DIR names another folder (found by resolve_data_dir)."""
    if os.environ.get(DATA_DIR_ENV):
        return resolve_data_dir(os.environ[DATA_DIR_ENV], f"${DATA_DIR_ENV}")
    return BUILT_IN_DATA_DIR


def resolve_data_dir(value: str | Path, named_by: str) -> Path:
    """The benchmark folder `value` names, found as train finds its data: in the working directory, then the
    repository root, so ../shared/data works from anywhere. One rule for eval's --data-dir, run's evaluation and
    evaluate(): run and evaluate() read $HF_GPT_CUSTOM_DATA_DIR from the working directory only, where eval found it
    (the roundreview27 hunt). A folder in neither place is refused, naming both and `named_by` (the flag or name)."""
    from hf_gpt_custom.training.config_values import find_local_path, searched_places

    found = find_local_path(str(value))
    if found is None or not found.is_dir():
        where = "" if Path(os.path.expanduser(str(value))).is_absolute() else f" in {searched_places()}"
        raise UserError(f"{named_by} {value} is no folder{where}; give the folder holding the benchmark files "
                        "(README: ../shared/data, beside the checkout)")
    return found


def _read_jsonl(path: Path) -> list[dict]:
    try:
        return _read_utf8_jsonl(path)
    except UnicodeDecodeError:  # a traceback from deep inside the reader otherwise: name the byte and its line
        data = path.read_bytes()  # (the reader's error counts from its buffer, not from the start of the file)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as err:
            line = data[: err.start].count(b"\n") + 1
            raise UserError(f"{path} is not UTF-8 text: byte 0x{data[err.start]:02x} at offset {err.start} (line "
                            f"{line}) cannot be decoded; restore the file (eval/tasks/README.md names its source)"
                            ) from err
        raise


def _read_utf8_jsonl(path: Path) -> list[dict]:
    records = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserError(f"{path} line {line_number}: not valid JSON ({err.msg})") from err
            if not isinstance(record, dict):
                raise UserError(f"{path} line {line_number}: expected a JSON object, got {type(record).__name__}")
            records.append(record)
    return records


def _read_jsonl_with_labels(paths: list[Path]) -> list[dict]:
    records_path, labels_path = paths
    records = _read_jsonl(records_path)
    labels = labels_path.read_text(encoding="utf-8").split()
    if len(labels) != len(records):
        raise UserError(f"{labels_path}: {len(labels)} labels for {len(records)} records in {records_path}")
    return [{**record, "label": label} for record, label in zip(records, labels)]


def _read_line_records(path: Path, record_fields: list[str]) -> list[dict]:
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) % len(record_fields):
        raise UserError(
            f"{path}: {len(lines)} lines is not a multiple of {len(record_fields)} "
            f"(one record = {', '.join(record_fields)})"
        )
    return [dict(zip(record_fields, lines[start : start + len(record_fields)])) for start in range(0, len(lines), len(record_fields))]


def _read_local(spec: TaskSpec, paths: list[Path]) -> list[dict]:
    if spec.data_format == "jsonl":
        return [record for path in paths for record in _read_jsonl(path)]
    if spec.data_format == "jsonl_with_labels":
        return _read_jsonl_with_labels(paths)
    if spec.data_format == "lines":
        return [record for path in paths for record in _read_line_records(path, spec.record_fields or ["text"])]
    if spec.data_format == "raw_text":
        return [{"text": path.read_text(encoding="utf-8")} for path in paths]
    raise UserError(f"{spec.source_file}: data_format {spec.data_format!r} is not one of jsonl, jsonl_with_labels, lines, raw_text")


def _check_record(spec: TaskSpec, doc: dict, where: str) -> None:
    """Render every template once so a malformed record fails here, naming its file and record number."""
    try:
        rendered = [spec.text(doc), spec.description_for(doc)]
        if spec.output_type == "multiple_choice":
            choices = spec.choices(doc)
            choices[spec.gold_index(doc)]
            rendered += choices
        if spec.doc_to_target is not None:
            rendered.append(spec.target(doc))
        for text in rendered:
            if isinstance(text, str):  # a lone surrogate escape (half an emoji) failed inside the tokenizer, unnamed
                text.encode("utf-8")
    except (KeyError, IndexError, ValueError, TypeError, jinja2.TemplateError) as err:
        # a template's syntax error or a filter Jinja lacks (lm-eval's regex_replace) too: a raw Jinja traceback
        # named neither the task file nor the field
        hint = ("; the templates are Jinja with its own filters (lm-eval's regex_replace is not one)"
                if isinstance(err, jinja2.TemplateError) and not isinstance(err, jinja2.UndefinedError) else "")
        raise UserError(f"{where}: cannot build the prompt for task {spec.task} of {spec.source_file} "
                        f"({type(err).__name__}: {err}){hint}") from err


_DOCS_CACHE: dict[tuple, tuple[dict, ...]] = {}


def load_docs(spec: TaskSpec, split: str, data_dir: str) -> tuple[dict, ...]:
    """The processed, checked docs of `split` ("test" = the scored split) under the data root `data_dir`. Cached
    per process, keyed by the task's fields and the data files' identity: an edited task YAML (or a file it
    includes) or data file (a notebook that fixes a label, then evaluates again) is read anew, as lm-eval and
    datasets would."""
    paths = [Path(data_dir) / name for name in spec.data_file_names(split)]
    # Every field of the spec, not its file: a base file an `include:` brings, or a TaskSpec built in Python, can
    # change how docs are read (record_fields, process_docs, ...) while the task's own file stays as it is.
    key = (repr(dataclasses.astuple(spec)), split, data_dir, *(file_identity(path) for path in paths))
    if key not in _DOCS_CACHE:
        _DOCS_CACHE[key] = _load_docs_uncached(spec, split, data_dir)
    return _DOCS_CACHE[key]


def _load_docs_uncached(spec: TaskSpec, split: str, data_dir: str) -> tuple[dict, ...]:
    missing_message = None
    if spec.data_files.get(split) is not None:
        paths = [Path(data_dir) / name for name in spec.data_file_names(split)]
        missing = [str(path) for path in paths if not path.is_file()]
        if not missing:
            records = _read_local(spec, paths)
            transform = DOC_TRANSFORMS[spec.process_docs] if spec.process_docs else None
            return _processed(spec, records, transform, where=str(paths[0]))
        missing_message = (
            f"task {spec.task}: {missing[0]} not found; put the benchmark files under {data_dir} "
            f"or point ${DATA_DIR_ENV} (eval's --data-dir; data_dir= in Python) at the folder that holds them"
        )
        if spec.dataset_path is None:
            raise MissingFileError(missing_message)
    if spec.dataset_path is None:
        raise UserError(f"{spec.source_file}: no data_files for split {split!r} and no dataset_path")
    import datasets  # only for users with network (or a warm cache)

    hub_split = spec.test_split if split == "test" else split
    try:
        rows = datasets.load_dataset(spec.dataset_path, spec.dataset_name, split=hub_split)
    except Exception as err:  # noqa: BLE001 — offline, unknown id, ...: say what was tried and how to fix it
        if missing_message is None:
            raise
        raise MissingFileError(
            f"{missing_message} (the Hub fallback {spec.dataset_path} could not be loaded either: {type(err).__name__})"
        ) from err
    records = [dict(row) for row in rows]
    name = spec.hub_process_docs or spec.process_docs
    return _processed(spec, records, DOC_TRANSFORMS[name] if name else None, where=f"{spec.dataset_path}[{hub_split}]")


def _processed(spec: TaskSpec, records: list[dict], transform, where: str) -> tuple[dict, ...]:
    if transform is not None:
        try:
            docs = transform(records)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as err:
            # Find the first record the transform rejects, so the message names it.
            for number, record in enumerate(records, start=1):
                try:
                    transform([record])
                except (KeyError, IndexError, ValueError, TypeError, AttributeError) as record_err:
                    raise UserError(
                        f"{where} line {number}: record does not fit {spec.process_docs} "
                        f"({type(record_err).__name__}: {record_err})"
                    ) from record_err
            raise UserError(f"{where}: {spec.process_docs} failed ({err})") from err
    else:
        docs = records
    for number, doc in enumerate(docs, start=1):
        _check_record(spec, doc, f"{where} record {number}")
    return tuple(docs)
