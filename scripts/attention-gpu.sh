#!/usr/bin/env bash
# On a GPU machine: builds the CUDA backend (sm_90a, build/cuda), then runs the attention harness checks,
# the GPU attention tests and, with --bench, the attention benchmark against PyTorch SDPA (flash, cuDNN);
# logs go to $OUT (or ./gpu-logs). With --jvp, the attention JVP's instead: its harness check, its GPU and
# CPU tests (and the naive JVP's) and, with --bench, bench/attention_jvp.py (against torch.func.jvp).
# Usage: scripts/attention-gpu.sh [--jvp] [--bench] [--full-bench] [--no-check]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}"
bench="" check=1
filter=attention labels="-L cuda" tests="Flash|Attention|Training" bench_script=bench/flash_attention.py
for arg in "$@"; do
  case "$arg" in
    --jvp) filter=attention_jvp labels="" tests="AttentionJvp|NaiveLowPrecisionAttention"
      bench_script=bench/attention_jvp.py ;;
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
  build/cuda/alpha check kernels --filter "$filter" --seed "$(date +%s)" > "$out/check-$filter.log" 2>&1 || rc=1
  grep -E "FAIL" "$out/check-$filter.log" | head -40
  tail -1 "$out/check-$filter.log"
  (cd build/cuda && ctest $labels -R "$tests" --output-on-failure > "$out/ctest-$filter.log" 2>&1) || rc=1
  grep -E "Failed|\*\*\*" "$out/ctest-$filter.log" | head -20
  tail -3 "$out/ctest-$filter.log"
fi
if [ -n "$bench" ]; then
  flags=$([ "$bench" = "--quick" ] && echo --quick)
  PYTHONUNBUFFERED=1 python3 "$bench_script" --bench build/cuda/alpha_attention_bench $flags --out "$out" \
    2>&1 | tee "$out/bench-$filter.log" || rc=1
fi
exit $rc
