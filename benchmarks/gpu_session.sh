#!/usr/bin/env bash
# A GPU session for issue 23 in a few commands: the wheels to carry, the CUDA tests, the GPU benchmark.
# Background: ../shared/GPU.md (what the lent H100 machine has) and the device tool's README (limits: 10 minutes a
# command, 30 minutes a session, at most 8 files back from $OUT).
#
# 1. Here, in the repository root, once (needs pip and the network; writes only ignored folders):
#        bash benchmarks/gpu_session.sh prepare
#    .whl/        wheels the GPU machine lacks, at the versions installed here: transformers (the image has an older
#                 one), datasets, evaluate, dill, multiprocess, parameterized, lm_eval and whatever of their
#                 requirements the image does not have (never torch or anything else it has)
#    .gpu_carry/  tiny Shakespeare (../shared does not travel), the text of the training-loop benchmark
#    Both are added to .git/info/exclude: never commit them.
# 2. On the GPU machine: the device tool's `run`, carry [".whl", ".gpu_carry"], one stage per call, e.g.
#        bash benchmarks/gpu_session.sh tests          # the gpu-marked tests and the tests that once failed only on CUDA
#        bash benchmarks/gpu_session.sh train-eager    # bench_gpu.py --parts train --modes eager
#        bash benchmarks/gpu_session.sh train-compile  # the same compiled (compile warm-ups: minutes)
#        bash benchmarks/gpu_session.sh loop           # hf-gpt-custom train's loop vs the bare model, eager and compiled
#        bash benchmarks/gpu_session.sh generate       # generate(), dynamic and static cache, batch 1 and 16
#        bash benchmarks/gpu_session.sh suite          # python -m pytest -m "not slow" on 8 workers
#    Each stage installs the wheels and the project, then writes its result files and log.txt under $OUT.
#    Extra arguments go to bench_gpu.py (e.g. `train-compile --sweep 16,32` when time is short).
# 3. Here: copy the gpu_*.json files that came back into benchmarks/results/, then rebuild the report from them:
#        python benchmarks/bench_gpu.py --report-only
set -euo pipefail
cd "$(dirname "$0")/.."

stage="${1:-}"
shift || true

exclude_from_git() {
  local exclude
  exclude="$(git rev-parse --git-common-dir)/info/exclude"
  mkdir -p "$(dirname "$exclude")"
  for path in /.whl/ /.gpu_carry/; do
    grep -qxF "$path" "$exclude" 2>/dev/null || echo "$path" >>"$exclude"
  done
}

prepare() {
  exclude_from_git
  mkdir -p .whl .gpu_carry/tinyshakespeare
  cp ../shared/data/tinyshakespeare/input.txt .gpu_carry/tinyshakespeare/input.txt
  python3 benchmarks/gpu_wheels.py .whl
  du -sh .whl .gpu_carry
}

on_gpu_machine() {
  : "${OUT:?run this stage on the GPU machine, through the device tool (it sets OUT)}"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e .
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
}

bench() {
  python3 benchmarks/bench_gpu.py --out "$OUT" "$@" 2>&1 | tee "$OUT/log.txt"
}

case "$stage" in
  prepare) prepare ;;
  tests)
    on_gpu_machine
    python3 -m pytest -q -p no:cacheprovider -rs --junitxml "$OUT/junit.xml" tests/gpu \
      tests/hf_gpt_custom/test_modeling.py tests/transformers_common/test_gpt_custom_common.py 2>&1 | tee "$OUT/log.txt"
    ;;
  suite)
    on_gpu_machine
    python3 -m pytest -q -p no:cacheprovider -m "not slow" -n 8 --junitxml "$OUT/junit.xml" tests 2>&1 \
      | tee "$OUT/log.txt" | tail -40
    ;;
  train-eager)
    on_gpu_machine
    bench --parts train --modes eager "$@"
    ;;
  train-compile)
    on_gpu_machine
    bench --parts train --modes compile "$@"
    ;;
  loop)
    on_gpu_machine
    bench --parts loop --modes eager,compile --text-file .gpu_carry/tinyshakespeare/input.txt "$@"
    ;;
  generate)
    on_gpu_machine
    bench --parts generate "$@"
    ;;
  *)
    echo "usage: bash benchmarks/gpu_session.sh prepare|tests|suite|train-eager|train-compile|loop|generate [bench_gpu.py arguments]" >&2
    exit 2
    ;;
esac
