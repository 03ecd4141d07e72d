// Flash attention backward for bf16/f16 on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a): the
// deterministic backward of the mma.sync kernels (flash_attention_mma_backward.cu; the walks, statistics,
// entry steps and stores they share are in flash_attention_mma_backward.cuh) with every tile product on
// wgmma (wgmma.cuh). Head-dimension buckets 64 and 128, every mask (the numbers are above
// flash_attention_wgmma_backward).
//
// tma_key_grads: one block per (key block of 64·kConsumers keys, b·Hkv + kv head); consumer warpgroup c owns keys
// [64c, 64c + 64) and holds their dK and dV in f32 registers. K and V stay in shared memory; the steps'
// Q, dO and row statistics (each query head of the GQA group, each query tile that sees the block) stream
// through a TMA ring, in the 128-byte swizzled layout wgmma reads. Per step t:
//   issue Sᵀ_t = K·Qᵀ and dP̃ᵀ_t = V·dOᵀ (both operands from shared memory, K-major), then behind them
//   dV += P̃ᵀ_{t−1}·dO_{t−1} and dK += dSᵀ_{t−1}·Q_{t−1} (P̃ᵀ and dSᵀ from the registers that computed them,
//   by the C → A fragment identity; dO and Q read transposed, MN-major, so nothing is copied into another
//   layout); wait for Sᵀ_t and dP̃ᵀ_t only and run the entry step (P̃, dS_raw) while the tensor cores work
//   on step t − 1's products, as the forward overlaps its softmax with P̃·V (bucket 64; bucket 128 issues a
//   step's dK and dV products right after its own entry step: kOverlap). Warp-specialised: producer warp 0 copies
//   K and V once and each step's Q and dO with TMA, producer warp 1 writes each step's statistics, the consumer
//   warpgroups only multiply and run the entry step, and hand a stage back once they no longer read it. The
//   traits below say why each bucket has its configuration.
// query_grads: warp-specialised as the forward (flash_attention_tma_forward.cuh): one block per (query tile
//   of 64·kConsumers rows, b·Hq + h); a producer warpgroup copies Q and dO once and streams K_t and V_t
//   through a TMA ring (tma.cuh); consumer warpgroup c owns rows [64c, 64c + 64) and per key tile t issues
//   S_t = Q·Kᵀ and dP̃_t = dO·Vᵀ, behind them dQ += dS_{t−1}·K_{t−1} (K read transposed), hands V_t back
//   once dP̃_t has landed, runs the entry step of t meanwhile, and hands K_{t−1} back after its dQ product.
// Like the mma kernels, 7 tile products per (query tile, key tile) instead of FlashAttention-2's 5: dQ is
// recomputed rather than added with atomics, the price of a deterministic result.
// Non-deterministic (params.deterministic false; adds_query_grads says where): the two-consumer TMA dK/dV kernel
// alone, FlashAttention-3's way, 5 products. Each consumer also stores its dSᵀ rows of the step in a shared tile,
// forms its part of the step's dQ = dS·K (dSᵀ and K both read MN-major: at D 64 its 64 keys' share of every
// column, at D 128 its 64-column block over both consumers' keys), stores it as f32 in a shared tile, and hands the
// tile to its writer warp (producer warp 2 + c), which has the copy engine add it into an f32 accumulator in L2
// (cp.reduce.async.bulk.tensor, tma.cuh): the consumers issue no atomics and wait neither for each other's stores nor
// for the copy engine's reads (dq_handshake); launch_store_dq scales and rounds the accumulator into dq. The additions'
// order varies from run to run. An earlier try (H100, 2026-11-26) added dQ with 16 float2 atomics per thread per step
// from the registers of a cp.async dK/dV kernel (since replaced): 10.90 ms at T 8192 against 10.36 ms for the two
// deterministic kernels, its 255 registers spilling 152 bytes.
#include "alpha/kernels/cuda/flash_attention_mma_backward.cuh"
#include "alpha/kernels/cuda/tma.cuh"
#include "alpha/kernels/cuda/wgmma.cuh"

