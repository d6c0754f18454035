"""Our model is GPT-2: same weights in, the same logits, loss and greedy tokens out as transformers' GPT2LMHeadModel."""

import pytest
import torch

from tests.helpers import make_gpt2_pair

# Several random GPT-2 shapes: widths, depths, head counts, explicit MLP width, both GELU forms.
SHAPES = {
    "tiny-gelu_new": dict(n_embd=32, n_layer=2, n_head=4),
    "tiny-gelu-exact": dict(n_embd=32, n_layer=2, n_head=4, activation_function="gelu"),
    "wide-n_inner": dict(n_embd=48, n_layer=3, n_head=6, n_inner=80),
    "one-head-deep": dict(n_embd=24, n_layer=4, n_head=1, activation_function="gelu"),
    # GPT2Config's switch for the 1/sqrt(head_dim) scale: a checkpoint trained without it must load without it
    "unscaled-attention": dict(n_embd=32, n_layer=2, n_head=4, scale_attn_weights=False),
}


def _padded_batch(vocab_size: int = 99):
    input_ids = torch.randint(0, vocab_size, (3, 19))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :6] = 0  # left padding, as in batched generation
    attention_mask[1, -4:] = 0  # right padding, as in batched scoring
    return input_ids, attention_mask


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("shape", SHAPES)
def test_logits_match_transformers_gpt2(attn_implementation, shape):
    ours, reference = make_gpt2_pair(attn_implementation, **SHAPES[shape])
    input_ids, attention_mask = _padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids).logits, reference(input_ids).logits, rtol=0, atol=1e-5)
        # With padding, positions that are padding are garbage in both models; compare the real ones. Without
        # position_ids ours numbers each row's real tokens from 0 (the row alone); GPT-2 numbers columns, so it is
        # given those positions. Right-padded and unpadded rows get the same positions either way.
        ours_logits = ours(input_ids, attention_mask=attention_mask).logits
        row_positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        reference_logits = reference(input_ids, attention_mask=attention_mask, position_ids=row_positions).logits
        right_padded_logits = reference(input_ids[1:], attention_mask=attention_mask[1:]).logits
    keep = attention_mask.bool()
    torch.testing.assert_close(ours_logits[keep], reference_logits[keep], rtol=0, atol=1e-5)
    torch.testing.assert_close(ours_logits[1:][keep[1:]], right_padded_logits[keep[1:]], rtol=0, atol=1e-5)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_left_padded_batch_with_position_ids_matches_reference(attn_implementation):
    ours, reference = make_gpt2_pair(attn_implementation)
    input_ids, attention_mask = _padded_batch()
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        ours_logits = ours(input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
        reference_logits = reference(input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    keep = attention_mask.bool()
    torch.testing.assert_close(ours_logits[keep], reference_logits[keep], rtol=0, atol=1e-5)


@pytest.mark.parametrize("shape", ["tiny-gelu_new", "wide-n_inner"])
def test_loss_with_labels_matches_reference_and_ignores_minus_100(shape):
    ours, reference = make_gpt2_pair("sdpa", **SHAPES[shape])
    input_ids = torch.randint(0, 99, (2, 16))
    labels = input_ids.clone()
    labels[0, :5] = -100
    with torch.no_grad():
        ours_loss = ours(input_ids, labels=labels).loss
        torch.testing.assert_close(ours_loss, reference(input_ids, labels=labels).loss, rtol=0, atol=1e-6)
        # By hand: mean cross-entropy of position t predicting token t+1, over labels that are not -100.
        log_probs = ours(input_ids).logits[:, :-1].log_softmax(-1)
        targets = labels[:, 1:]
        kept = targets != -100
        by_hand = -log_probs[kept].gather(-1, targets[kept][:, None]).mean()
    torch.testing.assert_close(ours_loss, by_hand, rtol=0, atol=1e-6)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("shape", ["tiny-gelu_new", "tiny-gelu-exact"])
def test_greedy_generate_is_identical_token_for_token(attn_implementation, shape):
    ours, reference = make_gpt2_pair(attn_implementation, **SHAPES[shape])
    prompt = torch.randint(0, 98, (1, 7))
    settings = dict(max_new_tokens=20, do_sample=False, pad_token_id=0)
    assert ours.generate(prompt, **settings).tolist() == reference.generate(prompt, **settings).tolist()


def test_from_pretrained_converts_a_transformers_gpt2_folder(tmp_path):
    ours, reference = make_gpt2_pair("sdpa")
    reference.save_pretrained(tmp_path)
    from hf_gpt_custom import GPTCustomForCausalLM

    loaded = GPTCustomForCausalLM.from_pretrained(tmp_path)
    assert loaded.transformer.wte.weight.data_ptr() == loaded.lm_head.weight.data_ptr()
    input_ids = torch.randint(0, 99, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids).logits, reference(input_ids).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("selection", [True, [0, 2, -1], 1])
def test_hidden_states_and_attentions_match_transformers_gpt2(selection):
    """Both models collect outputs with transformers' capture hooks: the same layers selected, the same values."""
    ours, reference = make_gpt2_pair("eager", n_layer=3)
    input_ids = torch.randint(0, 99, (2, 9))
    with torch.no_grad():
        got = ours(input_ids, output_hidden_states=selection, output_attentions=True)
        want = reference(input_ids, output_hidden_states=selection, output_attentions=True)
    assert len(got.hidden_states) == len(want.hidden_states) and len(got.attentions) == 3 == len(want.attentions)
    for ours_state, reference_state in zip(got.hidden_states + got.attentions, want.hidden_states + want.attentions):
        if reference_state is None:
            assert ours_state is None
        else:
            torch.testing.assert_close(ours_state, reference_state, rtol=0, atol=1e-5)


@pytest.mark.parametrize("use_cache", [False, True])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_packed_sequences_with_restarting_position_ids_stay_apart_as_in_gpt2(attn_implementation, use_cache):
    """Two sequences packed in one row, positions restarting at 0 (DataCollatorWithFlattening's format): transformers'
    mask builder reads the positions and keeps each sequence from attending to the other. The sdpa fast path (no mask,
    is_causal=True) must not be taken when the caller passes positions, and an empty cache (eval mode's default)
    must mask as no cache, so eval mode (use_cache) gives train mode's logits. References: GPT2LMHeadModel with the
    same weights and positions without a cache (with one, GPT-2 stops reading the positions and lets the sequences
    see each other), and the second sequence run alone."""
    ours, reference = make_gpt2_pair(attn_implementation)
    generator = torch.Generator().manual_seed(11)
    first, second = torch.randint(1, 99, (1, 7), generator=generator), torch.randint(1, 99, (1, 9), generator=generator)
    input_ids = torch.cat([first, second], dim=-1)
    position_ids = torch.cat([torch.arange(7), torch.arange(9)])[None]
    with torch.no_grad():
        got = ours(input_ids, position_ids=position_ids, use_cache=use_cache).logits
        expected = reference(input_ids, position_ids=position_ids, use_cache=False).logits
        alone = reference(second).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(got[:, 7:], alone, rtol=0, atol=1e-5)


def test_loss_with_num_items_in_batch_is_a_sum_over_tokens_divided_by_it_as_in_gpt2():
    """Under gradient accumulation transformers' Trainer passes num_items_in_batch (the labelled tokens of every
    micro-batch): the causal-LM loss is then the micro-batch's summed cross-entropy divided by it, so the accumulated
    gradient is the whole batch's. Dropped on its way to the loss, each micro-batch's loss is a mean again and short
    micro-batches weigh as much as long ones. References: GPT2LMHeadModel with the same weights, and by hand."""
    ours, reference = make_gpt2_pair("sdpa")
    input_ids = torch.randint(0, 99, (2, 16), generator=torch.Generator().manual_seed(4))
    labels = input_ids.clone()
    labels[0, :5] = -100
    items = torch.tensor(73)  # this micro-batch holds 25 of them
    with torch.no_grad():
        got = ours(input_ids, labels=labels, num_items_in_batch=items).loss
        expected = reference(input_ids, labels=labels, num_items_in_batch=items).loss
        log_probs = ours(input_ids).logits[:, :-1].log_softmax(-1)
    targets = labels[:, 1:]
    kept = targets != -100
    by_hand = -log_probs[kept].gather(-1, targets[kept][:, None]).sum() / items
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(got, by_hand, rtol=0, atol=1e-6)
