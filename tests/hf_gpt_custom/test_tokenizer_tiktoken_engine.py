"""encode_ids_batch's tiktoken engine: chosen only for vocabularies it encodes exactly like the Rust `tokenizers` path.

The reference everywhere is `tokenizer(texts)["input_ids"]`, which always runs the `tokenizers` backend.
"""

import json
import pickle
import sys

import pytest
import tiktoken
from datasets.fingerprint import Hasher
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken

from hf_gpt_custom import GPTCustomTokenizerFast
from hf_gpt_custom import tiktoken_engine
from hf_gpt_custom.tokenization_gpt_custom import ENDOFTEXT, bytes_to_unicode
from hf_gpt_custom.tokenizer_training import train_tokenizer

ADVERSARIAL = [
    "",
    " ",
    "it's we'll they're I'm you've he'd can't 'S 'LL ''s",
    "   leading and trailing   ",
    "tabs\t\tand\u3000ideographic\u00a0spaces  \n\n\n  x",
    "\r\n\r\nWindows\r\nlines\r\n",
    "x<|endoftext|>y <|endoftext|> <|endoftext <|endoftext|><|endoftext|>",
    "👨\u200d👩\u200d👧\u200d👦 🏳️\u200d🌈 👍🏽 emoji",
    "e\u0301 a\u0308 Z\u0351\u0352\u0357 combining",
    "漢字かなカナ한국어 中文测试 مرحبا שלום",
    "\x00\x01\x1b[31m\x7f\x85 control",
    "1234567890 3.14159 1,000,000 ٣٤٥ ⅷ",
    "a\ue000gpt-custom-document-break b",  # the engine's own chunk separator, as user text
]


@pytest.fixture(scope="module")
def corpus(shared_data_dir):
    """Held-out real text: WikiText-2 lines, Shakespeare speeches, LAMBADA passages (a benchmark set)."""
    wiki = (shared_data_dir / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8")[-60_000:]
    shakespeare = (shared_data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[-40_000:]
    lambada = (shared_data_dir / "lambada" / "lambada_test.jsonl").read_text(encoding="utf-8").splitlines()[:100]
    return (wiki.splitlines(keepends=True) + [speech + "\n\n" for speech in shakespeare.split("\n\n")]
            + [json.loads(line)["text"] for line in lambada])


@pytest.fixture(scope="module")
def tokenizer_folder(shared_data_dir, tmp_path_factory):
    """1000 entries learned on Shakespeare, WikiText-2 and the non-Latin cases above, so merges span UTF-8 bytes."""
    shakespeare = (shared_data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:100_000]
    wiki = (shared_data_dir / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8")[:100_000]
    texts = [shakespeare, wiki] + ADVERSARIAL * 20
    return train_tokenizer(texts, tmp_path_factory.mktemp("tokenizer"), vocab_size=1000, show_progress=False)


@pytest.fixture
def tokenizer(tokenizer_folder):
    return GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)


def rust_ids(tokenizer, texts, split_special_tokens=True):
    return tokenizer(texts, split_special_tokens=split_special_tokens)["input_ids"]


# --- the engine gives the Rust path's ids ------------------------------------------------------------------------


def test_a_trained_vocabulary_runs_on_tiktoken(tokenizer):
    assert tokenizer.encode_ids_engine() == "tiktoken"
    assert tokenizer.encode_ids_engine(split_special_tokens=False) == "tiktoken"


@pytest.mark.parametrize("num_threads", [1, 3])
@pytest.mark.parametrize("split_special_tokens", [True, False], ids=["special_as_text", "special_recognised"])
def test_real_text_and_adversarial_strings_give_identical_ids(tokenizer, corpus, split_special_tokens, num_threads,
                                                              monkeypatch):
    monkeypatch.setattr(tiktoken_engine, "_MIN_CHUNK_CHARS", 1000)  # so a few thousand documents are cut into chunks
    texts = corpus + ADVERSARIAL + [ADVERSARIAL[6] * 50]
    expected = rust_ids(tokenizer, texts, split_special_tokens)
    assert tokenizer.encode_ids_batch(texts, split_special_tokens, num_threads=num_threads) == expected
    endoftext_ids = [ids for ids in expected if tokenizer.eos_token_id in ids]
    assert bool(endoftext_ids) == (not split_special_tokens)


FRAGMENTS = ["'s", "'ll", "'", "s", " ", "  ", "\n", "\r\n", "\t", "<|endoftext|>", "<|", "|>", "é", "e\u0301",
             "👍🏽", "1", "23", ".", "!?", "the", " the", "漢", "\u00a0", "\u2028", "\ue000"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4)).map("".join), max_size=12),
       split_special_tokens=st.booleans(), num_threads=st.sampled_from([1, 2]))
