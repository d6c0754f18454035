"""Run folders written by older releases, continued by today's code: the same run, or a refusal naming the real
cause and a fix that works. Each test writes the old format's files directly."""

import hashlib
import json

import pytest

from hf_gpt_custom.errors import UserError


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run_with_an_old_rule_tokenizer(make_config, tmp_path, shakespeare_path, run_name, **recorded_change):
    """A run folder as code before 872cab0 (2026-11-25) left it: the run's tokenizer trained on the whole dataset, its
    training_source.json holding dataset, dataset_config, split, text_field and vocab_size only (`recorded_change`
    edits what it records). Returns the config and the tokenizer folder."""
    from hf_gpt_custom.tokenizer_training import train_tokenizer

    small = tmp_path / "speeches.txt"
    small.write_text("\n\n".join(shakespeare_path.read_text(encoding="utf-8").split("\n\n")[:400]), encoding="utf-8")
    config = make_config(f"dataset={small}", "tokenizer=null", "tokenizer_vocab_size=300", run_name=run_name)
    folder = config.run_dir / "tokenizer"
    train_tokenizer([str(small)], folder, vocab_size=300, show_progress=False)
    (folder / "training_source.json").write_text(json.dumps(
        {"dataset": str(small), "dataset_config": None, "split": "train", "text_field": "text", "vocab_size": 300,
         **recorded_change}))
    return config, folder


def test_a_run_tokenizer_trained_by_code_before_872cab0_is_not_blamed_on_changed_data(make_config, tmp_path,
                                                                                       shakespeare_path):
    """Before 872cab0 (2026-11-25 02:48; e.g. 73d52fc, e81a9d6) a run's own tokenizer was trained on the whole dataset
    and its training_source.json held dataset, dataset_config, split, text_field and vocab_size only. Today the stage
    retrains on the training split, gets other merges, and refuses the untouched folder with "the data it would be
    trained on now (dataset_sha256, trained_on changed) gives another one; put back the data it was trained on":
    the data is byte for byte what the run read; what changed is the tokenizer rule. (Reproduced end to end: a
    73d52fc/e81a9d6 smoke run killed after step 10 resumes under its own code and is refused by today's; passing
    tokenizer=<run>/tokenizer is refused too, as a changed setting, so no named fix continues the run.)
    Expected: the tokenizer its checkpoints were trained with is kept (it is what their weights need), or a refusal
    that names the rule change instead of the data."""
    from hf_gpt_custom.training.workload import prepare_tokenizer

    config, _ = _run_with_an_old_rule_tokenizer(make_config, tmp_path, shakespeare_path, "old_run")
    run_dir, small = config.run_dir, tmp_path / "speeches.txt"
    (run_dir / "final").mkdir()  # a model trained with that tokenizer (a checkpoint counts the same)
    before = _sha256(run_dir / "tokenizer" / "tokenizer.json")
    before_data = _sha256(small)

    try:
        folder = prepare_tokenizer(config)
    except UserError as err:
        assert _sha256(small) == before_data
        assert "put back the data" not in str(err), f"the data did not change; the message says it did: {err}"
    else:
        assert folder == run_dir / "tokenizer"
        assert _sha256(folder / "tokenizer.json") == before


def test_an_old_rule_tokenizer_with_nothing_trained_on_it_is_retrained_by_todays_rule(make_config, tmp_path,
                                                                                       shakespeare_path):
    """Kept only for the checkpoints or final/ trained with it: without them, the run's tokenizer is trained again on
    the training documents alone, with today's marker."""
    from hf_gpt_custom.training.workload import prepare_tokenizer

    config, folder = _run_with_an_old_rule_tokenizer(make_config, tmp_path, shakespeare_path, "old_marker")
    assert prepare_tokenizer(config) == folder
    assert json.loads((folder / "training_source.json").read_text())["trained_on"]["documents"] == "training split"


def test_a_validation_file_runs_tokenizer_is_not_kept_when_its_recorded_data_changed(make_config, tmp_path,
                                                                                     shakespeare_path):
    """A marker of today's rule beside a val_dataset (contents recorded, no held-out split to record) is no older
    version's: new contents under the same path are refused for the outputs trained with the old tokenizer."""
    from hf_gpt_custom.training.workload import prepare_tokenizer

    speeches = shakespeare_path.read_text(encoding="utf-8").split("\n\n")
    data, other = tmp_path / "speeches.txt", tmp_path / "validation.txt"
    data.write_text("\n\n".join(speeches[:400]), encoding="utf-8")
    other.write_text("\n\n".join(speeches[400:440]), encoding="utf-8")
    config = make_config(f"dataset={data}", f"val_dataset={other}", "tokenizer=null", "tokenizer_vocab_size=300",
                         run_name="val_file")
    folder = prepare_tokenizer(config)
    assert "dataset_sha256" in json.loads((folder / "training_source.json").read_text())
    (config.run_dir / "final").mkdir()  # trained with it
    data.write_text("\n\n".join(speeches[1000:1400]), encoding="utf-8")
    with pytest.raises(UserError, match=r"dataset_sha256 changed\) gives another one"):
        prepare_tokenizer(config)


@pytest.mark.parametrize("recorded_change", [{"vocab_size": 280}, {"dataset": "/elsewhere/speeches.txt"}])
def test_an_old_rule_tokenizer_for_other_settings_is_not_kept(make_config, tmp_path, shakespeare_path,
                                                              recorded_change):
    """An older version's marker is taken for the run's tokenizer only when all it records is this run's: one for
    another size or dataset is retrained beside the outputs and, coming out other, refused."""
    from hf_gpt_custom.training.workload import prepare_tokenizer

    config, _ = _run_with_an_old_rule_tokenizer(make_config, tmp_path, shakespeare_path, "old_other", **recorded_change)
    (config.run_dir / "final").mkdir()
    with pytest.raises(UserError, match=f"({'|'.join(recorded_change)}) changed\\) gives another one"):
        prepare_tokenizer(config)
