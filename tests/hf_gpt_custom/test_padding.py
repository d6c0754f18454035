"""A padded row gives what the row gives alone (issue 22.2), for every position type and every head, left or right
padding, with no position_ids passed — the call pipelines, Trainer and lm-eval make. The reference is the row run
alone, unpadded. (transformers' GPT-2 numbers positions by column, so its left-padded rows differ from their own
numbers alone unless the caller passes position_ids.)"""

import pytest
import torch

from hf_gpt_custom import (
    GPTCustomConfig,
    GPTCustomForCausalLM,
    GPTCustomForQuestionAnswering,
    GPTCustomForSequenceClassification,
    GPTCustomForTokenClassification,
)

PAD = 0
POSITIONS = {
    "learned": {},
    "sinusoidal": {"position_embedding_type": "sinusoidal"},
    "rope": {"position_embedding_type": "rope", "norm_type": "rmsnorm", "mlp_type": "swiglu", "n_kv_head": 2},
}
ROWS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [21, 22, 23, 24]]


def _config(position_type: str, **fields) -> GPTCustomConfig:
    return GPTCustomConfig(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                           embd_pdrop=0.0, attn_pdrop=0.0, pad_token_id=PAD, **POSITIONS[position_type], **fields)


def _batch(side: str) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, ROWS))
    input_ids = torch.full((len(ROWS), width), PAD)
    attention_mask = torch.zeros_like(input_ids)
    for row, tokens in enumerate(ROWS):
        span = slice(width - len(tokens), width) if side == "left" else slice(0, len(tokens))
        input_ids[row, span], attention_mask[row, span] = torch.tensor(tokens), 1
    return input_ids, attention_mask


def _real(tensor: torch.Tensor, attention_mask: torch.Tensor, row: int) -> torch.Tensor:
    return tensor[row][attention_mask[row].bool()]


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("position_type", POSITIONS)
def test_causal_lm_logits_of_a_padded_row_equal_the_row_alone(position_type, side):
    torch.manual_seed(0)
    model = GPTCustomForCausalLM(_config(position_type)).eval()
    input_ids, attention_mask = _batch(side)
    with torch.no_grad():
        batched = model(input_ids, attention_mask=attention_mask).logits
        for row, tokens in enumerate(ROWS):
            alone = model(torch.tensor([tokens])).logits[0]
            torch.testing.assert_close(_real(batched, attention_mask, row), alone, rtol=0, atol=1e-5)


@pytest.mark.parametrize("head", [GPTCustomForSequenceClassification, GPTCustomForTokenClassification,
                                  GPTCustomForQuestionAnswering])
@pytest.mark.parametrize("position_type", POSITIONS)
def test_task_head_outputs_of_a_left_padded_row_equal_the_row_alone(position_type, head):
    torch.manual_seed(0)
    model = head(_config(position_type, num_labels=3)).eval()
    input_ids, attention_mask = _batch("left")
    with torch.no_grad():
        batched = model(input_ids, attention_mask=attention_mask)
        for row, tokens in enumerate(ROWS):
            alone = model(torch.tensor([tokens]))
            if head is GPTCustomForSequenceClassification:
                torch.testing.assert_close(batched.logits[row], alone.logits[0], rtol=0, atol=1e-5)
            elif head is GPTCustomForTokenClassification:
                torch.testing.assert_close(_real(batched.logits, attention_mask, row), alone.logits[0], rtol=0,
                                           atol=1e-5)
            else:
                for name in ("start_logits", "end_logits"):
                    got = _real(getattr(batched, name), attention_mask, row)
                    torch.testing.assert_close(got, getattr(alone, name)[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("position_type", POSITIONS)
def test_left_padded_generation_equals_each_row_generated_alone(position_type):
    torch.manual_seed(0)
    model = GPTCustomForCausalLM(_config(position_type)).eval()
    input_ids, attention_mask = _batch("left")
    greedy = dict(max_new_tokens=5, do_sample=False, pad_token_id=PAD)
    with torch.no_grad():
        batched = model.generate(input_ids, attention_mask=attention_mask, **greedy)
        for row, tokens in enumerate(ROWS):
            alone = model.generate(torch.tensor([tokens]), **greedy)[0]
            assert batched[row, -len(alone):].tolist() == alone.tolist()


def test_positions_derived_from_the_mask_by_hand():
    """Real tokens count from 0 within their row; padding keeps its column (capped at the last position)."""
    from hf_gpt_custom.model_inputs import position_ids_for

    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 1, 0, 1]])
    assert position_ids_for(mask, 0, 5, 32, "cpu").tolist() == [[0, 1, 0, 1, 2], [0, 1, 2, 3, 4], [0, 1, 1, 3, 2]]
    assert position_ids_for(torch.tensor([[0, 1, 1, 1]]), 3, 1, 32, "cpu").tolist() == [[2]]  # one decoding step
    assert position_ids_for(None, 2, 3, 32, "cpu").tolist() == [[2, 3, 4]]
    long_left_padding = torch.tensor([[0] * 36 + [1] * 4])  # 40 columns, 4 real tokens: fits a 32-position model
    assert position_ids_for(long_left_padding, 0, 40, 32, "cpu").tolist() == [[*range(32), 31, 31, 31, 31, 0, 1, 2, 3]]


