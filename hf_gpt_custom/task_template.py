"""GPT-1's input template for fine-tuned task heads, and the rule that fits an input into `max_length`.

GPT-1 (Radford et al. 2018, section 3.3) reads `start text extract`, or `start first delim second extract` for a
pair (and for each answer of a multiple-choice question); the head reads the extract token's final hidden state.
A fine-tuned tokenizer carries the template as its `tokenizers` post-processor (saved in tokenizer.json), so
`tokenizer(text)`, pipelines and Hub widgets add it to raw text. `TaskTemplate.build` is the one place that assembles
and cuts the ids: fine-tuning (training/finetune_data.py) and GPTCustomTokenizerFast both call it. Shipped as remote
code with the tokenizer: imports only `tokenizers`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from tokenizers import processors

from .errors import UserError

DELIMITER_TOKEN = "<|delim|>"
EXTRACT_TOKEN = "<|extract|>"
START_TOKEN = "<|start|>"  # GPT-1's own start token, added only where the tokenizer has neither bos nor eos


@dataclass(frozen=True)
class TaskTemplate:
    """The ids of GPT-1's start, delimiter and extract tokens."""

    start: int
    delimiter: int
    extract: int

    def n_special_tokens(self, is_pair: bool) -> int:
        return 3 if is_pair else 2

    def build(self, first: list[int], second: list[int] | None = None,
              max_length: int | None = None) -> tuple[list[int], bool]:
        """start first [delim second] extract in at most `max_length` tokens; (ids, whether anything was cut).

        The template is never cut. The first part (text, premise, context) is cut from its start, so the delimiter,
        the second part (hypothesis, answer) and the extract token the head reads stay: max_length 6, first [1,2,3],
        second [4] gives [start, 2, 3, delim, 4, extract]. A second part too long even alone (PIQA has 174-token
        solutions) keeps its first tokens and the first part is dropped: max_length 5, first [1], second [4,5,6]
        gives [start, delim, 4, 5, extract].
        """
        n_special = self.n_special_tokens(second is not None)
        if max_length is not None and max_length - n_special < 1:
            raise UserError(f"max_length={max_length} leaves no room for text beside the {n_special} special tokens "
                            f"of the task template; use max_length > {n_special}")
        second_part = second or []
        room = len(first) + len(second_part) if max_length is None else max_length - n_special
        is_cut = len(first) + len(second_part) > room
        if len(second_part) > room:
            first, second_part = [], second_part[:room]
        first_room = room - len(second_part)
        kept = first[len(first) - first_room:] if len(first) > first_room else first
        middle = kept if second is None else [*kept, self.delimiter, *second_part]
        return [self.start, *middle, self.extract], is_cut

    def post_processor(self, start: str, delimiter: str, extract: str) -> processors.TemplateProcessing:
        """The `tokenizers` post-processor adding this template; the token strings are those of the ids."""
        return processors.TemplateProcessing(
            single=[start, "$A", extract],
            pair=[start, "$A", delimiter, "$B:0", extract],  # one segment: the model has no token type embedding
            special_tokens=[(start, self.start), (delimiter, self.delimiter), (extract, self.extract)],
        )


def read_task_template(backend) -> TaskTemplate | None:
    """The GPT-1 template a `tokenizers.Tokenizer`'s post-processor adds, or None when it adds anything else."""
    post_processor = backend.post_processor
    return None if post_processor is None else _parse_template(post_processor.__getstate__())


@functools.lru_cache(maxsize=16)
def _parse_template(state: bytes) -> TaskTemplate | None:
    processor = json.loads(state)
    if processor.get("type") != "TemplateProcessing":
        return None
    ids = {name: token["ids"] for name, token in processor["special_tokens"].items()}

    def pieces(template: list[dict]) -> list[str]:  # "A", "B" for sequences, the token's name for a special token
        return [piece["Sequence"]["id"] if "Sequence" in piece else piece["SpecialToken"]["id"] for piece in template]

    single, pair = pieces(processor["single"]), pieces(processor["pair"])
    # By shape alone, a plain bos/eos template (`<|endoftext|> $A <|endoftext|>`) passed for GPT-1's: its calls were
    # then cut as fine-tuning cuts (the text's start, not its end) and text holding `<|endoftext|>` refused. GPT-1's
    # delimiter and extract tokens carry these names in every folder install_task_template wrote.
    if len(single) != 3 or single[1] != "A" or pair != [single[0], "A", DELIMITER_TOKEN, "B", EXTRACT_TOKEN] \
            or single[2] != EXTRACT_TOKEN:
        return None
    start, delimiter, extract = (ids.get(name, []) for name in (single[0], pair[2], single[2]))
    if not all(len(token_ids) == 1 for token_ids in (start, delimiter, extract)):
        return None
    return TaskTemplate(start[0], delimiter[0], extract[0])


def install_task_template(tokenizer) -> TaskTemplate:
    """Add the delimiter and extract tokens to a fast tokenizer and make it add GPT-1's template itself.

    The start token is bos, else eos (`<|endoftext|>`, the token every pre-training document followed), else a new
    `<|start|>`, learned in fine-tuning as the delimiter and extract are (GPT-1 added all three: OpenAI GPT's own
    tokenizer has neither bos nor eos, and fine-tuning it was refused). A tokenizer that has the template already
    (a fine-tuned folder being fine-tuned further) keeps it.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise UserError(f"{type(tokenizer).__name__} has no `tokenizers` backend to carry the task template; load the "
                        "model folder's tokenizer with AutoTokenizer (a fast tokenizer)")
    # added to the tokenizer's other extra special tokens (a chat template's <|user|>), not in their place: transformers
    # 5 replaces the list by default, and they dropped out of all_special_tokens and the special-tokens mask
    tokenizer.add_special_tokens({"additional_special_tokens": [DELIMITER_TOKEN, EXTRACT_TOKEN]},
                                 replace_extra_special_tokens=False)
    start = tokenizer.bos_token if tokenizer.bos_token is not None else tokenizer.eos_token
    if start is None:
        tokenizer.add_special_tokens({"additional_special_tokens": [START_TOKEN]}, replace_extra_special_tokens=False)
        start = START_TOKEN
    template = TaskTemplate(*tokenizer.convert_tokens_to_ids([start, DELIMITER_TOKEN, EXTRACT_TOKEN]))
    tokenizer.backend_tokenizer.post_processor = template.post_processor(start, DELIMITER_TOKEN, EXTRACT_TOKEN)
    return template
