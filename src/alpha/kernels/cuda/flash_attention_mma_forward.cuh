// The tensor-core flash attention forward kernel, for flash_attention_mma_forward.cu (which instantiates it
// for the library) and the constant-time checks (bench/constant_time.cu, which also build the leaky control).
//
// Flash attention forward for bf16/f16 on the tensor cores (FlashAttention-2's forward; shared pieces and
// the precision contract in flash_attention_mma.cuh).
//
// One block per (query tile of kRows rows, b·Hq + h); each warp owns 16·kMTiles consecutive query rows.
// The block stages its Q tile in shared memory once and streams the key tiles of the tile's visible range
// through a two-stage cp.async ring (tile t + 1 loads while tile t computes). Per key tile, per warp:
//   S = Q·Kᵀ on the tensor cores, into f32 registers (kMTiles × kKeys/8 C fragments);
//   S = softcap(S·scale), masked to −inf where the tile is not wholly visible to the block's rows (tiles
//   that are skip the mask's work);
//   online softmax in f32, in base 2 (S·log2 e, exp2): m_new = max(m, rowmax S), O and l rescaled by
//   exp(m − m_new), P = exp(S − m_new);
//   l += rowsum P (undropped), P̃ = P∘Z with the reference's Philox mask;
//   O += P̃·V, P̃ rounded to T in the registers that held S (the C → A fragment identity in mma.cuh).
// At the end out = O / l, row_max = m, row_sum = l (a row that sees no key: m = −inf, l = 0, out 0).
// Query tiles are scheduled last-first, so under a causal mask the longest rows start first.
#pragma once
#include "alpha/kernels/cuda/flash_attention_mma.cuh"
#include "alpha/kernels/cuda/mma.cuh"