namespace alpha::kernels::cuda {

namespace wgmma_backward {

using namespace mma_backward;

// The dQ kernel's configuration: head-dimension bucket, consumer warpgroups (64 rows each), keys per
// streamed tile, stages of the ring, registers of a consumer and of the producer, blocks per SM.
template <int kHeadDimBucket, int kConsumerWarpgroups, int kKeysPerTile, int kRingStages, int kConsumerRegs,
          int kProducerRegs, int kBlocksPerSm>
struct TmaQueryGradsConfig : tma::WarpSpecialised<kConsumerWarpgroups, kConsumerRegs, kProducerRegs, kBlocksPerSm> {
  static constexpr int kHeadDim = kHeadDimBucket, kStream = kKeysPerTile, kStages = kRingStages;
};

// The TMA dK/dV kernel's configuration: head-dimension bucket, consumer warpgroups (64 held keys each),
// query rows per streamed step, stages of the ring, registers of a consumer and of the producer, blocks per SM,
// and whether a step's dK and dV products run behind the next step's Sᵀ and dP̃ᵀ (kOverlap; otherwise right
// after the step's own entry step, which holds fewer registers: no step's P̃ᵀ and dSᵀ live across another's).
template <int kHeadDimBucket, int kConsumerWarpgroups, int kQueriesPerStep, int kRingStages, int kConsumerRegs,
          int kProducerRegs, int kBlocksPerSm, bool kOverlap = true>
struct TmaKeyGradsConfig : tma::WarpSpecialised<kConsumerWarpgroups, kConsumerRegs, kProducerRegs, kBlocksPerSm> {
  static constexpr int kHeadDim = kHeadDimBucket, kStream = kQueriesPerStep, kStages = kRingStages;
  static constexpr bool kOverlapSteps = kOverlap;
};

// Per bucket, the dK/dV kernel's (Keys) and the dQ kernel's (Queries). The dQ kernels' configurations were
// chosen on an H100 (2026-11-26, B·T 16384, H 2048/D, three per bucket side by side in one call, ms of the
// whole deterministic backward); no spills in either.
// D 128: the dK/dV kernel on TMA with two consumers at 240 registers (dK and dV alone hold 128 registers a thread),
// each step's dK and dV products right after its entry step (kOverlap false; behind the next step's products ptxas
// serialises the wgmma for want of registers, C7512), two stages; the added-dQ kernel's configuration without its dQ
// part (40 bytes of spills, 656 with dropout). Against the cp.async dK/dV kernel it replaced, whose threads all issued
// the copies and met at a barrier per step (H200, 2026-11-30, bench/flash_attention.py --quick, two runs each, TFLOP/s
// of the deterministic backward): +9.8% / +6.7% at T 512, +14.5% / +11.4% at T 2048, +10.3% / +8.8% at T 8192, without
// a mask / causal. (On 2026-11-26 the TMA kernel, then with the overlapped schedule and its wgmma serialised, ran 2%
// slower than the cp.async one.) The dQ kernel: two consumers, three stages: 0.699 / 1.769 / 6.510 non-causal and
// 0.574 / 1.152 / 3.414 causal at T 512 / 2048 / 8192 (the cp.async kernel it replaced, in the same day's table: 0.757
// / 2.050 / 7.435 and 0.608 / 1.280 / 4.015); one consumer at two blocks per SM 2-14% slower, two stages 10-22%
// slower.
template <int kHeadDim>
struct WgmmaBackwardTraits;
template <>
struct WgmmaBackwardTraits<128> {
  using Keys = TmaKeyGradsConfig<128, 2, 64, 2, 240, 24, 1, false>;
  using Queries = TmaQueryGradsConfig<128, 2, 64, 3, 240, 24, 1>;
  // The added-dQ kernel, Keys with kAtomicDq (2026-11-30, H200, bench/flash_attention.py; TFLOP/s at T 8192 non-causal
  // / causal): two consumers, a 64-column block of dQ each; each step's dK and dV products right after its entry step
  // (kOverlap false: 128 bytes of spills, 228 with dropout, after the writer warps; 84 and 164 since the 32-bit query
  // walk; reading the lane anew in each step's dQ part took them to 32 but ran 5-7% slower, 2026-11-30): 477-481 /
  // 426-430 against the deterministic kernels' 422-424 / 394-399 in the same runs. Behind the next step's products
  // instead (kOverlap true) ptxas serialises the wgmma for want of registers (C7512; 300 bytes of spills): 345 / 320.
  // Two stages: 230,440 bytes of shared memory; three, with one dQ tile per consumer to make room, measured the same
  // (473 / 427). Where the deterministic kernels are the faster since their dK/dV kernel is on TMA too (det/atomic,
  // time, H200, 2026-11-30, bench/flash_attention.py at every T): without a mask up to Tk 2048 (0.92 / 0.95 / 0.91 at
  // Tk 512 / 1024 / 2048, 1.04-1.08 from 4096), causal up to Tk 4096 (1.00 / 1.00 / 0.97 / 0.94 at 512 to
  // 4096, 1.03-1.08 from 8192).
  template <class T>
  static bool keeps_deterministic(const AttentionParams<T>& p) {
    return p.kv_len <= (p.causal ? 4096 : 2048);
  }
};
// D 64. The dQ kernel: one consumer, three stages, two blocks per SM (232 registers): 0.943 / 2.598 / 9.355
// / 18.54 non-causal and 0.691 / 1.605 / 4.920 / 9.239 causal at T 512 / 2048 / 8192 / 16384 (the cp.async
// kernel it replaced, one warpgroup at three blocks per SM: 0.979 / 2.822 / 10.23 / 20.10 and 0.694 / 1.669 /
// 5.459 / 10.26); two consumers at one block 0.5-8% slower; one consumer at three blocks (136 registers,
// spilling, its wgmma serialised) 3-7% slower.
// The dK/dV kernel, on TMA: two consumers; one consumer at two blocks per SM, the same warps in independent blocks,
// where the blocks are short and uneven (causal, Tk up to 2048), the rule the cp.async kernel's configurations had
// shown (2026-11-26: 0.694 / 1.669 ms causal at T 512 / 2048 against 0.870 / 1.833 for two warpgroups). The whole
// backward with it, against the cp.async dK/dV kernel in the same call (H100, 2026-11-26, ms, T 512 / 2048 / 8192 /
// 16384): 0.910 / 2.337 / 8.175 / 15.93 non-causal and 0.624 / 1.296 / 4.398 / 8.212 causal, against 0.937 / 2.597
// / 9.416 / 18.67 and 0.687 / 1.587 / 4.998 / 9.457; the seed shape (B 20, H 8, T 512, D 48, causal) 0.123 against
// 0.133. Registers (2026-11-30): the producer warpgroup's statistics and copy loops spilled 32 instructions at 24
// registers, so it has 40 beside two consumers at 232 (64 -> 0 bytes of spills without dropout, with the epilogue's row
// read anew, 172 -> 196 with; the deterministic backward 2.6-4.1% faster without a mask and 0.9-3.7% causal from T
// 2048, the added-dQ one 0-1.3%, H200, bench/flash_attention.py --quick, two runs each side) and 32 beside one consumer
// at 224 (68 -> 20 and 352 -> 388 bytes, the rest in the producer; the same speed). The D 128 added-dQ kernel measured
// 4-5% slower with 232 / 40 and keeps 240 / 24.
template <>
struct WgmmaBackwardTraits<64> {
  using Keys = TmaKeyGradsConfig<64, 2, 64, 3, 232, 40, 1>;
  using ShortCausalKeys = TmaKeyGradsConfig<64, 1, 64, 3, 224, 32, 2>;
  using Queries = TmaQueryGradsConfig<64, 1, 64, 3, 232, 24, 2>;
  template <class T>
  static bool short_causal(const AttentionParams<T>& p) {
    return p.causal && p.kv_len <= 2048;
  }
  // The added-dQ kernel has two consumers; the short causal shapes keep the one-consumer deterministic kernels.
  template <class T>
  static bool keeps_deterministic(const AttentionParams<T>& p) {
    return short_causal(p);
  }
};

// Whether this backward adds dQ in the dK/dV kernel: params.deterministic false, bucket 64 (whose dK/dV kernel
// is on TMA; D is a multiple of 8, so the f32 accumulator's rows are 16-byte aligned, as its tensor map needs),
// outside the short causal shapes. There (one consumer at two blocks per SM) it measured slower than the
// deterministic kernels: 0.92× at T 512 and 0.95-0.97× at T 2048 causal, D 64, and 0.98× at the seed shape,
// against 1.03-1.09× without a mask and 1.06-1.08× causal at T 8192 (H200, 2026-11-29, three runs of
// bench/flash_attention.py --quick). Elsewhere the deterministic kernels run. Tried the same day and not kept:
// the dQ product issued with the next step's dK and dV products, to run during its entry step (224 bytes of
// spills; 1.00-1.01× at T 8192), and the two consumers' shares summed in the block before one addition each
// of half the tile (a barrier of both consumers per step; 0.91-0.94×). Without the copy engine's additions
// at all (timing only) the kernel was 1.12× at T 8192: the additions in L2 are not what limits it.
// Bucket 128 (since 2026-11-30) likewise from Tk 2048 without a mask and 4096 causal (WgmmaBackwardTraits<128>), its
// dQ split by columns between the consumers (TmaKeyGradsShape). The additions issued by writer warps instead of a
// consumer thread after a barrier of its warpgroup (2026-11-30, H200, two runs each side of bench/flash_attention.py
// --quick, TFLOP/s): D 128 +2.0-2.1% at T 8192, +3.0-4.0% at T 2048, +2.2% at T 512 without a mask; D 64 +1.2-1.5% from
// T 2048, -1.9% at T 512 without a mask.
template <class T>
bool adds_query_grads(const AttentionParams<T>& p) {
  if (p.deterministic) return false;
  return mma_head_dim_bucket(p, "flash_attention_backward") == 64 ? !WgmmaBackwardTraits<64>::keeps_deterministic(p)
                                                                  : !WgmmaBackwardTraits<128>::keeps_deterministic(p);
}

// c = A·Bᵀ over the bucket's 16-deep k-steps, A the warpgroup's 64 rows of `a` from row a_row0, B the kN·8
// rows of `b` (both K-major): issued and committed, not waited for.
template <class T, int kN, int kRowsA, int kRowsB, int kHeadDim>
__device__ __forceinline__ void issue_abt(FragC (&c)[kN], wgmma::SwizzledTile<kRowsA, kHeadDim> a, int a_row0,
                                          wgmma::SwizzledTile<kRowsB, kHeadDim> b) {
#pragma unroll
  for (int k = 0; k < kHeadDim / 16; ++k) wgmma::product_ss<T, 8 * kN>(c, a.k_major(a_row0, k), b.k_major(0, k), k > 0);
}

// c += A·B over kK/16 k-steps, A from registers (this warp's 16 rows), B the kK rows of `b` read MN-major.
template <class T, int kK, int kHeadDim>
__device__ __forceinline__ void issue_ab(FragC (&c)[kHeadDim / 8], const FragA (&a)[kK / 16],
                                         wgmma::SwizzledTile<kK, kHeadDim> b) {
#pragma unroll
  for (int k = 0; k < kK / 16; ++k) wgmma::product_rs<T, kHeadDim>(c, a[k], b.mn_major(k));
}

template <class Config>
struct TmaQueryGradsShape {
  static constexpr int kHeadDim = Config::kHeadDim, kRows = 64 * Config::kConsumers, kStages = Config::kStages;
  using HeldTile = wgmma::SwizzledTile<kRows, kHeadDim>;
  using StreamTile = wgmma::SwizzledTile<Config::kStream, kHeadDim>;
  static constexpr size_t kTileBytes = 2 * size_t(HeldTile::kBytes) + 2 * kStages * size_t(StreamTile::kBytes);
  // After the tiles: the held tiles' barrier, then full and empty barriers of K and of V per stage.
  static constexpr size_t kBytes = kTileBytes + (1 + 4 * kStages) * sizeof(uint64_t);
};

// The TMA kernels' parameter: the arguments, D = rowsum(dO∘O), the tensor maps of q, k, v and dO, and (the
// atomic-dQ dK/dV kernel only) of the f32 dQ accumulator [B·Hq, Tq, D].
template <class T>
struct TmaBackwardArgs {
  AttentionBackwardArgs<T> args;
  const float* delta;
  CUtensorMap q, k, v, dout, dq_sum;
};

template <class T, class Config>
__global__ void __launch_bounds__(Config::kThreads, Config::kMinBlocks)
    query_grads_kernel(const __grid_constant__ TmaBackwardArgs<T> params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Shape = TmaQueryGradsShape<Config>;
  constexpr int kHeadDim = Config::kHeadDim, kStages = Config::kStages;
  constexpr int kK = Config::kStream, kN = kK / 8, kO = kHeadDim / 8;
  extern __shared__ __align__(1024) uint16_t shared[];
  const typename Shape::HeldTile q_tile{shared}, do_tile = q_tile.next(1);
  // Key tile n of the block's range sits in stage n % kStages: k_tiles.next(stage), v_tiles.next(stage).
  const typename Shape::StreamTile k_tiles{do_tile.next(1).data}, v_tiles = k_tiles.next(kStages);
  uint64_t* held_full = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(shared) + Shape::kTileBytes);
  const tma::KeyValueRing<kStages> ring(held_full + 1);
  if (threadIdx.x == 0) {
    tma::barrier_init(held_full, 1);
    ring.init(4 * Config::kConsumers);
    tma::fence_barrier_init();
  }
  __syncthreads();

