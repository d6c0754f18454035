"""export_folder and push_folder: a Hub folder that loads where hf_gpt_custom is not installed, and a push that fails
cleanly — one message, nothing changed — without a token or a network. No test contacts the network.

The "package not importable" process is the `python_without_project` fixture (tests/conftest.py).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import shutil
import types
from pathlib import Path

import pytest

from hf_gpt_custom.model_folder import is_hub_repo_id
from tests.helpers import NEW_TOKENS, assert_export_matches_in_process, hash_folder, make_tiny_run


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path]:
    from hf_gpt_custom.hub import export_folder

    root = tmp_path_factory.mktemp("export")
    run_dir = make_tiny_run(root / "runs" / "tiny-shakespeare")
    out_dir = export_folder(run_dir, root / "hub" / "tiny-shakespeare", repo_id="alice/tiny-shakespeare")
    return run_dir, out_dir


def test_export_writes_the_hub_files_and_no_trainer_state(exported):
    run_dir, out_dir = exported
    files = sorted(str(path.relative_to(out_dir)) for path in out_dir.rglob("*") if path.is_file())
    assert files == sorted([
        "README.md", "config.json", "generation_config.json", "model.safetensors",
        "configuration_gpt_custom.py", "modeling_gpt_custom.py", "tokenization_gpt_custom.py",
        "adapter_folders.py", "architecture.py", "block_variants.py", "causal_lm_loss.py", "checkpoint_files.py",
        "convert_gpt2.py",
        "errors.py", "heads_gpt_custom.py", "manifest.py", "model_inputs.py", "static_decoding.py",
        "tiktoken_engine.py", "transformers_compat.py", "batch_output.py", "byte_level.py", "task_template.py",  # relative imports
        "auto_classes.py", "convert_common.py", "convert_llama.py", "convert_openai_gpt.py",  # what auto_classes names
        "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "manifest.json",
        "loss_curve.png", "shots_curve.png", "training_summary.json", "eval/results.json", "eval/table.md",
    ])
    config = json.loads((out_dir / "config.json").read_text())
    assert config["model_type"] == "gpt_custom"
    assert config["auto_map"] == {
        "AutoConfig": "configuration_gpt_custom.GPTCustomConfig",
        "AutoModel": "modeling_gpt_custom.GPTCustomModel",
        "AutoModelForCausalLM": "modeling_gpt_custom.GPTCustomForCausalLM",
        "AutoModelForSequenceClassification": "heads_gpt_custom.GPTCustomForSequenceClassification",
        "AutoModelForTokenClassification": "heads_gpt_custom.GPTCustomForTokenClassification",
        "AutoModelForQuestionAnswering": "heads_gpt_custom.GPTCustomForQuestionAnswering",
        "AutoModelForMultipleChoice": "heads_gpt_custom.GPTCustomForMultipleChoice",
    }
    tokenizer_config = json.loads((out_dir / "tokenizer_config.json").read_text())
    assert tokenizer_config["auto_map"]["AutoTokenizer"][1] == "tokenization_gpt_custom.GPTCustomTokenizerFast"
    # The card is ours (model-index and all), not a generic one.
    readme = (out_dir / "README.md").read_text()
    assert readme.startswith("---\n") and "model-index:" in readme and "# tiny-shakespeare" in readme
    # The remote-code files import nothing from the package (HF-V5-NOTES: that breaks loading elsewhere).
    from hf_gpt_custom.publish_checks import remote_code_files

    for name in remote_code_files():
        source = (out_dir / name).read_text()
        assert "import hf_gpt_custom" not in source and "from hf_gpt_custom" not in source and "from .." not in source
    assert (run_dir / "checkpoints" / "step_000010" / "optimizer.bin").is_file()
    assert not list(out_dir.rglob("*.bin")) and not list(out_dir.rglob("optimizer*"))


# One interpreter where the package is not importable serves the two tests that load the export there: it first loads
# a copy of the export with one bit of model.safetensors flipped (which must be refused), then the export itself with
# tests.helpers.REMOTE_LOAD_SCRIPT, run as it is. One clean process (torch and transformers imported once) instead of
# two; the refused load comes first, so it still meets a process that has loaded nothing.
_BIT_FLIP_THEN_REMOTE_LOAD = """
import contextlib, io, json, sys
from transformers import AutoModelForCausalLM
try:
    AutoModelForCausalLM.from_pretrained(sys.argv[4], trust_remote_code=True)
    bit_flip = {}
except ValueError as err:
    bit_flip = {'error': type(err).__module__ + '.' + type(err).__name__, 'message': str(err)}
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    exec(compile(%r, "<REMOTE_LOAD_SCRIPT>", "exec"), {"__name__": "__main__"})
print(json.dumps({"bit_flip": bit_flip, "remote_load": json.loads(printed.getvalue().strip().splitlines()[-1])}))
"""


@pytest.fixture(scope="module")
def exported_loaded_without_the_package(exported, tmp_path_factory, module_python_without_project) -> dict:
    """{"bit_flip": what loading the bit-flipped copy raised, "remote_load": REMOTE_LOAD_SCRIPT's result on the
    export}, from one process where hf_gpt_custom is not importable."""
    import shutil

    from tests.helpers import PROMPT, REMOTE_LOAD_SCRIPT

    _, out_dir = exported
    copy = tmp_path_factory.mktemp("bit_flip") / "copy"
    shutil.copytree(out_dir, copy)
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-10] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(data))
    result = module_python_without_project(_BIT_FLIP_THEN_REMOTE_LOAD % REMOTE_LOAD_SCRIPT, out_dir, PROMPT,
                                           NEW_TOKENS, copy)
    return {**result, "load_arguments": [str(out_dir), PROMPT, str(NEW_TOKENS)]}


def test_export_loads_without_the_package_and_matches_the_in_process_model(exported,
                                                                          exported_loaded_without_the_package):
    from tests.helpers import REMOTE_LOAD_SCRIPT

    run_dir, out_dir = exported

    def already_run(script, *args):  # the clean process's REMOTE_LOAD_SCRIPT result, for exactly this call
        assert script == REMOTE_LOAD_SCRIPT
        assert list(map(str, args)) == exported_loaded_without_the_package["load_arguments"]
        return exported_loaded_without_the_package["remote_load"]

    remote = assert_export_matches_in_process(run_dir, out_dir, already_run)
    assert all(name.startswith("transformers_modules.") for name in remote["classes"]), remote["classes"]
    assert [name.rsplit(".", 1)[1] for name in remote["classes"]] == [
        "GPTCustomConfig", "GPTCustomTokenizerFast", "GPTCustomForCausalLM", "GPTCustomModel",
    ]
    assert remote["input_ids"] == remote["local_input_ids"]
    assert len(remote["generated"]) == len(remote["local_input_ids"]) + NEW_TOKENS
    assert remote["text"] == remote["tokenizer"].decode(remote["local_generated"])


def test_export_replaces_an_earlier_export_but_not_a_foreign_folder(exported, tmp_path):
    from hf_gpt_custom.hub import export_folder

    run_dir, out_dir = exported
    before = (out_dir / "model.safetensors").read_bytes()
    assert export_folder(run_dir, out_dir, repo_id="alice/tiny-shakespeare") == out_dir  # re-export in place
    assert (out_dir / "model.safetensors").read_bytes() == before
    assert not out_dir.with_name(out_dir.name + ".tmp").exists()

    foreign = tmp_path / "my-notes"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match=r"exists and is not an earlier export"):
        export_folder(run_dir, foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match=r"notes.txt: it is a file; choose a folder path"):
        export_folder(run_dir, foreign / "notes.txt")


def test_exporting_again_keeps_a_card_edited_since_instead_of_deleting_it(exported, tmp_path, caplog):
    """The docs invite editing the card before a push; the next export (or `run` after a benchmark change) deleted
    those edits. A folder holding anything its export did not write is moved aside, whole; an untouched one, or one
    whose card only differs because the export's inputs did (another repo id), is simply replaced."""
    from hf_gpt_custom.hub import export_folder

    run_dir, _ = exported
    out_dir = export_folder(run_dir, tmp_path / "export", repo_id="alice/first")
    export_folder(run_dir, out_dir)  # the card changes with the repo id; nothing was edited
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]

    card = (out_dir / "README.md").read_text(encoding="utf-8")
    (out_dir / "README.md").write_text(card + "\nMY EDITS\n", encoding="utf-8")
    (out_dir / "extra_notes.txt").write_text("mine")
    with caplog.at_level("WARNING", logger="hf_gpt_custom.hub"):
        export_folder(run_dir, out_dir)
    (kept,) = tmp_path.glob("export.edited_*")
    assert (kept / "README.md").read_text(encoding="utf-8").endswith("MY EDITS\n")
    assert (kept / "extra_notes.txt").read_text() == "mine"
    assert "MY EDITS" not in (out_dir / "README.md").read_text(encoding="utf-8")
    assert "README.md, extra_notes.txt" in caplog.text and str(kept) in caplog.text


def test_the_license_is_the_exporters_and_a_hub_base_model_is_named(exported, tmp_path, caplog):
    """Every card said apache-2.0, with no base_model, also for a run fine-tuned from meta-llama/Llama-3.2-1B."""
    import yaml

    from hf_gpt_custom.cli import main
    from hf_gpt_custom.hub import export_folder

    run_dir, _ = exported
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    (copy / "config.yaml").write_text(yaml.safe_dump({**config, "init_from": "meta-llama/Llama-3.2-1B"}))

    def front_matter(folder):
        return yaml.safe_load((folder / "README.md").read_text().split("---")[1])

    with caplog.at_level("WARNING", logger="hf_gpt_custom.hub"):
        default = front_matter(export_folder(copy, tmp_path / "default"))
    assert (default["license"], default["base_model"]) == ("apache-2.0", "meta-llama/Llama-3.2-1B")
    assert "trained from meta-llama/Llama-3.2-1B, whose license may differ: export with --license" in caplog.text
    main(["export", str(copy), str(tmp_path / "llama"), "--license", "llama3.2"])
    assert front_matter(tmp_path / "llama")["license"] == "llama3.2"
    assert "base_model" not in front_matter(export_folder(run_dir, tmp_path / "scratch"))  # trained from scratch


def test_a_license_the_hub_would_refuse_is_named_at_export(exported, tmp_path, capsys, caplog):
    """The Hub refuses a push whose card's license is not one of its ids ("license" must be one of [...]): a typo
    surfaced only after the export, at upload. Ids as the Hub's license page writes them."""
    import yaml

    from hf_gpt_custom.cli import main

    run_dir, _ = exported
    for typo, meant in (("apache2", "apache-2.0"), ("cc-by-4", "cc-by-4.0"), ("llama-3.2", "llama3.2")):
        with pytest.raises(SystemExit) as exit_info:
            main(["export", str(run_dir), str(tmp_path / typo), "--license", typo])
        assert exit_info.value.code == 2 and not (tmp_path / typo).exists()
        assert f"not a Hub license id; did you mean {meant}" in capsys.readouterr().err
    main(["export", str(run_dir), str(tmp_path / "upper"), "--license", "MIT"])
    assert yaml.safe_load((tmp_path / "upper" / "README.md").read_text().split("---")[1])["license"] == "mit"
    with caplog.at_level("WARNING", logger="hf_gpt_custom.publish_checks"):
        main(["export", str(run_dir), str(tmp_path / "new"), "--license", "SomeOrg-Research-7"])
    assert "not among the Hub's license ids known here" in caplog.text
    assert "license: SomeOrg-Research-7" in (tmp_path / "new" / "README.md").read_text()  # kept as given


def test_the_cards_language_is_the_exporters_english_only_for_a_dataset_known_to_be(exported, tmp_path, caplog,
                                                                                    capsys):
    """Every card said `language: en`, also for a model trained on a French or Korean corpus, with no way to say
    otherwise (the unicode hunt). Reference: the Hub's card metadata, `language:` a list of ISO 639 codes; transformers'
    Trainer writes a language only when it is given one."""
    import yaml

    from hf_gpt_custom.cli import main
    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.run import _stage_export

    def front_matter(folder):
        return yaml.safe_load((folder / "README.md").read_text().split("---")[1])

    run_dir, _ = exported  # trained on a file in a tinyshakespeare folder: a known, English corpus
    assert front_matter(export_folder(run_dir, tmp_path / "known"))["language"] == ["en"]
    main(["export", str(run_dir), str(tmp_path / "two"), "--language", "FR, ko,fr"])
    assert front_matter(tmp_path / "two")["language"] == ["fr", "ko"]

    own = make_tiny_run(tmp_path / "runs" / "own", with_eval=False)
    corpus = tmp_path / "runs" / "corpus" / "roman.txt"  # a corpus of the user's own: its language is not known
    corpus.parent.mkdir(parents=True)
    corpus.write_text("Il était une fois\n", encoding="utf-8")
    summary = json.loads((own / "training_summary.json").read_text())
    summary["dataset"] = summary["config"]["dataset"] = str(corpus)
    (own / "training_summary.json").write_text(json.dumps(summary))
    with caplog.at_level("WARNING", logger="hf_gpt_custom.hub"):
        assert "language" not in front_matter(export_folder(own, own / "export"))
    assert "the card names no language" in caplog.text and "--language CODE" in caplog.text
    export_folder(own, own / "export", language="fr")
    _stage_export(None, own, {})  # `run` re-exporting keeps the language export was given
    assert front_matter(own / "export")["language"] == ["fr"]
    assert "--language fr" in capsys.readouterr().out

    for wrong in ("english", "e", "en,,fr1", ","):
        with pytest.raises(SystemExit) as exit_info:
            main(["export", str(run_dir), str(tmp_path / "wrong"), "--language", wrong])
        assert exit_info.value.code == 2 and not (tmp_path / "wrong").exists()
        assert "give two- or three-letter codes" in capsys.readouterr().err


