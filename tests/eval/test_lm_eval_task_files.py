"""The shipped eval/lm_eval_tasks/gptc_<task>.yaml: lm-eval's TaskManager loads every one offline, from any working
directory, with our docs and our first prompt; none shadows a built-in lm-eval task; and each file is what
`python -m hf_gpt_custom.eval.lm_eval_export` writes from eval/tasks today (so the two formats cannot drift)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_gpt_custom.eval.lm_eval_export import LM_EVAL_TASKS_DIR, TASK_PREFIX, render_task_file
from hf_gpt_custom.eval.task import available_tasks, load_task

SHIPPED = sorted(path.stem for path in LM_EVAL_TASKS_DIR.glob(f"{TASK_PREFIX}*.yaml"))


def test_every_task_file_has_its_lm_eval_version():
    assert SHIPPED == [TASK_PREFIX + name for name in available_tasks()]


@pytest.mark.parametrize("name", available_tasks())
def test_shipped_file_is_what_the_exporter_writes_today(name):
    shipped = (LM_EVAL_TASKS_DIR / f"{TASK_PREFIX}{name}.yaml").read_text(encoding="utf-8")
    assert shipped == render_task_file(name), f"eval/lm_eval_tasks is stale: run  python -m hf_gpt_custom.eval.lm_eval_export {name}"


def test_lm_eval_loads_every_shipped_task_offline_with_our_docs(shared_data_dir, tmp_path, monkeypatch):
    from lm_eval.tasks import TaskManager

    monkeypatch.chdir(tmp_path)  # lm-eval resolves json data_files against the working directory; ours must not
    manager = TaskManager(include_path=str(LM_EVAL_TASKS_DIR), include_defaults=False, metadata={"data_dir": str(shared_data_dir)})
    assert sorted(manager.all_tasks) == SHIPPED
    names = available_tasks()
    tasks = manager.load([TASK_PREFIX + name for name in names])["tasks"]
    for name in names:
        theirs, ours = tasks[TASK_PREFIX + name], load_task(name, protocol="lm-eval")
        our_docs = ours.docs("test", shared_data_dir)
        their_docs = list(theirs.test_docs())
        assert len(their_docs) == len(our_docs), name
        assert their_docs[0] == our_docs[0]
        assert theirs.doc_to_text(their_docs[0]) == ours.text(our_docs[0])
        assert theirs.config.target_delimiter == ours.target_delimiter


def test_shipped_names_do_not_shadow_lm_eval_builtins():
    """No built-in lm-eval task file declares a gptc_ name (indexing them all with TaskManager takes ~100 s here;
    reading their `task:` lines is the same fact in a second)."""
    import re

    import lm_eval

    builtin_dir = Path(lm_eval.__file__).parent / "tasks"
    builtin = {
        match.group(1)
        for path in builtin_dir.rglob("*.yaml")
        for match in re.finditer(r"^task: *['\"]?([\w.-]+)", path.read_text(encoding="utf-8", errors="replace"), re.M)
    }
    assert {"lambada_openai", "piqa", "hellaswag", "arc_easy", "winogrande", "wikitext"} <= builtin
    assert not set(SHIPPED) & builtin
    assert not {name for name in builtin if name.startswith(TASK_PREFIX)}


def test_lm_eval_reads_the_data_root_it_is_given(shared_data_dir, tmp_path):
    """`--metadata '{"data_dir": ...}'` (TaskManager metadata) reaches our loader: a 10-record COPA copy gives 10 docs."""
    from lm_eval.tasks import TaskManager

    (tmp_path / "copa").mkdir()
    lines = (shared_data_dir / "copa" / "val.jsonl").read_text(encoding="utf-8").splitlines()[:10]
    (tmp_path / "copa" / "val.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    manager = TaskManager(include_path=str(LM_EVAL_TASKS_DIR), include_defaults=False, metadata={"data_dir": str(tmp_path)})
    task = manager.load([f"{TASK_PREFIX}copa"])["tasks"][f"{TASK_PREFIX}copa"]
    assert len(list(task.test_docs())) == 10


def test_wikitext_results_count_words_and_bytes_as_lm_eval_wikitext(shared_data_dir):
    """gptc_wikitext's process_results equals lm-eval's own wikitext one (counts on the raw page)."""
    import importlib.util

    import lm_eval

    spec = importlib.util.spec_from_file_location(
        "preprocess_wikitext", Path(lm_eval.__file__).parent / "tasks" / "wikitext" / "preprocess_wikitext.py"
    )
    theirs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(theirs)
    data_spec = importlib.util.spec_from_file_location("gptc_data", LM_EVAL_TASKS_DIR / "gptc_data.py")
    ours = importlib.util.module_from_spec(data_spec)
    data_spec.loader.exec_module(ours)
    for doc in load_task("wikitext").docs("test", shared_data_dir)[:3]:
        assert doc["page"] != doc["text"]  # detokenized text differs from the page the counts are taken on
        assert ours.count_on_page(doc, [-1234.5]) == theirs.process_results(doc, [-1234.5])


# --- every model the project makes: the task runs, or is refused by name before lm-eval asserts ----------------------


def _lm_eval(model_dir: Path, names: list[str], data_dir: Path, metadata: dict, **kwargs) -> dict:
    """lm-eval as its CLI runs it: the model arguments reach the tasks as metadata (`--metadata` merged in)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    model_args = {"pretrained": str(model_dir)}
    return lm_eval.simple_evaluate(
        model="hf", model_args=model_args, tasks=names, device="cpu", batch_size=4, bootstrap_iters=0,
        verbosity="ERROR",
        task_manager=TaskManager(include_path=str(LM_EVAL_TASKS_DIR), include_defaults=False,
                                 metadata={"data_dir": str(data_dir), **metadata}),
        **kwargs,
    )


