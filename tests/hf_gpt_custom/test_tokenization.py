"""GPTCustomTokenizerFast: vocabulary layout, lossless round trips, special tokens, batching, files, remote code."""

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer, GPT2TokenizerFast

from hf_gpt_custom import GPTCustomTokenizerFast
from hf_gpt_custom.tokenization_gpt_custom import ENDOFTEXT, bytes_to_unicode
from hf_gpt_custom.tokenizer_training import train_tokenizer

VOCAB_SIZE = 1000


@pytest.fixture(scope="module")
def tokenizer_folder(shared_data_dir, tmp_path_factory):
    """Trained once per module on the first 200 KB of tiny Shakespeare, 1000 entries (0.3 s)."""
    text = (shared_data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:200_000]
    return train_tokenizer([text], tmp_path_factory.mktemp("tokenizer"), vocab_size=VOCAB_SIZE, show_progress=False)


@pytest.fixture(scope="module")
def tokenizer(tokenizer_folder):
    return GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)


@pytest.fixture(scope="module")
def held_out_text(shared_data_dir):
    """Text the tokenizer never saw: the end of tiny Shakespeare and the WikiText-2 test set."""
    shakespeare = (shared_data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[-30_000:]
    wiki = (shared_data_dir / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8")[:30_000]
    return shakespeare + wiki


# --- vocabulary layout -------------------------------------------------------------------------------------------


def test_vocabulary_is_bytes_then_merges_then_endoftext(tokenizer):
    vocab = tokenizer.get_vocab()
    byte_to_char = bytes_to_unicode()
    assert [vocab[byte_to_char[byte]] for byte in range(256)] == list(range(256))  # id b is byte b
    assert len(tokenizer) == VOCAB_SIZE
    assert tokenizer.eos_token == tokenizer.bos_token == ENDOFTEXT
    assert tokenizer.eos_token_id == tokenizer.bos_token_id == VOCAB_SIZE - 1  # last, like GPT-2's 50256
    assert tokenizer.unk_token is None and tokenizer.pad_token is None
    assert tokenizer.convert_ids_to_tokens([32, 10, 256]) == ["Ġ", "Ċ", tokenizer.convert_ids_to_tokens(256)]
    assert tokenizer.convert_ids_to_tokens(256) == "Ġt"  # the first merge learned on Shakespeare: ' ' + 't'


def test_encode_uses_gpt2_split_and_leading_space_belongs_to_the_word(tokenizer):
    tokens = tokenizer.tokenize("Hello world, it's 2024!")
    assert "".join(tokens) == "HelloĠworld,Ġit'sĠ2024!"
    # GPT-2's split: a space is glued to the front of the following word/number and never ends a token
    assert all("Ġ" not in token[1:] for token in tokens)
    assert "'s" in tokens and "Ġworld" in tokens  # the contraction is its own chunk
    assert tokenizer.encode("Hello") != tokenizer.encode(" Hello")
    assert tokenizer.encode("a") == [97]
    assert tokenizer.encode("") == []


# --- lossless on any input ---------------------------------------------------------------------------------------


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200))
def test_decode_of_encode_is_identity_for_any_unicode(tokenizer, text):
    # st.text() draws from all of Unicode except lone surrogates (which have no UTF-8 form; tested below)
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert all(0 <= token_id < len(tokenizer) for token_id in ids)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(max_size=50), min_size=1, max_size=8))
def test_batch_encoding_equals_one_by_one(tokenizer, texts):
    one_by_one = [tokenizer.encode(text) for text in texts]
    assert tokenizer(texts)["input_ids"] == one_by_one
    assert tokenizer.encode_ids_batch(texts) == one_by_one
    assert tokenizer.batch_decode(one_by_one) == texts


EDGE_CASES = {
    "empty": "",
    "emoji_zwj_family": "👨‍👩‍👧‍👦 and 🏳️‍🌈 and 👍🏽",
    "cjk": "漢字かなカナ한국어 中文测试",
    "combining_marks": "e\u0301 a\u0308 Z\u0351\u0352\u0357 n\u0303",
    "rtl": "مرحبا بالعالم שלום עולם \u202eevil\u202c",
    "control_chars": "\x01\x02\x07\x08\x1b[31mred\x1b[0m\x7f\x85",
    "nul": "a\x00b\x00\x00",
    "long_whitespace": " " * 1000 + "\t" * 50 + "\n" * 300 + "\r\n" * 20 + "\u3000\u00a0 x",
    "only_spaces": "     ",
    "bom_and_noncharacters": "\ufeffstart \ufffe\uffff \U0010ffff",
    "mixed_newlines": "a\rb\r\nc\nd\u2028e\u2029f",
    "special_looking_text": "x<|endoftext|>y <|endoftext|> <|endoftext",
}


