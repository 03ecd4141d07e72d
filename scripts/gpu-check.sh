#!/usr/bin/env bash
# On a GPU machine: builds the CUDA backend (sm_90a), runs the GPU test label and the CPU suite, and
# keeps the logs under $OUT (or ./gpu-logs). Usage: scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
cmake --preset cuda -DALPHA_PYTHON= > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build/cuda -j 16 > "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; exit 1; }
cd build/cuda
ctest -L cuda --output-on-failure -j 4 > "$out/ctest-cuda.log" 2>&1; cuda_rc=$?
grep -q "Syntax Error" "$out/ctest-cuda.log" && sed -n 8p tests/alpha_tests*_tests.cmake | cut -c1-300
./tests/alpha_tests --gtest_filter='Cuda*:*/Cuda*' > "$out/cuda-harness.log" 2>&1
# One thread per test: 16 tests at once, each with 16 OpenMP and OpenBLAS threads, oversubscribe the CPUs badly.
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ctest -L cpu -j 16 > "$out/ctest-cpu.log" 2>&1; cpu_rc=$?
grep -E "max_abs" "$out/cuda-harness.log" | sort -u | head -40
tail -4 "$out/ctest-cuda.log"
tail -4 "$out/ctest-cpu.log"
exit $(( cuda_rc || cpu_rc ))
