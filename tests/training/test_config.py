"""TrainConfig loading: YAML + key=value overrides by declared type, errors that name the key, shipped configs."""

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from hf_gpt_custom.training.config import REPO_ROOT, TrainConfig, load_train_config, save_train_config

CONFIGS = REPO_ROOT / "training" / "configs"
SMOKE = CONFIGS / "smoke.yaml"


def test_overrides_are_converted_by_declared_type():
    config = load_train_config(SMOKE, [
        "max_steps=200", "learning_rate=6e-4", "compile=true", "eval_batches=null", "benchmark_shots=0,1,5",
        "benchmark_tasks=[lambada, piqa]", "model.n_layer=4", "model.resid_pdrop=0.0", "run_name=other",
    ])
    assert config.max_steps == 200 and isinstance(config.max_steps, int)
    assert config.learning_rate == 6e-4 and isinstance(config.learning_rate, float)
    assert config.compile is True
    assert config.eval_batches is None
    assert config.benchmark_shots == [0, 1, 5]
    assert config.benchmark_tasks == ["lambada", "piqa"]
    assert config.model == {"n_layer": 4, "n_head": 2, "n_embd": 32, "resid_pdrop": 0.0}
    assert config.run_name == "other" and config.run_dir == Path("runs/other")


@pytest.mark.parametrize("override, message", [
    ("max_step=3", "unknown training config key 'max_step'; did you mean 'max_steps'?"),
    ("task.format=pair", "unknown training config key 'task.format'; a `task:` section is a fine-tuning config: run it "
                         "with `hf-gpt-custom finetune`"),
    ("max_steps=ten", "max_steps='ten' is not a valid int"),
    ("block_size=0", "block_size=0 must be >= 2"),
    ("block_size=1", "block_size=1 must be >= 2: each token is trained to predict the next one"),
    ("grad_clip=nan", "grad_clip=nan is not a finite number"),
    ("learning_rate=inf", "learning_rate=inf is not a finite number"),
    ("weight_decay=nan", "weight_decay=nan is not a finite number"),
    ("adam_eps=-inf", "adam_eps=-inf is not a finite number"),
    ("adam_eps=0", "adam_eps=0.0 must be > 0, e.g. adam_eps=1e-8"),  # 0/0 on every weight without a gradient
    ("peak_flops=inf", "peak_flops=inf is not a finite number"),
    ("val_holdout=last", "val_holdout: unknown value 'last'"),
    ("val_split=validation", "val_split='validation' names a split of a Hub dataset, but dataset="),
    ("val_dataset=../missing/valid.txt", "val_dataset='../missing/valid.txt' not found"),
    ("learning_rate=-1", "learning_rate=-1.0 must be > 0"),
    ("mixed_precision=bf61", "mixed_precision: unknown value 'bf61'; did you mean 'bf16'?"),
    ("benchmark_tasks=lambada,hellaswg", "benchmark_tasks: unknown value 'hellaswg'; did you mean 'hellaswag'?"),
    ("benchmark_shots=0,-1", "benchmark_shots contains -1"),
    ("model.n_layr=4", "unknown model key 'model.n_layr'; did you mean 'model.n_layer'?"),
    # the generic names GPTCustomConfig takes in Python (attribute_map), named with the field a YAML takes
    ("model.rms_norm_eps=1e-5", "model.rms_norm_eps is transformers' generic name of model.layer_norm_epsilon; the "
                                "model section takes the field: write layer_norm_epsilon: 1e-05"),
    ("model.hidden_size=64", "generic name of model.n_embd; the model section takes the field: write n_embd: 64"),
    ("model.n_embd=33", "n_embd=33 must be divisible by n_head=2"),
    ("warmup_steps=50", "warmup_steps=50 exceeds max_steps=20"),
    ("compile=maybe", "compile='maybe' is not a valid bool"),
    ("compile_memory_budget=0", "compile_memory_budget=0.0 must be in (0, 1] or null"),
    ("compile_memory_budget=1.5", "compile_memory_budget=1.5 must be in (0, 1] or null"),
    ("compile_memory_budget=0.5", "compile_memory_budget=0.5 applies to a compiled step only; set compile=true"),
    ("max_steps", "override 'max_steps' is not key=value"),
    ("model.n_positions=32", "block_size=64 exceeds model.n_positions=32"),
])
def test_bad_keys_and_values_fail_at_start_up_naming_the_key(override, message):
    with pytest.raises(ValueError) as err:
        load_train_config(SMOKE, [override])
    assert message in str(err.value)


