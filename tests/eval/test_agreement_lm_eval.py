"""Agreement with lm-evaluation-harness 0.4.13: same saved model folder, same docs, same prompts, same K.

lm-eval runs its own HFLM on the folder (offline) over our processed docs written as local JSON task files
(tests/eval/lm_eval_tasks.py); our evaluator runs on the same folder. Per request, the prompt and continuation must
be identical, log-likelihoods within 1e-4 and is_greedy equal; per task, acc / acc_norm equal. Few-shot (K=2) is
compared too: our sampler reproduces lm-eval's (same seed, K + 1 drawn from the scored split, the doc removed).
"""

from __future__ import annotations

import pytest

from tests.eval.lm_eval_tasks import run_lm_eval, write_lm_eval_tasks

TASKS = ["lambada", "piqa", "arc_easy", "winogrande"]
LIMIT = 15


@pytest.fixture(scope="module")
def lm_eval_task_dir(tmp_path_factory, shared_data_dir):
    task_dir = tmp_path_factory.mktemp("lm_eval_tasks")
    write_lm_eval_tasks(TASKS, task_dir, shared_data_dir)
    return task_dir


@pytest.mark.parametrize("num_fewshot", [0, 2])
def test_loglikelihoods_and_accuracies_match_lm_eval(tiny_model_folder, lm_eval_task_dir, num_fewshot, tmp_path):
    from hf_gpt_custom.eval.runner import evaluate

    reference = run_lm_eval(
        tiny_model_folder, lm_eval_task_dir, [f"ours_{name}" for name in TASKS], num_fewshot, LIMIT, batch_size=8
    )
    ours = evaluate(  # on lm-eval's device (run_lm_eval: the CPU), so the sums agree to float32 rounding
        str(tiny_model_folder), tasks=TASKS, shots=[num_fewshot], limit=LIMIT, batch_size=8, show_progress=False,
        device="cpu",
    )
    n_compared = 0
    for name in TASKS:
        their_samples = sorted(reference["samples"][f"ours_{name}"], key=lambda sample: sample["doc_id"])
        our_examples = [e for e in ours.examples if e["task"] == name]
        assert len(their_samples) == len(our_examples) == LIMIT
        for sample, example in zip(their_samples, our_examples):
            contexts = [argument[0] for argument in sample["arguments"]]
            our_contexts = example["prompt"] if isinstance(example["prompt"], list) else [example["prompt"]]
            assert sorted(set(contexts)) == sorted(set(our_contexts)), f"{name} doc {sample['doc_id']}: prompts differ"
            their_lls = [response[0][0] for response in sample["resps"]]
            assert example["loglikelihoods"] == pytest.approx(their_lls, abs=1e-4, rel=0)
            n_compared += len(their_lls)
        for metric in ("acc", "acc_norm"):
            key = f"{metric},none"
            if key in reference["results"][f"ours_{name}"]:
                assert ours.value(name, metric, num_fewshot) == reference["results"][f"ours_{name}"][key], (name, metric)
    assert n_compared > 80


def test_the_lm_eval_protocol_in_bfloat16_gives_lm_evals_loglikelihoods(tiny_model_folder, lm_eval_task_dir, tmp_path):
    """A context shared between a question's choices rounds otherwise than lm-eval's one full row per choice: in
    bfloat16 our scores were not lm-eval's even at batch 1, which --protocol lm-eval promises (the halfprec hunt).
    Reference: lm-eval's HFLM on the same folder in bfloat16, batch 1 on both sides."""
    import shutil

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.eval.runner import evaluate

    folder = tmp_path / "ours"  # our own class on both sides: GPT-2's class would round otherwise in bfloat16
    GPTCustomForCausalLM.from_pretrained(tiny_model_folder).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json"):
        if (tiny_model_folder / name).is_file():
            shutil.copy(tiny_model_folder / name, folder / name)
    tasks = ["piqa", "arc_easy", "winogrande"]
    reference = run_lm_eval(folder, lm_eval_task_dir, [f"ours_{name}" for name in tasks], 0, LIMIT,
                            batch_size=1, dtype="bfloat16")
    ours = evaluate(str(folder), tasks=tasks, limit=LIMIT, batch_size=1, show_progress=False, device="cpu",
                    dtype="bfloat16", protocol="lm-eval")
    for name in tasks:
        their_samples = sorted(reference["samples"][f"ours_{name}"], key=lambda sample: sample["doc_id"])
        our_examples = [e for e in ours.examples if e["task"] == name]
        for sample, example in zip(their_samples, our_examples, strict=True):
            their_lls = [response[0][0] for response in sample["resps"]]
            assert example["loglikelihoods"] == pytest.approx(their_lls, abs=1e-6, rel=0), (name, sample["doc_id"])
