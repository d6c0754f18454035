"""Behaviour of GPTCustomModel / GPTCustomForCausalLM that transformers users rely on."""

import json
import math

import pytest
import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM, GPTCustomModel
from hf_gpt_custom.auto_classes import TASK_HEAD_AUTO_CLASSES
from hf_gpt_custom.errors import UserError

from tests.helpers import TINY_GPT2


@pytest.fixture
def model(tiny_config):
    return GPTCustomForCausalLM(tiny_config).eval()


def test_architecture_is_pre_layernorm_gpt2(tiny_config):
    model = GPTCustomForCausalLM(tiny_config)
    block = model.transformer.h[0]
    assert [name for name, _ in block.named_children()] == ["ln_1", "attn", "ln_2", "mlp"]
    assert model.lm_head.weight is model.transformer.wte.weight  # tied
    assert model.transformer.wpe.weight.shape == (tiny_config.n_positions, tiny_config.n_embd)


def test_hidden_state_is_pre_layernorm_residual_stream(model):
    """Block output = x + attn(ln_1(x)) + mlp(ln_2(x + attn(ln_1(x)))) — checked by hand for one block."""
    input_ids = torch.randint(0, 99, (1, 6))
    with torch.no_grad():
        out = model.transformer(input_ids, output_hidden_states=True)
        x = out.hidden_states[0]
        block = model.transformer.h[0]
        attn, _ = block.attn(block.ln_1(x), None, None)  # no RoPE, no mask: sdpa is causal
        x = x + attn
        x = x + block.mlp(block.ln_2(x))
    torch.testing.assert_close(out.hidden_states[1], x, rtol=0, atol=1e-6)


def test_gpt2_initialisation_scales_residual_projections():
    config = GPTCustomConfig(vocab_size=512, n_positions=64, n_embd=256, n_layer=8, n_head=4)
    model = GPTCustomForCausalLM(config)
    block = model.transformer.h[3]
    assert block.attn.c_attn.weight.std().item() == pytest.approx(0.02, rel=0.05)
    residual_std = 0.02 / math.sqrt(2 * 8)
    assert block.attn.c_proj.weight.std().item() == pytest.approx(residual_std, rel=0.05)
    assert block.mlp.c_proj.weight.std().item() == pytest.approx(residual_std, rel=0.05)
    assert torch.count_nonzero(block.mlp.c_fc.bias) == 0
    assert torch.equal(block.ln_1.weight, torch.ones(256))


def test_dropout_is_active_in_training_and_off_in_eval(tiny_config):
    tiny_config.embd_pdrop = tiny_config.resid_pdrop = tiny_config.attn_pdrop = 0.5
    model = GPTCustomForCausalLM(tiny_config)
    input_ids = torch.randint(0, 99, (2, 8))
    model.train()
    assert not torch.equal(model(input_ids).logits, model(input_ids).logits)
    model.eval()
    assert torch.equal(model(input_ids).logits, model(input_ids).logits)


def test_training_forward_does_not_build_a_kv_cache(model):
    model.train()
    assert model(torch.randint(0, 99, (1, 8))).past_key_values is None
    model.eval()
    assert model(torch.randint(0, 99, (1, 8))).past_key_values.get_seq_length() == 8


def test_kv_cache_gives_the_same_logits_as_a_full_pass(model):
    input_ids = torch.randint(0, 99, (2, 12))
    with torch.no_grad():
        full = model(input_ids).logits
        prefix = model(input_ids[:, :9], use_cache=True)
        step = model(input_ids[:, 9:], past_key_values=prefix.past_key_values, use_cache=True)
    torch.testing.assert_close(step.logits, full[:, 9:], rtol=0, atol=1e-5)
    assert step.past_key_values.get_seq_length() == 12