  const AttentionBackwardArgs<T>& a = params.args;
  const AttentionParams<T>& p = a.params;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int warpgroup = __shfl_sync(kFullWarp, warp / 4, 0);  // uniform, so branches on it do not diverge
  const auto [bh, b, h, kv_head, i0, key_begin, key_end, whole_begin, whole_end] = query_tile(p, Shape::kRows);

  if (warpgroup == 0) {
    tma::shrink_registers<Config::kProducerRegisters>();
    if (threadIdx.x == 0) {
      tma::prefetch_map(&params.q);
      tma::prefetch_map(&params.dout);
      tma::prefetch_map(&params.k);
      tma::prefetch_map(&params.v);
      tma::arrive_expect_bytes(held_full, 2 * Shape::HeldTile::kBytes);
      tma::load_tile(q_tile, params.q, held_full, i0, h, b);
      tma::load_tile(do_tile, params.dout, held_full, i0, h, b);
      ring.produce(k_tiles, v_tiles, params.k, params.v, key_begin, key_end, kv_head, b);
    }
  } else {
    tma::grow_registers<Config::kConsumerRegisters>();
    const int consumer = warpgroup - 1;
    const int row0 = 64 * consumer + 16 * (warp % 4);  // this warp's rows: row0 .. row0 + 16 of the tile
    const float scale_log2 = p.scale * kLog2e;
    const Softcap softcap = softcap_of(p);
    float lse2[1][2], row_delta[1][2];
    query_row_stats(a, params.delta, bh, i0 + row0, lane, lse2, row_delta);

    FragC dq[1][kO];
    mma::zero(dq);
    // dS of the previous key tile, whose dQ product is issued behind this tile's.
    FragA dscores[1][kN / 2];
    int previous_stage = -1;
    auto issue_query_grads = [&](int stage) {
      issue_ab<T, kK>(dq[0], dscores[0], k_tiles.next(stage));
      wgmma::commit();
    };
    tma::wait(held_full, 0);
    int n = 0;
    for (int64_t j0 = key_begin; j0 < key_end; j0 += kK, ++n) {
      const auto [stage, parity] = tma::ring_slot<kStages>(n);
      tma::wait(ring.k_full + stage, parity);
      tma::wait(ring.v_full + stage, parity);
      FragC s[1][kN], dp[1][kN];
      wgmma::fence();
      issue_abt<T, kN>(s[0], q_tile, 64 * consumer, k_tiles.next(stage));
      issue_abt<T, kN>(dp[0], do_tile, 64 * consumer, v_tiles.next(stage));
      wgmma::commit();
      if (previous_stage >= 0) {
        issue_query_grads(previous_stage);
        wgmma::wait<1>();
      } else {
        wgmma::wait<0>();
      }
      wgmma::hold(s[0]);
      wgmma::hold(dp[0]);
      tma::hand_back(ring.v_empty + stage, lane);

      // Dropout stays a run-time choice here: this kernel does not spill with it (-Xptxas -v), and a template
      // would add its compile time twice over.
      query_entry_grads<true>(p, softcap, scale_log2, bh, i0 + row0, j0, whole_begin, whole_end, lane, s, dp, lse2,
                              row_delta);
      wgmma::wait<0>();
      wgmma::hold(dq[0]);
      if (previous_stage >= 0) tma::hand_back(ring.k_empty + previous_stage, lane);
      mma::to_a_fragments<T>(dscores, s);
      previous_stage = stage;
    }
    if (previous_stage >= 0) {
      wgmma::fence();
      issue_query_grads(previous_stage);
      wgmma::wait<0>();
      wgmma::hold(dq[0]);
      tma::hand_back(ring.k_empty + previous_stage, lane);
    }
    store_query_grads(a, b, h, i0 + row0, lane, dq);
  }
#else
  __trap();  // built without sm_90a: the host never launches this (wgmma_kernels_run)
#endif
}

// kAtomicDq: per consumer also kScoreTiles dSᵀ tiles (its 64 keys × the step's queries) and two f32 dQ tiles (the
// step's queries × the kDqCols columns it adds) that its dQ part is added from, after the tiles, 1024-byte aligned.
// How the consumers split the step's dQ = dS·K: with one 64-column block (D 64) each forms its 64 keys' share of every
// column, and both add into the same columns; with a block per consumer (D 128, kDqByColumns) consumer c forms block
// c's columns over all the block's keys, reading both consumers' dSᵀ tiles after a barrier of the two, so each
// column is added once. The other consumer reads a dSᵀ tile then, so kDqByColumns keeps two per consumer (by step
// parity): a tile is rewritten two steps later, after both consumers met at the barrier of the step between.
template <class Config, bool kAtomicDq = false>
struct TmaKeyGradsShape {
  static constexpr int kHeadDim = Config::kHeadDim, kRows = 64 * Config::kConsumers, kStages = Config::kStages;
  static constexpr int kStream = Config::kStream;
  static constexpr bool kDqByColumns = kHeadDim > 64 && kHeadDim == 64 * Config::kConsumers;
  static constexpr int kDqCols = kDqByColumns ? 64 : kHeadDim, kScoreTiles = kDqByColumns ? 2 : 1;
  using HeldTile = wgmma::SwizzledTile<kRows, kHeadDim>;
  using StreamTile = wgmma::SwizzledTile<kStream, kHeadDim>;
  using ScoreTile = wgmma::SwizzledTile<64, kStream>;
  using QueryGradTile = tma::AccumulatorTile<kStream, kDqCols>;
  static constexpr size_t kTileBytes = 2 * size_t(HeldTile::kBytes) + 2 * kStages * size_t(StreamTile::kBytes);
  static constexpr size_t kAtomicDqBytes =
      kAtomicDq ? Config::kConsumers * (kScoreTiles * size_t(ScoreTile::kBytes) + 2 * size_t(QueryGradTile::kBytes))
                : 0;
  static constexpr size_t kStatsBytes = 2 * kStages * kStream * sizeof(float);
  // After the tiles and the statistics: the held tiles' barrier, then each stage's full and empty barrier.
  static constexpr size_t kBytes = kTileBytes + kAtomicDqBytes + kStatsBytes + (1 + 2 * kStages) * sizeof(uint64_t);
};

// Stores a warp's dSᵀ A fragments (rows: its 16 keys from key_row0, columns: the step's 8·kN queries) into the
// consumer's swizzled tile: register x of a[k] holds (row g + 8·(x % 2), columns 16k + 8·(x / 2) + 2t, +1).
template <int kN, int kCols>
__device__ __forceinline__ void store_score_fragments(wgmma::SwizzledTile<64, kCols> tile, int key_row0,
                                                      const FragA (&a)[kN / 2], int lane) {
  char* bytes = reinterpret_cast<char*>(tile.data);
#pragma unroll
  for (int k = 0; k < kN / 2; ++k)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int row = key_row0 + lane / 4 + 8 * (x % 2), col = 16 * k + 8 * (x / 2) + 2 * (lane % 4);
      *reinterpret_cast<uint32_t*>(bytes + tile.chunk_offset(row, col / 8) + col % 8 * 2) = a[k].x[x];
    }
}

