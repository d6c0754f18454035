"""The tokenizer stage learns its merges from the training documents only, never from the held-out validation ones."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

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


def test_the_same_corpus_at_another_path_keeps_the_runs_tokenizer(make_config, tmp_path, monkeypatch):
    """A moved data folder retrained the run's tokenizer (into tokenizer.retrained, then compared): its marker kept the
    path. The contents are the documents: the same bytes elsewhere reuse it without training."""
    from hf_gpt_custom import tokenizer_training
    from hf_gpt_custom.training.workload import prepare_tokenizer

    corpus = _corpus(tmp_path)
    settings = ("tokenizer=null", "tokenizer_vocab_size=280", "val_fraction=0.1", "val_holdout=tail")
    folder = prepare_tokenizer(make_config(f"dataset={corpus}", *settings, run_name="moved"))
    moved = tmp_path / "elsewhere" / "corpus.txt"
    moved.parent.mkdir()
    shutil.move(corpus, moved)
    monkeypatch.setattr(tokenizer_training, "train_tokenizer", lambda *a, **k: pytest.fail("trained again"))
    assert prepare_tokenizer(make_config(f"dataset={moved}", *settings, run_name="moved")) == folder


@pytest.mark.parametrize("recorded, now, same", [
    ({"dataset": "/a/c.txt", "dataset_sha256": "x"}, {"dataset": "/b/c.txt", "dataset_sha256": "x"}, True),
    ({"dataset": "/a/c.txt", "dataset_sha256": "x"}, {"dataset": "/a/c.txt", "dataset_sha256": "y"}, False),
    ({"dataset": "user/corpus"}, {"dataset": "user/other"}, False),  # Hub names: no contents, the name counts
    ({"dataset": "user/corpus", "vocab_size": 280}, {"dataset": "user/corpus", "vocab_size": 300}, False),
])
def test_a_tokenizer_source_is_its_documents_and_settings_not_its_path(recorded, now, same):
    from hf_gpt_custom.training.workload import _same_source

    assert _same_source(recorded, now) is same


def test_a_streamed_corpus_keeps_its_first_documents_the_validation_set_from_the_tokenizer(make_config, tmp_path,
                                                                                          monkeypatch):
    """streaming=true validates on the stream's first STREAMING_VAL_DOCUMENTS documents; the tokenizer was trained on
    the whole stream, those included."""
    from hf_gpt_custom.training import data
    from hf_gpt_custom.training.workload import prepare_tokenizer

    monkeypatch.setattr(data, "STREAMING_VAL_DOCUMENTS", 5)
    corpus = tmp_path / "streamed.txt"
    corpus.write_text("\n\n".join([VALIDATION_SPEECH] * 5 + [TRAIN_SPEECH] * 45), encoding="utf-8")
    config = make_config(f"dataset={corpus}", "streaming=true", "tokenizer=null", "tokenizer_vocab_size=280",
                         run_name="streamed_tokenizer")
    folder = prepare_tokenizer(config)
    vocabulary = _vocabulary(folder)
    assert "cat" in vocabulary or "Ġcat" in vocabulary
    assert not any("qq" in token or "zz" in token for token in vocabulary)
    from transformers import AutoTokenizer

    validation = data.prepare_datasets(config, AutoTokenizer.from_pretrained(folder), folder).val
    text = AutoTokenizer.from_pretrained(folder).decode(validation[0]["input_ids"])
    assert "qqqzzz" in text and "cat" not in text  # what the tokenizer skipped is what training validates on


def test_a_separate_validation_file_leaves_the_whole_dataset_to_the_tokenizer(make_config, tmp_path):
    from hf_gpt_custom.training.workload import prepare_tokenizer

    corpus = _corpus(tmp_path)
    other = tmp_path / "validation.txt"
    other.write_text(TRAIN_SPEECH, encoding="utf-8")
    config = make_config(f"dataset={corpus}", f"val_dataset={other}", "val_holdout=random", "tokenizer=null",
                         "tokenizer_vocab_size=280", run_name="file_tokenizer")
    vocabulary = _vocabulary(prepare_tokenizer(config))
    assert any("qq" in token for token in vocabulary)  # every document of `dataset` is training text here


def test_a_separate_validation_file_trains_the_tokenizer_on_the_documents_training_reads(make_config, tmp_path):
    """With val_dataset set, the tokenizer read `dataset` as one whole text, blank lines included, where training
    reads paragraphs (text_sample_by) with <|endoftext|> between them: merges were spent on the "\n\n" training
    never sees. Reference: the paragraphs split by hand, which hold no blank line."""
    from hf_gpt_custom.training.workload import prepare_tokenizer

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n\n".join([TRAIN_SPEECH] * 50), encoding="utf-8")  # 50 paragraphs
    other = tmp_path / "validation.txt"
    other.write_text(TRAIN_SPEECH, encoding="utf-8")
    config = make_config(f"dataset={corpus}", f"val_dataset={other}", "tokenizer=null", "tokenizer_vocab_size=280",
                         "text_sample_by=paragraph", run_name="paragraph_tokenizer")
    vocabulary = _vocabulary(prepare_tokenizer(config))
    assert "cat" in vocabulary or "Ġcat" in vocabulary
    assert not any("\u010a\u010a" in token for token in vocabulary)  # "\n\n" as byte-level BPE writes it (Ċ)


def test_a_corpus_that_mentions_endoftext_trains_the_runs_tokenizer(make_config, tmp_path):
    """train_tokenizer refuses a special token whose text occurs in the corpus; the stage's only one, <|endoftext|>,
    is not refused (training keeps a literal one as text, tokenizer() reads it as eos, GPT-2's convention)."""
    from hf_gpt_custom.training.workload import prepare_tokenizer

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join([f"{TRAIN_SPEECH} <|endoftext|>"] * 50), encoding="utf-8")
    config = make_config(f"dataset={corpus}", "tokenizer=null", "tokenizer_vocab_size=280", "val_fraction=0.1",
                         "val_holdout=tail", run_name="endoftext_text")
    vocabulary = _vocabulary(prepare_tokenizer(config))
    assert "<|endoftext|>" in vocabulary and ("cat" in vocabulary or "Ġcat" in vocabulary)


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