def test_a_hub_validation_split_that_is_the_training_split_is_refused():
    """val_split=train beside dataset_split=train (both Hub splits) was taken: validation then scored the documents
    the model trains on (the dataread hunt). Another split is taken."""
    for val_split in ("train", "train[:5%]", "validation+train"):  # the same split, a part of it, it among others
        with pytest.raises(ValueError, match=rf"val_split='{re.escape(val_split)}' reads documents of the split "
                                             r"training reads \(dataset_split='train'\), so validation would score"):
            load_train_config(SMOKE, ["dataset=someone/corpus", f"val_split={val_split}"])
    assert load_train_config(SMOKE, ["dataset=someone/corpus", "val_split=validation"]).val_split == "validation"
    # two slices of one split may be disjoint (datasets' own way of making a validation split): not judged
    assert load_train_config(SMOKE, ["dataset=someone/corpus", "dataset_split=train[:90%]",
                                     "val_split=train[90%:]"]).val_split == "train[90%:]"
    # datasets reads "all" as every split joined (builder._build_single_dataset; Split.ALL): it holds validation too
    with pytest.raises(ValueError, match=r"val_split='validation' reads documents of the split training reads "
                                         r"\(dataset_split='all'\)"):
        load_train_config(SMOKE, ["dataset=someone/corpus", "dataset_split=all", "val_split=validation"])


def test_two_benchmark_files_with_one_task_name_are_refused_at_config_load(tmp_path):
    """Was refused only by the eval stage, after the whole training run."""
    mine = tmp_path / "my_copa.yaml"  # another prompt, the same `task:` name as the built-in copa
    mine.write_text(f"include: {REPO_ROOT / 'eval' / 'tasks' / 'copa.yaml'}\ndoc_to_text: 'Premise: {{{{premise}}}}'\n")
    with pytest.raises(ValueError, match=rf"tasks copa, {mine} are all named copa \(their `task:` field\)"):
        load_train_config(SMOKE, [f"benchmark_tasks=[copa, {mine}]"])
    mine.write_text(mine.read_text() + "task: my_copa\n")
    assert load_train_config(SMOKE, [f"benchmark_tasks=[copa, {mine}]"]).benchmark_tasks == ["copa", str(mine)]


