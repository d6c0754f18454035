"""Strict loading for our own commands: what from_pretrained lets through silently is an error here."""

import json
import re
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
from hf_gpt_custom.errors import MissingFileError, UserError
from hf_gpt_custom.manifest import verify_manifest, write_manifest
from hf_gpt_custom.model_folder import load_model_folder


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


@pytest.mark.parametrize("inside", ["final", "export"])
def test_a_run_folder_given_as_the_model_points_at_the_model_inside_it(tmp_path, inside):
    """`eval --model runs/ref` said only "has no config.json"; the model is in runs/ref/final (or export/)."""
    from hf_gpt_custom.model_folder import check_model_folder

    run_dir = tmp_path / "runs" / "ref"
    (run_dir / inside).mkdir(parents=True)
    (run_dir / inside / "config.json").write_text('{"model_type": "gpt_custom"}')
    with pytest.raises(MissingFileError, match=rf"ref has no config\.json; did you mean {run_dir / inside}\?"):
        check_model_folder(run_dir)
    (run_dir / inside / "config.json").unlink()  # an unfinished run: nothing inside to suggest
    with pytest.raises(MissingFileError, match=r"has no config\.json; pass a folder written by save_pretrained$"):
        check_model_folder(run_dir)


def test_a_peft_adapter_folder_given_as_the_model_is_named_with_the_merge_that_makes_one(tmp_path):
    """A folder PEFT's save_pretrained wrote was told "pass a folder written by save_pretrained" (the crossfeature
    hunt): it holds an adapter, which needs its base. The merge the message names is checked to give a model folder
    that loads, with the adapted model's logits."""
    import copy

    import torch
    from peft import LoraConfig, PeftModel, PromptTuningConfig, get_peft_model

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
    from hf_gpt_custom.model_folder import check_model_folder

    config = GPTCustomConfig(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    torch.manual_seed(0)
    base = GPTCustomForCausalLM(config).eval()
    adapted = get_peft_model(copy.deepcopy(base), LoraConfig(target_modules=["c_attn"], init_lora_weights=False))
    adapted.save_pretrained(tmp_path / "adapter")
    with pytest.raises(UserError, match=r"adapter is a PEFT adapter \(adapter_config\.json, LORA\), not a model: merge "
                                        r"it into its base and save that \(PeftModel\.from_pretrained\(base_model, "):
        check_model_folder(tmp_path / "adapter")
    prompt_tuned = get_peft_model(copy.deepcopy(base), PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=2))
    prompt_tuned.save_pretrained(tmp_path / "prompt")  # nothing to merge: PEFT gives it no merge_and_unload
    assert not hasattr(PeftModel.from_pretrained(copy.deepcopy(base), str(tmp_path / "prompt")), "merge_and_unload")
    with pytest.raises(UserError, match=r"prompt is a PEFT adapter \(adapter_config\.json, PROMPT_TUNING\), not a "
                                        r"model, and its learned tokens cannot be merged into weights: evaluate it"):
        check_model_folder(tmp_path / "prompt")
    merged = PeftModel.from_pretrained(base, str(tmp_path / "adapter")).merge_and_unload()
    merged.save_pretrained(tmp_path / "merged")
    check_model_folder(tmp_path / "merged")
    ids = torch.randint(0, 64, (1, 8))
    with torch.no_grad():
        torch.testing.assert_close(GPTCustomForCausalLM.from_pretrained(tmp_path / "merged")(ids).logits,
                                   adapted.eval()(ids).logits, rtol=0, atol=1e-5)


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


# --- from_pretrained itself: the manifest and missing tensors ---------------------------------------------------------


def _flip_a_weight_byte(folder):
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-10] ^= 1  # inside the last tensor: safetensors itself still loads the file
    (folder / "model.safetensors").write_bytes(bytes(data))


