#!/usr/bin/env bash
# The judgement of scripts/compute-sanitizer.sh, on the CPU: stand-ins for compute-sanitizer, nvcc and
# alpha_tests (in a temporary folder, first on PATH) play canned runs, and the script's exit code, outcomes and
# counts must be what each run deserves: initcheck's reports of cuBLASLt's stores (in its kernels, of host
# copies, the 4-byte reads of epilogue_kernel<bf16|f16>) counted apart and passing, any other report, a failed
# test or a timeout failing the run, a test without CUDA calls clean, the harness checks split into shards
# (ALPHA_CHECK_SHARD reaching each process; an empty shard skipped and passing), and PART=i/n splitting the
# pairs without loss or overlap.
# Usage: tests/scripts/compute_sanitizer_selftest.sh (exit 0 when every expectation holds)
set -uo pipefail
script="$(cd "$(dirname "$0")/../.." && pwd)/scripts/compute-sanitizer.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/build/tests"

# alpha_tests: lists the tests the filter names (':'-separated exact names), runs one like gtest.
cat > "$tmp/build/tests/alpha_tests" <<'EOF'
#!/usr/bin/env bash
all="Fake.Clean Fake.Epilogue Fake.EpilogueTwoBytes Fake.OurKernel Fake.Race Fake.Fails Fake.NoCuda Fake.Slow
Cuda/CudaKernelCheck.MatchesCpuReference/matmul"
if [ "$1" = --gtest_list_tests ]; then
  echo "Running main() from gtest_main.cc"
  for t in $all; do
    [[ ":${2#--gtest_filter=}:" == *":$t:"* ]] || continue
    echo "${t%.*}."
    echo "  ${t#*.}  # GetParam() = 1"
  done
  exit 0
fi
test=${1#--gtest_filter=}
echo "[ RUN      ] $test"
echo "shard ${ALPHA_CHECK_SHARD:-unset} scale ${ALPHA_CHECK_SCALE:-unset}"
case "$test:${ALPHA_CHECK_SHARD:-}" in
  *CudaKernelCheck*:7/8) echo "[  SKIPPED ] $test (1 ms)"; echo "[  SKIPPED ] 1 test, listed below:"; exit 0 ;;
  Fake.Fails:*) echo "[  FAILED  ] $test (1 ms)"; exit 1 ;;
  Fake.Slow:*) sleep 5 ;;
esac
echo "[       OK ] $test (1 ms)"
echo "[  PASSED  ] 1 test."
EOF

# compute-sanitizer: runs the program, then reports what the (tool, test) pair has in store; exit 99 when it
# reported anything, as --error-exitcode 99 asks.
cat > "$tmp/bin/compute-sanitizer" <<'EOF'
#!/usr/bin/env bash
tool=
while [[ "$1" == --* ]]; do
  case "$1" in --tool) tool=$2; shift 2 ;; --print-limit | --error-exitcode | --leak-check | --kernel-name-exclude) shift 2 ;; *) shift ;; esac
done
echo "========= COMPUTE-SANITIZER"
report() { printf '========= %s\n=========     %s\n=========\n' "$1" "$2"; reported=1; }
reported=0
if [[ "$1" == *cublaslt_initcheck ]]; then
  for i in 1 2 3; do report "Host API memory access error at host access to 0x7f00 of size 16 bytes" \
    "Uninitialized access to 0x7f0$i on access by cudaMemcpy source"; done
  exit 99
fi
out=$("$@"); rc=$?
echo "$out"
[[ "$out" == *"Fake.NoCuda"* ]] && { echo "========= Error: Target application terminated before first instrumented API call"; exit 1; }
case "$tool:$*" in
  initcheck:*Fake.Epilogue)
    report "Uninitialized __global__ memory read of size 4 bytes" \
      "at void alpha::kernels::cuda::<unnamed>::epilogue_kernel<alpha::bf16>(EpilogueArgs<T1>)+0x5e0"
    report "Uninitialized __global__ memory read of size 2 bytes" \
      "at void cublasLt::epilogue::impl::globalKernel<8, 32>(int)+0x2c0" ;;
  initcheck:*Fake.EpilogueTwoBytes)
    report "Uninitialized __global__ memory read of size 2 bytes" \
      "at void alpha::kernels::cuda::<unnamed>::epilogue_kernel<alpha::bf16>(EpilogueArgs<T1>)+0x400" ;;
  *:*Fake.OurKernel)
    report "Invalid __global__ read of size 4 bytes" "at void alpha::kernels::cuda::flash_kernel<alpha::bf16>()+0x80" ;;
  racecheck:*Fake.Race)
    report "Error: Race reported between Write access at flash_kernel+0x10" "and Read access at flash_kernel+0x20" ;;
