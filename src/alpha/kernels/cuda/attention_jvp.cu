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
//   not differentiated), e = exp(S − m), and l = Σe, r = Σe·tS, acc_o = Σe·V_j, acc_t = Σ(e·tS)·V_j + e·tv_j,
//   rescaled by exp(m_old − m_new) when m grows; at the end O = acc_o/l, μ = r/l, tO = acc_t/l − μ∘O (the
//   true JVP), and the statistics m, l of the forward.
// Each row accumulates only the keys it sees (not the masked entries of its tile): a NaN or inf in a key it
// does not see cannot reach it, as on the CPU.
//
// FLOPs, per visible (query, key) pair, counting a multiply-add as 2 (the convention of the forward's
// 4·D per pair, D = Dv): the forward does q·k (2D) and P·V (2Dv). The fused JVP does q·k (2D), tq·k and q·tk
// (4D), e·V (2Dv), (e·tS)·V and e·tv (4Dv): 6D + 6Dv, three times the forward's matrix work. The
// saved-statistics JVP skips e·V: 6D + 4Dv. The element-wise work (exp, softcap, the rescaling) is O(1) per
// pair and not counted. Causal attention has Tq(Tq + 1)/2 pairs per head for Tq = Tk; full has Tq·Tk.
//
// This is the f32 FMA kernel for every dtype (bf16/f16 are converted to f32 in shared memory, so the only
// rounding to T is the outputs'). Determinism: no atomics; every output element is owned by one thread that
// adds its terms in key order, and the row max uses a fixed shuffle tree: every run gives the same bits.
// Head dimensions: D and Dv from 1 to 256 (buckets 64, 128, 256 of the wider); wider raises ShapeError.
#include <string>
#include <type_traits>

#include "alpha/kernels/attention_jvp.h"
#include "alpha/kernels/cuda/attention_common.cuh"
#include "alpha/kernels/cuda/attention_fma_tiles.cuh"
#include "alpha/kernels/cuda/common.cuh"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

namespace {

using namespace fma_tiles;
static_assert(kAttentionJvpMaxHeadDim == kMaxHeadDim, "the buckets end at the declared widest head dimension");

// Tile shapes per head-dimension bucket: the q, tq tiles (queries × D), the k, tk, v, tv tiles (keys × D or
// Dv) and the two weight tiles (queries × keys) in 84, 108 and 136 KiB of shared memory; a thread holds two
// accumulators of 16, 16 and 32 columns.
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
  // (queries × keys) per entry: saved statistics P and P·tS; fused S and tS, then e and e·tS
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
  // acc_out = Σ e·V_j, acc_tangent = Σ (e·tS)·V_j + e·tv_j, against the running max m.
  float m = -INFINITY, l = 0.0f, mu = 0.0f, acc_out[Rows::kWidth] = {}, acc_tangent[Rows::kWidth] = {};
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
      for (int c = own.lane; c < kT.keys; c += Rows::kPerRow) {
        const float e = expf(sh.weight(own.row, c) - base);
        sh.weight(own.row, c) = e;
        sh.tangent_weight(own.row, c) *= e;
      }
      m = m_new;
      l *= rescale, mu *= rescale;
      for (int k = 0; k < Rows::kWidth; ++k) acc_out[k] *= rescale, acc_tangent[k] *= rescale;
      __syncwarp();  // the row's e and e·tS, written by its group (inside this warp)
    }
    for (int c = int(columns.begin); c < int(columns.end); ++c) {
      const float weight = sh.weight(own.row, c), tangent_weight = sh.tangent_weight(own.row, c);
      if constexpr (kFused) l += weight;
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
    // O = acc_out/l, μ = r/l, tO = acc_tangent/l − μ∘O; a row that sees no key gets 0 for both.
    const bool empty = row_keys.begin == row_keys.end;
    Bits<T>* out = bits(a.out) + o;
    for (int k = 0; k < Rows::kWidth; ++k) {
      const int d = own.column(k);
      if (d >= d_v) continue;
      const float out_d = empty ? 0.0f : acc_out[k] / l;
      out[d] = Elem<T>::store(out_d);
      tangent_out[d] = Elem<T>::store(empty ? 0.0f : acc_tangent[k] / l - (mu / l) * out_d);
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

// Refuses dropout and head dimensions beyond the buckets, then launches the bucket's kernel.
template <bool kFused, class T>
void run_jvp(const JvpArgsOf<T, kFused>& args, const char* op, Stream stream) {
  const AttentionParams<T>& p = args.params;
  if (p.dropout_p != 0)
    raise<ValueError>(op, "params.dropout_p", "0 (the JVP of attention with dropout is not supported)",
                      std::to_string(p.dropout_p));
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  switch (bucket(p, op)) {
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
