// Flash attention forward for bf16/f16 on Hopper (sm_90a), warp-specialised: a producer warpgroup feeds
// the tiles through the copy engine (TMA, tma.cuh) and the consumer warpgroups only multiply and take the
// softmax, as FlashAttention-3 does. Same algorithm, options and outputs as the mma.sync kernel
// (flash_attention_mma_forward.cuh, whose softmax step and epilogue it calls); the products are wgmma
// (wgmma.cuh), Q·Kᵀ with both operands in shared memory, P̃·V with P̃ from registers.
//
// A block runs query tiles of 64·kConsumers rows of one head b·Hq + h: one per block, or (persistent
// configurations) one wave of blocks each running tiles one after another (PersistentTiles), so that a
// block's next Q tile and first key tiles land while its consumers finish the last tile's rows. Warpgroup 0
// is the producer, warpgroups 1..kConsumers the consumers, consumer c owning rows [64c, 64c + 64) of the tile.
//   Producer (one thread; the warpgroup gives its registers to the consumers with setmaxnreg): copies the Q
//   tile (once the consumers handed back the last one), then K_j and V_j of every key tile j of its range into
//   a ring of kStages stages (the ring going on across the block's tiles),
//   each stage's K and V with a "full" barrier the copy engine completes and an "empty" barrier the
//   consumers complete when they no longer read it. K and V have barriers of their own, so K_{j+1} can
//   land while V_j is still read.
//   Consumer, per key tile j: wait for K_j; issue S_j = Q·K_jᵀ, then behind it O += P̃_{j−1}·V_{j−1};
//   wait for S_j only, hand K_j back, and run the softmax step on S_j while the tensor cores work on
//   P̃_{j−1}·V_{j−1}; wait for that, hand V_{j−1} back, rescale O, round P̃_j into A fragments.
// A consumer skips the tiles none of its own 64 rows sees (masks only where its rows need it), but still
// waits for them and hands them back, so that no warpgroup runs a ring's length ahead of another (an
// early arrival would count towards the stage's previous fill).
// The tiles use wgmma's 128-byte swizzled layout, which the tensor maps' 128-byte swizzle writes; rows
// past Tq or Tk and columns past D or Dv arrive as zeros from the copy engine (the bucket's padding: D 48
// runs the 64 kernel). The host builds the tensor maps (flash_attention_tma_forward.cu).
// Why it beats the cp.async kernel it replaced (which had every thread issue copies and the block meet at
// a barrier per tile): the consumers spend no issue slots or registers on addresses and copies, never wait
// for each other, and the producer runs a ring ahead. D 128 went from ~390 to ~600 TFLOP/s at T 8192.
#pragma once
#include <cuda.h>

#include "alpha/kernels/cuda/flash_attention_mma_forward.cuh"
#include "alpha/kernels/cuda/tma.cuh"
#include "alpha/kernels/cuda/wgmma.cuh"
#include "alpha/kernels/persistent_tiles.h"

