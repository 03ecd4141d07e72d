// Device-side building blocks shared by the CUDA kernels: how each element type is held and converted to
// and from f32 (round to nearest even), 128-bit vector loads and stores of f32 or 16-bit elements, and warp
// and block reductions whose order is fixed (a butterfly within a warp, then warp 0 over the warps' results),
// so every reduction built on them gives the same bits on every run.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "alpha/core/dtype.h"

namespace alpha::kernels::cuda {

// How a T is held on the device and converted to and from f32 (round to nearest even).
template <class T> struct Elem;
template <> struct Elem<float> {
  using Bits = float;
  static __device__ float load(Bits b) { return b; }
  static __device__ Bits store(float f) { return f; }
};
template <> struct Elem<bf16> {
  using Bits = unsigned short;
  static __device__ float load(Bits b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
  static __device__ Bits store(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
};
template <> struct Elem<f16> {
  using Bits = unsigned short;
  static __device__ float load(Bits b) { return __half2float(__ushort_as_half(b)); }
  static __device__ Bits store(float f) { return __half_as_ushort(__float2half_rn(f)); }
};
template <class T> using Bits = typename Elem<T>::Bits;
static_assert(sizeof(bf16) == 2 && sizeof(f16) == 2, "bf16/f16 are one 16-bit word");

// bf16 and f16 are standard-layout structs holding one uint16_t, so a pointer to one is a pointer to its bits.
template <class T> const Bits<T>* bits(const T* p) { return reinterpret_cast<const Bits<T>*>(p); }
template <class T> Bits<T>* bits(T* p) { return reinterpret_cast<Bits<T>*>(p); }

constexpr int kVectorBytes = 16;
template <class T> inline constexpr int kLanes = kVectorBytes / int(sizeof(T));

// One 128-bit vector <-> its kLanes<T> elements as f32 (element k at the k-th lowest address).
template <class T>
__device__ void unpack(uint4 v, float (&f)[kLanes<T>]) {
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
  if constexpr (sizeof(T) == 4) {
    for (int k = 0; k < 4; ++k) f[k] = __uint_as_float(words[k]);
  } else {
    for (int k = 0; k < 4; ++k) {
      f[2 * k] = Elem<T>::load(Bits<T>(words[k] & 0xffffu));
      f[2 * k + 1] = Elem<T>::load(Bits<T>(words[k] >> 16));
    }
  }
}
template <class T>
__device__ uint4 pack(const float (&f)[kLanes<T>]) {
  unsigned words[4];
  if constexpr (sizeof(T) == 4) {
    for (int k = 0; k < 4; ++k) words[k] = __float_as_uint(f[k]);
  } else {
    for (int k = 0; k < 4; ++k)
      words[k] = unsigned(Elem<T>::store(f[2 * k])) | (unsigned(Elem<T>::store(f[2 * k + 1])) << 16);
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

constexpr unsigned kFullWarp = 0xffffffffu;

// Sum and max over the 32 lanes of a warp; every lane gets the result. The butterfly's order is fixed.
__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = __fadd_rn(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}
__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}

// Sum or max over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets the
// result. `scratch` is shared memory of at least 32 floats; the call synchronises the block, so it must
// be reached by every thread, and scratch may be reused after it returns.
template <bool kMax>
__device__ inline float block_reduce(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const float identity = kMax ? -INFINITY : 0.0f;
  v = lane < warps ? scratch[lane] : identity;
  v = kMax ? warp_max(v) : warp_sum(v);
  return v;
}
__device__ inline float block_sum(float v, float* scratch) { return block_reduce<false>(v, scratch); }
__device__ inline float block_max(float v, float* scratch) { return block_reduce<true>(v, scratch); }

}  // namespace alpha::kernels::cuda