// Hardware barrier kFirst + consumer (consumer 0 or 1) among kThreads threads: waits there (kWait) or only arrives.
// The barrier's id is an immediate, hence a branch per consumer.
template <int kFirst, int kThreads, bool kWait = true>
__device__ __forceinline__ void consumer_barrier(int consumer) {
  auto at = [&]<int kId>() {
    if constexpr (kWait)
      tma::named_barrier<kId, kThreads>();
    else
      tma::named_barrier_arrive<kId, kThreads>();
  };
  if (consumer == 0)
    at.template operator()<kFirst>();
  else
    at.template operator()<kFirst + 1>();
}

// kAtomicDq: the handshake between consumer c and its dQ writer warp (producer warp 2 + c) on hardware barriers
// kDqWritten + c (the step's dQ tile is written: the consumer arrives, the writer waits) and kDqFree + c (the tile
// the consumer writes next is free: the writer arrives, the consumer waits), each counting the consumer's 128
// threads and the writer's 32. bar.arrive does not wait, so neither side stops unless the other is behind.
constexpr int kDqWritten = 4, kDqFree = 6, kDqHandshakeThreads = 128 + 32;
template <int kBarrier, bool kWait>
__device__ __forceinline__ void dq_handshake(int consumer) {
  consumer_barrier<kBarrier, kDqHandshakeThreads, kWait>(consumer);
}

