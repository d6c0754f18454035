"""Our RoPE/RMSNorm/SwiGLU/no-bias/GQA block is Llama: the same weights give the logits, loss and greedy tokens of
transformers' LlamaForCausalLM, converted in either direction, and from_pretrained converts a saved llama folder."""

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM, GPTCustomForSequenceClassification
from hf_gpt_custom.convert_llama import config_from_llama, from_llama_model, llama_config_from, to_llama_model
from hf_gpt_custom.errors import UserError

from tests.helpers import (
    assert_folder_converts_on_load,
    assert_same_logits,
    assert_same_loss,
    padded_batch,
    randomize_,
)

# GQA (2 kv heads for 4 query heads), a RoPE base far from 10,000 and an inner width off LLaMA's rule.
TINY_LLAMA = dict(vocab_size=99, hidden_size=32, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, bos_token_id=98,
                  eos_token_id=98, rope_parameters={"rope_type": "default", "rope_theta": 500.0})
SHAPES = {
    "gqa-theta500": {},
    "multi-query": dict(num_key_value_heads=1),
    "multi-head-theta10000": dict(num_key_value_heads=4, rope_parameters={"rope_type": "default", "rope_theta": 1e4}),
    # eps this large changes every norm's output by percent: a converter that dropped it would be far off.
    "large-rms-eps": dict(rms_norm_eps=0.3),
    "attention-and-mlp-biases": dict(attention_bias=True, mlp_bias=True),
    "tied-head": dict(tie_word_embeddings=True),
    "deeper-wider-heads": dict(hidden_size=48, num_attention_heads=3, num_key_value_heads=1, num_hidden_layers=3),
}


def make_llama_pair(attn_implementation: str = "sdpa", seed: int = 0, **overrides):
    """(ours, reference): a random LlamaForCausalLM (norm weights and any biases random too) and ours converted."""
    torch.manual_seed(seed)
    config = LlamaConfig(**{**TINY_LLAMA, **overrides}, attn_implementation=attn_implementation)
    reference = randomize_(LlamaForCausalLM(config)).eval()
    return from_llama_model(reference, GPTCustomForCausalLM), reference


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("shape", SHAPES)
def test_logits_match_llama(attn_implementation, shape):
    ours, reference = make_llama_pair(attn_implementation, **SHAPES[shape])
    assert ours.config._attn_implementation == attn_implementation
    # A tied head converted untied would give the same logits here but train as two matrices.
    is_tied = ours.lm_head.weight.data_ptr() == ours.transformer.wte.weight.data_ptr()
    assert is_tied == reference.config.tie_word_embeddings == ours.config.tie_word_embeddings
    input_ids, attention_mask = padded_batch()
    assert_same_logits(ours, reference, input_ids)
    # Left-padded rows count positions from their first real token, as generate() does.
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    assert_same_logits(ours, reference, input_ids, attention_mask=attention_mask, position_ids=position_ids)


def test_the_converted_model_is_the_llama_block():
    ours, reference = make_llama_pair()
    config = ours.config
    assert (config.position_embedding_type, config.norm_type, config.mlp_type, config.norm_position) == (
        "rope", "rmsnorm", "swiglu", "pre")
    assert (config.n_kv_head, config.rope_theta, config.inner_dim, config.tie_word_embeddings) == (2, 500.0, 80, False)
    assert not list(ours.transformer.wpe.parameters()) and ours.num_parameters() == reference.num_parameters()
    block = ours.transformer.h[0]
    assert block.attn.c_attn.weight.shape == ((4 + 2 * 2) * 8, 32)  # q then k then v heads, fused
    torch.testing.assert_close(block.attn.c_attn.weight[32:48], reference.model.layers[0].self_attn.k_proj.weight)


