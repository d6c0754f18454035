"""What `evaluate` accepts as a model: a local folder loads strictly (our model, or a transformers GPT-2 converted on
load) and needs its tokenizer files; anything else is refused with a named error before a number is computed."""

from __future__ import annotations

import shutil

import pytest
import torch

from hf_gpt_custom.eval.runner import evaluate, load_model_and_tokenizer
from hf_gpt_custom.errors import MissingFileError, UserError

TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json")


@pytest.fixture
def our_model_folder(tmp_path, tiny_model_folder):
    """A GPTCustomForCausalLM folder (2 layers, 32 wide) with the tiny GPT-2 tokenizer's files (vocabulary of 400)."""
    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM

    folder = tmp_path / "ours"
    config = GPTCustomConfig(vocab_size=400, n_positions=256, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)
    GPTCustomForCausalLM(config).save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(tiny_model_folder / name, folder / name)
    return folder


def run(model, **kwargs):
    return evaluate(str(model), **{"tasks": ["copa"], "shots": [0], "limit": 2, "show_progress": False, **kwargs})


def test_a_complete_folder_of_our_model_evaluates(our_model_folder):
    assert len(run(our_model_folder).results) == 1


def test_tokenizer_json_alone_is_a_complete_vocabulary(our_model_folder):
    (our_model_folder / "vocab.json").unlink()
    (our_model_folder / "merges.txt").unlink()
    assert len(run(our_model_folder).results) == 1


@pytest.mark.parametrize("removed", [TOKENIZER_FILES, ("merges.txt", "tokenizer.json")])
def test_a_folder_without_tokenizer_vocabulary_is_refused_naming_the_files(our_model_folder, removed):
    """Without them the tokenizer would fall back to a bytes-only vocabulary and the scores would be wrong."""
    for name in removed:
        (our_model_folder / name).unlink()
    missing = ", ".join(name for name in ("tokenizer.json", "vocab.json", "merges.txt") if name in removed)
    with pytest.raises(MissingFileError, match=f"has no tokenizer vocabulary: missing {missing} "):
        run(our_model_folder)


def test_a_gpt2_folder_without_tokenizer_files_is_refused(tmp_path, tiny_model_folder):
    """transformers' GPT-2 tokenizer would load with an empty vocabulary: only eval's own check stands in the way."""
    folder = tmp_path / "gpt2"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model_folder / name, folder / name)
    with pytest.raises(MissingFileError, match="has no tokenizer vocabulary: missing tokenizer.json, vocab.json, merges.txt "):
        run(folder)


def test_cli_names_the_missing_tokenizer_files_in_one_line(our_model_folder, tmp_path, capsys):
    from hf_gpt_custom.cli import main

    for name in TOKENIZER_FILES:
        (our_model_folder / name).unlink()
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--model", str(our_model_folder), "--tasks", "copa", "--limit", "2", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "tokenizer.json" in err and "Traceback" not in err


def test_a_missing_weight_is_an_error_not_a_random_init(our_model_folder):
    from safetensors.torch import load_file, save_file

    weights = load_file(our_model_folder / "model.safetensors")
    del weights["transformer.h.1.mlp.c_fc.weight"]
    save_file(weights, our_model_folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match=r"does not hold every weight.*h\.1\.mlp\.c_fc\.weight"):
        run(our_model_folder)


def test_another_architecture_loads_strictly_a_random_lm_head_is_refused(tmp_path, tiny_model_folder):
    """Eval scores any causal LM, but a BERT encoder folder (no LM head) must not score with a randomly initialised
    head, as AutoModelForCausalLM.from_pretrained would quietly give it."""
    from transformers import BertConfig, BertLMHeadModel, BertModel

    config = BertConfig(vocab_size=400, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, is_decoder=True)
    for model_class in (BertModel, BertLMHeadModel):
        model_class(config).save_pretrained(tmp_path / model_class.__name__)
        for name in TOKENIZER_FILES:
            shutil.copy(tiny_model_folder / name, tmp_path / model_class.__name__ / name)
    with pytest.raises(UserError, match=r"does not hold every weight.*cls\.predictions"):
        run(tmp_path / "BertModel")
    run(tmp_path / "BertLMHeadModel")  # complete: scored like any causal LM


