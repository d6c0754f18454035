"""Config files as YAML 1.2: scalars by the core schema, text fields as written, duplicate keys refused, the
resolved config.yaml read back equal, and local datasets refusing the Hub-only settings they would ignore."""

import dataclasses
import logging
import math
from pathlib import Path

import pytest
import yaml

from hf_gpt_custom.training.config import (
    REPO_ROOT, TrainConfig, load_train_config, run_config_text, save_train_config,
)
from hf_gpt_custom.training.config_values import read_config_yaml

SMOKE = REPO_ROOT / "training" / "configs" / "smoke.yaml"

# YAML 1.2.2 spec, example 10.9 "Core Tag Resolution", and the values the spec gives for it
SPEC_EXAMPLE_10_9 = """\
A null: null
Also a null: # Empty
Not a null: ""
Booleans: [ true, True, false, FALSE ]
Integers: [ 0, 0o7, 0x3A, -19 ]
Floats: [ 0., -0.0, .5, +12e03, -2E+05 ]
Also floats: [ .inf, -.Inf, +.INF, .NAN ]
"""


def test_scalars_resolve_as_the_yaml_1_2_spec_example_says():
    loaded = read_config_yaml(SPEC_EXAMPLE_10_9)
    nan = loaded["Also floats"].pop()
    assert loaded == {
        "A null": None, "Also a null": None, "Not a null": "", "Booleans": [True, True, False, False],
        "Integers": [0, 7, 58, -19], "Floats": [0.0, -0.0, 0.5, 12000.0, -200000.0],
        "Also floats": [math.inf, -math.inf, math.inf],
    }
    assert math.isnan(nan)
    assert all(type(value) is int for value in loaded["Integers"])
    assert yaml.safe_load(SPEC_EXAMPLE_10_9)["Integers"][1] == "0o7"  # contrast: PyYAML is YAML 1.1


# What YAML 1.1 (yaml.safe_load) makes of each plain scalar, and what the YAML 1.2 core schema does (spec 10.3.2:
# ints are [-+]?[0-9]+ decimal, 0o[0-7]+, 0x[0-9a-fA-F]+; no sexagesimal, no 0b, no underscores, no dates)
@pytest.mark.parametrize("text, yaml_1_1, yaml_1_2", [
    ("010", 8, 10),
    ("-010", -8, -10),
    ("1:40", 100, "1:40"),
    ("0x1F", 31, 31),
    ("0o17", "0o17", 15),
    ("0b101", 5, "0b101"),
    ("1_000", 1000, "1_000"),
    ("1e3", "1e3", 1000.0),
    ("6e-4", "6e-4", 6e-4),
    ("yes", True, "yes"),
    ("off", False, "off"),
    ("2001-12-14", __import__("datetime").date(2001, 12, 14), "2001-12-14"),
])
def test_plain_scalars_take_the_yaml_1_2_core_meaning_not_yaml_1_1s(text, yaml_1_1, yaml_1_2):
    assert yaml.safe_load(text) == yaml_1_1
    assert read_config_yaml(text) == yaml_1_2 and type(read_config_yaml(text)) is type(yaml_1_2)


