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

// A team of kTeam lanes per query row i of head bh = b·Hq + h (blockIdx.x covers consecutive rows of a head, so
// the stores to delta coalesce; blockIdx.y steps over the heads) of the contiguous dO and O [B, Tq, Hq, Dv]:
// delta = Σ_d dO·O, lane-strided partial sums, then the team's fixed butterfly (deterministic). kLoad elements
// per load: a 16-byte vector where Dv and both buffers allow, so that a bf16 row of Dv 64 is 8 lanes' single
// loads (one lane per element left gpt2-124m's 12.6 M-element pass at 44 µs, a third of an H200's bandwidth).
// b and h come from 32-bit division (the host keeps B·Hq under 2³²): a 64-bit division is a subroutine call,
// which the constant-time audit refuses.
template <class T, int kTeam, int kLoad>
__global__ void attention_delta_kernel(const Bits<T>* dout, const Bits<T>* out, AttentionParams<T> p, float* delta) {
  static_assert(kLoad == 1 || kLoad == kLanes<T>, "a load is one element or one 16-byte vector");
  const int64_t i = int64_t(blockIdx.x) * (blockDim.x / kTeam) + threadIdx.x / kTeam;
  const int rank = int(threadIdx.x % kTeam);
  const bool inside = i < p.q_len;  // every lane stays for the butterfly
  const unsigned heads = unsigned(p.q_heads), all_heads = unsigned(p.batch) * heads;
  const int64_t loads = p.value_dim / kLoad;
  for (unsigned bh = blockIdx.y; bh < all_heads; bh += gridDim.y) {
    const int64_t b = bh / heads, h = bh % heads;
    const int64_t o = ((b * p.q_len + i) * p.q_heads + h) * p.value_dim;
    float s = 0.0f;
    for (int64_t k = rank; inside && k < loads; k += kTeam) {
      if constexpr (kLoad == 1) {
        s += Elem<T>::load(dout[o + k]) * Elem<T>::load(out[o + k]);
      } else {
        float g[kLoad], y[kLoad];
        unpack<T>(*reinterpret_cast<const uint4*>(dout + o + k * kLoad), g);
        unpack<T>(*reinterpret_cast<const uint4*>(out + o + k * kLoad), y);
#pragma unroll
        for (int j = 0; j < kLoad; ++j) s += g[j] * y[j];
      }
    }
#pragma unroll
    for (int offset = kTeam / 2; offset > 0; offset /= 2) s = __fadd_rn(s, __shfl_xor_sync(kFullWarp, s, offset));
    if (inside && rank == 0) delta[int64_t(bh) * p.q_len + i] = s;
  }
}

// Queues attention_delta_kernel over every query row into delta (B·Hq·Tq floats): 16-byte loads when Dv is a
// whole number of vectors and both buffers start on a 16-byte boundary, a team of lanes just wide enough for
// a row's loads (4 to 32).
template <class T>
void launch_attention_delta(const T* dout, const T* out, const AttentionParams<T>& p, float* delta,
                            cudaStream_t stream) {
  constexpr int kThreads = 256, W = kLanes<T>;
  const int64_t heads = p.batch * p.q_heads;
  if (heads == 0 || p.q_len == 0) return;
  if (heads > int64_t(UINT32_MAX))
    raise<ShapeError>("attention_delta", "batch·heads", "below 2^32", std::to_string(heads));
  const bool vectors = p.value_dim % W == 0 && misalignment(dout) == 0 && misalignment(out) == 0;
  const int64_t loads = vectors ? p.value_dim / W : p.value_dim;
  auto launch = [&]<int kTeam, int kLoad>() {
    const dim3 grid(unsigned((p.q_len + kThreads / kTeam - 1) / (kThreads / kTeam)),
                    unsigned(std::min<int64_t>(heads, 65535)));
    constexpr auto kernel = attention_delta_kernel<T, kTeam, kLoad>;
    ALPHA_CUDA_LAUNCH(kernel, grid, kThreads, stream, bits(dout), bits(out), p, delta);
  };
  if (!vectors) return launch.template operator()<32, 1>();
  if (loads <= 4) return launch.template operator()<4, W>();
  if (loads <= 8) return launch.template operator()<8, W>();
  if (loads <= 16) return launch.template operator()<16, W>();
  launch.template operator()<32, W>();
}

inline unsigned tile_count(int64_t n, int tile) { return unsigned((n + tile - 1) / tile); }

// The grid's y extent (batch·heads), at most 65535.
inline unsigned heads_extent(int64_t heads, const char* op) {
  if (heads > 65535) raise<ShapeError>(op, "batch·heads", "at most 65535", std::to_string(heads));
  return unsigned(heads);
}

}  // namespace alpha::kernels::cuda