namespace alpha::kernels::cuda::mma_forward {

using namespace mma;

// The constant-time checks' positive control (bench/constant_time.cu instantiates the kernel with
// kLeakyControl; the library never does): a branch on the sign of a score, doing extra work when it is
// positive, the kind of value-dependent control flow that the SASS audit, the timing test and the counter
// differential must each catch. The work feeds the result (as + 0·spin, which leaves the logit's bits), or
// the compiler would delete it and the branch with it.
__device__ __forceinline__ float leak_on_positive(float logit) {
  float spin = 1.0f;
  if (logit > 0.0f) {
#pragma unroll 1
    for (int r = 0; r < 16; ++r) spin = fast_exp2(-spin);
  }
  return logit + 0.0f * spin;
}

// Per bucket: warps per block, 16-row tiles per warp, keys per tile, and kMinBlocks, the blocks per SM the
// register allocation must allow (left free, the compiler spends registers on scheduling freedom and fewer
// blocks fit). Measured on an H100 (2026-11-22, D 64 and 128 at T 512, 2048 and 8192, five variants side by
// side in one run): small blocks, several per SM, so that one block's softmax overlaps another's products (a
// block's warps move through the phases of a key tile together, between its barriers). D 64: 4 warps × 16
// rows, 4 blocks per SM, +3-12% over 8 warps, 2 per SM; two row tiles per warp (fewer K and V fragment
// loads per product) lost 10-30% to the registers they take. D 128: 8 warps × 16 rows, 32 keys, +4-5% over
// 4 warps × 32 rows.
template <int kHeadDim>
struct ForwardTraits {
  static constexpr int kWarps = 4, kMTiles = 1, kKeys = 64, kMinBlocks = 3;
};
template <>
struct ForwardTraits<32> {
  static constexpr int kWarps = 4, kMTiles = 2, kKeys = 64, kMinBlocks = 2;
};
template <>
struct ForwardTraits<256> {
  static constexpr int kWarps = 4, kMTiles = 1, kKeys = 32, kMinBlocks = 1;
};
template <>
struct ForwardTraits<64> {
  static constexpr int kWarps = 4, kMTiles = 1, kKeys = 64, kMinBlocks = 4;
};
template <>
struct ForwardTraits<128> {
  static constexpr int kWarps = 8, kMTiles = 1, kKeys = 32, kMinBlocks = 2;
};

template <int kHeadDim>
struct ForwardShape {
  using Traits = ForwardTraits<kHeadDim>;
  static constexpr int kThreads = 32 * Traits::kWarps;
  static constexpr int kRows = 16 * Traits::kMTiles * Traits::kWarps;
  using QTile = SharedTile<kRows, kHeadDim>;
  using KvTile = SharedTile<Traits::kKeys, kHeadDim>;
  static constexpr size_t kSharedBytes = (QTile::kElements + 4 * KvTile::kElements) * sizeof(uint16_t);
};

template <class T, int kHeadDim, bool kLeakyControl = false>
__global__ void __launch_bounds__(ForwardShape<kHeadDim>::kThreads, ForwardTraits<kHeadDim>::kMinBlocks)
    mma_forward_kernel(AttentionForwardArgs<T> a) {
  using Shape = ForwardShape<kHeadDim>;
  using Traits = typename Shape::Traits;
  constexpr int kM = Traits::kMTiles, kN = Traits::kKeys / 8, kO = kHeadDim / 8;
  extern __shared__ __align__(16) uint16_t shared[];
  const typename Shape::QTile q_tile{shared};
  // Stage s of the ring: k_tiles.next(s), v_tiles.next(s).
  const typename Shape::KvTile k_tiles{shared + Shape::QTile::kElements};
  const typename Shape::KvTile v_tiles = k_tiles.next(2);

  const AttentionParams<T>& p = a.params;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y;
  const auto [b, h, kv_head, group] = query_heads_of_row(p, blockIdx.y);
  const int64_t i0 = int64_t(gridDim.x - 1 - blockIdx.x) * Shape::kRows;
  const int64_t last_row = tile_last_row(i0, Shape::kRows, p.q_len);
  const int64_t key_begin = visible_key_range(p, i0).begin, key_end = visible_key_range(p, last_row).end;
  // Key tiles in [whole_begin, whole_end) are visible to every row of the block: no masking there.
  const int64_t whole_begin = visible_key_range(p, last_row).begin, whole_end = visible_key_range(p, i0).end;

  const uint16_t* q_rows = bits(a.q) + b * p.q_strides.batch + h * p.q_strides.head;
  const uint16_t* k_rows = bits(a.k) + b * p.k_strides.batch + kv_head * p.k_strides.head;
  const uint16_t* v_rows = bits(a.v) + b * p.v_strides.batch + kv_head * p.v_strides.head;
  const int d_qk = int(p.head_dim), d_v = int(p.value_dim);
  const Softcap softcap = softcap_of(p);
  const float scale_log2 = p.scale * kLog2e;
  auto load_keys = [&](int64_t j0, int stage) {
    load_tile_async<Shape::kThreads>(k_tiles.next(stage), k_rows, p.k_strides.time, j0, p.kv_len, d_qk);
    load_tile_async<Shape::kThreads>(v_tiles.next(stage), v_rows, p.v_strides.time, j0, p.kv_len, d_v);
  };
  load_tile_async<Shape::kThreads>(q_tile, q_rows, p.q_strides.time, i0, p.q_len, d_qk);
  if (key_begin < key_end) load_keys(key_begin, 0);
  copy_async_commit();

  // This thread's rows: i0 + row0 + 16m + g + 8·half, for C fragment values x with half = x / 2.
  const int row0 = warp * 16 * kM;

  // row_max in base-2 units (m·log2 e) until the end; row_sum: this thread's columns only, until the end.
  float row_max[kM][2], row_sum[kM][2];
  FragC acc[kM][kO];
  zero(acc);
#pragma unroll
  for (int m = 0; m < kM; ++m) row_max[m][0] = row_max[m][1] = -INFINITY, row_sum[m][0] = row_sum[m][1] = 0.0f;

  int stage = 0;
  for (int64_t j0 = key_begin; j0 < key_end; j0 += Traits::kKeys, stage ^= 1) {
    if (j0 + Traits::kKeys < key_end) load_keys(j0 + Traits::kKeys, stage ^ 1);
    copy_async_commit();
    copy_async_wait<1>();
    __syncthreads();  // this stage's k, v (and the first time q) are in shared memory

    FragC s[kM][kN];
    zero(s);
    warp_product_abt<T, kM, kN, kHeadDim>(s, q_tile, row0, k_tiles.next(stage), 0, lane);

    // The softmax step, in base-2 units (logits times log2 e, so that scale·log2 e is one multiply and
    // exp2 takes the difference directly). Tiles wholly visible to every row of the block skip the mask's
    // per-entry work: which variant runs depends on positions only, never on values.
    auto softmax_step = [&]<bool kMasked>() {
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t i = i0 + row0 + 16 * m + g + 8 * half;
          // The row's visible keys as columns of this tile, [first_col, end_col) (worked out here rather
          // than held across tiles: registers are what limits the tile size).
          int first_col = 0, end_col = Traits::kKeys;
          if constexpr (kMasked) {
            const KeyRange keys = i < p.q_len ? visible_key_range(p, i) : KeyRange{0, 0};
            first_col = int(max(keys.begin - j0, int64_t(-1)));
            end_col = int(min(keys.end - j0, int64_t(Traits::kKeys)));
          }
          float tile_max = -INFINITY;
#pragma unroll
          for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int x = 2 * half; x < 2 * half + 2; ++x) {
              float logit = attention_logit_log2(p, softcap, scale_log2, s[m][n].x[x]);
              if constexpr (kMasked) {
                const int col = 8 * n + 2 * t + x % 2;
                if (col < first_col || col >= end_col) logit = -INFINITY;
              }
              if constexpr (kLeakyControl) logit = leak_on_positive(logit);
              s[m][n].x[x] = logit;
              tile_max = fmaxf(tile_max, logit);
            }
          tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarp, tile_max, 1));
          tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarp, tile_max, 2));
          const float new_max = fmaxf(row_max[m][half], tile_max);
          const float base = select_float(new_max == -INFINITY, 0.0f, new_max);  // all masked so far: exps are 0
          const float rescale = fast_exp2(row_max[m][half] - base);
          row_max[m][half] = new_max;
          row_sum[m][half] *= rescale;
