// Materialising attention on CUDA (kernels/attention_materialized.h): not flash attention. Every score
// matrix S (B·Hq of them, Tq × Tk, f32) is written to a workspace and read back, in plain tiled
// shared-memory products. Element types: f32, and bf16/f16 storage; everything accumulates in f32.
//
// Three products, one tile scheme (Tiles): a block of 256 threads owns a 64 × 64 tile of outputs (each
// thread a 4 × 4 register tile) and steps through the reduction 16 at a time through shared memory.
//   scores_kernel        S  = softcap(Q·Kᵀ·scale)        (per (b, h); reduction over D), and, with kGrad,
//                        dS = P∘(dP∘Z − D)·scale·softcap', dP = dO·Vᵀ (reduction over Dv), in place over S
//   rows_product_kernel  out = P̃·V, dQ = dS·K              (per (b, h); reduction over the visible keys)
//   keys_product_kernel  dV = P̃ᵀ·dO, dK = dSᵀ·Q            (per (b, kv head); reduction over the group's
//                        heads, then the queries that see the tile's keys, in that fixed order: no atomics)
// plus two row kernels: softmax_kernel (m, l and P̃ in place over S) and the shared attention_delta_kernel (attention_common.cuh: D = rowsum(dO∘O)).
// Tiles in which every row has every key masked (by the causal mask or the window, on either side) are
// skipped; no kernel reads a masked entry of the workspace (loaders test visible_key_range), so the skipped
// tiles may hold anything.
// Dropout draws the reference's mask: element (b, h, i, j) of P is kept iff dropout_keeps of Philox
// counter attention_dropout_index(p, b·Hq + h, i, j) (the same functions as the CPU reference).
#include <algorithm>
#include <cmath>

#include "alpha/core/philox.h"
#include "alpha/kernels/attention_materialized.h"
#include "alpha/kernels/cuda/attention_common.cuh"
#include "alpha/kernels/cuda/common.cuh"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

