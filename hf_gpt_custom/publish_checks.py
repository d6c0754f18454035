"""The checks a folder passes before it is published (`check_export`: export runs it on its staging folder, `push`
before uploading): the files it must hold (`remote_code_files`), no pickle, no local path — the one rule for what
counts as one, which export's scrub of the JSON files shares — and a card that parses.

The export and upload themselves live in hub.py; this module only reads files.
"""

from __future__ import annotations

import bz2
import gzip
import itertools
import json
import lzma
import os
import pickle
import pickletools
import re
import zipfile
from pathlib import Path
from typing import Any

from .errors import MissingFileError, UserError
from .manifest import MANIFEST_NAME, check_manifest, is_documentation, unlisted_files
from .model_folder import saved_task_head_class

# Keys transformers writes into tokenizer_config.json about how it was loaded here, not what the tokenizer is.
LOAD_TIME_KEYS = ("is_local", "local_files_only")
# Names that say "pickle" (torch.save, pickle, joblib), also under a compression suffix: training_args.pkl.gz.
PICKLE_SUFFIXES = {".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib"}
COMPRESSION_SUFFIXES = {".gz", ".bz2", ".xz", ".lzma", ".zst"}
# safetensors loaders never unpickle, and the header's first bytes (its length) may look like a pickle's: the weights
# are judged by name, never read whole, and not scanned for text.
WEIGHT_SUFFIXES = {".safetensors"}
# Vocabulary data, not settings: a byte-level vocabulary may hold "/home" or "/usr" as tokens (Llama 3's and Qwen's
# splits make "#!/usr/bin" into "#!" + "/usr"), which are no local path of the run. These files are vocabulary
# only; tokenizer.json is checked without its model's vocab and merges (without_vocabulary).
VOCABULARY_FILES = ("vocab.json", "merges.txt", "added_tokens.json")
# Pickle protocols 2-5 open with the PROTO opcode and the protocol number (pickletools); torch.save writes a zip
# archive holding archive/data.pkl.
_PICKLE_OPENINGS = tuple(bytes([0x80, protocol]) for protocol in range(2, 6))
_ZIP_OPENING = b"PK\x03\x04"
_COMPRESSED_OPENINGS = {b"\x1f\x8b": gzip.open, b"BZh": bz2.open, b"\xfd7zXZ\x00": lzma.open}
# A person's home folder on any machine, in the text a person may edit or add (the card, notes): one written on another
# machine names that machine, which this machine's own paths do not catch. One or a path into it (/home/alice,
# /var/home/erin on Fedora Atomic, /Users/bob/x, C:\Users\carol\x in any case, its backslashes doubled in JSON,
# and as WSL or Git Bash reach it: /mnt/c/Users/dave, /c/Users/dave), not inside a URL or a relative path
# ("org/home/x"); conventional names are no one's (a Space's /home/user/app, Docker's /root, a CI runner's or a
# cloud image's home, Windows' All Users).
_ANY_HOME_FOLDER = re.compile(r"(?<![\w.-])(?:(?:/var)?/home/|/Users/|(?:/mnt)?/[A-Za-z]/(?i:users)/"
                              r"|[A-Za-z]:(?:\\{1,2}|/)(?i:users)(?:\\{1,2}|/))(?P<name>[\w-]+(?:\.[\w-]+)*)")
_NO_ONES_HOME = {"user", "username", "your-username", "your_username", "yourname", "you", "me", "name", "runner",
                 "jovyan", "ubuntu", "ec2-user", "vscode", "linuxbrew", "shared", "public", "default", "all",
                 "guest"}


def check_card_names(folder: str | Path, repo_id: str) -> None:
    """A UserError when the card's loading snippets name another repository than `repo_id` (export's default
    `your-username/<run_name>`, or an earlier --repo-id): published, they would load someone else's model or none."""
    card = (Path(folder) / "README.md").read_text(encoding="utf-8")
    named = sorted(set(re.findall(r"from_pretrained\(\s*[\"']([^\"']+)[\"']", card)) - {repo_id})
    if named:
        raise UserError(
            f"the card (README.md) loads {', '.join(named)}, not {repo_id}: export the run again with --repo-id "
            f"{repo_id} (an edited card is kept aside), or edit README.md to name {repo_id}"
        )


