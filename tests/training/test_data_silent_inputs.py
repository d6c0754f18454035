"""Inputs a user has that the data pipeline read silently wrong: a compressed .jsonl named explicitly, empty or
blank files under text_sample_by=document, a UTF-16 file (valid UTF-8 bytes, NUL-interleaved), and an empty file in a
folder. References: `datasets`' json builder on the same file, plain Python on the bytes, and the project's own
check_local_source_readable (what a run replacing an older one refuses)."""

import gzip
import json

import datasets
import pytest

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.corpus import check_local_source_readable, load_text_dataset

ROWS = [{"text": "First record text.", "url": "http://a"}, {"text": "Second record.", "url": "http://b"},
        {"text": "Third one.", "url": "http://c"}]


@pytest.mark.parametrize("sample_by", ["paragraph", "line"])
def test_a_gzipped_jsonl_named_explicitly_is_not_trained_on_as_raw_json(tmp_path, sample_by):
    """C4 and the Pile ship as .json.gz shards. Named explicitly, the file was read as plain text ("any other suffix"),
    `datasets` decompressed it on the way, and the documents were the JSON lines themselves: markup, keys and urls
    trained on, no error. Reading it as records (what `datasets`' json builder gives) or refusing it are both fine."""
    path = tmp_path / "c4-train.00000-of-01024.json.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(row) + "\n" for row in ROWS).encode()))
    reference = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "ref"))
    assert reference["text"] == [row["text"] for row in ROWS]
    try:
        documents = list(load_text_dataset(str(path), sample_by=sample_by, cache_dir=tmp_path / "raw")["text"])
    except UserError:
        return
    assert not any('"url"' in text for text in documents), documents
    assert documents == reference["text"]


def test_an_empty_file_under_document_sampling_is_named_not_a_document(tmp_path):
    """docs/training.md: empty files are named in one line with the fix. Under text_sample_by=document the empty file
    became one document "" (a lone <|endoftext|>) and passed (the check runs only when no document came out)."""
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    with pytest.raises(UserError, match="is empty"):
        load_text_dataset(str(path), sample_by="document", cache_dir=tmp_path / "raw")


def test_blank_files_in_a_folder_are_no_documents_under_document_sampling(tmp_path):
    """A blank line or record is no document (corpus._drop_blank_lines: kept, each became a lone <|endoftext|> and
    counted toward val_fraction); under text_sample_by=document an empty or whitespace-only file still was one."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.txt").write_text("First file text.\n")
    (folder / "b.txt").write_bytes(b"")
    (folder / "c.txt").write_text("  \n\n")
    (folder / "d.txt").write_text("Last file.\n")
    try:
        documents = list(load_text_dataset(str(folder), sample_by="document", cache_dir=tmp_path / "raw")["text"])
    except UserError:
        return  # naming the empty file is the documented alternative
    assert documents == ["First file text.\n", "Last file.\n"]


def test_a_utf16_file_in_a_folder_is_named_not_trained_on(tmp_path):
    """Notepad's "Unicode" without a byte-order mark: ASCII text in UTF-16-LE is valid UTF-8 with a NUL after every
    character. The binary check ran only when loading failed, so a fresh run trained on 'H\\x00e\\x00l\\x00...'; the
    same folder was then refused by a run replacing that one (check_local_source_readable)."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.txt").write_text("Good text here.\n\nSecond para.\n")
    (folder / "b.txt").write_bytes("Hello from Notepad.\r\n\r\nAnother line.\r\n".encode("utf-16-le"))
    with pytest.raises(UserError, match="NUL"):
        check_local_source_readable(str(folder))
    with pytest.raises(UserError, match="b.txt is not text"):
        load_text_dataset(str(folder), cache_dir=tmp_path / "raw")


