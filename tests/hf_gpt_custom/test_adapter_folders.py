"""PEFT adapters that from_pretrained attaches (hf_gpt_custom/adapter_folders.py), against transformers' GPT-2 loading
the same folders: an adapter saved inside a model folder, and an adapter folder alone naming its base. Found by the
peftround2 hunt: a converted GPT-2 folder dropped its adapter in silence, an adapter on a GPT-2 base loaded Conv1D
weights unconverted, and a base loaded through an adapter skipped the missing-tensor and manifest checks."""

import shutil

import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

from hf_gpt_custom import GPTCustomForCausalLM
from hf_gpt_custom.errors import UserError

from tests.helpers import randomize_

INPUT_IDS = torch.randint(0, 99, (2, 9), generator=torch.Generator().manual_seed(1))


def _gpt2_folder(folder, seed=0):
    torch.manual_seed(seed)
    randomize_(GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=99, n_positions=64))).save_pretrained(
        folder)
    return folder


def _save_lora(base, adapter_dir, **save_options) -> torch.Tensor:
    """A LoRA on `base` that changes its logits (B starts non-zero), saved to `adapter_dir`; the adapted logits."""
    torch.manual_seed(1)
    adapted = get_peft_model(base, LoraConfig(target_modules=["c_attn", "c_fc"], init_lora_weights=False)).eval()
    adapted.save_pretrained(adapter_dir, **save_options)
    with torch.no_grad():
        return adapted(input_ids=INPUT_IDS).logits


def _logits(model):
    with torch.no_grad():
        return model.eval()(input_ids=INPUT_IDS).logits


def test_an_adapter_saved_inside_a_gpt2_folder_is_attached_as_gpt2_attaches_it(tmp_path):
    folder = _gpt2_folder(tmp_path / "gpt2")
    base_logits = _logits(GPT2LMHeadModel.from_pretrained(folder))
    _save_lora(GPT2LMHeadModel.from_pretrained(folder), folder)  # beside config.json: transformers attaches it
    expected = _logits(GPT2LMHeadModel.from_pretrained(folder))
    assert (expected - base_logits).abs().max() > 1e-2
    torch.testing.assert_close(_logits(GPTCustomForCausalLM.from_pretrained(folder)), expected, rtol=0, atol=1e-5)


def test_an_adapter_folder_whose_base_is_a_gpt2_folder_loads_onto_the_converted_base(tmp_path):
    folder = _gpt2_folder(tmp_path / "gpt2")
    adapted = _save_lora(GPT2LMHeadModel.from_pretrained(folder), tmp_path / "adapter")
    torch.testing.assert_close(_logits(GPT2LMHeadModel.from_pretrained(tmp_path / "adapter")), adapted, rtol=0,
                               atol=1e-6)
    loaded = GPTCustomForCausalLM.from_pretrained(tmp_path / "adapter")
    assert isinstance(loaded, GPTCustomForCausalLM)
    torch.testing.assert_close(_logits(loaded), adapted, rtol=0, atol=1e-5)


@pytest.mark.parametrize("damage", ["missing tensor", "manifest"])
@pytest.mark.parametrize("loader", [GPTCustomForCausalLM, AutoModelForCausalLM], ids=["ours", "auto"])
def test_a_base_loaded_through_its_adapter_gets_every_check_a_base_gets(tmp_path, loader, damage):
    """transformers hands back the adapter's loading info, so the base's missing tensor was started at random."""
    from hf_gpt_custom.manifest import write_manifest

    base = tmp_path / "base"
    GPTCustomForCausalLM.from_pretrained(_gpt2_folder(tmp_path / "gpt2")).save_pretrained(base)
    _save_lora(GPTCustomForCausalLM.from_pretrained(base), tmp_path / "adapter")
    weights = load_file(base / "model.safetensors")
    if damage == "missing tensor":
        del weights["transformer.h.0.mlp.c_fc.weight"]
        save_file(weights, base / "model.safetensors", metadata={"format": "pt"})
        write_manifest(base)  # the folder is consistent: only the tensor is missing
        message = r"does not hold every weight .*transformer.h.0.mlp.c_fc.weight"
    else:
        write_manifest(base)
        weights["transformer.wte.weight"] += 1
        save_file(weights, base / "model.safetensors", metadata={"format": "pt"})
        message = "model.safetensors does not match its sha256 in the manifest"
    with pytest.raises(UserError, match=message):
        loader.from_pretrained(tmp_path / "adapter", trust_remote_code=True)


