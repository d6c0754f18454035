"""The GPU recipe sweep's table numbers each recipe in the order it was swept, across reruns that keep earlier runs."""

import json

from benchmarks import gpu_recipe_report


def test_recipes_keep_their_numbers_when_the_earlier_runs_are_kept(tmp_path, monkeypatch):
    """The earlier file's runs are sorted by result: numbering the recipes by first appearance there swapped recipe 1
    and recipe 2 once a later recipe's run came first (the first H100 session's report)."""
    monkeypatch.setattr(gpu_recipe_report, "OUT", tmp_path)

    def run(name, base, bits):
        return {"run": name, "device": "GPU", "overrides": {}, "curve": [[100, bits]], "final_bits_per_byte": bits,
                "best_bits_per_byte": bits, "steps": 100, "training_seconds": 1.0, "wall_seconds": 2, "base": base}

    earlier = [run("later_recipe", "the second recipe", 2.1), run("first_recipe", gpu_recipe_report.FIRST_BASE, 2.3)]
    (tmp_path / "gpu_recipe_sweep.json").write_text(json.dumps({"runs": earlier}))  # as written before "recipes"
    empty = tmp_path / "call" / "results"
    empty.mkdir(parents=True)
    gpu_recipe_report.main(["--keep-earlier", "--base", "the third recipe", str(empty)])
    markdown = (tmp_path / "gpu_recipe_sweep.md").read_text()
    assert f"- recipe 1: {gpu_recipe_report.FIRST_BASE}\n- recipe 2: the second recipe\n" in markdown
    assert "| later_recipe | 2 |" in markdown and "| first_recipe | 1 |" in markdown
    saved = json.loads((tmp_path / "gpu_recipe_sweep.json").read_text())
    assert saved["recipes"] == [gpu_recipe_report.FIRST_BASE, "the second recipe"]
    # a second rerun keeps the order the file now records
    gpu_recipe_report.main(["--keep-earlier", str(empty)])
    assert f"- recipe 1: {gpu_recipe_report.FIRST_BASE}\n- recipe 2: the second recipe\n" in \
        (tmp_path / "gpu_recipe_sweep.md").read_text()


def test_overrides_include_settings_the_recipe_leaves_out(tmp_path, monkeypatch):
    """A run with shift_block_boundaries=true and LLaMA's block was listed with no overrides at all, beside the recipe
    as it is: only the recipe file's own keys were compared. Here the run's config.yaml is written from the recipe
    with the overrides applied by hand, as `hf-gpt-custom train` writes every setting and the model fields given."""
    import yaml

    recipe = yaml.safe_load(gpu_recipe_report.RECIPE.read_text())
    config = {**gpu_recipe_report._settings_defaults(), **recipe, "seed": recipe["seed"],
              "shift_block_boundaries": True, "weight_decay": recipe["weight_decay"] + 1.0, "mixed_precision": "bf16",
              "out_dir": "/tmp/elsewhere", "dataset": "/tmp/input.txt",
              "model": {**recipe["model"], "mlp_type": "swiglu", "norm_type": "rmsnorm"}}
    run_dir = tmp_path / "recipe_variant"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    (run_dir / "run_log.jsonl").write_text(
        json.dumps({"kind": "train", "step": 100, "step_time_s": 0.1}) + "\n"
        + json.dumps({"kind": "eval", "step": 100, "val_bits_per_byte": 2.1}) + "\n")
    row = gpu_recipe_report.collect(run_dir, "GPU")
    assert row["overrides"] == {"shift_block_boundaries": True, "weight_decay": recipe["weight_decay"] + 1.0,
                                "model.mlp_type": "swiglu",
                                "model.norm_type": "rmsnorm"}
