// Flash attention forward for bf16/f16 on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a):
// the same algorithm, options and outputs as the mma.sync kernel (flash_attention_mma_forward.cuh, whose
// softmax step and epilogue it calls), with the two products on wgmma (wgmma.cuh).
//
// One block per (query tile of 64·kWarpgroups rows, b·Hq + h); warpgroup w owns rows [64w, 64w + 64) and
// warp v of it rows 64w + 16v .. +16, as its wgmma accumulators lay them out. The block stages its Q tile in
// shared memory once and streams key tiles of kKeys keys through a cp.async ring of kStages stages, in the
// 128-byte swizzled layout wgmma reads. Per key tile j, per warpgroup:
//   issue S_j = Q·K_jᵀ (D/16 wgmma, 64 × kKeys × 16, Q and K from shared memory), then behind it
//   O += P̃_{j−1}·V_{j−1} (kKeys/16 wgmma, P̃ from registers by the C → A fragment identity, V from shared
//   memory read transposed, MN-major, so V needs no transposing copy);
//   wait for S_j only, and run the mma kernel's softmax step on it (masking, softcap, base-2 exponentials,
//   dropout) while the tensor cores work on P̃_{j−1}·V_{j−1};
//   wait for that, rescale O to the new row maxima, round P̃_j into A fragments for the next tile.
// So the ring holds tile j (being multiplied), tile j − 1 (its V still read) and the loads ahead. A warpgroup
// skips the tiles that none of its own 64 rows sees (the block's range is its rows' union: under a causal
// mask the first warpgroup's last tiles), and masks only the tiles its own rows need masked.
// Why it is faster than mma.sync: the 64-row warpgroup reads each K and V element from shared memory once per
// 64 rows (mma.sync: once per 16-row warp, through ldmatrix and registers), and wgmma runs at the Hopper
// tensor cores' full rate. Head-dimension buckets 64 and 128 (D and Dv padded with zeros to the bucket, as the
// mma kernels do: D 48 runs the 64 kernel); the other buckets run the mma kernels.
#pragma once
#include "alpha/kernels/cuda/flash_attention_mma_forward.cuh"
#include "alpha/kernels/cuda/wgmma.cuh"