def test_a_nonexistent_model_is_a_named_error(tmp_path, monkeypatch):
    with pytest.raises(MissingFileError, match="does not exist"):
        run(tmp_path / "no_such_run" / "final")
    # "runs/final" could be a Hub id: offline, the error says it is neither a folder nor a loadable id.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MissingFileError, match="'runs/final' is not a local folder and could not be loaded as a Hub id"):
        run("runs/final")


def test_a_transformers_gpt2_folder_is_converted_and_scores_like_the_loaded_gpt2(tiny_model_folder, tiny_model_and_tokenizer):
    """The folder loads as our class (strict loading), the loaded GPT2LMHeadModel object as itself: same scores."""
    model, _, _ = load_model_and_tokenizer(str(tiny_model_folder), None, "cpu", "float32")
    assert type(model).__name__ == "GPTCustomForCausalLM"
    from_folder = evaluate(str(tiny_model_folder), tasks=["arc_easy"], limit=4, show_progress=False, device="cpu")
    gpt2, tokenizer = tiny_model_and_tokenizer
    from_objects = evaluate(gpt2, tokenizer, tasks=["arc_easy"], limit=4, show_progress=False)
    for ours, theirs in zip(from_folder.examples, from_objects.examples, strict=True):
        assert ours["loglikelihoods"] == pytest.approx(theirs["loglikelihoods"], abs=1e-4, rel=0)


def test_a_loaded_model_stays_on_its_device_when_device_is_not_given(tiny_model_and_tokenizer, monkeypatch):
    """Where CUDA is visible, evaluate(folder) uses it, but a model object the caller passes is not moved (as
    lm-eval's HFLM keeps a model object where it is): moving it would change the caller's model in place."""
    import torch

    gpt2, tokenizer = tiny_model_and_tokenizer
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine; nothing may go there
    moves = []
    real_to = type(gpt2).to
    monkeypatch.setattr(type(gpt2), "to",
                        lambda self, *args, **kwargs: moves.append(args) or real_to(self, *args, **kwargs))
    evaluate(gpt2, tokenizer, tasks=["arc_easy"], limit=2, show_progress=False)
    assert gpt2.device.type == "cpu" and all("cuda" not in str(args) for args in moves)


def test_the_lm_eval_protocol_reaches_the_prompts_and_is_recorded(our_model_folder, tmp_path):
    """--protocol lm-eval keeps all K examples and cuts the prompt from the left, as lm-eval does: a LAMBADA
    example that cannot fit the tiny model's 256 positions beside its doc is refused by our protocol (which drops
    whole examples) and scored, left-truncated, by lm-eval's; results.json records the protocol."""
    import json

    from hf_gpt_custom.eval.fewshot import ContextTooShortError
    from hf_gpt_custom.cli import main

    with pytest.raises(ContextTooShortError, match="cannot hold even one few-shot example"):
        run(our_model_folder, tasks=["lambada"], shots=[1])
    out = tmp_path / "lm-eval"
    main(["eval", "--model", str(our_model_folder), "--tasks", "lambada", "--shots", "1", "--limit", "2",
          "--out", str(out), "--protocol", "lm-eval"])
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["protocol"] == "lm-eval"
    assert {row["n_truncated"] for row in results["results"]} == {2}  # both docs' prompts were cut from the left


def test_docs_whose_few_shot_examples_were_dropped_count_as_truncated(our_model_folder):
    """30 COPA examples of 10+ tokens each cannot fit the tiny model's 256 positions: every doc's prompt drops some
    (our protocol), so every scored doc counts in n_truncated."""
    results = run(our_model_folder, shots=[30])
    assert all(example["n_fewshot_dropped"] > 0 for example in results.examples)
    assert {row["n_truncated"] for row in results.results} == {2}


