"""`hf-gpt-custom eval --model <run>/checkpoints/step_N`: a checkpoint has no tokenizer of its own, but its
training_settings.json records the one its run trained with (as `train init_from=<checkpoint>` finds it). Evaluation
uses it, and refuses a --tokenizer with another vocabulary: a wrong one scored other ids without a word (a docs-claims
hunt: COPA 0.80 with a WikiText tokenizer against 1.00 with the run's own)."""

from __future__ import annotations

import pytest

from hf_gpt_custom.errors import UserError


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, shakespeare_path, shakespeare_tokenizer_dir, shared_data_cache):
    from hf_gpt_custom.training.config import load_train_config
    from hf_gpt_custom.training.train import train

    from tests.helpers import tiny_run_overrides

    out_dir = tmp_path_factory.mktemp("runs") / "tiny"
    config = load_train_config(None, tiny_run_overrides(out_dir, shakespeare_path, shakespeare_tokenizer_dir,
                                                        shared_data_cache)
                               + ["max_steps=2", "eval_interval=2", "checkpoint_interval=2"])
    run_dir = train(config)
    return run_dir / "checkpoints" / "step_000002", shakespeare_tokenizer_dir


def test_a_checkpoint_is_scored_with_the_tokenizer_its_run_trained_with(checkpoint, tmp_path, capsys):
    from hf_gpt_custom.cli import main
    from hf_gpt_custom.eval.runner import evaluate

    folder, trained_with = checkpoint
    assert not (folder / "tokenizer.json").exists()
    found = evaluate(str(folder), tasks=["copa"], limit=4, show_progress=False)
    named = evaluate(str(folder), tokenizer=str(trained_with), tasks=["copa"], limit=4, show_progress=False)
    assert [e["loglikelihoods"] for e in found.examples] == [e["loglikelihoods"] for e in named.examples]
    main(["eval", "--model", str(folder), "--tasks", "copa", "--limit", "2", "--out", str(tmp_path / "out")])
    assert (tmp_path / "out" / "results.json").is_file()


def test_a_checkpoint_refuses_a_tokenizer_with_another_vocabulary(checkpoint, tmp_path):
    from hf_gpt_custom import GPTCustomTokenizerFast
    from hf_gpt_custom.eval.runner import evaluate

    folder, trained_with = checkpoint
    other = tmp_path / "bytes"
    GPTCustomTokenizerFast.bytes_only().save_pretrained(other)
    with pytest.raises(UserError, match=rf"--tokenizer {other} has another vocabulary \(257 tokens\) than the "
                                        rf"tokenizer {folder} was trained with \({trained_with}\) \(512 tokens\)"):
        evaluate(str(folder), tokenizer=str(other), tasks=["copa"], limit=2, show_progress=False)


def test_a_folder_only_named_like_a_checkpoint_uses_no_tokenizer_of_a_run(tmp_path, shakespeare_tokenizer_dir):
    """`.../checkpoints/step_000010` with no training settings is no run's checkpoint: `../../tokenizer` beside it
    was taken silently (a review of this round); it needs --tokenizer, as any folder without one does."""
    import shutil

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
    from hf_gpt_custom.errors import MissingFileError
    from hf_gpt_custom.eval.runner import checkpoint_tokenizer, evaluate

    folder = tmp_path / "checkpoints" / "step_000010"
    GPTCustomForCausalLM(GPTCustomConfig(vocab_size=512, n_positions=64, n_embd=32, n_layer=1, n_head=2)).save_pretrained(folder)
    shutil.copytree(shakespeare_tokenizer_dir, tmp_path / "tokenizer")
    assert checkpoint_tokenizer(folder) is None
    with pytest.raises(MissingFileError, match="tokenizer"):
        evaluate(str(folder), tasks=["copa"], limit=1, show_progress=False)
    named = evaluate(str(folder), tokenizer=str(shakespeare_tokenizer_dir), tasks=["copa"], limit=1, show_progress=False)
    assert named.results