def test_a_config_file_and_overrides_read_numbers_as_yaml_1_2_and_text_as_written(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("dataset: someone/corpus\nrun_name: 007\ndataset_config: 1e3\ntext_field: true\n"
                    "warmup_steps: 010\nmodel:\n  n_layer: 010\n  n_head: 2\n  n_embd: 32\n")
    config = load_train_config(path, [])
    assert (config.run_name, config.dataset_config, config.text_field) == ("007", "1e3", "true")
    assert config.warmup_steps == 10 and config.model["n_layer"] == 10
    config = load_train_config(SMOKE, ["model.n_layer=010", "seed=0x1F", "warmup_steps=0o17", "max_steps=1_000"])
    assert (config.model["n_layer"], config.seed, config.warmup_steps, config.max_steps) == (10, 31, 15, 1000)
    for override, message in [("max_steps=1:40", "max_steps='1:40' is not a valid int"),
                              ("seed=0b101", "seed='0b101' is not a valid int")]:
        with pytest.raises(ValueError, match=message):
            load_train_config(SMOKE, [override])
    path.write_text("dataset: someone/corpus\nmax_steps: 1:40\n")  # YAML 1.1 read 100 steps
    with pytest.raises(ValueError, match="max_steps='1:40' is not a valid int"):
        load_train_config(path, [])


TRICKY_TEXT = ["1e-3", "2e5", "007", "yes", "no", "null", "1:40", "0x1F", "", "true", "~", ".inf", "0o17", "-5"]


@pytest.mark.parametrize("text", TRICKY_TEXT)
def test_saved_config_reads_back_equal_for_text_that_looks_like_another_type(tmp_path, text):
    run_name = text or "run"  # an empty run_name is refused: the run folder would be runs/ itself
    config = TrainConfig(dataset="someone/corpus", run_name=run_name, dataset_config=text, text_field=text,
                         dataset_split=text)
    save_train_config(config, tmp_path / "config.yaml")
    # (a run folder's config.yaml names the folder it is in: out_dir aside, the config it was written from)
    assert load_train_config(tmp_path / "config.yaml", []) == dataclasses.replace(config, out_dir=str(tmp_path))
    keys = ("run_name", "dataset_config", "text_field", "dataset_split")
    recorded = read_config_yaml((tmp_path / "config.yaml").read_text())  # as a resume reads the run's config.yaml
    assert [recorded[key] for key in keys] == [run_name] + [text] * 3
    written = yaml.safe_load((tmp_path / "config.yaml").read_text())  # a YAML 1.1 reader gets the text too
    assert [written[key] for key in keys] == [run_name] + [text] * 3


def test_safe_dump_alone_loses_text_that_yaml_1_2_reads_as_a_number():
    assert read_config_yaml(yaml.safe_dump({"run_name": "1e-3"})) == {"run_name": 0.001}  # why save has its own dumper


@pytest.mark.parametrize("text, key, line, first", [
    ("learning_rate: 1e-3\nmax_steps: 5\nlearning_rate: 5e-3\n", "learning_rate", 3, 1),
    ("model:\n  n_layer: 2\nmodel:\n  n_embd: 32\n", "model", 3, 1),
    ("model:\n  n_layer: 2\n  n_head: 2\n  n_layer: 4\n", "n_layer", 4, 2),
])
def test_a_duplicate_key_is_refused_naming_the_file_and_line(tmp_path, text, key, line, first):
    path = tmp_path / "dup.yaml"
    path.write_text(f"dataset: someone/corpus\n{text}")
    with pytest.raises(ValueError) as err:
        load_train_config(path, [])
    assert str(err.value) == (f"{path} line {line + 1}: duplicate key {key!r} (first on line {first + 1}); YAML would "
                              f"keep only the last value, so remove one")


@pytest.mark.parametrize("key", ["1", "true", "null", "1.5"])
def test_a_key_that_yaml_reads_as_a_number_is_named_not_a_traceback(tmp_path, key):
    """`1: foo` has the int key 1: the key check called str methods on it (AttributeError)."""
    path = tmp_path / "numkey.yaml"
    path.write_text(f"dataset: someone/corpus\n{key}: foo\n")
    with pytest.raises(ValueError, match="unknown training config key .* known keys: "):
        load_train_config(path, [])


def test_a_key_may_override_one_a_merge_brings():
    assert read_config_yaml("a: &x {k: 1, j: 2}\nb:\n  <<: *x\n  k: 3\n")["b"] == {"k": 3, "j": 2}


@pytest.mark.parametrize("override, message", [
    ("dataset_split=test", "dataset_split='test' picks a split of a Hub dataset, but dataset="),
    ("dataset_config=wikitext-2-raw-v1", "dataset_config='wikitext-2-raw-v1' names a configuration of a Hub dataset"),
    ("dataset_revision=v1.0", "dataset_revision='v1.0' pins a version of a Hub dataset, but dataset="),
    ("text_field=story", "text_field='story' names a column of .jsonl/.json/.parquet/.csv data, but dataset="),
])
def test_hub_only_settings_are_refused_for_a_local_text_file(override, message):
    with pytest.raises(ValueError, match=message):
        load_train_config(SMOKE, [override])
    hub = load_train_config(SMOKE, ["dataset=someone/corpus", override])  # they do apply to a Hub dataset
    key, _, value = override.partition("=")
    assert getattr(hub, key) == value


def test_a_records_file_keeps_its_text_field(tmp_path):
    (tmp_path / "stories.jsonl").write_text('{"story": "once upon a time"}\n')
    assert load_train_config(SMOKE, [f"dataset={tmp_path / 'stories.jsonl'}", "text_field=story"]).text_field == "story"


@pytest.mark.parametrize("held_out", ["test.txt", "wiki.valid.raw", "validation/part-0.txt", "dev.txt",
                                      "validation-00000-of-00001.parquet", "corpus_test.txt", "valid/a.txt",
                                      "data-test-00000-of-00001.parquet", "wikitext_test_00000.txt",
                                      "books_val_part1.txt", "test1.txt", "valid0.txt", "test_set/a.txt",
                                      "validation-split/part-0.txt", "dev.clean/x.txt"])
def test_a_dataset_folder_holding_split_files_is_refused_not_trained_on_whole(tmp_path, held_out):
    folder = tmp_path / "corpus"
    (folder / held_out).parent.mkdir(parents=True, exist_ok=True)
    (folder / "train.txt").write_text("training text\n")
    (folder / held_out).write_text("held-out text\n")
    with pytest.raises(ValueError, match=f"dataset folder {folder} holds {held_out}, named as a validation/test split"):
        load_train_config(SMOKE, [f"dataset={folder}"])
    config = load_train_config(SMOKE, [f"dataset={folder / 'train.txt'}", f"val_dataset={folder / held_out}"])
    assert config.val_dataset == str(folder / held_out)


def test_a_folder_without_split_names_is_read_whole(tmp_path):
    # "test" inside a word, or a split word beginning a file's name, is no split name (dev_notes.txt was refused)
    for name in ("latest.txt", "contest/b.txt", "training.txt", "dev_notes.txt", "test_driven_design.txt",
                 "testimonials/c.txt", "devices/d.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("text\n")
    assert load_train_config(SMOKE, [f"dataset={tmp_path}"]).dataset == str(tmp_path)


@pytest.mark.parametrize("raw", ["2.5", "1e3", "0x10"])
def test_an_int_setting_given_a_non_integer_string_is_refused(raw):
    """`batch_size=2.5` on the command line is not batch_size 2: a string converts to an int only as Python's int()
    reads it (underscores allowed), as the YAML core schema does for 1e3 (a float) and 0x10 (hex only in YAML)."""
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.training.config_values import convert_value

    assert convert_value("batch_size", "1_024", int, from_string=True) == 1024
    with pytest.raises(UserError, match=r"batch_size=.* is not a valid int"):
        convert_value("batch_size", raw, int, from_string=True)


def test_an_empty_override_of_an_optional_text_setting_is_null():
    """`tokenizer=` on the command line unsets it, as `tokenizer:` with no value does in the YAML."""
    from hf_gpt_custom.training.config_values import convert_override

    assert convert_override("tokenizer", "", str | None) is None
    assert read_config_yaml("tokenizer:\n") == {"tokenizer": None}


_README_SPLITS = ("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: all.jsonl\n"
                  "  - split: test\n    path: held.jsonl\n---\n# a dataset card\n")


@pytest.mark.parametrize("layout", [
    {"data/train-00000-of-00001.jsonl": 1, "data/validation_matched-00000-of-00001.jsonl": 0,
     "data/test_matched-00000-of-00001.jsonl": 0},
    {"data/train_sft-00000-of-00002.jsonl": 1, "data/train_sft-00001-of-00002.jsonl": 1,
     "data/test_sft-00000-of-00001.jsonl": 0},
    {"train.jsonl": 1, "evaluation.jsonl": 0},
    {"all.jsonl": 1, "held.jsonl": 0, "README.md": None},
], ids=["mnli-shards", "sft-shards", "evaluation", "readme-configs"])
def test_a_folder_whose_hub_layout_holds_other_splits_is_refused(tmp_path, layout):
    """Hub layouts datasets reads as several splits were trained on whole, their test and validation documents too
    (89 of 100 for MNLI's shards). Reference: datasets.load_dataset on the same folder: every file the refusal names
    is in one of its non-training splits, and every such file is named."""
    import json

    import datasets

    folder = tmp_path / "corpus"
    for name, is_train in layout.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(_README_SPLITS if name == "README.md" else
                                   "".join(json.dumps({"text": f"{name} document {i}"}) + "\n" for i in range(3)))
    loaded = datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "cache"))
    held_by_datasets = {text.split(" document")[0] for split in loaded if "train" not in split
                        for text in loaded[split]["text"]}
    assert held_by_datasets == {name for name, is_train in layout.items() if is_train == 0}
    with pytest.raises(ValueError, match=f"dataset folder {folder} holds .*named as a validation/test split") as caught:
        load_train_config(SMOKE, [f"dataset={folder}"])
    for name in held_by_datasets:
        assert name in str(caught.value) or len(held_by_datasets) > 3