def test_log_likelihoods_that_overflow_in_float16_give_nan_metrics_not_a_ranking_of_nans(tiny_model_and_tokenizer,
                                                                                         caplog):
    """A model whose activations overflow float16 (an MLP output scaled past 65,504) gets NaN log-likelihoods; argmax
    over NaN picks the first answer, so copa's accuracy came out as the share of docs whose gold answer is the first
    (lm-eval's HFLM does the same, silently). In float32 the same model scores finite numbers."""
    import copy
    import math

    import torch

    gpt2, tokenizer = tiny_model_and_tokenizer

    def overflowing():  # a copy each time: evaluate casts the model object it is given to its dtype
        model = copy.deepcopy(gpt2)
        with torch.no_grad():
            model.transformer.h[0].mlp.c_proj.weight.mul_(1e6)
        return model

    half = evaluate(overflowing(), tokenizer, tasks=["copa"], limit=4, dtype="float16", show_progress=False)
    assert all(math.isnan(item) for example in half.examples for item in example["loglikelihoods"])
    assert all(math.isnan(row["value"]) and row["stderr"] is None for row in half.results)
    assert "copa 0-shot: 8 of 8 log-likelihoods are NaN or infinite" in caplog.text
    full = evaluate(overflowing(), tokenizer, tasks=["copa"], limit=4, dtype="float32", show_progress=False)
    assert all(math.isfinite(row["value"]) for row in full.results)


def _openai_gpt_folder(folder):
    """A tiny transformers OpenAI GPT folder: its tokenizer, like openai-community/openai-gpt's, has only <unk>."""
    import string

    import torch
    from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel, OpenAIGPTTokenizerFast

    symbols = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab = {symbol: i for i, symbol in enumerate(symbols + [s + "</w>" for s in symbols])}
    merges = [("t", "h"), ("th", "e</w>"), ("a", "n"), ("an", "d</w>"), ("i", "n"), ("e", "r")]
    for first, second in merges:
        vocab.setdefault(first + second, len(vocab))
    vocab["<unk>"] = len(vocab)
    tokenizer = OpenAIGPTTokenizerFast(vocab=vocab, merges=merges)
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    model = OpenAIGPTLMHeadModel(OpenAIGPTConfig(vocab_size=len(tokenizer), n_positions=1024, n_embd=32, n_layer=2,
                                                 n_head=4)).eval()
    model.save_pretrained(folder)
    return model, tokenizer


def test_a_tokenizer_without_bos_or_eos_scores_the_tasks_that_need_neither(tmp_path):
    """OpenAI GPT's tokenizer has neither: every task was refused, though only empty contexts and rolling windows
    start with that token (lm-eval's HFLM fails on it for every task). ARC is scored; the reference is the
    transformers model's own log-probabilities of each choice, split as lm-eval splits it; wikitext is refused."""
    import torch

    from hf_gpt_custom.eval.tokens import encode_pair

    model, tokenizer = _openai_gpt_folder(tmp_path / "openai_gpt")
    assert tokenizer.bos_token_id is None and tokenizer.eos_token_id is None
    result = evaluate(str(tmp_path / "openai_gpt"), tasks=["arc_easy"], limit=3, show_progress=False, device="cpu")
    for example in result.examples:
        assert len(example["loglikelihoods"]) == len(example["choices"])
        for choice, loglikelihood in zip(example["choices"], example["loglikelihoods"]):
            context, continuation = encode_pair(tokenizer, example["prompt"], " " + choice)
            ids = torch.tensor([context + continuation])
            with torch.no_grad():
                log_probs = model(ids).logits.log_softmax(-1)[0, len(context) - 1 : -1]
            expected = log_probs.gather(-1, torch.tensor(continuation)[:, None]).sum().item()
            assert loglikelihood == pytest.approx(expected, abs=1e-4)
    with pytest.raises(UserError, match="neither a BOS nor an EOS token, which rolling windows"):
        evaluate(str(tmp_path / "openai_gpt"), tasks=["wikitext"], limit=1, show_progress=False, device="cpu")
    from hf_gpt_custom.eval.tokens import encode_pairs

    with pytest.raises(UserError, match="neither a BOS nor an EOS token, which empty contexts"):
        encode_pairs(tokenizer, [("a question", " an answer"), ("", " an answer")])