def test_output_hidden_states_and_attentions(tiny_config):
    model = GPTCustomForCausalLM(tiny_config, ).eval()
    model.set_attn_implementation("eager")
    out = model(torch.randint(0, 99, (2, 5)), output_hidden_states=True, output_attentions=True)
    assert len(out.hidden_states) == tiny_config.n_layer + 1
    assert len(out.attentions) == tiny_config.n_layer
    weights = out.attentions[0]
    assert weights.shape == (2, tiny_config.n_head, 5, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, tiny_config.n_head, 5))
    assert torch.all(weights.triu(diagonal=1) == 0)  # causal: nothing attends to the future


def test_output_attentions_with_sdpa_warns_and_goes_on_like_transformers(model, caplog):
    """transformers (GPT-2 too) warns and returns no weights under sdpa; libraries call models this way."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.warning_once.cache_clear()  # said once per process: an earlier test may have said it
    input_ids = torch.randint(0, 99, (1, 4))
    with torch.no_grad(), caplog.at_level("WARNING"):
        out = model(input_ids, output_attentions=True)
        torch.testing.assert_close(out.logits, model(input_ids).logits, rtol=0, atol=0)
    assert out.attentions == ()
    assert "attn_implementation='eager'" in caplog.text
    # transformers' eager-vs-sdpa common test has an output_attentions case (a left-padded batch) that it skips for
    # models whose **kwargs carry no annotation: here it is. The eager model (textbook formula) returns weights.
    import copy

    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    input_ids = torch.randint(0, 99, (2, 6))
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        sdpa_out = model(input_ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
        eager_out = eager(input_ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
    real = mask.bool()
    torch.testing.assert_close(sdpa_out.logits[real], eager_out.logits[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sdpa_out.hidden_states[-1][real], eager_out.hidden_states[-1][real], rtol=1e-5,
                               atol=1e-5)
    assert len(eager_out.attentions) == model.config.n_layer
    assert torch.all(eager_out.attentions[0][0, :, 2:, :2] == 0)  # real tokens give the padding no attention


def test_return_dict_false_gives_a_tuple(model):
    input_ids = torch.randint(0, 99, (1, 4))
    loss, logits = model(input_ids, labels=input_ids, use_cache=False, return_dict=False)[:2]
    assert loss.ndim == 0 and logits.shape == (1, 4, 99)


def test_logits_to_keep_returns_only_the_last_positions(model):
    input_ids = torch.randint(0, 99, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids, logits_to_keep=1).logits, model(input_ids).logits[:, -1:])


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_gradient_checkpointing_gives_the_same_gradients(tiny_config, dropout):
    """With dropout the recomputed forward must draw the same masks (they come from the seeded generator, whose
    state checkpointing restores)."""
    tiny_config.embd_pdrop = tiny_config.resid_pdrop = tiny_config.attn_pdrop = dropout
    input_ids = torch.randint(0, 99, (2, 16))
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = GPTCustomForCausalLM(tiny_config).train()
        if checkpointing:
            model.activation_checkpointing_enable()
            assert model.transformer.gradient_checkpointing
        torch.manual_seed(1)
        model(input_ids, labels=input_ids).loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for plain, checkpointed in zip(*grads):
        torch.testing.assert_close(plain, checkpointed, rtol=0, atol=1e-6)


def test_gradient_checkpointing_with_use_cache_returns_no_cache_as_gpt2_does():
    """use_cache=True in a checkpointed training forward is turned off, as transformers' GPT-2 turns it off: no cache
    comes back (a cache object built anyway is never filled by the checkpointed blocks, and a caller decoding on from
    it would get logits computed without the prompt), and the gradients are GPT-2's."""
    from tests.helpers import make_gpt2_pair

    ours, reference = make_gpt2_pair("sdpa", embd_pdrop=0.0, attn_pdrop=0.0, resid_pdrop=0.0)
    input_ids = torch.randint(0, 99, (2, 9), generator=torch.Generator().manual_seed(3))
    outputs, grads = [], []
    for model in (ours, reference):
        model.train()
        model.activation_checkpointing_enable()
        out = model(input_ids, labels=input_ids, use_cache=True)
        out.loss.backward()
        outputs.append(out)
        grads.append(model.transformer.wte.weight.grad.clone())
    for out in outputs:
        assert out.get("cache") is None and out.get("past_key_values") is None
    torch.testing.assert_close(outputs[0].loss, outputs[1].loss, rtol=0, atol=1e-5)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-5)


