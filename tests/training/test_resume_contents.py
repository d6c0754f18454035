"""A resume continues on the files it was trained on: the same data path with other text, a retrained tokenizer or
another model in init_from is refused by name (contents.<role>, as a changed learning_rate is), the run's own
tokenizer is never retrained over the checkpoints made with it, and checkpoints that predate the record resume."""

import hashlib
import json
import logging
import shutil

import pytest
import torch

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.manifest import write_manifest
from hf_gpt_custom.training.config import load_train_config
from hf_gpt_custom.training.finetune import finetune
from hf_gpt_custom.training.finetune_config import load_finetune_config
from hf_gpt_custom.training.train import train
from hf_gpt_custom.training.workload import prepare_tokenizer

from tests.helpers import save_tiny_base_model, tiny_run_overrides

STEPS = ("max_steps=4", "checkpoint_interval=2", "keep_checkpoints=3", "eval_interval=4", "eval_batches=1")
REFUSED = r"trained with other settings \(contents\.{role}: sha256 [0-9a-f]{{12}}\.\.\. -> sha256 [0-9a-f]{{12}}\.\.\.\)" \
          r"; the files of {role} hold other contents than it was trained on: put back the files it was trained with"


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _crash_after_step_2(run_dir):
    """The run folder as a crash after its step-2 checkpoint leaves it."""
    shutil.rmtree(run_dir / "checkpoints" / "step_000004")
    shutil.rmtree(run_dir / "final")


def _forget_contents(checkpoint):
    """The checkpoint as the code before contents.* wrote it (an intact manifest, no `contents` section)."""
    settings_file = checkpoint / "training_settings.json"
    settings = json.loads(settings_file.read_text())
    settings.pop("contents", None)
    settings_file.write_text(json.dumps(settings))
    write_manifest(checkpoint)


@pytest.fixture
def texts(shakespeare_path):
    """Two different stretches of tiny Shakespeare (~40 KB each): data A and data B for the same path."""
    text = shakespeare_path.read_text(encoding="utf-8")
    return text[:40_000], text[40_000:80_000]


@pytest.fixture
def pretraining(tmp_path, texts, shakespeare_tokenizer_dir, shared_data_cache):
    """(config factory, data file, tokenizer folder) for tiny runs on tmp_path copies the test may change."""
    data = tmp_path / "data.txt"
    data.write_text(texts[0], encoding="utf-8")
    tokenizer = tmp_path / "tokenizer"
    shutil.copytree(shakespeare_tokenizer_dir, tokenizer)

    def config(*overrides):
        base = tiny_run_overrides(tmp_path / "run", data, tokenizer, shared_data_cache)
        return load_train_config(None, [*base, *STEPS, *overrides])

    return config, data, tokenizer


def test_new_text_in_the_same_data_file_is_refused_naming_it(pretraining, texts):
    """Was resumed at step 2 and trained steps 3-4 on other documents, with no warning."""
    config, data, _ = pretraining
    run_dir = train(config())
    _crash_after_step_2(run_dir)
    data.write_text(texts[1], encoding="utf-8")
    with pytest.raises(UserError, match=REFUSED.format(role="dataset")) as err:
        train(config())
    assert "pass --start_over" in str(err.value)
    checkpoint = run_dir / "checkpoints" / "step_000002"
    with pytest.raises(UserError, match=rf"cannot resume from {checkpoint}: these settings differ .*contents\.dataset"):
        train(config(f"resume_from_checkpoint={checkpoint}"))
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000002"]
    data.write_text(texts[0], encoding="utf-8")  # the data put back (a new file, same bytes): the run continues
    train(config())
    assert [json.loads(line)["step"] for line in (run_dir / "run_log.jsonl").read_text().splitlines()
            if json.loads(line)["kind"] == "train"] == [1, 2, 3, 4]


