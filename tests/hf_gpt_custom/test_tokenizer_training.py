"""train_tokenizer(): every input kind gives the same tokenizer as the same texts, deterministically; bad input."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hf_gpt_custom import GPTCustomTokenizerFast, tokenizer_training
from hf_gpt_custom.cli import main as cli_main
from hf_gpt_custom.tokenization_gpt_custom import ENDOFTEXT
from hf_gpt_custom.tokenizer_training import train_tokenizer

TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "tokenization_gpt_custom.py")


def read_files(folder) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in TOKENIZER_FILES}


@pytest.fixture(scope="module")
def shakespeare_path(shared_data_dir):
    return shared_data_dir / "tinyshakespeare" / "input.txt"


@pytest.fixture(scope="module")
def lambada_texts(shared_data_dir):
    path = shared_data_dir / "lambada" / "lambada_test.jsonl"
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]


# --- determinism and equivalent inputs ---------------------------------------------------------------------------


def test_same_corpus_and_settings_give_byte_identical_files_across_processes(shakespeare_path, tmp_path):
    first = train_tokenizer(shakespeare_path, tmp_path / "a", vocab_size=1000, show_progress=False)
    # A second interpreter has a different hash seed (Rust HashMaps and Python sets iterate differently)
    code = (
        "import sys; from hf_gpt_custom.tokenizer_training import train_tokenizer; "
        "train_tokenizer(sys.argv[1], sys.argv[2], vocab_size=1000, show_progress=False)"
    )
    subprocess.run([sys.executable, "-c", code, str(shakespeare_path), str(tmp_path / "b")], check=True, timeout=120,
                   env={**os.environ, "PYTHONHASHSEED": "123"})
    assert read_files(first) == read_files(tmp_path / "b")


@pytest.mark.parametrize("block_chars", [1, 64, 4096])
def test_text_blocks_hold_exactly_the_whole_files_chunks(shakespeare_path, tmp_path, monkeypatch, block_chars):
    """Blocks were cut after a line's newline: "\n\n" at a block's end was one chunk where the whole file has two
    (and CRLF lines and lines with trailing spaces the same), so the merges depended on the block size. Reference:
    GPT-2's split pattern over the whole text."""
    import regex

    from hf_gpt_custom.byte_level import GPT2_SPLIT_PATTERN

    speeches = shakespeare_path.read_text(encoding="utf-8")[:60_000]
    # CRLF lines, trailing spaces, and U+001C-U+001F, which str.isspace() counts and the split pattern does not
    text = speeches + speeches.replace("\n", "  \r\n") + "\n\n\n  trailing  \n \n" + "ab!\x1c\nend\x1f\n" * 50
    path = tmp_path / "corpus.txt"
    path.write_bytes(text.encode("utf-8"))
    monkeypatch.setattr(tokenizer_training, "TEXT_BLOCK_CHARS", block_chars)
    blocks = list(tokenizer_training.iter_corpus(path))
    text = text.replace("\r\n", "\n")  # read with universal newlines, as training reads it
    assert len(blocks) > 10 and "".join(blocks) == text
    chunks = [chunk for block in blocks for chunk in regex.findall(GPT2_SPLIT_PATTERN, block)]
    assert chunks == regex.findall(GPT2_SPLIT_PATTERN, text)


def test_text_file_read_in_blocks_trains_like_the_whole_string(shakespeare_path, tmp_path, monkeypatch):
    # Cut the 1.1 MB file into ~20 KB blocks: cuts fall only before lines starting with a letter, where GPT-2's
    # split finds the same chunks as in the whole text, so the merges must be identical.
    monkeypatch.setattr(tokenizer_training, "TEXT_BLOCK_CHARS", 20_000)
    assert len(list(tokenizer_training.iter_corpus(shakespeare_path))) > 50
    from_file = train_tokenizer([shakespeare_path], tmp_path / "file", vocab_size=1000, show_progress=False)
    whole = shakespeare_path.read_text(encoding="utf-8")
    from_string = train_tokenizer(iter([whole]), tmp_path / "string", vocab_size=1000, show_progress=False)
    assert read_files(from_file) == read_files(from_string)


