"""Helpers shared by test modules (a test module never imports another test module).

Fixtures live in the conftest.py files; these are plain functions and constants.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import torch
import yaml

# 2 layers, 32 wide: every code path, milliseconds per step (GPT2Config and GPTCustomConfig take the same fields).
TINY_GPT2 = dict(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=98, eos_token_id=98)
PROMPT = "ROMEO: what light"
NEW_TOKENS = 12

# One row per task × K × metric, as eval/report.py writes them. LAMBADA has two metrics at K=0 and the same metric
# at two K — exactly the case where K must not be merged away by the model-index grouping.
LAMBADA = {"path": "EleutherAI/lambada_openai", "name": "default", "split": "test"}  # from the task YAML
ARC_EASY = {"path": "allenai/ai2_arc", "name": "ARC-Easy", "split": "test"}
RESULT_ROWS = [
    {"task": "lambada", "dataset": LAMBADA, "num_fewshot": 0, "metric": "acc", "value": 0.125,
     "stderr": 0.0625, "n": 16, "higher_is_better": True, "n_truncated": 0},
    {"task": "lambada", "dataset": LAMBADA, "num_fewshot": 0, "metric": "perplexity", "value": 4321.98765,
     "stderr": None, "n": 16, "higher_is_better": False, "n_truncated": 0},
    {"task": "arc_easy", "dataset": ARC_EASY, "num_fewshot": 0, "metric": "acc_norm", "value": 0.3125,
     "stderr": 0.1197, "n": 16, "higher_is_better": True, "n_truncated": 0},
    {"task": "lambada", "dataset": LAMBADA, "num_fewshot": 3, "metric": "acc", "value": 0.1875,
     "stderr": 0.1008, "n": 16, "higher_is_better": True, "n_truncated": 2},
    {"task": "arc_easy", "dataset": ARC_EASY, "num_fewshot": 3, "metric": "acc_norm", "value": 0.25,
     "stderr": 0.1118, "n": 16, "higher_is_better": True, "n_truncated": 0},
]


def build_tiny_model_folder(folder: Path, shared_data_dir: Path, n_positions: int = 1024, vocab_size: int = 400) -> Path:
    """A transformers GPT-2 folder (2 layers, 32 wide) for the eval tests, with a byte-level BPE tokenizer trained
    here on the start of tiny Shakespeare plus ARC text and saved as a GPT-2 tokenizer, so nothing needs the Hub."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel

    folder.mkdir(parents=True, exist_ok=True)
    corpus = [(shared_data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:60_000]]
    corpus += (shared_data_dir / "arc" / "ARC-Easy-Test.jsonl").read_text(encoding="utf-8").splitlines()[:300]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=vocab_size, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save_model(str(folder))
    from transformers import GPT2TokenizerFast

    tokenizer = GPT2TokenizerFast.from_pretrained(
        str(folder), bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>"
    )
    tokenizer.model_max_length = n_positions
    tokenizer.save_pretrained(str(folder))
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=n_positions, n_embd=32, n_layer=2, n_head=4,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2LMHeadModel(config)
    # Larger-than-default weights so the random model has peaked, distinguishable distributions.
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.1) if parameter.dim() > 1 else None
    model.eval()
    model.save_pretrained(str(folder))
    return folder


def save_tiny_model(folder: Path, vocab_size: int, n_positions: int = 64, n_head: int = 4, seed: int | None = None,
                    **overrides):
    """Our model, 2 layers and 32 wide (eos = bos = token 0 unless overridden), saved to `folder`; returns the model.
    `seed` reseeds torch first; None keeps the caller's random state."""
    from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM

    config = GPTCustomConfig(**{"vocab_size": vocab_size, "n_positions": n_positions, "n_embd": 32, "n_layer": 2,
                                "n_head": n_head, "bos_token_id": 0, "eos_token_id": 0, **overrides})
    if seed is not None:
        torch.manual_seed(seed)
    model = GPTCustomForCausalLM(config).eval()
    model.save_pretrained(folder)
    return model


