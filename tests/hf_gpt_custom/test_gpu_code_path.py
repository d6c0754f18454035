"""The code path a GPU takes, held to its promises on the CPU: no host sync in a training step, one compiled graph.

On a GPU every read of a tensor value by the host (`.item()`, `int(t.max())`, a data-dependent `if`) waits for the
device to drain its queue, and under torch.compile it breaks the graph. The model runs its value-reading input
checks only on VALUE_CHECK_DEVICES (the CPU); emptying that tuple here runs, on a CPU, exactly the code a GPU runs.
The host reads are counted where they happen, in the dispatcher (`aten::_local_scalar_dense` is what `.item()`,
`int()` and `bool()` of a tensor become), so a sync added anywhere in forward, loss or backward is seen.
"""

import copy
import functools

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM, model_inputs, modeling_gpt_custom
from tests.helpers import make_gpt2_pair

BLOCKS = {
    "gpt2": {},
    "llama": {"position_embedding_type": "rope", "norm_type": "rmsnorm", "mlp_type": "swiglu", "n_kv_head": 2,
              "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False},
    "transformer-decoder": {"position_embedding_type": "sinusoidal", "norm_position": "post",
                            "activation_function": "relu"},
}
# Ops that read back to the host on a GPU: a scalar's value, or an output whose size depends on the data (boolean
# indexing runs nonzero; on the CPU it needs no sync, so only its name shows it).
HOST_READS = {"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::equal", "aten::nonzero",
              "aten::masked_select"}


class CountHostReads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name in HOST_READS or _indexes_with_a_boolean_mask(func, args):
            self.reads.append(func._schema.name)
        return func(*args, **(kwargs or {}))


def _indexes_with_a_boolean_mask(func, args) -> bool:
    """`t[mask]`: its output size is the mask's count, which a GPU must send to the host (the CPU kernel finds it
    without a dispatched op, so the call itself is what is counted)."""
    if func._schema.name != "aten::index" or len(args) < 2:
        return False
    return any(isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in args[1])


def _model(block: str, dropout: float = 0.1) -> GPTCustomForCausalLM:
    torch.manual_seed(0)
    config = GPTCustomConfig(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4, resid_pdrop=dropout,
                             embd_pdrop=dropout, attn_pdrop=dropout, pad_vocab_size_to_multiple_of=64,
                             **BLOCKS[block])
    return GPTCustomForCausalLM(config).train()


def _training_step_host_reads(model: GPTCustomForCausalLM) -> list[str]:
    input_ids = torch.randint(0, 99, (2, 16))
    labels = input_ids.masked_fill(torch.rand(2, 16) < 0.2, -100)
    with CountHostReads() as counter:
        loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
    return counter.reads


@pytest.mark.parametrize("block", BLOCKS)
def test_a_training_step_on_the_gpu_code_path_reads_nothing_back_to_the_host(block, monkeypatch):
    monkeypatch.setattr(model_inputs, "VALUE_CHECK_DEVICES", ())
    assert _training_step_host_reads(_model(block)) == []


def test_the_cpu_checks_token_ids_and_positions_by_value_and_the_counter_sees_it():
    """The counter is not blind: on the CPU the id and position range checks read values (that is where they are
    free), and a bad id is named there."""
    model = _model("gpt2")
    assert len(_training_step_host_reads(model)) >= 3  # input ids, labels, positions
    with pytest.raises(ValueError, match="token id 99 but vocab_size is 99"):
        model(torch.tensor([[1, 99]]))


def test_off_the_value_check_devices_only_shapes_and_dtypes_are_checked(monkeypatch):
    monkeypatch.setattr(model_inputs, "VALUE_CHECK_DEVICES", ())
    model = _model("gpt2").eval()
    with pytest.raises(ValueError, match="must hold integer token ids"):
        model(torch.ones(1, 4))
    with pytest.raises(ValueError, match="has 40 tokens but n_positions is 32"):
        model(torch.zeros(1, 40, dtype=torch.long))  # known from the shape alone


@pytest.mark.parametrize("block", BLOCKS)
def test_an_id_in_the_padded_rows_stops_on_the_gpu_code_path_without_a_host_read(block, monkeypatch):
    """A padded vocabulary (99 ids, 128 rows): on the GPU path id 120 (a token added to the tokenizer, the embedding
    not resized) embedded an untrained padded row in silence, in forward and generate. Past the table (no padding),
    or in transformers' GPT-2, CUDA stops with a device-side assert; here an assert on the device does the same (on a
    CPU it raises at once), and a good step still reads nothing back."""
    monkeypatch.setattr(model_inputs, "VALUE_CHECK_DEVICES", ())
    model = _model(block).eval()
    assert model.config.padded_vocab_size == 128
    with pytest.raises(RuntimeError, match="input_ids holds a token id >= vocab_size=99"):
        model(torch.tensor([[5, 7, 120, 3]]))
    with pytest.raises(RuntimeError, match="input_ids holds a token id >= vocab_size=99"):
        model(torch.tensor([[5, 99]]))  # the first padded row
    assert model(torch.tensor([[5, 98]])).logits.shape == (1, 2, 99)  # the last real one
    with pytest.raises(RuntimeError, match="input_ids holds a token id >= vocab_size=99"):
        model.generate(torch.tensor([[5, 7, 120, 3]]), max_new_tokens=2, do_sample=False, pad_token_id=0)
    with pytest.raises(RuntimeError, match="token_type_ids holds a token id >= vocab_size=99"):
        model(torch.tensor([[5, 7]]), token_type_ids=torch.tensor([[0, 120]]))
    assert _training_step_host_reads(model.train()) == []


@pytest.mark.parametrize("block", BLOCKS)
def test_positions_the_caller_passes_past_the_context_stop_on_the_gpu_code_path(block, monkeypatch):
    """Offset position_ids (50..58 with n_positions 32 here) in forward or generate: the CPU refused them, the GPU
    path ran a learned table into an opaque IndexError and RoPE silently past the trained context (a hunt). Now an
    assert on the device (torch._assert_async: no host read); positions inside the context, and generate's, pass."""
    monkeypatch.setattr(model_inputs, "VALUE_CHECK_DEVICES", ())
    model = _model(block).eval()
    ids = torch.tensor([[5, 7, 3, 9]])
    with pytest.raises(RuntimeError, match=r"position_ids hold a position outside 0..31 \(n_positions=32\)"):
        model(ids, position_ids=torch.arange(29, 33)[None])
    with pytest.raises(RuntimeError, match=r"position_ids hold a position outside 0..31"):
        model.generate(ids, position_ids=torch.arange(50, 54)[None], max_new_tokens=2, do_sample=False,
                       pad_token_id=0)
    with pytest.raises(RuntimeError, match=r"position_ids hold a position outside 0..31"):
        model(ids, position_ids=torch.tensor([[0, 1, -1, 2]]))
    torch.testing.assert_close(model(ids, position_ids=torch.arange(4)[None]).logits, model(ids).logits)
    assert model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0).shape == (1, 7)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_generation_past_the_context_is_refused_on_the_gpu_code_path_too(block, cache_implementation,
                                                                          monkeypatch):
    """generate() passes positions it derived from the mask, which skip the value check off the CPU. Left unchecked,
    RoPE went on past n_positions without a word and a position table was indexed past its end (on a GPU, a
    device-side assert). Once cached + new tokens pass n_positions the positions are read on every device."""
    monkeypatch.setattr(model_inputs, "VALUE_CHECK_DEVICES", ())
    model = _model(block).eval()
    prompt = torch.randint(0, 99, (1, 28), generator=torch.Generator().manual_seed(2))
    with pytest.raises(ValueError, match=r"reaches 33 tokens \(position 32; padding not counted\) but n_positions is "
                                         r"32"):
        model.generate(prompt, max_new_tokens=6, do_sample=False, cache_implementation=cache_implementation)
    # A left-padded batch whose buffer is longer than n_positions but whose rows each fit is not refused, and a
    # fitting generation reads nothing more than before.
    batch = torch.randint(0, 99, (2, 30), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(2, 30, dtype=torch.long)
    mask[0, :12] = mask[1, :10] = 0
    out = model.generate(batch, attention_mask=mask, max_new_tokens=4, do_sample=False,
                         cache_implementation=cache_implementation)
    assert out.shape == (2, 34)


def _compiled_training_step(block: str, backend: str = "inductor"):
    eager, compiled = _model(block, dropout=0.0), _model(block, dropout=0.0)
    input_ids = torch.randint(0, 99, (2, 16), generator=torch.Generator().manual_seed(1))
    step = torch.compile(compiled, fullgraph=True, backend=backend)  # fullgraph: any graph break is an error
    compiled_loss = step(input_ids=input_ids, labels=input_ids).loss
    compiled_loss.backward()
    eager_loss = eager(input_ids=input_ids, labels=input_ids).loss
    eager_loss.backward()
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-5)
    for (name, got), want in zip(compiled.named_parameters(), eager.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5, msg=name)


