"""The training loop on real Shakespeare: loss goes down, every output is written, bits per byte is honest,
a diverging run stops naming the step, and init_from starts from a transformers GPT-2 folder's exact weights."""

import json
import math
import re
import types

import pytest
import torch

from hf_gpt_custom.training.config import load_train_config
from hf_gpt_custom.training.data import prepare_datasets
from hf_gpt_custom.training.divergence import TrainingDivergedError
from hf_gpt_custom.errors import UserError
from hf_gpt_custom.training.train import train

from tests.helpers import save_tiny_model
from tests.helpers import tiny_run_overrides

SUMMARY_KEYS = {"run_name", "config", "n_params", "tokens_seen", "steps", "wall_time_s", "final_train_loss",
                "final_train_loss_steps",
                "final_val_loss", "val_perplexity", "val_bits_per_byte", "tokens_per_s", "mfu", "dataset", "tokenizer",
                "loss_curve"}


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, shakespeare_path, shakespeare_tokenizer_dir, shared_data_cache):
    out_dir = tmp_path_factory.mktemp("runs") / "tiny"
    config = load_train_config(None, tiny_run_overrides(out_dir, shakespeare_path, shakespeare_tokenizer_dir,
                                                        shared_data_cache) + ["max_steps=40", "eval_interval=20"])
    return config, train(config)


def test_loss_goes_down_on_real_text(trained_run):
    _, run_dir = trained_run
    records = [json.loads(line) for line in (run_dir / "run_log.jsonl").read_text().splitlines()]
    train_losses = [r["loss"] for r in records if r["kind"] == "train"]
    val_losses = [r["val_loss"] for r in records if r["kind"] == "eval"]
    assert len(train_losses) == 40 and len(val_losses) == 2
    assert train_losses[0] == pytest.approx(math.log(512), abs=0.3)  # uniform over the 512-token vocabulary
    assert sum(train_losses[-5:]) / 5 < train_losses[0] - 0.6
    assert val_losses[1] < val_losses[0] < math.log(512) - 0.5


def test_the_summary_says_how_many_validation_blocks_its_figures_scored(trained_run):
    """eval_batches=4 × batch_size=4 scores the first 16 validation blocks; the card passed those figures off as the
    whole split's. The count is checked against the evaluator's own token count (31 predicted tokens a block)."""
    from hf_gpt_custom.model_cards.card import _training_result_rows

    config, run_dir = trained_run
    summary = json.loads((run_dir / "training_summary.json").read_text())
    last_eval = [json.loads(line) for line in (run_dir / "run_log.jsonl").read_text().splitlines()
                 if json.loads(line)["kind"] == "eval"][-1]
    assert summary["val_blocks"] > 16 and summary["val_blocks_scored"] == 16
    assert last_eval["val_tokens"] == summary["val_blocks_scored"] * (config.block_size - 1)
    assert last_eval["blocks_scored"] == 16  # each evaluation's own count: the loss curve draws other sets apart
    rows = dict(_training_result_rows(summary))
    assert f"validation bits per byte (first 16 of {summary['val_blocks']:,} blocks: eval_batches)" in rows
    whole = dict(_training_result_rows({**summary, "val_blocks_scored": summary["val_blocks"]}))
    assert "validation bits per byte" in whole


def test_the_summary_records_the_sha256_of_each_training_file(trained_run, shakespeare_path):
    """What the export compares with a benchmark's scored files (a model trained on wiki.test.raw must not publish
    WikiText-2's test perplexity as held out); hashed here by hand."""
    import hashlib

    _, run_dir = trained_run
    summary = json.loads((run_dir / "training_summary.json").read_text())
    assert summary["dataset_files_sha256"] == [hashlib.sha256(shakespeare_path.read_bytes()).hexdigest()]