def test_a_folder_of_one_hub_training_split_is_read(tmp_path):
    """train_sft shards alone, and a README.md without `configs`, are one training split: nothing to refuse, and the
    card's README.md is no training text."""
    folder = tmp_path / "corpus"
    (folder / "data").mkdir(parents=True)
    for shard in range(2):
        (folder / "data" / f"train_sft-0000{shard}-of-00002.jsonl").write_text('{"text": "a document"}\n')
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# A dataset\n")
    assert load_train_config(SMOKE, [f"dataset={folder}"]).dataset == str(folder)


def test_a_saved_to_disk_folder_is_refused_naming_the_fix(tmp_path):
    """Its data is .arrow, which no reader here reads: its dataset_info.json and state.json were read as the corpus
    and training failed with a CastError naming nothing."""
    import datasets

    from hf_gpt_custom.training.corpus import load_text_dataset

    datasets.Dataset.from_dict({"text": ["one", "two"]}).save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["one"]})}).save_to_disk(str(tmp_path / "dict"))
    for folder in (tmp_path / "saved", tmp_path / "dict"):
        with pytest.raises(ValueError, match=rf"dataset folder {folder} was written by datasets' save_to_disk "
                                             r"\(\.arrow files\).*to_parquet"):
            load_text_dataset(str(folder))


