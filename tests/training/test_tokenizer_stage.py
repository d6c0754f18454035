"""The tokenizer stage learns its merges from the training documents only, never from the held-out validation ones."""

from __future__ import annotations

import json

import pytest

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.train import train


TRAIN_SPEECH = "the cat sat on the mat and the cat ran"
# Only in the last 10% of the documents: with val_holdout=tail they are validation text.
VALIDATION_SPEECH = " ".join(["qqqzzz"] * 40)


def _corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    documents = [TRAIN_SPEECH] * 45 + [VALIDATION_SPEECH] * 5
    path.write_text("\n\n".join(documents), encoding="utf-8")
    return path


def _vocabulary(folder) -> set[str]:
    return set(json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"])


def test_merges_come_from_the_training_documents_not_the_held_out_tail(make_config, tmp_path):
    from hf_gpt_custom.training.workload import prepare_tokenizer

    corpus = _corpus(tmp_path)
    config = make_config(f"dataset={corpus}", "tokenizer=null", "tokenizer_vocab_size=280", "val_fraction=0.1",
                         "val_holdout=tail", run_name="tail_tokenizer")
    vocabulary = _vocabulary(prepare_tokenizer(config))
    assert "cat" in vocabulary or "Ġcat" in vocabulary  # trained on the training speeches
    assert not any("qq" in token or "zz" in token for token in vocabulary)  # the validation text taught it nothing
    marker = json.loads((config.run_dir / "tokenizer" / "training_source.json").read_text())
    assert marker["trained_on"]["documents"] == "training split" and marker["trained_on"]["val_holdout"] == "tail"


def test_new_contents_at_the_same_path_train_a_new_tokenizer(make_config, tmp_path):
    """The trained tokenizer is reused for the same documents only: a corpus replaced at the same path (same size and
    mtime, as cp -p leaves it) was given the tokenizer of the old text. Reference: a tokenizer trained from scratch,
    in another run folder, on the new text."""
    import os

    from hf_gpt_custom.training.workload import prepare_tokenizer

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join([TRAIN_SPEECH] * 50), encoding="utf-8")
    status = corpus.stat()
    settings = (f"dataset={corpus}", "tokenizer=null", "tokenizer_vocab_size=280", "val_fraction=0.1",
                "val_holdout=tail")
    config = make_config(*settings, run_name="replaced")
    assert not any("qq" in token for token in _vocabulary(prepare_tokenizer(config)))
    new_speech = "qqqzzz xxxyyy wwwvvv ttt qqqzzz xxxyyy"  # as long as TRAIN_SPEECH: the same file size
    corpus.write_text("\n\n".join([new_speech] * 50), encoding="utf-8")
    os.utime(corpus, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert corpus.stat().st_size == status.st_size
    retrained = _vocabulary(prepare_tokenizer(config))
    assert retrained == _vocabulary(prepare_tokenizer(make_config(*settings, run_name="fresh")))
    assert any("qq" in token for token in retrained)


def test_a_separate_validation_file_leaves_the_whole_dataset_to_the_tokenizer(make_config, tmp_path):
    from hf_gpt_custom.training.workload import prepare_tokenizer

    corpus = _corpus(tmp_path)
    other = tmp_path / "validation.txt"
    other.write_text(TRAIN_SPEECH, encoding="utf-8")
    config = make_config(f"dataset={corpus}", f"val_dataset={other}", "val_holdout=random", "tokenizer=null",
                         "tokenizer_vocab_size=280", run_name="file_tokenizer")
    vocabulary = _vocabulary(prepare_tokenizer(config))
    assert any("qq" in token for token in vocabulary)  # every document of `dataset` is training text here


def test_a_document_that_is_not_text_is_named_with_its_source_and_number(make_config, tmp_path):
    """A JSONL column of strings with one number loads (as a JSON column); the error names the file and document."""
    import pytest

    from hf_gpt_custom.training.workload import prepare_tokenizer

    rows = [{"text": f"{TRAIN_SPEECH} {i}"} for i in range(30)]
    rows[19] = {"text": 1999}
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    config = make_config(f"dataset={path}", "tokenizer=null", "tokenizer_vocab_size=280", "val_fraction=0.1",
                         "val_holdout=tail", run_name="mixed")
    with pytest.raises(ValueError, match=r"training documents of .*mixed\.jsonl .*document 20 .*int 1999, not text"):
        prepare_tokenizer(config)


def test_a_tokenizer_folder_without_a_tokenizer_is_one_clear_error(make_config, tmp_path):
    """tokenizer=<an empty folder> gave a bare ValueError from deep inside transformers."""
    empty = tmp_path / "empty_tokenizer"
    empty.mkdir()
    with pytest.raises(UserError, match=r"tokenizer folder .*empty_tokenizer holds no tokenizer transformers can load"):
        train(make_config(f"tokenizer={empty}", run_name="no_tokenizer"))
