"""Facts the cards state about the software, checked against their sources: the transformers pin is pyproject.toml's
(not a copy that goes stale), and the sentence on new token embeddings says what the installed transformers'
resize_token_embeddings does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.helpers import make_tiny_run

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _pyproject_transformers_pin() -> str:
    match = re.search(r'^\s*"transformers([^"]+)"', PYPROJECT.read_text(encoding="utf-8"), re.MULTILINE)
    return "transformers" + match.group(1).replace(" ", "")


def test_the_pin_is_read_from_pyproject():
    from hf_gpt_custom.model_cards.card import transformers_requirement

    assert transformers_requirement() == _pyproject_transformers_pin()


def test_the_pretrained_card_names_the_projects_transformers_pin(tmp_path):
    from hf_gpt_custom.model_cards.card import build_model_card

    text = build_model_card(make_tiny_run(tmp_path / "runs" / "tiny")).text
    pin = _pyproject_transformers_pin()
    assert f'pip install "{pin}" torch`; add `tiktoken`' in text
    assert re.findall(r"transformers[<>=]=?[\d.,<>=]+", text) == [pin]  # no other version stated anywhere


def test_the_task_card_template_states_the_pin_and_what_resize_token_embeddings_does():
    template = (Path(__file__).resolve().parents[2] / "model_cards" / "templates" / "task_model_card.md").read_text()
    assert "(`{{ transformers_requirement }}`, torch, tokenizers)" in template
    assert not re.search(r"5\.\d\d", template)
    assert "at the mean of the others" not in template
    assert " ".join(template.split()).count("drawn by transformers' `resize_token_embeddings` from a normal "
                                           "distribution with the others' mean and 10⁻⁹ times their covariance") == 2


@pytest.mark.parametrize("tie_word_embeddings", [True, False])
def test_resize_token_embeddings_draws_new_rows_next_to_the_mean_as_the_card_says(tie_word_embeddings):
    """What fine-tuning's resize (finetune.py) does to the two new tokens, in the installed transformers: a sample of
    N(mean, 1e-9 · covariance) — not the mean exactly, and within ~3e-5 of the rows' spread of it."""
    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM

    torch.manual_seed(0)
    model = GPTCustomForCausalLM(GPTCustomConfig(vocab_size=257, n_positions=32, n_embd=32, n_layer=1, n_head=2,
                                                 tie_word_embeddings=tie_word_embeddings))
    old = model.get_input_embeddings().weight.detach().clone()
    model.resize_token_embeddings(259)
    new_rows = model.get_input_embeddings().weight.detach()[257:]
    mean, spread = old.mean(0), old.std(0).mean()
    deviation = (new_rows - mean).abs().max()
    assert 0 < deviation < 3e-4 * spread  # drawn, within ~3e-5 · spread per standard deviation
    assert not torch.equal(new_rows[0], new_rows[1])


@pytest.mark.parametrize("shifted", [False, True])
def test_the_card_says_when_the_blocks_were_cut_anew_each_epoch(tmp_path, shifted):
    from hf_gpt_custom.model_cards.card import build_model_card

    text = build_model_card(make_tiny_run(tmp_path / "runs" / "tiny", shift_block_boundaries=shifted)).text
    assert "cut into blocks of 64 tokens" in text
    assert ("cut at a new offset each epoch (`shift_block_boundaries`)" in text) is shifted
    assert f"| `shift_block_boundaries` | {str(shifted).lower()} |" in text  # as the YAML writes it


@pytest.mark.parametrize("how", ["moved", "copied"])
def test_a_moved_or_copied_run_folders_card_still_says_its_tokenizer_was_trained_for_it(tmp_path, how):
    """The card compared the summary's absolute tokenizer path with the run folder where it is now: after `mv
    runs/a runs/b` it said the tokenizer was "loaded from `tokenizer`" (the interrupts hunt). Reference: the same
    run's card before the move."""
    import shutil

    from hf_gpt_custom.model_cards.card import build_model_card

    run_dir = make_tiny_run(tmp_path / "runs" / "a")
    before = build_model_card(run_dir).text
    assert "trained for this run on its training data" in before
    moved = tmp_path / "elsewhere" / "b"
    moved.parent.mkdir()
    (shutil.move if how == "moved" else shutil.copytree)(run_dir, moved)
    after = build_model_card(moved).text
    assert after == before


def test_a_tokenizer_the_run_was_given_is_not_called_trained_for_it(tmp_path):
    """`tokenizer: gpt2` saves the Hub tokenizer into <run>/tokenizer, and the card said it was "trained for this run
    ... with hf-gpt-custom tokenizer train" because the folder lies in the run folder (the roundreview9 hunt). What
    decides it is the run's own settings: no tokenizer and no init_from given (workload.prepare_tokenizer)."""
    from hf_gpt_custom.model_cards.card import build_model_card

    given = build_model_card(make_tiny_run(tmp_path / "runs" / "given", tokenizer="gpt2")).text
    assert "trained for this run on its training data" not in given and "loaded from" in given
