"""Hub-ready export of a run folder and upload of that folder to the Hugging Face Hub.

`export_folder` writes exactly what a Hub repository needs — safetensors weights, config.json with an `auto_map`
for every Auto class, generation_config.json, the remote-code files, tokenizer files, the model card and the
plots/results — and never optimizer state, pickled checkpoints or a path of the machine it ran on (local paths in
the run's JSON files become their base name, or their path inside the run folder). `check_export`
(publish_checks.py) is the one check of such a folder; export runs it before the folder replaces the previous one and
`push` before uploading.
`push_folder` uploads the folder as it is (`push_to_hub` would replace our README.md with a generic card).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import shutil
import time
from contextlib import nullcontext
from pathlib import Path, PureWindowsPath
from typing import Any

from .errors import MissingFileError, UserError, write_failure_cause, write_failure_fix
from .manifest import MANIFEST_NAME, sync_to_disk, weights_fingerprint, write_manifest
from .model_folder import is_hub_repo_id, saved_task_head_class
from .publish_checks import (LOAD_TIME_KEYS, VOCABULARY_FILES, check_card_names, check_export, check_license_fields,
                             hub_languages, hub_license, is_local_path, without_vocabulary)
from .versions import export_code_sha256

logger = logging.getLogger(__name__)

# Written first into `<out_dir>.tmp`: a folder of that name without it is not export's own and is never deleted.
_STAGING_MARKER = ".hf-gpt-custom-export-staging"


class HubUnreachableError(ConnectionError, UserError):
    """The Hub cannot be reached (offline mode or no network). A UserError, so the CLI prints one line."""


def export_folder(run_dir: str | Path, out_dir: str | Path, repo_id: str | None = None,
                  package_source: str | None = None, license: str | None = None, license_name: str | None = None,
                  license_link: str | None = None, language: str | None = None) -> Path:
    """Write the Hub-ready folder for the run in `run_dir` to `out_dir` and return `out_dir`.

    Contents: model.safetensors (shards and their index past save_pretrained's 50 GB), config.json (auto_map:
    AutoConfig, AutoModel, AutoModelForCausalLM), generation_config.json,
    configuration/modeling/tokenization_gpt_custom.py and the modules they import (`remote_code_files()`), tokenizer.json, vocab.json, merges.txt, tokenizer_config.json (auto_map:
    AutoTokenizer; model_max_length = n_positions, a task head's fine-tuning block_size; a causal LM pads with eos
    on the left, a task head with the token its config.pad_token_id names on its own side), README.md (the card),
    loss_curve.png, shots_curve.png, training_summary.json and eval/results.json + eval/table.md when the run has
    them. The weights load through `load_model_folder` (strict: a missing tensor or a manifest mismatch is an error).
    The folder is assembled in `<out_dir>.tmp` and renamed at the end, so `out_dir` is either the previous export
    or the complete new one. An existing `out_dir` is replaced only if it is a previous export, an existing
    `<out_dir>.tmp` only if an interrupted export left it (it holds export's marker file): one export writes an
    `out_dir` at a time (a second is refused, naming the first), so a staging folder nobody holds is a leftover.
    """
    from hf_gpt_custom.training.run_lock import lock_output_folder

    # One spelling of the folder, before anything is moved: "~" expanded (a YAML value reaches here unexpanded), ".."
    # resolved while every folder on the way exists ("runs/r/export/../export" stopped naming anything once export/
    # was moved aside: the export was lost), and a symlink followed, so that its target is the export replaced (the
    # link itself was, leaving the target's old export in place: the paths hunt)
    out_dir = Path(os.path.realpath(os.path.expanduser(out_dir)))
    if repo_id is not None:
        check_repo_id(repo_id)
    if package_source is not None:
        check_package_source(package_source)
    if license is not None:
        license = hub_license(license)
    check_license_fields(license, license_name, license_link)
    if language is not None:
        language = ",".join(hub_languages(language))  # recorded as given to export, a string like the other options
    final_dir = Path(run_dir) / "final"
    if not (final_dir / "config.json").is_file() and Path(run_dir).name == "final" and \
            (Path(run_dir) / "config.json").is_file():
        raise UserError(f"cannot export {run_dir}: give the run folder, its parent ({Path(run_dir).parent}), which "
                        "holds final/ beside the run's records that the card is written from")
    if not (final_dir / "config.json").is_file():
        raise MissingFileError(
            f"cannot export: {final_dir / 'config.json'} not found; {run_dir} must be a finished training run "
            "(its final/ folder is written at the end of `hf-gpt-custom train`)"
        )
    # The run's eval/ is read twice (the card, the published copy) and its plot copied at the end: an `eval --out
    # RUN/eval` finishing meanwhile gave a card of one evaluation beside the results of another (the concurrency
    # hunt). Held as an evaluation holds it: whichever of the two comes second is refused, naming the first.
    evaluation = Path(run_dir) / "eval"
    # (a folder this user cannot write, a shared run's, no evaluation of theirs can write either: read as it is)
    reading_eval = lock_output_folder(evaluation, "the run's evaluation folder", "", busy_fix=(
        "export reads it: wait for that evaluation to finish, then export again")) \
        if evaluation.is_dir() and os.access(evaluation, os.W_OK) else nullcontext()
    with lock_output_folder(out_dir, "the export folder", "another OUT_DIR", replaced_whole=True), reading_eval:
        try:
            return _write_export(Path(run_dir), out_dir, repo_id, package_source,
                                 {"license": license, "license_name": license_name, "license_link": license_link},
                                 language)
        except UserError:
            raise
        except Exception as error:  # a full disk: safetensors' own SafetensorError, or an OSError without a file name
            cause = write_failure_cause(error)
            if cause is None:
                raise
            staging = out_dir.with_name(out_dir.name + ".tmp")
            if (staging / _STAGING_MARKER).is_file():
                shutil.rmtree(staging, ignore_errors=True)  # ours, half-written: frees the space it took
            raise UserError(f"cannot write the export to {out_dir}: {cause}; {write_failure_fix(error, out_dir)} "
                            f"({run_dir} is untouched), then export again") from error


def _write_export(run_dir: Path, out_dir: Path, repo_id: str | None, package_source: str | None,
                  licensing: dict[str, str | None], language: str | None) -> Path:
    final_dir = run_dir / "final"  # out_dir is absolute: "." names no folder to stage beside
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"cannot export to {out_dir}: it is a file; choose a folder path")
    if out_dir.exists() and any(out_dir.iterdir()) and not _is_previous_export(out_dir):
        raise UserError(
            f"cannot export to {out_dir}: the folder exists and is not an earlier export; choose a new or empty folder"
        )
    staging = out_dir.with_name(out_dir.name + ".tmp")
    for leftover in sorted(out_dir.parent.glob(glob.escape(out_dir.name) + ".replaced*")):
        logger.warning("%s was moved aside by an interrupted export, to be deleted; delete it", leftover)
    if staging.exists() and not (staging / _STAGING_MARKER).is_file():
        raise UserError(f"cannot export to {out_dir}: {staging} exists and was not made by export; move or delete it, "
                        "or choose another OUT_DIR")
    from hf_gpt_custom.model_cards.card import DEFAULT_LICENSE, build_model_card

    from .model_folder import check_model_folder, load_folder_tokenizer, load_model_folder, refuse_an_adapter_inside

    # fails early, before any writing, if the run is incomplete; final/ first: its weights missing or damaged were
    # reported as an evaluation of other weights, with a fix (evaluate again) that could not work
    check_model_folder(final_dir)
    refuse_an_adapter_inside(final_dir, "an export")
    _refuse_weights_training_did_not_write(run_dir, final_dir)
    license = licensing["license"]
    card = build_model_card(run_dir, repo_id=repo_id, package_source=package_source,
                            license=license or DEFAULT_LICENSE, license_name=licensing["license_name"],
                            license_link=licensing["license_link"],
                            language=language.split(",") if language else None)
    if not card.data.language:
        logger.warning("the card names no language: the training data is no dataset this project knows; export with "
                       "--language CODE (ISO 639, e.g. en, or en,fr) to say which, as the Hub files models by it")
    if license is None and card.data.base_model:  # the base model's license usually binds its fine-tunes
        logger.warning("the card's license is %s (the default); this model was trained from %s, whose license may "
                       "differ: export with --license <that license> if so", DEFAULT_LICENSE, card.data.base_model)
    head_class = saved_task_head_class(final_dir)
    model = load_model_folder(final_dir, model_class=head_class)

    if staging.exists():
        # left by an interrupted export: it holds the marker (checked above). Moved aside first: deleted in place,
        # a kill could take the marker and leave a folder no later export would remove
        aside = _unused_name(out_dir.with_name(f"{out_dir.name}.replaced"))
        os.replace(staging, aside)
        shutil.rmtree(aside, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / _STAGING_MARKER).write_text("a folder `hf-gpt-custom export` is writing; removed when it is complete\n")
    saved_tokenizer = load_folder_tokenizer(final_dir)
    if getattr(model.config, "tokenizer_class", None) not in (None, *_class_names(saved_tokenizer)):
        # carried from a converted base (its "GPT2TokenizerFast"), untrue of the tokenizer this folder ships, whose
        # own class tokenizer_config.json names (and AutoTokenizer reads first)
        del model.config.tokenizer_class
    model.save_pretrained(staging)  # safetensors + config.json (auto_map for 3 Auto classes) + the code files
    # The tokenizer the run trained with: ours, or a folder's own class where ours would encode differently (a
    # SentencePiece one, load_folder_tokenizer). Batched generation and `padding=True` need a pad token; GPT-2
    # recipes pad with eos on the left. A task head keeps the side it was fine-tuned and saved with (right: a padded
    # row then scores as it does alone) and pads with the token config.pad_token_id names, the one the head skips
    # to find the extract token (a base tokenizer's own pad token, not always eos).
    pad_token_id = model.config.pad_token_id if head_class is not None else None
    pad_token = saved_tokenizer.convert_ids_to_tokens(pad_token_id) if pad_token_id is not None else \
        saved_tokenizer.pad_token or saved_tokenizer.eos_token  # a causal LM: its own pad (a Llama's), else eos
    # A task head keeps the length fine-tuning cut its inputs to (its block_size); a causal LM takes n_positions.
    max_length = model.config.n_positions if head_class is None else saved_tokenizer.model_max_length
    tokenizer = type(saved_tokenizer).from_pretrained(
        final_dir, model_max_length=max_length, pad_token=pad_token,
        padding_side="left" if head_class is None else saved_tokenizer.padding_side,
    )
    tokenizer.save_pretrained(staging)  # tokenizer files + tokenizer_config.json (ours: auto_map, tokenization_*.py)
    card.save(staging / "README.md")

    local_paths = _run_local_paths(run_dir)
    for name in ("config.json", "generation_config.json", "tokenizer_config.json"):
        if not (staging / name).is_file():  # a task head (hf-gpt-custom finetune) has no generation_config.json
            continue
        _write_public_json(staging / name, read_json(staging / name), run_dir, local_paths)
    if (run_dir / "training_summary.json").is_file():
        summary = read_json(run_dir / "training_summary.json")
        _write_public_json(staging / "training_summary.json", summary, run_dir, local_paths)
    if (run_dir / "eval" / "results.json").is_file():
        from hf_gpt_custom.eval.report import format_table
        from hf_gpt_custom.model_cards.card import read_run_results

        results = read_run_results(run_dir)
        results.pop("data_dir", None)  # where the benchmark files were read: a local path, kept for export's check
        results = _public_value(results, run_dir, local_paths)
        if isinstance(results.get("model"), str) and not is_hub_repo_id(results["model"]):
            # a relative path as `run` or `eval` was given it ("runs/shakespeare/final") is local too
            results["model"] = _public_path(results["model"], run_dir)
        _write_public_json(staging / "eval" / "results.json", results, run_dir, local_paths)
        (staging / "eval" / "table.md").write_text(format_table(results), encoding="utf-8")
    for source in (run_dir / "loss_curve.png", run_dir / "eval" / "shots_curve.png"):
        if source.is_file():
            shutil.copyfile(source, staging / source.name)
    check_export(staging, forbidden=local_paths, require_manifest=False)  # the manifest is written next
    # Size and sha256 of every file but the card and other documentation: from_pretrained, eval, finetune and push
    # then refuse a copy whose weights, config, code or tokenizer changed on disk. The documentation's hashes are
    # recorded too, unchecked, so that the next export can tell a card edited since from the one it wrote. The
    # staging marker is left out of the manifest but stays until the folder is in place: a failure before then
    # (while hashing the weights, say) leaves a staging folder the next export may remove.
    write_manifest(staging, leave_out=(_STAGING_MARKER,), documentation=_documentation_hashes(staging),
                   export_options={"repo_id": repo_id, "package_source": package_source, "language": language,
                                   **licensing}, export_code_sha256=export_code_sha256(),
                   card_weights_sha256=weights_fingerprint(staging))  # the weights the card's figures are of
    _make_world_readable(staging)
    sync_to_disk(staging)

    replaced = None
    if out_dir.exists():
        edited = _edited_since_export(out_dir, staging)
        if edited:  # the user's work (a card edited before a push, a file added): kept, not deleted
            kept = edited_name(out_dir)
            os.replace(out_dir, kept)
            logger.warning("%s held files changed or added since it was exported (%s): the folder was moved to %s, "
                           "not deleted; carry your edits over to the new export", out_dir, ", ".join(edited[:5]), kept)
        else:
            # Moved aside in one step, deleted once the new export is in place: a kill while deleting it in place
            # left a half-deleted folder that no later export (nor `run`) would replace, not being an export any more
            replaced = _unused_name(out_dir.with_name(f"{out_dir.name}.replaced"))
            os.replace(out_dir, replaced)
    os.replace(staging, out_dir)
    (out_dir / _STAGING_MARKER).unlink()
    sync_to_disk(out_dir.parent, contents=False)  # the rename itself
    link = licensing["license_link"]
    if link and "://" not in link and not (out_dir / link).is_file():
        logger.warning("the card links its license to %s: put the license's text in %s before you push", link,
                       out_dir / link)
    if replaced is not None:
        shutil.rmtree(replaced, ignore_errors=True)
    return out_dir


EXPORT_OPTIONS = ("repo_id", "license", "license_name", "license_link", "package_source", "language")


def _class_names(tokenizer) -> tuple[str, str]:
    """A tokenizer's class name as config.tokenizer_class may give it: with or without "Fast"."""
    name = type(tokenizer).__name__
    return name, name.removesuffix("Fast")


def previous_export_options(out_dir: str | Path) -> dict[str, str]:
    """The repo id, license and package source a previous export of `out_dir` was given (its manifest records them),
    for `hf-gpt-custom run`, whose export stage takes none: after `export RUN RUN/export --repo-id alice/model`, a rerun
    that re-exported (new benchmark tasks, say) put your-username/... back in the card, in silence. A kill between
    export's two renames leaves no `out_dir`, the previous export moved aside as `<out_dir>.replaced`: its options
    are read from there (then from the staged `<out_dir>.tmp`), since the next export deletes that folder."""
    out_dir = Path(out_dir)
    aside = sorted(out_dir.parent.glob(glob.escape(out_dir.name) + ".replaced*"), key=lambda path: path.stat().st_mtime)
    for folder in (out_dir, *reversed(aside), out_dir.with_name(out_dir.name + ".tmp")):
        try:
            recorded = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8")).get("export_options")
        except (OSError, ValueError):
            continue
        return {key: value for key, value in (recorded or {}).items()
                if key in EXPORT_OPTIONS and isinstance(value, str)}
    return {}


def edited_name(folder: Path) -> Path:
    """Where a folder edited by hand is kept when the project writes its own again: <folder>.edited_<UTC time>."""
    return _unused_name(folder.with_name(f"{folder.name}.edited_{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"))


def _unused_name(path: Path) -> Path:
    """`path`, or `path` with _2, _3, ... appended when it exists (two exports of an edited folder in one second)."""
    candidate, number = path, 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.name}_{number}")
    return candidate