namespace alpha::kernels::cuda::tma_forward {

using mma::FragA;
using mma::FragC;

// How a configuration's blocks take query tiles: a block per tile, or one wave of persistent blocks running fixed
// shares of them one after another (PersistentTiles), the tiles ordered head by head (a head's tiles consecutive, so
// that the blocks running at once share its K and V in L2) or tile by tile (every head's last tile first, then the
// tiles before: under a causal mask the longest first, which balances the shares, K and V of many heads at once).
enum class TileSchedule { kOnePerBlock, kPersistentByHead, kPersistentByTile };

// A configuration: head-dimension bucket, consumer warpgroups (each 64 query rows), keys per tile, stages
// of the ring, registers of a consumer and of the producer, blocks per SM (tma::WarpSpecialised), and the blocks'
// tile schedule.
template <int kHeadDimBucket, int kConsumerWarpgroups, int kKeysPerTile, int kRingStages, int kConsumerRegs,
          int kProducerRegs, int kBlocksPerSm, TileSchedule kTileSchedule>
struct TmaForwardConfig : tma::WarpSpecialised<kConsumerWarpgroups, kConsumerRegs, kProducerRegs, kBlocksPerSm> {
  static constexpr int kHeadDim = kHeadDimBucket, kKeys = kKeysPerTile, kStages = kRingStages;
  static constexpr TileSchedule kSchedule = kTileSchedule;
  static constexpr bool kPersistent = kTileSchedule != TileSchedule::kOnePerBlock;
};
// Chosen with bench/tma_forward_configs.cu (the configurations side by side on the same inputs; the numbers
// below from one call on an H200, 2026-11-27, the rejected ones from an earlier call that day; after the kernel
// lost its dropout code where p = 0, which took most of its spills; ms at B·T 16384, H 2048/D but 12 at D 64
// T 1024; docs/PERFORMANCE.md has the whole table). Spills are ptxas's without dropout; with it they are
// 1,476 bytes (D 64 long) and 144 (D 128 long), as before the split.
// - D 128, long key ranges (the rest): two consumers, 128 keys, two stages, one block per SM (240 registers, no
//   spills): 0.289 / 0.482 / 1.722 non-causal at T 1024 / 2048 / 8192, against 0.317 / 0.577 / 2.149 for the
//   short configuration; 176 keys (FlashAttention-3's) 1-8% slower (256 bytes of spills); two consumers at
//   64 keys and four stages, and ping-pong (the consumers taking turns at the tensor cores,
//   FlashAttention-3's schedule), 3-57% slower at every T but 512 causal (H100, 2026-11-26).
using TmaForward128 = TmaForwardConfig<128, 2, 128, 2, 240, 24, 1, TileSchedule::kOnePerBlock>;
// - D 128, up to 2048 keys without a mask or window (tiles of one cost): the same, persistent (H200, 2026-11-30,
//   bench/tma_forward_configs.cu, TFLOP/s at T 512 / 1024 / 2048, two calls): 438.5 / 536.3 / 600.2 and 436.1 / 534.8 /
//   594.9, against 369.0 / 483.6 / 571.4 and 352.1 / 466.5 / 563.7 for a block per query tile, and 374.3 / 443.2 /
//   484.5 and 366.4 / 437.7 / 484.7 for the short configuration; at B 1, H 16, T 1280 307.6 against 304.1 and 267.4.
//   The blocks' start and end were what the short kernels lost to, not the width of their tiles. At T 4096 / 8192
//   persistence was +1.5% / −2%. Its producer has 32 registers (the consumers 232; 0.3-1.5% faster than 240 / 24,
//   where the tile loop's state spilled 68 bytes in the producer). Dropout and windows run the configurations below.
//   Under a causal mask, up to 4096 keys (2026-11-30, same tool, call 1): 268.3 / 386.6 / 497.9 / 577.5 at T 512 / 1024
//   / 2048 / 4096, against 252.9 (short) / 344.6 (short) / 432.9 / 530.8 for a block per query tile; at T 8192 +3%.
using TmaForward128Persistent = TmaForwardConfig<128, 2, 128, 2, 232, 32, 1, TileSchedule::kPersistentByHead>;
// - The same, tiles taken tile by tile, for the causal shapes whose fixed shares head by head would balance badly
//   (flash_attention_wgmma_forward's rule): at B 1, H 16, T 1280 262.5 against 178.6 head by head and 230.2 for the
//   short configuration, at B 1, H 12, T 2048 368.1 against 252.1 and 273.1 (long); where both orders balance, 4-16%
//   slower than head by head (the bench's rows: 245.0 / 333.9 / 418.4 / 522.8 against 267.1 / 391.6 / 498.9 / 579.4 at
//   T 512 to 4096), as the blocks running at once read the K and V of as many heads.
using TmaForward128PersistentByTile = TmaForwardConfig<128, 2, 128, 2, 232, 32, 1, TileSchedule::kPersistentByTile>;
// - D 128, short key ranges with a window or dropout (at most 512 keys, or 1024 under a causal
//   mask): one consumer, 64 keys, three stages, two blocks per SM (232 registers, no spills), so that one block's start
//   and end overlap the other's work: 0.190 non-causal at T 512 and 0.137 / 0.202 causal at T 512 / 1024, against
//   0.193 and 0.161 / 0.211 for the long configuration; two stages 1-2% slower (H100, 2026-11-26).
using TmaForward128Short = TmaForwardConfig<128, 1, 64, 3, 232, 24, 2, TileSchedule::kOnePerBlock>;
// - D 64, long key ranges: three consumers (192 query rows a block, 160 registers each; 64 bytes of spills, 216
//   with the softcap), 128 keys, two stages: 0.638 / 2.221 non-causal at T 2048 / 8192 and 1.228 causal at T 8192,
//   against 0.700 / 2.706 and 1.403 for the short configuration. Two consumers at 240 registers were 4-19% slower, a
//   third stage 1-3% slower, 176 keys with two consumers 23-35% slower (H200, the same day). 96 keys, the one tile at
//   three consumers whose registers hold it without spilling (S and the previous P̃ take 48 and 24 of the 160 instead of
//   64 and 32), 6-11% slower from T 2048 (H200, 2026-11-30).
using TmaForward64Long = TmaForwardConfig<64, 3, 128, 2, 160, 32, 1, TileSchedule::kOnePerBlock>;
// - D 64, short key ranges (at most 1024 keys, or 2048 under a causal mask): one consumer, 64 keys, four
//   stages, three blocks per SM (136 registers, no spills): 0.218 / 0.148 non-causal at T 512 / 1024 and
//   0.163 / 0.100 / 0.406 causal at T 512 / 1024 / 2048, against 0.240 / 0.164 and 0.172 / 0.111 / 0.449 for
//   two consumers at two blocks per SM (this range's configuration until then) and 0.242 / 0.151 and 0.210 /
//   0.117 / 0.411 for the long configuration. Neither D 64 configuration gains from persistence (2026-11-30, the
//   same call as D 128's: the short one 3% slower without a mask up to T 1024, 3% faster causal; the long one 1-3%
//   either way up to T 4096, 14-20% slower causal from T 8192, where a block's fixed share of long and short tiles
//   balances worse than the hardware's handing out of blocks as others end).
using TmaForward64Short = TmaForwardConfig<64, 1, 64, 4, 136, 24, 3, TileSchedule::kOnePerBlock>;

template <class Traits>
struct TmaForwardShape {
  static constexpr int kHeadDim = Traits::kHeadDim, kKeys = Traits::kKeys, kStages = Traits::kStages;
  static constexpr int kThreads = Traits::kThreads;
  static constexpr int kRows = 64 * Traits::kConsumers;
  using QTile = wgmma::SwizzledTile<kRows, kHeadDim>;
  using KvTile = wgmma::SwizzledTile<kKeys, kHeadDim>;
  static constexpr size_t kTileBytes = size_t(QTile::kBytes) + 2 * kStages * size_t(KvTile::kBytes);
  // After the tiles: the Q tile's full and empty barriers, then full and empty barriers of K and of V per stage.
  static constexpr size_t kSharedBytes = kTileBytes + (2 + 4 * kStages) * sizeof(uint64_t);
};

// The kernel's parameter: the arguments, and the operands' tensor maps (rank 4: features, heads, time,
// batch, innermost first; boxes of 64 features × 1 × rows × 1, 128-byte swizzled).
template <class T>
struct TmaForwardArgs {
  AttentionForwardArgs<T> args;
  CUtensorMap q, k, v;
};

// The query tiles of a persistent launch (a 1-D grid of G blocks, at most one wave), worked out alike by every thread
// of the block: item = bh·tiles + tile counted from the end by head (TileSchedule), tile·B·Hq + bh by tile. Block x
// takes item r·G + x in even rounds r and r·G + G − 1 − x in odd ones. A fixed share: by head, balanced for tiles of
// one cost, and under a causal mask over many rounds (it balanced up to 20% worse than one-tile blocks at D 64 from
// T 8192, and a model of it far worse on shapes of few tiles a block), which the order by tile balances (in the model
// within 2% of blocks handed out as others end) but runs 4-16% slower where both balance (the blocks running at once
// read as many heads' K and V; flash_attention_wgmma_forward chooses between the two). Blocks taking
// their next tile from a counter in memory instead (the item handed to the consumers through shared memory) ran 4-8%
// faster than the one-tile configurations on causal rows at B·T 16384 but 31% slower at B 1, H 16, T 1280, and their
// loop, on a loaded value, fails the constant-time audit (2026-11-30).
template <TileSchedule kSchedule>
struct PersistentTiles {
  uint32_t tiles, heads, items;  // query tiles per head, heads (B·Hq), items in all (below 2^31: launch_tma_forward)
  uint32_t item, step;           // the current item; to the next one