def test_run_folder_has_config_log_summary_plot_and_final_model(trained_run):
    config, run_dir = trained_run
    assert load_train_config(run_dir / "config.yaml", []) == config
    step = json.loads((run_dir / "run_log.jsonl").read_text().splitlines()[0])
    assert {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "data_digests"} <= set(step)
    summary = json.loads((run_dir / "training_summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert summary["steps"] == 40 and summary["tokens_seen"] == 40 * 4 * 32
    losses = [record["loss"] for record in map(json.loads, (run_dir / "run_log.jsonl").read_text().splitlines())
              if record["kind"] == "train"]
    assert summary["final_train_loss_steps"] == 10
    assert summary["final_train_loss"] == pytest.approx(sum(losses[-10:]) / 10)
    assert summary["config"]["max_steps"] == 40 and summary["loss_curve"] == "loss_curve.png"
    import accelerate
    import transformers

    assert summary["software"]["transformers"] == transformers.__version__
    assert summary["software"]["accelerate"] == accelerate.__version__ and summary["software"]["torch"] == torch.__version__
    assert summary["tokens_per_s"] > 0
    if torch.cuda.is_available():  # trained on the GPU in float32: no datasheet peak to divide by (train.py), no MFU
        assert summary["mfu"] is None and summary["peak_flops"] is None
    else:
        assert 0 < summary["mfu"] < 1
    assert (run_dir / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000040"]
    assert list((run_dir / "tensorboard").rglob("events.out.tfevents.*")) == []  # log_with=none

    import hf_gpt_custom  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(run_dir / "final")
    tokenizer = AutoTokenizer.from_pretrained(run_dir / "final")
    assert model.num_parameters() == summary["n_params"] and len(tokenizer) == 512


def test_final_folder_has_a_manifest_and_a_tokenizer_ready_for_batched_generation(trained_run):
    from hf_gpt_custom.manifest import verify_manifest
    from hf_gpt_custom.model_folder import load_model_folder
    from transformers import AutoTokenizer

    _, run_dir = trained_run
    final = run_dir / "final"
    assert verify_manifest(final) is None
    listed = set(json.loads((final / "manifest.json").read_text())["files"])
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= listed
    tokenizer = AutoTokenizer.from_pretrained(final)
    assert tokenizer.model_max_length == 32  # n_positions = block_size here
    assert tokenizer.pad_token == "<|endoftext|>" == tokenizer.eos_token and tokenizer.padding_side == "left"
    assert load_model_folder(final).config.n_positions == 32


def test_bits_per_byte_matches_a_hand_count(trained_run, shakespeare_tokenizer_dir):
    """Recompute the final evaluation from final/ by hand: nats from the logits, bytes from the decoded text."""
    config, run_dir = trained_run
    import hf_gpt_custom  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(run_dir / "final").eval()
    tokenizer = AutoTokenizer.from_pretrained(run_dir / "final")
    val = prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir).val
    blocks = torch.tensor(val["input_ids"][: config.eval_batches * config.batch_size])
    with torch.no_grad():
        mean_loss = model(input_ids=blocks, labels=blocks).loss.item()  # mean over the 31 predicted tokens per block
    n_tokens = blocks.shape[0] * (config.block_size - 1)
    n_bytes = sum(len(tokenizer.decode(block[1:], skip_special_tokens=True).encode("utf-8")) for block in blocks)
    summary = json.loads((run_dir / "training_summary.json").read_text())
    assert summary["final_val_loss"] == pytest.approx(mean_loss, rel=1e-5)
    assert summary["val_perplexity"] == pytest.approx(math.exp(mean_loss), rel=1e-5)
    assert summary["val_bits_per_byte"] == pytest.approx(mean_loss * n_tokens / (math.log(2) * n_bytes), rel=1e-5)


def test_a_rerun_on_another_eval_batches_logs_and_plots_the_figure_the_summary_gives(make_config,
                                                                                      shakespeare_tokenizer_dir, capfd,
                                                                                      monkeypatch):
    """Rerunning a finished run with another eval_batches evaluates its last step again. The summary took the new
    figure while run_log.jsonl (and the loss curve drawn from it) kept the old one: two values for one step. The
    new figure is checked against a hand computation from final/ over the new cut. The final line says its figures
    are of the first blocks only (the newcomer2 walk took them for the whole split's)."""
    from hf_gpt_custom.training.run_log import latest_evaluations, read_run_log
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import hf_gpt_custom  # noqa: F401

    run_dir = train(make_config("max_steps=4", "eval_interval=4", "eval_batches=1"))
    config = make_config("max_steps=4", "eval_interval=4", "eval_batches=3")
    capfd.readouterr()
    import hf_gpt_custom.training.train as train_module

    plotted = []
    real_plot = train_module.plot_loss_curve
    monkeypatch.setattr(train_module, "plot_loss_curve",
                        lambda *args, **kwargs: plotted.append(kwargs.get("val_blocks")) or real_plot(*args, **kwargs))
    train(config)
    summary = json.loads((run_dir / "training_summary.json").read_text())
    assert plotted == [summary["val_blocks"]]  # the curve's legend says "first 12 of N blocks" (figuretruth)
    done = [line for line in capfd.readouterr().out.splitlines() if line.startswith("done: ")]
    assert done == [f"done: val loss {summary['final_val_loss']:.4f}, perplexity {summary['val_perplexity']:.2f}, "
                    f"{summary['val_bits_per_byte']:.4f} bits/byte (on the first 12 of {summary['val_blocks']} "
                    f"validation blocks: eval_batches=3); {run_dir}"]
    from hf_gpt_custom.training.train import _part_scored  # the whole split (eval_batches null, or as many) says none
    session = types.SimpleNamespace(config=config, workload=types.SimpleNamespace(summary_fields=lambda _: {
        "val_blocks": 850, "val_blocks_scored": 850}))
    assert _part_scored(session, {}) == ""
    session.workload.summary_fields = lambda _: {"val_blocks": 850, "val_blocks_scored": 849}
    assert _part_scored(session, {}) == " (on the first 849 of 850 validation blocks: eval_batches=3)"
    evaluations = latest_evaluations(read_run_log(run_dir / "run_log.jsonl"))
    assert [record["step"] for record in evaluations] == [4]
    assert evaluations[-1]["val_loss"] == summary["final_val_loss"]
    assert evaluations[-1]["val_tokens"] == 3 * 4 * (config.block_size - 1)

    model = AutoModelForCausalLM.from_pretrained(run_dir / "final").eval()
    val = prepare_datasets(config, AutoTokenizer.from_pretrained(run_dir / "final"), shakespeare_tokenizer_dir).val
    blocks = torch.tensor(val["input_ids"][:12])
    with torch.no_grad():
        assert summary["final_val_loss"] == pytest.approx(model(input_ids=blocks, labels=blocks).loss.item(), rel=1e-5)


def _max_abs_weight(folder) -> float:
    from safetensors.torch import load_file

    return max(tensor.abs().max().item() for tensor in load_file(str(folder / "model.safetensors")).values())


def test_a_training_step_asks_the_model_for_the_loss_alone(make_config, monkeypatch):
    """The loop reads only the loss, so it asks for nothing else (return_logits=False): compiled, a returned logits
    tensor would be handed a zero gradient of its size in every backward (pytorch/pytorch#131794). Evaluation still
    gets its logits."""
    from hf_gpt_custom import GPTCustomForCausalLM

    returned = {"training": [], "evaluating": []}
    forward = GPTCustomForCausalLM.forward

    def recording_forward(self, *args, **kwargs):
        output = forward(self, *args, **kwargs)
        returned["training" if self.training else "evaluating"].append(output.logits)
        return output

    monkeypatch.setattr(GPTCustomForCausalLM, "forward", recording_forward)
    train(make_config("max_steps=2", "eval_interval=2", "checkpoint_interval=0"))
    assert len(returned["training"]) == 2 and all(logits is None for logits in returned["training"])
    assert returned["evaluating"] and all(logits is not None for logits in returned["evaluating"])


def test_diverging_loss_stops_naming_the_step_and_no_poisoned_checkpoint(make_config):
    # lr 1e30 without clipping: step 1 is computed from the initial weights; its update leaves weights of ~1e30,
    # finite in float32, which the step-1 checkpoint holds. Step 2's loss is NaN: step 1 is not a good checkpoint.
    config = make_config("learning_rate=1e30", "warmup_steps=0", "grad_clip=0", "checkpoint_interval=1",
                         "max_steps=6", "keep_checkpoints=3")
    with pytest.raises(TrainingDivergedError) as err:
        train(config)
    assert str(err.value).startswith("training stopped at step 2: loss became nan (this update was not applied); "
                                     "no checkpoint holds weights that gave a healthy loss; lower learning_rate")
    assert _max_abs_weight(config.run_dir / "checkpoints" / "step_000001") > 1e20  # why it must not be advised
    assert not (config.run_dir / "final").exists()
    records = [json.loads(line) for line in (config.run_dir / "run_log.jsonl").read_text().splitlines()]
    assert records[-1]["kind"] == "error" and records[-1]["step"] == 2


def test_huge_learning_rate_names_the_checkpoint_that_is_really_safe(make_config):
    """lr 1e6 with 3 warmup steps: update 1 has lr 0 (weights unchanged), update 2 has lr 3.3e5 and ruins them while
    the loss stays finite (~1e12). The error names step 1, whose weights gave a healthy loss, not step 2."""
    config = make_config("learning_rate=1e6", "warmup_steps=3", "checkpoint_interval=1", "max_steps=8",
                         "keep_checkpoints=10", "eval_interval=8")
    with pytest.raises(TrainingDivergedError) as err:
        train(config)
    checkpoints = config.run_dir / "checkpoints"
    message = str(err.value)
    # the loss of step 3 is finite (~1e12); its gradient norm is finite on a CPU and inf or nan on a GPU (named too)
    assert re.match(r"training stopped at step 3: loss became [0-9.e+]+, more than twice the best loss 6\.\d+ of this "
                    r"run \(diverged\)(; gradient norm became (inf|nan))? \(this update was not applied\)",
                    message), message
    assert f"the last good checkpoint is {checkpoints / 'step_000001'} " in message
    assert "step_000002 hold(s) the diverging weights" in message
    assert _max_abs_weight(checkpoints / "step_000001") < 10 < 1e4 < _max_abs_weight(checkpoints / "step_000002")
    # the advice works: a new run from the named checkpoint with a sane learning rate trains normally
    advised = make_config(f"init_from={checkpoints / 'step_000001'}", "max_steps=2", "warmup_steps=0",
                          run_name="from_good", with_model_section=False)
    run_dir = train(advised)
    first_loss = json.loads((run_dir / "run_log.jsonl").read_text().splitlines()[0])["loss"]
    assert first_loss == pytest.approx(math.log(512), abs=0.3)


def _first_batch_loss(reference, config, tokenizer_dir) -> float:
    """`reference`'s loss on the run's first batch: the seeded shuffle's first blocks, rebuilt here."""
    from transformers import AutoTokenizer

    from hf_gpt_custom.training.data import EpochShuffleSampler

    train_blocks = prepare_datasets(config, AutoTokenizer.from_pretrained(str(tokenizer_dir)), tokenizer_dir).train
    first_indices = list(EpochShuffleSampler(len(train_blocks), config.seed))[: config.batch_size]
    batch = torch.tensor(train_blocks.select(first_indices)["input_ids"])
    with torch.no_grad():
        return reference(input_ids=batch, labels=batch).loss.item()


def test_init_from_a_bf16_folder_trains_float32_weights_from_its_values(make_config, tmp_path,
                                                                       shakespeare_tokenizer_dir):
    """A folder saved in bf16 loaded as bf16 (transformers 5 keeps the saved dtype): mixed_precision=no trained bf16
    weights, most AdamW updates fell below bf16's resolution (1.8% of a weight's elements moved in a hunt's run) and
    config.json said float32. Reference: transformers' GPT-2 from the same bf16 folder, upcast to float32 by hand."""
    from safetensors import safe_open
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=512, n_positions=64, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                               embd_pdrop=0.0, attn_pdrop=0.0)).to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    config = make_config(f"init_from={tmp_path / 'bf16'}", "max_steps=2", "warmup_steps=0", "learning_rate=1e-5",
                         run_name="from_bf16", with_model_section=False)
    run_dir = train(config)
    reference = GPT2LMHeadModel.from_pretrained(tmp_path / "bf16", dtype=torch.float32).eval()
    first_loss = json.loads((run_dir / "run_log.jsonl").read_text().splitlines()[0])["loss"]
    expected = _first_batch_loss(reference, config, shakespeare_tokenizer_dir)
    assert first_loss == pytest.approx(expected, abs=1e-5)  # float32 arithmetic on the bf16 values
    with safe_open(run_dir / "final" / "model.safetensors", "pt") as weights:
        trained = weights.get_tensor("transformer.h.0.mlp.c_fc.weight")
    start = reference.transformer.h[0].mlp.c_fc.weight.detach().t()
    assert trained.dtype == torch.float32 and (trained != start).float().mean() > 0.9  # the updates stayed
    assert json.loads((run_dir / "final" / "config.json").read_text())["dtype"] == "float32"


