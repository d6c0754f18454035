"""Data pipeline on real text: documents, end-of-text separators, exact packing, held-out split, cache reuse, bytes."""

import json
import os

import datasets
import pytest

import hf_gpt_custom.training.data as data_module
from hf_gpt_custom.training.corpus import load_text_dataset
from hf_gpt_custom.training.data import pack_into_blocks, prepare_datasets, tokenize_documents


@pytest.fixture(scope="module")
def tokenizer(shakespeare_tokenizer_dir):
    import hf_gpt_custom  # noqa: F401
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(shakespeare_tokenizer_dir))


def test_pack_into_blocks_by_hand():
    # documents [1 2 EOS] [3 4 5 EOS] [6 EOS] (EOS = 0) = 9 tokens; block_size 4 -> 2 blocks, 1 token of tail dropped
    documents = datasets.Dataset.from_dict({"input_ids": [[1, 2, 0], [3, 4, 5, 0], [6, 0]]})
    blocks = pack_into_blocks(documents, block_size=4)
    assert blocks["input_ids"] == [[1, 2, 0, 3], [4, 5, 0, 6]]
    assert blocks["labels"] == blocks["input_ids"]  # the model shifts labels itself


def test_shakespeare_speeches_are_documents(shakespeare_path, tmp_path):
    documents = load_text_dataset(str(shakespeare_path), cache_dir=tmp_path)
    text = shakespeare_path.read_text(encoding="utf-8")
    speeches = [s for s in text.split("\n\n") if s]
    assert len(documents) == len(speeches) == 7222
    assert documents[0]["text"] == "First Citizen:\nBefore we proceed any further, hear me speak."
    assert documents[-1]["text"] == speeches[-1]


def test_tokenized_documents_end_with_eos_and_pack_exactly(shakespeare_path, tokenizer, tmp_path):
    documents = load_text_dataset(str(shakespeare_path), cache_dir=tmp_path).select(range(300))
    tokenized = tokenize_documents(documents, tokenizer)
    eos = tokenizer.eos_token_id
    for text, ids in zip(documents["text"], tokenized["input_ids"]):
        assert ids[-1] == eos and eos not in ids[:-1]
        assert tokenizer.decode(ids[:-1]) == text
    stream = [token for ids in tokenized["input_ids"] for token in ids]
    block_size = 37
    blocks = pack_into_blocks(tokenized, block_size)
    assert len(blocks) == len(stream) // block_size
    assert [token for block in blocks["input_ids"] for token in block] == stream[: len(blocks) * block_size]
    assert blocks["labels"] == blocks["input_ids"]


def test_any_fast_tokenizer_gives_the_ids_of_ours(shakespeare_path, tokenizer, shakespeare_tokenizer_dir, tmp_path):
    """Ours encodes through encode_ids_batch; a tokenizer without it (GPT2TokenizerFast) through its Rust backend."""
    from transformers import GPT2TokenizerFast

    documents = load_text_dataset(str(shakespeare_path), cache_dir=tmp_path).select(range(200))
    gpt2_style = GPT2TokenizerFast.from_pretrained(str(shakespeare_tokenizer_dir))
    assert not hasattr(gpt2_style, "encode_ids_batch")
    ours = tokenize_documents(documents, tokenizer)["input_ids"]
    assert tokenize_documents(documents, gpt2_style)["input_ids"] == ours
    assert ours[0] == tokenizer(documents[0]["text"])["input_ids"] + [tokenizer.eos_token_id]