namespace alpha::kernels::cuda::wgmma_forward {

using mma::FragA;
using mma::FragC;

// Per bucket: warpgroups per block (each 64 query rows), keys per tile, stages of the key ring, and the
// blocks per SM that the register budget is cut for (__launch_bounds__).
template <int kHeadDimBucket, int kWarpgroupsPerBlock, int kKeysPerTile, int kRingStages, int kBlocksPerSm>
struct WgmmaForwardConfig {
  static constexpr int kHeadDim = kHeadDimBucket, kWarpgroups = kWarpgroupsPerBlock, kKeys = kKeysPerTile,
                       kStages = kRingStages, kMinBlocks = kBlocksPerSm;
};
template <int kHeadDim>
struct WgmmaForwardTraits;
// D 64: two warpgroups, 64 keys, four stages, two blocks per SM (80 KiB of shared memory and 128 registers
// each, with 228 bytes of spill stores). At D 64 the exponentials take the SFU as long as the products take the tensor cores, so
// what pays is more warps per SM to overlap one warpgroup's softmax with another's products. Measured on an
// H200 (2026-11-26, eight configurations side by side, B·T 16384, H 32, T 512 / 2048 / 8192): 0.281 /
// 0.962 / 3.69 ms non-causal and 0.224 / 0.579 / 1.99 causal, against 0.317 / 1.029 / 3.91 and 0.249 /
// 0.611 / 2.06 for the earlier one warpgroup of 128 keys (two blocks per SM by shared memory). Three
// warpgroups of 128 keys (192 rows, one block) won at T 2048 and 8192 non-causal and T 8192 causal by 1.5-8%
// and lost causal T 512 and 2048 by 16-50%; one warpgroup of 64 keys at three blocks per SM won at causal
// T 512 and 2048 by 1-9% and lost non-causal by 4-6%. In a second call, with per-warpgroup key ranges, this
// configuration ran 0.279 / 0.945 / 3.61 and 0.205 / 0.542 / 1.90, and three warpgroups won only T 8192
// non-causal (by 2%).
template <>
struct WgmmaForwardTraits<64> : WgmmaForwardConfig<64, 2, 64, 4, 2> {};
// D 128: two warpgroups, 128 keys, three stages. Measured on an H100 (2026-11-22, T 512 to 8192, variants
// side by side in one run): +9-12% over 64 keys (the per-tile costs, the rescale of O among them, spread over
// twice the keys), despite 28 bytes of spills at the 255-register ceiling. One warpgroup per block, four or
// five stages, and ping-pong issue (warpgroup 1's products queued behind warpgroup 0's through a named
// barrier) were each 5-45% slower.
template <>
struct WgmmaForwardTraits<128> : WgmmaForwardConfig<128, 2, 128, 3, 1> {};

template <class Traits>
struct WgmmaForwardShape {
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kThreads = 128 * Traits::kWarpgroups;
  static constexpr int kRows = 64 * Traits::kWarpgroups;
  using QTile = wgmma::SwizzledTile<kRows, kHeadDim>;
  using KvTile = wgmma::SwizzledTile<Traits::kKeys, kHeadDim>;
  // kStages of the key ring: the tile being multiplied, the previous one (its P·V runs behind this one's
  // Q·Kᵀ), and kStages − 2 loading ahead.
  static constexpr int kStages = Traits::kStages, kAhead = kStages - 2;
  static_assert(kAhead >= 1, "at least one tile loads while one is multiplied");
  static constexpr size_t kSharedBytes = size_t(QTile::kBytes) + 2 * kStages * size_t(KvTile::kBytes);
};

template <class T, class Traits>
__global__ void __launch_bounds__(WgmmaForwardShape<Traits>::kThreads, Traits::kMinBlocks)
    wgmma_forward_kernel(AttentionForwardArgs<T> a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Shape = WgmmaForwardShape<Traits>;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kN = Traits::kKeys / 8, kO = kHeadDim / 8, kStages = Shape::kStages;
  extern __shared__ __align__(1024) uint16_t shared[];
  const typename Shape::QTile q_tile{shared};
  // Tile number n of the key range sits in stage n % kStages: k_tiles.next(stage), v_tiles.next(stage).
  const typename Shape::KvTile k_tiles{shared + Shape::QTile::kElements};
  const typename Shape::KvTile v_tiles = k_tiles.next(kStages);

  const AttentionParams<T>& p = a.params;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  // Read through a shuffle so the compiler knows it is the same in every lane: branches on it (the
  // warpgroup's key range below) are then not divergent, and the wgmma inside them are not serialised.
  const int warpgroup = __shfl_sync(kFullWarp, warp / 4, 0);
  // Masking is decided per warpgroup (below), not by the block's whole range.
  [[maybe_unused]] const auto [bh, b, h, kv_head, i0, key_begin, key_end, whole_begin, whole_end] =
      query_tile(p, Shape::kRows);
  const uint16_t* q_rows = head_rows(a.q, p.q_strides, b, h);
  const uint16_t* k_rows = head_rows(a.k, p.k_strides, b, kv_head);
  const uint16_t* v_rows = head_rows(a.v, p.v_strides, b, kv_head);
  const int d_qk = int(p.head_dim), d_v = int(p.value_dim);
  const Softcap softcap = softcap_of(p);
  const float scale_log2 = p.scale * kLog2e;
  auto load_keys = [&](int64_t j0, int stage) {
    wgmma::load_tile_async<Shape::kThreads>(k_tiles.next(stage), k_rows, p.k_strides.time, j0, p.kv_len, d_qk);
    wgmma::load_tile_async<Shape::kThreads>(v_tiles.next(stage), v_rows, p.v_strides.time, j0, p.kv_len, d_v);
  };
  // Tiles 0 .. kAhead − 1 (and q with the first), one cp.async group each.
  wgmma::load_tile_async<Shape::kThreads>(q_tile, q_rows, p.q_strides.time, i0, p.q_len, d_qk);
#pragma unroll
  for (int n = 0; n < Shape::kAhead; ++n) {
    if (key_begin + n * Traits::kKeys < key_end) load_keys(key_begin + n * Traits::kKeys, n);
    mma::copy_async_commit();
  }

  // This thread's rows: i0 + row0 + g + 8·half, for C fragment values x with half = x / 2.
  const int row0 = 16 * warp;
  // This warpgroup's keys: the block's range is its rows' union, so under a causal mask or a window the
  // warpgroup skips the key tiles none of its 64 rows sees, and masks only where its own rows need it.
  const int64_t group_first_row = i0 + 64 * warpgroup;
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
  auto issue_pv = [&](int stage) {
#pragma unroll
    for (int k = 0; k < kN / 2; ++k)
      wgmma::product_rs<T, kHeadDim>(acc[0], probs[0][k], v_tiles.next(stage).mn_major(k));
    wgmma::commit();
  };

  int stage = 0;
  for (int64_t j0 = key_begin; j0 < key_end; j0 += Traits::kKeys) {
    mma::copy_async_wait<Shape::kAhead - 1>();
    wgmma::fence_async_proxy();
    // This tile's k and v (and the first time q) are in shared memory, and every warpgroup is done with the
    // tile before the previous one, whose stage the next load refills.
    __syncthreads();
    const int next_stage = stage + 1 == kStages ? 0 : stage + 1;
    const int load_stage = stage >= 2 ? stage - 2 : stage + kStages - 2;  // the stage of tile j − 2
    const int64_t load_j0 = j0 + Shape::kAhead * Traits::kKeys;
    if (load_j0 < key_end) load_keys(load_j0, load_stage);
    mma::copy_async_commit();

    const bool group_sees_tile =
        group_has_rows && j0 < group_last_keys.end && j0 + Traits::kKeys > group_first_keys.begin;
    if (!group_sees_tile) {
      // The tiles this warpgroup sees are consecutive: finish the last one's P̃·V while its V is in the ring.
      if (previous_stage >= 0) {
        wgmma::fence();
        issue_pv(previous_stage);
        wgmma::wait<0>();
        wgmma::hold(acc[0]);
        previous_stage = -1;
      }
      stage = next_stage;
      continue;
    }
    // S = Q·Kᵀ, then the previous tile's O += P̃·V behind it; the softmax below runs while P̃·V does.
    FragC s[1][kN];
    wgmma::fence();
#pragma unroll
    for (int k = 0; k < kHeadDim / 16; ++k)
      wgmma::product_ss<T, Traits::kKeys>(s[0], q_tile.k_major(64 * warpgroup, k), k_tiles.next(stage).k_major(0, k),
                                          k > 0);
    wgmma::commit();
    if (previous_stage >= 0) issue_pv(previous_stage);
    if (previous_stage >= 0)
      wgmma::wait<1>();
    else
      wgmma::wait<0>();
    wgmma::hold(s[0]);

    float rescale[1][2];
    if (j0 >= group_last_keys.begin && j0 + Traits::kKeys <= group_first_keys.end)
      mma_forward::softmax_tile<T, 1, kN, false, false>(p, softcap, scale_log2, bh, i0 + row0, j0, lane, s, row_max,
                                                        row_sum, rescale);
    else
      mma_forward::softmax_tile<T, 1, kN, true, false>(p, softcap, scale_log2, bh, i0 + row0, j0, lane, s, row_max,
                                                       row_sum, rescale);
    wgmma::wait<0>();
    wgmma::hold(acc[0]);
    mma_forward::rescale_rows(acc, rescale);
    mma::to_a_fragments<T>(probs, s);
    previous_stage = stage;
    stage = next_stage;
  }
  if (previous_stage >= 0) {
    wgmma::fence();
    issue_pv(previous_stage);
    wgmma::wait<0>();
    wgmma::hold(acc[0]);
  }
  mma::copy_async_wait<0>();  // no copy outlives the block

  mma_forward::store_rows<T, 1, kO>(a, b, h, bh, i0 + row0, lane, acc, row_max, row_sum);
#else
  __trap();  // built without sm_90a: the host never launches this (wgmma_kernels_run)
#endif
}

// Queues the kernel of one bucket over every (query tile, b·Hq + h).
template <class T, class Traits>
void launch_wgmma_forward(const AttentionForwardArgs<T>& args, cudaStream_t stream) {
  using Shape = WgmmaForwardShape<Traits>;
  const AttentionParams<T>& p = args.params;
  const dim3 grid(tile_count(p.q_len, Shape::kRows), heads_extent(p.batch * p.q_heads, "flash_attention_forward"));
  launch_with_shared(wgmma_forward_kernel<T, Traits>, "flash_attention_forward", grid, Shape::kThreads,
                     Shape::kSharedBytes, stream, args);
}

}  // namespace alpha::kernels::cuda::wgmma_forward
