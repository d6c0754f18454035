"""The benchmark harness itself: rotation order, the nanoGPT contender's weights, bf16 accounting, per-thread result
files and the report built from them. Speed is never asserted; tiny models only."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from benchmarks import run_all
from benchmarks.bench_bf16 import linear_shapes, step_linear_ratio
from benchmarks.bench_train import make_step
from benchmarks.common import SIZES, describe_machine, machine_info, result_name, time_rotating, write_json
from benchmarks.nanogpt_model import nanogpt_from_gpt2


def tiny_gpt2(activation: str = "gelu_new", dropout: float = 0.0) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=64, vocab_size=101, activation_function=activation,
                        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def test_time_rotating_rotates_the_calling_order():
    calls = []
    contenders = {name: (lambda name=name: calls.append(name)) for name in "ABC"}
    times = time_rotating(contenders, rounds=4, warmup=1)
    assert calls == list("ABC") + list("ABC") + list("BCA") + list("CAB") + list("ABC")
    assert {name: len(values) for name, values in times.items()} == {"A": 4, "B": 4, "C": 4}


def test_nanogpt_holds_the_gpt2_weights_and_computes_the_same_logits():
    # With exact GELU (nanoGPT's nn.GELU) transformers' GPT-2 is the same function: any weight mapped wrong, any
    # Conv1D matrix left untransposed, shows here.
    gpt2 = tiny_gpt2(activation="gelu").eval()
    nanogpt = nanogpt_from_gpt2(gpt2).eval()
    ids = torch.randint(0, 101, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = gpt2(ids, labels=ids)
        logits, loss = nanogpt(ids[:, :-1], ids[:, 1:].contiguous())
    torch.testing.assert_close(logits, expected.logits[:, :-1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss, expected.loss, atol=1e-5, rtol=1e-5)
    assert nanogpt.lm_head.weight is nanogpt.transformer.wte.weight


def test_nanogpt_takes_the_gpt2_dropout_and_trains_in_the_benchmark_step():
    gpt2 = tiny_gpt2(dropout=0.1)
    nanogpt = nanogpt_from_gpt2(gpt2)
    assert nanogpt.config.dropout == 0.1 and nanogpt.transformer.h[0].attn.dropout == 0.1
    ids = torch.randint(0, 101, (2, 16), generator=torch.Generator().manual_seed(2))
    before = nanogpt.transformer.h[0].mlp.c_fc.weight.detach().clone()
    loss = make_step(nanogpt, ids)()
    assert 3.0 < loss < 6.0  # ~ln(101) at initialisation
    assert not torch.equal(before, nanogpt.transformer.h[0].mlp.c_fc.weight)


def test_bf16_linear_shapes_and_step_ratio_by_hand():
    shapes = linear_shapes(SIZES["small"])
    assert shapes == {"attn.c_attn": (384, 1152), "attn.c_proj": (384, 384), "mlp.c_fc": (384, 1536),
                      "mlp.c_proj": (1536, 384), "lm_head": (384, 8192)}
    # Two layers: a block layer (counted n_layer = 2 times) at 10 GFLOP/s fp32, 5 bf16; the head at 20 and 20.
    rows = [{"layer": "mlp.c_fc", "rows": 1, "in": 1, "out": 5e9, "fp32_gflops": 10.0, "bf16_gflops": 5.0},
            {"layer": "lm_head", "rows": 1, "in": 1, "out": 10e9, "fp32_gflops": 20.0, "bf16_gflops": 20.0}]
    # fp32: 2·(1 s) + 1 s = 3 s; bf16: 2·(2 s) + 1 s = 5 s.
    assert step_linear_ratio(rows, {"n_layer": 2}) == pytest.approx(3 / 5)


def test_result_files_record_machine_threads_and_load(tmp_path):
    meta = machine_info(2)
    assert meta["threads"] == 2 and len(meta["load_average"]) == 3 and "cpu_family" in meta
    path = write_json(result_name("train", 2), {"machine": meta, "results": []}, tmp_path)
    assert path.name == "train_threads2.json"
    assert len(json.loads(path.read_text())["machine"]["load_average_at_end"]) == 3
    assert "2 of" in describe_machine(meta)


def _machine(threads):
    return {"cpu": "Test CPU", "cpu_family": "25", "cpu_model": "1", "isa_flags": ["avx2"], "logical_cpus": 2,
            "threads": threads, "load_average": [1.5, 1, 1], "load_average_at_end": [2.5, 1, 1]}


def _train_result(contender, anchor_name, ratio, size="small"):
    return {"name": f"train {size} 8x256 eager", "contender": contender, "anchor_name": anchor_name, "mode": "eager",
            "size": size, "ours": 100.0 * ratio, "anchor": 100.0, "unit": "tokens/s", "ratio": ratio,
            "ratio_iqr": [ratio - 0.1, ratio + 0.1], "mfu_ours": 0.5, "mfu_anchor": 0.4}


def test_report_judges_each_thread_count_and_skips_files_without_a_machine(tmp_path):
    train = {"machine": _machine(2), "trajectory": [], "results": [
        _train_result("ours", "transformers GPT-2", 1.35), _train_result("ours", "nanoGPT", 0.97),
        _train_result("nanoGPT", "transformers GPT-2", 1.39), _train_result("ours", "nanoGPT", 0.9, size="gpt2")]}
    generate = {"machine": _machine(2), "decoding_kernels": [], "results": [
        {"name": "generate small batch 1 default", "variant": "default", "batch": 1, "ours": 50.0, "anchor": 24.0,
         "unit": "new tok/s", "ratio": 2.05, "ratio_iqr": [2.0, 2.1], "tokens_identical": True, "first_call_s": 1.0},
        {"name": "generate small batch 8 default", "variant": "default", "batch": 8, "ours": 50.0, "anchor": 40.0,
         "unit": "new tok/s", "ratio": 1.25, "ratio_iqr": [1.2, 1.3], "tokens_identical": True, "first_call_s": 1.0}]}
    (tmp_path / "train_threads2.json").write_text(json.dumps(train))
    (tmp_path / "generate_threads2.json").write_text(json.dumps(generate))
    (tmp_path / "forward_threads2.json").write_text(json.dumps({"machine": {"cpu": "AMD EPYC", "threads": 2},
                                                                 "results": []}))
    (tmp_path / "train_threads1.json").write_text(json.dumps({**train, "machine": _machine(2)}))
    rows, skipped = run_all.collect_rows(2, tmp_path)
    met = {row["figure"]: row["met"] for row in rows}
    assert met == {
        "train small 8x256 eager: ours vs transformers GPT-2": True,
        "train small 8x256 eager: ours vs nanoGPT": False,
        "train small 8x256 eager: nanoGPT vs transformers GPT-2": None,
        "train gpt2 8x256 eager: ours vs nanoGPT": None,  # the nanoGPT target is the small size's
        "generate small batch 1 default: ours vs transformers GPT-2": True,
        "generate small batch 8 default: ours vs transformers GPT-2": None,  # judged at batch 1 only
    }
    assert skipped == ["forward_threads2.json"]  # written before results named their CPU
    assert run_all.collect_rows(1, tmp_path) == ([], ["train_threads1.json"])  # a 2-thread run filed as 1 thread
    meta = {**_machine(2), "time_utc": "2026-11-25 01:00:00", "torch": "2.13.0+cpu"}
    markdown = run_all.render_markdown({1: ([], []), 2: (rows, skipped)}, meta, tmp_path)
    assert "Measured on Test CPU (family 25, model 1; avx2), 2 of 2 threads." in markdown
    assert "| load 1.5 → 2.5 |" in markdown
    # a range holding the target decides nothing: 0.97x (0.87–1.07) against > 1.0x, 1.35x (1.25–1.45) against 1.3x
    assert "| 0.97x | 0.87–1.07 | > 1.0x | within noise |" in markdown
    assert "| 1.35x | 1.25–1.45 | ≥ 1.3x | within noise |" in markdown
    assert "| 2.05x | 2.00–2.10 | ≥ 2.0x | yes |" in markdown


def test_thread_counts_parse_or_fail_with_the_value():
    assert run_all.parse_threads("1,2") == [1, 2]
    assert run_all.parse_threads("all") == [run_all.os.cpu_count()]
    with pytest.raises(ValueError, match="'0,x'"):
        run_all.parse_threads("0,x")


def test_decode_floor_is_every_linear_layer_once_and_reported_next_to_the_ratio(tmp_path):
    """The floor runs each nn.Linear of a decoding step once (the tied head once), in model order; the report row
    carries the best possible speed-up the benchmark measured."""
    from benchmarks.bench_decode_floor import decoding_matrices

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.convert_gpt2 import from_gpt2_model

    ours = from_gpt2_model(tiny_gpt2(), GPTCustomForCausalLM)
    shapes = [tuple(weight.shape) for weight, _ in decoding_matrices(ours)]
    assert shapes == [(96, 32), (32, 32), (128, 32), (32, 128)] * 2 + [(101, 32)]
    payload = {"machine": machine_info(1), "results": [{
        "size": "small", "ms_per_token": {"floor": 5.0, "ours": 8.0, "gpt2": 10.0}, "floor_bandwidth_gbs": 7.5,
        "best_possible_speedup_over_gpt2": 2.0, "ours_speedup_over_gpt2": 1.25}]}
    write_json(result_name("decode_floor", 1), payload, tmp_path)
    rows, _ = run_all.collect_rows(1, tmp_path)
    (row,) = [row for row in rows if row["figure"].startswith("decode floor small")]
    assert row["ratio"] == 1.25 and row["ours"] == 8.0 and row["anchor"] == 10.0
    assert "more than 2.00x" in row["note"] and "floor 5.0 ms/token" in row["note"]


def test_the_piqa_fine_tuning_data_is_one_command_away(tmp_path, monkeypatch, shared_data_dir):
    """finetune_piqa.yaml reads a labelled file only the whole fine-tuning experiment used to write."""
    import json
    import sys

    from benchmarks import finetune_experiment

    monkeypatch.setattr(sys, "argv", ["finetune_experiment", "--data-only", "--work-dir", str(tmp_path)])
    finetune_experiment.main()
    rows = [json.loads(line) for line in (tmp_path / "data" / "piqa_valid_labelled.jsonl").read_text().splitlines()]
    labels = (shared_data_dir / "piqa" / "valid-labels.lst").read_text().split()
    first = json.loads((shared_data_dir / "piqa" / "valid.jsonl").read_text().splitlines()[0])
    assert len(rows) == 1838 and rows[0] == {**first, "label": int(labels[0])}
    assert [row["label"] for row in rows] == [int(label) for label in labels]


def test_decode_loop_times_three_contenders_on_identical_tokens_and_reports_them(tmp_path, monkeypatch):
    """bench_decode_loop: our loop, our model in transformers' loop and GPT-2 generate the same tokens; the table
    row's ratio is GPT-2's time over ours, and the .md/.png name every contender."""
    from benchmarks import bench_decode_loop

    monkeypatch.setattr(bench_decode_loop, "NEW_TOKENS", 6)
    monkeypatch.setattr(bench_decode_loop, "GREEDY", {**bench_decode_loop.GREEDY, "max_new_tokens": 6,
                                                      "min_new_tokens": 6})
    calls = []
    real = bench_decode_loop.time_rotating
    monkeypatch.setattr(bench_decode_loop, "time_rotating",
                        lambda contenders, *args, **kwargs: calls.append(list(contenders)) or real(contenders, *args,
                                                                                                   **kwargs))
    result = bench_decode_loop.bench("tiny", "eager", batch=2, rounds=2)
    assert calls == [["ours", bench_decode_loop.OURS_IN_TRANSFORMERS_LOOP, "transformers GPT-2"]]
    assert result["tokens_identical"] and set(result["ms_per_step"]) == set(calls[0])
    payload = {"machine": machine_info(1), "prompt_len": bench_decode_loop.PROMPT_LEN, "new_tokens": 6,
               "results": [result]}
    path = write_json(result_name("decode_loop", 1), payload, tmp_path)
    bench_decode_loop.write_report(payload, path.with_suffix(""))
    assert "ours vs transformers' loop" in path.with_suffix(".md").read_text()
    assert path.with_suffix(".png").stat().st_size > 0
    rows, _ = run_all.collect_rows(1, tmp_path)
    (row,) = [row for row in rows if row["figure"].startswith("decode loop tiny eager batch 2")]
    assert row["ratio"] == result["ours_speedup"]["transformers GPT-2"]
    assert row["ours"] == result["ms_per_step"]["ours"] and "tokens identical" in row["note"]


def test_bench_train_mfu_is_nanogpts_estimate():
    """bench_train's MFU was 6N with the position table and no attention term: 70.4% where nanoGPT's estimate_mfu
    gives 80.7% for GPT-2 124M. Reference: nanoGPT's formula written out (N without wpe, + 12·L·H·Q·T)."""
    from benchmarks.bench_train import add_mfu

    n_params = 124_439_808  # GPT-2 small with its 50,257-token tied embedding
    result = {"size": "gpt2", "n_params": n_params, "ours": 90.0, "anchor": 60.0}
    add_mfu(result, peak_flops=1e11)
    per_token = 6 * (n_params - 1024 * 768) + 12 * 12 * 12 * 64 * 1024  # L, H, Q, T as nanoGPT names them
    assert result["mfu_ours"] == pytest.approx(per_token * 90.0 / 1e11)
    assert result["mfu_anchor"] == pytest.approx(per_token * 60.0 / 1e11)