// The first of the 16 keys of the block that consumer warp `warp` (4 to 4 + 4·consumers − 1) holds: consumer c's
// warp v holds keys 64c + 16v .. + 16.
__device__ __forceinline__ int consumer_warp_first_key(int warp) { return 16 * (warp - 4); }

// dK and dV, warp-specialised: K and V held, each step's Q, dO (TMA, producer warp 0) and statistics (lse2 and
// D, producer warp 1) streamed through one ring; a stage is handed back after the step's dK and dV products,
// in the step after.
template <class T, class Config, bool kDropout, bool kAtomicDq>
__global__ void __launch_bounds__(Config::kThreads, Config::kMinBlocks)
    tma_key_grads_kernel(const __grid_constant__ TmaBackwardArgs<T> params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Shape = TmaKeyGradsShape<Config, kAtomicDq>;
  constexpr int kHeadDim = Config::kHeadDim, kStages = Config::kStages;
  constexpr int kQ = Config::kStream, kN = kQ / 8, kO = kHeadDim / 8;
  extern __shared__ __align__(1024) uint16_t shared[];
  const typename Shape::HeldTile k_tile{shared}, v_tile = k_tile.next(1);
  // Step n's stage n % kStages: q_tiles.next(stage), do_tiles.next(stage), lse2_rows + stage·kQ, delta_rows + stage·kQ.
  const typename Shape::StreamTile q_tiles{v_tile.next(1).data}, do_tiles = q_tiles.next(kStages);
  // kAtomicDq: consumer c's dSᵀ tiles score_tiles.next(kScoreTiles·c + parity), its dQ tiles
  // query_grad_tiles.next(2c + parity).
  const typename Shape::ScoreTile score_tiles{
      reinterpret_cast<uint16_t*>(reinterpret_cast<char*>(shared) + Shape::kTileBytes)};
  const typename Shape::QueryGradTile query_grad_tiles{
      reinterpret_cast<float*>(score_tiles.next(Shape::kScoreTiles * Config::kConsumers).data)};
  float* lse2_rows =
      reinterpret_cast<float*>(reinterpret_cast<char*>(shared) + Shape::kTileBytes + Shape::kAtomicDqBytes);
  float* delta_rows = lse2_rows + kStages * kQ;
  uint64_t* held_full = reinterpret_cast<uint64_t*>(delta_rows + kStages * kQ);
  uint64_t* step_full = held_full + 1;
  uint64_t* step_empty = step_full + kStages;
  if (threadIdx.x == 0) {
    tma::barrier_init(held_full, 1);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      tma::barrier_init(step_full + s, 1 + 32);  // the copies' arrival and the statistics warp's lanes
      // Every consumer lane arrives (not one lane per warp after __syncwarp, as for the TMA-written tiles): the
      // statistics warp writes a stage's lse2 and D rows with plain stores after this barrier, and compute-sanitizer's
      // racecheck reported those writes against the lanes' reads when one lane arrived for its warp (4 errors, H100,
      // 2026-11-27); with every lane arriving it reports none (docs/SECURITY.md).
      tma::barrier_init(step_empty + s, 128 * Config::kConsumers);
    }
    tma::fence_barrier_init();
  }
  __syncthreads();

  const AttentionBackwardArgs<T>& a = params.args;
  const AttentionParams<T>& p = a.params;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int warpgroup = __shfl_sync(kFullWarp, warp / 4, 0);  // uniform, so branches on it do not diverge
  const auto [b, head, kv_head, group] = kv_heads_of_row(p, blockIdx.y);
  const int64_t j0 = int64_t(blockIdx.x) * Shape::kRows, j_end = tile_last_row(j0, Shape::kRows, p.kv_len) + 1;
  // The walk is worked out by each warpgroup after its setmaxnreg: values live across it were spilled.
  auto walk_of = [&] { return query_walk(p, j0, j_end, kQ, group); };

  if (warpgroup == 0) {
    tma::shrink_registers<Config::kProducerRegisters>();
    const QueryWalk walk = walk_of();
    const QueryStep first{int(kv_head * group), walk.begin};
    if (warp == 0 && lane == 0) {
      tma::prefetch_map(&params.q);
      tma::prefetch_map(&params.dout);
      tma::arrive_expect_bytes(held_full, 2 * Shape::HeldTile::kBytes);
      tma::load_tile(k_tile, params.k, held_full, j0, kv_head, b);
      tma::load_tile(v_tile, params.v, held_full, j0, kv_head, b);
      QueryStep s = first;
      for (int n = 0; n < walk.steps; ++n, s = walk.following(s)) {
        const auto [stage, parity] = tma::ring_slot<kStages>(n);
        tma::wait(step_empty + stage, parity ^ 1);
        tma::arrive_expect_bytes(step_full + stage, 2 * Shape::StreamTile::kBytes);
        tma::load_tile(q_tiles.next(stage), params.q, step_full + stage, s.i0, s.h, b);
        tma::load_tile(do_tiles.next(stage), params.dout, step_full + stage, s.i0, s.h, b);
      }
    } else if (warp == 1) {
      QueryStep s = first;
      for (int n = 0; n < walk.steps; ++n, s = walk.following(s)) {
        const auto [stage, parity] = tma::ring_slot<kStages>(n);
        tma::wait(step_empty + stage, parity ^ 1);
        load_query_stats(a, params.delta, b, s, kQ, lse2_rows + stage * kQ, delta_rows + stage * kQ, lane, 32);
        tma::arrive(step_full + stage);
      }
    } else if constexpr (kAtomicDq) {
      // kAtomicDq: warp 2 + c adds consumer c's dQ tile of each step into dq_sum once the consumer has written it
      // (kDqWritten), and tells it when the tile it will write next is free (kDqFree: the addition of two steps back
      // has read it), so that the consumer neither waits for its warpgroup nor for the copy engine.
      const int consumer = warp - 2;  // lanes 1-31 of warp 0 land here too: consumer -2, no work
      if (consumer >= 0 && consumer < Config::kConsumers) {
        const int column0 = Shape::kDqByColumns ? Shape::kDqCols * consumer : 0;
        QueryStep s = first;
        for (int n = 0; n < walk.steps; ++n, s = walk.following(s)) {
          dq_handshake<kDqWritten, true>(consumer);
          if (lane == 0) {
            const typename Shape::QueryGradTile dq_tile = query_grad_tiles.next(2 * consumer + n % 2);
#pragma unroll
            for (int box = 0; box < Shape::QueryGradTile::kBoxes; ++box)
              tma::reduce_add_box(&params.dq_sum, dq_tile.box(box), column0 + 32 * box, s.i0, int(b * p.q_heads + s.h));
            tma::bulk_commit();
            if (n > 0) tma::bulk_wait_read<1>();
          }
          __syncwarp();
          if (n + 1 < walk.steps) dq_handshake<kDqFree, false>(consumer);  // the consumer waits from step 1 on
        }
        if (lane == 0) tma::bulk_wait_all();  // the block's shared memory outlives the last additions' reads
      }
    }
  } else {
    tma::grow_registers<Config::kConsumerRegisters>();
    const QueryWalk walk = walk_of();
    const QueryStep first{int(kv_head * group), walk.begin};
    const int consumer = warpgroup - 1;
    // This warp's keys: j0 + key_row0 .. + 16 (consumer_warp_first_key(warp), written from the consumer index: the
    // helper here compiles to other code than the one measured).
    const int key_row0 = 64 * consumer + 16 * (warp % 4);
    const float scale_log2 = p.scale * kLog2e;
    const Softcap softcap = softcap_of(p);
    FragC dk[1][kO], dv[1][kO];
    mma::zero(dk);
    mma::zero(dv);
    // P̃ᵀ and dSᵀ of the previous step, whose products are issued behind this step's.
    FragA probs[1][kN / 2], dscores[1][kN / 2];
    int previous_stage = -1;
    auto issue_key_grads = [&](int stage) {
      issue_ab<T, kQ>(dv[0], probs[0], do_tiles.next(stage));
      issue_ab<T, kQ>(dk[0], dscores[0], q_tiles.next(stage));
      wgmma::commit();
    };
    // kAtomicDq: dq_sum[bh, step's queries, this consumer's columns] += its part of dS·K (TmaKeyGradsShape says
    // which). dSᵀ goes through the consumer's shared tile (read MN-major as A, K MN-major as B), the product into
    // f32 registers, then into the step's dQ tile (two, alternating), which the consumer's writer warp has the copy
    // engine add into dq_sum. Before the product a barrier: every warp's dSᵀ rows written (of both consumers under
    // kDqByColumns); before the stores the writer's word that the tile is free (from step 1 on).
    static_assert(Config::kConsumers <= 2, "one named barrier per consumer warpgroup");
    constexpr int kDqCols = Shape::kDqCols, kScoreTiles = Shape::kScoreTiles;
    auto add_query_grads = [&](int n) {  // step n
      store_score_fragments<kN>(score_tiles.next(kScoreTiles * consumer + n % kScoreTiles), 16 * (warp % 4), dscores[0],
                                lane);
      wgmma::fence_async_proxy();
      FragC dq[kDqCols / 8];
      if constexpr (Shape::kDqByColumns)
        tma::named_barrier<3, 128 * Config::kConsumers>();
      else
        consumer_barrier<1, 128>(consumer);  // barrier 1 + consumer, among the consumer's warpgroup
      // dS·K over key steps [first_step, first_step + kKeySteps) of the block (16 keys each; step s in consumer
      // s / 4's dSᵀ tile), into this consumer's column block of K: its own keys and every column at D 64, every key and
      // its 64 columns under kDqByColumns.
      constexpr int kKeySteps = Shape::kDqByColumns ? Shape::kRows / 16 : 4;
      const int first_step = Shape::kDqByColumns ? 0 : 4 * consumer;
      const auto k_columns = k_tile.column_block(Shape::kDqByColumns ? consumer : 0);
      wgmma::fence();
#pragma unroll
      for (int k = 0; k < kKeySteps; ++k) {
        const int step = first_step + k;
        wgmma::product_ss<T, kDqCols, true>(
            dq, score_tiles.next(kScoreTiles * (step / 4) + n % kScoreTiles).mn_major(step % 4),
            k_columns.mn_major(step), k > 0);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::hold(dq);
      if (n > 0) dq_handshake<kDqFree, true>(consumer);
      const typename Shape::QueryGradTile dq_tile = query_grad_tiles.next(2 * consumer + n % 2);
#pragma unroll
      for (int o = 0; o < kDqCols / 8; ++o)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          *dq_tile.pair(16 * (warp % 4) + fragment_row(lane, 2 * half), fragment_col(lane, o, 0)) =
              make_float2(dq[o].x[2 * half], dq[o].x[2 * half + 1]);
      wgmma::fence_async_proxy();
      dq_handshake<kDqWritten, false>(consumer);
    };
    tma::wait(held_full, 0);
    QueryStep current = first;
    for (int n = 0; n < walk.steps; ++n, current = walk.following(current)) {
      const auto [stage, parity] = tma::ring_slot<kStages>(n);
      tma::wait(step_full + stage, parity);
      const int64_t bh = b * p.q_heads + current.h, i0 = current.i0;
      FragC st[1][kN], dpt[1][kN];  // Sᵀ and dP̃ᵀ: rows this warp's keys, columns the step's queries
      wgmma::fence();
      issue_abt<T, kN>(st[0], k_tile, 64 * consumer, q_tiles.next(stage));
      issue_abt<T, kN>(dpt[0], v_tile, 64 * consumer, do_tiles.next(stage));
      wgmma::commit();
      if (previous_stage >= 0) {
        issue_key_grads(previous_stage);
        wgmma::wait<1>();
      } else {
        wgmma::wait<0>();
      }
      wgmma::hold(st[0]);
      wgmma::hold(dpt[0]);
      key_entry_grads<kDropout>(p, softcap, scale_log2, bh, i0, j0, Shape::kRows, j0 + key_row0, lane, st, dpt,
                                lse2_rows + stage * kQ, delta_rows + stage * kQ);
      wgmma::wait<0>();
      wgmma::hold(dv[0]);
      wgmma::hold(dk[0]);
      if (previous_stage >= 0) tma::arrive(step_empty + previous_stage);
      mma::to_a_fragments<T>(probs, st);
      mma::to_a_fragments<T>(dscores, dpt);
      if constexpr (Config::kOverlapSteps) {
        if constexpr (kAtomicDq) add_query_grads(n);
        previous_stage = stage;
      } else {  // the step's dK and dV products, its dQ product behind them; the stage goes back after all three
        wgmma::fence();
        issue_key_grads(stage);
        if constexpr (kAtomicDq) add_query_grads(n);
        wgmma::wait<0>();
        wgmma::hold(dv[0]);
        wgmma::hold(dk[0]);
        tma::arrive(step_empty + stage);
      }
    }
    if (previous_stage >= 0) {
      wgmma::fence();
      issue_key_grads(previous_stage);
      wgmma::wait<0>();
      wgmma::hold(dv[0]);
      wgmma::hold(dk[0]);
      tma::arrive(step_empty + previous_stage);
    }
    // The warp's first key worked out anew from the thread index: held across the step loop, it was the D 64
    // kernel's one spilled register (ptxas kept it in local memory rather than recompute it).
    int thread = 0;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(thread));
    store_key_grads(a, b, kv_head, j0 + consumer_warp_first_key(thread / 32), lane, dk, dv);
  }
