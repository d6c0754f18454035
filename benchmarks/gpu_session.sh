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
#        bash benchmarks/gpu_session.sh session        # all of it in one call of at most ~9 minutes (see session())
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
  mkdir -p .whl .gpu_carry/tinyshakespeare .gpu_carry/shared
  cp ../shared/data/tinyshakespeare/input.txt .gpu_carry/tinyshakespeare/input.txt
  # the tests read ../shared/data beside the checkout (18 MB); on the GPU machine ../shared links to this copy
  rm -rf .gpu_carry/shared/data && cp -rL ../shared/data .gpu_carry/shared/data && chmod -R u+w .gpu_carry/shared
  python3 benchmarks/gpu_wheels.py .whl
  du -sh .whl .gpu_carry
}

on_gpu_machine() {
  : "${OUT:?run this stage on the GPU machine, through the device tool (it sets OUT)}"
  export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
  if [ -z "${SKIP_INSTALL:-}" ]; then  # SKIP_INSTALL=1: a dry run where the project is installed (e.g. the CPU)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e .
  fi
  if [ ! -e ../shared ] && [ -d .gpu_carry/shared/data ]; then ln -s "$PWD/.gpu_carry/shared" ../shared; fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
}

bench() {
  python3 benchmarks/bench_gpu.py --out "$OUT" "$@" 2>&1 | tee "$OUT/log.txt"
}

# One call of the device tool holds everything (its budget is ~15 minutes a session, a machine start included):
# stages run against one deadline, each under its own time cap, and after each the results so far are packed into
# $OUT/results.tar, so a stage cut short still returns what the earlier ones measured. Order: correctness first
# (the CUDA tests and the whole suite, side by side with the GPU recipe's two runs, whose wall times are then upper
# bounds), then the benchmarks alone on the GPU.
session() {
  local work=/tmp/gpu_session deadline=$(( $(date +%s) + ${SESSION_SECONDS:-530} ))
  mkdir -p "$work"
  exec > >(tee -a "$OUT/log.txt") 2>&1
  pack() { tar -cf "$OUT/results.tar" -C "$work" . 2>/dev/null || true; }
  cap() {  # seconds for the next stage: its own cap or what is left before the deadline
    local left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt 15 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
  }
  bench_stage() {  # bench_stage TITLE CAP bench_gpu.py-arguments...: skipped when the deadline is (nearly) reached
    local title=$1 c; c=$(cap "$2"); shift 2
    echo; echo "=== $title ($(date -u +%T), cap $c s) ==="
    [ "$c" -gt 0 ] && timeout -s INT "$c" python3 benchmarks/bench_gpu.py --out "$work" "$@"
    pack
  }
  on_gpu_machine
  set +e  # from here a failing stage is reported in the log and the next stage runs
  export HF_GPT_CUSTOM_DATA_DIR="$PWD/.gpu_carry/shared/data"

  local c; c=$(cap 190); echo; echo "=== tests and the GPU recipe, side by side ($(date -u +%T), cap $c s) ==="
  local text=.gpu_carry/tinyshakespeare/input.txt pids=()
  for variant in "steps2000" "steps800 max_steps=800 eval_interval=200"; do
    set -- $variant
    local name=$1; shift
    ( started=$SECONDS; HF_HOME="$work/hf_$name" TQDM_DISABLE=1 timeout -s INT "$c" hf-gpt-custom train \
        training/configs/shakespeare-gpu.yaml dataset="$text" out_dir="$work/recipe_$name" "$@" \
        >"$work/recipe_$name.log" 2>&1
      echo "recipe $name exit $? after $((SECONDS - started)) s (tokenizer, data, compile and evals included)" \
        >>"$work/recipe_$name.log" ) &
    pids+=($!)
  done
  # the gpu-marked tests and the tests that once failed only where CUDA is visible (../shared/GPU.md); the suite
  # beside it runs everything else, transformers' common tests that need an accelerator included
  ( timeout -s INT "$c" python3 -m pytest -q -p no:cacheprovider -rfEs -n 3 --junitxml "$work/junit_gpu.xml" \
      tests/gpu "tests/training/test_wrappers.py::test_the_shipped_fsdp_and_ddp_configs_train_and_write_plain_folders" \
      "tests/training/test_train.py::test_huge_learning_rate_names_the_checkpoint_that_is_really_safe" \
      "tests/hf_gpt_custom/test_modeling.py::test_from_pretrained_with_device_map_auto" \
      >"$work/tests_gpu.log" 2>&1; echo "tests_gpu exit $?" >>"$work/tests_gpu.log" ) &
  pids+=($!)
  ( OMP_NUM_THREADS=1 timeout -s INT "$c" python3 -m pytest -q -p no:cacheprovider -rfE -n 7 \
      --junitxml "$work/junit_suite.xml" -m "not slow and not gpu" tests \
      >"$work/tests_suite.log" 2>&1; echo "suite exit $?" >>"$work/tests_suite.log" ) &
  pids+=($!)
  wait "${pids[@]}"  # not a bare `wait`: that also waits for the tee behind the log
  tail -n 30 "$work"/tests_gpu.log; tail -n 40 "$work"/tests_suite.log
  grep -h "bits/byte\\|exit\\|Error\\|error" "$work"/recipe_*.log | tail -n 30
  rm -rf "$work"/recipe_*/checkpoints "$work"/recipe_*/final/*.safetensors "$work"/hf_*; pack

  bench_stage "train, eager" 50 --parts train --modes eager --sweep 16 --rounds 3
  bench_stage "train, compiled" 150 --parts train --modes compile --sweep 16 --rounds 3
  bench_stage "the train() loop vs the bare model" 80 --parts loop --modes eager,compile --text-file "$text" --rounds 3
  bench_stage "generation" 75 --parts generate --gen-rounds 3
  echo "=== done $(date -u +%T) ==="
}

case "$stage" in
  session) session ;;
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