def test_a_tokenizer_saved_after_a_truncating_padded_call_encodes_whole_documents(shakespeare_path, tmp_path,
                                                                                    shakespeare_tokenizer_dir):
    """save_pretrained writes the backend's last truncation and padding into tokenizer.json and loading brings them
    back: documents were cut to 4 ids (or padded) with no error. Reference: the `tokenizers` library on the trained
    tokenizer.json, which has neither section."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, GPT2TokenizerFast

    from hf_gpt_custom.training.data import document_encoder

    saved = GPT2TokenizerFast.from_pretrained(str(shakespeare_tokenizer_dir), pad_token="<|endoftext|>")
    saved(["To be, or not to be"], truncation=True, max_length=4, padding="max_length")
    saved.save_pretrained(tmp_path / "saved")
    loaded = AutoTokenizer.from_pretrained(str(tmp_path / "saved"))
    assert not hasattr(loaded, "encode_ids_batch") and loaded.backend_tokenizer.truncation["max_length"] == 4
    texts = [s for s in shakespeare_path.read_text(encoding="utf-8")[:5_000].split("\n\n") if s]
    reference = [e.ids for e in Tokenizer.from_file(str(shakespeare_tokenizer_dir / "tokenizer.json")).encode_batch(
        texts, add_special_tokens=False)]
    encode = document_encoder(loaded)
    assert encode(texts) == reference
    assert loaded.backend_tokenizer.truncation["max_length"] == 4  # the caller's tokenizer is left as it was
    loaded(["a", "b c"], padding="max_length", max_length=16)  # a padded call after the encoder was made
    documents = datasets.Dataset.from_dict({"text": texts})
    assert [ids[:-1] for ids in tokenize_documents(documents, loaded)["input_ids"]] == encode(texts) == reference


@pytest.mark.parametrize("num_proc", [1, 2])
def test_special_token_text_in_a_document_is_text_for_any_tokenizer(tokenizer, shakespeare_tokenizer_dir, num_proc):
    """A literal "<|endoftext|>" in a document is 13 characters of text, not a document boundary, through our
    tokenizer and through any fast tokenizer (with datasets' worker processes too, which get a pickled copy).
    Reference: the textbook BPE (bpe_reference.py), which knows no special tokens."""
    from transformers import GPT2TokenizerFast

    from hf_gpt_custom import bpe_reference

    texts = ["He wrote <|endoftext|> in his essay.", "<|endoftext|>", "ROMEO:\nBut, soft!"]
    merges = bpe_reference.merges_from_tokenizer(tokenizer)
    expected = [bpe_reference.encode(text, merges) + [tokenizer.eos_token_id] for text in texts]
    documents = datasets.Dataset.from_dict({"text": texts})
    for candidate in (tokenizer, GPT2TokenizerFast.from_pretrained(str(shakespeare_tokenizer_dir))):
        assert tokenize_documents(documents, candidate, num_proc=num_proc)["input_ids"] == expected


def test_validation_split_is_seeded_and_disjoint(make_config, tokenizer, shakespeare_tokenizer_dir, tmp_path):
    config = make_config(f"data_cache_dir={tmp_path / 'cache'}")
    packed = prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    assert packed.stats["val_documents"] == 723 and packed.stats["train_documents"] == 7222 - 723  # 10%
    again = prepare_datasets(make_config(f"data_cache_dir={tmp_path / 'cache2'}"), tokenizer, shakespeare_tokenizer_dir)
    assert again.val["input_ids"] == packed.val["input_ids"]  # same seed, same split
    other = prepare_datasets(make_config(f"data_cache_dir={tmp_path / 'cache3'}", "seed=7"), tokenizer,
                             shakespeare_tokenizer_dir)
    assert other.val["input_ids"][:5] != packed.val["input_ids"][:5]
    train_blocks = {tuple(block) for block in packed.train["input_ids"]}
    assert not train_blocks & {tuple(block) for block in packed.val["input_ids"]}


def test_second_run_reuses_the_cache_without_tokenizing(make_config, tokenizer, shakespeare_tokenizer_dir, tmp_path,
                                                        monkeypatch):
    config = make_config(f"data_cache_dir={tmp_path / 'cache'}")
    first = prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    assert not first.is_cache_hit

    def refuse(*args, **kwargs):
        raise AssertionError("tokenize_documents called although the cache should have been used")

    monkeypatch.setattr(data_module, "tokenize_documents", refuse)
    second = prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    assert second.is_cache_hit and second.cache_dir == first.cache_dir
    assert second.train["input_ids"] == first.train["input_ids"]
    # a different block size is a different cache entry: it has to tokenize again
    with pytest.raises(AssertionError, match="tokenize_documents called"):
        prepare_datasets(make_config(f"data_cache_dir={tmp_path / 'cache'}", "block_size=48"), tokenizer,
                         shakespeare_tokenizer_dir)


def test_a_damaged_cache_is_built_again_not_a_bare_pyarrow_error(make_config, tokenizer, shakespeare_tokenizer_dir,
                                                                   tmp_path, caplog, monkeypatch):
    """A truncated .arrow file of the packed cache (a disk fault; the build itself is staged) stopped every later run
    with pyarrow's "Expected to be able to read ... bytes" (the interrupts hunt). The cache is derived data: it is
    set aside and built again, with a warning. Reference: the blocks of the first build."""
    config = make_config(f"data_cache_dir={tmp_path / 'cache'}")
    first = prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    expected = first.train["input_ids"]
    arrow = sorted((first.cache_dir / "train").glob("*.arrow"))[0]
    # a new file in its place: the first build's memory map keeps the old one (truncating a mapped file in place
    # would fault this process, not test the loader)
    (arrow.parent / "cut").write_bytes(arrow.read_bytes()[: arrow.stat().st_size // 3])
    os.replace(arrow.parent / "cut", arrow)
    with caplog.at_level("WARNING", logger="hf_gpt_custom.training.data"):
        again = prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    assert not again.is_cache_hit and again.train["input_ids"] == expected
    assert f"the packed-data cache {first.cache_dir} was damaged" in caplog.text
    assert not [path for path in (tmp_path / "cache").iterdir() if "damaged" in path.name]  # set aside, then deleted

    # two runs sharing the cache both find it damaged: the second's rename finds the folder gone (a bare
    # FileNotFoundError, the roundreview9 hunt) and builds as the first does
    (again.cache_dir / "complete.json").write_text("{not json")
    real_rename = os.rename

    def the_other_run_first(source, target):
        if ".damaged-" in str(target):
            real_rename(source, str(target) + "-theirs")
        return real_rename(source, target)

    monkeypatch.setattr(data_module.os, "rename", the_other_run_first)
    assert prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir).train["input_ids"] == expected


def test_jsonl_source_with_text_field(shared_data_dir, tmp_path):
    lines = (shared_data_dir / "lambada" / "lambada_test.jsonl").read_text(encoding="utf-8").splitlines()[:5]
    path = tmp_path / "lambada5.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    documents = load_text_dataset(str(path), text_field="text", cache_dir=tmp_path / "raw")
    assert documents.column_names == ["text"]
    assert documents["text"] == [json.loads(line)["text"] for line in lines]
    with pytest.raises(ValueError, match=r"has no column 'story'; set text_field to one of \['text'\]"):
        load_text_dataset(str(path), text_field="story", cache_dir=tmp_path / "raw")


def test_malformed_jsonl_line_is_named(shared_data_dir, tmp_path):
    lines = (shared_data_dir / "lambada" / "lambada_test.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines[:2] + ['{"text": "unterminated'] + lines[2:]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken.jsonl line 3: expected a JSON object with a string 'text' field"):
        load_text_dataset(str(path), cache_dir=tmp_path / "raw")


def test_a_null_text_row_is_named_by_file_and_line(tmp_path):
    """A row {"text": null} parses; the error came later as "texts[1] is NoneType" or "document 2 in training's
    order", naming neither the file nor the line."""
    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "a row"}\n\n{"text": null}\n{"text": "another"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"rows.jsonl line 3: expected a JSON object with a string 'text' field, "
                                         r"got '\{\"text\": null\}'"):
        load_text_dataset(str(path), cache_dir=tmp_path / "raw")


