"""Bytes per token, the denominator of validation bits per byte: every count is checked against the text's own
`len(text.encode("utf-8"))` as written, the denominator lm-evaluation-harness uses, for each kind of tokenizer a run
may use: the table by token id where it is exact, and the validation blocks' byte_counts everywhere."""

import logging
import unicodedata
from pathlib import Path

import pytest
import torch
from tokenizers import normalizers
from transformers import AutoTokenizer

from hf_gpt_custom.training import workload
from hf_gpt_custom.training.data import document_encoder, tokenize_documents
from hf_gpt_custom.training.token_bytes import PROBES, TokenBytes
from tests.helpers import sentencepiece_like

TEXTS = [*PROBES, "ROMEO:\nBut, soft! what light through yonder window breaks?", "naïve café — “quoted” 🎭 ünïcödé",
         "  two leading spaces", "ends with a space "]
NO_LEADING_SPACE = [text for text in TEXTS if not text.startswith(" ")]


@pytest.fixture(scope="module")
def byte_level(shakespeare_tokenizer_dir):
    import hf_gpt_custom  # noqa: F401  registers our tokenizer class

    return AutoTokenizer.from_pretrained(str(shakespeare_tokenizer_dir))


def counted_bytes_of_documents(tokenizer, texts: list[str]) -> int:
    """The bytes the table by token id gives these documents' tokens (a document's first by `at_start`), before the
    per-document correction that byte_counts adds on each separator."""
    table = TokenBytes.of(tokenizer)
    return sum(table.at_start[ids[0]] + sum(table.within[i] for i in ids[1:])
               for ids in document_encoder(tokenizer)(texts) if ids)


def test_byte_level_bpe_counts_every_byte(byte_level):
    table = TokenBytes.of(byte_level)
    assert int(table.within[byte_level.eos_token_id]) == 0
    assert table.check(document_encoder(byte_level)) == []
    assert counted_bytes_of_documents(byte_level, TEXTS) == sum(len(t.encode("utf-8")) for t in TEXTS)


def test_special_token_text_in_a_document_counts_its_bytes(byte_level, shakespeare_tokenizer_dir):
    """A literal "<|endoftext|>" in a document is encoded as text (data.py), so its 13 bytes are counted, with our
    tokenizer and with any fast tokenizer; an encoder that made it the special token (0 bytes) is reported."""
    from transformers import GPT2TokenizerFast

    gpt2_style = GPT2TokenizerFast.from_pretrained(str(shakespeare_tokenizer_dir))
    texts = ["He wrote <|endoftext|> in his essay.", "<|endoftext|>"]
    for tokenizer in (byte_level, gpt2_style):
        assert counted_bytes_of_documents(tokenizer, texts) == sum(len(t.encode("utf-8")) for t in texts)
        assert TokenBytes.of(tokenizer).check(document_encoder(tokenizer)) == []
    as_special_token = lambda texts: gpt2_style(texts, add_special_tokens=False)["input_ids"]  # noqa: E731
    assert TokenBytes.of(gpt2_style).check(as_special_token) == [
        "'it says <|endoftext|> in the text': 20 bytes counted, 33 in the text"]


def test_added_tokens_count_the_bytes_of_their_text(shakespeare_tokenizer_dir):
    """tokenizer.add_tokens(["señor"]): an added token is plain text, but the table counted its characters as
    byte-level ones ("ñ" is one of those), 5 bytes of 6, and no probe noticed (4.71 bits per byte against 4.63)."""
    import hf_gpt_custom  # noqa: F401

    tokenizer = AutoTokenizer.from_pretrained(str(shakespeare_tokenizer_dir))
    tokenizer.add_tokens(["señor", "Zürich", "plain"])
    texts = ["Buenos días, señor, from Zürich.", "señor", "a plain word"]
    assert counted_bytes_of_documents(tokenizer, texts) == sum(len(t.encode("utf-8")) for t in texts)
    table = TokenBytes.of(tokenizer)
    assert table.check(document_encoder(tokenizer)) == []
    table.within[tokenizer.convert_tokens_to_ids("señor")] = 5  # the old count: check() probes every added token
    assert table.check(document_encoder(tokenizer)) == [
        "'it says señor in the text': 25 bytes counted, 26 in the text"]


