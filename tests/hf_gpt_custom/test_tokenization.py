"""GPTCustomTokenizerFast: vocabulary layout, lossless round trips, special tokens, batching, files, remote code."""

import json
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer, BatchEncoding, GPT2Tokenizer, GPT2TokenizerFast

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
    assert tokenizer.unk_token is None
    assert tokenizer.pad_token == ENDOFTEXT and tokenizer.pad_token_id == tokenizer.eos_token_id  # set by train_tokenizer
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
    assert tokenizer.encode_ids_batch(texts, split_special_tokens=False) == one_by_one  # __call__'s default
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
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    # kept as text, special-looking strings survive even skip_special_tokens (no special token was produced)
    as_text = tokenizer(text, split_special_tokens=True)["input_ids"]
    assert tokenizer.decode(as_text, skip_special_tokens=True) == text


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


@pytest.fixture(scope="module")
def gpt2_from_vocab_and_merges(tokenizer_folder, tmp_path_factory):
    """transformers' GPT2Tokenizer from our vocab.json + merges.txt alone: its own defaults, none of our config."""
    folder = tmp_path_factory.mktemp("gpt2_files")
    for name in ("vocab.json", "merges.txt"):
        (folder / name).write_bytes((tokenizer_folder / name).read_bytes())
    return GPT2Tokenizer.from_pretrained(folder)


def test_vocab_json_alone_holds_every_special_token_at_its_id_task_tokens_included(tokenizer_folder, tmp_path):
    """vocab.json lists the special tokens with their ids, as GPT-2's lists "<|endoftext|>": 50256, so the file
    alone is the whole vocabulary. <|endoftext|> is the last id, where a reader appends it anyway, so only a
    fine-tuned task tokenizer (<|delim|> and <|extract|> after it) shows whether they are written. Reference:
    transformers' GPT2Tokenizer from vocab.json + merges.txt alone, none of our files or config."""
    from hf_gpt_custom.task_template import DELIMITER_TOKEN, EXTRACT_TOKEN, install_task_template

    task = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    install_task_template(task)
    task.save_pretrained(tmp_path / "task")
    alone = tmp_path / "alone"
    alone.mkdir()
    for name in ("vocab.json", "merges.txt"):
        (alone / name).write_bytes((tmp_path / "task" / name).read_bytes())
    gpt2 = GPT2Tokenizer.from_pretrained(alone)
    assert gpt2.get_vocab() == task.get_vocab()
    for token in (ENDOFTEXT, DELIMITER_TOKEN, EXTRACT_TOKEN):
        assert gpt2.convert_tokens_to_ids(token) == task.convert_tokens_to_ids(token) >= VOCAB_SIZE - 1, token


def _gpt2_style_files(saved: Path, into: Path) -> Path:
    """The files a loader without tokenizer.json reads (GPT2Tokenizer, or ours without it), copied from `saved`."""
    into.mkdir()
    for name in ("vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json"):
        if name != "added_tokens.json" or (saved / name).is_file():  # none where no non-special token was added
            (into / name).write_bytes((saved / name).read_bytes())
    return into


def test_an_added_token_keeps_its_id_where_only_the_gpt2_style_files_are_read(tokenizer_folder, tmp_path):
    """A token added with add_tokens went into vocab.json as a plain entry and nowhere else: a loader of vocab.json +
    merges.txt (GPT2Tokenizer, or this class where tokenizer.json is absent) split it into bytes, other ids, with
    len() unchanged (the tokcall hunt). Reference: transformers' GPT2Tokenizer from the GPT-2-style files, which reads
    added_tokens.json as transformers' legacy format writes it; a tokenizer without added tokens writes none."""
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    tokenizer.save_pretrained(tmp_path / "plain")
    assert not (tmp_path / "plain" / "added_tokens.json").exists()
    tokenizer.add_tokens(["<tag>", "ROMEO-AND-JULIET"])
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|sep|>"]})
    tokenizer.save_pretrained(tmp_path / "task")
    added = json.loads((tmp_path / "task" / "added_tokens.json").read_text())
    assert added == {"<tag>": VOCAB_SIZE, "ROMEO-AND-JULIET": VOCAB_SIZE + 1}  # special ones are in the config
    legacy = _gpt2_style_files(tmp_path / "task", tmp_path / "legacy")
    text = "a <tag> b ROMEO-AND-JULIET <|sep|>"
    expected = tokenizer(text)["input_ids"]
    assert expected[2] == VOCAB_SIZE and VOCAB_SIZE + 1 in expected
    assert GPT2Tokenizer.from_pretrained(legacy)(text)["input_ids"] == expected
    assert GPTCustomTokenizerFast.from_pretrained(legacy)(text)["input_ids"] == expected
    assert GPTCustomTokenizerFast.from_pretrained(tmp_path / "task")(text)["input_ids"] == expected

    # a token added with a text the vocabulary already learned keeps its id and is matched before BPE: it was left
    # out of both records, and a loader of the GPT-2 files split it by the merges (the tokhostile2 hunt)
    from tokenizers import AddedToken

    learned = max((token for token in tokenizer.get_vocab() if len(token) > 2 and token.isalpha()),
                  key=tokenizer.convert_tokens_to_ids)
    again = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    again.add_tokens([AddedToken(learned, lstrip=True)])  # its flag lives in the config's added_tokens_decoder only
    again.save_pretrained(tmp_path / "readded")
    text = f"x{learned}{learned}y   {learned}"
    expected = again(text)["input_ids"]
    assert expected != GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)(text)["input_ids"]  # it matters
    legacy = _gpt2_style_files(tmp_path / "readded", tmp_path / "legacy_readded")
    assert GPT2Tokenizer.from_pretrained(legacy)(text)["input_ids"] == expected
    assert GPTCustomTokenizerFast.from_pretrained(legacy)(text)["input_ids"] == expected
    # a special one with single_word: without the config's record it came back bare, matched inside words
    special = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    special.add_special_tokens({"additional_special_tokens": [AddedToken(learned, single_word=True)]})
    special.save_pretrained(tmp_path / "special")
    text = f"x{learned}{learned}y {learned} z"
    expected = special(text)["input_ids"]
    assert GPTCustomTokenizerFast.from_pretrained(
        _gpt2_style_files(tmp_path / "special", tmp_path / "legacy_special"))(text)["input_ids"] == expected


