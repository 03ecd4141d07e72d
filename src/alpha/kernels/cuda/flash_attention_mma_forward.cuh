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

// One key tile's online-softmax step for this thread's rows (first_row + 16m + g + 8·half, for C fragment
// values x with half = x / 2), in base-2 units (logits times log2 e, so that scale·log2 e is one multiply and
// exp2 takes the difference directly): s holds the tile's q·k dots (kN 8-key fragments from key j0) and
// leaves holding P̃ (dropped, unrounded); row_max (base 2) moves to the new maximum, this thread's share of
// row_sum is rescaled to it, and `rescale` receives the factor exp(m_old − m_new) per row, for the output
// accumulators (rescale_rows; the wgmma kernel applies it once the previous tile's P·V has landed in them).
// kMasked = false is for tiles wholly visible to every row of
// the block, which skip the mask's per-entry work: which variant runs depends on positions only, never on
// values. The mma.sync and wgmma forward kernels share it (their fragments have one layout).
// kSoftcap is p.softcap > 0, as a template so that the element loop carries no per-entry test of it (the
// compiler had put a branch around each entry's tanh: +15% forward at D 128 on wgmma, +2-12% on mma.sync,
// measured on an H100 side by side, 2026-11-22).
// kMayDrop = false is for callers that know p.dropout_p is 0 (the TMA forward instantiates both; NSA has
// no dropout): the dropout branch, though never taken, made ptxas keep the Philox state's registers live
// and spill (TMA forward, -Xptxas -v: 1476 -> 216 bytes at D 64 with three consumers, 144 -> 0 at D 128).
template <class T, int kM, int kN, bool kMasked, bool kSoftcap, bool kLeakyControl, bool kMayDrop>
__device__ __forceinline__ void softmax_tile_of(const AttentionParams<T>& p, Softcap softcap, float scale_log2,
                                                int64_t bh, int64_t first_row, int64_t j0, int lane, FragC (&s)[kM][kN],
                                                float (&row_max)[kM][2], float (&row_sum)[kM][2],
                                                float (&rescale)[kM][2]) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t i = first_row + 16 * m + g + 8 * half;
      // The row's visible keys as columns of this tile, [first_col, end_col) (worked out here rather than
      // held across tiles: registers are what limits the tile size).
      int first_col = 0, end_col = 8 * kN;
      if constexpr (kMasked) {
        const KeyRange keys = i < p.q_len ? visible_key_range(p, i) : KeyRange{0, 0};
        first_col = int(max(keys.begin - j0, int64_t(-1)));
        end_col = int(min(keys.end - j0, int64_t(8 * kN)));
      }
      // Without a softcap s keeps the raw dots: the scale (> 0, ops/attention.cpp) commutes with the
      // maximum, and exp2(s·scale·log2 e − base) is then one FFMA into the exponential, an instruction per
      // entry fewer where the issue slots are what limits (D 64).
      float tile_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int x = 2 * half; x < 2 * half + 2; ++x) {
          float logit = kSoftcap ? kLog2e * softcap.cap * fast_tanh(s[m][n].x[x] * p.scale * softcap.inverse)
                                 : s[m][n].x[x];
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
      const float logit_scale = kSoftcap ? 1.0f : scale_log2;  // what takes s to base-2 logits
      const float new_max = fmaxf(row_max[m][half], tile_max * logit_scale);
      const float base = select_float(new_max == -INFINITY, 0.0f, new_max);  // all masked so far: exps are 0
      rescale[m][half] = fast_exp2(row_max[m][half] - base);
      row_max[m][half] = new_max;
      row_sum[m][half] *= rescale[m][half];
#pragma unroll
      for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int x = 2 * half; x < 2 * half + 2; ++x) {
          const float prob = fast_exp2(fmaf(s[m][n].x[x], logit_scale, -base));
          row_sum[m][half] += prob;
          s[m][n].x[x] = prob;
        }
      if constexpr (kMayDrop) {
        if (p.dropout_p > 0 && i < p.q_len)
#pragma unroll
          for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int x = 2 * half; x < 2 * half + 2; ++x)
              s[m][n].x[x] *= attention_dropout_factor(p, bh, i, j0 + 8 * n + 2 * t + x % 2);
      }
    }
}

