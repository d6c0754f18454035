"""A run on a Hub dataset reads one commit from its first step to its last, resumes included (hub_revision.py).

The Hub is a stand-in here (no network): `datasets.load_dataset` serves each commit's documents and a name without
a revision as the main branch's, as the Hub does; `HfApi.dataset_info` says which commit main is at.
"""

import json
import logging
import shutil
import types

import datasets
import huggingface_hub
import pytest

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.config import load_train_config
from hf_gpt_custom.training.hub_revision import pin_dataset_revision
from hf_gpt_custom.training.train import train
from tests.helpers import save_tiny_base_model, tiny_run_overrides

HUB_NAME = "someone/corpus"
STEPS = ("max_steps=4", "checkpoint_interval=2", "keep_checkpoints=3", "eval_interval=4", "eval_batches=1")


class FakeHub:
    """Two commits of HUB_NAME, "aaa" and "bbb", with different rows; `main` is where the main branch is."""

    def __init__(self, aaa: list[dict], bbb: list[dict]):
        self.rows = {"aaa": aaa, "bbb": bbb}
        self.main = "aaa"
        self.revisions_read = []  # the revision of each load_dataset call for HUB_NAME

    def load_dataset(self, name, *args, revision=None, **kwargs):
        assert name == HUB_NAME, name  # the stand-in serves this one dataset; local files never get here
        self.revisions_read.append(revision)
        return datasets.Dataset.from_list(self.rows[revision or self.main])

    def dataset_info(self, name, **kwargs):
        assert name == HUB_NAME
        return types.SimpleNamespace(sha=self.main)


def _install(fake, monkeypatch):
    monkeypatch.setattr(datasets, "load_dataset", fake.load_dataset)
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", lambda api, name, **kwargs: fake.dataset_info(name))
    return fake


@pytest.fixture
def hub(monkeypatch, shakespeare_path):
    """Two stretches of tiny Shakespeare, one document per speech, as the two commits."""
    text = shakespeare_path.read_text(encoding="utf-8")
    speeches = [[{"text": part} for part in stretch.split("\n\n") if part.strip()]
                for stretch in (text[:40_000], text[40_000:80_000])]
    return _install(FakeHub(*speeches), monkeypatch)


@pytest.fixture
def hub_run(tmp_path, shakespeare_tokenizer_dir):
    def config(*overrides, cache="cache"):
        base = tiny_run_overrides(tmp_path / "run", HUB_NAME, shakespeare_tokenizer_dir, tmp_path / cache)
        return load_train_config(None, [*base, *STEPS, *overrides])

    return config


def _recorded(checkpoint):
    return json.loads((checkpoint / "training_settings.json").read_text())["dataset_revision"]


def test_a_resume_after_an_upstream_update_reads_the_commit_the_run_started_on(hub, hub_run):
    """Was: the resumed steps 3-4 read the main branch of the day (commit bbb) without a word."""
    run_dir = train(hub_run())
    assert set(hub.revisions_read) == {"aaa"}  # the commit asked of the Hub when the run started, every split
    assert "dataset_revision: aaa" in (run_dir / "config.yaml").read_text()
    assert _recorded(run_dir / "checkpoints" / "step_000002") == "aaa"

    shutil.rmtree(run_dir / "checkpoints" / "step_000004")  # a crash after the step-2 checkpoint
    shutil.rmtree(run_dir / "final")
    hub.main, hub.revisions_read = "bbb", []  # the dataset is updated upstream
    train(hub_run(cache="other_cache"))  # resumed where the packed data is not cached: it is read again
    assert hub.revisions_read and set(hub.revisions_read) == {"aaa"}
    assert not list((run_dir / "checkpoints").glob("abandoned_*"))  # continued, not started over
    assert _recorded(run_dir / "checkpoints" / "step_000004") == "aaa"
    assert [json.loads(line)["step"] for line in (run_dir / "run_log.jsonl").read_text().splitlines()
            if json.loads(line)["kind"] == "train"] == [1, 2, 3, 4]