def test_dataset_metadata_files_beside_the_data_are_not_training_text(tmp_path):
    """A Hub snapshot's dataset_infos.json beside data/train.jsonl was read as records (a CastError); datasets skips
    it (its FILES_TO_IGNORE). Reference: datasets.load_dataset on the folder."""
    import datasets

    from hf_gpt_custom.training.corpus import load_text_dataset

    folder = tmp_path / "snapshot"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train.jsonl").write_text('{"text": "first"}\n{"text": "second"}\n')
    (folder / "dataset_infos.json").write_text(
        '{"default": {"description": "", "features": {"text": {"dtype": "string", "_type": "Value"}}}}')
    reference = datasets.load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "ref"))["text"]
    assert load_text_dataset(str(folder), cache_dir=str(tmp_path / "cache"))["text"] == reference


def test_a_column_of_lists_of_strings_is_refused_as_no_text(tmp_path):
    """A list column passed the text check (a List has no dtype): two-item rows trained as one run-on document with
    no separator, other lengths failed with a bare TypeError."""
    import json

    from hf_gpt_custom.training.corpus import load_text_dataset

    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"sentences": [f"Sentence {i}.", f"Sentence {i + 1}."]}) + "\n" for i in range(3)))
    with pytest.raises(ValueError, match=r"column 'sentences' holds List \(list\) values, not text"):
        load_text_dataset(str(path), text_field="sentences", cache_dir=str(tmp_path / "cache"))


