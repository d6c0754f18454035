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
    """sha256 over the code an evaluation's numbers come from: the evaluation package's Python modules and the
    model's own code (the modules a model folder ships for trust_remote_code). Task files are not code: each scored
    task's file is in results.json's benchmarks_sha256. The package's version stays
    0.1.0 from commit to commit, so results.json records this too: `run` evaluates again when it changed (an
    upgrade that fixed a scoring bug would otherwise keep publishing the old figures)."""
    import hashlib
    from pathlib import Path

    import hf_gpt_custom.eval as evaluation
    from hf_gpt_custom.publish_checks import remote_code_files

    package, eval_package = Path(__file__).parent, Path(evaluation.__file__).parent
    files = {name: package / name for name in remote_code_files()}
    files.update({f"eval/{path.relative_to(eval_package).as_posix()}": path for path in eval_package.rglob("*")
                  if path.suffix == ".py" and path.is_file()})
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name].read_bytes() + b"\0")
    return digest.hexdigest()
