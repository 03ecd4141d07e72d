#!/usr/bin/env bash
# On a GPU machine: builds the CUDA backend (sm_90a, build/cuda), then runs the attention harness checks,
# the GPU attention tests and, with --bench, the attention benchmark against PyTorch SDPA (flash, cuDNN);
# logs go to $OUT (or ./gpu-logs). Usage: scripts/attention-gpu.sh [--bench] [--full-bench] [--no-check]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}"
bench="" check=1
for arg in "$@"; do
  case "$arg" in
    --bench) bench="--quick" ;;
    --full-bench) bench="full" ;;
    --no-check) check=0 ;;
    *) echo "unknown argument $arg" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
start=$(date +%s)
cmake --preset cuda -DALPHA_PYTHON= > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build/cuda -j 16 --target alpha alpha_attention_bench alpha_tests > "$out/build.log" 2>&1 ||
  { grep -E "error" "$out/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
rc=0
if [ "$check" = 1 ]; then
  build/cuda/alpha check kernels --filter attention --seed "$(date +%s)" > "$out/check-attention.log" 2>&1 || rc=1
  grep -E "FAIL" "$out/check-attention.log" | head -40
  tail -1 "$out/check-attention.log"
  (cd build/cuda && ctest -L cuda -R "Flash|Attention|Training" --output-on-failure > "$out/ctest-attention.log" 2>&1) || rc=1
  grep -E "Failed|\*\*\*" "$out/ctest-attention.log" | head -20
  tail -3 "$out/ctest-attention.log"
fi
if [ -n "$bench" ]; then
  flags=$([ "$bench" = "--quick" ] && echo --quick)
  PYTHONUNBUFFERED=1 python3 bench/flash_attention.py --bench build/cuda/alpha_attention_bench $flags --out "$out" \
    2>&1 | tee "$out/bench-attention.log" || rc=1
fi
exit $rc
