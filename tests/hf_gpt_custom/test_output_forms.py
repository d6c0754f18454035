"""Less common input and output forms, each against transformers' own classes or the same input run whole:
`logits_to_keep` per row, head pooling with a cache or a 4-D mask, one row of positions for multiple choice, a
multiple-choice example skipped with -100, and tracing or exporting with dynamic shapes and no cache (the outputs hunt
and the exportfmt hunt found each one wrong or crashing)."""

import pytest
import torch
from transformers import GPT2Config, GPT2DoubleHeadsModel, GPT2ForSequenceClassification, LlamaConfig, LlamaForCausalLM

from hf_gpt_custom import GPTCustomForCausalLM, GPTCustomForMultipleChoice, GPTCustomForSequenceClassification
from hf_gpt_custom.convert_gpt2 import from_gpt2_model
from hf_gpt_custom.convert_llama import from_llama_model
from hf_gpt_custom.errors import UserError

from tests.helpers import TINY_GPT2, make_gpt2_pair, randomize_

PER_ROW_POSITIONS = torch.tensor([[0, 4], [9, 2], [5, 5]])  # (batch, k): each row its own


def _llama_pair():
    torch.manual_seed(0)
    reference = LlamaForCausalLM(LlamaConfig(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=64))
    randomize_(reference).eval()
    return from_llama_model(reference, GPTCustomForCausalLM), reference


@pytest.mark.parametrize("keep", [PER_ROW_POSITIONS, torch.arange(10).expand(3, 10) % 3 == 0,
                                  torch.tensor([1, 7]), 3, 0],
                         ids=["per-row positions", "bool mask", "positions", "last 3", "all"])
def test_logits_to_keep_reads_every_form_as_llama(keep):
    """A 2-D (batch, k) tensor read every row at every row's positions: (3, 3, 2, vocab), row 0 given row 2's."""
    ours, reference = _llama_pair()
    input_ids = torch.randint(0, 99, (3, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, expected = ours(input_ids, logits_to_keep=keep).logits, reference(input_ids, logits_to_keep=keep).logits
        full = ours(input_ids).logits
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    if keep is PER_ROW_POSITIONS:  # and by hand: row r at its own positions
        for row, positions in enumerate(PER_ROW_POSITIONS):
            torch.testing.assert_close(got[row], full[row, positions], rtol=0, atol=1e-6)


def _classifier(pad_token_id):
    torch.manual_seed(0)
    reference = GPT2ForSequenceClassification(GPT2Config(**TINY_GPT2, num_labels=3, pad_token_id=pad_token_id))
    return from_gpt2_model(randomize_(reference).eval(), GPTCustomForSequenceClassification)


@pytest.mark.parametrize("pad_token_id", [None, 0], ids=["no pad id", "pad id"])
def test_a_classifier_continuing_a_cache_reads_each_row_as_the_whole_input(pad_token_id):
    """With a cache the mask covers the cached columns too: without a pad id the row was read at the wrong column
    (another token's logits alone, an IndexError batched)."""
    model = _classifier(pad_token_id)
    input_ids = torch.randint(1, 99, (2, 9), generator=torch.Generator().manual_seed(2))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, 6:] = 0  # row 0: 6 tokens, right-padded
    input_ids = input_ids.masked_fill(attention_mask == 0, 0)
    with torch.no_grad():
        whole = model(input_ids, attention_mask=attention_mask).logits
        prefix = model(input_ids[:, :4], attention_mask=attention_mask[:, :4], use_cache=True)
        continued = model(input_ids[:, 4:], attention_mask=attention_mask, past_key_values=prefix.past_key_values)
    torch.testing.assert_close(continued.logits, whole, rtol=0, atol=1e-5)


def test_a_classifier_without_a_pad_id_reads_a_4d_mask_as_gpt2_does():
    """A 4-D mask says which keys each query sees, not where the padding is: it was read as (batch, seq) and gave
    logits of shape (1, 1, 6, 3). GPT-2 reads a single row at its last position and refuses several rows."""
    model = _classifier(None)
    input_ids = torch.randint(1, 99, (1, 6))
    causal = torch.tril(torch.ones(6, 6, dtype=torch.bool))[None, None]
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids, attention_mask=causal).logits, model(input_ids).logits)
    with pytest.raises(UserError, match=r"pass a \(batch, seq\) attention_mask"):
        model(input_ids.repeat(2, 1), attention_mask=causal.repeat(2, 1, 1, 1))
    with pytest.raises(UserError, match=r"lm_loss_weight > 0 reads each row's padding from a \(batch, seq\) "):
        _classifier(0)(input_ids, attention_mask=causal, labels=torch.tensor([1]), lm_loss_weight=0.5)