def remote_code_files(with_tokenizer: bool = True) -> set[str]:
    """The code a folder needs for trust_remote_code: our entry modules (configuration, modeling and, unless the
    folder keeps another tokenizer class, tokenization) and every module they import (transformers copies those on
    save_pretrained; this asks it which they are)."""
    from transformers.dynamic_module_utils import get_relative_import_files

    package = Path(__file__).parent
    kinds = ("configuration", "modeling", "tokenization") if with_tokenizer else ("configuration", "modeling")
    entries = [package / f"{kind}_gpt_custom.py" for kind in kinds]
    return {Path(path).name for entry in entries for path in (entry, *get_relative_import_files(str(entry)))}


def uses_our_tokenizer(folder: str | Path) -> bool:
    """True when the folder's tokenizer_config.json names our tokenizer class (export keeps any other as it is)."""
    path = Path(folder) / "tokenizer_config.json"
    try:
        tokenizer_class = json.loads(path.read_text(encoding="utf-8")).get("tokenizer_class")
    except (OSError, json.JSONDecodeError):
        return True  # no readable tokenizer config: require everything, and let the check name what is missing
    return tokenizer_class in ("GPTCustomTokenizerFast", "GPTCustomTokenizer")  # transformers may drop "Fast"


def publishes_our_tokenizer(folder: str | Path) -> bool:
    """True when export ships `folder`'s tokenizer as our class (load_folder_tokenizer): a GPT-2 folder's own
    GPT2Tokenizer that encodes alike goes out as ours, with our tokenizer code beside it — what the card describes."""
    from .model_folder import load_folder_tokenizer
    from .tokenization_gpt_custom import GPTCustomTokenizerFast

    return uses_our_tokenizer(folder) or isinstance(load_folder_tokenizer(folder), GPTCustomTokenizerFast)


def _check_scores_are_of_these_weights(folder: Path) -> None:
    """eval/results.json may be edited or replaced (documentation, outside the manifest), and `eval --out
    EXPORT/eval` of another model wrote its scores there, beside a card that published other numbers; export
    refuses such a run (card.read_run_results), push refused nothing. Results that record no weights (older, or of
    a loaded model) are taken as they are, as export takes them."""
    import json

    from .manifest import scored_other_weights

    path = folder / "eval" / "results.json"
    if not path.is_file():
        return
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return  # not a results file of ours: the card's own checks read what it publishes
    if isinstance(results, dict) and scored_other_weights(results, folder):
        raise UserError(f"cannot publish {folder}: eval/results.json scored other weights than this folder's "
                        f"model.safetensors, so its numbers would be published beside this model; export the run "
                        f"again, or evaluate this folder into it ({_evaluate_here(folder)}) and bring the card's "
                        f"figures up to date")


def _evaluate_here(folder: Path) -> str:
    """The evaluation of `folder` into its eval/, as a command to paste: run from inside the folder, `--model .`
    records no path of this machine in results.json, which push would refuse."""
    from .errors import shell_word

    return f"cd {shell_word(folder)} && hf-gpt-custom eval --model . --out eval --tasks ..."


def _check_card_is_of_these_weights(folder: Path) -> None:
    """The card export wrote shows the figures (table, model-index) of the weights it was written for, which the
    manifest records. New weights saved into the folder since, then evaluated into eval/ as push asked, were published
    under the old model's figures (the docsclaims3 hunt). A card edited since export is the user's, taken as it is."""
    import json

    from .manifest import sha256_file, weights_fingerprint

    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
        written_for, card = manifest.get("card_weights_sha256"), (manifest.get("documentation") or {}).get("README.md")
    except (OSError, ValueError, AttributeError):
        return  # check_manifest says what is wrong with it
    if written_for is None or card is None or not (folder / "README.md").is_file():
        return  # an export before the record, or no card of export's
    if written_for != weights_fingerprint(folder) and sha256_file(folder / "README.md") == card:
        # a task head is not evaluated by `eval` (language models only): its figures are fine-tuning's held-out ones
        new_figures = ("put this model's held-out figures into the card" if saved_task_head_class(folder) is not None
                       else f"evaluate this folder ({_evaluate_here(folder)}) and put its figures into the card")
        raise UserError(f"cannot publish {folder}: its model card (README.md) is the one export wrote for other "
                        "weights than this folder's (a model was saved into it since), so its evaluation figures "
                        f"and model-index are the old model's; export the run again, or {new_figures}, which push "
                        "then takes as yours")