def test_sentencepiece_pieces_count_their_spaces_and_fallback_bytes(shakespeare_path):
    """Decoding a piece alone drops its leading space and turns a lone byte into U+FFFD's three bytes: that count
    was 42,730 bytes for 50,000 of held-out Shakespeare, a bits-per-byte figure 1.17x too high."""
    tokenizer = sentencepiece_like(shakespeare_path)
    ids = tokenizer("masks 🎭", add_special_tokens=False)["input_ids"]
    assert any(token.startswith("<0x") for token in tokenizer.convert_ids_to_tokens(ids))  # byte fallback happens
    held_out = [s for s in shakespeare_path.read_text(encoding="utf-8")[-50_000:].split("\n\n") if s]
    assert counted_bytes_of_documents(tokenizer, held_out + NO_LEADING_SPACE) == sum(
        len(t.encode("utf-8")) for t in held_out + NO_LEADING_SPACE)


def test_sentencepiece_documents_that_begin_with_a_space_are_reported_one_byte_short(shakespeare_path):
    """transformers' Metaspace puts the dummy `▁` before a text only when it does not already begin with a space,
    and the first piece is the same id either way: a table by id cannot tell the two apart. The one byte it misses
    per such document is named, not hidden."""
    tokenizer = sentencepiece_like(shakespeare_path)
    assert TokenBytes.of(tokenizer).check(document_encoder(tokenizer)) == [
        "' leading space': 13 bytes counted, 14 in the text"]
    assert counted_bytes_of_documents(tokenizer, [" leading space"]) == len(" leading space") - 1


def test_a_tokenizer_outside_the_rules_is_reported_not_trusted(shakespeare_path, byte_level):
    """A normalizer that changes the text (accents stripped) makes tokens stand for other bytes than the text's:
    the check names it (and the next test: training says its bits per byte is approximate)."""
    changed = sentencepiece_like(shakespeare_path, normalizer=normalizers.Sequence(
        [normalizers.NFD(), normalizers.StripAccents()]))
    problems = TokenBytes.of(changed).check(document_encoder(changed))
    assert problems and any("naïve" in problem for problem in problems)
    assert TokenBytes.of(byte_level).check(document_encoder(byte_level)) == []


def test_training_says_when_the_table_is_not_exact(shakespeare_path, make_config, caplog, cpu_accelerator, tmp_path):
    folder = tmp_path / "stripped"
    sentencepiece_like(shakespeare_path, normalizer=normalizers.Sequence(
        [normalizers.NFD(), normalizers.StripAccents()])).save_pretrained(folder)
    config = make_config(f"tokenizer={folder}")
    with caplog.at_level(logging.INFO, logger=workload.__name__):
        work = workload.LanguageModelling().prepare(config, cpu_accelerator)
    assert "each validation document as written that each token covers" in caplog.text and "naïve" in caplog.text
    assert len(work.tokenizer) == 700


# Text a normalizer rewrites: decomposed accents (French as macOS writes file names), decomposed Hangul (NFC makes
# one 3-byte syllable of three 3-byte jamo), a ligature and full-width punctuation (NFKC).
REWRITTEN = ["cafe\u0301 cre\u0300me bru\u0302le\u0301e, de\u0301ja\u0300 vu",
             unicodedata.normalize("NFD", "한국어 문장입니다. 안녕하세요"), "the \ufb01rst \ufb02ower\uff0c o\ufb00ered"]


