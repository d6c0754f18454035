"""from_pretrained on a transformers GPT-2 or Llama folder takes transformers' loading arguments as transformers' own
classes do: the folder's generation_config.json, `config=`, `output_loading_info`, a one-device `device_map`; any
argument it cannot honour is refused by name instead of being dropped."""

import json

import pytest
import torch
import transformers
from transformers import AutoConfig, GenerationConfig, GPT2ForSequenceClassification, GPT2LMHeadModel, LlamaConfig

from hf_gpt_custom import (
    GPTCustomConfig,
    GPTCustomForCausalLM,
    GPTCustomForSequenceClassification,
    GPTCustomModel,
)
from hf_gpt_custom.convert_gpt2 import from_gpt2_model
from hf_gpt_custom.convert_llama import from_llama_model, to_llama_model
from hf_gpt_custom.errors import UserError
from hf_gpt_custom.model_folder import load_model_folder

from tests.helpers import TINY_GPT2, randomize_

TINY_LLAMA = dict(vocab_size=99, hidden_size=32, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1, eos_token_id=2)
CONFIGS = {"GPT2": lambda **fields: transformers.GPT2Config(**TINY_GPT2, **fields),
           "Llama": lambda **fields: LlamaConfig(**TINY_LLAMA, **fields)}
# What Llama 3 folders ship in generation_config.json (several eos ids), plus settings that change every token.
GENERATION = dict(eos_token_id=[2, 7, 9], repetition_penalty=2.0, max_new_tokens=10, no_repeat_ngram_size=2)
PAD = 0


def reference_model(class_name: str, **config_fields):
    """transformers' `class_name` (GPT2... or Llama...) on a tiny config, every weight random, in eval mode."""
    torch.manual_seed(0)
    config = CONFIGS["GPT2" if class_name.startswith("GPT2") else "Llama"](**config_fields)
    return randomize_(getattr(transformers, class_name)(config)).eval()


def saved_folder(folder, class_name: str, **config_fields):
    """`folder` holding a random transformers `class_name`, as save_pretrained writes it."""
    reference_model(class_name, **config_fields).save_pretrained(folder)
    return folder


def with_generation_settings(model):
    for name, value in GENERATION.items():
        setattr(model.generation_config, name, value)
    return model


# --- generation_config.json ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("class_name", ["GPT2LMHeadModel", "LlamaForCausalLM"])
def test_a_converted_folder_generates_with_its_generation_config(tmp_path, class_name):
    """The folder's generation_config.json used to be dropped: generate() then ran past max_new_tokens, without the
    repetition penalty, and stopped at config.json's one eos id instead of the list."""
    with_generation_settings(reference_model(class_name)).save_pretrained(tmp_path)
    theirs = getattr(transformers, class_name).from_pretrained(tmp_path)
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path)
    for name, value in GENERATION.items():
        assert getattr(ours.generation_config, name) == getattr(theirs.generation_config, name) == value, name
    prompt = torch.randint(3, 99, (1, 5), generator=torch.Generator().manual_seed(4))
    assert ours.generate(prompt, pad_token_id=PAD).tolist() == theirs.generate(prompt, pad_token_id=PAD).tolist()


def test_a_folder_without_generation_config_gets_the_one_its_config_implies(tmp_path):
    saved_folder(tmp_path, "LlamaForCausalLM")
    (tmp_path / "generation_config.json").unlink()
    theirs = transformers.LlamaForCausalLM.from_pretrained(tmp_path)
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "max_new_tokens", "repetition_penalty"):
        assert getattr(ours.generation_config, name) == getattr(theirs.generation_config, name), name


def test_a_generation_config_argument_wins_over_the_folders_as_in_transformers(tmp_path):
    with_generation_settings(reference_model("GPT2LMHeadModel")).save_pretrained(tmp_path)
    given = GenerationConfig(max_new_tokens=3, eos_token_id=5)
    theirs = GPT2LMHeadModel.from_pretrained(tmp_path, generation_config=given)
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path, generation_config=given)
    assert (ours.generation_config.max_new_tokens, ours.generation_config.eos_token_id) == (3, 5)
    assert ours.generation_config.to_dict() == theirs.generation_config.to_dict()


@pytest.mark.parametrize("class_name, convert", [("GPT2LMHeadModel", from_gpt2_model),
                                                 ("LlamaForCausalLM", from_llama_model)])
def test_converting_a_model_in_memory_keeps_its_generation_config(class_name, convert):
    reference = with_generation_settings(reference_model(class_name))
    ours = convert(reference, GPTCustomForCausalLM)
    assert ours.generation_config.to_dict() == reference.generation_config.to_dict()
    assert ours.generation_config is not reference.generation_config  # a copy: editing one leaves the other
    prompt = torch.randint(3, 99, (1, 5), generator=torch.Generator().manual_seed(4))
    assert ours.generate(prompt, pad_token_id=PAD).tolist() == reference.generate(prompt, pad_token_id=PAD).tolist()


# --- config= ---------------------------------------------------------------------------------------------------------


def assert_same_classifier_logits(ours, theirs):
    """Both heads give the same logits on rows right-padded with PAD (pooled at each row's last real token)."""
    input_ids = torch.randint(1, 99, (3, 9))
    input_ids[0, 6:] = PAD
    input_ids[1, 3:] = PAD
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids).logits, theirs(input_ids).logits, rtol=0, atol=1e-5)


def test_a_transformers_config_argument_gives_the_head_transformers_gives(tmp_path):
    """The usual recipe: AutoConfig of the folder with num_labels and pad_token_id, passed as config=. It used to be
    ignored: a 2-label head that pooled the last column, padding or not."""
    saved_folder(tmp_path, "GPT2LMHeadModel")
    config = AutoConfig.from_pretrained(tmp_path, num_labels=5, pad_token_id=PAD,
                                        problem_type="multi_label_classification")
    theirs = GPT2ForSequenceClassification.from_pretrained(tmp_path, config=config).eval()
    ours = GPTCustomForSequenceClassification.from_pretrained(tmp_path, config=config)
    fields = ("num_labels", "pad_token_id", "problem_type", "id2label")
    assert {name: getattr(ours.config, name) for name in fields} == {name: getattr(theirs.config, name)
                                                                      for name in fields}
    with torch.no_grad():
        ours.score.weight.copy_(theirs.score.weight)  # a new head is random on both sides
    assert_same_classifier_logits(ours, theirs)


