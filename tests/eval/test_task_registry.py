"""The YAML folder is the one list of tasks: a new file is a new task (loaded, rendered, scored, accepted by the run
config) with no code change; a task file with a missing or mistyped field is a named error; names that look like
paths are refused, while a path ending in .yaml is a task file of your own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from hf_gpt_custom.eval.task import TASKS_DIR, available_tasks, load_task
from hf_gpt_custom.errors import MissingFileError, UserError

CAPITALS = [
    {"question": "The capital of France is", "choices": ["Paris", "Rome", "Oslo"], "answer": 0},
    {"question": "The capital of Italy is", "choices": ["Paris", "Rome", "Oslo"], "answer": 1},
    {"question": "The capital of Norway is", "choices": ["Paris", "Rome", "Oslo"], "answer": 2},
]
CAPITALS_YAML = """\
task: capitals
data_files: {test: capitals/test.jsonl}
dataset_path: example/capitals
test_split: test
output_type: multiple_choice
doc_to_text: "{{question}}"
doc_to_choice: choices
doc_to_target: answer
metric_list:
  - metric: acc
  - metric: acc_norm
"""


@pytest.fixture
def new_task(tmp_path) -> tuple[Path, Path]:
    """(tasks folder holding capitals.yaml, data root holding its docs), both in tmp_path."""
    tasks_dir, data_dir = tmp_path / "tasks", tmp_path / "data"
    tasks_dir.mkdir()
    (data_dir / "capitals").mkdir(parents=True)
    (tasks_dir / "capitals.yaml").write_text(CAPITALS_YAML, encoding="utf-8")
    (data_dir / "capitals" / "test.jsonl").write_text("".join(json.dumps(d) + "\n" for d in CAPITALS), encoding="utf-8")
    return tasks_dir, data_dir


def test_a_new_yaml_is_a_task_that_loads_renders_and_scores(new_task, tiny_model_folder):
    from hf_gpt_custom.eval.runner import evaluate

    tasks_dir, data_dir = new_task
    assert available_tasks(tasks_dir) == ["capitals"]
    spec = load_task("capitals", tasks_dir)
    docs = spec.docs("test", data_dir)
    assert [spec.text(d) for d in docs] == [d["question"] for d in CAPITALS]
    assert [spec.choices(d)[spec.gold_index(d)] for d in docs] == ["Paris", "Rome", "Oslo"]
    assert spec.dataset_info() == {"path": "example/capitals", "name": None, "split": "test"}

    # Scored end to end through the public entry point, by the file's path: no code knows this task.
    results = evaluate(
        str(tiny_model_folder), tasks=[str(tasks_dir / "capitals.yaml")], shots=[0, 1], data_dir=data_dir,
        show_progress=False,
    )
    assert {(row["task"], row["num_fewshot"], row["metric"]) for row in results.results} == {
        ("capitals", k, metric) for k in (0, 1) for metric in ("acc", "acc_norm")
    }
    for k in (0, 1):
        examples = [e for e in results.examples if e["num_fewshot"] == k]
        assert [e["gold"] for e in examples] == [0, 1, 2]
        # acc recomputed from the logged log-likelihoods: argmax over the three capitals.
        hits = [max(range(3), key=e["loglikelihoods"].__getitem__) == e["gold"] for e in examples]
        assert results.value("capitals", "acc", k) == pytest.approx(sum(hits) / 3)
        assert all(len(e["loglikelihoods"]) == 3 for e in examples)
    one_shot = [e for e in results.examples if e["num_fewshot"] == 1]
    assert all(e["prompt"].count("The capital of") == 2 for e in one_shot)


def test_the_run_config_accepts_exactly_the_tasks_of_the_yaml_folder(new_task, monkeypatch):
    from hf_gpt_custom.training.config import REPO_ROOT, load_train_config

    tasks_dir, _ = new_task
    monkeypatch.setattr("hf_gpt_custom.eval.task.TASKS_DIR", tasks_dir)
    smoke = REPO_ROOT / "training" / "configs" / "smoke.yaml"
    assert load_train_config(smoke, ["benchmark_tasks=[capitals]"]).benchmark_tasks == ["capitals"]
    with pytest.raises(UserError, match=r"benchmark_tasks: unknown value 'capitls'; did you mean 'capitals'\? choose from capitals"):
        load_train_config(smoke, ["benchmark_tasks=[capitls]"])
    with pytest.raises(UserError, match="unknown value 'lambada'"):  # not in this folder
        load_train_config(smoke, ["benchmark_tasks=[lambada]"])


def test_dataset_info_is_what_the_yaml_says():
    """The facts the card links to come from the task files (piqa and wikitext once drifted in the card)."""
    assert load_task("piqa").dataset_info() == {"path": "baber/piqa", "name": None, "split": "validation"}
    assert load_task("wikitext").dataset_info() == {
        "path": "EleutherAI/wikitext_document_level", "name": "wikitext-2-raw-v1", "split": "test",
    }
    # arc_challenge inherits path and split from arc_easy through include:, and names its own config.
    assert load_task("arc_challenge").dataset_info() == {"path": "allenai/ai2_arc", "name": "ARC-Challenge", "split": "test"}


@pytest.mark.parametrize("missing", ["task", "output_type", "doc_to_text"])
def test_a_missing_required_field_names_the_file_the_field_and_the_fix(tmp_path, missing):
    config = yaml.safe_load((TASKS_DIR / "copa.yaml").read_text(encoding="utf-8"))
    del config[missing]
    (tmp_path / "copa.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(UserError, match=rf"copa.yaml: required field '{missing}' is missing; add a line like  {missing}: "):
        load_task("copa", tmp_path)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("metric_list", "acc", r"field 'metric_list' must be list\[dict\[str, Any\]\] \| None, got 'acc'"),
        ("multiple_input", "yes", r"field 'multiple_input' must be bool, got 'yes'"),
        ("data_files", ["copa/val.jsonl"], r"field 'data_files' must be dict\[str, str \| list\[str\]\], got \['copa/val.jsonl'\]"),
        ("doc_to_text", None, r"field 'doc_to_text' must be str, got None"),
        ("doc_to_choice", 5, r"field 'doc_to_choice' must be str \| list\[str\] \| None, got 5"),
    ],
)
def test_a_mistyped_field_is_named_with_its_expected_type(tmp_path, field, value, expected):
    config = yaml.safe_load((TASKS_DIR / "copa.yaml").read_text(encoding="utf-8"))
    config[field] = value
    (tmp_path / "copa.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(UserError, match=expected):
        load_task("copa", tmp_path)


def test_every_type_a_union_field_allows_is_accepted(tmp_path):
    config = yaml.safe_load((TASKS_DIR / "copa.yaml").read_text(encoding="utf-8"))
    for doc_to_choice in ("choices", ["no", "yes"], None):
        (tmp_path / "copa.yaml").write_text(yaml.safe_dump({**config, "output_type": "loglikelihood", "doc_to_choice": doc_to_choice}), encoding="utf-8")
        assert load_task("copa", tmp_path).doc_to_choice == doc_to_choice


def test_a_misspelt_lm_eval_override_is_named(tmp_path):
    config = yaml.safe_load((TASKS_DIR / "lambada.yaml").read_text(encoding="utf-8"))
    config["lm_eval_overrides"] = {"target_delimitr": " "}
    (tmp_path / "lambada.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(UserError, match=r"lambada.yaml: lm_eval_overrides has unknown key\(s\) target_delimitr; allowed: "):
        load_task("lambada", tmp_path)


def test_a_file_that_is_not_a_mapping_is_named(tmp_path):
    (tmp_path / "broken.yaml").write_text("- just\n- a list\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"broken.yaml: a task file is a mapping of fields"):
        load_task("broken", tmp_path)


@pytest.mark.parametrize("name", ["/etc/hostname", "../tasks/copa", "sub/copa", "~/copa", ""])
def test_names_that_look_like_paths_are_refused(name):
    with pytest.raises(UserError, match=r"is neither a task name nor a .yaml file; use a name from eval/tasks \(arc_challenge"):
        load_task(name)


def test_a_path_ending_in_yaml_is_a_task_file_of_your_own(tmp_path):
    shutil.copy(TASKS_DIR / "copa.yaml", tmp_path / "my_copa.yaml")
    spec = load_task(str(tmp_path / "my_copa.yaml"))
    assert spec.task == "copa" and spec.source_file == str(tmp_path / "my_copa.yaml")
    with pytest.raises(MissingFileError, match=r"task file .*nothere.yaml not found"):
        load_task(str(tmp_path / "nothere.yaml"))


def test_a_task_file_of_your_own_can_include_a_shipped_one_with_lm_eval_settings(tmp_path):
    """README's command-line route to lm-eval's protocol: include by absolute path, override two fields."""
    (tmp_path / "lambada_lm_eval.yaml").write_text(
        f"include: {TASKS_DIR / 'lambada.yaml'}\ntask: lambada_lm_eval\ntarget_delimiter: \" \"\nfewshot_fit: lm-eval\n",
        encoding="utf-8",
    )
    mine = load_task(str(tmp_path / "lambada_lm_eval.yaml"))
    protocol = load_task("lambada", protocol="lm-eval")
    assert (mine.target_delimiter, mine.fewshot_fit) == (" ", "lm-eval") == (protocol.target_delimiter, protocol.fewshot_fit)
    assert load_task("lambada").target_delimiter == ""


def test_docs_read_from_the_hub_are_the_whole_split_so_no_sample_or_files_are_recorded(tmp_path, shared_data_dir):
    """triviaqa's local file is a 3,000-question sample; without it the docs come from the Hub's whole validation
    split, which is no sample. Only the files actually read are fingerprinted."""
    import hashlib

    spec = load_task("triviaqa")
    local = spec.scored_data_info(shared_data_dir)
    file = shared_data_dir / "triviaqa" / "triviaqa_sm_sub_llmfoundry.jsonl"
    assert local["sample_of_split"] is True
    assert local["local_files_sha256"] == [hashlib.sha256(file.read_bytes()).hexdigest()]
    assert spec.scored_data_info(tmp_path) == spec.dataset_info()  # an empty data root: the Hub would be read


def test_lm_eval_overrides_apply_to_the_fields_as_the_file_wrote_them(tmp_path):
    """as_lm_eval replaced fields on the derived spec: an output_type override kept the other type's default metrics
    (refused as 'acc_norm is not one a loglikelihood task gives', a metric the file never named), and a test_split
    override met the test entry derived from the old split (refused as two entries). lm-eval builds its task from
    the merged YAML: the overridden type's own defaults (lm-eval's DEFAULT_METRIC_REGISTRY), the new split's file
    (the siblings hunt)."""
    from lm_eval.api.registry import DEFAULT_METRIC_REGISTRY

    (tmp_path / "mc_to_ll.yaml").write_text(
        "task: mc_to_ll\ndata_files: {test: copa/val.jsonl}\noutput_type: multiple_choice\n"
        'doc_to_text: "{{premise}}"\ndoc_to_target: gold\ndoc_to_choice: choices\n'
        'lm_eval_overrides: {output_type: loglikelihood, doc_to_target: "{{choices[gold]}}"}\n', encoding="utf-8")
    ours, as_lm_eval = (load_task("mc_to_ll", tmp_path, protocol=protocol) for protocol in ("ours", "lm-eval"))
    assert ours.metric_names == ["acc", "acc_norm"]
    assert as_lm_eval.output_type == "loglikelihood"
    assert as_lm_eval.metric_names == DEFAULT_METRIC_REGISTRY["loglikelihood"]

    (tmp_path / "splits.yaml").write_text(
        "task: splits\ndata_files: {validation: v.jsonl, train: t.jsonl}\ntest_split: validation\n"
        "output_type: loglikelihood\ndoc_to_text: q\ndoc_to_target: a\nlm_eval_overrides: {test_split: train}\n",
        encoding="utf-8")
    assert load_task("splits", tmp_path).data_files["test"] == "v.jsonl"
    assert load_task("splits", tmp_path, protocol="lm-eval").data_files["test"] == "t.jsonl"
