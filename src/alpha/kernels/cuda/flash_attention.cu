// Flash attention on CUDA (kernels/flash_attention.h): the entry points, and the f32 kernels. bf16 and
// f16 inputs run on the tensor cores (flash_attention_mma_*.cu); f32 inputs run here in true f32 (no TF32):
// FlashAttention-2's forward and backward with tiles of f32 in shared memory and plain FMA loops, so f32
// attention keeps f32's accuracy (relative error ~1e-6) at the f32 pipe's speed. The score matrix is never
// written to global memory.
//
// Every f32 kernel runs 256 threads and uses the same two ownership patterns over a tile of
// `queries` × `keys` entries (Tiling, per head-dimension bucket in FlashTraits):
// - entries: thread e computes entries e, e + 256, ... in row-major order (a warp covers consecutive keys of
//   one query row), each a dot product over D (and Dv) from shared memory;
// - rows: the rows of an accumulator (query rows for out and dQ, key rows for dK and dV) are split among
//   threads_per_row consecutive threads (a group inside one warp); thread t of a group owns the columns
//   t, t + threads_per_row, ... (Accumulator width = bucket / threads_per_row).
// Shared-memory tiles are f32, rows padded by one float so that a warp reading one column of consecutive
// rows hits distinct banks; their sizes depend on the run-time D and Dv (dynamic shared memory).
//
// Masking: entry (i, j) is visible iff j is in visible_key_range(p, i). As that range's ends never
// decrease with i, the keys a query tile sees lie in [begin(first row), end(last row)); tiles outside are
// skipped. Masked entries are −inf in S and exactly 0 in P̃ and dS. A row that has seen only masked
// entries keeps m = −inf and uses 0 as its exponent base, so no exp(−inf − (−inf)) is ever taken.
// Dropout draws the reference's mask: P(b, h, i, j) is kept iff dropout_keeps of Philox counter
// attention_dropout_index(p, b·Hq + h, i, j).
#include <algorithm>
#include <cmath>
#include <string>

#include "alpha/core/error.h"
#include "alpha/core/philox.h"
#include "alpha/kernels/cuda/attention_common.cuh"
#include "alpha/kernels/cuda/attention_fma_tiles.cuh"
#include "alpha/kernels/cuda/common.cuh"
#include "alpha/kernels/cuda/flash_attention_mma.cuh"
#include "alpha/kernels/flash_attention.h"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

