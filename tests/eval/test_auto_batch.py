"""`--batch-size auto`, as lm-eval's: the largest batch of max_length-token rows whose forward fits, halving on an
out-of-memory error; 16 on a CPU. The GPU's memory error is simulated here (CI has no GPU): the model raises
torch.cuda.OutOfMemoryError, with CUDA's own message, for a batch above what the "GPU" holds."""

from __future__ import annotations

import json

import pytest
import torch

from hf_gpt_custom.eval.auto_batch import largest_batch_that_fits
from hf_gpt_custom.eval.runner import evaluate


def _holding(model, monkeypatch, rows: int, seen: list[tuple[int, ...]]):
    forward = model.forward

    def limited(*args, input_ids=None, **kwargs):
        seen.append(tuple(input_ids.shape))
        if input_ids.shape[0] > rows:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                                              "capacity of 79.19 GiB")
        return forward(*args, input_ids=input_ids, **kwargs)

    monkeypatch.setattr(model, "forward", limited)


@pytest.mark.parametrize("rows, chosen", [(64, 64), (40, 32), (20, 16), (1, 1)])
def test_auto_halves_from_64_until_the_forward_of_the_longest_rows_fits(tiny_model_and_tokenizer, monkeypatch,
                                                                       rows, chosen):
    model, _ = tiny_model_and_tokenizer
    seen = []
    _holding(model, monkeypatch, rows, seen)
    assert largest_batch_that_fits(model, max_length=48, probe=True) == chosen
    tried = [64 >> halvings for halvings in range(len(seen))]
    assert seen == [(size, 48) for size in tried] and tried[-1] == chosen


def test_auto_where_not_one_row_fits_scores_one_at_a_time_as_lm_eval_and_other_errors_are_not_memory(
        tiny_model_and_tokenizer, monkeypatch, caplog):
    """lm-eval's HFLM._detect_batch_size falls back to batch 1 where no row as long as the context fits (a
    long-context model's 131,072 tokens): the requests it scores are shorter. We refused the whole evaluation."""
    model, _ = tiny_model_and_tokenizer
    _holding(model, monkeypatch, 0, [])
    with caplog.at_level("WARNING"):
        assert largest_batch_that_fits(model, max_length=48, probe=True) == 1
    assert "not even one row of 48 tokens (the model's context) fits on cpu; scoring with batch size 1" in caplog.text
    monkeypatch.setattr(model, "forward", lambda *args, **kwargs: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):  # not taken for a full GPU
        largest_batch_that_fits(model, max_length=48, probe=True)


def test_auto_probes_a_model_whose_config_asks_for_tuples(tmp_path):
    """A converted folder carries config.json's return_dict: false; the probe read .logits off a tuple (the
    roundreview19 hunt). Reference: transformers' GPT-2 folder with return_dict=False."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom import GPTCustomForCausalLM

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=60, n_positions=32,
                               return_dict=False)).save_pretrained(tmp_path)
    model = GPTCustomForCausalLM.from_pretrained(tmp_path)
    assert model.config.return_dict is False
    assert largest_batch_that_fits(model, max_length=32, start=4, probe=True) == 4


def test_auto_on_a_cpu_is_16_and_scores_as_any_batch_does(tiny_model_folder, tmp_path):
    auto = evaluate(str(tiny_model_folder), tasks=["copa", "lambada"], shots=[0], limit=5, batch_size="auto",
                    device="cpu", show_progress=False, out_dir=tmp_path)
    assert json.loads((tmp_path / "results.json").read_text())["config"]["batch_size"] == 16
    one = evaluate(str(tiny_model_folder), tasks=["copa", "lambada"], shots=[0], limit=5, batch_size=1, device="cpu",
                   show_progress=False)
    assert [row["value"] for row in auto.results] == pytest.approx([row["value"] for row in one.results], rel=1e-6)


def test_the_cli_takes_auto_and_names_the_choices_for_anything_else(capsys):
    from hf_gpt_custom.cli import main

    with pytest.raises(SystemExit):
        main(["eval", "--model", "m", "--tasks", "copa", "--batch-size", "max", "--out", "o"])
    assert "expected a number of requests like 16, or auto, got 'max'" in capsys.readouterr().err


def test_evaluate_scores_in_the_batch_auto_chose_for_the_models_context(tiny_model_folder, monkeypatch):
    import hf_gpt_custom.eval.runner as runner

    asked = []
    monkeypatch.setattr(runner, "largest_batch_that_fits", lambda model, max_length: asked.append(max_length) or 3)
    results = evaluate(str(tiny_model_folder), tasks=["copa"], shots=[0], limit=2, batch_size="auto", device="cpu",
                       show_progress=False)
    assert results.config["batch_size"] == 3 and asked == [1024]  # the tiny model's n_positions


def test_auto_probes_a_prompt_learning_model_with_rows_as_long_as_the_scorers(monkeypatch):
    """A PEFT prompt-learning model's learned tokens come before each row: the probe's rows of the whole context ran
    past the last position on a GPU ("input_ids has 36 tokens but n_positions is 32"; GPT-2: an IndexError), though
    no scored row is that long (the roundreview27 hunt). The probe is forced on here, as CUDA runs it. Reference: the
    scorer's window, context less the learned tokens, and the batch a fixed size scores in."""
    import functools

    from peft import PromptTuningConfig, TaskType, get_peft_model

    import hf_gpt_custom.eval.runner as runner
    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM, GPTCustomTokenizerFast

    tokenizer = GPTCustomTokenizerFast.bytes_only()
    torch.manual_seed(0)
    base = GPTCustomForCausalLM(GPTCustomConfig(vocab_size=len(tokenizer), n_positions=32, n_embd=16, n_layer=1,
                                                n_head=2))
    model = get_peft_model(base, PromptTuningConfig(task_type=TaskType.CAUSAL_LM, num_virtual_tokens=4)).eval()
    probed = []
    monkeypatch.setattr(runner, "largest_batch_that_fits", lambda model, max_length: probed.append(max_length) or
                        largest_batch_that_fits(model, max_length, start=4, probe=True))
    auto = evaluate(model, tokenizer, tasks=["copa"], shots=[0], limit=2, batch_size="auto", show_progress=False)
    assert probed == [28] and auto.config["batch_size"] == 4
    fixed = evaluate(model, tokenizer, tasks=["copa"], shots=[0], limit=2, batch_size=4, show_progress=False)
    assert auto.results == fixed.results