def save_tiny_base_model(folder: Path, tokenizer_dir: Path) -> Path:
    """A tiny pre-trained-shaped causal LM folder (2 layers, 32 wide, 64 positions, seed 0) with the tokenizer of
    `tokenizer_dir` as it ships beside a model, and its manifest: what fine-tuning starts from."""
    from hf_gpt_custom.manifest import write_manifest
    from hf_gpt_custom.training.workload import tokenizer_for_model

    tokenizer = tokenizer_for_model(tokenizer_dir, "<|endoftext|>", 64)
    save_tiny_model(folder, len(tokenizer), seed=0, bos_token_id=tokenizer.eos_token_id,
                    eos_token_id=tokenizer.eos_token_id)
    tokenizer.save_pretrained(folder)
    write_manifest(folder)
    return folder


def make_tiny_run(run_dir: Path, with_eval: bool = True, init_from: str | None = None, **settings) -> Path:
    """A finished run folder: final/ (tiny model + byte tokenizer), config.yaml, summary, loss curve, eval/.

    Paths are recorded absolute, as load_train_config stores them: the dataset is a file in a `tinyshakespeare`
    folder beside the run, the tokenizer was trained into <run>/tokenizer, packed data lives in a cache folder.
    `settings` override training settings (e.g. warmup_steps=0)."""
    import matplotlib

    from hf_gpt_custom.versions import scoring_code_sha256

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from hf_gpt_custom import GPTCustomTokenizerFast

    run_dir = Path(run_dir).absolute()
    dataset_file = run_dir.parent / "data" / "tinyshakespeare" / "input.txt"
    dataset_file.parent.mkdir(parents=True, exist_ok=True)
    dataset_file.write_text("ROMEO: what light through yonder window breaks\n", encoding="utf-8")
    # the 256 bytes + <|endoftext|>: a real tokenizer without training one, saved and loaded back from a local
    # folder as training does (that load is what adds is_local / local_files_only to tokenizer_config.json)
    GPTCustomTokenizerFast.bytes_only().save_pretrained(run_dir / "tokenizer")
    tokenizer = GPTCustomTokenizerFast.from_pretrained(run_dir / "tokenizer")
    model = save_tiny_model(run_dir / "final", len(tokenizer), seed=0, bos_token_id=tokenizer.eos_token_id,
                            eos_token_id=tokenizer.eos_token_id)
    tokenizer.save_pretrained(run_dir / "final")
    # Pickled trainer state, as Accelerate's save_state leaves it: must never reach an export.
    checkpoint = run_dir / "checkpoints" / "step_000010"
    checkpoint.mkdir(parents=True)
    torch.save({"step": 10}, checkpoint / "optimizer.bin")

    train_config = {
        "run_name": "tiny-shakespeare", "out_dir": str(run_dir), "seed": 1337,
        "dataset": str(dataset_file), "dataset_split": "train", "text_field": "text",
        "data_cache_dir": str(Path.home() / ".cache" / "hf_gpt_custom" / "packed"),
        "tokenizer": None, "tokenizer_vocab_size": 257, "model": {"n_layer": 2, "n_head": 4, "n_embd": 32},
        "init_from": init_from, "block_size": 64, "batch_size": 4, "max_steps": 10, "learning_rate": 0.0006,
        "min_lr_ratio": 0.1, "warmup_steps": 2,
        "benchmark_tasks": ["lambada", "arc_easy"], "benchmark_shots": [0, 3], "benchmark_limit": 16,
        **settings,
    }
    (run_dir / "config.yaml").write_text(yaml.safe_dump(train_config, sort_keys=False), encoding="utf-8")
    summary = {
        "run_name": "tiny-shakespeare", "config": train_config, "n_params": model.num_parameters(),
        "tokens_seen": 2560, "steps": 10, "wall_time_s": 4.5, "final_train_loss": 5.25, "final_val_loss": 5.5,
        "val_perplexity": math.exp(5.5), "val_bits_per_byte": 7.9, "tokens_per_s": 568.9, "mfu": 0.0004,
        "dataset": str(dataset_file), "tokenizer": str(run_dir / "tokenizer"),
        "data_cache": str(Path.home() / ".cache" / "hf_gpt_custom" / "packed" / "e0f59c7615c232ab04a4"),
        "loss_curve": "loss_curve.png",
    }
    (run_dir / "training_summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    figure, axis = plt.subplots(figsize=(3, 2))
    axis.plot(range(10), [5.6 - 0.04 * step for step in range(10)], label="train")
    figure.savefig(run_dir / "loss_curve.png")
    if with_eval:
        (run_dir / "eval").mkdir()
        results = {
            "model": str(run_dir / "final"),
            "config": {"tasks": ["lambada", "arc_easy"], "shots": [0, 3], "limit": 16, "seed": 1234, "batch_size": 16},
            "results": RESULT_ROWS,
            "scoring_code_sha256": scoring_code_sha256(),  # as every evaluation records it
        }
        (run_dir / "eval" / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
        (run_dir / "eval" / "table.md").write_text(f"Model: `{run_dir / 'final'}`\n", encoding="utf-8")
        figure.savefig(run_dir / "eval" / "shots_curve.png")
    plt.close(figure)
    return run_dir


def hash_folder(folder: Path) -> str:
    """sha256 over every path and file byte below `folder`: equal hashes mean nothing was changed."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


# Runs under the `python_without_project` fixture (tests/conftest.py); prints one JSON line.
REMOTE_LOAD_SCRIPT = r"""
import json, sys
import torch
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

folder = sys.argv[1]
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
base = AutoModel.from_pretrained(folder, trust_remote_code=True)
input_ids = tokenizer(sys.argv[2], return_tensors="pt").input_ids
with torch.no_grad():
    logits = model(input_ids).logits[0]
    generated = model.generate(input_ids, max_new_tokens=int(sys.argv[3]), do_sample=False)[0]
print(json.dumps({
    "classes": [type(obj).__module__ + "." + type(obj).__name__ for obj in (config, tokenizer, model, base)],
    "input_ids": input_ids[0].tolist(),
    "logits": logits.tolist(),
    "generated": generated.tolist(),
    "text": tokenizer.decode(generated),
}))
"""


def assert_export_matches_in_process(run_dir: Path, export_dir: Path, python_without_project) -> dict:
    """The export, loaded where hf_gpt_custom is not importable, gives the trained model's logits and greedy tokens.

    Returns the clean process's JSON result with this process's `input_ids`, `generated` and `tokenizer` added."""
    from hf_gpt_custom import GPTCustomForCausalLM, GPTCustomTokenizerFast

    tokenizer = GPTCustomTokenizerFast.from_pretrained(run_dir / "final")
    model = GPTCustomForCausalLM.from_pretrained(run_dir / "final").eval()
    input_ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(input_ids).logits[0]
        generated = model.generate(input_ids, max_new_tokens=NEW_TOKENS, do_sample=False)[0]

    remote = python_without_project(REMOTE_LOAD_SCRIPT, export_dir, PROMPT, NEW_TOKENS)
    torch.testing.assert_close(torch.tensor(remote["logits"]), logits, rtol=0, atol=1e-5)
    assert remote["generated"] == generated.tolist()
    return {**remote, "local_input_ids": input_ids[0].tolist(), "local_generated": generated, "tokenizer": tokenizer}


# --- tiny training runs ---------------------------------------------------------------------------------------------


def write_first_speeches(path: Path, source: Path, n_speeches: int = 30) -> Path:
    """The first `n_speeches` blank-line-separated paragraphs of `source` (tiny Shakespeare: 30 speeches are 4,058
    characters, a few dozen 32-token blocks), so a tiny run crosses epochs within a few dozen steps."""
    text = source.read_text(encoding="utf-8")
    path.write_text("\n\n".join(text.split("\n\n")[:n_speeches]) + "\n", encoding="utf-8")
    return path


def save_dropout_free_model(folder: Path, tokenizer_dir: Path, n_positions: int = 32, seed: int = 0) -> Path:
    """A 2-layer, 32-wide model without dropout for `init_from`: its training forward is a pure function of the
    weights, so a test can recompute a logged loss or gradient from the weights and the batch alone."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    save_tiny_model(folder, len(tokenizer), n_positions=n_positions, n_head=2, seed=seed, resid_pdrop=0.0,
                    embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=tokenizer.eos_token_id,
                    eos_token_id=tokenizer.eos_token_id)
    return folder


def batch_digest(input_ids: torch.Tensor) -> int:
    """The fingerprint run_log.jsonl records per micro-batch (`data_digests`): 48-bit BLAKE2b of the int64 ids."""
    return int.from_bytes(hashlib.blake2b(input_ids.to(torch.int64).numpy().tobytes(), digest_size=6).digest(), "little")


def train_records(run_dir: Path) -> list[dict]:
    """The "train" records of run_log.jsonl, in step order."""
    lines = (Path(run_dir) / "run_log.jsonl").read_text(encoding="utf-8").splitlines()
    return [record for record in map(json.loads, lines) if record["kind"] == "train"]


def packed_train_blocks(config) -> torch.Tensor:
    """(n_blocks, block_size) ids of the run's packed training set, read through the data pipeline's own cache."""
    from transformers import AutoTokenizer

    from hf_gpt_custom.training.data import prepare_datasets

    data = prepare_datasets(config, AutoTokenizer.from_pretrained(str(config.tokenizer)), config.tokenizer)
    return torch.tensor(data.train["input_ids"], dtype=torch.int64)


def randomize_(model: torch.nn.Module, std: float = 0.2) -> torch.nn.Module:
    """Every parameter random — biases and LayerNorms too — so a mis-mapped bias cannot hide behind a zero init."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, std)
    return model


def make_gpt2_pair(attn_implementation: str = "sdpa", seed: int = 0, **overrides):
    """(ours, reference) in eval mode with identical random weights."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_gpt_custom import GPTCustomForCausalLM
    from hf_gpt_custom.convert_gpt2 import from_gpt2_model

    torch.manual_seed(seed)
    fields = {**TINY_GPT2, **overrides}
    reference = GPT2LMHeadModel(GPT2Config(**fields, attn_implementation=attn_implementation))
    randomize_(reference).eval()
    return from_gpt2_model(reference, GPTCustomForCausalLM), reference


def tiny_run_overrides(out_dir, dataset, tokenizer_dir, data_cache_dir, run_name="tiny") -> list[str]:
    """A tiny CPU run on real text: 2 layers, 32 wide, 32-token blocks, 4 blocks per batch, 12 steps."""
    return [
        f"run_name={run_name}", f"out_dir={out_dir}", f"dataset={dataset}", f"tokenizer={tokenizer_dir}",
        f"data_cache_dir={data_cache_dir}", "model.n_layer=2", "model.n_head=2", "model.n_embd=32", "block_size=32",
        "batch_size=4", "max_steps=12", "warmup_steps=2", "learning_rate=3e-3", "eval_interval=6", "eval_batches=4",
        "checkpoint_interval=0", "log_with=none", "seed=1234",
    ]


# --- parity with transformers' own models (tests/hf_gpt_custom/test_parity_*.py) ------------------------------------


def padded_batch(vocab_size: int = 99) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), 3 rows of 19: row 0 left-padded (batched generation), row 1 right-padded
    (batched scoring), row 2 full."""
    input_ids = torch.randint(0, vocab_size, (3, 19))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :6] = 0
    attention_mask[1, -4:] = 0
    return input_ids, attention_mask


def row_position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Each real token's index among its row's real tokens: the positions a left-padded row has alone, which
    transformers' GPT-2, GPT-1 and Llama need to be told and our model derives itself. Padding keeps its column index,
    so a right-padded row gets GPT-2's own numbering everywhere."""
    columns = torch.arange(attention_mask.shape[-1]).expand_as(attention_mask)
    return torch.where(attention_mask.bool(), attention_mask.cumsum(-1) - 1, columns)