def test_bad_positions_are_named():
    model = GPTCustomForCausalLM(_config("learned")).eval()
    with pytest.raises(ValueError, match="position_ids holds -1; positions start at 0"):
        model(torch.tensor([[1, 2]]), position_ids=torch.tensor([[-1, 0]]))
    with pytest.raises(ValueError, match=r"attention_mask has shape \(1, 3\) but the input has 1 row\(s\) of 2 new "
                                         r"tokens; pass a \(batch, 2\) mask"):
        model(torch.tensor([[1, 2]]), attention_mask=torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="reaches 33 tokens .position 32; padding not counted. but n_positions is 32"):
        model(torch.ones(1, 33, dtype=torch.long), attention_mask=torch.ones(1, 33, dtype=torch.long))


def test_a_mask_or_positions_that_do_not_fit_the_input_are_named_even_with_positions_given():
    """A mask over the 4 new tokens only, after 6 cached, with position_ids given: accepted before, logits off by
    0.04 (transformers' GPT-2 too); a mask of another batch size or rank: a bare IndexError. Each is named now."""
    model = GPTCustomForCausalLM(_config("learned")).eval()
    prompt, new = torch.randint(1, 90, (2, 6)), torch.randint(1, 90, (2, 4))
    with torch.no_grad():
        cache = model(prompt, use_cache=True).past_key_values
        with pytest.raises(ValueError, match=r"has shape \(2, 4\) but the input has 2 row\(s\) of 6 cached and 4 new "
                                             r"tokens; pass a \(batch, 10\) mask"):
            model(new, past_key_values=cache, attention_mask=torch.ones(2, 4, dtype=torch.long),
                  position_ids=torch.arange(6, 10)[None].expand(2, 4))
        padded = torch.ones(2, 6, dtype=torch.long)
        padded[0, :2] = 0
        for wrong in (padded[:1], padded[0], padded[:, None], torch.cat([padded, padded[:1]])):
            with pytest.raises(ValueError, match=r"attention_mask has shape .* pass a \(batch, 6\) mask"):
                model(prompt, attention_mask=wrong)
        with pytest.raises(ValueError, match="a 4-D attention_mask must be bool"):
            model(prompt, attention_mask=torch.ones(2, 1, 6, 6, dtype=torch.long))
        # A float 4-D mask is added to the scores: 1s and 0s masked nothing, the future included (GPT-2 and Llama do
        # the same in silence)
        with pytest.raises(ValueError, match=r"4-D float attention_mask .* holds positive values.*mask.bool\(\)"):
            model(prompt, attention_mask=torch.ones(6, 6).tril()[None, None].expand(2, 1, 6, 6))
        for wrong in (torch.ones(3, 1, 6, 6, dtype=torch.bool), torch.ones(2, 1, 5, 6, dtype=torch.bool)):
            with pytest.raises(ValueError, match=r"attention_mask has shape \((3, 1, 6|2, 1, 5), 6\)"):
                model(prompt, attention_mask=wrong)
        with pytest.raises(ValueError, match=r"position_ids has shape \(3, 6\) but the input has 2 row\(s\)"):
            model(prompt, position_ids=torch.arange(6)[None].expand(3, 6))
        with pytest.raises(ValueError, match="position_ids must hold integer positions, got dtype torch.float32"):
            model(prompt, position_ids=torch.arange(6.0)[None])


