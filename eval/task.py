"""TaskSpec: one benchmark read from eval/tasks/<name>.yaml, and how a doc becomes prompt, choices and gold.

Here: the task file (fields, `include:`, checks with the fix in the message) and the templates. Where the docs come
from (local files under the data root, or the Hub) is eval/task_data.py; few-shot sampling, scoring and metrics
live elsewhere.
"""

from __future__ import annotations

import ast
import os
import types
import typing
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.sandbox
import yaml

from hf_gpt_custom.eval.doc_transforms import DOC_TRANSFORMS
from hf_gpt_custom.eval.output_types import GENERATION_KWARGS, OUTPUT_TYPES
from hf_gpt_custom.eval.task_data import BUILT_IN_DATA_DIR, default_data_dir, load_docs
from hf_gpt_custom.errors import MissingFileError, UserError, did_you_mean, repeated
from hf_gpt_custom.manifest import cached_sha256

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
# How K examples that do not fit the context are handled (eval/fewshot.py): ours drops whole examples, farthest
# first; lm-eval keeps all K and the scorer cuts tokens from the left of the prompt.
FEWSHOT_FIT_MODES = ("drop-examples", "lm-eval")
# "ours" = the task files as written; "lm-eval" = each task's `lm_eval_overrides` applied and lm-eval's fitting,
# so K > 0 prompts equal those of lm-eval's task of the same benchmark.
PROTOCOLS = ("ours", "lm-eval")
# What a task file must say; the rest has defaults. Shown in the error when one is missing.
REQUIRED_FIELDS = {
    "task": "task: my_benchmark",
    "output_type": f"output_type: multiple_choice  (one of {', '.join(OUTPUT_TYPES)})",
    "doc_to_text": 'doc_to_text: "Question: {{question}}\\nAnswer:"  (a field name or a Jinja template)',
}

# Templates only look fields up: no access to attributes of Python objects beyond what Jinja's sandbox allows.
_JINJA = jinja2.sandbox.ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


