"""Bytes per token, the denominator of validation bits per byte: every count is checked against the text's own
`len(text.encode("utf-8"))`, the denominator lm-evaluation-harness uses, for each kind of tokenizer a run may use."""

import logging

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
    """The bytes evaluate_loss counts for these documents packed as training packs them (each followed by the
    end-of-text token), every token a prediction target, the stream starting after a separator."""
    eos = tokenizer.eos_token_id
    stream = [eos] + [i for ids in document_encoder(tokenizer)(texts) for i in ids + [eos]]
    table = TokenBytes.of(tokenizer)
    ids = torch.tensor([stream])
    return int(table.count(ids[:, 1:], ids[:, :-1], eos)[0])


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


def test_training_warns_when_bits_per_byte_cannot_be_exact(shakespeare_path, make_config, tmp_path, caplog,
                                                           cpu_accelerator):
    folder = tmp_path / "stripped"
    sentencepiece_like(shakespeare_path, normalizer=normalizers.Sequence(
        [normalizers.NFD(), normalizers.StripAccents()])).save_pretrained(folder)
    config = make_config(f"tokenizer={folder}")
    with caplog.at_level(logging.WARNING, logger=workload.__name__):
        work = workload.LanguageModelling().prepare(config, cpu_accelerator)
    assert "val_bits_per_byte is approximate" in caplog.text and "naïve" in caplog.text
    assert len(work.tokenizer) == 700


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

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM

    tokenizer = sentencepiece_like(shakespeare_path)
    documents = [s for s in shakespeare_path.read_text(encoding="utf-8")[-3_000:].split("\n\n") if s]
    eos = tokenizer.eos_token_id
    blocks = [[eos] + ids + [eos] for ids in document_encoder(tokenizer)(documents)]
    width = max(map(len, blocks))
    torch.manual_seed(0)
    model = GPTCustomForCausalLM(GPTCustomConfig(vocab_size=len(tokenizer), n_positions=width, n_embd=32, n_layer=1,
                                                 n_head=2, eos_token_id=eos, bos_token_id=eos))
    batches = []
    for ids in blocks:  # one block per batch: no padding, every token after the first a target
        batches.append({"input_ids": torch.tensor([ids]), "labels": torch.tensor([ids])})
    result = workload.evaluate_loss(model, batches, cpu_accelerator, TokenBytes.of(tokenizer), eos)
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

    from hf_gpt_custom.training.data import document_starts_after

    tokenizer = _llama_like(shakespeare_path, template)
    eos, bos = tokenizer.eos_token_id, tokenizer.bos_token_id
    texts = NO_LEADING_SPACE
    tokenized = tokenize_documents(datasets.Dataset.from_dict({"text": texts}), tokenizer)["input_ids"]
    reference = [tokenizer(text)["input_ids"] for text in texts]
    assert tokenized == [ids if ids[-1] == eos else ids + [eos] for ids in reference]
    assert all(ids.count(eos) == 1 for ids in tokenized)
    assert all((ids[0] == bos) is template.startswith("<s>") for ids in tokenized)
    assert document_starts_after(tokenizer) == ((eos, bos) if template.startswith("<s>") else (eos,))


def test_bits_per_byte_counts_a_documents_first_piece_after_its_bos(shakespeare_path, cpu_accelerator):
    """The dummy space SentencePiece puts before a text is no byte of it: a document's first piece is counted one
    byte short. After BOS it was counted whole (the table looked for end-of-text before it), one byte too many a
    document. Reference: the documents' UTF-8 bytes."""
    import datasets

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
    from hf_gpt_custom.training.data import document_starts_after

    tokenizer = _llama_like(shakespeare_path)
    documents = [s for s in shakespeare_path.read_text(encoding="utf-8")[-3_000:].split("\n\n") if s]
    eos = tokenizer.eos_token_id
    blocks = [[eos] + ids for ids in tokenize_documents(datasets.Dataset.from_dict({"text": documents}),
                                                         tokenizer)["input_ids"]]
    torch.manual_seed(0)
    model = GPTCustomForCausalLM(GPTCustomConfig(vocab_size=len(tokenizer), n_positions=max(map(len, blocks)),
                                                 n_embd=32, n_layer=1, n_head=2, eos_token_id=eos, bos_token_id=eos))
    batches = [{"input_ids": torch.tensor([ids]), "labels": torch.tensor([ids])} for ids in blocks]
    result = workload.evaluate_loss(model, batches, cpu_accelerator, TokenBytes.of(tokenizer),
                                    document_starts_after(tokenizer))
    assert result["val_bytes"] == sum(len(document.encode("utf-8")) for document in documents)


def test_a_run_with_a_llama_tokenizer_trains_on_bos_and_counts_bytes_after_it(make_config, tmp_path, shakespeare_path,
                                                                               monkeypatch):
    """The run itself: its packed blocks hold the tokenizer's BOS after every separator, and its validation counts a
    document's first piece as starting after that BOS."""
    from hf_gpt_custom.training.train import train

    folder = tmp_path / "llama_tokenizer"
    _llama_like(shakespeare_path).save_pretrained(folder)
    seen = []
    real = workload.evaluate_loss
    monkeypatch.setattr(workload, "evaluate_loss", lambda *args: seen.append(args[-1]) or real(*args))
    config = make_config(f"tokenizer={folder}", f"data_cache_dir={tmp_path / 'cache'}", "max_steps=2",
                         "eval_interval=2")
    train(config)
    from transformers import AutoTokenizer

    from hf_gpt_custom.training.data import prepare_datasets

    tokenizer = AutoTokenizer.from_pretrained(folder)
    eos, bos = tokenizer.eos_token_id, tokenizer.bos_token_id
    assert seen and all(after == (eos, bos) for after in seen)
    stream = [i for block in prepare_datasets(config, tokenizer, folder).train for i in block["input_ids"]]
    pairs = [(a, b) for a, b in zip(stream, stream[1:]) if a == eos]
    assert pairs and all(b == bos for _, b in pairs)


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