def test_a_fresh_run_and_a_replacing_run_agree_on_an_empty_file_in_a_folder(tmp_path):
    """check_local_source_readable (a run replacing an older one) refuses a folder holding an empty file, while
    loading it for a fresh run skipped the file without a word: the same data accepted once, refused the next time."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.txt").write_text("Some text\n\nMore\n")
    (folder / "z.txt").write_bytes(b"")
    try:
        check_local_source_readable(str(folder))
        replacing_refuses = False
    except UserError:
        replacing_refuses = True
    try:
        load_text_dataset(str(folder), cache_dir=tmp_path / "raw")
        fresh_refuses = False
    except UserError:
        fresh_refuses = True
    assert fresh_refuses == replacing_refuses


def test_compressed_files_read_alike_for_training_and_the_tokenizer_in_a_folder_too(tmp_path):
    """The tokenizer trainer opened a .txt.gz as plain bytes (refused as not UTF-8) where training read it through
    its compression; a folder of .json.gz shards had no corpus files. Reference: the text itself, and `datasets`."""
    from hf_gpt_custom.tokenizer_training import iter_corpus

    text = "First paragraph.\n\nSecond one.\n"
    path = tmp_path / "notes.txt.gz"
    path.write_bytes(gzip.compress(text.encode()))
    assert list(load_text_dataset(str(path), sample_by="document", cache_dir=tmp_path / "raw")["text"]) == [text]
    assert "".join(iter_corpus(str(path))) == text
    shards = tmp_path / "shards"
    shards.mkdir()
    for index in range(2):
        (shards / f"c4-train.0000{index}.json.gz").write_bytes(
            gzip.compress("".join(json.dumps(row) + "\n" for row in ROWS[index::2]).encode()))
    documents = list(load_text_dataset(str(shards), cache_dir=tmp_path / "raw2")["text"])
    assert documents == [ROWS[0]["text"], ROWS[2]["text"], ROWS[1]["text"]]
    assert list(iter_corpus(str(shards))) == documents
    broken = tmp_path / "broken.txt.gz"  # a download cut short
    broken.write_bytes(b"not gzip")
    with pytest.raises(UserError, match="broken.txt.gz is not a readable gzip file"):
        load_text_dataset(str(broken), cache_dir=tmp_path / "raw3")


def test_a_record_without_text_is_named_by_file_and_row_in_compressed_json_and_csv(tmp_path):
    """A null text field in a .jsonl.gz was looked up by reading the compressed bytes as UTF-8 (a bare
    UnicodeDecodeError); a CSV cell pandas reads as missing (NA) stopped training with a message naming neither file
    nor row. Reference: the rows written here."""
    rows = [{"text": "First."}, {"text": None}, {"text": "Third."}]
    shard = tmp_path / "shard.jsonl.gz"
    shard.write_bytes(gzip.compress("".join(json.dumps(row) + "\n" for row in rows).encode()))
    with pytest.raises(UserError, match=r"shard.jsonl.gz line 2: expected a JSON object with a string 'text'"):
        load_text_dataset(str(shard), cache_dir=tmp_path / "raw")
    table = tmp_path / "table.csv"
    table.write_text("text,label\nFirst.,0\nNA,1\nThird.,0\n")
    with pytest.raises(UserError, match=r"row 2 \(counting from 1 over table.csv\) has no 'text' text; a CSV cell"):
        load_text_dataset(str(table), cache_dir=tmp_path / "raw2")


@pytest.mark.parametrize("streaming", [False, True])
def test_file_names_with_glob_characters_are_read_as_named_once_each(tmp_path, streaming):
    """datasets reads data_files entries as glob patterns: a folder with notes[1].txt and notes1.txt trained
    notes1.txt twice and notes[1].txt never, b*.txt pulled bz.txt in again, and the validation split drew from the
    repeats. Reference: each file's own paragraphs, in sorted file order, read with plain Python. The tokenizer
    trainer reads the same files; '::' (a chained URL to fsspec) is refused by name."""
    from hf_gpt_custom.tokenizer_training import iter_corpus

    texts = {"b*.txt": "star\n", "bz.txt": "bee zed\n", "notes1.txt": "plain one\n", "notes[1].txt": "bracket one\n",
             "q?.txt": "question\n", "qq.txt": "double q\n"}
    for name, text in texts.items():
        (tmp_path / "corpus").mkdir(exist_ok=True)
        (tmp_path / "corpus" / name).write_text(text, encoding="utf-8")
    expected = [texts[name].strip("\n") for name in sorted(texts)]
    dataset = load_text_dataset(str(tmp_path / "corpus"), streaming=streaming, cache_dir=tmp_path / "cache")
    assert [row["text"].strip("\n") for row in dataset] == expected
    alone = load_text_dataset(str(tmp_path / "corpus" / "notes[1].txt"), cache_dir=tmp_path / "cache")
    assert [row["text"].strip("\n") for row in alone] == ["bracket one"]
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "rows[1].jsonl").write_text(json.dumps(ROWS[0]) + "\n", encoding="utf-8")
    (tmp_path / "json" / "rows1.jsonl").write_text(json.dumps(ROWS[1]) + "\n", encoding="utf-8")
    # sorted by name: rows1 before rows[1]
    assert [text.strip() for text in iter_corpus([str(tmp_path / "json")])] == [ROWS[1]["text"], ROWS[0]["text"]]
    from hf_gpt_custom.training.finetune_data import load_labelled_records

    assert load_labelled_records(str(tmp_path / "json" / "rows[1].jsonl")) == [ROWS[0]]  # fine-tuning's labelled file
    (tmp_path / "corpus" / "a::b.txt").write_text("colon\n", encoding="utf-8")
    with pytest.raises(UserError, match="a::b.txt: the datasets library reads '::'"):
        load_text_dataset(str(tmp_path / "corpus"), streaming=streaming, cache_dir=tmp_path / "cache2")


@pytest.mark.parametrize("streaming", [False, True])
def test_a_latin1_jsonl_and_a_numeric_csv_column_are_named_in_one_line(tmp_path, streaming):
    """A latin-1 .jsonl ended in a bare pyarrow UnicodeDecodeError from inside a filter (the same bytes in a .txt got
    the one-line error); a CSV text column of numbers in "texts[0] is int 1083 ... convert it with str()", naming
    neither file nor column. Reference: Python's own UTF-8 decoder on the bytes."""
    from hf_gpt_custom.tokenizer_training import iter_corpus

    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"text": "a fine caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(UnicodeDecodeError) as bad:
        latin.read_bytes().decode("utf-8")
    message = rf"latin.jsonl is not UTF-8 text: byte 0xe9 at offset {bad.value.start} \(line 1\)"
    with pytest.raises(UserError, match=message):
        list(load_text_dataset(str(latin), streaming=streaming, cache_dir=tmp_path / "cache"))
    with pytest.raises(UserError, match=message):
        list(iter_corpus([str(latin)]))
    numbers = tmp_path / "numbers.csv"
    numbers.write_text("text,label\n" + "".join(f"{1000 + i},{i % 2}\n" for i in range(6)), encoding="utf-8")
    if not streaming:  # a stream's column types are not known before its rows are read
        with pytest.raises(UserError, match=r"numbers.csv: column 'text' holds int64 values, not text; set text_field"):
            load_text_dataset(str(numbers), cache_dir=tmp_path / "cache")


