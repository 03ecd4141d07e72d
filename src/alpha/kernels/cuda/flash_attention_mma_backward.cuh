// What the bf16/f16 backward kernels share, whether their products run on mma.sync
// (flash_attention_mma_backward.cu) or on Hopper's wgmma (flash_attention_wgmma_backward.cu): the walk of a
// key block over the query heads and tiles that see it, the rows' softmax statistics, the per-entry
// gradient step over C fragments, and the stores of dK, dV and dQ. Both kernels lay a warp's rows out as
// mma.m16n8's C fragments (a wgmma warpgroup's accumulator is four warps' worth of them, warp w owning rows
// [16w, 16w + 16) of the block), so one step serves both.
#pragma once
#include <algorithm>
#include <type_traits>

#include "alpha/kernels/cuda/flash_attention_mma.cuh"
#include "alpha/kernels/cuda/mma.cuh"

namespace alpha::kernels::cuda::mma_backward {

using mma::FragA;
using mma::FragC;

// The (row, column) entries of a warp's 16 × 8·kN C fragments: row g + 8·(x / 2), column 8n + 2t + x % 2.
__device__ __forceinline__ int fragment_row(int lane, int x) { return lane / 4 + 8 * (x / 2); }
__device__ __forceinline__ int fragment_col(int lane, int n, int x) { return 8 * n + 2 * (lane % 4) + x % 2; }

// A key block's steps: (query head of the GQA group, query tile of kStream rows among those that see the
// block's keys), head-major. A cursor moves through them by increments (no 64-bit division in the loop), in 32
// bits (flash_attention_backward refuses Tq·(Hq / Hkv) from 2^31): held in the TMA kernels' 24-register producer warps
// and the consumers' loops, 64-bit positions spilled (ptxas, 2026-11-30: D 128 added-dQ 128 -> 84 bytes, cp.async 56 ->
// 20).
struct QueryStep {
  int h, i0;
};
struct QueryWalk {
  int begin, end, steps;
  int stream;
  __device__ QueryStep following(QueryStep s) const {
    s.i0 += stream;
    if (s.i0 >= end) s.i0 = begin, ++s.h;
    return s;
  }
};
template <class T>
__device__ __forceinline__ QueryWalk query_walk(const AttentionParams<T>& p, int64_t j0, int64_t j_end, int stream,
                                                int64_t group) {
  const QueryRange queries = visible_query_range(p, j0, j_end);
  const int64_t tiles_per_head = (queries.end - queries.begin + stream - 1) / stream;
  return {int(queries.begin), int(queries.end), int(tiles_per_head * group), stream};
}

// The statistics of a step's kStream query rows into shared memory, by `threads` threads (this one number
// `thread` among them): lse2 (+inf past Tq, so P = 0 there) and D = rowsum(dO∘O) (0 past Tq).
template <class T>
__device__ __forceinline__ void load_query_stats(const AttentionBackwardArgs<T>& a, const float* delta, int64_t b,
                                                 QueryStep s, int stream, float* lse2_rows, float* delta_rows,
                                                 int thread, int threads) {
  const AttentionParams<T>& p = a.params;
  for (int r = thread; r < stream; r += threads) {
    const int64_t i = s.i0 + r, row = (b * p.q_heads + s.h) * p.q_len + i;
    const bool inside = i < p.q_len;
    lse2_rows[r] = inside ? log2_normaliser(a.row_max[row], a.row_sum[row]) : INFINITY;
    delta_rows[r] = inside ? delta[row] : 0.0f;
  }
}

// The same statistics for this thread's rows of a query block (fragment rows g and g + 8 of each of its
// warp's kM 16-row tiles from row0).
template <class T, int kM>
__device__ __forceinline__ void query_row_stats(const AttentionBackwardArgs<T>& a, const float* delta, int64_t bh,
                                                int64_t row0, int lane, float (&lse2)[kM][2],
                                                float (&row_delta)[kM][2]) {
  const AttentionParams<T>& p = a.params;
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t i = row0 + 16 * m + fragment_row(lane, 2 * half), row = bh * p.q_len + i;
      const bool inside = i < p.q_len;
      lse2[m][half] = inside ? log2_normaliser(a.row_max[row], a.row_sum[row]) : INFINITY;
      row_delta[m][half] = inside ? delta[row] : 0.0f;
    }
}