def _wordpiece(shakespeare_path):
    """BERT's kind of tokenizer, trained small: WordPiece with "##" continuations, lower-casing."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    backend.train_from_iterator([shakespeare_path.read_text(encoding="utf-8")[:100_000]], trainers.WordPieceTrainer(
        vocab_size=300, special_tokens=["[UNK]", "[SEP]"], show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token="[SEP]")


def _byte_level_with(shakespeare_tokenizer_dir, normalizer):
    """Our byte-level BPE as a fast tokenizer with a normalizer in front: what Qwen2's tokenizer is (NFC)."""
    from transformers import GPT2TokenizerFast

    tokenizer = GPT2TokenizerFast.from_pretrained(str(shakespeare_tokenizer_dir))
    tokenizer.backend_tokenizer.normalizer = normalizer
    return tokenizer


@pytest.mark.parametrize("normalizer", [normalizers.NFC(), normalizers.NFKC(),
                                        normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()])],
                         ids=["NFC", "NFKC", "strip-accents"])
def test_bits_per_byte_divides_by_the_text_as_written_when_a_normalizer_rewrites_it(
        shakespeare_tokenizer_dir, shakespeare_path, cpu_accelerator, normalizer):
    """A tokenizer whose normalizer rewrites text spells the normalized text: the table counted those bytes, 2.19x
    too few for NFD Korean under NFC, and no probe noticed, so val_bits_per_byte was silently too high. Reference:
    lm-evaluation-harness divides by len(text.encode("utf-8")) of each document as written."""
    import datasets

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM

    tokenizer = _byte_level_with(shakespeare_tokenizer_dir, normalizer)
    documents = REWRITTEN + [s for s in shakespeare_path.read_text(encoding="utf-8")[-2_000:].split("\n\n") if s]
    as_written = sum(len(document.encode("utf-8")) for document in documents)
    assert TokenBytes.of(tokenizer).check(document_encoder(tokenizer))  # the probes see the table is not exact
    assert counted_bytes_of_documents(tokenizer, documents) != as_written  # what the table alone would divide by

    tokenized = tokenize_documents(datasets.Dataset.from_dict({"text": documents}), tokenizer, count_bytes=True)
    eos = tokenizer.eos_token_id
    torch.manual_seed(0)
    model = GPTCustomForCausalLM(GPTCustomConfig(vocab_size=len(tokenizer), n_positions=256, n_embd=32, n_layer=1,
                                                 n_head=2, eos_token_id=eos, bos_token_id=eos))
    # one document a block, after a separator: every token of every document is a prediction target
    batches = [{"input_ids": torch.tensor([[eos] + ids]), "labels": torch.tensor([[eos] + ids]),
                "byte_counts": torch.tensor([[0] + counts])}
               for ids, counts in zip(tokenized["input_ids"], tokenized["byte_counts"])]
    result = workload.evaluate_loss(model, batches, cpu_accelerator)
    assert result["val_bytes"] == as_written


def test_byte_counts_of_the_exact_tables_are_the_tables_own(byte_level, shakespeare_path):
    """Where the table is exact the per-document correction is 0: each token counts what it spells, so a block cut
    inside a document divides by the bytes of its own tokens."""
    import datasets

    for tokenizer in (byte_level, sentencepiece_like(shakespeare_path)):
        texts = NO_LEADING_SPACE
        table = TokenBytes.of(tokenizer)
        tokenized = tokenize_documents(datasets.Dataset.from_dict({"text": texts}), tokenizer, count_bytes=True)
        for ids, counts, text in zip(tokenized["input_ids"], tokenized["byte_counts"], texts):
            assert counts == [table.at_start[ids[0]]] + [table.within[i] for i in ids[1:]]
            assert sum(counts) == len(text.encode("utf-8")) and counts[-1] == 0  # the separator