def test_a_streamed_csv_reads_its_text_field_beside_a_text_column(tmp_path):
    """text_field=body on a CSV that also has a `text` column failed only when streamed (its columns are unknown
    before reading). Reference: pandas reading the same file."""
    import pandas

    from hf_gpt_custom.training.corpus import load_text_dataset

    path = tmp_path / "posts.csv"
    pandas.DataFrame({"text": ["title one", "title two"], "body": ["first body", "second body"]}).to_csv(path, index=False)
    streamed = load_text_dataset(str(path), text_field="body", streaming=True, cache_dir=str(tmp_path / "cache"))
    assert [row["text"] for row in streamed] == list(pandas.read_csv(path)["body"])


def test_a_model_section_init_from_contradicts_is_refused_before_anything_runs(tmp_path, capsys):
    """It was refused only once the model loaded: `run` had trained the tokenizer and recorded the settings, so
    dropping the field as the message said met "was started with a different config". Reference: the folder's
    config.json (a transformers GPT-2 folder's too, converted as loading converts it)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom.cli import main

    folder = tmp_path / "gpt2"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=300, n_positions=64)).save_pretrained(folder)
    out = tmp_path / "runs"
    with pytest.raises(SystemExit) as exited:
        main(["run", str(SMOKE), f"init_from={folder}", "model={n_embd: 64}", f"out_dir={out}"])
    assert exited.value.code == 2 and not out.exists()
    assert f"model.n_embd=64 but init_from={folder} has n_embd=32" in capsys.readouterr().err
    config = load_train_config(SMOKE, [f"init_from={folder}", "model={n_embd: 32, n_layer: 1}", f"out_dir={out}"])
    assert config.model == {"n_embd": 32, "n_layer": 1}  # what the folder has: no contradiction



@pytest.mark.parametrize("layout", [
    ["data/book-00000-of-00002.txt", "data/book-00001-of-00002.txt"],
    ["data/train-00000-of-00001.txt", "data/chapter-00000-of-00001.txt"],
    ["shard-00000-of-00001.txt", "dev_notes.txt", "test_driven_design.txt"],
], ids=["corpus-shards", "train-and-chapter-shards", "a-shard-beside-plain-names"])
def test_shards_of_a_corpus_are_training_text(tmp_path, layout):
    """datasets names a shard's prefix a split ("book"): every shard of a plain corpus was refused as a held-out
    split, and one shard-named file let datasets' keyword guess refuse dev_notes.txt (a review of this round)."""
    folder = tmp_path / "corpus"
    for name in layout:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("some training text\n")
    assert load_train_config(SMOKE, [f"dataset={folder}"]).dataset == str(folder)


def test_files_datasets_would_hold_out_by_name_are_named_in_a_warning(tmp_path, caplog):
    """train.jsonl beside test_matched.jsonl: datasets.load_dataset(folder) reads test_matched.jsonl as the test split,
    while a folder is trained on whole and the name rule lets "test_matched" pass (a word after the split word). It
    was trained on in silence; now the warning names each file and the split datasets gives it."""
    import datasets

    folder = tmp_path / "corpus"
    folder.mkdir()
    for name in ("train.jsonl", "test_matched.jsonl", "notes.jsonl"):
        (folder / name).write_text('{"text": "some text"}\n')
    reference = datasets.load_dataset_builder(str(folder)).config.data_files
    assert [Path(name).name for name in reference["test"]] == ["test_matched.jsonl"]
    with caplog.at_level(logging.WARNING):
        assert load_train_config(SMOKE, [f"dataset={folder}"]).dataset == str(folder)
    assert "would read test_matched.jsonl (split 'test') as a held-out split" in caplog.text
    assert "train.jsonl" not in caplog.text and "notes.jsonl" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_train_config(SMOKE, [f"dataset={folder / 'train.jsonl'}"])
    assert "held-out split" not in caplog.text


def test_a_readme_that_maps_every_file_to_train_gets_no_held_out_warning(tmp_path, caplog):
    """A README.md whose `configs:` puts test_matched.jsonl in train: datasets reads that map, not the file names, so
    the warning that it would hold the file out was false (a review of this round). Reference: datasets' builder."""
    import datasets

    folder = tmp_path / "corpus"
    folder.mkdir()
    for name in ("a.jsonl", "test_matched.jsonl"):
        (folder / name).write_text('{"text": "some text"}\n')
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
                                      "    path: ['a.jsonl', 'test_matched.jsonl']\n---\n")
    reference = datasets.load_dataset_builder(str(folder)).config.data_files
    assert list(reference) == ["train"] and len(reference["train"]) == 2
    with caplog.at_level(logging.WARNING):
        assert load_train_config(SMOKE, [f"dataset={folder}"]).dataset == str(folder)
    assert "held-out split" not in caplog.text