// Per entry of a key-major (transposed) tile; key_entry_grads below. kSoftcap and kDropout are p.softcap > 0
// and p.dropout_p > 0 as templates, so the entry loop carries no per-entry test of either (the compiler had
// put each entry's softcap and Philox draw behind branches of their own: over a hundred instructions of code
// per entry). A masked tile works out each query's visible keys once, not once per entry, computes every
// entry and selects 0 where the key is not visible: no branch at all in the entry loop.
template <bool kMasked, bool kSoftcap, bool kDropout, class T, int kM, int kN>
__device__ __forceinline__ void key_entries(const AttentionParams<T>& p, Softcap softcap, float scale_log2,
                                            int64_t bh, int64_t i0, int64_t key_row0, int lane, FragC (&st)[kM][kN],
                                            FragC (&dpt)[kM][kN], const float* lse2_rows, const float* delta_rows) {
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int col_bit = 0; col_bit < 2; ++col_bit) {
      const int col = fragment_col(lane, n, col_bit);
      const float lse2 = lse2_rows[col], row_delta = delta_rows[col];
      const int64_t i = i0 + col;
      // Worked out unconditionally, and past Tq too (inside says those rows see nothing): a range written
      // under a predicate is one the constant-time audit (scripts/sass_audit.py) cannot clear of taint.
      const bool inside = i < p.q_len;
      const KeyRange keys = visible_key_range(p, i);
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int x = col_bit; x < 4; x += 2) {
          const int64_t j = key_row0 + 16 * m + fragment_row(lane, x);
          const float z = kDropout && inside ? attention_dropout_factor(p, bh, i, j) : 1.0f;
          const EntryGrad e =
              entry_gradient<kSoftcap>(p, softcap, scale_log2, st[m][n].x[x], dpt[m][n].x[x], lse2, row_delta, z);
          if constexpr (kMasked) {
            const bool visible = inside && j >= keys.begin && j < keys.end;
            st[m][n].x[x] = select_float(visible, e.prob_dropped, 0.0f);
            dpt[m][n].x[x] = select_float(visible, e.dscore, 0.0f);
          } else {
            st[m][n].x[x] = e.prob_dropped;
            dpt[m][n].x[x] = e.dscore;
          }
        }
    }
}

// Per entry of a query-major tile; query_entry_grads below. The templates as key_entries'.
template <bool kMasked, bool kSoftcap, bool kDropout, class T, int kM, int kN>
__device__ __forceinline__ void query_entries(const AttentionParams<T>& p, Softcap softcap, float scale_log2,
                                              int64_t bh, int64_t row0, int64_t j0, int lane, FragC (&s)[kM][kN],
                                              const FragC (&dp)[kM][kN], const float (&lse2)[kM][2],
                                              const float (&row_delta)[kM][2]) {
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t i = row0 + 16 * m + fragment_row(lane, 2 * half);
      const bool inside = i < p.q_len;  // and the range unconditionally, as in key_entries
      const KeyRange keys = visible_key_range(p, i);
#pragma unroll
      for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int x = 2 * half; x < 2 * half + 2; ++x) {
          const int64_t j = j0 + fragment_col(lane, n, x);
          const float z = kDropout && inside ? attention_dropout_factor(p, bh, i, j) : 1.0f;
          const float dscore = entry_gradient<kSoftcap>(p, softcap, scale_log2, s[m][n].x[x], dp[m][n].x[x],
                                                        lse2[m][half], row_delta[m][half], z)
                                   .dscore;
          s[m][n].x[x] = kMasked ? select_float(inside && j >= keys.begin && j < keys.end, dscore, 0.0f) : dscore;
        }
    }
}

// Calls entry(std::bool_constant<softcap>, std::bool_constant<dropout>) for the parameters' softcap and
// dropout: one uniform branch per tile step instead of one per entry. kMayDrop = false is for kernels
// instantiated for p.dropout_p = 0 (the wgmma dK/dV ones), which then hold no dropout code: its Philox state
// cost registers even untaken (-Xptxas -v: the D 128 dK/dV kernel spilled 1276 bytes with it, 56 without).
template <bool kMayDrop, class T, class Entry>
__device__ __forceinline__ void with_entry_options(const AttentionParams<T>& p, const Entry& entry) {
  const bool dropped = kMayDrop && p.dropout_p > 0;
  const auto with_dropout = [&](auto softcapped) {
    if (dropped) entry(softcapped, std::bool_constant<kMayDrop>{});
    else entry(softcapped, std::false_type{});
  };
  if (p.softcap > 0) with_dropout(std::true_type{});
  else with_dropout(std::false_type{});
}

