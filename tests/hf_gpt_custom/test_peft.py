"""PEFT on our model: our layers carry GPT-2's names, so a bare `LoraConfig(task_type="CAUSAL_LM")` adapts c_attn
once hf_gpt_custom is imported (it registers GPT-2's defaults for model_type gpt_custom), and naming the layers
explicitly works as the card documents."""

from __future__ import annotations

import pytest
import torch

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.transformers_compat import CACHE_NAME

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
        if name == "ours" and CACHE_NAME == "cache":  # transformers 5.24 hands the cache over as `cache=`
            with pytest.raises(UserError, match="PEFT's PREFIX_TUNING cannot generate with a KV cache.*use_cache=False"):
                model.generate(input_ids=input_ids, max_new_tokens=4, do_sample=False)
        elif name == "ours":  # 5.23 passes past_key_values, which PEFT reads: the cached tokens are the prefix's
            cached = model.generate(input_ids=input_ids, max_new_tokens=4, do_sample=False)
            assert cached.tolist() == sequence.tolist()
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


def _greedy_through_forward(model, input_ids, steps: int) -> list[int]:
    """What a PEFT model predicts: greedy decoding through its own forward, which adds the virtual tokens each call."""
    sequence = input_ids
    with torch.no_grad():
        for _ in range(steps):
            logits = model(input_ids=sequence, attention_mask=torch.ones_like(sequence)).logits
            sequence = torch.cat([sequence, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return sequence[0, input_ids.shape[1]:].tolist()


@pytest.mark.parametrize("make_config", [
    lambda: peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4),
    lambda: peft.PromptEncoderConfig(task_type="CAUSAL_LM", num_virtual_tokens=4, encoder_hidden_size=16),
], ids=["prompt_tuning", "p_tuning"])
def test_prompt_learning_generates_what_its_forward_predicts_or_is_refused_by_name(make_config):
    """PEFT (0.21) looks for the cache under past_key_values, generate() on transformers >= 5.24 passes cache=: with
    a cache, prompt and p-tuning put their virtual tokens in again at every step (the cache grows by 5 a step here)
    and, on transformers' GPT-2 with the same weights and prompt, generate other tokens than the tuned model's own
    forward predicts. Ours refuses by name; use_cache=False gives the forward's tokens, on ours and on GPT-2."""
    from hf_gpt_custom.transformers_compat import CACHE_NAME
    from tests.helpers import make_gpt2_pair

    ours, gpt2 = make_gpt2_pair()
    input_ids = torch.randint(1, 99, (1, 8), generator=torch.Generator().manual_seed(1))
    decoded = {}
    for name, model in (("ours", ours), ("gpt2", gpt2)):
        torch.manual_seed(0)
        tuned = peft.get_peft_model(model, make_config()).eval()
        generator = torch.Generator().manual_seed(5)
        with torch.no_grad():  # a "trained" prompt, the same for both, one that changes the tokens
            for parameter in tuned.prompt_encoder.parameters():
                parameter.copy_(2 * torch.randn(parameter.shape, generator=generator))
        expected = _greedy_through_forward(tuned, input_ids, 6)
        with torch.no_grad():
            generated = tuned.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                       max_new_tokens=6, do_sample=False, use_cache=False)
        assert generated[0, 8:].tolist() == expected, name
        decoded[name] = expected
        if CACHE_NAME != "cache":
            continue
        with torch.no_grad():
            if name == "gpt2":  # the silent case this refusal is for
                cached = tuned.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                        max_new_tokens=6, do_sample=False)
                assert cached[0, 8:].tolist() != expected
                continue
            for cache_options in ({}, {"cache_implementation": "static"}):
                with pytest.raises(UserError, match="cannot generate with a KV cache.*use_cache=False"):
                    tuned.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=6,
                                   do_sample=False, **cache_options)
    assert decoded["ours"] == decoded["gpt2"]


def test_a_plain_model_generates_with_its_cache_after_a_peft_wrapper_let_go():
    """The refusal looks at the PEFT model generate() runs under, not at the model class: LoRA (not prompt learning)
    and the base model itself keep their cache, and give the same tokens as without it."""
    from tests.helpers import make_gpt2_pair

    ours, _ = make_gpt2_pair()
    input_ids = torch.randint(1, 99, (1, 8), generator=torch.Generator().manual_seed(1))
    lora = peft.get_peft_model(ours, peft.LoraConfig(task_type="CAUSAL_LM", target_modules=["c_attn"])).eval()
    with torch.no_grad():
        for use_cache in (True, False):
            generated = lora.generate(input_ids=input_ids, max_new_tokens=5, do_sample=False, use_cache=use_cache)
            assert generated[0, 8:].tolist() == _greedy_through_forward(lora, input_ids, 5)


def test_prefix_tuning_scores_a_left_padded_batch_as_its_rows_alone():
    """PEFT's prefix tuning hands the model a mask with num_virtual_tokens more columns than the labels. The left-pad
    rule (a pad column's prediction of the row's first token is not scored) reads the mask's last columns, so the
    batch's loss is the token-weighted mean of the rows' losses alone, as without PEFT. Reference: each row alone."""
    from tests.helpers import make_gpt2_pair

    ours, _ = make_gpt2_pair()
    tuned = peft.get_peft_model(ours, peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=3)).eval()
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for parameter in tuned.prompt_encoder.parameters():
            parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator))
    rows = [torch.randint(1, 99, (1, n), generator=torch.Generator().manual_seed(10 + n)) for n in (9, 5)]
    batch, mask = torch.zeros(2, 9, dtype=torch.long), torch.zeros(2, 9, dtype=torch.long)
    for i, row in enumerate(rows):
        batch[i, 9 - row.shape[1]:], mask[i, 9 - row.shape[1]:] = row[0], 1
    labels = batch.masked_fill(mask == 0, -100)  # as DataCollatorForLanguageModeling makes them
    with torch.no_grad():
        alone = sum(tuned(input_ids=row, attention_mask=torch.ones_like(row), labels=row).loss * (row.shape[1] - 1)
                    for row in rows) / sum(row.shape[1] - 1 for row in rows)
        together = tuned(input_ids=batch, attention_mask=mask, labels=labels).loss
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)


def test_prefix_tuning_of_a_grouped_query_model_without_its_shape_is_refused_naming_it():
    """PEFT sizes a prefix from n_embd and n_head: on a grouped-query model the first cache update failed in torch.cat
    ("Sizes of tensors must match"; the newuser4 walk). Refused naming the two settings, which then work (the test
    above compares them with LlamaForCausalLM)."""
    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM

    config = GPTCustomConfig(vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=4, n_kv_head=2,
                             position_embedding_type="rope", tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    prefixed = peft.get_peft_model(GPTCustomForCausalLM(config).eval(),
                                   peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=3)).eval()
    input_ids = torch.randint(1, 97, (1, 8), generator=torch.Generator().manual_seed(1))
    with pytest.raises(UserError, match=r"holds 4 key/value heads of width 8.*n_kv_head=2 of head_dim=8.*"
                                        r"token_dim=16, num_attention_heads=2"):
        prefixed(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