namespace {

using namespace fma_tiles;

// Tile shapes per head-dimension bucket (the widest of D and Dv, rounded up to 64, 128 or 256), chosen so
// that the f32 tiles fit in about 60 to 120 KiB of shared memory and a thread's accumulators in 16 to 64
// registers. Forward and dQ: query rows are the accumulator's rows; dK/dV: key rows are.
template <int kBucket> struct FlashTraits;
template <> struct FlashTraits<64> {
  static constexpr Tiling kForward{64, 64}, kKeyGrads{32, 64}, kQueryGrads{64, 32};
};
template <> struct FlashTraits<128> {
  static constexpr Tiling kForward{64, 32}, kKeyGrads{32, 32}, kQueryGrads{32, 32};
};
template <> struct FlashTraits<256> {
  static constexpr Tiling kForward{32, 32}, kKeyGrads{16, 32}, kQueryGrads{16, 32};
};

// Shared memory of each kernel. stats rows: 0 row_max, 1 row_sum, 2 D (per query row of the tile).
template <Tiling kT>
struct ForwardShared {
  SharedTile q, k, v, s;  // q (queries × D), k (keys × D), v (keys × Dv), s: S, then P̃ (queries × keys)
  int64_t floats;
  __host__ __device__ ForwardShared(float* base, int d, int dv) {
    Carver c{base};
    q = c.take(kT.queries, d), k = c.take(kT.keys, d), v = c.take(kT.keys, dv), s = c.take(kT.queries, kT.keys);
    floats = c.used;
  }
};
template <Tiling kT>
struct BackwardShared {
  // q (queries × D), dout (queries × Dv), k (keys × D), v (keys × Dv), stats (3 × queries),
  // pd: P̃ = P∘Z and ds: dS_raw·scale (queries × keys)
  SharedTile q, dout, k, v, stats, pd, ds;
  int64_t floats;
  __host__ __device__ BackwardShared(float* base, int d, int dv) {
    Carver c{base};
    q = c.take(kT.queries, d), dout = c.take(kT.queries, dv), k = c.take(kT.keys, d), v = c.take(kT.keys, dv);
    stats = c.take(3, kT.queries), pd = c.take(kT.queries, kT.keys), ds = c.take(kT.queries, kT.keys);
    floats = c.used;
  }
};

// ---- Forward --------------------------------------------------------------------------------------------

// Grid (query tile, b·Hq + h).
template <class T, int kBucket>
__global__ void __launch_bounds__(kThreads) forward_kernel(AttentionForwardArgs<T> a) {
  constexpr Tiling kT = FlashTraits<kBucket>::kForward;
  using Rows = RowOwnership<kT.queries, kBucket>;
  extern __shared__ float shared[];
  const AttentionParams<T>& p = a.params;
  const int d_qk = int(p.head_dim), d_v = int(p.value_dim);
  const ForwardShared<kT> sh(shared, d_qk, d_v);
  const int64_t bh = blockIdx.y, b = bh / p.q_heads, h = bh % p.q_heads, kv_head = h / (p.q_heads / p.kv_heads);
  const int64_t i0 = int64_t(blockIdx.x) * kT.queries;
  const int rows_here = rows_in_tile(i0, kT.queries, p.q_len);
  const Bits<T>* k_rows = bits(a.k) + b * p.k_strides.batch + kv_head * p.k_strides.head;
  const Bits<T>* v_rows = bits(a.v) + b * p.v_strides.batch + kv_head * p.v_strides.head;
  load_rows<T>(sh.q, bits(a.q) + b * p.q_strides.batch + h * p.q_strides.head, p.q_strides.time, i0, p.q_len,
               kT.queries, d_qk);

  const Rows own;
  const int64_t i = i0 + own.row;
  float m = -INFINITY, l = 0.0f, acc[Rows::kWidth] = {};
  const KeyRange keys = tile_key_range(p, i0, rows_here);
  for (int64_t j0 = keys.begin; j0 < keys.end; j0 += kT.keys) {
    load_rows<T>(sh.k, k_rows, p.k_strides.time, j0, p.kv_len, kT.keys, d_qk);
    load_rows<T>(sh.v, v_rows, p.v_strides.time, j0, p.kv_len, kT.keys, d_v);
    __syncthreads();  // q (first pass), k, v loaded
    for (int e = threadIdx.x; e < kT.queries * kT.keys; e += kThreads) {
      const int r = e / kT.keys, c = e % kT.keys;
      sh.s(r, c) = visible(p, i0 + r, j0 + c) ? score(p, dot(sh.q, r, sh.k, c, d_qk)) : -INFINITY;
    }
    __syncthreads();
    // Online softmax over the tile, per row: its group's lanes take the row's columns lane, lane + kPerRow...
    float tile_max = -INFINITY;
    for (int c = own.lane; c < kT.keys; c += Rows::kPerRow) tile_max = fmaxf(tile_max, sh.s(own.row, c));
    const float m_new = fmaxf(m, group_max<Rows::kPerRow>(tile_max));
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: every exp below is 0
    const float rescale = expf(m - base);
    float tile_sum = 0.0f;
    for (int c = own.lane; c < kT.keys; c += Rows::kPerRow) {
      const float e = expf(sh.s(own.row, c) - base);
      tile_sum += e;
      sh.s(own.row, c) = e > 0.0f ? e * attention_dropout_factor(p, bh, i, j0 + c) : 0.0f;
    }
    l = l * rescale + group_sum<Rows::kPerRow>(tile_sum);
    m = m_new;
    for (int k = 0; k < Rows::kWidth; ++k) acc[k] *= rescale;
    __syncthreads();  // the row's P̃ written by its group
    for (int c = 0; c < kT.keys; ++c) {
      const float weight = sh.s(own.row, c);
      for (int k = 0; k < Rows::kWidth; ++k)
        if (own.column(k) < d_v) acc[k] = fmaf(weight, sh.v(c, own.column(k)), acc[k]);
    }
    __syncthreads();  // before the next tile overwrites k, v, s
  }
  if (i >= p.q_len) return;
  Bits<T>* out = bits(a.out) + ((b * p.q_len + i) * p.q_heads + h) * p.value_dim;
  for (int k = 0; k < Rows::kWidth; ++k)
    if (own.column(k) < d_v) out[own.column(k)] = Elem<T>::store(l > 0.0f ? acc[k] / l : 0.0f);
  if (own.lane == 0) {
    a.row_max[bh * p.q_len + i] = m;
    a.row_sum[bh * p.q_len + i] = l;
  }
}

// ---- Backward -------------------------------------------------------------------------------------------

// Loads the query side of a backward tile: q and dO rows [i0, i0 + queries) of head bh, and their
// statistics (0 for rows past Tq, which no visible entry reads).
template <class T, Tiling kT>
__device__ void load_query_side(const AttentionBackwardArgs<T>& a, const BackwardShared<kT>& sh, const float* delta,
                                int64_t bh, int64_t i0) {
  const AttentionParams<T>& p = a.params;
  const int64_t b = bh / p.q_heads, h = bh % p.q_heads;
  load_rows<T>(sh.q, bits(a.q) + b * p.q_strides.batch + h * p.q_strides.head, p.q_strides.time, i0, p.q_len,
               kT.queries, int(p.head_dim));
  load_rows<T>(sh.dout, bits(a.dout) + b * p.q_len * p.q_heads * p.value_dim + h * p.value_dim,
               p.q_heads * p.value_dim, i0, p.q_len, kT.queries, int(p.value_dim));
  for (int r = threadIdx.x; r < kT.queries; r += kThreads) {
    const int64_t i = i0 + r, row = bh * p.q_len + i;
    const bool inside = i < p.q_len;
    sh.stats(0, r) = inside ? a.row_max[row] : 0.0f;
    sh.stats(1, r) = inside ? a.row_sum[row] : 0.0f;
    sh.stats(2, r) = inside ? delta[row] : 0.0f;
  }
}

// For every entry (r, c) of the tile (queries i0 + r, keys j0 + c) of head bh, from the staged tiles:
// pd = P̃ = P∘Z and ds = dS_raw·scale, with P = exp(S − m) / l, dS = P∘((dO·Vᵀ)∘Z − D) and dS_raw = dS
// through the softcap; 0 for masked entries. `pd` is written only if kWithProbs.
template <bool kWithProbs, class T, Tiling kT>
__device__ void score_grads(const AttentionParams<T>& p, const BackwardShared<kT>& sh, int64_t bh, int64_t i0,
                            int64_t j0) {
  for (int e = threadIdx.x; e < kT.queries * kT.keys; e += kThreads) {
    const int r = e / kT.keys, c = e % kT.keys;
    const int64_t i = i0 + r, j = j0 + c;
    float prob_dropped = 0.0f, ds = 0.0f;
    if (visible(p, i, j)) {
      const float s = score(p, dot(sh.q, r, sh.k, c, int(p.head_dim)));
      const float prob = expf(s - sh.stats(0, r)) / sh.stats(1, r);  // l >= 1 on a row that sees a key
      const float z = attention_dropout_factor(p, bh, i, j);
      prob_dropped = prob * z;
      ds = prob * (dot(sh.dout, r, sh.v, c, int(p.value_dim)) * z - sh.stats(2, r));
      if (p.softcap > 0) ds *= 1.0f - (s / p.softcap) * (s / p.softcap);
      ds *= p.scale;
    }
    if constexpr (kWithProbs) sh.pd(r, c) = prob_dropped;
    sh.ds(r, c) = ds;
  }
}

// Grid (key tile, b·Hkv + kv head): dK and dV of the tile's keys, summed over the group's query heads
// (ascending), then their query tiles that see any of the keys (ascending), then the tile's rows.
template <class T, int kBucket>
__global__ void __launch_bounds__(kThreads) key_grads_kernel(AttentionBackwardArgs<T> a, const float* delta) {
  constexpr Tiling kT = FlashTraits<kBucket>::kKeyGrads;
  using Rows = RowOwnership<kT.keys, kBucket>;
  extern __shared__ float shared[];
  const AttentionParams<T>& p = a.params;
  const int d_qk = int(p.head_dim), d_v = int(p.value_dim);
  const BackwardShared<kT> sh(shared, d_qk, d_v);
  const int64_t group = p.q_heads / p.kv_heads;
  const int64_t b = blockIdx.y / p.kv_heads, kv_head = blockIdx.y % p.kv_heads;
  const int64_t j0 = int64_t(blockIdx.x) * kT.keys, j_end = j0 + rows_in_tile(j0, kT.keys, p.kv_len);
  load_rows<T>(sh.k, bits(a.k) + b * p.k_strides.batch + kv_head * p.k_strides.head, p.k_strides.time, j0,
               p.kv_len, kT.keys, d_qk);
  load_rows<T>(sh.v, bits(a.v) + b * p.v_strides.batch + kv_head * p.v_strides.head, p.v_strides.time, j0,
               p.kv_len, kT.keys, d_v);

  const Rows own;
  float dk[Rows::kWidth] = {}, dv[Rows::kWidth] = {};
  for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
    const int64_t bh = b * p.q_heads + h;
    for (int64_t i0 = 0; i0 < p.q_len; i0 += kT.queries) {
      const KeyRange keys = tile_key_range(p, i0, rows_in_tile(i0, kT.queries, p.q_len));
      if (keys.end <= j0 || keys.begin >= j_end) continue;  // no row of the tile sees these keys (uniform)
      load_query_side(a, sh, delta, bh, i0);
      __syncthreads();  // k, v (first pass), q, dO, stats loaded
      score_grads<true>(p, sh, bh, i0, j0);
      __syncthreads();
      for (int r = 0; r < kT.queries; ++r) {
        const float pd = sh.pd(r, own.row), ds = sh.ds(r, own.row);
        for (int k = 0; k < Rows::kWidth; ++k) {
          const int d = own.column(k);
          if (d < d_v) dv[k] = fmaf(pd, sh.dout(r, d), dv[k]);
          if (d < d_qk) dk[k] = fmaf(ds, sh.q(r, d), dk[k]);
        }
      }
      __syncthreads();  // before the next tile overwrites q, dO, stats, pd, ds
    }
  }
  const int64_t j = j0 + own.row;
  if (j >= p.kv_len) return;
  Bits<T>* dk_row = bits(a.dk) + grad_offset(b, j, kv_head, p.kv_len, a.dk_row_stride, p.kv_heads, p.head_dim);
  Bits<T>* dv_row = bits(a.dv) + grad_offset(b, j, kv_head, p.kv_len, a.dv_row_stride, p.kv_heads, p.value_dim);
  for (int k = 0; k < Rows::kWidth; ++k) {
    const int d = own.column(k);
    if (d < d_qk) dk_row[d] = Elem<T>::store(dk[k]);
    if (d < d_v) dv_row[d] = Elem<T>::store(dv[k]);
  }
}