@dataclass
class TaskSpec:
    """A benchmark in lm-evaluation-harness vocabulary (see eval/tasks/README.md for every field)."""

    task: str
    output_type: str
    doc_to_text: str
    doc_to_target: str | None = None
    doc_to_choice: str | list[str] | None = None
    process_docs: str | None = None
    data_files: dict[str, str | list[str]] = field(default_factory=dict)
    data_format: str = "jsonl"
    record_fields: list[str] | None = None
    dataset_path: str | None = None
    dataset_name: str | None = None
    test_split: str = "test"
    # The local data_files hold a sample of test_split, not all of it (triviaqa's 3,000 questions): the model card
    # then says so, so a score on the sample never reads as the whole split's. Docs read from the Hub are the split.
    sample_of_split: bool = False
    hub_process_docs: str | None = None
    fewshot_split: str = "test"
    # With the examples drawn from the scored split, the doc being scored is never its own example (lm-eval's rule);
    # false draws K from the whole split, as lm-eval's lambada_openai does (no fewshot_split: its test docs).
    fewshot_excludes_scored_doc: bool = True
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"
    description: str = ""
    multiple_input: bool = False
    uncond_context: str | None = None
    count_field: str | None = None
    generation_kwargs: dict[str, Any] = field(default_factory=dict)
    # lm-eval's filters on a generation before it is scored: remove_whitespace (strip it) and take_first are the ones
    # applied here. None: the generation is scored as generated, as lm-eval does without filter_list
    filter_list: list[dict[str, Any]] | None = None
    # None: lm-eval's defaults for the output type (DEFAULT_METRIC_REGISTRY), as a task file without metric_list
    # gets there; set in __post_init__
    metric_list: list[dict[str, Any]] | None = None
    fewshot_fit: str = "drop-examples"
    lm_eval_overrides: dict[str, Any] = field(default_factory=dict)
    source_file: str = ""

    def __post_init__(self) -> None:
        # the two fields derived below, as the file wrote them: as_lm_eval's overrides are applied to these (a plain
        # attribute, not a field, so the tasks' fingerprints stay as they were)
        self._as_written = {"data_files": self.data_files, "metric_list": self.metric_list}
        if self.test_split != "test" and self.test_split in self.data_files:
            # lm-eval's reading of such a file: data_files' keys are split names and test_split the one scored. Here
            # data_files' `test` entry is the scored one: the test.jsonl of {test: ..., validation: ...} was scored
            # while results.json said "validation".
            if "test" in self.data_files and self.data_files["test"] != self.data_files[self.test_split]:
                raise UserError(
                    f"{self.source_file}: data_files has both a `test` and a `{self.test_split}` entry, and "
                    f"test_split: {self.test_split}; lm-eval would score `{self.test_split}`, this evaluator scores "
                    f"data_files' `test` entry (test_split names the Hub split read when the local files are "
                    f"absent). Put the file to score under `test` and drop the other, or give only "
                    f"`{self.test_split}`")
            self.data_files = {**self.data_files, "test": self.data_files[self.test_split]}
        if self.fewshot_fit not in FEWSHOT_FIT_MODES:
            raise UserError(
                f"{self.source_file}: fewshot_fit {self.fewshot_fit!r} is not one of {', '.join(FEWSHOT_FIT_MODES)}"
            )
        if self.output_type not in OUTPUT_TYPES:
            raise UserError(
                f"{self.source_file}: output_type {self.output_type!r} is not one of {', '.join(OUTPUT_TYPES)}"
            )
        for name in (self.process_docs, self.hub_process_docs):
            if name is not None and name not in DOC_TRANSFORMS:
                raise UserError(
                    f"{self.source_file}: process_docs {name!r} is not a function in eval/doc_transforms.py; "
                    f"known: {', '.join(sorted(DOC_TRANSFORMS))}"
                )
        if self.metric_list is None:  # every request was scored, then nothing reported
            self.metric_list = [{"metric": name} for name in DEFAULT_METRICS[self.output_type]]
        if not self.metric_list:
            raise UserError(f"{self.source_file}: metric_list is empty, so nothing would be reported; drop it for "
                            f"{self.output_type}'s defaults ({', '.join(DEFAULT_METRICS[self.output_type])}) or list "
                            f"the metrics")
        for entry in self.metric_list:
            _check_metric_entry(entry, self.output_type, self.source_file)
        if repeated(self.metric_names):  # each doc's value was counted once per entry (a stderr too small)
            raise UserError(f"{self.source_file}: metric_list names {', '.join(repeated(self.metric_names))} more "
                            f"than once; a task reports each metric once (lm-eval keeps the last entry): keep one "
                            f"entry, or write a second task file (include: this one) for the other options")
        _check_filter_list(self.filter_list, self.output_type, self.source_file)
        if self.multiple_input and "acc_uncond" in self.metric_names:  # it failed after every request was scored
            raise UserError(f"{self.source_file}: acc_uncond scores each choice without its context, but a "
                            f"multiple_input task's choices are contexts (one continuation after each): drop "
                            f"acc_uncond")
        if self.output_type == "generate_until":
            _check_generation_kwargs(self.generation_kwargs, self.source_file)
            if "until" not in self.generation_kwargs and self.fewshot_delimiter == "":
                raise UserError(f"{self.source_file}: generation stops at the fewshot_delimiter when "
                                "generation_kwargs give no until, and it is empty, which lm-eval finds in every text "
                                "(each answer ends after its first token); give generation_kwargs until: [...]")
        if self.output_type == "multiple_choice" and self.doc_to_choice is None:
            raise UserError(f"{self.source_file}: a multiple_choice task needs doc_to_choice")
        if self.doc_to_target is None:  # it ended the run at the first doc as "template missing"
            scored = {"loglikelihood_rolling": "the text to score (e.g. doc_to_target: page; it is scored from an "
                                               "empty context, doc_to_text is not read)",
                      "multiple_choice": "the right choice's index or text",
                      "generate_until": "the answer, or a list of accepted answers"}.get(self.output_type, "the answer")
            raise UserError(f"{self.source_file}: doc_to_target is missing; a {self.output_type} task reads "
                            f"{scored} from it, as in lm-eval")

    @property
    def strips_generation(self) -> bool:
        """Whether lm-eval's remove_whitespace filter applies: the generation's spaces around it are not scored."""
        return any(step.get("function") == "remove_whitespace"
                   for entry in self.filter_list or () for step in entry.get("filter", ()))

    @property
    def metric_names(self) -> list[str]:
        return [entry["metric"] for entry in self.metric_list]

    def dataset_info(self) -> dict[str, str | None]:
        """The Hub dataset this benchmark is (results.json's "dataset", read by the model card)."""
        return {"path": self.dataset_path, "name": self.dataset_name, "split": self.test_split}

    def scored_data_info(self, data_dir: str | Path | None = None) -> dict[str, Any]:
        """dataset_info() and, when the scored docs come from local files, what they are: the sha256 of each file
        (so an export can tell a benchmark the model was trained on) and whether they are a sample of the split."""
        info: dict[str, Any] = self.dataset_info()
        paths = [Path(data_dir or default_data_dir()) / name for name in self.data_file_names("test")]
        if paths and all(path.is_file() for path in paths):  # what load_docs reads; else the Hub's whole split
            info["local_files_sha256"] = [cached_sha256(path) for path in paths]
            if self.sample_of_split:
                info["sample_of_split"] = True
        return info

    def as_lm_eval(self) -> TaskSpec:
        """This task as lm-eval's task of the same benchmark scores it: `lm_eval_overrides` applied, all K
        examples kept and the prompt cut from the left when it does not fit (see eval/tasks/README.md)."""
        # from the fields as written, so an override of output_type gets that type's default metrics and one of
        # test_split its own data_files entry (derived values passed back in were refused as the file's own)
        return replace(self, **{**self._as_written, **self.lm_eval_overrides}, fewshot_fit="lm-eval")

    # --- data ----------------------------------------------------------------------------------------------------

    def data_file_names(self, split: str | None = None) -> list[str]:
        """The local data files of `split` (all splits when None), as data_files names them (under the data root)."""
        values = self.data_files.values() if split is None else [self.data_files.get(split) or []]
        return [name for value in values for name in ([value] if isinstance(value, str) else value)]

    def docs(self, split: str = "test", data_dir: str | Path | None = None) -> list[dict]:
        """The processed docs of `split` ("test" = the scored split), from local files or the Hub."""
        return list(load_docs(self, split, str(Path(data_dir) if data_dir else default_data_dir())))

    def fewshot_docs(self, data_dir: str | Path | None = None) -> list[dict]:
        return self.docs(self.fewshot_split, data_dir)

    @property
    def excludes_scored_doc(self) -> bool:
        """Whether the doc being scored is left out of its few-shot pool: when the pool is the scored split, unless
        fewshot_excludes_scored_doc is false."""
        return self.fewshot_excludes_scored_doc and self.fewshot_pool_is_the_scored_split

    @property
    def fewshot_pool_is_the_scored_split(self) -> bool:
        """fewshot_split "test", or a name that reads the same docs: the same local files, or with the docs from the
        Hub the scored split's own name (test_split: validation, fewshot_split: validation), as lm-eval compares
        its fewshot split with test_split."""
        if self.fewshot_split == "test":
            return True
        local_pool, local_scored = self.data_files.get(self.fewshot_split), self.data_files.get("test")
        if local_pool is not None or local_scored is not None:
            return local_pool is not None and local_pool == local_scored
        return self.fewshot_split == self.test_split

    # --- doc -> prompt pieces ------------------------------------------------------------------------------------

    def text(self, doc: dict) -> str | int:
        """The prompt's text (a multiple_input task's: the gold index). Refused unless it is text: str() of a list
        field was scored as its Python text, and an int is lm-eval's sign of a multiple-input task."""
        value = _resolve(self.doc_to_text, doc, literal_lists=False)  # prompt text stays text, as lm-eval keeps it
        if self.multiple_input:
            return value
        # lm-eval reads a template's digits as an index when there are choices (then a multiple-input task)
        index = isinstance(value, int) or (isinstance(value, str) and value.isdigit() and self.doc_to_text not in doc)
        if index and not isinstance(value, bool) and self.doc_to_choice is not None:
            raise TypeError(f"doc_to_text {self.doc_to_text!r} gives the number {value!r} and the task has choices: "
                            f"lm-eval reads that as a multiple-input task (Winogrande's layout: each choice a "
                            f"context, doc_to_text the right one's index); add `multiple_input: true`")
        if not isinstance(value, str):
            raise TypeError(f"doc_to_text {self.doc_to_text!r} gives a {type(value).__name__}, {str(value)[:80]!r}, "
                            f"not text: its Python text would be the prompt (lm-eval refuses it too); point "
                            f"doc_to_text at a text field or a template")
        return value

    def description_for(self, doc: dict) -> str:
        """The description before the examples: a field name or a Jinja template over the doc, as lm-eval reads it
        (`{{subject}}` in MMLU-style descriptions), or "" without one."""
        if not self.description:
            return ""
        value = _resolve(self.description, doc, literal_lists=False)
        if not value:  # lm-eval: `resolve_field(doc, description) or ""` (None was the text "None" here; 0, [] none)
            return ""
        if not isinstance(value, str):
            raise TypeError(f"description {self.description!r} names a field holding a {type(value).__name__}, "
                            f"{str(value)[:80]!r}, not text (lm-eval refuses it too); give a text field or a template")
        return value

    def choices(self, doc: dict) -> list[str]:
        if isinstance(self.doc_to_choice, list):
            return list(self.doc_to_choice)
        value = _resolve(self.doc_to_choice, doc)
        if not isinstance(value, list):
            raise UserError(f"task {self.task}: doc_to_choice {self.doc_to_choice!r} gave {value!r}, not a list")
        return [str(choice) for choice in value]

    def target(self, doc: dict) -> int | str | list[str]:
        """Gold: a choice index for multiple_choice, a string for loglikelihood, a list of answers for generation."""
        value = _resolve(self.doc_to_target, doc)
        if self.output_type == "multiple_choice" and not self.multiple_input:
            # A field's text is a choice's text, digits too ("2" among the choices "0".."3" is that choice, not
            # index 2); only a rendered template's digits are an index. lm-eval reads both the same way.
            if isinstance(value, str) and (self.doc_to_target in doc or not value.isdigit()):
                return self.choices(doc).index(value)
            if isinstance(value, (list, tuple)):  # lm-eval scores any of several right choices; this evaluator one
                raise ValueError(f"doc_to_target gives a list, {value!r}: several right choices are not scored here; "
                                 f"give one index (or choice text) per record")
            return int(value)
        if self.output_type == "generate_until":
            # lm-eval's reading: with doc_to_choice the target is an index into the choices (its mmlu *_generative
            # tasks), and a number is compared as the text of the generation (str(7) == "7"), never 7 == "7"
            if self.doc_to_choice is not None and (isinstance(value, int) or str(value).isdigit()):
                return self.choices(doc)[int(value)]
            return [str(item) for item in value] if isinstance(value, list) else str(value)
        if isinstance(value, (list, tuple, dict)):  # str() of it would be scored: its Python text, not a document
            raise UserError(f"task {self.task}: doc_to_target {self.doc_to_target!r} gives a {type(value).__name__}, "
                            f"{str(value)[:80]!r}, but a {self.output_type} task scores one text per record; point "
                            f"doc_to_target at a text field (a template's output that reads as a list literal is "
                            f"parsed into a list, as lm-eval parses it)")
        return value

    def gold_index(self, doc: dict) -> int:
        """Index of the correct choice (multiple_choice only; for multiple_input tasks it is doc_to_text)."""
        return int(self.text(doc)) if self.multiple_input else int(self.target(doc))

    def fewshot_example(self, doc: dict) -> str:
        """A solved example exactly as lm-eval renders it (build_qa_turn): question + target_delimiter + answer +
        fewshot_delimiter. A doc whose answer is "" or null is its question alone, with neither delimiter, as there."""
        question = self.choices(doc)[self.gold_index(doc)] if self.multiple_input else self.text(doc)
        raw = _resolve(self.doc_to_target, doc)
        if raw is None or raw == "":
            return question
        if self.multiple_input:
            answer = str(self.target(doc))
        else:
            target = self.target(doc)
            if self.output_type == "multiple_choice":
                answer = self.choices(doc)[target]
            elif isinstance(target, list):
                if not target:  # lm-eval fails on it too (a[0]), with a bare IndexError
                    raise UserError(f"task {self.task}: a doc with no answer (doc_to_target gives []) was drawn as a "
                                    f"few-shot example ({question[:60]!r}); it has no answer to show. Score this "
                                    f"task zero-shot, or draw examples from a split whose docs all have one "
                                    f"(fewshot_split)")
                answer = target[0]
            else:
                answer = str(target)
        return question + self.target_delimiter + answer + self.fewshot_delimiter