def test_an_added_tokens_strip_flags_reach_a_loader_of_the_gpt2_style_files(tokenizer_folder, tmp_path):
    """added_tokens.json holds content -> id only, so a token added with lstrip/rstrip=True took the spaces around it
    under tokenizer.json but not where only the GPT-2-style files are read (roundreview9). Reference: transformers'
    GPT2Tokenizer from those files and tokenizer_config.json, which reads `added_tokens_decoder` with its flags."""
    from tokenizers import AddedToken

    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    tokenizer.add_tokens([AddedToken("<tag>", lstrip=True, rstrip=True)])
    tokenizer.save_pretrained(tmp_path / "task")
    legacy = _gpt2_style_files(tmp_path / "task", tmp_path / "legacy")
    text = "a <tag> b"
    expected = tokenizer(text)["input_ids"]
    assert expected == tokenizer("a")["input_ids"] + [VOCAB_SIZE] + tokenizer("b")["input_ids"]  # both spaces taken
    assert GPT2Tokenizer.from_pretrained(legacy)(text)["input_ids"] == expected
    assert GPTCustomTokenizerFast.from_pretrained(legacy)(text)["input_ids"] == expected
    reloaded = GPTCustomTokenizerFast.from_pretrained(tmp_path / "task")
    assert reloaded(text)["input_ids"] == expected and reloaded.added_tokens_decoder == tokenizer.added_tokens_decoder


SPECIAL_TEXT = ["To be." + ENDOFTEXT, "one<|endoftext|>two", ENDOFTEXT, "x<|endoftext|>y <|endoftext|> <|endoftext",
                "<|endoftext|><|endoftext|> a"]


@pytest.mark.parametrize("text", SPECIAL_TEXT)
def test_literal_special_token_text_becomes_the_special_token_like_gpt2(tokenizer, gpt2_from_vocab_and_merges, text):
    assert gpt2_from_vocab_and_merges.eos_token_id == tokenizer.eos_token_id
    assert tokenizer(text)["input_ids"] == gpt2_from_vocab_and_merges(text)["input_ids"]
    assert tokenizer(text, split_special_tokens=True)["input_ids"] == gpt2_from_vocab_and_merges(
        text, split_special_tokens=True)["input_ids"]


def test_text_plus_eos_token_ends_with_the_eos_id(tokenizer):
    # the fine-tuning recipe: tokenizer(text + tokenizer.eos_token)
    ids = tokenizer("To be, or not to be" + tokenizer.eos_token)["input_ids"]
    assert ids == tokenizer.encode("To be, or not to be") + [tokenizer.eos_token_id]
    assert tokenizer("one<|endoftext|>two")["input_ids"] == tokenizer.encode("one") + [tokenizer.eos_token_id] + \
        tokenizer.encode("two")


def test_special_token_text_stays_text_when_asked(tokenizer, tokenizer_folder):
    eos = tokenizer.eos_token_id
    as_text = tokenizer("one<|endoftext|>two", split_special_tokens=True)["input_ids"]
    assert eos not in as_text and tokenizer.decode(as_text) == "one<|endoftext|>two"
    loaded_as_text = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder, split_special_tokens=True)
    assert loaded_as_text("one<|endoftext|>two")["input_ids"] == as_text
    assert loaded_as_text.tokenize(ENDOFTEXT) != [ENDOFTEXT]
    # the default is restored on the next call without the flag
    assert eos in tokenizer("one<|endoftext|>two")["input_ids"]


def test_corpus_path_keeps_special_token_text_as_text(tokenizer):
    texts = ["one<|endoftext|>two", "a <|endoftext|>"]
    as_text = tokenizer(texts, split_special_tokens=True)["input_ids"]
    assert tokenizer.encode_ids_batch(texts) == as_text  # the default of encode_ids_batch, whatever __call__ does
    assert tokenizer.encode_ids_batch(texts, split_special_tokens=False) == tokenizer(texts)["input_ids"]


def test_training_pipeline_ends_each_document_with_one_eos_and_keeps_literal_eos_as_text(tokenizer):
    import datasets

    from hf_gpt_custom.training.data import tokenize_documents

    documents = datasets.Dataset.from_dict({"text": ["Romeo wrote <|endoftext|> here.", "Juliet"]})
    tokenized = tokenize_documents(documents, tokenizer)["input_ids"]
    for text, ids in zip(documents["text"], tokenized):
        assert ids == tokenizer(text, split_special_tokens=True)["input_ids"] + [tokenizer.eos_token_id]
        assert ids.count(tokenizer.eos_token_id) == 1


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
    "max_length_padding": {"padding": "max_length", "max_length": 40, "padding_side": "left", "truncation": True},
    "truncated_no_mask": {"truncation": True, "max_length": 7, "return_attention_mask": False},
    "truncated_to_nothing": {"truncation": True, "max_length": 0},
    "only_first": {"truncation": "only_first", "max_length": 5, "padding": True},
    "stride": {"truncation": True, "max_length": 7, "stride": 2},  # the backend's own path: it checks the stride
    "pad_to_multiple": {"padding": True, "pad_to_multiple_of": 8, "return_tensors": "np"},
    "multiple_of_max_length": {"padding": "max_length", "max_length": 48, "pad_to_multiple_of": 16, "truncation": True},
    # max_length itself not a multiple (transformers refuses that with truncation): the backend pads the shorter rows
    # past it, to the next multiple (48)
    "max_length_rounded_up_to_the_multiple": {"padding": "max_length", "max_length": 45, "pad_to_multiple_of": 16},
    "special_tokens_as_text": {"split_special_tokens": True},
    "no_special_tokens_added": {"add_special_tokens": False, "padding": "longest"},
}


