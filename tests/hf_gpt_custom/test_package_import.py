"""`import hf_gpt_custom` is light (no torch, no transformers) yet registers with the Auto classes — and gives PEFT
default LoRA targets — whichever is imported first. Each case runs in a fresh interpreter: the import order is
the point."""

from __future__ import annotations

import subprocess
import sys

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