@pytest.mark.parametrize("documents", [
    ["int main() {", "// comment: entry point", "  return 0;", "}"],  # a line of code that starts like a path
    ["The end", ".", "Another paragraph"],  # "." exists (the working directory)
    ["~ a tilde divider", "text text text"],
], ids=["code", "dot", "tilde"])
def test_a_list_of_documents_is_documents_even_where_one_looks_like_a_path(documents, tmp_path, monkeypatch):
    """Were refused as missing input files, or (["The end", "."]) as "other inputs exist". Reference: the same
    strings as an iterator, which is always documents."""
    monkeypatch.chdir(tmp_path)
    from_list = train_tokenizer(documents * 5, tmp_path / "list", vocab_size=280, show_progress=False)
    from_iterator = train_tokenizer(iter(documents * 5), tmp_path / "iterator", vocab_size=280, show_progress=False)
    assert read_files(from_list) == read_files(from_iterator)


def test_a_list_of_paths_with_one_missing_is_refused_naming_it(shakespeare_path, tmp_path):
    (tmp_path / "shards").mkdir()
    for name in ("part0", "part1"):
        (tmp_path / "shards" / name).write_text("text\n")
    shards = [str(tmp_path / "shards" / name) for name in ("part0", "part1", "part2")]  # part2 missing, no suffix
    for paths in ([str(shakespeare_path), str(tmp_path / "typo.txt")], ["notes.txt"], [str(tmp_path / "corpus")],
                  shards, [str(tmp_path / "shards"), "corpus_b"]):
        missing = next(path for path in paths if not os.path.exists(path))
        with pytest.raises(FileNotFoundError, match=rf"input file {re.escape(repr(missing))} not found .*pass them as "
                                                    r"an iterator, iter\(texts\)"):
            train_tokenizer(paths, tmp_path / "tok", show_progress=False)


def test_folder_input_reads_its_text_files_not_its_markdown(shared_data_dir, tmp_path):
    folder = shared_data_dir / "tinyshakespeare"  # holds input.txt and PROVENANCE.md
    from_folder = train_tokenizer(folder, tmp_path / "folder", vocab_size=600, show_progress=False)
    from_file = train_tokenizer(folder / "input.txt", tmp_path / "file", vocab_size=600, show_progress=False)
    assert read_files(from_folder) == read_files(from_file)


def test_jsonl_records_train_like_their_texts(shared_data_dir, lambada_texts, tmp_path):
    jsonl = shared_data_dir / "lambada" / "lambada_test.jsonl"
    from_jsonl = train_tokenizer([jsonl], tmp_path / "jsonl", vocab_size=800, show_progress=False)
    from_texts = train_tokenizer(lambada_texts, tmp_path / "texts", vocab_size=800, show_progress=False)
    assert read_files(from_jsonl) == read_files(from_texts)
    assert len(GPTCustomTokenizerFast.from_pretrained(from_jsonl)) == 800


