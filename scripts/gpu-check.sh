#!/usr/bin/env bash
# On a GPU machine: builds the CUDA backend (sm_90a), runs the kernel harness (`alpha check kernels`), the
# GPU test label and the CPU suite, and with --bench the training benchmark against PyTorch; logs go to
# $OUT (or ./gpu-logs). Usage: scripts/gpu-check.sh [--bench] [--no-cpu]
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/build-cuda.sh  # build_cuda
out="${OUT:-gpu-logs}"
bench=0 cpu=1
for arg in "$@"; do
  case "$arg" in
    --bench) bench=1 ;;
    --no-cpu) cpu=0 ;;
    *) echo "unknown argument $arg" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
build_cuda
rc=0
build/cuda/alpha check kernels --seed 20261122 > "$out/check-kernels.log" 2>&1 || rc=1
grep -E "FAIL" "$out/check-kernels.log" | head -40
tail -1 "$out/check-kernels.log"
(cd build/cuda && ctest -L cuda --output-on-failure -j 2 > "$out/ctest-cuda.log" 2>&1) || rc=1
grep -E "Failed|\*\*\*" "$out/ctest-cuda.log" | head -20
tail -3 "$out/ctest-cuda.log"
if [ "$cpu" = 1 ]; then
  # One thread per test: 16 tests at once, each with 16 OpenMP and OpenBLAS threads, oversubscribe the CPUs.
  (cd build/cuda && OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ctest -L cpu -j 16 > "$out/ctest-cpu.log" 2>&1) || rc=1
  tail -3 "$out/ctest-cpu.log"
fi
if [ "$bench" = 1 ]; then
  PYTHONUNBUFFERED=1 python3 bench/train_seed.py --alpha build/cuda/alpha --out "$out" 2>&1 | tee "$out/bench.log" || rc=1
fi
exit $rc
