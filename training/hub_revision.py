"""A Hub dataset is read at one commit for the whole run: the one it started on.

A Hub dataset name alone means "whatever the main branch holds now", so a run resumed after its dataset was updated
upstream would go on training on other documents without a word (and a streamed run reads lazily, for hours). A run
with `dataset_revision: null` therefore resolves the commit once, when it starts, and writes it into its config;
checkpoints record it (it changes training), and a resume reads that same commit again. An explicit
`dataset_revision` (a commit, branch or tag) is used as it is and compared on resume like any other setting.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hf_gpt_custom.training.config import TrainConfig
from hf_gpt_custom.training.config_checks import warn_once


def pin_dataset_revision(config: TrainConfig, start_over: bool = False) -> TrainConfig:
    """`config` with `dataset_revision` set to the commit its Hub dataset is read at: the one its run folder recorded
    (unless `start_over`), else the Hub's current one. Unchanged for local data, an explicit revision, or when the Hub
    cannot be asked (offline: `datasets` reads its cache; a warning says the run is not pinned)."""
    if config.dataset_revision is not None or not config.dataset or Path(config.dataset).exists():
        return config
    revision = None if start_over else recorded_dataset_revision(config)
    if revision is None:
        revision = current_hub_revision(config.dataset)
    if revision is None:
        return config
    return dataclasses.replace(config, dataset_revision=revision)


def check_every_process_reads_one_revision(accelerator, config: TrainConfig) -> None:
    """Under `accelerate launch` every process pins its Hub dataset on its own: one that could not ask the Hub (a
    timeout) or asked it across an upstream push would read other documents than its peers, silently. Raised on every
    process alike (they all see the gathered list)."""
    if accelerator.num_processes == 1 or not config.dataset or Path(config.dataset).exists():
        return
    from accelerate.utils import gather_object

    from hf_gpt_custom.errors import UserError

    revisions = gather_object([config.dataset_revision])
    if len(set(revisions)) > 1:
        shown = ", ".join(f"process {rank}: {revision or 'not pinned'}" for rank, revision in enumerate(revisions))
        raise UserError(f"the processes would read dataset {config.dataset} at different commits ({shown}); set "
                        f"dataset_revision=<commit> so that every process reads the same documents")


def recorded_dataset_revision(config: TrainConfig) -> str | None:
    """The revision this config's run folder was trained on: its checkpoint to resume from (the named one, or the
    latest), else final/ or the run's config.yaml, else the main job's pipeline_state.json (a `run` stopped in its
    tokenizer stage); None when the folder records none."""
    from hf_gpt_custom.errors import UserError
    from hf_gpt_custom.training.checkpoint import find_checkpoint, list_checkpoints
    from hf_gpt_custom.training.resume import recorded_settings

    run_dir = config.run_dir
    candidates = []
    which = config.resume_from_checkpoint or ("latest" if list_checkpoints(run_dir / "checkpoints") else None)
    if which:
        try:
            candidates.append(find_checkpoint(run_dir / "checkpoints", which, verify=False))
        except (UserError, OSError):
            pass  # the resume itself names what is wrong with it
    candidates.append(run_dir / "final")  # without final/ this reads the run's config.yaml
    recorded = [recorded_settings(folder) or {} for folder in candidates] + [_pipeline_config(run_dir)]
    for settings in recorded:
        if settings.get("dataset") == config.dataset and settings.get("dataset_revision"):
            return settings["dataset_revision"]
    return None


def _pipeline_config(run_dir: Path) -> dict:
    """The settings `hf-gpt-custom run` recorded in the run folder before its first stage ({} when none)."""
    import json

    from hf_gpt_custom.run_state import STATE_FILE

    path = run_dir / STATE_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("config", {}) if path.is_file() else {}
    except (OSError, ValueError):  # unreadable: `run` names it itself
        return {}


def current_hub_revision(name: str) -> str | None:
    """The commit sha the Hub's main branch of dataset `name` is at now, or None (with a warning) when it cannot be
    asked."""
    import textwrap

    from huggingface_hub import HfApi

    try:
        return HfApi().dataset_info(name).sha
    except Exception as err:  # offline mode, no network, a gated or renamed dataset: datasets' own load names it
        reason = textwrap.shorten(str(err).splitlines()[0], 160, placeholder=" ...") if str(err) else ""
        # `run` and its train stage both ask: said once
        warn_once(f"could not ask the Hub which commit dataset {name} is at ({type(err).__name__}: {reason}): the run "
                  f"is not pinned to one, so a resume after an upstream change would read other documents; set "
                  f"dataset_revision=<commit> to pin it")
        return None
