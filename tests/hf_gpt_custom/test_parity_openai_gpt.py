"""Our post-LN block is GPT-1: the same weights give the logits, loss and greedy tokens of transformers'
OpenAIGPTLMHeadModel, converted in either direction, and from_pretrained converts a saved openai-gpt folder."""

import pytest
import torch
from safetensors.torch import save_file
from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
from hf_gpt_custom.convert_openai_gpt import (
    config_from_openai_gpt,
    from_openai_gpt_model,
    openai_gpt_config_from,
    to_openai_gpt_model,
)
from hf_gpt_custom.errors import UserError

from tests.helpers import (
    assert_folder_converts_on_load,
    assert_same_logits,
    assert_same_loss,
    padded_batch,
    randomize_,
)

TINY_GPT1 = dict(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4)
# afn as transformers' OpenAIGPTConfig names it: "gelu" there is GPT-2's tanh approximation (gelu_new).
AFNS = ["gelu", "relu", "silu"]


def make_openai_gpt_pair(attn_implementation: str = "sdpa", seed: int = 0, **overrides):
    """(ours, reference): a random OpenAIGPTLMHeadModel (biases and LayerNorms random too) and ours converted."""
    torch.manual_seed(seed)
    reference = randomize_(OpenAIGPTLMHeadModel(OpenAIGPTConfig(**{**TINY_GPT1, **overrides}))).eval()
    ours = from_openai_gpt_model(reference, GPTCustomForCausalLM)
    ours.set_attn_implementation(attn_implementation)
    return ours, reference


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("afn", [*AFNS, "swish"])  # "swish" is silu in transformers' ACT_FNS
# eps this large moves every LayerNorm's output by percent: a converter that dropped it would be far off.
@pytest.mark.parametrize("layer_norm_epsilon", [1e-5, 0.3])
def test_logits_match_openai_gpt(attn_implementation, afn, layer_norm_epsilon):
    ours, reference = make_openai_gpt_pair(attn_implementation, afn=afn, layer_norm_epsilon=layer_norm_epsilon)
    assert ours.config.norm_position == "post" and not any("ln_f" in key for key in ours.state_dict())
    input_ids, attention_mask = padded_batch()
    assert_same_logits(ours, reference, input_ids)
    assert_same_logits(ours, reference, input_ids, attention_mask=attention_mask)


@pytest.mark.parametrize("afn", AFNS)
def test_our_gpt1_block_converts_to_openai_gpt_with_the_same_logits(afn):
    """The other direction: a random model of ours (post-LN, learned positions) -> OpenAIGPTLMHeadModel."""
    activation = {"gelu": "gelu_new", "relu": "relu", "silu": "silu"}[afn]
    config = GPTCustomConfig(**TINY_GPT1, norm_position="post", activation_function=activation)
    ours = randomize_(GPTCustomForCausalLM(config)).eval()
    reference = to_openai_gpt_model(ours)
    assert reference.config.afn == afn
    assert_same_logits(reference, ours, torch.randint(0, 99, (2, 17)))


def test_a_bf16_model_converts_to_a_bf16_openai_gpt():
    config = GPTCustomConfig(**TINY_GPT1, norm_position="post")
    ours = randomize_(GPTCustomForCausalLM(config)).eval().to(torch.bfloat16)
    reference = to_openai_gpt_model(ours)
    assert reference.dtype == torch.bfloat16  # was float32
    input_ids = torch.randint(0, 99, (2, 11))
    with torch.no_grad():
        torch.testing.assert_close(reference(input_ids).logits, ours(input_ids).logits, rtol=2e-2, atol=2e-2)


def test_a_bf16_openai_gpt_in_memory_converts_to_a_bf16_model_with_the_same_weights():
    _, reference = make_openai_gpt_pair()
    reference = reference.to(torch.bfloat16)
    ours = from_openai_gpt_model(reference, GPTCustomForCausalLM)
    assert ours.dtype == reference.dtype == torch.bfloat16
    assert torch.equal(ours.transformer.wte.weight, reference.transformer.tokens_embed.weight)
    assert torch.equal(ours.transformer.h[0].attn.c_attn.weight, reference.transformer.h[0].attn.c_attn.weight.t())


def test_padded_vocabulary_is_cut_back_on_export_without_changing_logits():
    config = GPTCustomConfig(**TINY_GPT1, norm_position="post", pad_vocab_size_to_multiple_of=64)
    ours = randomize_(GPTCustomForCausalLM(config)).eval()
    reference = to_openai_gpt_model(ours)
    assert reference.config.vocab_size == 99 and reference.transformer.tokens_embed.weight.shape[0] == 99
    assert_same_logits(reference, ours, torch.randint(0, 99, (2, 11)))


def test_loss_matches_openai_gpt_and_ignores_minus_100():
    assert_same_loss(*make_openai_gpt_pair())


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_greedy_generate_is_identical_token_for_token(attn_implementation):
    """OpenAIGPTLMHeadModel has no cache (it recomputes the whole prefix each step); ours decodes with its cache."""
    ours, reference = make_openai_gpt_pair(attn_implementation)
    prompt = torch.randint(0, 98, (1, 7))
    settings = dict(max_new_tokens=20, do_sample=False, pad_token_id=0)
    assert ours.generate(prompt, **settings).tolist() == reference.generate(prompt, **settings).tolist()


