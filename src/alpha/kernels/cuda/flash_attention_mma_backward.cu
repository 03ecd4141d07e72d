// Flash attention backward for bf16/f16 on the tensor cores (shared pieces and the precision contract in
// flash_attention_mma.cuh). Deterministic by default: no atomics, every output element summed by one thread
// in a fixed order. After D = rowsum(dO∘O) (attention_common.cuh), two kernels:
//
// key_grads: one block per (key tile of 16·kKeyTiles·kWarps keys, b·Hkv + kv head); each warp owns
// 16·kKeyTiles keys, holds their dK and dV in f32 registers, and walks the query heads of the GQA group,
// then the query tiles that see any of the block's keys (visible_query_range), streamed through a
// two-stage cp.async ring of Q, dO and the rows' statistics. Per query tile it computes, transposed so that
// its keys are the rows:
//   Sᵀ = K·Qᵀ, dP̃ᵀ = V·dOᵀ (tensor cores, f32), then per entry P̃ and dS_raw (entry_gradient),
//   dV += P̃ᵀ·dO and dK += dSᵀ·Q, with P̃ᵀ and dSᵀ rounded to T straight from the registers that computed
//   them (the C → A fragment identity, mma.cuh); dK is scaled once, at the end.
// query_grads: one block per (query tile of 16·kQueryTiles·kWarps queries, b·Hq + h); each warp owns
// 16·kQueryTiles queries and their dQ, walks the visible key tiles (two-stage ring of K and V), recomputes
// S = Q·Kᵀ and dP̃ = dO·Vᵀ and adds dS·K. Recomputing S and dP̃ here (7 tile products in all instead of
// FlashAttention-2's 5 with an atomic dQ) is the price of determinism.
// Non-deterministic (params.deterministic false, opt-in): key_grads alone, FlashAttention-2's way. Each warp
// also stores its dSᵀ (keys × queries, T) in a shared tile; then the block's warps split the query tile's
// dQ share dS·K (K already in shared memory) by columns and add it to an f32 accumulator with float2
// atomics; store_dq_kernel scales and rounds it into dq. 5 tile products, but the atomics' order varies.
#include "alpha/kernels/cuda/flash_attention_mma.cuh"
#include "alpha/kernels/cuda/mma.cuh"