@pytest.mark.parametrize("value_checks", [True, False], ids=["cpu", "gpu_code_path"])
def test_a_mask_that_does_not_fit_a_static_cache_step_is_named(value_checks, monkeypatch):
    """A static cache counts its tokens on the device. The CPU reads the count and names a mask over the new tokens
    alone; the GPU's code path reads nothing back and still names a mask of another batch size or one shorter than
    the new tokens."""
    from transformers import StaticCache

    if not value_checks:
        monkeypatch.setattr("hf_gpt_custom.model_inputs.VALUE_CHECK_DEVICES", ())
    model = GPTCustomForCausalLM(_config("learned")).eval()
    prompt, new = torch.randint(1, 90, (2, 6)), torch.randint(1, 90, (2, 4))
    with torch.no_grad():
        cache = StaticCache(config=model.config, max_cache_len=16)
        model(prompt, past_key_values=cache, use_cache=True)
        if value_checks:
            with pytest.raises(ValueError, match=r"has shape \(2, 4\) but the input has 2 row\(s\) of 6 cached and 4 "
                                                 r"new tokens; pass a \(batch, 10\) mask"):
                model(new, past_key_values=cache, attention_mask=torch.ones(2, 4, dtype=torch.long))
        for wrong in (torch.ones(3, 10, dtype=torch.long), torch.ones(2, 3, dtype=torch.long)):
            with pytest.raises(ValueError, match=r"has shape \(\d, \d+\) but the input has 2 row\(s\) of the cached "
                                                 r"and 4 new tokens|pass a \(batch, 10\) mask"):
                model(new, past_key_values=cache, attention_mask=wrong)
        logits = model(new, past_key_values=cache, attention_mask=torch.ones(2, 10, dtype=torch.long)).logits
        assert logits.shape[:2] == (2, 4)
        with pytest.raises(ValueError, match=r"position_ids has shape \(1, 4\) but the input has 2 row\(s\) of 6"):
            model(prompt, position_ids=torch.arange(4)[None])
        with pytest.raises(ValueError, match=r"inputs_embeds must be \(batch, seq_len, n_embd=32\)"):
            model(inputs_embeds=torch.randn(2, 6, 31))


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_a_4d_bool_mask_masks_under_every_attention_implementation(implementation):
    """A 4-D bool mask (True = attend) was added to the eager scores as 1.0/0.0: nothing masked, later tokens leaked
    into earlier positions. The reference is the 2-D mask, which the model turns into its own 4-D mask."""
    torch.manual_seed(0)
    model = GPTCustomForCausalLM(_config("learned")).eval()
    model.config._attn_implementation = implementation
    input_ids, attention_mask = _batch("left")
    width = input_ids.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    bool_mask = causal[None, None] & attention_mask.bool()[:, None, None, :]
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        expected = model(input_ids, attention_mask=attention_mask, position_ids=positions).logits
        got = model(input_ids, attention_mask=bool_mask, position_ids=positions).logits
    real = attention_mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("pad", [0, 50, 98])