def test_parquet_records_train_like_their_texts(lambada_texts, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = lambada_texts[:1500]
    parquet = tmp_path / "lambada_part.parquet"
    pq.write_table(pa.table({"passage": texts, "id": list(range(len(texts)))}), parquet)
    from_parquet = train_tokenizer(parquet, tmp_path / "parquet", vocab_size=700, text_field="passage", show_progress=False)
    from_texts = train_tokenizer((text for text in texts), tmp_path / "texts", vocab_size=700, show_progress=False)
    assert read_files(from_parquet) == read_files(from_texts)


def test_extra_special_tokens_follow_endoftext_and_are_recognised_in_input(tmp_path, lambada_texts):
    folder = train_tokenizer(lambada_texts[:500], tmp_path / "tok", vocab_size=600,
                             special_tokens=["<|pad|>", ENDOFTEXT], show_progress=False)
    tokenizer = GPTCustomTokenizerFast.from_pretrained(folder)
    assert len(tokenizer) == 600
    assert tokenizer.eos_token_id == 598 and tokenizer.convert_tokens_to_ids("<|pad|>") == 599
    assert 599 in tokenizer("a <|pad|> b")["input_ids"]  # as transformers' tokenizers do
    assert 599 not in tokenizer("a <|pad|> b", split_special_tokens=True)["input_ids"]


def test_folder_sets_pad_token_to_eos_so_padding_works(tmp_path, lambada_texts):
    folder = train_tokenizer(lambada_texts[:200], tmp_path / "tok", vocab_size=400, show_progress=False)
    saved = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert saved["pad_token"] == saved["eos_token"] == ENDOFTEXT
    padded = GPTCustomTokenizerFast.from_pretrained(folder)(["a b c d", "a"], padding=True)["input_ids"]
    assert len(padded[0]) == len(padded[1]) and padded[1][-1] == 399


def test_small_corpus_gives_a_smaller_vocabulary_and_says_so(tmp_path, caplog):
    folder = train_tokenizer(["the cat sat on the mat. the cat sat."], tmp_path / "tok", vocab_size=5000,
                             show_progress=False)
    tokenizer = GPTCustomTokenizerFast.from_pretrained(folder)
    assert 257 < len(tokenizer) < 300 and tokenizer.eos_token_id == len(tokenizer) - 1
    assert "fewer than vocab_size=5000" in caplog.text


def test_a_text_is_not_given_a_leading_space_before_training(tmp_path):
    """GPT-2's byte-level pre-tokenizer adds no prefix space: "a b" splits into "a" and " b", whose one pair (space,
    b) occurs twice and is the only merge; a leading space would make " a" a second pair occurring twice."""
    folder = train_tokenizer(["a b", "a b"], tmp_path / "tok", vocab_size=300, min_frequency=2, show_progress=False)
    merges = json.loads((tmp_path / "tok" / "tokenizer.json").read_text())["model"]["merges"]
    assert merges == [["Ġ", "b"]]


def test_min_frequency_reaches_the_trainer(tmp_path):
    """Every test trained with the default 2, so a min_frequency that never reached the BPE trainer went unnoticed:
    `--min-frequency 10` learned merges of pairs seen twice (found by the mutsweep2 hunt). Reference by hand: "abc abc
    abc" splits into "abc", " abc", " abc": (a, b) and then (ab, c) occur 3 times, (space, abc) twice, so 3 merges
    at min_frequency 1, 2 at 3 and none at 4; and the `tokenizers` library's BpeTrainer run directly with the same
    settings on a larger corpus."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer

    for min_frequency, n_merges in ((1, 3), (3, 2), (4, 0)):
        folder = train_tokenizer(["abc abc abc"], tmp_path / f"tok{min_frequency}", vocab_size=300,
                                 min_frequency=min_frequency, show_progress=False)
        merges = json.loads((folder / "tokenizer.json").read_text())["model"]["merges"]
        assert len(merges) == n_merges, min_frequency
    texts = [f"the cat sat on mat number {i % 7} while dogs ran" for i in range(30)] + ["rare words appear twice"] * 2
    folder = train_tokenizer(texts, tmp_path / "larger", vocab_size=400, min_frequency=10, show_progress=False)
    reference = Tokenizer(BPE())
    reference.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    reference.train_from_iterator(texts, trainer=BpeTrainer(vocab_size=399, min_frequency=10, show_progress=False,
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    ours = json.loads((folder / "tokenizer.json").read_text())["model"]["merges"]
    assert ours == json.loads(reference.to_str())["model"]["merges"]
    assert (folder / "merges.txt").read_text(encoding="utf-8").split("\n")[1:-1] == [" ".join(m) for m in ours]


# --- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("vocab_size", "special_tokens", "needed"), [(256, None, 257), (100, None, 257), (257, ["<|pad|>"], 258)])
def test_vocab_size_too_small_names_the_minimum(tmp_path, vocab_size, special_tokens, needed):
    with pytest.raises(ValueError, match=rf"vocab_size={vocab_size} is too small.*vocab_size >= {needed}"):
        train_tokenizer(["some text"], tmp_path, vocab_size=vocab_size, special_tokens=special_tokens)


@pytest.mark.parametrize("corpus", [[""], iter([]), ["", "", ""]], ids=["one_empty_string", "no_documents", "empty_strings"])
def test_empty_corpus_is_an_error(tmp_path, corpus):
    with pytest.raises(ValueError, match="is empty.*pass documents with text in them"):
        train_tokenizer(corpus, tmp_path / "tok", show_progress=False)
    assert not (tmp_path / "tok").exists()


def test_empty_file_is_an_error(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.txt.*is empty.*check the path: its text files hold no text$"):
        train_tokenizer(empty, tmp_path / "tok", show_progress=False)  # no text_field or split: plain text reads neither


def test_records_without_text_name_the_text_field(tmp_path):
    records = tmp_path / "records.jsonl"
    records.write_text('{"body": "", "title": "x"}\n')
    with pytest.raises(ValueError, match=r"is empty.*check the path and the text_field='body' of its records"):
        train_tokenizer(records, tmp_path / "tok", text_field="body", show_progress=False)


def test_missing_file_names_the_path(shakespeare_path, tmp_path):
    with pytest.raises(FileNotFoundError, match="no_such_corpus.txt"):
        train_tokenizer(tmp_path / "no_such_corpus.txt", tmp_path / "tok")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        train_tokenizer([shakespeare_path, "data/missing.jsonl"], tmp_path / "tok")


def test_unreachable_hub_dataset_is_a_clear_error(tmp_path):
    # tests run offline (HF_HUB_OFFLINE=1): a Hub name cannot be fetched and the error says what to check
    with pytest.raises(FileNotFoundError, match="neither a local file nor a Hub dataset"):
        train_tokenizer("someone/no-such-corpus", tmp_path / "tok")


def test_jsonl_without_the_text_field_names_the_fields(shared_data_dir, tmp_path):
    piqa = shared_data_dir / "piqa" / "valid.jsonl"
    with pytest.raises(ValueError, match=r"record 1: no 'text' field \(fields: \['goal', .*text_field"):
        train_tokenizer(piqa, tmp_path / "tok", show_progress=False)


@pytest.mark.parametrize(("inputs", "message"), [([b"bytes"], "document 1 .*bytes b'bytes', not text"), (iter(["ok", 3]), "document 2 .*int 3, not text"), (42, "inputs is int")])
def test_non_text_inputs_are_rejected(tmp_path, inputs, message):
    with pytest.raises(ValueError, match=message):
        train_tokenizer(inputs, tmp_path / "tok", show_progress=False)


@pytest.mark.parametrize("special", ["\t", "\x7f"])
def test_special_token_that_is_also_a_byte_token_is_rejected(tmp_path, special):
    """" the" and "\n" were accepted (the vocabulary spells them "Ġthe", "Ċ"): the special token then took that text's
    place, and decode(skip_special_tokens=True) dropped every newline. Text of the corpus is refused before this
    check (below); a byte token the corpus lacks still reaches it."""
    with pytest.raises(ValueError, match=re.escape(f"special token {special!r} is also a learned (or byte) token")):
        train_tokenizer(["the the the the\nthe the\n"], tmp_path / "tok", special_tokens=[special], show_progress=False)


SPEECH = "First Citizen:\nROMEO:\nthe other brother there <|sep|>\n"


@pytest.mark.parametrize(("special", "count"), [("ROMEO:", 1), ("the", 4), (" the", 1), ("\n", 3), ("<|sep|>", 1)])
def test_special_token_that_occurs_as_text_in_the_corpus_is_refused(tmp_path, special, count):
    """"ROMEO:" and "the" were accepted: training kept them as text (encode_ids_batch), tokenizer() read every one as
    the special id, inside words too ("the" in "other"), so prompts were fed an embedding training never saw.
    Reference: str.count on the speech (4 "the": the, other, brother, there)."""
    assert SPEECH.count(special) == count
    with pytest.raises(ValueError, match=re.escape(f"special token {special!r} occurs as text in the corpus (at least "
                                                   f"{count} time")) as refusal:
        train_tokenizer(["a first document", SPEECH], tmp_path / "tok", special_tokens=[special], show_progress=False)
    assert "pick a name that cannot occur as text, like '<|" in str(refusal.value) and "\n" not in str(refusal.value)
    assert not (tmp_path / "tok" / "tokenizer.json").exists()


def test_special_token_text_cut_across_two_blocks_of_a_text_file_is_refused(tmp_path, monkeypatch):
    """A text file is read in blocks; the token "e\nX" runs across the cut between "more" and "\nX". Separate
    documents are not one text: the same characters split between two of them are not refused."""
    path = tmp_path / "corpus.txt"
    path.write_text("Next\nmore\nXavier\n", encoding="utf-8")
    monkeypatch.setattr(tokenizer_training, "TEXT_BLOCK_CHARS", 1)
    assert list(tokenizer_training.iter_corpus(path)) == ["Next\nmore", "\nXavier", "\n"]
    with pytest.raises(ValueError, match=re.escape("special token 'e\\nX' occurs as text in the corpus")):
        train_tokenizer(path, tmp_path / "tok", vocab_size=300, special_tokens=["e\nX"], show_progress=False)
    train_tokenizer(["Next\nmore", "\nXavier\n"], tmp_path / "tok", vocab_size=300, special_tokens=["e\nX"],
                    show_progress=False)


def test_a_corpus_holding_endoftext_as_text_still_trains(tmp_path):
    """The default token is not looked for: a literal <|endoftext|> is text to training and eos to tokenizer(), as
    GPT-2's is (docs/tokenizer.md), and eos is trained after every document."""
    folder = train_tokenizer(["a <|endoftext|> b\n", "c d\n"], tmp_path / "tok", vocab_size=300,
                             special_tokens=[ENDOFTEXT], show_progress=False)
    tokenizer = GPTCustomTokenizerFast.from_pretrained(folder)
    assert tokenizer.eos_token_id in tokenizer("a <|endoftext|> b")["input_ids"]


def test_min_frequency_below_one_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="min_frequency=0"):
        train_tokenizer(["text"], tmp_path, min_frequency=0)