def test_init_from_a_transformers_gpt2_folder_starts_from_its_weights(make_config, tmp_path, shakespeare_tokenizer_dir):
    """...and final/ keeps the folder's generation settings, as transformers keeps them when it saves a model it
    loaded: final/generation_config.json was the one config.json implies, the eos list and penalties dropped (the
    siblings hunt)."""
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom import GPTCustomForCausalLM

    torch.manual_seed(0)
    reference = GPT2LMHeadModel(GPT2Config(vocab_size=512, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()
    reference.generation_config.update(eos_token_id=[511, 0], repetition_penalty=1.3, no_repeat_ngram_size=3,
                                       max_new_tokens=40)
    reference.save_pretrained(tmp_path / "gpt2-tiny")
    config = make_config(f"init_from={tmp_path / 'gpt2-tiny'}", "max_steps=2", "warmup_steps=0",
                         run_name="finetune", with_model_section=False)
    run_dir = train(config)
    first_loss = json.loads((run_dir / "run_log.jsonl").read_text().splitlines()[0])["loss"]
    assert first_loss == pytest.approx(_first_batch_loss(reference, config, shakespeare_tokenizer_dir), abs=1e-5)
    summary = json.loads((run_dir / "training_summary.json").read_text())
    assert summary["n_params"] == reference.num_parameters()
    kept = GPT2LMHeadModel.from_pretrained(tmp_path / "gpt2-tiny").generation_config.to_diff_dict()
    assert kept["eos_token_id"] == [511, 0]
    assert GenerationConfig.from_pretrained(run_dir / "final").to_diff_dict() == kept
    checkpoint = sorted((run_dir / "checkpoints").glob("step_*"))[-1]  # a run continued from it keeps them too
    assert GenerationConfig.from_pretrained(checkpoint).to_diff_dict() == kept
    assert GPTCustomForCausalLM.from_pretrained(checkpoint).generation_config.eos_token_id == [511, 0]

    # a model: section may stay if it agrees with the folder; a different size is named
    agreeing = make_config(f"init_from={tmp_path / 'gpt2-tiny'}", "max_steps=1", "warmup_steps=0", "model.n_embd=32",
                           run_name="agreeing", with_model_section=False)
    assert train(agreeing).is_dir()
    with pytest.raises(ValueError, match=r"model.n_layer=3 but init_from=.*gpt2-tiny has n_layer=2; .* drop model.n_layer"):
        make_config(f"init_from={tmp_path / 'gpt2-tiny'}", "model.n_layer=3", run_name="differing",
                    with_model_section=False)  # refused with the settings, before a run folder is written


def test_init_from_a_folder_asking_for_attention_maps_trains_and_writes_final(make_config, tmp_path, caplog):
    """A GPT-2 folder whose config.json says output_attentions: true trained every step, then final/ was refused by
    transformers' save-time check (attention maps need eager attention; the model is on sdpa), with no fix named and
    the training time lost (the roundreview19 hunt). GPT2LMHeadModel refuses to save that folder too; training never
    reads the maps, so it turns them off at the start, with a warning that says how to get them back."""
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(vocab_size=512, n_positions=64, n_embd=32, n_layer=2, n_head=2)).save_pretrained(
        tmp_path / "gpt2-attn")
    config_path = tmp_path / "gpt2-attn" / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "output_attentions": True}))
    config = make_config(f"init_from={tmp_path / 'gpt2-attn'}", "max_steps=1", "warmup_steps=0",
                         run_name="attn", with_model_section=False)
    with caplog.at_level("WARNING"):
        run_dir = train(config)
    assert "asks for attention maps (output_attentions: true in its config.json)" in caplog.text
    assert not json.loads((run_dir / "final" / "config.json").read_text()).get("output_attentions")


