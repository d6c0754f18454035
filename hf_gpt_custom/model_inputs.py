"""What the model accepts, checked before it becomes an opaque error deep in torch: token ids, masks and positions,
and the positions derived from a padding mask. Shapes and dtypes are checked on every device; values only where
reading them is free (the CPU), so a GPU step never waits for the host. The model's layers live in
modeling_gpt_custom.py.
"""

from __future__ import annotations

import torch

from .errors import UserError

# Input checks that read tensor values (an id out of range, a position past the context) run only on these devices.
# On the CPU the values are already in host memory; on a GPU each read would stall the host every step and break a
# torch.compile graph, so there only checks on shapes and dtypes run. A test empties the tuple to hold the code path
# a GPU takes to zero host reads while running on a CPU.
VALUE_CHECK_DEVICES = ("cpu",)

# Said when the input passes the last position: transformers' Llama runs a RoPE model past its trained context in
# silence, this model stops there, and a converted Llama's user knows the limit as max_position_embeddings
PAST_THE_CONTEXT = ("; or, for a RoPE model, load it with a larger n_positions= (transformers' "
                    "max_position_embeddings) to run past the context it was trained for, as LlamaForCausalLM does")


def checks_values(tensor: torch.Tensor) -> bool:
    """True when input checks may read `tensor`'s values (see VALUE_CHECK_DEVICES); never while compiling or tracing,
    which would record the check as constants."""
    return (
        tensor.device.type in VALUE_CHECK_DEVICES
        and not torch.compiler.is_compiling()
        and not torch.jit.is_tracing()
    )


def check_is_tensor(name: str, token_ids) -> None:
    """A list or an array of token ids: torch's own errors named no argument ('list' object has no attribute ...)."""
    if not isinstance(token_ids, torch.Tensor):
        raise UserError(f"{name} must be a torch tensor of token ids, got {type(token_ids).__name__}; pass "
                        f"torch.tensor({name}) (or return_tensors='pt' from the tokenizer)")


def check_token_ids(name: str, token_ids: torch.Tensor, vocab_size: int, ignore_index: int | None = None,
                    table_rows: int | None = None) -> None:
    """Raise a UserError naming what is wrong with `token_ids` (input_ids or labels) before it becomes a cryptic
    IndexError deep in an embedding or the loss. Dtype and shape always; the id range where `checks_values`.

    Elsewhere an id past the embedding table stops the kernel (CUDA's device-side assert), but with a padded
    vocabulary (`table_rows` > vocab_size) an id in the padding indexed an untrained row in silence (a token added to
    the tokenizer without resize_token_embeddings): that range is asserted on the device, with no host read."""
    check_is_tensor(name, token_ids)
    if token_ids.dtype not in (torch.long, torch.int32):  # what embedding lookups take (and the losses, as long)
        raise UserError(f"{name} must hold integer token ids as torch.long, got dtype {token_ids.dtype}; convert "
                        "with .long()")
    if token_ids.dim() != 2:
        raise UserError(
            f"{name} must be 2-D (batch, seq_len), got shape {tuple(token_ids.shape)}; for one sequence add the "
            f"batch dimension ({name}[None] or .unsqueeze(0))"
        )
    if token_ids.numel() == 0:
        raise UserError(f"{name} is empty (shape {tuple(token_ids.shape)}); pass at least one token per row")
    if not checks_values(token_ids):
        if table_rows is not None and table_rows > vocab_size:
            torch._assert_async((token_ids < vocab_size).all(),
                                f"{name} holds a token id >= vocab_size={vocab_size} (a padded row of the embedding); "
                                f"after adding tokens to the tokenizer, call model.resize_token_embeddings")
        return
    lowest, highest = (int(value) for value in torch.aminmax(token_ids))
    if highest >= vocab_size:
        raise UserError(
            f"{name} holds token id {highest} but vocab_size is {vocab_size}; ids must be 0..{vocab_size - 1} (was "
            "the text tokenized with another tokenizer? after adding tokens to the tokenizer, call "
            "model.resize_token_embeddings(len(tokenizer)))"
        )
    if lowest < 0:
        negative = token_ids[token_ids < 0]
        invalid = negative[negative != ignore_index] if ignore_index is not None else negative
        if invalid.numel():
            allowed = f" or {ignore_index} to ignore a position" if ignore_index is not None else ""
            raise UserError(f"{name} holds token id {int(invalid.min())}; ids must be 0..{vocab_size - 1}{allowed}")


