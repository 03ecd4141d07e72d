#!/usr/bin/env bash
# On a GPU machine: the CUDA tests under each of compute-sanitizer's tools (memcheck with leak checking,
# racecheck, initcheck, synccheck), logs and a summary in $OUT (or ./gpu-logs). The tests cover every CUDA
# kernel of the library (tests/cuda, tests/kernels: each kernel against the CPU on small, odd shapes), the
# kernel harness at check::Scale::small (ALPHA_CHECK_SCALE=small: every kernel, dtype, option and tile path,
# without the cases above 65536 elements, which the sanitizers slow a hundredfold). Left out: the training
# runs and the 2-GPU tests (long, and NCCL's kernels are not ours), the 1000-fold repetition of the
# backward (the harness runs the same kernels) and CudaDevices.MissingDevicesRaiseNamedErrors (it asks for
# GPUs that do not exist, an error memcheck reports by design; it launches no kernel).
#
# Every (tool, test) pair is its own process, JOBS of them at a time (default: the cores), each with its
# own time limit, so one slow test cannot hide the others' results: sanitizer-results.txt has one line per
# pair (tool, test, outcome, seconds), where the outcome is clean, reports (the tool found errors), failed
# (the test failed), timeout (its own limit, or the whole run's DEADLINE, came first), not-run (fewer
# than 10 s of the DEADLINE were left when its turn came), or skipped (the test skipped itself: a harness
# shard past its check's last case at this scale, which launches nothing; it passes).
#
# initcheck cannot see the stores of cuBLASLt's Hopper kernels: scripts/sanitizer/cublaslt_initcheck.cu
# shows it without Alpha (the control). When the control shows it, these initcheck reports are counted
# apart: those inside cuBLASLt's kernels, those of device-to-host copies, and the 4-byte reads of
# matmul.cu's epilogue_kernel<bf16|f16>, whose only 4-byte loads are of cuBLASLt's f32 product (c, bias
# and aux are 2-byte there). Each comes in a test that compares the values with the CPU, so a wrong
# product still fails the run. Every other report fails the run.
# sanitizer-<tool>-reports.txt lists every report: test | message | where.
# Expects a CUDA build in $BUILD (default build/cuda). Exit code 0 only when every pair is clean.
# Time on an H100 with 16 cores (2026-11-23): memcheck, initcheck and synccheck together 9 minutes at
# JOBS=28; racecheck about 14 minutes at JOBS=24, as three parts (PART=0/3, 1/3, 2/3) of 4-6 minutes.
# PART=i/n runs only every n-th pair of the list, from the i-th, for machines lent for less time than the
# whole run takes: the run passes when each of its n parts does.
# Usage: [TOOLS="memcheck initcheck"] [JOBS=n] [DEADLINE=seconds, default 7200] [FILTER=gtest-filter]
#        [PART=i/n] scripts/compute-sanitizer.sh [seconds per test, default 1800]
set -uo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}" build="${BUILD:-build/cuda}" limit="${1:-1800}"
tools="${TOOLS:-memcheck racecheck initcheck synccheck}" jobs="${JOBS:-$(nproc)}" deadline="${DEADLINE:-7200}"
for tool in $tools; do
  case "$tool" in memcheck | racecheck | initcheck | synccheck) ;;
    *) echo "TOOLS: expected some of memcheck racecheck initcheck synccheck, got '$tool'" >&2; exit 2 ;;
  esac
done
[[ "$limit" =~ ^[1-9][0-9]*$ && "$jobs" =~ ^[1-9][0-9]*$ && "$deadline" =~ ^[1-9][0-9]*$ ]] ||
  { echo "seconds per test, JOBS and DEADLINE: expected positive integers" >&2; exit 2; }
part="${PART:-0/1}" part_index=${part%/*} part_count=${part#*/}
[[ "$part" =~ ^[0-9]+/[1-9][0-9]*$ ]] && ((part_index < part_count)) ||
  { echo "PART: expected i/n with 0 <= i < n, got '$part'" >&2; exit 2; }