def test_any_unicode_gives_identical_ids(tokenizer, texts, split_special_tokens, num_threads, monkeypatch):
    monkeypatch.setattr(tiktoken_engine, "_MIN_CHUNK_CHARS", 4)
    expected = rust_ids(tokenizer, texts, split_special_tokens) if texts else []
    assert tokenizer.encode_ids_batch(texts, split_special_tokens, num_threads=num_threads) == expected


def test_tiktoken_encoding_gives_the_tokenizers_ids_special_tokens_included(tokenizer, corpus):
    encoding = tiktoken_engine.tiktoken_encoding(tokenizer)  # what tests and the benchmark compare against
    texts = corpus[:100] + ADVERSARIAL
    assert [encoding.encode_ordinary(text) for text in texts] == rust_ids(tokenizer, texts)
    assert [encoding.encode(text, allowed_special="all") for text in texts] == rust_ids(tokenizer, texts, False)
    with pytest.raises(ValueError, match="no tiktoken equivalent: merge 2"):
        tiktoken_engine.tiktoken_encoding(build_tokenizer([("a", "b"), ("b", "c"), ("a", "bc")]))


def test_lone_surrogate_gets_the_same_clear_error_on_tiktoken(tokenizer, monkeypatch):
    monkeypatch.setattr(tiktoken_engine, "_MIN_CHUNK_CHARS", 4)
    for num_threads in (1, 2):
        with pytest.raises(ValueError, match=r"lone surrogate '\\udfff' \(U\+DFFF\) at position 4"):
            tokenizer.encode_ids_batch(["fine text", "bad \udfff", "more fine text"], num_threads=num_threads)


def test_added_special_tokens_rebuild_the_engine(tokenizer):
    assert tokenizer.encode_ids_engine() == "tiktoken"
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|user|>"]})
    texts = ["<|user|>hi<|endoftext|>", "a <|user|> b"]
    assert tokenizer.encode_ids_engine(split_special_tokens=False) == "tiktoken"
    recognised = tokenizer.encode_ids_batch(texts, split_special_tokens=False)
    assert recognised == rust_ids(tokenizer, texts, split_special_tokens=False)
    assert recognised[0] == [len(tokenizer) - 1, *tokenizer.encode("hi"), tokenizer.eos_token_id]
    assert tokenizer.encode_ids_batch(texts) == rust_ids(tokenizer, texts)


def test_changed_added_tokens_of_the_same_vocabulary_size_rebuild_the_engine(tokenizer):
    word = next(token for token in tokenizer.get_vocab() if token.isascii() and token.isalpha() and len(token) >= 3)
    texts = [f"other{word} x{word}y {word}", "x <|endoftext|> y"]
    tokenizer.encode_ids_batch(texts)  # the engine is built for the tokens as they are
    size = len(tokenizer)
    tokenizer.add_tokens([word])  # already in the vocabulary: same size, but now matched before BPE
    tokenizer.add_special_tokens({"eos_token": AddedToken("<|endoftext|>", lstrip=True, rstrip=True, special=True)})
    assert len(tokenizer) == size
    for split_special_tokens in (False, True):
        assert tokenizer.encode_ids_batch(texts, split_special_tokens=split_special_tokens) == rust_ids(
            tokenizer, texts, split_special_tokens=split_special_tokens
        )


def test_engine_is_not_pickled_or_fingerprinted(tokenizer):
    before = (pickle.dumps(tokenizer), Hasher.hash(tokenizer))
    tokenizer.encode_ids_batch(["To be, or not to be"])
    assert (pickle.dumps(tokenizer), Hasher.hash(tokenizer)) == before  # `datasets` map caches stay valid
    assert pickle.loads(before[0]).encode_ids_batch(["To be"]) == tokenizer.encode_ids_batch(["To be"])


def test_thread_count_follows_the_tokenizers_switches(monkeypatch):
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    monkeypatch.setenv("RAYON_NUM_THREADS", "2")
    assert tiktoken_engine.resolve_num_threads(None) == 1  # encode_ids_batch: one thread unless asked for more
    assert tiktoken_engine.resolve_num_threads(None, parallel_by_default=True) == 2  # __call__: as `tokenizers` does
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    assert tiktoken_engine.resolve_num_threads(None) == 2
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # what `tokenizers` sets in a process forked after use
    assert tiktoken_engine.resolve_num_threads(None, parallel_by_default=True) == 1
    assert tiktoken_engine.resolve_num_threads(3) == 3
    with pytest.raises(ValueError, match="num_threads=0 must be at least 1"):
        tiktoken_engine.resolve_num_threads(0)