def test_the_compile_benchmark_calls_ours_as_the_training_loop_does(monkeypatch):
    """bench_compile's "ours" is the training loop's call (the loss alone), "ours, logits returned" the old call, and
    GPT-2 its own; the step runs forward, loss and backward and leaves no gradient behind."""
    from benchmarks import bench_compile
    from benchmarks.common import make_pair

    monkeypatch.setattr(torch, "compile", lambda model: model)  # the calls, not the compiler, are checked here
    shape = {"n_layer": 1, "n_head": 2, "n_embd": 16, "n_positions": 32, "vocab_size": 50, "resid_pdrop": 0.0,
             "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    input_ids = torch.randint(0, 50, (2, 8))
    returned = {}
    for name in bench_compile.CONTENDERS:
        ours, anchor = make_pair(shape)
        model = anchor if name == "transformers GPT-2" else ours
        forward = model.forward
        model.forward = lambda *args, _forward=forward, _name=name, **kwargs: returned.setdefault(
            _name, _forward(*args, **kwargs))
        bench_compile.compiled_step(name, (ours, anchor), input_ids)()
        assert all(p.grad is None for p in model.parameters())
    assert returned["ours"].logits is None and returned["ours"].loss is not None
    assert returned["ours, logits returned"].logits is not None
    assert returned["transformers GPT-2"].logits is not None


def test_the_training_benchmark_calls_ours_for_the_loss_alone_as_the_training_loop_does():
    """bench_train's step for ours is the training loop's call (return_logits=False); GPT-2's returns its logits."""
    from benchmarks.common import make_pair

    shape = {"n_layer": 1, "n_head": 2, "n_embd": 16, "n_positions": 32, "vocab_size": 50, "resid_pdrop": 0.0,
             "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    ours, anchor = make_pair(shape)
    returned = []
    for model in (ours, anchor):
        forward = model.forward
        model.forward = lambda *args, _forward=forward, **kwargs: returned.append(_forward(*args, **kwargs)) or \
            returned[-1]
        make_step(model, torch.randint(0, 50, (2, 8)))()
    assert returned[0].logits is None and returned[1].logits is not None


def test_the_generation_profile_separates_our_loop_from_our_model_and_names_the_device(tmp_path, monkeypatch):
    """profile_ops' static-cache profile (the one prepared for the GPU's batch-16 generation gap): ours in our loop,
    ours in transformers' `_sample`, then GPT-2, each a section with its per-step wall time."""
    from benchmarks import profile_ops
    from hf_gpt_custom import modeling_gpt_custom

    ours_loop_calls = []
    real = modeling_gpt_custom.decode_with_static_cache
    monkeypatch.setattr(modeling_gpt_custom, "decode_with_static_cache",
                        lambda *args, **kwargs: ours_loop_calls.append(1) or real(*args, **kwargs))
    text = profile_ops.main(["generate", "--batch", "2", "--cache", "static", "--new-tokens", "3", "--out",
                             str(tmp_path)])
    assert len(ours_loop_calls) == 2  # warm-up and profiled call of "ours"; the other two contenders never use it
    headers = [line for line in text.splitlines() if line.startswith("## ")]
    assert [header.split(":")[0] for header in headers] == ["## ours", "## ours, transformers' loop", "## anchor"]
    assert all("ms per step" in header for header in headers)
    assert "1 CPU thread(s)" in text and (tmp_path / "profile_generate_small_b2_static.txt").read_text() == text


def test_device_busy_time_counts_each_kernel_once():
    """A CPU op's self device time repeats its kernels' (aten::argmax and its reduce kernel), and a CUDA graph's replay
    repeats every kernel in it: the H200's generation profile read 1.3 ms of device time per step where its kernels
    took 0.65. Only the device-side rows count."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from benchmarks.common import device_rows

    rows = [SimpleNamespace(key="Call CompiledFxGraph", device_type=DeviceType.CPU, self_device_time_total=570.0),
            SimpleNamespace(key="nvjet_gemm", device_type=DeviceType.CUDA, self_device_time_total=470.0),
            SimpleNamespace(key="Memcpy DtoD", device_type=DeviceType.CUDA, self_device_time_total=100.0),
            SimpleNamespace(key="aten::argmax", device_type=DeviceType.CPU, self_device_time_total=13.0),
            SimpleNamespace(key="reduce_kernel", device_type=DeviceType.CUDA, self_device_time_total=13.0)]
    assert sum(row.self_device_time_total for row in device_rows(rows)) == 583.0


def test_the_finetune_experiment_never_reports_an_earlier_base_models_results(tmp_path, monkeypatch, shared_data_dir):
    """After the base model was trained again (another pre-training YAML, pretrain/ deleted), the experiment kept
    eval_boolq/results.json and boolq_lambda*/final of the earlier base and reported them beside the new base's
    figures (found by the staleness hunt). Now the kept evaluation is used only for the weights it scored (its
    results.json's fingerprint against the base's own), and fine-tuning always goes through finetune(), whose guard
    names the changed base."""
    import hf_gpt_custom.training.finetune_config as finetune_config
    from benchmarks import finetune_experiment as experiment
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.manifest import weights_fingerprint

    text = tmp_path / "text.txt"
    text.write_text((shared_data_dir / "tinyshakespeare" / "input.txt").read_text()[:20000])

    def pretrain_yaml(seed: int) -> Path:
        path = tmp_path / f"pretrain_{seed}.yaml"
        path.write_text(f"dataset: {text}\ntokenizer_vocab_size: 300\nmodel: {{n_layer: 2, n_head: 2, n_embd: 32}}\n"
                        f"block_size: 64\nbatch_size: 4\nmax_steps: 4\nwarmup_steps: 1\neval_interval: 4\n"
                        f"eval_batches: 1\nlog_with: none\nseed: {seed}\ndata_cache_dir: {tmp_path / 'cache'}\n")
        return path

    load = finetune_config.load_finetune_config
    monkeypatch.setattr(finetune_config, "load_finetune_config", lambda path, overrides=(): load(path, [
        *overrides, "block_size=64", "batch_size=4", "max_steps=2", "warmup_steps=1", "eval_interval=2",
        "checkpoint_interval=2", "val_fraction=0.02"]))
    monkeypatch.setattr(experiment, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(experiment, "SHOTS", (0,))
    monkeypatch.setattr(experiment, "LM_LOSS_WEIGHTS", (0.5,))
    monkeypatch.setattr(experiment, "TASKS", {"boolq": experiment.TASKS["boolq"]})
    monkeypatch.setattr(experiment, "PRETRAIN_CONFIG", pretrain_yaml(1))
    work = tmp_path / "experiment"
    first = experiment.run(work)
    assert experiment.run(work)["tasks"]["boolq"]["prompting"] == first["tasks"]["boolq"]["prompting"]  # kept

    monkeypatch.setattr(experiment, "PRETRAIN_CONFIG", pretrain_yaml(2))  # the base trained again
    shutil.rmtree(work / "pretrain")
    with pytest.raises(UserError, match="init_from"):  # the earlier base's fine-tuned runs are not reported
        experiment.run(work)
    scored = json.loads((work / "eval_boolq" / "results.json").read_text())["model_weights_sha256"]
    assert scored == weights_fingerprint(work / "pretrain" / "final")  # evaluated again: the new base