namespace {

struct Tiles {
  static constexpr int kTile = 64;                  // output tile: kTile × kTile
  static constexpr int kDepth = 16;                 // reduction step held in shared memory
  static constexpr int kSide = 16;                  // threads per side of the block
  static constexpr int kThreads = kSide * kSide;
  static constexpr int kPerThread = kTile / kSide;  // each thread: rows ty + kSide·r, columns tx + kSide·c
};
constexpr int kTile = Tiles::kTile, kDepth = Tiles::kDepth, kSide = Tiles::kSide, kPer = Tiles::kPerThread;

// One reduction step's operands in shared memory, k-major: a[k][row] and b[k][column]. The padding
// column spreads the stores of depth-major loads over the banks.
struct StepTiles {
  float a[kDepth][kTile + 1];
  float b[kDepth][kTile + 1];
};

using Accumulator = float[kPer][kPer];

// tile[k][x] = load(x, k) for x < kTile, k < kDepth. kDepthFastest: consecutive threads take consecutive
// k (for operands contiguous along the reduction), else consecutive x.
template <bool kDepthFastest, class Load>
__device__ void fill(float (&tile)[kDepth][kTile + 1], const Load& load) {
  for (int e = threadIdx.x; e < kTile * kDepth; e += Tiles::kThreads) {
    const int k = kDepthFastest ? e % kDepth : e / kTile;
    const int x = kDepthFastest ? e / kDepth : e % kTile;
    tile[k][x] = load(x, k);
  }
}

// acc[r][c] += Σ_k a(ty + kSide·r, k) · b(k, tx + kSide·c) for k in [begin, end): load_a(row, k) and
// load_b(k, column) take the tile-local row or column and the absolute k. Every thread of the block must
// call it (it synchronises the block).
template <bool kADepthFastest, bool kBDepthFastest, class LoadA, class LoadB>
__device__ void product(int64_t begin, int64_t end, const LoadA& load_a, const LoadB& load_b, StepTiles& t,
                        Accumulator& acc) {
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
  for (int64_t k0 = begin; k0 < end; k0 += kDepth) {
    fill<kADepthFastest>(t.a, [&](int x, int k) { return k0 + k < end ? load_a(x, k0 + k) : 0.0f; });
    fill<kBDepthFastest>(t.b, [&](int x, int k) { return k0 + k < end ? load_b(k0 + k, x) : 0.0f; });
    __syncthreads();
    for (int k = 0; k < kDepth; ++k) {
      float a[kPer], b[kPer];
      for (int r = 0; r < kPer; ++r) a[r] = t.a[k][ty + kSide * r];
      for (int c = 0; c < kPer; ++c) b[c] = t.b[k][tx + kSide * c];
      for (int r = 0; r < kPer; ++r)
        for (int c = 0; c < kPer; ++c) acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
    }
    __syncthreads();
  }
}

// Calls fn(row, column, value) for each of the thread's outputs.
template <class Fn>
__device__ void for_each_output(const Accumulator& acc, const Fn& fn) {
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
  for (int r = 0; r < kPer; ++r)
    for (int c = 0; c < kPer; ++c) fn(ty + kSide * r, tx + kSide * c, acc[r][c]);
}

// Whether key j is visible to query i.
__device__ bool sees(const KeyRange& keys, int64_t j) { return j >= keys.begin && j < keys.end; }

// The keys some query of the tile starting at row i0 sees: the union of the rows' visible_key_range, one
// range as begin and end never decrease with i. Only the rows that see a key count (the others are
// leading or trailing rows with empty ranges); empty ({0, 0}) if none does.
template <class T>
__device__ KeyRange tile_key_range(const AttentionParams<T>& p, int64_t i0) {
  const QueryRange seeing = visible_query_range(p, 0, p.kv_len);
  const int64_t first = i0 > seeing.begin ? i0 : seeing.begin;
  const int64_t end = i0 + kTile < seeing.end ? i0 + kTile : seeing.end;
  if (first >= end) return {0, 0};
  return {visible_key_range(p, first).begin, visible_key_range(p, end - 1).end};
}

// The queries that see some key of the tile starting at key j0 (visible_query_range).
template <class T>
__device__ QueryRange tile_query_range(const AttentionParams<T>& p, int64_t j0) {
  return visible_query_range(p, j0, j0 + kTile < p.kv_len ? j0 + kTile : p.kv_len);
}

// Grid (b·Hq + h, query tile, key tile). x: rows of head h (q, or dO for kGrad), y: rows of kv head
// h / group (k, or v for kGrad), both [B, T, H, depth] with unit feature stride.
// kGrad false: scores[bh, i, j] = softcap(x_i·y_j·scale), −inf where masked.
// kGrad true: scores holds S on entry; each visible entry becomes dS = P·(dP·Z − D_i), times
// (1 − (S/c)²) with a softcap c, times the scale, where dP = x_i·y_j and P = exp(S − m_i) / l_i.
template <class T, bool kGrad>
__global__ void scores_kernel(const Bits<T>* x, AttentionStrides xs, const Bits<T>* y, AttentionStrides ys,
                              int64_t depth, AttentionParams<T> p, float* scores, const float* row_max,
                              const float* row_sum, const float* delta) {
  __shared__ StepTiles tiles;
  const int64_t bh = blockIdx.x, b = bh / p.q_heads, h = bh % p.q_heads, kv_head = h / (p.q_heads / p.kv_heads);
  const int64_t i0 = int64_t(blockIdx.y) * kTile, j0 = int64_t(blockIdx.z) * kTile;
  const QueryRange seeing = tile_query_range(p, j0);
  if (seeing.end <= i0 || seeing.begin >= i0 + kTile) return;  // every row of the tile has these keys masked
  const Bits<T>* x_rows = x + b * xs.batch + h * xs.head;
  const Bits<T>* y_rows = y + b * ys.batch + kv_head * ys.head;
  Accumulator acc = {};
  product<true, true>(
      0, depth,
      [&](int r, int64_t d) {
        const int64_t i = i0 + r;
        return i < p.q_len ? Elem<T>::load(x_rows[i * xs.time + d]) : 0.0f;
      },
      [&](int64_t d, int c) {
        const int64_t j = j0 + c;
        return j < p.kv_len ? Elem<T>::load(y_rows[j * ys.time + d]) : 0.0f;
      },
      tiles, acc);
  float* head_scores = scores + bh * p.q_len * p.kv_len;
  for_each_output(acc, [&](int r, int c, float dot) {
    const int64_t i = i0 + r, j = j0 + c;
    if (i >= p.q_len || j >= p.kv_len) return;
    float& entry = head_scores[i * p.kv_len + j];
    const bool visible = sees(visible_key_range(p, i), j);
    if constexpr (!kGrad) {
      float s = dot * p.scale;
      if (p.softcap > 0) s = p.softcap * tanhf(s / p.softcap);
      entry = visible ? s : -INFINITY;
    } else {
      if (!visible) {
        entry = 0.0f;
        return;
      }
      const int64_t row = bh * p.q_len + i;
      const float s = entry;
      const float prob = expf(s - row_max[row]) / row_sum[row];
      float ds = prob * (dot * attention_dropout_factor(p, bh, i, j) - delta[row]);
      if (p.softcap > 0) ds *= 1.0f - (s / p.softcap) * (s / p.softcap);
      entry = ds * p.scale;
    }
  });
}

constexpr int kRowThreads = 128;
constexpr int64_t kMaxRowBlocks = 1 << 16;

// One block per query row (bh·Tq + i): m = max and l = Σ exp(S − m) over the visible keys (fixed-order
// block reductions), then P̃ = exp(S − m) / l · dropout factor over S. A row that sees no key gets
// m = −inf, l = 0 and keeps its (never read) scores.
template <class T>
__global__ void softmax_kernel(AttentionParams<T> p, float* scores, float* row_max, float* row_sum) {
  __shared__ float scratch[32];
  const int64_t rows = p.batch * p.q_heads * p.q_len;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t bh = row / p.q_len, i = row % p.q_len;
    const KeyRange visible = visible_key_range(p, i);
    float* s = scores + row * p.kv_len;
    float m = -INFINITY;
    for (int64_t j = visible.begin + threadIdx.x; j < visible.end; j += blockDim.x) m = fmaxf(m, s[j]);
    m = block_max(m, scratch);
    float l = 0.0f;
    for (int64_t j = visible.begin + threadIdx.x; j < visible.end; j += blockDim.x) l += expf(s[j] - m);
    l = block_sum(l, scratch);
    for (int64_t j = visible.begin + threadIdx.x; j < visible.end; j += blockDim.x)
      s[j] = expf(s[j] - m) / l * attention_dropout_factor(p, bh, i, j);
    if (threadIdx.x == 0) {
      row_max[row] = m;
      row_sum[row] = l;
    }
  }
}

