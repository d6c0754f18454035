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


def test_prefix_tuning_generates_what_its_forward_predicts_or_is_refused_by_name(tmp_path):
    """PEFT (0.21) passes a prefix-tuning prompt as `past_key_values`, while generate() on transformers >= 5.24
    passes `cache=`: transformers' GPT-2 keeps `cache` and drops the prefix (generates as if untuned), ours refuses
    naming the way that works, `use_cache=False`, which gives the greedy decode of the PEFT model's own forward on
    ours and on GPT-2 with the same weights."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom import GPTCustomForCausalLM

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=97, n_positions=64, n_embd=24, n_layer=2, n_head=3, bos_token_id=0,
                               eos_token_id=0)).save_pretrained(tmp_path)
    input_ids = torch.randint(1, 97, (1, 8), generator=torch.Generator().manual_seed(1))
    decoded = {}
    for name, model_class in (("gpt2", GPT2LMHeadModel), ("ours", GPTCustomForCausalLM)):
        model = peft.get_peft_model(model_class.from_pretrained(tmp_path),
                                    peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4)).eval()
        generator = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for parameter in model.prompt_encoder.parameters():  # the same prefix for both, one that changes tokens
                parameter.copy_(3 * torch.randn(parameter.shape, generator=generator))
            sequence = input_ids
            for _ in range(4):  # greedy through PEFT's forward, which adds the prefix on every call
                logits = model(input_ids=sequence, attention_mask=torch.ones_like(sequence)).logits
                sequence = torch.cat([sequence, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            generated = model.generate(input_ids=input_ids, max_new_tokens=4, do_sample=False, use_cache=False)
        assert generated.tolist() == sequence.tolist(), name
        decoded[name] = sequence[0, 8:].tolist()
        if name == "ours":
            with pytest.raises(TypeError, match="got both cache= and past_key_values=.*use_cache=False"):
                model.generate(input_ids=input_ids, max_new_tokens=4, do_sample=False)
    assert decoded["ours"] == decoded["gpt2"]
    untuned = GPT2LMHeadModel.from_pretrained(tmp_path).generate(input_ids=input_ids, max_new_tokens=4, do_sample=False)
    assert untuned[0, 8:].tolist() != decoded["gpt2"]  # the prefix matters: dropping it would be seen


def test_prefix_tuning_of_a_grouped_query_model_with_its_shape_given_equals_llama():
    """docs/model.md: PEFT sizes a prefix from n_embd and n_head (our config's dict has no num_key_value_heads), so a
    grouped-query model needs token_dim = n_kv_head x head_dim and num_attention_heads = n_kv_head given. Reference:
    LlamaForCausalLM with the same weights and the same prefix, its shape found by PEFT itself."""
    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
    from hf_gpt_custom.convert_llama import to_llama_model

    config = GPTCustomConfig(vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=4, n_kv_head=2,
                             position_embedding_type="rope", norm_type="rmsnorm", mlp_type="swiglu", multiple_of=16,
                             attention_bias=False, mlp_bias=False, tie_word_embeddings=False, resid_pdrop=0.0,
                             embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    ours = GPTCustomForCausalLM(config).eval()
    llama = to_llama_model(ours).eval()
    input_ids = torch.randint(1, 97, (1, 8), generator=torch.Generator().manual_seed(1))
    logits = []
    for model, shape in ((llama, {}), (ours, {"token_dim": config.n_kv_head * config.head_dim,
                                              "num_attention_heads": config.n_kv_head})):
        prefixed = peft.get_peft_model(model, peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=3,
                                                                      **shape)).eval()
        generator = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for parameter in prefixed.prompt_encoder.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator))
            logits.append(prefixed(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits)
    torch.testing.assert_close(logits[1], logits[0], rtol=0, atol=1e-5)