def test_missing_local_dataset_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="empty has no .txt, .text, .raw, .jsonl"):
        (tmp_path / "empty").mkdir()
        load_text_dataset(str(tmp_path / "empty"))


def test_streaming_gives_the_same_blocks(shakespeare_path, tokenizer, tmp_path):
    documents = load_text_dataset(str(shakespeare_path), cache_dir=tmp_path).select(range(50))
    eager = pack_into_blocks(tokenize_documents(documents, tokenizer), 64)
    streamed = load_text_dataset(str(shakespeare_path), streaming=True).take(50)
    blocks = list(pack_into_blocks(tokenize_documents(streamed, tokenizer), 64))
    assert [b["input_ids"] for b in blocks] == eager["input_ids"]


def test_a_streamed_corpus_validates_on_its_first_documents_and_trains_on_the_rest_only(
        numbered_corpus, make_config, tokenizer, shakespeare_tokenizer_dir, monkeypatch):
    """streaming=true without a validation source holds out the stream's first STREAMING_VAL_DOCUMENTS documents:
    validation packs exactly those, training starts at the next one, so no held-out text is trained on. Expected
    streams are built here from the tokenizer's ids of each speech + end-of-text (skip(n - 1) put the last held-out
    speech into training too, and no test saw it)."""
    monkeypatch.setattr(data_module, "STREAMING_VAL_DOCUMENTS", 3)
    train_file, _, speeches, _ = numbered_corpus
    config = make_config(f"dataset={train_file}", "streaming=true", "block_size=8")
    packed = prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)

    def stream(texts):
        return [token for text in texts for token in tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]]

    val_stream = [token for block in packed.val["input_ids"] for token in block]
    expected_val = stream(speeches[:3])
    assert val_stream == expected_val[: len(val_stream)] and len(expected_val) - len(val_stream) < 8
    # each validation token's bytes (bits per byte's denominator): a byte-level token's characters, 0 for end-of-text
    assert [n for block in packed.val["byte_counts"] for n in block] == [
        0 if token == tokenizer.eos_token_id else len(tokenizer.convert_ids_to_tokens(token)) for token in val_stream]
    train_stream = [token for block in packed.train for token in block["input_ids"]]
    expected_train = stream(speeches[3:])
    assert train_stream == expected_train[: len(train_stream)] and len(expected_train) - len(train_stream) < 8


@pytest.fixture
def numbered_corpus(tmp_path):
    """40 train and 10 validation speeches, each unique (numbered), in two files: where each text went is checkable."""
    def speeches(prefix, count):
        return [f"{prefix} {i}:\nSpeak the speech, I pray you, number {i} of {prefix}." for i in range(count)]

    train_file, val_file = tmp_path / "train.txt", tmp_path / "valid.txt"
    train_file.write_text("\n\n".join(speeches("TRAIN", 40)), encoding="utf-8")
    val_file.write_text("\n\n".join(speeches("VALID", 10)), encoding="utf-8")
    return train_file, val_file, speeches("TRAIN", 40), speeches("VALID", 10)


@pytest.mark.parametrize("mode", ["random", "tail", "val_dataset"])
def test_no_validation_text_is_in_the_training_set(mode, numbered_corpus, make_config, tokenizer,
                                                   shakespeare_tokenizer_dir, tmp_path):
    from hf_gpt_custom.training.data import split_documents

    train_file, val_file, train_speeches, val_speeches = numbered_corpus
    overrides = [f"dataset={train_file}", "val_fraction=0.2", "block_size=8", f"data_cache_dir={tmp_path / 'c'}"]
    overrides += {"random": ["val_holdout=random"], "tail": ["val_holdout=tail"],
                  "val_dataset": [f"val_dataset={val_file}"]}[mode]
    config = make_config(*overrides)
    train_docs, val_docs = split_documents(config, raw_cache=tmp_path / "raw")
    train_texts, val_texts = list(train_docs["text"]), list(val_docs["text"])
    assert not set(train_texts) & set(val_texts)
    if mode == "val_dataset":
        assert train_texts == train_speeches and val_texts == val_speeches  # all of train.txt is trained on
    elif mode == "tail":  # nanoGPT's split: the first 80% of the file trains, the last 20% validates
        assert train_texts == train_speeches[:32] and val_texts == train_speeches[32:]
    else:
        assert sorted(train_texts + val_texts) == sorted(train_speeches) and len(val_texts) == 8
        assert val_texts != train_speeches[32:]  # a seeded sample, not the tail
    # and the packed validation blocks hold exactly the validation text (each document + end-of-text, in order)
    packed = prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    val_stream = [token for block in packed.val["input_ids"] for token in block]
    expected = [token for text in val_texts for token in tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]]
    assert val_stream == expected[: len(val_stream)] and len(expected) - len(val_stream) < 8


