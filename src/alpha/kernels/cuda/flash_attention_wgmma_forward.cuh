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
// So the ring holds tile j (being multiplied), tile j − 1 (its V still read) and the loads ahead.
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

// Per bucket: warpgroups per block (each 64 query rows) and keys per tile.
// Measured on an H100 (2026-11-22, T 512 to 8192, variants side by side in one run): D 128 two warpgroups,
// 128 keys, three stages: +9-12% over 64 keys (the per-tile costs, the rescale of O among them, spread over
// twice the keys), despite 28 bytes of spills at the 255-register ceiling. One warpgroup per block, four or
// five stages, and ping-pong issue (warpgroup 1's products queued behind warpgroup 0's through a named
// barrier) were each 5-45% slower. D 64: one warpgroup, 128 keys (several blocks per SM, out of phase with
// each other): 218-281 TFLOP/s against 184-208 for the mma.sync kernel at T 512-8192 non-causal (two
// warpgroups 201-280, 64 keys 185-249).
template <int kHeadDim>
struct WgmmaForwardTraits;
template <>
struct WgmmaForwardTraits<64> {
  static constexpr int kWarpgroups = 1, kKeys = 128, kStages = 3;
};
template <>
struct WgmmaForwardTraits<128> {
  static constexpr int kWarpgroups = 2, kKeys = 128, kStages = 3;
};

template <int kHeadDim>
struct WgmmaForwardShape {
  using Traits = WgmmaForwardTraits<kHeadDim>;
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

template <class T, int kHeadDim>
__global__ void __launch_bounds__(WgmmaForwardShape<kHeadDim>::kThreads, 1)
    wgmma_forward_kernel(AttentionForwardArgs<T> a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Shape = WgmmaForwardShape<kHeadDim>;
  using Traits = typename Shape::Traits;
  constexpr int kN = Traits::kKeys / 8, kO = kHeadDim / 8, kStages = Shape::kStages;
  extern __shared__ __align__(1024) uint16_t shared[];
  const typename Shape::QTile q_tile{shared};
  // Tile number n of the key range sits in stage n % kStages: k_tiles.next(stage), v_tiles.next(stage).
  const typename Shape::KvTile k_tiles{shared + Shape::QTile::kElements};
  const typename Shape::KvTile v_tiles = k_tiles.next(kStages);

  const AttentionParams<T>& p = a.params;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, warpgroup = warp / 4;
  const auto [bh, b, h, kv_head, i0, key_begin, key_end, whole_begin, whole_end] = query_tile(p, Shape::kRows);
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
    if (j0 >= whole_begin && j0 + Traits::kKeys <= whole_end)
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
template <class T, int kHeadDim>
void launch_wgmma_forward(const AttentionForwardArgs<T>& args, cudaStream_t stream) {
  using Shape = WgmmaForwardShape<kHeadDim>;
  const AttentionParams<T>& p = args.params;
  const dim3 grid(tile_count(p.q_len, Shape::kRows), heads_extent(p.batch * p.q_heads, "flash_attention_forward"));
  launch_with_shared(wgmma_forward_kernel<T, kHeadDim>, "flash_attention_forward", grid, Shape::kThreads,
                     Shape::kSharedBytes, stream, args);
}

}  // namespace alpha::kernels::cuda::wgmma_forward