def test_unknown_yaml_key_is_rejected_with_a_suggestion(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(SMOKE.read_text() + "lerning_rate: 0.1\n")
    with pytest.raises(ValueError, match="unknown training config key 'lerning_rate'; did you mean 'learning_rate'"):
        load_train_config(path, [])


def test_missing_config_file_and_dataset_are_named(tmp_path, monkeypatch):
    from hf_gpt_custom.training.config import REPO_ROOT

    with pytest.raises(FileNotFoundError, match=rf"nope.yaml not found \(looked in .*\); pass a YAML file, e.g. "
                                                rf"{REPO_ROOT / 'training/configs/smoke.yaml'}"):
        load_train_config(tmp_path / "nope.yaml", [])
    from hf_gpt_custom.training.finetune_config import load_finetune_config

    with pytest.raises(FileNotFoundError, match=rf"e.g. {REPO_ROOT / 'training/configs/finetune_boolq.yaml'}"):
        load_finetune_config(tmp_path / "nope.yaml", [])
    with pytest.raises(ValueError, match=rf"training config {tmp_path} is a folder; pass a YAML file"):
        load_train_config(tmp_path, [])
    # from another folder, the repository's own configs are found as its data paths are (it suggested the very path
    # it had just not found)
    monkeypatch.chdir(tmp_path)
    assert load_train_config("training/configs/smoke.yaml", []).run_name == load_train_config(SMOKE, []).run_name
    with pytest.raises(FileNotFoundError, match="dataset='../missing/corpus.txt' not found"):
        load_train_config(SMOKE, ["dataset=../missing/corpus.txt"])


def test_dataset_path_resolves_from_any_working_directory(tmp_path, monkeypatch, shakespeare_path):
    monkeypatch.chdir(tmp_path)
    config = load_train_config(SMOKE, [])
    assert Path(config.dataset) == shakespeare_path.resolve()


def test_hub_names_are_kept_as_names():
    config = load_train_config(SMOKE, ["dataset=HuggingFaceFW/fineweb-edu", "dataset_config=sample-10BT"])
    assert config.dataset == "HuggingFaceFW/fineweb-edu"


def test_resolved_config_round_trips_through_yaml(tmp_path):
    config = load_train_config(SMOKE, ["max_steps=7", "model.n_layer=3"])
    save_train_config(config, tmp_path / "config.yaml")
    # a run folder's config.yaml names the folder it is in (test_config_yaml): out_dir aside, the same config
    assert load_train_config(tmp_path / "config.yaml", []) == dataclasses.replace(config, out_dir=str(tmp_path))


@pytest.mark.parametrize("name", ["smoke.yaml", "shakespeare.yaml", "shakespeare-gpu.yaml", "gpt2-124m.yaml"])
def test_shipped_configs_load(name):
    config = load_train_config(CONFIGS / name, [])
    assert isinstance(config, TrainConfig)


def test_shakespeare_config_is_the_main_job():
    config = load_train_config(CONFIGS / "shakespeare.yaml", [])
    assert config.tokenizer is None and config.dataset.endswith("tinyshakespeare/input.txt")
    assert set(config.benchmark_tasks) == {"lambada", "hellaswag", "piqa", "arc_easy", "arc_challenge", "winogrande",
                                           "copa", "boolq", "openbookqa", "wikitext", "triviaqa"}
    assert config.benchmark_shots == [0, 1, 5]


def test_gpt2_124m_config_follows_the_gpt3_small_recipe():
    from hf_gpt_custom.training.model_section import build_model_config

    config = load_train_config(CONFIGS / "gpt2-124m.yaml", [])
    tokens_per_step = config.batch_size * config.block_size * config.gradient_accumulation_steps
    assert tokens_per_step == 524_288  # ~0.5M tokens, GPT-3 Table 2.1
    assert (config.block_size, config.learning_rate, config.weight_decay, config.mixed_precision) == (1024, 6e-4, 0.1, "bf16")
    model_config = build_model_config(config, vocab_size=50257, eos_token_id=50256)  # GPT-2's tokenizer
    assert (model_config.n_layer, model_config.n_head, model_config.n_embd, model_config.n_positions) == (12, 12, 768, 1024)
    # 50,257 tokens predicted (it said vocab_size 50,304: 47 logit columns no token has), 50,304 rows for the matmuls
    assert (model_config.vocab_size, model_config.padded_vocab_size) == (50257, 50304)
    from hf_gpt_custom import GPTCustomForCausalLM

    with torch.device("meta"):
        n_params = GPTCustomForCausalLM(model_config).num_parameters()
    d, layers = 768, 12  # by hand: embeddings, then per block 2 LayerNorms, attention and MLP (biases), then ln_f
    assert n_params == 50304 * d + 1024 * d + layers * (4 * d + (3 * d * d + 3 * d) + (d * d + d)
                                                         + (4 * d * d + 4 * d) + (4 * d * d + d)) + 2 * d
    assert f"{n_params:,} parameters" in (CONFIGS / "gpt2-124m.yaml").read_text()  # the figure its comment gives


@pytest.mark.parametrize("name, distributed_type", [
    ("one_gpu_bf16.yaml", "NO"), ("multi_gpu_ddp.yaml", "MULTI_GPU"), ("fsdp.yaml", "FSDP"),
])
def test_accelerate_config_files_are_valid_for_accelerate_launch(name, distributed_type):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    path = CONFIGS / "accelerate" / name
    config = load_config_from_file(str(path))
    assert isinstance(config, ClusterConfig)
    assert config.distributed_type.value == distributed_type and config.mixed_precision == "bf16"
    # What `accelerate launch --config_file` does with it before spawning: merge it into the launch arguments.
    args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    args, defaults, _ = _validate_launch_command(args)
    assert args.mixed_precision == "bf16" and args.num_processes == config.num_processes
    if distributed_type == "FSDP":
        assert args.use_fsdp and args.fsdp_transformer_layer_cls_to_wrap == "GPTCustomBlock"
        from hf_gpt_custom import GPTCustomForCausalLM

        assert "GPTCustomBlock" in GPTCustomForCausalLM._no_split_modules


def test_yaml_nan_and_inf_fail_validation(tmp_path):
    """YAML's .nan/.inf arrive as floats, not strings: the check must be on the value, not on the parsing."""
    for line, name in (("grad_clip: .nan", "grad_clip"), ("learning_rate: .inf", "learning_rate"),
                       ("weight_decay: .nan", "weight_decay")):
        path = tmp_path / f"{name}.yaml"
        path.write_text(SMOKE.read_text().replace("learning_rate: 3.0e-3\n", "") + line + "\n")  # a key once
        with pytest.raises(ValueError, match=f"{name}=(nan|inf) is not a finite number"):
            load_train_config(path, [])


def test_every_setting_has_help_and_says_whether_it_changes_training():
    import dataclasses

    from hf_gpt_custom.training.config import setting_help, settings_that_do_not_change_training, training_settings

    for field in dataclasses.fields(TrainConfig):
        assert isinstance(field.metadata.get("changes_training"), bool), field.name
        help_text = field.metadata.get("help")
        assert isinstance(help_text, str) and help_text and "\n" not in help_text, field.name
    assert list(setting_help()) == [field.name for field in dataclasses.fields(TrainConfig)]
    speed_only = settings_that_do_not_change_training()
    # what a resume may change (speed, saving, logging, evaluation) vs what it may not (the recipe, data, model)
    assert {"num_proc", "torch_threads", "log_with", "checkpoint_interval", "keep_checkpoints", "eval_interval",
            "resume_from_checkpoint", "compile", "benchmark_tasks"} <= speed_only
    assert not {"learning_rate", "batch_size", "gradient_accumulation_steps", "block_size", "max_steps",
                "warmup_steps", "min_lr_ratio", "seed", "dataset", "val_holdout", "model", "init_from"} & speed_only
    settings = training_settings(load_train_config(SMOKE, []))
    assert "learning_rate" in settings and "num_proc" not in settings


def test_local_validation_file_is_accepted_and_resolved(tmp_path, monkeypatch, shakespeare_path):
    (tmp_path / "valid.txt").write_text("Held-out text.\n\nAnother paragraph.\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    config = load_train_config(SMOKE, ["val_dataset=valid.txt", "val_holdout=random"])
    assert Path(config.val_dataset) == (tmp_path / "valid.txt").resolve()
    with pytest.raises(ValueError, match="val_holdout='tail' splits the training documents, but validation comes "
                                         "from val_dataset"):
        load_train_config(SMOKE, [f"val_dataset={tmp_path / 'valid.txt'}", "val_holdout=tail"])


def test_validation_data_that_is_the_training_data_is_refused(tmp_path, shakespeare_path):
    """val_dataset naming the training file (or a copy of it, or a folder holding it) would score text the model
    trains on: validation loss = training loss, silently."""
    shakespeare_path = shakespeare_path.resolve()  # paths are stored resolved
    copy = tmp_path.resolve() / "copy" / "input.txt"
    copy.parent.mkdir()
    copy.write_bytes(shakespeare_path.read_bytes())
    for val_dataset, why in ((shakespeare_path, "is the training data itself"),
                             (shakespeare_path.parent, f"holds {shakespeare_path}, which dataset="),
                             (copy, f"holds {copy}, a byte-for-byte copy of {shakespeare_path}")):
        with pytest.raises(ValueError) as err:
            load_train_config(SMOKE, [f"val_dataset={val_dataset}"])
        assert f"val_dataset={val_dataset} {why}" in str(err.value)
        assert "so validation would score text the model trains on; name a separate validation file" in str(err.value)


def test_preset_is_expanded_in_one_place():
    from hf_gpt_custom import PRESETS

    from hf_gpt_custom.training.model_section import build_model_config, requested_architecture, split_preset

    config = load_train_config(CONFIGS / "gpt2-124m.yaml", ["model.n_layer=6"])
    preset, rest = split_preset(config.model)
    assert preset == "gpt2" and "preset" not in rest and config.model["preset"] == "gpt2"  # the config is not changed
    assert requested_architecture(config) == {**PRESETS["gpt2"], **rest}
    assert requested_architecture(config)["n_layer"] == 6  # an explicit key wins over the preset's
    built = build_model_config(config, vocab_size=50304, eos_token_id=50256)
    assert all(getattr(built, key) == value for key, value in requested_architecture(config).items())


@pytest.mark.parametrize("labels", ["[no,yes]", "[no, yes]", '["no","yes"]', "no,yes"])
def test_a_list_override_is_read_as_yaml_then_by_the_declared_type(tmp_path, labels):
    """`task.labels=[no,yes]` was split at the comma into '[no' and 'yes]'; read as YAML it is two labels, and
    no/yes stay strings (YAML 1.1 would make them booleans)."""
    from hf_gpt_custom.training.finetune_config import load_finetune_config

    (tmp_path / "config.json").write_text('{"model_type": "gpt_custom"}')  # a model folder's shape is checked at load
    (tmp_path / "model.safetensors").write_text("")
    config = load_finetune_config(None, [
        "dataset=someone/labelled", f"init_from={tmp_path}", "task.format=classification",
        "task.text_columns=[text]", f"task.labels={labels}",
    ])
    assert config.task["labels"] == ["no", "yes"] and config.task["text_columns"] == ["text"]


def test_override_values_take_the_yaml_meaning_and_the_declared_type(tmp_path):
    config = load_train_config(SMOKE, ["benchmark_tasks=[copa, piqa]", "benchmark_shots=[0, 1]", "seed=1e3",
                                       "run_name=007", "model.resid_pdrop=5e-2", "mixed_precision=no"])
    assert config.benchmark_tasks == ["copa", "piqa"] and config.benchmark_shots == [0, 1]
    assert config.seed == 1000 and config.run_name == "007" and config.mixed_precision == "no"
    assert config.model["resid_pdrop"] == 0.05 and isinstance(config.model["resid_pdrop"], float)
    path = tmp_path / "no.yaml"  # YAML 1.1 reads `no` as false: `mixed_precision: no` must stay the choice "no"
    path.write_text(SMOKE.read_text().replace("learning_rate: 3.0e-3\n", "mixed_precision: no\nlearning_rate: 1e-3\n"))
    loaded = load_train_config(path, [])
    assert loaded.mixed_precision == "no" and loaded.learning_rate == 1e-3
    with pytest.raises(ValueError, match=r"override benchmark_tasks='\[copa' is not a valid value"):
        load_train_config(SMOKE, ["benchmark_tasks=[copa"])


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_a_seed_outside_numpys_range_is_refused_at_load(seed):
    with pytest.raises(ValueError, match=rf"seed={seed} is outside 0..4294967295"):
        load_train_config(SMOKE, [f"seed={seed}"])


def test_a_missing_init_from_folder_is_named_at_load(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"init_from='runs/nope/final' not found in .*; give a model folder"):
        load_train_config(SMOKE, ["init_from=runs/nope/final"])
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(FileNotFoundError, match="init_from=.*a_file is not a folder"):
        load_train_config(SMOKE, [f"init_from={tmp_path / 'a_file'}"])


def test_the_model_fields_read_without_transformers_are_the_config_classs_fields_and_defaults():
    import subprocess
    import sys

    from hf_gpt_custom import GPTCustomConfig

    code = ("import sys, json; from hf_gpt_custom.training.model_section import architecture_defaults; "
            "print(json.dumps(architecture_defaults(), sort_keys=True)); print('transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    defaults, transformers_loaded = out.stdout.split("\n")[:2]
    assert transformers_loaded == "False"
    assert sorted(json.loads(defaults)) == sorted(GPTCustomConfig.__annotations__)
    built = GPTCustomConfig()  # head_dim and n_kv_head are derived on construction; their declared default is None
    declared = {name: getattr(built, name) for name in GPTCustomConfig.__annotations__}
    declared.update(head_dim=None, n_kv_head=None)
    assert json.loads(defaults) == declared


@pytest.mark.parametrize("argv, message", [
    (["train", "nonexistent.yaml"], "training config nonexistent.yaml not found"),
    (["train", str(SMOKE), "bogus=1"], "unknown training config key 'bogus'"),
    (["train", str(SMOKE), "model.n_layr=4"], "unknown model key 'model.n_layr'; did you mean 'model.n_layer'?"),
    (["train", str(SMOKE), "model.n_embd=33"], "n_embd=33 must be divisible by n_head=2; try n_embd=32"),
    (["train", str(SMOKE), "model.activation_function=gelu_neww"], "activation_function='gelu_neww' is not "
                                                                      "supported; did you mean 'gelu_new'?"),
    (["train", str(SMOKE), "model.preset=llama-small", "model.n_kv_head=3"], "n_head=2 must be divisible by "
                                                                              "n_kv_head=3"),
    (["train", str(SMOKE), "model.n_positions=63"], "block_size=64 exceeds model.n_positions=63"),
    (["run", str(SMOKE), "model.attn_pdrop=1.5"], "attn_pdrop=1.5 must be a dropout probability in [0, 1)"),
    (["train", str(SMOKE), "seed=-5"], "seed=-5 is outside 0..4294967295"),
    (["train", str(SMOKE), "init_from=runs/nope/final"], "init_from='runs/nope/final' not found"),
    (["train", str(SMOKE), "--init_from", "runs/nope/final"], "init_from='runs/nope/final' not found"),
    (["finetune", str(CONFIGS / "finetune_boolq.yaml"), "init_from=."], "has no config.json; pass a folder written by save_pretrained"),
    (["finetune", "nonexistent.yaml"], "training config nonexistent.yaml not found"),
    (["run", "nonexistent.yaml"], "run config nonexistent.yaml not found"),
    (["run", str(SMOKE), "max_step=3"], "unknown training config key 'max_step'"),
    (["train", str(SMOKE), "log_interval=0"], "log_interval=0 must be >= 1"),
    (["train", str(SMOKE), "tokenizer_vocab_size=100"], "tokenizer_vocab_size=100 is too small"),
    (["train", str(SMOKE), "run_name=../../escape"], "run_name='../../escape' must be a folder name under runs/"),
], ids=["missing", "bad_key", "bad_model_key", "model_value", "model_choice", "preset_and_value", "n_positions",
        "run_model_value", "seed", "init_from", "init_from_flag", "init_from_not_a_model", "finetune", "run", "run_key",
        "log_interval", "tokenizer_vocab_size", "run_name"])
def test_a_config_error_is_reported_before_torch_is_imported(tmp_path, argv, message):
    """Was 9-10 s: the trainer's imports (torch, accelerate, transformers) loaded before the config was read."""
    import subprocess
    import sys

    code = ("import sys; from hf_gpt_custom.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as exit:\n"
            "    print(exit.code, 'torch' in sys.modules, 'transformers' in sys.modules)")
    completed = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                               cwd=tmp_path)
    assert completed.stdout.split() == ["2", "False", "False"], completed.stderr[-2000:]
    assert message in completed.stderr and len(completed.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # nothing was written


@pytest.mark.parametrize("command", ["train", "finetune", "run"])
def test_each_training_command_says_in_its_help_that_it_continues_a_run_folder(command, capsys):
    from hf_gpt_custom.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--start_over" in text and "pass --start_over" in text
    assert ("continued from its latest one when its settings match" in text if command != "run"
            else "resume training from its latest checkpoint" in text)


def test_the_gpu_recipe_loads_validates_and_trains_two_steps_on_the_cpu(make_config, tmp_path):
    """training/configs/shakespeare-gpu.yaml is scored like the CPU recipe (same documents, tail split) and is a
    ~11M-parameter model; its GPU figures come from a GPU (gpu_session.sh). Two steps on the CPU prove it runs end to
    end."""
    from hf_gpt_custom.training.model_section import build_model_config
    from hf_gpt_custom.training.train import train

    gpu, cpu = (load_train_config(CONFIGS / name, []) for name in ("shakespeare-gpu.yaml", "shakespeare.yaml"))
    for key in ("dataset", "text_sample_by", "val_fraction", "val_holdout", "tokenizer", "benchmark_tasks",
                "benchmark_shots"):
        assert getattr(gpu, key) == getattr(cpu, key), key
    # the settings of the run its figure comes from (benchmarks/results/gpu_recipe_sweep.md: h100b_wd2, 2.0821
    # bits/byte on an H100), 16,384 tokens a step
    assert (gpu.mixed_precision, gpu.block_size, gpu.batch_size, gpu.model["resid_pdrop"], gpu.weight_decay,
            gpu.max_steps, gpu.tokenizer_vocab_size, gpu.shift_block_boundaries) == (
        "auto", 512, 32, 0.3, 2.0, 600, 2048, False)
    model_config = build_model_config(gpu, vocab_size=gpu.tokenizer_vocab_size, eos_token_id=0)
    from hf_gpt_custom import GPTCustomForCausalLM
    with torch.device("meta"):
        n_params = GPTCustomForCausalLM(model_config).num_parameters()
    assert n_params == 11_433_984  # the figure its comment gives

    base = make_config()  # the session's tokenizer and data cache, a tmp run folder
    config = load_train_config(CONFIGS / "shakespeare-gpu.yaml", [
        f"out_dir={tmp_path / 'gpu_recipe'}", f"tokenizer={base.tokenizer}", f"data_cache_dir={base.data_cache_dir}",
        "cpu=true", "compile=false", "max_steps=2", "warmup_steps=1", "batch_size=2", "eval_batches=1",
        "log_with=none", "benchmark_tasks=[]",
    ])
    run_dir = train(config)
    summary = json.loads((run_dir / "training_summary.json").read_text())
    assert summary["steps"] == 2 and summary["config"]["mixed_precision"] == "no"  # auto is fp32 on a CPU


def test_no_shots_for_the_benchmarks_is_refused_before_training_not_at_the_eval_stage():
    with pytest.raises(ValueError, match=r"benchmark_shots is empty; give the K values to evaluate"):
        load_train_config(SMOKE, ["benchmark_tasks=copa", "benchmark_shots=[]"])
    assert load_train_config(SMOKE, ["benchmark_tasks=[]", "benchmark_shots=[]"]).benchmark_shots == []
    with pytest.raises(ValueError, match=r"benchmark_shots lists 0 more than once; give each once"):
        load_train_config(SMOKE, ["benchmark_tasks=copa", "benchmark_shots=0,1,0"])
    with pytest.raises(ValueError, match=r"benchmark_tasks lists copa more than once"):
        load_train_config(SMOKE, ["benchmark_tasks=copa,copa", "benchmark_shots=0"])
    # one K alone is the list of it, as one task name is
    assert load_train_config(SMOKE, ["benchmark_tasks=copa", "benchmark_shots=5"]).benchmark_shots == [5]


# --- found by a new user's trial: each stopped the run only after work had started, or not at all ---------------------


@pytest.mark.parametrize("name", ["log_interval", "eval_interval", "keep_checkpoints"])
def test_an_interval_or_count_of_zero_is_refused_at_load_naming_the_key(name):
    """log_interval=0 passed and crashed with ZeroDivisionError (step % log_interval) after training had started."""
    with pytest.raises(ValueError, match=rf"^{name}=0 must be >= 1, e.g. {name}=\d+$"):
        load_train_config(SMOKE, [f"{name}=0"])


def test_a_tokenizer_vocab_size_below_the_byte_level_minimum_is_refused_at_load():
    """tokenizer_vocab_size=100 passed validation and failed at the tokenizer stage, after the run folder's earlier
    outputs were moved aside. The minimum is the tokenizer trainer's own rule: 256 bytes + <|endoftext|>."""
    from hf_gpt_custom.tokenizer_training import smallest_vocab_size

    assert smallest_vocab_size() == 257
    for size in (100, 256):
        expected = rf"tokenizer_vocab_size={size} is too small .*; give tokenizer_vocab_size >= 257"
        with pytest.raises(ValueError, match=expected):
            load_train_config(SMOKE, ["tokenizer=null", f"tokenizer_vocab_size={size}"])
    assert load_train_config(SMOKE, ["tokenizer=null", "tokenizer_vocab_size=257"]).tokenizer_vocab_size == 257


@pytest.mark.parametrize("run_name", ["", " ", "../../escape", "a/b", "a\\b", "..", "."])
def test_a_run_name_that_is_not_one_folder_under_runs_is_refused(run_name):
    """run_name="" made runs/ itself the run folder, and ../../escape wrote outside runs/."""
    with pytest.raises(ValueError, match=r"must be a folder name under runs/ .* set out_dir=<folder>"):
        load_train_config(SMOKE, [f"run_name={run_name}"])


def test_a_run_name_with_dots_inside_is_still_a_folder_under_runs():
    assert load_train_config(SMOKE, ["run_name=gpt2.v1..b"]).run_dir == Path("runs/gpt2.v1..b")


def test_list_items_given_as_comma_text_are_stripped_like_evals_tasks(tmp_path):
    """benchmark_tasks="copa, piqa" was refused ("unknown value ' piqa'") while `eval --tasks "copa, piqa"` ran."""
    config = load_train_config(SMOKE, ["benchmark_tasks=copa, piqa", "benchmark_shots= 0, 1"])
    assert config.benchmark_tasks == ["copa", "piqa"] and config.benchmark_shots == [0, 1]
    written = tmp_path / "run.yaml"
    written.write_text(SMOKE.read_text() + "\nbenchmark_tasks: copa, piqa\n")
    assert load_train_config(written).benchmark_tasks == ["copa", "piqa"]


def test_settings_without_effect_are_the_ones_the_data_and_tokenizer_leave_unread(tmp_path):
    """Which settings a run never reads, by its data and tokenizer; the data loader's own rules are the reference:
    text_sample_by cuts .txt files only (corpus.load_text_dataset), text_field names a column of tabular files."""
    from hf_gpt_custom.training.config_checks import settings_without_effect

    text, rows = tmp_path / "train.txt", tmp_path / "rows.jsonl"
    text.write_text("To be, or not to be\n", encoding="utf-8")
    rows.write_text('{"text": "a"}\n', encoding="utf-8")
    plain = settings_without_effect(load_train_config(None, [f"dataset={text}"]))
    assert "text_field" in plain and "text_sample_by" not in plain and "tokenizer_vocab_size" not in plain
    assert {"dataset_config", "dataset_split", "dataset_revision"} <= plain.keys()
    tabular = settings_without_effect(load_train_config(None, [f"dataset={rows}", f"val_dataset={text}"]))
    assert "text_sample_by" not in tabular and "text_field" not in tabular  # the validation file is plain text
    assert tabular["val_fraction"] == "validation comes from val_dataset"
    assert "text_sample_by" in settings_without_effect(load_train_config(None, [f"dataset={rows}"]))
    hub = settings_without_effect(load_train_config(None, ["dataset=someone/corpus", "val_split=validation"]))
    assert {"text_sample_by", "val_fraction", "val_holdout"} <= hub.keys() and "dataset_split" not in hub
    assert "val_fraction" not in plain
    # a stream holds out its first 1,000 documents (data.py); val_fraction=0.5 held out 1,000 of 4,000 in silence
    stream = settings_without_effect(load_train_config(None, [f"dataset={text}", "streaming=true"]))
    assert stream["val_fraction"].startswith("a stream holds out its first 1,000 documents")


def test_a_run_folder_inside_its_data_folder_is_refused(tmp_path):
    """The run wrote its tokenizer into out_dir and then read it back as data: `mixes file kinds (json, text)` on the
    very first run, naming neither the cause nor the fix."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("To be, or not to be\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"the run folder {corpus / 'run'} is inside the data folder {corpus}, which "
                                        r"is read whole"):
        load_train_config(None, [f"dataset={corpus}", f"out_dir={corpus / 'run'}"])
    load_train_config(None, [f"dataset={corpus}", f"out_dir={tmp_path / 'run'}"])  # beside it: fine


def test_a_tokenizer_saved_inside_its_corpus_folder_is_refused(tmp_path):
    from hf_gpt_custom.tokenizer_training import train_tokenizer

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("To be, or not to be\n" * 20, encoding="utf-8")
    with pytest.raises(ValueError, match=rf"the output folder {corpus / 'tok'} is inside the corpus folder {corpus}"):
        train_tokenizer(str(corpus), corpus / "tok", vocab_size=300, show_progress=False)
    assert not (corpus / "tok").exists()


def test_the_architecture_fields_without_effect_are_the_ones_the_model_never_reads():
    """Reference: the model itself. A field is without effect when changing it leaves every weight shape and the
    logits of the same weights unchanged."""
    import torch

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM
    from hf_gpt_custom.architecture import fields_without_effect
    from hf_gpt_custom.training.model_section import architecture_defaults

    cases = [{}, {"position_embedding_type": "sinusoidal"}, {"position_embedding_type": "rope"},
             {"mlp_type": "swiglu"}, {"mlp_type": "swiglu", "n_inner": 48}]
    changes = {"rope_theta": 500.0, "multiple_of": 8, "activation_function": "relu"}
    for case in cases:
        base = {"n_layer": 1, "n_head": 2, "n_embd": 32, "vocab_size": 50, "n_positions": 16, **case}
        unused = fields_without_effect({**architecture_defaults(), **base})
        input_ids = torch.randint(0, 50, (1, 9))
        for field, value in changes.items():
            torch.manual_seed(0)
            plain = GPTCustomForCausalLM(GPTCustomConfig(**base)).eval()
            changed = GPTCustomForCausalLM(GPTCustomConfig(**base, **{field: value})).eval()
            same_shapes = all(a.shape == b.shape for a, b in zip(plain.state_dict().values(),
                                                                 changed.state_dict().values()))
            if same_shapes:
                changed.load_state_dict(plain.state_dict())
                with torch.no_grad():
                    same_shapes = torch.equal(plain(input_ids).logits, changed(input_ids).logits)
            assert (field in unused) == same_shapes, (case, field)


@pytest.mark.parametrize("config_name, missing, command", [
    ("finetune_boolq.yaml", "init_from='runs/finetune_experiment/pretrain/final'",
     "`python -m benchmarks.finetune_experiment` makes it"),
    ("finetune_piqa.yaml", "runs/finetune_experiment/data/piqa_valid_labelled.jsonl",
     "`python -m benchmarks.finetune_experiment --data-only` makes it"),
])
def test_a_shipped_configs_missing_input_names_the_command_that_makes_it(config_name, missing, command, tmp_path,
                                                                         monkeypatch):
    """The fine-tuning YAMLs start from the experiment's folders; "not found; give an existing path" did not say
    where they come from."""
    from hf_gpt_custom.training.finetune_config import load_finetune_config
    from hf_gpt_custom.training.config_values import REPO_ROOT as root

    if (root / "runs" / "finetune_experiment").exists():
        pytest.skip("this checkout has run the experiment")
    monkeypatch.chdir(tmp_path)
    overrides = [] if "init_from" in missing else [f"init_from={tmp_path}"]
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=re.escape(missing) + r".*" + re.escape(command)):
        load_finetune_config(CONFIGS / config_name, overrides)


def test_the_trainer_names_table_is_the_code_and_each_side_names_a_real_setting():
    """docs/training.md's TrainingArguments table is TRAINING_ARGUMENTS_NAMES; each name on the left is a field of
    transformers' TrainingArguments (so a renamed field there shows here), and each key on the right one of ours."""
    import dataclasses
    import re

    from transformers import SchedulerType, TrainingArguments

    from hf_gpt_custom.training.config_values import TRAINING_ARGUMENTS_NAMES

    text = (Path(__file__).parents[2] / "docs" / "training.md").read_text()
    rows = dict(re.findall(r"^  \| `(\w+)` \| (.+?) \|$", text, flags=re.M))
    assert rows.pop("TrainingArguments") == "here"  # the header
    assert {name: ours.strip("`") for name, ours in rows.items()} == TRAINING_ARGUMENTS_NAMES
    trainer_fields = {field.name for field in dataclasses.fields(TrainingArguments)}
    ours = {field.name for field in dataclasses.fields(TrainConfig)}
    assert set(TRAINING_ARGUMENTS_NAMES) <= trainer_fields and not set(TRAINING_ARGUMENTS_NAMES) & ours
    schedules = {schedule.value for schedule in SchedulerType}
    for name, here in TRAINING_ARGUMENTS_NAMES.items():
        named = set(re.findall(r"\b[a-z0-9]+_[a-z0-9_]+\b", here)) - schedules if " " in here else {here.split("=")[0]}
        assert named and named <= ours, (name, here)


@pytest.mark.parametrize("override, message", [
    ("per_device_train_batch_size=4", "unknown training config key 'per_device_train_batch_size'; TrainingArguments' "
                                      "per_device_train_batch_size is batch_size=VALUE here; known keys"),
    ("bf16=true", "unknown training config key 'bf16'; TrainingArguments' bf16 is mixed_precision=bf16 here;"),
    ("max_grad_norm=0.5", "TrainingArguments' max_grad_norm is grad_clip=VALUE here;"),
])
def test_a_trainer_name_given_as_an_override_is_answered_with_ours(override, message):
    with pytest.raises(ValueError) as err:
        load_train_config(SMOKE, [override])
    assert message in str(err.value)


def test_the_shipped_configs_missing_text_is_named_with_where_it_comes_from(tmp_path, monkeypatch):
    """Without ../shared beside the checkout, the main job said only "not found ...; give an existing path or a Hub
    name" (the newcomer3 walk): the file and its source are named, as README gives them."""
    from hf_gpt_custom.training import config_values

    monkeypatch.setattr(config_values, "REPO_ROOT", tmp_path / "checkout")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"dataset='\.\./shared/data/tinyshakespeare/input\.txt' not found in .* \(it "
                                         r"is char-rnn's tiny Shakespeare: karpathy/char-rnn's data/tinyshakespeare/"
                                         r"input\.txt, put at \.\./shared/data/tinyshakespeare/input\.txt beside the "
                                         r"checkout\)"):
        config_values.resolve_local_path("dataset", "../shared/data/tinyshakespeare/input.txt")