#else
  __trap();  // built without sm_90a: the host never launches this (wgmma_kernels_run)
#endif
}

// The TMA kernels' parameter: tensor maps of q and dO in boxes of query_rows rows, of k and v in boxes of
// key_rows rows, and (dq_sum not null) of the dQ accumulator in boxes of query_rows rows.
template <class T>
TmaBackwardArgs<T> tma_backward_args(const AttentionBackwardArgs<T>& args, const float* delta, int query_rows,
                                     int key_rows, float* dq_sum = nullptr) {
  constexpr const char* kOp = "flash_attention_backward";
  const AttentionParams<T>& p = args.params;
  // dO is [B, Tq, Hq, Dv], contiguous.
  const AttentionStrides dout_strides{p.q_len * p.q_heads * p.value_dim, p.q_heads * p.value_dim, p.value_dim};
  TmaBackwardArgs<T> params{
      args,
      delta,
      tma::head_tensor_map(args.q, p.q_strides, p.batch, p.q_len, p.q_heads, p.head_dim, query_rows, kOp, "q"),
      tma::head_tensor_map(args.k, p.k_strides, p.batch, p.kv_len, p.kv_heads, p.head_dim, key_rows, kOp, "k"),
      tma::head_tensor_map(args.v, p.v_strides, p.batch, p.kv_len, p.kv_heads, p.value_dim, key_rows, kOp, "v"),
      tma::head_tensor_map(args.dout, dout_strides, p.batch, p.q_len, p.q_heads, p.value_dim, query_rows, kOp, "dout"),
      {}};
  if (dq_sum != nullptr)
    params.dq_sum = tma::accumulator_tensor_map(dq_sum, p.batch * p.q_heads, p.q_len, p.head_dim, query_rows, kOp,
                                                "workspace (dQ accumulator)");
  return params;
}

