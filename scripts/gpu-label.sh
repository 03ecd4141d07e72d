#!/usr/bin/env bash
# On a GPU machine: the one-GPU test label (every CUDA test but the NCCL ones, which scripts/distributed-gpu.sh
# runs; the kernel harness's families among them) split into one gtest shard per visible GPU, each shard on its own
# GPU with its share of the CPU cores, and with --check CHECKS `alpha check kernels --filter CHECKS` after it on fresh
# random inputs (its seed from the clock). Why: on one H200 the label takes about 300 s, most of a device call; two
# shards on 2 H200s took 135 s (2026-11-30, thirty-seventh session). Each shard gets the cores divided
# by the shards for OpenMP and OpenBLAS: the tests' CPU references use every core, and two shards (and the kernel
# check beside them) with 32 threads each ran them 6-30 times slower (2x H200, 2026-11-30). Logs and a summary go to
# $OUT (or ./gpu-logs).
# Usage: scripts/gpu-label.sh [--skip-build] [--shards N (default: the GPUs)] [--check CHECKS] [--timeout S (300)]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. scripts/build-cuda.sh  # build_cuda
out="${OUT:-gpu-logs}"
build=1 shards="" check="" limit=300
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-build) build=0 ;;
    --shards) shards="${2:-}"; shift ;;
    --check) check="${2:-}"; shift ;;
    --timeout) limit="${2:-}"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
# The arguments first, so that a mistake is named before anything looks for GPUs.
if [ -n "$shards" ] && ! [[ "$shards" =~ ^[1-9][0-9]*$ ]]; then
  echo "--shards: expected a positive count, got '$shards'" >&2
  exit 2
fi
[[ "$limit" =~ ^[1-9][0-9]*$ ]] || { echo "--timeout: expected seconds, a positive count, got '$limit'" >&2; exit 2; }
gpus=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
[ "$gpus" -ge 1 ] || { echo "gpu-label.sh: no GPU found (nvidia-smi lists none)" >&2; exit 1; }
shards="${shards:-$gpus}"
[ "$shards" -le "$gpus" ] || { echo "--shards: expected at most $gpus (the GPUs found), got $shards" >&2; exit 2; }
mkdir -p "$out"
summary="$out/label-summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
if [ "$build" = 1 ]; then
  start=$(date +%s)
  build_cuda -DALPHA_DASHBOARD=OFF alpha alpha_tests
  say "build: $(( $(date +%s) - start )) s"
fi
for binary in build/cuda/tests/alpha_tests build/cuda/alpha; do
  [ -x "$binary" ] || { echo "gpu-label.sh: $binary missing (run without --skip-build)" >&2; exit 1; }
done
threads=$(( $(nproc) / shards ))
[ "$threads" -ge 1 ] || threads=1
rc=0
start=$(date +%s)
for shard in $(seq 0 $(( shards - 1 ))); do
  CUDA_VISIBLE_DEVICES=$shard GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard \
    OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads timeout -k 10 "$limit" build/cuda/tests/alpha_tests \
    --gtest_filter='Cuda*:*/Cuda*:NsaDispatch.*:-*Nccl*' > "$out/label-shard$shard.log" 2>&1 &
done
for shard in $(seq 0 $(( shards - 1 ))); do
  wait -n || rc=1
done
for shard in $(seq 0 $(( shards - 1 ))); do
  log="$out/label-shard$shard.log"
  passed=$(grep -cE "^\[       OK \]" "$log")
  # gtest names a failed or skipped test twice (as it ends, and in the closing list): count names once.
  failed=$(grep -E "^\[  FAILED  \] [A-Za-z]" "$log" | awk '{print $4}' | sort -u | wc -l)
  skipped=$(grep -E "^\[  SKIPPED \] [A-Za-z]" "$log" | awk '{print $4}' | sort -u | wc -l)
  ran=$(grep -oE "Running [0-9]+ tests" "$log" | grep -oE "[0-9]+")
  finished=$(grep -qE "^\[==========\] [0-9]+ tests? from .* ran\." "$log" || echo ", NOT FINISHED (time limit $limit s)")
  say "label shard $shard of $shards: ${ran:-?} tests, $passed passed, $failed failed, $skipped skipped$finished"
  grep -E "^\[  FAILED  \] [A-Za-z]" "$log" | awk '{print "  FAILED " $4}' | sort -u | head -20 | tee -a "$summary"
done
say "label: $(( $(date +%s) - start )) s"
if [ -n "$check" ]; then
  start=$(date +%s)
  build/cuda/alpha check kernels --filter "$check" --seed "$(date +%s)" > "$out/check-kernels.log" 2>&1 || rc=1
  grep -E "FAIL" "$out/check-kernels.log" | head -20 | tee -a "$summary"
  say "check kernels --filter $check: $(tail -1 "$out/check-kernels.log") ($(( $(date +%s) - start )) s)"
fi
say "$([ $rc = 0 ] && echo 'everything passed' || echo 'something FAILED or did not finish')"
exit $rc