def test_too_long_input_names_both_lengths(model):
    with pytest.raises(ValueError, match=r"input_ids has 65 tokens but n_positions is 64; truncate"):
        model(torch.randint(0, 99, (1, 65)))
    with torch.no_grad():
        cached = model(torch.randint(0, 99, (1, 60)), use_cache=True).past_key_values
    with pytest.raises(ValueError, match=r"5 tokens \(after 60 cached\) but n_positions is 64"):
        model(torch.randint(0, 99, (1, 5)), past_key_values=cached)


def test_exactly_n_positions_tokens_fit_as_in_gpt2():
    """n_positions is how many tokens fit (positions 0..n_positions-1): GPT2LMHeadModel takes a 64-token input with
    n_positions=64, in one pass or as 60 cached + 4 new, and so must we (an off-by-one in the length check refused the
    model's full context). Reference: GPT-2's logits with the same weights."""
    from tests.helpers import make_gpt2_pair

    ours, reference = make_gpt2_pair()
    input_ids = torch.randint(0, 99, (1, 64), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = reference(input_ids).logits
        torch.testing.assert_close(ours(input_ids).logits, expected, rtol=0, atol=1e-5)
        cache = ours(input_ids[:, :60], use_cache=True).past_key_values
        step = ours(input_ids[:, 60:], past_key_values=cache).logits
    torch.testing.assert_close(step, expected[:, 60:], rtol=0, atol=1e-5)


def test_padded_cache_longer_than_n_positions_is_fine_when_every_row_fits(model):
    """Batched scoring pads contexts: here the cache grows to 62 + 4 = 66 slots (n_positions is 64), yet no row's
    positions pass 55, so the model must accept it; a position of 64 must still be refused."""
    context = torch.randint(0, 99, (2, 62))
    mask = torch.ones(2, 62, dtype=torch.long)
    mask[0, :52] = 0  # row 0: 10 real tokens, left-padded
    mask[1, :10] = 0  # row 1: 52 real tokens
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    continuation = torch.randint(0, 99, (2, 4))
    step_mask = torch.cat([mask, torch.ones(2, 4, dtype=torch.long)], dim=1)
    step_positions = torch.tensor([[10, 11, 12, 13], [52, 53, 54, 55]])
    with torch.no_grad():
        cache = model(context, attention_mask=mask, position_ids=positions, use_cache=True).past_key_values
        out = model(continuation, attention_mask=step_mask, position_ids=step_positions, past_key_values=cache)
        assert out.past_key_values.get_seq_length() == 66
        # Row 1 scored in one pass without padding gives the same logits.
        alone = model(torch.cat([context[1:, 10:], continuation[1:]], dim=1)).logits[:, -4:]
    torch.testing.assert_close(out.logits[1:], alone, rtol=0, atol=1e-5)
    # 4 tokens at the caller's positions 61..64: the positions are named, not the input's length (the newuser4 walk)
    with pytest.raises(ValueError, match=r"position_ids hold position 64, outside 0..63 \(n_positions=64\), for an "
                                         r"input of 4 tokens"):
        model(continuation, position_ids=torch.tensor([[61, 62, 63, 64]] * 2))
    with pytest.raises(ValueError, match=r"a row of input_ids reaches 65 tokens \(position 64; padding not counted\) "
                                         r"but n_positions is 64"):
        model.generate(context[:1, :60], max_new_tokens=10, do_sample=False)  # generate's positions: the input's


def test_safetensors_round_trip_stores_tied_head_once_with_no_key_warnings(tmp_path, model):
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as weights:
        keys = set(weights.keys())
    assert "lm_head.weight" not in keys and "transformer.wte.weight" in keys
    loaded, info = GPTCustomForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert loaded.lm_head.weight is loaded.transformer.wte.weight
    input_ids = torch.randint(0, 99, (2, 7))
    with torch.no_grad():
        assert torch.equal(loaded(input_ids).logits, model(input_ids).logits)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_loading_in_half_precision(tmp_path, model, dtype):
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=dtype)
    assert loaded.dtype == dtype
    input_ids = torch.randint(0, 99, (1, 6))
    with torch.no_grad():
        half, full = loaded(input_ids).logits.float(), model(input_ids).logits
    torch.testing.assert_close(half, full, rtol=0, atol=0.05)