def test_the_adapter_lookup_is_off_only_in_the_thread_loading_a_base(tmp_path):
    """transformers' lookup was swapped out process-wide around our base's load, so a GPT-2 load in another thread
    dropped its adapter, and two overlapping loads left the lookup off for good (roundreview31). Reference: GPT-2
    loading the same folder alone."""
    import threading

    import transformers.modeling_utils as modeling_utils

    from hf_gpt_custom import adapter_folders

    folder = _gpt2_folder(tmp_path / "gpt2")
    expected = _save_lora(GPT2LMHeadModel.from_pretrained(folder), folder)
    loaded = {}
    loading = adapter_folders._loading_the_base.set(True)  # this thread is loading a base
    try:
        found_here = modeling_utils.maybe_load_adapters(str(folder), {})[0]
        other = threading.Thread(target=lambda: loaded.update(model=GPT2LMHeadModel.from_pretrained(folder)))
        other.start()
        other.join()
    finally:
        adapter_folders._loading_the_base.reset(loading)
    assert found_here is None
    torch.testing.assert_close(_logits(loaded["model"]), expected, rtol=0, atol=1e-6)


def test_converting_a_folder_leaves_the_random_generator_where_gpt2s_loading_leaves_it(tmp_path):
    """A seed set before loading, then a LoRA initialised: ours drew the whole random initialisation of the model it
    then overwrote, so the LoRA started elsewhere than on GPT-2."""
    folder = _gpt2_folder(tmp_path / "gpt2")
    after = {}
    for name, load in (("gpt2", GPT2LMHeadModel.from_pretrained), ("ours", GPTCustomForCausalLM.from_pretrained)):
        torch.manual_seed(5)
        load(folder)
        after[name] = torch.rand(3)
    torch.testing.assert_close(after["ours"], after["gpt2"], rtol=0, atol=0)


def test_a_folder_holding_an_adapter_is_refused_where_it_would_be_saved_again(tmp_path):
    """Training from it or exporting it loads base + adapter, and save_pretrained of a model carrying an adapter
    writes the adapter alone."""
    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.training.config import load_train_config

    from tests.training.test_config import SMOKE

    folder = _gpt2_folder(tmp_path / "run" / "final")
    load_train_config(SMOKE, [f"init_from={folder}", "model={}"])  # no adapter: nothing said
    _save_lora(GPT2LMHeadModel.from_pretrained(folder), folder)
    with pytest.raises(UserError, match=r"holds a PEFT adapter beside its model .* training from it cannot keep .*"
                                        r"merge_and_unload"):
        load_train_config(SMOKE, [f"init_from={folder}", "model={}"])
    with pytest.raises(UserError, match=r"holds a PEFT adapter beside its model .* an export cannot keep"):
        export_folder(tmp_path / "run", tmp_path / "export")


# Gaps mutation testing found (mut_s62): each test names what a planted bug did.


def test_an_adapter_inside_a_model_folder_loads_onto_that_folder_not_the_base_its_config_names(tmp_path):
    """transformers' maybe_load_adapters: a local folder with config.json is its own base, whatever
    adapter_config.json's base_model_name_or_path says (mutant: the `config.json` condition dropped)."""
    folder = _gpt2_folder(tmp_path / "a", seed=0)
    other = _gpt2_folder(tmp_path / "b", seed=7)
    _save_lora(GPT2LMHeadModel.from_pretrained(other), folder)  # names b as its base, saved inside a
    expected = _logits(GPT2LMHeadModel.from_pretrained(folder))
    torch.testing.assert_close(_logits(GPTCustomForCausalLM.from_pretrained(folder)), expected, rtol=0, atol=1e-5)


def test_an_adapter_attached_with_output_loading_info_returns_the_pair(tmp_path):
    """(mutant: model = loaded, the tuple's load_adapter)"""
    folder = _gpt2_folder(tmp_path / "gpt2")
    _save_lora(GPT2LMHeadModel.from_pretrained(folder), folder)
    expected_model, expected_info = GPT2LMHeadModel.from_pretrained(folder, output_loading_info=True)
    model, info = GPTCustomForCausalLM.from_pretrained(folder, output_loading_info=True)
    assert isinstance(info, dict) and not info["missing_keys"]
    torch.testing.assert_close(_logits(model), _logits(expected_model), rtol=0, atol=1e-5)