def test_cli_reports_a_bad_override_in_one_line(capsys):
    from hf_gpt_custom.cli import main

    from hf_gpt_custom.training.config import REPO_ROOT

    with pytest.raises(SystemExit) as exit_info:
        main(["train", str(REPO_ROOT / "training" / "configs" / "smoke.yaml"), "max_step=3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    prefix = "hf-gpt-custom train: error: unknown training config key 'max_step'; did you mean 'max_steps'? known keys: "
    assert err.startswith(prefix) and "\n" not in err
    import dataclasses

    from hf_gpt_custom.training.config import TrainConfig

    assert err[len(prefix):].split(", ") == sorted(field.name for field in dataclasses.fields(TrainConfig))


def test_prepare_tokenizer_trains_one_when_none_is_named_and_reuses_it(make_config, tmp_path, shakespeare_path):
    from transformers import AutoTokenizer

    from hf_gpt_custom.training.workload import prepare_tokenizer

    small = tmp_path / "speeches.txt"
    small.write_text("\n\n".join(shakespeare_path.read_text(encoding="utf-8").split("\n\n")[:400]), encoding="utf-8")
    config = make_config(f"dataset={small}", "tokenizer=null", "tokenizer_vocab_size=300", run_name="own_tokenizer")
    folder = prepare_tokenizer(config)
    assert folder == config.run_dir / "tokenizer"
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    assert len(tokenizer) == 300 and tokenizer.eos_token == "<|endoftext|>"
    written = (folder / "tokenizer.json").stat().st_mtime_ns
    assert prepare_tokenizer(config) == folder and (folder / "tokenizer.json").stat().st_mtime_ns == written  # reused
    bigger = make_config(f"dataset={small}", "tokenizer=null", "tokenizer_vocab_size=320", run_name="own_tokenizer")
    assert len(AutoTokenizer.from_pretrained(str(prepare_tokenizer(bigger)))) == 320  # a different size retrains


def test_torch_threads_applies_during_training_and_is_restored(make_config, monkeypatch):
    import hf_gpt_custom.training.train as train_module

    seen = {}
    real_train = train_module._train

    def spy(config, workload, *args):
        seen["threads"] = torch.get_num_threads()
        return real_train(config, workload, *args)

    monkeypatch.setattr(train_module, "_train", spy)
    before = torch.get_num_threads()
    train_module.train(make_config("torch_threads=2", "max_steps=1", "warmup_steps=0"))
    assert seen["threads"] == 2 and torch.get_num_threads() == before


def test_init_from_a_folder_missing_a_weight_is_refused(make_config, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "incomplete"
    save_tiny_model(folder, 512, n_head=2)
    weights = load_file(str(folder / "model.safetensors"))
    del weights["transformer.h.1.mlp.c_fc.weight"]
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = make_config(f"init_from={folder}", "max_steps=1", "warmup_steps=0", run_name="incomplete",
                         with_model_section=False)
    with pytest.raises(ValueError, match=r"does not hold every weight of its config: missing 1"):
        train(config)


def test_a_tracker_that_is_not_installed_is_refused_naming_the_fix(make_config, monkeypatch):
    import accelerate.utils

    monkeypatch.setattr(accelerate.utils, "is_wandb_available", lambda: False)
    with pytest.raises(ValueError, match="log_with=wandb but the wandb package is not installed; pip install wandb, "
                                         "or set log_with=none"):
        train(make_config("log_with=wandb", "max_steps=1", "warmup_steps=0"))


def test_weights_that_overflow_are_never_checkpointed(make_config):
    # lr 1e300 is infinite in float32: the first update makes the weights inf, while step 1's loss was fine
    config = make_config("learning_rate=1e300", "warmup_steps=0", "grad_clip=0", "checkpoint_interval=1",
                         "max_steps=4")
    with pytest.raises(TrainingDivergedError, match=r"^training stopped at step 1: the weights stopped being finite; "
                                                    r"no checkpoint holds weights that gave a healthy loss"):
        train(config)
    assert not (config.run_dir / "checkpoints" / "step_000001").exists()


@pytest.fixture
def known_start(tmp_path):
    """A saved tiny model with known weights, to measure how far one update moves them."""
    from safetensors.torch import load_file

    folder = tmp_path / "start"
    save_tiny_model(folder, 512, n_positions=32, n_head=2)
    return folder, load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize("grad_clip", [1e-6, 0.0])
def test_gradient_clipping_bounds_the_first_update(make_config, known_start, grad_clip):
    """Adam's first step is lr * g / (|g| + eps) per element (m_hat = g, v_hat = g^2). With eps = 1 that is at most
    lr * |g| <= lr * (global norm after clipping): clipping to 1e-6 must keep every weight within 1e-6 of its start."""
    from safetensors.torch import load_file

    folder, before = known_start
    config = make_config(f"init_from={folder}", "max_steps=1", "warmup_steps=0", "learning_rate=1.0",
                         "adam_eps=1.0", "weight_decay=0", f"grad_clip={grad_clip}", run_name=f"clip{grad_clip}",
                         with_model_section=False)
    after = load_file(str(train(config) / "final" / "model.safetensors"))
    largest_change = max((after[name] - before[name]).abs().max().item() for name in before)
    if grad_clip:
        assert 0 < largest_change <= grad_clip * 1.001
    else:
        assert largest_change > 1e-3  # the unclipped gradient norm is ~1: the same update is far larger


def test_checkpoints_do_not_warn_about_the_tied_head_but_other_shared_tensors_still_warn(tiny_config, tmp_path,
                                                                                         caplog):
    """Every run printed accelerate's "Removed shared tensor {'lm_head.weight'} while saving": the head shares the
    token embedding by design, so nothing to act on. A tensor shared by accident must still be named."""
    import logging

    from accelerate import Accelerator

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.training.checkpoint import TrainingState, save_checkpoint

    accelerator = Accelerator()  # not cpu=True: where CUDA is visible an earlier run in this process set the state
    model = accelerator.prepare(GPTCustomForCausalLM(tiny_config))
    with caplog.at_level(logging.WARNING):
        save_checkpoint(accelerator, tmp_path / "checkpoints", TrainingState(step=1), keep_last=3)
    assert "Removed shared tensor" not in caplog.text
    model.transformer.h[1].ln_1.weight = model.transformer.h[0].ln_1.weight  # an accidental alias
    with caplog.at_level(logging.WARNING):
        save_checkpoint(accelerator, tmp_path / "checkpoints", TrainingState(step=2), keep_last=3)
    assert "Removed shared tensor {" in caplog.text and "'transformer.h.1.ln_1.weight'" in caplog.text


@pytest.mark.parametrize("loss, grad_norm, expected", [
    (6.0, 2.0, None),
    (float("nan"), float("nan"), "loss became nan"),
    (float("inf"), float("nan"), "loss became inf"),
    (6.0, float("nan"), "gradient norm became nan"),
    (6.0, float("inf"), "gradient norm became inf"),
    (1e12, 3.0, "loss became 1e+12, more than twice the best loss 5 of this run (diverged)"),
    (1e12, float("nan"), "loss became 1e+12, more than twice the best loss 5 of this run (diverged); gradient norm "
                         "became nan"),
    (1e12, float("inf"), "loss became 1e+12, more than twice the best loss 5 of this run (diverged); gradient norm "
                         "became inf"),
])
def test_divergence_is_named_the_same_whether_the_first_bad_value_is_inf_or_nan(loss, grad_norm, expected):
    """A GPU's kernels turn an overflowing gradient norm into nan where a CPU's give inf or a huge finite number:
    every symptom is named, the loss first, so the message starts the same on every device. The device-side check
    (UpdateGate, what the loop runs without reading values back) agrees with the host's on each case."""
    from hf_gpt_custom.training.divergence import DivergenceGuard, UpdateGate

    guard = DivergenceGuard()
    guard.record_healthy_step(5.0)
    assert guard.problem(loss, grad_norm) == expected
    parameter = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([parameter], lr=0.1, fused=True)
    gate = UpdateGate(optimizer, "cpu")
    assert not bool(gate.check(torch.tensor(5.0), torch.tensor(1.0)))
    assert bool(gate.check(torch.tensor(loss), torch.tensor(grad_norm))) is (expected is not None)
    parameter.grad = torch.ones(3)
    optimizer.step()  # skipped on the device from the first diverged step on: the weights stay as they were
    assert torch.equal(parameter.detach(), torch.ones(3)) is (expected is not None)


def test_without_the_blowup_rule_only_a_non_finite_loss_or_gradient_is_divergence():
    """Fine-tuning's rule (FinetuneWorkload.loss_blowup_is_divergence is False), on the host and on the device, with
    the figures of the hunt that found pre-training's rule stopping a healthy fine-tuning run."""
    from hf_gpt_custom.training.divergence import DivergenceGuard, UpdateGate

    guard = DivergenceGuard(loss_blowup_is_divergence=False)
    guard.record_healthy_step(0.303686)
    parameter = torch.nn.Parameter(torch.ones(3))
    gate = UpdateGate(torch.optim.AdamW([parameter], lr=0.1, fused=True), "cpu", loss_blowup_is_divergence=False)
    assert not bool(gate.check(torch.tensor(0.303686), torch.tensor(1.0)))
    for loss, grad_norm, expected in [(1.35859, 14.0, None), (1e12, 3.0, None), (float("nan"), 3.0, "loss became nan"),
                                      (2.0, float("inf"), "gradient norm became inf")]:
        assert guard.problem(loss, grad_norm) == expected
        fresh = UpdateGate(torch.optim.AdamW([parameter], lr=0.1, fused=True), "cpu", best_loss=0.303686,
                           loss_blowup_is_divergence=False)
        assert bool(fresh.check(torch.tensor(loss), torch.tensor(grad_norm))) is (expected is not None)
    assert not bool(gate.check(torch.tensor(1.35859), torch.tensor(14.0)))
    pretraining = DivergenceGuard()  # pre-training's rule, for contrast
    pretraining.record_healthy_step(0.303686)
    assert pretraining.problem(1.35859, 14.0).endswith("(diverged)")


def test_under_fp16_an_overflowing_gradient_is_the_scalers_business_not_divergence():
    """torch's GradScaler skips a step whose scaled gradients overflowed and lowers its scale (the first steps of an
    fp16 run do so by design): an inf gradient norm there is no divergence, on the host nor on the device, and the
    fused optimizer's found_inf input stays the scaler's (the gate leaves it and the host checks each step). A
    non-finite or blown-up loss still is divergence."""
    from hf_gpt_custom.training.divergence import DivergenceGuard, UpdateGate

    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    parameter = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([parameter], lr=0.1)
    scaler.scale((parameter * torch.tensor([float("inf"), 1.0, 1.0])).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    assert torch.equal(parameter.detach(), torch.ones(3)) and scaler.get_scale() == 2.0 ** 15  # skipped, scale lowered

    guard = DivergenceGuard()
    guard.record_healthy_step(5.0)
    assert guard.problem(5.1, float("inf"), overflow_is_normal=True) is None
    assert guard.problem(float("nan"), float("inf"), overflow_is_normal=True) == "loss became nan"
    assert guard.problem(1e12, float("inf"), overflow_is_normal=True).endswith("(diverged)")
    fused = torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))], lr=0.1, fused=True)
    gate = UpdateGate(fused, "cpu", overflow_is_normal=True, best_loss=5.0)
    assert not gate.skips_on_device and not hasattr(fused, "found_inf")
    assert not bool(gate.check(torch.tensor(5.1), torch.tensor(float("inf"))))
    assert bool(gate.check(torch.tensor(float("nan")), torch.tensor(1.0)))


