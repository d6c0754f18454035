"""The `hf-gpt-custom` console script: argument parsing only.

Each subcommand is one `_add_<name>` function (its arguments) and one `_cmd_<name>` function that checks the
arguments a user can get wrong (right after parsing, before anything heavy loads) and then calls a single importable
function elsewhere. torch and transformers are imported only inside `_cmd_*` (and `import hf_gpt_custom` itself does
not import them), so `--help` and argument errors answer in a fraction of a second; tests/test_cli.py times it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .errors import MissingFileError, UserError, check_writable, file_system_error_message, shell_word
from .training.config import training_keys_help


def _comma_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _check_output_folder(path: str, flag: str) -> None:
    if Path(path).exists() and not Path(path).is_dir():
        raise UserError(f"{flag} {path} is a file; pass a folder path (it is created if missing)")


def _check_model_argument(model: str) -> None:
    """An existing path must be a model folder (config.json and weights; any causal LM for eval); anything else must
    read as a Hub id (user/name). The manifest is verified by the loader, which hashes the weights."""
    from .model_folder import check_model_folder, is_hub_repo_id

    if Path(model).exists() or not is_hub_repo_id(model):
        check_model_folder(model, any_model_type=True, verify_manifest=False)


def _special_tokens(value: str) -> list[str]:
    """Comma-separated tokens, the spaces after each comma dropped ("<a>, <b>"); a token that is only whitespace
    ($'\\n') is refused by name, not dropped. So is one that begins or ends with other whitespace (' the'): stripped,
    it was a different token ('the'), accepted in silence."""
    items = value.split(",")
    blank = [item for item in items if item and not item.strip()]
    if blank:
        raise argparse.ArgumentTypeError(f"{blank[0]!r} is whitespace only, which the command line does not keep "
                                         "as a token; add such a token from Python "
                                         "(train_tokenizer(..., special_tokens=[...]))")
    tokens = [items[0]] + [item.lstrip() for item in items[1:]]
    spaced = [token for token in tokens if token != token.strip()]
    if spaced:
        raise argparse.ArgumentTypeError(f"{spaced[0]!r} begins or ends with whitespace; a special token must be a "
                                         "name that cannot occur as text, like '<|sep|>' (a space after a comma is "
                                         "dropped)")
    return [token for token in tokens if token]


def _comma_ints(value: str) -> list[int]:
    try:
        return [int(item) for item in _comma_list(value)]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 0,1,5, got {value!r}") from err


def _count_or_fraction(value: str) -> int | float:
    """--limit: 300 (documents) or 0.1 (a fraction of them); a whole number written 300.0 is the count 300."""
    try:
        number = float(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a number of documents like 300 or a fraction like 0.1, got "
                                         f"{value!r}") from err
    if not (number >= 1 and number.is_integer() or 0 < number < 1):  # said at once, not after the model loads
        raise argparse.ArgumentTypeError(f"expected a number of documents (300) or a fraction of each task's between "
                                         f"0 and 1 (0.1), got {value!r}; leave --limit out to score them all")
    return int(number) if number.is_integer() else number


def _count_or_auto(value: str) -> int | str:
    """--batch-size: 16, or auto."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a number of requests like 16, or auto, got {value!r}") from err


# --- tokenizer train ---------------------------------------------------------------------------------------------


def _add_tokenizer(subparsers) -> None:
    parser = subparsers.add_parser("tokenizer", help="train a byte-level BPE tokenizer")
    tokenizer_sub = parser.add_subparsers(dest="tokenizer_command", required=True, metavar="{train}")
    train = tokenizer_sub.add_parser("train", help="train a tokenizer on text files or a datasets dataset")
    train.add_argument("inputs", nargs="+", help="text files / folders (.txt .text .raw .jsonl .json .parquet .csv) or a Hub dataset name")
    train.add_argument("--out", required=True, type=_user_path,
                       help="output folder that AutoTokenizer.from_pretrained loads")
    train.add_argument("--vocab-size", type=int, default=8192, help="target vocabulary size incl. 256 bytes and specials (default: 8192)")
    train.add_argument("--min-frequency", type=int, default=2, help="minimum pair count to merge (default: 2)")
    train.add_argument("--text-field", default="text", help="column holding the text in .jsonl/.json/.parquet/.csv/Hub data (default: text)")
    train.add_argument("--dataset-config", default=None, help="Hub dataset configuration name (default: none)")
    train.add_argument("--split", default="train", help="Hub dataset split (default: train)")
    train.add_argument("--special-tokens", type=_special_tokens, default=None,
                       help="comma-separated extra special tokens after <|endoftext|>, names that cannot occur as text "
                            "in the corpus, e.g. '<|pad|>' (default: none)")
    train.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                       help="show the trainer's progress bars (default: on)")
    train.set_defaults(func=_cmd_tokenizer_train)