// Grid (query tile, b·Hq + h): dQ of the tile's queries, summed over the visible key tiles (ascending).
template <class T, int kBucket>
__global__ void __launch_bounds__(kThreads) query_grads_kernel(AttentionBackwardArgs<T> a, const float* delta) {
  constexpr Tiling kT = FlashTraits<kBucket>::kQueryGrads;
  using Rows = RowOwnership<kT.queries, kBucket>;
  extern __shared__ float shared[];
  const AttentionParams<T>& p = a.params;
  const int d_qk = int(p.head_dim), d_v = int(p.value_dim);
  const BackwardShared<kT> sh(shared, d_qk, d_v);
  const int64_t bh = blockIdx.y, b = bh / p.q_heads, h = bh % p.q_heads, kv_head = h / (p.q_heads / p.kv_heads);
  const int64_t i0 = int64_t(blockIdx.x) * kT.queries;
  const Bits<T>* k_rows = bits(a.k) + b * p.k_strides.batch + kv_head * p.k_strides.head;
  const Bits<T>* v_rows = bits(a.v) + b * p.v_strides.batch + kv_head * p.v_strides.head;
  load_query_side(a, sh, delta, bh, i0);

  const Rows own;
  float dq[Rows::kWidth] = {};
  const KeyRange keys = tile_key_range(p, i0, rows_in_tile(i0, kT.queries, p.q_len));
  for (int64_t j0 = keys.begin; j0 < keys.end; j0 += kT.keys) {
    load_rows<T>(sh.k, k_rows, p.k_strides.time, j0, p.kv_len, kT.keys, d_qk);
    load_rows<T>(sh.v, v_rows, p.v_strides.time, j0, p.kv_len, kT.keys, d_v);
    __syncthreads();  // q, dO, stats (first pass), k, v loaded
    score_grads<false>(p, sh, bh, i0, j0);
    __syncthreads();
    for (int c = 0; c < kT.keys; ++c) {
      const float ds = sh.ds(own.row, c);
      for (int k = 0; k < Rows::kWidth; ++k)
        if (own.column(k) < d_qk) dq[k] = fmaf(ds, sh.k(c, own.column(k)), dq[k]);
    }
    __syncthreads();  // before the next tile overwrites k, v, ds
  }
  const int64_t i = i0 + own.row;
  if (i >= p.q_len) return;
  Bits<T>* dq_row = bits(a.dq) + grad_offset(b, i, h, p.q_len, a.dq_row_stride, p.q_heads, p.head_dim);
  for (int k = 0; k < Rows::kWidth; ++k)
    if (own.column(k) < d_qk) dq_row[own.column(k)] = Elem<T>::store(dq[k]);
}