# --- documents tiktoken cannot take -----------------------------------------------------------------------------

# Every Unicode White_Space character (PropList.txt): what `\s` matches in tiktoken's regex.
UNICODE_WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + \
    "\u2028\u2029\u202f\u205f\u3000"


@pytest.fixture(scope="module")
def texts_with_a_million_whitespace_run(tokenizer_folder):
    """(texts, their ids from `__call__` with special-token text as text, encode_ids_batch's default): the middle
    text holds one run of 1M whitespace characters, every kind of White_Space among them, on which tiktoken panics
    (PanicException, a BaseException; issue 13)."""
    run = " " * (1_000_000 - len(UNICODE_WHITE_SPACE)) + UNICODE_WHITE_SPACE
    texts = ["To be, or not to be", "Before the gap<|endoftext|>." + run + "After it.", "that is the question"]
    return texts, rust_ids(GPTCustomTokenizerFast.from_pretrained(tokenizer_folder), texts)


@pytest.mark.parametrize("num_threads", [1, 2])
def test_million_whitespace_document_never_reaches_tiktoken_and_gets_the_tokenizers_ids(
        tokenizer, texts_with_a_million_whitespace_run, num_threads, monkeypatch):
    texts, expected = texts_with_a_million_whitespace_run
    reached_tiktoken = []
    encode_on_tiktoken = tiktoken_engine.TiktokenEngine._encode_batch_on_tiktoken

    def spy(engine, texts, *args):
        reached_tiktoken.extend(texts)
        return encode_on_tiktoken(engine, texts, *args)

    monkeypatch.setattr(tiktoken_engine.TiktokenEngine, "_encode_batch_on_tiktoken", spy)
    assert tokenizer.encode_ids_batch(texts, num_threads=num_threads) == expected
    assert reached_tiktoken == [texts[0], texts[2]]


def test_a_tiktoken_panic_falls_back_to_tokenizers_with_a_warning(tokenizer, texts_with_a_million_whitespace_run,
                                                                   monkeypatch, caplog):
    texts, expected = texts_with_a_million_whitespace_run
    monkeypatch.setattr(tiktoken_engine, "LONGEST_WHITESPACE_RUN_ON_TIKTOKEN", 10_000_000)  # let it reach tiktoken
    assert tokenizer.encode_ids_batch(texts) == expected
    assert "tiktoken panicked" in caplog.text


