"""How the tokenizer's modules hang together: one home per fact, imports without a circle."""

import ast
from pathlib import Path

import hf_gpt_custom

PACKAGE_DIR = Path(hf_gpt_custom.__file__).parent


def _relative_imports(module: str) -> set[str]:
    """The sibling modules `module` imports with `from .x import ...` at module level."""
    tree = ast.parse((PACKAGE_DIR / f"{module}.py").read_text(encoding="utf-8"))
    return {node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module}


def test_tokenizer_modules_import_each_other_without_a_circle():
    """tokenization_gpt_custom and everything it ships as remote code (and the reference BPE): a tree, no cycle."""
    for root in ("tokenization_gpt_custom", "bpe_reference"):
        path, seen = [root], set()

        def visit(module: str) -> None:
            seen.add(module)
            for imported in sorted(_relative_imports(module)):
                assert imported not in path, f"import circle: {' -> '.join([*path, imported])}"
                if imported not in seen:
                    path.append(imported)
                    visit(imported)
                    path.pop()

        visit(root)


def test_gpt2_split_pattern_is_spelled_out_only_in_byte_level():
    from hf_gpt_custom import bpe_reference, byte_level, tiktoken_engine, tokenization_gpt_custom

    pattern_start = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+"""
    holders = sorted(path.name for path in PACKAGE_DIR.glob("*.py") if pattern_start in path.read_text("utf-8"))
    assert holders == ["byte_level.py"]
    assert bpe_reference.GPT2_SPLIT_PATTERN is tiktoken_engine.GPT2_SPLIT_PATTERN is byte_level.GPT2_SPLIT_PATTERN
    assert tokenization_gpt_custom.GPT2_SPLIT_PATTERN is byte_level.GPT2_SPLIT_PATTERN