def _cmd_tokenizer_train(args: argparse.Namespace) -> None:
    from .hub import is_hub_repo_id
    from .model_folder import WEIGHT_FILES

    _check_output_folder(args.out, "--out")
    check_writable(args.out, "--out", "choose a folder you can write (nothing was trained)")  # not after training
    held = [name for name in ("config.json", "manifest.json", *WEIGHT_FILES) if (Path(args.out) / name).exists()]
    if held:  # its tokenizer files would be replaced under its weights, and its manifest would no longer match
        raise UserError(f"--out {args.out} holds a model ({', '.join(held)}); a tokenizer written there would replace "
                        "the model's own and damage the folder; choose a new folder")
    # On the command line every input is a path or one Hub name, never literal text. A relative path is looked up
    # in the working directory, then in the repository root, as `train` looks up its dataset.
    from hf_gpt_custom.training.config_values import find_local_path, searched_places

    found = [find_local_path(item) for item in args.inputs]
    missing = [item for item, path in zip(args.inputs, found) if path is None]
    if missing and not (len(args.inputs) == 1 and is_hub_repo_id(args.inputs[0])):
        raise MissingFileError(f"input {missing[0]!r} not found in {searched_places()}; pass existing files/folders or "
                               "one Hub dataset name")
    inputs = [str(path) if path else item for item, path in zip(args.inputs, found)]
    from hf_gpt_custom.tokenizer_training import train_tokenizer

    folder = train_tokenizer(
        inputs,
        out_dir=args.out,
        vocab_size=args.vocab_size,
        min_frequency=args.min_frequency,
        special_tokens=args.special_tokens,
        text_field=args.text_field,
        dataset_config=args.dataset_config,
        split=args.split,
        show_progress=args.progress,
    )
    print(f"tokenizer saved to {folder}; load it with `import hf_gpt_custom` then AutoTokenizer.from_pretrained("
          f"{str(folder)!r}) (or trust_remote_code=True where the package is not installed)")


# --- train -------------------------------------------------------------------------------------------------------


# What train, finetune and run do with a run folder that already holds a run: one behaviour, said in each --help.
RESUME_HELP = ("A run folder that already holds checkpoints is continued from its latest one when its settings match "
               "this config, and refused, naming each differing setting, when they don't: then give the run its own "
               "folder (out_dir=..., or run_name=... where the config sets no out_dir) or pass --start_over.")


