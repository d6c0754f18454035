"""README.md and docs/ stay true to the code they describe: the test command is what CI runs, the command table lists
every subcommand and flag the console script has, docs/model.md lists every registered Auto class, and every relative
link resolves to a file and heading that exist."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from hf_gpt_custom.auto_classes import AUTO_MODEL_CLASSES
from hf_gpt_custom.cli import build_parser

REPO_ROOT = Path(__file__).resolve().parents[1]
README = REPO_ROOT / "README.md"
DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))
VENV_PREFIX = "python3 -m venv .venv && . .venv/bin/activate && "


def fenced_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.S | re.M)


def section(text: str, heading: str) -> str:
    """The text under `## heading` up to the next `## ` heading."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end == -1 else text[start:end]


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```$", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {github_anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def test_readme_test_command_is_what_ci_runs():
    """.ci/run copies README's install-and-test command line by line; both fenced commands share its install part."""
    ci_lines = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").split('"Run the tests"', 1)[1].splitlines()[1:]
    ci_steps = [line.strip() for line in ci_lines if line.strip() and not line.startswith("#")]
    main_job, tests = (block.strip() for block in fenced_blocks(section(README.read_text(), "The two commands"), "bash"))
    assert tests == VENV_PREFIX + " && ".join(ci_steps)
    assert main_job == VENV_PREFIX + " && ".join([*ci_steps[:-1], "hf-gpt-custom run training/configs/shakespeare.yaml"])


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(subcommand words, its parser) for every leaf subcommand of the console script."""
    actions = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not actions:
        yield path, parser
        return
    for name, subparser in actions[0].choices.items():
        yield from _subcommands(subparser, (*path, name))


@pytest.mark.parametrize("words,parser", [pytest.param(words, parser, id=" ".join(words))
                                          for words, parser in _subcommands(build_parser())])
def test_readme_command_table_lists_every_subcommand_with_its_flags(words, parser):
    rows = [line for line in section(README.read_text(), "Commands").splitlines() if line.startswith("| `")]
    row = next((line for line in rows if line.startswith(f"| `{' '.join(words)} ")), None)
    assert row is not None, f"README's command table has no row for `hf-gpt-custom {' '.join(words)}`"
    for action in parser._actions:
        flags = [flag for flag in action.option_strings if flag.startswith("--") and flag != "--help"]
        if flags:
            assert any(re.search(rf"{re.escape(flag)}(?![\w-])", row) for flag in flags), \
                f"README's row for {' '.join(words)} lacks {flags[0]}"


def test_docs_model_lists_every_registered_auto_class():
    text = (REPO_ROOT / "docs" / "model.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `Auto")]
    for auto_class, location in AUTO_MODEL_CLASSES.items():
        class_name = location.split(".")[1]
        assert any(f"`{auto_class}`" in row and f"`{class_name}`" in row for row in rows), \
            f"docs/model.md's Auto class table lacks {auto_class} -> {class_name}"


def test_readme_is_a_front_page_that_links_every_docs_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert DOCS, "docs/ holds no pages"
    for page in DOCS:
        assert f"(docs/{page.name})" in text, f"README does not link docs/{page.name}"
        title, answer = [line for line in page.read_text(encoding="utf-8").splitlines() if line.strip()][:2]
        assert title.startswith("# ") and not answer.startswith("#"), f"{page.name} must open with what it answers"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda path: path.name)
def test_every_relative_link_resolves(page):
    for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.name} links {link}, which does not exist"
        if anchor and target.suffix == ".md":
            assert anchor in headings(target), f"{page.name} links {link}, but {target.name} has no such heading"


# ---- figures, names and help texts the docs quote, checked against what they cite (added by the docs hunt) ----

RESULTS = REPO_ROOT / "benchmarks" / "results"


def _subparser(*words: str) -> argparse.ArgumentParser:
    return dict((path, parser) for path, parser in _subcommands(build_parser()))[words]


def test_evaluation_speed_figures_are_what_bench_eval_measured():
    """docs/evaluation.md's Speed section cites bench_eval.md: every N.NNx it quotes is a speed-up that file holds."""
    import json

    text = section((REPO_ROOT / "docs" / "evaluation.md").read_text(encoding="utf-8"), "Speed")
    assert "bench_eval.md" in text
    measured = {f"{row['speedup']:.2f}" for row in json.loads((RESULTS / "bench_eval.json").read_text())["rows"]}
    quoted = re.findall(r"(\d+\.\d+)x", text)
    assert quoted, "docs/evaluation.md's Speed section quotes no speed-up"
    stale = [figure for figure in quoted if figure not in measured]
    assert not stale, f"docs/evaluation.md quotes {stale}x, but bench_eval.json measured {sorted(measured)}"


