// Flash attention forward for bf16/f16 on Hopper (sm_90a), warp-specialised: a producer warpgroup feeds
// the tiles through the copy engine (TMA, tma.cuh) and the consumer warpgroups only multiply and take the
// softmax, as FlashAttention-3 does. Same algorithm, options and outputs as the mma.sync kernel
// (flash_attention_mma_forward.cuh, whose softmax step and epilogue it calls); the products are wgmma
// (wgmma.cuh), Q·Kᵀ with both operands in shared memory, P̃·V with P̃ from registers.
//
// One block per (query tile of 64·kConsumers rows, b·Hq + h): warpgroup 0 is the producer, warpgroups
// 1..kConsumers the consumers, consumer c owning rows [64c, 64c + 64) of the tile.
//   Producer (one thread; the warpgroup gives its registers to the consumers with setmaxnreg): copies the Q
//   tile once, then K_j and V_j of every key tile j of the block's range into a ring of kStages stages,
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

namespace alpha::kernels::cuda::tma_forward {

using mma::FragA;
using mma::FragC;

// A configuration: head-dimension bucket, consumer warpgroups (each 64 query rows), keys per tile, stages
// of the ring, registers of a consumer and of the producer, blocks per SM (tma::WarpSpecialised).
template <int kHeadDimBucket, int kConsumerWarpgroups, int kKeysPerTile, int kRingStages, int kConsumerRegs,
          int kProducerRegs, int kBlocksPerSm>
struct TmaForwardConfig : tma::WarpSpecialised<kConsumerWarpgroups, kConsumerRegs, kProducerRegs, kBlocksPerSm> {
  static constexpr int kHeadDim = kHeadDimBucket, kKeys = kKeysPerTile, kStages = kRingStages;
};
// Measured on an H100 (2026-11-26, B·T 16384, H 2048/D, T 512 / 2048 / 8192, four configurations and the
// cp.async kernel this one replaced side by side in one call; ms, non-causal then causal):
// - D 128: two consumers, 128 keys, two stages, one block per SM: 0.212 / 0.536 / 1.816 and 0.170 / 0.345
//   / 1.000 (the cp.async kernel 0.253 / 0.770 / 2.846 and 0.198 / 0.468 / 1.573). 144 bytes of spills at
//   240 registers. 64 keys (four stages) and ping-pong (the consumers taking turns at the tensor cores
//   through named barriers, FlashAttention-3's schedule) were 3-57% slower at every T but 512 causal.
using TmaForward128 = TmaForwardConfig<128, 2, 128, 2, 240, 24, 1>;
// - D 64, long key ranges: three consumers (192 query rows a block, 160 registers each, 1476 bytes of
//   spills), 128 keys, two stages. On an H200 (2026-11-27, bench/tma_forward_configs.cu, ms, one call):
//   0.804 / 2.864 non-causal at T 2048 / 8192 and 1.581 causal at T 8192, against 0.838 / 2.985 and 1.599
//   for two consumers at 240 registers without spills (this bucket's configuration until then; 2.985 /
//   1.585 / 0.833 on the H100 above); a third stage 2-3% slower; 192 keys with two consumers 11-18% slower
//   (1420 bytes of spills), as were 176 keys at D 128 (1724 bytes): what the wider tiles save in
//   per-tile work the spills of their 96-register S tiles take back.
using TmaForward64Long = TmaForwardConfig<64, 3, 128, 2, 160, 32, 1>;
// - D 64, short key ranges (at most 1024 keys, or 2048 under a causal mask): 64 keys, four
//   stages, two blocks per SM at 104 registers (200 bytes of spills, and ptxas serialises the wgmma for want
//   of registers, C7512), so one block's start and end overlap the other's work: 0.265 non-causal and 0.204 / 0.498 causal at T 512 / 512 / 2048, against 0.300 and
//   0.247 / 0.516 for the two-consumer long shape and 0.272 and 0.198 / 0.517 for cp.async. Ping-pong lost here too.
using TmaForward64Short = TmaForwardConfig<64, 2, 64, 4, 104, 24, 2>;

template <class Traits>
struct TmaForwardShape {
  static constexpr int kHeadDim = Traits::kHeadDim, kKeys = Traits::kKeys, kStages = Traits::kStages;
  static constexpr int kThreads = Traits::kThreads;
  static constexpr int kRows = 64 * Traits::kConsumers;
  using QTile = wgmma::SwizzledTile<kRows, kHeadDim>;
  using KvTile = wgmma::SwizzledTile<kKeys, kHeadDim>;
  static constexpr size_t kTileBytes = size_t(QTile::kBytes) + 2 * kStages * size_t(KvTile::kBytes);
  // After the tiles: the Q barrier, then full and empty barriers of K and of V per stage.
  static constexpr size_t kSharedBytes = kTileBytes + (1 + 4 * kStages) * sizeof(uint64_t);
};

// The kernel's parameter: the arguments, and the operands' tensor maps (rank 4: features, heads, time,
// batch, innermost first; boxes of 64 features × 1 × rows × 1, 128-byte swizzled).
template <class T>
struct TmaForwardArgs {
  AttentionForwardArgs<T> args;
  CUtensorMap q, k, v;
};

template <class T, class Traits>
__global__ void __launch_bounds__(TmaForwardShape<Traits>::kThreads, Traits::kMinBlocks)
    tma_forward_kernel(const __grid_constant__ TmaForwardArgs<T> params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Shape = TmaForwardShape<Traits>;
  constexpr int kHeadDim = Traits::kHeadDim, kKeys = Traits::kKeys, kStages = Traits::kStages;
  constexpr int kN = kKeys / 8, kO = kHeadDim / 8;
  extern __shared__ __align__(1024) uint16_t shared[];
  const typename Shape::QTile q_tile{shared};
  // Key tile n of the block's range sits in stage n % kStages: k_tiles.next(stage), v_tiles.next(stage).
  const typename Shape::KvTile k_tiles{shared + Shape::QTile::kElements};
  const typename Shape::KvTile v_tiles = k_tiles.next(kStages);
  uint64_t* q_full = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(shared) + Shape::kTileBytes);
  const tma::KeyValueRing<kStages> ring(q_full + 1);
  if (threadIdx.x == 0) {
    tma::barrier_init(q_full, 1);
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
  [[maybe_unused]] const auto [bh, b, h, kv_head, i0, key_begin, key_end, whole_begin, whole_end] =
      query_tile(p, Shape::kRows);

  if (warpgroup == 0) {
    tma::shrink_registers<Traits::kProducerRegisters>();
    if (threadIdx.x == 0) {
      tma::prefetch_map(&params.q);
      tma::prefetch_map(&params.k);
      tma::prefetch_map(&params.v);
      tma::arrive_expect_bytes(q_full, Shape::QTile::kBytes);
      tma::load_tile(q_tile, params.q, q_full, i0, h, b);
      ring.produce(k_tiles, v_tiles, params.k, params.v, key_begin, key_end, kv_head, b);
    }
  } else {
    tma::grow_registers<Traits::kConsumerRegisters>();
    const int consumer = warpgroup - 1;
    // This thread's rows: i0 + row0 + g + 8·half, for C fragment values x with half = x / 2.
    const int row0 = 64 * consumer + 16 * (warp % 4);
    const Softcap softcap = softcap_of(p);
    const float scale_log2 = p.scale * kLog2e;
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

    tma::wait(q_full, 0);
    int n = 0;
    for (int64_t j0 = key_begin; j0 < key_end; j0 += kKeys, ++n) {
      const auto [stage, parity] = tma::ring_slot<kStages>(n);
      const bool group_sees_tile =
          group_has_rows && j0 < group_last_keys.end && j0 + kKeys > group_first_keys.begin;
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
        mma_forward::softmax_tile<T, 1, kN, false, false>(p, softcap, scale_log2, bh, i0 + row0, j0, lane, s, row_max,
                                                          row_sum, rescale);
      else
        mma_forward::softmax_tile<T, 1, kN, true, false>(p, softcap, scale_log2, bh, i0 + row0, j0, lane, s, row_max,
                                                         row_sum, rescale);
      wgmma::wait<0>();
      wgmma::hold(acc[0]);
      if (previous_stage >= 0) tma::hand_back(ring.v_empty + previous_stage, lane);
      mma_forward::rescale_rows(acc, rescale);
      mma::to_a_fragments<T>(probs, s);
      previous_stage = stage;
      previous_parity = parity;
    }
    finish_previous();
    mma_forward::store_rows<T, 1, kO>(a, b, h, bh, i0 + row0, lane, acc, row_max, row_sum);
  }
#else
  __trap();  // built without sm_90a: the host never launches this (wgmma_kernels_run)
#endif
}

// Launches the kernel of configuration Traits (the library's choice per bucket: flash_attention_tma_forward.cu;
// bench/tma_forward_configs.cu times others).
template <class T, class Traits>
void launch_tma_forward(const AttentionForwardArgs<T>& args, cudaStream_t stream) {
  using Shape = TmaForwardShape<Traits>;
  constexpr const char* kOp = "flash_attention_forward";
  const AttentionParams<T>& p = args.params;
  const TmaForwardArgs<T> params{
      args,
      tma::head_tensor_map(args.q, p.q_strides, p.batch, p.q_len, p.q_heads, p.head_dim, Shape::kRows, kOp, "q"),
      tma::head_tensor_map(args.k, p.k_strides, p.batch, p.kv_len, p.kv_heads, p.head_dim, Shape::kKeys, kOp, "k"),
      tma::head_tensor_map(args.v, p.v_strides, p.batch, p.kv_len, p.kv_heads, p.value_dim, Shape::kKeys, kOp, "v")};
  const dim3 grid(tile_count(p.q_len, Shape::kRows), heads_extent(p.batch * p.q_heads, kOp));
  launch_with_shared(tma_forward_kernel<T, Traits>, kOp, grid, Shape::kThreads, Shape::kSharedBytes, stream, params);
}

}  // namespace alpha::kernels::cuda::tma_forward
