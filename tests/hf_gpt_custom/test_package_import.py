"""`import hf_gpt_custom` is light (no torch, no transformers) yet registers with the Auto classes — and gives PEFT
default LoRA targets — whichever is imported first. Each case runs in a fresh interpreter: the import order is
the point."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

AUTO_CLASSES_RESOLVE = """
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_MAPPING
from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING
config = AutoConfig.for_model("gpt_custom", n_layer=1, n_embd=32, n_head=2, vocab_size=300, n_positions=16)
import hf_gpt_custom as package
assert type(config) is package.GPTCustomConfig, type(config)
assert MODEL_FOR_CAUSAL_LM_MAPPING[type(config)] is package.GPTCustomForCausalLM
assert MODEL_MAPPING[type(config)] is package.GPTCustomModel
tokenizer_classes = TOKENIZER_MAPPING[type(config)]  # a class in transformers 5 (a (slow, fast) pair before)
assert package.GPTCustomTokenizerFast in (tokenizer_classes if isinstance(tokenizer_classes, tuple) else (tokenizer_classes,))
assert package.GPTCustomForCausalLM._auto_class == "AutoModelForCausalLM"  # auto_map written on save
print("registered")
"""


def _run(code: str) -> str:
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout


def test_import_loads_neither_torch_nor_transformers():
    out = _run("import sys, hf_gpt_custom, hf_gpt_custom.errors, hf_gpt_custom.model_folder, hf_gpt_custom.hub, "
               "hf_gpt_custom.run, hf_gpt_custom.cli\nprint(sorted({'torch', 'transformers', 'peft'} & set(sys.modules)))")
    assert out.strip() == "[]"


def test_package_then_peft_registers_auto_classes_and_peft_targets():
    """The common order in a user's script: the package (light), then peft, which imports transformers."""
    out = _run("import hf_gpt_custom\nimport peft\n"
               "from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as lora\n"
               "print(lora['gpt_custom'])\n" + AUTO_CLASSES_RESOLVE)
    assert out.split() == ["['c_attn']", "registered"]


def test_a_submodule_importing_transformers_registers_once_it_is_complete():
    """transformers finishes loading while modeling_gpt_custom is half-imported: registration waits for it."""
    first = "from hf_gpt_custom.modeling_gpt_custom import GPTCustomForCausalLM"
    assert _run(first + "\n" + AUTO_CLASSES_RESOLVE).strip() == "registered"


@pytest.mark.slow
@pytest.mark.parametrize("first", [
    "import transformers\nimport hf_gpt_custom",                 # transformers already imported: registers at once
    "import hf_gpt_custom\nimport transformers.modeling_utils",  # a transformers submodule first
], ids=["transformers-first", "transformers-submodule"])
def test_auto_classes_resolve_in_other_import_orders(first):
    assert _run(first + "\n" + AUTO_CLASSES_RESOLVE).strip() == "registered"


REPO_ROOT = Path(__file__).resolve().parents[2]
REPO_ROOT_PACKAGES = ("training", "eval", "model_cards")


def test_the_only_installed_top_level_name_is_ours():
    """`eval`, `training` and `model_cards` would collide with other projects in a user's environment: they install
    as hf_gpt_custom.eval etc. (pyproject's package-dir), while the folders stay at the repo root."""
    # From "/", so that a stale hf_gpt_custom.egg-info in the repo root (on sys.path as the current directory) is not read.
    out = _run("import os, sys; os.chdir('/'); sys.path = [p for p in sys.path if p not in ('', os.getcwd())]\n"
               "import importlib.metadata as md; print(md.distribution('hf-gpt-custom').read_text('top_level.txt'))\n"
               "import hf_gpt_custom.training.config as c, hf_gpt_custom.eval.task as t, hf_gpt_custom.model_cards.card as m\n"
               "print(c.__file__, t.__file__, m.__file__)")
    top_level, *files = out.split()
    assert top_level == "hf_gpt_custom"
    assert files == [str(REPO_ROOT / "training" / "config.py"), str(REPO_ROOT / "eval" / "task.py"),
                           str(REPO_ROOT / "model_cards" / "card.py")]


def test_no_code_imports_the_repo_root_folders_by_their_folder_names():
    """From the repo root `import training` still resolves (the current directory is on sys.path) — to a second copy
    of every module, with its own classes and state. Everything must import the installed names."""
    pattern = re.compile(rf"^\s*(from|import)\s+({'|'.join(REPO_ROOT_PACKAGES)})(\.|\s|$)", re.MULTILINE)
    offenders = [f"{path.relative_to(REPO_ROOT)}: {match.group(0).strip()}"
                 for folder in ("hf_gpt_custom", *REPO_ROOT_PACKAGES, "tests", "benchmarks")
                 for path in sorted((REPO_ROOT / folder).rglob("*.py"))
                 for match in pattern.finditer(path.read_text(encoding="utf-8"))]
    assert offenders == [], "import hf_gpt_custom.<package> instead:\n" + "\n".join(offenders)


def _sibling_imports(path: Path) -> set[str]:
    """Modules of the package `path` imports relatively, at the top or inside a function (TYPE_CHECKING blocks
    aside: they never run; transformers reads them only to ship the files)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    never_run = {id(node) for block in ast.walk(tree)
                 if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
                 for node in ast.walk(block)}
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and id(node) not in never_run:
            imported |= {node.module.split(".")[0]} if node.module else {alias.name for alias in node.names}
    return imported


def test_the_package_modules_import_each_other_without_a_circle():
    """Issue 24.5: modeling <-> heads <-> converters and modeling <-> model_folder were held together by imports
    inside functions. Every import counts here, wherever it is written."""
    package = REPO_ROOT / "hf_gpt_custom"
    modules = {path.stem for path in package.glob("*.py")}
    imports = {name: _sibling_imports(package / f"{name}.py") & modules for name in modules}

    def visit(module: str, path: list[str]) -> None:
        for imported in sorted(imports[module]):
            assert imported not in path, f"import circle: {' -> '.join([*path, imported])}"
            visit(imported, [*path, imported])

    for module in sorted(modules):
        visit(module, [module])