def position_ids_for(
    attention_mask: torch.Tensor | None, past_length: int, seq_len: int, n_positions: int, device: torch.device
) -> torch.Tensor:
    """Positions of the `seq_len` new tokens when the caller passes none: each real (attention_mask == 1) token's index
    among the real tokens of its row, so a padded row — left or right — gets the positions it has alone;
    past_length..past_length+seq_len-1 without a mask. Padding keeps its column index (GPT-2's numbering, capped at the
    last position): its outputs mean nothing, and right-padded batches stay GPT2LMHeadModel's numbers everywhere.

    mask [[0, 0, 1, 1, 1]] -> [[0, 1, 0, 1, 2]];  mask [[1, 1, 0]] -> [[0, 1, 2]];  no mask, 2 cached, 3 new -> [[2, 3, 4]].
    """
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:  # none, 4-D or a flex BlockMask
        if isinstance(past_length, torch.Tensor):  # a static cache's count, kept on the device: added, never read
            return (torch.arange(seq_len, device=device) + past_length.to(device))[None]
        if past_length + seq_len > n_positions:
            cached = f" (after {past_length} cached)" if past_length else ""
            raise UserError(
                f"input_ids has {seq_len} tokens{cached} but n_positions is {n_positions}; truncate the input"
                f"{PAST_THE_CONTEXT}"
            )
        return torch.arange(past_length, past_length + seq_len, device=device)[None]
    is_real = attention_mask.bool()
    columns = torch.arange(attention_mask.shape[-1], device=attention_mask.device).clamp(max=n_positions - 1)
    positions = torch.where(is_real, is_real.long().cumsum(-1) - 1, columns)
    if isinstance(past_length, torch.Tensor):
        # A static cache's mask may span the whole cache, 0 past the tokens written so far (the fixed-shape mask a
        # compiled decoding loop keeps): the new tokens' columns follow the count cached, not the mask's end, which
        # gave the token the last position, silently (the batchinvariance2 hunt). Gathered on the device: no read.
        new_columns = torch.arange(seq_len, device=positions.device) + past_length.to(positions.device)
        return positions.index_select(-1, new_columns.clamp(max=positions.shape[-1] - 1).flatten())
    return positions[:, past_length:past_length + seq_len]  # the last seq_len columns, unless the mask spans a cache


def check_attention_mask(attention_mask: torch.Tensor | None, batch: int, past_length: int | torch.Tensor,
                         seq_len: int, static_cache: bool = False) -> None:
    """A UserError naming a mask that does not fit the input, before it becomes an IndexError or, worse, is
    broadcast: a 2-D (batch, cached + new) mask of 1s and 0s, or a 4-D (batch, 1, new, cached + new) one, bool or
    float. A static cache counts its tokens in a tensor (`past_length`), and its 2-D mask may span the whole cache:
    the count is read where `checks_values`, elsewhere compared on the device (an async assert), so that a GPU's
    decoding step never waits for the host.
    A flex BlockMask (what transformers' generate builds for flex attention with a static cache) is taken as built."""
    if not isinstance(attention_mask, torch.Tensor):
        return
    # (an empty static cache counts 0 as an int: its first call, the prompt's, may bring the whole-cache mask too)
    static = static_cache or isinstance(past_length, torch.Tensor)
    if isinstance(past_length, torch.Tensor) and checks_values(past_length):
        past_length = int(past_length)
    total = past_length + seq_len if isinstance(past_length, int) else None
    if attention_mask.dim() == 4:  # its key length may be a static cache's whole length: not checked
        if not (attention_mask.dtype == torch.bool or attention_mask.dtype.is_floating_point):
            raise UserError(f"a 4-D attention_mask must be bool (True = attend) or an additive float mask, got "
                            f"dtype {attention_mask.dtype}; or pass the 2-D (batch, seq_len) mask of 1s and 0s")
        if (attention_mask.dtype.is_floating_point and checks_values(attention_mask)
                and bool((attention_mask > 0).any())):  # 1s and 0s added to the scores: nothing masked, future included
            raise UserError("a 4-D float attention_mask is added to the attention scores (0 = attend, "
                            "torch.finfo(dtype).min = masked), but this one holds positive values, as a mask of 1s and "
                            "0s does, which would mask nothing; pass it as bool (mask.bool(): True = attend), or pass "
                            "the 2-D (batch, seq_len) mask")
        fits = attention_mask.shape[0] in (1, batch) and attention_mask.shape[-2] == seq_len
    elif total is None:
        fits = attention_mask.dim() == 2 and attention_mask.shape[0] == batch and attention_mask.shape[1] >= seq_len
        if fits:  # the cached count is on the device: asserted there, with no host read
            torch._assert_async(past_length.to(attention_mask.device) + seq_len <= attention_mask.shape[1],
                                "attention_mask is narrower than the cached and new tokens; pass a (batch, cached + "
                                "new) mask, or one over the static cache's whole length")
    else:  # a static cache's mask may also span the whole cache (transformers' classes take that too)
        fits = attention_mask.dim() == 2 and attention_mask.shape[0] == batch and (
            attention_mask.shape[1] == total or (static and attention_mask.shape[1] > total))
    if not fits:
        cached = "the cached and " if total is None else f"{past_length} cached and " if past_length else ""
        columns = "cached + new" if total is None else total
        raise UserError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but the input has {batch} row(s) of "
            f"{cached}{seq_len} new tokens; pass a (batch, {columns}) mask over every cached and new position (1 for "
            "a token, 0 for padding), as the tokenizer returns it"
        )