def test_our_config_argument_is_used_as_given(tmp_path):
    saved_folder(tmp_path, "GPT2LMHeadModel")
    theirs = GPT2ForSequenceClassification.from_pretrained(tmp_path, num_labels=5, pad_token_id=PAD).eval()
    config = GPTCustomConfig(**TINY_GPT2, num_labels=5, pad_token_id=PAD)  # GPT2Config and ours share these fields
    ours = GPTCustomForSequenceClassification.from_pretrained(tmp_path, config=config)
    assert (ours.config.num_labels, ours.config.pad_token_id) == (5, PAD)
    assert config.architectures is None  # the caller's object is left as it was
    with torch.no_grad():
        ours.score.weight.copy_(theirs.score.weight)
    assert_same_classifier_logits(ours, theirs)


def test_a_config_argument_still_loads_the_head_the_folder_holds(tmp_path):
    """Which head the weights hold is the folder's fact, not the config's: transformers loads the saved score."""
    saved_folder(tmp_path, "GPT2ForSequenceClassification", num_labels=3, pad_token_id=PAD)
    config = AutoConfig.from_pretrained(tmp_path)
    config.architectures = None
    theirs = GPT2ForSequenceClassification.from_pretrained(tmp_path, config=config).eval()
    ours = GPTCustomForSequenceClassification.from_pretrained(tmp_path, config=config)
    assert_same_classifier_logits(ours, theirs)


@pytest.mark.parametrize("config, named", [(LlamaConfig(**TINY_LLAMA), "LlamaConfig"), ("gpt2", "str")])
def test_a_config_of_another_family_or_a_name_is_refused_by_name(tmp_path, config, named):
    saved_folder(tmp_path, "GPT2LMHeadModel")
    with pytest.raises(UserError, match=f"config= is a {named}, but .* is a GPT-2 checkpoint"):
        GPTCustomForCausalLM.from_pretrained(tmp_path, config=config)


def test_a_folder_of_a_family_without_a_converter_is_refused_by_name(tmp_path):
    """A StarCoder-family folder (gpt_bigcode, multi_query=False) has our weight names and shapes but its heads
    interleaved in c_attn: it loaded with no error and logits up to 5 away from GPTBigCodeForCausalLM's. Reference:
    GPTBigCodeForCausalLM with the same folder."""
    from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM

    torch.manual_seed(0)
    reference = GPTBigCodeForCausalLM(GPTBigCodeConfig(vocab_size=97, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                                       initializer_range=0.2, multi_query=False)).eval()
    reference.save_pretrained(tmp_path)
    for model_class in (GPTCustomForCausalLM, GPTCustomModel, GPTCustomForSequenceClassification):
        with pytest.raises(UserError, match=r"holds a 'gpt_bigcode' model .*load it with its own class"):
            model_class.from_pretrained(tmp_path)


# --- output_loading_info ---------------------------------------------------------------------------------------------

LOADING_CASES = {  # name: (the folder's class and config, transformers' class loading it, ours, from_pretrained args)
    "same-class": ("GPT2LMHeadModel", {}, "GPT2LMHeadModel", GPTCustomForCausalLM, {}),
    "new-head": ("GPT2LMHeadModel", {}, "GPT2ForSequenceClassification", GPTCustomForSequenceClassification, {}),
    "dropped-head": ("GPT2ForSequenceClassification", {"pad_token_id": PAD}, "GPT2LMHeadModel",
                     GPTCustomForCausalLM, {}),
    "resized-head": ("GPT2ForSequenceClassification", {"num_labels": 3, "pad_token_id": PAD},
                     "GPT2ForSequenceClassification", GPTCustomForSequenceClassification,
                     {"num_labels": 5, "ignore_mismatched_sizes": True}),
    "body-of-untied-lm": ("LlamaForCausalLM", {}, "LlamaModel", GPTCustomModel, {}),
    "classifier-of-untied-lm": ("LlamaForCausalLM", {}, "LlamaForSequenceClassification",
                                GPTCustomForSequenceClassification, {}),
}


@pytest.mark.parametrize("case", LOADING_CASES)
def test_output_loading_info_reports_what_transformers_reports(tmp_path, case):
    saved_class, saved_config, their_class, our_class, arguments = LOADING_CASES[case]
    saved_folder(tmp_path, saved_class, **saved_config)
    _, theirs = getattr(transformers, their_class).from_pretrained(tmp_path, output_loading_info=True, **arguments)
    model, ours = our_class.from_pretrained(tmp_path, output_loading_info=True, **arguments)
    assert type(model) is our_class
    assert {key: type(value) for key, value in ours.items()} == {key: type(value) for key, value in theirs.items()}
    for key in ("missing_keys", "unexpected_keys", "error_msgs"):
        assert ours[key] == theirs[key], key
    shapes = lambda info: {(key, tuple(saved), tuple(new)) for key, saved, new in info["mismatched_keys"]}  # noqa: E731
    assert shapes(ours) == shapes(theirs)


# --- device_map and other arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize("device_map", ["cpu", {"": "cpu"}, torch.device("cpu"), "auto", {"": "meta"}],
                         ids=["str", "dict", "torch-device", "auto", "meta"])
def test_a_one_device_map_puts_the_model_where_transformers_puts_it(tmp_path, device_map):
    saved_folder(tmp_path, "GPT2LMHeadModel")
    theirs = GPT2LMHeadModel.from_pretrained(tmp_path, device_map=device_map)
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path, device_map=device_map)
    assert {parameter.device for parameter in ours.parameters()} == {theirs.device}


@pytest.mark.parametrize("device_map", [{"transformer": "cpu", "lm_head": "meta"}, {"": "disk"}])
def test_a_device_map_over_several_devices_is_refused_by_name(tmp_path, device_map):
    saved_folder(tmp_path, "GPT2LMHeadModel")
    with pytest.raises(UserError, match=r"device_map=\{.*save_pretrained"):
        GPTCustomForCausalLM.from_pretrained(tmp_path, device_map=device_map)