namespace alpha::kernels::cuda {

namespace {

using namespace mma;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

// 16-row tiles per warp in each kernel (more rows per warp reuse each B fragment loaded from shared memory
// more often, at the price of registers), the width of the tiles a block streams (queries for key_grads,
// keys for query_grads), and kMinBlocks, the blocks per SM the register allocation must allow (left free,
// the compiler spends registers on scheduling freedom and fewer blocks fit). Measured on an H100
// (2026-11-22, D 64 and 128 at T 512, 2048 and 8192, both backwards, five variants side by side in one run):
// at D 64, streams of 16 with 4 blocks per SM beat streams of 32 with 3 by 19-32% at T 512 and lose 4-5% at
// T >= 2048 (kept for the training shapes); two key or query tiles per warp and streams of 64 lost 10-45%.
// At D 128 one set {stream 32} beat {2 query tiles, stream 16} by 8-14%; streams of 16 or 64 lost.
template <int kHeadDim>
struct BackwardTraits {
  static constexpr int kKeyTiles = 1, kQueryTiles = 1, kStream = 32, kMinBlocks = kHeadDim <= 64 ? 3 : 1;
};
template <>
struct BackwardTraits<64> {
  static constexpr int kKeyTiles = 1, kQueryTiles = 1, kStream = 16, kMinBlocks = 4;
};

// A kernel's shared memory: two held tiles of kHeld rows (K, V or Q, dO), two stages of two streamed tiles,
// and (key_grads) two stages of the streamed rows' lse2 and D in f32.
template <int kHeadDim, int kHeld, bool kStreamedStats>
struct BackwardShape {
  static constexpr int kRows = kHeld;
  static constexpr int kStream = BackwardTraits<kHeadDim>::kStream;
  using HeldTile = SharedTile<kHeld, kHeadDim>;
  using StreamTile = SharedTile<kStream, kHeadDim>;
  static constexpr size_t kBytes = (2 * HeldTile::kElements + 4 * StreamTile::kElements) * sizeof(uint16_t) +
                                   (kStreamedStats ? 4 * kStream * sizeof(float) : 0);
};
template <int kHeadDim>
using KeyShape = BackwardShape<kHeadDim, 16 * BackwardTraits<kHeadDim>::kKeyTiles * kWarps, true>;
template <int kHeadDim>
using QueryShape = BackwardShape<kHeadDim, 16 * BackwardTraits<kHeadDim>::kQueryTiles * kWarps, false>;

// The non-deterministic key_grads' extra shared tile: the block's dSᵀ of one step (keys × streamed queries).
template <int kHeadDim>
using DsTile = SharedTile<KeyShape<kHeadDim>::kRows, KeyShape<kHeadDim>::kStream>;
template <int kHeadDim, bool kAtomicDq>
constexpr size_t key_grads_bytes() {
  return KeyShape<kHeadDim>::kBytes + (kAtomicDq ? DsTile<kHeadDim>::kElements * sizeof(uint16_t) : 0);
}

// The (row, column) entries of a warp's 16 × 8·kN C fragments: row g + 8·(x / 2), column 8n + 2t + x % 2.
__device__ __forceinline__ int fragment_row(int lane, int x) { return lane / 4 + 8 * (x / 2); }
__device__ __forceinline__ int fragment_col(int lane, int n, int x) { return 8 * n + 2 * (lane % 4) + x % 2; }

// Stores rows [row0, row0 + 16·kM) of a warp's f32 accumulator (16·kM × 8·kO), times `scale`, as T into
// out_row(r) (null for a row past the operand), columns below `width`.
template <class T, int kM, int kO, class RowPointer>
__device__ __forceinline__ void store_rows(const FragC (&acc)[kM][kO], float scale, int width, int lane,
                                           const RowPointer& out_row) {
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint16_t* row = out_row(16 * m + fragment_row(lane, 2 * half));
      if (row == nullptr) continue;
#pragma unroll
      for (int n = 0; n < kO; ++n) {
        const int col = fragment_col(lane, n, 0);
        if (col < width)
          *reinterpret_cast<uint32_t*>(row + col) =
              pack2<T>(acc[m][n].x[2 * half] * scale, acc[m][n].x[2 * half + 1] * scale);
      }
    }
}

// Stores a warp's dSᵀ A fragments (rows: its keys from key_row0, columns: the step's queries) into the
// block's tile: a[m][k] register x holds (row g + 8·(x % 2), columns 16k + 8·(x / 2) + 2t, +1).
template <int kM, int kK, int kRows, int kCols>
__device__ __forceinline__ void store_a_fragments(SharedTile<kRows, kCols> tile, int key_row0, const FragA (&a)[kM][kK],
                                                  int lane) {
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int k = 0; k < kK; ++k)
#pragma unroll
      for (int x = 0; x < 4; ++x)
        *reinterpret_cast<uint32_t*>(
            tile.at(key_row0 + 16 * m + lane / 4 + 8 * (x % 2), 16 * k + 8 * (x / 2) + 2 * (lane % 4))) = a[m][k].x[x];
}

// dq_sum[bh, i0 + r, :] += Σ_j dS[r, j]·K[j, :] for the block's keys (the tile holds dSᵀ, unscaled). The
// query tile's 16-row tiles are split among the warps, then its 8-column tiles, kChunk at a time (fewer live
// accumulators for wide heads); each C pair goes out as one float2 atomic add.
template <class T, int kHeadDim>
__device__ __forceinline__ void add_query_grads(const AttentionParams<T>& p, DsTile<kHeadDim> ds_tile,
                                                SharedTile<KeyShape<kHeadDim>::kRows, kHeadDim> k_tile, float* dq_sum,
                                                int64_t bh, int64_t i0, int warp, int lane) {
  constexpr int kKeys = KeyShape<kHeadDim>::kRows, kRowTiles = KeyShape<kHeadDim>::kStream / 16;
  constexpr int kWarpsPerRowTile = kWarps / kRowTiles, kColTiles = kHeadDim / 8 / kWarpsPerRowTile;
  constexpr int kChunk = kColTiles % 4 == 0 ? 4 : 2;
  static_assert(kWarps % kRowTiles == 0 && (kHeadDim / 8) % kWarpsPerRowTile == 0 && kColTiles % 2 == 0,
                "the dQ tile splits evenly into warps and pairs of 8-column tiles");
  const int row0 = 16 * (warp / kWarpsPerRowTile), col0 = 8 * kColTiles * (warp % kWarpsPerRowTile);
  FragA ds[1][kKeys / 16];
#pragma unroll
  for (int k = 0; k < kKeys / 16; ++k) load_a_transposed(ds[0][k], ds_tile, row0, 16 * k, lane);
  const int d_qk = int(p.head_dim);
#pragma unroll
  for (int c = 0; c < kColTiles; c += kChunk) {
    FragC part[1][kChunk];
    zero(part);
    warp_product_ab<T, 1, kChunk, kKeys>(part, ds, k_tile, 0, col0 + 8 * c, lane);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t i = i0 + row0 + fragment_row(lane, 2 * half);
      if (i >= p.q_len) continue;
      float* row = dq_sum + (bh * p.q_len + i) * d_qk;
#pragma unroll
      for (int n = 0; n < kChunk; ++n) {
        const int col = col0 + fragment_col(lane, c + n, 0);
        if (col < d_qk)
          atomicAdd(reinterpret_cast<float2*>(row + col),
                    make_float2(part[0][n].x[2 * half], part[0][n].x[2 * half + 1]));
      }
    }
  }
}