def test_export_into_the_working_directory_as_dot(exported, tmp_path, monkeypatch):
    """`hf-gpt-custom export RUN .` from an empty folder stopped with ValueError: PosixPath('.') has an empty name."""
    from hf_gpt_custom.cli import main

    run_dir, _ = exported
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    main(["export", str(run_dir), "."])
    assert (here / "README.md").is_file() and (here / "model.safetensors").is_file()


def test_two_edited_exports_in_one_second_keep_both_edits(exported, tmp_path, monkeypatch):
    """The kept folder's name had one-second resolution: the second move failed with a bare OSError (Directory not
    empty), and the staging folder it left blocked every later export."""
    import time

    from hf_gpt_custom.hub import export_folder

    monkeypatch.setattr(time, "strftime", lambda *args: "20261126T000000Z")  # every export in the same second
    run_dir, _ = exported
    out_dir = export_folder(run_dir, tmp_path / "export")
    for edit in ("first", "second"):
        (out_dir / "README.md").write_text((out_dir / "README.md").read_text() + f"\n{edit} edit\n")
        export_folder(run_dir, out_dir)
    kept = sorted(tmp_path.glob("export.edited_*"))
    assert [p.name for p in kept] == ["export.edited_20261126T000000Z", "export.edited_20261126T000000Z_2"]
    assert [p.joinpath("README.md").read_text().endswith(f"{edit} edit\n") for p, edit in
            zip(kept, ("first", "second"))] == [True, True]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("export.edited_")) == ["export"]
    assert not (out_dir / ".hf-gpt-custom-export-staging").exists()


def test_an_export_keeps_a_sentencepiece_tokenizer_as_it_was_trained(tmp_path, shared_data_dir, python_without_project):
    """A run trained with a LLaMA-style tokenizer (`tokenizer=<folder>`): export rebuilt it as our byte-level class from
    its vocabulary and merges — other ids, spaces lost in decoding — and the card called it byte-level BPE. The
    export must encode and decode as final/ does, here and where the package is absent."""
    from transformers import AutoTokenizer

    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.manifest import write_manifest
    from tests.helpers import sentencepiece_like

    run_dir = make_tiny_run(tmp_path / "runs" / "sp", with_eval=False)
    final = run_dir / "final"
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json"):
        (final / name).unlink(missing_ok=True)
    sentencepiece_like(shared_data_dir / "tinyshakespeare" / "input.txt", vocab_size=257,
                       byte_fallback=False).save_pretrained(final)
    write_manifest(final)
    out_dir = export_folder(run_dir, tmp_path / "export")
    text = "ROMEO:\nBut, soft! what light through yonder window breaks?"
    trained, exported = AutoTokenizer.from_pretrained(final), AutoTokenizer.from_pretrained(out_dir)
    assert exported(text)["input_ids"] == trained(text)["input_ids"]
    assert exported.decode(exported(text)["input_ids"]) == text
    assert (exported.pad_token, exported.padding_side, exported.model_max_length) == ("</s>", "left", 64)
    card = (out_dir / "README.md").read_text(encoding="utf-8")
    assert "Byte-level BPE" not in card and "kept as its own class" in card
    # its documents end with its own eos, where the card named <|endoftext|> for every tokenizer (a hunt)
    assert "Documents are tokenized with `</s>` appended" in " ".join(card.split()) and "<|endoftext|>" not in card
    # the card lists the code the folder ships: ours for the model, none of ours for a tokenizer it does not use
    assert "`modeling_gpt_custom.py`" in card and "tokenization_gpt_custom.py" not in card
    assert not (out_dir / "tokenization_gpt_custom.py").exists()
    remote = python_without_project(
        "import json, sys\nfrom transformers import AutoTokenizer\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "print(json.dumps({'ids': t(sys.argv[2])['input_ids']}))", str(out_dir), text)
    assert remote["ids"] == trained(text)["input_ids"]


def test_a_tokenizer_with_its_own_pad_token_keeps_it_in_final_export_and_card(tmp_path, shared_data_dir):
    """A Llama's tokenizer pads with its own <unk> (config.json's pad_token_id): continued pre-training saved it with
    pad = eos beside that config, export did the same, and the card said the model had no padding token of its own
    (a hunt). Reference: the source tokenizer's pad token; one without keeps GPT-2's pad = eos."""
    from transformers import AutoTokenizer

    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.manifest import write_manifest
    from hf_gpt_custom.training.workload import tokenizer_for_model
    from tests.helpers import sentencepiece_like

    source = sentencepiece_like(shared_data_dir / "tinyshakespeare" / "input.txt", vocab_size=300, byte_fallback=False)
    source.save_pretrained(tmp_path / "without_pad")
    source.pad_token = "<unk>"
    source.save_pretrained(tmp_path / "with_pad")
    assert tokenizer_for_model(tmp_path / "with_pad", "</s>", 64).pad_token == "<unk>"
    assert tokenizer_for_model(tmp_path / "without_pad", "</s>", 64).pad_token == "</s>"

    run_dir = make_tiny_run(tmp_path / "runs" / "padded", with_eval=False)
    final = run_dir / "final"
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json"):
        (final / name).unlink(missing_ok=True)
    tokenizer_for_model(tmp_path / "with_pad", "</s>", 64).save_pretrained(final)
    write_manifest(final)
    out_dir = export_folder(run_dir, tmp_path / "export")
    assert AutoTokenizer.from_pretrained(out_dir).pad_token == "<unk>"
    card = " ".join((out_dir / "README.md").read_text(encoding="utf-8").split())
    assert "This tokenizer pads with its own `<unk>` on the **left**" in card and "no padding token" not in card


def test_a_full_disk_while_exporting_is_named_and_the_half_written_folder_removed(exported, tmp_path, monkeypatch):
    """safetensors raises its own SafetensorError (no OSError) when the disk fills under save_pretrained: export
    ended in a bare traceback and left <out>.tmp holding the space (the interrupts hunt). A bug's error keeps its
    traceback."""
    import transformers.modeling_utils
    from safetensors import SafetensorError

    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.hub import export_folder

    run_dir, _ = exported

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full)  # what save_pretrained calls
    with pytest.raises(UserError, match=r"cannot write the export to .*out: No space left on device \(ENOSPC\); "
                                        r"free space on the disk of .*out, or choose an output folder on another disk"):
        export_folder(run_dir, tmp_path / "out")
    assert sorted(path.name for path in tmp_path.iterdir()) == []  # neither out/ nor out.tmp/
    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", lambda *args, **kwargs: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        export_folder(run_dir, tmp_path / "out")


def test_export_of_an_unfinished_run_names_the_missing_folder(tmp_path):
    from hf_gpt_custom.hub import export_folder

    with pytest.raises(FileNotFoundError, match=r"final/config.json not found"):
        export_folder(tmp_path / "runs" / "nothing", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- push -----------------------------------------------------------------------------------------------------------


@pytest.fixture
def no_token(monkeypatch, tmp_path):
    """No HF_TOKEN and an empty token file location, whatever the developer's own login."""
    import huggingface_hub.constants as constants

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no_token" / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no_token" / "stored_tokens"))


def test_push_without_a_token_says_how_to_log_in_and_changes_nothing(exported, no_token):
    from hf_gpt_custom.hub import push_folder

    _, out_dir = exported
    before = hash_folder(out_dir)
    with pytest.raises(ValueError, match=r"no Hugging Face token found; log in with `hf auth login` or set HF_TOKEN"):
        push_folder(out_dir, "alice/tiny-shakespeare")
    assert hash_folder(out_dir) == before


def test_push_in_offline_mode_fails_with_one_message(exported, monkeypatch):
    from hf_gpt_custom.hub import HubUnreachableError, push_folder

    _, out_dir = exported
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = hash_folder(out_dir)
    with pytest.raises(HubUnreachableError, match=r"offline mode is on") as caught:
        push_folder(out_dir, "alice/tiny-shakespeare", private=True)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, ConnectionError)
    assert "\n" not in str(caught.value)
    assert hash_folder(out_dir) == before


def test_push_to_an_unreachable_endpoint_fails_with_one_message(exported, monkeypatch, unused_tcp_port):
    import huggingface_hub.constants as constants

    from hf_gpt_custom.hub import HubUnreachableError, push_folder

    _, out_dir = exported
    endpoint = f"http://127.0.0.1:{unused_tcp_port}"  # nothing listens: connection refused, never the real Hub
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    before = hash_folder(out_dir)
    with pytest.raises(HubUnreachableError, match=r"the Hub at http://127\.0\.0\.1:\d+ is unreachable") as caught:
        push_folder(out_dir, "alice/tiny-shakespeare", revision="v1")
    assert "\n" not in str(caught.value) and "Nothing was changed" in str(caught.value)
    assert hash_folder(out_dir) == before


def test_push_of_a_folder_that_is_not_an_export_is_refused_naming_what_it_lacks(tmp_path):
    """A run's final/ (config.json, no card) was told it had "no config.json and README.md"; a path that does not
    exist got the same sentence."""
    from hf_gpt_custom.hub import push_folder

    with pytest.raises(FileNotFoundError, match=rf"cannot publish {tmp_path}: it has no config.json and no README.md "
                                                r".*hf-gpt-custom export RUN_DIR OUT_DIR"):
        push_folder(tmp_path, "alice/x")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=rf"cannot publish {tmp_path}: it has no README.md \(not an export"):
        push_folder(tmp_path, "alice/x")
    with pytest.raises(FileNotFoundError, match=rf"cannot publish {tmp_path / 'gone'}: there is no such folder"):
        push_folder(tmp_path / "gone", "alice/x")
    with pytest.raises(ValueError, match=rf"cannot publish {tmp_path / 'config.json'}: it is a file; give the folder "
                                         rf"export wrote \({tmp_path}"):
        push_folder(tmp_path / "config.json", "alice/x")


def test_the_commands_it_suggests_paste_into_a_shell_with_spaces_in_paths(exported, tmp_path, capsys):
    from hf_gpt_custom.cli import main

    run_dir, _ = exported
    out_dir = tmp_path / "my export"
    main(["export", str(run_dir), str(out_dir), "--repo-id", "alice/x"])
    assert f"hf-gpt-custom push '{out_dir}' --repo-id alice/x --dry-run" in capsys.readouterr().out


@pytest.fixture
def unused_tcp_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_push_with_a_rejected_token_names_the_http_status(exported, monkeypatch):
    """A local stand-in for the Hub that answers 401 to everything, as the real one does for a bad token."""
    import http.server
    import threading

    import huggingface_hub.constants as constants

    from hf_gpt_custom.hub import push_folder

    class Unauthorized(http.server.BaseHTTPRequestHandler):
        def _deny(self):
            body = json.dumps({"error": "Invalid credentials in Authorization header"}).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_HEAD = _deny

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Unauthorized)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _, out_dir = exported
        monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        before = hash_folder(out_dir)
        with pytest.raises(ValueError, match=r"HTTP 401 \(Invalid credentials in Authorization header\)"):
            push_folder(out_dir, "alice/tiny-shakespeare")
        assert hash_folder(out_dir) == before
    finally:
        server.shutdown()
        server.server_close()


# --- what an export publishes: no local path, readable weights, a tokenizer ready for batches ------------------------


def local_strings(run_dir: Path) -> list[str]:
    """Strings that would give away the machine the run was on: the run's own absolute paths (the folder, the
    dataset file beside it, the tokenizer folder, the packed-data cache), the home folder and the working directory."""
    summary = json.loads((run_dir / "training_summary.json").read_text())
    return [str(run_dir), str(run_dir.parent), summary["dataset"], summary["tokenizer"], summary["data_cache"],
            str(Path.home()), os.getcwd()]


def test_export_publishes_no_local_path(exported):
    run_dir, out_dir = exported
    forbidden = local_strings(run_dir)
    assert all(os.path.isabs(item) for item in forbidden)
    # the run itself does record them (otherwise this test would prove nothing)
    assert str(run_dir) in (run_dir / "training_summary.json").read_text()
    assert '"is_local": true' in (run_dir / "final" / "tokenizer_config.json").read_text()
    for path in out_dir.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", errors="replace")
            leaked = [item for item in forbidden if item in text]
            assert not leaked, f"{path.relative_to(out_dir)} publishes {leaked}"
    tokenizer_config = json.loads((out_dir / "tokenizer_config.json").read_text())
    assert "is_local" not in tokenizer_config and "local_files_only" not in tokenizer_config
    summary = json.loads((out_dir / "training_summary.json").read_text())
    # a file outside the run by its base name, a folder inside the run by its path there
    assert (summary["dataset"], summary["config"]["dataset"], summary["tokenizer"]) == ("input.txt", "input.txt", "tokenizer")
    assert summary["final_val_loss"] == 5.5  # numbers untouched
    results = json.loads((out_dir / "eval" / "results.json").read_text())
    assert results["model"] == "final"
    assert (out_dir / "eval" / "table.md").read_text().startswith("Model: `final`")
    card = (out_dir / "README.md").read_text()
    assert "`input.txt`" in card and "karpathy/tiny_shakespeare" in card