# One graph (fullgraph) for forward, loss and backward is dynamo's and AOT autograd's to decide, the same under
# aot_eager (no kernels built) as under inductor; llama's block (rope, rmsnorm, swiglu, grouped kv heads) is also run
# through inductor's code (~20 s on the CPU), as GPT-2's is by test_fast_paths.py's compiled training.
COMPILED_TRAINING_BACKENDS = {"gpt2": "aot_eager", "llama": "inductor", "transformer-decoder": "aot_eager"}


@pytest.mark.parametrize("block", [pytest.param(block, marks=pytest.mark.slow if backend == "inductor" else ())
                                   for block, backend in COMPILED_TRAINING_BACKENDS.items()])
def test_forward_loss_and_backward_compile_into_one_graph(block):
    torch._dynamo.reset()
    _compiled_training_step(block, COMPILED_TRAINING_BACKENDS[block])


@pytest.mark.parametrize("lm_loss_weight", [0.0, 0.5])
def test_a_fine_tuning_step_of_a_classifier_on_the_gpu_code_path_reads_nothing_back(lm_loss_weight, monkeypatch):
    """The head's label check and pooling, and GPT-1's auxiliary LM loss, stay on the device too. (No attention_mask:
    given one, transformers' own sdpa mask builder reads it back to see whether it may skip it, for every
    transformers model alike; the head finds padding from pad_token_id.)"""
    from hf_gpt_custom import GPTCustomForSequenceClassification

    monkeypatch.setattr(model_inputs, "VALUE_CHECK_DEVICES", ())
    torch.manual_seed(0)
    config = GPTCustomConfig(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4, num_labels=3,
                             pad_token_id=0)
    model = GPTCustomForSequenceClassification(config).train()
    input_ids = torch.randint(1, 99, (2, 16))
    input_ids[0, -4:] = 0
    with CountHostReads() as counter:
        loss = model(input_ids=input_ids, labels=torch.tensor([2, 0]), lm_loss_weight=lm_loss_weight).loss
        loss.backward()
    assert counter.reads == []


