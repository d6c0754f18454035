"""Download the wheels the lent GPU machine lacks into a folder (benchmarks/gpu_session.sh prepare).

The packages in CARRY at the versions installed here, and, transitively, each of their requirements that the
machine's image does not have (IMAGE), so that its own torch, numpy and the rest are never shadowed. One ordinary
`pip download --no-deps` per package for CPython 3.12 on manylinux x86-64, as the device tool's README says. A
pure-Python package published only as source is built into a wheel here; anything else without a wheel is reported
and skipped (the tests that import it then fail there, by name).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

from packaging.requirements import Requirement

# ../shared/GPU.md: the image has an older transformers and none of these.
CARRY = ("transformers", "datasets", "evaluate", "dill", "multiprocess", "parameterized", "lm_eval")
# The image's Python packages, as the device tool's KINDS.md lists them (read on such a machine on 2026-11-17).
IMAGE = set("""
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
    charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
    jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
    llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
    multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
    nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
    nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
    nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
    opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec
    patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
    py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
    pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
    scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
    shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
    tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
    torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3
    uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())
# The GPU machine's interpreter and platform, for requirement markers.
TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
          "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheels_to_carry() -> tuple[dict[str, str], list[str]]:
    """{name: version installed here} for CARRY and the requirements the image lacks; names not installed here."""
    image = {normalize(name) for name in IMAGE}
    pinned, missing, queue = {}, [], list(CARRY)
    while queue:
        name = normalize(queue.pop())
        if name in pinned or name in missing:
            continue
        try:
            pinned[name] = version(name)
        except PackageNotFoundError:
            missing.append(name)
            continue
        for line in requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate(TARGET):
                continue  # an extra, or another platform's requirement
            if normalize(requirement.name) not in image:
                queue.append(requirement.name)
    return pinned, missing


def fetch_wheel(name: str, pinned_version: str, folder: str) -> bool:
    """A wheel for the GPU machine: downloaded, or built here from the source release when it is pure Python."""
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    pip = [sys.executable, "-m", "pip"]
    requirement = f"{name}=={pinned_version}"
    download = [*pip, "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                "--implementation", "cp", *platforms, "-d", folder, requirement]
    if subprocess.run(download, capture_output=True).returncode == 0:
        return True
    with tempfile.TemporaryDirectory() as build_dir:
        if subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", build_dir, requirement],
                          capture_output=True).returncode != 0:
            return False
        built = list(Path(build_dir).glob("*-none-any.whl"))  # a compiled wheel from here would not run there
        for wheel in built:
            shutil.move(str(wheel), Path(folder) / wheel.name)  # the full path: a rerun replaces the last build
        return bool(built)


def main(folder: str) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    pinned, missing = wheels_to_carry()
    carried = [f"{name}=={v}" for name, v in sorted(pinned.items()) if fetch_wheel(name, v, folder)]
    skipped = sorted(set(f"{name}=={v}" for name, v in pinned.items()) - set(carried)) + missing
    print(f"{len(carried)} wheels in {folder}: {', '.join(carried)}")
    if skipped:
        print("not carried (no wheel for the GPU machine, or not installed here): " + ", ".join(skipped))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".whl")
