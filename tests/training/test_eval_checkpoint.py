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


@pytest.fixture(scope="module")
def same_size_other_tokenizer(tmp_path_factory, shared_data_dir, checkpoint):
    """A tokenizer of the run's size (512) with other merges: trained on other text."""
    from hf_gpt_custom.tokenizer_training import train_tokenizer

    text = (shared_data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[-300_000:].lower()
    folder = train_tokenizer([text], tmp_path_factory.mktemp("other_tokenizer"), vocab_size=512, show_progress=False)
    from hf_gpt_custom import GPTCustomTokenizerFast

    sizes = {len(GPTCustomTokenizerFast.from_pretrained(f)) for f in (folder, checkpoint[1])}
    assert sizes == {512}
    return folder


def test_a_checkpoint_away_from_its_runs_tokenizer_checks_the_one_given_against_its_record(
        checkpoint, same_size_other_tokenizer, tmp_path):
    """A checkpoint whose run's tokenizer is no longer where the run left it (moved, or the checkpoint copied out of
    its run): the error said "no tokenizer vocabulary" and any --tokenizer of the same size was then scored unchecked
    (the paths hunt: copa 0.80 with a stand-in, 0.75 with the right one). The checkpoint's record of its tokenizer
    files' sha256 now decides: the files it was trained with are accepted wherever they are, others refused."""
    import shutil

    from hf_gpt_custom.eval.runner import evaluate

    folder, trained_with = checkpoint
    copied = tmp_path / "kept" / "step_000002"
    shutil.copytree(folder, copied)
    with pytest.raises(UserError, match=rf"--model {copied} has no tokenizer.json and is not a checkpoint of a run; "
                                        r"pass --tokenizer <the folder it was trained with, or moved to>"):
        evaluate(str(copied), tasks=["copa"], limit=2, show_progress=False)
    moved = tmp_path / "moved_tokenizer"
    shutil.copytree(trained_with, moved)
    scored = evaluate(str(copied), tokenizer=str(moved), tasks=["copa"], limit=2, show_progress=False)
    reference = evaluate(str(folder), tasks=["copa"], limit=2, show_progress=False)
    assert [e["loglikelihoods"] for e in scored.examples] == [e["loglikelihoods"] for e in reference.examples]
    with pytest.raises(UserError, match=rf"--tokenizer {same_size_other_tokenizer} is not the tokenizer {copied} "
                                        r"was trained with: its files differ from those the checkpoint recorded"):
        evaluate(str(copied), tokenizer=str(same_size_other_tokenizer), tasks=["copa"], limit=2, show_progress=False)


def test_train_refuses_a_tokenizer_other_than_the_one_init_from_was_trained_with(
        checkpoint, same_size_other_tokenizer, tmp_path, shakespeare_path, shared_data_cache):
    """`train init_from=M tokenizer=T` took T as given: a stand-in of the same size gave the loaded weights other ids
    than they learnt, in silence (the paths hunt). Refused by vocabulary for a model folder (its own tokenizer) and a
    checkpoint (its run's); the tokenizer it was trained with, given by name, is accepted."""
    from hf_gpt_custom.training.config import load_train_config
    from hf_gpt_custom.training.workload import prepare_tokenizer

    from tests.helpers import tiny_run_overrides

    folder, trained_with = checkpoint
    final = folder.parent.parent / "final"

    def prepare(init_from, tokenizer):
        overrides = [o for o in tiny_run_overrides(tmp_path / "next", shakespeare_path, trained_with, shared_data_cache)
                     if not o.startswith(("model.", "tokenizer="))]
        return prepare_tokenizer(load_train_config(None, overrides + [f"init_from={init_from}",
                                                                      f"tokenizer={tokenizer}"]))

    from hf_gpt_custom import GPTCustomTokenizerFast

    from hf_gpt_custom.training.workload import load_run_tokenizer, vocabulary_difference

    extended = tmp_path / "extended"  # tokens added after the model's keep every id it learnt...
    with_more = GPTCustomTokenizerFast.from_pretrained(trained_with)
    with_more.add_tokens(["<new>"])
    with_more.save_pretrained(extended)
    assert vocabulary_difference(load_run_tokenizer(trained_with), load_run_tokenizer(extended), "it",
                                 added_tokens_allowed=True) is None
    for init_from in (folder, final):
        assert prepare(init_from, trained_with) == trained_with
        # ...but past its vocab_size they have no embedding row: accepted here, it was refused after the data was
        # tokenized, with a fix (raise model.vocab_size) that init_from refuses (the roundreview12 hunt)
        with pytest.raises(UserError, match=r"tokenizer=.*extended adds tokens past the vocab_size=512 of .* \(it has "
                                            r"513\): id 512 has no embedding row, and the model is not resized here"):
            prepare(init_from, extended)
        with pytest.raises(UserError, match=rf"tokenizer={same_size_other_tokenizer} has another vocabulary \(the "
                                            r"same 512 ids for other tokens\) than the tokenizer"):
            prepare(init_from, same_size_other_tokenizer)


def test_finetuning_from_a_checkpoint_uses_the_tokenizer_its_run_trained_with(checkpoint, tmp_path):
    """init_from's help offers a checkpoint folder, but fine-tuning looked for tokenizer files in it only and stopped
    with a message cut mid-word (the upgrade and paths hunts). Reference: the same weights in a model folder beside a
    copy of the run's tokenizer, fine-tuned with the same settings: the same losses step by step."""
    import json
    import shutil

    from hf_gpt_custom.training.finetune import finetune
    from hf_gpt_custom.training.finetune_config import load_finetune_config

    from tests.helpers import write_learnable_pairs

    folder, trained_with = checkpoint
    reference = tmp_path / "as_a_folder"
    reference.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copyfile(folder / name, reference / name)
    for path in trained_with.iterdir():
        if path.is_file():
            shutil.copyfile(path, reference / path.name)
    pairs = write_learnable_pairs(tmp_path / "pairs.jsonl")
    losses = []
    for init_from, name in ((folder, "from_checkpoint"), (reference, "from_folder")):
        run_dir = finetune(load_finetune_config(None, [
            f"init_from={init_from}", f"dataset={pairs}", f"out_dir={tmp_path / name}", "block_size=32",
            "batch_size=8", "max_steps=3", "warmup_steps=1", "eval_interval=3", "checkpoint_interval=0",
            "val_fraction=0.25", "log_with=none", "seed=7", "task.format=pair",
            "task.text_columns=premise,hypothesis", "task.labels=no,yes"]))
        records = [json.loads(line) for line in (run_dir / "run_log.jsonl").read_text().splitlines()]
        losses.append([record["loss"] for record in records if record["kind"] == "train"])
    assert len(losses[0]) == 3 and losses[0] == losses[1]


def test_a_tokenizer_whose_ids_differ_is_refused_where_its_size_and_tokens_agree(
        checkpoint, same_size_other_tokenizer, tmp_path, shakespeare_path, shared_data_cache):
    """The vocabulary comparison shared by eval's --tokenizer check and train's init_from check: the same size with
    other tokens, the same tokens under other ids, and (for eval, which scores ids the model has) tokens added after
    the model's are each told apart from the tokenizer it was trained with. Reference: the ids each assigns."""
    import json
    import shutil

    from hf_gpt_custom import GPTCustomTokenizerFast
    from hf_gpt_custom.eval.runner import evaluate
    from hf_gpt_custom.training.config import load_train_config
    from hf_gpt_custom.training.workload import prepare_tokenizer

    from tests.helpers import tiny_run_overrides

    folder, trained_with = checkpoint
    swapped = tmp_path / "swapped"  # the same tokens, two of them under each other's id
    shutil.copytree(trained_with, swapped)
    pipeline = json.loads((swapped / "tokenizer.json").read_text())
    vocab = pipeline["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[300:302]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (swapped / "tokenizer.json").write_text(json.dumps(pipeline))
    (swapped / "vocab.json").unlink()
    extended = tmp_path / "extended"
    with_more = GPTCustomTokenizerFast.from_pretrained(trained_with)
    with_more.add_tokens(["<new>"])
    with_more.save_pretrained(extended)
    for other in (same_size_other_tokenizer, swapped, extended):
        with pytest.raises(UserError, match=rf"--tokenizer {other} has another vocabulary"):
            evaluate(str(folder), tokenizer=str(other), tasks=["copa"], limit=2, show_progress=False)
    overrides = [o for o in tiny_run_overrides(tmp_path / "next", shakespeare_path, trained_with, shared_data_cache)
                 if not o.startswith(("model.", "tokenizer="))]
    with pytest.raises(UserError, match=rf"tokenizer={swapped} has another vocabulary \(the same 512 ids"):
        prepare_tokenizer(load_train_config(None, overrides + [f"init_from={folder.parent.parent / 'final'}",
                                                               f"tokenizer={swapped}"]))


def test_a_moved_tokenizer_folder_is_named_as_the_one_to_find_again(checkpoint, tmp_path):
    """A run trained with tokenizer=<folder> that was moved since: the message said <run>/tokenizer, "where its run's
    tokenizer should be, has none", a folder such a run never had, and left the recorded one out (the roundreview12
    hunt)."""
    import json
    import shutil

    from hf_gpt_custom.errors import MissingFileError
    from hf_gpt_custom.training.resume import SETTINGS_NAME
    from hf_gpt_custom.training.workload import checkpoint_run_tokenizer

    folder, _ = checkpoint
    copy = tmp_path / "run" / "checkpoints" / folder.name
    shutil.copytree(folder, copy)
    settings = json.loads((copy / SETTINGS_NAME).read_text())
    moved = tmp_path / "mytok"  # not there any more
    (copy / SETTINGS_NAME).write_text(json.dumps({**settings, "tokenizer": str(moved)}))
    with pytest.raises(MissingFileError, match=rf"the tokenizer its run was trained with, tokenizer={moved}, is no "
                                               rf"longer there; pass tokenizer="):
        checkpoint_run_tokenizer(copy)


def test_a_moved_run_trained_with_its_own_tokenizer_folder_finds_it_where_the_run_is_now(checkpoint, tmp_path):
    """A run trained with tokenizer=<its own folder>/tokenizer, then moved: the recorded path is gone, but the run's
    tokenizer/ holds the very files (checked by their sha256). The check above refused it (the roundreview13 hunt)."""
    import json
    import shutil

    from hf_gpt_custom.training.resume import SETTINGS_NAME
    from hf_gpt_custom.training.workload import checkpoint_run_tokenizer

    folder, trained_with = checkpoint
    moved = tmp_path / "moved_run"
    shutil.copytree(folder, moved / "checkpoints" / folder.name)
    shutil.copytree(trained_with, moved / "tokenizer")
    copy = moved / "checkpoints" / folder.name
    settings = json.loads((copy / SETTINGS_NAME).read_text())
    (copy / SETTINGS_NAME).write_text(json.dumps({**settings, "tokenizer": str(tmp_path / "old_place" / "tokenizer")}))
    assert checkpoint_run_tokenizer(copy) == moved / "tokenizer"


@pytest.mark.parametrize("record", ["kept", "older checkpoint without it"])
def test_an_earlier_runs_tokenizer_left_in_the_folder_does_not_stand_in_for_a_moved_one(
        checkpoint, same_size_other_tokenizer, tmp_path, record):
    """An earlier run in the folder trained its own tokenizer/ (train --start_over leaves it), a later run trained with
    tokenizer=<an external folder>, and that folder moved: <run>/tokenizer, of the same size with other merges, was
    taken in silence where the checkpoint has no sha256 record of its tokenizer (eval then scored with other ids),
    and named as "changed since" where it has one (the roundreview14 hunt). The moved folder is the one to find."""
    import json
    import shutil

    from hf_gpt_custom.errors import MissingFileError
    from hf_gpt_custom.training.resume import CONTENTS, SETTINGS_NAME
    from hf_gpt_custom.training.workload import checkpoint_run_tokenizer

    folder, _ = checkpoint
    run = tmp_path / "run"
    copy = run / "checkpoints" / folder.name
    shutil.copytree(folder, copy)
    shutil.copytree(same_size_other_tokenizer, run / "tokenizer")  # the earlier run's: 512 tokens, other merges
    settings = json.loads((copy / SETTINGS_NAME).read_text())
    external = tmp_path / "external_tokenizer"  # moved away since
    settings["tokenizer"] = str(external)
    if record != "kept":
        settings.get(CONTENTS, {}).pop("tokenizer")
    (copy / SETTINGS_NAME).write_text(json.dumps(settings))
    with pytest.raises(MissingFileError, match=rf"tokenizer={external}, is no longer there"):
        checkpoint_run_tokenizer(copy)


@pytest.mark.parametrize("record", ["kept", "older checkpoint without it"])
def test_a_run_started_from_a_model_folder_takes_its_tokenizer_not_an_earlier_runs_left_in_the_folder(
        checkpoint, same_size_other_tokenizer, tmp_path, record):
    """A run trained with init_from=<a model folder> (no tokenizer setting) writes no tokenizer/ of its own: one found
    in its folder is an earlier run's (train --start_over keeps it). It was taken in silence for checkpoints without
    the sha256 record (other ids, same size), and named "changed since" for newer ones (the roundreview15 hunt)."""
    import json
    import shutil

    from hf_gpt_custom.training.resume import CONTENTS, SETTINGS_NAME
    from hf_gpt_custom.training.workload import checkpoint_run_tokenizer

    folder, trained_with = checkpoint
    base_model = tmp_path / "base_model"  # the folder the run started from, with the tokenizer it trained with
    shutil.copytree(trained_with, base_model)
    run = tmp_path / "run"
    copy = run / "checkpoints" / folder.name
    shutil.copytree(folder, copy)
    shutil.copytree(same_size_other_tokenizer, run / "tokenizer")  # the earlier run's: 512 tokens, other merges
    settings = json.loads((copy / SETTINGS_NAME).read_text())
    settings.update(tokenizer=None, init_from=str(base_model))
    if record != "kept":
        settings.get(CONTENTS, {}).pop("tokenizer")
    (copy / SETTINGS_NAME).write_text(json.dumps(settings))
    assert checkpoint_run_tokenizer(copy) == base_model


@pytest.mark.parametrize("parent", ["a checkpoint", "a folder without tokenizer.json"])
def test_an_older_checkpoint_of_a_run_from_a_folder_without_tokenizer_json_keeps_the_tokenizer_it_trained(
        checkpoint, same_size_other_tokenizer, tmp_path, parent):
    """Before the sha256 record, a run started from a checkpoint or a GPT-2 folder of vocab.json/merges.txt (no
    tokenizer.json) trained its own tokenizer into <run>/tokenizer, and its weights learnt those ids: that one, not the
    parent run's of the same size (taken in silence), nor a refusal (the roundreview16 hunt)."""
    import json
    import shutil

    from hf_gpt_custom.training.resume import CONTENTS, SETTINGS_NAME
    from hf_gpt_custom.training.workload import checkpoint_run_tokenizer

    folder, _ = checkpoint  # run A's checkpoint
    if parent == "a checkpoint":
        started_from = folder
    else:
        started_from = tmp_path / "gpt2_folder"
        started_from.mkdir()
        (started_from / "vocab.json").write_text("{}")
    run = tmp_path / "run_b"
    copy = run / "checkpoints" / folder.name
    shutil.copytree(folder, copy)
    shutil.copytree(same_size_other_tokenizer, run / "tokenizer")  # run B's own, trained by that version
    settings = json.loads((copy / SETTINGS_NAME).read_text())
    settings.update(tokenizer=None, init_from=str(started_from))
    settings.get(CONTENTS, {}).pop("tokenizer", None)  # older than the record
    (copy / SETTINGS_NAME).write_text(json.dumps(settings))
    assert checkpoint_run_tokenizer(copy) == run / "tokenizer"


@pytest.mark.parametrize("case", ["recorded, an earlier run's tokenizer left in the folder",
                                  "older checkpoint, no tokenizer folder"])
def test_a_run_started_from_a_checkpoint_takes_the_tokenizer_that_checkpoints_run_trained_with(
        checkpoint, same_size_other_tokenizer, tmp_path, case):
    """Run B trained with init_from=<run A's checkpoint> (no tokenizer setting): its tokenizer is A's, found one run
    back. With the sha256 record, a tokenizer/ in B's folder that does not hold those files is an earlier run's; in an
    older checkpoint with no tokenizer/ of B's own there is nothing else to take (the mutation sweep: either was
    refused). Reference: the folder run A was trained with."""
    import json
    import shutil

    from hf_gpt_custom.training.resume import CONTENTS, SETTINGS_NAME
    from hf_gpt_custom.training.workload import checkpoint_run_tokenizer

    folder, trained_with = checkpoint  # run A's checkpoint, trained with tokenizer=<trained_with>
    run = tmp_path / "run_b"
    copy = run / "checkpoints" / folder.name
    shutil.copytree(folder, copy)
    settings = json.loads((copy / SETTINGS_NAME).read_text())
    settings.update(tokenizer=None, init_from=str(folder))
    if case.startswith("recorded"):
        assert settings[CONTENTS]["tokenizer"]
        shutil.copytree(same_size_other_tokenizer, run / "tokenizer")  # the earlier run's: 512 tokens, other merges
    else:
        settings.get(CONTENTS, {}).pop("tokenizer", None)
    (copy / SETTINGS_NAME).write_text(json.dumps(settings))
    assert checkpoint_run_tokenizer(copy) == trained_with


def test_a_moved_run_keeps_its_proven_tokenizer_when_the_folder_it_started_from_is_gone(checkpoint, tmp_path):
    """A run from init_from=<model folder> whose <run>/tokenizer holds the very files its checkpoint recorded (sha256):
    that one, also when the model folder it started from is gone since (the mutation sweep: the rule one run back was
    tried first, and refused the missing folder as "not a checkpoint of a run")."""
    import json
    import shutil

    from hf_gpt_custom.training.resume import SETTINGS_NAME
    from hf_gpt_custom.training.workload import checkpoint_run_tokenizer

    folder, trained_with = checkpoint
    run = tmp_path / "run_b"
    copy = run / "checkpoints" / folder.name
    shutil.copytree(folder, copy)
    shutil.copytree(trained_with, run / "tokenizer")  # the recorded files
    settings = json.loads((copy / SETTINGS_NAME).read_text())
    settings.update(tokenizer=None, init_from=str(tmp_path / "deleted_model_folder"))
    (copy / SETTINGS_NAME).write_text(json.dumps(settings))
    assert checkpoint_run_tokenizer(copy) == run / "tokenizer"
