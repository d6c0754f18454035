"""A model folder's manifest: the size and sha256 of every file but the documentation, written by training (into
each checkpoint and final/) and by export, and checked by every reader — our classes' `from_pretrained` (through
`from_pretrained_checked`, which also refuses a tensor missing from the file), eval, finetune, export and push.
Shipped as remote code beside the modeling file: imports only the standard library and siblings (and
huggingface_hub, which transformers installs, inside the one function that talks to the Hub).
"""

from __future__ import annotations

import errno
import hashlib
import inspect
import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path

from .errors import UserError

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1

# What a user may edit after the folder is written (the model card before a push, plots, the run's records): the
# manifest protects everything else — weights, config, code, tokenizer, generation settings, trainer state.
DOCUMENTATION_SUFFIXES = (".md", ".png")
DOCUMENTATION_FILES = ("training_summary.json",)
DOCUMENTATION_FOLDERS = ("eval/",)

# sha256 of each file already hashed in this process, by absolute path: (file_identity, sha256). The identity changes
# with any write or replacement, so a file is hashed once per process rather than on every load or every fingerprint
# (the manifest check, the data cache key, the resume record): hashing reads the whole file.
_SHA256: dict[str, tuple[tuple[int, ...], str]] = {}


def file_identity(path: str | os.PathLike) -> tuple[int, ...] | None:
    """What changes whenever a file is written or replaced — device, inode, size, mtime and ctime (ctime too when
    cp -p, rsync -t or tar restore the mtime) — or None when it does not exist."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


def cached_sha256(path: str | os.PathLike) -> str:
    """sha256_file(path), read once per process while the file stays as it is (_SHA256)."""
    identity, key = file_identity(path), str(Path(path).resolve())
    known = _SHA256.get(key)
    if known is not None and known[0] == identity:
        return known[1]
    sha256 = sha256_file(path)
    _SHA256[key] = (identity, sha256)
    return sha256


def weights_fingerprint(folder: str | os.PathLike) -> str | None:
    """sha256 over the names and sha256s of a model folder's weight files (*.safetensors), None without any: the same
    weights give the same fingerprint in final/, an export or a copy. An evaluation records it in results.json, so
    that a card is never built from another model's scores."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(f"{file.name}={cached_sha256(file)};".encode())
    return digest.hexdigest()


def scored_other_weights(results: dict, folder: str | os.PathLike) -> bool:
    """Whether an evaluation's results.json (`results`) scored other weights than `folder`'s. Results that record
    none (written before evaluations did, or of a model passed in memory) are taken as they are: False."""
    scored = results.get("model_weights_sha256")
    return scored is not None and scored != weights_fingerprint(folder)


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def is_documentation(name: str) -> bool:
    """True for a file (path relative to its folder, "/"-separated) that the manifest leaves to the user to edit:
    the card, plots, the training summary, and the evaluation's JSON and JSON Lines reports (results.json,
    examples.jsonl: what `hf-gpt-custom eval --out FOLDER/eval` writes), not code or weights put there."""
    return (name.endswith(DOCUMENTATION_SUFFIXES) or name in DOCUMENTATION_FILES
            or (name.startswith(DOCUMENTATION_FOLDERS) and name.endswith((".json", ".jsonl"))))


def write_manifest(folder: str | os.PathLike, leave_out: tuple[str, ...] = (), **fields) -> Path:
    """Write folder/manifest.json listing the size and sha256 of every other file but the documentation and the names
    in `leave_out` (written last, atomically)."""
    folder = Path(folder)
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_NAME):
        name = path.relative_to(folder).as_posix()
        if path.name.endswith(".partial") or is_documentation(name) or name in leave_out:
            continue
        files[name] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = {"format": MANIFEST_FORMAT, **fields, "files": files}
    write_text_atomically(folder / MANIFEST_NAME, json.dumps(manifest, indent=2))
    return folder / MANIFEST_NAME


