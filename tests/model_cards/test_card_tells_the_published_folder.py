"""The card describes the folder export writes, not final/ as it was saved: the tokenizer class and the code a user
is told to read are the ones in the exported folder, and the layer names it gives for PEFT are the model's."""

from __future__ import annotations

import json
import re

from tests.helpers import make_tiny_run, save_tiny_model


def test_a_gpt2_tokenizer_that_export_republishes_as_ours_is_described_as_ours(tmp_path):
    """A run initialised from a transformers GPT-2 folder (or given its tokenizer) keeps `GPT2Tokenizer` in final/.
    Export's load_folder_tokenizer finds that ours encodes alike and ships ours (tokenizer_class GPTCustomTokenizer,
    auto_map -> tokenization_gpt_custom.py), but the card reads final/'s class: "kept as its own class
    (`GPT2Tokenizer`)", and its "Read the code" list leaves out tokenization_gpt_custom.py and the modules it imports,
    which AutoTokenizer(trust_remote_code=True) runs."""
    from transformers import GPT2TokenizerFast

    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.manifest import write_manifest

    run_dir = make_tiny_run(tmp_path / "runs" / "from-gpt2", with_eval=False)
    final = run_dir / "final"
    GPT2TokenizerFast.from_pretrained(final).save_pretrained(final)  # what a GPT-2 folder's final/ holds
    assert json.loads((final / "tokenizer_config.json").read_text())["tokenizer_class"] == "GPT2Tokenizer"
    write_manifest(final)
    out_dir = export_folder(run_dir, tmp_path / "export", repo_id="alice/from-gpt2")

    shipped = json.loads((out_dir / "tokenizer_config.json").read_text())
    assert shipped["tokenizer_class"] == "GPTCustomTokenizer"  # export ships ours
    card = (out_dir / "README.md").read_text(encoding="utf-8")
    tokenizer_section = re.search(r"## Tokenizer\n(.*?)\n## ", card, re.S).group(1)
    assert "GPT2Tokenizer" not in tokenizer_section, tokenizer_section
    read_the_code = re.search(r"Read the code before running it.*?:\n(.*?)\n", card, re.S).group(1)
    shipped_code = sorted(path.name for path in out_dir.glob("*.py"))
    assert sorted(re.findall(r"`([\w.]+\.py)`", read_the_code)) == shipped_code


def test_the_peft_names_the_card_gives_are_the_models_layers(tmp_path):
    """A Llama-style block (SwiGLU, RMSNorm: a converted Llama folder or model.preset) has an MLP gate `c_gate` and no
    LayerNorm; the card still says the layers are `c_attn`, `c_proj`, `c_fc` … "all plain torch.nn.Linear /
    LayerNorm" and suggests target_modules=["c_attn", "c_proj", "c_fc"], which leaves the gate out of LoRA."""
    import torch

    from hf_gpt_custom.model_cards.card import build_model_card
    from hf_gpt_custom.manifest import write_manifest

    run_dir = make_tiny_run(tmp_path / "runs" / "swiglu", with_eval=False)
    final = run_dir / "final"
    vocab_size = json.loads((final / "config.json").read_text())["vocab_size"]
    (final / "model.safetensors").unlink()
    model = save_tiny_model(final, vocab_size, seed=0, mlp_type="swiglu", norm_type="rmsnorm",
                            position_embedding_type="rope", attention_bias=False, mlp_bias=False,
                            bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1)
    write_manifest(final)
    linear_names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                    if isinstance(module, torch.nn.Linear) and name != "lm_head"}
    assert "c_gate" in linear_names

    card = build_model_card(run_dir).text
    peft = re.search(r"\*\*Fine-tuning with PEFT\.\*\*(.*?)\n\n", card, re.S).group(1)
    assert "c_gate" in peft, peft
    assert "LayerNorm`" not in peft or "RMSNorm" in peft, peft
    suggested = json.loads(re.search(r"target_modules=(\[.*?\])", peft, re.S).group(1))
    assert sorted(suggested) == sorted(linear_names)  # every Linear of the blocks: the gate too