def test_val_split_of_a_local_file_is_refused(numbered_corpus, make_config):
    """Local files have one split: naming another used to validate on the training documents themselves."""
    train_file, _, _, _ = numbered_corpus
    with pytest.raises(ValueError, match="val_split='validation' names a split of a Hub dataset, but dataset=.* is a "
                                         "local path, which has one split; name a separate validation file with "
                                         "val_dataset"):
        make_config(f"dataset={train_file}", "val_split=validation")


def test_tail_holdout_on_tiny_shakespeare_is_the_last_tenth_of_the_speeches(make_config, shakespeare_path, tmp_path):
    from hf_gpt_custom.training.data import split_documents

    train_docs, val_docs = split_documents(make_config("val_holdout=tail"), raw_cache=tmp_path / "raw")
    speeches = [s for s in shakespeare_path.read_text(encoding="utf-8").split("\n\n") if s]
    assert len(val_docs) == 723 and list(val_docs["text"]) == speeches[-723:]  # ceil(7222 * 0.1), as the random split
    assert train_docs["text"][-1] == speeches[-724]


def test_a_document_the_fast_path_cannot_encode_goes_through_the_tokenizer(tokenizer, monkeypatch):
    """A BaseException that is not an Exception (pyo3's PanicException) from the fast path: fall back, don't crash."""

    class FakePanic(BaseException):
        pass

    def panics(texts):
        raise FakePanic("stack overflow")

    from hf_gpt_custom import bpe_reference

    monkeypatch.setattr(tokenizer, "encode_ids_batch", panics, raising=False)
    documents = datasets.Dataset.from_dict({"text": ["ROMEO:\nBut, soft!", "JULIET:\nAy me!"]})
    ids = tokenize_documents(documents, tokenizer)["input_ids"]
    assert ids == [tokenizer("ROMEO:\nBut, soft!")["input_ids"] + [tokenizer.eos_token_id],
                   tokenizer("JULIET:\nAy me!")["input_ids"] + [tokenizer.eos_token_id]]
    # special-token text stays text on this path too (the textbook BPE knows no special tokens)
    literal = "it says <|endoftext|> here"
    ids = tokenize_documents(datasets.Dataset.from_dict({"text": [literal]}), tokenizer)["input_ids"]
    merges = bpe_reference.merges_from_tokenizer(tokenizer)
    assert ids == [bpe_reference.encode(literal, merges) + [tokenizer.eos_token_id]]


def test_a_million_whitespace_characters_tokenise_through_the_training_pipeline(tokenizer):
    """The real case behind the fallback: tiktoken's engine panics (stack overflow) on this document."""
    text = "ROMEO:" + " " * 1_000_000 + "soft!"
    documents = datasets.Dataset.from_dict({"text": [text, "JULIET:\nAy me!"]})
    ids = tokenize_documents(documents, tokenizer)["input_ids"]
    assert tokenizer.decode(ids[0][:-1]) == text and ids[0][-1] == tokenizer.eos_token_id


def test_tokenizer_trainer_and_training_read_the_same_files(shared_data_dir, tmp_path):
    """wikitext's wiki.test.raw: the tokenizer trainer always read it; training refused the .raw suffix."""
    from hf_gpt_custom.tokenizer_training import iter_corpus

    from hf_gpt_custom.training.corpus import list_local_files

    raw = shared_data_dir / "wikitext-2-raw" / "wiki.test.raw"
    documents = load_text_dataset(str(raw), sample_by="document", cache_dir=tmp_path)
    assert documents["text"] == [raw.read_text(encoding="utf-8")] == ["".join(iter_corpus(raw))]
    # a folder: the same files in the same order (the .raw file, not PROVENANCE.md), for both readers
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "b.txt").write_text("second file\n", encoding="utf-8")
    (folder / "sub" / "a.raw").write_text("first file\n", encoding="utf-8")
    (folder / "README.md").write_text("# not text to train on\n", encoding="utf-8")
    assert list_local_files(folder) == [folder / "b.txt", folder / "sub" / "a.raw"]
    assert list(iter_corpus(folder)) == ["second file\n", "first file\n"]
    assert load_text_dataset(str(folder), sample_by="line", cache_dir=tmp_path)["text"] == ["second file", "first file"]


