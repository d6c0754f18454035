"""Tiny models for the eval tests: a byte-level BPE tokenizer trained here and a random GPT-2, saved to a folder.

The tokenizer is trained with the `tokenizers` library on the start of tiny Shakespeare plus benchmark text and
loaded back as a transformers GPT-2 tokenizer from its folder (vocab.json + merges.txt), so nothing needs the Hub.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


def build_tiny_model_folder(folder: Path, shared_data_dir: Path, n_positions: int = 1024, vocab_size: int = 400) -> Path:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel

    folder.mkdir(parents=True, exist_ok=True)
    corpus = [(shared_data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:60_000]]
    corpus += (shared_data_dir / "arc" / "ARC-Easy-Test.jsonl").read_text(encoding="utf-8").splitlines()[:300]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=vocab_size, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save_model(str(folder))
    from transformers import GPT2TokenizerFast

    tokenizer = GPT2TokenizerFast.from_pretrained(
        str(folder), bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>"
    )
    tokenizer.model_max_length = n_positions
    tokenizer.save_pretrained(str(folder))
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=n_positions, n_embd=32, n_layer=2, n_head=4,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2LMHeadModel(config)
    # Larger-than-default weights so the random model has peaked, distinguishable distributions.
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.1) if parameter.dim() > 1 else None
    model.eval()
    model.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny_model_folder(tmp_path_factory, shared_data_dir) -> Path:
    return build_tiny_model_folder(tmp_path_factory.mktemp("tiny_gpt2"), shared_data_dir)


@pytest.fixture(scope="session")
def tiny_model_and_tokenizer(tiny_model_folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_folder)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_folder))
    return model, tokenizer
