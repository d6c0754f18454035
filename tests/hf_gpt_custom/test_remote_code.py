"""A folder written by save_pretrained loads with trust_remote_code=True where hf_gpt_custom is not importable."""

import json
import os
import subprocess
import sys

import torch

from hf_gpt_custom import GPTCustomForCausalLM

# Runs in a fresh interpreter. The package is installed (editable) in this virtualenv, so "not importable" is made
# explicit: a None entry in sys.modules makes `import hf_gpt_custom` raise ImportError before any finder runs.
LOAD_IN_CLEAN_PROCESS = """
import json, sys
sys.modules["hf_gpt_custom"] = None
try:
    import hf_gpt_custom
    raise SystemExit("hf_gpt_custom should not be importable here")
except ImportError:
    pass
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


def test_saved_folder_loads_as_remote_code_with_identical_outputs(tmp_path, tiny_config):
    model = GPTCustomForCausalLM(tiny_config).eval()
    model.save_pretrained(tmp_path)
    assert {"configuration_gpt_custom.py", "modeling_gpt_custom.py", "convert_gpt2.py", "decode_step.py", "kv_cache.py", "onednn_linear.py"} <= set(os.listdir(tmp_path))

    input_ids = torch.randint(0, 99, (2, 7))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, "-c", LOAD_IN_CLEAN_PROCESS, str(tmp_path), json.dumps(input_ids.tolist())],
        cwd=tmp_path.parent, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    remote = json.loads(result.stdout.strip().splitlines()[-1])

    assert all(module.startswith("transformers_modules.") for module in remote["classes"]), remote["classes"]
    with torch.no_grad():
        logits = model(input_ids).logits
        hidden = model.transformer(input_ids).last_hidden_state
    assert torch.equal(torch.tensor(remote["logits"]), logits)
    assert torch.equal(torch.tensor(remote["hidden"]), hidden)
    assert remote["generated"] == model.generate(input_ids[:1], max_new_tokens=6, do_sample=False, pad_token_id=0).tolist()