def test_an_adapter_in_a_subfolder_is_attached(tmp_path):
    """(mutant: subfolder= ignored when looking for the adapter: the GPT-2 base converted, its adapter dropped in
    silence). Reference: the adapted GPT-2's logits as saved (transformers' own GPT2LMHeadModel fails on this folder
    with subfolder=, looking for the base's weights in the wrong place)."""
    folder = _gpt2_folder(tmp_path / "repo" / "sub")
    expected = _save_lora(GPT2LMHeadModel.from_pretrained(folder), folder)
    got = _logits(GPTCustomForCausalLM.from_pretrained(tmp_path / "repo", subfolder="sub"))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_an_adapter_saved_inside_one_of_our_folders_is_attached_once(tmp_path):
    """Our own folder goes through transformers' from_pretrained, whose adapter lookup must be off while the base
    loads (mutant: the maybe_load_adapters patch dropped). Reference: base + PeftModel by hand."""
    from peft import PeftModel

    folder = tmp_path / "ours"
    GPTCustomForCausalLM.from_pretrained(_gpt2_folder(tmp_path / "gpt2")).save_pretrained(folder)
    _save_lora(GPTCustomForCausalLM.from_pretrained(folder), tmp_path / "lora")
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy(tmp_path / "lora" / name, folder / name)
    reference = PeftModel.from_pretrained(GPTCustomForCausalLM.from_pretrained(tmp_path / "gpt2"), tmp_path / "lora")
    loaded = GPTCustomForCausalLM.from_pretrained(folder)
    assert len(loaded.peft_config) == 1
    torch.testing.assert_close(_logits(loaded), _logits(reference), rtol=0, atol=1e-5)


def test_an_adapter_folder_loads_through_the_auto_class(tmp_path):
    """(mutant: _adapter_model_path left in adapter_kwargs for load_adapter)"""
    from transformers import AutoModelForCausalLM

    base = tmp_path / "base"
    GPTCustomForCausalLM.from_pretrained(_gpt2_folder(tmp_path / "gpt2")).save_pretrained(base)
    adapted = _save_lora(GPTCustomForCausalLM.from_pretrained(base), tmp_path / "adapter")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "adapter", trust_remote_code=True)
    torch.testing.assert_close(_logits(loaded), adapted, rtol=0, atol=1e-5)


def test_a_folder_holding_a_bin_adapter_is_refused_for_training(tmp_path):
    """(mutant: the check looks for adapter_model.safetensors instead of adapter_config.json)"""
    from hf_gpt_custom.model_folder import refuse_an_adapter_inside

    folder = _gpt2_folder(tmp_path / "final")
    _save_lora(GPT2LMHeadModel.from_pretrained(folder), folder, safe_serialization=False)
    assert not (folder / "adapter_model.safetensors").exists()
    with pytest.raises(UserError, match="holds a PEFT adapter beside its model"):
        refuse_an_adapter_inside(folder, "training from it")


def test_exporting_to_a_transformers_llama_leaves_the_random_generator_where_it_was():
    from transformers import LlamaConfig, LlamaForCausalLM

    from hf_gpt_custom.convert_llama import from_llama_model, to_llama_model

    llama = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=4, vocab_size=99,
                                         max_position_embeddings=64))
    model = from_llama_model(llama, GPTCustomForCausalLM)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    to_llama_model(model)
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)


def test_an_adapter_alone_in_a_subfolder_loads_onto_the_base_it_names(tmp_path):
    """subfolder= found the adapter inside the folder given; the base it names is a folder of its own, loaded without
    that subfolder (the root was loaded as the base, then the base with the adapter's subfolder: roundreview31).
    Reference: the adapted GPT-2's logits as saved."""
    folder = _gpt2_folder(tmp_path / "gpt2")
    expected = _save_lora(GPT2LMHeadModel.from_pretrained(folder), tmp_path / "repo" / "adapter")
    got = _logits(GPTCustomForCausalLM.from_pretrained(tmp_path / "repo", subfolder="adapter"))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