def check_export(folder: str | Path, forbidden: tuple[str, ...] | list[str] = (),
                 require_manifest: bool = True) -> list[tuple[str, int]]:
    """Check that `folder` can be published; return the files an upload sends, as (relative path, size in bytes),
    sorted (huggingface_hub leaves .git and .cache/huggingface out and refuses any other .cache file).

    Refused with a UserError naming the file: a missing required file (weights, config, card, remote code), a file
    that no longer matches the folder's manifest or that it does not list (the card and other documentation may be
    edited or added, see manifest.is_documentation), a pickle, a card whose metadata does not parse or that links a
    missing image, and anything local — the `forbidden` strings (the run's own absolute paths), this machine's home
    and working directory, any machine's home folder in the card and other documentation, an absolute path as a JSON
    value, or the load-time keys transformers writes (`is_local`, `local_files_only`). An export always has its
    manifest (`require_manifest`: export checks its staging folder before writing it): without one, nothing tells an
    edited or added file apart."""
    folder = Path(folder)
    if folder.is_file():
        raise UserError(f"cannot publish {folder}: it is a file; give the folder export wrote ({folder.parent}, if "
                        "it is that folder's)")
    if not folder.is_dir():
        raise MissingFileError(f"cannot publish {folder}: there is no such folder; write it first with "
                               "`hf-gpt-custom export RUN_DIR OUT_DIR`")
    missing = [name for name in ("config.json", "README.md") if not (folder / name).is_file()]
    if missing:
        raise MissingFileError(
            f"cannot publish {folder}: it has no {' and no '.join(missing)} (not an export: a run's final/ has no "
            "model card); write the export first with `hf-gpt-custom export RUN_DIR OUT_DIR`"
        )
    if require_manifest and not (folder / MANIFEST_NAME).is_file():
        raise UserError(f"cannot publish {folder}: it has no {MANIFEST_NAME}, so its files cannot be checked against "
                        f"what export wrote (not an export, or the manifest was removed); export the run again")
    for index in sorted(folder.glob("model.safetensors.index*.json")):  # model.safetensors.index.fp16.json: a variant
        variant = index.name.removeprefix("model.safetensors.index").removesuffix(".json")
        if (folder / f"model{variant}.safetensors").is_file():
            raise UserError(f"cannot publish {folder}: it holds the weights twice, model{variant}.safetensors and the "
                            f"shards of {index.name}, and from_pretrained reads model{variant}.safetensors alone; "
                            "delete the layout that is not the model's (save_pretrained of this package's model does "
                            "so itself)")
    # An upload follows symlinks: one to a file or folder elsewhere on the machine would publish that file's bytes
    inside = folder.resolve()
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() and not path.resolve().is_relative_to(inside):
            raise UserError(f"cannot publish {folder}: {path.relative_to(folder).as_posix()} is a symlink to "
                            f"{path.resolve()}, outside the folder, and an upload would send that file; copy the file "
                            "itself in (cp --remove-destination TARGET LINK) or remove the link")
    files = sorted(
        (path.relative_to(folder).as_posix(), path.stat().st_size)
        for path in folder.rglob("*")
        if path.is_file() and _is_uploaded(path.relative_to(folder).as_posix())
    )
    names = {name for name, _ in files}
    cached = [name for name in sorted(names) if ".cache" in name.split("/")]
    if cached:
        raise UserError(f"cannot publish {folder}: {cached[0]} is under a .cache folder, which the Hub does not store; "
                        "remove it")
    required = {"config.json", "README.md", *remote_code_files(uses_our_tokenizer(folder)), *_weight_files(folder)}
    if saved_task_head_class(folder) is None:  # a causal LM generates: its generation settings must ship
        required.add("generation_config.json")
    missing = sorted(required - names)
    if missing:
        raise UserError(f"cannot publish {folder}: missing {', '.join(missing)}; export the run again")
    check_manifest(folder)  # the weights, config, code and tokenizer as exported; the card may have been edited
    pickled = [name for name in sorted(names) if is_pickle(folder / name)]
    if pickled:
        raise UserError(f"cannot publish {folder}: it holds pickled files ({', '.join(pickled)}); remove them")
    _check_nothing_added(folder, sorted(names))
    _check_scores_are_of_these_weights(folder)
    _check_card_is_of_these_weights(folder)
    for name in sorted(names):
        if Path(name).suffix not in WEIGHT_SUFFIXES and name not in VOCABULARY_FILES:
            _check_no_local_paths(folder / name, name, forbidden)
    _check_card(folder, linked_license_required=require_manifest)
    return files