def test_packed_validation_blocks_keep_each_tokens_byte_count(byte_level, shakespeare_tokenizer_dir):
    """pack_into_blocks cuts byte_counts where it cuts the ids; the streaming path and the cache keep them too."""
    import datasets

    from hf_gpt_custom.training.data import pack_into_blocks

    tokenizer = _byte_level_with(shakespeare_tokenizer_dir, normalizers.NFC())
    documents = REWRITTEN * 5
    tokenized = tokenize_documents(datasets.Dataset.from_dict({"text": documents}), tokenizer, count_bytes=True)
    ids = [i for row in tokenized["input_ids"] for i in row]
    counts = [n for row in tokenized["byte_counts"] for n in row]
    for dataset in (tokenized, tokenized.to_iterable_dataset()):
        blocks = list(pack_into_blocks(dataset, 7))
        assert [i for block in blocks for i in block["input_ids"]] == ids[: len(blocks) * 7]
        assert [n for block in blocks for n in block["byte_counts"]] == counts[: len(blocks) * 7]


def test_tokenised_training_documents_are_what_the_check_tokenises(byte_level):
    """check() must see documents as the data pipeline cuts them: the same encoder, no special tokens."""
    import datasets

    documents = datasets.Dataset.from_dict({"text": TEXTS})
    tokenized = tokenize_documents(documents, byte_level)["input_ids"]
    assert [ids[:-1] for ids in tokenized] == document_encoder(byte_level)(TEXTS)


def test_validation_divides_by_the_bytes_of_the_documents_it_predicts(shakespeare_path, cpu_accelerator):
    """evaluate_loss on blocks that each begin with the separator, so that every document is predicted whole: its
    bytes must be the documents' UTF-8 bytes, the dummy space before each SentencePiece document not counted."""
    import math

    import datasets

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM

    tokenizer = sentencepiece_like(shakespeare_path)
    documents = [s for s in shakespeare_path.read_text(encoding="utf-8")[-3_000:].split("\n\n") if s]
    eos = tokenizer.eos_token_id
    tokenized = tokenize_documents(datasets.Dataset.from_dict({"text": documents}), tokenizer, count_bytes=True)
    blocks = [([eos] + ids, [0] + counts) for ids, counts in zip(tokenized["input_ids"], tokenized["byte_counts"])]
    torch.manual_seed(0)
    model = GPTCustomForCausalLM(GPTCustomConfig(vocab_size=len(tokenizer), n_positions=max(len(b) for b, _ in blocks),
                                                 n_embd=32, n_layer=1, n_head=2, eos_token_id=eos, bos_token_id=eos))
    batches = [{"input_ids": torch.tensor([ids]), "labels": torch.tensor([ids]), "byte_counts": torch.tensor([counts])}
               for ids, counts in blocks]  # one block per batch: no padding, every token after the first a target
    result = workload.evaluate_loss(model, batches, cpu_accelerator)
    assert result["val_bytes"] == sum(len(document.encode("utf-8")) for document in documents)
    assert result["val_bits_per_byte"] == pytest.approx(
        result["val_loss"] * result["val_tokens"] / (math.log(2) * result["val_bytes"]))


def _llama_like(shakespeare_path, template: str = "<s> $A"):
    """A Llama's kind of tokenizer: SentencePiece pieces, and a post-processor that puts BOS before every text (what
    a Llama's tokenizer.json holds: TemplateProcessing "<s> $A")."""
    from tokenizers import processors

    tokenizer = sentencepiece_like(shakespeare_path)
    specials = [(token, tokenizer.convert_tokens_to_ids(token)) for token in ("<s>", "</s>") if token in template]
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(single=template, special_tokens=specials)
    return tokenizer


@pytest.mark.parametrize("template", ["<s> $A", "<s> $A </s>", "$A"], ids=["llama", "bos-and-eos", "none"])
def test_documents_are_encoded_as_the_tokenizer_encodes_a_text(shakespeare_path, template):
    """Continued pre-training of a Llama encoded its documents without the BOS its tokenizer puts before every text,
    so it trained on documents unlike every prompt it is later given. Reference: the tokenizer's own call, as
    transformers' run_clm.py encodes documents, then one end-of-text separator (the tokenizer's own, if it adds it)."""
    import datasets

    tokenizer = _llama_like(shakespeare_path, template)
    eos, bos = tokenizer.eos_token_id, tokenizer.bos_token_id
    texts = NO_LEADING_SPACE
    tokenized = tokenize_documents(datasets.Dataset.from_dict({"text": texts}), tokenizer)["input_ids"]
    reference = [tokenizer(text)["input_ids"] for text in texts]
    assert tokenized == [ids if ids[-1] == eos else ids + [eos] for ids in reference]
    assert all(ids.count(eos) == 1 for ids in tokenized)
    assert all((ids[0] == bos) is template.startswith("<s>") for ids in tokenized)


