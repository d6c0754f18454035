"""Hub-ready export of a run folder and upload of that folder to the Hugging Face Hub.

`export_folder` writes exactly what a Hub repository needs — safetensors weights, config.json with an `auto_map`
for every Auto class, generation_config.json, the remote-code files, tokenizer files, the model card and the
plots/results — and never optimizer state or pickled checkpoints. `push_folder` uploads that folder as it is
(`push_to_hub` would replace our README.md with a generic card).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from .errors import MissingFileError, UserError

class HubUnreachableError(ConnectionError, UserError):
    """The Hub cannot be reached (offline mode or no network). A UserError, so the CLI prints one line."""


def export_folder(run_dir: str | Path, out_dir: str | Path, repo_id: str | None = None) -> Path:
    """Write the Hub-ready folder for the run in `run_dir` to `out_dir` and return `out_dir`.

    Contents: model.safetensors, config.json (auto_map: AutoConfig, AutoModel, AutoModelForCausalLM),
    generation_config.json, configuration/modeling/tokenization_gpt_custom.py and the modules they import
    (`remote_code_files()`), tokenizer.json, vocab.json,
    merges.txt, tokenizer_config.json (auto_map: AutoTokenizer), README.md (the model card), loss_curve.png,
    shots_curve.png, training_summary.json and eval/results.json + eval/table.md when the run has them.
    The folder is assembled in `<out_dir>.tmp` and renamed at the end, so `out_dir` is either the previous export
    or the complete new one. An existing `out_dir` is replaced only if it is a previous export.
    """
    from model_cards.card import build_model_card

    from . import GPTCustomForCausalLM, GPTCustomTokenizerFast  # registers the classes for auto_map

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    final_dir = run_dir / "final"
    if not (final_dir / "config.json").is_file():
        raise MissingFileError(
            f"cannot export: {final_dir / 'config.json'} not found; {run_dir} must be a finished training run "
            "(its final/ folder is written at the end of `hf-gpt-custom train`)"
        )
    if out_dir.exists() and any(out_dir.iterdir()) and not _is_previous_export(out_dir):
        raise UserError(
            f"cannot export to {out_dir}: the folder exists and is not an earlier export; choose a new or empty folder"
        )
    card = build_model_card(run_dir, repo_id=repo_id)  # fails early, before any writing, if the run is incomplete

    staging = out_dir.with_name(out_dir.name + ".tmp")
    if staging.exists():
        shutil.rmtree(staging)  # left by an interrupted export
    staging.mkdir(parents=True)

    model = GPTCustomForCausalLM.from_pretrained(final_dir)
    model.save_pretrained(staging)  # safetensors + config.json (auto_map for 3 Auto classes) + the code files
    tokenizer = GPTCustomTokenizerFast.from_pretrained(final_dir)
    tokenizer.save_pretrained(staging)  # tokenizer files + tokenizer_config.json auto_map + tokenization_*.py
    card.save(staging / "README.md")

    extras = {
        run_dir / "loss_curve.png": staging / "loss_curve.png",
        run_dir / "eval" / "shots_curve.png": staging / "shots_curve.png",
        run_dir / "training_summary.json": staging / "training_summary.json",
        run_dir / "eval" / "results.json": staging / "eval" / "results.json",
        run_dir / "eval" / "table.md": staging / "eval" / "table.md",
    }
    for source, destination in extras.items():
        if source.is_file():
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)
    _check_export(staging)

    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(staging, out_dir)
    return out_dir


def push_folder(folder: str | Path, repo_id: str, private: bool = False, revision: str | None = None) -> str:
    """Upload `folder` as it is to the Hub model repository `repo_id` (created if missing); return the commit URL.

    Uses the token of the user's standard login (`hf auth login` or HF_TOKEN). Without a token, in offline mode
    or without network it raises one clear error (ValueError / HubUnreachableError) and changes nothing locally.
    """
    from huggingface_hub import HfApi, get_token, is_offline_mode
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    folder = Path(folder)
    if not (folder / "config.json").is_file() or not (folder / "README.md").is_file():
        raise MissingFileError(
            f"cannot push {folder}: it has no config.json and README.md; write it first with "
            "`hf-gpt-custom export RUN_DIR OUT_DIR`"
        )
    token = get_token()
    if not token:
        raise UserError(
            "cannot push: no Hugging Face token found; log in with `hf auth login` or set HF_TOKEN. "
            "Nothing was changed."
        )
    if is_offline_mode() or os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}:
        raise HubUnreachableError(
            "cannot push: offline mode is on (HF_HUB_OFFLINE=1); unset it and check the network. Nothing was changed."
        )

    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        if revision is not None:
            api.create_branch(repo_id, branch=revision, repo_type="model", exist_ok=True)
        commit = api.upload_folder(
            folder_path=folder,
            repo_id=repo_id,
            repo_type="model",
            revision=revision,
            commit_message="Upload hf-gpt-custom export",
        )
    except OfflineModeIsEnabled as err:
        raise HubUnreachableError(f"cannot push: offline mode is on ({err}). Nothing was changed.") from err
    except HfHubHTTPError as err:
        status = err.response.status_code if err.response is not None else "?"
        reason = (getattr(err, "server_message", None) or str(err)).strip().splitlines()[0]
        raise UserError(
            f"cannot push to {repo_id}: the Hub answered HTTP {status} ({reason}); check that your token is valid and "
            "has write access to that namespace (`hf auth whoami`)"
        ) from err
    except Exception as err:
        if _is_network_error(err):
            raise HubUnreachableError(
                f"cannot push: the Hub at {api.endpoint} is unreachable ({type(err).__name__}: {err}); check the "
                "network or HF_ENDPOINT. Nothing was changed."
            ) from err
        raise
    return getattr(commit, "commit_url", None) or str(commit)


def _is_previous_export(folder: Path) -> bool:
    config_path = folder / "config.json"
    if not (config_path.is_file() and (folder / "README.md").is_file()):
        return False
    try:
        return json.loads(config_path.read_text(encoding="utf-8")).get("model_type") == "gpt_custom"
    except json.JSONDecodeError:
        return False


def remote_code_files() -> set[str]:
    """The code a folder needs for trust_remote_code: our three entry modules and every module they import
    (transformers copies those on save_pretrained; this asks it which they are)."""
    from transformers.dynamic_module_utils import get_relative_import_files

    package = Path(__file__).parent
    entries = [package / f"{kind}_gpt_custom.py" for kind in ("configuration", "modeling", "tokenization")]
    return {Path(path).name for entry in entries for path in (entry, *get_relative_import_files(str(entry)))}


def _check_export(folder: Path) -> None:
    """Internal invariants of an export: remote code present, no pickles or optimizer state."""
    required = {"model.safetensors", "config.json", "generation_config.json", "README.md", *remote_code_files()}
    missing = sorted(name for name in required if not (folder / name).is_file())
    pickled = [path.name for path in folder.rglob("*") if path.suffix in {".bin", ".pt", ".pth", ".pkl", ".ckpt"}]
    if missing or pickled:
        raise RuntimeError(f"export in {folder} is incomplete: missing {missing}, pickled files {pickled}")


def _is_network_error(err: BaseException) -> bool:
    """Connection failures from the Hub client (httpx2/httpx transport errors) or the OS."""
    if isinstance(err, (ConnectionError, TimeoutError)):
        return True
    return any(cls.__name__ == "TransportError" and cls.__module__.startswith("httpx") for cls in type(err).__mro__)


__all__ = ["HubUnreachableError", "export_folder", "push_folder", "remote_code_files"]