  template <class T>
  __device__ PersistentTiles(const AttentionParams<T>& p, int rows)
      : tiles(uint32_t((p.q_len + rows - 1) / rows)),
        heads(uint32_t(p.batch * p.q_heads)),
        items(tiles * heads),
        item(blockIdx.x),
        step(2 * (gridDim.x - blockIdx.x) - 1) {}
  __device__ bool done() const { return item >= items; }
  template <class T>
  __device__ QueryTile tile(const AttentionParams<T>& p, int rows) const {
    const auto [from_end, bh] = persistent_item(item, tiles, heads, kSchedule == TileSchedule::kPersistentByTile);
    return query_tile_at(p, rows, from_end, tiles, bh);
  }
  __device__ void advance() {
    item += step;
    step = 2 * gridDim.x - step;
  }
};

// kDropout: p.dropout_p > 0, and kSoftcap: p.softcap > 0, as templates (mma_forward::softmax_tile_of's kMayDrop says
// why; with both softmax variants in one kernel, the D 64 kernel for long key ranges spilled 216 bytes, 64 without the
// softcap's).
template <class T, class Traits, bool kDropout, bool kSoftcap>
__global__ void __launch_bounds__(TmaForwardShape<Traits>::kThreads, Traits::kMinBlocks)
    tma_forward_kernel(const __grid_constant__ TmaForwardArgs<T> params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kPersistent = Traits::kPersistent;
  static_assert(!(kPersistent && kDropout), "dropout runs a configuration of a block per query tile");
  using Shape = TmaForwardShape<Traits>;
  constexpr int kHeadDim = Traits::kHeadDim, kKeys = Traits::kKeys, kStages = Traits::kStages;
  constexpr int kN = kKeys / 8, kO = kHeadDim / 8;
  extern __shared__ __align__(1024) uint16_t shared[];
  const typename Shape::QTile q_tile{shared};
  // Key tile n of the block's range sits in stage n % kStages: k_tiles.next(stage), v_tiles.next(stage).
  const typename Shape::KvTile k_tiles{shared + Shape::QTile::kElements};
  const typename Shape::KvTile v_tiles = k_tiles.next(kStages);
  // The Q tile's full barrier (the copy engine completes it) and empty one (the consumer warps, once they no
  // longer read the tile: a persistent block's next Q tile then lands while they finish this one's rows).
  uint64_t* q_full = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(shared) + Shape::kTileBytes);
  uint64_t* q_empty = q_full + 1;
  const tma::KeyValueRing<kStages> ring(q_full + 2);
  if (threadIdx.x == 0) {
    tma::barrier_init(q_full, 1);
    tma::barrier_init(q_empty, 4 * Traits::kConsumers);
    ring.init(4 * Traits::kConsumers);
    tma::fence_barrier_init();
  }
  __syncthreads();