def test_bits_per_byte_counts_a_documents_first_piece_after_its_bos(shakespeare_path):
    """The dummy space SentencePiece puts before a text is no byte of it: a document's first piece is counted one
    byte short. After BOS it was counted whole (the table looked for end-of-text before it), one byte too many a
    document. Reference: the documents' UTF-8 bytes, with nothing left over for the separator to correct."""
    import datasets

    tokenizer = _llama_like(shakespeare_path)
    documents = [s for s in shakespeare_path.read_text(encoding="utf-8")[-3_000:].split("\n\n") if s]
    table = TokenBytes.of(tokenizer)
    tokenized = tokenize_documents(datasets.Dataset.from_dict({"text": documents}), tokenizer, count_bytes=True)
    for ids, counts, document in zip(tokenized["input_ids"], tokenized["byte_counts"], documents):
        assert ids[0] == tokenizer.bos_token_id and counts[0] == 0
        assert counts[1] == table.at_start[ids[1]] == table.within[ids[1]] - 1
        assert sum(counts) == len(document.encode("utf-8")) and counts[-1] == 0


def test_a_run_with_a_llama_tokenizer_trains_on_bos_and_counts_bytes_after_it(make_config, tmp_path, shakespeare_path):
    """The run itself: its packed blocks hold the tokenizer's BOS after every separator, and its validation blocks
    count a document's first piece as starting after that BOS."""
    import json

    from transformers import AutoTokenizer

    from hf_gpt_custom.training.data import prepare_datasets
    from hf_gpt_custom.training.train import train

    folder = tmp_path / "llama_tokenizer"
    _llama_like(shakespeare_path).save_pretrained(folder)
    config = make_config(f"tokenizer={folder}", f"data_cache_dir={tmp_path / 'cache'}", "max_steps=2",
                         "eval_interval=2")
    train(config)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    eos, bos = tokenizer.eos_token_id, tokenizer.bos_token_id
    data = prepare_datasets(config, tokenizer, folder)
    assert data.is_cache_hit  # what the run itself packed
    stream = [i for block in data.train for i in block["input_ids"]]
    pairs = [(a, b) for a, b in zip(stream, stream[1:]) if a == eos]
    assert pairs and all(b == bos for _, b in pairs)
    table = TokenBytes.of(tokenizer)
    firsts = [(count, table.at_start[i]) for block in data.val
              for previous, i, count in zip(block["input_ids"], block["input_ids"][1:], block["byte_counts"][1:])
              if previous == bos]
    assert firsts and all(count == expected for count, expected in firsts)
    summary = json.loads((Path(config.run_dir) / "training_summary.json").read_text())
    assert summary["val_bits_per_byte"] > 0


def test_a_tokenizer_that_cannot_spell_a_finds_its_bos_with_another_probe(tmp_path):
    """The probe "a" encoded to nothing in a Cyrillic BPE without an unknown token: the empty text matched at 0 and
    the BOS went after each document. Reference: the tokenizer's own call."""
    import datasets
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.train_from_iterator(["Привет мир, это тест. Ещё одна строка текста."] * 20,
                                trainers.BpeTrainer(vocab_size=120, special_tokens=["<s>", "</s>"], show_progress=False))
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>")
    assert tokenizer("a", add_special_tokens=False)["input_ids"] == []
    texts = ["Привет мир", "это тест"]
    tokenized = tokenize_documents(datasets.Dataset.from_dict({"text": texts}), tokenizer)["input_ids"]
    assert tokenized == [tokenizer(text)["input_ids"] + [tokenizer.eos_token_id] for text in texts]