def test_the_utf8_check_of_a_record_file_reads_it_in_chunks_and_names_a_bad_byte_past_the_first(tmp_path):
    """Record files are checked 1 MiB at a time (a multi-GB .jsonl is not read into memory): a two-byte character
    split by a chunk boundary is fine, and a bad byte past the first chunk is named at its offset, as Python's
    decoder finds it."""
    from hf_gpt_custom.training.corpus import check_record_files_utf8

    opening = b'{"text": "'
    straddling = opening + b"a" * ((1 << 20) - 1 - len(opening)) + "é".encode("utf-8") + b'"}\n'
    assert straddling[(1 << 20) - 1:(1 << 20) + 1] == "é".encode("utf-8")  # the first chunk ends inside the é
    good = tmp_path / "good.jsonl"
    good.write_bytes(straddling + (json.dumps({"text": "café"}, ensure_ascii=False) + "\n").encode("utf-8"))
    check_record_files_utf8([good])
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(good.read_bytes() + '{"text": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(UnicodeDecodeError) as reference:
        bad.read_bytes().decode("utf-8")
    with pytest.raises(UserError, match=rf"bad.jsonl is not UTF-8 text: byte 0xe9 at offset {reference.value.start} "):
        check_record_files_utf8([bad])
    late = tmp_path / "late.jsonl"  # plain ASCII for two chunks, then the bad byte: every chunk must be read
    late.write_bytes(b'{"text": "' + b"a" * (2 << 20) + b'"}\n' + '{"text": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(UserError, match="late.jsonl is not UTF-8 text: byte 0xe9"):
        check_record_files_utf8([late])
    cut = tmp_path / "cut.jsonl"  # the file ends inside a character: only the decoder's final call sees it
    cut.write_bytes(good.read_bytes() + "é".encode("utf-8")[:1])
    with pytest.raises(UserError, match="cut.jsonl is not UTF-8 text: byte 0xc3"):
        check_record_files_utf8([cut])