def test_a_crlf_file_gives_the_tokenizer_trainer_the_text_training_reads(tmp_path):
    """The trainer kept "\r" (and learned merges on it) where datasets' text builder reads "\r\n" and "\r" as
    "\n": the vocabulary was fitted to text training never sees."""
    from hf_gpt_custom.tokenizer_training import iter_corpus

    crlf = tmp_path / "windows.txt"
    crlf.write_bytes(b"First Citizen:\r\nBefore we proceed\r\n\r\nAll:\rSpeak, speak.\r\n")
    (training_text,) = load_text_dataset(str(crlf), sample_by="document", cache_dir=tmp_path)["text"]
    assert "".join(iter_corpus(crlf)) == training_text and "\r" not in training_text


def test_line_mode_drops_blank_lines_as_run_clm_line_by_line_does(tmp_path):
    """Each empty line was a document of no text: a lone <|endoftext|> in the blocks, counted in val_fraction.
    Reference: transformers' run_clm --line_by_line keeps `len(line) > 0 and not line.isspace()`."""
    text = "First Citizen:\nBefore we proceed.\n\n  \nAll:\n\t\nSpeak.\n"
    path = tmp_path / "lines.txt"
    path.write_text(text, encoding="utf-8")
    expected = [line for line in text.splitlines() if len(line) > 0 and not line.isspace()]
    assert load_text_dataset(str(path), sample_by="line", cache_dir=tmp_path)["text"] == expected
    streamed = load_text_dataset(str(path), sample_by="line", streaming=True)
    assert [row["text"] for row in streamed] == expected


def test_the_holdout_mode_is_part_of_the_cache_key(numbered_corpus, make_config, tokenizer, shakespeare_tokenizer_dir,
                                                   tmp_path):
    train_file, _, train_speeches, _ = numbered_corpus
    common = [f"dataset={train_file}", "val_fraction=0.2", "block_size=8", f"data_cache_dir={tmp_path / 'shared'}"]
    random_split = prepare_datasets(make_config(*common), tokenizer, shakespeare_tokenizer_dir)
    tail_split = prepare_datasets(make_config(*common, "val_holdout=tail"), tokenizer, shakespeare_tokenizer_dir)
    assert not tail_split.is_cache_hit and tail_split.cache_dir != random_split.cache_dir
    expected = [t for text in train_speeches[32:] for t in tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]]
    assert [t for block in tail_split.val["input_ids"] for t in block] == expected[: len(tail_split.val) * 8]


@pytest.mark.parametrize("changed", ["text_sample_by=line", "val_fraction=0.25", "block_size=12"])
def test_every_setting_that_changes_the_blocks_is_part_of_the_cache_key(changed, numbered_corpus, make_config,
                                                                        tokenizer, shakespeare_tokenizer_dir,
                                                                        tmp_path):
    """A second run on the same file and cache with one block-changing setting changed got the first run's blocks
    (text_sample_by was not in the key: `line` trained on the paragraphs of the earlier run; found by the mutsweep2
    hunt). Reference: the file split by hand into its speeches (or lines), the last ceil(n * val_fraction) held
    out, each tokenised and ended with <|endoftext|>, packed by hand."""
    import math

    train_file, _, speeches, _ = numbered_corpus
    common = [f"dataset={train_file}", "val_holdout=tail", f"data_cache_dir={tmp_path / 'shared'}"]
    base = ["text_sample_by=paragraph", "val_fraction=0.1", "block_size=8"]
    prepare_datasets(make_config(*common, *base), tokenizer, shakespeare_tokenizer_dir)
    settings = dict(item.split("=") for item in base + [changed])
    second = prepare_datasets(make_config(*common, *(f"{k}={v}" for k, v in settings.items())), tokenizer,
                              shakespeare_tokenizer_dir)
    documents = [line for s in speeches for line in s.split("\n")] if settings["text_sample_by"] == "line" \
        else speeches
    assert len(documents) == {"line": 80, "paragraph": 40}[settings["text_sample_by"]]  # 40 speeches of 2 lines
    n_val = math.ceil(len(documents) * float(settings["val_fraction"]))
    block_size = int(settings["block_size"])
    assert not second.is_cache_hit
    assert (second.stats["train_documents"], second.stats["val_documents"]) == (len(documents) - n_val, n_val)
    for split, texts in (("train", documents[:-n_val]), ("val", documents[-n_val:])):
        stream = [t for text in texts for t in tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]]
        blocks = getattr(second, split)["input_ids"]
        assert len(blocks) == len(stream) // block_size and all(len(block) == block_size for block in blocks)
        assert [t for block in blocks for t in block] == stream[: len(blocks) * block_size], split


def test_a_file_replaced_with_its_mtime_kept_is_read_anew(make_config, tokenizer, shakespeare_tokenizer_dir,
                                                           tmp_path):
    """cp -p, rsync -t and tar keep a file's mtime; datasets' raw-text cache knew local files by path and mtime, so
    the new contents (same size, too) gave the old text, stored under the new contents' key. Reference: the file's
    own new text, split into speeches and tokenised here."""
    import os

    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join(f"alpha speech number {i}" for i in range(40)), encoding="utf-8")
    status = path.stat()
    config = make_config(f"dataset={path}", "val_holdout=tail", "val_fraction=0.25", "block_size=8",
                         f"data_cache_dir={tmp_path / 'cache'}")
    first = prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    path.write_text("\n\n".join(f"omega speech number {i}" for i in range(40)), encoding="utf-8")
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert path.stat().st_size == status.st_size and path.stat().st_mtime_ns == status.st_mtime_ns
    second = prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    speeches = path.read_text(encoding="utf-8").split("\n\n")
    for split, texts in (("train", speeches[:30]), ("val", speeches[30:])):
        stream = [t for text in texts for t in tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]]
        blocks = getattr(second, split)["input_ids"]
        assert [t for block in blocks for t in block] == stream[: len(blocks) * 8], split
    assert second.cache_dir != first.cache_dir
    # and the training documents the tokenizer stage reads (split_documents with the default raw cache)
    train_documents, _ = data_module.split_documents(config)
    assert train_documents["text"] == speeches[:30]