def _double_heads_pair():
    """(ours, GPT2DoubleHeadsModel) with the same weights; the summary bias zeroed (ours has none) so that the
    multiple-choice logits, hence the losses, are the same."""
    torch.manual_seed(0)
    reference = randomize_(GPT2DoubleHeadsModel(GPT2Config(**TINY_GPT2, pad_token_id=0))).eval()
    with torch.no_grad():
        reference.multiple_choice_head.summary.bias.zero_()
    return from_gpt2_model(reference, GPTCustomForMultipleChoice), reference


@pytest.mark.parametrize("positions", [torch.arange(2, 10), torch.arange(2, 10)[None]], ids=["(seq,)", "(1, seq)"])
def test_multiple_choice_takes_one_row_of_positions_as_gpt2_double_heads(positions):
    ours, reference = _double_heads_pair()
    input_ids = torch.randint(1, 99, (2, 3, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = reference(input_ids, position_ids=positions, mc_token_ids=torch.full((2, 3), 7)).mc_logits
        got = ours(input_ids, position_ids=positions).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    with pytest.raises(UserError, match=r"position_ids must be \(batch, n_choices, seq\) = \(2, 3, 8\)"):
        ours(input_ids, position_ids=torch.arange(5))
    # one row per example is not one per choice: with batch == n_choices expand() took it as that (the review);
    # GPT2DoubleHeadsModel refuses it too
    square = torch.randint(1, 99, (2, 2, 8), generator=torch.Generator().manual_seed(4))
    with pytest.raises(UserError, match=r"position_ids must be \(batch, n_choices, seq\) = \(2, 2, 8\)"):
        ours(square, position_ids=torch.stack([torch.arange(8), torch.arange(10, 18)]))
    with pytest.raises(RuntimeError):
        reference(square, position_ids=torch.stack([torch.arange(8), torch.arange(10, 18)]),
                  mc_token_ids=torch.full((2, 2), 7))


def test_a_multiple_choice_example_labelled_minus_100_is_skipped_as_in_gpt2_double_heads():
    """It was refused ("labels holds -100"); GPT2DoubleHeadsModel's cross-entropy skips it, and Trainer leaves it out
    of num_items_in_batch, so the LM loss leaves it out too."""
    ours, reference = _double_heads_pair()
    input_ids = torch.randint(1, 99, (3, 2, 8), generator=torch.Generator().manual_seed(4))
    labels = torch.tensor([1, -100, 0])
    with torch.no_grad():
        expected = reference(input_ids, mc_token_ids=torch.full((3, 2), 7), mc_labels=labels).mc_loss
        torch.testing.assert_close(ours(input_ids, labels=labels).loss, expected, rtol=0, atol=1e-6)
        # λ·L1 over the labelled examples only: the same as the batch without the skipped one
        kept = ours(input_ids[[0, 2]], labels=labels[[0, 2]], lm_loss_weight=0.5)
        got = ours(input_ids, labels=labels, lm_loss_weight=0.5)
        torch.testing.assert_close(got.loss, kept.loss, rtol=0, atol=1e-6)
        # under Trainer: this micro-batch's 2 labelled examples of 4 counted over the accumulation
        counted = ours(input_ids, labels=labels, lm_loss_weight=0.5, num_items_in_batch=4)
        torch.testing.assert_close(counted.loss, (kept.task_loss * 2 + 0.5 * 2 * kept.lm_loss) / 4, rtol=0,
                                   atol=1e-6)


def test_tracing_and_exporting_without_a_cache_give_the_eager_logits():
    """With use_cache=False the input's length is traced (jit.trace) or symbolic (torch.export with dynamic
    dims), and the forward reached for a static cache's length on None: an AttributeError; GPT-2 traces."""
    ours, reference = make_gpt2_pair()
    input_ids = torch.randint(0, 99, (2, 7))
    longer = torch.randint(0, 99, (3, 11))

    class Logits(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids, use_cache=False).logits

    with torch.no_grad():
        traced = torch.jit.trace(Logits(ours), (input_ids,), check_trace=False)
        torch.testing.assert_close(traced(input_ids), reference(input_ids).logits, rtol=0, atol=1e-5)
        batch, seq = torch.export.Dim("batch", max=8), torch.export.Dim("seq", max=64)
        exported = torch.export.export(Logits(ours), (input_ids,), dynamic_shapes={"input_ids": {0: batch, 1: seq}})
        torch.testing.assert_close(exported.module()(longer), reference(longer).logits, rtol=0, atol=1e-5)


def test_the_gpt1_lm_loss_of_a_classifier_continuing_a_cache_scores_the_new_tokens_by_hand():
    """The LM loss read its padding from the whole mask, cached columns too: a shape error. By hand: the new tokens'
    last hidden states through the tied embedding, each predicting the next new token."""
    model = _classifier(0)
    input_ids = torch.randint(1, 99, (1, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        prefix = model(input_ids[:, :4], use_cache=True)
        continued = model(input_ids[:, 4:], attention_mask=torch.ones_like(input_ids), labels=torch.tensor([1]),
                          past_key_values=prefix.past_key_values, lm_loss_weight=0.5, output_hidden_states=True)
    logits = continued.hidden_states[-1][0] @ model.transformer.wte.weight.T  # (5 new tokens, vocab)
    expected = torch.nn.functional.cross_entropy(logits[:-1], input_ids[0, 5:])
    torch.testing.assert_close(continued.lm_loss, expected, rtol=0, atol=1e-5)


def test_a_config_asking_for_tuples_gets_them_from_the_lm_and_every_head_as_openai_gpt_gives_them():
    """A converted folder's config.json may say return_dict=false (now carried over): the body then returned a tuple
    to the LM head and task heads, which read it by name ('tuple' object has no attribute 'last_hidden_state'), even
    when the caller passed return_dict=True (the roundreview17 hunt). Reference: transformers' OpenAI GPT, which
    honours the setting; the values are those of return_dict=True."""
    from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

    from hf_gpt_custom import GPTCustomForQuestionAnswering, GPTCustomForTokenClassification
    from hf_gpt_custom.convert_openai_gpt import from_openai_gpt_model

    torch.manual_seed(0)
    reference = randomize_(OpenAIGPTLMHeadModel(OpenAIGPTConfig(vocab_size=99, n_positions=32, n_embd=32, n_layer=2,
                                                                n_head=4, return_dict=False))).eval()
    ours = from_openai_gpt_model(reference, GPTCustomForCausalLM)
    assert ours.config.return_dict is False
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        theirs_tuple, ours_tuple = reference(ids), ours(ids)
        assert isinstance(ours_tuple, tuple) and isinstance(theirs_tuple, tuple)
        torch.testing.assert_close(ours_tuple[0], theirs_tuple[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ours(ids, return_dict=True).logits, theirs_tuple[0], rtol=1e-5, atol=1e-5)
        assert ours.generate(ids, max_new_tokens=4, do_sample=False).tolist() == \
            reference.generate(ids, max_new_tokens=4, do_sample=False).tolist()
        for head in (GPTCustomForSequenceClassification, GPTCustomForTokenClassification,
                     GPTCustomForQuestionAnswering):
            model = head(ours.config).eval()
            as_tuple, as_dict = model(ids), model(ids, return_dict=True)
            assert isinstance(as_tuple, tuple)
            torch.testing.assert_close(as_tuple[0], as_dict.to_tuple()[0])
        choices = GPTCustomForMultipleChoice(ours.config).eval()
        assert isinstance(choices(ids[:, None].expand(1, 2, 5), attention_mask=torch.ones(1, 2, 5)), tuple)