@pytest.fixture(scope="module")
def call_texts(held_out_text):
    """Real paragraphs (tiny Shakespeare, WikiText-2), the unicode edge cases, special-token text, empty strings."""
    return held_out_text.split("\n\n")[::8][:60] + list(EDGE_CASES.values()) + SPECIAL_TEXT + [""]


@pytest.mark.parametrize("options", CALL_OPTIONS.values(), ids=CALL_OPTIONS.keys())
@pytest.mark.parametrize("truncation_side", ["right", "left"])
@pytest.mark.parametrize("batched", [True, False], ids=["batch", "single"])
def test_call_gives_transformers_output_of_the_tokenizers_backend(tokenizer_folder, call_texts, options,
                                                                  truncation_side, batched):
    """Our `__call__` takes its ids from tiktoken; GPT2TokenizerFast from the same files runs transformers' own code
    on the Rust backend. Same keys, values, types, tokens and word ids."""
    ours = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder, truncation_side=truncation_side)
    gpt2 = GPT2TokenizerFast.from_pretrained(tokenizer_folder, pad_token=ENDOFTEXT, truncation_side=truncation_side)
    assert ours.encode_ids_engine(split_special_tokens=False) == "tiktoken"
    text = call_texts if batched else call_texts[0]
    ours_out, gpt2_out = ours(text, **options), gpt2(text, **options)
    assert sorted(ours_out.keys()) == sorted(gpt2_out.keys())
    for key in gpt2_out:
        expected = gpt2_out[key].tolist() if hasattr(gpt2_out[key], "tolist") else gpt2_out[key]
        actual = ours_out[key].tolist() if hasattr(ours_out[key], "tolist") else ours_out[key]
        assert actual == expected, key
        assert type(ours_out[key]) is type(gpt2_out[key])
    rows = len(call_texts) if batched else 1
    assert [ours_out.tokens(row) for row in range(rows)] == [gpt2_out.tokens(row) for row in range(rows)]
    assert ours_out.word_ids(rows - 1) == gpt2_out.word_ids(rows - 1)
    assert ours_out.n_sequences == gpt2_out.n_sequences == 1


class _CountingBackend:
    """Forwards everything to a `tokenizers.Tokenizer` and records which of its encode methods are called."""

    def __init__(self, backend):
        object.__setattr__(self, "backend", backend)
        object.__setattr__(self, "encode_calls", [])

    def __getattr__(self, name):
        if name.startswith("encode") and name != "encode_special_tokens":
            self.encode_calls.append(name)
        return getattr(self.backend, name)

    def __setattr__(self, name, value):
        setattr(self.backend, name, value)


def test_call_runs_on_tiktoken_and_makes_encodings_only_when_asked(tokenizer_folder, call_texts):
    import copy
    import pickle

    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    reference = GPT2TokenizerFast.from_pretrained(tokenizer_folder)(call_texts, padding=True, return_tensors="pt")
    backend = tokenizer._tokenizer = _CountingBackend(tokenizer._tokenizer)
    batch = tokenizer(call_texts, padding=True, return_tensors="pt")
    assert torch.equal(batch["input_ids"], reference["input_ids"]) and backend.encode_calls == []
    assert batch.tokens(3) == reference.tokens(3) and backend.encode_calls == ["encode_batch"]  # made once, when asked
    assert batch[5].offsets == reference[5].offsets and backend.encode_calls == ["encode_batch"]
    for restored in (pickle.loads(pickle.dumps(batch)), copy.deepcopy(batch)):  # a plain BatchEncoding, encodings kept
        assert type(restored) is BatchEncoding and restored.tokens(3) == reference.tokens(3)
        assert torch.equal(restored["attention_mask"], reference["attention_mask"])
    tokenizer(call_texts, return_offsets_mapping=True)  # offsets need the backend's Encodings: its own path
    assert backend.encode_calls == ["encode_batch", "encode_batch"]
    # Encodings made later follow the settings the call had, not the tokenizer's settings of then
    batch = tokenizer(call_texts, padding=True)
    tokenizer.split_special_tokens, tokenizer.padding_side = True, "left"
    assert [encoding.ids for encoding in batch.encodings] == batch["input_ids"]


def test_encodings_made_later_describe_the_calls_text_not_the_callers_list_now(tokenizer_folder):
    """Encodings are made on first use, after the call returned: a caller that reuses its list in between got the
    tokens of its new text beside the ids of the old. Reference: the `tokenizers` library on the text of the call."""
    from tokenizers import Tokenizer

    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    reference = Tokenizer.from_file(str(tokenizer_folder / "tokenizer.json"))
    texts = ["ROMEO: But soft", "what light through yonder window"]
    batch = tokenizer(texts, padding=True)
    expected = [e.tokens for e in reference.encode_batch(texts, add_special_tokens=False)]
    texts[0] = "completely different words here now"
    assert batch.tokens(0)[: len(expected[0])] == expected[0] and batch.tokens(1) == expected[1]
    assert [encoding.ids for encoding in batch.encodings] == batch["input_ids"]