def test_a_tokenizer_folder_retrained_in_place_is_refused_naming_it(pretraining, texts):
    from hf_gpt_custom.tokenizer_training import train_tokenizer

    config, _, tokenizer = pretraining
    run_dir = train(config())
    _crash_after_step_2(run_dir)
    train_tokenizer([texts[1]], tokenizer, vocab_size=512, show_progress=False)  # same path, same size, other merges
    with pytest.raises(UserError, match=REFUSED.format(role="tokenizer")):
        train(config())


def test_an_unchanged_run_with_its_own_tokenizer_continues_after_a_crash(pretraining, tmp_path):
    config, _, _ = pretraining
    own = ("tokenizer=null", "tokenizer_vocab_size=300")
    run_dir = train(config(*own))
    recorded = json.loads((run_dir / "checkpoints" / "step_000002" / "training_settings.json").read_text())
    assert set(recorded["contents"]) == {"dataset", "tokenizer"}
    _crash_after_step_2(run_dir)
    train(config(*own))
    assert not list((run_dir / "checkpoints").glob("abandoned_*"))  # continued, not started over
    assert (run_dir / "final").is_dir()


@pytest.fixture
def own_tokenizer_run(pretraining):
    """A finished run whose tokenizer it trained itself, crashed after step 2, with checkpoints that predate
    contents.*: nothing but the tokenizer stage stands between changed data and a silent resume."""
    config, data, _ = pretraining
    own = ("tokenizer=null", "tokenizer_vocab_size=300")
    run_dir = train(config(*own))
    _crash_after_step_2(run_dir)
    _forget_contents(run_dir / "checkpoints" / "step_000002")
    return lambda *overrides: config(*own, *overrides), data, run_dir


def test_an_old_checkpoint_without_contents_resumes_and_says_its_data_is_unchecked(own_tokenizer_run, caplog):
    config, _, run_dir = own_tokenizer_run
    with caplog.at_level(logging.WARNING):
        train(config())
    assert f"{run_dir / 'checkpoints' / 'step_000002'} records the paths of its data and tokenizer but not their " \
           "contents" in caplog.text  # a resume on changed files would not be noticed: the user is told so
    assert not list((run_dir / "checkpoints").glob("abandoned_*"))  # continued, not started over
    assert json.loads((run_dir / "checkpoints" / "step_000004" / "training_settings.json").read_text())["contents"]


def test_the_runs_tokenizer_is_not_retrained_over_checkpoints_made_with_it(own_tokenizer_run, texts):
    """prepare_tokenizer retrained <run>/tokenizer in place on the new data: final/ got old weights and new ids."""
    config, data, run_dir = own_tokenizer_run
    tokenizer_json = run_dir / "tokenizer" / "tokenizer.json"
    before = _sha256(tokenizer_json)
    data.write_text(texts[1], encoding="utf-8")
    message = (rf"^the run folder {run_dir} holds checkpoints/step_000002 trained with the tokenizer in "
               rf"{run_dir / 'tokenizer'}, and the data it would be trained on now \(dataset_sha256 changed\) gives "
               rf"another one; put back the data .* or pass --start_over")
    with pytest.raises(UserError, match=message):
        prepare_tokenizer(config())  # the main job's tokenizer stage
    with pytest.raises(UserError, match=message):
        train(config())  # an old checkpoint records no contents: the tokenizer stage is what stops it
    assert _sha256(tokenizer_json) == before
    assert not (run_dir / "tokenizer.retrained").exists()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000002"]
    train(config(), start_over=True)  # the old checkpoint goes aside, the tokenizer is trained on the new data
    assert _sha256(tokenizer_json) != before
    assert len(list((run_dir / "checkpoints").glob("abandoned_*"))) == 1


# --- fine-tuning: the model folder it starts from and the labelled file -------------------------------------------