def test_truncated_safetensors_error_names_the_file(tmp_path, model):
    model.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"model\.safetensors.*truncated or corrupt"):
        GPTCustomForCausalLM.from_pretrained(tmp_path)
    weights.write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match=r"model\.safetensors"):
        AutoModelForCausalLM.from_pretrained(tmp_path)


def test_auto_classes_resolve_in_process(tmp_path, model):
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "gpt_custom"
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForCausalLM", *TASK_HEAD_AUTO_CLASSES}
    assert type(AutoConfig.from_pretrained(tmp_path)) is GPTCustomConfig
    assert type(AutoModel.from_pretrained(tmp_path)) is GPTCustomModel
    assert type(AutoModelForCausalLM.from_pretrained(tmp_path)) is GPTCustomForCausalLM
    assert type(AutoModelForCausalLM.from_config(model.config)) is GPTCustomForCausalLM


def test_device_map_splits_between_blocks_never_inside_one(tiny_config):
    from accelerate import infer_auto_device_map

    tiny_config.n_layer = 6
    model = GPTCustomForCausalLM(tiny_config)
    budget = int(sum(p.numel() * 4 for p in model.parameters()) * 0.7)  # 70% of the weights fit "in memory"
    device_map = infer_auto_device_map(
        model, max_memory={"cpu": budget, "disk": 10**9}, no_split_module_classes=model._no_split_modules
    )
    block_devices = {name: device for name, device in device_map.items() if name.startswith("transformer.h.")}
    assert set(block_devices.values()) == {"cpu", "disk"}  # the model really is sharded...
    assert all(name.count(".") == 2 for name in block_devices), block_devices  # ...at block boundaries only


def test_from_pretrained_with_device_map_auto(tmp_path, model):
    # "auto" puts this tiny model whole on the first GPU where there is one, else on the CPU. As in transformers' own
    # offload tests (test_cpu_offload), the reference runs on the loaded model's device: a CUDA matmul does not sum
    # in a CPU's order, so logits compared across devices would measure the hardware, not the loading.
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="auto")
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    assert {parameter.device for parameter in loaded.parameters()} == {device}
    for name, tensor in model.state_dict().items():  # every weight arrives bit for bit
        assert torch.equal(loaded.state_dict()[name].cpu(), tensor), name
    input_ids = torch.randint(0, 99, (1, 5), device=device)
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids).logits, model.to(device)(input_ids).logits)


@pytest.mark.parametrize(
    "input_ids, message",
    [
        (torch.tensor([[1, -3, 2]]), "token id -3"),
        (torch.tensor([[1, 99, 2]]), "token id 99 but vocab_size is 99"),
        (torch.tensor([[1.0, 2.0]]), "integer token ids as torch.long, got dtype torch.float32"),
        (torch.tensor([1, 2, 3]), r"2-D \(batch, seq_len\), got shape \(3,\)"),
        (torch.zeros(1, 0, dtype=torch.long), r"empty \(shape \(1, 0\)\)"),
        # torch's own errors named no argument (a list: 'list' object has no attribute 'dtype'; int16: the embedding's)
        ([[1, 2, 3]], r"input_ids must be a torch tensor of token ids, got list; pass torch.tensor\(input_ids\)"),
        (torch.tensor([[1, 2]]).numpy(), "input_ids must be a torch tensor of token ids, got ndarray"),
        (torch.tensor([[1, 2]], dtype=torch.int16), r"as torch.long, got dtype torch.int16; convert with .long\(\)"),
        (torch.tensor([[1, 2]], dtype=torch.uint8), "as torch.long, got dtype torch.uint8"),
    ],
)
def test_bad_input_ids_get_an_error_naming_the_problem(model, input_ids, message):
    from hf_gpt_custom.errors import UserError

    with pytest.raises(UserError, match=message):
        model(input_ids)