def _weight_files(folder: Path) -> list[str]:
    """The weight files an export must hold: model.safetensors, or (a model over save_pretrained's max_shard_size)
    model.safetensors.index.json and every shard its weight_map names."""
    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file() or not index.is_file():
        return ["model.safetensors"]
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(f"cannot publish {folder}: {index.name} is not a shard index ({err}); export the run "
                        "again") from err
    return [index.name, *shards]


# Files a repository holds beside the model that no export writes: git's own, and the license text a card with
# `license: other` points to (export's warning for a license the Hub does not list asks for one).
REPOSITORY_FILES = (".gitattributes", ".gitignore", "LICENSE", "LICENSE.txt")


def _check_nothing_added(folder: Path, names: list[str]) -> None:
    """Refuse files the manifest does not list (documentation aside): added after export, they would be uploaded
    unchecked (`evil.py` beside the remote code, `model-extra.safetensors` beside the weights). export checks its
    staging folder before the manifest is written: nothing to compare with there."""
    if not (folder / MANIFEST_NAME).is_file():
        return
    added = unlisted_files(folder, names)
    if added is None:
        return  # an unreadable manifest: check_manifest has already named it
    added = [name for name in added if name not in REPOSITORY_FILES]
    if added:
        shown = ", ".join(added[:5]) + (f" and {len(added) - 5} more" if len(added) > 5 else "")
        one = len(added) == 1
        raise UserError(f"cannot publish {folder}: {shown} {'is' if one else 'are'} not in its manifest (added after "
                        f"export); remove {'it' if one else 'them'}, or export the run again")


def is_pickle(path: Path) -> bool:
    """True for a pickle by name (PICKLE_SUFFIXES, also compressed: x.pkl.gz) or by content: a pickle of any protocol,
    a zip archive holding a .pkl member (torch.save), or either inside gzip/bz2/xz. Reads a few bytes of each file
    (a zip's member list; a text file up to its first byte that is no pickle opcode, a real pickle whole); a
    .safetensors file is judged by its name."""
    suffixes = [suffix.lower() for suffix in path.suffixes]
    while suffixes and suffixes[-1] in COMPRESSION_SUFFIXES:
        suffixes.pop()
    if suffixes and suffixes[-1] in PICKLE_SUFFIXES:
        return True
    if path.suffix.lower() in WEIGHT_SUFFIXES:
        return False
    with open(path, "rb") as handle:
        opening = handle.read(6)
    opener = next((opener for magic, opener in _COMPRESSED_OPENINGS.items() if opening.startswith(magic)), None)
    if opener is not None:
        try:
            with opener(path, "rb") as handle:
                opening = handle.read(2)
        except (OSError, EOFError, lzma.LZMAError):  # a broken archive: not readable as a pickle either
            return False
    if opening.startswith(_PICKLE_OPENINGS):
        return True
    if opening.startswith(_ZIP_OPENING):
        return _zip_holds_pickle(path)
    return _is_whole_text_pickle(path, opener or open)