def test_from_pretrained_converts_an_openai_gpt_folder(tmp_path):
    _, reference = make_openai_gpt_pair()
    reference.save_pretrained(tmp_path)
    loaded = assert_folder_converts_on_load(tmp_path, reference, attn_implementation="eager")
    assert loaded.config.norm_position == "post" and loaded.config._attn_implementation == "eager"
    assert loaded.transformer.wte.weight.data_ptr() == loaded.lm_head.weight.data_ptr()  # tied, as GPT-1's head


def test_original_layout_without_prefix_and_with_mask_buffers(tmp_path):
    """openai-community/openai-gpt's file is an OpenAIGPTModel state dict (no "transformer."); old files carry the
    causal mask as h.N.attn.bias."""
    _, reference = make_openai_gpt_pair()
    state = {key.removeprefix("transformer."): value.contiguous() for key, value in reference.state_dict().items()
             if key != "lm_head.weight"}
    state["h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 64, 64))
    save_file(state, tmp_path / "model.safetensors")
    reference.config.save_pretrained(tmp_path)
    loaded = GPTCustomForCausalLM.from_pretrained(tmp_path)
    assert_same_logits(loaded, reference, torch.randint(0, 99, (2, 10)))


def test_an_old_file_with_saved_position_ids_converts(tmp_path):
    """transformers < 4.31 saved OpenAIGPTModel's position_ids buffer into the file: a buffer, not a weight."""
    _, reference = make_openai_gpt_pair()
    state = {key.removeprefix("transformer."): value.contiguous() for key, value in reference.state_dict().items()
             if key != "lm_head.weight"}
    state["position_ids"] = torch.arange(64)[None]
    save_file(state, tmp_path / "model.safetensors")
    reference.config.save_pretrained(tmp_path)
    loaded = GPTCustomForCausalLM.from_pretrained(tmp_path)
    assert_same_logits(loaded, reference, torch.randint(0, 99, (2, 10)))


def test_an_untied_openai_gpt_folder_converts_with_its_own_head(tmp_path):
    """The converter used to drop lm_head.weight and then report it missing (issue 22.12)."""
    _, reference = make_openai_gpt_pair(tie_word_embeddings=False)
    assert not torch.equal(reference.lm_head.weight, reference.transformer.tokens_embed.weight)
    reference.save_pretrained(tmp_path)
    loaded = GPTCustomForCausalLM.from_pretrained(tmp_path)
    assert not loaded.config.tie_word_embeddings and torch.equal(loaded.lm_head.weight, reference.lm_head.weight)
    assert_same_logits(loaded, reference, torch.randint(0, 99, (2, 10)))


def test_an_untied_model_converts_back_to_an_untied_openai_gpt():
    """transformers 5's OpenAIGPTLMHeadModel keeps an untied head (tie_word_embeddings=False); the export refused it
    as something OpenAI GPT "cannot express". Reference: the untied OpenAIGPTLMHeadModel it came from."""
    ours, reference = make_openai_gpt_pair(tie_word_embeddings=False)
    back = to_openai_gpt_model(ours)
    assert not back.config.tie_word_embeddings
    assert back.lm_head.weight.data_ptr() != back.transformer.tokens_embed.weight.data_ptr()
    assert torch.equal(back.lm_head.weight, reference.lm_head.weight)
    assert_same_logits(back, reference, torch.randint(0, 99, (2, 10)))


def test_the_gpt1_preset_is_the_block_of_the_released_openai_gpt():
    """transformers' OpenAIGPTConfig() defaults describe the released openai-gpt checkpoint; converting them must give
    the gpt1 preset (else the released weights would load into a different function)."""
    released = config_from_openai_gpt(OpenAIGPTConfig().to_dict())
    preset = GPTCustomConfig.from_preset("gpt1")
    fields = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "inner_dim", "activation_function",
              "norm_position", "norm_type", "position_embedding_type", "mlp_type", "attention_bias", "mlp_bias",
              "n_kv_head", "layer_norm_epsilon", "tie_word_embeddings")
    assert {name: getattr(preset, name) for name in fields} == {name: getattr(released, name) for name in fields}


def test_openai_gpt_options_we_cannot_reproduce_are_refused_by_name():
    with pytest.raises(UserError, match="afn='gelu_fast'"):
        config_from_openai_gpt({**TINY_GPT1, "model_type": "openai-gpt", "afn": "gelu_fast"})


@pytest.mark.parametrize("option", [
    {"norm_position": "pre"}, {"position_embedding_type": "rope"}, {"norm_type": "rmsnorm"}, {"mlp_type": "swiglu"},
    {"attention_bias": False}, {"n_kv_head": 2}, {"n_inner": 48},
    {"activation_function": "gelu"},
])
def test_exporting_a_block_openai_gpt_cannot_express_names_the_field(option):
    config = GPTCustomConfig(**{**TINY_GPT1, "norm_position": "post", **option})
    named = {"n_inner": "inner_dim"}.get(next(iter(option)), next(iter(option)))
    with pytest.raises(UserError, match=f"{named}=.*, which OpenAIGPTLMHeadModel cannot express"):
        openai_gpt_config_from(config)


def test_exporting_heads_of_another_width_than_n_embd_over_n_head_is_refused_by_name():
    """OpenAIGPTConfig has no head_dim: its heads split n_embd. head_dim=16 on 32 wide with 4 heads used to reach
    load_state_dict and fail there with a size-mismatch traceback."""
    ours = GPTCustomForCausalLM(GPTCustomConfig(**TINY_GPT1, norm_position="post", head_dim=16)).eval()
    with pytest.raises(UserError, match="head_dim=16, which OpenAIGPTLMHeadModel cannot express"):
        to_openai_gpt_model(ours)
