import pytest
import torch
from safetensors.torch import save_file
from transformers import GPT2Config

from hf_gpt_custom import GPTCustomForCausalLM, GPTCustomModel
from hf_gpt_custom.convert_gpt2 import config_from_gpt2, convert_gpt2_state_dict, from_gpt2_model, load_gpt2_checkpoint

from tests.helpers import TINY_GPT2

from tests.helpers import make_gpt2_pair


def test_conversion_is_key_for_key_with_one_transpose():
    ours, reference = make_gpt2_pair()
    converted = convert_gpt2_state_dict(reference.state_dict())
    conv1d = reference.transformer.h[0].attn.c_attn.weight  # Conv1D: (in, out)
    assert conv1d.shape == (32, 96)
    assert torch.equal(converted["transformer.h.0.attn.c_attn.weight"], conv1d.t())
    assert torch.equal(converted["transformer.h.0.attn.c_attn.bias"], reference.transformer.h[0].attn.c_attn.bias)
    assert torch.equal(converted["transformer.h.1.mlp.c_proj.weight"], reference.transformer.h[1].mlp.c_proj.weight.t())
    assert torch.equal(converted["transformer.wpe.weight"], reference.transformer.wpe.weight)
    assert set(converted) == set(ours.state_dict())  # lm_head.weight too: left out on load when tied


def test_original_openai_layout_without_prefix_and_with_mask_buffers(tmp_path):
    """The openai-community/gpt2 files are a GPT2Model state dict (no "transformer.") carrying attn.bias buffers."""
    ours, reference = make_gpt2_pair()
    state = {key.removeprefix("transformer."): value.contiguous() for key, value in reference.state_dict().items()
             if key != "lm_head.weight"}
    state["h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 64, 64))
    state["h.0.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(state, tmp_path / "model.safetensors")
    GPT2Config(**TINY_GPT2).save_pretrained(tmp_path)

    loaded = load_gpt2_checkpoint(tmp_path, GPTCustomForCausalLM)
    input_ids = torch.randint(0, 99, (2, 10))
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids).logits, reference(input_ids).logits, rtol=0, atol=1e-5)
    base = GPTCustomModel.from_pretrained(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(
            base(input_ids).last_hidden_state, ours.transformer(input_ids).last_hidden_state, rtol=0, atol=1e-5
        )


def test_pytorch_model_bin_checkpoint_loads(tmp_path):
    _, reference = make_gpt2_pair()
    reference.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save(reference.state_dict(), tmp_path / "pytorch_model.bin")
    loaded = GPTCustomForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert loaded.dtype == torch.bfloat16


def test_gpt2_options_we_do_not_implement_are_refused_by_name():
    with pytest.raises(ValueError, match="reorder_and_upcast_attn"):
        config_from_gpt2({**TINY_GPT2, "model_type": "gpt2", "reorder_and_upcast_attn": True})


def test_a_gpt2_scaled_by_the_inverse_layer_index_is_refused_not_given_other_logits(tmp_path):
    """transformers' GPT-2 divides layer i's attention scores by i + 1 under scale_attn_by_inverse_layer_idx: its
    logits are not those of the same weights without it, which is what our block computes."""
    from transformers import GPT2LMHeadModel

    _, plain = make_gpt2_pair()
    scaled = GPT2LMHeadModel(GPT2Config(**TINY_GPT2, scale_attn_by_inverse_layer_idx=True)).eval()
    scaled.load_state_dict(plain.state_dict())
    input_ids = torch.randint(0, 99, (1, 12))
    with torch.no_grad():
        assert not torch.allclose(scaled(input_ids).logits, plain(input_ids).logits, atol=1e-4)
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        from_gpt2_model(scaled, GPTCustomForCausalLM)
    scaled.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        GPTCustomForCausalLM.from_pretrained(tmp_path)


def test_gpt2_folder_without_weights_names_the_missing_files(tmp_path):
    GPT2Config(**TINY_GPT2).save_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="model.safetensors or pytorch_model.bin"):
        GPTCustomForCausalLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_from_gpt2_model_keeps_the_attention_choice_and_refuses_a_model_missing_weights(attn_implementation):
    ours, reference = make_gpt2_pair(attn_implementation)
    assert ours.config._attn_implementation == attn_implementation and not ours.training
    assert ours.transformer.wte.weight.data_ptr() == ours.lm_head.weight.data_ptr()  # tied, as GPT-2's head is

    class Truncated(type(reference)):  # a GPT-2 whose state dict lost a block weight
        def state_dict(self, *args, **kwargs):
            return {k: v for k, v in super().state_dict(*args, **kwargs).items() if k != "transformer.h.1.ln_2.bias"}

    reference.__class__ = Truncated
    with pytest.raises(ValueError, match=r"GPT-2 model \(Truncated\) does not match its config: missing \['transformer.h.1.ln_2.bias'\]"):
        from_gpt2_model(reference, GPTCustomForCausalLM)


def test_an_untied_gpt2_keeps_its_own_lm_head(tmp_path):
    """GPT2Config(tie_word_embeddings=False) gives GPT2LMHeadModel an lm_head of its own. The converter must carry the
    flag over: read as tied, the head would be the token embedding (or overwrite it), silently other logits.
    Reference: the GPT2LMHeadModel itself, loaded from its folder and converted in memory."""
    from transformers import GPT2LMHeadModel

    from tests.helpers import randomize_

    torch.manual_seed(0)
    reference = randomize_(GPT2LMHeadModel(GPT2Config(**TINY_GPT2, tie_word_embeddings=False))).eval()
    assert not torch.equal(reference.lm_head.weight, reference.transformer.wte.weight)
    reference.save_pretrained(tmp_path)
    input_ids = torch.randint(0, 99, (2, 7), generator=torch.Generator().manual_seed(1))
    for ours in (GPTCustomForCausalLM.from_pretrained(tmp_path), from_gpt2_model(reference, GPTCustomForCausalLM)):
        assert ours.config.tie_word_embeddings is False
        assert ours.lm_head.weight.data_ptr() != ours.transformer.wte.weight.data_ptr()
        with torch.no_grad():
            torch.testing.assert_close(ours.eval()(input_ids).logits, reference(input_ids).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", ["GPT2Model", "GPT2ForSequenceClassification"])
def test_an_untied_gpt2_without_an_lm_head_converts_untied(tmp_path, kind):
    """A GPT-2 body or classifier saved with tie_word_embeddings=False holds no lm_head, so nothing in its weights says
    it is untied: only the config carries it. Dropped by the converter, it loaded as tied and GPT-1's auxiliary LM
    loss was computed through a token embedding never trained as an output layer, where it is refused for an untied
    body (the mutsweep hunt). Reference: GPT-2's own config."""
    import transformers

    from hf_gpt_custom import GPTCustomForSequenceClassification
    from hf_gpt_custom.errors import UserError

    reference = getattr(transformers, kind)(GPT2Config(**TINY_GPT2, tie_word_embeddings=False, num_labels=2,
                                                       pad_token_id=0))
    reference.save_pretrained(tmp_path)
    ours = (GPTCustomModel if kind == "GPT2Model" else GPTCustomForSequenceClassification).from_pretrained(tmp_path)
    assert reference.config.tie_word_embeddings is False and ours.config.tie_word_embeddings is False
    if kind != "GPT2Model":
        with pytest.raises(UserError, match="needs the LM head tied to the token embedding"):
            ours(torch.tensor([[5, 6, 7]]), labels=torch.tensor([1]), lm_loss_weight=0.5)
