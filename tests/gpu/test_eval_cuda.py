"""On CUDA, `--batch-size auto` probes the GPU (a tiny model: the first batch tried fits) and scores what batch 16
scores."""

import pytest

from tests.helpers import build_tiny_model_folder

pytestmark = pytest.mark.gpu


def test_auto_batch_on_cuda_fits_the_first_try_and_scores_as_batch_16(tmp_path, shared_data_dir):
    from hf_gpt_custom.eval.auto_batch import START
    from hf_gpt_custom.eval.runner import evaluate

    folder = build_tiny_model_folder(tmp_path / "tiny", shared_data_dir)
    settings = dict(tasks=["copa", "lambada"], shots=[0, 1], limit=8, device="cuda", show_progress=False)
    auto = evaluate(str(folder), batch_size="auto", **settings)
    assert auto.config["batch_size"] == START and auto.config["device"] == "cuda"
    fixed = evaluate(str(folder), batch_size=16, **settings)
    assert [row["value"] for row in auto.results] == pytest.approx([row["value"] for row in fixed.results], rel=1e-5)