@pytest.mark.parametrize("loader", ["GPTCustomForCausalLM", "AutoModelForCausalLM", "AutoModel"])
def test_from_pretrained_refuses_a_folder_that_does_not_match_its_manifest(saved, loader):
    import transformers

    import hf_gpt_custom

    _, folder = saved
    write_manifest(folder)
    _flip_a_weight_byte(folder)
    model_class = getattr(hf_gpt_custom, loader, None) or getattr(transformers, loader)
    with pytest.raises(UserError, match=r"is damaged: model\.safetensors does not match its sha256"):
        model_class.from_pretrained(folder)


def test_from_pretrained_refuses_a_missing_tensor_even_without_a_manifest(saved, caplog):
    """transformers would initialise the tensor at random and log a line; our folders say which tensor is missing."""
    from transformers import AutoModelForCausalLM

    _, folder = saved
    state = load_file(folder / "model.safetensors")
    del state["transformer.h.0.mlp.c_fc.weight"]
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    for load in (GPTCustomForCausalLM.from_pretrained, AutoModelForCausalLM.from_pretrained):
        with pytest.raises(UserError, match=r"missing 1, wrong shape 0 \(transformer\.h\.0\.mlp\.c_fc\.weight\)"):
            load(folder)


def test_a_new_task_head_on_a_causal_lm_folder_still_loads_but_its_body_must_be_complete(saved):
    """transformers' fine-tuning path: the head's weights are new (initialised, as transformers reports them);
    a body weight missing from the file is still an error."""
    from hf_gpt_custom import GPTCustomForSequenceClassification

    model, folder = saved
    head, info = GPTCustomForSequenceClassification.from_pretrained(folder, num_labels=2, output_loading_info=True)
    assert set(info["missing_keys"]) == {"score.weight"}
    assert head.transformer.h[1].mlp.c_fc.weight.equal(model.transformer.h[1].mlp.c_fc.weight)
    state = load_file(folder / "model.safetensors")
    del state["transformer.ln_f.weight"]
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match=r"missing 1, wrong shape 0 \(transformer\.ln_f\.weight\)"):
        GPTCustomForSequenceClassification.from_pretrained(folder, num_labels=2)


def test_a_head_folder_missing_its_own_head_weight_is_refused(saved, tmp_path):
    """Loaded as the class that saved it, every weight counts: the head's too."""
    from hf_gpt_custom import GPTCustomForSequenceClassification

    _, folder = saved
    GPTCustomForSequenceClassification.from_pretrained(folder, num_labels=2).save_pretrained(tmp_path / "head")
    state = load_file(tmp_path / "head" / "model.safetensors")
    del state["score.weight"]
    save_file(state, tmp_path / "head" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match=r"missing 1, wrong shape 0 \(score\.weight\)"):
        GPTCustomForSequenceClassification.from_pretrained(tmp_path / "head")


@pytest.mark.parametrize("saved_by", ["GPTCustomForSequenceClassification", "GPTCustomForTokenClassification"])
def test_an_untied_body_without_its_lm_head_is_refused_as_a_causal_lm(tmp_path, saved_by):
    """A task head's folder keeps no lm_head.weight. Tied, the LM head is the embedding and the causal LM loads
    whole; untied (LLaMA's layout), loading it as a causal LM would start the LM head at random and generate
    fluent-looking wrong tokens. transformers loads it with a logged report; we refuse it. (A base model's folder
    starts a new LM head, as in transformers: tests/transformers_common's test_correct_missing_keys.)"""
    import hf_gpt_custom
    from transformers import AutoModelForCausalLM

    for tied in (True, False):
        config = GPTCustomConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=32, num_labels=2,
                                 pad_token_id=0, tie_word_embeddings=tied)
        folder = tmp_path / f"tied_{tied}"
        body_model = getattr(hf_gpt_custom, saved_by)(config)
        body_model.save_pretrained(folder)
        body = getattr(body_model, "transformer", body_model)
        if tied:
            loaded = GPTCustomForCausalLM.from_pretrained(folder)
            assert loaded.lm_head.weight[:64].equal(body.wte.weight[:64])
            continue
        for load in (GPTCustomForCausalLM.from_pretrained, AutoModelForCausalLM.from_pretrained, load_model_folder):
            with pytest.raises(UserError, match=rf"saved by {saved_by}, which keeps no lm_head\.weight.*untied"):
                load(folder)