@contextmanager
def manifest_kept_current(folder: str | os.PathLike):
    """Around a save_pretrained into `folder`: where the folder has a manifest (an export, a run's final/, a download
    of either), the entries of the files the save wrote or removed are brought up to date; the others stay as they
    were, so a file damaged before still shows. Left stale, every later load refused the folder as damaged, and
    saving again, as the message said, did not help (the publishflow hunt)."""
    folder = Path(folder)
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        yield
        return
    before = {path: file_identity(path) for path in folder.rglob("*") if path.is_file()}
    yield
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = dict(manifest["files"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return  # unreadable before the save: verify_manifest says so, as it did
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if path.name == MANIFEST_NAME or path.name.endswith(".partial") or is_documentation(name):
            continue
        if before.get(path) != file_identity(path):  # written by the save
            files[name] = {"size": path.stat().st_size, "sha256": cached_sha256(path)}
    for path in before:
        if not path.exists():  # removed by the save (transformers deletes the shards a smaller save replaces)
            files.pop(path.relative_to(folder).as_posix(), None)
    write_text_atomically(manifest_path, json.dumps({**manifest, "files": files}, indent=2))


def save_options(save_pretrained, *args, **kwargs) -> dict:
    """The arguments of a call to transformers' `save_pretrained` (its signature given), by name, positional ones
    too: `model.save_pretrained(folder, True, None, True)` asks for push_to_hub as surely as the keyword does. Empty
    where they do not fit: the save itself then raises transformers' own error."""
    try:
        return inspect.signature(save_pretrained).bind(*args, **kwargs).arguments
    except TypeError:
        return {}


def before_a_save_that_pushes(folder: str | os.PathLike, token, kwargs: dict) -> None:
    """Before a save_pretrained(push_to_hub=True) of our model or tokenizer. Into a folder with a manifest: refused,
    since transformers uploads from inside its save, before manifest_kept_current brings the manifest up to date (the
    Hub got the new files beside the old manifest.json, and a download of it was refused as damaged). Onto a repo
    holding an export's manifest.json: that file goes first (drop_hub_manifest). `kwargs` are the save's own:
    repo_id (by default the folder's name, as transformers takes it) and create_pr."""
    if os.path.isfile(os.path.join(folder, MANIFEST_NAME)):
        raise UserError(f"save_pretrained({str(folder)!r}, push_to_hub=True): that folder has a {MANIFEST_NAME} (an "
                        "export's, or a run's), which must be updated before the upload; save without push_to_hub, "
                        "then upload the folder (`hf-gpt-custom push FOLDER --repo-id USER/NAME`, or huggingface_hub's "
                        "upload_folder)")
    drop_hub_manifest(kwargs.get("repo_id", os.path.basename(os.path.normpath(folder))), token=token,
                      create_pr=kwargs.get("create_pr", False), call="save_pretrained")


def drop_hub_manifest(repo_id: str, *, token=None, revision: str | None = None, create_pr: bool = False,
                      call: str = "push_to_hub") -> None:
    """Before `call` (a push_to_hub, or a save_pretrained with push_to_hub=True) of our model or tokenizer: where the
    repo holds an export's manifest.json, it is deleted. transformers uploads the new files on top of the repo's and
    leaves the rest, so the old manifest stayed and every download was refused as damaged. Without it the repo is a
    plain transformers repo, loaded unchecked, as push_to_hub's users expect; `hf-gpt-custom push` of an export is
    what publishes a manifest. A `revision` branch that does not exist yet starts from the default branch's files,
    manifest included: it is created first, as push_to_hub would create it, and cleaned."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(token=token)
    try:
        full_id = repo_id if "/" in repo_id else f"{api.whoami()['name']}/{repo_id}"
        new_branch = (revision is not None and not revision.startswith("refs/pr")
                      and not api.revision_exists(full_id, revision))
        source = None if new_branch else revision
        if not api.file_exists(full_id, MANIFEST_NAME, revision=source):
            return
        # another tool's manifest.json (a web app's) is the user's file: only ours lists the files this push replaces
        if not _is_one_of_ours(api.hf_hub_download(full_id, MANIFEST_NAME, revision=source)):
            return
    except (HfHubHTTPError, OSError, KeyError):
        return  # no token, no network: push_to_hub itself says so, in its own words
    if create_pr:
        raise UserError(f"{call}({repo_id!r}, create_pr=True): that repo holds an export's {MANIFEST_NAME}, which "
                        "would list the old files beside the new ones; delete it from the repo first "
                        f"(HfApi().delete_file({MANIFEST_NAME!r}, {full_id!r})), or open the pull request with an "
                        "export's folder (`hf-gpt-custom export`, then huggingface_hub's upload_folder)")
    if new_branch:
        api.create_branch(full_id, branch=revision, exist_ok=True)
    api.delete_file(MANIFEST_NAME, full_id, revision=revision,
                    commit_message=f"Remove {MANIFEST_NAME}: {call} replaces the files it lists")
    # push_to_hub keeps the repo's card (it only adds tags) and the rest of its files: the export's figures stay
    logging.getLogger(__name__).warning(
        "%s was an export's: its model card and eval/ show the figures of the weights it held, and %s keeps them; "
        "update the card, or export the new model and publish it with `hf-gpt-custom push`", full_id, call)


def _is_one_of_ours(path: str | os.PathLike) -> bool:
    """Whether the file at `path` is a manifest write_manifest wrote (its format and a files table)."""
    try:
        manifest = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == MANIFEST_FORMAT and isinstance(
        manifest.get("files"), dict)


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` through `<path>.partial`, renamed into place: a kill while writing leaves the previous
    file whole (or none), never half of one; flushed to disk before the rename, so a power cut cannot leave the new
    name on empty contents. (A manifest leaves `.partial` files out.)"""
    partial = Path(f"{path}.partial")
    with failed_write_named(path, partial):
        partial.write_text(text, encoding="utf-8")
    sync_to_disk(partial)
    os.replace(partial, path)
    sync_to_disk(Path(path).parent, contents=False)  # the rename itself


@contextmanager
def failed_write_named(path: str | os.PathLike, partial: Path | None = None):
    """An OSError of the block names `path` when it names no file (a full disk fails the write or the flush, not
    the open, and Python names the file only for the open: the CLI then printed a traceback), and the `partial` file
    it was writing is removed."""
    try:
        yield
    except OSError as err:
        if partial is not None:
            partial.unlink(missing_ok=True)
        err.filename = err.filename or str(path)
        raise


def save_figure_atomically(figure, path: str | os.PathLike, **savefig_options) -> None:
    """matplotlib's savefig through `<path>.partial`, renamed into place: written straight to `path`, a full disk
    left a cut PNG there that an export then published, its card showing it."""
    partial = Path(f"{path}.partial")
    with failed_write_named(path, partial):
        figure.savefig(partial, format=Path(path).suffix.lstrip(".") or "png", **savefig_options)
    sync_to_disk(partial)
    os.replace(partial, path)


# What fsync reports when the data written is not on disk: the write must count as failed
_DATA_LOST_ERRNOS = {errno.EIO, errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def sync_to_disk(path: str | os.PathLike, contents: bool = True) -> None:
    """fsync `path`, and everything under it if it is a folder and `contents`, before it is renamed into place: the
    rename is atomic against a kill, but after a power cut a file system may keep the new name and lose the data
    written under it (ext4's delayed allocation, XFS). After the rename, the folder holding it (contents=False: its
    entries, not every file under it). A file system that cannot fsync (some network mounts: EINVAL, ENOTSUP) is
    skipped; one that reports the data lost (EIO, or a full disk or quota found only now: NFS, quota file systems)
    raises, naming the file, before the rename makes it look saved.
    """
    path = Path(path)
    for item in [*path.rglob("*"), path] if path.is_dir() and contents else [path]:
        try:
            fd = os.open(item, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError as err:
            # a file's data lost fails the write; a folder's fsync (its entries) stays best effort: some mounts
            # (WSL's DrvFs over Samba) answer EIO to every one
            if err.errno in _DATA_LOST_ERRNOS and not item.is_dir():
                err.filename = err.filename or str(item)
                raise
        finally:
            os.close(fd)


def verify_manifest(folder: str | os.PathLike, quick: bool = False) -> str | None:
    """None when every file folder/manifest.json lists (documentation aside) is present with its size and (unless
    `quick`) its sha256; otherwise a sentence saying what is wrong. Without a manifest: "it has no manifest.json"."""
    folder = Path(folder)
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        return f"it has no {MANIFEST_NAME}"
    try:
        files = json.loads(manifest_path.read_text())["files"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        return f"its {MANIFEST_NAME} is unreadable ({err})"
    for name, expected in files.items():
        if is_documentation(name):  # listed by manifests written before the card became editable
            continue
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != expected["size"]:
            if path.stat().st_size < 1024 and path.read_bytes().startswith(b"version https://git-lfs"):
                return (f"{name} is a Git LFS pointer, not the file (a clone without git-lfs): run `git lfs install` "
                        "and `git lfs pull` in the clone")
            return f"{name} has {path.stat().st_size} bytes, the manifest says {expected['size']}"
        if not quick and not _has_sha256(path, expected["sha256"]):
            return f"{name} does not match its sha256 in the manifest (the file changed or is corrupt)"
    return None


def unlisted_files(folder: str | os.PathLike, names: list[str]) -> list[str] | None:
    """Those of `names` (paths relative to `folder`) that folder/manifest.json does not list, documentation and the
    manifest aside: files added after the folder was written. None when the folder has no readable manifest.

    Not part of verify_manifest: a checkpoint legitimately holds files written after its manifest (each rank's
    random_states_<rank>.pkl); a folder about to be published must hold only what export wrote."""
    try:
        listed = json.loads((Path(folder) / MANIFEST_NAME).read_text())["files"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return None
    return sorted(name for name in names if name != MANIFEST_NAME and name not in listed and not is_documentation(name))


def check_manifest(folder: str | os.PathLike) -> None:
    """Raise a UserError naming the damaged file when `folder` has a manifest that it does not match."""
    if (Path(folder) / MANIFEST_NAME).is_file() and (problem := verify_manifest(folder)) is not None:
        raise UserError(f"{folder} is damaged: {problem}; save, copy or export it again (a file you changed in it "
                        f"yourself, other than by save_pretrained: delete its {MANIFEST_NAME} to take the folder as "
                        "it is now)")


def _has_sha256(path: Path, sha256: str) -> bool:
    return cached_sha256(path) == sha256


def from_pretrained_checked(from_pretrained, path, *model_args, **kwargs):
    """`from_pretrained(path, ...)` for our model classes, with the checks transformers leaves out: a local folder
    with a manifest must match it, and a tensor missing from the file is an error, not a random initialisation.

    One exception, as in transformers: a task head loaded from a folder another class saved (a causal LM folder into
    ...ForSequenceClassification) gets its new head weights initialised; its body must still be complete."""
    saved_tied = False
    if path is not None and (folder := Path(path) / (kwargs.get("subfolder") or "")).is_dir():  # None: weights given
        check_manifest(folder)
        if (folder / "config.json").is_file():
            saved_tied = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("tie_word_embeddings",
                                                                                             True)
    wants_info = kwargs.pop("output_loading_info", False)
    model, info = from_pretrained(path, *model_args, output_loading_info=True, **kwargs)
    saved_by = getattr(model.config, "architectures", None) or ()
    same_class = type(model).__name__ in saved_by
    # a base model's folder is transformers' way to start any head, an LM head too (its common tests load one so)
    base_class = type(getattr(model, "base_model", model)).__name__
    raise_if_incomplete(path, model, info, whole_model=same_class,
                        new_head_allowed=bool(kwargs.get("ignore_mismatched_sizes")), saved_tied=saved_tied is True,
                        new_lm_head_allowed=base_class in saved_by)
    return (model, info) if wants_info else model


def raise_if_incomplete(folder, model, info: dict, whole_model: bool, new_head_allowed: bool = False,
                        saved_tied: bool = False, new_lm_head_allowed: bool = False) -> None:
    """UserError when loading left a weight of `model` uninitialised or of the wrong shape. With whole_model=False
    only the body counts (the weights under base_model_prefix; all of them for a base model). `new_head_allowed`
    (the caller passed ignore_mismatched_sizes=True, e.g. num_labels=3 on a 2-label classifier) lets a head weight
    of another shape be initialised anew, as transformers does; the body must still match. `saved_tied`: the folder's
    config.json ties the LM head, so a missing lm_head.weight is a tied head asked to be untied, not a lost one."""
    tied = set(getattr(model, "_tied_weights_keys", None) or {}) if model.config.tie_word_embeddings else set()
    missing = [key for key in info.get("missing_keys", ()) if key not in tied]
    has_head = getattr(model, "base_model", model) is not model
    if not whole_model and has_head:
        # A task head's own weights may start anew; an untied LM head may not, from a task head's folder: it was the
        # body's trained output, and a random one gives fluent-looking wrong tokens. From a base model's folder
        # (AutoModel's) it starts anew, as in transformers, whose common tests load it so.
        kept = (f"{model.base_model_prefix}.",) if new_lm_head_allowed else (f"{model.base_model_prefix}.", "lm_head.")
        missing = [key for key in missing if key.startswith(kept)]
    mismatched = [str(item) for item in info.get("mismatched_keys", ())
                  if not (new_head_allowed and has_head and not _key(item).startswith(f"{model.base_model_prefix}."))]
    if saved_tied and missing == ["lm_head.weight"] and not mismatched and not model.config.tie_word_embeddings:
        raise UserError(
            f"{folder} holds no lm_head.weight: its LM head is the token embedding (tied, stored once), and "
            "tie_word_embeddings=False asks for a head of its own; load it tied (leave tie_word_embeddings out), "
            "then untie with model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.clone()) "
            "and model.config.tie_word_embeddings = False"
        )
    if missing == ["lm_head.weight"] and not mismatched and not whole_model:
        saved_by = ", ".join(getattr(model.config, "architectures", None) or ()) or "another class"
        raise UserError(
            f"{folder} was saved by {saved_by}, which keeps no lm_head.weight, and its LM head is untied "
            "(tie_word_embeddings=False): loaded as a causal LM its head would be random. Load the causal LM folder "
            "the body came from, or load this folder with the class that saved it"
        )
    if missing or mismatched:
        detail = ", ".join([*sorted(missing)[:5], *mismatched[:5]])
        raise UserError(
            f"{folder} does not hold every weight of its config: missing {len(missing)}, wrong shape "
            f"{len(mismatched)} ({detail}); " + (_wrapper_prefix_hint(info) or
                                                 "the file is from another architecture or incomplete — save it again")
        )


# What wrappers put before every weight name when their state_dict is saved instead of the model's own
WRAPPER_PREFIXES = {"_orig_mod.": "torch.compile", "module.": "DistributedDataParallel"}


def _wrapper_prefix_hint(info: dict) -> str | None:
    """The fix when the file's names carry a wrapper's prefix (the weights are there, under other names)."""
    unexpected = list(info.get("unexpected_keys", ()))
    for prefix, wrapper in WRAPPER_PREFIXES.items():
        if unexpected and all(key.startswith(prefix) for key in unexpected):
            pattern = 'r"^' + prefix[:-1] + '\\."'  # a raw string to paste: r"^_orig_mod\."
            return (f"its weights are named {unexpected[0]!r}…, with {wrapper}'s prefix {prefix!r}: load it with "
                    f"key_mapping={{{pattern}: \"\"}} and save_pretrained it again, and save the unwrapped model "
                    f"(accelerator.unwrap_model(model), or model._orig_mod / model.module) in future")
    return None


def _key(mismatched_item) -> str:
    """The weight name of one of transformers' mismatched_keys entries (a name, or a (name, shapes...) tuple)."""
    return mismatched_item[0] if isinstance(mismatched_item, (tuple, list)) else str(mismatched_item)


__all__ = [
    "MANIFEST_NAME", "check_manifest", "from_pretrained_checked", "is_documentation", "manifest_kept_current",
    "raise_if_incomplete",
    "sha256_file", "unlisted_files", "verify_manifest", "write_manifest",
]