  const AttentionForwardArgs<T>& a = params.args;
  const AttentionParams<T>& p = a.params;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  // Read through a shuffle so the compiler knows it is the same in every lane: branches on it are then not
  // divergent, and the wgmma inside them are not serialised.
  const int warpgroup = __shfl_sync(kFullWarp, warp / 4, 0);
  // Producer and consumers count the block's query tiles (m, the Q tile's phases) and key tiles (n, the ring's
  // slots; wrapped between query tiles, tma::ring_count_wrapped) alike.
  int n = 0;

  if (warpgroup == 0) {
    tma::shrink_registers<Traits::kProducerRegisters>();
    if (threadIdx.x == 0) {
      tma::prefetch_map(&params.q);
      tma::prefetch_map(&params.k);
      tma::prefetch_map(&params.v);
      auto produce = [&](const QueryTile& tile) {
        tma::arrive_expect_bytes(q_full, Shape::QTile::kBytes);
        tma::load_tile(q_tile, params.q, q_full, tile.first_row, tile.h, tile.b);
        n = tma::ring_count_wrapped<kStages>(
            ring.produce(k_tiles, v_tiles, params.k, params.v, tile.key_begin, tile.key_end, tile.kv_head, tile.b, n));
      };
      if constexpr (kPersistent) {
        PersistentTiles<Traits::kSchedule> tiles(p, Shape::kRows);
        for (uint32_t m = 0; !tiles.done(); ++m, tiles.advance()) {
          tma::wait(q_empty, (m & 1) ^ 1);
          produce(tiles.tile(p, Shape::kRows));
        }
      } else {
        produce(query_tile(p, Shape::kRows));
      }
    }
  } else {
    tma::grow_registers<Traits::kConsumerRegisters>();
    const int consumer = warpgroup - 1;
    // This thread's rows: i0 + row0 + g + 8·half, for C fragment values x with half = x / 2.
    const int row0 = 64 * consumer + 16 * (warp % 4);
    const Softcap softcap = softcap_of(p);
    const float scale_log2 = p.scale * kLog2e;
    auto consume = [&](const QueryTile& tile) {
      const int64_t i0 = tile.first_row, bh = tile.bh;
      const int64_t group_first_row = i0 + 64 * consumer;
      const bool group_has_rows = group_first_row < p.q_len;
      const KeyRange group_first_keys = visible_key_range(p, group_has_rows ? group_first_row : 0);
      const KeyRange group_last_keys = visible_key_range(p, tile_last_row(group_first_row, 64, p.q_len));

      // row_max in base-2 units (m·log2 e) until the end; row_sum: this thread's columns only, until the end.
      float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {{0.0f, 0.0f}};
      FragC acc[1][kO];
      mma::zero(acc);
      // P̃ of the previous tile, whose P·V is issued with the next tile's Q·Kᵀ.
      FragA probs[1][kN / 2];
      int previous_stage = -1;
      uint32_t previous_parity = 0;
      auto issue_pv = [&](int stage, uint32_t parity) {
        tma::wait(ring.v_full + stage, parity);
#pragma unroll
        for (int k = 0; k < kN / 2; ++k)
          wgmma::product_rs<T, kHeadDim>(acc[0], probs[0][k], v_tiles.next(stage).mn_major(k));
        wgmma::commit();
      };
      auto finish_previous = [&]() {
        if (previous_stage < 0) return;
        wgmma::fence();
        issue_pv(previous_stage, previous_parity);
        wgmma::wait<0>();
        wgmma::hold(acc[0]);
        tma::hand_back(ring.v_empty + previous_stage, lane);
        previous_stage = -1;
      };

      for (int64_t j0 = tile.key_begin; j0 < tile.key_end; j0 += kKeys, ++n) {
        const auto [stage, parity] = tma::ring_slot<kStages>(n);
        const bool group_sees_tile = group_has_rows && j0 < group_last_keys.end && j0 + kKeys > group_first_keys.begin;
        if (!group_sees_tile) {
          // The tiles this warpgroup sees are consecutive: finish the last one's P̃·V, then hand this tile back
          // once it has landed.
          finish_previous();
          tma::wait(ring.k_full + stage, parity);
          tma::hand_back(ring.k_empty + stage, lane);
          tma::wait(ring.v_full + stage, parity);
          tma::hand_back(ring.v_empty + stage, lane);
          continue;
        }
        // S = Q·Kᵀ, then the previous tile's O += P̃·V behind it; the softmax below runs while P̃·V does.
        FragC s[1][kN];
        tma::wait(ring.k_full + stage, parity);
        wgmma::fence();
#pragma unroll
        for (int k = 0; k < kHeadDim / 16; ++k)
          wgmma::product_ss<T, kKeys>(s[0], q_tile.k_major(64 * consumer, k), k_tiles.next(stage).k_major(0, k), k > 0);
        wgmma::commit();
        if (previous_stage >= 0) {
          issue_pv(previous_stage, previous_parity);
          wgmma::wait<1>();
        } else {
          wgmma::wait<0>();
        }
        wgmma::hold(s[0]);
        tma::hand_back(ring.k_empty + stage, lane);

        float rescale[1][2];
        if (j0 >= group_last_keys.begin && j0 + kKeys <= group_first_keys.end)
          mma_forward::softmax_tile_of<T, 1, kN, false, kSoftcap, false, kDropout>(
              p, softcap, scale_log2, bh, i0 + row0, j0, lane, s, row_max, row_sum, rescale);
        else
          mma_forward::softmax_tile_of<T, 1, kN, true, kSoftcap, false, kDropout>(
              p, softcap, scale_log2, bh, i0 + row0, j0, lane, s, row_max, row_sum, rescale);
        wgmma::wait<0>();
        wgmma::hold(acc[0]);
        if (previous_stage >= 0) tma::hand_back(ring.v_empty + previous_stage, lane);
        mma_forward::rescale_rows(acc, rescale);
        mma::to_a_fragments<T>(probs, s);
        previous_stage = stage;
        previous_parity = parity;
      }
      n = tma::ring_count_wrapped<kStages>(n);
      // Every S of this tile has been waited for: Q is free for the block's next query tile.
      tma::hand_back(q_empty, lane);
      finish_previous();
      mma_forward::store_rows<T, 1, kO>(a, tile.b, tile.h, bh, i0 + row0, lane, acc, row_max, row_sum);
    };
    if constexpr (kPersistent) {
      PersistentTiles<Traits::kSchedule> tiles(p, Shape::kRows);
      for (uint32_t m = 0; !tiles.done(); ++m, tiles.advance()) {
        tma::wait(q_full, m & 1);
        consume(tiles.tile(p, Shape::kRows));
      }
    } else {
      tma::wait(q_full, 0);
      consume(query_tile(p, Shape::kRows));
    }
  }
#else
  __trap();  // built without sm_90a: the host never launches this (wgmma_kernels_run)
#endif
}