@pytest.mark.parametrize("argument", [{"use_safetensors": False}, {"variant": "fp16"},
                                      {"quantization_config": {"load_in_8bit": True}}, {"num_lables": 3},
                                      {"weights_only": False}])
def test_an_argument_the_conversion_cannot_honour_is_refused_by_name(tmp_path, argument):
    saved_folder(tmp_path, "GPT2LMHeadModel")
    with pytest.raises(UserError, match=f"from_pretrained got {next(iter(argument))}="):
        GPTCustomForCausalLM.from_pretrained(tmp_path, **argument)


def test_arguments_at_their_defaults_and_harmless_ones_are_accepted(tmp_path):
    """Generic loading code passes transformers' defaults explicitly; they ask for nothing."""
    saved_folder(tmp_path, "GPT2LMHeadModel")
    GPTCustomForCausalLM.from_pretrained(tmp_path, use_safetensors=None, variant=None, quantization_config=None,
                                         weights_only=True, trust_remote_code=True, low_cpu_mem_usage=True,
                                         device_map=None, output_loading_info=False)
    GPTCustomForCausalLM.from_pretrained(tmp_path, use_safetensors=True, variant=None, quantization_config=None,
                                         weights_only=True, trust_remote_code=True, low_cpu_mem_usage=True,
                                         device_map=None, output_loading_info=False, code_revision="main",
                                         _commit_hash=None, adapter_kwargs={"revision": None})


@pytest.mark.parametrize("auto_class", [transformers.AutoModelForCausalLM, transformers.AutoModel])
def test_the_auto_classes_load_a_gpt2_folder_with_our_config(tmp_path, auto_class):
    """transformers' Auto classes pass adapter_kwargs={'revision': None} whenever peft is installed: the load was
    refused as an argument the user never gave. Reference: GPT2LMHeadModel on the same folder."""
    import hf_gpt_custom  # noqa: F401  (registers our config with the Auto classes)

    reference = reference_model("GPT2LMHeadModel")
    reference.save_pretrained(tmp_path)
    ours = auto_class.from_pretrained(tmp_path, config=GPTCustomConfig(**TINY_GPT2))
    input_ids = torch.randint(0, TINY_GPT2["vocab_size"], (2, 7))
    with torch.no_grad():
        expected = reference.transformer(input_ids).last_hidden_state
        got = getattr(ours, "transformer", ours)(input_ids).last_hidden_state
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


# --- what the conversion hunt found: each against transformers' own class on the same folder ----------------------


def test_older_generation_settings_in_config_json_are_kept_as_transformers_keeps_them(tmp_path):
    """An older checkpoint has no generation_config.json and keeps repetition_penalty, no_repeat_ngram_size and
    max_length in config.json; transformers applies them, the conversion dropped them (10 more tokens, repeated)."""
    import json

    saved_folder(tmp_path, "GPT2LMHeadModel")
    (tmp_path / "generation_config.json").unlink()
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "repetition_penalty": 3.0, "no_repeat_ngram_size": 2,
                                                      "max_length": 14}))
    theirs = GPT2LMHeadModel.from_pretrained(tmp_path)
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path)
    for name in ("repetition_penalty", "no_repeat_ngram_size", "max_length"):
        assert getattr(ours.generation_config, name) == getattr(theirs.generation_config, name) is not None, name
    prompt = torch.randint(3, 99, (1, 4), generator=torch.Generator().manual_seed(4))
    assert ours.generate(prompt, pad_token_id=PAD).tolist() == theirs.generate(prompt, pad_token_id=PAD).tolist()


@pytest.mark.parametrize("case", ["config says bf16, weights fp32", "no dtype, bf16 weights with fp32 norms"])
def test_dtype_auto_is_the_dtype_transformers_loads(tmp_path, case):
    """transformers 5 reads config.json's dtype first, then the first floating tensor (by name); the conversion
    read only the weights and fell back to fp32 when they mixed dtypes (logits off by 0.14)."""
    import json

    from safetensors.torch import load_file, save_file

    saved_folder(tmp_path, "LlamaForCausalLM")
    config = json.loads((tmp_path / "config.json").read_text())
    weights = load_file(tmp_path / "model.safetensors")
    if case.startswith("config"):
        config["dtype"] = "bfloat16"
    else:
        config.pop("dtype", None)
        weights = {key: value if "norm" in key else value.to(torch.bfloat16) for key, value in weights.items()}
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "config.json").write_text(json.dumps(config))
    theirs = transformers.LlamaForCausalLM.from_pretrained(tmp_path).eval()
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path)
    assert ours.dtype == theirs.dtype == torch.bfloat16
    prompt = torch.randint(3, 99, (1, 7), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.testing.assert_close(ours(prompt).logits, theirs(prompt).logits, rtol=0, atol=1e-6)


def test_an_older_config_json_torch_dtype_is_the_dtype_transformers_loads(tmp_path):
    """config.json written by transformers 4 names the dtype `torch_dtype`; transformers 5 still reads it."""
    import json

    saved_folder(tmp_path, "GPT2LMHeadModel")
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("dtype", None)
    config["torch_dtype"] = "bfloat16"
    (tmp_path / "config.json").write_text(json.dumps(config))
    theirs = transformers.GPT2LMHeadModel.from_pretrained(tmp_path)
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path)
    assert ours.dtype == theirs.dtype == torch.bfloat16


@pytest.mark.parametrize("class_name", ["LlamaForCausalLM", "GPT2LMHeadModel"])
@pytest.mark.parametrize("kwargs", [{"dtype": None}, {"dtype": None, "torch_dtype": torch.float16}],
                         ids=["dtype=None", "dtype=None,torch_dtype=float16"])
