"""Data-parallel evaluation under `accelerate launch` or torchrun, as lm-evaluation-harness shards its documents.

Each process scores every N-th document of each task (all the requests of a document together, as lm-eval keeps a
document's choices on one rank), the scores are gathered onto every process, and each then aggregates the whole
benchmark; the main process alone writes the report. A request's score does not depend on the batch it is scored in
beyond float round-off (tests/eval/test_scoring.py; about 1e-7 relative in a log-likelihood), so N processes give the
figures one process gives to that round-off.
"""

from __future__ import annotations

from typing import Any, Sequence

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.eval.requests import Request, ScoredRequest
from hf_gpt_custom.eval.scoring import CausalLMScorer, score_requests


def my_documents(requests: Sequence[Request], process_index: int, num_processes: int) -> list[int]:
    """Indices of the requests this process scores: those of every num_processes-th document from its own index."""
    return [index for index, request in enumerate(requests) if request.doc_id % num_processes == process_index]


def score_across_processes(scorer: CausalLMScorer, requests: Sequence[Request], processes, show_progress: bool = True,
                           desc: str | None = None) -> list[ScoredRequest]:
    """score_requests over the launched processes (`processes` from devices.join_launched_processes; None: this
    one alone): every process returns every request's score, in the order of `requests`."""
    if processes is None:
        return score_requests(scorer, requests, show_progress=show_progress, desc=desc)
    from accelerate.utils import gather_object

    mine = my_documents(requests, processes.process_index, processes.num_processes)
    scored = score_requests(scorer, [requests[index] for index in mine],
                            show_progress=show_progress and processes.is_main_process, desc=desc)
    everyone = gather_object(list(zip(mine, scored)))
    ordered: list[ScoredRequest | None] = [None] * len(requests)
    for index, item in everyone:
        ordered[index] = item
    missing = [index for index, item in enumerate(ordered) if item is None]
    if missing:  # a shard lost in the gather would be aggregated as if it had never existed
        raise RuntimeError(f"{len(missing)} of {len(requests)} requests came back from no process")
    return ordered  # type: ignore[return-value]


def check_every_process_asks_the_same(processes, call: dict[str, Any]) -> None:
    """A UserError on every process unless each describes the same evaluation (`call`: the model's weights or name,
    the tasks, shots, limit, seed, protocol, files and planned requests): shares of different evaluations, gathered,
    would be aggregated as one (two models' scores blended into one figure, reported by both)."""
    from accelerate.utils import gather_object

    calls = gather_object([call])
    differing = sorted({key for other in calls for key in call if other.get(key) != calls[0].get(key)})
    if differing:
        raise UserError(f"the {processes.num_processes} launched processes asked for different evaluations (their "
                        f"{', '.join(differing)} differ): with data_parallel=True each scores a share of one "
                        f"evaluation, so every process must make the same call; evaluate without data_parallel in "
                        f"each process, or on the main process only")
