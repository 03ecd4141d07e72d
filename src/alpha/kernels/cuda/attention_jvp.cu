// The attention JVP on CUDA (kernels/attention_jvp.h: the contract, the formulas and why): the tangent tO
// of O = softmax(S)·V along (tq, tk, tv), in the two forms of the CPU kernels, with the same argument
// structs and conventions (bottom-right causal mask and sliding window through visible_key_range, softcap,
// GQA/MQA, Tq != Tk, Dv != D, strided q/k/v, rows that see no key: O = 0, tO = 0, m = −inf, l = 0).
//
// One flash-style streaming pass per (query tile, b, h), as flash attention's f32 forward
// (flash_attention.cu, building blocks in attention_fma_tiles.cuh): the tile's q and tq rows stay in shared
// memory while the key tiles of its visible range go by (k, tk, v, tv staged in shared memory as f32);
// per key tile, for every visible entry, S = softcap(q·kᵀ·scale) and
// tS = (tq·kᵀ + q·tkᵀ)·scale·(1 − (S/c)²) in one loop over D; then the row's weights and the register
// accumulators of its Dv columns, f32 throughout. Nothing of size Tq×Tk ever reaches global memory: the
// scores exist one tile at a time in shared memory, so the memory beyond the operands is O(B·Hq·Tq).
// - Saved statistics (attention_jvp): P = exp(S − m)/l from the forward's m, l; μ += P·tS,
//   acc += (P·tS)·V_j + P·tv_j; at the end tO = acc − μ∘O with O the forward's output.
// - Fused (attention_jvp_fused): the online softmax of flash attention: a running max m (a constant shift,
//   not differentiated), e = exp(S − m), and l = Σe, r = Σe·tS, acc_o = Σe·V_j, rescaled by exp(m_old − m_new)
//   when m grows; at the end O = acc_o/l and the statistics m, l of the forward. The tangent accumulates
//   centred, acc_t = Σ e·(tS − c)·V_j + e·tv_j with c the running μ = r/l (after each key tile's l and r, and
//   when c moves, acc_t −= (c_new − c_old)·acc_o), so that at the end tO = acc_t/l (the true JVP) with no
//   subtraction of μ∘O: where |tS| ≫ |tO| (logits of ~1e4, whose tangent scores are ~1e4 too) the
//   uncentred Σ(e·tS)·V/l − μ∘O would cancel to rounding noise, as the CPU kernel's does in f32.
// In the FMA kernel each row accumulates only the keys it sees (not the masked entries of its tile): a NaN or
// inf in a key it does not see cannot reach it, as on the CPU.
//
// FLOPs, per visible (query, key) pair, counting a multiply-add as 2 (the convention of the forward's
// 4·D per pair, D = Dv): the forward does q·k (2D) and P·V (2Dv). The fused JVP does q·k (2D), tq·k and q·tk
// (4D), e·V (2Dv), (e·tS)·V and e·tv (4Dv): 6D + 6Dv, three times the forward's matrix work. The
// saved-statistics JVP skips e·V: 6D + 4Dv. The element-wise work (exp, softcap, the rescaling) is O(1) per
// pair and not counted. Causal attention has Tq(Tq + 1)/2 pairs per head for Tq = Tk; full has Tq·Tk.
//
// Two kernels compute this. The FMA kernel takes every dtype and both forms: bf16/f16 are converted to f32 in
// shared memory, so the only rounding to T is the outputs'; D and Dv from 1 to 256 (buckets 64, 128, 256 of
// the wider; wider raises ShapeError). The tensor-core kernel (mma.cuh, as flash attention's bf16/f16
// forward) takes the fused form in bf16/f16, and the saved-statistics form when args.tensor_cores asks (as
// ops::attention_jvp does), when D and Dv are multiples of 8 up to 128 and q, k, v rows are 16-byte aligned:
// the products of a key tile on mma.m16n8k16 with f32 accumulators (Q·Kᵀ, TQ·Kᵀ, Q·TKᵀ, then the weights
// times V and TV: three for the fused form, two for the saved one), the weights rounded to T before their
// products as FlashAttention rounds P (see mma_jvp_kernel); there a masked key inside a row's key tile
// contributes 0·v, so an inf or NaN in a v or tv the row does not see may reach it.
// Determinism: no atomics; every output element is owned by one thread (or fragment lane) that adds its
// terms in key order, and row reductions use fixed shuffle trees: every run gives the same bits.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "alpha/kernels/attention_jvp.h"
#include "alpha/kernels/cuda/attention_common.cuh"
#include "alpha/kernels/cuda/attention_fma_tiles.cuh"
#include "alpha/kernels/cuda/common.cuh"
#include "alpha/kernels/cuda/flash_attention_mma.cuh"
#include "alpha/kernels/cuda/mma.cuh"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