def test_dtype_none_is_the_dtype_transformers_loads(tmp_path, class_name, kwargs):
    """transformers 5 reads dtype=None as "auto" (and a torch_dtype given beside it as the dtype); converting on load
    read None as "the default dtype" and built a float32 model from a bf16 folder (twice the memory, other logits
    than transformers' class gives for the same call)."""
    reference_model(class_name).to(torch.bfloat16).save_pretrained(tmp_path)
    theirs = getattr(transformers, class_name).from_pretrained(tmp_path, **kwargs).eval()
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path, **kwargs)
    assert ours.dtype == theirs.dtype
    if class_name.startswith("Llama"):  # the same arithmetic as LlamaForCausalLM, bit for bit, in the same dtype
        prompt = torch.randint(3, 99, (1, 7), generator=torch.Generator().manual_seed(4))
        with torch.no_grad():
            torch.testing.assert_close(ours(prompt).logits, theirs(prompt).logits, rtol=0, atol=0)


@pytest.mark.parametrize("class_name", ["LlamaForCausalLM", "GPT2LMHeadModel"])
@pytest.mark.parametrize("folder_dtype, config_dtype", [(torch.float32, "bfloat16"), (torch.bfloat16, "float32")])
def test_dtype_auto_reads_a_config_argument_as_transformers_does(tmp_path, class_name, folder_dtype, config_dtype):
    """dtype "auto" (the default) reads the config object in hand: a config= given (a model's loaded in bf16, or
    AutoConfig.from_pretrained(folder, dtype="float32")) decides it, not the folder's config.json. The conversion
    read config.json: a float32 model for a bf16 config, a bf16 one for a float32 config (the dtypeload3 hunt).
    Reference: transformers' own class given the same config."""
    reference_model(class_name).to(folder_dtype).save_pretrained(tmp_path)
    config = AutoConfig.from_pretrained(tmp_path, dtype=config_dtype)
    theirs = getattr(transformers, class_name).from_pretrained(tmp_path, config=config).eval()
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path, config=config)
    assert ours.dtype == theirs.dtype == getattr(torch, config_dtype)
    if class_name.startswith("Llama"):  # the same arithmetic as LlamaForCausalLM, bit for bit, in the same dtype
        prompt = torch.randint(3, 99, (1, 7), generator=torch.Generator().manual_seed(4))
        with torch.no_grad():
            torch.testing.assert_close(ours(prompt).logits, theirs(prompt).logits, rtol=0, atol=0)


def test_rope_parameters_at_load_set_rope_theta_as_llama_takes_them(tmp_path):
    """transformers 5 spells RoPE's base rope_parameters (LlamaForCausalLM takes no rope_theta=): converting a Llama
    folder refused it as an argument it "does not support", though our own folders take it (the dtypeload3 hunt).
    Reference: LlamaForCausalLM loaded with the same argument, at positions where the base matters."""
    saved_folder(tmp_path, "LlamaForCausalLM")
    rope = {"rope_type": "default", "rope_theta": 500.0}
    theirs = transformers.LlamaForCausalLM.from_pretrained(tmp_path, rope_parameters=rope).eval()
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path, rope_parameters=rope)
    assert ours.config.rope_theta == 500.0
    prompt = torch.randint(3, 99, (1, 7), generator=torch.Generator().manual_seed(4))
    positions = torch.arange(40, 47)[None]
    with torch.no_grad():
        torch.testing.assert_close(ours(prompt, position_ids=positions).logits,
                                   theirs(prompt, position_ids=positions).logits, rtol=0, atol=1e-6)
    with pytest.raises(UserError, match="only plain RoPE is implemented"):
        GPTCustomForCausalLM.from_pretrained(tmp_path, rope_parameters={"rope_type": "linear", "factor": 2.0})
    # a learned-position model has no RoPE to set: refused by name (GPT2LMHeadModel: a TypeError), not ignored
    gpt2 = saved_folder(tmp_path / "gpt2", "GPT2LMHeadModel")
    with pytest.raises(TypeError):
        transformers.GPT2LMHeadModel.from_pretrained(gpt2, rope_parameters=rope)
    with pytest.raises(UserError, match=r"from_pretrained got rope_parameters=.*does not support"):
        GPTCustomForCausalLM.from_pretrained(gpt2, rope_parameters=rope)


def test_sharded_pytorch_model_bin_checkpoints_load(tmp_path):
    """pytorch_model.bin.index.json with its shards, as older repositories ship: transformers loads it, the
    conversion said the folder had no weights."""
    import json

    reference = reference_model("GPT2LMHeadModel")
    reference.config.save_pretrained(tmp_path)
    state = reference.state_dict()
    names = sorted(state)
    shards = {"pytorch_model-00001-of-00002.bin": names[::2], "pytorch_model-00002-of-00002.bin": names[1::2]}
    for shard, keys in shards.items():
        torch.save({key: state[key].clone() for key in keys}, tmp_path / shard)
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {key: shard for shard, keys in shards.items() for key in keys}}))
    theirs = GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    prompt = torch.randint(3, 99, (1, 7), generator=torch.Generator().manual_seed(4))
    # from_pretrained, and our commands' loader (eval --model, init_from, export), which checks the folder first
    for ours in (GPTCustomForCausalLM.from_pretrained(tmp_path), load_model_folder(tmp_path)):
        with torch.no_grad():
            torch.testing.assert_close(ours(prompt).logits, theirs(prompt).logits, rtol=0, atol=1e-5)


def test_an_openai_gpt_config_without_token_ids_has_none_as_transformers_reads_it(tmp_path):
    """OpenAIGPTConfig has no bos/eos ids; the conversion filled in GPT-2's 50256 (past a 99-token vocabulary)."""
    import json

    torch.manual_seed(0)
    openai = transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig(
        vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4)).eval()
    openai.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({key: value for key, value in config.items()
                                                      if key not in ("bos_token_id", "eos_token_id")}))
    theirs = transformers.OpenAIGPTLMHeadModel.from_pretrained(tmp_path)
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path)
    assert (ours.config.bos_token_id, ours.config.eos_token_id) == (theirs.config.bos_token_id,
                                                                    theirs.config.eos_token_id) == (None, None)
    assert ours.generation_config.eos_token_id == theirs.generation_config.eos_token_id is None


ALIASED_FIELDS = [(family, alias, field) for family in ("GPT2", "OpenAIGPT")
                  for alias, field in getattr(transformers, f"{family}Config").attribute_map.items()]