@pytest.mark.parametrize("shape", ["gqa-theta500", "attention-and-mlp-biases", "tied-head"])
def test_our_llama_block_converts_to_llama_with_the_same_logits(shape):
    """The other direction: a random model of ours -> LlamaForCausalLM."""
    fields = {**TINY_LLAMA, **SHAPES[shape]}
    config = config_from_llama(LlamaConfig(**fields).to_dict())
    ours = randomize_(GPTCustomForCausalLM(config)).eval()
    assert_same_logits(to_llama_model(ours), ours, torch.randint(0, 99, (2, 17)))


def test_a_bf16_model_converts_to_a_bf16_llama_with_float32_rope_frequencies():
    """to_llama_model built a float32 LlamaForCausalLM from bf16 weights (twice the memory, saved as float32, other
    logits than the model it came from). It is bf16 now, built as from_pretrained(dtype=bfloat16) builds it: RoPE's
    inverse frequencies stay float32."""
    config = config_from_llama(LlamaConfig(**TINY_LLAMA, **SHAPES["gqa-theta500"]).to_dict())
    ours = randomize_(GPTCustomForCausalLM(config)).eval().to(torch.bfloat16)
    reference = to_llama_model(ours)
    assert reference.dtype == torch.bfloat16 and reference.model.rotary_emb.inv_freq.dtype == torch.float32
    input_ids = torch.randint(0, 99, (2, 17))
    with torch.no_grad():
        torch.testing.assert_close(reference(input_ids).logits, ours(input_ids).logits, rtol=2e-2, atol=2e-2)


def test_llama_small_preset_with_padded_vocabulary_exports_with_the_same_logits():
    config = GPTCustomConfig.from_preset("llama-small", n_layer=2, n_embd=32, n_head=4, n_kv_head=2, vocab_size=99,
                                         pad_vocab_size_to_multiple_of=64, n_positions=64)
    ours = randomize_(GPTCustomForCausalLM(config)).eval()
    reference = to_llama_model(ours)
    assert reference.config.vocab_size == 99 and reference.lm_head.weight.shape[0] == 99
    assert_same_logits(reference, ours, torch.randint(0, 99, (2, 13)))


def test_loss_matches_llama_and_ignores_minus_100():
    assert_same_loss(*make_llama_pair())


@pytest.mark.parametrize("attention_dropout", [0.0, 0.3])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_training_forward_drops_attention_as_llama_does(attn_implementation, attention_dropout):
    """Llama's only dropout is attention_dropout (0.0 by default); our default attn_pdrop is GPT-2's 0.1. A converter
    that forgot the field would fine-tune every converted Llama with attention dropout it never had; eval-mode logits
    cannot show it. Reference: LlamaForCausalLM in train mode with the same weights and seed (both draw one dropout
    mask per layer, in the same order), for converted and exported models alike."""
    ours, reference = make_llama_pair(attn_implementation, attention_dropout=attention_dropout)
    exported = to_llama_model(ours)
    input_ids = torch.randint(0, 99, (2, 11), generator=torch.Generator().manual_seed(6))
    logits = []
    for model in (ours, reference, exported):
        model.train()
        torch.manual_seed(9)
        with torch.no_grad():
            logits.append(model(input_ids).logits)
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=1e-5)
    torch.testing.assert_close(logits[2], logits[1], rtol=0, atol=1e-5)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_generate_is_identical_token_for_token(attn_implementation, batch):
    ours, reference = make_llama_pair(attn_implementation)
    prompt = torch.randint(0, 98, (batch, 7))
    settings = dict(max_new_tokens=24, do_sample=False, pad_token_id=0)
    assert ours.generate(prompt, **settings).tolist() == reference.generate(prompt, **settings).tolist()


def test_from_pretrained_converts_a_llama_folder(tmp_path):
    _, reference = make_llama_pair()
    reference.save_pretrained(tmp_path)
    assert_folder_converts_on_load(tmp_path, reference)