// The key-major entry step: st and dpt hold Sᵀ and dP̃ᵀ (rows: this warp's keys from key_row0 of the
// block's keys [j0, j0 + block_keys); columns: the step's kN·8 queries from i0, whose lse2 and D are in
// shared memory); each entry becomes P̃ (in st) and dS_raw (in dpt). When every query of the step sees every
// key of the block, the per-entry visibility test is skipped (the choice depends on positions only).
template <bool kMayDrop, class T, int kM, int kN>
__device__ __forceinline__ void key_entry_grads(const AttentionParams<T>& p, Softcap softcap, float scale_log2,
                                                int64_t bh, int64_t i0, int64_t j0, int block_keys, int64_t key_row0,
                                                int lane, FragC (&st)[kM][kN], FragC (&dpt)[kM][kN],
                                                const float* lse2_rows, const float* delta_rows) {
  const int64_t last_row = tile_last_row(i0, 8 * kN, p.q_len);
  const bool whole = j0 >= visible_key_range(p, last_row).begin && j0 + block_keys <= visible_key_range(p, i0).end;
  with_entry_options<kMayDrop>(p, [&](auto softcapped, auto dropped) {
    constexpr bool kSoftcap = decltype(softcapped)::value, kDropout = decltype(dropped)::value;
    if (whole)
      key_entries<false, kSoftcap, kDropout>(p, softcap, scale_log2, bh, i0, key_row0, lane, st, dpt, lse2_rows,
                                             delta_rows);
    else
      key_entries<true, kSoftcap, kDropout>(p, softcap, scale_log2, bh, i0, key_row0, lane, st, dpt, lse2_rows,
                                            delta_rows);
  });
}

// The query-major entry step: s and dp hold S and dP̃ (rows: this thread's queries from row0, with their
// statistics; columns: the kN·8 keys from j0); each entry becomes dS_raw (in s). Keys in [whole_begin,
// whole_end) are seen by every query of the block: tiles inside it skip the visibility test.
template <bool kMayDrop, class T, int kM, int kN>
__device__ __forceinline__ void query_entry_grads(const AttentionParams<T>& p, Softcap softcap, float scale_log2,
                                                  int64_t bh, int64_t row0, int64_t j0, int64_t whole_begin,
                                                  int64_t whole_end, int lane, FragC (&s)[kM][kN],
                                                  const FragC (&dp)[kM][kN], const float (&lse2)[kM][2],
                                                  const float (&row_delta)[kM][2]) {
  const bool whole = j0 >= whole_begin && j0 + 8 * kN <= whole_end;
  with_entry_options<kMayDrop>(p, [&](auto softcapped, auto dropped) {
    constexpr bool kSoftcap = decltype(softcapped)::value, kDropout = decltype(dropped)::value;
    if (whole)
      query_entries<false, kSoftcap, kDropout>(p, softcap, scale_log2, bh, row0, j0, lane, s, dp, lse2, row_delta);
    else
      query_entries<true, kSoftcap, kDropout>(p, softcap, scale_log2, bh, row0, j0, lane, s, dp, lse2, row_delta);
  });
}

// Stores rows [row0, row0 + 16·kM) of a warp's f32 accumulator (16·kM × 8·kO), times `scale`, as T (bf16 or
// f16 into uint16_t rows, or float into float rows) into out_row(r) (null for a row past the operand), columns
// below `width`. Each thread writes two adjacent columns at once, so rows must be 4-byte aligned (8 for float).
template <class T, int kM, int kO, class RowPointer>
__device__ __forceinline__ void store_rows(const FragC (&acc)[kM][kO], float scale, int width, int lane,
                                           const RowPointer& out_row) {
  using Row = std::conditional_t<std::is_same_v<T, float>, float*, uint16_t*>;
  static_assert(std::is_same_v<decltype(out_row(0)), Row>, "out_row gives float rows for float, uint16_t for bf16/f16");
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      Row row = out_row(16 * m + fragment_row(lane, 2 * half));
      if (row == nullptr) continue;
#pragma unroll
      for (int n = 0; n < kO; ++n) {
        const int col = fragment_col(lane, n, 0);
        if (col >= width) continue;
        const float lo = acc[m][n].x[2 * half] * scale, hi = acc[m][n].x[2 * half + 1] * scale;
        if constexpr (std::is_same_v<T, float>)
          *reinterpret_cast<float2*>(row + col) = make_float2(lo, hi);
        else
          *reinterpret_cast<uint32_t*>(row + col) = mma::pack2<T>(lo, hi);
      }
    }
}