@lru_cache(maxsize=256)
def _compiled_template(source: str) -> jinja2.Template:
    return _JINJA.from_string(source)


def _resolve(spec: str | None, doc: dict, literal_lists: bool = True) -> Any:
    """A field name is looked up; anything else is a Jinja template, whose output that looks like a list is parsed
    back into one where `literal_lists` (choices and targets, not prompt text)."""
    if spec is None:
        raise UserError("template missing")
    if spec in doc:
        return doc[spec]
    rendered = _compiled_template(spec).render(**doc)
    if literal_lists and rendered[:1] == "[" and rendered[-1:] == "]":
        try:
            return ast.literal_eval(rendered)
        except (ValueError, SyntaxError):
            pass
    return rendered


# --- loading task files ------------------------------------------------------------------------------------------


def available_tasks(tasks_dir: str | Path | None = None) -> list[str]:
    """Every task: the YAML files of the tasks folder (eval/tasks). Adding a file adds a task."""
    return sorted(path.stem for path in Path(tasks_dir or TASKS_DIR).glob("*.yaml"))


def task_file(name: str, tasks_dir: str | Path | None = None) -> Path:
    """The YAML file of task `name`: eval/tasks/<name>.yaml, or `name` itself when it is a path ending in .yaml.

    A path is a feature, as in lm-eval (`--tasks path/to/task.yaml`): a task file of your own, outside the
    package. Anything else that looks like a path (no .yaml suffix) is refused, so a name never reaches a
    file outside the tasks folder by accident."""
    if name.endswith((".yaml", ".yml")):
        path = Path(os.path.expanduser(name))
        if not path.is_file():
            raise MissingFileError(f"task file {name} not found; give an existing .yaml file or a task name")
        return path
    if not name or "/" in name or "\\" in name or name.startswith((".", "~")):
        raise UserError(
            f"task {name!r} is neither a task name nor a .yaml file; use a name from eval/tasks "
            f"({', '.join(available_tasks(tasks_dir))}) or the path of your own task file ending in .yaml"
        )
    tasks_dir = Path(tasks_dir or TASKS_DIR)
    path = tasks_dir / f"{name}.yaml"
    if not path.is_file():
        known = available_tasks(tasks_dir)
        hint = did_you_mean(name, known)
        raise UserError(f"unknown task {name!r}; {hint}known tasks: {', '.join(known)}")
    return path