@pytest.mark.parametrize("prefix", ["_orig_mod.", "module."])
def test_weights_saved_under_a_wrappers_prefix_are_refused_with_the_key_mapping_that_loads_them(saved, tmp_path,
                                                                                                prefix):
    """A compiled or DDP-wrapped model's state_dict names every weight `_orig_mod.…`/`module.…`: GPT2LMHeadModel
    loads such a file as a random model (a logged report); ours refuses it, and the message's key_mapping, pasted,
    loads the saved weights."""
    model, _ = saved
    model.save_pretrained(tmp_path / "wrapped", state_dict={prefix + k: v for k, v in model.state_dict().items()})
    hint = r"with \S+ prefix '" + re.escape(prefix) + r"': load it with key_mapping="
    with pytest.raises(UserError, match=hint) as refused:
        GPTCustomForCausalLM.from_pretrained(tmp_path / "wrapped")
    pasted = re.search(r"key_mapping=(\{.*?\})", str(refused.value)).group(1)
    loaded = GPTCustomForCausalLM.from_pretrained(tmp_path / "wrapped", key_mapping=eval(pasted))
    for (name, expected), actual in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert actual.equal(expected), name


def test_each_file_is_hashed_once_per_process_until_it_changes(saved, monkeypatch):
    """check_model_folder and from_pretrained both verify: a 500 MB file is not hashed twice per load, nor again on
    the next load; any write (new mtime/ctime, or a new inode) makes the next load hash it again."""
    from hf_gpt_custom import manifest

    _, folder = saved
    write_manifest(folder)
    hashed = []
    original = manifest.sha256_file
    monkeypatch.setattr(manifest, "sha256_file", lambda path: hashed.append(Path(path).name) or original(path))
    load_model_folder(folder)
    load_model_folder(folder)
    GPTCustomForCausalLM.from_pretrained(folder)
    assert hashed.count("model.safetensors") == 1
    _flip_a_weight_byte(folder)
    with pytest.raises(UserError, match=r"model\.safetensors does not match its sha256"):
        GPTCustomForCausalLM.from_pretrained(folder)
    assert hashed.count("model.safetensors") == 2


def test_the_manifest_leaves_documentation_editable_and_protects_the_rest(saved):
    """The model card is edited before a push as a matter of course: README.md, plots and the run's records are not
    in the manifest; weights, config, code and tokenizer files are."""
    from hf_gpt_custom.manifest import is_documentation

    _, folder = saved
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# card\n")
    (folder / "eval").mkdir()
    (folder / "eval" / "table.md").write_text("| task |\n")
    write_manifest(folder)
    listed = json.loads((folder / "manifest.json").read_text())["files"]
    assert {"config.json", "generation_config.json", "model.safetensors", "modeling_gpt_custom.py"} <= set(listed)
    assert not {"README.md", "eval/table.md"} & set(listed)
    assert [is_documentation(name) for name in ("README.md", "loss_curve.png", "training_summary.json",
                                                 "eval/results.json", "config.json", "tokenizer.json", "modeling_gpt_custom.py",
                                                 "optimizer.bin", "training_state.json")] == [True] * 4 + [False] * 5
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# my own card\n")
    assert verify_manifest(folder) is None
    load_model_folder(folder)


def test_only_json_reports_under_eval_are_documentation():
    """eval/ holds the evaluation's JSON reports (documentation); code or weights put there stay protected."""
    from hf_gpt_custom.manifest import is_documentation

    assert is_documentation("eval/results.json")
    assert not any(is_documentation(name) for name in ("eval/model.safetensors", "eval/score.py", "eval/vocab.txt"))