def test_encodings_made_later_leave_the_tokenizers_truncation_side_as_the_caller_set_it(tokenizer_folder):
    """Encodings made on first use run the backend with the call's truncation side, then must put the tokenizer's
    own back: the caller switched it to "left" in between, and every later call must truncate from the left.
    Reference: GPT2TokenizerFast created with truncation_side="left"."""
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    texts = ["ROMEO: But soft, what light through yonder window breaks", "It is the east"]
    batch = tokenizer(texts, truncation=True, max_length=3)  # cut from the right
    tokenizer.truncation_side = "left"
    assert [encoding.ids for encoding in batch.encodings] == batch["input_ids"]
    assert tokenizer.truncation_side == "left"
    gpt2 = GPT2TokenizerFast.from_pretrained(tokenizer_folder, truncation_side="left")
    assert tokenizer(texts, truncation=True, max_length=3)["input_ids"] == \
        gpt2(texts, truncation=True, max_length=3)["input_ids"]


def test_encodings_made_later_pad_with_the_calls_pad_token_and_leave_the_new_one_set(tokenizer_folder):
    """A pad token set to another existing token after a padded call (nothing added, so the tokenizer's pipeline is
    the same) gave Encodings padded with the new one: tokens() ['H', 'i', 'a', 'a'] beside input_ids padded with
    <|endoftext|> (the offsets hunt). Reference: GPT2TokenizerFast, whose Encodings are made during the call."""
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    gpt2 = GPT2TokenizerFast.from_pretrained(tokenizer_folder, pad_token=ENDOFTEXT)
    texts = ["ROMEO: But soft, what light", "Hi"]
    ours, theirs = tokenizer(texts, padding=True), gpt2(texts, padding=True)
    another = tokenizer.convert_ids_to_tokens(97)
    tokenizer.pad_token = gpt2.pad_token = another
    assert [encoding.ids for encoding in ours.encodings] == ours["input_ids"] == theirs["input_ids"]
    assert ours.tokens(1) == theirs.tokens(1) and ours.tokens(1)[-1] == ENDOFTEXT
    assert tokenizer.pad_token == another and tokenizer(texts, padding=True)["input_ids"] == \
        gpt2(texts, padding=True)["input_ids"]


@pytest.mark.parametrize("change", ["add_tokens", "task_template", "add_bos_token"])
def test_encodings_asked_for_after_the_tokenizer_changed_are_refused(tokenizer_folder, change):
    """Made after `add_tokens` (or a task template installed) they described other ids than input_ids: tokens()
    ['he', 'll', 'o', 'Ġ', 'world'] beside the 4 ids of 'hello world'. GPT2TokenizerFast made them at call time."""
    from hf_gpt_custom.task_template import install_task_template

    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    gpt2 = GPT2TokenizerFast.from_pretrained(tokenizer_folder)
    unchanged = tokenizer(["hello world"])
    assert unchanged.tokens(0) == gpt2(["hello world"]).tokens(0)  # the same tokenizer after the call: made lazily
    batch = tokenizer(["hello world"])
    if change == "add_tokens":
        tokenizer.add_tokens(["world"])
    elif change == "task_template":
        install_task_template(tokenizer)
    else:  # the post-processor alone changes: a <|endoftext|> in front
        tokenizer.add_bos_token = True
    with pytest.raises(ValueError, match=r"the tokenizer changed \(an added token, a template, a normalizer\) after "
                                         r"this output was made.*call the tokenizer again"):
        batch.tokens(0)
    again = tokenizer(["hello world"])  # a new call describes its own ids
    assert tokenizer.convert_tokens_to_ids(again.tokens(0)) == again["input_ids"][0]


@pytest.mark.parametrize("options", [
    {"truncation": True, "max_length": -1}, {"padding": True, "pad_to_multiple_of": -8},
    {"truncation": True, "max_length": -1, "return_offsets_mapping": True},  # the backend's path: an OverflowError
    {"truncation": True, "max_length": -1, "return_overflowing_tokens": True},
], ids=["cut", "pad", "offsets", "overflowing"])
def test_a_negative_length_is_refused_not_cut_from_the_other_end(tokenizer_folder, options):
    """max_length=-1 returned all but the last token (the left side: none); GPT2TokenizerFast raises OverflowError."""
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    name = next(key for key in options if key in ("max_length", "pad_to_multiple_of"))
    with pytest.raises(ValueError, match=rf"{name}={options[name]} is negative; give a number of tokens >= 0"):
        tokenizer(["To be, or not to be", "a"], **options)
    assert tokenizer("To be", truncation=True, max_length=0)["input_ids"] == \
        GPT2TokenizerFast.from_pretrained(tokenizer_folder)("To be", truncation=True, max_length=0)["input_ids"]


@pytest.mark.parametrize("options", [{"padding": "max_length", "max_length": -1}, {"pad_to_multiple_of": -2}],
                         ids=["max_length", "multiple"])
def test_pad_refuses_a_negative_length_instead_of_not_padding(tokenizer_folder, options):
    """GPT2TokenizerFast.pad leaves the rows ragged (max_length=-1) or pads nothing (-2): no error, no padding."""
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    rows = {"input_ids": [[1, 2, 3], [4]]}
    name = next(iter(key for key in options if key != "padding"))
    with pytest.raises(ValueError, match=rf"{name}={options[name]} is negative"):
        tokenizer.pad(rows, **options)
    padded = tokenizer.pad(rows, padding="max_length", max_length=4)  # positive lengths pad as transformers pads
    reference = GPT2TokenizerFast.from_pretrained(tokenizer_folder, pad_token=ENDOFTEXT,
                                                  padding_side=tokenizer.padding_side)
    assert padded["input_ids"] == reference.pad(rows, padding="max_length", max_length=4)["input_ids"]


def test_pairs_without_a_task_template_take_the_backends_path(tokenizer_folder):
    ours = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    gpt2 = GPT2TokenizerFast.from_pretrained(tokenizer_folder, pad_token=ENDOFTEXT)
    firsts, seconds = ["To be, or not to be", "Ay"], ["that is the question", "methinks the lady doth protest"]
    for options in ({}, {"truncation": True, "max_length": 6}, {"truncation": "only_second", "max_length": 9}):
        assert ours(firsts, seconds, **options)["input_ids"] == gpt2(firsts, seconds, **options)["input_ids"]
    assert ours(list(zip(firsts, seconds)))["input_ids"] == gpt2(list(zip(firsts, seconds)))["input_ids"]


