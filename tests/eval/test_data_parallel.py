"""`eval` under a launcher (torchrun, `accelerate launch --num_processes N`): the processes share the documents out,
as lm-evaluation-harness does under `accelerate launch -m lm_eval`, and the report is the one a single process writes.
Before, eval refused a launch of more than one process (each rank had scored the whole benchmark into one folder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from hf_gpt_custom.eval.sharding import my_documents

TASKS = ["copa", "lambada", "triviaqa", "wikitext"]  # choices, a target, a generation, a rolling log-likelihood


def test_each_document_is_scored_by_exactly_one_process_with_all_its_requests():
    requests = [SimpleNamespace(doc_id=doc) for doc in range(7) for _choice in range(3)]  # 7 docs x 3 choices
    shards = [my_documents(requests, rank, 3) for rank in range(3)]
    assert sorted(index for shard in shards for index in shard) == list(range(len(requests)))
    for rank, shard in enumerate(shards):
        docs = {requests[index].doc_id for index in shard}
        assert docs == set(range(rank, 7, 3))  # every 3rd document from its own index, all its choices
        assert len(shard) == 3 * len(docs)


# One torchrun launch of two ranks serves both launched tests (each launch costs two Python processes importing
# torch). Each rank first counts the requests it scores while it runs the CLI as `accelerate launch -m
# hf_gpt_custom.cli` would (first, so that the CLI joins the processes itself), then makes the Python calls (its own
# model alone, in a process that has joined the group; the main process's call alone; a shared call of different
# models, refused).
_LAUNCHED = """
import json, os, sys
rank, (first, second, said_dir, counts, *cli) = int(os.environ["RANK"]), sys.argv[1:]

from hf_gpt_custom.eval import sharding
scored = []
def counting(scorer, requests, **options):
    scored.extend(request.doc_id for request in requests)
    return original(scorer, requests, **options)
original, sharding.score_requests = sharding.score_requests, counting
from hf_gpt_custom.cli import main
main(cli)  # first: the CLI joins the launched processes itself
sharding.score_requests = original
with open(os.path.join(counts, "rank%s.json" % os.environ["RANK"]), "w") as handle:
    json.dump(len(scored), handle)

from hf_gpt_custom.errors import UserError
from hf_gpt_custom.eval.runner import evaluate
mine = [first, second][rank]
said = {}
settings = dict(tasks=["lambada"], shots=[0], limit=4, device="cpu", show_progress=False)
said["own"] = evaluate(mine, **settings).value("lambada", "perplexity")  # each process its own model, alone
if rank == 0:  # the main process only: nothing to wait for
    said["main_only"] = evaluate(first, **settings).value("lambada", "perplexity")
try:
    evaluate(mine, data_parallel=True, **settings)
except UserError as err:
    said["shared"] = str(err)
with open(os.path.join(said_dir, "rank%d.json" % rank), "w") as handle:
    json.dump(said, handle)