// kAtomicDq: also adds the block's dQ share into dq_sum (the non-deterministic backward); else dq_sum is
// unused.
template <class T, int kHeadDim, bool kAtomicDq>
__global__ void __launch_bounds__(kThreads, BackwardTraits<kHeadDim>::kMinBlocks)
    key_grads_kernel(AttentionBackwardArgs<T> a, const float* delta, float* dq_sum) {
  using Shape = KeyShape<kHeadDim>;
  constexpr int kM = BackwardTraits<kHeadDim>::kKeyTiles, kQ = Shape::kStream, kN = kQ / 8, kO = kHeadDim / 8;
  extern __shared__ __align__(16) uint16_t shared[];
  const typename Shape::HeldTile k_tile{shared}, v_tile{shared + Shape::HeldTile::kElements};
  uint16_t* streamed = shared + 2 * Shape::HeldTile::kElements;
  // Stage s of the ring: q_tiles.next(s), do_tiles.next(s), lse2_rows + s·kQ, delta_rows + s·kQ.
  const typename Shape::StreamTile q_tiles{streamed}, do_tiles = q_tiles.next(2);
  float* lse2_rows = reinterpret_cast<float*>(streamed + 4 * Shape::StreamTile::kElements);
  float* delta_rows = lse2_rows + 2 * kQ;
  const DsTile<kHeadDim> ds_tile{reinterpret_cast<uint16_t*>(delta_rows + 2 * kQ)};  // kAtomicDq only

  const AttentionParams<T>& p = a.params;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const auto [b, head, kv_head, group] = kv_heads_of_row(p, blockIdx.y);
  const int64_t j0 = int64_t(blockIdx.x) * Shape::kRows, j_end = tile_last_row(j0, Shape::kRows, p.kv_len) + 1;
  const int d_qk = int(p.head_dim), d_v = int(p.value_dim);
  const float scale_log2 = p.scale * kLog2e;
  const Softcap softcap = softcap_of(p);
  load_tile_async<kThreads>(k_tile, head_rows(a.k, p.k_strides, b, kv_head), p.k_strides.time, j0, p.kv_len, d_qk);
  load_tile_async<kThreads>(v_tile, head_rows(a.v, p.v_strides, b, kv_head), p.v_strides.time, j0, p.kv_len, d_v);

  // Steps: (query head of the group, query tile of the rows that see the block's keys), head-major; a
  // cursor moves through them by increments (no 64-bit division in the loop).
  const QueryRange queries = visible_query_range(p, j0, j_end);
  const int64_t tiles_per_head = (queries.end - queries.begin + kQ - 1) / kQ;
  const int64_t steps = tiles_per_head * group;
  struct Step {
    int64_t h, i0;
  };
  auto following = [&](Step s) {
    s.i0 += kQ;
    if (s.i0 >= queries.end) s.i0 = queries.begin, ++s.h;
    return s;
  };
  auto load_queries = [&](Step s, int stage) {
    load_tile_async<kThreads>(q_tiles.next(stage), head_rows(a.q, p.q_strides, b, s.h), p.q_strides.time, s.i0, p.q_len,
                              d_qk);
    load_tile_async<kThreads>(do_tiles.next(stage), bits(a.dout) + (b * p.q_len * p.q_heads + s.h) * p.value_dim,
                              p.q_heads * p.value_dim, s.i0, p.q_len, d_v);
    for (int r = threadIdx.x; r < kQ; r += kThreads) {
      const int64_t i = s.i0 + r, row = (b * p.q_heads + s.h) * p.q_len + i;
      const bool inside = i < p.q_len;
      lse2_rows[stage * kQ + r] = inside ? log2_normaliser(a.row_max[row], a.row_sum[row]) : INFINITY;
      delta_rows[stage * kQ + r] = inside ? delta[row] : 0.0f;
    }
  };
  Step current{kv_head * group, queries.begin};
  if (steps > 0) load_queries(current, 0);
  copy_async_commit();

  FragC dk[kM][kO], dv[kM][kO];
  zero(dk);
  zero(dv);
  const int key_row0 = warp * 16 * kM;
  int stage = 0;
  for (int64_t step = 0; step < steps; ++step, stage ^= 1, current = following(current)) {
    if (step + 1 < steps) load_queries(following(current), stage ^ 1);
    copy_async_commit();
    copy_async_wait<1>();
    __syncthreads();  // this stage's q, dO, statistics (and the first time k, v) are in place

    const int64_t bh = b * p.q_heads + current.h, i0 = current.i0;
    FragC st[kM][kN], dpt[kM][kN];  // Sᵀ and dP̃ᵀ: rows this warp's keys, columns the tile's queries
    zero(st);
    zero(dpt);
    warp_product_abt<T, kM, kN, kHeadDim>(st, k_tile, key_row0, q_tiles.next(stage), 0, lane);
    warp_product_abt<T, kM, kN, kHeadDim>(dpt, v_tile, key_row0, do_tiles.next(stage), 0, lane);

    const int64_t last_row = tile_last_row(i0, kQ, p.q_len);
    // Per entry: P̃ and dS_raw; blocks wholly visible to the tile's queries skip the mask (the variant
    // depends on positions only).
    auto entry_step = [&]<bool kMasked>() {
#pragma unroll
      for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int col_bit = 0; col_bit < 2; ++col_bit) {
          const int col = fragment_col(lane, n, col_bit);
          const float lse2 = lse2_rows[stage * kQ + col], row_delta = delta_rows[stage * kQ + col];
          const int64_t i = i0 + col;
#pragma unroll
          for (int m = 0; m < kM; ++m)
#pragma unroll
            for (int x = col_bit; x < 4; x += 2) {
              const int64_t j = j0 + key_row0 + 16 * m + fragment_row(lane, x);
              EntryGrad e{0.0f, 0.0f};
              if (!kMasked || mma_visible(p, i, j)) {
                const float z = p.dropout_p > 0 && i < p.q_len ? attention_dropout_factor(p, bh, i, j) : 1.0f;
                e = entry_gradient(p, softcap, scale_log2, st[m][n].x[x], dpt[m][n].x[x], lse2, row_delta, z);
              }
              st[m][n].x[x] = e.prob_dropped;
              dpt[m][n].x[x] = e.dscore;
            }
        }
    };
    if (j0 >= visible_key_range(p, last_row).begin && j0 + Shape::kRows <= visible_key_range(p, i0).end)
      entry_step.template operator()<false>();
    else
      entry_step.template operator()<true>();

    FragA probs[kM][kN / 2], dscores[kM][kN / 2];
    to_a_fragments<T>(probs, st);
    to_a_fragments<T>(dscores, dpt);
    if constexpr (kAtomicDq) store_a_fragments(ds_tile, key_row0, dscores, lane);
    warp_product_ab<T, kM, kO, kQ>(dv, probs, do_tiles.next(stage), 0, 0, lane);
    warp_product_ab<T, kM, kO, kQ>(dk, dscores, q_tiles.next(stage), 0, 0, lane);
    if constexpr (kAtomicDq) {
      __syncthreads();  // the block's dSᵀ tile is whole
      add_query_grads<T, kHeadDim>(p, ds_tile, k_tile, dq_sum, bh, i0, warp, lane);
    }
    __syncthreads();  // every warp is done with this stage (and the dSᵀ tile) before the next refills it
  }
  copy_async_wait<0>();

  auto key_row = [&](uint16_t* out, int64_t width, int r) -> uint16_t* {
    const int64_t j = j0 + key_row0 + r;
    return j < p.kv_len ? out + ((b * p.kv_len + j) * p.kv_heads + kv_head) * width : nullptr;
  };
  store_rows<T>(dk, p.scale, d_qk, lane, [&](int r) { return key_row(bits(a.dk), p.head_dim, r); });
  store_rows<T>(dv, 1.0f, d_v, lane, [&](int r) { return key_row(bits(a.dv), p.value_dim, r); });
}