# --- a new run from a checkpoint: the weights keep the tokenizer they were trained with ------------------------------


def _speeches(shakespeare_path, path, start: int, length: int = 40_000):
    path.write_text(shakespeare_path.read_text(encoding="utf-8")[start:start + length], encoding="utf-8")
    return path


@pytest.fixture
def first_run(make_config, tmp_path, shakespeare_path):
    """A tiny run that trained its own tokenizer (tokenizer=null): its run folder and its last checkpoint."""
    corpus = _speeches(shakespeare_path, tmp_path / "first.txt", start=0)
    run_dir = train(make_config(f"dataset={corpus}", "tokenizer=null", "tokenizer_vocab_size=300",
                                f"data_cache_dir={tmp_path / 'cache'}", run_name="first"))
    return run_dir, run_dir / "checkpoints" / "step_000012"


def _from_checkpoint(make_config, tmp_path, shakespeare_path, checkpoint, **kwargs):
    """docs/training.md's way to keep the weights and change the recipe: init_from=<checkpoint>, here on other text
    with the first run's tokenizer settings (a tokenizer trained now would fit the weights' size and go unnoticed)."""
    corpus = _speeches(shakespeare_path, tmp_path / "second.txt", start=200_000)
    return make_config(f"dataset={corpus}", "tokenizer=null", "tokenizer_vocab_size=300", f"init_from={checkpoint}",
                       "seed=7", "max_steps=2",
                       "warmup_steps=0", f"data_cache_dir={tmp_path / 'cache'}", run_name="second",
                       with_model_section=False, **kwargs)


def test_a_new_run_from_a_checkpoint_keeps_the_tokenizer_its_weights_were_trained_with(
        first_run, make_config, tmp_path, shakespeare_path):
    """A checkpoint folder has no tokenizer files: the new run trained a tokenizer of its own under the loaded weights
    (219 of 512 ids meant other text) and shipped it in final/, without a word."""
    from transformers import AutoTokenizer

    from hf_gpt_custom.training.fingerprints import TOKENIZER_FILES

    first_dir, checkpoint = first_run
    second_dir = train(_from_checkpoint(make_config, tmp_path, shakespeare_path, checkpoint))
    shipped = [name for name in TOKENIZER_FILES if (first_dir / "final" / name).is_file()]
    assert "tokenizer.json" in shipped
    for name in shipped:
        assert (second_dir / "final" / name).read_bytes() == (first_dir / "final" / name).read_bytes(), name
    sample = "ROMEO: But, soft! what light through yonder window breaks?"
    first_ids = AutoTokenizer.from_pretrained(str(first_dir / "final"))(sample)["input_ids"]
    assert AutoTokenizer.from_pretrained(str(second_dir / "final"))(sample)["input_ids"] == first_ids
    summary = json.loads((second_dir / "training_summary.json").read_text())
    assert summary["tokenizer"] == str((first_dir / "tokenizer").absolute())
    assert not (second_dir / "tokenizer").exists()  # nothing trained
    # the new run's checkpoints record that tokenizer's fingerprint, so a resume notices if its files change
    from hf_gpt_custom.training.fingerprints import combined_sha256, tokenizer_file_sha256s

    settings = json.loads(next((second_dir / "checkpoints").glob("step_*/training_settings.json")).read_text())
    assert settings["contents"]["tokenizer"] == combined_sha256(tokenizer_file_sha256s(first_dir / "tokenizer"))