#pragma unroll
          for (int n = 0; n < kO; ++n) acc[m][n].x[2 * half] *= rescale, acc[m][n].x[2 * half + 1] *= rescale;
#pragma unroll
          for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int x = 2 * half; x < 2 * half + 2; ++x) {
              const float prob = fast_exp2(s[m][n].x[x] - base);
              row_sum[m][half] += prob;
              s[m][n].x[x] = prob;
            }
          if (p.dropout_p > 0 && i < p.q_len)
#pragma unroll
            for (int n = 0; n < kN; ++n)
#pragma unroll
              for (int x = 2 * half; x < 2 * half + 2; ++x)
                s[m][n].x[x] *= attention_dropout_factor(p, bh, i, j0 + 8 * n + 2 * t + x % 2);
        }
    };
    if (j0 >= whole_begin && j0 + Traits::kKeys <= whole_end)
      softmax_step.template operator()<false>();
    else
      softmax_step.template operator()<true>();

    FragA probs[kM][kN / 2];
    to_a_fragments<T>(probs, s);
    warp_product_ab<T, kM, kO, Traits::kKeys>(acc, probs, v_tiles.next(stage), 0, 0, lane);
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }
  copy_async_wait<0>();  // no copy outlives the block (none pending when a key tile ran)

#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = row_sum[m][half];
      sum += __shfl_xor_sync(kFullWarp, sum, 1);
      sum += __shfl_xor_sync(kFullWarp, sum, 2);
      const int64_t i = i0 + row0 + 16 * m + g + 8 * half;
      if (i >= p.q_len) continue;
      const float inverse = select_float(sum > 0.0f, fast_reciprocal(sum), 0.0f);
      uint16_t* out = bits(a.out) + ((b * p.q_len + i) * p.q_heads + h) * p.value_dim;
#pragma unroll
      for (int n = 0; n < kO; ++n) {
        const int col = 8 * n + 2 * t;
        if (col < d_v)
          *reinterpret_cast<uint32_t*>(out + col) =
              pack2<T>(acc[m][n].x[2 * half] * inverse, acc[m][n].x[2 * half + 1] * inverse);
      }
      if (t == 0) {
        a.row_max[bh * p.q_len + i] = row_max[m][half] * kLn2;
        a.row_sum[bh * p.q_len + i] = sum;
      }
    }
}

// Queues the kernel of one bucket over every (query tile, b·Hq + h).
template <class T, int kHeadDim, bool kLeakyControl = false>
void launch_mma_forward(const AttentionForwardArgs<T>& args, cudaStream_t stream) {
  using Shape = ForwardShape<kHeadDim>;
  const AttentionParams<T>& p = args.params;
  const dim3 grid(tile_count(p.q_len, Shape::kRows), heads_extent(p.batch * p.q_heads, "flash_attention_forward"));
  launch_with_shared(mma_forward_kernel<T, kHeadDim, kLeakyControl>, "flash_attention_forward", grid, Shape::kThreads,
                     Shape::kSharedBytes, stream, args);
}

}  // namespace alpha::kernels::cuda::mma_forward