def test_a_bos_eos_template_of_the_same_shape_as_gpt1s_is_not_taken_for_it(tokenizer_folder):
    """`<|endoftext|> $A <|endoftext|>` has GPT-1's shape (start, text, end; a token between a pair's parts): it was
    read as fine-tuning's template, so truncation kept the text's end where GPT2TokenizerFast keeps its start, and
    text holding `<|endoftext|>` was refused. Reference: GPT2TokenizerFast with the same post-processor."""
    from tokenizers import processors

    ours = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    gpt2 = GPT2TokenizerFast.from_pretrained(tokenizer_folder, pad_token=ENDOFTEXT)
    end = ours.convert_tokens_to_ids(ENDOFTEXT)
    for tokenizer in (ours, gpt2):
        tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{ENDOFTEXT} $A {ENDOFTEXT}", pair=f"{ENDOFTEXT} $A {ENDOFTEXT} $B:1 {ENDOFTEXT}",
            special_tokens=[(ENDOFTEXT, end)])
    text, second = "To be, or not to be, that is the question", "Whether 'tis nobler in the mind"
    for options in ({}, {"truncation": True, "max_length": 6}):
        assert ours(text, **options)["input_ids"] == gpt2(text, **options)["input_ids"]
        assert ours(text, second, **options)["input_ids"] == gpt2(text, second, **options)["input_ids"]
    assert ours(f"a{ENDOFTEXT}b")["input_ids"] == gpt2(f"a{ENDOFTEXT}b")["input_ids"]


def test_offsets_char_mapping_and_pairs_still_work(tokenizer):
    text = "To be, or not"
    encoded = tokenizer(text, return_offsets_mapping=True)
    assert [text[start:end] for start, end in encoded["offset_mapping"]] == ["To", " be", ",", " or", " not"]
    assert tokenizer(text).char_to_token(3) == 1  # 'b' of ' be' (offsets are kept on the fast path too)
    pair = tokenizer("To be", "or not")["input_ids"]
    assert pair == tokenizer.encode("To be") + tokenizer.encode("or not")


@pytest.mark.parametrize("engine", ["tiktoken", "tokenizers"])
def test_encode_ids_batch_never_pads_or_truncates_after_a_padded_call(tokenizer_folder, engine, monkeypatch):
    if engine == "tokenizers":
        monkeypatch.setitem(sys.modules, "tiktoken", None)  # `import tiktoken` fails: the Rust tokenizers path runs
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder, pad_token=ENDOFTEXT)
    assert tokenizer.encode_ids_engine() == engine
    texts = ["To be, or not to be", "Ay"]
    tokenizer(texts, padding="max_length", max_length=4, truncation=True)
    assert tokenizer.encode_ids_batch(texts) == [tokenizer.encode(text) for text in texts]
    assert len(tokenizer.encode_ids_batch(texts)[0]) > 4


def test_padding_without_pad_token_explains_the_fix(tokenizer_folder):
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder, pad_token=None)
    with pytest.raises(ValueError, match="pad"):
        tokenizer(["a", "bb cc"], padding=True)


def test_trained_folder_pads_with_eos_and_truncates(tokenizer):
    texts = ["To be, or not to be", "Ay"]
    lengths = [len(tokenizer.encode(text)) for text in texts]
    batch = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    assert batch["input_ids"].shape == (2, max(lengths))
    assert batch["input_ids"][1, lengths[1]:].eq(tokenizer.eos_token_id).all()  # pad = eos, on the right by default
    ay = tokenizer.encode("Ay")
    assert len(ay) < 3 and tokenizer(texts, padding=True, truncation=True, max_length=3)["input_ids"] == [
        tokenizer.encode(texts[0])[:3], ay + [tokenizer.eos_token_id] * (3 - len(ay))]


@pytest.fixture(scope="module")
def model_style_folder(tokenizer_folder, tmp_path_factory):
    """The tokenizer as a model folder carries it (train's final/, export): context length, pad = eos, left side."""
    folder = tmp_path_factory.mktemp("with_model")
    GPTCustomTokenizerFast.from_pretrained(tokenizer_folder, model_max_length=16, padding_side="left").save_pretrained(
        folder)
    return folder


@pytest.mark.parametrize("generic_path", [False, True], ids=["fast_call", "generic_call"])
def test_model_max_length_padding_side_and_pad_token_round_trip(model_style_folder, held_out_text, generic_path):
    loaded = AutoTokenizer.from_pretrained(model_style_folder)
    assert (loaded.model_max_length, loaded.padding_side, loaded.pad_token) == (16, "left", ENDOFTEXT)
    texts = [held_out_text[:500], "Ay"]
    options = {"return_offsets_mapping": True} if generic_path else {}  # offsets take transformers' generic path
    batch = loaded(texts, padding=True, truncation=True, **options)
    assert batch["input_ids"][0] == loaded.encode(texts[0])[:16]  # cut to model_max_length
    ay = loaded.encode("Ay")
    assert batch["input_ids"][1] == [loaded.eos_token_id] * (16 - len(ay)) + ay  # padded on the left
    assert batch["attention_mask"][1] == [0] * (16 - len(ay)) + [1] * len(ay)