def test_a_checkpoint_whose_run_tokenizer_is_gone_is_refused_naming_the_fix(
        first_run, make_config, tmp_path, shakespeare_path):
    from hf_gpt_custom.training.workload import prepare_tokenizer

    first_dir, checkpoint = first_run
    shutil.rmtree(first_dir / "tokenizer")
    config = _from_checkpoint(make_config, tmp_path, shakespeare_path, checkpoint)
    with pytest.raises(UserError, match=r"^init_from=\S*first/checkpoints/step_000012 is a checkpoint without "
                                        r"tokenizer files.*; pass tokenizer=<the folder the model was trained with>$"):
        prepare_tokenizer(config)
    assert not (config.run_dir / "tokenizer").exists()


def test_a_checkpoint_whose_run_tokenizer_was_replaced_is_refused(first_run, make_config, tmp_path, shakespeare_path):
    """Another tokenizer in the run folder: refused by the checkpoint's recorded fingerprint, and (a checkpoint older
    than that record) by its vocab_size, 300, against the 280 tokens of the one found (a smaller tokenizer loads
    under the weights without complaint)."""
    from hf_gpt_custom.tokenizer_training import train_tokenizer
    from hf_gpt_custom.training.workload import prepare_tokenizer

    first_dir, checkpoint = first_run
    shutil.rmtree(first_dir / "tokenizer")
    train_tokenizer([str(tmp_path / "first.txt")], first_dir / "tokenizer", vocab_size=280, show_progress=False)
    config = _from_checkpoint(make_config, tmp_path, shakespeare_path, checkpoint)
    with pytest.raises(UserError, match=r"step_000012 was trained with another tokenizer than the one now in "
                                        r".*first/tokenizer .*; pass tokenizer="):
        prepare_tokenizer(config)
    settings_file = checkpoint / "training_settings.json"
    settings = json.loads(settings_file.read_text())
    del settings["contents"]
    settings_file.write_text(json.dumps(settings))
    with pytest.raises(UserError, match=r"step_000012 has vocab_size=300 but its run's tokenizer in .*first/tokenizer "
                                        r"has 280 tokens; pass tokenizer="):
        prepare_tokenizer(config)


def _indented_paragraphs(path: Path, count: int) -> Path:
    """Paragraphs of indented lines: text_sample_by=paragraph and =line give other documents."""
    rng = random.Random(0)
    words = "the king and queen of france went to war with england over a crown of gold and silver".split()
    paragraphs = ["\n".join("  " + " ".join(rng.choice(words) for _ in range(8)) for _ in range(4))
                  for _ in range(count)]
    path.write_text("\n\n\n".join(paragraphs), encoding="utf-8")
    return path


def _tokenizer_json(folder) -> str:
    return (Path(folder) / "tokenizer.json").read_text(encoding="utf-8")


def test_start_over_with_other_text_sample_by_retrains_a_val_dataset_runs_tokenizer(make_config, tmp_path):
    """The val_dataset marker did not record text_sample_by, which the documents depend on: --start_over with another
    kept the old tokenizer, where a fresh folder trained another."""
    from hf_gpt_custom.training.workload import prepare_tokenizer

    train_file = _indented_paragraphs(tmp_path / "train.txt", 300)
    val_file = _indented_paragraphs(tmp_path / "val.txt", 20)
    common = (f"dataset={train_file}", f"val_dataset={val_file}", "tokenizer=null", "tokenizer_vocab_size=400")
    prepare_tokenizer(make_config(*common, "text_sample_by=paragraph", run_name="run"))
    again = prepare_tokenizer(make_config(*common, "text_sample_by=line", run_name="run"), start_over=True)
    fresh = prepare_tokenizer(make_config(*common, "text_sample_by=line", run_name="fresh"))
    assert _tokenizer_json(again) == _tokenizer_json(fresh)