namespace {

using namespace fma_tiles;
static_assert(kAttentionJvpMaxHeadDim == kMaxHeadDim, "the buckets end at the declared widest head dimension");

// Tile shapes per head-dimension bucket: the q, tq tiles (queries × D), the k, tk, v, tv tiles (keys × D or
// Dv) and the two weight tiles (queries × keys) in 82, 106 and 133 KiB of shared memory at D = Dv = bucket;
// a thread holds two accumulators of 16, 16 and 32 columns.
template <int kBucket>
struct JvpTraits;
template <>
struct JvpTraits<64> {
  static constexpr Tiling kTile{64, 32};
};
template <>
struct JvpTraits<128> {
  static constexpr Tiling kTile{32, 32};
};
template <>
struct JvpTraits<256> {
  static constexpr Tiling kTile{32, 16};
};

// Shared memory of both kernels.
template <Tiling kT>
struct JvpShared {
  SharedTile q, tq;  // (queries × D)
  SharedTile k, tk;  // (keys × D)
  SharedTile v, tv;  // (keys × Dv)
  // (queries × keys) per entry: saved statistics P and P·tS; fused S and tS, then e and tS
  SharedTile weight, tangent_weight;
  SharedTile stats;  // (2 × queries): the saved form's row_max, row_sum
  int64_t floats;
  __host__ __device__ JvpShared(float* base, int d, int dv) {
    Carver c{base};
    q = c.take(kT.queries, d), tq = c.take(kT.queries, d);
    k = c.take(kT.keys, d), tk = c.take(kT.keys, d), v = c.take(kT.keys, dv), tv = c.take(kT.keys, dv);
    weight = c.take(kT.queries, kT.keys), tangent_weight = c.take(kT.queries, kT.keys);
    stats = c.take(2, kT.queries);
    floats = c.used;
  }
};

// dS/dS_raw through the softcap, from the capped score S = c·tanh(S_raw/c): 1 − (S/c)²; 1 without one.
template <class T>
__device__ float softcap_slope(const AttentionParams<T>& p, float s) {
  if (!(p.softcap > 0)) return 1.0f;
  const float t = s / p.softcap;
  return 1.0f - t * t;
}

// The keys [begin, end) of the tile starting at key j0 (kKeys keys) that row `keys` covers, as tile columns.
template <int kKeys>
__device__ KeyRange tile_columns(KeyRange keys, int64_t j0) {
  const int64_t begin = keys.begin - j0, end = keys.end - j0;
  return {begin < 0 ? 0 : begin > kKeys ? kKeys : begin, end < 0 ? 0 : end > kKeys ? kKeys : end};
}

// The argument struct of each form.
template <class T, bool kFused>
using JvpArgsOf = std::conditional_t<kFused, AttentionJvpFusedArgs<T>, AttentionJvpArgs<T>>;

// Grid (query tile, b·Hq + h); kFused selects the form.
template <class T, int kBucket, bool kFused>
__global__ void __launch_bounds__(kThreads) jvp_kernel(JvpArgsOf<T, kFused> a) {
  constexpr Tiling kT = JvpTraits<kBucket>::kTile;
  using Rows = RowOwnership<kT.queries, kBucket>;
  extern __shared__ float shared[];
  const AttentionParams<T>& p = a.params;
  const AttentionJvpInputs<T>& in = a.in;
  const int d_qk = int(p.head_dim), d_v = int(p.value_dim);
  const JvpShared<kT> sh(shared, d_qk, d_v);
  const int64_t bh = blockIdx.y, b = bh / p.q_heads, h = bh % p.q_heads, kv_head = h / (p.q_heads / p.kv_heads);
  const int64_t i0 = int64_t(blockIdx.x) * kT.queries;
  const int rows_here = rows_in_tile(i0, kT.queries, p.q_len);
  // q, k, v strided; tq (B, Tq, Hq, D), tk (B, Tk, Hkv, D), tv (B, Tk, Hkv, Dv) contiguous.
  const Bits<T>* k_rows = bits(in.k) + b * p.k_strides.batch + kv_head * p.k_strides.head;
  const Bits<T>* v_rows = bits(in.v) + b * p.v_strides.batch + kv_head * p.v_strides.head;
  const Bits<T>* tk_rows = bits(in.tk) + (b * p.kv_len * p.kv_heads + kv_head) * p.head_dim;
  const Bits<T>* tv_rows = bits(in.tv) + (b * p.kv_len * p.kv_heads + kv_head) * p.value_dim;
  load_rows<T>(sh.q, bits(in.q) + b * p.q_strides.batch + h * p.q_strides.head, p.q_strides.time, i0, p.q_len,
               kT.queries, d_qk);
  load_rows<T>(sh.tq, bits(in.tq) + (b * p.q_len * p.q_heads + h) * p.head_dim, p.q_heads * p.head_dim, i0, p.q_len,
               kT.queries, d_qk);
  if constexpr (!kFused) {
    for (int r = threadIdx.x; r < kT.queries; r += kThreads) {
      const int64_t i = i0 + r;  // rows past Tq have no visible entry: their statistics are never read
      sh.stats(0, r) = i < p.q_len ? a.row_max[bh * p.q_len + i] : 0.0f;
      sh.stats(1, r) = i < p.q_len ? a.row_sum[bh * p.q_len + i] : 1.0f;
    }
  }

  const Rows own;
  const int64_t i = i0 + own.row;
  const KeyRange row_keys = i < p.q_len ? visible_key_range(p, i) : KeyRange{0, 0};
  // Saved: mu = Σ P·tS, acc_tangent = Σ (P·tS)·V_j + P·tv_j. Fused: m, l = Σe, mu = Σe·tS (r of the header),
  // acc_out = Σ e·V_j, acc_tangent = Σ e·(tS − centre)·V_j + e·tv_j, against the running max m.
  float m = -INFINITY, l = 0.0f, mu = 0.0f, centre = 0.0f, acc_out[Rows::kWidth] = {}, acc_tangent[Rows::kWidth] = {};
  const KeyRange keys = tile_key_range(p, i0, rows_here);
  for (int64_t j0 = keys.begin; j0 < keys.end; j0 += kT.keys) {
    load_rows<T>(sh.k, k_rows, p.k_strides.time, j0, p.kv_len, kT.keys, d_qk);
    load_rows<T>(sh.tk, tk_rows, p.kv_heads * p.head_dim, j0, p.kv_len, kT.keys, d_qk);
    load_rows<T>(sh.v, v_rows, p.v_strides.time, j0, p.kv_len, kT.keys, d_v);
    load_rows<T>(sh.tv, tv_rows, p.kv_heads * p.value_dim, j0, p.kv_len, kT.keys, d_v);
    __syncthreads();  // q, tq, stats (first pass), k, tk, v, tv loaded
    for (int e = threadIdx.x; e < kT.queries * kT.keys; e += kThreads) {
      const int r = e / kT.keys, c = e % kT.keys;
      float weight = kFused ? -INFINITY : 0.0f, tangent_weight = 0.0f;
      if (visible(p, i0 + r, j0 + c)) {
        float qk = 0.0f, tangent_qk = 0.0f;  // q·k and tq·k + q·tk
        for (int d = 0; d < d_qk; ++d) {
          const float qd = sh.q(r, d), kd = sh.k(c, d);
          qk = fmaf(qd, kd, qk);
          tangent_qk = fmaf(sh.tq(r, d), kd, fmaf(qd, sh.tk(c, d), tangent_qk));
        }
        const float s = score(p, qk);
        const float tangent_score = tangent_qk * p.scale * softcap_slope(p, s);
        if constexpr (kFused) {
          weight = s, tangent_weight = tangent_score;
        } else {
          weight = expf(s - sh.stats(0, r)) / sh.stats(1, r);
          tangent_weight = weight * tangent_score;
        }
      }
      sh.weight(r, c) = weight;
      sh.tangent_weight(r, c) = tangent_weight;
    }
    __syncthreads();
    const KeyRange columns = tile_columns<kT.keys>(row_keys, j0);
    if constexpr (kFused) {
      // Online softmax over the tile, per row: its group's lanes take the row's columns lane, lane + kPerRow...
      float tile_max = -INFINITY;
      for (int c = own.lane; c < kT.keys; c += Rows::kPerRow) tile_max = fmaxf(tile_max, sh.weight(own.row, c));
      const float m_new = fmaxf(m, group_max<Rows::kPerRow>(tile_max));
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: every exp below is 0
      const float rescale = expf(m - base);
      float tile_sum = 0.0f, tile_tangent = 0.0f;  // this lane's columns of Σe and Σe·tS
      for (int c = own.lane; c < kT.keys; c += Rows::kPerRow) {
        const float e = expf(sh.weight(own.row, c) - base);
        sh.weight(own.row, c) = e;
        tile_sum += e;
        tile_tangent += e * sh.tangent_weight(own.row, c);
      }
      m = m_new;
      l = l * rescale + group_sum<Rows::kPerRow>(tile_sum);
      mu = mu * rescale + group_sum<Rows::kPerRow>(tile_tangent);
      // acc_tangent holds Σ e·(tS − centre)·V_j + e·tv_j: moved to the new centre μ so far, r/l.
      const float new_centre = l > 0.0f ? mu / l : 0.0f;
      for (int k = 0; k < Rows::kWidth; ++k) {
        acc_out[k] *= rescale;
        acc_tangent[k] = fmaf(centre - new_centre, acc_out[k], acc_tangent[k] * rescale);
      }
      centre = new_centre;
      __syncwarp();  // the row's e, written by its group (inside this warp)
    }
    for (int c = int(columns.begin); c < int(columns.end); ++c) {
      const float weight = sh.weight(own.row, c);
      float tangent_weight = sh.tangent_weight(own.row, c);  // saved: P·tS; fused: tS, here e·(tS − centre)
      if constexpr (kFused)
        tangent_weight = weight * (tangent_weight - centre);
      else
        mu += tangent_weight;
      for (int k = 0; k < Rows::kWidth; ++k) {
        const int d = own.column(k);
        if (d >= d_v) continue;
        const float vd = sh.v(c, d);
        if constexpr (kFused) acc_out[k] = fmaf(weight, vd, acc_out[k]);
        acc_tangent[k] = fmaf(tangent_weight, vd, fmaf(weight, sh.tv(c, d), acc_tangent[k]));
      }
    }
    __syncthreads();  // before the next tile overwrites k, tk, v, tv and the weights
  }
  if (i >= p.q_len) return;
  const int64_t o = ((b * p.q_len + i) * p.q_heads + h) * p.value_dim;
  Bits<T>* tangent_out = bits(a.tangent_out) + o;
  if constexpr (kFused) {
    // O = acc_out/l, tO = acc_tangent/l (centred on μ = r/l); a row that sees no key gets 0 for both.
    const bool empty = row_keys.begin == row_keys.end;
    Bits<T>* out = bits(a.out) + o;
    for (int k = 0; k < Rows::kWidth; ++k) {
      const int d = own.column(k);
      if (d >= d_v) continue;
      const float out_d = empty ? 0.0f : acc_out[k] / l;
      out[d] = Elem<T>::store(out_d);
      tangent_out[d] = Elem<T>::store(empty ? 0.0f : acc_tangent[k] / l);
    }
    if (own.lane == 0) {
      a.row_max[bh * p.q_len + i] = m;
      a.row_sum[bh * p.q_len + i] = l;
    }
  } else {
    // tO = Σ(P·tS)·V + P·tv − μ∘O, O the forward's; a row that sees no key has acc = 0, μ = 0 and O = 0.
    const Bits<T>* out = bits(a.out) + o;
    for (int k = 0; k < Rows::kWidth; ++k) {
      const int d = own.column(k);
      if (d < d_v) tangent_out[d] = Elem<T>::store(acc_tangent[k] - mu * Elem<T>::load(out[d]));
    }
  }
}

template <class T, int kBucket, bool kFused>
void launch(const JvpArgsOf<T, kFused>& args, const char* op, cudaStream_t stream) {
  const AttentionParams<T>& p = args.params;
  constexpr Tiling kT = JvpTraits<kBucket>::kTile;
  const int64_t floats = JvpShared<kT>(nullptr, int(p.head_dim), int(p.value_dim)).floats;
  const dim3 grid(tile_count(p.q_len, kT.queries), heads_extent(p.batch * p.q_heads, op));
  launch_with_shared(jvp_kernel<T, kBucket, kFused>, op, grid, kThreads, size_t(floats) * sizeof(float), stream, args);
}

// ---- Tensor cores: both forms in bf16 and f16 -----------------------------------------------------------

// Per head-dimension bucket (the wider of D and Dv; narrower operands are zero-padded in shared memory):
// warps per block (each owns 16 query rows) and keys per tile. Shared memory: q and tq tiles, and a
// two-stage ring of k, tk, v and tv tiles, 90 KiB (64) and 102 KiB (128).
template <int kHeadDim>
struct MmaJvpTraits;
template <>
struct MmaJvpTraits<64> {
  static constexpr int kWarps = 4, kKeys = 64;
};
template <>
struct MmaJvpTraits<128> {
  static constexpr int kWarps = 4, kKeys = 32;
};

template <int kHeadDim>
struct MmaJvpShape {
  using Traits = MmaJvpTraits<kHeadDim>;
  static constexpr int kThreads = 32 * Traits::kWarps;
  static constexpr int kRows = 16 * Traits::kWarps;
  using QTile = mma::SharedTile<kRows, kHeadDim>;
  using KvTile = mma::SharedTile<Traits::kKeys, kHeadDim>;
  static constexpr size_t kSharedBytes = (2 * QTile::kElements + 8 * KvTile::kElements) * sizeof(uint16_t);
};

// Grid (query tile, b·Hq + h), query tiles last-first (under a causal mask the longest rows start first).
// Per key tile and warp (16 query rows), both forms:
//   S = Q·Kᵀ and tS = TQ·Kᵀ + Q·TKᵀ into f32 registers; S = softcap(S·scale), tS·scale·(1 − (S/c)²), both
//   masked where the tile is not wholly visible to the block's rows (S = −inf, tS = 0).
// Fused (kFused): the online softmax: m_new = max(m, rowmax S), every sum rescaled by exp(m − m_new),
//   e = exp(S − m_new); l += rowsum e, r += rowsum e·tS (f32, unrounded); the centre c = r/l, acc_t moved to
//   it (the FMA kernel's centring: rounding e·(tS − c) to T, not e·tS, keeps the error relative to |tS − μ|);
//   acc_o += e·V, acc_t += (e·(tS − c))·V + e·TV. At the end out = acc_o/l, tangent_out = acc_t/l,
//   row_max = m, row_sum = l.
// Saved statistics: P = exp(S − m)/l from the forward's m and l (no running max, nothing rescaled);
//   acc_t += (P·tS)·V + P·TV, two products where the fused form has three, and μ += rowsum P·tS in f32 over
//   the weights P·tS as rounded to T for the product. At the end tangent_out = acc_t − μ∘O with O the
//   forward's output. μ is known only after the pass, so the tangent is not centred: the rounding of P·tS is
//   relative to |tS|, not |tS − μ|. Summing the rounded weights into μ makes that rounding cancel against
//   μ∘O where a row's P is one-hot (O = V_j: logits of ~1e4); what is left there is f32's rounding of
//   acc_t and μ∘O, both ~|tS|·|V|.
// The weights (e and e·(tS − c), or P and P·tS) are rounded to T in the registers that held S and tS
// (mma.cuh's C → A fragment identity) before their products, as FlashAttention rounds P.
template <class T, int kHeadDim, bool kFused>
__global__ void __launch_bounds__(MmaJvpShape<kHeadDim>::kThreads) mma_jvp_kernel(JvpArgsOf<T, kFused> a) {
  using Shape = MmaJvpShape<kHeadDim>;
  constexpr int kKeys = Shape::Traits::kKeys, kN = kKeys / 8, kO = kHeadDim / 8;
  extern __shared__ __align__(16) uint16_t shared_bits[];
  const typename Shape::QTile q_tile{shared_bits}, tq_tile{shared_bits + Shape::QTile::kElements};
  // Stage s of the ring: k kv_tiles.next(s), tk .next(2 + s), v .next(4 + s), tv .next(6 + s).
  const typename Shape::KvTile kv_tiles{shared_bits + 2 * Shape::QTile::kElements};

  const AttentionParams<T>& p = a.params;
  const AttentionJvpInputs<T>& in = a.in;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y, b = bh / p.q_heads, h = bh % p.q_heads, kv_head = h / (p.q_heads / p.kv_heads);
  const int64_t i0 = int64_t(gridDim.x - 1 - blockIdx.x) * Shape::kRows;
  const int64_t last_row = tile_last_row(i0, Shape::kRows, p.q_len);
  const int64_t key_begin = visible_key_range(p, i0).begin, key_end = visible_key_range(p, last_row).end;
  // Key tiles in [whole_begin, whole_end) are visible to every row of the block: no masking there.
  const int64_t whole_begin = visible_key_range(p, last_row).begin, whole_end = visible_key_range(p, i0).end;

  const int d_qk = int(p.head_dim), d_v = int(p.value_dim);
  const uint16_t* q_rows = bits(in.q) + b * p.q_strides.batch + h * p.q_strides.head;
  const uint16_t* k_rows = bits(in.k) + b * p.k_strides.batch + kv_head * p.k_strides.head;
  const uint16_t* v_rows = bits(in.v) + b * p.v_strides.batch + kv_head * p.v_strides.head;
  const uint16_t* tq_rows = bits(in.tq) + (b * p.q_len * p.q_heads + h) * p.head_dim;
  const uint16_t* tk_rows = bits(in.tk) + (b * p.kv_len * p.kv_heads + kv_head) * p.head_dim;
  const uint16_t* tv_rows = bits(in.tv) + (b * p.kv_len * p.kv_heads + kv_head) * p.value_dim;
  auto load_keys = [&](int64_t j0, int stage) {
    mma::load_tile_async<Shape::kThreads>(kv_tiles.next(stage), k_rows, p.k_strides.time, j0, p.kv_len, d_qk);
    mma::load_tile_async<Shape::kThreads>(kv_tiles.next(2 + stage), tk_rows, p.kv_heads * p.head_dim, j0, p.kv_len,
                                          d_qk);
    mma::load_tile_async<Shape::kThreads>(kv_tiles.next(4 + stage), v_rows, p.v_strides.time, j0, p.kv_len, d_v);
    mma::load_tile_async<Shape::kThreads>(kv_tiles.next(6 + stage), tv_rows, p.kv_heads * p.value_dim, j0, p.kv_len,
                                          d_v);
  };
  mma::load_tile_async<Shape::kThreads>(q_tile, q_rows, p.q_strides.time, i0, p.q_len, d_qk);
  mma::load_tile_async<Shape::kThreads>(tq_tile, tq_rows, p.q_heads * p.head_dim, i0, p.q_len, d_qk);
  if (key_begin < key_end) load_keys(key_begin, 0);
  mma::copy_async_commit();

  // This thread's rows: i0 + row0 + g + 8·half, for C fragment values x with half = x / 2.
  const int row0 = warp * 16;
  // Per half: the row's max (fused: running; saved: the forward's), l = Σe (fused: running, the row's in each
  // of its 4 lanes; saved: 1/l of the forward, 0 where the row sees no key or lies past Tq), r = Σe·tS
  // (fused: the row's; saved: this lane's part of μ = Σ P·tS) and the fused form's centre r/l of acc_tangent.
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f}, row_tangent[2] = {0.0f, 0.0f};
  float centre[2] = {0.0f, 0.0f};
  if constexpr (!kFused) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t i = i0 + row0 + g + 8 * half;
      if (i >= p.q_len) continue;
      row_max[half] = a.row_max[bh * p.q_len + i];
      const float sum = a.row_sum[bh * p.q_len + i];
      row_sum[half] = sum > 0.0f ? 1.0f / sum : 0.0f;
    }
  }
  mma::FragC acc_out[1][kO], acc_tangent[1][kO];  // acc_out: the fused form's only
  mma::zero(acc_out);
  mma::zero(acc_tangent);

  int stage = 0;
  for (int64_t j0 = key_begin; j0 < key_end; j0 += kKeys, stage ^= 1) {
    if (j0 + kKeys < key_end) load_keys(j0 + kKeys, stage ^ 1);
    mma::copy_async_commit();
    mma::copy_async_wait<1>();
    __syncthreads();  // this stage's k, tk, v, tv (and the first time q, tq) are in shared memory

    mma::FragC s[1][kN], ts[1][kN];
    mma::zero(s);
    mma::zero(ts);
    mma::warp_product_abt<T, 1, kN, kHeadDim>(s, q_tile, row0, kv_tiles.next(stage), 0, lane);
    mma::warp_product_abt<T, 1, kN, kHeadDim>(ts, tq_tile, row0, kv_tiles.next(stage), 0, lane);
    mma::warp_product_abt<T, 1, kN, kHeadDim>(ts, q_tile, row0, kv_tiles.next(2 + stage), 0, lane);

    const bool masked = !(j0 >= whole_begin && j0 + kKeys <= whole_end);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t i = i0 + row0 + g + 8 * half;
      // The row's visible keys as columns of this tile, [first_col, end_col), where the tile needs a mask.
      int first_col = 0, end_col = kKeys;
      if (masked) {
        const KeyRange keys = i < p.q_len ? visible_key_range(p, i) : KeyRange{0, 0};
        first_col = int(max(keys.begin - j0, int64_t(-1)));
        end_col = int(min(keys.end - j0, int64_t(kKeys)));
      }
      float tile_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int x = 2 * half; x < 2 * half + 2; ++x) {
          const int col = 8 * n + 2 * t + x % 2;
          const bool inside = col >= first_col && col < end_col;
          const float logit = score(p, s[0][n].x[x]);
          ts[0][n].x[x] = inside ? ts[0][n].x[x] * p.scale * softcap_slope(p, logit) : 0.0f;
          s[0][n].x[x] = inside ? logit : -INFINITY;
          tile_max = fmaxf(tile_max, s[0][n].x[x]);
        }
      if constexpr (kFused) {
        tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarp, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarp, tile_max, 2));
        const float new_max = fmaxf(row_max[half], tile_max);
        const float base = new_max == -INFINITY ? 0.0f : new_max;  // all masked so far: every exp is 0
        const float rescale = fast_exp2((row_max[half] - base) * kLog2e);
        const float base_log2 = base * kLog2e;
        row_max[half] = new_max;
        float tile_sum = 0.0f, tile_tangent = 0.0f;  // the row's Σe and Σe·tS over the tile (its 4 lanes')
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
          for (int x = 2 * half; x < 2 * half + 2; ++x) {
            const float e = fast_exp2(fmaf(s[0][n].x[x], kLog2e, -base_log2));
            tile_sum += e;
            tile_tangent += e * ts[0][n].x[x];
            s[0][n].x[x] = e;
          }
        tile_sum += __shfl_xor_sync(kFullWarp, tile_sum, 1);
        tile_sum += __shfl_xor_sync(kFullWarp, tile_sum, 2);
        tile_tangent += __shfl_xor_sync(kFullWarp, tile_tangent, 1);
        tile_tangent += __shfl_xor_sync(kFullWarp, tile_tangent, 2);
        row_sum[half] = fmaf(row_sum[half], rescale, tile_sum);
        row_tangent[half] = fmaf(row_tangent[half], rescale, tile_tangent);
        // acc_tangent holds Σ e·(tS − centre)·V_j + e·tv_j: moved to the new centre μ so far, r/l.
        const float new_centre = row_sum[half] > 0.0f ? row_tangent[half] / row_sum[half] : 0.0f;
        const float shift = centre[half] - new_centre;
        centre[half] = new_centre;