def test_once_a_step_diverged_the_device_skips_every_later_update_even_a_healthy_looking_one():
    """From the first diverged step every update is held back on the device until the host reads the window and
    stops: a later step whose loss looks healthy (the bad update was skipped) must not move the weights either, or a
    checkpoint saved before the read holds weights trained past the divergence."""
    from hf_gpt_custom.training.divergence import UpdateGate

    parameter = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([parameter], lr=0.1, fused=True)
    gate = UpdateGate(optimizer, "cpu", best_loss=5.0)
    assert bool(gate.check(torch.tensor(float("nan")), torch.tensor(1.0)))
    parameter.grad = torch.ones(3)
    optimizer.step()
    assert not bool(gate.check(torch.tensor(5.0), torch.tensor(1.0)))  # this step alone looks healthy
    optimizer.step()
    assert torch.equal(parameter.detach(), torch.ones(3))


def test_the_advice_names_every_newer_checkpoint_by_step_number_past_step_999999(tmp_path):
    """Checkpoint folders are ordered by step number: as text "step_1000000" sorts before "step_999999", and the
    advice left the newer checkpoint, which holds diverging weights, unnamed. A folder mid-write or mid-deletion is
    not a checkpoint and is not named."""
    from hf_gpt_custom.training.divergence import DivergenceGuard

    for name in ("step_999998", "step_999999", "step_1000000", "step_1000001.tmp", "step_1000002.deleting"):
        (tmp_path / name).mkdir()
    advice = DivergenceGuard(last_good=tmp_path / "step_999999").advice(tmp_path)
    assert "; step_1000000 hold(s) the diverging weights" in advice