template <class T, int kHeadDim>
__global__ void __launch_bounds__(kThreads, BackwardTraits<kHeadDim>::kMinBlocks)
    query_grads_kernel(AttentionBackwardArgs<T> a, const float* delta) {
  using Shape = QueryShape<kHeadDim>;
  constexpr int kM = BackwardTraits<kHeadDim>::kQueryTiles, kK = Shape::kStream, kN = kK / 8, kO = kHeadDim / 8;
  extern __shared__ __align__(16) uint16_t shared[];
  const typename Shape::HeldTile q_tile{shared}, do_tile{shared + Shape::HeldTile::kElements};
  uint16_t* streamed = shared + 2 * Shape::HeldTile::kElements;
  // Stage s of the ring: k_tiles.next(s), v_tiles.next(s).
  const typename Shape::StreamTile k_tiles{streamed}, v_tiles = k_tiles.next(2);

  const AttentionParams<T>& p = a.params;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const auto [bh, b, h, kv_head, i0, key_begin, key_end, whole_begin, whole_end] = query_tile(p, Shape::kRows);
  const int d_qk = int(p.head_dim), d_v = int(p.value_dim);
  const float scale_log2 = p.scale * kLog2e;
  const Softcap softcap = softcap_of(p);
  const uint16_t* k_rows = head_rows(a.k, p.k_strides, b, kv_head);
  const uint16_t* v_rows = head_rows(a.v, p.v_strides, b, kv_head);
  auto load_keys = [&](int64_t j0, int stage) {
    load_tile_async<kThreads>(k_tiles.next(stage), k_rows, p.k_strides.time, j0, p.kv_len, d_qk);
    load_tile_async<kThreads>(v_tiles.next(stage), v_rows, p.v_strides.time, j0, p.kv_len, d_v);
  };
  load_tile_async<kThreads>(q_tile, head_rows(a.q, p.q_strides, b, h), p.q_strides.time, i0, p.q_len, d_qk);
  load_tile_async<kThreads>(do_tile, bits(a.dout) + (b * p.q_len * p.q_heads + h) * p.value_dim,
                            p.q_heads * p.value_dim, i0, p.q_len, d_v);
  if (key_begin < key_end) load_keys(key_begin, 0);
  copy_async_commit();

  // This thread's rows (fragment rows g and g + 8 of each of its warp's 16-row tiles) and their statistics.
  const int row0 = warp * 16 * kM;
  float lse2[kM][2], row_delta[kM][2];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t i = i0 + row0 + 16 * m + fragment_row(lane, 2 * half), row = bh * p.q_len + i;
      const bool inside = i < p.q_len;
      lse2[m][half] = inside ? log2_normaliser(a.row_max[row], a.row_sum[row]) : INFINITY;
      row_delta[m][half] = inside ? delta[row] : 0.0f;
    }

  FragC dq[kM][kO];
  zero(dq);
  int stage = 0;
  for (int64_t j0 = key_begin; j0 < key_end; j0 += kK, stage ^= 1) {
    if (j0 + kK < key_end) load_keys(j0 + kK, stage ^ 1);
    copy_async_commit();
    copy_async_wait<1>();
    __syncthreads();  // this stage's k, v (and the first time q, dO) are in shared memory

    FragC s[kM][kN], dp[kM][kN];
    zero(s);
    zero(dp);
    warp_product_abt<T, kM, kN, kHeadDim>(s, q_tile, row0, k_tiles.next(stage), 0, lane);
    warp_product_abt<T, kM, kN, kHeadDim>(dp, do_tile, row0, v_tiles.next(stage), 0, lane);

    auto entry_step = [&]<bool kMasked>() {  // as key_grads'
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            const int half = x / 2;
            const int64_t i = i0 + row0 + 16 * m + fragment_row(lane, x), j = j0 + fragment_col(lane, n, x);
            float dscore = 0.0f;
            if (!kMasked || mma_visible(p, i, j)) {
              const float z = p.dropout_p > 0 && i < p.q_len ? attention_dropout_factor(p, bh, i, j) : 1.0f;
              dscore = entry_gradient(p, softcap, scale_log2, s[m][n].x[x], dp[m][n].x[x], lse2[m][half],
                                      row_delta[m][half], z)
                           .dscore;
            }
            s[m][n].x[x] = dscore;
          }
    };
    if (j0 >= whole_begin && j0 + kK <= whole_end)
      entry_step.template operator()<false>();
    else
      entry_step.template operator()<true>();

    FragA dscores[kM][kN / 2];
    to_a_fragments<T>(dscores, s);
    warp_product_ab<T, kM, kO, kK>(dq, dscores, k_tiles.next(stage), 0, 0, lane);
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }
  copy_async_wait<0>();

  store_rows<T>(dq, p.scale, d_qk, lane, [&](int r) -> uint16_t* {
    const int64_t i = i0 + row0 + r;
    return i < p.q_len ? bits(a.dq) + ((b * p.q_len + i) * p.q_heads + h) * p.head_dim : nullptr;
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
    *reinterpret_cast<uint32_t*>(bits(a.dq) + ((b * p.q_len + i) * p.q_heads + h) * p.head_dim + d) =
        pack2<T>(sum.x * p.scale, sum.y * p.scale);
  }
}

