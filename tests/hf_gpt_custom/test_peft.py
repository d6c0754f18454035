"""PEFT on our model: our layers carry GPT-2's names, so a bare `LoraConfig(task_type="CAUSAL_LM")` adapts c_attn
once hf_gpt_custom is imported (it registers GPT-2's defaults for model_type gpt_custom), and naming the layers
explicitly works as the card documents."""

from __future__ import annotations

import pytest
import torch

peft = pytest.importorskip("peft")  # a dev extra: not installed in a user's environment


def _tiny_model(tiny_config):
    from hf_gpt_custom import GPTCustomForCausalLM

    torch.manual_seed(0)
    return GPTCustomForCausalLM(tiny_config).eval()


def _adapted_layers(model) -> list[str]:
    return sorted({name.split(".lora_A")[0].rsplit(".", 1)[-1] for name, _ in model.named_parameters() if "lora_A" in name})


def test_a_bare_lora_config_targets_the_fused_attention_projection(tiny_config):
    import hf_gpt_custom

    hf_gpt_custom.register_peft_target_modules()  # a no-op when importing peft already did it
    model = peft.get_peft_model(_tiny_model(tiny_config), peft.LoraConfig(task_type="CAUSAL_LM"))
    assert _adapted_layers(model) == ["c_attn"]
    assert sum(1 for name, _ in model.named_parameters() if "lora_A" in name) == tiny_config.n_layer
    input_ids = torch.randint(0, tiny_config.vocab_size, (1, 5))
    with torch.no_grad():  # LoRA's B starts at zero: the adapted model is the base model until trained
        torch.testing.assert_close(model(input_ids).logits, model.get_base_model()(input_ids).logits)


def test_without_the_registration_peft_asks_for_target_modules(tiny_config, monkeypatch):
    from peft.utils import constants

    monkeypatch.delitem(constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, "gpt_custom", raising=False)
    with pytest.raises(ValueError, match="Please specify `target_modules`"):
        peft.get_peft_model(_tiny_model(tiny_config), peft.LoraConfig(task_type="CAUSAL_LM"))


def test_the_documented_layer_names_exist_and_adapt(tiny_config):
    config = peft.LoraConfig(task_type="CAUSAL_LM", target_modules=["c_attn", "c_proj", "c_fc"])
    model = peft.get_peft_model(_tiny_model(tiny_config), config)
    assert _adapted_layers(model) == ["c_attn", "c_fc", "c_proj"]