def check_cache_shape(cache, n_kv_head: int, head_dim: int, batch: int) -> None:
    """A UserError when a cache passed in holds keys of another shape than this model's (batch, n_kv_head, seq,
    head_dim), before the first block's update fails in torch.cat ("Sizes of tensors must match"). PEFT's prefix
    tuning sizes its prefix from n_embd and n_head, which fits neither grouped-query attention nor a head_dim of the
    model's own; generate() with beams or num_return_sequences expands the input's rows but not a cache passed in
    (GPT-2 and Llama fail in torch.cat too). Reads shapes only (no host sync)."""
    layers = getattr(cache, "layers", None) or ()
    keys = getattr(layers[0], "keys", None) if layers else None
    if not isinstance(keys, torch.Tensor) or keys.dim() != 4 or keys.numel() == 0:
        return
    if keys.shape[0] != batch:
        raise UserError(f"the cache passed in holds {keys.shape[0]} row(s) and the input has {batch}; in generate() "
                        f"with num_beams or num_return_sequences n, which expand the input's rows but not a cache "
                        f"passed in, pass cache.batch_repeat_interleave(n) (it expands in place)")
    if keys.shape[1] == n_kv_head and keys.shape[-1] == head_dim:
        return
    raise UserError(f"the cache passed in holds {keys.shape[1]} key/value heads of width {keys.shape[-1]}, and this "
                    f"model has n_kv_head={n_kv_head} of head_dim={head_dim}: it was made for another shape. PEFT's "
                    f"prefix tuning sizes its prefix from n_embd and n_head: give it PrefixTuningConfig(..., "
                    f"token_dim={n_kv_head * head_dim}, num_attention_heads={n_kv_head})")


def check_position_ids(position_ids: torch.Tensor, n_positions: int, batch: int | None = None,
                       seq_len: int | None = None, columns: int = 0, given: bool = False) -> None:
    """Integer positions of shape (batch or 1, seq_len) that lie in 0..n_positions-1 (the table's rows, the context
    the model was trained for). The shape and dtype always; the values where `checks_values`, and on every device
    once the input's `columns` (cached + new tokens, or a static cache's length: a host int) pass n_positions.
    Positions derived from a mask, by us or by generate(), never exceed the column index, so below that no read is
    needed; past it a GPU would otherwise index past the position table (an opaque device-side assert) or, with
    RoPE, silently run past the trained context. A training step never gets there, so it still reads nothing.
    Positions the caller `given` can pass the context at any column count: off the value-check devices their range is
    asserted on the device instead (no host read), as a learned table past its rows would stop the kernel."""
    if position_ids.dtype.is_floating_point or position_ids.dtype == torch.bool:
        raise UserError(f"position_ids must hold integer positions, got dtype {position_ids.dtype}; convert with "
                        ".long() or pass position_ids=None to derive them")
    if seq_len is not None and (position_ids.dim() != 2 or position_ids.shape[-1] != seq_len
                                or position_ids.shape[0] not in (1, batch)):
        raise UserError(f"position_ids has shape {tuple(position_ids.shape)} but the input has {batch} row(s) of "
                        f"{seq_len} new tokens; pass ({batch}, {seq_len}) positions, or None to derive them")
    may_pass_the_context = not torch.compiler.is_compiling() and columns > n_positions
    if not (checks_values(position_ids) or may_pass_the_context):
        if given:
            torch._assert_async(((position_ids >= 0) & (position_ids < n_positions)).all(),
                                f"position_ids hold a position outside 0..{n_positions - 1} "
                                f"(n_positions={n_positions}); pass positions the model was trained for, or "
                                f"position_ids=None to derive them")
        return
    lowest, highest = (int(value) for value in torch.aminmax(position_ids))
    if lowest < 0:
        raise UserError(f"position_ids holds {lowest}; positions start at 0 (pass position_ids=None to derive them)")
    if highest >= n_positions and given and highest >= columns:  # the caller's own positions, not the input's length
        raise UserError(f"position_ids hold position {highest}, outside 0..{n_positions - 1} (n_positions="
                        f"{n_positions}), for an input of {columns} tokens; pass positions the model was trained for, "
                        f"or position_ids=None to derive them")
    if highest >= n_positions:
        raise UserError(
            f"a row of input_ids reaches {highest + 1} tokens (position {highest}; padding not counted) but n_positions "
            f"is {n_positions}; truncate the input (in generate(), each prompt's own tokens plus max_new_tokens may "
            f"be at most {n_positions + 1}: the last new token is read from the logits before it and needs no "
            f"position){PAST_THE_CONTEXT}"
        )