def test_generating_past_a_llamas_context_is_refused_naming_the_load_that_allows_it(tmp_path):
    """LlamaForCausalLM runs past max_position_embeddings in silence; ours stops there, and the message named only
    n_positions and "a longer-context preset", which a converted Llama has none of (the genparity2 hunt). The load it
    names gives LlamaForCausalLM's tokens."""
    _, reference = make_llama_pair(max_position_embeddings=16)
    reference.save_pretrained(tmp_path)
    prompt = torch.randint(0, 98, (1, 6), generator=torch.Generator().manual_seed(2))
    settings = dict(max_new_tokens=20, do_sample=False, pad_token_id=0)
    with pytest.raises(UserError, match=r"but n_positions is 16; truncate the input .*load it with a larger "
                                        r"n_positions= \(transformers' max_position_embeddings\)"):
        GPTCustomForCausalLM.from_pretrained(tmp_path).generate(prompt, **settings)
    longer = GPTCustomForCausalLM.from_pretrained(tmp_path, max_position_embeddings=64).eval()
    assert longer.generate(prompt, **settings).tolist() == reference.generate(prompt, **settings).tolist()


def test_a_task_head_loads_the_llama_body_with_its_own_config_overrides(tmp_path):
    _, reference = make_llama_pair()
    reference.save_pretrained(tmp_path)
    head = GPTCustomForSequenceClassification.from_pretrained(tmp_path, num_labels=3, pad_token_id=0)
    assert head.score.weight.shape == (3, 32) and head.config.pad_token_id == 0
    input_ids = torch.randint(1, 99, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(head.transformer(input_ids).last_hidden_state,
                                   reference.model(input_ids).last_hidden_state, rtol=0, atol=1e-5)


def test_from_pretrained_reads_a_sharded_bf16_llama_folder(tmp_path):
    """Llama checkpoints ship in shards (model.safetensors.index.json), usually in bf16."""
    _, reference = make_llama_pair()
    reference.to(torch.bfloat16).save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file() and not (tmp_path / "model.safetensors").exists()
    loaded = GPTCustomForCausalLM.from_pretrained(tmp_path)
    assert loaded.dtype == torch.bfloat16  # transformers 5's dtype="auto" default, as LlamaForCausalLM loads it
    assert GPTCustomForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).dtype == torch.float32
    for name, parameter in reference.model.layers[1].mlp.named_parameters():
        theirs_in_ours = {"gate_proj": "c_gate", "up_proj": "c_fc", "down_proj": "c_proj"}[name.split(".")[0]]
        assert torch.equal(getattr(loaded.transformer.h[1].mlp, theirs_in_ours).weight, parameter)
    assert torch.equal(loaded.lm_head.weight, reference.lm_head.weight)


def test_an_untied_llama_folder_without_its_head_is_refused(tmp_path):
    """An untied head is a weight of its own: a file without it must not load with a random head."""
    _, reference = make_llama_pair()
    reference.save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    del state["lm_head.weight"]
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match=r"missing \['lm_head.weight'\]"):
        GPTCustomForCausalLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("option, named", [
    (dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}), "rope_type='linear'"),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "rope_type='dynamic'"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}),
     "partial_rotary_factor=0.5"),
    (dict(hidden_act="gelu"), "hidden_act='gelu'"),
])
def test_llama_options_we_cannot_reproduce_are_refused_by_name(tmp_path, option, named):
    config = LlamaConfig(**{**TINY_LLAMA, **option})
    with pytest.raises(UserError, match=named):
        config_from_llama(config.to_dict())
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    with pytest.raises(UserError, match=named):
        GPTCustomForCausalLM.from_pretrained(tmp_path)


def test_an_old_style_config_with_top_level_rope_theta_converts():
    """Llama configs written before transformers 5 carry rope_theta (and rope_scaling) at the top level."""
    old = {**TINY_LLAMA, "model_type": "llama", "rope_theta": 250.0}
    del old["rope_parameters"]
    assert config_from_llama(old).rope_theta == 250.0