def test_the_advice_reads_the_step_of_a_last_good_checkpoint_resumed_under_another_name(tmp_path):
    """resume_from_checkpoint takes any folder, so the last good checkpoint may be named otherwise (a copy kept
    aside): its step is in its training_state.json. Reading it from the name gave None and a TypeError in place of
    the divergence error (found by a review of the step-number ordering)."""
    from hf_gpt_custom.training.checkpoint import TRAINING_STATE_NAME
    from hf_gpt_custom.training.divergence import DivergenceGuard

    kept = tmp_path / "backup" / "good_weights"
    kept.mkdir(parents=True)
    (kept / TRAINING_STATE_NAME).write_text(json.dumps({"step": 999_999}))
    checkpoints = tmp_path / "checkpoints"
    for name in ("step_999998", "step_1000000"):
        (checkpoints / name).mkdir(parents=True)
    advice = DivergenceGuard(last_good=kept).advice(checkpoints)
    assert f"the last good checkpoint is {kept}" in advice and "; step_1000000 hold(s) the diverging weights" in advice


def test_a_second_run_in_the_same_process_may_ask_for_another_precision_and_device(make_config):
    """Accelerate keeps one device and mixed precision per process: a second train() in a notebook asking for others
    failed with accelerate's "AcceleratorState has already been initialized ... restart your runtime"."""
    from accelerate.state import AcceleratorState

    steps = ("max_steps=1", "warmup_steps=0", "eval_interval=1", "eval_batches=1", "checkpoint_interval=0")
    train(make_config(*steps, "mixed_precision=no", run_name="first"))
    assert AcceleratorState().mixed_precision == "no"
    train(make_config(*steps, "mixed_precision=bf16", "cpu=true", run_name="second"))
    assert AcceleratorState().mixed_precision == "bf16" and AcceleratorState().device.type == "cpu"