#pragma unroll
        for (int n = 0; n < kO; ++n)
#pragma unroll
          for (int x = 2 * half; x < 2 * half + 2; ++x) {
            acc_out[0][n].x[x] *= rescale;
            acc_tangent[0][n].x[x] = fmaf(shift, acc_out[0][n].x[x], acc_tangent[0][n].x[x] * rescale);
          }
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
          for (int x = 2 * half; x < 2 * half + 2; ++x) ts[0][n].x[x] = s[0][n].x[x] * (ts[0][n].x[x] - new_centre);
      } else {
        // P = exp(S − m)/l; a row that sees no key has m = −inf: its (masked) entries give exp(−inf) = 0.
        const float base_log2 = (row_max[half] == -INFINITY ? 0.0f : row_max[half]) * kLog2e;
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
          for (int x = 2 * half; x < 2 * half + 2; ++x) {
            const float prob = fast_exp2(fmaf(s[0][n].x[x], kLog2e, -base_log2)) * row_sum[half];
            // P·tS as the product takes it (rounded to T), and μ its sum: μ∘O then cancels the rounding of
            // a weight whose row is one-hot (O = V_j), where |tS| ≫ |tO|.
            const float weight = Elem<T>::load(Elem<T>::store(prob * ts[0][n].x[x]));
            s[0][n].x[x] = prob;
            ts[0][n].x[x] = weight;
            row_tangent[half] += weight;
          }
      }
    }

    mma::FragA weights[1][kN / 2], tangent_weights[1][kN / 2];
    mma::to_a_fragments<T>(weights, s);
    mma::to_a_fragments<T>(tangent_weights, ts);
    if constexpr (kFused) mma::warp_product_ab<T, 1, kO, kKeys>(acc_out, weights, kv_tiles.next(4 + stage), 0, 0, lane);
    mma::warp_product_ab<T, 1, kO, kKeys>(acc_tangent, tangent_weights, kv_tiles.next(4 + stage), 0, 0, lane);
    mma::warp_product_ab<T, 1, kO, kKeys>(acc_tangent, weights, kv_tiles.next(6 + stage), 0, 0, lane);
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }
  mma::copy_async_wait<0>();  // no copy outlives the block (none pending when a key tile ran)

  if constexpr (!kFused) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // μ: the row's 4 lanes' parts, in a fixed order
      row_tangent[half] += __shfl_xor_sync(kFullWarp, row_tangent[half], 1);
      row_tangent[half] += __shfl_xor_sync(kFullWarp, row_tangent[half], 2);
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = i0 + row0 + g + 8 * half;
    if (i >= p.q_len) continue;
    const int64_t o = ((b * p.q_len + i) * p.q_heads + h) * p.value_dim;
    uint16_t* tangent_out = bits(a.tangent_out) + o;
    if constexpr (kFused) {
      // O = acc_o/l, tO = acc_t/l (centred on μ = r/l); a row that sees no key gets 0 for both.
      const float sum = row_sum[half];
      const KeyRange keys = visible_key_range(p, i);
      const float inverse = keys.begin == keys.end ? 0.0f : 1.0f / sum;
      uint16_t* out = bits(a.out) + o;
#pragma unroll
      for (int n = 0; n < kO; ++n) {
        const int col = 8 * n + 2 * t;
        if (col >= d_v) continue;
        const float out0 = acc_out[0][n].x[2 * half] * inverse, out1 = acc_out[0][n].x[2 * half + 1] * inverse;
        *reinterpret_cast<uint32_t*>(out + col) = mma::pack2<T>(out0, out1);
        *reinterpret_cast<uint32_t*>(tangent_out + col) =
            mma::pack2<T>(acc_tangent[0][n].x[2 * half] * inverse, acc_tangent[0][n].x[2 * half + 1] * inverse);
      }
      if (t == 0) {
        a.row_max[bh * p.q_len + i] = row_max[half];
        a.row_sum[bh * p.q_len + i] = sum;
      }
    } else {
      // tO = Σ(P·tS)·V + P·tv − μ∘O, O the forward's; a row that sees no key has acc = 0, μ = 0 and O = 0.
      const uint16_t* out = bits(a.out) + o;
      const float mu = row_tangent[half];
#pragma unroll
      for (int n = 0; n < kO; ++n) {
        const int col = 8 * n + 2 * t;
        if (col >= d_v) continue;
        const float out0 = Elem<T>::load(out[col]), out1 = Elem<T>::load(out[col + 1]);
        *reinterpret_cast<uint32_t*>(tangent_out + col) = mma::pack2<T>(
            fmaf(-mu, out0, acc_tangent[0][n].x[2 * half]), fmaf(-mu, out1, acc_tangent[0][n].x[2 * half + 1]));
      }
    }
  }
}