def _add_train(subparsers) -> None:
    parser = subparsers.add_parser(
        "train", help="pre-train a causal LM with Accelerate (or continue from a model folder)",
        description=RESUME_HELP,
        epilog=training_keys_help(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_run_config_arguments(parser, "training YAML, e.g. training/configs/shakespeare.yaml",
                              "key=value overrides, e.g. max_steps=200 model.n_layer=4",
                              "continue training a model folder: ours (final/, an export, a checkpoint) or a "
                              "transformers GPT-2, OpenAI GPT or Llama folder, converted on load (GPT-1-style "
                              "fine-tuning with a task head: `hf-gpt-custom finetune`)")
    parser.set_defaults(func=_cmd_train)


def _add_run_config_arguments(parser, config_help: str, overrides_help: str, init_from_help: str) -> None:
    """CONFIG, key=value overrides, --resume_from_checkpoint and --init_from: what train and finetune both take."""
    parser.add_argument("config", help=config_help)
    parser.add_argument("overrides", nargs="*", help=overrides_help)
    parser.add_argument("--resume_from_checkpoint", "--resume-from-checkpoint", default=None,
                        help="'latest' or a checkpoint folder (default: the run folder's latest checkpoint if it has "
                             "one and its settings match, else step 0)")
    parser.add_argument("--init_from", "--init-from", default=None, help=init_from_help)
    _add_start_over_argument(parser)


def _add_start_over_argument(parser) -> None:
    parser.add_argument("--start_over", "--start-over", action="store_true",
                        help="train from step 0 even if the run folder holds a run (its checkpoints are moved to "
                             "checkpoints/abandoned_*, not deleted) (default: continue it)")


def _config_overrides(args: argparse.Namespace) -> list[str]:
    """The key=value overrides with --resume_from_checkpoint / --init_from appended as overrides of their own."""
    from hf_gpt_custom.training.config import refuse_a_key_given_twice

    overrides = list(args.overrides)
    refuse_a_key_given_twice(overrides)
    for key in ("resume_from_checkpoint", "init_from"):
        flag = getattr(args, key)
        if flag is None:
            continue
        # Both spellings on one command line: the later override would win without a word, whichever it is.
        also = [o for o in overrides if o.split("=", 1)[0].strip().replace("-", "_") == key]
        if also:
            raise UserError(f"--{key} {flag} and the override {also[0]} both set {key}; give one of them")
        overrides.append(f"{key}={flag}")
    return overrides


def _cmd_train(args: argparse.Namespace) -> None:
    from hf_gpt_custom.training.config import load_train_config
    from hf_gpt_custom.training.hub_revision import pin_dataset_revision
    from hf_gpt_custom.training.resume import check_run_folder

    config = load_train_config(args.config, _config_overrides(args))  # before torch loads: errors come in a second
    config = pin_dataset_revision(config, args.start_over)  # a Hub dataset: the commit its run folder was trained on
    check_run_folder(config, args.start_over)  # a run folder trained with other settings, too
    from hf_gpt_custom.training.train import train

    train(config, start_over=args.start_over)


# --- finetune ----------------------------------------------------------------------------------------------------


def _add_finetune(subparsers) -> None:
    parser = subparsers.add_parser(
        "finetune", help="GPT-1-style fine-tuning of a model folder on a labelled dataset (task head + λ·LM loss)",
        description=RESUME_HELP, epilog=_task_keys_help(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_run_config_arguments(parser, "fine-tuning YAML, e.g. training/configs/finetune_boolq.yaml",
                              "key=value overrides, e.g. max_steps=200 task.lm_loss_weight=0",
                              "the model folder to fine-tune (default: init_from in the YAML)")
    parser.set_defaults(func=_cmd_finetune)


def _task_keys_help() -> str:
    from hf_gpt_custom.training.finetune_config import TASK_KEYS_HELP

    width = max(len(key) for key in TASK_KEYS_HELP) + len("task.")
    lines = [f"  {'task.' + key:<{width}}  {text}" for key, text in TASK_KEYS_HELP.items()]
    return ("task keys (the task: section, or task.key=value after the YAML):\n" + "\n".join(lines) +
            "\nand the training keys of `hf-gpt-custom train --help` (init_from, dataset, val_fraction, block_size, ...)")


def _cmd_finetune(args: argparse.Namespace) -> None:
    from hf_gpt_custom.training.finetune_config import load_finetune_config
    from hf_gpt_custom.training.hub_revision import pin_dataset_revision
    from hf_gpt_custom.training.resume import check_run_folder

    config = load_finetune_config(args.config, _config_overrides(args))  # before torch loads
    config = pin_dataset_revision(config, args.start_over)
    check_run_folder(config, args.start_over)
    from hf_gpt_custom.training.finetune import finetune

    finetune(config, start_over=args.start_over)


def _user_path(value: str) -> str:
    """A path argument with "~" expanded, as the shell does for a bare ~/x but not for "~/x" in quotes or --out=~/x:
    outputs went into a folder literally named "~" in the working directory (the paths hunt)."""
    return os.path.expanduser(value) if value.startswith("~") else value


# --- eval --------------------------------------------------------------------------------------------------------


def _add_eval(subparsers) -> None:
    parser = subparsers.add_parser("eval", help="zero-, one- and few-shot evaluation on benchmarks")
    parser.add_argument("--model", required=True, type=_user_path, help="model folder (any causal LM) or Hub id")
    parser.add_argument("--tasks", required=True, type=_comma_list, help="comma-separated task names, e.g. lambada,hellaswag")
    parser.add_argument("--shots", type=_comma_ints, default=[0], help="comma-separated K values (default: 0)")
    parser.add_argument("--tokenizer", default=None, type=_user_path,
                        help="the tokenizer folder or Hub id, for a model folder without one (default: the "
                             "model's own; a training checkpoint's: the one its run trained with)")
    parser.add_argument("--limit", type=_count_or_fraction, default=None,
                        help="score at most N documents per task, or a fraction of each task's (0.1: a tenth, rounded "
                             "up, as lm-eval's --limit) (default: all)")
    parser.add_argument("--batch-size", type=_count_or_auto, default=16,
                        help="requests per forward pass, or 'auto': the largest the GPU holds, as lm-eval's (on a CPU: "
                             "16) (default: 16)")
    parser.add_argument("--device", default=None,
                        help="torch device: cpu, cuda, cuda:1, ... (default: cuda when available, else cpu)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="model dtype (default: float32)")
    parser.add_argument("--seed", type=int, default=1234, help="few-shot sampling seed (default: 1234)")
    parser.add_argument("--data-dir", default=None, type=_user_path,
                        help="benchmark data root (default: $HF_GPT_CUSTOM_DATA_DIR, else ../shared/data beside the repo)")
    parser.add_argument("--out", required=True, type=_user_path,
                        help="output folder for results.json, table.md, examples.jsonl, PNG")
    parser.add_argument("--protocol", choices=["ours", "lm-eval"], default="ours",
                        help="'lm-eval' scores K > 0 exactly as lm-evaluation-harness does: its target delimiters, all "
                             "K examples kept and the prompt cut from the left (default: ours; see docs/evaluation.md)")
    parser.set_defaults(func=_cmd_eval)


def _benchmark_data_dir(given: str | None) -> str | None:
    """--data-dir found as train finds its data (resolve_data_dir: the working directory, then the repository
    root), so `--data-dir ../shared/data` works from anywhere (the newcomer3 walk); None leaves evaluate()'s default,
    which reads $HF_GPT_CUSTOM_DATA_DIR by the same rule."""
    from hf_gpt_custom.eval.task_data import resolve_data_dir

    return str(resolve_data_dir(given, "--data-dir")) if given else None


def _cmd_eval(args: argparse.Namespace) -> None:
    if not args.tasks:  # else evaluate's own message, written for Python callers (tasks=[...]), reaches the shell
        raise UserError("--tasks is empty; give comma-separated task names, e.g. --tasks lambada,hellaswag")
    if not args.shots:
        raise UserError("--shots is empty; give comma-separated K values, e.g. --shots 0,1,5")
    _check_output_folder(args.out, "--out")
    _check_model_argument(args.model)
    args.data_dir = _benchmark_data_dir(args.data_dir)
    from hf_gpt_custom.eval.task import task_file

    for task in args.tasks:
        task_file(task)  # an unknown task is named before torch and the model load
    from hf_gpt_custom.eval.report import REPORT_FILES
    from hf_gpt_custom.eval.runner import evaluate
    from hf_gpt_custom.training.devices import launch_rank

    results = evaluate(
        args.model,
        tokenizer=args.tokenizer,
        tasks=args.tasks,
        shots=args.shots,
        limit=args.limit,
        batch_size=args.batch_size,
        device=args.device,
        dtype=args.dtype,
        seed=args.seed,
        out_dir=args.out,
        data_dir=args.data_dir,
        protocol=args.protocol,
        data_parallel=True,  # under accelerate launch or torchrun: the processes share the documents out
    )
    if results.config["processes"] > 1 and launch_rank() != 0:
        return  # the main process wrote the report and says so
    out_dir = Path(args.out)
    print((out_dir / "table.md").read_text(encoding="utf-8"))
    print("wrote " + ", ".join(str(out_dir / name) for name in REPORT_FILES if (out_dir / name).exists()))


# --- export / push -----------------------------------------------------------------------------------------------


def _add_export(subparsers) -> None:
    parser = subparsers.add_parser("export", help="write a Hub-ready folder (weights, code, tokenizer, card, plots)")
    parser.add_argument("run_dir", type=_user_path, help="a training run folder (runs/<name>)")
    parser.add_argument("out_dir", type=_user_path,
                        help="where to write the Hub-ready folder (replaced if it is an earlier export)")
    parser.add_argument("--repo-id", default=None,
                        help="user/name shown in the card's loading snippets (default: your-username/<run_name>; "
                             "push refuses a card that names another repository)")
    parser.add_argument("--license", default=None,
                        help="the card's license, a Hub license id (default: apache-2.0, this project's; a model "
                             "trained from another's weights usually carries that model's license)")
    parser.add_argument("--license-name", default=None,
                        help="with --license other: an id for your license, e.g. my-license-1.0 (the card's "
                             "license_name)")
    parser.add_argument("--license-link", default=None,
                        help="with --license other: where its text is, a URL or a file you put in OUT_DIR, e.g. "
                             "LICENSE.md (the card's license_link; push checks the file is there)")
    parser.add_argument("--language", default=None,
                        help="the card's language, ISO 639 codes, comma-separated, e.g. en or en,fr (default: en for "
                             "the datasets this project knows, else none)")
    parser.add_argument("--package-source", default=None,
                        help="the pip requirement the card gives for installing hf-gpt-custom, e.g. "
                             "git+https://github.com/you/hf-gpt-custom (default: none given)")
    parser.set_defaults(func=_cmd_export)


def _cmd_export(args: argparse.Namespace) -> None:
    from hf_gpt_custom.hub import check_repo_id, export_folder

    if args.repo_id is not None:
        check_repo_id(args.repo_id)
    _check_output_folder(args.out_dir, "OUT_DIR")
    out_dir = export_folder(args.run_dir, args.out_dir, repo_id=args.repo_id, package_source=args.package_source,
                            license=args.license, license_name=args.license_name, license_link=args.license_link,
                            language=args.language)
    repo_id = args.repo_id or "USER/NAME"
    print(f"Hub-ready folder: {out_dir} (check it with `hf-gpt-custom push {shell_word(out_dir)} --repo-id "
          f"{repo_id} --dry-run`"
          + ("; its card names the placeholder your-username/<run_name>: export again with --repo-id USER/NAME first)"
             if args.repo_id is None else ")"))


def _add_push(subparsers) -> None:
    parser = subparsers.add_parser("push", help="upload an exported folder to the Hugging Face Hub as it is")
    parser.add_argument("folder", type=_user_path, help="a folder written by `hf-gpt-custom export`")
    parser.add_argument("--repo-id", required=True, help="user/name on the Hub")
    parser.add_argument("--private", action="store_true", help="create the repository as private (default: public)")
    parser.add_argument("--revision", default=None, help="branch to push to (default: main)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the folder and its card and list what would be uploaded, with sizes; upload nothing")
    parser.set_defaults(func=_cmd_push)


def _cmd_push(args: argparse.Namespace) -> None:
    from hf_gpt_custom.hub import check_repo_id, push_folder
    from hf_gpt_custom.publish_checks import dry_run_report

    check_repo_id(args.repo_id)
    if not args.dry_run:
        print(push_folder(args.folder, repo_id=args.repo_id, private=args.private, revision=args.revision))
        return
    print(dry_run_report(args.folder, args.repo_id, private=args.private, revision=args.revision))


# --- run (the main job) ------------------------------------------------------------------------------------------


def _add_run(subparsers) -> None:
    parser = subparsers.add_parser(
        "run", help="tokenizer -> train -> evaluate -> export (with the model card), resumable by stage",
        description="The main job. Progress is kept in <run folder>/pipeline_state.json: rerun the same command after "
                    "an interruption to skip finished stages and resume training from its latest checkpoint. "
                    "A run folder started with other training settings is refused naming them; give the run its "
                    "own folder or pass --start_over. Changes that keep the trained model are taken: benchmark_* "
                    "(evaluation and export run again), eval_batches and peak_flops (train's finishing step and "
                    "export run again), run_name (written into config.yaml and the summary; export runs again), "
                    "speed and logging settings (docs/training.md, the main job).",
        epilog=training_keys_help(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", help="run YAML, e.g. training/configs/shakespeare.yaml")
    parser.add_argument("overrides", nargs="*",
                        help="key=value overrides, e.g. max_steps=200 benchmark_tasks=copa,piqa benchmark_limit=50")
    _add_start_over_argument(parser)
    parser.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> None:
    from hf_gpt_custom.run import run_pipeline
    from hf_gpt_custom.training.config import refuse_a_key_given_twice

    refuse_a_key_given_twice(args.overrides)
    run_pipeline(args.config, args.overrides, start_over=args.start_over)


# -----------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hf-gpt-custom", description="Train, fine-tune, evaluate and publish GPT-family models in the Hugging "
        "Face ecosystem. The main job: hf-gpt-custom run training/configs/shakespeare.yaml")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_subcommand in (_add_tokenizer, _add_train, _add_finetune, _add_eval, _add_export, _add_push, _add_run):
        add_subcommand(subparsers)
    return parser


# What Ctrl-C leaves behind, by command: said instead of a traceback from wherever torch was.
_AFTER_INTERRUPT = {
    "train": "rerun the same command to continue from the latest checkpoint (the steps after it are redone)",
    "finetune": "rerun the same command to continue from the latest checkpoint (the steps after it are redone)",
    "run": "rerun the same command: finished stages are kept and training continues from its latest checkpoint",
    "eval": "nothing was written; rerun it to evaluate again",
    "export": "the previous export, if there was one, is unchanged",
}


def _refuse_a_multi_process_launch(command: str) -> None:
    """export, push and tokenizer work in one process: under `accelerate launch --num_processes 2` every rank wrote
    the same folder, and one crashed on the other's half-written files (found by the distributed hunt). train and
    finetune share the batches between ranks, eval the documents (eval/sharding.py), run both (run.py)."""
    from hf_gpt_custom.training.devices import launch_rank, launched_processes, world_size_variable

    processes = launched_processes()
    if command in ("train", "finetune", "eval", "run") or processes == 1:
        return
    fix = "run it without accelerate launch or torchrun"
    if launch_rank() == 0:  # said once, not by every rank
        print(f"hf-gpt-custom {command}: error: {command} works in one process, and the launcher started "
              f"{processes} ({world_size_variable()}={processes}; unset it if no launcher started this): {fix}",
              file=sys.stderr)
    sys.exit(2)


# Flags as lm-evaluation-harness (and transformers, --output_dir) name them, and ours: eval's, tokenizer train's and
# push's flags, and run's settings for its benchmark stage
LM_EVAL_FLAGS = {"--num_fewshot": "--shots", "--output_path": "--out", "--output_dir": "--out",
                 "--model_args": "--model", "--batch_size": "--batch-size"}
# TrainingArguments' precision flags, which a transformers user gives eval: its --dtype
DTYPE_FLAGS = {"--fp16": "float16", "--bf16": "bfloat16"}
LM_EVAL_SETTINGS = {"num_fewshot": "benchmark_shots", "shots": "benchmark_shots", "tasks": "benchmark_tasks",
                    "output_dir": "out_dir", "output_path": "out_dir"}


def _setting_hint(command: str, flag: str) -> str:
    """For `train`/`finetune`/`run`: the key=value setting a flag means, named as the config names it (a close
    match where the flag is spelt another way), or the rule alone where none is near."""
    import difflib
    import dataclasses

    if command == "finetune":
        from hf_gpt_custom.training.finetune_config import FinetuneConfig as config_class
    else:
        from hf_gpt_custom.training.config import TrainConfig as config_class
    from hf_gpt_custom.training.config_values import transformers_name_hint

    keys = [field.name for field in dataclasses.fields(config_class)]
    key = flag[2:].replace("-", "_")
    if key == "data_dir":  # eval's flag: data_cache_dir, the close match, is the packed training data's cache
        from hf_gpt_custom.eval.task_data import DATA_DIR_ENV

        benchmarks = f"the benchmark files come from ${DATA_DIR_ENV} (eval's --data-dir)"
        return f"{benchmarks}; the training data is dataset=VALUE" if command == "run" else \
            f"the training data is dataset=VALUE; {benchmarks}"
    if transformers_name_hint(key):  # --per_device_train_batch_size, --bf16: a Trainer user's spelling
        return f"settings follow the config as key=value: {transformers_name_hint(key).removesuffix('; ')}"
    key = LM_EVAL_SETTINGS.get(key, key) if LM_EVAL_SETTINGS.get(key) in keys else key
    near = key if key in keys else next(iter(difflib.get_close_matches(key, keys, n=1)), None)
    return f"settings follow the config as key=value: {near}=VALUE" if near else \
        "settings follow the config as key=value (docs/training.md lists them)"


def _flag_hints(command: argparse.ArgumentParser, arguments: list[str]) -> str:
    """" (--num_fewshot is --shots here; ...)" for the flags among `arguments` that `command` (a subcommand's parser)
    does not know, spelt as transformers' TrainingArguments or lm-eval spell them, or "" when there is none."""
    options = {option for action in command._actions for option in action.option_strings}
    takes_settings = any(action.dest == "overrides" for action in command._actions)
    hints = []
    for flag in (item.split("=", 1)[0] for item in arguments if item.startswith("--")):
        if flag in options:
            continue
        ours = LM_EVAL_FLAGS.get(flag) if LM_EVAL_FLAGS.get(flag) in options else flag.replace("_", "-")
        if flag in DTYPE_FLAGS and "--dtype" in options:
            hints.append(f"{flag} is --dtype {DTYPE_FLAGS[flag]} here")
        elif ours in options:
            value = " FOLDER_OR_HUB_ID, not pretrained=..." if flag == "--model_args" else ""
            hints.append(f"{flag} is {ours}{value} here")
        elif takes_settings:
            hints.append(_setting_hint(command.prog.split()[-1], flag))
    return f" ({'; '.join(hints)})" if hints else ""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose "the following arguments are required: --out" also names the flag given in its place
    (`eval ... --output_path o`, `push ... --repo_id x`): the hint for a flag spelt as lm-eval or transformers spell
    it was only reached when nothing required was missing (the roundreview25 hunt)."""

    arguments: list[str] = []  # the command line being parsed (main sets it)

    def error(self, message: str):
        if message.startswith("the following arguments are required"):
            message += _flag_hints(self, self.arguments)
        super().error(message)


def _refuse_unrecognized(parser: argparse.ArgumentParser, args, extra: list[str]):
    """Unknown arguments, said by the subcommand's own parser (its usage line, not the top level's), with a hint for
    a flag as transformers' TrainingArguments or lm-eval spell it (`--max_steps 5`, `--num_fewshot 0`): they got the
    top-level usage and nothing else (the newcomer2 walk)."""
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    command = subparsers.choices.get(getattr(args, "command", None), parser)
    nested = [action for action in command._actions if isinstance(action, argparse._SubParsersAction)]
    if nested and getattr(args, "tokenizer_command", None) in nested[0].choices:
        command = nested[0].choices[args.tokenizer_command]
    command.error(f"unrecognized arguments: {' '.join(extra)}" + _flag_hints(command, extra))


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    _Parser.arguments = list(sys.argv[1:] if argv is None else argv)
    # key=value overrides may also follow the options (`train CONFIG --init_from DIR max_steps=5`): argparse stops
    # collecting a positional list at the first option, so the rest arrive here as unrecognised
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "overrides") and all("=" in item and not item.startswith("-") for item in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        _refuse_unrecognized(parser, args, extra)
    _refuse_a_multi_process_launch(args.command)
    try:
        args.func(args)
    except UserError as err:
        # Our own checks raise these with a message that names the problem and the fix: one line, exit 2.
        # Anything else (a bug here or in torch/transformers) is unexpected and keeps its traceback.
        print(f"hf-gpt-custom {args.command}: error: {err}", file=sys.stderr)
        sys.exit(2)
    except OSError as err:
        message = file_system_error_message(err)
        if message is None:
            raise
        print(f"hf-gpt-custom {args.command}: error: {message}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        after = _AFTER_INTERRUPT.get(args.command)
        print(f"\nhf-gpt-custom {args.command}: interrupted{f'; {after}' if after else ''}", file=sys.stderr)
        sys.exit(130)  # the shell's code for a process stopped by SIGINT


if __name__ == "__main__":
    main()