template <class T, int kHeadDim>
void backward(const AttentionBackwardArgs<T>& args, float* workspace, cudaStream_t stream) {
  using Keys = KeyShape<kHeadDim>;
  using Queries = QueryShape<kHeadDim>;
  const AttentionParams<T>& p = args.params;
  const float* delta = workspace;
  const dim3 key_grid(tile_count(p.kv_len, Keys::kRows),
                      heads_extent(p.batch * p.kv_heads, "flash_attention_backward"));
  if (!p.deterministic) {
    const int64_t rows = p.batch * p.q_heads * p.q_len;
    float* dq_sum = workspace + rows;
    ALPHA_CUDA_CHECK(cudaMemsetAsync(dq_sum, 0, size_t(rows * p.head_dim) * sizeof(float), stream));
    launch_with_shared(key_grads_kernel<T, kHeadDim, true>, "flash_attention_backward (dk, dv, atomic dq)", key_grid,
                       kThreads, key_grads_bytes<kHeadDim, true>(), stream, args, delta, dq_sum);
    const int64_t pairs = rows * p.head_dim / 2;
    const unsigned blocks = unsigned(std::min<int64_t>((pairs + 255) / 256, 65535));
    ALPHA_CUDA_LAUNCH(store_dq_kernel<T>, blocks, 256, stream, args, dq_sum);
    return;
  }
  launch_with_shared(key_grads_kernel<T, kHeadDim, false>, "flash_attention_backward (dk, dv)", key_grid, kThreads,
                     key_grads_bytes<kHeadDim, false>(), stream, args, delta, static_cast<float*>(nullptr));
  const dim3 query_grid(tile_count(p.q_len, Queries::kRows),
                        heads_extent(p.batch * p.q_heads, "flash_attention_backward"));
  launch_with_shared(query_grads_kernel<T, kHeadDim>, "flash_attention_backward (dq)", query_grid, kThreads,
                     Queries::kBytes, stream, args, delta);
}

}  // namespace

template <class T>
void flash_attention_mma_backward(const AttentionBackwardArgs<T>& args, float* workspace, cudaStream_t stream) {
  constexpr const char* kOp = "flash_attention_backward";
  const AttentionParams<T>& p = args.params;
  const int bucket = mma_head_dim_bucket(p, kOp);
  require_mma_rows(args.q, p.q_strides, kOp, "q");
  require_mma_rows(args.k, p.k_strides, kOp, "k");
  require_mma_rows(args.v, p.v_strides, kOp, "v");
  switch (bucket) {
    case 32: return backward<T, 32>(args, workspace, stream);
    case 64: return backward<T, 64>(args, workspace, stream);
    case 96: return backward<T, 96>(args, workspace, stream);
    case 128: return backward<T, 128>(args, workspace, stream);
    default: return backward<T, 256>(args, workspace, stream);
  }
}

template void flash_attention_mma_backward<bf16>(const AttentionBackwardArgs<bf16>&, float*, cudaStream_t);
template void flash_attention_mma_backward<f16>(const AttentionBackwardArgs<f16>&, float*, cudaStream_t);

}  // namespace alpha::kernels::cuda
