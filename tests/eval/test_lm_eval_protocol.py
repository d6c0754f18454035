"""protocol "lm-eval" scores exactly as lm-eval does where our default deliberately differs (eval/tasks/README.md):
LAMBADA's target_delimiter " " and all K examples kept, the prompt cut from the left by the scorer.

The reference is lm-eval 0.4.13 itself: its own lambada_openai YAML (templates, delimiter) read by its
ConfigurableTask over the same local file (the one lm-eval's Hub copy pins), and its HFLM scoring a model whose
128-token context cannot hold the 3-shot prompts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hf_gpt_custom.eval.fewshot import build_prompts
from hf_gpt_custom.eval.task import load_task

N_DOCS, K, SEED = 6, 3, 1234


@pytest.fixture(scope="module")
def lm_eval_lambada_instances(shared_data_dir, tmp_path_factory):
    """lm-eval's requests for lambada_openai at K=3, its template unchanged, data from the local test file."""
    import lm_eval
    from lm_eval.api.task import ConfigurableTask

    config = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "lambada" / "lambada_openai.yaml").read_text())
    assert "fewshot_split" not in config  # so lm-eval draws examples from the test docs, the scored one included
    config.update(
        dataset_path="json", dataset_name=None, num_fewshot=K,
        dataset_kwargs={
            "data_files": {"test": str(shared_data_dir / "lambada" / "lambada_test.jsonl")},
            "cache_dir": str(tmp_path_factory.mktemp("hf_datasets_cache")),
        },
    )
    task = ConfigurableTask(config=config)
    task.set_fewshot_seed(SEED)
    task.build_all_requests(limit=N_DOCS, rank=0, world_size=1)
    return sorted(task.instances, key=lambda instance: instance.doc_id)


@pytest.fixture(scope="module")
def short_context_model_folder(tmp_path_factory, shared_data_dir):
    from tests.helpers import build_tiny_model_folder

    return build_tiny_model_folder(tmp_path_factory.mktemp("tiny_gpt2_128"), shared_data_dir, n_positions=128)


def _our_requests(protocol: str, shared_data_dir, tokenizer, max_length: int):
    from hf_gpt_custom.eval.runner import build_requests

    spec = load_task("lambada", protocol=protocol)
    docs = spec.docs("test", shared_data_dir)
    prompts = build_prompts(spec, docs[:N_DOCS], docs, K, SEED, tokenizer, max_length)
    return prompts, [request for doc, prompt in zip(docs, prompts) for request in build_requests(spec, doc, prompt)]


def test_lm_eval_protocol_prompts_equal_lm_eval(lm_eval_lambada_instances, shared_data_dir, short_context_model_folder):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(short_context_model_folder))
    prompts, requests = _our_requests("lm-eval", shared_data_dir, tokenizer, max_length=128)
    theirs = [tuple(instance.arguments) for instance in lm_eval_lambada_instances]
    assert [(r.context, r.continuation) for r in requests] == theirs
    assert all(p.n_examples == K and p.n_dropped == 0 for p in prompts)
    assert all("  " in context for context, _ in theirs)  # lm-eval's "word  word": target_delimiter " "

    # Our default differs on both counts: examples end "word word", and where K do not fit (here in 400 tokens;
    # 128 cannot hold one example) the farthest are dropped.
    default_prompts, default_requests = _our_requests("ours", shared_data_dir, tokenizer, max_length=400)
    assert any(p.n_dropped > 0 for p in default_prompts)
    assert [(r.context, r.continuation) for r in default_requests] != theirs


def test_lm_eval_protocol_loglikelihoods_equal_lm_eval_under_left_truncation(
    lm_eval_lambada_instances, shared_data_dir, short_context_model_folder
):
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_gpt_custom.eval.scoring import CausalLMScorer, score_requests

    model = AutoModelForCausalLM.from_pretrained(str(short_context_model_folder)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(short_context_model_folder))
    _, requests = _our_requests("lm-eval", shared_data_dir, tokenizer, max_length=128)
    ours = score_requests(CausalLMScorer(model, tokenizer, batch_size=4), requests, show_progress=False)
    reference = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=4, device="cpu")
    theirs = reference.loglikelihood(lm_eval_lambada_instances, disable_tqdm=True)
    assert all(scored.is_truncated for scored in ours)  # every prompt was cut: the comparison covers that path
    assert [s.loglikelihood for s in ours] == pytest.approx([ll for ll, _ in theirs], abs=1e-4, rel=0)
    assert [s.is_greedy for s in ours] == [greedy for _, greedy in theirs]