esac
[ "$reported" = 1 ] && exit 99
exit $rc
EOF

# nvcc: "builds" the control program (the stand-in sanitizer plays it).
cat > "$tmp/bin/nvcc" <<'EOF'
#!/usr/bin/env bash
while [ $# -gt 0 ]; do [ "$1" = -o ] && { printf '#!/bin/sh\n' > "$2"; chmod +x "$2"; }; shift; done
EOF
chmod +x "$tmp/bin/"* "$tmp/build/tests/alpha_tests"

failures=0
expect() {  # description, then a command that must succeed
  local what=$1
  shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}
run() {  # name tools filter [per-test seconds] [PART]: runs the script into $tmp/<name>; sets $status
  PATH="$tmp/bin:$PATH" OUT="$tmp/$1" BUILD="$tmp/build" TOOLS="$2" FILTER="$3" JOBS=4 DEADLINE=60 PART="${5:-0/1}" \
    "$script" "${4:-30}" > "$tmp/$1.out" 2>&1
  status=$?
}
outcome() { awk -v t="$2" -v p="$3" '$1 == t && $2 == p {print $3}' "$tmp/$1/sanitizer-results.txt"; }

run passing "memcheck initcheck" "Fake.Clean:Fake.Epilogue:Fake.NoCuda"
expect "cuBLASLt's stores and a test without CUDA calls pass the run" [ "$status" = 0 ]
expect "the epilogue's 4-byte read and cuBLASLt's are counted apart" \
  grep -q "initcheck: .*0 reports (and 2 of cuBLASLt's stores" "$tmp/passing/sanitizer-summary.txt"
expect "the control is read" grep -q "cuBLASLt control (exit 99): 3 initcheck reports" "$tmp/passing/sanitizer-summary.txt"
expect "a test without CUDA calls is clean" [ "$(outcome passing memcheck Fake.NoCuda)" = clean ]
expect "the harness scale reaches the tests" grep -q "scale small" "$tmp/passing/logs/memcheck-Fake.Clean.log"

run two_bytes initcheck "Fake.EpilogueTwoBytes"
expect "a 2-byte read in the epilogue fails the run" [ "$status" = 1 ]
run ours "memcheck" "Fake.Clean:Fake.OurKernel"
expect "a report in our kernel fails the run" [ "$status" = 1 ]
expect "and is listed" grep -q "Fake.OurKernel | ========= Invalid __global__ read" "$tmp/ours/sanitizer-memcheck-reports.txt"
run race racecheck "Fake.Race"
expect "a racecheck hazard fails the run" [ "$status" = 1 ]
run fails synccheck "Fake.Fails"
expect "a failing test fails the run" [ "$status" = 1 ]
expect "as failed" [ "$(outcome fails synccheck Fake.Fails)" = failed ]
run slow memcheck "Fake.Slow" 2
expect "a test past its limit fails the run" [ "$status" = 1 ]
expect "as timeout" [ "$(outcome slow memcheck Fake.Slow)" = timeout ]

harness="Cuda/CudaKernelCheck.MatchesCpuReference/matmul"
run shards memcheck "$harness"
expect "the matmul harness runs in 8 shards" [ "$(grep -c "^memcheck $harness@[0-6]/8 clean" "$tmp/shards/sanitizer-results.txt")" = 7 ]
expect "a shard past the last case is skipped" [ "$(outcome shards memcheck "$harness@7/8")" = skipped ]
expect "and passes" [ "$status" = 0 ]
expect "each process gets its shard" grep -q "shard 5/8" "$tmp/shards/logs/memcheck-${harness//\//_}@5_8.log"

all="Fake.Clean:Fake.Epilogue:Fake.NoCuda:$harness"
run whole "memcheck initcheck" "$all"
run part0 "memcheck initcheck" "$all" 30 0/2
run part1 "memcheck initcheck" "$all" 30 1/2
expect "two parts run every pair once" \
  diff <(cut -d' ' -f1,2 "$tmp/whole/sanitizer-results.txt") \
  <(cat "$tmp/part0/sanitizer-results.txt" "$tmp/part1/sanitizer-results.txt" | cut -d' ' -f1,2 | sort)
expect "neither part is empty" [ -s "$tmp/part0/sanitizer-results.txt" ] && [ -s "$tmp/part1/sanitizer-results.txt" ]
run bad_part memcheck "Fake.Clean" 30 2/2
expect "PART=2/2 is refused" grep -q "PART: expected i/n with 0 <= i < n" "$tmp/bad_part.out"

echo "$failures expectation(s) failed"
[ "$failures" = 0 ]