def assert_same_logits(model, reference, input_ids: torch.Tensor, atol: float = 1e-5, **inputs) -> None:
    """Both models' logits on the same inputs agree within `atol`, at the real (attention_mask 1) positions: at
    padding positions every implementation computes its own garbage. With a mask and no position_ids, `reference`
    is given each row's own positions (row_position_ids) and `model` derives them."""
    reference_inputs = dict(inputs)
    if "attention_mask" in inputs and "position_ids" not in inputs:
        reference_inputs["position_ids"] = row_position_ids(inputs["attention_mask"])
    with torch.no_grad():
        logits, reference_logits = model(input_ids, **inputs).logits, reference(input_ids, **reference_inputs).logits
    keep = inputs.get("attention_mask", torch.ones_like(input_ids)).bool()
    torch.testing.assert_close(logits[keep], reference_logits[keep], rtol=0, atol=atol)


def assert_same_loss(model, reference, vocab_size: int = 99) -> None:
    """The causal-LM loss of both models agrees on labels with ignored (-100) positions."""
    input_ids = torch.randint(0, vocab_size, (2, 16))
    labels = input_ids.clone()
    labels[0, :5] = -100
    with torch.no_grad():
        loss, reference_loss = model(input_ids, labels=labels).loss, reference(input_ids, labels=labels).loss
    torch.testing.assert_close(loss, reference_loss, rtol=0, atol=1e-6)