def _sdpa_calls_in_compiled_training_step(block: str) -> list[dict]:
    """The scaled_dot_product_attention calls dynamo records for a training step (aot_eager: no kernels built)."""
    calls = []

    def record(graph_module, example_inputs):
        calls.extend(dict(node.kwargs) for node in graph_module.graph.nodes
                     if node.target is torch.nn.functional.scaled_dot_product_attention)
        return graph_module

    torch._dynamo.reset()
    model = _model(block, dropout=0.0)
    input_ids = torch.randint(0, 99, (2, 16))
    torch.compile(model, backend=record, fullgraph=True)(input_ids=input_ids, labels=input_ids)
    torch._dynamo.reset()
    return calls


@pytest.mark.parametrize("block", ["gpt2", "llama"])
def test_a_compiled_training_step_gives_sdpa_the_causal_flag_not_a_mask_even_on_torch_before_2_14(block,
                                                                                               monkeypatch):
    """Before torch 2.14, dynamo made transformers' `is_exporting()` check a constant True, so its mask builder never
    skipped the mask while compiling and SDPA ran masked, non-causal kernels (2.3x the attention backward on an
    H200). The model must not depend on it: with that torch's answer patched in, attention still gets no mask."""
    from transformers import masking_utils

    monkeypatch.setattr(masking_utils, "is_torchdynamo_exporting", lambda: True)
    calls = _sdpa_calls_in_compiled_training_step(block)
    assert len(calls) == 2  # one per layer
    assert all(call["attn_mask"] is None and call["is_causal"] is True for call in calls), calls