@pytest.mark.parametrize("normalizer", [normalizers.NFC(), normalizers.NFD()], ids=["NFC-shortens", "NFD-lengthens"])
@pytest.mark.parametrize("blocks_scored", [None, 2], ids=["all-blocks", "eval_batches-cut"])
def test_a_document_cut_into_blocks_divides_by_the_written_bytes_its_scored_tokens_cover(
        shakespeare_tokenizer_dir, normalizer, blocks_scored):
    """The whole difference between the table and the text sat on each document's separator, lost whenever that
    token went unscored (the dropped tail, eval_batches' cut, a block's position 0): one validation document read
    6.07 bits per byte for 4.12 (the bpb2 hunt). Reference: the bytes of the text as written that each scored token
    covers, from the fast tokenizer's offsets, which point into the text before normalization."""
    import datasets

    from hf_gpt_custom.training.data import pack_into_blocks

    tokenizer = _byte_level_with(shakespeare_tokenizer_dir, normalizer)
    text = unicodedata.normalize("NFD" if isinstance(normalizer, normalizers.NFC) else "NFC",
                                 "한국어 문장은 조합형으로 적혀 있습니다. Crème brûlée, déjà vu. " * 40)
    block_size = 64
    blocks = pack_into_blocks(tokenize_documents(datasets.Dataset.from_dict({"text": [text]}), tokenizer,
                                                 count_bytes=True), block_size)
    if blocks_scored:
        blocks = blocks.select(range(blocks_scored))
    counted = sum(sum(row[1:]) for row in blocks["byte_counts"])  # what evaluate_loss divides by
    covered, end = [], 0  # written bytes per token: each token takes the text from where the last one ended
    for _, stop in tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]:
        covered.append(len(text[end:max(stop, end)].encode("utf-8")))
        end = max(stop, end)
    covered.append(len(text[end:].encode("utf-8")))  # the separator: anything left over
    reference = sum(covered[b * block_size + p] for b in range(len(blocks)) for p in range(1, block_size))
    table = TokenBytes.of(tokenizer)
    assert sum(table.within[i] for i in tokenize_documents(datasets.Dataset.from_dict({"text": [text]}),
                                                           tokenizer)["input_ids"][0]) != len(text.encode("utf-8"))
    assert counted == pytest.approx(reference, rel=0.01)


@pytest.mark.parametrize("blocks_scored", [None, 1], ids=["all-blocks", "eval_batches-cut"])
@pytest.mark.parametrize("normalizer, text", [
    # NFKC spells "½" (2 bytes) "1⁄2" (5) and "²" (2) "2" (1): one ½ per three m², and the probes see NFKC too
    (normalizers.NFKC(), "½ cup, 3 m² 4 m² 5 m² " * 8 + "a plain tail of words to end on. " * 8),
    # lower-casing keeps every probe's length (the table passes them all) but spells "İ" (2) "i̇" (3), "ẞ" (3) "ß" (2)
    (normalizers.Lowercase(), "İSTANBUL ẞTRASSE " * 12 + "A PLAIN TAIL OF WORDS TO END ON. " * 8),
    # WordPiece: "##" counted as 2 bytes a piece, the spaces between words as none; a lower-case text its
    # normalizer leaves as it is
    ("wordpiece", "zyxwv " * 10 + "a " * 70),
], ids=["NFKC", "lowercase", "wordpiece"])
def test_a_table_whose_total_merely_matches_the_text_is_not_taken_for_its_counts(shakespeare_tokenizer_dir,
                                                                                  shakespeare_path, blocks_scored,
                                                                                  normalizer, text):
    """A document whose table total equals its text's took the table's counts although each is off, and a block cut
    inside the document divided by bytes its tokens do not cover (the roundreview8 hunt: 7.17 bits per byte for
    8.78). Reference: the bytes of the text as written that each scored token covers, from the fast tokenizer's
    offsets."""
    import datasets

    from hf_gpt_custom.training.data import pack_into_blocks

    tokenizer = (_wordpiece(shakespeare_path) if normalizer == "wordpiece"
                 else _byte_level_with(shakespeare_tokenizer_dir, normalizer))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    table = TokenBytes.of(tokenizer)
    assert sum(table.within[i] for i in ids) == len(text.encode("utf-8"))  # the coincidence
    block_size = 48
    blocks = pack_into_blocks(tokenize_documents(datasets.Dataset.from_dict({"text": [text]}), tokenizer,
                                                 count_bytes=True), block_size)
    if blocks_scored:
        blocks = blocks.select(range(blocks_scored))
    counted = sum(sum(row[1:]) for row in blocks["byte_counts"])
    covered, end = [], 0
    for _, stop in tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]:
        covered.append(len(text[end:max(stop, end)].encode("utf-8")))
        end = max(stop, end)
    covered.append(len(text[end:].encode("utf-8")))
    reference = sum(covered[b * block_size + p] for b in range(len(blocks)) for p in range(1, block_size))
    assert counted == reference