# --- inputs a user gets wrong: each names the file and the fix -------------------------------------------------------


def test_wikitext_paragraphs_are_cut_at_lines_that_hold_only_a_space(shared_data_dir, tmp_path):
    """WikiText's blank lines hold a space: every line of text is its own paragraph (a hand count of the file), and
    a file whose blank lines are empty (tiny Shakespeare) keeps exactly datasets' "\\n\\n" paragraphs."""
    path = shared_data_dir / "wikitext-2-raw" / "wiki.test.raw"
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    # by hand: runs of lines with text, separated by lines that are empty or hold only spaces
    expected, current = [], []
    for line in lines:
        if line.strip():
            current.append(line)
        elif current:
            expected.append("\n".join(current))
            current = []
    if current:
        expected.append("\n".join(current))
    documents = load_text_dataset(str(path), cache_dir=tmp_path)
    assert len(documents) == len(expected) > 1000
    assert documents["text"] == expected


def test_empty_binary_and_latin1_files_are_named_with_the_fix(tmp_path):
    cases = {
        "empty.txt": (b"", "is empty (no text to train on)"),
        "spaces.txt": (b"  \n\n \n", "is empty (no text to train on)"),
        "binary.txt": (bytes(range(256)) * 8, "is not text (it holds NUL bytes"),
        "latin1.txt": ("Café au lait\n\nnaïve\n".encode("latin-1"),
                       "is not UTF-8 text: byte 0xe9 at offset 3 (line 1) cannot be decoded; convert the file to UTF-8"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(ValueError) as err:
            load_text_dataset(str(path), cache_dir=tmp_path / "raw")
        assert str(err.value).startswith(f"{path} {message}"), str(err.value)


def test_a_lone_surrogate_in_a_jsonl_line_is_named(tmp_path):
    path = tmp_path / "surrogate.jsonl"
    rows = [json.dumps({"text": f"line {i}"}) for i in range(4)]
    rows.insert(2, '{"text": "bad \\ud800 escape"}')
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"surrogate.jsonl line 3: the 'text' field holds an invalid Unicode escape "
                                         r"\('\\ud800', half of a surrogate pair\) at character 4; fix or remove"):
        load_text_dataset(str(path), cache_dir=tmp_path / "raw")


def test_a_csv_file_is_read_by_its_columns(tmp_path):
    path = tmp_path / "reviews.csv"
    path.write_text('text,label\n"A fine, dry wine.",1\n"Flat, dull.",0\n', encoding="utf-8")
    documents = load_text_dataset(str(path), cache_dir=tmp_path / "raw")
    assert documents["text"] == ["A fine, dry wine.", "Flat, dull."]
    with pytest.raises(ValueError, match=r"has no column 'review'; set text_field to one of \['text', 'label'\]"):
        load_text_dataset(str(path), text_field="review", cache_dir=tmp_path / "raw")


def test_a_hub_dataset_with_the_hub_unreachable_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError) as err:
        load_text_dataset("someone/some-corpus", cache_dir=tmp_path)
    assert str(err.value).startswith("dataset 'someone/some-corpus' is not a local path, and the Hub cannot be "
                                     "reached to load it")
    assert "give a local file or folder, or download the dataset while online" in str(err.value)


def test_data_smaller_than_one_block_is_named(make_config, tokenizer, shakespeare_tokenizer_dir, tmp_path):
    small = tmp_path / "small.txt"
    small.write_text("To be.\n\nOr not.\n\nThat is it.\n\nAye.\n", encoding="utf-8")
    config = make_config(f"dataset={small}", "block_size=64", "model.n_positions=64", "val_fraction=0.5",
                         f"data_cache_dir={tmp_path / 'cache'}")
    with pytest.raises(ValueError, match=rf"the train split of {small} has \d+ tokens, fewer than block_size=64; "
                                         r"lower block_size or add data"):
        prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    # its half-built cache folder is removed by the failing run, not left for the next run to call a crash
    assert (tmp_path / "cache").is_dir() and not list((tmp_path / "cache").glob("*.tmp*"))