def test_long_whitespace_runs_are_found_wherever_they_start():
    limit = tiktoken_engine.LONGEST_WHITESPACE_RUN_ON_TIKTOKEN
    assert all(char.isspace() for char in UNICODE_WHITE_SPACE)  # so every kind of run is seen
    for offset in (0, 1, limit // 2 - 1, limit // 2 + 1, 3 * limit // 4):
        for run in (" " * limit, "\u3000" * limit, "\n\t" * (limit // 2), " " * (limit - 1)):
            for end in ("y", ""):  # the run may end the text
                assert tiktoken_engine.has_long_whitespace_run("x" * offset + run + end)
        assert not tiktoken_engine.has_long_whitespace_run("x" * offset + " " * (limit // 2 - 1) + "y")
    assert not tiktoken_engine.has_long_whitespace_run(("word " * limit))


# --- and falls back where it would not -------------------------------------------------------------------------


def build_tokenizer(merges: list[tuple[str, str]], **kwargs) -> GPTCustomTokenizerFast:
    """Bytes (id = byte), then each merge's result in the order given, then <|endoftext|>."""
    vocab = {char: byte for byte, char in bytes_to_unicode().items()}
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    vocab[ENDOFTEXT] = len(vocab)
    return GPTCustomTokenizerFast(vocab=vocab, merges=merges, **kwargs)


def naive_tiktoken(tokenizer: GPTCustomTokenizerFast) -> tiktoken.Encoding:
    """tiktoken on the vocabulary as it is, without the engine's checks: what they prevent."""
    ranks = {token: token_id for token, token_id in tokenizer.get_vocab().items() if token != ENDOFTEXT}
    return tiktoken_engine.make_tiktoken_encoding(ranks, special_tokens={}, name="naive")


def test_consistent_hand_made_merges_run_on_tiktoken():
    tokenizer = build_tokenizer([("a", "b"), ("ab", "c"), ("Ġ", "ab")])
    assert tokenizer.encode_ids_engine() == "tiktoken"
    # "abc" -> abc; " ab" -> Ġab; " abcabc" -> Ġ abc abc (no rule joins Ġ with abc)
    assert tokenizer.encode_ids_batch(["abc ab abcabc"]) == [[257, 258, 32, 257, 257]]
    assert rust_ids(tokenizer, ["abc ab abcabc"]) == [[257, 258, 32, 257, 257]]


def test_merge_tiktoken_would_reach_from_another_pair_falls_back():
    # a+b=ab (256), b+c=bc (257), a+bc=abc (258). On "abc", tokenizers merges a+b first (listed first), then has no
    # rule for ab+c: [ab, c]. tiktoken merges by the rank of the concatenation: ab, then "ab"+"c" = abc: [abc].
    tokenizer = build_tokenizer([("a", "b"), ("b", "c"), ("a", "bc")])
    assert rust_ids(tokenizer, ["abc"]) == [[256, 99]]
    assert naive_tiktoken(tokenizer).encode_ordinary("abc") == [258]
    assert tokenizer.encode_ids_engine() == "tokenizers"
    assert tokenizer.encode_ids_batch(["abc", "xbcx"]) == [[256, 99], [120, 257, 120]]


@st.composite
def random_merges(draw) -> list[tuple[str, str]]:
    """Up to 14 merges of random pairs of earlier tokens over 'a', 'b', 'c' and 'Ġ' (space): most orders are not
    ones BPE training would learn, so both engines get exercised."""
    tokens, merges = ["a", "b", "c", "Ġ"], []
    for _ in range(draw(st.integers(1, 14))):
        left, right = draw(st.sampled_from(tokens)), draw(st.sampled_from(tokens))
        if left + right not in tokens:
            tokens.append(left + right)
            merges.append((left, right))
    return merges


@settings(max_examples=200, deadline=None)
@given(merges=random_merges(), texts=st.lists(st.text(alphabet="abc ", max_size=12), min_size=1, max_size=20))
def test_random_merge_lists_give_identical_ids_on_whichever_engine_is_chosen(merges, texts):
    tokenizer = build_tokenizer(merges)
    assert tokenizer.encode_ids_batch(texts) == rust_ids(tokenizer, texts)


def test_merge_results_whose_ids_do_not_follow_merge_order_fall_back(tokenizer_folder, corpus):
    trained = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    lines = (tokenizer_folder / "merges.txt").read_text(encoding="utf-8").splitlines()[1:]  # after "#version"
    vocab, merges = trained.get_vocab(), [tuple(line.split(" ")) for line in lines]
    for position, merge in enumerate(merges):  # the last merge's result gets the lowest id, and so on
        vocab["".join(merge)] = 256 + len(merges) - 1 - position
    tokenizer = GPTCustomTokenizerFast(vocab=vocab, merges=merges)
    assert tokenizer.encode_ids_engine() == "tokenizers"
    texts = corpus[:200]
    naive = [naive_tiktoken(tokenizer).encode_ordinary(text) for text in texts]
    assert naive != rust_ids(tokenizer, texts)  # what the check prevents
    assert tokenizer.encode_ids_batch(texts) == rust_ids(tokenizer, texts)


def test_without_tiktoken_the_rust_path_gives_the_same_ids(tokenizer_folder, corpus, monkeypatch):
    expected = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder).encode_ids_batch(corpus)
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # `import tiktoken` now raises ImportError
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
    assert tokenizer.encode_ids_engine() == "tokenizers"
    assert tokenizer.encode_ids_batch(corpus) == expected


@pytest.mark.parametrize("change", ["prefix_space", "prefix_space_after_first_use", "plain_added_token",
                                    "stripping_special_token", "single_word_special_token"])
def test_pipelines_tiktoken_cannot_copy_fall_back(tokenizer_folder, change):
    """Reference: the `tokenizers` backend itself (backend_tokenizer.encode), besides the ids of __call__.
    single_word_special_token: tiktoken matches a special token anywhere, `tokenizers` one added with single_word=True
    only as a whole word ("x <|x|>y" keeps it as text); no test looked at single_word, so an engine check that
    ignored it went unnoticed, with __call__ on tiktoken too (found by the mutsweep2 hunt)."""
    texts = ["Romeo, Romeo!", " wherefore <|x|> art <|endoftext|> thou", "x <|x|>y"]
    if change == "prefix_space":
        tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder, add_prefix_space=True)
    else:
        tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder)
        assert tokenizer.encode_ids_engine() == "tiktoken"
        if change == "prefix_space_after_first_use":
            from tokenizers import pre_tokenizers

            tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
            assert tokenizer.encode_ids_engine(split_special_tokens=True) == "tokenizers"
        elif change == "plain_added_token":
            tokenizer.add_tokens(["Romeo"])  # matched before BPE even in plain text
        else:
            from tokenizers import AddedToken

            flag = {"stripping_special_token": "lstrip", "single_word_special_token": "single_word"}[change]
            tokenizer.add_special_tokens({"additional_special_tokens": [AddedToken("<|x|>", **{flag: True})]})
            assert tokenizer.encode_ids_engine(split_special_tokens=True) == "tiktoken"  # special tokens are text
    backend = [tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids for text in texts]
    assert tokenizer(texts, split_special_tokens=False)["input_ids"] == backend
    assert tokenizer.encode_ids_engine(split_special_tokens=False) == "tokenizers"
    for split_special_tokens in (True, False):
        expected = rust_ids(tokenizer, texts, split_special_tokens)
        assert tokenizer.encode_ids_batch(texts, split_special_tokens) == expected
    assert tokenizer.encode_ids_batch(texts, split_special_tokens=False) == backend


# --- the engine follows the backend's BPE model, not only its added tokens ---------------------------------------


@pytest.mark.parametrize("change", ["dropout", "model_replaced", "another_vocabulary_of_the_same_size"])
def test_a_change_of_the_bpe_model_after_the_first_call_reaches_every_path(tokenizer, change, shared_data_dir,
                                                                          tmp_path):
    """The cached engine was keyed on added tokens, normalizer and pre-tokenizer only: BPE-dropout switched on (or
    the model replaced by one of other settings: BPE() leaves continuing_subword_prefix None where the trained file
    has "") after the first call was ignored by __call__ and encode_ids_batch, which kept the old merges, while the
    offsets path and `.tokens()` used the new model. dropout=1.0 drops every merge, deterministically. A model of
    another vocabulary with the same size and settings was not seen either (the key held no merges, ~1.4 ms a call
    to serialise; it now holds 16 learned tokens). Reference: the `tokenizers` library on the same pipeline
    (tokenizer.json of the changed backend)."""
    from tokenizers import Tokenizer
    from tokenizers.models import BPE

    texts = ["To be, or not to be, that is the question", "x<|endoftext|>y"]
    tokenizer(texts)  # the engine is built for the model as it is
    if change == "dropout":
        tokenizer.backend_tokenizer.model.dropout = 1.0
    elif change == "another_vocabulary_of_the_same_size":
        wiki = (shared_data_dir / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8")[200_000:400_000]
        other = train_tokenizer([wiki], tmp_path, vocab_size=1000, show_progress=False)
        tokenizer.backend_tokenizer.model = Tokenizer.from_file(str(other / "tokenizer.json")).model
    else:
        assert tokenizer.backend_tokenizer.model.continuing_subword_prefix == ""
        tokenizer.backend_tokenizer.model = BPE(vocab=tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False),
                                                merges=[])
        assert tokenizer.backend_tokenizer.model.continuing_subword_prefix is None
    reference = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    expected = [encoding.ids for encoding in reference.encode_batch(texts, add_special_tokens=False)]
    if change != "another_vocabulary_of_the_same_size":
        assert expected[0] == list(texts[0].encode("utf-8"))  # no merge applies any more: the single bytes
    assert tokenizer(texts)["input_ids"] == expected
    assert tokenizer(texts, return_offsets_mapping=True)["input_ids"] == expected
    reference.encode_special_tokens = True
    assert tokenizer.encode_ids_batch(texts) == [e.ids for e in reference.encode_batch(texts, add_special_tokens=False)]
    batch = tokenizer(texts)
    assert tokenizer.convert_tokens_to_ids(batch.tokens(0)) == batch["input_ids"][0]  # tokens describe the ids


def test_encode_ids_batch_on_the_tokenizers_engine_leaves_the_backends_special_token_matching_alone(tokenizer_folder):
    """On the `tokenizers` engine encode_ids_batch set the shared Rust backend's encode_special_tokens to True and
    left it so: `tokenizer.backend_tokenizer.encode("a<|endoftext|>b")` (what libraries holding the backend call)
    then encoded the special token as text (BPE pieces, no eos id). Reference: the same call before encode_ids_batch."""
    tokenizer = GPTCustomTokenizerFast.from_pretrained(tokenizer_folder, add_prefix_space=True)  # not on tiktoken
    assert tokenizer.encode_ids_engine() == "tokenizers"
    before = tokenizer.backend_tokenizer.encode("a<|endoftext|>b").ids
    assert tokenizer.eos_token_id in before
    tokenizer.encode_ids_batch(["some document"])
    assert tokenizer.backend_tokenizer.encode("a<|endoftext|>b").ids == before
