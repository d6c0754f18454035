"""The tokenizer stage: the tokenizer folder a run uses — named, taken from init_from, or trained on the data.

Its own stage of the main job (`hf-gpt-custom run` calls it before training) and the first thing train() does; a
tokenizer trained here is reused while the data and vocabulary size stay the same. Reading the corpus is
tokenizer_training's job, with the same file rules as training (training/corpus.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from hf_gpt_custom.training.config import TrainConfig

_TOKENIZER_SOURCE_NAME = "training_source.json"  # beside a tokenizer we trained: what it was trained on


def prepare_tokenizer(config: TrainConfig) -> Path:
    """A local tokenizer folder for this run.

    `tokenizer:` set -> that folder (a Hub name is downloaded once and saved to <out_dir>/tokenizer). Unset with
    `init_from` holding a tokenizer -> the init_from folder, so fine-tuning keeps the model's vocabulary. Unset
    otherwise -> a byte-level BPE of `tokenizer_vocab_size` trained into <out_dir>/tokenizer on the dataset's training
    documents (without the documents val_fraction holds out), reused when a previous call trained it on the same
    documents with the same size.
    """
    run_dir = config.run_dir
    target = run_dir / "tokenizer"
    if config.tokenizer:
        if Path(config.tokenizer).is_dir():
            return Path(config.tokenizer)
        import hf_gpt_custom  # noqa: F401  (registers our tokenizer class with AutoTokenizer)
        from transformers import AutoTokenizer

        # Called under main_process_first: the main process saves, the others find the marker and read the files.
        marker, source = target / _TOKENIZER_SOURCE_NAME, {"tokenizer": config.tokenizer}
        if not (marker.is_file() and json.loads(marker.read_text()) == source):
            AutoTokenizer.from_pretrained(config.tokenizer).save_pretrained(target)
            marker.write_text(json.dumps(source))
        return target
    if config.init_from and Path(config.init_from, "tokenizer.json").is_file():
        return Path(config.init_from)
    # Held-out validation documents stay unseen: merges fitted to them make the tokenizer compress the validation
    # text better than any unseen text, which flatters validation bits per byte, the more so the larger the
    # vocabulary (tiny Shakespeare's tail, 8192 entries: 3.53 vs 3.29 bytes per validation token, 2.33 vs 2.59
    # bits per byte after 105 steps of the same run).
    holds_out_validation = config.val_dataset is None and config.val_split is None and not config.streaming
    source = {"dataset": config.dataset, "dataset_config": config.dataset_config, "split": config.dataset_split,
              "text_field": config.text_field, "vocab_size": config.tokenizer_vocab_size}
    if holds_out_validation:
        source["trained_on"] = {"documents": "training split", "text_sample_by": config.text_sample_by,
                                "val_fraction": config.val_fraction, "val_holdout": config.val_holdout,
                                "seed": config.seed}
    marker = target / _TOKENIZER_SOURCE_NAME
    if marker.is_file() and json.loads(marker.read_text()) == source:
        return target
    from hf_gpt_custom.tokenizer_training import train_tokenizer

    if holds_out_validation:
        from hf_gpt_custom.training.data import split_documents

        train_documents, _ = split_documents(config)
        inputs = (text for text in train_documents["text"])  # a generator: texts, never read as paths or Hub names
    else:
        inputs = [config.dataset] if Path(config.dataset).exists() else config.dataset
    folder = train_tokenizer(
        inputs,
        source=f"the training documents of {config.dataset} ({config.text_field!r}, in training's order)",
        out_dir=target,
        vocab_size=config.tokenizer_vocab_size,
        text_field=config.text_field,
        dataset_config=config.dataset_config,
        split=config.dataset_split,
    )
    Path(folder, _TOKENIZER_SOURCE_NAME).write_text(json.dumps(source, indent=2))
    return Path(folder)
