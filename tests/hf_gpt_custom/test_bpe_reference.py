"""The pure-Python reference BPE: hand-checked answers, then agreement with the fast tokenizer and tiktoken."""

from collections import Counter

import pytest

from hf_gpt_custom import GPTCustomTokenizerFast
from hf_gpt_custom import bpe_reference as ref
from hf_gpt_custom.tiktoken_engine import tiktoken_encoding
from hf_gpt_custom.byte_level import GPT2_SPLIT_PATTERN
from hf_gpt_custom.tokenizer_training import train_tokenizer


def test_known_answer_the_cat_sat_on_the_mat():
    # Worked by hand: 'at' occurs 3 times (cat, sat, mat) and wins outright; then every remaining top pair occurs
    # twice and the textbook rule takes the one seen first: 'th', 'the', 'the ', 'at '. After that no pair
    # occurs twice, so training stops at 5 merges although 300 entries were allowed.
    text = "the cat sat on the mat."
    merges = ref.train(text, vocab_size=300)
    assert merges.pairs == [
        ((97, 116), 256),  # 'a' 't'
        ((116, 104), 257),  # 't' 'h'
        ((257, 101), 258),  # 'th' 'e'
        ((258, 32), 259),  # 'the' ' '
        ((256, 32), 260),  # 'at' ' '
    ]
    assert merges.vocab[259] == b"the " and merges.vocab[260] == b"at "
    ids = ref.encode(text, merges, split_pattern=None)
    assert ids == [259, 99, 260, 115, 260, 111, 110, 32, 259, 109, 256, 46]
    assert ref.decode(ids, merges) == text


def test_tie_break_rules_differ_only_in_which_equal_pair_wins():
    # In "zz aa zz aa" the pairs zz, 'z ', ' a' and aa each occur twice. The textbook rule takes the first one in
    # the text (zz); the tokenizers trainer takes the smallest pair in its id order, where bytes are sorted by their
    # printable character: 'a' < 'z' < 'Ġ' (space), so (a, a) wins.
    text = "zz aa zz aa"
    assert ref.train(text, vocab_size=257).pairs == [((122, 122), 256)]
    assert ref.train(text, vocab_size=257, tie_break="tokenizers").pairs == [((97, 97), 256)]


def test_split_pattern_is_gpt2s():
    chunks = ref.split_into_chunks("Hello world's  end\n\n 42!", GPT2_SPLIT_PATTERN)
    assert chunks == [b"Hello", b" world", b"'s", b" ", b" end", b"\n\n", b" 42", b"!"]


def test_merge_pair_scans_left_to_right_without_overlap():
    assert ref.merge_pair([5, 5, 5], (5, 5), 256) == [256, 5]
    assert ref.merge_pair([5, 5, 5, 5], (5, 5), 256) == [256, 256]


def test_reference_rejects_vocab_below_256():
    with pytest.raises(ValueError, match="vocab_size=200"):
        ref.train("abc", vocab_size=200)


@pytest.mark.parametrize("corpus_file", ["tinyshakespeare/input.txt", "wikitext-2-raw/wiki.test.raw"])
def test_reference_trainer_learns_the_same_merges_as_tokenizers(shared_data_dir, tmp_path, corpus_file):
    """Same most-frequent-pair rule and same tie-break: merge-for-merge agreement on 30 KB of real text."""
    corpus = (shared_data_dir / corpus_file).read_text(encoding="utf-8")[:30_000]
    folder = train_tokenizer([corpus], tmp_path / "tok", vocab_size=500, show_progress=False)
    fast_merges = ref.merges_from_tokenizer(GPTCustomTokenizerFast.from_pretrained(folder))
    reference_merges = ref.train(corpus, vocab_size=499, split_pattern=GPT2_SPLIT_PATTERN, tie_break="tokenizers")
    assert len(fast_merges.pairs) == 243  # 500 = 256 bytes + 243 merges + <|endoftext|>
    assert reference_merges.pairs == fast_merges.pairs


def test_textbook_tie_break_drifts_from_the_tokenizers_trainer_at_a_tie(shared_data_dir):
    """Why the oracle emulates the Rust tie-break: with first-in-text ties the merges part ways, and the first merge
    where they do is a tie — both rules took a most frequent pair, just not the same one."""
    corpus = (shared_data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:30_000]
    textbook = ref.train(corpus, vocab_size=499, split_pattern=GPT2_SPLIT_PATTERN, tie_break="first")
    emulated = ref.train(corpus, vocab_size=499, split_pattern=GPT2_SPLIT_PATTERN, tie_break="tokenizers")
    first_difference = next(rank for rank, (a, b) in enumerate(zip(textbook.pairs, emulated.pairs)) if a != b)
    assert first_difference > 10  # clear winners first: ties come once counts get small

    # Replay the shared merges on the text's chunks (in order of first appearance) and count pairs at that step.
    chunks = [list(chunk) for chunk in ref.split_into_chunks(corpus, GPT2_SPLIT_PATTERN)]
    for pair, new_id in textbook.pairs[:first_difference]:
        chunks = [ref.merge_pair(ids, pair, new_id) for ids in chunks]
    counts = Counter(pair for ids in chunks for pair in zip(ids, ids[1:]))
    textbook_pair, emulated_pair = textbook.pairs[first_difference][0], emulated.pairs[first_difference][0]
    assert counts[textbook_pair] == counts[emulated_pair] == max(counts.values())

    def first_position(pair):
        return next(index for index, ids in enumerate(chunks) if pair in zip(ids, ids[1:]))

    assert first_position(textbook_pair) <= first_position(emulated_pair)  # the textbook takes the one seen first
    order = ref.tokenizers_byte_order()
    assert [order.get(token, token) for token in emulated_pair] < [order.get(token, token) for token in textbook_pair]


@pytest.fixture(scope="module")
def shakespeare_90_10(shared_data_dir, tmp_path_factory):
    """A tokenizer trained on the first 90% of tiny Shakespeare (the usual split); the last 10% is held out."""
    text = (shared_data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    cut = int(len(text) * 0.9)
    folder = train_tokenizer([text[:cut]], tmp_path_factory.mktemp("tok90"), vocab_size=2000, show_progress=False)
    return GPTCustomTokenizerFast.from_pretrained(folder), text[cut:]


@pytest.mark.parametrize("held_out", ["shakespeare_last_10_percent", "wikitext_test"])
def test_reference_fast_and_tiktoken_give_the_same_ids(shakespeare_90_10, shared_data_dir, held_out):
    tokenizer, shakespeare_tail = shakespeare_90_10
    if held_out == "shakespeare_last_10_percent":
        text = shakespeare_tail
    else:
        text = (shared_data_dir / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8")[:200_000]
    fast_ids = tokenizer(text)["input_ids"]
    reference_ids = ref.encode(text, ref.merges_from_tokenizer(tokenizer))
    tiktoken_ids = tiktoken_encoding(tokenizer).encode_ordinary(text)
    assert len(fast_ids) > 20_000
    assert fast_ids == reference_ids
    assert fast_ids == tiktoken_ids
    assert tokenizer.decode(fast_ids) == text