@pytest.mark.parametrize("family, alias, field", ALIASED_FIELDS)
def test_a_config_json_naming_a_field_by_its_generic_alias_loads_as_transformers_loads_it(tmp_path, family, alias,
                                                                                          field):
    """GPT2Config and OpenAIGPTConfig read num_attention_heads as n_head (their attribute_map); the conversion read
    config.json by the canonical names only: 12 heads (our default) where the folder says 4, no error, other logits;
    or the weights blamed for a config they fit (the convmatrix hunt). Reference: transformers' class on the same
    folder."""
    torch.manual_seed(0)
    config = getattr(transformers, f"{family}Config")(vocab_size=99, n_positions=32, n_embd=48, n_layer=2, n_head=4)
    reference_class = getattr(transformers, f"{family}LMHeadModel")
    randomize_(reference_class(config)).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved[alias] = saved.pop(field)
    (tmp_path / "config.json").write_text(json.dumps(saved))
    theirs = reference_class.from_pretrained(tmp_path).eval()
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path).eval()
    assert getattr(theirs.config, field) == getattr(config, field)  # transformers did read the alias
    ids = torch.randint(0, 99, (2, 32))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, theirs(ids).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("class_name", ["GPT2ForSequenceClassification", "LlamaForSequenceClassification"])