def test_start_over_replaces_a_val_dataset_tokenizer_trained_by_the_old_rule(make_config, tmp_path):
    """A val_dataset run's tokenizer trained by an older version on the whole file (its marker has no trained_on) is
    kept for the outputs trained with it, and replaced under --start_over (it was kept then too)."""
    from hf_gpt_custom.tokenizer_training import train_tokenizer
    from hf_gpt_custom.training.workload import prepare_tokenizer

    train_file = _indented_paragraphs(tmp_path / "train.txt", 300)
    val_file = _indented_paragraphs(tmp_path / "val.txt", 20)
    common = (f"dataset={train_file}", f"val_dataset={val_file}", "tokenizer=null", "tokenizer_vocab_size=400")
    config = make_config(*common, run_name="old")
    target = prepare_tokenizer(config)  # today's marker less trained_on: the keys c84bd45 wrote for a val_dataset run
    recorded = json.loads((target / "training_source.json").read_text())
    assert recorded.pop("trained_on") == {"documents": "all", "text_sample_by": "paragraph"}
    marker = json.dumps(recorded)
    shutil.rmtree(target)
    train_tokenizer([str(train_file)], out_dir=target, vocab_size=400, show_progress=False)  # c84bd45's rule
    (target / "training_source.json").write_text(marker)
    old = _tokenizer_json(target)
    fresh = _tokenizer_json(prepare_tokenizer(make_config(*common, run_name="fresh")))
    assert old != fresh  # the two rules give different tokenizers on this corpus
    (config.run_dir / "final").mkdir()  # a model trained with the old tokenizer: resuming keeps it
    assert _tokenizer_json(prepare_tokenizer(config)) == old
    assert _tokenizer_json(prepare_tokenizer(config, start_over=True)) == fresh


def _c84bd45_val_dataset_run(make_config, tmp_path):
    """A val_dataset run as c84bd45 left it: a tokenizer trained on the file read whole, a marker without trained_on,
    a model trained with it."""
    from hf_gpt_custom.tokenizer_training import train_tokenizer
    from hf_gpt_custom.training.workload import prepare_tokenizer

    train_file = _indented_paragraphs(tmp_path / "train.txt", 300)
    val_file = _indented_paragraphs(tmp_path / "val.txt", 20)
    config = make_config(f"dataset={train_file}", f"val_dataset={val_file}", "tokenizer=null",
                         "tokenizer_vocab_size=400", run_name="old")
    target = prepare_tokenizer(config)
    recorded = json.loads((target / "training_source.json").read_text())
    del recorded["trained_on"]
    shutil.rmtree(target)
    train_tokenizer([str(train_file)], out_dir=target, vocab_size=400, show_progress=False)  # c84bd45's rule
    (target / "training_source.json").write_text(json.dumps(recorded))
    (config.run_dir / "final").mkdir()
    return train_file, val_file, _tokenizer_json(target)


def test_an_older_val_dataset_runs_tokenizer_is_kept_when_its_data_moved(make_config, tmp_path):
    """The same file at another path is the same source (dataset_sha256; resume accepts the move): an older
    version's tokenizer was retrained by today's rule instead, and the run refused with "dataset changed"."""
    from hf_gpt_custom.training.workload import prepare_tokenizer

    train_file, val_file, old = _c84bd45_val_dataset_run(make_config, tmp_path)
    moved = tmp_path / "moved" / "train.txt"
    moved.parent.mkdir()
    shutil.move(train_file, moved)
    config = make_config(f"dataset={moved}", f"val_dataset={val_file}", "tokenizer=null", "tokenizer_vocab_size=400",
                         run_name="old")
    assert _tokenizer_json(prepare_tokenizer(config)) == old