// The dK/dV kernel on TMA; kAtomicDq: it also adds each step's dQ share into dq_sum (zeroed, [B·Hq, Tq, D] f32;
// null without kAtomicDq).
template <class T, class KeyConfig, bool kAtomicDq>
void launch_tma_key_grads(const AttentionBackwardArgs<T>& args, const float* delta, float* dq_sum,
                          cudaStream_t stream) {
  constexpr const char* kOp = "flash_attention_backward";
  const AttentionParams<T>& p = args.params;
  const TmaBackwardArgs<T> params =
      tma_backward_args(args, delta, KeyConfig::kStream, 64 * KeyConfig::kConsumers, dq_sum);
  const dim3 key_grid(tile_count(p.kv_len, 64 * KeyConfig::kConsumers), heads_extent(p.batch * p.kv_heads, kOp));
  const auto kernel = p.dropout_p > 0 ? tma_key_grads_kernel<T, KeyConfig, true, kAtomicDq>
                                      : tma_key_grads_kernel<T, KeyConfig, false, kAtomicDq>;
  launch_with_shared(kernel,
                     kAtomicDq ? "flash_attention_backward (dk, dv, added dq)" : "flash_attention_backward (dk, dv)",
                     key_grid, KeyConfig::kThreads, TmaKeyGradsShape<KeyConfig, kAtomicDq>::kBytes, stream, params);
}