def test_a_full_cache_disk_names_the_cache_and_data_cache_dir(make_config, tokenizer, shakespeare_tokenizer_dir,
                                                              tmp_path, monkeypatch):
    """A full disk under data_cache_dir ended in a bare traceback from inside datasets/fsspec, or in "could not read
    dataset <the input file>" (datasets writes its arrow copy into the cache): neither named the cache or
    data_cache_dir (the diskfull hunt, on real 2 MiB and 600 KiB disks). The half-built folder is removed."""
    import datasets

    import hf_gpt_custom.training.data as data_module

    def full(*args, **kwargs):
        try:
            raise OSError(28, "No space left on device")
        except OSError as err:  # as datasets wraps it
            raise datasets.exceptions.DatasetGenerationError("An error occurred while generating the dataset") from err

    config = make_config(f"data_cache_dir={tmp_path / 'cache'}")
    monkeypatch.setattr(data_module, "_build_packed", full)
    with pytest.raises(ValueError, match=rf"the packed-data cache {tmp_path / 'cache'}.* could not be written: No space "
                                         r"left on device; free space on the disk of that folder, or set "
                                         r"data_cache_dir to a folder on another disk \(nothing was trained\)$"):
        prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    assert not list((tmp_path / "cache").rglob("*.tmp*"))
    monkeypatch.undo()
    monkeypatch.setattr(datasets, "load_dataset", full)
    with pytest.raises(ValueError, match=rf"could not prepare dataset .*input.txt in the cache {tmp_path / 'cache2'}"
                                         r".*: No space left on device; .*set data_cache_dir to a folder on another"):
        prepare_datasets(make_config(f"data_cache_dir={tmp_path / 'cache2'}"), tokenizer, shakespeare_tokenizer_dir)
    # A .jsonl file: the JSON diagnosis (no bad line) said "could not read <file>" first (the roundreview14 hunt).
    records = tmp_path / "speeches.jsonl"
    records.write_text('{"text": "ROMEO: But soft!"}\n{"text": "JULIET: Ay me."}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"could not prepare dataset .*speeches.jsonl in the cache .*cache3.*No space"):
        prepare_datasets(make_config(f"dataset={records}", f"data_cache_dir={tmp_path / 'cache3'}"), tokenizer,
                         shakespeare_tokenizer_dir)
    # Outside training (`tokenizer train`, no data_cache_dir) the copy goes to datasets' cache: the fix names it.
    from hf_gpt_custom.training.corpus import load_text_dataset

    with pytest.raises(ValueError, match=r"No space left on device; .*set HF_DATASETS_CACHE to a folder on another"):
        load_text_dataset(str(records))


def test_the_tokenizer_stage_reads_the_corpus_into_the_data_cache(make_config, tmp_path, monkeypatch):
    """The tokenizer stage's split_documents left datasets' copy of the local corpus in ~/.cache/huggingface/datasets,
    so data_cache_dir, which a full disk's message offers, did not move it, and the corpus was copied twice (the
    roundreview14 hunt). Its default is now raw/ under the data cache, as the data stage's."""
    import datasets

    import hf_gpt_custom.training.data as data_module

    seen = []
    real = datasets.load_dataset
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: seen.append(k.get("cache_dir")) or real(*a, **k))
    data_module.split_documents(make_config(f"data_cache_dir={tmp_path / 'cache'}"))
    assert seen and all(str(folder).startswith(str(tmp_path / "cache" / "raw")) for folder in seen)


def test_one_document_says_how_to_split_it(make_config, tokenizer, shakespeare_tokenizer_dir, tmp_path):
    one = tmp_path / "one.txt"
    one.write_text("a single speech without any blank line, long enough to train on " * 20, encoding="utf-8")
    config = make_config(f"dataset={one}", f"data_cache_dir={tmp_path / 'cache'}")
    with pytest.raises(ValueError, match=r"has 1 document\(s\), too few to hold out validation; split it into more "
                                         r"documents with text_sample_by=line \(now paragraph\)"):
        prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)


@pytest.mark.parametrize("holdout", ["tail", "random"])
def test_a_val_fraction_that_holds_out_every_document_names_it(make_config, tokenizer, shakespeare_tokenizer_dir,
                                                               tmp_path, holdout):
    """Two documents and val_fraction=0.6 hold out ceil(1.2) = 2: the tail split read no training tokens (the message
    offered a smaller block_size), the random one was datasets' own ValueError naming none of our settings (the
    boundaries hunt). One document fewer than all still trains."""
    two = tmp_path / "two.txt"
    two.write_text("first speech, long enough to train on " * 20 + "\n\n" + "second speech " * 40, encoding="utf-8")
    config = make_config(f"dataset={two}", "val_fraction=0.6", f"val_holdout={holdout}",
                         f"data_cache_dir={tmp_path / 'cache'}")
    with pytest.raises(ValueError, match=r"val_fraction=0.6 holds out all 2 documents .*\(ceil\(2 x 0.6\) = 2\), "
                                         r"leaving none to train on; lower val_fraction below 0.5"):
        prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    from hf_gpt_custom.training.data import split_documents

    train, val = split_documents(make_config(f"dataset={two}", "val_fraction=0.5", f"val_holdout={holdout}",
                                             f"data_cache_dir={tmp_path / 'cache'}"))
    assert (len(train), len(val)) == (1, 1)


