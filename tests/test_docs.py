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
