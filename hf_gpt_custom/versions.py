"""The versions of the software that made a result, written beside it (training_summary.json, results.json), as
lm-evaluation-harness records its own: a figure read months later says which code computed it."""

from __future__ import annotations

import importlib.metadata

# this package, and the libraries whose behaviour the figures depend on
RECORDED_PACKAGES = ("hf-gpt-custom", "torch", "transformers", "accelerate", "datasets", "tokenizers")


def software_versions() -> dict[str, str | None]:
    """{distribution name: installed version}, None for one that is not installed."""
    versions = {}
    for name in RECORDED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def scoring_code_sha256() -> str:
    """sha256 over the code an evaluation's numbers come from: the evaluation package's Python modules, the model's
    own code (the modules a model folder ships for trust_remote_code) and model_folder.py, which loads every model
    eval scores. Task files are not code: each scored task's file is in results.json's benchmarks_sha256. The
    package's version stays 0.1.0 from commit to commit, so results.json records this too: `run` evaluates again when
    it changed (an upgrade that fixed a scoring bug would otherwise keep publishing the old figures)."""
    from pathlib import Path

    import hf_gpt_custom.eval as evaluation

    return _code_sha256({"model_folder.py": Path(__file__).parent / "model_folder.py",
                         **_package_files(Path(evaluation.__file__).parent, "eval", (".py",))})


def export_code_sha256() -> str:
    """sha256 over the code an export's folder comes from beside the model's own: the export and its checks
    (hub.py, publish_checks.py) and the model card's code and templates. An export's manifest records it: `run`
    exports again when it changed (an upgrade that fixed the card's snippet kept the old card, in 0 s: the
    cachekeys hunt). The model's own files are compared as they are copied (run_state.made_by_older_code)."""
    from pathlib import Path

    import hf_gpt_custom.model_cards as model_cards

    package = Path(__file__).parent
    return _code_sha256({"hub.py": package / "hub.py", "publish_checks.py": package / "publish_checks.py",
                         **_package_files(Path(model_cards.__file__).parent, "model_cards", (".py", ".md"))})


def _package_files(folder, prefix: str, suffixes: tuple[str, ...]) -> dict:
    """{prefix/relative name: path} of a package folder's files with these suffixes (code; a card's templates)."""
    return {f"{prefix}/{path.relative_to(folder).as_posix()}": path for path in folder.rglob("*")
            if path.is_file() and path.suffix in suffixes}


def _code_sha256(files: dict) -> str:
    """One sha256 over named files and the model's own code (remote_code_files), in name order."""
    import hashlib
    from pathlib import Path

    from hf_gpt_custom.publish_checks import remote_code_files

    package = Path(__file__).parent
    files = {**{name: package / name for name in remote_code_files()}, **files}
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name].read_bytes() + b"\0")
    return digest.hexdigest()