mkdir -p "$out/logs"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$sanitizer" ] || { echo "compute-sanitizer: not on PATH nor in /usr/local/cuda/bin" >&2; exit 2; }
filter="Cuda*:*/Cuda*:-CudaTraining.*:CudaDeterminism.TrainingRun*:CudaNccl.*"
filter+=":CudaDeterminism.BackwardRepeatedAThousandTimes*:CudaDevices.MissingDevicesRaiseNamedErrors"
filter="${FILTER:-$filter}"
export ALPHA_CHECK_SCALE=small
start=$(date +%s)

# The control: cuBLASLt alone under initcheck.
"$nvcc" -O2 -o "$out/cublaslt_initcheck" scripts/sanitizer/cublaslt_initcheck.cu -lcublasLt &&
  "$sanitizer" --tool initcheck "$out/cublaslt_initcheck" > "$out/sanitizer-cublaslt-control.log" 2>&1
control_status=$?
rm -f "$out/cublaslt_initcheck"

# gtest lists "Suite." lines and indented test names (parameterised ones followed by "# GetParam() = ...").
"$build/tests/alpha_tests" --gtest_list_tests --gtest_filter="$filter" |
  awk '/^[^ ]/ {suite = $1; next} /^  / {print suite $1}' > "$out/tests.txt"
[ -s "$out/tests.txt" ] || { echo "no tests match '$filter' in $build/tests/alpha_tests" >&2; exit 2; }

# The harness checks that take longest under the tools run in shards, each its own process
# (ALPHA_CHECK_SHARD=i/n: check::Shard), named <test>@<i>/<n>.
shards() {  # tool test -> the number of shards
  case "$2" in
    *KernelCheck*/matmul) echo 8 ;;
    *KernelCheck*/attention | *KernelCheck*/flash_attention) [ "$1" = racecheck ] && echo 64 || echo 4 ;;
    *KernelCheck*/attention_jvp) [ "$1" = racecheck ] && echo 24 || echo 2 ;;
    *) echo 1 ;;
  esac
}
# racecheck, the slowest tool, leaves out the tests whose kernels others in its set already run on the same
# paths: the HVP tests (central differences of f32 flash attention: the harness's flash_attention and
# elementwise checks), the JVP cases (the harness's attention_jvp check), and the longest NSA tests (the NSA
# kernels run in the shorter Shapes/CudaNsaKernels cases, every head dimension and branch).
racecheck_skip="^Cases/CudaAttentionHvp\.|^CudaAttentionHvpOps\.NeverHoldsTheScoreMatrix|^Cases/CudaAttentionJvp\."
racecheck_skip+="|^CudaNsa\.(OpAndAutogradDispatchToTheKernels|SameBitsTwice)"
racecheck_skip+="|^Shapes/CudaNsaKernels\..*/(t600|t1000|t4099)"
pairs() {  # the longest first: racecheck's shards, the other tools' shards, then the rest
  for tool in $tools; do
    while read -r test; do
      [ "$tool" = racecheck ] && [[ "$test" =~ $racecheck_skip ]] && continue
      n=$(shards "$tool" "$test")
      if [ "$n" = 1 ]; then echo "2 $tool $test"; else
        for ((i = 0; i < n; i++)); do echo "$([ "$tool" = racecheck ] && echo 0 || echo 1) $tool $test@$i/$n"; done
      fi
    done < "$out/tests.txt"
  done | sort -s -n -k1,1 | cut -d' ' -f2- | awk -v i="$part_index" -v n="$part_count" '(NR - 1) % n == i'
}