def _is_whole_text_pickle(path: Path, opener) -> bool:
    """A pickle of protocol 0 or 1, which has no opening mark: the file (decompressed) loads as pickles through an
    unpickler that imports and calls nothing (_NothingImported: whatever a pickle names or calls is one stand-in
    that takes every call, state and item, so a real pickle loads whatever it does), and one of them names a class
    or function (what follows it does not matter: pickle.load ignores it), or they end the file, give or take a line
    end. Text fails at once: its first byte is no opcode, or the opcodes make no pickle ("torch 2." is TUPLE without
    a MARK; "import x" is INST without one), or it loads a value naming nothing and goes on as no pickle ("N.B. ..."
    is None, STOP, then "B" wants a length). A legacy torch.save file is several pickles, the first naming nothing.
    Reads at most _MOST_READ bytes; a length or memo index past them allocates nothing."""
    with opener(path, "rb") as handle:
        reader = _BoundedReader(handle, _MOST_READ)
        if reader.peek(1) not in _OPCODE_BYTES:  # PNG, JSON, Markdown, Python: never read past their first byte
            return False
        for _ in range(_MOST_PICKLES):
            unpickler = _NothingImported(reader)
            try:
                unpickler.load()
            except _TooLong:  # past what is read: a pickle if it named something before
                return unpickler.named_something
            except Exception:  # UnpicklingError, EOFError, IndexError (no MARK), ...: the opcodes make no pickle
                return False
            if unpickler.named_something:
                return True
            if reader.peek(64).strip() == b"" and len(reader.peek(64)) < 64:  # it ends the file: a pickle of data
                return True
    return False


_MOST_READ = 16 << 20  # a text-protocol pickle naming no class within its first 16 MiB is let through
_MOST_PICKLES = 8  # a legacy torch.save holds 4 (magic number, protocol, system info, the object)
_OPCODE_BYTES = {bytes([opcode.code.encode("latin-1")[0]]) for opcode in pickletools.opcodes}


class _TooLong(Exception):
    pass


class _BoundedReader:
    """read/readline over a binary stream, with a look-ahead, refusing (_TooLong) to go past `limit` bytes in all:
    a length an opcode gives is checked before anything is read or allocated."""

    def __init__(self, handle, limit: int):
        self._handle, self._left, self._ahead = handle, limit, b""

    def peek(self, n: int) -> bytes:
        if len(self._ahead) < n:
            self._ahead += self._take(n - len(self._ahead))
        return self._ahead[:n]

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0 or n > self._left + len(self._ahead):
            raise _TooLong
        data, self._ahead = self._ahead[:n], self._ahead[n:]
        return data + self._take(n - len(data))

    def readline(self) -> bytes:
        end = self._ahead.find(b"\n") + 1
        if end:
            line, self._ahead = self._ahead[:end], self._ahead[end:]
            return line
        line, self._ahead = self._ahead, b""
        more = self._handle.readline(self._left) if self._left else b""
        self._left -= len(more)
        return line + more

    def _take(self, n: int) -> bytes:
        data = self._handle.read(min(n, self._left))
        self._left -= len(data)
        return data


class _StandIn:
    """Whatever a pickle names, and whatever calling it gives: one object (_STAND_IN) that takes any call, __new__,
    state, item or attribute and stays itself, building nothing."""

    def __new__(cls, *args, **kwargs):  # NEWOBJ calls cls.__new__(cls, ...) on what REDUCE returned
        return _STAND_IN

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return self

    def __getattr__(self, name):
        return self

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, item):
        pass

    def extend(self, items):
        pass

    def add(self, item):
        pass


_STAND_IN = object.__new__(_StandIn)


class _NothingImported(pickle._Unpickler):  # the Python unpickler: its memo is a dict, not an array a PUT can size
    """An unpickler that never imports or calls what the file names: each global, extension code or persistent id
    is _STAND_IN (an extension cached by an earlier real load included), and no length is allocated before reading."""

    named_something = False
    dispatch = dict(pickle._Unpickler.dispatch)

    def find_class(self, module, name):
        self.named_something = True
        return _STAND_IN

    def persistent_load(self, pid):
        self.named_something = True
        return _STAND_IN

    def get_extension(self, code):
        self.named_something = True
        self.append(_STAND_IN)

    def _no_preallocation(self):  # BYTEARRAY8 sizes a bytearray from its length before reading it
        raise _TooLong

    dispatch[pickle.BYTEARRAY8[0]] = _no_preallocation