def test_a_config_json_giving_num_labels_without_id2label_loads_that_many_labels(tmp_path, class_name):
    """PretrainedConfig reads `num_labels` alone into id2label; the conversion copied id2label only, built 2 labels,
    refused the saved 3-label head as another shape, and its advice (ignore_mismatched_sizes=True) gave a random one
    (the roundreview22 hunt). Reference: transformers' class on the same folder."""
    saved_folder(tmp_path, class_name, num_labels=3, pad_token_id=PAD)
    saved = json.loads((tmp_path / "config.json").read_text())
    for key in ("id2label", "label2id"):
        saved.pop(key)
    (tmp_path / "config.json").write_text(json.dumps({**saved, "num_labels": 3}))
    theirs = getattr(transformers, class_name).from_pretrained(tmp_path).eval()
    ours = GPTCustomForSequenceClassification.from_pretrained(tmp_path).eval()
    assert ours.config.num_labels == theirs.config.num_labels == 3
    assert ours.config.id2label == theirs.config.id2label
    ids = torch.randint(1, 99, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, theirs(ids).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("head_labels, edits", [
    (3, {"num_labels": 3, "id2label": {"0": "neg", "1": "pos"}, "label2id": {"neg": 0, "pos": 1}}),
    (2, {"num_labels": 2, "id2label": {"0": "neg", "1": "neu", "2": "pos"}}),
    (2, {"id2label": {"0": "neg", "1": "pos"}, "label2id": None}),
    (2, {"id2label": None, "label2id": {"neg": 0, "pos": 1}}),  # label2id alone: transformers names LABEL_i
])
def test_a_config_jsons_num_labels_and_id2label_are_read_as_transformers_reads_them(tmp_path, head_labels, edits):
    """A num_labels that disagrees with id2label wins in PretrainedConfig (labels named LABEL_i); the conversion let
    id2label win, refused a folder GPT2ForSequenceClassification loads, and advised ignore_mismatched_sizes=True,
    which throws the trained head away (the roundreview25 hunt). Reference: transformers' class on the same folder."""
    saved_folder(tmp_path, "GPT2ForSequenceClassification", num_labels=head_labels, pad_token_id=PAD)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved.update(edits)
    (tmp_path / "config.json").write_text(json.dumps({key: value for key, value in saved.items() if value is not None}))
    theirs = transformers.GPT2ForSequenceClassification.from_pretrained(tmp_path).eval()
    ours = GPTCustomForSequenceClassification.from_pretrained(tmp_path).eval()
    assert ours.config.id2label == theirs.config.id2label and ours.config.label2id == theirs.config.label2id
    ids = torch.randint(1, 99, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, theirs(ids).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("to_reference", ["llama", "openai"])
def test_converting_back_to_transformers_keeps_the_generation_config(to_reference):
    """to_llama_model / to_openai_gpt_model gave the generation config their config implies: eos [2, 7, 9] became 2,
    the penalty and max_new_tokens were gone."""
    from hf_gpt_custom.convert_llama import to_llama_model
    from hf_gpt_custom.convert_openai_gpt import from_openai_gpt_model, to_openai_gpt_model

    if to_reference == "llama":
        original = with_generation_settings(reference_model("LlamaForCausalLM"))
        back = to_llama_model(from_llama_model(original, GPTCustomForCausalLM))
    else:
        torch.manual_seed(0)
        original = with_generation_settings(randomize_(transformers.OpenAIGPTLMHeadModel(
            transformers.OpenAIGPTConfig(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4))).eval())
        back = to_openai_gpt_model(from_openai_gpt_model(original, GPTCustomForCausalLM))
    for name, value in GENERATION.items():
        assert getattr(back.generation_config, name) == value, name
    prompt = torch.randint(3, 99, (1, 5), generator=torch.Generator().manual_seed(4))
    assert back.generate(prompt, pad_token_id=PAD).tolist() == original.generate(prompt, pad_token_id=PAD).tolist()


@pytest.mark.parametrize("problem", ["bogus dtype", "config.json not JSON", "an override of a weight's shape",
                                     "a field of the wrong type"])
def test_a_bad_folder_or_argument_is_one_line_naming_the_fix(tmp_path, problem):
    saved_folder(tmp_path, "GPT2LMHeadModel")
    kwargs, match = {}, None
    if problem == "bogus dtype":
        kwargs, match = {"dtype": "bogus"}, "dtype='bogus' is not a torch dtype; pass 'auto'"
    elif problem == "config.json not JSON":
        (tmp_path / "config.json").write_text("{'n_layer': 2,")
        match = "config.json is not valid JSON"
    elif problem == "a field of the wrong type":  # transformers' GPT2Config refuses it; its error, in one line
        saved = json.loads((tmp_path / "config.json").read_text())
        (tmp_path / "config.json").write_text(json.dumps({**saved, "n_head": "four"}))
        match = "this GPT-2 config.json is not valid for transformers' GPT2Config: .*n_head"
    else:
        kwargs, match = {"n_positions": 48}, "weights do not fit this config .*size mismatch.*leave out the override"
    with pytest.raises(UserError, match=match):
        GPTCustomForCausalLM.from_pretrained(tmp_path, **kwargs)


def test_a_config_llama_cannot_express_is_refused_by_name_when_converting_back():
    """n_embd=30 with 4 heads of head_dim 8: LlamaConfig's own validation error came from deep inside transformers."""
    from hf_gpt_custom.convert_llama import LLAMA_BLOCK, to_llama_model

    config = GPTCustomConfig(vocab_size=50, n_positions=32, n_embd=30, n_layer=1, n_head=4, head_dim=8, **LLAMA_BLOCK)
    with pytest.raises(UserError, match="LlamaForCausalLM cannot express this GPTCustom config: .*keep this model"):
        to_llama_model(GPTCustomForCausalLM(config))


@pytest.mark.parametrize("class_name", ["GPT2LMHeadModel", "LlamaForCausalLM"])
@pytest.mark.parametrize("how", ["config.json says tied", "tie_word_embeddings=True given"])
def test_an_lm_head_of_its_own_is_kept_where_the_config_says_tied_as_transformers_keeps_it(tmp_path, class_name, how):
    """A folder whose weights hold an lm_head.weight unlike the token embedding while its config (or the caller)
    says tie_word_embeddings=True: transformers keeps the stored head ("we will NOT tie them"); tying it to wte
    changed every logit in silence. Reference: transformers' own class loading the same folder."""
    import json

    reference_model(class_name, tie_word_embeddings=False).save_pretrained(tmp_path)
    kwargs = {"tie_word_embeddings": True}
    if how == "config.json says tied":
        config = json.loads((tmp_path / "config.json").read_text())
        (tmp_path / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
        kwargs = {}
    theirs = getattr(transformers, class_name).from_pretrained(tmp_path, **kwargs).eval()
    with pytest.warns(UserWarning, match="lm_head.weight of its own.*loaded untied"):
        ours = GPTCustomForCausalLM.from_pretrained(tmp_path, **kwargs).eval()
    assert ours.lm_head.weight is not ours.transformer.wte.weight and not ours.config.tie_word_embeddings
    input_ids = torch.randint(1, 98, (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids).logits, theirs(input_ids).logits, rtol=0, atol=1e-5)
    ours.save_pretrained(tmp_path / "ours")  # and it saves as it computes
    reloaded = GPTCustomForCausalLM.from_pretrained(tmp_path / "ours").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids).logits, theirs(input_ids).logits, rtol=0, atol=1e-5)
    # a task head on the same folder knows its body is untied: GPT-1's auxiliary LM loss through wte would score
    # with another head than the model's own, and is refused as for any untied body
    with pytest.warns(UserWarning, match="loaded untied"):
        classifier = GPTCustomForSequenceClassification.from_pretrained(tmp_path, num_labels=2, pad_token_id=0, **kwargs)
    assert not classifier.config.tie_word_embeddings
    with pytest.raises(UserError, match="needs the LM head tied"):
        classifier(input_ids, labels=torch.tensor([0, 1]), lm_loss_weight=0.5)


def test_a_tied_checkpoint_storing_the_embedding_twice_stays_tied(tmp_path):
    """pytorch_model.bin of a tied model stores the same matrix as lm_head.weight and wte: still one, tied."""
    import json

    reference_model("GPT2LMHeadModel").save_pretrained(tmp_path, safe_serialization=False)
    assert json.loads((tmp_path / "config.json").read_text()).get("tie_word_embeddings", True)
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path)
    assert ours.lm_head.weight is ours.transformer.wte.weight and ours.config.tie_word_embeddings


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
@pytest.mark.parametrize("converted", [True, False], ids=["gpt2 folder", "our folder"])
def test_a_subfolder_model_generates_with_its_own_generation_config(tmp_path, converted, relative, monkeypatch):
    """from_pretrained(folder, subfolder="sub") with a model in the folder too: transformers 5.24 reads the folder's
    generation_config.json for an absolute path (GPT2LMHeadModel then stops at the other model's eos); the
    subfolder's own is the one its config.json goes with."""
    outer, inner = reference_model("GPT2LMHeadModel"), reference_model("GPT2LMHeadModel")
    if not converted:
        outer, inner = from_gpt2_model(outer, GPTCustomForCausalLM), from_gpt2_model(inner, GPTCustomForCausalLM)
    outer.generation_config.eos_token_id = outer.generation_config.bos_token_id = 7  # another model's
    inner.generation_config.repetition_penalty = 1.7  # in its generation_config.json only
    outer.save_pretrained(tmp_path.absolute())
    inner.save_pretrained(tmp_path.absolute() / "sub")
    monkeypatch.chdir(tmp_path.parent)
    folder = tmp_path.name if relative else tmp_path.absolute()
    loaded = GPTCustomForCausalLM.from_pretrained(folder, subfolder="sub")
    assert loaded.config.eos_token_id == loaded.generation_config.eos_token_id == TINY_GPT2["eos_token_id"]
    assert loaded.generation_config.repetition_penalty == 1.7