// Grid (b·Hq + h, query tile, feature tile): out[b, i, h, d] = Σ_j a[bh, i, j] · x[b, j, h / group, d] over
// the keys query i sees; out is [B, Tq, Hq, width], rows out_row_stride apart (0: contiguous). The forward's P̃·V
// and the backward's dS·K.
template <class T>
__global__ void rows_product_kernel(const float* a, const Bits<T>* x, AttentionStrides xs, int64_t width,
                                    AttentionParams<T> p, Bits<T>* out, int64_t out_row_stride) {
  __shared__ StepTiles tiles;
  const int64_t bh = blockIdx.x, b = bh / p.q_heads, h = bh % p.q_heads, kv_head = h / (p.q_heads / p.kv_heads);
  const int64_t i0 = int64_t(blockIdx.y) * kTile, d0 = int64_t(blockIdx.z) * kTile;
  const float* head_a = a + bh * p.q_len * p.kv_len;
  const Bits<T>* x_rows = x + b * xs.batch + kv_head * xs.head;
  const KeyRange keys = tile_key_range(p, i0);
  Accumulator acc = {};
  product<true, false>(
      keys.begin, keys.end,
      [&](int r, int64_t j) {
        const int64_t i = i0 + r;
        return i < p.q_len && sees(visible_key_range(p, i), j) ? head_a[i * p.kv_len + j] : 0.0f;
      },
      [&](int64_t j, int c) {
        const int64_t d = d0 + c;
        return d < width ? Elem<T>::load(x_rows[j * xs.time + d]) : 0.0f;
      },
      tiles, acc);
  for_each_output(acc, [&](int r, int c, float value) {
    const int64_t i = i0 + r, d = d0 + c;
    if (i < p.q_len && d < width)
      out[grad_offset(b, i, h, p.q_len, out_row_stride, p.q_heads, width) + d] = Elem<T>::store(value);
  });
}

