// What the GPU attention implementations (attention_materialized.cu, flash_attention*.cu) share (beside
// attention_reference.h's visibility rule and dropout factor, shared with the CPU): the backward's preprocessing pass
// D = rowsum(dO∘O) (one warp per query row, a fixed butterfly: deterministic).
#pragma once
#include <algorithm>
#include <string>

#include "alpha/core/error.h"
#include "alpha/core/philox.h"
#include "alpha/kernels/attention_reference.h"
#include "alpha/kernels/cuda/common.cuh"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

// One warp per query row i of head bh = b·Hq + h (blockIdx.x covers the rows of a head, blockIdx.y steps
// over the heads) of the contiguous dO and O [B, Tq, Hq, Dv]: delta = Σ_d dO·O (lane-strided partial sums,
// then the warp's fixed butterfly). b and h come from 32-bit division (the host keeps B·Hq under 2³²): a
// 64-bit division is a subroutine call, which the constant-time audit refuses.
template <class T>
__global__ void attention_delta_kernel(const Bits<T>* dout, const Bits<T>* out, AttentionParams<T> p, float* delta) {
  const int64_t i = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= p.q_len) return;
  const unsigned heads = unsigned(p.q_heads), all_heads = unsigned(p.batch) * heads;
  for (unsigned bh = blockIdx.y; bh < all_heads; bh += gridDim.y) {
    const int64_t b = bh / heads, h = bh % heads;
    const int64_t o = ((b * p.q_len + i) * p.q_heads + h) * p.value_dim;
    float s = 0.0f;
    for (int64_t d = lane; d < p.value_dim; d += 32) s += Elem<T>::load(dout[o + d]) * Elem<T>::load(out[o + d]);
    s = warp_sum(s);
    if (lane == 0) delta[int64_t(bh) * p.q_len + i] = s;
  }
}

// Queues attention_delta_kernel over every query row into delta (B·Hq·Tq floats).
template <class T>
void launch_attention_delta(const T* dout, const T* out, const AttentionParams<T>& p, float* delta,
                            cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t heads = p.batch * p.q_heads;
  if (heads == 0 || p.q_len == 0) return;
  if (heads > int64_t(UINT32_MAX))
    raise<ShapeError>("attention_delta", "batch·heads", "below 2^32", std::to_string(heads));
  const dim3 grid(unsigned((p.q_len + kThreads / 32 - 1) / (kThreads / 32)), unsigned(std::min<int64_t>(heads, 65535)));
  constexpr auto kernel = attention_delta_kernel<T>;
  ALPHA_CUDA_LAUNCH(kernel, grid, kThreads, stream, bits(dout), bits(out), p, delta);
}

inline unsigned tile_count(int64_t n, int tile) { return unsigned((n + tile - 1) / tile); }

// The grid's y extent (batch·heads), at most 65535.
inline unsigned heads_extent(int64_t heads, const char* op) {
  if (heads > 65535) raise<ShapeError>(op, "batch·heads", "at most 65535", std::to_string(heads));
  return unsigned(heads);
}

}  // namespace alpha::kernels::cuda