def test_the_loss_of_a_padded_batch_is_the_rows_alone_whatever_the_pad_id(side, pad):
    """labels = input ids with -100 on padding (DataCollatorForLanguageModeling's): under left padding the last pad
    column's prediction of each row's first token was scored, so the loss moved with the pad id (4.910 to 4.991
    against 5.035; found by the batch-invariance hunt). Reference: transformers' GPT2LMHeadModel on each row alone,
    unpadded, with the same weights, pooled over the rows' predicted tokens."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom.convert_gpt2 import from_gpt2_model

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()
    model = from_gpt2_model(gpt2, GPTCustomForCausalLM)
    input_ids, attention_mask = _batch(side)
    input_ids = input_ids.masked_fill(attention_mask == 0, pad)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    with torch.no_grad():
        batched = model(input_ids, attention_mask=attention_mask, labels=labels).loss
        sums = [gpt2(torch.tensor([tokens]), labels=torch.tensor([tokens])).loss * (len(tokens) - 1) for tokens in ROWS]
    torch.testing.assert_close(batched, sum(sums) / sum(len(tokens) - 1 for tokens in ROWS), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("side", ["left", "right"])
def test_with_num_items_in_batch_every_counted_label_is_scored_as_in_gpt2(side):
    """transformers' Trainer counts `labels[..., 1:] != -100` over every micro-batch before the model runs and passes
    it as num_items_in_batch; leaving the pad column's prediction out then divided a smaller sum by that count, so a
    left-padded batch's loss, eval_loss and gradient came out smaller by its share (the Trainer hunt: 5.339 against
    5.562). Reference: GPT2LMHeadModel with the same weights, given the positions our model derives, the same labels
    and the same count; and the loss is a mean over exactly the counted labels (count * loss is their sum)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom.convert_gpt2 import from_gpt2_model
    from tests.helpers import row_position_ids

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()
    model = from_gpt2_model(gpt2, GPTCustomForCausalLM)
    input_ids, attention_mask = _batch(side)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    counted = int((labels[..., 1:] != -100).sum())
    with torch.no_grad():
        ours = model(input_ids, attention_mask=attention_mask, labels=labels, num_items_in_batch=counted).loss
        theirs = gpt2(input_ids, attention_mask=attention_mask, position_ids=row_position_ids(attention_mask),
                      labels=labels, num_items_in_batch=counted).loss
        logits = model(input_ids, attention_mask=attention_mask).logits[:, :-1]
        by_hand = torch.nn.functional.cross_entropy(logits.reshape(-1, 99), labels[:, 1:].reshape(-1),
                                                    ignore_index=-100, reduction="sum") / counted
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours, by_hand, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("side", ["left", "right"])
def test_a_row_of_pad_ids_only_is_pooled_as_alone_under_either_padding(side):
    """pad = eos and a text of `<|endoftext|>`: the row has no token that is not the pad id, and GPT-2's rule reads
    its position 0, which under left padding is a pad (the pipelines hunt: label 'pos' 0.498 in a batch, 'neu' 0.507
    alone). Reference: GPT2ForSequenceClassification with the same weights on each row alone, and right-padded."""
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from hf_gpt_custom.convert_gpt2 import from_gpt2_model
    from tests.helpers import randomize_

    torch.manual_seed(0)
    eos = 98
    gpt2 = randomize_(GPT2ForSequenceClassification(GPT2Config(
        vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4, num_labels=3, pad_token_id=eos,
        eos_token_id=eos, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))).eval()
    ours = from_gpt2_model(gpt2, GPTCustomForSequenceClassification)
    rows = [[5, 6, 7, 8, 9, eos], [eos], [eos, eos], [11, 12]]
    width = max(map(len, rows))
    input_ids, attention_mask = torch.full((len(rows), width), eos), torch.zeros(len(rows), width, dtype=torch.long)
    for row, tokens in enumerate(rows):
        span = slice(width - len(tokens), width) if side == "left" else slice(0, len(tokens))
        input_ids[row, span], attention_mask[row, span] = torch.tensor(tokens), 1
    with torch.no_grad():
        batched = ours(input_ids, attention_mask=attention_mask).logits
        alone = torch.cat([gpt2(torch.tensor([tokens])).logits for tokens in rows])
        torch.testing.assert_close(batched, alone, rtol=0, atol=1e-5)
        if side == "right":  # GPT-2's own batch: its rule holds here
            torch.testing.assert_close(gpt2(input_ids, attention_mask=attention_mask).logits, alone, rtol=0, atol=1e-5)
        # padded with another id than config.pad_token_id (a collator's 0): the mask still says where padding is
        other_pad = input_ids.masked_fill(attention_mask == 0, 0)
        torch.testing.assert_close(ours(other_pad, attention_mask=attention_mask).logits, alone, rtol=0, atol=1e-5)