def test_a_kill_while_the_config_or_summary_is_written_leaves_the_previous_one_whole(tmp_path, monkeypatch,
                                                                                    shakespeare_path):
    """config.yaml and training_summary.json were written in place: a SIGTERM inside the write left a 0-byte
    config.yaml (the interrupts hunt). Reference: the files as they were before the interrupted write."""
    from hf_gpt_custom.training import config as config_module
    from hf_gpt_custom.training.run_log import write_training_summary

    config = TrainConfig(run_name="kept", dataset=str(shakespeare_path))
    save_train_config(config, tmp_path / "config.yaml")
    write_training_summary(tmp_path / "summary.json", {"steps": 3})
    before = {name: (tmp_path / name).read_bytes() for name in ("config.yaml", "summary.json")}

    def killed(values, handle):
        handle.write("run_name: hal")
        raise KeyboardInterrupt

    monkeypatch.setattr(config_module, "write_config_yaml", killed)
    with pytest.raises(KeyboardInterrupt):
        save_train_config(TrainConfig(run_name="other", dataset=str(shakespeare_path)), tmp_path / "config.yaml")
    real_write_text = Path.write_text

    def half_then_killed(self, text, *args, **kwargs):
        real_write_text(self, text[: len(text) // 2], *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", half_then_killed)
    with pytest.raises(KeyboardInterrupt):
        write_training_summary(tmp_path / "summary.json", {"steps": 4})
    monkeypatch.undo()
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["run_name"] == "kept"


def test_a_run_folders_config_yaml_names_that_folder_from_anywhere(tmp_path, monkeypatch):
    """config.yaml records out_dir as typed (relative to that command's directory; null: runs/<run_name> there), so
    a run folder's own config.yaml given back to `run` from another directory, or a copied folder's, named another
    folder: the original run was re-evaluated in the copy's stead, and from inside the folder a new run was trained
    from step 0 in runs/orig/runs/orig (the paths hunt). Reference: the folder the file is in. An explicit out_dir=
    still wins, and a config.yaml outside a run folder keeps its out_dir."""
    config = load_train_config(SMOKE, ["run_name=orig"])
    assert config.out_dir is None
    folder = tmp_path / "runs" / "copy"
    folder.mkdir(parents=True)
    save_train_config(config, folder / "config.yaml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_train_config(folder / "config.yaml").run_dir.resolve() == folder.resolve()
    monkeypatch.chdir(folder)
    assert load_train_config("config.yaml").run_dir.resolve() == folder.resolve()
    assert load_train_config("config.yaml", [f"out_dir={tmp_path / 'new'}"]).run_dir == tmp_path / "new"


def test_only_a_config_yaml_a_run_wrote_names_its_folder(tmp_path, monkeypatch):
    """The rule above, held to the files a run wrote (its header, or `run`'s pipeline_state.json beside it): a user's
    own config.yaml in a project folder that holds checkpoints/ and final/ of its own was taken for a run folder's, and
    `train config.yaml` trained into the project folder, over the user's file (the roundreview11 hunt). A recorded
    out_dir path is replaced too (it came back through the values-as-written map), and a command that names another
    folder (out_dir=, run_name=) is obeyed, as before the rule."""
    own = tmp_path / "project"
    (own / "checkpoints").mkdir(parents=True)
    (own / "final").mkdir()
    (own / "config.yaml").write_text(SMOKE.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert load_train_config(own / "config.yaml").run_dir == Path("runs") / "smoke"

    folder = tmp_path / "runs" / "copy"
    folder.mkdir(parents=True)
    save_train_config(load_train_config(SMOKE, ["out_dir=runs/orig"]), folder / "config.yaml")
    assert (folder / "config.yaml").read_text().startswith("# hf-gpt-custom: the resolved config of the run")
    monkeypatch.chdir(tmp_path / "runs")
    assert load_train_config(folder / "config.yaml").run_dir.resolve() == folder.resolve()
    assert load_train_config(folder / "config.yaml", ["run_name=new"]).run_dir == Path("runs") / "new"
    save_train_config(load_train_config(SMOKE, ["run_name=orig"]), folder / "config.yaml")
    assert load_train_config(folder / "config.yaml", ["run_name=new"]).run_dir == Path("runs") / "new"
    older = tmp_path / "older_run"  # written before the header: known by `run`'s pipeline_state.json beside it
    older.mkdir()
    (older / "config.yaml").write_text("\n".join((folder / "config.yaml").read_text().splitlines()[1:]) + "\n")
    assert load_train_config(older / "config.yaml").run_dir == Path("runs") / "orig"
    (older / "pipeline_state.json").write_text("{}")
    assert load_train_config(older / "config.yaml").run_dir.resolve() == older.resolve()


def test_a_run_folders_config_yaml_given_back_with_run_name_starts_that_run_wherever_its_out_dir_was_recorded(
        tmp_path, monkeypatch):
    """The folder a run folder's config.yaml names is written back into it (absolute now; it was as typed): recorded
    as `runs/base` (a benchmark change rewrote config.yaml) `run_name=second` renamed that run in place, and recorded
    as `.` (resumed from inside the folder) `run_name=new` trained a whole run into the working directory (the
    roundreview12 and orchread hunts). run_name= names runs/<name>, as with no out_dir; out_dir= names a folder."""
    folder = tmp_path / "runs" / "base"
    folder.mkdir(parents=True)
    monkeypatch.chdir(folder)
    resumed_inside = load_train_config(SMOKE, ["out_dir=."])
    save_train_config(resumed_inside, folder / "config.yaml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_train_config(folder / "config.yaml")
    assert config.out_dir == str(folder.resolve())  # absolute: the same folder from anywhere
    save_train_config(config, folder / "config.yaml")
    assert yaml.safe_load((folder / "config.yaml").read_text())["out_dir"] == str(folder.resolve())
    for recorded in (".", "runs/base", str(folder.resolve())):
        (folder / "config.yaml").write_text(run_config_text({**config.to_dict(), "out_dir": recorded}))
        assert load_train_config(folder / "config.yaml", ["run_name=second"]).run_dir == Path("runs") / "second"
        assert load_train_config(folder / "config.yaml").run_dir == folder.resolve()
        assert load_train_config(folder / "config.yaml", ["run_name=x", f"out_dir={tmp_path / 'o'}"]).run_dir == \
            tmp_path / "o"


def test_a_link_to_a_run_folders_config_yaml_names_the_linked_run_folder(tmp_path):
    """`configs/config.yaml -> ../runs/base/config.yaml` trained a second model from step 0 into configs/ (the
    roundreview12 hunt): the folder is the linked file's."""
    folder = tmp_path / "runs" / "base"
    folder.mkdir(parents=True)
    save_train_config(load_train_config(SMOKE, ["run_name=base"]), folder / "config.yaml")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "config.yaml").symlink_to(folder / "config.yaml")
    assert load_train_config(tmp_path / "configs" / "config.yaml").run_dir == folder.resolve()


def test_a_resume_point_is_not_recorded_as_the_runs_setting(tmp_path):
    """`train ... resume_from_checkpoint=runs/t/checkpoints/step_000002` was written into config.yaml: given back
    later, the file resumed that checkpoint again and set every later one and final/ aside (the orchread hunt)."""
    config = load_train_config(SMOKE, ["resume_from_checkpoint=latest", f"out_dir={tmp_path / 'r'}"])
    save_train_config(config, tmp_path / "config.yaml")
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["resume_from_checkpoint"] is None
    assert dataclasses.replace(load_train_config(tmp_path / "config.yaml"), resume_from_checkpoint="latest") == \
        dataclasses.replace(config, out_dir=str(tmp_path.resolve()))  # the rest read back as it was (out_dir: the file's folder)
