"""A folder written by save_pretrained loads with trust_remote_code=True where hf_gpt_custom is not importable."""

import json
import os

import torch

from hf_gpt_custom import GPTCustomForCausalLM

# Runs under the `python_without_project` fixture (tests/conftest.py).
LOAD_IN_CLEAN_PROCESS = """
import json, sys
import torch
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

folder, input_ids = sys.argv[1], torch.tensor(json.loads(sys.argv[2]))
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
base = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
with torch.no_grad():
    logits = model(input_ids).logits
    hidden = base(input_ids).last_hidden_state
generated = model.generate(input_ids[:1], max_new_tokens=6, do_sample=False, pad_token_id=0)
print(json.dumps({
    "classes": [type(config).__module__, type(model).__module__, type(base).__module__],
    "logits": logits.tolist(), "hidden": hidden.tolist(), "generated": generated.tolist(),
}))
"""


def test_saved_folder_loads_as_remote_code_with_identical_outputs(tmp_path, tiny_config, python_without_project):
    model = GPTCustomForCausalLM(tiny_config).eval()
    model.save_pretrained(tmp_path)
    assert {"configuration_gpt_custom.py", "modeling_gpt_custom.py", "block_variants.py", "convert_gpt2.py",
            "heads_gpt_custom.py", "transformers_compat.py"} <= set(os.listdir(tmp_path))

    input_ids = torch.randint(0, 99, (2, 7))
    remote = python_without_project(LOAD_IN_CLEAN_PROCESS, tmp_path, json.dumps(input_ids.tolist()))

    assert all(module.startswith("transformers_modules.") for module in remote["classes"]), remote["classes"]
    with torch.no_grad():
        logits = model(input_ids).logits
        hidden = model.transformer(input_ids).last_hidden_state
    assert torch.equal(torch.tensor(remote["logits"]), logits)
    assert torch.equal(torch.tensor(remote["hidden"]), hidden)
    assert remote["generated"] == model.generate(input_ids[:1], max_new_tokens=6, do_sample=False, pad_token_id=0).tolist()