@pytest.mark.parametrize("pad_to", [None, 64])
@pytest.mark.parametrize("how", ["keyword", "config", "config folder"])
def test_another_vocab_size_than_the_folders_is_refused_naming_resize(tmp_path, pad_to, how):
    """from_pretrained(folder, vocab_size=104) after adding tokens: a padded folder has as many rows either way, so
    the new ids took never-trained padding rows in silence (GPT-2 refuses a size mismatch); the fix is
    resize_token_embeddings, whose new rows start at the mean of the trained ones."""
    config = GPTCustomConfig(**TINY_GPT2, pad_vocab_size_to_multiple_of=pad_to)
    GPTCustomForCausalLM(config).save_pretrained(tmp_path)
    for size in (104, 70):
        if how == "keyword":
            kwargs = {"vocab_size": size}
        elif how == "config":
            kwargs = {"config": AutoConfig.from_pretrained(tmp_path, vocab_size=size)}
        else:  # transformers reads a config given by its folder too
            AutoConfig.from_pretrained(tmp_path, vocab_size=size).save_pretrained(tmp_path / f"config_{size}")
            kwargs = {"config": str(tmp_path / f"config_{size}")}
        with pytest.raises(UserError, match=rf"saved with vocab_size=99, not {size}.*resize_token_embeddings\({size}\)"):
            GPTCustomForCausalLM.from_pretrained(tmp_path, **kwargs)
    assert GPTCustomForCausalLM.from_pretrained(tmp_path, vocab_size=99).config.vocab_size == 99
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match="broken.json is not valid JSON"):
        GPTCustomForCausalLM.from_pretrained(tmp_path, config=str(tmp_path / "broken.json"))
    with pytest.raises(UserError, match="not 104"):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path, vocab_size=104)


def test_other_configs_names_as_loading_keywords_act_as_at_construction(tmp_path):
    """from_pretrained(folder, rope_parameters=...) (LlamaConfig's spelling of rope_theta) was a TypeError from the
    model's __init__: transformers hands a keyword the config has no attribute for to the model. It now sets
    rope_theta, as LlamaForCausalLM.from_pretrained does (reference: the same folder loaded with rope_theta=), and the
    names this config does not implement are refused naming its own field."""
    GPTCustomForCausalLM(GPTCustomConfig(**TINY_GPT2, position_embedding_type="rope")).save_pretrained(tmp_path)
    by_llama_name = GPTCustomForCausalLM.from_pretrained(tmp_path, rope_parameters={"rope_type": "default",
                                                                                     "rope_theta": 50.0}).eval()
    by_our_name = GPTCustomForCausalLM.from_pretrained(tmp_path, rope_theta=50.0).eval()
    as_saved = GPTCustomForCausalLM.from_pretrained(tmp_path).eval()
    input_ids = torch.randint(1, 98, (1, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(by_llama_name(input_ids).logits, by_our_name(input_ids).logits, rtol=0, atol=0)
        assert not torch.allclose(by_llama_name(input_ids).logits, as_saved(input_ids).logits)
    for keyword, fix in (({"attention_dropout": 0.3}, "attn_pdrop"), ({"hidden_act": "gelu"}, "activation_function"),
                         ({"rope_parameters": {"rope_type": "linear", "factor": 2.0}}, "only plain RoPE")):
        with pytest.raises(UserError, match=fix):
            GPTCustomForCausalLM.from_pretrained(tmp_path, **keyword)


def test_an_untied_folder_that_lost_its_lm_head_is_called_incomplete_not_tied(tmp_path):
    """The message for untying a tied folder on load must not reach a folder saved untied (LLaMA-style) whose
    weights lack lm_head.weight: that file is incomplete, and tying it would silently predict through wte."""
    from safetensors.torch import load_file, save_file

    GPTCustomForCausalLM(GPTCustomConfig(**TINY_GPT2, tie_word_embeddings=False)).save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    del state["lm_head.weight"]
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match="does not hold every weight.*lm_head.weight.*incomplete"):
        GPTCustomForCausalLM.from_pretrained(tmp_path)


def test_untying_a_tied_folder_on_load_is_refused_naming_how_to_untie(tmp_path):
    """tie_word_embeddings=False on a tied folder (no lm_head.weight stored): transformers' GPT-2 starts a random
    head; ours is refused, and the message gave "another architecture or incomplete — save it again"."""
    GPTCustomForCausalLM(GPTCustomConfig(**TINY_GPT2)).save_pretrained(tmp_path)
    with pytest.raises(UserError, match="holds no lm_head.weight.*leave tie_word_embeddings out.*clone"):
        GPTCustomForCausalLM.from_pretrained(tmp_path, tie_word_embeddings=False)


def test_a_config_folder_is_read_with_the_callers_subfolder_for_the_vocab_check(tmp_path):
    """transformers reads `config=<folder>` with the call's subfolder/revision, so the check must too: reading the
    folder itself found no config.json and let a padded model load with another vocab_size in silence."""
    GPTCustomForCausalLM(GPTCustomConfig(**TINY_GPT2, pad_vocab_size_to_multiple_of=64)).save_pretrained(
        tmp_path / "model" / "sub")
    AutoConfig.from_pretrained(tmp_path / "model" / "sub", vocab_size=104).save_pretrained(tmp_path / "cfg" / "sub")
    with pytest.raises(UserError, match="saved with vocab_size=99, not 104"):
        GPTCustomForCausalLM.from_pretrained(tmp_path / "model", subfolder="sub", config=str(tmp_path / "cfg"))


@pytest.mark.parametrize("class_name", ["GPT2LMHeadModel", "LlamaForCausalLM"])
def test_a_converted_folder_keeps_the_generic_config_fields_transformers_reads(tmp_path, class_name):
    """Every transformers config carries PretrainedConfig's own fields, and generic code reads them from the model:
    the text-generation pipeline prepends config.prefix, forward returns hidden states per output_hidden_states. The
    conversion dropped them, so the pipeline generated from another prompt than transformers' class on the same
    folder (the pipelines hunt). Reference: transformers' class loading the same folder."""
    from transformers import pipeline

    from hf_gpt_custom import GPTCustomTokenizerFast

    generic = dict(prefix="ROMEO: ", output_hidden_states=True, sep_token_id=7, finetuning_task="lm",
                   task_specific_params={"text-generation": {"max_length": 20}}, tokenizer_class="GPTCustomTokenizer")
    saved_folder(tmp_path, class_name, **generic)
    theirs = getattr(transformers, class_name).from_pretrained(tmp_path)
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path)
    for name in generic:
        assert getattr(ours.config, name) == getattr(theirs.config, name), name
    # where it came from (PEFT's base_model_name_or_path, lm-eval's tokenizer source), as transformers records it
    assert ours.name_or_path == theirs.name_or_path == str(tmp_path)
    convert = from_gpt2_model if class_name.startswith("GPT2") else from_llama_model
    assert convert(theirs, GPTCustomForCausalLM).name_or_path == str(tmp_path)  # in memory: the reference's
    ids = torch.tensor([[5, 6, 7, 8]])
    assert len(ours(ids).hidden_states) == len(theirs(ids).hidden_states) == 3
    tokenizer = GPTCustomTokenizerFast.bytes_only()
    texts = [pipeline("text-generation", model=model, tokenizer=tokenizer)("ABC", max_new_tokens=4, do_sample=False)
             for model in (ours, theirs)]
    assert texts[0] == texts[1]
    assert pipeline("text-generation", model=ours, tokenizer=tokenizer).prefix == "ROMEO: "
    if class_name.startswith("Llama"):  # and back: the converted-back config holds them too
        back = to_llama_model(ours).config
        assert {name: getattr(back, name) for name in generic} == generic


