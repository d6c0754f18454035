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