// The kernel a configuration runs for these parameters: dropout and softcap are its template arguments (a
// persistent configuration has no dropout variant: launch_tma_forward refuses dropout there).
template <class T, class Traits, bool kDropout>
auto tma_forward_kernel_with_softcap(bool softcap) {
  return softcap ? tma_forward_kernel<T, Traits, kDropout, true> : tma_forward_kernel<T, Traits, kDropout, false>;
}
template <class T, class Traits>
auto tma_forward_kernel_for(const AttentionParams<T>& p) {
  const bool softcap = p.softcap > 0;
  if constexpr (Traits::kPersistent)
    return tma_forward_kernel_with_softcap<T, Traits, false>(softcap);
  else
    return p.dropout_p > 0 ? tma_forward_kernel_with_softcap<T, Traits, true>(softcap)
                           : tma_forward_kernel_with_softcap<T, Traits, false>(softcap);
}

// The blocks of a persistent configuration's kernel for these parameters the device runs at once: its grid, at most.
template <class T, class Traits>
int64_t tma_forward_resident_blocks(const AttentionParams<T>& p) {
  using Shape = TmaForwardShape<Traits>;
  return resident_blocks(tma_forward_kernel_for<T, Traits>(p), "flash_attention_forward", Shape::kThreads,
                         Shape::kSharedBytes);
}