run_pair() {  # tool test[@shard]: one sanitizer process; appends "tool test outcome seconds" to the results
  local tool=$1 test=${2%@*} shard= extra=() t0 rc outcome
  [ "$2" != "$test" ] && shard=${2##*@}
  local log="$out/logs/$tool-${2//\//_}.log"
  local left=$((deadline - ($(date +%s) - start)))
  if ((left < 10)); then echo "$tool $2 not-run 0" >> "$out/results.unsorted"; return; fi
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  # racecheck looks for shared-memory hazards in our kernels, not in cuBLASLt's helper kernels. (Leaving
  # out its GEMM kernels too, kns=nvjet, makes CUDA 13.0's racecheck fail with "Internal Sanitizer Error:
  # failed to handle a hardware exception" on an H100, so they stay in.)
  [ "$tool" = racecheck ] && extra=(--kernel-name-exclude kns=cublas)
  t0=$(date +%s)
  ALPHA_CHECK_SHARD=${shard:-0/1} timeout $((left < limit ? left : limit)) "$sanitizer" --tool "$tool" "${extra[@]}" \
    --print-limit 10000 --error-exitcode 99 "$build/tests/alpha_tests" --gtest_filter="$test" > "$log" 2>&1
  rc=$?
  case $rc in
    0) outcome=clean ;; 99) outcome=reports ;; 124) outcome=timeout ;; *) outcome=failed ;;
  esac
  [ "$outcome" != timeout ] && grep -qE "^\[  FAILED  \]" "$log" && outcome=failed
  # a test that makes no CUDA call (a guardrail that raises first) gives the tool nothing to check
  [ "$outcome" = failed ] && grep -q "terminated before first instrumented API call" "$log" &&
    grep -qE "^\[  PASSED  \] 1 test" "$log" && outcome=clean
  [ "$outcome" = clean ] && grep -qE "^\[  SKIPPED \] 1 test" "$log" && outcome=skipped
  echo "$tool $2 $outcome $(($(date +%s) - t0))" >> "$out/results.unsorted"
}
export -f run_pair
export out build limit sanitizer start deadline
: > "$out/results.unsorted"
pairs | xargs -P "$jobs" -L 1 bash -c 'run_pair "$0" "$1"'
sort "$out/results.unsorted" > "$out/sanitizer-results.txt" && rm "$out/results.unsorted"

# An error report is a block from "========= <message>" to its blank "=========" line.
reports() {  # log -> one line per report: the test it came in, its message and where (its next line)
  awk '/^\[ RUN / {test=$NF; next}
       /^========= [A-Z]/ && !/SUMMARY|COMPUTE-SANITIZER/ {msg=$0; next}
       msg != "" {print test " | " msg " | " $0; msg=""}' "$1"
}
# initcheck's reports of cuBLASLt's stores (see the header)
cublaslt_stores="(in|at) void cublasLt|cudaMemcpy source|read of size 4 bytes \| .*epilogue_kernel<alpha::(bf16|f16)>"
rc=0
control=$(reports "$out/sanitizer-cublaslt-control.log" | grep -c "cudaMemcpy")
echo "cuBLASLt control (exit $control_status): $control initcheck reports of a correct cuBLASLt result" \
  "copied to the host" | tee "$out/sanitizer-summary.txt"
for tool in $tools; do
  listed="$out/sanitizer-$tool-reports.txt" errors=0 theirs=0
  : > "$listed"
  for log in "$out/logs/$tool-"*.log; do reports "$log" >> "$listed"; done
  [ "$tool" = initcheck ] && [ "$control" -gt 0 ] && theirs=$(grep -cE "$cublaslt_stores" "$listed")
  errors=$(($(wc -l < "$listed") - theirs))
  line="$tool: $(awk -v t="$tool" '$1 == t {n[$3]++} END {for (o in n) printf "%s %d, ", o, n[o]}' \
    "$out/sanitizer-results.txt")$errors reports"
  [ "$tool" = initcheck ] && line+=" (and $theirs of cuBLASLt's stores, counted apart, in tests whose values
  match the CPU: $(grep -E "$cublaslt_stores" "$listed" | cut -d' ' -f1 | sort -u | tr '\n' ' '))"
  echo "$line" | tee -a "$out/sanitizer-summary.txt"
  awk -v t="$tool" '$1 == t && $3 != "clean" {print "  " $2 " " $3 " " $4 " s"}' "$out/sanitizer-results.txt" |
    tee -a "$out/sanitizer-summary.txt"
  # a pair with reports passes only when every one of them is cuBLASLt's (counted apart above); skipped passes
  awk -v t="$tool" '$1 == t && $3 != "clean" && $3 != "reports" && $3 != "skipped" {bad = 1} END {exit bad}' \
    "$out/sanitizer-results.txt" && [ "$errors" = 0 ] || rc=1
done
echo "slowest: $(sort -k4 -n -r "$out/sanitizer-results.txt" | head -8 | awk '{printf "%s %s %s s; ", $1, $2, $4}')" |
  tee -a "$out/sanitizer-summary.txt"
echo "compute-sanitizer: $(($(date +%s) - start)) s, exit $rc" | tee -a "$out/sanitizer-summary.txt"
exit $rc