# --- command line ------------------------------------------------------------------------------------------------


def test_cli_trains_a_loadable_tokenizer(shakespeare_path, tmp_path, capsys):
    cli_main(["tokenizer", "train", str(shakespeare_path), "--out", str(tmp_path / "tok"), "--vocab-size", "700",
              "--special-tokens", "<|pad|>", "--no-progress"])
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tmp_path / "tok")
    assert len(tokenizer) == 700 and tokenizer.eos_token_id == 698
    assert tokenizer.convert_tokens_to_ids("<|pad|>") == 699
    assert "tokenizer saved to" in capsys.readouterr().out


def test_cli_bad_vocab_size_is_one_line_and_exit_2(shakespeare_path, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["tokenizer", "train", str(shakespeare_path), "--out", str(tmp_path / "tok"), "--vocab-size", "10"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "vocab_size=10 is too small" in error


def test_cli_missing_input_is_one_line_and_exit_2(shakespeare_path, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["tokenizer", "train", str(shakespeare_path), "corpus_typo", "--out", str(tmp_path / "tok")])
    assert exit_info.value.code == 2
    assert "input 'corpus_typo' not found" in capsys.readouterr().err


@pytest.mark.parametrize("given", ["\n", "<|pad|>,\t"])
def test_cli_a_whitespace_only_special_token_is_refused_not_dropped(shakespeare_path, tmp_path, capsys, given):
    """--special-tokens $'\\n' trained a tokenizer without it, in silence (the list was stripped of blank items)."""
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["tokenizer", "train", str(shakespeare_path), "--out", str(tmp_path / "tok"), "--vocab-size", "700",
                  "--special-tokens", given, "--no-progress"])
    assert exit_info.value.code == 2 and not (tmp_path / "tok").exists()
    error = capsys.readouterr().err.strip()
    assert "is whitespace only" in error and "train_tokenizer(..., special_tokens=[...])" in error


@pytest.mark.parametrize(("given", "named"),
                         [(" the", "' the'"), ("the ", "'the '"), ("<|pad|> ,<|sep|>", "'<|pad|> '")])
def test_cli_a_special_token_with_whitespace_at_its_edge_is_refused_not_stripped(shakespeare_path, tmp_path, capsys,
                                                                                  given, named):
    """--special-tokens ' the' was stripped to 'the' and trained, in silence, where Python refused ' the'."""
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["tokenizer", "train", str(shakespeare_path), "--out", str(tmp_path / "tok"), "--vocab-size", "700",
                  "--special-tokens", given, "--no-progress"])
    assert exit_info.value.code == 2 and not (tmp_path / "tok").exists()
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{named} begins or ends with whitespace" in error and "like '<|sep|>'" in error