def test_export_publishes_relative_local_paths_by_their_base_name(tmp_path):
    """out_dir and task files given as relative paths are recorded as typed ("../home/alice/tasks/mycopa.yaml"), which
    the rule for absolute paths let through into the published JSON (the paths hunt; docs/hub.md: a local file becomes
    its base name). A built-in task name and a Hub dataset name stay as they are."""
    from hf_gpt_custom.hub import export_folder

    run_dir = make_tiny_run(tmp_path / "runs" / "r1")
    summary = json.loads((run_dir / "training_summary.json").read_text())
    summary["config"].update(out_dir="../home/alice/runs/r1", data_cache_dir="../home/alice/.cache/packed",
                             benchmark_tasks=["copa", "../home/alice/tasks/mycopa.yaml"])
    (run_dir / "training_summary.json").write_text(json.dumps(summary))
    results = json.loads((run_dir / "eval" / "results.json").read_text())
    results["config"]["tasks"] = ["lambada", "tasks/arc.yaml"]
    (run_dir / "eval" / "results.json").write_text(json.dumps(results))
    out_dir = export_folder(run_dir, tmp_path / "export")
    published = json.loads((out_dir / "training_summary.json").read_text())["config"]
    assert (published["out_dir"], published["data_cache_dir"], published["benchmark_tasks"]) == (
        "r1", "packed", ["copa", "mycopa.yaml"])
    assert json.loads((out_dir / "eval" / "results.json").read_text())["config"]["tasks"] == ["lambada", "arc.yaml"]
    assert "alice" not in "".join(path.read_text(errors="replace") for path in out_dir.rglob("*.json"))


def test_export_through_a_symlink_or_a_dotdot_spelling_replaces_the_export_it_names(tmp_path):
    """OUT_DIR a symlink to an earlier export (a Hub clone kept elsewhere): the link was moved aside and replaced by a
    new folder, the target kept its old card, and a leftover link warned on every later export. OUT_DIR spelt
    `runs/r/export/../export`: once export/ was moved aside the spelling named nothing, the export was lost and the
    error blamed disk space (the paths hunt). Reference: the folder each spelling names before the export."""
    from hf_gpt_custom.hub import export_folder

    run_dir = make_tiny_run(tmp_path / "runs" / "r")
    target = export_folder(run_dir, run_dir / "export")
    link = tmp_path / "hub_clone"
    link.symlink_to(target, target_is_directory=True)
    assert export_folder(run_dir, link, repo_id="alice/tiny") == target
    assert link.is_symlink() and "alice/tiny" in (target / "README.md").read_text()
    assert not list(tmp_path.glob("hub_clone.*")) and not list(run_dir.glob("export.*"))
    dotted = run_dir / "export" / ".." / "export"
    assert export_folder(run_dir, dotted, repo_id="bob/tiny") == target
    assert "bob/tiny" in (target / "README.md").read_text() and not list(run_dir.glob("export.*"))


def test_export_weights_are_readable_by_others(exported, tmp_path):
    from hf_gpt_custom.hub import export_folder

    run_dir, _ = exported
    previous = os.umask(0o022)
    try:
        out_dir = export_folder(run_dir, tmp_path / "export")
    finally:
        os.umask(previous)
    assert (run_dir / "final" / "model.safetensors").stat().st_mode & 0o777 == 0o600  # what save_pretrained leaves
    for path in out_dir.rglob("*"):
        assert path.stat().st_mode & 0o777 == (0o755 if path.is_dir() else 0o644), path


def test_export_tokenizer_pads_left_with_eos_and_truncates_at_the_context_length(exported):
    from transformers import AutoTokenizer

    _, out_dir = exported
    tokenizer = AutoTokenizer.from_pretrained(out_dir, trust_remote_code=True)
    n_positions = json.loads((out_dir / "config.json").read_text())["n_positions"]
    assert tokenizer.model_max_length == n_positions == 64
    assert tokenizer.pad_token == tokenizer.eos_token == "<|endoftext|>" and tokenizer.padding_side == "left"
    batch = tokenizer(["ab", "abcd"], padding=True)
    eos = tokenizer.eos_token_id
    assert batch["input_ids"][0][:2] == [eos, eos] and batch["attention_mask"][0] == [0, 0, 1, 1]
    assert len(tokenizer("x" * 500, truncation=True)["input_ids"]) == n_positions


def test_export_refuses_a_final_folder_with_a_missing_weight(tmp_path):
    from safetensors.torch import load_file, save_file

    from hf_gpt_custom.hub import export_folder

    run_dir = make_tiny_run(tmp_path / "runs" / "broken", with_eval=False)
    weights = run_dir / "final" / "model.safetensors"
    tensors = load_file(weights)
    del tensors["transformer.ln_f.weight"]
    save_file(tensors, weights, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"does not hold every weight.*transformer\.ln_f\.weight"):
        export_folder(run_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_model_saved_as_shards_exports_loads_and_passes_the_publish_check(tmp_path, monkeypatch):
    """save_pretrained shards a model over max_shard_size (50 GB by default: the large presets in fp32); its export
    must hold the index and every shard, not a model.safetensors it never writes. Sharding at 20 KB stands in."""
    import torch

    from hf_gpt_custom import GPTCustomForCausalLM, modeling_gpt_custom
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.publish_checks import check_export

    run_dir = make_tiny_run(tmp_path / "runs" / "sharded", with_eval=False)
    save = modeling_gpt_custom.GPTCustomPreTrainedModel.save_pretrained
    monkeypatch.setattr(modeling_gpt_custom.GPTCustomPreTrainedModel, "save_pretrained",
                        lambda self, *args, **kwargs: save(self, *args, **{"max_shard_size": "20KB", **kwargs}))
    out = export_folder(run_dir, tmp_path / "out")
    shards = sorted(path.name for path in out.glob("model-*.safetensors"))
    assert len(shards) > 1 and not (out / "model.safetensors").exists()
    assert {name for name, _ in check_export(out)} >= {"model.safetensors.index.json", *shards}
    prompt = torch.tensor([[5, 9, 3, 7]])
    with torch.no_grad():
        expected = GPTCustomForCausalLM.from_pretrained(run_dir / "final")(prompt).logits
        torch.testing.assert_close(GPTCustomForCausalLM.from_pretrained(out)(prompt).logits, expected, rtol=0, atol=0)
    (out / shards[-1]).unlink()
    with pytest.raises(UserError, match=rf"missing {shards[-1]}"):
        check_export(out)


@pytest.mark.parametrize("written", ["/home/alice/data/corpus.txt", "`/Users/bob/runs/x`", "C:\\Users\\carol\\run",
                                     "(/home/dave.smith/tok)"])
def test_a_card_naming_another_machines_home_is_refused(exported, tmp_path, written, monkeypatch):
    """Only this machine's paths were known in free text: a card edited elsewhere (or written by a colleague) with
    their home folder passed `push --dry-run`. A home folder of any machine is refused; the same words inside a URL
    or without the leading slash are not."""
    from hf_gpt_custom.publish_checks import check_export

    folder = tmp_path / "card"
    shutil.copytree(exported[1], folder)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # this machine's home and working directory are another rule
    monkeypatch.chdir(tmp_path)
    card = (folder / "README.md").read_text(encoding="utf-8")
    (folder / "README.md").write_text(card + "\nSee https://example.org/home/alice/x and home/alice, C:Users.\n"
                                      "In a Space: /home/user/app. With Docker:\n"
                                      "`docker run -v ~/.cache/huggingface:/root/.cache/huggingface image`\n")
    check_export(folder)  # no one's home: a URL, a relative path, a placeholder, Docker's /root
    (folder / "README.md").write_text(card + f"\nTrained on {written} too.\n")
    with pytest.raises(ValueError, match=r"README\.md contains the local path '[^']*(alice|bob|carol|dave\.smith)'"):
        check_export(folder)
    (folder / "README.md").write_text(card)
    (folder / "eval" / "NOTES.md").write_text(f"Evaluated from {written}.\n")  # documentation added beside the card
    with pytest.raises(ValueError, match=r"eval/NOTES\.md contains the local path '[^']*(alice|bob|carol|dave\.smith)'"):
        check_export(folder)


def test_a_card_naming_a_path_that_exists_on_this_machine_is_refused(exported, tmp_path, monkeypatch):
    """"Evaluated from /work/runs/x/final on /data/copa/val.jsonl" appended to the card passed push --dry-run when
    run from another folder: only the home and working folders were known, though docs/hub.md promised this
    machine's paths are refused. A path made here outside both is refused; system folders, URLs, relative paths and
    a path that exists on no machine pass."""
    from hf_gpt_custom.publish_checks import check_export

    folder = tmp_path / "card"
    shutil.copytree(exported[1], folder)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("HOME", str(elsewhere / "home"))
    monkeypatch.chdir(elsewhere)
    data = tmp_path / "shared data" / "copa"
    data.mkdir(parents=True)
    (data / "val.jsonl").write_text("{}\n")
    card = (folder / "README.md").read_text(encoding="utf-8")
    (folder / "README.md").write_text(card + "\nRun with `/usr/bin/env python` or `python /dev/null`; see "
                                      "https://huggingface.co/docs/hub/model-cards and eval/table.md; data in "
                                      "/no/such/folder/anywhere, dates 2026/11/28, and/or 1/2; logs in "
                                      "/var/log/training.log, /run/user/1000/bus, /opt/conda/bin/python.\n")
    check_export(folder)
    for where in ("README.md", "eval/table.md", "training_summary.json"):
        original = (folder / where).read_text(encoding="utf-8")
        (folder / where).write_text(original + f"\nEvaluated on {data / 'val.jsonl'} (copied).\n"
                                    if where.endswith(".md") else
                                    json.dumps({**json.loads(original), "note": f"scored on {data}/val.jsonl"}))
        with pytest.raises(ValueError, match=rf"{where.replace('.', '[.]')} contains the local path '{tmp_path}"):
            check_export(folder)
        (folder / where).write_text(original)


def test_evaluation_examples_and_a_license_file_may_be_added_to_an_export(exported, tmp_path):
    """docs/hub.md calls eval/ documentation, yet the examples.jsonl that `eval --out EXPORT/eval` writes was refused
    as added after export; export's warning for a license the Hub does not list asked for a LICENSE file, which push
    then refused. A pickle under either name is still refused."""
    import pickle

    from hf_gpt_custom.publish_checks import check_export

    folder = tmp_path / "card"
    shutil.copytree(exported[1], folder)
    (folder / "eval" / "examples.jsonl").write_text(json.dumps({"task": "copa", "prompt": "The man"}) + "\n")
    (folder / "LICENSE").write_text("Permission is hereby granted, free of charge, ...\n")
    (folder / "LICENSE.txt").write_text("Permission is hereby granted, free of charge, ...\n")
    names = {name for name, _ in check_export(folder)}
    assert {"eval/examples.jsonl", "LICENSE", "LICENSE.txt"} <= names
    (folder / "LICENSE").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(ValueError, match=r"pickled files \(LICENSE\)"):
        check_export(folder)
    (folder / "LICENSE").unlink()
    (folder / "eval" / "extra.jsonl").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(ValueError, match=r"pickled files \(eval/extra\.jsonl\)"):
        check_export(folder)
    (folder / "eval" / "extra.jsonl").unlink()
    (folder / "eval" / "extra.py").write_text("import os\n")
    with pytest.raises(ValueError, match=r"eval/extra\.py is not in its manifest"):
        check_export(folder)


def test_the_warning_for_an_unlisted_license_names_a_file_push_accepts(caplog):
    import logging

    from hf_gpt_custom.publish_checks import REPOSITORY_FILES, hub_license

    with caplog.at_level(logging.WARNING):
        assert hub_license("my-own-license-v1") == "my-own-license-v1"
    assert "`--license other` and put the license's text in LICENSE (or LICENSE.md)" in caplog.text
    assert "LICENSE" in REPOSITORY_FILES


def test_push_refuses_scores_of_other_weights_put_into_the_export(exported, tmp_path):
    """`eval --model OTHER --out EXPORT/eval` (or a copied results.json) put another model's scores beside the card,
    and push --dry-run passed it, though export refuses the same in a run folder. Reference: the weights' own
    sha256s, hashed here with hashlib."""
    import hashlib
    import shutil

    from hf_gpt_custom.publish_checks import check_export

    _, out_dir = exported
    folder = tmp_path / "export"
    shutil.copytree(out_dir, folder)
    results = json.loads((folder / "eval" / "results.json").read_text())
    weights = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    own = hashlib.sha256(f"model.safetensors={weights};".encode()).hexdigest()  # what an evaluation of it records
    (folder / "eval" / "results.json").write_text(json.dumps({**results, "model_weights_sha256": own}))
    check_export(folder)  # this model's own scores pass
    (folder / "eval" / "results.json").write_text(json.dumps({**results, "model_weights_sha256": "0" * 64}))
    with pytest.raises(ValueError, match=r"eval/results\.json scored other weights than this folder's"):
        check_export(folder)
    (folder / "eval" / "results.json").write_text(json.dumps({k: v for k, v in results.items()
                                                             if k != "model_weights_sha256"}))
    check_export(folder)  # results that name no weights (written before they did) are taken as they are


def test_push_refuses_the_card_export_wrote_for_weights_saved_over_since(exported, tmp_path, monkeypatch):
    """New weights saved into an export, then evaluated into its eval/ as push asked: push passed, and the card's
    table and model-index published the old model's figures beside the new weights (the docsclaims3 hunt). The
    suggested evaluation, run as printed from inside the folder, records no local path. A card edited since export is
    the user's: taken as it is. Reference: the figures evaluate() gives the new weights."""
    import torch

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.eval.runner import evaluate
    from hf_gpt_custom.eval.task_data import BUILT_IN_DATA_DIR
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.publish_checks import check_export

    _, out_dir = exported
    folder = shutil.copytree(out_dir, tmp_path / "my export")  # a space: the printed command quotes it
    check_export(folder)
    model = GPTCustomForCausalLM.from_pretrained(folder)
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    model.save_pretrained(folder)
    card_refused = r"its model card \(README\.md\) is the one export wrote for other weights"
    with pytest.raises(UserError, match=card_refused + r".*cd '.*/my export' && hf-gpt-custom eval --model \. --out "
                                                     r"eval"):
        check_export(folder)
    old_results = json.loads((folder / "eval" / "results.json").read_text())
    # the benchmark files from another folder than ../shared/data, as README says to give them where that is
    # missing: its path, recorded in results.json, was a local path push refused (the roundreview25 hunt)
    data = tmp_path / "benchmark data"
    data.mkdir()
    for child in BUILT_IN_DATA_DIR.iterdir():
        (data / child.name).symlink_to(child)
    monkeypatch.setenv("HF_GPT_CUSTOM_DATA_DIR", str(data))
    monkeypatch.chdir(folder)  # as the message says
    new_results = evaluate(".", tasks=old_results["config"]["tasks"], shots=old_results["config"]["shots"],
                           limit=old_results["config"]["limit"], out_dir="eval", show_progress=False,
                           skip_unfittable=True)
    assert [row["value"] for row in new_results.results] != [row["value"] for row in old_results["results"]]
    with pytest.raises(UserError, match=card_refused):  # the scores are this folder's now, the card's are not
        check_export(folder)
    with open(folder / "README.md", "a", encoding="utf-8") as card:  # the user brings the figures up to date
        card.write("\nScores of this version: see eval/results.json.\n")
    check_export(folder)


def test_push_checks_the_export_again_before_anything_else(exported, tmp_path, monkeypatch):
    import shutil

    from hf_gpt_custom.hub import push_folder
    from hf_gpt_custom.publish_checks import check_export

    _, out_dir = exported
    files = check_export(out_dir)
    assert ("model.safetensors", (out_dir / "model.safetensors").stat().st_size) in files
    edited = tmp_path / "edited"
    shutil.copytree(out_dir, edited)
    with open(edited / "README.md", "a", encoding="utf-8") as card:
        card.write(f"\nTrained from {Path.home() / 'data' / 'corpus.txt'}\n")
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    before = hash_folder(edited)
    with pytest.raises(ValueError, match=r"README\.md contains the local path"):
        push_folder(edited, "alice/tiny-shakespeare")
    assert hash_folder(edited) == before

    summary = json.loads((out_dir / "training_summary.json").read_text())
    (edited / "README.md").write_text((out_dir / "README.md").read_text())
    (edited / "training_summary.json").write_text(json.dumps({**summary, "_name_or_path": "/srv/models/tiny"}))
    with pytest.raises(ValueError, match=r"training_summary\.json contains local information _name_or_path = '/srv/models/tiny'"):
        check_export(edited)
    (edited / "training_summary.json").write_text(json.dumps(summary))
    (edited / "loss_curve.png").unlink()
    with pytest.raises(ValueError, match=r"README\.md shows loss_curve\.png, which is not in .*; put the image there, "
                                         r"or remove it from the card"):
        check_export(edited)


def test_a_bit_flip_in_an_exported_weight_file_is_refused_by_our_loaders(exported, tmp_path):
    """The export carries a manifest (size and sha256 of every file), so eval or --init_from on a copy whose
    model.safetensors changed on disk refuses it instead of scoring other weights."""
    import shutil

    from hf_gpt_custom.model_folder import load_model_folder

    _, out_dir = exported
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    load_model_folder(copy)  # intact: loads
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-10] ^= 1  # inside the last tensor's bytes: safetensors itself still opens the file
    (copy / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"model\.safetensors does not match its sha256"):
        load_model_folder(copy)