def test_converting_back_to_openai_gpt_keeps_the_generic_config_fields():
    from hf_gpt_custom.convert_openai_gpt import GPT1_BLOCK, openai_gpt_config_from

    config = GPTCustomConfig(**TINY_GPT2, **GPT1_BLOCK, prefix="ROMEO: ", output_hidden_states=True, sep_token_id=7)
    back = openai_gpt_config_from(config)
    assert (back.prefix, back.output_hidden_states, back.sep_token_id) == ("ROMEO: ", True, 7)


@pytest.mark.parametrize("class_name", ["GPT2LMHeadModel", "LlamaForCausalLM"])
def test_token_ids_given_to_from_pretrained_reach_the_folders_generation_config(tmp_path, class_name):
    """from_pretrained(folder, eos_token_id=<an end-of-turn id>) changed config.json's copy only: generate() kept
    stopping at the saved generation_config.json's eos, where transformers' class applies the argument to both (the
    genflow hunt). Reference: transformers' class loading the same folder with the same arguments."""
    reference_model(class_name).save_pretrained(tmp_path)
    prompt = torch.tensor([[5, 6, 7, 8]])
    theirs = getattr(transformers, class_name).from_pretrained(tmp_path)
    greedy = theirs.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=PAD)[0, 4:].tolist()
    stop_at = greedy[3]  # the 4th token it generates
    arguments = dict(eos_token_id=stop_at, pad_token_id=PAD, bos_token_id=3)
    theirs = getattr(transformers, class_name).from_pretrained(tmp_path, **arguments)
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path, **arguments)
    for name, value in arguments.items():
        assert getattr(ours.generation_config, name) == getattr(theirs.generation_config, name) == value, name
    tokens = [model.generate(prompt, max_new_tokens=8, do_sample=False)[0, 4:].tolist() for model in (ours, theirs)]
    assert tokens[0] == tokens[1] and len(tokens[0]) < 8


@pytest.mark.parametrize("class_name", ["GPT2LMHeadModel", "LlamaForCausalLM"])
def test_a_converted_folder_keeps_the_rest_of_the_generic_config_fields(tmp_path, class_name):
    """The generic fields the test above leaves at their defaults: output_attentions (forward returns the attention
    maps), return_dict, decoder_start_token_id. Reference: transformers' class loading the same folder (the mutation
    sweep: each could be dropped from the list without a test failing)."""
    saved_folder(tmp_path, class_name, return_dict=False, decoder_start_token_id=3)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["output_attentions"] = True  # transformers validates it against sdpa on save: written by hand, loaded eager
    (tmp_path / "config.json").write_text(json.dumps(saved))
    theirs = getattr(transformers, class_name).from_pretrained(tmp_path, attn_implementation="eager")
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path, attn_implementation="eager")
    for name in ("output_attentions", "return_dict", "decoder_start_token_id"):
        assert getattr(ours.config, name) == getattr(theirs.config, name), name
    assert (theirs.config.output_attentions, theirs.config.return_dict, theirs.config.decoder_start_token_id) == \
        (True, False, 3)
    theirs.config.return_dict = True  # transformers 5's GPT-2 and Llama fail with return_dict=False in the config
    ids = torch.tensor([[5, 6, 7, 8]])
    assert len(ours(ids, return_dict=True).attentions) == len(theirs(ids).attentions) == 2


@pytest.mark.parametrize("to", ["Llama", "OpenAI GPT"])
def test_converting_back_keeps_generic_fields_whose_value_is_false_or_zero(to):
    """sep_token_id=0 and return_dict=False are set values, not unset ones: the converted-back config held None and
    True (transformers' defaults) where a falsy check skipped them (the mutation sweep). Reference: the values the
    config holds."""
    from hf_gpt_custom.convert_llama import llama_config_from
    from hf_gpt_custom.convert_openai_gpt import GPT1_BLOCK, openai_gpt_config_from

    generic = dict(sep_token_id=0, decoder_start_token_id=0, return_dict=False)
    if to == "Llama":
        config = GPTCustomConfig(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                 position_embedding_type="rope", norm_type="rmsnorm", mlp_type="swiglu",
                                 attention_bias=False, mlp_bias=False, tie_word_embeddings=False, **generic)
        back = llama_config_from(config)
    else:
        back = openai_gpt_config_from(GPTCustomConfig(**TINY_GPT2, **GPT1_BLOCK, **generic))
    assert {name: getattr(back, name) for name in generic} == generic


def test_a_folder_saying_output_attentions_loads_with_the_attention_transformers_chooses(tmp_path):
    """output_attentions=true carried over through the config's property setter switched our model to eager attention
    (slower; a T x T matrix a layer on a GPU) where GPT2LMHeadModel on the same folder stays on sdpa, and a final/
    trained from it reloaded as sdpa (the convflow hunt). Reference: transformers' class on the same folder."""
    saved_folder(tmp_path, "GPT2LMHeadModel")
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["output_attentions"] = True  # transformers validates it against sdpa on save: written by hand
    (tmp_path / "config.json").write_text(json.dumps(saved))
    theirs = transformers.GPT2LMHeadModel.from_pretrained(tmp_path)
    ours = GPTCustomForCausalLM.from_pretrained(tmp_path)
    assert ours.config._attn_implementation == theirs.config._attn_implementation == "sdpa"
    assert ours.config.output_attentions is theirs.config.output_attentions is True
