"""A folder written by save_pretrained loads with trust_remote_code=True where hf_gpt_custom is not importable, and
the class it gives converts a transformers GPT-2 folder there too (the converters ship with the code)."""

import json
import os

import torch

from hf_gpt_custom import GPTCustomForCausalLM

from tests.helpers import TINY_GPT2

# Runs under the `python_without_project` fixture (tests/conftest.py).
LOAD_IN_CLEAN_PROCESS = """
import json, sys
import torch
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

folder, input_ids, gpt2_folder = sys.argv[1], torch.tensor(json.loads(sys.argv[2])), sys.argv[3]
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
base = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
with torch.no_grad():
    logits = model(input_ids).logits
    hidden = base(input_ids).last_hidden_state
generated = model.generate(input_ids[:1], max_new_tokens=6, do_sample=False, pad_token_id=0)
static = model.generate(input_ids, max_new_tokens=6, do_sample=False, pad_token_id=0, cache_implementation="static")
converted = type(model).from_pretrained(gpt2_folder).eval()  # the converters came with the remote code
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # Trainer's label smoothing reads it
with torch.no_grad():
    converted_logits = converted(input_ids).logits
print(json.dumps({
    "classes": [type(config).__module__, type(model).__module__, type(base).__module__, type(converted).__module__],
    "logits": logits.tolist(), "hidden": hidden.tolist(), "generated": generated.tolist(),
    "static_generated": static.tolist(), "converted_logits": converted_logits.tolist(),
    "named_a_causal_lm": type(model).__name__ in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values(),
}))
"""


def test_saved_folder_loads_as_remote_code_with_identical_outputs(tmp_path, tiny_config, python_without_project):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPTCustomForCausalLM(tiny_config).eval()
    model.save_pretrained(tmp_path / "ours")
    assert {"configuration_gpt_custom.py", "architecture.py", "modeling_gpt_custom.py", "auto_classes.py",
            "block_variants.py", "causal_lm_loss.py", "checkpoint_files.py", "convert_common.py", "convert_gpt2.py",
            "convert_llama.py", "convert_openai_gpt.py",
            "heads_gpt_custom.py", "model_inputs.py", "static_decoding.py", "transformers_compat.py"} <= set(os.listdir(tmp_path / "ours"))
    gpt2 = GPT2LMHeadModel(GPT2Config(**TINY_GPT2)).eval()
    gpt2.save_pretrained(tmp_path / "gpt2")

    input_ids = torch.randint(0, 99, (2, 7))
    remote = python_without_project(LOAD_IN_CLEAN_PROCESS, tmp_path / "ours", json.dumps(input_ids.tolist()),
                                    tmp_path / "gpt2")

    assert all(module.startswith("transformers_modules.") for module in remote["classes"]), remote["classes"]
    assert remote["named_a_causal_lm"]  # Trainer shifts its labels for label smoothing (test_trainer.py)
    with torch.no_grad():
        logits = model(input_ids).logits
        hidden = model.transformer(input_ids).last_hidden_state
    assert torch.equal(torch.tensor(remote["logits"]), logits)
    assert torch.equal(torch.tensor(remote["hidden"]), hidden)
    assert remote["generated"] == model.generate(input_ids[:1], max_new_tokens=6, do_sample=False, pad_token_id=0).tolist()
    # the static cache's decoding loop (static_decoding.py) came with the code: the dynamic cache's tokens
    assert remote["static_generated"] == model.generate(input_ids, max_new_tokens=6, do_sample=False,
                                                        pad_token_id=0).tolist()
    with torch.no_grad():
        torch.testing.assert_close(torch.tensor(remote["converted_logits"]), gpt2(input_ids).logits, rtol=0, atol=1e-5)