template <class T, int kM, int kN, bool kMasked, bool kLeakyControl, bool kMayDrop>
__device__ __forceinline__ void softmax_tile(const AttentionParams<T>& p, Softcap softcap, float scale_log2, int64_t bh,
                                             int64_t first_row, int64_t j0, int lane, FragC (&s)[kM][kN],
                                             float (&row_max)[kM][2], float (&row_sum)[kM][2],
                                             float (&rescale)[kM][2]) {
  if (softcap.cap > 0)
    softmax_tile_of<T, kM, kN, kMasked, true, kLeakyControl, kMayDrop>(p, softcap, scale_log2, bh, first_row, j0, lane,
                                                                       s, row_max, row_sum, rescale);
  else
    softmax_tile_of<T, kM, kN, kMasked, false, kLeakyControl, kMayDrop>(p, softcap, scale_log2, bh, first_row, j0, lane,
                                                                        s, row_max, row_sum, rescale);
}

// acc (this thread's rows, as softmax_tile's) *= the rows' rescale factors.
template <int kM, int kO>
__device__ __forceinline__ void rescale_rows(FragC (&acc)[kM][kO], const float (&rescale)[kM][2]) {
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int n = 0; n < kO; ++n)
#pragma unroll
      for (int x = 0; x < 4; ++x) acc[m][n].x[x] *= rescale[m][x / 2];
}

// The end of a forward block for this thread's rows (as softmax_tile's): out = O / l, row_max = m (natural
// units), row_sum = l (a row that saw no key: m = −inf, l = 0, out 0); rows past Tq write nothing.
template <class T, int kM, int kO>
__device__ __forceinline__ void store_rows(const AttentionForwardArgs<T>& a, int64_t b, int64_t h, int64_t bh,
                                           int64_t first_row, int lane, const FragC (&acc)[kM][kO],
                                           const float (&row_max)[kM][2], const float (&row_sum)[kM][2]) {
  const AttentionParams<T>& p = a.params;
  const int g = lane / 4, t = lane % 4, d_v = int(p.value_dim);
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = row_sum[m][half];
      sum += __shfl_xor_sync(kFullWarp, sum, 1);
      sum += __shfl_xor_sync(kFullWarp, sum, 2);
      const int64_t i = first_row + 16 * m + g + 8 * half;
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
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const auto [bh, b, h, kv_head, i0, key_begin, key_end, whole_begin, whole_end] = query_tile(p, Shape::kRows);
  const uint16_t* q_rows = head_rows(a.q, p.q_strides, b, h);
  const uint16_t* k_rows = head_rows(a.k, p.k_strides, b, kv_head);
  const uint16_t* v_rows = head_rows(a.v, p.v_strides, b, kv_head);
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

    float rescale[kM][2];
    if (j0 >= whole_begin && j0 + Traits::kKeys <= whole_end)
      softmax_tile<T, kM, kN, false, kLeakyControl, true>(p, softcap, scale_log2, bh, i0 + row0, j0, lane, s, row_max,
                                                          row_sum, rescale);
    else
      softmax_tile<T, kM, kN, true, kLeakyControl, true>(p, softcap, scale_log2, bh, i0 + row0, j0, lane, s, row_max,
                                                         row_sum, rescale);
    rescale_rows(acc, rescale);

    FragA probs[kM][kN / 2];
    to_a_fragments<T>(probs, s);
    warp_product_ab<T, kM, kO, Traits::kKeys>(acc, probs, v_tiles.next(stage), 0, 0, lane);
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }
  copy_async_wait<0>();  // no copy outlives the block (none pending when a key tile ran)

  store_rows<T, kM, kO>(a, b, h, bh, i0 + row0, lane, acc, row_max, row_sum);
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