def test_the_val_fraction_a_refusal_offers_is_the_largest_that_keeps_a_document_to_train_on(
        make_config, tokenizer, shakespeare_tokenizer_dir, tmp_path):
    """Three documents and val_fraction=0.9 hold out ceil(2.7) = 3: the message offers "below 0.667" ((3 - 1) / 3),
    and a fraction just below it trains on one document (the mutation sweep: with two documents, (n - 1) / n and 1 / n
    are both 0.5). Reference: the split that fraction makes."""
    three = tmp_path / "three.txt"
    three.write_text("\n\n".join(f"speech number {i}, long enough to train on " * 20 for i in range(3)),
                     encoding="utf-8")
    config = make_config(f"dataset={three}", "val_fraction=0.9", "val_holdout=tail",
                         f"data_cache_dir={tmp_path / 'cache'}")
    with pytest.raises(ValueError, match=r"holds out all 3 documents .*lower val_fraction below 0\.667"):
        prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    from hf_gpt_custom.training.data import split_documents

    train, val = split_documents(make_config(f"dataset={three}", "val_fraction=0.666", "val_holdout=tail",
                                             f"data_cache_dir={tmp_path / 'cache'}"))
    assert (len(train), len(val)) == (1, 2)


# --- what the data-pipeline hunt found ------------------------------------------------------------------------------


def test_hidden_copies_in_a_data_folder_are_not_read(tmp_path):
    """Jupyter's .ipynb_checkpoints/ holds a copy of the data: with the tail holdout every validation document was
    also trained on. datasets' own folder resolution skips hidden files and folders; so does ours now."""
    from datasets.data_files import DataFilesDict

    from hf_gpt_custom.training.corpus import list_local_files

    folder = tmp_path / "corpus"
    (folder / ".ipynb_checkpoints").mkdir(parents=True)
    (folder / "speeches.txt").write_text("ROMEO:\nBut soft!\n", encoding="utf-8")
    (folder / ".ipynb_checkpoints" / "speeches-checkpoint.txt").write_text("ROMEO:\nBut soft!\n", encoding="utf-8")
    (folder / ".hidden.txt").write_text("a hidden file\n", encoding="utf-8")
    datasets_reads = [str(path) for path in DataFilesDict.from_patterns({"train": ["**"]}, str(folder))["train"]]
    assert [str(path) for path in list_local_files(folder)] == datasets_reads == [str(folder / "speeches.txt")]


def test_a_byte_order_mark_is_no_text(tmp_path):
    """A UTF-8 file saved with a BOM (Notepad) trained on the tokens of U+FEFF. Reference: Python's utf-8-sig."""
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffROMEO:\nBut soft!\n\nJULIET:\nAy me!\n".encode("utf-8"))
    expected = path.read_text(encoding="utf-8-sig").split("\n\n")
    documents = load_text_dataset(str(path), cache_dir=tmp_path)["text"]
    assert [text.strip("\n") for text in documents] == [text.strip("\n") for text in expected]
    assert not any("\ufeff" in text for text in documents)
    from hf_gpt_custom.tokenizer_training import iter_corpus

    assert "".join(iter_corpus(path)) == path.read_text(encoding="utf-8-sig")  # the tokenizer trainer reads it so too


def test_blank_records_are_no_documents_as_blank_lines_are_not(tmp_path):
    """WikiText laid out one row per line (as on the Hub) is a third blank rows; each became a lone <|endoftext|>
    and counted toward val_fraction, where the same lines in a .txt are dropped. Reference: run_clm's rule."""
    rows = ["", " = Robert Boulter = ", " ", "Robert Boulter is an English actor .", "\n", "He had a role ."]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": row}) + "\n" for row in rows), encoding="utf-8")
    expected = [row for row in rows if len(row) > 0 and not row.isspace()]
    assert load_text_dataset(str(path), cache_dir=tmp_path)["text"] == expected
    assert [row["text"] for row in load_text_dataset(str(path), streaming=True)] == expected


def test_added_tokens_json_is_part_of_the_cache_key(make_config, shakespeare_tokenizer_dir, tmp_path):
    """AutoTokenizer reads added_tokens.json (it changes the ids), but the packed-data cache key hashed five other
    files only: adding tokens reused blocks encoded without them."""
    import shutil

    from hf_gpt_custom.training.data import compute_cache_key

    folder = tmp_path / "tokenizer"
    shutil.copytree(shakespeare_tokenizer_dir, folder)
    config = make_config()
    before = compute_cache_key(config, folder)
    (folder / "added_tokens.json").write_text(json.dumps({"ROMEO:": 512}), encoding="utf-8")
    assert compute_cache_key(config, folder) != before


def test_the_cache_key_holds_the_split_settings_only_where_they_pick_the_documents(make_config, tmp_path,
                                                                                  shakespeare_tokenizer_dir):
    """A seed sweep with val_holdout=tail (or a val_dataset) tokenized the corpus again for every seed, into identical
    copies (the dataread hunt). Reference: split_documents, which reads the seed only for a random holdout, and
    val_fraction and val_holdout only when it holds documents out."""
    from hf_gpt_custom.training.data import compute_cache_key

    def key(*overrides):
        return compute_cache_key(make_config(*overrides), shakespeare_tokenizer_dir)

    assert key("seed=1") != key("seed=2")  # random holdout: the seed picks the validation documents
    assert key("val_holdout=tail", "seed=1") == key("val_holdout=tail", "seed=2")
    assert key("val_holdout=tail", "val_fraction=0.1") != key("val_holdout=tail", "val_fraction=0.2")
    valid = tmp_path / "valid.txt"
    valid.write_text("Another text.\n\nOf its own.\n")
    assert key(f"val_dataset={valid}", "seed=1", "val_fraction=0.1") == \
        key(f"val_dataset={valid}", "seed=2", "val_fraction=0.3")