def test_cli_a_special_token_that_occurs_in_the_corpus_is_one_line_and_exit_2(shakespeare_path, tmp_path, capsys):
    """'ROMEO:' (163 times in tiny Shakespeare) was accepted; reference: str.count over the file."""
    assert shakespeare_path.read_text(encoding="utf-8").count("ROMEO:") == 163
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["tokenizer", "train", str(shakespeare_path), "--out", str(tmp_path / "tok"), "--vocab-size", "700",
                  "--special-tokens", "ROMEO:", "--no-progress"])
    assert exit_info.value.code == 2 and not (tmp_path / "tok" / "tokenizer.json").exists()
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0
    assert "special token 'ROMEO:' occurs as text in the corpus (at least 163 times, e.g. " in error
    assert "pick a name that cannot occur as text, like '<|ROMEO:|>'" in error


def test_cli_special_tokens_may_be_written_with_spaces_after_the_commas(shakespeare_path, tmp_path):
    cli_main(["tokenizer", "train", str(shakespeare_path), "--out", str(tmp_path / "tok"), "--vocab-size", "700",
              "--special-tokens", "<|pad|>, <|sep|>", "--no-progress"])
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tmp_path / "tok")
    assert tokenizer.convert_tokens_to_ids(["<|pad|>", "<|sep|>"]) == [698, 699]