// dK (scaled) and dV of a warp's keys from key_row0 (dk, dv: [B, Tk, Hkv, D or Dv]).
template <class T, int kM, int kO>
__device__ __forceinline__ void store_key_grads(const AttentionBackwardArgs<T>& a, int64_t b, int64_t kv_head,
                                                int64_t key_row0, int lane, const FragC (&dk)[kM][kO],
                                                const FragC (&dv)[kM][kO]) {
  const AttentionParams<T>& p = a.params;
  auto key_row = [&](uint16_t* out, int64_t row_stride, int64_t width, int r) -> uint16_t* {
    const int64_t j = key_row0 + r;
    return j < p.kv_len ? out + grad_offset(b, j, kv_head, p.kv_len, row_stride, p.kv_heads, width) : nullptr;
  };
  store_rows<T>(dk, p.scale, int(p.head_dim), lane,
                [&](int r) { return key_row(bits(a.dk), a.dk_row_stride, p.head_dim, r); });
  store_rows<T>(dv, 1.0f, int(p.value_dim), lane,
                [&](int r) { return key_row(bits(a.dv), a.dv_row_stride, p.value_dim, r); });
}

// dQ (scaled) of a warp's queries from row0 of head h (dq: [B, Tq, Hq, D]).
template <class T, int kM, int kO>
__device__ __forceinline__ void store_query_grads(const AttentionBackwardArgs<T>& a, int64_t b, int64_t h,
                                                  int64_t row0, int lane, const FragC (&dq)[kM][kO]) {
  const AttentionParams<T>& p = a.params;
  store_rows<T>(dq, p.scale, int(p.head_dim), lane, [&](int r) -> uint16_t* {
    const int64_t i = row0 + r;
    return i < p.q_len ? bits(a.dq) + grad_offset(b, i, h, p.q_len, a.dq_row_stride, p.q_heads, p.head_dim) : nullptr;
  });
}

// dq = scale · dq_sum, rounded to T: dq_sum is [B·Hq, Tq, D] f32, dq [B, Tq, Hq, D]; two elements per thread.
template <class T>
__global__ void store_dq_kernel(AttentionBackwardArgs<T> a, const float* dq_sum) {
  const AttentionParams<T>& p = a.params;
  const int64_t pairs = p.batch * p.q_heads * p.q_len * p.head_dim / 2;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < pairs; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = 2 * e / p.head_dim, d = 2 * e % p.head_dim;
    const int64_t bh = row / p.q_len, i = row % p.q_len, b = bh / p.q_heads, h = bh % p.q_heads;
    const float2 sum = reinterpret_cast<const float2*>(dq_sum)[e];
    *reinterpret_cast<uint32_t*>(bits(a.dq) + grad_offset(b, i, h, p.q_len, a.dq_row_stride, p.q_heads, p.head_dim) +
                                 d) = mma::pack2<T>(sum.x * p.scale, sum.y * p.scale);
  }
}
// The non-deterministic backwards' last pass: dq from the dQ accumulator the dK/dV kernel added into.
template <class T>
void launch_store_dq(const AttentionBackwardArgs<T>& args, const float* dq_sum, cudaStream_t stream) {
  const AttentionParams<T>& p = args.params;
  const int64_t pairs = p.batch * p.q_heads * p.q_len * p.head_dim / 2;
  const unsigned blocks = unsigned(std::min<int64_t>((pairs + 255) / 256, 65535));
  ALPHA_CUDA_LAUNCH(store_dq_kernel<T>, blocks, 256, stream, args, dq_sum);
}

}  // namespace alpha::kernels::cuda::mma_backward