// Launches the kernel of configuration Traits (the library's choice per bucket: flash_attention_tma_forward.cu;
// bench/tma_forward_configs.cu times others). A persistent configuration's grid is the resident blocks
// (tma_forward_resident_blocks: worked out once per kernel and device, a lookup after that).
template <class T, class Traits>
void launch_tma_forward(const AttentionForwardArgs<T>& args, cudaStream_t stream) {
  using Shape = TmaForwardShape<Traits>;
  constexpr const char* kOp = "flash_attention_forward";
  const AttentionParams<T>& p = args.params;
  // What the launch refuses, checked before anything is built or queued.
  const unsigned tiles = tile_count(p.q_len, Shape::kRows), heads = heads_extent(p.batch * p.q_heads, kOp);
  const bool dropout = p.dropout_p > 0;
  const int64_t items = int64_t(tiles) * heads;
  if constexpr (Traits::kPersistent) {
    // Dropout runs a configuration of a block per query tile (flash_attention_wgmma_forward): the tile loop's state
    // beside the dropout mask's spilled (8 bytes in the short D 64 configuration, at 136 registers).
    if (dropout) raise<BackendError>(kOp, "dropout_p", "0 for a persistent configuration", std::to_string(p.dropout_p));
    // PersistentTiles counts the tiles in 32 bits (reached only by a Q of about 70 TB).
    if (items > INT32_MAX)
      raise<ShapeError>(kOp, "query tiles·batch·heads", "below 2^31",
                        std::to_string(tiles) + "·" + std::to_string(heads));
  }
  const auto kernel = tma_forward_kernel_for<T, Traits>(p);
  dim3 grid(tiles, heads);
  // resident_blocks refuses a kernel no SM can hold, so a persistent grid has at least one block per SM.
  if constexpr (Traits::kPersistent) grid = dim3(unsigned(std::min(items, tma_forward_resident_blocks<T, Traits>(p))));
  const TmaForwardArgs<T> params{
      args, tma::head_tensor_map(args.q, p.q_strides, p.batch, p.q_len, p.q_heads, p.head_dim, Shape::kRows, kOp, "q"),
      tma::head_tensor_map(args.k, p.k_strides, p.batch, p.kv_len, p.kv_heads, p.head_dim, Shape::kKeys, kOp, "k"),
      tma::head_tensor_map(args.v, p.v_strides, p.batch, p.kv_len, p.kv_heads, p.value_dim, Shape::kKeys, kOp, "v")};
  launch_with_shared(kernel, kOp, grid, Shape::kThreads, Shape::kSharedBytes, stream, params);
}

}  // namespace alpha::kernels::cuda::tma_forward