def test_an_edited_wordpiece_vocab_txt_packs_the_data_again_and_changes_the_runs_fingerprint(make_config, tmp_path):
    """A WordPiece tokenizer folder (vocab.txt + tokenizer_config.json) with two entries swapped encodes other ids,
    but the packed-data cache key and the run's tokenizer fingerprint ignored vocab.txt: the old blocks were reused
    and a resume was not refused (found by the staleness hunt). Reference: the tokenizer's own encoding, and the
    blocks packed into a fresh cache folder."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    from hf_gpt_custom.model_folder import load_folder_tokenizer
    from hf_gpt_custom.training.data import prepare_datasets
    import hashlib

    from hf_gpt_custom.training.fingerprints import combined_sha256, input_fingerprints

    data = tmp_path / "data.txt"
    data.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n\n" * 40)
    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wordpiece.train([str(data)], trainers.WordPieceTrainer(vocab_size=120, special_tokens=["[PAD]", "[UNK]", "[SEP]"]))
    vocab = [token for token, _ in sorted(wordpiece.get_vocab().items(), key=lambda item: item[1])]
    folder = tmp_path / "wordpiece"
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "BertTokenizer", "do_lower_case": True, "eos_token": "[SEP]", "unk_token": "[UNK]",
        "pad_token": "[PAD]", "sep_token": "[SEP]"}))

    def packed(cache: str):
        config = make_config(f"dataset={data}", f"tokenizer={folder}", "block_size=16", f"data_cache_dir={tmp_path / cache}")
        blocks = prepare_datasets(config, load_folder_tokenizer(folder), folder)
        fingerprints = input_fingerprints(config)
        # `tokenizer` hashes what it hashed before this fix (tokenizer_config.json here): a run recorded then resumes
        assert fingerprints["tokenizer"] == combined_sha256(
            {"tokenizer_config.json": hashlib.sha256((folder / "tokenizer_config.json").read_bytes()).hexdigest()})
        return [token for row in blocks.train["input_ids"] for token in row], fingerprints["tokenizer_vocabulary"]

    before, fingerprint_before = packed("cache")
    i, j = vocab.index("first"), vocab.index("citizen")
    vocab[i], vocab[j] = vocab[j], vocab[i]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    assert load_folder_tokenizer(folder)("first citizen", add_special_tokens=False)["input_ids"] == [j, i]
    after, fingerprint_after = packed("cache")
    assert after == packed("fresh_cache")[0] != before  # packed again with the new ids, as a fresh cache packs them
    assert fingerprint_after != fingerprint_before  # a resume names the tokenizer's contents


def test_a_tiktoken_vocabulary_is_part_of_the_tokenizer_fingerprint(tmp_path):
    """A folder loaded through tiktoken's vocabulary (cl100k_base.tiktoken) changes ids when that file changes; it is
    hashed with the folder's other tokenizer files (sha256 by hand)."""
    import hashlib

    from hf_gpt_custom.training.fingerprints import vocabulary_file_sha256s

    (tmp_path / "tokenizer_config.json").write_text("{}")
    (tmp_path / "cl100k_base.tiktoken").write_text("IQ== 0\nIg== 1\n")
    (tmp_path / "model.safetensors").write_bytes(b"weights are not the tokenizer")
    hashes = vocabulary_file_sha256s(tmp_path)
    assert list(hashes) == ["cl100k_base.tiktoken"]
    assert hashes["cl100k_base.tiktoken"] == hashlib.sha256(b"IQ== 0\nIg== 1\n").hexdigest()


def test_start_over_keeps_the_tokenizer_the_set_aside_outputs_were_trained_with(make_config, tmp_path):
    """--start_over sets the old checkpoints aside, kept, but retrained the run's tokenizer over the one they were
    trained with: for a run stopped before final/, no copy was left, and the kept checkpoints could be neither resumed
    nor loaded (the hostilecli hunt). Reference: the old tokenizer's own files."""
    from hf_gpt_custom.training.workload import prepare_tokenizer

    train_file = _indented_paragraphs(tmp_path / "train.txt", 300)
    common = (f"dataset={train_file}", "tokenizer=null")
    config = make_config(*common, "tokenizer_vocab_size=400", run_name="run")
    old = _tokenizer_json(prepare_tokenizer(config))
    (config.run_dir / "checkpoints" / "step_000010").mkdir(parents=True)  # trained with it, no final/ yet
    new = _tokenizer_json(prepare_tokenizer(make_config(*common, "tokenizer_vocab_size=300", run_name="run"),
                                            start_over=True))
    kept = list((config.run_dir / "checkpoints").glob("abandoned_tokenizer_before_new_run_*/tokenizer"))
    assert new != old and len(kept) == 1 and _tokenizer_json(kept[0]) == old
