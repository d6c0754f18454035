"""The same files at another path are the same input: a data or tokenizer folder moved (a repository cloned elsewhere)
continues its run, training on the batches the uninterrupted run trained on, while other contents or another Hub name
at the setting still count as a change. Paths are stored absolute, so before this any move refused the resume."""

import json
import logging
import shutil

import pytest

from hf_gpt_custom.training.config import load_train_config
from hf_gpt_custom.training.resume import moved_inputs
from hf_gpt_custom.training.train import train

from tests.helpers import tiny_run_overrides

STEPS = ("max_steps=4", "checkpoint_interval=2", "keep_checkpoints=3", "eval_interval=4", "eval_batches=1")


def _train_records(run_dir) -> dict[int, dict]:
    records = [json.loads(line) for line in (run_dir / "run_log.jsonl").read_text().splitlines()]
    return {r["step"]: {"loss": r["loss"], "data_digests": r["data_digests"]} for r in records if r["kind"] == "train"}


def test_a_run_whose_data_and_tokenizer_moved_continues_on_the_same_batches(tmp_path, shakespeare_path,
                                                                            shakespeare_tokenizer_dir,
                                                                            shared_data_cache, caplog):
    inputs = tmp_path / "checkout" / "data"
    inputs.mkdir(parents=True)
    (inputs / "input.txt").write_text(shakespeare_path.read_text(encoding="utf-8")[:40_000], encoding="utf-8")
    shutil.copytree(shakespeare_tokenizer_dir, inputs / "tokenizer")

    def config(folder):
        base = tiny_run_overrides(tmp_path / "run", folder / "input.txt", folder / "tokenizer", shared_data_cache)
        return load_train_config(None, [*base, *STEPS])

    run_dir = train(config(inputs))
    uninterrupted = _train_records(run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "step_000004")  # as a crash after the step-2 checkpoint leaves it
    shutil.rmtree(run_dir / "final")
    moved = tmp_path / "elsewhere" / "data"
    shutil.move(inputs.parent, moved.parent)
    with caplog.at_level(logging.WARNING, logger="hf_gpt_custom.training.resume"):
        train(config(moved))
    assert not list((run_dir / "checkpoints").glob("abandoned_*"))  # continued, not started over
    assert _train_records(run_dir) == uninterrupted  # steps 3-4 again, on the same blocks with the same losses
    for role, name in (("dataset", "input.txt"), ("tokenizer", "tokenizer")):
        assert f"{role} moved from {inputs / name} to {moved / name}: the files hold the same contents" in caplog.text
    recorded = json.loads((run_dir / "checkpoints" / "step_000004" / "training_settings.json").read_text())
    assert recorded["dataset"] == str(moved / "input.txt")  # the new checkpoint records where the data is now


@pytest.mark.parametrize("now, expected", [
    ({"dataset": "{new}", "contents.dataset": "aaa"}, ["dataset"]),  # the same files, moved
    ({"dataset": "{new}", "contents.dataset": "bbb"}, []),  # other contents: a change
    ({"dataset": "user/corpus"}, []),  # a Hub name has no contents fingerprint: its name is what is compared
    ({"dataset": "{missing}", "contents.dataset": "aaa"}, []),  # not a local path now
])
def test_only_a_local_path_holding_the_recorded_contents_counts_as_moved(tmp_path, now, expected):
    (tmp_path / "new").mkdir()
    paths = {"new": str(tmp_path / "new"), "missing": str(tmp_path / "missing")}
    recorded = {"dataset": "/old/place", "contents.dataset": "aaa", "learning_rate": 0.1}
    current = {key: value.format(**paths) for key, value in now.items()} | {"learning_rate": 0.1}
    assert moved_inputs(recorded, current) == expected
    assert moved_inputs({"dataset": "user/corpus"}, {"dataset": paths["new"], "contents.dataset": "aaa"}) == []
