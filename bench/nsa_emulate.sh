#!/usr/bin/env bash
# Runs the CUDA NSA kernels' own code (src/alpha/kernels/cuda/nsa.cu) on the CPU, without a GPU, against the f64
# reference: a check of their indexing, masks, synchronisation and sums, not of the hardware. nsa.cu is copied with
# a few substitutions (the launch syntax, the dynamic shared memory, the namespace) and compiled as C++ over
# bench/nsa_emulate/emu.h, which runs every CUDA thread of a block as a std::thread (blocks one after another,
# __syncthreads and the warp operations as barriers, uninitialised shared memory as NaN), so a missing barrier
# deadlocks and a read of unwritten shared memory shows up as NaN. Slow (one OS thread per CUDA thread): small
# shapes only. Prints each output's and gradient's error per unit of its scale; exits 1 above 1e-4 (f32).
# Usage: bench/nsa_emulate.sh [BUILD_DIR (default build/h6; needs its src/libalpha.a)] [case substring]
#        BF16=1 bench/nsa_emulate.sh ...   the bf16 kernels instead (errors around 1e-2 expected; exit status moot)
#        CPU32=1 ...                       also the f32 CPU reference on the same choice, for scale
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build/h6}" filter="${2:-}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sed -e 's|#include "alpha/kernels/cuda/common.cuh"|#include "emu.h"|' \
  -e 's|namespace alpha::kernels::cuda {|namespace alpha::kernels::emu {|' \
  -e 's|}  // namespace alpha::kernels::cuda|}  // namespace alpha::kernels::emu|' \
  -e 's|extern __shared__ float smem\[\];|float* smem = emu_rt::dyn.data();|' \
  -e 's|kernel<<<grid, threads, bytes, stream>>>(args...);|emu_rt::launch(kernel, grid, threads, bytes, args...);|' \
  -e 's|alpha::cuda::check(|emu_check(|' -e 's|cuda::ld(p,|emu::ld(p,|' \
  -e 's|alpha::cuda::stream_handle(stream)|cudaStream_t(nullptr)|' \
  src/alpha/kernels/cuda/nsa.cu > "$work/nsa_emu.cpp"
flags=(-std=c++20 -O1 -Isrc -Ibench/nsa_emulate -DALPHA_NSA_EMULATION)
g++ "${flags[@]}" -c "$work/nsa_emu.cpp" -o "$work/nsa_emu.o"
g++ "${flags[@]}" -c bench/nsa_emulate/main.cpp -o "$work/main.o"
cuda_libs=()
[ -d /usr/local/cuda/lib64 ] && cuda_libs=(-L/usr/local/cuda/lib64 -lcudart -lcublasLt)
g++ "$work/main.o" "$work/nsa_emu.o" "$build/src/libalpha.a" -fopenmp $(pkg-config --libs openblas sentencepiece) \
  "${cuda_libs[@]}" -lpthread -o "$work/nsa_emulate" 2> >(grep -v "warning" >&2)
"$work/nsa_emulate" $filter