def _documentation_hashes(folder: Path) -> dict[str, str]:
    from .manifest import MANIFEST_NAME, is_documentation, sha256_file

    return {path.relative_to(folder).as_posix(): sha256_file(path) for path in sorted(folder.rglob("*"))
            if path.is_file() and path.name != MANIFEST_NAME and is_documentation(path.relative_to(folder).as_posix())}


def _edited_since_export(old: Path, new: Path) -> list[str]:
    """Files of the previous export `old` that neither it wrote (its manifest and documentation hashes) nor the
    new export `new` reproduces byte for byte: what replacing the folder would lose."""
    from .manifest import MANIFEST_NAME, sha256_file

    try:
        manifest = json.loads((old / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        manifest = {}
    written = {name: entry.get("sha256") for name, entry in (manifest.get("files") or {}).items()}
    written.update(manifest.get("documentation") or {})
    edited = []
    for path in sorted(p for p in old.rglob("*") if p.is_file() and p.name != MANIFEST_NAME):
        name = path.relative_to(old).as_posix()
        twin = new / name
        if twin.is_file() and twin.stat().st_size == path.stat().st_size and twin.read_bytes() == path.read_bytes():
            continue
        if name not in written or sha256_file(path) != written[name]:
            edited.append(name)
    return edited


def check_package_source(source: str) -> None:
    """A UserError when `source`, the requirement the card tells users to pip install, names something only this
    machine has: a file URL ("hf-gpt-custom @ file:///home/me/hf-gpt-custom", as pip freeze writes a local
    install; "git+file://...") or a local path. The card would publish the path, and nobody could install it."""
    # pip freeze's line for an editable install; pip also reads "-e." (a short option's value attached)
    candidate = re.sub(r"^(?:-e|--editable\b=?)\s*", "", source.strip())
    if "@" in candidate and "://" not in candidate.split("@", 1)[0]:
        candidate = candidate.split("@", 1)[1].strip()  # NAME @ URL
    scheme = candidate.split("://", 1)[0].lower() if "://" in candidate else ""
    # without a scheme, a requirement is a name (hf-gpt-custom==0.3): a "/" or an archive's suffix makes it a path
    local = scheme.rsplit("+", 1)[-1] == "file" or (not scheme and (
        "/" in candidate or "\\" in candidate or candidate.startswith((".", "~"))
        or candidate.lower().endswith((".whl", ".tar.gz", ".zip", ".tar.bz2", ".tgz"))))
    if local:
        raise UserError(f"--package-source {source!r} names a place on this machine, which the card would publish and "
                        "nobody else could install from; give a requirement others can install: the package's PyPI "
                        "name, or its repository's URL (git+https://github.com/you/hf-gpt-custom)")


def check_repo_id(repo_id: str) -> None:
    """A UserError unless `repo_id` is a Hub repository id with its namespace, USER/NAME: what export writes into the
    card's snippets and push uploads to. A bare NAME loads a canonical model ("gpt2", is_hub_repo_id) but is refused
    here: create_repo would put it under the pusher's user, and the card's from_pretrained("NAME") would miss it."""
    if not is_hub_repo_id(repo_id):
        raise UserError(
            f"--repo-id {repo_id!r} is not a Hub repository id; use USER/NAME with letters, digits, '-', '_' and '.' "
            "(no leading/trailing '-' or '.', no '--' or '..', at most 96 characters), e.g. alice/tiny-model"
        )
    if "/" not in repo_id:
        raise UserError(
            f"--repo-id {repo_id!r} has no user or organisation; use USER/NAME, e.g. alice/{repo_id} (the card's "
            f"from_pretrained snippets must name the repository as the Hub stores it, under its namespace)"
        )


def push_folder(folder: str | Path, repo_id: str, private: bool = False, revision: str | None = None) -> str:
    """Upload `folder` as it is to the Hub model repository `repo_id` (created if missing); return the commit URL.
    The repository (or `revision`) then holds the folder's files and no others: what an earlier push left is deleted.

    Runs `check_export` first (an edited folder may have gained a local path or lost a file). Uses the token of the
    user's standard login (`hf auth login` or HF_TOKEN). Without a token, in offline mode or without network it
    raises one clear error (UserError / HubUnreachableError) and changes nothing locally.
    """
    from huggingface_hub import HfApi, get_token, is_offline_mode
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    check_repo_id(repo_id)
    folder = Path(folder)
    check_export(folder)
    check_card_names(folder, repo_id)
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
    created = False  # by this push: then a failed upload deletes it again rather than leave an empty repository
    try:
        existed = api.repo_exists(repo_id, repo_type="model")
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        created = not existed
        if private and not api.repo_info(repo_id, repo_type="model").private:  # exist_ok kept it as it was
            raise UserError(f"cannot push with --private: {repo_id} already exists and is public, and pushing does not "
                            "change a repository's visibility; make it private in its settings on the Hub first, or "
                            "push without --private. Nothing was uploaded.")
        if revision is not None:
            api.create_branch(repo_id, branch=revision, repo_type="model", exist_ok=True)
        commit = api.upload_folder(
            folder_path=folder,
            repo_id=repo_id,
            repo_type="model",
            revision=revision,
            commit_message="Upload hf-gpt-custom export",
            # The repository becomes the folder: files an earlier push left (old eval results, a shard of another
            # layout, a generation_config.json this export lacks) are deleted, or they would load beside the new
            # files. huggingface_hub keeps .gitattributes whatever the pattern.
            delete_patterns="*",
        )
    except OfflineModeIsEnabled as err:
        raise HubUnreachableError(f"cannot push: offline mode is on ({err}). Nothing was changed.") from err
    except HfHubHTTPError as err:
        raise UserError(_push_refused_message(repo_id, err) + _delete_if_created(api, repo_id, created)) from err
    except Exception as err:
        undone = _delete_if_created(api, repo_id, created)
        if _is_network_error(err):
            raise HubUnreachableError(
                f"cannot push: the Hub at {api.endpoint} is unreachable ({type(err).__name__}: {err}); check the "
                f"network or HF_ENDPOINT. {'Nothing was uploaded.' if created else 'Nothing was changed.'}" + undone
            ) from err
        if undone:
            err.add_note(undone.strip())
        raise
    return getattr(commit, "commit_url", None) or str(commit)


def _delete_if_created(api, repo_id: str, created: bool) -> str:
    """Delete the repository this push created when its upload failed (a commit is atomic, so it is empty): a retry
    with other settings (--private) would otherwise find it and keep it as it is. Returns the sentence to add."""
    if not created:
        return ""
    try:
        api.delete_repo(repo_id, repo_type="model")
    except Exception as err:  # noqa: BLE001 - the push's own error is the one to raise; this one is named in it
        return (f" The empty repository this push created could not be deleted ({type(err).__name__}); delete it at "
                f"{api.endpoint}/{repo_id}/settings if you do not push again.")
    return " The empty repository this push had created was deleted again."


def _push_refused_message(repo_id: str, err) -> str:
    """What the Hub's HTTP error means for this push, and its fix: a token problem (401/403) is not a file the Hub
    refused (400/422: invalid README.md metadata, a file too large for git without LFS), and neither is the Hub's own
    trouble. A commit is atomic: nothing of the folder was uploaded, whatever the repository's creation did."""
    status = err.response.status_code if err.response is not None else None
    reason = (getattr(err, "server_message", None) or str(err)).strip().splitlines()[0]
    said = f"cannot push to {repo_id}: the Hub answered HTTP {status or '?'} ({reason})"
    if status in (401, 403):
        return f"{said}; check that your token is valid and has write access to that namespace (`hf auth whoami`)"
    if status in (400, 413, 422):
        return (f"{said}: it refused the folder's contents, and nothing of it was uploaded; mend what it names (a "
                "model card's metadata: edit the front matter of README.md, or export again) and push again")
    if status is not None and status >= 500:
        return f"{said}: the Hub's own error, and nothing was uploaded; push again later"
    return f"{said}; nothing was uploaded; check the repository id and your access to it (`hf auth whoami`)"


def _is_previous_export(folder: Path) -> bool:
    """Our model's config.json beside a card, or beside the manifest an export writes (it records the export's
    options): an export whose card was deleted is still one, and `run` makes it whole again."""
    from .manifest import MANIFEST_NAME

    config_path, manifest_path = folder / "config.json", folder / MANIFEST_NAME
    try:
        exported = (folder / "README.md").is_file() or \
            (manifest_path.is_file() and "export_options" in json.loads(manifest_path.read_text(encoding="utf-8")))
        return exported and config_path.is_file() and \
            json.loads(config_path.read_text(encoding="utf-8")).get("model_type") == "gpt_custom"
    except json.JSONDecodeError:
        return False


# --- local paths out of published JSON -----------------------------------------------------------------------------


def _public_path(value: str, run_dir: Path) -> str:
    """A path inside the run folder as its path there ("tokenizer", "final"; the folder itself as its name); any
    other local path as its base name ("input.txt", also of a Windows path recorded elsewhere)."""
    if re.match(r"^[A-Za-z]:[\\/]", value):
        return PureWindowsPath(value).name
    path, root = Path(os.path.expanduser(value)), run_dir.resolve()
    try:
        inside = path.resolve().relative_to(root).as_posix()
    except ValueError:
        return path.name
    return run_dir.resolve().name if inside == "." else inside


# Settings whose values are local paths as the user typed them, relative ones included ("../home/alice/tasks/x.yaml",
# "runs/r1"), which is_local_path cannot tell from other text; the inputs (dataset, tokenizer, init_from) are stored
# absolute, and a Hub name among them must stay as it is.
_RELATIVE_PATH_KEYS = ("out_dir", "data_cache_dir", "benchmark_tasks", "tasks")


def _public_value(value: Any, run_dir: Path, local_paths: list[str], key: str | None = None) -> Any:
    """`value` (parsed JSON) with every local path made public and transformers' load-time keys dropped."""
    if isinstance(value, dict):
        return {name: _public_value(item, run_dir, local_paths, name) for name, item in value.items()
                if name not in LOAD_TIME_KEYS}
    if isinstance(value, list):
        return [_public_value(item, run_dir, local_paths, key) for item in value]
    if isinstance(value, str):
        if is_local_path(value) or (key in _RELATIVE_PATH_KEYS and ("/" in value or "\\" in value)):
            return _public_path(value, run_dir)
        for path in local_paths:  # a path inside a sentence, e.g. an error message recorded in results.json
            value = value.replace(path, _public_path(path, run_dir))
    return value


def _write_public_json(path: Path, payload: Any, run_dir: Path, local_paths: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    public = _public_value(payload, run_dir, local_paths)
    path.write_text(json.dumps(public, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _run_local_paths(run_dir: Path) -> list[str]:
    """Every absolute path the run recorded (summary, config, results, final/'s JSON), plus the run folder; longest
    first, so replacing them inside sentences replaces the most specific one."""
    import yaml

    found = {str(run_dir.resolve()), str(run_dir.absolute())}

    def collect(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)
        elif isinstance(value, str) and is_local_path(value):
            found.add(value)

    for path in (run_dir / "training_summary.json", run_dir / "eval" / "results.json", *sorted((run_dir / "final").glob("*.json"))):
        if path.is_file() and path.name not in VOCABULARY_FILES:
            collect(without_vocabulary(read_json(path)) if path.name == "tokenizer.json" else read_json(path))
    if (run_dir / "config.yaml").is_file():
        collect(yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")))
    return sorted(found, key=len, reverse=True)


def _refuse_weights_training_did_not_write(run_dir: Path, final_dir: Path) -> None:
    """A UserError when final/ holds other weights than the run's training_summary.json records it wrote there (a
    merged adapter saved over them): the card's training figures and loss curve would have been the trained
    weights', in silence (the crossfeature hunt). A summary written before it recorded them is trusted."""
    from .run_state import final_saved_over_since_training

    if not final_saved_over_since_training(run_dir):
        return
    raise UserError(f"{final_dir} holds other weights than this run's training wrote there (saved into it since), "
                    "and the card would give them the trained weights' figures and loss curve; publish those "
                    "weights from a folder of their own (save_pretrained(DIR) with the tokenizer, `hf-gpt-custom eval "
                    "--model DIR` for their figures, then push_to_hub), or rerun `hf-gpt-custom train` with the same "
                    "config to write the run's own final/ again (yours is kept beside it)")


def read_json(path: Path) -> Any:
    """Parsed JSON, or a UserError naming the file (a run file someone edited or a stage cut short)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserError(f"{path} is not valid JSON ({err}); re-run the stage that writes it") from err


def _make_world_readable(folder: Path) -> None:
    """Files as any other file the user writes (0644 under umask 022): save_pretrained leaves the weights 0600
    (a temporary file renamed into place), and an upload or a copy for other users would keep that."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.rglob("*"):
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)


def _is_network_error(err: BaseException) -> bool:
    """Connection failures from the Hub client (httpx2/httpx transport errors) or the OS."""
    if isinstance(err, (ConnectionError, TimeoutError)):
        return True
    return any(cls.__name__ == "TransportError" and cls.__module__.startswith("httpx") for cls in type(err).__mro__)


__all__ = ["HubUnreachableError", "check_repo_id", "export_folder", "push_folder"]
