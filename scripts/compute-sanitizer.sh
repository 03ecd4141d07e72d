#!/usr/bin/env bash
# On a GPU machine: the CUDA tests under each of compute-sanitizer's tools (memcheck with leak checking,
# racecheck, initcheck, synccheck), logs and a summary in $OUT (or ./gpu-logs). The tests cover every CUDA
# kernel of the library (tests/cuda, tests/kernels: each kernel against the CPU on small, odd shapes), the
# kernel harness at check::Scale::small (ALPHA_CHECK_SCALE=small: every kernel, dtype, option and tile path,
# without the cases above 65536 elements, which the sanitizers slow a hundredfold). Left out: the training
# runs and the 2-GPU tests (long, and NCCL's kernels are not ours), the 1000-fold repetition of the
# backward (the harness runs the same kernels) and CudaDevices.MissingDevicesRaiseNamedErrors (it asks for
# GPUs that do not exist, an error memcheck reports by design; it launches no kernel).
# The tools run at once, each over several processes (gtest shards; 14 in all, for a 16-core machine).
# initcheck cannot see the stores of cuBLASLt's Hopper kernels: scripts/sanitizer/cublaslt_initcheck.cu
# shows it without Alpha (the control). When the control shows it, initcheck's reports inside cuBLASLt's
# kernels and of device-to-host copies are counted apart, with the tests they came in (each compares the
# copied values with the CPU, and a failing test fails the run); every other report fails the run.
# sanitizer-<tool>-reports.txt lists every report: test | message | where.
# Expects a CUDA build in $BUILD (default build/cuda). Exit code 0 only when every tool finishes clean.
# Usage: [TOOLS="memcheck initcheck"] scripts/compute-sanitizer.sh [seconds per process, default 540]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}" build="${BUILD:-build/cuda}" limit="${1:-540}" tools="${TOOLS:-memcheck racecheck initcheck synccheck}"
mkdir -p "$out"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
tests="Cuda*:*/Cuda*:-CudaTraining.*:CudaDeterminism.TrainingRun*:CudaNccl.*"
tests+=":CudaDeterminism.BackwardRepeatedAThousandTimes*:CudaDevices.MissingDevicesRaiseNamedErrors"
declare -A shards=([racecheck]=6 [memcheck]=3 [initcheck]=3 [synccheck]=2)
for tool in $tools; do
  [ -n "${shards[$tool]:-}" ] || { echo "TOOLS: expected some of ${!shards[*]}, got '$tool'" >&2; exit 2; }
done
export ALPHA_CHECK_SCALE=small
start=$(date +%s)

# The control: cuBLASLt alone under initcheck.
"$nvcc" -O2 -o "$out/cublaslt_initcheck" scripts/sanitizer/cublaslt_initcheck.cu -lcublasLt &&
  "$sanitizer" --tool initcheck "$out/cublaslt_initcheck" > "$out/sanitizer-cublaslt-control.log" 2>&1
control_status=$?
rm -f "$out/cublaslt_initcheck"

for tool in $tools; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  # racecheck looks for shared-memory hazards in our kernels, not in cuBLASLt's (whose tiles make it crawl)
  [ "$tool" = racecheck ] && extra=(--kernel-name-exclude regex:cublas)
  for ((i = 0; i < shards[$tool]; i++)); do
    GTEST_TOTAL_SHARDS=${shards[$tool]} GTEST_SHARD_INDEX=$i timeout "$limit" "$sanitizer" --tool "$tool" "${extra[@]}" \
      --print-limit 10000 --error-exitcode 99 "$build/tests/alpha_tests" --gtest_filter="$tests" \
      > "$out/sanitizer-$tool-$i.log" 2>&1 &
  done
done
wait

# An error report is a block from "========= <message>" to its blank "=========" line.
reports() {  # log -> one line per report: the test it came in, its message and where (its next line)
  awk '/^\[ RUN / {test=$NF; next}
       /^========= [A-Z]/ && !/SUMMARY|COMPUTE-SANITIZER/ {msg=$0; next}
       msg != "" {print test " | " msg " | " $0; msg=""}' "$1"
}
# initcheck's reports of cuBLASLt's stores: inside its kernels, or a host copy of its output.
cublaslt_stores="(in|at) void cublasLt|cudaMemcpy source"
rc=0
control=$(reports "$out/sanitizer-cublaslt-control.log" | grep -c "cudaMemcpy")
echo "cuBLASLt control (exit $control_status): $control initcheck reports of a correct cuBLASLt result copied to the host" |
  tee "$out/sanitizer-summary.txt"
for tool in $tools; do
  passed=0 finished=0 errors=0 cublaslt=0 listed="$out/sanitizer-$tool-reports.txt"
  : > "$listed"
  for ((i = 0; i < shards[$tool]; i++)); do
    log="$out/sanitizer-$tool-$i.log"
    n=$(grep -oE "^\[  PASSED  \] [0-9]+" "$log" | grep -oE "[0-9]+$")
    [ -n "$n" ] && { passed=$((passed + n)); finished=$((finished + 1)); }
    reports "$log" > "$log.reports"
    all=$(wc -l < "$log.reports") theirs=0
    [ "$tool" = initcheck ] && [ "$control" -gt 0 ] && theirs=$(grep -cE "$cublaslt_stores" "$log.reports")
    errors=$((errors + all - theirs)) cublaslt=$((cublaslt + theirs))
    cat "$log.reports" >> "$listed" && rm "$log.reports"
    grep -qE "^\[  FAILED  \]" "$log" && errors=$((errors + 1))
  done
  line="$tool: $finished of ${shards[$tool]} processes finished, $passed tests passed, $errors errors"
  [ "$tool" = initcheck ] && line+=" (and $cublaslt reports of cuBLASLt's stores, counted apart, in tests whose
  values match the CPU: $(grep -E "$cublaslt_stores" "$listed" | cut -d' ' -f1 |
  sort -u | tr '\n' ' '))"
  echo "$line" | tee -a "$out/sanitizer-summary.txt"
  [ "$finished" = "${shards[$tool]}" ] && [ "$errors" = 0 ] || rc=1
done
echo "compute-sanitizer: $(( $(date +%s) - start )) s, exit $rc" | tee -a "$out/sanitizer-summary.txt"
exit $rc
