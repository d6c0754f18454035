"""Tiny models for the eval tests: a byte-level BPE tokenizer trained here and a random GPT-2, saved to a folder.

The tokenizer is trained with the `tokenizers` library on the start of tiny Shakespeare plus benchmark text and
loaded back as a transformers GPT-2 tokenizer from its folder (vocab.json + merges.txt), so nothing needs the Hub.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import build_tiny_model_folder


@pytest.fixture(scope="session")
def tiny_model_folder(tmp_path_factory, shared_data_dir) -> Path:
    return build_tiny_model_folder(tmp_path_factory.mktemp("tiny_gpt2"), shared_data_dir)


@pytest.fixture(scope="session")
def tiny_model_and_tokenizer(tiny_model_folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_folder)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_folder))
    return model, tokenizer


@pytest.fixture(scope="module")
def short_context_model(tmp_path_factory) -> Path:
    """The shortest context the project's recipes make (smoke: 64 positions) with the 257-token byte tokenizer."""
    from hf_gpt_custom import GPTCustomTokenizerFast
    from tests.helpers import save_tiny_model

    folder = tmp_path_factory.mktemp("short") / "model"
    tokenizer = GPTCustomTokenizerFast.bytes_only()
    save_tiny_model(folder, len(tokenizer), n_positions=64, seed=0, bos_token_id=tokenizer.eos_token_id,
                    eos_token_id=tokenizer.eos_token_id)
    tokenizer.save_pretrained(folder)
    return folder