def _zip_holds_pickle(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:  # reads the member list at the end, not the members
            return any(Path(name).suffix.lower() in (".pkl", ".pickle") for name in archive.namelist())
    except zipfile.BadZipFile:
        return False


def _is_uploaded(name: str) -> bool:
    """Whether huggingface_hub's upload_folder sends the file `name` (its DEFAULT_IGNORE_PATTERNS leave out .git and
    .cache/huggingface, at any depth)."""
    parts = name.split("/")
    in_hf_cache = any(parts[i:i + 2] == [".cache", "huggingface"] for i in range(len(parts) - 1))
    return ".git" not in parts and not in_hf_cache


def _check_no_local_paths(path: Path, name: str, forbidden) -> None:
    text = path.read_bytes().decode("utf-8", errors="replace")
    if name == "tokenizer.json":  # its settings, not its vocabulary (VOCABULARY_FILES)
        text = json.dumps(without_vocabulary(json.loads(text)))
    prefixes = (re.search(re.escape(prefix) + r"(?![\w.-])", text) for prefix in _local_prefixes(forbidden))
    matches = itertools.chain(prefixes, _FILE_URL.finditer(text))
    if is_documentation(name) and not name.endswith(".png"):
        matches = itertools.chain(matches, (home for home in _ANY_HOME_FOLDER.finditer(text)
                                            if home["name"].lower() not in _NO_ONES_HOME),
                                  _paths_of_this_machine(text))
    match = next((match for match in matches if match), None)
    if match:
        raise UserError(
            f"cannot publish: {name} contains the local path {match.group()!r} (…{text[max(0, match.start() - 40):match.end() + 40]!r}…); "
            "remove it, or export again"
        )
    if path.suffix == ".json":
        found = find_local_json_values(json.loads(text))
        if found:
            raise UserError(f"cannot publish: {name} contains local information {found}; export again")


# A file URL ("hf-gpt-custom @ file:///home/me/hf-gpt-custom", as pip freeze writes a local install): a path of the
# machine it was written on, whatever comes before it
_FILE_URL = re.compile(r"\bfile:/{1,3}[^\s'\"<>)\]]+", re.IGNORECASE)
# An absolute path of two names or more inside prose ("evaluated from /work/runs/x/final"): not after a word, a dot,
# a colon or a slash, so a URL's path ("huggingface.co/docs/hub") and a relative one ("eval/table.md") are not one.
_ABSOLUTE_PATH_IN_TEXT = re.compile(r"(?<![\w.:/~-])/[\w.@+-]+(?:/[\w.@+-]+)+")
# Folders every Linux machine has: a path under them ("/usr/bin/env", "/dev/null") tells nothing about this one.
_SYSTEM_FOLDERS = {"usr", "bin", "sbin", "etc", "dev", "proc", "sys", "lib", "lib32", "lib64", "boot", "var", "run",
                   "opt", "snap", "Library", "System", "Applications"}


def _paths_of_this_machine(text: str):
    """Absolute paths in documentation that exist here ("/work/shared/data/copa/val.jsonl"), outside the system
    folders: the home and working directory are checked by prefix, other folders of this machine only this way, as
    a card written elsewhere may name paths that exist on no machine but its author's."""
    for match in _ABSOLUTE_PATH_IN_TEXT.finditer(text):
        names = Path(match.group()).parts[1:]
        if names[0] not in _SYSTEM_FOLDERS and Path("/", names[0], names[1]).exists():
            yield match


def without_vocabulary(tokenizer_json: dict) -> dict:
    """tokenizer.json without its model's vocab and merges (see VOCABULARY_FILES): the part that may hold settings."""
    model = {key: value for key, value in (tokenizer_json.get("model") or {}).items() if key not in ("vocab", "merges")}
    return {**tokenizer_json, "model": model}


def _local_prefixes(forbidden) -> list[str]:
    """The run's own absolute paths plus this machine's home and working directory (never "/" itself)."""
    prefixes = {str(item) for item in forbidden}
    for base in (Path.home(), Path.cwd()):
        prefixes.update({str(base), str(base.resolve())})
    return sorted((p for p in prefixes if p.strip("/\\") and os.path.isabs(p)), key=len, reverse=True)


def find_local_json_values(value: Any, where: str = "") -> str | None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in LOAD_TIME_KEYS:
                return f"key {where + key!r}"
            found = find_local_json_values(item, f"{where}{key}.")
            if found:
                return found
    elif isinstance(value, list):
        for position, item in enumerate(value):
            found = find_local_json_values(item, f"{where}{position}.")
            if found:
                return found
    elif isinstance(value, str) and is_local_path(value):
        return f"{where.rstrip('.')} = {value!r}"
    return None


# The Hub's license ids (https://huggingface.co/docs/hub/repositories-licenses, read 2026-11; llama3.x, llama4,
# eupl-1.2 and apple-* added since that page's list was first written). The Hub refuses a card whose `license` is
# none of them when it is pushed: export says so first, instead of after the whole upload was prepared.
HUB_LICENSES = frozenset("""
    apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0 bigcode-openrail-m
    afl-3.0 artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause bsd-3-clause-clear c-uda cc cc0-1.0 cc-by-2.0
    cc-by-2.5 cc-by-3.0 cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0
    cc-by-nc-nd-3.0 cc-by-nc-nd-4.0 cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 cdla-sharing-1.0
    cdla-permissive-1.0 cdla-permissive-2.0 wtfpl ecl-2.0 epl-1.0 epl-2.0 etalab-2.0 eupl-1.1 eupl-1.2 agpl-3.0 gfdl
    gpl gpl-2.0 gpl-3.0 lgpl lgpl-2.1 lgpl-3.0 isc lppl-1.3c ms-pl mpl-2.0 odc-by odbl openrail++ osl-3.0 postgresql
    ofl-1.1 ncsa unlicense zlib pddl lgpl-lr deepfloyd-if-license llama2 llama3 llama3.1 llama3.2 llama3.3 llama4
    gemma apple-ascl apple-amlr unknown other
""".split())
HUB_LICENSES_URL = "https://huggingface.co/docs/hub/repositories-licenses"


def hub_license(license: str) -> str:
    """`license` as the Hub's id (its case aside: "Apache-2.0" is apache-2.0). A near miss of a known id ("apache2",
    "cc-by-4") raises a UserError naming the id meant; an id this list does not know is kept with a warning, since
    the Hub adds licenses over time."""
    import difflib
    import logging

    wanted = license.strip().lower()
    if wanted in HUB_LICENSES:
        return wanted
    close = difflib.get_close_matches(wanted, sorted(HUB_LICENSES), n=3, cutoff=0.75)
    if close:
        raise UserError(f"--license {license!r} is not a Hub license id; did you mean {' or '.join(close)}? "
                        f"(the list: {HUB_LICENSES_URL})")
    logging.getLogger(__name__).warning(
        "--license %r is not among the Hub's license ids known here (%s): the Hub refuses a card whose license it does "
        "not list; use one of its ids, or `--license other` and put the license's text in LICENSE (or LICENSE.md) in the "
        "exported folder before the push", license, HUB_LICENSES_URL)
    return license.strip()


def hub_languages(language: str) -> list[str]:
    """`language` ("en", or several comma-separated: "en,fr") as the card's `language:` list: ISO 639 codes (two or
    three lowercase letters, "EN" taken as "en"), or the Hub's "multilingual" and "code". Anything else is refused by
    name, since the Hub files a card's language by these codes and a misspelt one files the model nowhere."""
    codes = [code.strip().lower() for code in language.split(",") if code.strip()]
    wrong = [code for code in codes if not (re.fullmatch(r"[a-z]{2,3}", code) or code in ("multilingual", "code"))]
    if not codes or wrong:
        what = "no code given" if not codes else "not an ISO 639 code: " + ", ".join(wrong)
        raise UserError(f"--language {language!r}: {what}; give two- or three-letter codes, comma-separated, e.g. --language en or --language en,fr "
                        "(or multilingual, or code)")
    return list(dict.fromkeys(codes))


def check_license_fields(license: str | None, license_name: str | None, license_link: str | None) -> None:
    """`license_name` and `license_link` are the Hub's fields for `license: other` (an id for the license, and a URL
    or a file of the repository holding its text): refused with another license, where the Hub ignores them; without
    them `other` is a warning, as the Hub then shows a license no one can read."""
    import logging

    given = [flag for flag, value in (("--license-name", license_name), ("--license-link", license_link)) if value]
    if given and license != "other":
        raise UserError(f"{' and '.join(given)} describe a license of your own and go with --license other; "
                        f"{'drop them' if len(given) > 1 else 'drop it'}, or export with --license other")
    if license_name is not None and not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", license_name):
        raise UserError(f"--license-name {license_name!r} is not a license id: lowercase letters, digits, '-' and '.'"
                        f", e.g. my-license-1.0")
    if license == "other" and not (license_name and license_link):
        logging.getLogger(__name__).warning(
            "--license other without --license-name and --license-link: the Hub shows `other` and no way to read "
            "the license; give an id (--license-name my-license-1.0) and its text (--license-link LICENSE.md, a file "
            "you put in the exported folder, or a URL)")


def _check_card(folder: Path, linked_license_required: bool = True) -> None:
    from huggingface_hub import metadata_load

    readme = folder / "README.md"
    try:
        metadata = metadata_load(readme)
    except Exception as err:  # yaml errors of several kinds: all mean the front matter is broken
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""  # +1 for 0-based, +1 for the opening ---
        reason = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"cannot publish: the card's metadata in {readme} does not parse ({reason}{where})") from err
    if not metadata or not metadata.get("license") or not metadata.get("library_name"):
        raise UserError(f"cannot publish: {readme} has no card metadata (license, library_name); export again")
    link = metadata.get("license_link")  # a file of the folder: put there after export, before the push
    if linked_license_required and isinstance(link, str) and "://" not in link and not (folder / link).is_file():
        raise UserError(f"cannot publish: the card's license_link is {link}, which is not in {folder}; put the "
                        f"license's text there (a LICENSE, LICENSE.txt or LICENSE.md file)")
    for image in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", readme.read_text(encoding="utf-8")):
        if "://" not in image and not (folder / image).is_file():
            raise UserError(f"cannot publish: {readme} shows {image}, which is not in {folder}; put the image "
                            "there, or remove it from the card")