def _read_yaml_with_includes(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle)
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not valid YAML ({err})") from err
    except UnicodeDecodeError as err:
        raise UserError(f"{path} is not a UTF-8 text file (byte 0x{err.object[err.start]:02x} at offset {err.start}), "
                        f"so not a task YAML; convert it to UTF-8 or pass another task file") from err
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise UserError(f"{path}: a task file is a mapping of fields (task: ..., output_type: ...), got {type(config).__name__}")
    if "include" in config:
        include = str(config.pop("include"))
        base_path = path.parent / include  # relative to the including file, as lm-evaluation-harness reads it
        if not base_path.is_file():
            raise MissingFileError(f"{path}: include {include} not found (looked for {base_path}); give the path of "
                                   f"an existing task file, relative to {path.name}'s folder")
        base = _read_yaml_with_includes(base_path)
        config = {**base, **config}
    return config


def load_tasks(names: list[str], protocol: str = "ours") -> list[TaskSpec]:
    """load_task for each name, refusing two that share a `task:` name: results are keyed by it, so one row would
    stand for two files. What `evaluate` and a run's `benchmark_tasks` check before any work."""
    specs = [load_task(name, protocol=protocol) for name in names]
    same_name = repeated([spec.task for spec in specs])
    if same_name:
        files = [name for name, spec in zip(names, specs) if spec.task in same_name]
        raise UserError(f"tasks {', '.join(files)} are all named {', '.join(same_name)} (their `task:` field), so "
                        f"their results could not be told apart; give each task file its own `task:` name")
    return specs