def test_a_model_object_is_never_cast_in_place(tiny_model_and_tokenizer, tiny_model_folder):
    """evaluate(model, dtype="bfloat16") rounded the caller's float32 weights to bfloat16 for good (Module.to casts in
    place; .float() does not bring them back), and a bfloat16 model passed with the default dtype was upcast in place.
    lm-eval's HFLM leaves a model object's dtype alone. The bfloat16 scores equal those of the folder loaded in
    bfloat16 from disk, and results.json records the dtype that was scored."""
    import copy

    import torch

    gpt2, tokenizer = tiny_model_and_tokenizer
    mine = copy.deepcopy(gpt2)
    before = {name: tensor.clone() for name, tensor in mine.state_dict().items()}
    as_bf16 = evaluate(mine, tokenizer, tasks=["copa"], limit=4, dtype="bfloat16", show_progress=False)
    assert all(tensor.dtype == torch.float32 and torch.equal(tensor, before[name])
               for name, tensor in mine.state_dict().items())
    # transformers' own bfloat16 load of the same folder, passed without a dtype: scored in its own dtype, untouched
    from transformers import GPT2LMHeadModel

    loaded_bf16 = GPT2LMHeadModel.from_pretrained(tiny_model_folder, dtype=torch.bfloat16).eval()
    own = evaluate(loaded_bf16, tokenizer, tasks=["copa"], limit=4, show_progress=False)
    assert next(loaded_bf16.parameters()).dtype == torch.bfloat16 and own.config["dtype"] == "bfloat16"
    assert [e["loglikelihoods"] for e in as_bf16.examples] == [e["loglikelihoods"] for e in own.examples]
    assert [row["value"] for row in as_bf16.results] == [row["value"] for row in own.results]
    assert as_bf16.config["dtype"] == "bfloat16"
    folder = evaluate(str(tiny_model_folder), tasks=["copa"], limit=4, show_progress=False)
    assert folder.config["dtype"] == "float32"  # a folder loads in float32 unless told otherwise