// Grid (b·Hkv + kv head, key tile, feature tile): out[b, j, kv, d] = Σ_h Σ_i f(a[bh, i, j]) · y[b, i, h, d]
// over the group's query heads h (ascending), then the queries i that see key j (ascending): one thread
// owns each output and adds in that order. out is [B, Tk, Hkv, width], rows out_row_stride apart (0: contiguous).
// kProbs: a holds S and f rebuilds P̃ = exp(S − m_i) / l_i · dropout factor (dV = P̃ᵀ·dO); else f is the
// identity on dS (dK = dSᵀ·Q).
template <class T, bool kProbs>
__global__ void keys_product_kernel(const float* a, const Bits<T>* y, AttentionStrides ys, int64_t width,
                                    AttentionParams<T> p, const float* row_max, const float* row_sum, Bits<T>* out,
                                    int64_t out_row_stride) {
  __shared__ StepTiles tiles;
  const int64_t group = p.q_heads / p.kv_heads;
  const int64_t b = blockIdx.x / p.kv_heads, kv_head = blockIdx.x % p.kv_heads;
  const int64_t j0 = int64_t(blockIdx.y) * kTile, d0 = int64_t(blockIdx.z) * kTile;
  // Queries outside this range see none of the tile's keys (causal mask and window).
  const QueryRange queries = tile_query_range(p, j0);
  Accumulator acc = {};
  for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
    const int64_t bh = b * p.q_heads + h;
    const float* head_a = a + bh * p.q_len * p.kv_len;
    const Bits<T>* y_rows = y + b * ys.batch + h * ys.head;
    product<false, false>(
        queries.begin, queries.end,
        [&](int c, int64_t i) {
          const int64_t j = j0 + c;
          if (j >= p.kv_len || !sees(visible_key_range(p, i), j)) return 0.0f;
          const float value = head_a[i * p.kv_len + j];
          if constexpr (kProbs) {
            const int64_t row = bh * p.q_len + i;
            return expf(value - row_max[row]) / row_sum[row] * attention_dropout_factor(p, bh, i, j);
          } else {
            return value;
          }
        },
        [&](int64_t i, int c) {
          const int64_t d = d0 + c;
          return d < width ? Elem<T>::load(y_rows[i * ys.time + d]) : 0.0f;
        },
        tiles, acc);
  }
  for_each_output(acc, [&](int r, int c, float value) {
    const int64_t j = j0 + r, d = d0 + c;
    if (j < p.kv_len && d < width)
      out[grad_offset(b, j, kv_head, p.kv_len, out_row_stride, p.kv_heads, width) + d] = Elem<T>::store(value);
  });
}

unsigned tile_count(int64_t n) { return unsigned((n + kTile - 1) / kTile); }
bool empty(dim3 grid) { return grid.x == 0 || grid.y == 0 || grid.z == 0; }

// Strides of a contiguous [B, T, H, width] tensor.
AttentionStrides contiguous(int64_t time, int64_t heads, int64_t width) {
  return {time * heads * width, heads * width, width};
}

template <class T>
void launch_scores(const AttentionParams<T>& p, float* scores, cudaStream_t s, const T* q, const T* k) {
  const dim3 grid(unsigned(p.batch * p.q_heads), tile_count(p.q_len), tile_count(p.kv_len));
  if (empty(grid)) return;
  constexpr auto kernel = scores_kernel<T, false>;
  ALPHA_CUDA_LAUNCH(kernel, grid, Tiles::kThreads, s, bits(q), p.q_strides, bits(k), p.k_strides, p.head_dim, p,
                    scores, nullptr, nullptr, nullptr);
}