def test_the_causal_flag_check_sees_the_mask_transformers_builds_under_old_torch(monkeypatch):
    """The check above is not blind: transformers' own mask builder, with the same patch, hands SDPA a mask."""
    from transformers import masking_utils

    monkeypatch.setattr(masking_utils, "is_torchdynamo_exporting", lambda: True)
    monkeypatch.setattr(modeling_gpt_custom, "uses_sdpa_causal_flag", lambda *args: False)
    calls = _sdpa_calls_in_compiled_training_step("gpt2")
    assert calls and all(call["attn_mask"] is not None and call["is_causal"] is False for call in calls), calls


@pytest.mark.parametrize("use_cache", [False, None], ids=["no_cache", "eval_default_cache"])
@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_packed_sequences_given_by_their_positions_do_not_attend_across_documents(attn_implementation, use_cache):
    """DataCollatorWithFlattening packs documents into one row without a mask, positions restarting at 0 at each
    document. transformers builds the block-diagonal mask from those positions, so the causal-flag shortcut must not
    apply when positions are given: each document's logits are the ones it gets alone — also in eval mode, where the
    model makes a cache by default (transformers' builder ignores packing when handed one; GPT-2 then attends
    across documents)."""
    model = _model("gpt2", dropout=0.0).eval()
    model.set_attn_implementation(attn_implementation)
    first, second = torch.randint(0, 99, (1, 5)), torch.randint(0, 99, (1, 4))
    packed = torch.cat([first, second], dim=1)
    positions = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3]])
    with torch.no_grad():
        logits = model(packed, position_ids=positions, use_cache=use_cache).logits
        alone = [model(document).logits for document in (first, second)]
    torch.testing.assert_close(logits[:, :5], alone[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits[:, 5:], alone[1], rtol=1e-5, atol=1e-5)


def _backward_gradient_shapes_of_a_compiled_step(return_logits: bool) -> list[tuple]:
    """The shapes of the gradients a compiled training step's backward is handed: one per tensor the compiled
    forward returns (AOTAutograd's `tangents_*` inputs), a zero tensor for each one the loss does not reach."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    shapes = []

    def backward_compiler(graph_module, example_inputs):
        shapes.extend(tuple(node.meta["val"].shape) for node in graph_module.graph.find_nodes(op="placeholder")
                      if node.name.startswith("tangents"))
        return make_boxed_func(graph_module.forward)

    torch._dynamo.reset()
    model = _model("gpt2", dropout=0.0)
    backend = aot_autograd(fw_compiler=lambda graph_module, _: make_boxed_func(graph_module.forward),
                           bw_compiler=backward_compiler)
    step = torch.compile(model, backend=backend, fullgraph=True)
    input_ids = torch.randint(0, 99, (2, 16), generator=torch.Generator().manual_seed(1))
    step(input_ids=input_ids, labels=input_ids, return_logits=return_logits).loss.backward()
    torch._dynamo.reset()
    return shapes


def test_a_compiled_step_that_asks_for_the_loss_alone_gets_no_logits_sized_zero_gradient():
    """pytorch/pytorch#131794: every tensor a compiled forward returns is handed a gradient in backward, a zero one
    when the loss does not reach it, so returned logits cost a (batch, seq, vocab) fill and a read in every step
    (on the CPU the compiled step ran 1.34x as fast without them: benchmarks/bench_compile.py). With return_logits=False (the training loop's call) the loss is the
    only output; the check sees the logits' gradient when they are returned."""
    assert (2, 16, 99) in _backward_gradient_shapes_of_a_compiled_step(return_logits=True)
    assert _backward_gradient_shapes_of_a_compiled_step(return_logits=False) == [()]


def test_the_loss_alone_is_gpt2s_loss_with_gpt2s_gradients():
    """return_logits=False changes what is returned, not what is computed: against transformers' GPT2LMHeadModel
    with the same weights (dropout 0), loss and every gradient; without labels there is nothing to return."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom.convert_gpt2 import from_gpt2_model
    from hf_gpt_custom.errors import UserError

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0)).train()
    ours = from_gpt2_model(gpt2, GPTCustomForCausalLM).train()
    input_ids = torch.randint(0, 99, (2, 16), generator=torch.Generator().manual_seed(2))
    labels = input_ids.masked_fill(torch.rand(2, 16, generator=torch.Generator().manual_seed(3)) < 0.2, -100)
    want = gpt2(input_ids=input_ids, labels=labels).loss
    want.backward()
    got = ours(input_ids=input_ids, labels=labels, return_logits=False)
    got.loss.backward()
    assert got.logits is None
    torch.testing.assert_close(got.loss, want, rtol=1e-5, atol=1e-6)
    want_grads = {name.replace("transformer.", ""): p.grad for name, p in gpt2.named_parameters()}
    for name, parameter in ours.named_parameters():
        want_grad = want_grads[name.replace("transformer.", "")]
        if want_grad.dim() == 2 and "wte" not in name and "wpe" not in name:
            want_grad = want_grad.T  # GPT-2's Conv1D stores (in, out); ours nn.Linear (out, in)
        torch.testing.assert_close(parameter.grad, want_grad, rtol=1e-4, atol=1e-6, msg=name)
    with pytest.raises(UserError, match="needs labels"):
        ours(input_ids=input_ids, return_logits=False)



def _decoding_step(model: GPTCustomForCausalLM, inputs: str) -> tuple[dict, torch.Tensor]:
    """(the keyword arguments of a static-cache decoding step, the tokens before it). `inputs`:
    - "transformers' loop" (left-padded or not): what transformers' `_sample` hands the model for its second token,
      taken from a real generate() — the calls our own loop does not cover (a streamer, scores returned);
    - "2-D mask" and "no mask": a caller's own loop over a StaticCache, as with GPT2LMHeadModel."""
    calls = []
    forward = model.forward

    @functools.wraps(forward)  # generate() reads the signature: it passes position_ids only to a forward taking them
    def recording_forward(*args, **kwargs):
        calls.append(copy.deepcopy(kwargs))  # the cache as it stood before this step wrote its token
        return forward(*args, **kwargs)

    prompt = torch.randint(1, model.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(prompt)
    if inputs == "transformers' loop, left-padded":
        mask[0, :2] = 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(modeling_gpt_custom, "uses_static_decoding", lambda *args, **kwargs: False)
        patch.setattr(model, "forward", recording_forward)
        model.generate(prompt, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0,
                       cache_implementation="static", disable_compile=True)
    step = calls[1]
    assert step["input_ids"].shape == (2, 1) and step["cache"].get_seq_length().dim() == 0  # counted on the device
    if not inputs.startswith("transformers' loop"):
        step = {"input_ids": step["input_ids"], "cache": step["cache"], "use_cache": True}
    if inputs == "2-D mask":
        step["attention_mask"] = torch.ones(2, 7, dtype=torch.long)
    return step, prompt


DECODING_INPUTS = ["transformers' loop", "transformers' loop, left-padded", "2-D mask", "no mask"]


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("inputs", DECODING_INPUTS)
def test_a_static_cache_decoding_step_reads_nothing_back_to_the_host(block, inputs, monkeypatch):
    """A static cache counts its tokens in a device tensor. The mask check compared that count with a 2-D mask's
    length, and positions derived without a mask checked it against n_positions: each read it back, a host sync in
    every decoding step on a GPU and a graph break under torch.compile (GPT2LMHeadModel has neither)."""
    monkeypatch.setattr(model_inputs, "VALUE_CHECK_DEVICES", ())
    model = _model(block).eval()
    step, _ = _decoding_step(model, inputs)
    with torch.no_grad(), CountHostReads() as counter:
        model(**step)
    assert counter.reads == []


@pytest.mark.parametrize("inputs", [name for name in DECODING_INPUTS if "padded" not in name])
def test_a_static_cache_decoding_step_compiles_into_one_graph_and_gives_gpt2s_logits(inputs, monkeypatch):
    monkeypatch.setattr(model_inputs, "VALUE_CHECK_DEVICES", ())
    ours, reference = make_gpt2_pair("sdpa", seed=3)
    step, prompt = _decoding_step(ours, inputs)
    with torch.no_grad():
        torch._dynamo.reset()
        logits = torch.compile(ours, fullgraph=True, backend="aot_eager")(**step).logits[:, -1]
        expected = reference(torch.cat([prompt, step["input_ids"]], dim=1)).logits[:, -1]  # no cache at all
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-5)