@pytest.mark.parametrize("option", [
    {"position_embedding_type": "learned"}, {"norm_position": "post"}, {"norm_type": "layernorm"},
    {"mlp_type": "standard"}, {"scale_attn_weights": False},
])
def test_exporting_a_block_llama_cannot_express_names_the_field(option):
    config = GPTCustomConfig.from_preset("llama-small", **option)
    with pytest.raises(UserError, match=f"{next(iter(option))}=.*, which LlamaForCausalLM cannot express"):
        llama_config_from(config)


# head_dim=16 on n_embd=32 with 4 heads: the heads together are 64 wide, twice hidden_size (as in Gemma).
WIDE_HEADS = dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16)


def test_a_llama_with_heads_wider_than_hidden_over_heads_converts_to_ours_with_the_same_logits(tmp_path):
    ours, reference = make_llama_pair(**WIDE_HEADS)
    assert ours.config.head_dim == 16 and ours.transformer.h[0].attn.c_attn.weight.shape == ((4 + 2 * 2) * 16, 32)
    input_ids = torch.randint(0, 99, (2, 13))
    assert_same_logits(ours, reference, input_ids)
    reference.save_pretrained(tmp_path)
    assert_same_logits(GPTCustomForCausalLM.from_pretrained(tmp_path), reference, input_ids)


def test_our_model_with_heads_wider_than_hidden_over_heads_exports_to_llama_with_the_same_logits():
    config = GPTCustomConfig.from_preset("llama-small", n_layer=2, n_embd=32, n_head=4, n_kv_head=2, head_dim=16,
                                         vocab_size=99, n_positions=64)
    ours = randomize_(GPTCustomForCausalLM(config)).eval()
    reference = to_llama_model(ours)
    assert reference.config.head_dim == 16 and reference.model.layers[0].self_attn.q_proj.weight.shape == (64, 32)
    assert_same_logits(reference, ours, torch.randint(0, 99, (2, 13)))


def test_a_bf16_llama_folder_converts_as_llama_for_causal_lm_loads_it(tmp_path):
    """transformers loads a bf16 folder with bf16 weights but keeps RoPE's inv_freq in float32; cast to bf16 (issue
    22.3) the angles drift with the position and logits moved by up to 0.016 over 1,024 positions."""
    torch.manual_seed(0)
    config = LlamaConfig(**{**TINY_LLAMA, "max_position_embeddings": 1024})
    randomize_(LlamaForCausalLM(config)).to(torch.bfloat16).save_pretrained(tmp_path)
    reference = LlamaForCausalLM.from_pretrained(tmp_path).eval()
    for ours in (GPTCustomForCausalLM.from_pretrained(tmp_path), from_llama_model(reference, GPTCustomForCausalLM)):
        assert ours.dtype == reference.dtype == torch.bfloat16
        inv_freq, reference_inv_freq = ours.transformer.wpe.inverse_frequencies("cpu"), reference.model.rotary_emb.inv_freq
        assert inv_freq.dtype == reference_inv_freq.dtype == torch.float32 and torch.equal(inv_freq, reference_inv_freq)
        input_ids = torch.randint(0, 99, (1, 1024), generator=torch.Generator().manual_seed(1))
        hidden = ours.transformer.wte(input_ids)
        position_ids = torch.arange(1024)[None]
        for angle, reference_angle in zip(ours.transformer.wpe(hidden, position_ids)[1],
                                          reference.model.rotary_emb(hidden, position_ids)):
            assert torch.equal(angle, reference_angle)  # cos and sin, (1, 1024, head_dim) in bf16
        with torch.no_grad():
            logits, reference_logits = ours(input_ids).logits.float(), reference(input_ids).logits.float()
        torch.testing.assert_close(logits, reference_logits)  # bf16's default tolerance
        assert (logits.argmax(-1) == reference_logits.argmax(-1)).float().mean() >= 0.99
