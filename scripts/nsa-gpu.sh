#!/usr/bin/env bash
# On a GPU machine: builds the CUDA backend (sm_90a, build/cuda), runs the NSA tests (the GPU ones, suites
# Cuda*Nsa*, against the f64 CPU reference; and the CPU reference's own) and, unless --no-bench, the NSA benchmark
# (bench/nsa.py: NSA next to our dense and sliding-window flash attention, and FlexAttention where PyTorch has it).
# Logs go to $OUT (or ./gpu-logs): nsa-build.log, nsa-tests.log, nsa-bench.log, nsa.json.
# Usage: scripts/nsa-gpu.sh [--no-bench] [--long] [--no-build] [--sanitize]
#   --long      the benchmark also at T = 32768 and 65536
#   --no-build  reuse build/cuda as it is
#   --sanitize  also the small NSA GPU tests under compute-sanitizer (memcheck, racecheck, synccheck)
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/build-cuda.sh  # build_cuda
out="${OUT:-gpu-logs}"
bench=1 long="" build=1 sanitize=0
for arg in "$@"; do
  case "$arg" in
    --no-bench) bench=0 ;;
    --long) long="--long" ;;
    --no-build) build=0 ;;
    --sanitize) sanitize=1 ;;
    *) echo "unknown argument $arg" >&2; exit 2 ;;
  esac
done
mkdir -p "$out" && out="$(cd "$out" && pwd)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
if [ "$build" = 1 ]; then
  start=$(date +%s)
  build_cuda --log-prefix nsa- alpha_tests alpha_nsa_bench
  echo "build: $(( $(date +%s) - start )) s"
fi
rc=0
# The GPU tests directly through gtest (their stdout says how many selections were near-ties), then the CPU ones.
start=$(date +%s)
build/cuda/tests/alpha_tests --gtest_filter='*CudaNsa*:NsaDispatch.*' > "$out/nsa-tests.log" 2>&1 || rc=1
echo "gpu tests: $(( $(date +%s) - start )) s"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |selections differ|Failure|error" "$out/nsa-tests.log" | head -60
(cd build/cuda && ctest -L cpu -R "[Nn]sa" --output-on-failure > "$out/nsa-ctest.log" 2>&1) || rc=1
tail -3 "$out/nsa-ctest.log"
if [ "$sanitize" = 1 ]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  small='CudaNsa.OneBranch*:CudaNsa.Ties*:Shapes/CudaNsaKernels.*/t1_*:Shapes/CudaNsaKernels.*/t17_*:Shapes/CudaNsaKernels.*/t65_*'
  for tool in memcheck racecheck synccheck; do
    "$sanitizer" --tool "$tool" --error-exitcode 99 build/cuda/tests/alpha_tests --gtest_filter="$small" \
      > "$out/nsa-sanitizer-$tool.log" 2>&1 || rc=1
    echo "$tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/nsa-sanitizer-$tool.log" | tail -1)"
  done
fi
if [ "$bench" = 1 ]; then
  PYTHONUNBUFFERED=1 python3 bench/nsa.py --bench build/cuda/alpha_nsa_bench $long --out "$out" \
    2>&1 | tee "$out/nsa-bench.log" || rc=1
fi
exit $rc