// Blocks for the row kernels: one per row (or per rows / per_block), capped (they loop beyond).
unsigned row_blocks(int64_t rows, int64_t per_block) {
  return unsigned(std::min((rows + per_block - 1) / per_block, kMaxRowBlocks));
}

}  // namespace

template <class T>
void attention_materialized_forward(const AttentionForwardArgs<T>& args, float* workspace, Stream stream) {
  const AttentionParams<T>& p = args.params;
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  const int64_t rows = p.batch * p.q_heads * p.q_len;
  if (rows == 0) return;
  launch_scores(p, workspace, s, args.q, args.k);
  constexpr auto softmax = softmax_kernel<T>;
  ALPHA_CUDA_LAUNCH(softmax, row_blocks(rows, 1), kRowThreads, s, p, workspace, args.row_max, args.row_sum);
  const dim3 grid(unsigned(p.batch * p.q_heads), tile_count(p.q_len), tile_count(p.value_dim));
  if (empty(grid)) return;
  constexpr auto weighted_values = rows_product_kernel<T>;
  ALPHA_CUDA_LAUNCH(weighted_values, grid, Tiles::kThreads, s, workspace, bits(args.v), p.v_strides, p.value_dim, p,
                    bits(args.out), int64_t(0));
}

template <class T>
void attention_materialized_backward(const AttentionBackwardArgs<T>& args, float* workspace, Stream stream) {
  const AttentionParams<T>& p = args.params;
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  const int64_t heads = p.batch * p.q_heads, rows = heads * p.q_len;
  float* scores = workspace;
  float* delta = workspace + rows * p.kv_len;
  const AttentionStrides dout_strides = contiguous(p.q_len, p.q_heads, p.value_dim);
  launch_attention_delta(args.dout, args.out, p, delta, s);
  launch_scores(p, scores, s, args.q, args.k);
  // dV from P̃ rebuilt from S, before S is overwritten by dS.
  const dim3 dv_grid(unsigned(p.batch * p.kv_heads), tile_count(p.kv_len), tile_count(p.value_dim));
  if (!empty(dv_grid)) {
    constexpr auto dv = keys_product_kernel<T, true>;
    ALPHA_CUDA_LAUNCH(dv, dv_grid, Tiles::kThreads, s, scores, bits(args.dout), dout_strides, p.value_dim, p,
                      args.row_max, args.row_sum, bits(args.dv), args.dv_row_stride);
  }
  const dim3 ds_grid(unsigned(heads), tile_count(p.q_len), tile_count(p.kv_len));
  if (!empty(ds_grid)) {
    constexpr auto ds = scores_kernel<T, true>;
    ALPHA_CUDA_LAUNCH(ds, ds_grid, Tiles::kThreads, s, bits(args.dout), dout_strides, bits(args.v), p.v_strides,
                      p.value_dim, p, scores, args.row_max, args.row_sum, delta);
  }
  const dim3 dq_grid(unsigned(heads), tile_count(p.q_len), tile_count(p.head_dim));
  if (!empty(dq_grid)) {
    constexpr auto dq = rows_product_kernel<T>;
    ALPHA_CUDA_LAUNCH(dq, dq_grid, Tiles::kThreads, s, scores, bits(args.k), p.k_strides, p.head_dim, p, bits(args.dq),
                      args.dq_row_stride);
  }
  const dim3 dk_grid(unsigned(p.batch * p.kv_heads), tile_count(p.kv_len), tile_count(p.head_dim));
  if (!empty(dk_grid)) {
    constexpr auto dk = keys_product_kernel<T, false>;
    ALPHA_CUDA_LAUNCH(dk, dk_grid, Tiles::kThreads, s, scores, bits(args.q), p.q_strides, p.head_dim, p, nullptr,
                      nullptr, bits(args.dk), args.dk_row_stride);
  }
}

#define ALPHA_INSTANTIATE(T)                                                                              \
  template void attention_materialized_forward<T>(const AttentionForwardArgs<T>&, float*, Stream);       \
  template void attention_materialized_backward<T>(const AttentionBackwardArgs<T>&, float*, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