def test_batched_generation_with_the_saved_tokenizer_matches_one_prompt_at_a_time(model_style_folder, tmp_path):
    """Each prompt gets the continuation it gets alone: `generate` needs the folder's left padding (right padding
    would continue after the pad tokens), the text-generation pipeline needs its pad token."""
    from transformers import pipeline

    tokenizer = AutoTokenizer.from_pretrained(model_style_folder)
    model = AutoModelForCausalLM.from_pretrained(save_tiny_model(tmp_path, vocab_size=len(tokenizer))).eval()
    tokenizer.save_pretrained(tmp_path)
    prompts = ["To be, or not to be, that is", "Ay"]
    options = {"max_new_tokens": 4, "do_sample": False}

    def continuation(batch, row: int = 0) -> list[int]:
        with torch.no_grad():
            output = model.generate(**batch, **options, pad_token_id=tokenizer.pad_token_id)
        return output[row, batch["input_ids"].shape[1]:].tolist()

    batch = tokenizer(prompts, padding=True, return_tensors="pt")
    assert [continuation(batch, row) for row in range(2)] == [
        continuation(tokenizer([prompt], return_tensors="pt")) for prompt in prompts]

    generator = pipeline("text-generation", model=str(tmp_path), device="cpu")
    batched = generator(prompts, batch_size=2, return_full_text=False, **options)
    assert [result[0]["generated_text"] for result in batched] == [
        generator(prompt, return_full_text=False, **options)[0]["generated_text"] for prompt in prompts]


def save_tiny_model(folder, vocab_size: int = 1000):
    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM

    config = GPTCustomConfig(vocab_size=vocab_size, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                             bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1)
    GPTCustomForCausalLM(config).save_pretrained(folder)
    return folder


def test_model_folder_without_tokenizer_files_is_refused_naming_them(tmp_path):
    """Not the 257-token bytes-only vocabulary, which evaluated with exit 0 and wrong numbers (issue 13)."""
    from hf_gpt_custom.errors import MissingFileError

    folder = save_tiny_model(tmp_path / "model")
    message = r"model has no tokenizer vocabulary: missing tokenizer.json, vocab.json, merges.txt"
    with pytest.raises(MissingFileError, match=message):
        AutoTokenizer.from_pretrained(folder)
    with pytest.raises(MissingFileError, match=message):
        GPTCustomTokenizerFast.from_pretrained(folder)
    from hf_gpt_custom.eval.runner import load_model_and_tokenizer

    with pytest.raises(MissingFileError, match=message):
        load_model_and_tokenizer(str(folder), None, "cpu", "float32")


def test_vocab_json_without_merges_is_refused(tokenizer_folder, tmp_path):
    from hf_gpt_custom.errors import MissingFileError

    (tmp_path / "vocab.json").write_bytes((tokenizer_folder / "vocab.json").read_bytes())
    with pytest.raises(MissingFileError, match="missing tokenizer.json, merges.txt"):
        GPTCustomTokenizerFast.from_pretrained(tmp_path)


def test_merges_of_hash_tokens_are_read_from_merges_txt_as_the_tokenizers_library_reads_them(tmp_path):
    """Only merges.txt's "#version" header is a comment: a tokenizer trained on Markdown or code learns merges of "#"
    tokens ("# #", "## #"), and reading every line starting with "#" as a comment encoded "### Usage" as three bytes
    from vocab.json + merges.txt, other ids than the model was trained on (found by the mutsweep2 hunt). No other
    tested vocabulary had such a merge. Reference: the `tokenizers` library (BPE.from_file) and transformers'
    GPT2TokenizerFast reading the same two files, and the tokenizer.json of the same training."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import BPE

    trained = train_tokenizer(["## Install\n### Usage\n#### Notes\n# comment ## more ### headings"] * 200
                              + ["plain words here"] * 50, tmp_path / "trained", vocab_size=300, show_progress=False)
    merges = (trained / "merges.txt").read_text(encoding="utf-8").split("\n")
    assert merges[0].startswith("#version") and "# #" in merges[1:]
    files = tmp_path / "files"
    files.mkdir()
    for name in ("vocab.json", "merges.txt"):
        (files / name).write_bytes((trained / name).read_bytes())
    reference = Tokenizer(BPE.from_file(str(files / "vocab.json"), str(files / "merges.txt")))
    reference.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    text = "### Usage\n## Install # one\n#### Notes"
    expected = reference.encode(text).ids
    assert len(expected) < len(text.encode()) - 5  # the "#" merges apply
    assert GPT2TokenizerFast.from_pretrained(str(files))(text)["input_ids"] == expected
    assert GPTCustomTokenizerFast.from_pretrained(trained)(text)["input_ids"] == expected
    assert GPTCustomTokenizerFast.from_pretrained(files)(text)["input_ids"] == expected
    assert GPTCustomTokenizerFast(vocab=str(files / "vocab.json"), merges=str(files / "merges.txt"))(
        text)["input_ids"] == expected


@pytest.mark.parametrize("trust_remote_code", [False, True])
def test_tokenizer_json_alone_is_enough(tokenizer_folder, tokenizer, held_out_text, tmp_path, trust_remote_code):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((tokenizer_folder / name).read_bytes())
    loaded = GPTCustomTokenizerFast.from_pretrained(tmp_path, trust_remote_code=trust_remote_code)
    assert loaded(held_out_text)["input_ids"] == tokenizer(held_out_text)["input_ids"]


def test_bytes_only_vocabulary_must_be_asked_for():
    from hf_gpt_custom.errors import MissingFileError

    with pytest.raises(MissingFileError, match=r"bytes_only\(\)"):
        GPTCustomTokenizerFast()
    bytes_only = GPTCustomTokenizerFast.bytes_only()
    assert len(bytes_only) == 257 and bytes_only.eos_token_id == 256
    assert bytes_only.encode("héllo") == list("héllo".encode("utf-8"))


@pytest.fixture(scope="module")
def task_folder(tokenizer_folder, tmp_path_factory):
    """The tokenizer as fine-tuning saves it: with the delimiter and extract tokens and GPT-1's template."""
    from hf_gpt_custom.task_template import install_task_template

    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    install_task_template(tokenizer)
    folder = tmp_path_factory.mktemp("task_tokenizer")
    tokenizer.save_pretrained(folder)
    return folder