def test_a_rope_model_object_scored_in_bfloat16_keeps_its_rotary_frequencies_in_float32(tiny_model_and_tokenizer,
                                                                                        tmp_path):
    """The bfloat16 copy was copy.deepcopy(model).to(bfloat16), which also rounded transformers' Llama's float32
    inv_freq buffer: the rotary angles drifted with the position (the dtypes2 hunt). Reference: the same weights as
    transformers loads them in bfloat16 (from_pretrained(dtype=bfloat16) keeps inv_freq in float32), scored alike."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    _, tokenizer = tiny_model_and_tokenizer
    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=1024,
                                         bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                                         tie_word_embeddings=False)).eval()
    with torch.no_grad():
        for parameter in llama.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 0.1)
    llama.save_pretrained(tmp_path)
    loaded_bf16 = LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert loaded_bf16.model.rotary_emb.inv_freq.dtype == torch.float32
    settings = dict(tasks=["wikitext"], limit=2, batch_size=2, show_progress=False)
    copied = evaluate(llama, tokenizer, dtype="bfloat16", **settings)
    reference = evaluate(loaded_bf16, tokenizer, **settings)
    assert llama.model.rotary_emb.inv_freq.dtype == torch.float32 and next(llama.parameters()).dtype == torch.float32
    assert [row["value"] for row in copied.results] == [row["value"] for row in reference.results]


def test_a_model_object_scored_in_bfloat16_keeps_the_parameters_transformers_keeps_in_float32(
        tiny_model_and_tokenizer, tmp_path):
    """DeepSeek-V3's router weights are _keep_in_fp32_modules: from_pretrained(dtype=bfloat16) (and lm-eval's HFLM
    with that dtype) keeps them in float32, where our bfloat16 copy rounded them and chose other experts (up to 0.07
    nats per token: the roundreview19 hunt). Reference: the same weights as transformers loads them in bfloat16."""
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    from hf_gpt_custom.eval.runner import _copy_in_dtype

    _, tokenizer = tiny_model_and_tokenizer
    torch.manual_seed(0)
    model = DeepseekV3ForCausalLM(DeepseekV3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, n_routed_experts=16, num_experts_per_tok=2,
        n_group=1, topk_group=1, first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=8, max_position_embeddings=256, bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id)).eval()
    with torch.no_grad():
        model.model.layers[1].mlp.gate.weight.normal_(0, 0.02)  # router scores close together, as trained ones are
    model.save_pretrained(tmp_path)
    loaded_bf16 = DeepseekV3ForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert loaded_bf16.model.layers[1].mlp.gate.weight.dtype == torch.float32
    copied_model = _copy_in_dtype(model, torch.bfloat16)
    assert {name: tensor.dtype for name, tensor in copied_model.state_dict().items()} == \
        {name: tensor.dtype for name, tensor in loaded_bf16.state_dict().items()}
    ids = torch.randint(0, len(tokenizer), (2, 64))
    with torch.no_grad():
        assert torch.equal(copied_model(ids).logits, loaded_bf16(ids).logits)
    assert model.model.layers[1].mlp.experts.gate_up_proj.dtype == torch.float32  # the object passed in: as it was


def test_a_model_object_scored_in_another_dtype_keeps_its_generation_config(tiny_model_and_tokenizer):
    """The copy in the scored dtype (once rebuilt from the model's config): its generation_config (here an eos id of
    its own, as Llama 3's end-of-turn) must come along, or generate_until ran past it. Reference: the same object scored
    in its own dtype, and a model that always predicts that token stops after one."""
    import torch

    from tests.eval.test_generation import constant_model

    _, tokenizer = tiny_model_and_tokenizer
    favourite = tokenizer.encode("x")[0]
    model = constant_model(tokenizer, favourite)
    model.generation_config.eos_token_id = favourite
    scored = [evaluate(model, tokenizer, tasks=["triviaqa"], limit=2, show_progress=False, dtype=dtype)
              for dtype in ("float32", "bfloat16")]
    assert next(model.parameters()).dtype == torch.float32
    for report in scored:
        assert [example["prediction"] for example in report.examples] == ["x", "x"]


def test_the_copy_in_another_dtype_is_the_object_with_its_hooks_and_built_modules(tiny_model_and_tokenizer):
    """A copy rebuilt from the config dropped a forward hook (an activation-steering vector: 0.76 off) and took a
    config field edited after the model was built (0.63 off), which the object's modules never read (the
    roundreview17 hunt). Reference: the object's own float32 logits, within bfloat16's rounding."""
    import copy

    import torch

    from hf_gpt_custom.eval.runner import _copy_in_dtype

    model, _ = tiny_model_and_tokenizer
    model = copy.deepcopy(model)
    model.config.layer_norm_epsilon = 0.5  # edited since it was built: its modules keep their own epsilon
    steering = torch.zeros(model.config.n_embd)
    steering[0] = 3.0
    model.transformer.h[0].register_forward_hook(lambda module, args, output: output + steering.to(output.dtype))
    ids = torch.arange(1, 17)[None]
    with torch.no_grad():
        expected = model(ids).logits
        got = _copy_in_dtype(model, torch.bfloat16)(ids).logits.float()
    assert next(model.parameters()).dtype == torch.float32
    assert (got - expected).abs().max() < 0.05
    model.transformer.h[1].to(torch.bfloat16)  # a tensor already in the dtype is copied too, not shared
    shared = {tensor.data_ptr() for tensor in model.state_dict().values()} & \
        {tensor.data_ptr() for tensor in _copy_in_dtype(model, torch.bfloat16).state_dict().values()}
    assert not shared


def test_a_model_whose_config_asks_for_tuples_is_scored_as_with_outputs_by_name(tiny_model_and_tokenizer):
    """config.return_dict=False (a converted folder may carry it): the scorer read the outputs by name and failed.
    Reference: the same model with return_dict=True."""
    import copy

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.convert_gpt2 import from_gpt2_model

    gpt2, tokenizer = tiny_model_and_tokenizer
    ours = from_gpt2_model(gpt2, GPTCustomForCausalLM)
    tuples = copy.deepcopy(ours)
    tuples.config.return_dict = False
    settings = dict(tasks=["copa", "lambada"], limit=3, show_progress=False)
    expected, got = (evaluate(model, tokenizer, **settings) for model in (ours, tuples))
    assert [row["value"] for row in got.results] == [row["value"] for row in expected.results]


def test_a_peft_wrapped_rope_model_copied_in_bfloat16_keeps_inv_freq_in_float32_and_ties_stay_tied(
        tiny_model_and_tokenizer):
    """The float32 buffers were looked up on the wrapper's class, which transformers cannot build from a config: a
    PEFT-wrapped Llama got a bfloat16 inv_freq (0.54 rad at position 3000: the roundreview18 hunt). Reference:
    transformers' own bfloat16 build holds it in float32. A tied embedding stays one tensor in the copy."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from hf_gpt_custom.eval.runner import _copy_in_dtype

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, max_position_embeddings=64)).eval()
    wrapped = get_peft_model(llama, LoraConfig(target_modules=["q_proj"]))
    copied = _copy_in_dtype(wrapped, torch.bfloat16)
    assert copied.get_base_model().model.rotary_emb.inv_freq.dtype == torch.float32
    assert copied.get_base_model().model.embed_tokens.weight.dtype == torch.bfloat16
    assert llama.model.embed_tokens.weight.dtype == torch.float32  # the object passed in is left as it is
    gpt2, _ = tiny_model_and_tokenizer
    tied = _copy_in_dtype(gpt2, torch.bfloat16)
    assert tied.lm_head.weight is tied.transformer.wte.weight and tied.lm_head.weight.dtype == torch.bfloat16


