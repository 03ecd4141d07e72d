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
// atomics; launch_store_dq scales and rounds it into dq. 5 tile products, but the atomics' order varies.
// On Hopper, the deterministic backward of bucket 128 runs the same two kernels on wgmma
// instead (flash_attention_wgmma_backward.cu).
#include "alpha/kernels/cuda/flash_attention_mma_backward.cuh"

namespace alpha::kernels::cuda {

namespace {

using namespace mma;
using namespace mma_backward;

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

  const QueryWalk walk = query_walk(p, j0, j_end, kQ, group);
  auto load_queries = [&](QueryStep s, int stage) {
    load_tile_async<kThreads>(q_tiles.next(stage), head_rows(a.q, p.q_strides, b, s.h), p.q_strides.time, s.i0, p.q_len,
                              d_qk);
    load_tile_async<kThreads>(do_tiles.next(stage), bits(a.dout) + (b * p.q_len * p.q_heads + s.h) * p.value_dim,
                              p.q_heads * p.value_dim, s.i0, p.q_len, d_v);
    load_query_stats(a, delta, b, s, kQ, lse2_rows + stage * kQ, delta_rows + stage * kQ, int(threadIdx.x),
                     int(blockDim.x));
  };
  QueryStep current{int(kv_head * group), walk.begin};
  if (walk.steps > 0) load_queries(current, 0);
  copy_async_commit();

  FragC dk[kM][kO], dv[kM][kO];
  zero(dk);
  zero(dv);
  const int key_row0 = warp * 16 * kM;
  int stage = 0;
  for (int64_t step = 0; step < walk.steps; ++step, stage ^= 1, current = walk.following(current)) {
    if (step + 1 < walk.steps) load_queries(walk.following(current), stage ^ 1);
    copy_async_commit();
    copy_async_wait<1>();
    __syncthreads();  // this stage's q, dO, statistics (and the first time k, v) are in place

    const int64_t bh = b * p.q_heads + current.h, i0 = current.i0;
    FragC st[kM][kN], dpt[kM][kN];  // Sᵀ and dP̃ᵀ: rows this warp's keys, columns the tile's queries
    zero(st);
    zero(dpt);
    warp_product_abt<T, kM, kN, kHeadDim>(st, k_tile, key_row0, q_tiles.next(stage), 0, lane);
    warp_product_abt<T, kM, kN, kHeadDim>(dpt, v_tile, key_row0, do_tiles.next(stage), 0, lane);

    key_entry_grads<true>(p, softcap, scale_log2, bh, i0, j0, Shape::kRows, j0 + key_row0, lane, st, dpt,
                          lse2_rows + stage * kQ, delta_rows + stage * kQ);

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

  store_key_grads(a, b, kv_head, j0 + key_row0, lane, dk, dv);
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

  // This thread's rows' statistics.
  const int row0 = warp * 16 * kM;
  float lse2[kM][2], row_delta[kM][2];
  query_row_stats(a, delta, bh, i0 + row0, lane, lse2, row_delta);

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

    query_entry_grads<true>(p, softcap, scale_log2, bh, i0 + row0, j0, whole_begin, whole_end, lane, s, dp, lse2,
                            row_delta);

    FragA dscores[kM][kN / 2];
    to_a_fragments<T>(dscores, s);
    warp_product_ab<T, kM, kO, kK>(dq, dscores, k_tiles.next(stage), 0, 0, lane);
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }
  copy_async_wait<0>();

  store_query_grads(a, b, h, i0 + row0, lane, dq);
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
    float* dq_sum = workspace + flash_dq_accumulator_offset(rows);
    ALPHA_CUDA_CHECK(cudaMemsetAsync(dq_sum, 0, size_t(rows * p.head_dim) * sizeof(float), stream));
    launch_with_shared(key_grads_kernel<T, kHeadDim, true>, "flash_attention_backward (dk, dv, atomic dq)", key_grid,
                       kThreads, key_grads_bytes<kHeadDim, true>(), stream, args, delta, dq_sum);
    launch_store_dq(args, dq_sum, stream);
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
  if (wgmma_kernels_run(bucket)) return flash_attention_wgmma_backward(args, workspace, stream);
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