// Whether `rows` (an operand of [B, T, H, features]) starts 16-byte aligned with every stride a multiple of
// 8 elements, as cp.async's 16-byte copies need.
template <class T>
bool rows_aligned(const T* rows, const AttentionStrides& s) {
  return reinterpret_cast<uintptr_t>(rows) % 16 == 0 && s.batch % 8 == 0 && s.time % 8 == 0 && s.head % 8 == 0;
}

// The tensor-core kernel's bucket for these operands (64 or 128), or 0 where it does not take them: D and
// Dv multiples of 8 up to 128, q, k and v rows 16-byte aligned. The tangents and outputs are contiguous with
// D and Dv multiples of 8, so their rows are aligned when their first one is.
template <class Args>
int mma_jvp_bucket(const Args& a) {
  const auto& p = a.params;
  const int64_t widest = std::max(p.head_dim, p.value_dim);
  if (p.head_dim % 8 != 0 || p.value_dim % 8 != 0 || widest > 128) return 0;
  auto starts_aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const bool aligned = rows_aligned(a.in.q, p.q_strides) && rows_aligned(a.in.k, p.k_strides) &&
                       rows_aligned(a.in.v, p.v_strides) && starts_aligned(a.in.tq) && starts_aligned(a.in.tk) &&
                       starts_aligned(a.in.tv) && starts_aligned(a.out) && starts_aligned(a.tangent_out);
  return !aligned ? 0 : widest <= 64 ? 64 : 128;
}