def load_task(name: str, tasks_dir: str | Path | None = None, protocol: str = "ours") -> TaskSpec:
    """Read eval/tasks/<name>.yaml (or a .yaml path; `include:` followed) into a TaskSpec.

    protocol="lm-eval" gives the task as lm-eval scores it (`TaskSpec.as_lm_eval`)."""
    if protocol not in PROTOCOLS:
        raise UserError(f"protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    path = task_file(name, tasks_dir)
    config = _read_yaml_with_includes(path)
    _check_fields(config, path)
    spec = TaskSpec(**config, source_file=str(path))
    return spec.as_lm_eval() if protocol == "lm-eval" else spec


def tasks_fingerprint(names: list[str], data_dir: str | Path | None = None, protocol: str = "ours") -> str:
    """sha256 of everything scoring `names` reads: each task as its file (and `include:` chain) defines it, and the
    contents of its local data files under `data_dir` (default: the data root). `run` re-evaluates a trained model
    when this changes: a task file or benchmark file edited since keeps no stale score in results.json or the card."""
    import dataclasses
    import hashlib
    import json

    from hf_gpt_custom.manifest import cached_sha256

    root = Path(data_dir) if data_dir else default_data_dir()
    described = []
    for name in names:
        spec = load_task(name, protocol=protocol)
        fields = {key: value for key, value in dataclasses.asdict(spec).items() if key != "source_file"}
        contents = {file: cached_sha256(root / file) if (root / file).is_file() else None
                    for file in sorted(set(spec.data_file_names()))}
        described.append({"task": name, "fields": fields, "data_files": contents})
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()


def benchmarks_changed_since(results: dict) -> tuple[list[str], list[str]]:
    """(tasks whose task file or local data files differ from what an evaluation's `results` (results.json) scored,
    tasks that cannot be checked here). A results.json records tasks_fingerprint of each task it scored and the data
    root it read (unless it was the built-in one); `export` compares them so that a card never shows scores of files edited since. A task whose file
    is not found from here, or whose data files are all absent under that root (a run folder copied to another
    machine), cannot be checked. Results written before evaluations recorded this have no tasks to compare."""
    recorded = results.get("benchmarks_sha256")
    config = results.get("config") or {}
    names, protocol = config.get("tasks") or [], config.get("protocol", "ours")
    if not isinstance(recorded, list) or len(recorded) != len(names):
        return [], []
    # not recorded: the built-in folder (an export's shell may set $HF_GPT_CUSTOM_DATA_DIR to another one)
    root = Path(results["data_dir"]) if results.get("data_dir") else BUILT_IN_DATA_DIR
    changed, unchecked = [], []
    for name, fingerprint in zip(names, recorded):
        try:
            spec = load_task(name, protocol=protocol)
        except UserError:
            unchecked.append(name)
            continue
        if spec.data_file_names() and not any((root / file).is_file() for file in spec.data_file_names()):
            unchecked.append(name)
        elif tasks_fingerprint([name], root, protocol) != fingerprint:
            changed.append(name)
    return changed, unchecked


def _check_fields(config: dict, path: Path) -> None:
    """Unknown, missing and mistyped fields, each named with its file and the fix (not a TypeError)."""
    hints = typing.get_type_hints(TaskSpec)
    known = set(hints) - {"source_file"}
    unknown = sorted(set(config) - known)
    if unknown:
        raise UserError(f"{path}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
    for name, example in REQUIRED_FIELDS.items():
        if name not in config:
            raise UserError(f"{path}: required field {name!r} is missing; add a line like  {example}")
    for name, value in config.items():
        if not _matches_type(value, hints[name]):
            raise UserError(f"{path}: field {name!r} must be {_type_name(hints[name])}, got {value!r}")
    for name in ("lm_eval_overrides",):
        bad = sorted(set(config.get(name, {})) - known)
        if bad:
            raise UserError(f"{path}: {name} has unknown key(s) {', '.join(bad)}; allowed: {', '.join(sorted(known))}")


# lm-eval's metrics for a task file without metric_list (lm_eval.api.registry.DEFAULT_METRIC_REGISTRY)
DEFAULT_METRICS = {"loglikelihood": ("perplexity", "acc"), "multiple_choice": ("acc", "acc_norm"),
                   "loglikelihood_rolling": ("word_perplexity", "byte_perplexity", "bits_per_byte"),
                   "generate_until": ("exact_match",)}
FILTER_FUNCTIONS = ("remove_whitespace", "take_first")  # lm-eval filters applied here (one generation a doc)


def _check_filter_list(filter_list: list[dict[str, Any]] | None, output_type: str, source_file: str) -> None:
    """One pipeline of the filters applied here: lm-eval scores each named pipeline as a result of its own (gsm8k's
    strict-match and flexible-extract), and a regex extraction this evaluator does not do would be skipped."""
    if filter_list is None:
        return
    if output_type != "generate_until":
        raise UserError(f"{source_file}: filter_list applies to generations; a {output_type} task has none: drop it")
    if len(filter_list) != 1 or not isinstance(filter_list[0], dict) or not isinstance(filter_list[0].get("filter"), list):
        raise UserError(f"{source_file}: filter_list must be one pipeline, e.g. [{{name: remove_whitespace, filter: "
                        f"[{{function: remove_whitespace}}, {{function: take_first}}]}}]; several are not scored here")
    unknown = [step.get("function") for step in filter_list[0]["filter"]
               if not isinstance(step, dict) or step.get("function") not in FILTER_FUNCTIONS or set(step) - {"function"}]
    if unknown:
        raise UserError(f"{source_file}: filter function {unknown[0]!r} is not one this evaluator applies (only "
                        f"{', '.join(FILTER_FUNCTIONS)}, without options); its generations would be scored unfiltered")


def _check_metric_entry(entry: dict[str, Any], output_type: str, source_file: str) -> None:
    """A metric_list entry this harness computes as written: a metric the output type gives (a multiple_choice
    exact_match failed only after every request was scored), lm-eval's aggregation and direction if stated, and
    exact_match's options; any other key would be ignored, so it is refused."""
    from hf_gpt_custom.eval.metrics import EXACT_MATCH_OPTIONS, METRICS

    name = entry.get("metric")
    if name not in METRICS:
        # lm-eval's acc_mutual_info is log P(choice | context) - log P(choice | "") per doc: acc_uncond with that
        # empty unconditional context gives the same
        same = (" (the same figure: acc_uncond with uncond_context: \"\")" if name == "acc_mutual_info" else "")
        raise UserError(f"{source_file}: unknown metric {name!r}{same}; known metrics: {', '.join(METRICS)}")
    produced = OUTPUT_TYPES[output_type].metrics
    if name not in produced:
        raise UserError(f"{source_file}: metric {name!r} is not one an output_type {output_type} task gives; "
                        f"choose from {', '.join(produced)}")
    ours = {"aggregation": METRICS[name].aggregate.__name__, "higher_is_better": METRICS[name].higher_is_better}
    for key, value in ours.items():
        if key in entry and entry[key] != value:
            raise UserError(f"{source_file}: metric {name!r} has {key}: {entry[key]!r}, but it is computed with "
                            f"{key}: {value!r}; drop the line")
    options = EXACT_MATCH_OPTIONS if name == "exact_match" else ()
    unknown = sorted(set(entry) - {"metric", *ours, *options})
    if unknown:
        allowed = f"; exact_match takes {', '.join(EXACT_MATCH_OPTIONS)}" if name == "exact_match" else ""
        raise UserError(f"{source_file}: metric {name!r} has option(s) {', '.join(unknown)} that would be "
                        f"ignored{allowed}")


def _check_generation_kwargs(kwargs: dict[str, Any], source_file: str) -> None:
    """Settings generation obeys: a stop list, a token budget, greedy decoding. Sampling (or a beam, a penalty)
    would silently not happen, so it is refused rather than ignored."""
    unknown = sorted(set(kwargs) - set(GENERATION_KWARGS))
    if unknown:
        raise UserError(f"{source_file}: generation_kwargs {', '.join(unknown)} would be ignored: evaluation decodes "
                        f"greedily and reads only {', '.join(GENERATION_KWARGS)}")
    until = kwargs.get("until", [])
    if not (isinstance(until, str) or isinstance(until, list) and all(isinstance(stop, str) for stop in until)):
        raise UserError(f"{source_file}: generation_kwargs until: {until!r} must be a string or a list of strings "
                        "(e.g. until: [\"\\n\"]); [] stops at the end-of-text token only, and leaving it out stops "
                        "at the fewshot_delimiter")
    if "" in ([until] if isinstance(until, str) else until):
        raise UserError(f"{source_file}: generation_kwargs until: {until!r} holds an empty string, which lm-eval "
                        "finds in every text (each answer ends after its first token) and generation here would "
                        "skip; drop it ([] stops at the end-of-text token only)")
    if kwargs.get("do_sample") or float(kwargs.get("temperature") or 0.0) > 0.0:
        raise UserError(f"{source_file}: generation_kwargs ask for sampling (do_sample: {kwargs.get('do_sample')}, "
                        f"temperature: {kwargs.get('temperature')}), but evaluation decodes greedily; set "
                        "do_sample: false (and temperature: 0) or drop them")


def _matches_type(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches_type(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_matches_type(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            _matches_type(key, args[0]) and _matches_type(item, args[1]) for key, item in value.items()
        )
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "") if typing.get_args(hint) else hint.__name__