def test_the_console_script_resumes_a_hub_run_after_an_upstream_update(hub, hub_run, tmp_path):
    """`hf-gpt-custom train` compares the run folder before train() runs: there an unpinned config refused the run's
    own checkpoints (dataset_revision: 'aaa' -> None)."""
    from hf_gpt_custom.cli import main
    from hf_gpt_custom.training.config import save_train_config

    config = hub_run()
    run_dir = train(config)
    shutil.rmtree(run_dir / "checkpoints" / "step_000004")
    shutil.rmtree(run_dir / "final")
    save_train_config(config, tmp_path / "run.yaml")  # the user's config, without a revision
    hub.main, hub.revisions_read = "bbb", []
    main(["train", str(tmp_path / "run.yaml"), f"data_cache_dir={tmp_path / 'other_cache'}"])
    assert set(hub.revisions_read) == {"aaa"} and _recorded(run_dir / "checkpoints" / "step_000004") == "aaa"


def test_another_explicit_revision_is_refused_and_start_over_takes_the_new_commit(hub, hub_run):
    run_dir = train(hub_run())
    shutil.rmtree(run_dir / "checkpoints" / "step_000004")
    shutil.rmtree(run_dir / "final")
    with pytest.raises(UserError, match=r"trained with other settings \(dataset_revision: 'aaa' -> 'bbb'\)"):
        train(hub_run("dataset_revision=bbb"))
    hub.main, hub.revisions_read = "bbb", []
    run_dir = train(hub_run(), start_over=True)  # a new run: the commit main is at now
    assert set(hub.revisions_read) == {"bbb"}
    assert _recorded(run_dir / "checkpoints" / "step_000004") == "bbb"


def test_an_explicit_revision_is_used_as_given(hub, hub_run):
    config = hub_run("dataset_revision=bbb")
    assert pin_dataset_revision(config) is config
    hub.revisions_read = []
    train(config)
    assert set(hub.revisions_read) == {"bbb"}


def test_offline_the_run_is_not_pinned_and_says_so_once(hub_run, monkeypatch, caplog):
    """`run` and its train stage both pin: the warning printed twice, its reason cut mid-word ("To disable it, plea")."""
    reason = ("Cannot reach https://huggingface.co/api/datasets/someone/corpus: offline mode is enabled. To disable "
              "it, please unset the `HF_HUB_OFFLINE` environment variable.")

    def offline(api, name, **kwargs):
        raise huggingface_hub.errors.OfflineModeIsEnabled(reason)

    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", offline)
    config = hub_run()
    with caplog.at_level(logging.WARNING):
        assert pin_dataset_revision(config).dataset_revision is None
        assert pin_dataset_revision(config).dataset_revision is None
    assert caplog.text.count("could not ask the Hub which commit dataset someone/corpus is at (OfflineModeIsEnabled: "
                             "Cannot reach") == 1
    assert "set dataset_revision=<commit> to pin it" in caplog.text
    shown = caplog.text.split("OfflineModeIsEnabled: ")[1].split("): the run")[0]
    assert shown == reason or (shown.endswith(" ...") and reason.startswith(shown[:-4] + " "))


def test_local_data_is_never_looked_up(tmp_path, shakespeare_path, shakespeare_tokenizer_dir, monkeypatch):
    def no_hub(*args, **kwargs):
        raise AssertionError("asked the Hub about a local file")

    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", no_hub)
    config = load_train_config(None, tiny_run_overrides(tmp_path, shakespeare_path, shakespeare_tokenizer_dir,
                                                        tmp_path / "cache"))
    assert pin_dataset_revision(config) is config


def test_fine_tuning_reads_the_commit_its_run_started_on(tmp_path, shakespeare_tokenizer_dir, monkeypatch):
    from hf_gpt_custom.training.finetune import finetune
    from hf_gpt_custom.training.finetune_config import load_finetune_config

    words = "king queen sword horse castle river night lord".split()
    rows = [{"premise": " ".join(words[i % 8:i % 8 + 3]), "hypothesis": words[(i * 3) % 8],
             "label": "yes" if words[(i * 3) % 8] in words[i % 8:i % 8 + 3] else "no"} for i in range(48)]
    hub = _install(FakeHub(rows, [{**row, "label": "no"} for row in rows]), monkeypatch)
    base = save_tiny_base_model(tmp_path / "base", shakespeare_tokenizer_dir)

    def config():
        return load_finetune_config(None, [
            f"init_from={base}", f"dataset={HUB_NAME}", f"out_dir={tmp_path / 'run'}", "run_name=ft", "block_size=32",
            "batch_size=8", "learning_rate=3e-3", "warmup_steps=1", "val_fraction=0.25", "log_with=none", "seed=7",
            "task.format=pair", "task.text_columns=premise,hypothesis", "task.labels=no,yes", *STEPS,
        ])

    run_dir = finetune(config())
    shutil.rmtree(run_dir / "checkpoints" / "step_000004")
    shutil.rmtree(run_dir / "final")
    hub.main, hub.revisions_read = "bbb", []
    finetune(config())
    assert hub.revisions_read == ["aaa"]
    assert _recorded(run_dir / "checkpoints" / "step_000004") == "aaa"


