"""Inputs GPT-2 takes beside the ids, taken as GPT-2 takes them. token_type_ids: rows of the token embedding added to
the input (GPT-1's and GPT2DoubleHeadsModel's segment embeddings); they reached the attention function through
**kwargs and were dropped, so every model and head gave the logits of the input without them. position_ids of shape
(seq_len,): one row for every row. Reference: transformers' classes with the same weights."""

import pytest
import torch
from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

from hf_gpt_custom import GPTCustomForCausalLM, GPTCustomForMultipleChoice, GPTCustomForSequenceClassification
from hf_gpt_custom.convert_gpt2 import from_gpt2_model
from hf_gpt_custom.convert_openai_gpt import from_openai_gpt_model
from hf_gpt_custom.errors import UserError

from tests.helpers import make_gpt2_pair, randomize_
from tests.hf_gpt_custom.test_convert_heads import reference_model


def _ids_and_types(*shape):
    input_ids = torch.randint(1, 99, shape, generator=torch.Generator().manual_seed(3))
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[..., shape[-1] // 2:] = 7  # the second segment: any token id works as a type
    return input_ids, token_type_ids


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_causal_lm_logits_with_token_types_match_gpt2(attn_implementation):
    ours, reference = make_gpt2_pair(attn_implementation)
    input_ids, token_type_ids = _ids_and_types(2, 9)
    with torch.no_grad():
        expected = reference(input_ids, token_type_ids=token_type_ids).logits
        assert (expected - reference(input_ids).logits).abs().max() > 1e-2  # the types do change GPT-2's logits
        torch.testing.assert_close(ours(input_ids, token_type_ids=token_type_ids).logits, expected, rtol=0, atol=1e-5)


def test_causal_lm_logits_with_token_types_match_openai_gpt():
    torch.manual_seed(0)
    reference = randomize_(OpenAIGPTLMHeadModel(OpenAIGPTConfig(vocab_size=99, n_positions=64, n_embd=32, n_layer=2,
                                                                n_head=4))).eval()
    ours = from_openai_gpt_model(reference, GPTCustomForCausalLM)
    input_ids, token_type_ids = _ids_and_types(2, 9)
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids, token_type_ids=token_type_ids).logits,
                                   reference(input_ids, token_type_ids=token_type_ids).logits, rtol=0, atol=1e-5)


def test_greedy_generation_with_token_types_matches_gpt2():
    ours, reference = make_gpt2_pair()
    input_ids, token_type_ids = _ids_and_types(1, 6)
    options = dict(token_type_ids=token_type_ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert ours.generate(input_ids, **options).tolist() == reference.generate(input_ids, **options).tolist()


def test_sequence_classification_with_token_types_matches_gpt2():
    reference = reference_model("GPT2ForSequenceClassification", num_labels=3)
    ours = from_gpt2_model(reference, GPTCustomForSequenceClassification)
    input_ids, token_type_ids = _ids_and_types(2, 9)
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids, token_type_ids=token_type_ids).logits,
                                   reference(input_ids, token_type_ids=token_type_ids).logits, rtol=0, atol=1e-5)


def test_multiple_choice_with_token_types_matches_gpt2_double_heads(tmp_path):
    reference = reference_model("GPT2DoubleHeadsModel")
    reference.save_pretrained(tmp_path)
    ours = GPTCustomForMultipleChoice.from_pretrained(tmp_path)
    input_ids, token_type_ids = _ids_and_types(2, 3, 9)  # (batch, choices, seq): every choice full length
    last_token = torch.full((2, 3), 8)
    bias = reference.multiple_choice_head.summary.bias  # one constant for every choice: ours drops it
    with torch.no_grad():
        expected = reference(input_ids, mc_token_ids=last_token, token_type_ids=token_type_ids).mc_logits
        got = ours(input_ids, token_type_ids=token_type_ids).logits + bias
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    with pytest.raises(UserError, match=r"multiple-choice token_type_ids must have the input's shape \(2, 3, 9\)"):
        ours(input_ids, token_type_ids=token_type_ids[:, 0])


@pytest.mark.parametrize("bad, message", [
    (lambda types: types[:, :4], r"token_type_ids has shape \(2, 4\) but the input has 2 row\(s\) of 9 tokens"),
    (lambda types: types + 200, r"token_type_ids holds token id 207 but vocab_size is 99"),
    (lambda types: types.float(), "token_type_ids must hold integer token ids"),
], ids=["shape", "range", "dtype"])
def test_token_types_that_do_not_fit_are_named(bad, message):
    ours, _ = make_gpt2_pair()
    input_ids, token_type_ids = _ids_and_types(2, 9)
    with pytest.raises(UserError, match=message):
        ours(input_ids, token_type_ids=bad(token_type_ids))


def test_one_row_of_positions_or_types_serves_every_row_as_in_gpt2():
    """A (seq_len,) position_ids was refused ("shape (9,) but the input has 2 row(s)"); GPT-2 broadcasts it."""
    ours, reference = make_gpt2_pair()
    input_ids, token_type_ids = _ids_and_types(2, 9)
    positions = torch.arange(3, 12)
    with torch.no_grad():
        expected = reference(input_ids, position_ids=positions, token_type_ids=token_type_ids[0]).logits
        got = ours(input_ids, position_ids=positions, token_type_ids=token_type_ids[0]).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_token_types_train_the_token_embedding_as_in_gpt2():
    """GPT-2's segment embeddings are rows of wte, so the loss's gradient reaches those rows through the types too.
    Logits alone cannot see a type embedding that is added but cut off from the graph (e.g. a stray .detach()):
    compare wte's gradient with transformers' GPT2LMHeadModel on the same weights."""
    ours, reference = make_gpt2_pair()
    input_ids, token_type_ids = _ids_and_types(2, 9)
    for model in (ours, reference):
        model(input_ids, token_type_ids=token_type_ids, labels=input_ids).loss.backward()
    torch.testing.assert_close(ours.transformer.wte.weight.grad, reference.transformer.wte.weight.grad,
                               rtol=0, atol=1e-5)