"""


@pytest.fixture(scope="module")
def launched(tiny_model_folder, tmp_path_factory):
    """The two-rank launch: (the other model's folder, the Python calls' records, the counts, the CLI's report
    folder, the completed process)."""
    import shutil

    import torch

    from hf_gpt_custom.manifest import write_manifest
    from hf_gpt_custom.model_folder import load_model_folder

    tmp_path = tmp_path_factory.mktemp("launched")
    other = tmp_path / "other"  # a second model: a blend of the two models' scores would show
    shutil.copytree(tiny_model_folder, other)
    model = load_model_folder(other)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter), alpha=0.5)
    model.save_pretrained(other)
    write_manifest(other)
    script, said, counts, out = tmp_path / "launched.py", tmp_path / "said", tmp_path / "counts", tmp_path / "two"
    script.write_text(_LAUNCHED)
    said.mkdir()
    counts.mkdir()
    completed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
         str(tiny_model_folder), str(other), str(said), str(counts), "eval", "--model", str(tiny_model_folder),
         "--tasks", ",".join(TASKS), "--shots", "0,1", "--limit", "5", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TQDM_DISABLE": "1"})
    assert completed.returncode == 0, completed.stderr[-3000:]
    return SimpleNamespace(other=other, said=said, counts=counts, out=out, completed=completed)


@pytest.mark.slow  # the shared two-rank launch: three Python processes import torch on the shared 2-core machine
def test_two_processes_share_the_documents_and_report_what_one_process_reports(tiny_model_folder, tmp_path,
                                                                               monkeypatch, launched):
    from hf_gpt_custom.eval import sharding
    from hf_gpt_custom.eval.runner import evaluate

    requests = []
    original = sharding.score_requests
    monkeypatch.setattr(sharding, "score_requests",
                        lambda scorer, batch, **options: requests.extend(batch) or original(scorer, batch, **options))
    alone = evaluate(str(tiny_model_folder), tasks=TASKS, shots=[0, 1], limit=5, device="cpu", show_progress=False,
                     skip_unfittable=True, out_dir=tmp_path / "alone")

    counts, out, completed = launched.counts, launched.out, launched.completed
    # each rank scored its share, not the whole benchmark
    shares = [json.loads((counts / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert sum(shares) == len(requests) and min(shares) > 0

    two = json.loads((out / "results.json").read_text())
    assert two["config"]["processes"] == 2 and alone.config["processes"] == 1
    assert [{key: row[key] for key in ("task", "num_fewshot", "metric", "n", "n_truncated")} for row in two["results"]] \
        == [{key: row[key] for key in ("task", "num_fewshot", "metric", "n", "n_truncated")} for row in alone.results]
    for ours, reference in zip(two["results"], alone.results):
        assert ours["value"] == pytest.approx(reference["value"], rel=1e-6), ours
    assert two["skipped"] == alone.skipped
    examples = [json.loads(line) for line in (out / "examples.jsonl").read_text().splitlines()]
    assert [(e["task"], e["num_fewshot"], e["doc_id"], e["prompt"]) for e in examples] == \
        [(e["task"], e["num_fewshot"], e["doc_id"], e["prompt"]) for e in alone.examples]
    assert completed.stdout.count("wrote ") == 1  # the main process says where the report is; the other is silent


def test_a_world_size_left_exported_without_a_launcher_is_one_line_not_a_lone_full_evaluation(tiny_model_folder,
                                                                                              tmp_path, monkeypatch,
                                                                                              capsys):
    """WORLD_SIZE=2 in a plain shell: no process group to join, and the process would score the whole benchmark
    believing it had half of it."""
    from accelerate import PartialState

    from hf_gpt_custom.cli import main

    PartialState._reset_state()  # as in a fresh process: accelerate's state is made once per process
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["eval", "--model", str(tiny_model_folder), "--tasks", "copa", "--device", "cpu", "--out",
              str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "WORLD_SIZE=2 says a launcher started 2 processes, but they cannot be " \
        "joined" in err and "unset WORLD_SIZE if no launcher started it" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out" / "results.json").exists()
    monkeypatch.delenv("WORLD_SIZE")  # fixed: accelerate's state and variables are not left half made
    assert "LOCAL_RANK" not in os.environ and "RANK" not in os.environ
    assert PartialState(cpu=True).num_processes == 1


def test_a_document_no_process_sent_back_stops_the_evaluation(monkeypatch):
    """A gather that came back short would be aggregated as if those documents had never been asked for."""
    import accelerate.utils

    from hf_gpt_custom.eval import sharding

    requests = [SimpleNamespace(doc_id=doc) for doc in range(4)]
    monkeypatch.setattr(sharding, "score_requests", lambda scorer, batch, **options: [f"scored {r.doc_id}" for r in batch])
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda mine: mine)  # the other process's share lost
    processes = SimpleNamespace(process_index=0, num_processes=2, is_main_process=True)
    with pytest.raises(RuntimeError, match="2 of 4 requests came back from no process"):
        sharding.score_across_processes(None, requests, processes)


def test_a_group_smaller_than_the_launch_is_refused_not_evaluated_alone(monkeypatch):
    """accelerate without a backend for the device (a GPU launch asked of a CPU-only torch) leaves each process on
    its own: it would score the whole benchmark as if it were one of two."""
    import accelerate

    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.training.devices import join_launched_processes

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(accelerate, "PartialState", lambda cpu: SimpleNamespace(num_processes=1))
    with pytest.raises(UserError, match=r"WORLD_SIZE=2 says a launcher started 2 processes, but this one joined a "
                                        r"group of 1; start the command with accelerate launch or torchrun"):
        join_launched_processes(on_cpu=False)


@pytest.mark.slow  # the shared two-rank launch
def test_python_calls_under_a_launcher_evaluate_alone_unless_asked_and_a_shared_call_must_be_the_same(
        tiny_model_folder, launched):
    """Each launched process evaluating its own model got a blend of both models' scores, and a call made on the main
    process only waited for the others for ever (found by a review). Sharing is asked for with data_parallel=True
    (the eval command and run ask for it), and shares of different calls are refused. Reference: each model scored
    in this one process."""
    from hf_gpt_custom.eval.runner import evaluate

    settings = dict(tasks=["lambada"], shots=[0], limit=4, device="cpu", show_progress=False)
    reference = [evaluate(str(folder), **settings).value("lambada", "perplexity")
                 for folder in (tiny_model_folder, launched.other)]
    assert reference[0] != pytest.approx(reference[1], rel=1e-3)  # a blend would show
    said = [json.loads((launched.said / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [said[rank]["own"] for rank in (0, 1)] == pytest.approx(reference, rel=1e-9)
    assert said[0]["main_only"] == pytest.approx(reference[0], rel=1e-9)
    for rank in (0, 1):
        assert "the 2 launched processes asked for different evaluations (their model differ)" in said[rank]["shared"]