// ---- Host side ------------------------------------------------------------------------------------------

template <class T, int kBucket>
void forward(const AttentionForwardArgs<T>& args, cudaStream_t stream) {
  const AttentionParams<T>& p = args.params;
  constexpr Tiling kT = FlashTraits<kBucket>::kForward;
  const int64_t floats = ForwardShared<kT>(nullptr, int(p.head_dim), int(p.value_dim)).floats;
  const dim3 grid(tile_count(p.q_len, kT.queries), heads_extent(p.batch * p.q_heads, "flash_attention_forward"));
  launch_with_shared(forward_kernel<T, kBucket>, "flash_attention_forward", grid, kThreads, floats * sizeof(float),
                     stream, args);
}

template <class T, int kBucket>
void backward(const AttentionBackwardArgs<T>& args, const float* delta, cudaStream_t stream) {
  const AttentionParams<T>& p = args.params;
  constexpr Tiling kKeys = FlashTraits<kBucket>::kKeyGrads, kQueries = FlashTraits<kBucket>::kQueryGrads;
  const int d = int(p.head_dim), dv = int(p.value_dim);
  const dim3 key_grid(tile_count(p.kv_len, kKeys.keys),
                      heads_extent(p.batch * p.kv_heads, "flash_attention_backward"));
  launch_with_shared(key_grads_kernel<T, kBucket>, "flash_attention_backward (dk, dv)", key_grid, kThreads,
                     BackwardShared<kKeys>(nullptr, d, dv).floats * sizeof(float), stream, args, delta);
  const dim3 query_grid(tile_count(p.q_len, kQueries.queries),
                        heads_extent(p.batch * p.q_heads, "flash_attention_backward"));
  launch_with_shared(query_grads_kernel<T, kBucket>, "flash_attention_backward (dq)", query_grid, kThreads,
                     BackwardShared<kQueries>(nullptr, d, dv).floats * sizeof(float), stream, args, delta);
}

}  // namespace