@pytest.mark.parametrize("text", EDGE_CASES.values(), ids=EDGE_CASES.keys())
def test_named_edge_cases_round_trip(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == text


def test_real_held_out_text_round_trips(tokenizer, held_out_text):
    assert tokenizer.decode(tokenizer.encode(held_out_text)) == held_out_text


@pytest.mark.parametrize("bad", ["abc\ud800def", ["fine", "lone \udfff surrogate"]], ids=["single", "in_batch"])
def test_lone_surrogate_gets_a_clear_error(tokenizer, bad):
    with pytest.raises(ValueError, match=r"lone surrogate '\\ud[8f]..' \(U\+D[8F]..\) at position"):
        tokenizer(bad)
    with pytest.raises(ValueError, match="lone surrogate"):
        tokenizer.encode_ids_batch(bad if isinstance(bad, list) else [bad])


@pytest.mark.parametrize("bad", [42, 3.5, b"bytes", {"text": "x"}, ["ok", 7]], ids=["int", "float", "bytes", "dict", "list_with_int"])
def test_non_string_gets_a_clear_error(tokenizer, bad):
    with pytest.raises(ValueError, match=r"(is|\]) (int|float|bytes|dict)"):
        tokenizer(bad)


# --- special tokens ----------------------------------------------------------------------------------------------


def test_endoftext_inside_user_text_stays_text_by_default(tokenizer):
    ids = tokenizer("one<|endoftext|>two")["input_ids"]
    assert tokenizer.eos_token_id not in ids
    assert tokenizer.decode(ids) == "one<|endoftext|>two"
    assert tokenizer.tokenize("<|endoftext|>") != [ENDOFTEXT]


def test_endoftext_becomes_the_special_token_when_asked(tokenizer, tokenizer_folder):
    eos = tokenizer.eos_token_id
    opted_in = tokenizer("one<|endoftext|>two", split_special_tokens=False)["input_ids"]
    assert opted_in == tokenizer.encode("one") + [eos] + tokenizer.encode("two")
    loaded_opted_in = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder, split_special_tokens=False)
    assert loaded_opted_in("one<|endoftext|>two")["input_ids"] == opted_in
    # the default is restored on the next call without the flag
    assert eos not in tokenizer("one<|endoftext|>two")["input_ids"]


def test_document_separator_is_appended_by_id_and_decodes(tokenizer):
    ids = tokenizer.encode("To be.") + [tokenizer.eos_token_id]
    assert tokenizer.decode(ids) == "To be.<|endoftext|>"
    assert tokenizer.decode(ids, skip_special_tokens=True) == "To be."
    assert tokenizer.encode("To be.", add_special_tokens=True) == ids[:-1]  # no bos/eos added unless asked


# --- padding, truncation, tensors --------------------------------------------------------------------------------


def test_padding_truncation_and_tensors(tokenizer_folder):
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder, pad_token=ENDOFTEXT)
    texts = ["To be, or not to be", "Ay"]
    lengths = [len(tokenizer.encode(text)) for text in texts]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (2, max(lengths)) and batch["input_ids"].dtype == torch.long
    assert batch["attention_mask"].sum(dim=1).tolist() == lengths
    assert batch["input_ids"][1, lengths[1]:].eq(tokenizer.pad_token_id).all()

    left = tokenizer(texts, padding="max_length", max_length=12, padding_side="left", return_tensors="pt")
    assert left["input_ids"].shape == (2, 12) and left["attention_mask"][1, :-lengths[1]].eq(0).all()

    truncated = tokenizer(texts, truncation=True, max_length=3)["input_ids"]
    assert truncated[0] == tokenizer.encode(texts[0])[:3] and truncated[1] == tokenizer.encode(texts[1])[:3]
    assert tokenizer.batch_decode(batch["input_ids"], skip_special_tokens=True) == texts


CALL_OPTIONS = {
    "plain": {},
    "padded_tensors": {"padding": True, "return_tensors": "pt"},
    "left_max_length": {"padding": "max_length", "max_length": 40, "padding_side": "left", "truncation": True},
    "truncated_no_mask": {"truncation": True, "max_length": 7, "return_attention_mask": False},
    "pad_to_multiple": {"padding": True, "pad_to_multiple_of": 8, "return_tensors": "np"},
    "special_tokens_as_text_off": {"split_special_tokens": False},
}


@pytest.mark.parametrize("options", CALL_OPTIONS.values(), ids=CALL_OPTIONS.keys())
@pytest.mark.parametrize("batched", [True, False], ids=["batch", "single"])
def test_fast_call_path_matches_transformers_generic_path(tokenizer_folder, held_out_text, options, batched):
    """Our `__call__` skips transformers' per-sequence bookkeeping; GPT2TokenizerFast runs it. Same output."""
    ours = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder, pad_token=ENDOFTEXT)
    gpt2 = GPT2TokenizerFast.from_pretrained(tokenizer_folder, pad_token=ENDOFTEXT)
    texts = held_out_text[:3000].split("\n\n")[:6] + ["a<|endoftext|>b", ""]
    text = texts if batched else texts[0]
    ours_out, gpt2_out = ours(text, **options), gpt2(text, **options)
    assert sorted(ours_out.keys()) == sorted(gpt2_out.keys())
    for key in gpt2_out:
        expected = gpt2_out[key].tolist() if hasattr(gpt2_out[key], "tolist") else gpt2_out[key]
        actual = ours_out[key].tolist() if hasattr(ours_out[key], "tolist") else ours_out[key]
        assert actual == expected, key
        assert type(ours_out[key]) is type(gpt2_out[key])
    assert ours_out.tokens() == gpt2_out.tokens()