@pytest.mark.parametrize("labels", [[[1, 2, 3]], torch.tensor([[1, 2, 3]]).numpy()], ids=["list", "ndarray"])
def test_labels_that_are_not_a_tensor_are_named(model, labels):
    from hf_gpt_custom.errors import UserError

    with pytest.raises(UserError, match="labels must be a torch tensor of token ids"):
        model(torch.tensor([[1, 2, 3]]), labels=labels)


def test_int32_input_ids_give_the_logits_of_int64_ones(model):
    """int32 ids (torch.from_numpy of an int32 array) are what an embedding takes: kept, not refused."""
    input_ids = torch.tensor([[5, 7, 9]])
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids.int()).logits, model(input_ids).logits, rtol=0, atol=0)


@pytest.mark.parametrize("inputs_embeds, message", [
    (torch.zeros(1, 0, 32), r"at least one token per row, got shape \(1, 0, 32\)"),
    (torch.zeros(1, 3, 32, dtype=torch.long), "inputs_embeds must be a floating-point tensor .* got torch.int64"),
])
def test_bad_inputs_embeds_get_an_error_naming_the_problem(model, inputs_embeds, message):
    from hf_gpt_custom.errors import UserError

    with pytest.raises(UserError, match=message):
        model(inputs_embeds=inputs_embeds)


def test_encoder_hidden_states_are_refused_as_gpt2_refuses_them_without_cross_attention(model):
    """They were accepted and ignored (the logits of the call without them). GPT2LMHeadModel without cross-attention
    layers refuses them; GPTCustom has none."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom.errors import UserError

    input_ids, encoder_states = torch.tensor([[5, 7, 9]]), torch.randn(1, 4, 32)
    with pytest.raises(ValueError, match="cross-attention"):
        GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=4, vocab_size=99))(
            input_ids, encoder_hidden_states=encoder_states)
    with pytest.raises(UserError, match="encoder_hidden_states was given, but GPTCustom has no cross-attention"):
        model(input_ids, encoder_hidden_states=encoder_states)


@pytest.mark.parametrize("bad_label, message", [(99, "token id 99 but vocab_size is 99"), (-5, "token id -5")])
def test_out_of_range_labels_get_an_error_but_minus_100_is_ignored(model, bad_label, message):
    from hf_gpt_custom.errors import UserError

    input_ids = torch.tensor([[1, 2, 3, 4]])
    labels = torch.tensor([[1, -100, 3, 4]])
    assert torch.isfinite(model(input_ids, labels=labels).loss)
    labels[0, 2] = bad_label
    with pytest.raises(UserError, match=message):
        model(input_ids, labels=labels)


def test_flex_attention_gives_sdpas_logits_after_transformers_widens_the_heads(monkeypatch):
    """transformers' flex test sets config.head_dim = 16 and widens hidden_size to match (head_dim must be a settable
    field, as in LlamaConfig), then runs the model on flex attention. On the CPU flex attention has no backward, so
    the comparison here is in no_grad; the gradient version runs in the common tests where CUDA is present. Flex runs
    uncompiled (tests.helpers.uncompiled_flex_attention): our model's head layout, mask and scaling as flex receives
    them are under test, not inductor's flex kernel (which compiled for ~15 s here)."""
    from tests.helpers import uncompiled_flex_attention

    flex_calls = uncompiled_flex_attention(monkeypatch)
    config = GPTCustomConfig(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                             embd_pdrop=0.0, attn_pdrop=0.0)
    config.head_dim = 16
    config.hidden_size *= 2  # n_embd 64 = 4 heads x 16
    torch.manual_seed(0)
    model = GPTCustomForCausalLM(config).eval()
    input_ids = torch.randint(0, 99, (2, 16))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :5] = 0
    with torch.no_grad():
        sdpa = model(input_ids, attention_mask=attention_mask).logits
        model.set_attn_implementation("flex_attention")
        flex = model(input_ids, attention_mask=attention_mask).logits
    assert flex_calls == [torch.Size([2, 4, 16, 16])] * 2  # both layers ran flex, on 4 heads of 16
    keep = attention_mask.bool()
    torch.testing.assert_close(flex[keep], sdpa[keep], rtol=0, atol=1e-5)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("where", ["config", "call"])