def test_a_run_folder_without_checkpoints_pins_by_its_config_yaml(hub, hub_run):
    """A run stopped before its first checkpoint, or whose checkpoints were deleted, kept final/ and config.yaml."""
    from hf_gpt_custom.training.config import save_train_config

    config = hub_run()
    config.run_dir.mkdir(parents=True)
    save_train_config(hub_run("dataset_revision=aaa"), config.run_dir / "config.yaml")
    hub.main = "bbb"
    assert pin_dataset_revision(config).dataset_revision == "aaa"
    assert pin_dataset_revision(config, start_over=True).dataset_revision == "bbb"
    # a folder that trained another dataset records no commit of this one
    save_train_config(hub_run("dataset=someone/older", "dataset_revision=zzz"), config.run_dir / "config.yaml")
    assert pin_dataset_revision(config).dataset_revision == "bbb"


def test_a_main_job_stopped_in_its_tokenizer_stage_reruns_on_its_commit(hub, hub_run, tmp_path, monkeypatch):
    """`run` records its config (the pinned commit) before any stage; stopped before train wrote config.yaml, its
    rerun after an upstream update was refused as a changed config (dataset_revision: 'aaa' -> 'bbb')."""
    from hf_gpt_custom import run as run_module
    from hf_gpt_custom.training.config import save_train_config

    save_train_config(hub_run(), tmp_path / "run.yaml")
    stages = []

    def stopped(config, *args, **kwargs):
        stages.append(config.dataset_revision)
        raise KeyboardInterrupt

    monkeypatch.setitem(run_module._STAGE_FUNCTIONS, "tokenizer", stopped)
    for main in ("aaa", "bbb"):
        hub.main = main
        with pytest.raises(KeyboardInterrupt):
            run_module.run_pipeline(tmp_path / "run.yaml")
    assert stages == ["aaa", "aaa"]  # the rerun resumed, on the commit the run started on


_TWO_PROCESS_SCRIPT = """
import sys
from accelerate import Accelerator
from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.config import TrainConfig
from hf_gpt_custom.training.hub_revision import check_every_process_reads_one_revision

accelerator = Accelerator(cpu=True)
for case in sys.argv[1:]:  # each case a check of its own over the launch's two processes
    same = case == "same"
    revision = "abc" if same or accelerator.process_index == 0 else None  # rank 1 could not ask the Hub
    try:
        check_every_process_reads_one_revision(accelerator,
                                               TrainConfig(dataset="someone/corpus", dataset_revision=revision))
        print(f"{case}: rank {accelerator.process_index}: agreed", flush=True)
    except UserError as err:
        print(f"{case}: rank {accelerator.process_index}: {err}", flush=True)
accelerator.end_training()  # the process group torn down before exit (else gloo may abort the interpreter's exit)
"""


@pytest.mark.slow
def test_two_processes_pinned_to_different_commits_are_refused_on_both(tmp_path):
    """Each process of `accelerate launch` pins on its own; one that could not reach the Hub must not read the main
    branch while its peer reads the pinned commit."""
    import os
    import subprocess

    from tests.training.test_multiprocess import _free_port

    if shutil.which("accelerate") is None:
        pytest.fail("the accelerate launcher is not on PATH; install the project as README says")
    script = tmp_path / "check.py"
    script.write_text(_TWO_PROCESS_SCRIPT)
    # one launch of two processes checks both cases in turn (was a launch per case: torch imported twice as often)
    command = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
               str(script), "same", "different"]
    result = subprocess.run(command, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # each print is one write to the shared pipe: the two ranks' lines may run together, never into each other
    said = {(case, rank): result.stdout.count(f"{case}: rank {rank}: ") for case in ("same", "different")
            for rank in (0, 1)}
    assert said == dict.fromkeys(said, 1)  # each rank said one thing per case
    assert result.stdout.count("agreed") == 2 and all(f"same: rank {rank}: agreed" in result.stdout for rank in (0, 1))
    refused = "at different commits (process 0: abc, process 1: not pinned)"
    assert result.stdout.count(refused) == 2
    assert all(f"different: rank {rank}: the processes would read" in result.stdout for rank in (0, 1))