def _doc_with_the_longest_answer(name: str, data_dir: Path) -> int:
    from hf_gpt_custom.eval.output_types import OUTPUT_TYPES

    spec = load_task(name, protocol="lm-eval")
    if OUTPUT_TYPES[spec.output_type].request_type != "loglikelihood":
        return 0
    docs = spec.docs("test", data_dir)
    answers = [max(len(text.encode()) for text in OUTPUT_TYPES[spec.output_type].continuations(spec, doc)) for doc in docs]
    return max(range(len(docs)), key=answers.__getitem__)


def test_gptc_piqa_on_a_short_context_model_is_refused_by_name(short_context_model, shared_data_dir):
    """Was: `assert len(continuation_enc) <= self.max_length` deep inside lm-eval."""
    from hf_gpt_custom.errors import UserError

    with pytest.raises(UserError, match=rf"gptc_piqa cannot run on {short_context_model}: the answer of doc 314 is 1065 "
                                        r"tokens, longer than the model's context of 64.*--protocol lm-eval --tasks piqa"):
        _lm_eval(short_context_model, ["gptc_piqa"], shared_data_dir, {"pretrained": str(short_context_model)}, limit=2)


def test_every_task_runs_on_a_short_context_model_or_is_refused_where_lm_eval_would_fail(short_context_model, shared_data_dir):
    """Each refusal is checked against lm-eval itself: the named doc, scored without our check, fails its assertion."""
    from hf_gpt_custom.eval.lm_eval_export import check_lm_eval_fit
    from hf_gpt_custom.errors import UserError

    runs, refused, no_room = [], {}, []
    for name in available_tasks():
        try:
            check_lm_eval_fit(name, load_task(name).docs("test", shared_data_dir), str(short_context_model))
            runs.append(TASK_PREFIX + name)
        except UserError as err:
            assert str(err).startswith(f"{TASK_PREFIX}{name} cannot run on {short_context_model}: ")
            if "which leaves no room for a prompt" in str(err):  # lm-eval's 256-token answer budget: 64 positions
                no_room.append(TASK_PREFIX + name)
            else:
                refused[TASK_PREFIX + name] = int(str(err).split("the answer of doc ")[1].split()[0])
    assert "gptc_piqa" in refused and "gptc_wikitext" in runs and no_room == ["gptc_triviaqa"]
    # Each task that runs is run on its first doc and on the doc with the longest answer (in bytes).
    samples = {task_name: sorted({0, _doc_with_the_longest_answer(task_name.removeprefix(TASK_PREFIX), shared_data_dir)})
               for task_name in runs}
    results = _lm_eval(short_context_model, runs, shared_data_dir, {"pretrained": str(short_context_model)}, samples=samples)
    assert sorted(results["results"]) == sorted(runs)
    for task_name, doc_id in refused.items():  # no `pretrained` in the metadata: our check does not run
        with pytest.raises(AssertionError):
            _lm_eval(short_context_model, [task_name], shared_data_dir, {}, samples={task_name: [doc_id]})
    for task_name in no_room:  # HFLM itself refuses a budget as long as the context
        with pytest.raises(AssertionError, match="requested max tokens to generate"):
            _lm_eval(short_context_model, [task_name], shared_data_dir, {}, samples={task_name: [0]})


def test_protocol_lm_eval_generates_what_lm_eval_generates_under_the_models_generation_config(
    tiny_model_folder, shared_data_dir, tmp_path
):
    """lm-eval's HFLM turns sampling off and leaves the rest of generation_config.json to transformers: a
    repetition_penalty there changes its answers. protocol="lm-eval" overrode it (7 of 8 TriviaQA answers
    differed); the default protocol still decodes by plain argmax, and here that gives other answers."""
    import json
    import shutil

    from hf_gpt_custom.eval.runner import evaluate

    folder = tmp_path / "penalised"
    shutil.copytree(tiny_model_folder, folder)
    config = json.loads((folder / "generation_config.json").read_text()) if (folder / "generation_config.json").exists() else {}
    config.update(repetition_penalty=1.5, no_repeat_ngram_size=2)
    (folder / "generation_config.json").write_text(json.dumps(config))
    limit = 8
    reference = _lm_eval(folder, ["gptc_triviaqa"], shared_data_dir, {"pretrained": str(folder)}, limit=limit,
                         log_samples=True)
    theirs = [sample["filtered_resps"][0] for sample in
              sorted(reference["samples"]["gptc_triviaqa"], key=lambda sample: sample["doc_id"])]
    answers = {}
    for protocol in ("lm-eval", "ours"):
        results = evaluate(str(folder), tasks=["triviaqa"], shots=[0], limit=limit, batch_size=4, device="cpu",
                           show_progress=False, protocol=protocol, data_dir=shared_data_dir)
        answers[protocol] = [(example["prediction"] or "").strip() for example in results.examples]
    assert answers["lm-eval"] == theirs
    assert answers["ours"] != theirs  # the penalty matters for this model: the comparison above can fail