def test_a_sequence_classified_in_two_steps_through_a_cache_is_pooled_as_the_row_alone():
    """A left-padded batch classified in two calls: the prefix into a cache, then the last tokens with the mask over
    the cached and new columns. The head reads each row at its last real token among the new ones (the mask's last
    columns), as GPT2ForSequenceClassification with the same weights reads the whole row alone."""
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from hf_gpt_custom.convert_gpt2 import from_gpt2_model
    from tests.helpers import randomize_

    torch.manual_seed(0)
    pad = 98
    gpt2 = randomize_(GPT2ForSequenceClassification(GPT2Config(
        vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4, num_labels=3, pad_token_id=pad,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))).eval()
    ours = from_gpt2_model(gpt2, GPTCustomForSequenceClassification)
    rows = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
    input_ids = torch.tensor([rows[0], [pad, pad, pad, *rows[1]]])
    attention_mask = (input_ids != pad).long()
    with torch.no_grad():
        cache = ours(input_ids[:, :4], attention_mask=attention_mask[:, :4], use_cache=True).past_key_values
        stepped = ours(input_ids[:, 4:], attention_mask=attention_mask, past_key_values=cache).logits
        alone = torch.cat([gpt2(torch.tensor([tokens])).logits for tokens in rows])
    torch.testing.assert_close(stepped, alone, rtol=0, atol=1e-5)


def test_the_lm_loss_of_a_head_stepping_through_a_cache_reads_the_masks_last_columns():
    """GPT-1's auxiliary LM loss of a sequence-classification head called on new tokens after a cached, left-padded
    prefix: the mask covers the cached and new columns, and the new tokens' padding is its last columns. By hand:
    the tied head's next-token cross-entropy over the new tokens' hidden states (from one pass over the whole rows,
    the same states), each row's mean, averaged over the rows."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    ours = GPTCustomForSequenceClassification(_config("learned", num_labels=3)).eval()
    rows = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
    input_ids = torch.tensor([rows[0], [PAD, PAD, PAD, *rows[1]]])
    attention_mask = (input_ids != PAD).long()
    with torch.no_grad():
        cache = ours(input_ids[:, :3], attention_mask=attention_mask[:, :3], use_cache=True).past_key_values
        stepped = ours(input_ids[:, 3:], attention_mask=attention_mask, past_key_values=cache,
                       labels=torch.tensor([0, 1]), lm_loss_weight=1.0)
        hidden = ours.transformer(input_ids, attention_mask=attention_mask).last_hidden_state[:, 3:]
        logits = hidden @ ours.transformer.wte.weight[: ours.config.vocab_size].T
        per_row = F.cross_entropy(logits[:, :-1].transpose(1, 2), input_ids[:, 4:], reduction="none").mean(-1)
    torch.testing.assert_close(stepped.lm_loss, per_row.mean(), rtol=1e-5, atol=1e-6)


def test_a_left_padded_row_in_float16_eager_attention_stays_the_row_alone():
    """float16's minimum (the additive mask) plus a score below about -16 overflowed to -inf: a left pad's query, which
    every key is masked from, got a NaN row, and the next layer spread it to the real tokens (0 x NaN). GPT-2's eager
    path does the same (the batchinvariance2 hunt). Reference: the row alone, and the same batch under sdpa."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom.convert_gpt2 import from_gpt2_model
    from tests.helpers import randomize_

    torch.manual_seed(0)
    gpt2 = randomize_(GPT2LMHeadModel(GPT2Config(vocab_size=99, n_positions=32, n_embd=32, n_layer=6, n_head=4)),
                      std=0.7).eval()
    model = from_gpt2_model(gpt2, GPTCustomForCausalLM).eval().half()
    ids = torch.tensor([[0, 0, 0, 5, 6, 7], [8, 9, 10, 11, 12, 13]])
    mask = torch.tensor([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        model.set_attn_implementation("eager")
        alone = model(ids[:1, 3:]).logits[0]
        padded = model(ids, attention_mask=mask).logits[0, 3:]
        model.set_attn_implementation("sdpa")
        with_sdpa = model(ids, attention_mask=mask).logits[0, 3:]
    assert torch.isfinite(alone).all() and torch.isfinite(padded).all()
    torch.testing.assert_close(padded, with_sdpa, rtol=0, atol=0.05)
    torch.testing.assert_close(padded, alone, rtol=0, atol=0.05)