def is_local_path(value: str) -> bool:
    """An absolute path of this machine: "/a/b/..." (or an existing "/a"), "~/...", "C:\\...", spaces inside names
    included ("/data/my corpus/input.txt"). Not "/", "</s>" or a sentence or merge rule starting with "/" ("/ x").

    The one rule for both sides: export replaces such values (`_public_value`) and check_export refuses them."""
    if "\n" in value:
        return False
    if value.startswith("~/") or re.match(r"^[A-Za-z]:[\\/]", value):
        return True
    if not value.startswith("/"):
        return False
    names = Path(value).parts[1:]
    if any(name != name.strip() for name in names):  # "/ x", "/a /b": text, not a path
        return False
    return len(names) >= 2 or (len(names) == 1 and Path(value).exists())


def dry_run_report(folder: str | os.PathLike, repo_id: str, private: bool = False, revision: str | None = None) -> str:
    """What `push --dry-run` prints: the checks `push` makes (check_export, check_card_names; a failing one raises),
    then each file that would be uploaded, with its size."""
    files = check_export(folder)
    check_card_names(folder, repo_id)
    total = sum(size for _, size in files)
    lines = [f"dry run: would upload {len(files)} files ({_human_bytes(total)}) from {folder} to "
             f"{repo_id}{'@' + revision if revision else ''}{' (private)' if private else ''}:"]
    lines += [f"  {_human_bytes(size):>10}  {name}" for name, size in files]
    lines.append("checks passed: required files and remote code present, the manifest's files unchanged and none "
                 f"added, no pickles, no local paths, the card's metadata parses and it loads {repo_id}. Nothing was "
                 f"uploaded.")
    return "\n".join(lines)


def _human_bytes(size: int) -> str:
    value, unit = float(size), "B"
    for larger_unit in ("KB", "MB", "GB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger_unit
    return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