def test_the_copy_in_another_dtype_casts_only_the_floating_point_tensors_as_module_to_does(tiny_model_and_tokenizer):
    """A module the object carries may hold integer or bool buffers (the token ids a steering hook bans, a mask): the
    copy casts only floating-point tensors, or ids above 256 were rounded in bfloat16 (1001 -> 1000) and a bool mask
    became numbers (the mutation sweep). Reference: torch's Module.to(dtype), which casts floating-point tensors only."""
    import copy

    import torch

    from hf_gpt_custom.eval.runner import _copy_in_dtype

    gpt2, _ = tiny_model_and_tokenizer
    model = copy.deepcopy(gpt2)
    holder = torch.nn.Module()
    holder.register_buffer("banned_ids", torch.tensor([1001, 5, 257]))
    holder.register_buffer("mask", torch.tensor([True, False, True]))
    model.add_module("steering", holder)
    copied = _copy_in_dtype(model, torch.bfloat16)
    reference = copy.deepcopy(model).to(torch.bfloat16)
    for name in ("steering.banned_ids", "steering.mask"):
        got, expected = copied.get_buffer(name), reference.get_buffer(name)
        assert got.dtype == expected.dtype and torch.equal(got, expected), name
    assert copied.get_buffer("steering.banned_ids").tolist() == [1001, 5, 257]
    assert model.get_buffer("steering.banned_ids").dtype == torch.int64  # the object passed in is left as it is