def assert_folder_converts_on_load(folder: Path, reference, **load_kwargs):
    """GPTCustomForCausalLM.from_pretrained and GPTCustomModel.from_pretrained on a saved transformers folder give
    `reference`'s logits and its base model's last hidden state. Returns the causal LM."""
    from hf_gpt_custom import GPTCustomForCausalLM, GPTCustomModel

    loaded = GPTCustomForCausalLM.from_pretrained(folder, **load_kwargs)
    input_ids = torch.randint(0, loaded.config.vocab_size, (2, 12))
    assert_same_logits(loaded, reference, input_ids)
    base = GPTCustomModel.from_pretrained(folder, **load_kwargs)
    with torch.no_grad():
        hidden, reference_hidden = base(input_ids).last_hidden_state, reference.base_model(input_ids).last_hidden_state
    torch.testing.assert_close(hidden, reference_hidden, rtol=0, atol=1e-5)
    return loaded


def sentencepiece_like(text_path: Path, normalizer=None, vocab_size: int = 700, byte_fallback: bool = True):
    """LLaMA's kind of tokenizer, trained small on the start of `text_path`: `▁` for spaces, a dummy `▁` before every
    text, and (with byte_fallback) `<0xNN>` pieces for characters outside the vocabulary, such as an emoji."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    text = Path(text_path).read_text(encoding="utf-8")[:100_000]
    backend = Tokenizer(models.BPE(byte_fallback=byte_fallback, unk_token="<unk>", fuse_unk=True))
    backend.normalizer = normalizer
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", "<s>", "</s>"] + ([f"<0x{b:02X}>" for b in range(256)] if byte_fallback else [])
    backend.train_from_iterator([text], trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                            show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


PAIR_WORDS = "the king queen sword horse castle river night lord lady music bread fire stone".split()


def write_learnable_pairs(path: Path) -> Path:
    """120 pair records a tiny model learns in a few steps: the label says whether the hypothesis word is in the
    premise (4 of PAIR_WORDS), as JSON lines at `path`."""
    import json
    import random

    rng = random.Random(0)
    rows = []
    for _ in range(120):
        premise = " ".join(rng.sample(PAIR_WORDS, 4))
        inside = rng.random() < 0.5
        word = rng.choice(premise.split()) if inside else rng.choice([w for w in PAIR_WORDS if w not in premise.split()])
        rows.append({"premise": premise, "hypothesis": word, "label": "yes" if inside else "no"})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def compiled_forward(backend: str = "inductor"):
    """A CompileConfig under which generate() compiles the decoding forward on the CPU too, as it does on a GPU."""
    from transformers import CompileConfig

    config = CompileConfig(backend=backend, mode="default" if backend == "inductor" else None)
    config._compile_all_devices = True  # generate() compiles the forward only on accelerators unless told
    return config


def uncompiled_flex_attention(monkeypatch) -> list:
    """transformers' flex attention and its BlockMask builder, run eagerly: both sides of a comparison take the same
    kernels, and the test is spared inductor compiling flex (a minute of C++ on the CPU). The BlockMask is the same
    object type, so what our input checks are handed is unchanged. Returns the list of flex calls made since (one entry
    per attention layer's call), so a test can show that flex attention really ran."""
    from torch.nn.attention import flex_attention as torch_flex
    from transformers import masking_utils
    from transformers.integrations import flex_attention as transformers_flex

    calls = []

    def eager_flex(query, key, value, training=False, **kwargs):
        calls.append(query.shape)
        return torch_flex.flex_attention(query, key, value, **kwargs)

    monkeypatch.setattr(transformers_flex, "compile_friendly_flex_attention", eager_flex)

    def eager_block_mask(*args, _compile=False, **kwargs):
        return torch_flex.create_block_mask(*args, **kwargs)

    monkeypatch.setattr(masking_utils, "create_block_mask", eager_block_mask)
    return calls