def test_task_tokenizer_without_truncation_gives_transformers_output(task_folder, call_texts):
    """GPT2TokenizerFast on the same folder applies the saved post-processor in Rust: the reference for the
    template's ids, masks, padding and tokens on every input shape."""
    ours = GPTCustomTokenizerFast.from_pretrained(task_folder)
    gpt2 = GPT2TokenizerFast.from_pretrained(task_folder, pad_token=ENDOFTEXT)
    firsts, seconds = call_texts[:20], call_texts[20:40]
    calls = [((firsts[0],), {}), ((firsts[0], seconds[0]), {}), ((firsts,), {"padding": True}),
             ((firsts, seconds), {"padding": True, "return_tensors": "pt"}), ((list(zip(firsts, seconds)),), {}),
             ((firsts,), {"add_special_tokens": False})]
    for args, options in calls:
        ours_out, gpt2_out = ours(*args, split_special_tokens=True, **options), gpt2(
            *args, split_special_tokens=True, **options)
        assert {key: str(value) for key, value in ours_out.items()} == {
            key: str(value) for key, value in gpt2_out.items()}, (args, options)
        assert ours_out.tokens() == gpt2_out.tokens() and ours_out.n_sequences == gpt2_out.n_sequences


@pytest.mark.parametrize("options", [{}, {"truncation": True, "max_length": 12}, {"return_offsets_mapping": True},
                                     {"return_tensors": "pt"}])
def test_a_task_tokenizer_reads_an_empty_second_text_as_the_pair_fine_tuning_built(task_folder, options):
    """tokenizer(premise, "") dropped the delimiter (start premise extract), as transformers reads "" as no pair,
    while fine-tuning built that record as start premise delim extract and the batched call gave that: a
    text-classification pipeline given text_pair="" scored an input its head never saw (the tokcall hunt).
    Reference: TaskTemplate.build on the backend's ids of each part (fine-tuning's encoding), and
    GPT2TokenizerFast's own batched call on the folder."""
    from hf_gpt_custom.task_template import read_task_template

    tokenizer = GPTCustomTokenizerFast.from_pretrained(task_folder)
    template = read_task_template(tokenizer._tokenizer)
    premise = "A man sleeps."
    part = tokenizer.backend_tokenizer.encode(premise, add_special_tokens=False).ids
    trained = template.build(part, [], options.get("max_length"))[0]
    single, batched = tokenizer(premise, "", **options), tokenizer([premise], [""], **options)
    ids, batched_ids = single["input_ids"], batched["input_ids"][0]
    if options.get("return_tensors"):  # kept batched, as transformers keeps a single input's tensors
        ids, batched_ids = ids.tolist()[0], batched_ids.tolist()
    assert ids == trained == batched_ids and template.delimiter in ids
    if not options.get("truncation"):
        gpt2 = GPT2TokenizerFast.from_pretrained(task_folder)([premise], [""], **options)
        assert single.tokens() == gpt2.tokens() and single.n_sequences == 2
        if options.get("return_offsets_mapping"):
            assert single["offset_mapping"] == gpt2["offset_mapping"][0]
    assert tokenizer(premise)["input_ids"] != ids  # one text alone is the single template, as before


def test_a_task_tokenizers_truncated_output_says_why_it_has_no_encodings(task_folder):
    """A truncated call on a task tokenizer cuts as fine-tuning did (docs: `.encodings` is then None); its word_ids()
    said "not available when using Python based tokenizers", which is not the reason (the offsets hunt). The same
    call without truncation has them, equal to GPT2TokenizerFast's on the folder."""
    import pickle

    from hf_gpt_custom.errors import UserError

    tokenizer = GPTCustomTokenizerFast.from_pretrained(task_folder)
    cut = tokenizer("short text", truncation=True, max_length=16)
    assert cut.encodings is None
    for read in (cut.word_ids, cut.tokens, cut.sequence_ids, lambda: cut.char_to_token(0)):
        with pytest.raises(UserError, match="truncated call cuts the input as fine-tuning did.*without truncation"):
            read()
    assert pickle.loads(pickle.dumps(cut))["input_ids"] == cut["input_ids"]
    whole = tokenizer("short text")
    assert whole.word_ids() == GPT2TokenizerFast.from_pretrained(task_folder)("short text").word_ids()