def test_bf16_training_keeps_autocast_without_accelerates_float32_copy_of_the_logits(make_config, monkeypatch):
    """Accelerate wraps a bf16 model's forward so that every output is copied to float32: each training step copied
    the logits (batch x block x vocabulary), which nothing reads. The prepared model still runs under autocast
    (bfloat16 logits from float32 weights) and its loss is float32."""
    from accelerate import Accelerator

    prepared = []
    real_prepare = Accelerator.prepare

    def recording_prepare(self, *objects, **kwargs):
        prepared.append(objects[0])
        return real_prepare(self, *objects, **kwargs)

    monkeypatch.setattr(Accelerator, "prepare", recording_prepare)
    train(make_config("max_steps=1", "warmup_steps=0", "eval_interval=1", "eval_batches=1", "checkpoint_interval=0",
                      "mixed_precision=bf16", "cpu=true"))
    (model,) = prepared
    input_ids = torch.randint(0, model.config.vocab_size, (2, 8))
    output = model(input_ids=input_ids, labels=input_ids)
    assert model.lm_head.weight.dtype == torch.float32
    assert output.logits.dtype == torch.bfloat16 and output.loss.dtype == torch.float32


def test_the_training_bar_leaves_disable_to_tqdm_on_the_main_process(tmp_path, shakespeare_path,
                                                                     shakespeare_tokenizer_dir, shared_data_cache,
                                                                     monkeypatch):
    """tqdm applies TQDM_DISABLE only to arguments not given: passing disable=False would override a user's
    TQDM_DISABLE=1 (tests/eval/test_eval_command.py shows the variable working when disable is left out)."""
    import tqdm.auto

    given = []
    real = tqdm.auto.tqdm
    monkeypatch.setattr(tqdm.auto, "tqdm", lambda *args, **kwargs: given.append(kwargs) or real(*args, **kwargs))
    config = load_train_config(None, tiny_run_overrides(tmp_path / "run", shakespeare_path, shakespeare_tokenizer_dir,
                                                        shared_data_cache) + ["max_steps=4", "eval_interval=4",
                                                                              "log_interval=4"])
    postfixes = []
    monkeypatch.setattr(real, "set_postfix", lambda self, *args, **kwargs: postfixes.append(kwargs))
    train(config)
    bars = [kwargs for kwargs in given if kwargs.get("desc") == "training"]
    assert bars and all("disable" not in kwargs for kwargs in bars)
    # its figures, read once per log_interval window, name the step they are of (the newcomer3 walk read step 1's
    # lr=0 as current for ten steps); the run log has that step's own
    log = {record["step"]: record for record in map(json.loads, (config.run_dir / "run_log.jsonl").read_text()
                                                     .splitlines()) if record["kind"] == "train"}
    for postfix in postfixes:
        step = postfix["of_step"]
        assert postfix["lr"] == f"{log[step]['lr']:.2e}" and postfix["loss"] == f"{log[step]['loss']:.4f}"
    assert [postfix["of_step"] for postfix in postfixes] == [1, 4]  # step 1 is a window of its own (warm-up)


def test_data_of_fewer_blocks_than_one_batch_says_why_there_is_no_batch(make_config, tmp_path):
    """One line with the cause: the blocks there are, fewer than one batch, and the dropped incomplete batch."""
    small = tmp_path / "small.txt"
    small.write_text("\n\n".join(f"Speech {i}: to be or not to be, that is the question." for i in range(12)),
                     encoding="utf-8")
    config = make_config(f"dataset={small}", "val_fraction=0.5", "batch_size=64", f"data_cache_dir={tmp_path / 'c'}")
    with pytest.raises(UserError, match=r"gave no batch: its \d+ block\(s\) are fewer than one batch .*lower "
                                        r"batch_size or block_size, or add data"):
        train(config)
    # a stream of 12 documents: all of them are its validation documents (the first 1,000), and the error says so
    streamed = make_config(f"dataset={small}", "streaming=true", "batch_size=2", run_name="streamed")
    with pytest.raises(UserError, match=r"gave no batch: its blocks after the first 1,000 documents \(held out for "
                                        r"validation\) are fewer than one batch"):
        train(streamed)


def test_a_rerun_that_measures_another_peak_keeps_the_runs_mfu(make_config, monkeypatch):
    """The summary divided the whole run's tokens/s by the peak measured in whichever session wrote it last: a rerun
    of a finished run (no step trained) on a machine measuring another peak rewrote the run's MFU. Each logged step
    keeps its own session's MFU; the summary is their time-weighted mean, read here from the log by hand."""
    from hf_gpt_custom.training import train as train_module

    config = make_config("max_steps=4", "eval_interval=4")
    run_dir = train(config)
    records = [json.loads(line) for line in (run_dir / "run_log.jsonl").read_text().splitlines()]
    timed = [r for r in records if r["kind"] == "train" and not r.get("warm_up")]
    expected = sum(r["mfu"] * r["step_time_s"] for r in timed) / sum(r["step_time_s"] for r in timed)
    assert json.loads((run_dir / "training_summary.json").read_text())["mfu"] == pytest.approx(expected, rel=1e-12)
    peaks = {r["peak_flops"] for r in timed}
    monkeypatch.setattr(train_module, "measured_cpu_peak_flops", lambda *args: 1e15)  # another machine's peak
    train(config)  # the run is complete: evaluated and written again, no step trained
    summary = json.loads((run_dir / "training_summary.json").read_text())
    assert summary["mfu"] == pytest.approx(expected, rel=1e-12)
    # the peak it names is the one its steps were measured against, not the rerun's (the card's "of X TFLOP/s")
    assert len(peaks) == 1 and summary["peak_flops"] == peaks.pop() != 1e15 and summary["peak_flops_range"] is None