template <class T, int kHeadDim, bool kFused>
void launch_mma(const JvpArgsOf<T, kFused>& args, const char* op, cudaStream_t stream) {
  using Shape = MmaJvpShape<kHeadDim>;
  const AttentionParams<T>& p = args.params;
  const dim3 grid(tile_count(p.q_len, Shape::kRows), heads_extent(p.batch * p.q_heads, op));
  launch_with_shared(mma_jvp_kernel<T, kHeadDim, kFused>, op, grid, Shape::kThreads, Shape::kSharedBytes, stream, args);
}

// Refuses dropout and head dimensions beyond the buckets, then launches the kernel: in bf16/f16 on the tensor
// cores where mma_jvp_bucket takes the operands (the fused form always, the saved-statistics form when
// args.tensor_cores asks), everything else on the FMA kernel.
template <bool kFused, class T>
void run_jvp(const JvpArgsOf<T, kFused>& args, const char* op, Stream stream) {
  const AttentionParams<T>& p = args.params;
  if (p.dropout_p != 0)
    raise<ValueError>(op, "params.dropout_p", "0 (the JVP of attention with dropout is not supported)",
                      std::to_string(p.dropout_p));
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  const int widest_bucket = bucket(p, op);  // raises for head dimensions beyond 256, on every path
  if constexpr (!std::is_same_v<T, float>) {
    bool tensor_cores = true;
    if constexpr (!kFused) tensor_cores = args.tensor_cores;
    switch (tensor_cores ? mma_jvp_bucket(args) : 0) {
      case 64: return launch_mma<T, 64, kFused>(args, op, s);
      case 128: return launch_mma<T, 128, kFused>(args, op, s);
      default: break;  // the FMA kernel takes what the tensor-core one does not
    }
  }
  switch (widest_bucket) {
    case 64: return launch<T, 64, kFused>(args, op, s);
    case 128: return launch<T, 128, kFused>(args, op, s);
    default: return launch<T, 256, kFused>(args, op, s);
  }
}

}  // namespace

template <class T>
void attention_jvp(const AttentionJvpArgs<T>& args, Stream stream) {
  run_jvp<false, T>(args, "attention_jvp", stream);
}

template <class T>
void attention_jvp_fused(const AttentionJvpFusedArgs<T>& args, Stream stream) {
  run_jvp<true, T>(args, "attention_jvp_fused", stream);
}

#define ALPHA_INSTANTIATE(T)                                          \
  template void attention_jvp<T>(const AttentionJvpArgs<T>&, Stream); \
  template void attention_jvp_fused<T>(const AttentionJvpFusedArgs<T>&, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