def test_a_loaded_model_comes_back_in_the_modes_it_was_passed_in_and_is_scored_without_dropout(
        tiny_model_and_tokenizer):
    """Scoring switches the model to eval; the caller's model stayed there, so a loop that called model.train() once
    trained without dropout after its first evaluate (the sideeffects hunt). Each module's own mode comes back (one
    frozen in eval stays so). Reference for the scores: the same model put in eval mode by hand."""
    import copy

    gpt2, tokenizer = tiny_model_and_tokenizer
    model = copy.deepcopy(gpt2)
    model.config.resid_pdrop = model.config.attn_pdrop = model.config.embd_pdrop = 0.5
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.5
    model.train()
    model.transformer.h[0].eval()  # the caller's own mix of modes
    modes = [module.training for module in model.modules()]
    settings = dict(tasks=["copa", "lambada"], limit=3, show_progress=False)
    got = evaluate(model, tokenizer, **settings)
    assert [module.training for module in model.modules()] == modes
    expected = evaluate(copy.deepcopy(model).eval(), tokenizer, **settings)
    assert [row["value"] for row in got.results] == [row["value"] for row in expected.results]


def test_a_loaded_model_without_a_kv_cache_is_scored_without_shared_contexts(tiny_model_and_tokenizer):
    """Shared contexts reuse the model's KV cache; transformers' OpenAIGPT returns none, and a loaded one failed on
    every multiple-choice task with a bare TypeError (the docsclaims3 hunt). Reference: the straightforward
    scoring, one row per request (share_context=False, lm-eval's way)."""
    from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

    from tests.helpers import randomize_

    _, tokenizer = tiny_model_and_tokenizer
    torch.manual_seed(0)
    model = randomize_(OpenAIGPTLMHeadModel(OpenAIGPTConfig(vocab_size=len(tokenizer), n_positions=128, n_embd=32,
                                                            n_layer=2, n_head=2))).eval()
    assert model(input_ids=torch.tensor([[1, 2]]), use_cache=True).get("past_key_values") is None
    settings = dict(tasks=["copa", "piqa"], limit=4, show_progress=False)
    got = evaluate(model, tokenizer, **settings)
    expected = evaluate(model, tokenizer, share_context=False, **settings)
    assert [row["value"] for row in got.results] == [row["value"] for row in expected.results]


def test_an_answer_without_tokens_is_refused_before_any_task_is_scored(tmp_path, tiny_model_folder, monkeypatch):
    """An empty choice (or one the tokenizer merges into the context) was refused while scoring: the tasks scored
    before it were lost, though docs/evaluation.md says every task is checked first, and the error named a flat
    "request 6" (the lmevalparity4 hunt). lm-eval refuses it too (an assertion). Reference: the task file written
    here, whose doc 2 has the empty answer."""
    import json

    import hf_gpt_custom.eval.runner as runner

    docs = [{"q": "Say it:", "opts": [" yes", " no"], "lab": 0}, {"q": "Say it:", "opts": [" no", " yes"], "lab": 1},
            {"q": "Say it:", "opts": [" yes", ""], "lab": 0}]
    (tmp_path / "empty.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    task = tmp_path / "empty.yaml"
    task.write_text(f"task: empty\ndata_files: {{test: {tmp_path / 'empty.jsonl'}}}\noutput_type: multiple_choice\n"
                    "doc_to_text: \"{{q}}\"\ndoc_to_target: lab\ndoc_to_choice: opts\ntarget_delimiter: \"\"\n"
                    "metric_list: [{metric: acc}]\n")
    scored = []
    monkeypatch.setattr(runner, "score_task", lambda plan, *args, **kwargs: scored.append(plan.spec.task))
    with pytest.raises(UserError, match=r"task empty \(0-shot\), doc 2: the answer '' has no token of its own after "
                                        r"the context ending 'Say it:'.*target_delimiter"):
        evaluate(str(tiny_model_folder), tasks=["copa", str(task)], shots=[0], limit=3, device="cpu",
                 show_progress=False)
    assert scored == []