@pytest.fixture
def finetuning(tmp_path, shakespeare_tokenizer_dir):
    """(config factory, init_from folder, labelled file) on tmp_path copies the test may change."""
    base = save_tiny_base_model(tmp_path / "base", shakespeare_tokenizer_dir)
    words = "king queen sword horse castle river night lord".split()
    rows = [{"premise": " ".join(words[i % 8:i % 8 + 3]), "hypothesis": words[(i * 3) % 8],
             "label": "yes" if words[(i * 3) % 8] in words[i % 8:i % 8 + 3] else "no"} for i in range(48)]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")

    def config():
        return load_finetune_config(None, [
            f"init_from={base}", f"dataset={data}", f"out_dir={tmp_path / 'run'}", "run_name=ft", "block_size=32",
            "batch_size=8", "learning_rate=3e-3", "warmup_steps=1", "val_fraction=0.25", "log_with=none", "seed=7",
            "task.format=pair", "task.text_columns=premise,hypothesis", "task.labels=no,yes", *STEPS,
        ])

    return config, base, data


def test_finetuning_from_another_model_in_the_same_init_from_folder_is_refused(finetuning):
    """init_from was compared as a path only: steps 3-4 trained the checkpoint's head over another body's weights."""
    from hf_gpt_custom import GPTCustomForCausalLM

    config, base, _ = finetuning
    run_dir = finetune(config())
    _crash_after_step_2(run_dir)
    model = GPTCustomForCausalLM.from_pretrained(base)
    torch.manual_seed(1)
    GPTCustomForCausalLM(model.config).save_pretrained(base)  # another pre-training run saved to the same folder
    write_manifest(base)
    with pytest.raises(UserError, match=REFUSED.format(role="init_from")):
        finetune(config())


def test_finetuning_on_new_rows_in_the_same_file_is_refused(finetuning):
    config, _, data = finetuning
    run_dir = finetune(config())
    _crash_after_step_2(run_dir)
    rows = data.read_text(encoding="utf-8").splitlines()
    data.write_text("\n".join(reversed(rows)) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=REFUSED.format(role="dataset")):
        finetune(config())


def _fingerprints_after_editing(tmp_path, edited: str) -> tuple[dict, dict]:
    """input_fingerprints of a run reading local data, validation data and a vocab.json + merges.txt tokenizer
    folder, before and after `edited` (a path under tmp_path) gets other bytes at the same path."""
    from hf_gpt_custom.training.config import TrainConfig
    from hf_gpt_custom.training.fingerprints import input_fingerprints

    (tmp_path / "tok").mkdir()
    files = {"train.txt": "to be or not to be\n", "val.txt": "that is the question\n",
             "tok/vocab.json": '{"a": 0, "b": 1, "ab": 2}', "tok/merges.txt": "#version: 0.2\na b\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    config = TrainConfig(dataset=str(tmp_path / "train.txt"), val_dataset=str(tmp_path / "val.txt"),
                         tokenizer=str(tmp_path / "tok"), out_dir=str(tmp_path / "runs"))
    before = input_fingerprints(config)
    (tmp_path / edited).write_text(files[edited] + "b a\n")
    return before, input_fingerprints(config)


@pytest.mark.parametrize("edited, role", [("val.txt", "val_dataset"), ("tok/merges.txt", "tokenizer")])
def test_other_bytes_in_a_validation_file_or_merges_txt_change_its_fingerprint(tmp_path, edited, role):
    """New validation text, or another merge order in a slow tokenizer's merges.txt (other token ids from the same
    vocab.json), is another input: its contents.<role> fingerprint must change, the others not."""
    before, after = _fingerprints_after_editing(tmp_path, edited)
    assert set(before) == set(after) == {"dataset", "val_dataset", "tokenizer"}
    assert {key for key in before if before[key] != after[key]} == {role}


def test_a_path_change_without_recorded_contents_is_not_a_move(tmp_path):
    """An older checkpoint records no contents.<role>: another path is a change, even where nothing is hashed now."""
    from hf_gpt_custom.training.resume import moved_inputs

    (tmp_path / "new").mkdir()
    assert moved_inputs({"tokenizer": "/old/place"}, {"tokenizer": str(tmp_path / "new")}) == []
