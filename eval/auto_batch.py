"""`--batch-size auto`, as lm-evaluation-harness's: the largest batch of the longest rows the GPU holds.

One forward of `start` rows of max_length tokens, and of the log-softmax the scorer takes over them, is tried; on an
out-of-memory error the batch is halved and tried again (accelerate's find_executable_batch_size); where not even one
row fits, 1, with a warning (lm-eval's fallback: the requests are shorter than the context). Scores do not
depend on the batch (tests/eval/test_scoring.py), so auto changes the speed, never the figures. On a CPU there is no
memory error to stop at, only the machine's swap, so auto is the default batch there.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

AUTO = "auto"
DEFAULT_BATCH_SIZE = 16  # the CPU's choice for auto, and evaluate()'s default
START = 64  # the first batch tried: lm-eval's default --max_batch_size


def largest_batch_that_fits(model, max_length: int, start: int = START, probe: bool | None = None) -> int:
    """The batch size for `model` (on its device): where it probes (on CUDA; `probe` overrides) the largest of start,
    start/2, ... whose forward of max_length-token rows fits; elsewhere DEFAULT_BATCH_SIZE."""
    from accelerate.utils import find_executable_batch_size

    device = next(model.parameters()).device
    if not (device.type == "cuda" if probe is None else probe):
        logger.info("--batch-size auto on %s: %d (a CPU gives no out-of-memory error to stop at)", device.type,
                    DEFAULT_BATCH_SIZE)
        return DEFAULT_BATCH_SIZE
    tried = {"size": start}

    def halve() -> int:
        tried["size"] //= 2
        return tried["size"]

    @find_executable_batch_size(starting_batch_size=start, reduce_batch_size_fn=halve)
    def fits(batch_size: int) -> int:
        rows = torch.zeros((batch_size, max_length), dtype=torch.long, device=device)
        with torch.no_grad():
            # by name: a converted folder's config may ask for tuples (return_dict: false)
            model(input_ids=rows, return_dict=True).logits.float().log_softmax(dim=-1)  # the scorer's float32
        return batch_size

    try:
        chosen = fits()
    except RuntimeError as err:
        if "No executable batch size found" not in str(err):
            raise
        # as lm-eval does: a long-context model (Llama 3.1's 131,072 tokens) holds no row as long as its context, but
        # the requests it scores are far shorter
        logger.warning("--batch-size auto: not even one row of %d tokens (the model's context) fits on %s; scoring "
                       "with batch size 1, as lm-eval does. A request that long would not fit either: if one fails "
                       "for memory, evaluate with --dtype bfloat16 or on another device",
                       max_length, device)
        return 1
    if device.type == "cuda":
        torch.cuda.empty_cache()
    logger.info("--batch-size auto: %d rows of %d tokens fit on %s", chosen, max_length, device)
    return chosen