@pytest.mark.parametrize("engine", ["tiktoken", "tokenizers"])
def test_task_template_ids_do_not_depend_on_the_engine(task_folder, call_texts, engine, monkeypatch):
    """The template and its cut on ids from the Rust backend (no tiktoken, as on a machine without it) equal
    TaskTemplate.build on the backend's ids of each part."""
    from hf_gpt_custom.task_template import read_task_template

    if engine == "tokenizers":
        monkeypatch.setitem(sys.modules, "tiktoken", None)
    tokenizer = GPTCustomTokenizerFast.from_pretrained(task_folder)
    assert tokenizer.encode_ids_engine() == engine
    template = read_task_template(tokenizer.backend_tokenizer)
    firsts, seconds = call_texts[:20], call_texts[20:40]
    parts = GPT2TokenizerFast.from_pretrained(task_folder)([*firsts, *seconds], add_special_tokens=False,
                                                           split_special_tokens=True)["input_ids"]
    for max_length in (None, 12, 4):
        options = {} if max_length is None else {"truncation": True, "max_length": max_length}
        expected = [template.build(first, second, max_length)[0] for first, second in zip(parts[:20], parts[20:])]
        assert tokenizer(firsts, seconds, split_special_tokens=True, **options)["input_ids"] == expected


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
    "ids": tokenizer(text, split_special_tokens=True)["input_ids"],
    "cut_pair": tokenizer([text], [text], truncation=True, max_length=9, split_special_tokens=True)["input_ids"],
    "eos_token_id": tokenizer.eos_token_id,
    "len": len(tokenizer),
}))
"""


@pytest.mark.parametrize("kind", ["pretraining", "task"])
def test_remote_code_loads_where_hf_gpt_custom_is_not_installed(tokenizer_folder, task_folder, python_without_project,
                                                                kind):
    folder = tokenizer_folder if kind == "pretraining" else task_folder
    tokenizer = GPTCustomTokenizerFast.from_pretrained(folder)
    text = "Wherefore art thou Romeo? 👋 <|endoftext|> 漢字"
    loaded = python_without_project(REMOTE_CODE_SCRIPT, folder, text)
    assert loaded["class"] == "GPTCustomTokenizerFast"
    assert loaded["module"].startswith("transformers_modules")  # the copy saved in the folder, not our package
    assert loaded["ids"] == tokenizer(text, split_special_tokens=True)["input_ids"]
    assert loaded["cut_pair"] == tokenizer([text], [text], truncation=True, max_length=9,
                                           split_special_tokens=True)["input_ids"]
    assert loaded["eos_token_id"] == tokenizer.eos_token_id and loaded["len"] == len(tokenizer)


# --- found by the tok2 hunt ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["load add_eos_token=False", "set add_bos_token=False", "set add_eos_token=True"])
def test_a_task_tokenizer_keeps_its_template_whatever_add_bos_or_eos_token_say(tokenizer_folder, tmp_path, how):
    """transformers rebuilds the post-processor from these flags: `add_eos_token=False` gave `text` for `start text
    extract`, and a classifier read its last text token, silently. Reference: the template's ids by hand."""
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.task_template import EXTRACT_TOKEN, install_task_template

    task = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    install_task_template(task)
    task.save_pretrained(tmp_path)
    text_ids = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)("a fine play")["input_ids"]
    expected = [task.eos_token_id, *text_ids, task.convert_tokens_to_ids(EXTRACT_TOKEN)]
    if how == "load add_eos_token=False":
        loaded = AutoTokenizer.from_pretrained(tmp_path, add_eos_token=False, trust_remote_code=True)
    else:
        loaded = GPTCustomTokenizerFast.from_pretrained(tmp_path)
        name, value = how.split()[1].split("=")
        if value == "True":
            with pytest.raises(UserError, match=f"{name}=True on a fine-tuned task tokenizer: it adds GPT-1's"):
                setattr(loaded, name, True)
        else:
            setattr(loaded, name, False)
    assert loaded("a fine play")["input_ids"] == expected


def test_the_task_template_keeps_the_tokenizers_other_special_tokens(tokenizer_folder):
    """transformers 5 replaces the extra special tokens by default: a chat tokenizer's <|user|> dropped out of
    all_special_tokens and the special-tokens mask when the template was installed."""
    from hf_gpt_custom.task_template import DELIMITER_TOKEN, EXTRACT_TOKEN, install_task_template

    task = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    task.add_special_tokens({"additional_special_tokens": ["<|user|>"]})
    install_task_template(task)
    assert {"<|user|>", DELIMITER_TOKEN, EXTRACT_TOKEN} <= set(task.all_special_tokens)
    ids = task.convert_tokens_to_ids(["<|user|>", "a"])
    assert task.get_special_tokens_mask(ids, already_has_special_tokens=True) == [1, 0]


def test_an_output_pickles_after_its_tokenizer_changed(tokenizer_folder):
    """Pickling made the Encodings, whose check refused ("tokens, word_ids and offsets") after a token was added;
    GPT2TokenizerFast's output pickles. The ids stand; the copy says why it has no Encodings."""
    import copy
    import pickle

    from hf_gpt_custom.errors import UserError

    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    out = tokenizer(["hello world", "a"], padding=True)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|new|>"]})
    for copied in (pickle.loads(pickle.dumps(out)), copy.deepcopy(out)):
        assert copied["input_ids"] == out["input_ids"] and copied["attention_mask"] == out["attention_mask"]
        with pytest.raises(UserError, match=r"the tokenizer changed \(an added token"):
            copied.tokens(0)
    fresh = tokenizer(["hello world"])  # unchanged since: pickled with its Encodings, as GPT2TokenizerFast's
    assert pickle.loads(pickle.dumps(fresh)).tokens(0) == fresh.tokens(0)


def test_sides_set_as_attributes_are_saved(tokenizer_folder, tmp_path):
    """Set after loading (left padding for batched generation), they came back "right" on reload."""
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    tokenizer.padding_side, tokenizer.truncation_side = "left", "left"
    tokenizer.save_pretrained(tmp_path)
    loaded = GPTCustomTokenizerFast.from_pretrained(tmp_path)
    assert (loaded.padding_side, loaded.truncation_side) == ("left", "left")


def test_a_chat_template_keeps_its_own_special_tokens_and_the_messages_text_as_docs_tokenizer_says():
    """docs/tokenizer.md: for chat, sanitize_control_tokens=True, not a tokenizer loaded with split_special_tokens."""
    tokenizer = GPTCustomTokenizerFast.bytes_only()
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}"
    messages = [{"role": "user", "content": "hi" + ENDOFTEXT}]
    text_ids = list("hi".encode()) + list(ENDOFTEXT.encode())  # bytes-only: id b is byte b
    got = tokenizer.apply_chat_template(messages, tokenize=True, sanitize_control_tokens=True)["input_ids"]
    assert got == text_ids + [tokenizer.eos_token_id]
    split = GPTCustomTokenizerFast.bytes_only(split_special_tokens=True)
    split.chat_template = tokenizer.chat_template
    assert split.apply_chat_template(messages, tokenize=True)["input_ids"] == text_ids + list(ENDOFTEXT.encode())