def test_a_task_drawing_its_examples_from_another_split_exports_that_split(tiny_model_folder, tmp_path, monkeypatch):
    """fewshot_split: train was left out of the export, so lm-eval drew gptc_<task>'s examples from the test docs
    without leaving out the scored one: a doc could be its own example, shown its answer (the lmeval2 hunt).
    Reference: lm-eval 0.4.13 itself on the exported file, prompt by prompt against `--protocol lm-eval`."""
    import json
    import shutil

    import hf_gpt_custom.eval.task as task_module
    from hf_gpt_custom.eval.runner import evaluate

    colours = ["red", "blue", "green", "black", "white", "gold", "grey", "pink"]
    for split in ("test", "train", "dev"):
        rows = [{"q": f"{split} item {i} is", "choices": colours[i % 8: i % 8 + 3] or colours[:3], "label": i % 3}
                for i in range(6)]
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    # the lm-eval protocol (the exported file's) draws from dev: its docs must come from that protocol too
    (tasks / "twosplits.yaml").write_text(
        "task: twosplits\ndata_files: {test: test.jsonl, train: train.jsonl}\nfewshot_split: train\n"
        "output_type: multiple_choice\ndoc_to_text: \"Q: {{q}}\\nA:\"\ndoc_to_choice: choices\ndoc_to_target: label\n"
        "metric_list: [{metric: acc}]\nlm_eval_overrides: {data_files: {test: test.jsonl, train: dev.jsonl}}\n",
        encoding="utf-8")
    monkeypatch.setattr(task_module, "TASKS_DIR", tasks)
    exported = tmp_path / "lm_eval_tasks"
    exported.mkdir()
    (exported / f"{TASK_PREFIX}twosplits.yaml").write_text(render_task_file("twosplits"), encoding="utf-8")
    shutil.copy(LM_EVAL_TASKS_DIR / "gptc_data.py", exported)

    ours = evaluate(str(tiny_model_folder), tasks=["twosplits"], shots=[2], device="cpu", show_progress=False,
                    data_dir=tmp_path, protocol="lm-eval")
    import lm_eval
    from lm_eval.tasks import TaskManager

    theirs = lm_eval.simple_evaluate(
        model="hf", model_args={"pretrained": str(tiny_model_folder), "dtype": "float32"},
        tasks=[f"{TASK_PREFIX}twosplits"], num_fewshot=2, device="cpu", batch_size=4, bootstrap_iters=0,
        log_samples=True, verbosity="ERROR",
        task_manager=TaskManager(include_path=str(exported), include_defaults=False,
                                 metadata={"data_dir": str(tmp_path)}))
    samples = sorted(theirs["samples"][f"{TASK_PREFIX}twosplits"], key=lambda sample: sample["doc_id"])
    our_prompts = [example["prompt"] for example in ours.examples]
    assert [sample["arguments"][0][0] for sample in samples] == our_prompts
    for prompt in our_prompts:  # every example from the pool's split, the scored test item once
        assert prompt.count("dev item") == 2 and prompt.count("test item") == 1


def test_the_fit_check_refuses_exactly_where_lm_evals_assertions_fail(short_context_model, shared_data_dir):
    """At the boundary, as lm-eval 0.4.13's HFLM asserts: an answer of max_length tokens still fits
    (`len(continuation_enc) <= self.max_length`), one token fewer of context does not; a generation budget as long
    as the context leaves none for the prompt (`max_ctx_len = max_length - max_gen_toks`, asserted > 0), one shorter
    does. PIQA's doc 314 has a 1,065-token answer with this byte tokenizer (the test above); lm-eval's TriviaQA
    generates up to 256 tokens."""
    from hf_gpt_custom.eval.lm_eval_export import check_lm_eval_fit
    from hf_gpt_custom.errors import UserError

    piqa = [load_task("piqa").docs("test", shared_data_dir)[314]]
    check_lm_eval_fit("piqa", piqa, str(short_context_model), max_length=1065)
    with pytest.raises(UserError, match="is 1065 tokens, longer than the model's context of 1064"):
        check_lm_eval_fit("piqa", piqa, str(short_context_model), max_length=1064)
    triviaqa = load_task("triviaqa").docs("test", shared_data_dir)[:1]
    check_lm_eval_fit("triviaqa", triviaqa, str(short_context_model), max_length=257)
    with pytest.raises(UserError, match="generates up to 256 tokens, which leaves no room"):
        check_lm_eval_fit("triviaqa", triviaqa, str(short_context_model), max_length=256)