def test_a_rebuild_counts_with_the_code_of_now_not_datasets_cache_of_an_earlier_map(shakespeare_tokenizer_dir,
                                                                                       tmp_path, monkeypatch):
    """datasets caches a map's result under a hash of the mapped function, which does not cover the code it calls
    (token_bytes.py): after CACHE_FORMAT_VERSION moved for a new counting rule, the rebuild read the old counts back
    from that cache (the roundreview8 hunt). Reference: the same documents counted in memory, where nothing is
    cached."""
    import datasets

    from hf_gpt_custom.training import data

    tokenizer = _byte_level_with(shakespeare_tokenizer_dir, normalizers.NFC())
    (tmp_path / "val.jsonl").write_text("".join(f'{{"text": "{text}"}}\n' for text in REWRITTEN), encoding="utf-8")
    on_disk = datasets.load_dataset("json", data_files=str(tmp_path / "val.jsonl"), split="train",
                                    cache_dir=str(tmp_path / "raw"))
    with monkeypatch.context() as patched:  # an earlier rule: every byte on the separator
        patched.setattr(TokenBytes, "written_counts", staticmethod(
            lambda text, offsets, n_before, n_after: [0] * (n_before + len(offsets) + n_after - 1)
            + [len(text.encode("utf-8"))]))
        old = tokenize_documents(on_disk, tokenizer, count_bytes=True)["byte_counts"]
    now = tokenize_documents(on_disk, tokenizer, count_bytes=True)["byte_counts"]
    in_memory = tokenize_documents(datasets.Dataset.from_dict({"text": REWRITTEN}), tokenizer,
                                   count_bytes=True)["byte_counts"]
    assert now == in_memory != old
    assert data.CACHE_FORMAT_VERSION >= 8  # caches of the two earlier rules under 7 are not read


def test_without_offsets_the_tables_counts_are_scaled_to_the_document_by_hand():
    """The fallback where no offsets match the tokens: the table's counts scaled to the text's bytes, cumulatively
    rounded so that every prefix keeps its share and the sum is the text's. Worked by hand: table 3,3,3 for 20
    bytes -> 6.67, 13.33, 20 -> 7, 13, 20 -> 7, 6, 7."""
    table = TokenBytes(within=[0, 3, 3, 3], at_start=[0, 3, 3, 3])
    assert table.document_counts([1, 2, 3, 0], "x" * 20, 0) == [7, 6, 7, 0]
    assert table.document_counts([1, 2, 3, 0], "x" * 9, 0) == [3, 3, 3, 0]  # exact: the table's own
    assert table.document_counts([0, 0], "x" * 5, 0) == [0, 5]  # no token spells text: the last carries it
    assert TokenBytes.written_counts("cafe\u0301 ok", [(0, 5), (5, 8)], 1, 1) == [0, 6, 3, 0]