def test_sessions_that_measured_different_peaks_are_named_with_their_range():
    """Two sessions of one run, each step's MFU by its own session's peak: no single peak is the figure's
    denominator, so the summary names the range (the card then says so) instead of the last session's peak."""
    from hf_gpt_custom.model_cards.card import _peak_named
    from hf_gpt_custom.training.run_log import summarize_train_steps

    records = [{"kind": "train", "step": step, "loss": 1.0, "tokens_per_s": 100.0, "step_time_s": 1.0,
                "mfu": 0.1, "peak_flops": peak} for step, peak in ((2, 1.36e11), (3, 1.36e11), (4, 1.14e11))]
    steps = summarize_train_steps(records)
    assert steps["peak_flops"] is None and steps["peak_flops_range"] == [1.14e11, 1.36e11]
    assert _peak_named(steps) == " (each session's steps of its own measured peak, 0.114–0.136 TFLOP/s)"
    assert summarize_train_steps(records[:2])["peak_flops"] == 1.36e11
    assert summarize_train_steps(records, peak_flops=2e11)["peak_flops"] == 2e11  # a stated peak: all restated by it


def test_a_validation_split_holding_most_of_the_text_is_warned_about(make_config, tmp_path, shakespeare_path,
                                                                    shakespeare_tokenizer_dir, caplog):
    """val_fraction counts documents: a folder of a short and a long file held out the long one under
    text_sample_by=document (85% of the tokens in the newuser5 walk), and nothing said so. Reference: the blocks
    counted by hand from the packed splits."""
    import logging

    from transformers import AutoTokenizer

    text = shakespeare_path.read_text(encoding="utf-8")
    folder = tmp_path / "two_files"
    folder.mkdir()
    (folder / "a_short.txt").write_text(text[:3000], encoding="utf-8")
    (folder / "b_long.txt").write_text(text[3000:40000], encoding="utf-8")
    tokenizer = AutoTokenizer.from_pretrained(str(shakespeare_tokenizer_dir))
    config = make_config(f"dataset={folder}", "text_sample_by=document", "val_fraction=0.1", "val_holdout=tail",
                         f"data_cache_dir={tmp_path / 'cache'}")
    with caplog.at_level(logging.WARNING):
        data = prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    share = len(data.val) / (len(data.train) + len(data.val))
    assert share > 0.8  # the long file, held out
    assert (f"validation holds {100 * share:.0f}% of the text ({len(data.val)} of {len(data.train) + len(data.val)} "
            "blocks): val_fraction=0.1 holds out whole documents, 1 of 2 (the share rounded up to a whole document"
            ) in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # from the cache too
        prepare_datasets(config, tokenizer, shakespeare_tokenizer_dir)
    assert "validation holds" in caplog.text
    caplog.clear()
    by_paragraph = make_config(f"dataset={folder}", "text_sample_by=paragraph", "val_fraction=0.1",
                               f"data_cache_dir={tmp_path / 'cache'}")
    with caplog.at_level(logging.WARNING):
        data = prepare_datasets(by_paragraph, tokenizer, shakespeare_tokenizer_dir)
    assert len(data.val) / (len(data.train) + len(data.val)) < 0.2 and "validation holds" not in caplog.text


def test_init_from_a_folder_whose_config_asks_for_tuples_trains_and_validates(make_config, tmp_path,
                                                                              shakespeare_tokenizer_dir):
    """A converted folder now carries config.json's return_dict=false: the training step and the validation loop read
    the outputs by name and failed ('tuple' object has no attribute 'loss': the roundreview18 hunt). Reference:
    transformers' GPT-2 with the same weights, its loss read with return_dict=True."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    reference = GPT2LMHeadModel(GPT2Config(vocab_size=512, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, return_dict=False)).eval()
    reference.save_pretrained(tmp_path / "tuples")
    config = make_config(f"init_from={tmp_path / 'tuples'}", "max_steps=1", "warmup_steps=0", run_name="tuples",
                         with_model_section=False)
    run_dir = train(config)
    reference.config.return_dict = True  # transformers 5's GPT-2 itself fails with return_dict=False in its config
    first_loss = json.loads((run_dir / "run_log.jsonl").read_text().splitlines()[0])["loss"]
    assert first_loss == pytest.approx(_first_batch_loss(reference, config, shakespeare_tokenizer_dir), abs=1e-5)
    assert json.loads((run_dir / "training_summary.json").read_text())["final_val_loss"] > 0


def test_weights_saved_into_final_since_are_kept_by_a_rerun_and_refused_by_export(make_config, tmp_path, capfd):
    """A merged adapter saved into final/ (save_pretrained keeps its manifest current): export gave those weights the
    trained ones' figures and loss curve in the card, and a rerun of the same command rewrote final/ and deleted
    them (the crossfeature hunt). The summary records the weights it is of; the rerun keeps the user's beside."""
    from transformers import AutoModelForCausalLM

    import hf_gpt_custom  # noqa: F401
    from hf_gpt_custom.hub import export_folder
    from hf_gpt_custom.manifest import weights_fingerprint

    config = make_config("max_steps=2", "eval_interval=2", "warmup_steps=1")
    run_dir = train(config)
    summary = json.loads((run_dir / "training_summary.json").read_text())
    trained = weights_fingerprint(run_dir / "final")
    assert summary["final_weights_sha256"] == trained
    model = AutoModelForCausalLM.from_pretrained(run_dir / "final")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01)
    model.save_pretrained(run_dir / "final")
    mine = weights_fingerprint(run_dir / "final")
    assert mine != trained
    with pytest.raises(UserError, match=r"final holds other weights than this run's training wrote there"):
        export_folder(run_dir, tmp_path / "export")
    assert not (tmp_path / "export").exists()

    capfd.readouterr()
    train(config)  # the same command again: the run is complete, final/ is written again
    kept = list(run_dir.glob("final.edited_*"))
    assert len(kept) == 1 and weights_fingerprint(kept[0]) == mine
    assert weights_fingerprint(run_dir / "final") == trained
    assert f"final/ held other weights than this run wrote (saved into it since training); they are kept in {kept[0]}" \
        in capfd.readouterr().out
    export_folder(run_dir, tmp_path / "export")  # the run's own weights again
    train(config)  # and a rerun over the run's own final/ keeps nothing aside
    assert list(run_dir.glob("final.edited_*")) == kept and weights_fingerprint(run_dir / "final") == trained
    assert "final/ held other weights" not in capfd.readouterr().out
