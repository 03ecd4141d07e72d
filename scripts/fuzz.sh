#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang with -fsanitize=fuzzer,address,undefined: the `fuzz` CMake
# preset, in build/fuzz) and runs each one for SECONDS (default 20) from its seed corpus fuzz/corpus/<target>,
# as many at a time as there are cores (JOBS). Prints the executions per target and in total. Fails when a
# target crashes (an ASan or UBSan report, an exception other than alpha::Error, a broken property), leaks,
# hangs past 10 s on one input or runs out of memory (2 GB); the input is left in build/fuzz/artifacts/: add
# it to fuzz/corpus/<target>/ as crash_<what> and to a regression test (docs/SECURITY.md). New inputs the
# fuzzer finds go to build/fuzz/corpus/<target>, never into the repository. SECONDS=0 runs each seed once.
#
# FUZZ_SEED=N fixes libFuzzer's seed. Usage: scripts/fuzz.sh [SECONDS] [TARGET...]      (make fuzz runs it
# with FUZZ_SECONDS, default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
if [ -n "${FUZZ_SEED:-}" ] && ! [[ $FUZZ_SEED =~ ^[0-9]+$ ]]; then
  echo "fuzz: FUZZ_SEED must be a non-negative integer, got '$FUZZ_SEED'" >&2
  exit 2
fi
[ $# -gt 0 ] && shift
jobs=${JOBS:-$(nproc)}

cmake --preset fuzz >/dev/null
cmake --build build/fuzz --target alpha_fuzzers -j "$jobs"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for dir in fuzz/corpus/*/; do targets+=("$(basename "$dir")"); done
fi
mkdir -p build/fuzz/artifacts build/fuzz/logs
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:allocator_may_return_null=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# One target: writes build/fuzz/logs/<target>.log and build/fuzz/logs/<target>.status (ok or FAILED).
run_target() {
  local target=$1 work=build/fuzz/corpus/$1 log=build/fuzz/logs/$1.log
  mkdir -p "$work"
  local args=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="build/fuzz/artifacts/$target-")
  if [ "$seconds" -gt 0 ]; then args+=(-max_total_time="$seconds"); else args+=(-runs=0); fi
  # A fixed seed makes every run walk the same sequence of mutations, as far as its time reaches.
  [ -n "${FUZZ_SEED:-}" ] && args+=(-seed="$FUZZ_SEED")
  case $target in
    safetensors|checkpoint_state|config|metrics_log) args+=(-dict=fuzz/json.dict) ;;
  esac
  if "build/fuzz/fuzzers/fuzz_$target" "${args[@]}" "$work" "fuzz/corpus/$target" >"$log" 2>&1; then
    echo ok >"build/fuzz/logs/$target.status"
  else
    echo FAILED >"build/fuzz/logs/$target.status"
  fi
}

for target in "${targets[@]}"; do
  [ -x "build/fuzz/fuzzers/fuzz_$target" ] || { echo "fuzz: no target '$target' (fuzz/CMakeLists.txt lists them)"; exit 2; }
  rm -f "build/fuzz/logs/$target.status"
done
# As many targets at a time as there are cores (each fuzzer is one process on one core).
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, $jobs at a time"
running=0
for target in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  run_target "$target" &
  running=$((running + 1))
done
wait || true

total=0
failed=()
for target in "${targets[@]}"; do
  log=build/fuzz/logs/$target.log
  status=$(cat "build/fuzz/logs/$target.status" 2>/dev/null || echo FAILED)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  coverage=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  printf 'fuzz %-18s %-6s %10s executions in %ss  (%s, %s seeds)\n' "$target" "$status" "${runs:-?}" "$seconds" \
    "${coverage:-cov: ?}" "$(find "fuzz/corpus/$target" -type f | wc -l)"
  total=$((total + ${runs:-0}))
  if [ "$status" != ok ]; then
    failed+=("$target")
    echo "---- the end of $log ----"
    tail -n 60 "$log"
    echo "----"
  fi
done
printf 'fuzz total: %d executions over %d targets\n' "$total" "${#targets[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs in build/fuzz/artifacts/)"
  exit 1
fi