def test_bidirectional_attention_is_refused_on_every_path_not_honoured_on_some(where, attn_implementation):
    """transformers' is_causal=False (config or forward keyword) makes GPT-2 attend both ways; ours honoured it only
    on some paths (sdpa with padding under the config, sdpa without a mask under the keyword), so a padded batch got
    other logits than its rows unpadded. Refused on every one; with is_causal left alone GPT-2's numbers hold."""
    from tests.helpers import make_gpt2_pair

    ours, reference = make_gpt2_pair(attn_implementation, seed=2)
    ids = torch.randint(0, 98, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])
    if where == "config":
        ours.config.is_causal = False
    for kwargs in ({}, {"attention_mask": mask}):
        if where == "call":
            kwargs["is_causal"] = False
        with pytest.raises(UserError, match=r"is_causal=False \(bidirectional attention\) is not supported"):
            ours(ids, **kwargs)
    ours.config.is_causal = True
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, reference(ids).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_a_4d_mask_tensor_under_flex_attention_is_refused_before_it_reaches_flex(tiny_config, dtype):
    """transformers' flex attention reads a 4-D mask tensor at flex's padded block sizes, past its end: the process
    aborted on a corrupted heap (LlamaForCausalLM's too). A 2-D padding mask is what flex takes here."""
    model = GPTCustomForCausalLM(tiny_config).eval()
    model.set_attn_implementation("flex_attention")
    ids = torch.randint(0, tiny_config.vocab_size, (1, 5))
    mask = torch.ones(1, 1, 5, 5, dtype=torch.bool).tril()
    mask = mask if dtype == torch.bool else torch.zeros(1, 1, 5, 5).masked_fill(~mask, torch.finfo(torch.float32).min)
    with pytest.raises(UserError, match=r"4-D attention_mask tensor is not supported with attn_implementation="
                                        r"'flex_attention'; pass a 2-D padding mask"):
        model(ids, attention_mask=mask)


@pytest.mark.parametrize("activation_function", ["gelu_new", "gelu_pytorch_tanh", "relu"])
def test_a_model_pickles_as_gpt2lmheadmodel_does(tmp_path, activation_function):
    """torch.save(model) failed with "Can't pickle local object" for GPT-2's activation (a lambda), where
    GPT2LMHeadModel pickles. Reference: the unpickled model's logits equal the original's."""
    torch.manual_seed(0)
    model = GPTCustomForCausalLM(GPTCustomConfig(vocab_size=50, n_positions=16, n_embd=32, n_layer=1, n_head=2,
                                                 activation_function=activation_function)).eval()
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False).eval()
    ids = torch.randint(0, 50, (2, 8))
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_a_4d_additive_float_mask_gives_the_logits_of_the_2d_mask():
    """0 = attend, the dtype's minimum = masked: accepted, and the refusal of positive values leaves it alone (a planted
    `>= 0` refused every such mask: mut_s62). Reference: the 2-D mask, which the model turns into its own."""
    torch.manual_seed(0)
    model = GPTCustomForCausalLM(GPTCustomConfig(**TINY_GPT2)).eval()
    input_ids = torch.randint(0, 98, (2, 6))
    causal = torch.full((6, 6), torch.finfo(torch.float32).min).triu(1)[None, None].expand(2, 1, 6, 6)
    with torch.no_grad():
        expected = model(input_ids, attention_mask=torch.ones(2, 6, dtype=torch.long)).logits
        got = model(input_ids, attention_mask=causal.contiguous()).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