template <class T>
void flash_attention_forward(const AttentionForwardArgs<T>& args, Stream stream) {
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  if constexpr (!std::is_same_v<T, float>) {
    flash_attention_mma_forward(args, s);
  } else {
    switch (bucket(args.params, "flash_attention_forward")) {
      case 64: return forward<T, 64>(args, s);
      case 128: return forward<T, 128>(args, s);
      default: return forward<T, 256>(args, s);
    }
  }
}

template <class T>
void flash_attention_backward(const AttentionBackwardArgs<T>& args, float* workspace, Stream stream) {
  const AttentionParams<T>& p = args.params;
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  if constexpr (!std::is_same_v<T, float>) {
    // What the kernels refuse, checked before anything is queued: the head dimensions, the grids' batch·heads
    // (heads_extent), and the dK/dV kernels' walk over (query head of the GQA group, query tile) steps, whose
    // positions and count are 32-bit (QueryWalk; the tensor maps' coordinates are 32-bit too).
    constexpr const char* kOp = "flash_attention_backward";
    mma_head_dim_bucket(p, kOp);
    heads_extent(p.batch * p.q_heads, kOp);
    const int64_t group = p.q_heads / std::max<int64_t>(p.kv_heads, 1);
    if (p.q_len * group > INT32_MAX)
      raise<ShapeError>(kOp, "q_len·(q_heads / kv_heads)", "below 2^31",
                        std::to_string(p.q_len) + "·" + std::to_string(group));
    launch_attention_delta(args.dout, args.out, p, workspace, s);
    flash_attention_mma_backward(args, workspace, s);
  } else {
    const int b = bucket(p, "flash_attention_backward");
    launch_attention_delta(args.dout, args.out, p, workspace, s);
    switch (b) {
      case 64: return backward<T, 64>(args, workspace, s);
      case 128: return backward<T, 128>(args, workspace, s);
      default: return backward<T, 256>(args, workspace, s);
    }
  }
}

std::string flash_attention_kernels_here(bool f32, int64_t head_dim, int64_t value_dim) {
  if (f32) return "f32 FMA kernels (true f32)";
  const int bucket = mma_head_dim_bucket(head_dim, value_dim, "flash_attention_kernels_here");
  if (wgmma_kernels_run(bucket))
    return "Hopper kernels (TMA-fed, warp-specialised wgmma; head-dim bucket " + std::to_string(bucket) + ")";
  return "mma.sync tensor-core kernels (head-dim bucket " + std::to_string(bucket) + ")";
}

#define ALPHA_INSTANTIATE(T)                                                                           \
  template void flash_attention_forward<T>(const AttentionForwardArgs<T>&, Stream);                    \
  template void flash_attention_backward<T>(const AttentionBackwardArgs<T>&, float*, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