// The non-deterministic backward (adds_query_grads): the dK/dV kernel adds dQ into the zeroed accumulator after D
// in the workspace, and a last pass scales and rounds it into dq.
template <class T, class KeyConfig>
void backward_adding_dq(const AttentionBackwardArgs<T>& args, float* workspace, cudaStream_t stream) {
  const AttentionParams<T>& p = args.params;
  const int64_t rows = p.batch * p.q_heads * p.q_len;
  float* dq_sum = workspace + flash_dq_accumulator_offset(rows);
  ALPHA_CUDA_CHECK(cudaMemsetAsync(dq_sum, 0, size_t(rows * p.head_dim) * sizeof(float), stream));
  launch_tma_key_grads<T, KeyConfig, true>(args, workspace, dq_sum, stream);
  launch_store_dq(args, dq_sum, stream);
}

// The deterministic backward: the dK/dV kernel, then the dQ kernel.
template <class T, class KeyConfig, class QueryConfig>
void backward(const AttentionBackwardArgs<T>& args, float* workspace, cudaStream_t stream) {
  using Queries = TmaQueryGradsShape<QueryConfig>;
  constexpr const char* kOp = "flash_attention_backward";
  const AttentionParams<T>& p = args.params;
  const float* delta = workspace;
  launch_tma_key_grads<T, KeyConfig, false>(args, delta, nullptr, stream);

  const dim3 query_grid(tile_count(p.q_len, Queries::kRows), heads_extent(p.batch * p.q_heads, kOp));
  const TmaBackwardArgs<T> params = tma_backward_args(args, delta, Queries::kRows, QueryConfig::kStream);
  launch_with_shared(query_grads_kernel<T, QueryConfig>, "flash_attention_backward (dq)", query_grid,
                     QueryConfig::kThreads, Queries::kBytes, stream, params);
}

}  // namespace wgmma_backward

// Measured on an H100 (2026-11-23, bench/flash_attention.py --quick, B·T = 16384, bf16), TFLOP/s of the
// deterministic backward, these kernels against the mma.sync ones (as measured in the 2026-11-22 run):
//   D 128 without a mask: 134.6 / 161.0 / 171.3 against 114.4 / 128.2 / 133.4 at T 512 / 2048 / 8192;
//   D 128 causal: 49.4 / 88.0 / 139.6 against 69.1 / 111.8 / 130.0;
//   D 64 (one warpgroup per block): 78.6 / 90.4 / 95.0 against 99.3 / 112.1 / 117.7, causal 29-83 against 69-111.
// The masked steps' cost was the entry step's: per-entry branches around the softcap, the Philox draw and
// the visibility test. Once those became templates and selects (flash_attention_mma_backward.cuh), on an
// H200 (2026-11-26, same script, same run): D 128 causal 135.8 / 197.6 / 257.7 / 303.1 / 333.0 here against
// 114.7 / 140.5 / 158.9 / 169.4 / 173.4 on mma.sync at T 512 / 1024 / 2048 / 4096 / 8192; and D 64 (two
// warpgroups per block, the same call's alpha_attention_bench, ms at T 512 / 2048 / 8192) 1.04 / 2.98 /
// 10.68 here against 1.36 / 4.71 / 18.02 (causal 0.86 / 1.86 / 5.69 against 0.89 / 2.59 / 9.47), the
// atomic-dQ mma kernels 1.37 / 4.51 / 17.20. So buckets 64 and 128 run here with every mask, deterministic
// or not (wgmma_kernels_run: with deterministic false, the added-dQ kernel where adds_query_grads); the
// other buckets keep the mma.sync kernels.
template <class T>
void flash_attention_wgmma_backward(const AttentionBackwardArgs<T>& args, float* workspace, cudaStream_t stream) {
  using namespace wgmma_backward;
  const bool bucket64 = mma_head_dim_bucket(args.params, "flash_attention_backward") == 64;
  if (adds_query_grads(args.params))
    return bucket64 ? backward_adding_dq<T, WgmmaBackwardTraits<64>::Keys>(args, workspace, stream)
                    : backward_adding_dq<T, WgmmaBackwardTraits<128>::Keys>(args, workspace, stream);
  if (bucket64) {
    using Traits = WgmmaBackwardTraits<64>;
    if (Traits::short_causal(args.params))
      return backward<T, Traits::ShortCausalKeys, Traits::Queries>(args, workspace, stream);
    return backward<T, Traits::Keys, Traits::Queries>(args, workspace, stream);
  }
  using Traits = WgmmaBackwardTraits<128>;
  backward<T, Traits::Keys, Traits::Queries>(args, workspace, stream);
}

bool wgmma_backward_runs(int64_t head_dim, int64_t value_dim) {
  return wgmma_kernels_run(mma_head_dim_bucket(head_dim, value_dim, "wgmma_backward_runs"));
}

template <class T>
bool wgmma_backward_adds_dq(const AttentionParams<T>& p) {
  return wgmma_backward_runs(p.head_dim, p.value_dim) && wgmma_backward::adds_query_grads(p);
}

#define ALPHA_INSTANTIATE(T)                                                                              \
  template void flash_attention_wgmma_backward<T>(const AttentionBackwardArgs<T>&, float*, cudaStream_t); \
  template bool wgmma_backward_adds_dq<T>(const AttentionParams<T>&);
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