def test_text_that_is_not_text_is_named_as_training_names_it(tmp_path):
    """The tokenizer trainer reported a non-UTF-8 byte at its offset in the decoder's 8 KB buffer ("byte 1699" for
    offset 100,003), a lone surrogate escape in a .jsonl as pyarrow's bare ArrowInvalid, and one in a Python document
    as tokenizers' bare UnicodeEncodeError. Reference: the offset and line counted here, and training's messages."""
    from hf_gpt_custom.errors import UserError

    data = ("a" * 99 + "\n") * 1000 + "caf\xe9\n"
    (tmp_path / "latin1.txt").write_bytes(data.encode("latin1"))
    assert data.encode("latin1").index(b"\xe9") == 100_003
    with pytest.raises(UserError, match=r"latin1.txt is not UTF-8 text: byte 0xe9 at offset 100003 \(line 1001\)"):
        train_tokenizer(str(tmp_path / "latin1.txt"), tmp_path / "t1", vocab_size=300, show_progress=False)
    (tmp_path / "d.jsonl").write_text('{"text": "fine"}\n{"text": "bad \\ud83d emoji"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"d.jsonl line 2: the 'text' field holds an invalid Unicode escape"):
        train_tokenizer(str(tmp_path / "d.jsonl"), tmp_path / "t2", vocab_size=300, show_progress=False)
    with pytest.raises(UserError, match=r"document 6 \(starting 'bad \\ud83d emoji'\) holds '\\ud83d', half of a"):
        train_tokenizer(["fine text"] * 5 + ["bad \ud83d emoji"], tmp_path / "t3", vocab_size=300,
                        show_progress=False)


def test_a_kill_while_saving_over_an_earlier_tokenizer_leaves_it_whole(tmp_path, lambada_texts, monkeypatch):
    """train_tokenizer saved straight into --out: a kill in save_pretrained left the new tokenizer.json beside the
    earlier tokenizer's vocab.json and merges.txt, which AutoTokenizer loads as one tokenizer while GPT-2-style readers
    read the other (the interrupts hunt). Reference: each folder's files read back against each other."""
    from transformers import GPT2Tokenizer

    out = tmp_path / "tok"
    train_tokenizer(lambada_texts, out, vocab_size=400, show_progress=False)
    (out / "notes.txt").write_text("mine")
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    real_save = GPTCustomTokenizerFast.save_pretrained

    def killed(self, folder, *args, **kwargs):
        real_save(self, folder, *args, **kwargs)
        (Path(folder) / "vocab.json").unlink()  # part of the way through
        raise KeyboardInterrupt

    monkeypatch.setattr(GPTCustomTokenizerFast, "save_pretrained", killed)
    with pytest.raises(KeyboardInterrupt):
        train_tokenizer(lambada_texts, out, vocab_size=300, show_progress=False)
    # the earlier one, whole (beside the half-written staging folder, which the next save removes)
    assert {path.name: path.read_bytes() for path in out.iterdir() if path.is_file()} == before
    monkeypatch.undo()
    train_tokenizer(lambada_texts, out, vocab_size=300, show_progress=False)
    assert len(GPTCustomTokenizerFast.from_pretrained(out)) == len(GPT2Tokenizer.from_pretrained(out)) == 300
    assert (out / "notes.txt").read_text() == "mine" and not (out / ".tokenizer.tmp").exists()


@pytest.mark.parametrize("templates", ["one", "several", "linked"])
def test_retraining_into_a_folder_drops_the_earlier_tokenizers_chat_templates(tmp_path, lambada_texts, templates):
    """A chat template saved into a trained folder stayed when a new tokenizer was trained into it: AutoTokenizer
    loaded the old template with the new vocabulary, its special tokens then plain bytes (the tokparity3 hunt).
    Reference: the same training into an empty folder, which has no template."""
    from transformers import AutoTokenizer

    out = tmp_path / "tok"
    train_tokenizer(lambada_texts, out, vocab_size=400, show_progress=False)
    tokenizer = AutoTokenizer.from_pretrained(out)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|sys|>"]})
    template = "{% for m in messages %}<|sys|>{{ m['content'] }}{% endfor %}"
    tokenizer.chat_template = template if templates == "one" else {"default": template, "tool_use": template}
    tokenizer.save_pretrained(out)
    if templates == "linked":  # a shared templates folder linked in: the link goes, the folder it names stays
        (out / "additional_chat_templates").rename(tmp_path / "shared_templates")
        (out / "additional_chat_templates").symlink_to(tmp_path / "shared_templates")
    assert AutoTokenizer.from_pretrained(out).chat_template is not None
    train_tokenizer(lambada_texts, out, vocab_size=300, show_progress=False)
    train_tokenizer(lambada_texts, tmp_path / "empty", vocab_size=300, show_progress=False)
    retrained, fresh = AutoTokenizer.from_pretrained(out), AutoTokenizer.from_pretrained(tmp_path / "empty")
    assert retrained.chat_template is None and fresh.chat_template is None
    assert sorted(path.name for path in out.iterdir()) == sorted(path.name for path in (tmp_path / "empty").iterdir())
    if templates == "linked":
        assert sorted(path.name for path in (tmp_path / "shared_templates").iterdir()) == ["tool_use.jinja"]


def test_tokenizer_train_into_the_working_directory_as_dot(tmp_path, lambada_texts, monkeypatch):
    """`--out .`: the staging folder beside it took Path(".").with_name, a bare ValueError after all the training
    (the roundreview9 hunt)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lambada_texts), encoding="utf-8")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    cli_main(["tokenizer", "train", str(corpus), "--out", ".", "--vocab-size", "300"])
    assert len(GPTCustomTokenizerFast.from_pretrained(tmp_path / "here")) == 300
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt", "here"]



@pytest.mark.parametrize("terminals", [(), ("stderr",), ("stdout",)], ids=["piped", "bars_shown", "stderr_to_a_file"])
def test_training_writes_nothing_to_a_piped_stdout(tmp_path, capfd, monkeypatch, terminals):
    """tokenizers' trainer ends each progress bar with a newline printed to the process's stdout (fd 1), even where
    the bars (stderr) are hidden: `hf-gpt-custom run ... | tee log` began with three blank lines, and a terminal's
    output three blank lines where stderr went to a file. stdout gets only what the caller prints, whether the bars
    are shown (stderr a terminal) or not."""
    monkeypatch.setattr(tokenizer_training, "_is_a_terminal",
                        lambda stream: (stream is sys.stderr and "stderr" in terminals)
                        or (stream is sys.stdout and "stdout" in terminals), raising=False)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not to be, that is the question\n" * 200)
    capfd.readouterr()
    train_tokenizer([str(corpus)], tmp_path / "tok", vocab_size=300)
    print("end")
    assert capfd.readouterr().out == "end\n"


def test_training_with_stdout_closed_still_trains(tmp_path, monkeypatch):
    """Python sets sys.stdout to None where fd 1 is closed (`hf-gpt-custom tokenizer train ... 1>&-`): the move of
    the bars' newlines to stderr failed there with an AttributeError (the roundreview26 hunt); tokenizers alone
    trains. Nothing is moved then."""
    monkeypatch.setattr(tokenizer_training, "_is_a_terminal", lambda stream: stream is sys.stderr)
    monkeypatch.setattr(sys, "stdout", None)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not to be, that is the question\n" * 200)
    folder = train_tokenizer([str(corpus)], tmp_path / "tok", vocab_size=300)
    assert (folder / "tokenizer.json").is_file()


@pytest.mark.parametrize("special", ["more\n", "e\n"])
def test_special_token_with_only_its_last_character_past_a_block_cut_is_refused(tmp_path, monkeypatch, special):
    """The block 'Next\\nmore' is cut before '\\nXavier': 'more\\n' needs every one of the longest-1 characters carried,
    'e\\n' (two characters) needs any carrying at all. Reference: str.count over the file's text, and over each block.
    (mutants: carry longest-2 characters; carry only for tokens longer than 2)"""
    path = tmp_path / "corpus.txt"
    text = "Next\nmore\nXavier\n"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setattr(tokenizer_training, "TEXT_BLOCK_CHARS", 1)
    blocks = list(tokenizer_training.iter_corpus(path))
    assert blocks == ["Next\nmore", "\nXavier", "\n"]
    assert text.count(special) == 1 and not any(special in block for block in blocks)
    with pytest.raises(ValueError, match=re.escape(f"special token {special!r} occurs as text in the corpus")):
        train_tokenizer(path, tmp_path / "tok", vocab_size=300, special_tokens=[special], show_progress=False)


def test_the_refusal_counts_in_good_english_and_suggests_a_name_other_than_the_token(tmp_path):
    """'<|sep|>' once: '1 time' (not '1 times'), and the suggested name is not '<|sep|>' itself.
    (mutants: plural at count > 0; _suggested_name returning the token)"""
    with pytest.raises(ValueError) as refusal:
        train_tokenizer(["a first document", "x <|sep|> y\n"], tmp_path / "tok", special_tokens=["<|sep|>"],
                        show_progress=False)
    message = str(refusal.value)
    assert "(at least 1 time, e.g. " in message
    suggested = re.search(r"like '([^']*)'", message).group(1)
    assert suggested != "<|sep|>" and suggested.startswith("<|") and suggested.endswith("|>")


def test_cli_special_tokens_drop_empty_items():
    """'<|pad|>,' or '<|pad|>,,<|sep|>' named no empty-string token (the old parser dropped empty items).
    (mutant: return every item, the empty ones too)"""
    from hf_gpt_custom.cli import _special_tokens

    assert _special_tokens("<|pad|>,,<|sep|>,") == ["<|pad|>", "<|sep|>"]
    assert _special_tokens("<|pad|>, <|sep|>") == ["<|pad|>", "<|sep|>"]