@pytest.mark.parametrize(
    "value, is_id",
    [("gpt2", True), ("alice/tiny-1.0", True), ("wikitext", True), ("runs/smoke/final", False), ("./model", False),
     ("/abs/path", False), ("~/model", False), ("a..b", False), ("a--b", False), ("owner/x.git", False),
     ("-x", False), ("x-", False), ("two words", False), ("", False)],
)
def test_local_path_or_hub_id_is_decided_once_by_huggingface_hubs_rule(value, is_id):
    """CLI, tokenizer trainer and eval loader all ask is_hub_repo_id, which follows validate_repo_id."""
    from hf_gpt_custom.tokenizer_training import _classify_input_list

    assert is_hub_repo_id(value) is is_id
    if value and not value.startswith(("./", "/", "~")):  # those are refused as missing files before the id check
        assert _classify_input_list([value]) == ("hub" if is_id else "texts")


# --- the manifest: the same protection for push, eval/finetune and from_pretrained ----------------------------------


def _pretend_the_hub_is_reachable(monkeypatch) -> None:
    """A token, online mode, and a Hub on which the repository exists already (create_repo does nothing): what a
    push needs before it uploads. Nothing reaches the network; each test fakes the calls it checks."""
    import huggingface_hub.constants as constants
    from huggingface_hub import HfApi

    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(HfApi, "repo_exists", lambda self, *args, **kwargs: True)
    monkeypatch.setattr(HfApi, "create_repo", lambda self, *args, **kwargs: None)


def _loaders_of_a_folder():
    """Every way a folder is read: push's check, our commands' strict loader, transformers' from_pretrained."""
    from transformers import AutoModelForCausalLM

    from hf_gpt_custom.publish_checks import check_export
    from hf_gpt_custom.model_folder import load_model_folder

    return {"push": check_export, "eval/finetune": load_model_folder, "from_pretrained": AutoModelForCausalLM.from_pretrained}


def test_an_edited_card_is_accepted_and_an_edited_config_refused_by_every_reader(exported, tmp_path):
    import shutil

    _, out_dir = exported
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    with open(copy / "README.md", "a", encoding="utf-8") as card:
        card.write("\n## Notes from the author\n\nUse with care.\n")
    for reader in _loaders_of_a_folder().values():
        reader(copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "n_layer": 1}, indent=2))
    for name, reader in _loaders_of_a_folder().items():
        with pytest.raises(ValueError, match=r"is damaged: config\.json (has \d+ bytes|does not match)"):
            reader(copy)
            pytest.fail(f"{name} accepted an edited config.json")


def test_a_bit_flip_is_refused_where_the_package_is_not_installed(exported_loaded_without_the_package):
    """The exported remote code verifies the manifest itself (manifest.py ships beside the modeling file). The copy
    with one bit flipped is loaded first in the clean process of exported_loaded_without_the_package."""
    result = exported_loaded_without_the_package["bit_flip"]
    assert result["error"].startswith("transformers_modules.") and result["error"].endswith(".UserError")
    assert "model.safetensors does not match its sha256" in result["message"]


# --- local paths: export scrubs exactly what push refuses -------------------------------------------------------------


@pytest.mark.parametrize("value, is_local", [
    ("/data/my corpus/input.txt", True), ("/srv/models/tiny", True), ("/srv/tiny", True), ("~/corpora/x.txt", True),
    ("C:\\Users\\me\\data.txt", True), ("/home/a b/c d", True),
    ("/", False), ("</s>", False), ("/ not a path", False), ("a/b/c", False), ("Ġ /", False), ("runs/x", False),
])
def test_the_export_scrub_and_the_push_check_apply_one_rule(value, is_local, tmp_path):
    from hf_gpt_custom.hub import _public_value
    from hf_gpt_custom.publish_checks import find_local_json_values

    scrubbed = _public_value({"dataset": value}, tmp_path, [])["dataset"]
    assert (scrubbed != value) is is_local
    assert (find_local_json_values({"dataset": value}) is not None) is is_local
    assert find_local_json_values({"dataset": scrubbed}) is None


def test_a_dataset_path_with_a_space_is_scrubbed_from_the_export_and_refused_by_push(tmp_path):
    """Outside home and the working directory, as on a shared data disk: the JSON rule sees it whole, and the path
    exists on this machine, which documentation may not name either."""
    import shutil

    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.publish_checks import check_export

    run_dir = make_tiny_run(tmp_path / "runs" / "spaced", with_eval=False)
    spaced = tmp_path / "shared data" / "tiny shakespeare" / "input.txt"
    spaced.parent.mkdir(parents=True)
    shutil.move(run_dir.parent / "data" / "tinyshakespeare" / "input.txt", spaced)
    summary = json.loads((run_dir / "training_summary.json").read_text())
    summary["dataset"] = summary["config"]["dataset"] = str(spaced)
    (run_dir / "training_summary.json").write_text(json.dumps(summary))
    out_dir = export_folder(run_dir, tmp_path / "export")
    published = json.loads((out_dir / "training_summary.json").read_text())
    assert (published["dataset"], published["config"]["dataset"]) == ("input.txt", "input.txt")
    assert not any(str(spaced.parent) in path.read_bytes().decode("utf-8", "replace") for path in out_dir.rglob("*") if path.is_file())
    (out_dir / "training_summary.json").write_text(json.dumps({**published, "dataset": str(spaced)}))  # put back by hand
    with pytest.raises(ValueError, match=r"training_summary\.json contains the local path '.*/shared'"):
        check_export(out_dir)
    from hf_gpt_custom.publish_checks import find_local_json_values

    assert find_local_json_values({"dataset": str(spaced)}) == f"dataset = {str(spaced)!r}"


