#!/usr/bin/env bash
# On a GPU machine: the CUDA tests under each of compute-sanitizer's tools (memcheck with leak checking,
# racecheck, initcheck, synccheck), one run per tool, logs and a summary in $OUT (or ./gpu-logs). The tests
# cover every CUDA kernel of the library (tests/cuda, tests/kernels: each kernel against the CPU on small,
# odd shapes); the training runs and the 2-GPU tests are left out (long, and NCCL's own kernels are not
# ours). Expects a CUDA build in $BUILD (default build/cuda). Exit code 0 only when every tool reports no
# error. Usage: scripts/compute-sanitizer.sh [seconds per tool, default 600]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}" build="${BUILD:-build/cuda}" limit="${1:-600}"
mkdir -p "$out"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
tests="Cuda*:*/Cuda*:-CudaTraining.*:CudaDeterminism.TrainingRun*:CudaNccl.*"
rc=0
for tool in memcheck racecheck initcheck synccheck; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  start=$(date +%s)
  timeout "$limit" "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 99 \
    "$build/tests/alpha_tests" --gtest_filter="$tests" > "$out/sanitizer-$tool.log" 2>&1
  status=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitizer-$tool.log" | tail -1)
  passed=$(grep -E "^\[  PASSED  \]" "$out/sanitizer-$tool.log" | tail -1)
  echo "$tool: exit $status in $(( $(date +%s) - start )) s; ${summary:-no summary}; ${passed:-tests did not finish}" |
    tee -a "$out/sanitizer-summary.txt"
  [ "$status" = 0 ] || rc=1
done
exit $rc
