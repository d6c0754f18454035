"""Strict loading for our own commands: what from_pretrained lets through silently is an error here."""

import json

import pytest
from safetensors.torch import load_file, save_file

from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
from hf_gpt_custom.errors import MissingFileError, UserError
from hf_gpt_custom.model_folder import load_model_folder, verify_manifest, write_manifest


@pytest.fixture
def saved(tmp_path):
    model = GPTCustomForCausalLM(GPTCustomConfig(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=32))
    model.save_pretrained(tmp_path / "model")
    return model, tmp_path / "model"


def test_a_complete_folder_loads_with_the_saved_weights(saved):
    model, folder = saved
    loaded = load_model_folder(folder)
    for (name, expected), actual in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert actual.equal(expected), name


def test_a_bit_flip_in_the_weights_is_caught_by_the_manifest(saved):
    _, folder = saved
    write_manifest(folder)
    assert verify_manifest(folder) is None
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-10] ^= 1  # inside the last tensor: safetensors itself still loads the file
    (folder / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"model\.safetensors does not match its sha256"):
        load_model_folder(folder)


def test_a_missing_tensor_is_an_error_not_a_random_init(saved):
    _, folder = saved
    state = load_file(folder / "model.safetensors")
    del state["transformer.h.0.mlp.c_fc.weight"]
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match=r"missing 1.*transformer\.h\.0\.mlp\.c_fc\.weight"):
        load_model_folder(folder)


def test_another_model_type_is_refused_by_name(saved):
    _, folder = saved
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    with pytest.raises(UserError, match=r"holds a 'bert' model"):
        load_model_folder(folder)


def test_missing_folder_file_and_config_are_named(tmp_path, saved):
    _, folder = saved
    with pytest.raises(MissingFileError, match=r"does not exist"):
        load_model_folder(tmp_path / "nope")
    with pytest.raises(UserError, match=r"is a file, not a model folder"):
        load_model_folder(folder / "config.json")
    (folder / "config.json").unlink()
    with pytest.raises(MissingFileError, match=r"has no config\.json"):
        load_model_folder(folder)


@pytest.mark.parametrize("reference_class", ["OpenAIGPTLMHeadModel", "LlamaForCausalLM"])
def test_openai_gpt_and_llama_folders_load_for_our_commands_converted(tmp_path, reference_class):
    """`train init_from=`, `eval` and `finetune` load through load_model_folder: a transformers GPT-1 or Llama folder
    is converted there as from_pretrained converts it, with the reference model's logits."""
    import torch
    import transformers

    config = {
        "OpenAIGPTLMHeadModel": transformers.OpenAIGPTConfig(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=32),
        "LlamaForCausalLM": transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                     hidden_size=32, intermediate_size=48, vocab_size=64,
                                                     max_position_embeddings=32),
    }[reference_class]
    torch.manual_seed(0)
    reference = getattr(transformers, reference_class)(config).eval()
    reference.save_pretrained(tmp_path / "reference")
    model = load_model_folder(tmp_path / "reference")
    input_ids = torch.randint(0, 64, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids).logits, reference(input_ids).logits, atol=1e-5, rtol=1e-5)