@pytest.mark.parametrize("page,pattern", [
    (REPO_ROOT / "docs" / "benchmarks.md", r"rounds spread (\d+(?:\.\d+)?)x–(\d+(?:\.\d+)?)x"),
    (REPO_ROOT / "docs" / "tokenizer.md", r"\((\d+(?:\.\d+)?)x–(\d+(?:\.\d+)?)x over every row against tiktoken;"),
], ids=["benchmarks.md", "tokenizer.md"])
def test_quoted_tokenizer_round_spread_holds_the_measured_ranges(page, pattern):
    """The spread of per-round ratios a page quotes for the tiktoken rows holds every min-max the result files give."""
    match = re.search(pattern, page.read_text(encoding="utf-8"))
    assert match, f"{page.name} no longer quotes the spread"
    low, high = float(match.group(1)), float(match.group(2))
    headline = page.name == "benchmarks.md"  # its headline table's `tokenizer(texts)` row
    rows = "the headline `tokenizer(texts)` row" if headline else "the tiktoken rows"
    names = ["ours __call__"] if headline else ["ours __call__", "ours encode_ids_batch"]
    for threads in (1, 2):
        table = (RESULTS / f"bench_tokenizer_threads{threads}.md").read_text(encoding="utf-8")
        for name in names:
            lo, hi = map(float, re.search(
                rf"\| batch: {re.escape(name)} / tiktoken encode_ordinary loop \| [\d.]+ \| ([\d.]+)-([\d.]+) \|",
                table).groups())
            assert low <= lo + 0.05 and hi <= high + 0.05, \
                f"{page.name} says {rows} spread {low}x–{high}x; {threads} thread(s), {name}: {lo}–{hi}"


def test_functions_the_docs_name_by_module_are_in_that_module():
    """`module.function()` in the docs, where module is one of the package's modules, names a real attribute."""
    import importlib

    for page in [README, *DOCS]:
        for module, name in re.findall(r"`([a-z_]+(?:\.[a-z_]+)*)\.([a-z_]\w*)\(\)`", page.read_text(encoding="utf-8")):
            dotted = module if module.startswith("hf_gpt_custom") else f"hf_gpt_custom.{module}"
            try:
                imported = importlib.import_module(dotted)
            except ImportError:
                continue  # `config.describe_block()`, `tokenizer.encode_ids_engine()`: objects, not modules
            assert hasattr(imported, name), f"{page.name} names `{module}.{name}()`, but {dotted} has no {name}"


def test_tokenizer_text_field_help_names_every_record_format_it_reads():
    """`tokenizer train --help`: --text-field applies to every record format the inputs help lists (.csv included)."""
    parser = _subparser("tokenizer", "train")
    helps = {action.dest: action.help for action in parser._actions}
    record_suffixes = [suffix for suffix in re.findall(r"\.\w+", helps["inputs"])
                       if suffix in (".jsonl", ".json", ".parquet", ".csv")]
    assert ".csv" in record_suffixes
    for suffix in record_suffixes:
        assert re.search(rf"{re.escape(suffix)}(?![\w])", helps["text_field"]), \
            f"--text-field's help omits {suffix}, whose column it picks: {helps['text_field']!r}"


def test_run_help_names_the_settings_a_finished_run_accepts():
    """`run --help` says which changed settings are not refused; docs/training.md's list is benchmark_*, run_name,
    eval_batches and peak_flops (they re-run train's finishing step and export)."""
    description = _subparser("run").description
    for key in ("eval_batches", "peak_flops"):
        assert key in description or "only benchmark_*" not in description, \
            f"`run --help` says only benchmark_* changes are accepted, but {key} is too (docs/training.md): {description!r}"


@pytest.mark.parametrize("name", ["shakespeare.yaml", "shakespeare-gpu.yaml"])
def test_readme_config_table_gives_each_main_job_recipes_own_settings(name):
    """README said weight decay 1.0 for shakespeare-gpu.yaml after the recipe moved to 2.0: a reader copying it got
    the older recipe. Each figure of the row is read back from the YAML."""
    import yaml

    config = yaml.safe_load((REPO_ROOT / "training" / "configs" / name).read_text(encoding="utf-8"))
    model = config["model"]
    rows = [line for line in section(README.read_text(), "Configs").splitlines() if line.startswith(f"| `{name}`")]
    assert len(rows) == 1, f"README's config table has no single row for {name}"
    row = rows[0]
    assert f"{config['tokenizer_vocab_size']:,}-token BPE" in row and f"{model['n_layer']} × {model['n_embd']}" in row
    tokens = config["batch_size"] * config["block_size"] * config.get("gradient_accumulation_steps", 1)
    assert (f"{config['max_steps']} steps of {config['batch_size']} × {config['block_size']} tokens" in row
            or f"{config['max_steps']} steps of {tokens:,} tokens" in row)
    if model.get("resid_pdrop"):
        assert f"dropout {model['resid_pdrop']}" in row
    if config.get("weight_decay", 0.1) != 0.1:  # the project's default is not repeated in the table
        assert f"weight decay {config['weight_decay']}" in row


def test_each_training_example_of_a_block_trains_a_folder_of_its_own():
    """Copied in order, docs/training.md's second example trained into the first one's folder with other settings and
    was refused, and the launch examples met README's one-process smoke run in runs/smoke (found by a new-user walk).
    Within a block, two train commands with one config need distinct run_names; a launched one names its own."""
    for page in [README, *DOCS]:
        for block in fenced_blocks(page.read_text(encoding="utf-8"), "bash"):
            commands = [line for line in block.replace("\\\n", " ").splitlines()
                        if re.search(r"(hf-gpt-custom|hf_gpt_custom\.cli) train ", line)]
            folders = []
            for command in commands:
                config = re.search(r"training/configs/[\w.-]+\.yaml", command)
                run_name = re.search(r"\brun_name=(\S+)", command)
                folders.append(run_name.group(1) if run_name else config.group(0) if config else command)
                if re.search(r"accelerate launch|torchrun", command) and "smoke.yaml" in command:  # README runs it
                    assert run_name, f"{page.name}: a launch example without a run_name of its own: {command}"
            assert len(folders) == len(set(folders)), f"{page.name}: two examples train one folder: {folders}"