# --- a bad --repo-id -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("repo_id", ["two words", "alice/x/y", "alice/", "x-", "a" * 97])
def test_a_bad_repo_id_is_one_clear_line_everywhere(repo_id, exported, tmp_path, capsys):
    from hf_gpt_custom.cli import main
    from hf_gpt_custom.hub import export_folder, push_folder

    run_dir, out_dir = exported
    with pytest.raises(ValueError, match=r"is not a Hub repository id; use USER/NAME") as caught:
        push_folder(out_dir, repo_id)
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match=r"is not a Hub repository id"):
        export_folder(run_dir, tmp_path / "out", repo_id=repo_id)
    assert not (tmp_path / "out").exists()
    for argv in (["push", str(out_dir), "--repo-id", repo_id, "--dry-run"], ["push", str(out_dir), "--repo-id", repo_id],
                 ["export", str(run_dir), str(tmp_path / "out"), "--repo-id", repo_id]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        err = capsys.readouterr().err
        assert exited.value.code == 2 and err.count("\n") == 1 and "is not a Hub repository id" in err, argv


def test_a_second_push_leaves_no_file_of_the_first_on_the_hub(exported, monkeypatch):
    """The repository becomes the folder: files an earlier push left (eval results, another shard layout, a
    generation config this export lacks) are deleted, .gitattributes is kept. The deletions are computed by
    huggingface_hub's own upload_folder logic from the arguments push_folder passes, against a listed remote."""
    from huggingface_hub import HfApi

    from hf_gpt_custom.hub import push_folder

    _, out_dir = exported
    uploaded = sorted(path.relative_to(out_dir).as_posix() for path in out_dir.rglob("*") if path.is_file())
    stale = ["eval/old_results.json", "model-00001-of-00002.safetensors", "model.safetensors.index.json"]
    remote = [".gitattributes", *stale, uploaded[0]]
    commits = []

    def upload_folder(self, **kwargs):
        deletions = HfApi._prepare_folder_deletions(
            self, repo_id=kwargs["repo_id"], repo_type=kwargs["repo_type"], revision=kwargs["revision"], token=None,
            path_in_repo="", delete_patterns=kwargs.get("delete_patterns"))
        commits.append(sorted(op.path_in_repo for op in deletions if op.path_in_repo not in uploaded))
        return "https://huggingface.co/alice/tiny-shakespeare/commit/0"

    _pretend_the_hub_is_reachable(monkeypatch)
    monkeypatch.setattr(HfApi, "list_repo_files", lambda self, *args, **kwargs: list(remote))
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    push_folder(out_dir, "alice/tiny-shakespeare")
    assert commits == [sorted(stale)]


def test_private_push_to_an_existing_public_repository_is_refused_before_uploading(exported, monkeypatch):
    """create_repo(exist_ok=True) keeps an existing repository as it is: `--private` then uploaded publicly."""
    import types

    from huggingface_hub import HfApi

    from hf_gpt_custom.hub import push_folder

    uploads = []
    _pretend_the_hub_is_reachable(monkeypatch)
    monkeypatch.setattr(HfApi, "upload_folder", lambda self, **kwargs: uploads.append(kwargs) or "commit")
    for is_private in (False, True):
        monkeypatch.setattr(HfApi, "repo_info", lambda self, *args, **kwargs: types.SimpleNamespace(private=is_private))
        if is_private:
            push_folder(exported[1], "alice/tiny-shakespeare", private=True)
        else:
            with pytest.raises(ValueError, match=r"cannot push with --private: alice/tiny-shakespeare already exists "
                                                 r"and is public"):
                push_folder(exported[1], "alice/tiny-shakespeare", private=True)
            assert not uploads
    assert len(uploads) == 1


@pytest.mark.parametrize("status, server_message, expected", [
    (400, "Invalid metadata in README.md.\n- \"license\" must be one of [...]",
     r"HTTP 400 \(Invalid metadata in README.md.\): it refused the folder's contents, and nothing of it was uploaded; "
     r"mend what it names \(a model card's metadata: edit the front matter of README.md, or export again\)"),
    (403, "You don't have the rights to create a model under the namespace \"bob\"",
     r"HTTP 403 .*check that your token is valid and has write access"),
    (503, "Service Unavailable", r"HTTP 503 \(Service Unavailable\): the Hub's own error, and nothing was uploaded"),
], ids=["metadata", "rights", "outage"])
def test_a_refused_push_says_what_the_hubs_answer_means(exported, monkeypatch, status, server_message, expected):
    """Every HTTP error said "check that your token is valid", also when the Hub refused the card's metadata (400)
    after create_repo had succeeded."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.errors import Response

    http_client = importlib.import_module(Response.__module__.split(".")[0])  # whichever client huggingface_hub uses

    from hf_gpt_custom.hub import push_folder

    def upload_folder(self, **kwargs):
        response = Response(status, request=http_client.Request("POST", "https://huggingface.co/api/models/x/commit"))
        raise HfHubHTTPError(f"{status} error", response=response, server_message=server_message)

    _pretend_the_hub_is_reachable(monkeypatch)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    with pytest.raises(ValueError, match=rf"^cannot push to alice/tiny-shakespeare: the Hub answered {expected}"):
        push_folder(exported[1], "alice/tiny-shakespeare")


@pytest.mark.parametrize("existed", [False, True], ids=["created_by_the_push", "existed_before"])
def test_a_repository_the_failed_push_created_is_deleted_again_and_one_it_found_is_kept(exported, monkeypatch,
                                                                                      existed):
    """create_repo succeeded, then the Hub refused the commit: the new repository stayed, empty, and a retry with
    --private found it public and kept it so."""
    import huggingface_hub.constants as constants
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.errors import Response

    http_client = importlib.import_module(Response.__module__.split(".")[0])

    from hf_gpt_custom.hub import push_folder

    def upload_folder(self, **kwargs):
        response = Response(400, request=http_client.Request("POST", "https://huggingface.co/api/models/x/commit"))
        raise HfHubHTTPError("400 error", response=response, server_message="Invalid metadata in README.md.")

    calls = []
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(HfApi, "repo_exists", lambda self, *args, **kwargs: existed)
    monkeypatch.setattr(HfApi, "create_repo", lambda self, repo_id, **kwargs: calls.append(("create", repo_id)))
    monkeypatch.setattr(HfApi, "delete_repo", lambda self, repo_id, **kwargs: calls.append(("delete", repo_id)))
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    with pytest.raises(ValueError, match="HTTP 400") as caught:
        push_folder(exported[1], "alice/tiny-shakespeare")
    if existed:
        assert calls == [("create", "alice/tiny-shakespeare")] and "deleted" not in str(caught.value)
    else:
        assert calls == [("create", "alice/tiny-shakespeare"), ("delete", "alice/tiny-shakespeare")]
        assert str(caught.value).endswith("The empty repository this push had created was deleted again.")


# --- the staging folder and the pickle check ------------------------------------------------------------------------


def test_export_refuses_a_tmp_folder_it_did_not_make_and_replaces_its_own_leftover(exported, tmp_path, monkeypatch):
    """`<OUT_DIR>.tmp` was deleted whatever it held: a user's folder of that name lost its files."""
    import hf_gpt_custom.hub as hub
    from hf_gpt_custom.errors import UserError

    run_dir, _ = exported
    out_dir, staging = tmp_path / "mymodel", tmp_path / "mymodel.tmp"
    staging.mkdir()
    (staging / "notes.txt").write_text("my precious notes")
    with pytest.raises(UserError, match=r"mymodel\.tmp exists and was not made by export; move or delete it"):
        hub.export_folder(run_dir, out_dir)
    assert (staging / "notes.txt").read_text() == "my precious notes" and not out_dir.exists()

    shutil.rmtree(staging)
    def interrupted(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(hub, "_run_local_paths", interrupted)  # stops the export after it began writing the folder
    with pytest.raises(KeyboardInterrupt):
        hub.export_folder(run_dir, out_dir)
    assert (staging / "model.safetensors").is_file()  # the interrupted export's leftover
    monkeypatch.undo()
    assert hub.export_folder(run_dir, out_dir) == out_dir
    assert not staging.exists()
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(p.name for p in exported[1].iterdir())


PICKLE_NAMES = ("extra.pickle", "training_args.pkl.gz", "state.joblib", "notes.dat", "blob", "trainer_state", "args.gz",
                "args.bz2", "notes.md", "usage.md", "args0.gz")


def _pickle_files() -> dict[str, bytes]:
    """Files a user might add to an export, each a pickle whose name alone does not say so, or says it another way."""
    import bz2
    import collections
    import gzip
    import io
    import pickle

    import torch

    data = pickle.dumps({"learning_rate": 1e-3}, protocol=4)
    saved = io.BytesIO()
    torch.save({"step": 1}, saved)
    return {
        "extra.pickle": data, "training_args.pkl.gz": gzip.compress(data), "state.joblib": data,
        "notes.dat": pickle.dumps([1, 2], protocol=2), "blob": pickle.dumps("x", protocol=5),
        "trainer_state": saved.getvalue(),  # torch.save: a zip archive holding archive/data.pkl
        "args.gz": gzip.compress(data), "args.bz2": bz2.compress(data),
        # protocols 0 and 1 have no opening mark; a .md name passes as documentation, which may be added
        "notes.md": pickle.dumps(collections.OrderedDict(learning_rate=1e-3), protocol=0),
        "usage.md": pickle.dumps(collections.OrderedDict(learning_rate=1e-3), protocol=1),
        "args0.gz": gzip.compress(pickle.dumps(collections.OrderedDict(learning_rate=1e-3), protocol=0)),
    }


@pytest.mark.parametrize("name", PICKLE_NAMES)
def test_the_publish_check_finds_a_pickle_by_name_or_content(exported, tmp_path, name):
    """Only .bin/.pt/.pth/.pkl/.ckpt names were refused: .pickle, .pkl.gz and renamed pickles passed as "no
    pickles". Reference: the bytes written here with pickle and torch.save."""
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.publish_checks import check_export

    folder = tmp_path / "pk"
    shutil.copytree(exported[1], folder)
    (folder / name).write_bytes(_pickle_files()[name])
    with pytest.raises(UserError, match=rf"holds pickled files \({re.escape(name)}\); remove them"):
        check_export(folder)


def test_the_publish_check_passes_files_that_only_look_like_pickles_at_a_glance(exported, tmp_path):
    """A safetensors header whose length starts with the bytes 0x80 0x02 (640 bytes), a zip of text files and a text
    file are not pickles; the weights are judged without being read."""
    import struct
    import zipfile

    from hf_gpt_custom.manifest import write_manifest
    from hf_gpt_custom.publish_checks import check_export

    folder = tmp_path / "ok"
    shutil.copytree(exported[1], folder)
    header = json.dumps({"__metadata__": {"note": "x"}}).encode().ljust(640)
    (folder / "extra.safetensors").write_bytes(struct.pack("<Q", 640) + header)
    assert (folder / "extra.safetensors").read_bytes()[:2] == b"\x80\x02"
    with zipfile.ZipFile(folder / "notes.zip", "w") as archive:
        archive.writestr("notes.txt", "plain text")
    (folder / "notes.txt").write_text("plain text")
    # text opening as a protocol-0 pickle would ("N." is None, then STOP), but going on past its end
    (folder / "NOTES.md").write_text("N.B. the loss is per token.\n\n(c) 2026\n")
    write_manifest(folder)  # listed, as if exported with them: a file the manifest does not list is refused anyway
    names = {name for name, _ in check_export(folder)}
    assert {"extra.safetensors", "notes.zip", "notes.txt", "NOTES.md"} <= names


@pytest.mark.parametrize("repo_id", ["ftb", "gpt2"])
def test_a_repo_id_without_a_user_is_refused_by_export_and_push(repo_id, exported, tmp_path, capsys):
    """docs/hub.md says a --repo-id that is not USER/NAME is refused; a bare name was accepted, and the card then said
    from_pretrained("ftb"), which does not load the repository create_repo makes under the user's namespace."""
    from hf_gpt_custom.cli import main
    from hf_gpt_custom.hub import export_folder, push_folder

    run_dir, out_dir = exported
    expected = rf"--repo-id '{repo_id}' has no user or organisation; use USER/NAME, e.g. alice/{repo_id}"
    with pytest.raises(ValueError, match=expected):
        push_folder(out_dir, repo_id)
    with pytest.raises(ValueError, match=expected):
        export_folder(run_dir, tmp_path / "out", repo_id=repo_id)
    assert not (tmp_path / "out").exists()
    for argv in (["push", str(out_dir), "--repo-id", repo_id, "--dry-run"],
                 ["export", str(run_dir), str(tmp_path / "out"), "--repo-id", repo_id]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        err = capsys.readouterr().err
        assert exited.value.code == 2 and err.count("\n") == 1 and "has no user or organisation" in err, argv
    assert is_hub_repo_id(repo_id)  # still a model id to load from ("gpt2"): only publishing needs the namespace


def _with_vocabulary_entries(folder: Path, tokens: list[str]) -> None:
    """`folder`'s tokenizer with `tokens` appended to its vocabulary (tokenizer.json and vocab.json), manifest rewritten."""
    from hf_gpt_custom.manifest import write_manifest

    tokenizer_json = json.loads((folder / "tokenizer.json").read_text())
    vocab_json = json.loads((folder / "vocab.json").read_text())
    for token in tokens:
        tokenizer_json["model"]["vocab"][token] = vocab_json[token] = len(vocab_json)
        merge = [token, "ices"]  # a later merge builds on it ("/dev" + "ices"): the token is a JSON value there
        merges = tokenizer_json["model"]["merges"]
        merges.append(merge if not merges or isinstance(merges[0], list) else " ".join(merge))
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    (folder / "vocab.json").write_text(json.dumps(vocab_json))
    write_manifest(folder)


def test_vocabulary_entries_that_look_like_paths_are_no_local_path(exported, tmp_path):
    """Llama 3's and Qwen's splits make "#!/usr/bin" into "#!" + "/usr": a vocabulary holding "/home" or "/dev"
    (which exist here) could not be exported or pushed ("contains the local path '/home'"). A path in the tokenizer's
    settings is still refused."""
    from hf_gpt_custom.hub import _run_local_paths
    from hf_gpt_custom.manifest import write_manifest
    from hf_gpt_custom.publish_checks import check_export

    run_dir, out_dir = exported
    folder = tmp_path / "copy"
    shutil.copytree(out_dir, folder)
    _with_vocabulary_entries(folder, ["/home", "/dev", str(Path.home())])
    check_export(folder)
    run_copy = tmp_path / "run"
    shutil.copytree(run_dir, run_copy)
    _with_vocabulary_entries(run_copy / "final", ["/home", "/dev"])
    assert not {"/home", "/dev"} & set(_run_local_paths(run_copy))
    tokenizer_json = json.loads((folder / "tokenizer.json").read_text())
    tokenizer_json["normalizer"] = {"type": "Replace", "pattern": {"String": "x"}, "content": "/data/corpus/raw.txt"}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    write_manifest(folder)
    with pytest.raises(ValueError, match=r"tokenizer.json contains local information normalizer.content"):
        check_export(folder)


def test_a_folder_without_its_manifest_is_not_published(exported, tmp_path):
    """Deleting manifest.json turned every check off: edited remote code and an added evil.py passed the dry run, which
    said "the manifest's files unchanged and none added"."""
    from hf_gpt_custom.publish_checks import check_export

    folder = tmp_path / "copy"
    shutil.copytree(exported[1], folder)
    (folder / "manifest.json").unlink()
    with pytest.raises(ValueError, match=rf"cannot publish {folder}: it has no manifest.json, so its files cannot be "
                                         r"checked against what export wrote"):
        check_export(folder)


def test_the_checked_files_are_the_ones_an_upload_sends(exported, tmp_path):
    """huggingface_hub leaves .git and .cache/huggingface out and refuses any other .cache file: that one passed the dry
    run and failed the real push, after the repository was created."""
    from hf_gpt_custom.publish_checks import check_export

    folder = tmp_path / "copy"
    shutil.copytree(exported[1], folder)
    for ignored in (".git/config", ".cache/huggingface/upload/x.lock", "sub/.git"):
        (folder / ignored).parent.mkdir(parents=True, exist_ok=True)
        (folder / ignored).write_text("[core]\n")
    names = {name for name, _ in check_export(folder)}
    assert not any(".git" in name or ".cache" in name for name in names)
    (folder / ".cache" / "notes").mkdir(parents=True)
    (folder / ".cache" / "notes" / "state.txt").write_text("x\n")
    with pytest.raises(ValueError, match=r"\.cache/notes/state.txt is under a .cache folder, which the Hub does not"):
        check_export(folder)


@pytest.mark.parametrize("added", ["evil.py", "model-extra.safetensors", "tokenizer/extra.json", "eval/evil.py",
                                   "eval/model.safetensors"])
def test_a_file_added_after_export_is_refused_before_publishing(added, exported, tmp_path, capsys):
    """The manifest check saw only the files the manifest lists: a file added later passed `push --dry-run` and was
    listed for upload. Documentation may still be added; loading is unchanged (a checkpoint holds files written after
    its manifest, e.g. random_states_<rank>.pkl)."""
    from hf_gpt_custom.cli import main
    from hf_gpt_custom.manifest import verify_manifest
    from hf_gpt_custom.publish_checks import check_export

    _, out_dir = exported
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    (copy / "NOTES.md").write_text("# notes added by the author\n")
    (copy / "eval" / "extra.json").write_text("{}\n")
    (copy / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")  # from a Hub clone
    check_export(copy)  # documentation, and git's own files, added after export: fine
    (copy / added).parent.mkdir(parents=True, exist_ok=True)
    (copy / added).write_text("import os\n")
    with pytest.raises(ValueError, match=rf"cannot publish {copy}: {re.escape(added)} is not in its manifest \(added "
                                         r"after export\); remove it, or export the run again"):
        check_export(copy)
    with pytest.raises(SystemExit) as exited:
        main(["push", str(copy), "--repo-id", "alice/tiny-shakespeare", "--dry-run"])
    captured = capsys.readouterr()
    assert exited.value.code == 2 and captured.err.count("\n") == 1 and added in captured.err
    assert "would upload" not in captured.out
    assert verify_manifest(copy) is None


def test_an_evaluation_given_a_relative_path_publishes_no_local_path(tmp_path, monkeypatch):
    """`run` evaluates runs/<name>/final by its relative path, which results.json and table.md kept in the export
    ("Model: `runs/shakespeare/final`"): only absolute paths were made public."""
    from hf_gpt_custom.hub import export_folder

    monkeypatch.chdir(tmp_path)
    run_dir = make_tiny_run(tmp_path / "runs" / "tiny-shakespeare")
    results_path = run_dir / "eval" / "results.json"
    results = json.loads(results_path.read_text())
    results["model"] = "runs/tiny-shakespeare/final"
    results_path.write_text(json.dumps(results))
    out_dir = export_folder(run_dir, tmp_path / "out", repo_id="alice/tiny-shakespeare")
    assert json.loads((out_dir / "eval" / "results.json").read_text())["model"] == "final"
    assert "runs/" not in (out_dir / "eval" / "table.md").read_text()


def test_a_card_edited_to_name_a_path_under_the_working_directory_is_refused(exported, tmp_path, monkeypatch):
    """The card may be edited after export; a path under the directory push runs in (not the home folder, not the
    run's) must still be refused. Reference: os.getcwd() of this process."""
    from hf_gpt_custom.publish_checks import check_export

    folder = tmp_path / "copy"
    shutil.copytree(exported[1], folder)
    workdir = tmp_path / "project-workdir"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    assert not os.getcwd().startswith(str(Path.home()))  # else the home check alone would find it
    readme = folder / "README.md"
    readme.write_text(readme.read_text() + f"\nTrained on {os.getcwd()}/data/corpus.txt\n")
    with pytest.raises(ValueError, match=r"README.md contains the local path"):
        check_export(folder)


@pytest.mark.parametrize("key", ["is_local", "local_files_only"])
def test_a_load_time_key_added_to_an_editable_json_file_is_refused(key, exported, tmp_path):
    """training_summary.json may be edited after export; a transformers load-time key put back in it says how this
    machine loaded the model and must not be published (the keys named by hand, not by LOAD_TIME_KEYS)."""
    from hf_gpt_custom.publish_checks import check_export

    folder = tmp_path / "copy"
    shutil.copytree(exported[1], folder)
    summary = json.loads((folder / "training_summary.json").read_text())
    (folder / "training_summary.json").write_text(json.dumps({**summary, key: True}))
    with pytest.raises(ValueError, match=rf"training_summary.json contains local information key '{key}'"):
        check_export(folder)


def test_a_card_whose_metadata_lost_its_license_is_refused(exported, tmp_path):
    """The Hub shows no license for a card without one; the check must refuse it. The metadata is edited with
    huggingface_hub's own metadata_load/metadata_save."""
    from huggingface_hub import metadata_load, metadata_save

    from hf_gpt_custom.publish_checks import check_export

    folder = tmp_path / "copy"
    shutil.copytree(exported[1], folder)
    metadata = metadata_load(folder / "README.md")
    assert metadata["license"] and metadata["library_name"] == "transformers"
    del metadata["license"]
    metadata_save(folder / "README.md", metadata)
    assert "license" not in metadata_load(folder / "README.md")
    with pytest.raises(ValueError, match=r"has no card metadata \(license, library_name\)"):
        check_export(folder)


def test_push_private_creates_a_private_repository(exported, monkeypatch, capsys):
    """`push --private` to a repository that does not exist yet: the repository huggingface_hub is asked to create is
    private (create_repo's own signature binds the call; its default, private=None, is public)."""
    import inspect

    import huggingface_hub.constants as constants
    from huggingface_hub import HfApi

    from hf_gpt_custom.cli import main

    created, uploads = [], []
    signature = inspect.signature(HfApi.create_repo)

    def create_repo(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = bound.arguments
        created.append({**arguments, "private": arguments["private"] or arguments.get("visibility") == "private"})

    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(HfApi, "repo_exists", lambda self, *args, **kwargs: False)
    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "repo_info", lambda self, *args, **kwargs: type("Info", (), {
        "private": bool(created and created[-1]["private"])})())
    monkeypatch.setattr(HfApi, "upload_folder", lambda self, **kwargs: uploads.append(kwargs) or "commit")
    main(["push", str(exported[1]), "--repo-id", "alice/tiny-shakespeare", "--private"])
    assert [call["private"] for call in created] == [True] and len(uploads) == 1
    created.clear()
    main(["push", str(exported[1]), "--repo-id", "alice/tiny-shakespeare"])
    assert [bool(call["private"]) for call in created] == [False]


def test_push_revision_uploads_to_that_branch(exported, monkeypatch):
    """`push --revision dev`: the branch is created and the commit goes to it, not to main (upload_folder's own
    signature binds the call; its default revision, None, is main)."""
    import inspect

    from huggingface_hub import HfApi

    from hf_gpt_custom.cli import main

    branches, uploads = [], []
    signature = inspect.signature(HfApi.upload_folder)

    def upload_folder(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        uploads.append(bound.arguments)
        return "commit"

    _pretend_the_hub_is_reachable(monkeypatch)
    monkeypatch.setattr(HfApi, "create_branch", lambda self, repo_id, *, branch, **kwargs: branches.append(branch))
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    main(["push", str(exported[1]), "--repo-id", "alice/tiny-shakespeare", "--revision", "dev"])
    assert branches == ["dev"] and [call["revision"] for call in uploads] == ["dev"]


def test_a_card_image_that_is_a_folder_is_refused(exported, tmp_path):
    """An image link must name a file the upload sends: a folder of that name uploads nothing (empty) and the Hub shows
    a broken image."""
    from hf_gpt_custom.publish_checks import check_export

    folder = tmp_path / "copy"
    shutil.copytree(exported[1], folder)
    (folder / "plots" / "curve.png").mkdir(parents=True)
    readme = folder / "README.md"
    readme.write_text(readme.read_text() + "\n![curve](plots/curve.png)\n")
    with pytest.raises(ValueError, match=r"shows plots/curve.png, which is not in"):
        check_export(folder)


def test_an_evaluation_of_other_weights_in_the_runs_eval_folder_is_refused_not_published(tmp_path, shared_data_dir):
    """`eval --model OTHER --out RUN/eval` overwrote the run's scores, and export put them in the card and its
    model-index as this model's (a hunt published 0.4 for a model that scores 1.0). Reference: an evaluation of the
    run's own final/; the export of that is accepted and carries its numbers."""
    from hf_gpt_custom import GPTCustomTokenizerFast
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.eval.runner import evaluate
    from hf_gpt_custom.hub import export_folder
    from tests.helpers import save_tiny_model

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny", with_eval=False)
    tokenizer = GPTCustomTokenizerFast.from_pretrained(run_dir / "final")
    other = tmp_path / "other"
    save_tiny_model(other, len(tokenizer), seed=1, eos_token_id=tokenizer.eos_token_id)
    tokenizer.save_pretrained(other)
    settings = dict(tasks=["copa"], shots=[0], limit=4, device="cpu", show_progress=False, data_dir=shared_data_dir)
    evaluate(str(other), out_dir=run_dir / "eval", **settings)
    with pytest.raises(UserError, match=r"results.json scored other weights than .*final \(it names .*other\)"):
        export_folder(run_dir, tmp_path / "export")
    assert not (tmp_path / "export").exists()
    own = evaluate(str(run_dir / "final"), out_dir=run_dir / "eval", **settings)
    export_folder(run_dir, tmp_path / "export")
    published = json.loads((tmp_path / "export" / "eval" / "results.json").read_text())
    assert [row["value"] for row in published["results"]] == [row["value"] for row in own.results]
    assert published["model_weights_sha256"] == json.loads((run_dir / "eval" / "results.json").read_text())[
        "model_weights_sha256"]


def test_export_refuses_scores_of_benchmark_files_edited_since_the_evaluation(tmp_path, monkeypatch, caplog):
    """A standalone `export` published the scores results.json holds even when a task's data file was edited after
    the evaluation (`run` evaluates again; export did not look): the card showed a perplexity the files it names no
    longer give. Reference: a fresh evaluation of the edited file. The data folder, a local path results.json records
    for this check, stays out of the published copy; a folder not found here is a warning, and scores of other
    scoring code are a warning naming the version."""
    from hf_gpt_custom import versions
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.eval.runner import evaluate
    from hf_gpt_custom.hub import export_folder

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny", with_eval=False)
    data = tmp_path / "benchmarks"
    data.mkdir()
    answers = data / "answers.jsonl"
    answers.write_text('{"q": "ROMEO: what light", "a": " breaks"}\n{"q": "through yonder", "a": " window"}\n')
    task = tmp_path / "answers.yaml"
    task.write_text("task: answers\noutput_type: loglikelihood\ndoc_to_text: '{{q}}'\ndoc_to_target: '{{a}}'\n"
                    "target_delimiter: ''\ndata_files: {test: answers.jsonl}\nmetric_list: [{metric: perplexity}]\n")
    settings = dict(tasks=[str(task)], shots=[0], device="cpu", show_progress=False, data_dir=data)
    scored = evaluate(str(run_dir / "final"), out_dir=run_dir / "eval", **settings).value("answers", "perplexity")
    export_folder(run_dir, tmp_path / "export")
    published = json.loads((tmp_path / "export" / "eval" / "results.json").read_text())
    assert "data_dir" not in published and str(data) not in json.dumps(published)
    assert published["results"][0]["value"] == scored

    original = answers.read_text()
    answers.write_text(original.replace(" breaks", " sleeps"))
    fresh = evaluate(str(run_dir / "final"), **settings).value("answers", "perplexity")
    assert fresh != pytest.approx(scored)  # what the card would have shown is not what these files give
    with pytest.raises(UserError, match=r"results\.json scored \S*answers\.yaml on task or data files that have "
                                        r"changed since.*hf-gpt-custom eval --model .*final"):
        export_folder(run_dir, tmp_path / "export_edited")
    assert not (tmp_path / "export_edited").exists()
    answers.write_text(original)
    task.write_text(task.read_text().replace("target_delimiter: ''", "target_delimiter: ' '"))
    with pytest.raises(UserError, match=r"scored \S*answers\.yaml on task or data files that have changed since"):
        export_folder(run_dir, tmp_path / "export_edited")
    task.write_text(task.read_text().replace("target_delimiter: ' '", "target_delimiter: ''"))

    data.rename(tmp_path / "moved")  # the run folder on a machine without the files: nothing to compare
    monkeypatch.setattr(versions, "scoring_code_sha256", lambda: "0" * 64)  # as an upgrade changes the code
    with caplog.at_level("WARNING"):
        export_folder(run_dir, tmp_path / "export_elsewhere")
    assert f"the task or data files of {task} are not found here" in caplog.text
    assert "scored by another version of hf-gpt-custom's evaluation or model code (0.1.0)" in caplog.text
    # results of a version from before evaluations recorded their code: older code, said as such (the upgrade hunt)
    results = json.loads((run_dir / "eval" / "results.json").read_text())
    del results["scoring_code_sha256"]
    (run_dir / "eval" / "results.json").write_text(json.dumps(results))
    caplog.clear()
    with caplog.at_level("WARNING"):
        export_folder(run_dir, tmp_path / "export_older")
    assert "scored by an older version (one that did not record its code) of hf-gpt-custom's evaluation" in caplog.text


def test_a_data_folder_chosen_by_the_environment_is_the_one_export_checks(tmp_path, monkeypatch, shared_data_dir):
    """HF_GPT_CUSTOM_DATA_DIR chose the benchmark files, and results.json recorded no folder (it was the default one
    then); an export from a shell without the variable compared the built-in folder's files: scores of a copy
    edited since were published, and a copy that differs from the built-in one was refused (found by a review)."""
    import shutil

    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.eval.runner import evaluate
    from hf_gpt_custom.hub import export_folder

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny", with_eval=False)
    copy = tmp_path / "copy"
    shutil.copytree(shared_data_dir / "copa", copy / "copa")
    validation = copy / "copa" / "val.jsonl"
    lines = validation.read_text().splitlines()
    validation.write_text("\n".join(lines[1:] + lines[:1]) + "\n")  # another order: differs from the built-in file
    monkeypatch.setenv("HF_GPT_CUSTOM_DATA_DIR", str(copy))
    evaluate(str(run_dir / "final"), tasks=["copa"], shots=[0], limit=3, device="cpu", show_progress=False,
             out_dir=run_dir / "eval")
    monkeypatch.delenv("HF_GPT_CUSTOM_DATA_DIR")
    export_folder(run_dir, tmp_path / "export")  # the copy it scored is as it was: accepted
    validation.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=r"scored copa on task or data files that have changed since"):
        export_folder(run_dir, tmp_path / "export_edited")

    # the other way round: scored on the built-in folder, exported from a shell whose variable names the copy
    validation.write_text("\n".join(lines[1:] + lines[:1]) + "\n")
    evaluate(str(run_dir / "final"), tasks=["copa"], shots=[0], limit=3, device="cpu", show_progress=False,
             out_dir=run_dir / "eval")
    assert json.loads((run_dir / "eval" / "results.json").read_text())["data_dir"] is None
    monkeypatch.setenv("HF_GPT_CUSTOM_DATA_DIR", str(copy))
    export_folder(run_dir, tmp_path / "export_builtin")  # the built-in files it scored are unchanged: accepted


def test_scores_of_the_lm_eval_protocol_are_checked_as_that_protocol_reads_the_task(tmp_path, shared_data_dir):
    """protocol="lm-eval" scores lambada with lm-eval's target delimiter: its task is that one, not ours, and an
    export compares it as such (compared as ours, every lm-eval evaluation would be refused as edited since)."""
    from hf_gpt_custom.eval.runner import evaluate
    from hf_gpt_custom.eval.task import tasks_fingerprint
    from hf_gpt_custom.hub import export_folder

    assert tasks_fingerprint(["lambada"], protocol="lm-eval") != tasks_fingerprint(["lambada"])
    run_dir = make_tiny_run(tmp_path / "runs" / "tiny", with_eval=False)
    evaluate(str(run_dir / "final"), tasks=["lambada"], shots=[0], limit=2, device="cpu", show_progress=False,
             protocol="lm-eval", out_dir=run_dir / "eval")
    export_folder(run_dir, tmp_path / "export")
    assert json.loads((tmp_path / "export" / "eval" / "results.json").read_text())["config"]["protocol"] == "lm-eval"


def test_runs_export_stage_keeps_the_repo_id_and_license_a_previous_export_was_given(tmp_path, capsys):
    """After `export RUN RUN/export --repo-id alice/model`, a rerun of `run` that re-exported (new benchmark tasks)
    put your-username/... back in the card in silence (a new-user walkthrough); `push --repo-id alice/model` then
    refused it. Reference: the card of the export the user asked for."""
    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.run import _stage_export

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny", with_eval=False)
    export_folder(run_dir, run_dir / "export", repo_id="alice/tiny-model", license="mit")
    asked = (run_dir / "export" / "README.md").read_text()
    _stage_export(None, run_dir, {})
    card = (run_dir / "export" / "README.md").read_text()
    assert 'from_pretrained("alice/tiny-model"' in card and "your-username" not in card and "license: mit" in card
    assert card == asked
    assert "export: keeping --repo-id alice/tiny-model, --license mit" in capsys.readouterr().out
    export_folder(run_dir, run_dir / "export")  # export itself takes what it is given: the default again
    _stage_export(None, run_dir, {})
    assert "your-username/tiny-shakespeare" in (run_dir / "export" / "README.md").read_text()


def test_runs_export_stage_keeps_the_options_of_an_export_a_kill_moved_aside(tmp_path, capsys):
    """A kill between export's two renames left no export/, the previous one moved aside as export.replaced: `run`'s
    next export read no options and put your-username/... back in the card, while the warning said to delete the
    only folder that held them (the interrupts hunt). Reference: the card of the export the user asked for."""
    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.run import _stage_export

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny", with_eval=False)
    export_folder(run_dir, run_dir / "export", repo_id="alice/tiny-model", license="mit")
    asked = (run_dir / "export" / "README.md").read_text()
    os.replace(run_dir / "export", run_dir / "export.replaced")  # where the kill struck
    _stage_export(None, run_dir, {})
    assert (run_dir / "export" / "README.md").read_text() == asked
    assert "export: keeping --repo-id alice/tiny-model, --license mit" in capsys.readouterr().out


def test_a_license_of_ones_own_gets_the_hubs_license_name_and_link(tmp_path, caplog, capsys):
    """`--license other` wrote a card with no `license_name`/`license_link`, the fields the Hub reads for it, and no
    option set them. Read back with huggingface_hub's metadata_load; push checks the linked file is there; a re-run
    of `run` keeps both, as it keeps --license."""
    import logging

    from huggingface_hub import metadata_load

    from hf_gpt_custom.cli import main
    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.publish_checks import check_export
    from hf_gpt_custom.run import _stage_export

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny", with_eval=False)
    out = run_dir / "export"
    with caplog.at_level(logging.WARNING):
        main(["export", str(run_dir), str(out), "--repo-id", "alice/tiny", "--license", "other",
              "--license-name", "my-license-1.0", "--license-link", "LICENSE.md"])
    metadata = metadata_load(out / "README.md")
    assert (metadata["license"], metadata["license_name"], metadata["license_link"]) == (
        "other", "my-license-1.0", "LICENSE.md")
    assert f"put the license's text in {out / 'LICENSE.md'} before you push" in caplog.text
    with pytest.raises(ValueError, match=r"the card's license_link is LICENSE\.md, which is not in"):
        check_export(out)
    (out / "LICENSE.md").write_text("# My license 1.0\n\nYou may use this model for anything.\n")
    assert "LICENSE.md" in {name for name, _ in check_export(out)}
    (out / "LICENSE.md").unlink()
    _stage_export(None, run_dir, {})
    assert "--license other, --license-name my-license-1.0, --license-link LICENSE.md" in capsys.readouterr().out
    assert metadata_load(out / "README.md")["license_name"] == "my-license-1.0"

    url = "https://example.org/my-license"  # a URL needs no file
    export_folder(run_dir, tmp_path / "url", license="other", license_name="my-license-1.0", license_link=url)
    assert metadata_load(tmp_path / "url" / "README.md")["license_link"] == url
    check_export(tmp_path / "url")


@pytest.mark.parametrize("options, message", [
    ({"license": "mit", "license_name": "x"}, r"--license-name describe a license of your own and go with --license "
                                              r"other; drop it"),
    ({"license_link": "LICENSE.md"}, r"--license-link describe a license of your own"),
    ({"license": "other", "license_name": "My License", "license_link": "LICENSE.md"},
     r"--license-name 'My License' is not a license id"),
])
def test_license_name_and_link_go_with_license_other(tmp_path, options, message):
    from hf_gpt_custom.hub import export_folder

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny", with_eval=False)
    with pytest.raises(ValueError, match=message):
        export_folder(run_dir, tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("given", [{}, {"license_name": "my-license-1.0"},
                                   {"license_name": "my-license-1.0", "license_link": "LICENSE.md"}])
def test_license_other_without_its_name_and_link_warns(tmp_path, caplog, given):
    import logging

    from hf_gpt_custom.hub import export_folder

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny", with_eval=False)
    with caplog.at_level(logging.WARNING):
        export_folder(run_dir, tmp_path / "out", license="other", **given)
    warned = "--license other without --license-name and --license-link" in caplog.text
    assert warned is (len(given) < 2)


@pytest.mark.parametrize("carried, published", [("GPT2TokenizerFast", None),
                                                ("GPTCustomTokenizerFast", "GPTCustomTokenizerFast"),
                                                ("GPTCustomTokenizer", "GPTCustomTokenizer")])
def test_the_exported_config_names_no_tokenizer_class_but_the_one_it_ships(tmp_path, carried, published):
    """A run from a converted GPT-2 folder carried its config's tokenizer_class "GPT2TokenizerFast" into the export,
    beside the GPTCustomTokenizerFast the folder ships (the convflow hunt). AutoTokenizer reads tokenizer_config.json
    first, so it loaded right; config.json still named a class the folder does not hold."""
    from transformers import AutoTokenizer

    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.manifest import MANIFEST_NAME, write_manifest

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny", with_eval=False)
    config_path = run_dir / "final" / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "tokenizer_class": carried}))
    if (run_dir / "final" / MANIFEST_NAME).is_file():
        write_manifest(run_dir / "final")
    out_dir = export_folder(run_dir, tmp_path / "export", repo_id="alice/tiny")
    assert json.loads((out_dir / "config.json").read_text()).get("tokenizer_class") == published
    assert type(AutoTokenizer.from_pretrained(out_dir, trust_remote_code=True)).__name__ == "GPTCustomTokenizerFast"


def test_saving_into_an_exported_folder_keeps_it_loadable_and_a_damaged_file_still_shows(exported, tmp_path,
                                                                                          python_without_project):
    """A user who downloads an export, trains it a step and saves back into the folder (transformers' ordinary
    workflow) got every later load refused as damaged, and saving again, as the message said, did not help: the
    manifest kept the old files' hashes (the publishflow hunt). Here and where the package is absent (remote code),
    the save brings the entries of the files it wrote up to date; a file damaged otherwise is still named."""
    import torch

    from hf_gpt_custom import GPTCustomForCausalLM, GPTCustomTokenizerFast
    from hf_gpt_custom.errors import UserError

    _, out_dir = exported
    folder = shutil.copytree(out_dir, tmp_path / "downloaded")
    model = GPTCustomForCausalLM.from_pretrained(folder)
    tokenizer = GPTCustomTokenizerFast.from_pretrained(folder)
    with torch.no_grad():
        model.transformer.wte.weight[0] += 1.0  # "trained"
    model.generation_config.max_new_tokens = 50
    tokenizer.padding_side = "right"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    reloaded = GPTCustomForCausalLM.from_pretrained(folder)
    assert torch.equal(reloaded.transformer.wte.weight, model.transformer.wte.weight)
    assert reloaded.generation_config.max_new_tokens == 50

    remote = python_without_project(
        "import json, sys, torch\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "with torch.no_grad():\n"
        "    model.get_input_embeddings().weight[1] += 1.0\n"
        "model.save_pretrained(sys.argv[1]); tokenizer.save_pretrained(sys.argv[1])\n"
        "again = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "print(json.dumps({'row': again.get_input_embeddings().weight[1].tolist(),"
        " 'expected': model.get_input_embeddings().weight[1].tolist()}))\n", folder)
    assert remote["row"] == remote["expected"]

    merges = folder / "merges.txt"
    if not merges.is_file():
        merges = folder / "tokenizer.json"
    merges.write_bytes(merges.read_bytes() + b" ")  # damaged, not by a save
    model.save_pretrained(folder)  # a model save leaves the tokenizer's entries as they were
    with pytest.raises(UserError, match=rf"{merges.name} has .* bytes, the manifest says"):
        GPTCustomForCausalLM.from_pretrained(folder)


@pytest.mark.parametrize("source", ["hf-gpt-custom @ file:///home/alice/hf-gpt-custom", "git+file:///srv/hf-gpt-custom",
                                    "/home/alice/hf-gpt-custom", "~/hf-gpt-custom", "./hf-gpt-custom",
                                    "-e /home/alice/hf-gpt-custom", "-e.", "dist/hf_gpt_custom-0.1.tar.gz",
                                    "hf_gpt_custom-0.1-py3-none-any.whl"])
def test_a_package_source_on_this_machine_is_refused_before_the_card_publishes_it(exported, tmp_path, source):
    """`--package-source` as pip freeze writes a local install put the machine's path into the published card and
    manifest, and the local-path checks passed it (the path follows a "/"); the plain path was refused with a fix
    that named no option (the publishflow hunt)."""
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.publish_checks import check_export

    run_dir, out_dir = exported
    with pytest.raises(UserError, match=r"--package-source .* names a place on this machine.*git\+https://"):
        export_folder(run_dir, tmp_path / "export", repo_id="alice/tiny", package_source=source)
    assert not (tmp_path / "export").exists()
    for good in ("hf-gpt-custom==0.3", "hf-gpt-custom @ git+https://github.com/alice/hf-gpt-custom@v1"):
        from hf_gpt_custom.hub import check_package_source

        check_package_source(good)
    edited = shutil.copytree(out_dir, tmp_path / "edited")  # a card edited by hand to name one: push refuses it
    card = edited / "README.md"
    card.write_text(card.read_text() + "\npip install 'hf-gpt-custom @ file:///home/alice/hf-gpt-custom'\n")
    with pytest.raises(UserError, match=r"README.md contains the local path 'file:///home/alice/hf-gpt-custom'"):
        check_export(edited)


def test_an_export_of_a_run_whose_weights_are_gone_names_the_weights_not_the_evaluation(tmp_path):
    """final/model.safetensors missing: export said eval/results.json "scored other weights" and told the user to
    evaluate again, which fails on the same missing file (the publishflow hunt). And final/ given for the run."""
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.hub import export_folder

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny")
    (run_dir / "final" / "model.safetensors").unlink()
    with pytest.raises(UserError, match=r"final") as refused:
        export_folder(run_dir, tmp_path / "export", repo_id="alice/tiny")
    assert "model.safetensors" in str(refused.value) and "scored other weights" not in str(refused.value)
    with pytest.raises(UserError, match=r"give the run folder, its parent \(.*whole\)"):
        export_folder(make_tiny_run(tmp_path / "runs" / "whole") / "final", tmp_path / "export", repo_id="alice/tiny")


def test_a_clone_without_git_lfs_is_named_as_one(exported, tmp_path):
    """A Hub repository cloned without git-lfs holds pointer files where the weights are: the load said "damaged ...
    save, copy or export it again" (the publishflow hunt); the fix is `git lfs pull`."""
    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.errors import UserError

    _, out_dir = exported
    clone = shutil.copytree(out_dir, tmp_path / "clone")
    (clone / "model.safetensors").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:"
                                             + "0" * 64 + "\nsize 178216\n")
    with pytest.raises(UserError, match=r"model\.safetensors is a Git LFS pointer, not the file .*git lfs pull"):
        GPTCustomForCausalLM.from_pretrained(clone)


def test_a_sharded_save_into_a_whole_export_leaves_only_the_new_weights(exported, tmp_path):
    """transformers' save removes stale shards only: saved sharded (max_shard_size) into an export that held one
    model.safetensors, the old file stayed, and from_pretrained reads it before the index: the old weights loaded,
    and the manifest, now brought up to date on save, let the folder through to a push (the roundreview20 hunt).
    Reference: the weights saved. Also: a push from inside save_pretrained into such a folder is refused, and a
    folder holding both layouts is not published."""
    import torch

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.publish_checks import check_export

    _, out_dir = exported
    folder = shutil.copytree(out_dir, tmp_path / "downloaded")
    model = GPTCustomForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        model.transformer.wte.weight[0] += 1.0
    model.save_pretrained(folder, max_shard_size="20KB")
    assert not (folder / "model.safetensors").exists() and (folder / "model.safetensors.index.json").is_file()
    assert torch.equal(GPTCustomForCausalLM.from_pretrained(folder).transformer.wte.weight,
                       model.transformer.wte.weight)
    with open(folder / "README.md", "a", encoding="utf-8") as card:  # the card brought up to date by its user
        card.write("\nFurther trained.\n")
    check_export(folder)  # listed by the manifest, one layout: publishable
    model.save_pretrained(folder)  # and whole again: the index goes with its shards
    assert (folder / "model.safetensors").is_file() and not list(folder.glob("model*index.json"))
    assert torch.equal(GPTCustomForCausalLM.from_pretrained(folder).transformer.wte.weight,
                       model.transformer.wte.weight)

    with pytest.raises(UserError, match=r"push_to_hub=True\): that folder has a manifest\.json .* save without "
                                        r"push_to_hub, then upload"):
        model.save_pretrained(folder, push_to_hub=True, repo_id="alice/tiny")
    shutil.copyfile(folder / "model.safetensors", tmp_path / "whole.safetensors")
    model.save_pretrained(folder, max_shard_size="20KB")
    shutil.copyfile(tmp_path / "whole.safetensors", folder / "model.safetensors")  # both, by hand
    with pytest.raises(UserError, match=r"holds the weights twice"):
        check_export(folder)


def test_a_save_that_writes_neither_weight_layout_deletes_neither(exported, tmp_path):
    """A folder holding both layouts (an older save's, or transformers' own sharded save over a whole one), then a
    save that writes neither name — another variant, or a rank that is not the main process: both were deleted as
    "not written by this save", and the folder's weights were gone (the roundreview21 hunt). Reference: the files
    there before, and the weights from_pretrained read before."""
    import torch

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.checkpoint_files import one_weight_layout

    _, out_dir = exported
    folder = shutil.copytree(out_dir, tmp_path / "downloaded")
    model = GPTCustomForCausalLM.from_pretrained(folder)
    whole = (folder / "model.safetensors").read_bytes()
    model.save_pretrained(folder, max_shard_size="20KB")
    (folder / "model.safetensors").write_bytes(whole)  # both layouts, as transformers' own save leaves them
    before = sorted(path.name for path in folder.iterdir())
    model.save_pretrained(folder, variant="fp16")
    model.save_pretrained(folder, is_main_process=False)
    with one_weight_layout(folder):  # any save that writes no weights (an adapter's, say)
        (folder / "adapter_model.safetensors").write_bytes(b"")
    after = sorted(path.name for path in folder.iterdir() if path.name != "adapter_model.safetensors")
    assert after == sorted([*before, "model.fp16.safetensors"])
    assert torch.equal(GPTCustomForCausalLM.from_pretrained(folder).transformer.wte.weight, model.transformer.wte.weight)


def test_a_variant_saved_sharded_over_its_whole_file_loads_the_new_weights(exported, tmp_path):
    """The stale-layout bug through a variant: saved whole with variant="fp16", then sharded with it, the old
    model.fp16.safetensors stayed, from_pretrained(variant="fp16") read it before the index: the old weights, and
    push passed the folder (the roundreview21 hunt). Reference: the weights saved last."""
    import torch

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.publish_checks import check_export

    _, out_dir = exported
    folder = shutil.copytree(out_dir, tmp_path / "downloaded")
    model = GPTCustomForCausalLM.from_pretrained(folder)
    model.save_pretrained(folder, variant="fp16")
    with torch.no_grad():
        model.transformer.wte.weight[0] += 1.0
    model.save_pretrained(folder, variant="fp16", max_shard_size="20KB")
    assert not (folder / "model.fp16.safetensors").exists() and (folder / "model.safetensors.index.fp16.json").is_file()
    assert (folder / "model.safetensors").is_file()  # the plain layout is another variant's: kept
    loaded = GPTCustomForCausalLM.from_pretrained(folder, variant="fp16")
    assert torch.equal(loaded.transformer.wte.weight, model.transformer.wte.weight)

    model.save_pretrained(tmp_path / "whole", variant="fp16")  # both of one variant, by hand: not published
    shutil.copyfile(tmp_path / "whole" / "model.fp16.safetensors", folder / "model.fp16.safetensors")
    with pytest.raises(UserError, match=r"holds the weights twice, model\.fp16\.safetensors and the shards of "
                                        r"model\.safetensors\.index\.fp16\.json"):
        check_export(folder)


def test_a_push_from_inside_save_pretrained_into_an_export_is_refused_for_the_tokenizer_and_by_position(exported,
                                                                                                          tmp_path):
    """transformers uploads from inside save_pretrained, before the manifest is brought up to date: refused for the
    model's keyword only, the tokenizer's save (padding side changed, then pushed) and the model's push_to_hub given
    by position uploaded files beside the old manifest.json (the roundreview21 hunt)."""
    from transformers.utils import hub as transformers_hub

    from hf_gpt_custom import GPTCustomForCausalLM, GPTCustomTokenizerFast
    from hf_gpt_custom.errors import UserError

    _, out_dir = exported
    folder = shutil.copytree(out_dir, tmp_path / "downloaded")
    uploads = []
    with pytest.MonkeyPatch.context() as patch:  # an upload that got through would be recorded, not sent
        patch.setattr(transformers_hub.PushToHubMixin, "_upload_modified_files", lambda *a, **k: uploads.append(a))
        tokenizer = GPTCustomTokenizerFast.from_pretrained(folder)
        saved_side = tokenizer.padding_side
        tokenizer.padding_side = {"left": "right", "right": "left"}[saved_side]
        with pytest.raises(UserError, match=r"save_pretrained\(.*push_to_hub=True\): that folder has a manifest"):
            tokenizer.save_pretrained(folder, push_to_hub=True, repo_id="alice/tiny")
        with pytest.raises(UserError, match=r"save_pretrained\(.*push_to_hub=True\): that folder has a manifest"):
            tokenizer.save_pretrained(folder, None, None, True, repo_id="alice/tiny")
        model = GPTCustomForCausalLM.from_pretrained(folder)
        with pytest.raises(UserError, match=r"save_pretrained\(.*push_to_hub=True\): that folder has a manifest"):
            model.save_pretrained(folder, True, None, True, repo_id="alice/tiny")
    assert uploads == []
    assert GPTCustomTokenizerFast.from_pretrained(folder).padding_side == saved_side  # nothing saved either


@pytest.mark.parametrize("which", ["model", "tokenizer"])
def test_push_to_hub_onto_an_exports_repository_deletes_its_manifest_before_uploading(exported, monkeypatch, tmp_path,
                                                                                      caplog, which):
    """`model.push_to_hub(repo)` onto the repository an export was pushed to (a download trained further): the new
    files went up beside the export's manifest.json, which push_to_hub never deletes, and every download was refused
    as damaged (the roundreview21 hunt). Now the manifest is deleted first, in the repository pushed to (the full id,
    the revision); on a new branch too, which starts from main's files (created first, as push_to_hub creates it);
    and before a save_pretrained(push_to_hub=True) of a folder without a manifest (the roundreview22 hunt). A
    repository without one is left alone; with create_pr=True it is refused. The Hub is stubbed: branches hold file
    names, and each call is recorded in order."""
    from huggingface_hub import HfApi
    from transformers.utils import hub as transformers_hub

    import transformers.modeling_utils
    import transformers.tokenization_utils_base
    from hf_gpt_custom import GPTCustomForCausalLM, GPTCustomTokenizerFast
    from hf_gpt_custom.errors import UserError

    _, out_dir = exported
    obj = (GPTCustomForCausalLM if which == "model" else GPTCustomTokenizerFast).from_pretrained(out_dir)
    export_files = {"manifest.json", "model.safetensors"}
    calls, remote = [], {("alice/tiny", "main"): set(export_files), ("alice/plain", "main"): {"model.safetensors"}}
    branch = lambda repo_id, revision: remote.get((repo_id, revision or "main"))  # noqa: E731
    monkeypatch.setattr(HfApi, "whoami", lambda self, *a, **k: {"name": "alice"})
    monkeypatch.setattr(HfApi, "revision_exists", lambda self, repo_id, revision, **k: branch(repo_id, revision) is not None)
    monkeypatch.setattr(HfApi, "file_exists", lambda self, repo_id, filename, revision=None, **k: calls.append(
        ("exists", repo_id, filename, revision)) or filename in (branch(repo_id, revision) or ()))
    monkeypatch.setattr(HfApi, "create_branch", lambda self, repo_id, branch, **k: calls.append(
        ("branch", repo_id, branch)) or remote.setdefault((repo_id, branch), set(remote[(repo_id, "main")])))
    monkeypatch.setattr(HfApi, "delete_file", lambda self, path, repo_id, revision=None, **k: calls.append(
        ("delete", repo_id, path, revision)) or branch(repo_id, revision).discard(path))
    remote[("alice/webapp", "main")] = {"manifest.json", "model.safetensors"}  # another tool's manifest.json
    web_manifest = tmp_path / "web_manifest.json"
    web_manifest.write_text(json.dumps({"name": "my web demo", "files": {"index.html": "sha384-..."}}))
    monkeypatch.setattr(HfApi, "hf_hub_download", lambda self, repo_id, filename, revision=None, **k: str(
        web_manifest if repo_id == "alice/webapp" else out_dir / filename))
    hub_stub = lambda: types.SimpleNamespace(  # noqa: E731
        create_repo=lambda repo_id, **k: types.SimpleNamespace(repo_id=repo_id if "/" in repo_id else f"alice/{repo_id}"))
    for module in (transformers_hub, transformers.modeling_utils, transformers.tokenization_utils_base):
        monkeypatch.setattr(module, "hf_api", hub_stub)
    for module in (transformers_hub, transformers.modeling_utils):
        monkeypatch.setattr(module, "create_and_tag_model_card",
                            lambda *a, **k: types.SimpleNamespace(save=lambda path: None))
    monkeypatch.setattr(transformers_hub.PushToHubMixin, "_upload_modified_files",
                        lambda self, folder, repo_id, *a, **k: calls.append(("upload", repo_id, sorted(os.listdir(folder)))))

    with caplog.at_level(logging.WARNING, logger="hf_gpt_custom.manifest"):
        obj.push_to_hub("tiny", revision="main")  # a bare name: the repository is the pusher's
    assert "alice/tiny was an export's: its model card and eval/ show the figures of the weights it held" in caplog.text
    assert [call[:2] for call in calls] == [("exists", "alice/tiny"), ("delete", "alice/tiny"), ("upload", "alice/tiny")]
    assert calls[1] == ("delete", "alice/tiny", "manifest.json", "main")
    assert "manifest.json" not in calls[2][2] and "manifest.json" not in remote[("alice/tiny", "main")]

    calls.clear()
    remote[("alice/tiny", "main")].add("manifest.json")
    obj.push_to_hub("alice/tiny", revision="v2")  # a new branch: main's files, its manifest too
    assert [call[0] for call in calls] == ["exists", "branch", "delete", "upload"]
    assert calls[0][3] is None and calls[2] == ("delete", "alice/tiny", "manifest.json", "v2")
    assert remote[("alice/tiny", "v2")] == {"model.safetensors"} and "manifest.json" in remote[("alice/tiny", "main")]

    calls.clear()
    obj.save_pretrained(tmp_path / "saved", push_to_hub=True, repo_id="alice/tiny")  # uploads from inside the save
    assert [call[0] for call in calls] == ["exists", "delete", "upload"]
    assert "manifest.json" not in remote[("alice/tiny", "main")]

    calls.clear()
    obj.push_to_hub("alice/plain")
    assert [call[0] for call in calls] == ["exists", "upload"]

    calls.clear()  # a manifest.json that is not an export's is the user's file: kept (the roundreview25 hunt)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_gpt_custom.manifest"):
        obj.push_to_hub("alice/webapp")
    assert [call[0] for call in calls] == ["exists", "upload"] and "manifest.json" in remote[("alice/webapp", "main")]
    assert "was an export's" not in caplog.text

    calls.clear()
    remote[("alice/tiny", "main")].add("manifest.json")
    with pytest.raises(UserError, match=r"create_pr=True\): that repo holds an export's manifest\.json.*delete_file"):
        obj.push_to_hub("alice/tiny", create_pr=True)
    with pytest.raises(UserError, match=r"save_pretrained\('alice/tiny', create_pr=True\): that repo holds"):
        obj.save_pretrained(tmp_path / "saved again", push_to_hub=True, repo_id="alice/tiny", create_pr=True)
    assert [call[0] for call in calls] == ["exists", "exists"]
