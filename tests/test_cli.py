"""The `hf-gpt-custom` console script: fast help for every subcommand, and a user's mistake -> one line on stderr,
exit 2, found right after parsing (before a model or a dataset loads)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_gpt_custom.cli import main

CONSOLE_SCRIPT = shutil.which("hf-gpt-custom") or str(Path(sys.executable).parent / "hf-gpt-custom")

SUBCOMMANDS = [["tokenizer", "train"], ["train"], ["eval"], ["export"], ["push"], ["run"]]


def _run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


@pytest.mark.parametrize("subcommand", SUBCOMMANDS, ids=" ".join)
def test_every_subcommand_has_help(subcommand, capsys):
    code, out, _ = _run_main([*subcommand, "--help"], capsys)
    assert code == 0
    assert out.startswith(f"usage: hf-gpt-custom {' '.join(subcommand)}")
    assert "(default:" in out or subcommand in (["export"], ["run"])  # options state their defaults


def test_console_script_lists_every_subcommand_in_well_under_a_second():
    """Measured before: 4.5-12.7 s, because the package's __init__ imported torch and transformers."""
    started = time.perf_counter()
    completed = subprocess.run([CONSOLE_SCRIPT, "--help"], capture_output=True, text=True, timeout=60)
    wall_time_s = time.perf_counter() - started
    assert completed.returncode == 0, completed.stderr
    for name in ("tokenizer", "train", "eval", "export", "push", "run"):
        assert name in completed.stdout
    assert wall_time_s < 1.5, f"hf-gpt-custom --help took {wall_time_s:.2f} s"