def test_offsets_char_mapping_and_pairs_still_work(tokenizer):
    text = "To be, or not"
    encoded = tokenizer(text, return_offsets_mapping=True)
    assert [text[start:end] for start, end in encoded["offset_mapping"]] == ["To", " be", ",", " or", " not"]
    assert tokenizer(text).char_to_token(3) == 1  # 'b' of ' be' (offsets are kept on the fast path too)
    pair = tokenizer("To be", "or not")["input_ids"]
    assert pair == tokenizer.encode("To be") + tokenizer.encode("or not")


def test_encode_ids_batch_never_pads_or_truncates_after_a_padded_call(tokenizer_folder):
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder, pad_token=ENDOFTEXT)
    texts = ["To be, or not to be", "Ay"]
    tokenizer(texts, padding="max_length", max_length=4, truncation=True)
    assert tokenizer.encode_ids_batch(texts) == [tokenizer.encode(text) for text in texts]
    assert len(tokenizer.encode_ids_batch(texts)[0]) > 4


def test_padding_without_pad_token_explains_the_fix(tokenizer):
    with pytest.raises(ValueError, match="pad"):
        tokenizer(["a", "bb cc"], padding=True)


# --- files -------------------------------------------------------------------------------------------------------


def test_save_pretrained_writes_gpt2_style_files(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    vocab = json.loads((tmp_path / "vocab.json").read_text(encoding="utf-8"))
    merges = (tmp_path / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == VOCAB_SIZE and vocab[ENDOFTEXT] == VOCAB_SIZE - 1 and vocab["Ġ"] == 32
    assert merges[0] == "#version: 0.2" and merges[1] == "Ġ t" and len(merges) == 1 + VOCAB_SIZE - 257
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["auto_map"]["AutoTokenizer"][1] == "tokenization_gpt_custom.GPTCustomTokenizerFast"
    assert (tmp_path / "tokenization_gpt_custom.py").is_file()


def test_gpt2_tokenizer_loads_our_folder_with_identical_ids(tokenizer_folder, tokenizer, held_out_text):
    gpt2 = GPT2TokenizerFast.from_pretrained(tokenizer_folder)
    assert gpt2(held_out_text)["input_ids"] == tokenizer(held_out_text)["input_ids"]
    assert gpt2.eos_token_id == tokenizer.eos_token_id and len(gpt2) == len(tokenizer)


def test_vocab_and_merges_files_alone_rebuild_the_tokenizer(tokenizer_folder, tokenizer, held_out_text, tmp_path):
    for name in ("vocab.json", "merges.txt"):
        (tmp_path / name).write_bytes((tokenizer_folder / name).read_bytes())
    rebuilt = GPTCustomTokenizerFast.from_pretrained(tmp_path)
    assert rebuilt(held_out_text)["input_ids"] == tokenizer(held_out_text)["input_ids"]
    assert rebuilt.eos_token_id == tokenizer.eos_token_id


def test_auto_tokenizer_loads_the_folder_in_process(tokenizer_folder, tokenizer, held_out_text):
    auto = AutoTokenizer.from_pretrained(tokenizer_folder)
    assert type(auto) is GPTCustomTokenizerFast
    assert auto(held_out_text)["input_ids"] == tokenizer(held_out_text)["input_ids"]


# Runs under the `python_without_project` fixture (tests/conftest.py): only the folder's copy of the module exists.
REMOTE_CODE_SCRIPT = r"""
import json, sys

from transformers import AutoTokenizer

folder, text = sys.argv[1], sys.argv[2]
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
assert "hf_gpt_custom" not in sys.modules
print(json.dumps({
    "class": type(tokenizer).__name__,
    "module": type(tokenizer).__module__,
    "ids": tokenizer(text)["input_ids"],
    "eos_token_id": tokenizer.eos_token_id,
    "len": len(tokenizer),
}))
"""


def test_remote_code_loads_where_hf_gpt_custom_is_not_installed(tokenizer_folder, tokenizer, python_without_project):
    text = "Wherefore art thou Romeo? 👋 <|endoftext|> 漢字"
    loaded = python_without_project(REMOTE_CODE_SCRIPT, tokenizer_folder, text)
    assert loaded["class"] == "GPTCustomTokenizerFast"
    assert loaded["module"].startswith("transformers_modules")  # the copy saved in the folder, not our package
    assert loaded["ids"] == tokenizer(text)["input_ids"]
    assert loaded["eos_token_id"] == tokenizer.eos_token_id and loaded["len"] == len(tokenizer)