@pytest.mark.parametrize("folder, tasks, message", [
    (None, "copa", "does not exist"),
    ({"config.json": '{"model_type": "gpt_custom"}'}, "copa", "has no weights (model.safetensors"),
    ({"config.json": '{"vocab_size": 5}', "model.safetensors": ""}, "copa", "config.json has no model_type"),
    ({"config.json": '{"model_type": "gpt_custom"}', "model.safetensors": ""}, "copa,bogus",
     "unknown task 'bogus'; known tasks: arc_challenge"),
], ids=["missing", "no_weights", "no_model_type", "unknown_task"])
def test_an_eval_argument_error_answers_without_importing_torch(tmp_path, folder, tasks, message):
    """Each was named only after torch, transformers and lm-eval's code had loaded (~6 s)."""
    model = tmp_path / "model"
    for name, text in (folder or {}).items():
        model.mkdir(exist_ok=True)
        (model / name).write_text(text)
    code = ("import sys; from hf_gpt_custom.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as exit:\n"
            "    print(exit.code, 'torch' in sys.modules, 'transformers' in sys.modules)")
    completed = subprocess.run(
        [sys.executable, "-c", code, "eval", "--model", str(model), "--tasks", tasks, "--out", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=60,
    )
    assert completed.stdout.split() == ["2", "False", "False"], completed.stderr
    assert message in completed.stderr and len(completed.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_train_help_lists_every_training_key_with_its_default_and_help(capsys):
    from hf_gpt_custom.training.config import TrainConfig

    code, out, _ = _run_main(["train", "--help"], capsys)
    assert code == 0
    rows = {line.split()[0]: line.split(maxsplit=2)[1:] for line in out.split("training keys")[1].splitlines()[1:]}
    assert set(rows) == {field.name for field in dataclasses.fields(TrainConfig)} | {"model.<field>"}
    for field in dataclasses.fields(TrainConfig):
        help_text = field.metadata.get("help", "")
        assert (rows[field.name][1:] or [""])[0] == help_text, field.name  # the field's own line, or nothing
    # defaults as a YAML would spell them
    assert rows["learning_rate"][0] == "0.0006" and rows["max_steps"][0] == "1000"
    assert rows["tokenizer"][0] == "null" and rows["dataset"][0] == '""'
    assert rows["benchmark_shots"][0] == "[0]" and rows["streaming"][0] == "false"


def test_run_help_lists_the_training_keys_too(capsys):
    code, out, _ = _run_main(["run", "--help"], capsys)
    assert code == 0 and "training keys" in out and "  warmup_steps " in out


def _assert_one_line_error(code: int, err: str, command: str, *fragments: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"hf-gpt-custom {command}: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


def test_run_with_a_missing_config_file_is_one_line(tmp_path, capsys):
    missing = tmp_path / "no_such.yaml"
    code, _, err = _run_main(["run", str(missing)], capsys)
    _assert_one_line_error(code, err, "run", str(missing), "not found")


def test_run_with_an_unknown_config_key_is_one_line(tmp_path, capsys):
    config = tmp_path / "typo.yaml"
    config.write_text("run_name: typo\nmax_stesp: 10\n", encoding="utf-8")
    code, _, err = _run_main(["run", str(config), f"out_dir={tmp_path / 'run'}"], capsys)
    _assert_one_line_error(code, err, "run", "unknown training config key 'max_stesp'", "did you mean 'max_steps'?")
    assert not (tmp_path / "run").exists()  # rejected before any stage started


def test_run_with_an_unknown_override_is_one_line(tmp_path, capsys):
    config = tmp_path / "ok.yaml"
    config.write_text("run_name: ok\n", encoding="utf-8")
    code, _, err = _run_main(["run", str(config), "learnig_rate=1e-3"], capsys)
    _assert_one_line_error(code, err, "run", "'learnig_rate'", "did you mean 'learning_rate'?")


@pytest.mark.parametrize("command", ["run", "train", "finetune"])
def test_a_key_given_twice_with_different_values_is_one_line_not_the_last_taken(command, tmp_path, capsys):
    """A command line edited twice (`max_steps=200 ... max_steps=20`) would otherwise run with whichever came last."""
    config = tmp_path / "ok.yaml"
    config.write_text("run_name: ok\n", encoding="utf-8")
    code, _, err = _run_main([command, str(config), "max_steps=200", "learning_rate=1e-3", "max_steps=20",
                              f"out_dir={tmp_path / 'run'}"], capsys)
    _assert_one_line_error(code, err, command, "max_steps is given twice, as 'max_steps=200' and 'max_steps=20'",
                           "give it once")
    assert not (tmp_path / "run").exists()


def test_a_key_given_twice_with_one_value_is_harmless():
    from hf_gpt_custom.training.config import refuse_a_key_given_twice

    refuse_a_key_given_twice(["max_steps=20", "model.n_layer=2", "max_steps= 20"])
    with pytest.raises(ValueError, match="model.n_layer is given twice"):
        refuse_a_key_given_twice(["model.n_layer=2", "model.n_layer=4"])


def test_export_of_a_missing_run_folder_is_one_line(tmp_path, capsys):
    code, _, err = _run_main(["export", str(tmp_path / "runs" / "nope"), str(tmp_path / "out")], capsys)
    _assert_one_line_error(code, err, "export", "nope/final/config.json not found")
    assert not (tmp_path / "out").exists()


def test_push_of_a_missing_folder_is_one_line(tmp_path, capsys):
    code, _, err = _run_main(["push", str(tmp_path / "nope"), "--repo-id", "alice/x"], capsys)
    _assert_one_line_error(code, err, "push", "hf-gpt-custom export RUN_DIR OUT_DIR")


@pytest.fixture(scope="module")
def exported_folder(tmp_path_factory) -> Path:
    from hf_gpt_custom.hub import export_folder
    from tests.helpers import make_tiny_run

    root = tmp_path_factory.mktemp("cli_export")
    return export_folder(make_tiny_run(root / "runs" / "tiny"), root / "export", repo_id="alice/tiny")


def test_push_without_a_token_is_one_line(exported_folder, tmp_path, capsys, monkeypatch):
    import huggingface_hub.constants as constants

    folder = exported_folder
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no_token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no_stored_tokens"))
    code, _, err = _run_main(["push", str(folder), "--repo-id", "alice/tiny"], capsys)
    _assert_one_line_error(code, err, "push", "no Hugging Face token found", "Nothing was changed.")


def test_push_with_a_token_but_offline_is_one_line(exported_folder, capsys, monkeypatch):
    folder = exported_folder
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")  # tests run with HF_HUB_OFFLINE=1 (conftest)
    code, _, err = _run_main(["push", str(folder), "--repo-id", "alice/tiny"], capsys)
    _assert_one_line_error(code, err, "push", "offline mode is on")


def test_eval_with_bad_shots_exits_2(capsys):
    code, _, err = _run_main(["eval", "--model", "m", "--tasks", "copa", "--shots", "0,one", "--out", "o"], capsys)
    assert code == 2 and "expected comma-separated integers like 0,1,5, got '0,one'" in err


def test_push_dry_run_lists_files_with_sizes_and_uploads_nothing(exported_folder, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)  # no token, offline (conftest): a real push would fail
    main(["push", str(exported_folder), "--repo-id", "alice/tiny", "--dry-run"])
    out = capsys.readouterr().out
    files = sorted(path for path in exported_folder.rglob("*") if path.is_file())
    assert out.startswith(f"dry run: would upload {len(files)} files")
    weights = exported_folder / "model.safetensors"
    assert f"{weights.stat().st_size / 1024:.1f} KB  model.safetensors" in out
    assert "  eval/results.json" in out and "Nothing was uploaded." in out


def test_push_dry_run_names_the_branch_and_visibility_it_would_push_to(exported_folder, capsys, monkeypatch):
    """`push --dry-run --revision dev --private` reports the push those flags would make, not a public push to main."""
    monkeypatch.setattr("huggingface_hub.HfApi.upload_folder", lambda *a, **k: pytest.fail("dry run uploaded"))
    main(["push", str(exported_folder), "--repo-id", "alice/tiny", "--dry-run", "--revision", "dev", "--private"])
    first_line = capsys.readouterr().out.splitlines()[0]
    assert first_line.endswith("to alice/tiny@dev (private):")


def test_push_dry_run_still_refuses_a_broken_card(exported_folder, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(exported_folder, broken)
    (broken / "README.md").write_text("---\nlicense: [unclosed\n---\n# card\n")
    code, out, err = _run_main(["push", str(broken), "--repo-id", "alice/tiny", "--dry-run"], capsys)
    _assert_one_line_error(code, err, "push", "the card's metadata", "does not parse")
    assert "would upload" not in out


@pytest.mark.parametrize("command", [
    ["eval", "--model", "MODEL", "--tasks", "copa", "--out", "FILE"],
    ["tokenizer", "train", "INPUT", "--out", "FILE"],
    ["export", "RUN", "FILE"],
], ids=["eval", "tokenizer train", "export"])
def test_an_output_folder_that_is_a_file_is_one_line(command, exported_folder, tmp_path, capsys):
    a_file = tmp_path / "results.txt"
    a_file.write_text("not a folder")
    values = {"FILE": str(a_file), "MODEL": str(exported_folder), "INPUT": str(a_file), "RUN": str(tmp_path)}
    code, _, err = _run_main([values.get(item, item) for item in command], capsys)
    _assert_one_line_error(code, err, command[0], f"{a_file} is a file; pass a folder path")


def test_eval_of_a_missing_model_folder_is_one_line(tmp_path, capsys):
    missing = tmp_path / "runs" / "nope" / "final"
    code, _, err = _run_main(["eval", "--model", str(missing), "--tasks", "copa", "--out", str(tmp_path / "o")], capsys)
    _assert_one_line_error(code, err, "eval", f"model folder '{missing}' does not exist")


def test_eval_of_a_folder_without_config_json_is_one_line(tmp_path, capsys):
    (tmp_path / "weights_only").mkdir()
    code, _, err = _run_main(
        ["eval", "--model", str(tmp_path / "weights_only"), "--tasks", "copa", "--out", str(tmp_path / "o")], capsys
    )
    _assert_one_line_error(code, err, "eval", "weights_only has no config.json")


def test_eval_on_cuda_without_cuda_is_one_line(exported_folder, tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # this machine, or any CPU-only one
    code, _, err = _run_main(
        ["eval", "--model", str(exported_folder), "--tasks", "copa", "--device", "cuda", "--out", str(tmp_path / "o")],
        capsys,
    )
    _assert_one_line_error(code, err, "eval", "--device cuda:", "use --device cpu")
    assert not (tmp_path / "o").exists()


def test_eval_with_a_device_torch_does_not_know_is_one_line(exported_folder, tmp_path, capsys):
    code, _, err = _run_main(
        ["eval", "--model", str(exported_folder), "--tasks", "copa", "--device", "gpu0", "--out", str(tmp_path / "o")],
        capsys,
    )
    _assert_one_line_error(code, err, "eval", "--device 'gpu0' is not a torch device")


def test_the_model_check_leaves_other_architectures_and_hub_ids_to_the_loader(tmp_path):
    """eval takes any causal LM: the CLI only checks that a path is a folder with a config.json and weights."""
    from hf_gpt_custom.cli import _check_model_argument

    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "llama" / "model.safetensors").write_text("")  # read by the loader, not here
    _check_model_argument(str(tmp_path / "llama"))
    _check_model_argument("openai-community/gpt2")
    with pytest.raises(ValueError, match="has no config.json"):
        _check_model_argument(str(tmp_path))


def test_tokenizer_train_into_a_model_folder_is_refused_and_leaves_it_whole(exported_folder, tmp_path, capsys):
    """`tokenizer train --out <a model folder>` replaced the model's tokenizer files: the folder then failed its own
    manifest ("merges.txt has 166 bytes, the manifest says 1354")."""
    from tests.helpers import hash_folder

    model = tmp_path / "model"
    shutil.copytree(exported_folder, model)
    before = hash_folder(model)
    text = tmp_path / "small.txt"
    text.write_text("to be or not to be " * 50)
    code, _, err = _run_main(["tokenizer", "train", str(text), "--out", str(model), "--vocab-size", "300"], capsys)
    _assert_one_line_error(code, err, "tokenizer", "holds a model (config.json, manifest.json, model.safetensors)")
    assert hash_folder(model) == before


def test_overrides_may_follow_the_options_as_the_docs_write_them(monkeypatch, tmp_path):
    """docs/training.md writes `train CONFIG --init_from DIR run_name=ft max_steps=100 ...`; argparse refused the
    overrides after the option as unrecognized arguments."""
    from hf_gpt_custom import cli

    seen = {}
    monkeypatch.setattr(cli, "_cmd_train", lambda args: seen.update(overrides=cli._config_overrides(args)))
    main(["train", "cfg.yaml", "a=1", "--init_from", "runs/x/final", "run_name=ft", "max_steps=5"])
    assert seen["overrides"] == ["a=1", "run_name=ft", "max_steps=5", "init_from=runs/x/final"]
    with pytest.raises(SystemExit):
        main(["train", "cfg.yaml", "--init_from", "runs/x/final", "--no-such-option"])


@pytest.mark.parametrize("argv, said", [
    (["train", "cfg.yaml", "--max_steps", "5"],
     "hf-gpt-custom train: error: unrecognized arguments: --max_steps 5 (settings follow the config as key=value: "
     "max_steps=VALUE)"),
    (["eval", "--model", "m", "--tasks", "copa", "--out", "o", "--num_fewshot", "0", "--batch_size", "4"],
     "hf-gpt-custom eval: error: unrecognized arguments: --num_fewshot 0 --batch_size 4 (--num_fewshot is --shots "
     "here; --batch_size is --batch-size here)"),
    (["run", "cfg.yaml", "--num_fewshot", "5", "--max-steps", "3"],
     "hf-gpt-custom run: error: unrecognized arguments: --num_fewshot 5 --max-steps 3 (settings follow the config as "
     "key=value: benchmark_shots=VALUE; settings follow the config as key=value: max_steps=VALUE)"),
    (["run", "cfg.yaml", "--num-fewshot", "5"],
     "hf-gpt-custom run: error: unrecognized arguments: --num-fewshot 5 (settings follow the config as key=value: "
     "benchmark_shots=VALUE)"),
    (["finetune", "cfg.yaml", "--output_dir", "x"],
     "hf-gpt-custom finetune: error: unrecognized arguments: --output_dir x (settings follow the config as key=value: "
     "TrainingArguments' output_dir is out_dir=VALUE here)"),
    (["train", "cfg.yaml", "--per_device_train_batch_size", "4", "--bf16"],
     "hf-gpt-custom train: error: unrecognized arguments: --per_device_train_batch_size 4 --bf16 (settings follow the "
     "config as key=value: TrainingArguments' per_device_train_batch_size is batch_size=VALUE here; settings follow "
     "the config as key=value: TrainingArguments' bf16 is mixed_precision=bf16 here)"),
    (["run", "cfg.yaml", "--num_train_epochs", "3"],
     "hf-gpt-custom run: error: unrecognized arguments: --num_train_epochs 3 (settings follow the config as key=value: "
     "TrainingArguments' num_train_epochs: no setting here, give max_steps (optimizer steps) instead)"),
    (["eval", "--model", "m", "--tasks", "copa", "--out", "o", "--model_args", "pretrained=m"],
     "hf-gpt-custom eval: error: unrecognized arguments: --model_args pretrained=m (--model_args is --model "
     "FOLDER_OR_HUB_ID, not pretrained=... here)"),
    (["eval", "--model", "m", "--tasks", "copa", "--out", "o", "--fp16"],
     "hf-gpt-custom eval: error: unrecognized arguments: --fp16 (--fp16 is --dtype float16 here)"),
    (["run", "cfg.yaml", "--data-dir", "../shared/data"],
     "hf-gpt-custom run: error: unrecognized arguments: --data-dir ../shared/data (the benchmark files come from "
     "$HF_GPT_CUSTOM_DATA_DIR (eval's --data-dir); the training data is dataset=VALUE)"),
    (["train", "cfg.yaml", "--data_dir", "d"],
     "hf-gpt-custom train: error: unrecognized arguments: --data_dir d (the training data is dataset=VALUE; the "
     "benchmark files come from $HF_GPT_CUSTOM_DATA_DIR (eval's --data-dir))"),
    (["tokenizer", "train", "a.txt", "--out", "o", "--vocab_size", "300"],
     "hf-gpt-custom tokenizer train: error: unrecognized arguments: --vocab_size 300 (--vocab_size is --vocab-size "
     "here)"),
])
def test_a_flag_spelt_as_transformers_or_lm_eval_spell_it_gets_the_subcommands_usage_and_our_name(argv, said, capsys):
    """`train CONFIG --max_steps 5` (TrainingArguments' flag) or `eval --num_fewshot 0` (lm-eval's) got the top-level
    usage line and no hint (the newcomer2 walk); the subcommand's own usage and our spelling now."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.strip().splitlines()[-1] == said
    assert f"usage: hf-gpt-custom {' '.join(argv[:2] if argv[0] == 'tokenizer' else argv[:1])}" in err


@pytest.mark.parametrize("flag, override", [("--init_from", "init_from=runs/y/final"),
                                            ("--resume_from_checkpoint", "resume_from_checkpoint=latest")])
def test_a_flag_and_an_override_of_the_same_key_are_refused(flag, override, capsys):
    """`--init_from A init_from=B`: one of them won without a word (the flag, appended last)."""
    code, _, err = _run_main(["train", "cfg.yaml", override, flag, "runs/x/final"], capsys)
    key = flag.lstrip("-")
    _assert_one_line_error(code, err, "train", f"{flag} runs/x/final and the override {override} both set {key}")


@pytest.mark.parametrize("command, said", [("train", "continue from the latest checkpoint"),
                                           ("eval", "nothing was written")])
def test_ctrl_c_is_one_line_saying_what_is_kept_and_exit_130(command, said, monkeypatch, capsys):
    from hf_gpt_custom import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, f"_cmd_{command}", interrupted)
    argv = {"train": ["train", "cfg.yaml"], "eval": ["eval", "--model", "m", "--tasks", "copa", "--out", "o"]}[command]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 130
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"hf-gpt-custom {command}: interrupted; ") and said in err


def test_push_refuses_a_card_that_loads_another_repository(exported_folder, capsys):
    """The card's snippets say `from_pretrained("<repo id at export>")`; pushed to another repository (or with export's
    `your-username/...` default), the published card would load another model or none. Dry run included."""
    code, out, err = _run_main(["push", str(exported_folder), "--repo-id", "alice/other", "--dry-run"], capsys)
    _assert_one_line_error(code, err, "push", "the card (README.md) loads alice/tiny, not alice/other",
                           "--repo-id alice/other")
    assert "would upload" not in out


def test_the_card_names_no_made_up_package_url_unless_given_one(tmp_path):
    from hf_gpt_custom.hub import export_folder
    from tests.helpers import make_tiny_run

    run_dir = make_tiny_run(tmp_path / "runs" / "tiny")
    plain = (export_folder(run_dir, tmp_path / "plain") / "README.md").read_text(encoding="utf-8")
    assert "OWNER" not in plain and "pip install -e ." in plain and "git+" not in plain
    given = export_folder(run_dir, tmp_path / "given", package_source="git+https://example.org/me/hf-gpt-custom@v1")
    assert 'pip install "git+https://example.org/me/hf-gpt-custom@v1"' in (given / "README.md").read_text()


@pytest.mark.parametrize("argv, message", [
    (["eval", "--model", "m", "--tasks", "", "--out", "o"], "--tasks is empty; give comma-separated task names, e.g. "
                                                             "--tasks lambada,hellaswag"),
    (["eval", "--model", "m", "--tasks", " , ", "--out", "o"], "--tasks is empty"),
    (["eval", "--model", "m", "--tasks", "copa", "--shots", "", "--out", "o"], "--shots is empty; give comma-separated "
                                                                              "K values, e.g. --shots 0,1,5"),
], ids=["tasks", "tasks_commas", "shots"])
def test_an_empty_eval_list_is_refused_in_the_clis_own_words(argv, message, capsys):
    """Was evaluate()'s message for Python callers: `pass e.g. tasks=['lambada', 'hellaswag']`."""
    code, _, err = _run_main(argv, capsys)
    _assert_one_line_error(code, err, "eval", message)
    assert "[" not in err


@pytest.mark.parametrize("command, patched", [
    (["tokenizer", "train", "INPUT", "--out", "RO/tok"], "hf_gpt_custom.tokenizer_training.train_tokenizer"),
    (["export", "RUN", "RO/exp"], "hf_gpt_custom.hub.export_folder"),
], ids=["tokenizer train", "export"])
def test_an_output_folder_that_cannot_be_written_is_one_line(command, patched, tmp_path, capsys, monkeypatch):
    """Was a bare PermissionError traceback (a read-only parent folder, as a user without root meets it)."""
    import errno

    read_only = tmp_path / "ro"
    read_only.mkdir()
    values = {"INPUT": str(tmp_path), "RUN": str(tmp_path), "RO/tok": str(read_only / "tok"),
              "RO/exp": str(read_only / "exp")}
    argv = [values.get(item, item) for item in command]
    target = argv[-1]

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", target)

    monkeypatch.setattr(patched, refuse)
    code, _, err = _run_main(argv, capsys)
    _assert_one_line_error(code, err, command[0], f"cannot write {target}: Permission denied",
                           f"make {read_only} writable")

    def fill(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(read_only / "tok" / "tokenizer.json"))

    monkeypatch.setattr(patched, fill)
    code, _, err = _run_main(argv, capsys)
    _assert_one_line_error(code, err, command[0], "No space left on device", "free space on the disk of")


def test_tokenizer_train_refuses_an_out_folder_it_cannot_write_before_training(tmp_path, capsys, monkeypatch):
    """Was found only after the whole corpus was read and the merges learnt (the save failed)."""
    import tempfile

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    monkeypatch.setattr("hf_gpt_custom.tokenizer_training.train_tokenizer",
                        lambda *a, **k: pytest.fail("the tokenizer was trained"))
    out = tmp_path / "ro" / "tok"
    code, _, err = _run_main(["tokenizer", "train", str(tmp_path), "--out", str(out)], capsys)
    _assert_one_line_error(code, err, "tokenizer", f"cannot write to --out {out}: {tmp_path} takes no new file "
                           f"(Permission denied); choose a folder you can write (nothing was trained)")


@pytest.mark.parametrize("error", [
    FileNotFoundError(2, "No such file or directory", "somewhere"), PermissionError(13, "Permission denied"),
    OSError("no filename"),
], ids=["enoent", "no_filename", "bare"])
def test_an_os_error_that_may_be_a_bug_keeps_its_traceback(error, tmp_path, monkeypatch):
    """Only a write the user can fix (permissions, read-only, disk full) naming its file becomes one line."""
    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr("hf_gpt_custom.hub.export_folder", fail)
    with pytest.raises(OSError) as caught:
        main(["export", str(tmp_path), str(tmp_path / "exp")])
    assert caught.value is error


@pytest.mark.parametrize("command", ["train", "run", "finetune"])
def test_a_config_that_is_not_utf8_text_is_one_line(command, tmp_path, capsys):
    """A binary or Latin-1 file given as the config ended in a UnicodeDecodeError traceback."""
    config = tmp_path / "notes.yaml"
    config.write_bytes("run_name: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(SystemExit) as exit_info:
        main([command, str(config)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err.count("\n") == 0, err
    assert f"{config} is not a UTF-8 text file (byte 0xe9 at offset 13), so not a training config" in err


def test_benchmark_data_and_task_files_that_are_not_utf8_are_one_line(tmp_path, capsys):
    from hf_gpt_custom.eval.task import load_tasks

    task = tmp_path / "mine.yaml"
    task.write_bytes("task: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=rf"^{task} is not a UTF-8 text file \(byte 0xe9 at offset 9\), so not a "
                                         r"task YAML"):
        load_tasks([str(task)])
    data = tmp_path / "data" / "copa"
    data.mkdir(parents=True)
    (data / "val.jsonl").write_bytes(b'{"premise": "ok"}\n\x81\x82\n')
    (copa,) = load_tasks(["copa"])
    with pytest.raises(ValueError, match=rf"{data / 'val.jsonl'} is not UTF-8 text: byte 0x81 at offset 18 \(line 2\)"):
        copa.docs("test", tmp_path / "data")


def test_tokenizer_train_finds_a_relative_input_from_any_folder_as_train_finds_its_dataset(tmp_path, capsys,
                                                                                         monkeypatch):
    """`train` found ../shared/data/... from any working directory, `tokenizer train` only from the checkout: the
    docs' "read by the same rules as training data" was false. The input the trainer gets is the repository's file."""
    from hf_gpt_custom.training.config_values import REPO_ROOT

    relative = "../shared/data/tinyshakespeare/input.txt"
    if not (REPO_ROOT / relative).is_file():
        pytest.skip("../shared/data is not beside this checkout")
    seen = []
    monkeypatch.setattr("hf_gpt_custom.tokenizer_training.train_tokenizer",
                        lambda inputs, **kwargs: seen.append(inputs) or Path(kwargs["out_dir"]))
    monkeypatch.chdir(tmp_path)
    main(["tokenizer", "train", relative, "--out", str(tmp_path / "tok")])
    assert Path(seen[0][0]).resolve() == (REPO_ROOT / relative).resolve()
    code, _, err = _run_main(["tokenizer", "train", "no_such_dir/sub/corpus.txt", "--out", str(tmp_path / "t2")], capsys)
    _assert_one_line_error(code, err, "tokenizer", f"input 'no_such_dir/sub/corpus.txt' not found in {tmp_path} or "
                           f"{REPO_ROOT}")


@pytest.mark.parametrize("command", [["export", "a", "b"], ["tokenizer", "train", "x.txt", "--out", "y"]])
def test_export_and_tokenizer_refuse_a_multi_process_launch(command, monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")  # another rank: stops without a word
    with pytest.raises(SystemExit) as exited:
        main(command)
    assert exited.value.code == 2 and capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(SystemExit) as exited:
        main(command)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"{command[0]} works in one process, and the launcher started 2 (WORLD_SIZE=2" in err
    assert "run it without accelerate launch or torchrun" in err


def test_a_home_relative_path_is_expanded_in_outputs_as_in_inputs(tmp_path, monkeypatch, shared_data_dir):
    """`--out "~/tok"` (quoted, or --out=~/tok) and a YAML `out_dir: ~/runs/x` reach the program unexpanded: inputs
    were expanded, outputs went into a folder literally named "~" in the working directory (the paths hunt). Reference:
    the shell's own expansion of a bare ~/x, HOME/x."""
    from hf_gpt_custom.cli import main
    from hf_gpt_custom.training.config import load_train_config

    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(elsewhere)
    text = home / "input.txt"
    text.write_text((shared_data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:20_000])
    main(["tokenizer", "train", "~/input.txt", "--out", "~/tok", "--vocab-size", "300"])
    assert (home / "tok" / "tokenizer.json").is_file() and not (elsewhere / "~").exists()
    config = load_train_config(None, ["dataset=~/input.txt", "out_dir=~/runs/x", "data_cache_dir=~/cache"])
    assert (config.run_dir, config.data_cache_dir) == (home / "runs" / "x", str(home / "cache"))
    # `~name` of no user stays as written, as the shell leaves it (pathlib raised "Could not determine home
    # directory": a bare traceback from export, eval --model and out_dir=; the roundreview12 hunt)
    from hf_gpt_custom.cli import build_parser

    nobody = "~no_such_user_hf_gpt_custom"
    assert build_parser().parse_args(["eval", "--model", f"{nobody}/m", "--tasks", "copa", "--out", "o"]).model == f"{nobody}/m"
    assert load_train_config(None, ["dataset=~/input.txt", f"out_dir={nobody}/x"]).run_dir == Path(f"{nobody}/x")
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.hub import export_folder

    with pytest.raises(UserError, match="no_such_user"):
        export_folder(f"{nobody}/run", tmp_path / "out")


@pytest.mark.parametrize("name", ["-runR", "my run", "plain"])
def test_a_suggested_command_reads_each_path_as_the_path_it_names(name):
    """The closing lines of `run` and `export` print commands to paste; a run folder named "-runR" printed
    `hf-gpt-custom export -runR -runR/export`, which argparse reads as options (the paths hunt). Reference: the CLI's
    own parser reading the pasted words as a shell splits them."""
    import os
    import shlex

    from hf_gpt_custom.cli import build_parser
    from hf_gpt_custom.errors import shell_word

    words = shlex.split(f"export {shell_word(name)} {shell_word(os.path.join(name, 'export'))} --repo-id a/b")
    args = build_parser().parse_args(words)
    assert (os.path.normpath(args.run_dir), os.path.normpath(args.out_dir)) == (name, os.path.join(name, "export"))


@pytest.mark.parametrize("argv, said", [
    (["eval", "--model", "m", "--tasks", "copa", "--output_path", "o"],
     "hf-gpt-custom eval: error: the following arguments are required: --out (--output_path is --out here)"),
    (["eval", "--model_args", "pretrained=m", "--tasks", "copa", "--out", "o"],
     "hf-gpt-custom eval: error: the following arguments are required: --model (--model_args is --model "
     "FOLDER_OR_HUB_ID, not pretrained=... here)"),
    (["push", "o", "--repo_id", "alice/x"],
     "hf-gpt-custom push: error: the following arguments are required: --repo-id (--repo_id is --repo-id here)"),
    (["tokenizer", "train", "a.txt", "--output_dir", "o"],
     "hf-gpt-custom tokenizer train: error: the following arguments are required: --out (--output_dir is --out here)"),
    (["eval", "--model", "m", "--tasks", "copa"], "hf-gpt-custom eval: error: the following arguments are required: "
                                                  "--out"),
])
def test_a_flag_given_in_place_of_a_required_one_is_named_with_ours(argv, said, capsys):
    """`eval ... --output_path o` (lm-eval's spelling in place of --out) got "required: --out" alone: the hint for
    the flag given instead was only reached when nothing required was missing (the roundreview25 hunt)."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == said


def test_evals_data_dir_is_found_as_trains_data_is_from_any_working_directory(tmp_path, monkeypatch, capsys):
    """`eval --data-dir ../shared/data` was looked up in the working directory only, where train finds the same path
    from anywhere (working directory, then the repository root: the newcomer3 walk); the error then named a task's
    file under the unresolved path. A folder in neither place is named with both."""
    from hf_gpt_custom import cli
    from hf_gpt_custom.eval import runner
    from hf_gpt_custom.training.config_values import REPO_ROOT

    seen = {}

    class Stop(Exception):
        pass

    def fake_evaluate(*args, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(cli, "_check_model_argument", lambda model: None)
    monkeypatch.setattr(runner, "evaluate", fake_evaluate)
    monkeypatch.chdir(tmp_path)  # no ../shared here
    argv = ["eval", "--model", "m", "--tasks", "copa", "--out", str(tmp_path / "out")]
    with pytest.raises(Stop):
        main([*argv, "--data-dir", "../shared/data"])
    assert seen["data_dir"] == str((REPO_ROOT / "../shared/data").resolve())
    code, _, err = _run_main([*argv, "--data-dir", "no_such_folder"], capsys)
    _assert_one_line_error(code, err, "eval", f"--data-dir no_such_folder is no folder in {tmp_path} or {REPO_ROOT}")



@pytest.mark.parametrize("limit", ["0", "1.5", "-2", "nan"])
def test_a_limit_that_is_no_count_or_fraction_is_refused_before_anything_loads(limit, capsys):
    """`--limit 0` or `--limit 1.5` was refused only after the model loaded, in words for Python callers ("or None
    for all": the newcomer3 walk). lm-eval's rule: a count of documents, or a fraction between 0 and 1."""
    with pytest.raises(SystemExit) as exited:
        main(["eval", "--model", "no/such-model", "--tasks", "copa", "--out", "o", "--limit", limit])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exited.value.code == 2 and err == (
        f"hf-gpt-custom eval: error: argument --limit: expected a number of documents (300) or a fraction of each "
        f"task's between 0 and 1 (0.1), got {limit!r}; leave --limit out to score them all")
