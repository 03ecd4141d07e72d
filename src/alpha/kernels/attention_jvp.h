// Forward-mode derivative (JVP) of attention: given tangents (tq, tk, tv) of (q, k, v), the tangent tO of
// O = softmax(S)·V, with S = softcap(q·kᵀ·scale) and every convention of the reference attention
// (attention_reference.h: visible_key_range for the bottom-right causal mask and the sliding window,
// strides, GQA/MQA with tk and tv per kv head shared by the query heads of a group, Tq != Tk, Dv != D, rows
// that see no key). Dropout is not supported (the op refuses it). Two forms, for two kinds of callers:
//
// Saved statistics (attention_jvp): for a caller that ran the forward and kept O and the row statistics
// m = rowmax(S), l = rowsum(exp(S − m)). P = exp(S − m) / l is reconstructed from them, never stored, and
//   tS = (tq·kᵀ + q·tkᵀ)·scale∘(1 − (S/c)²)     (the last factor only through a softcap c)
//   μ  = rowsum(P∘tS)
//   tO = (P∘(tS − μ))·V + P·tv = (P∘tS)·V + P·tv − μ∘O,
// the last form (one pass over the keys, O from the forward, as the backward's D = rowsum(dO∘O)) is what
// the kernel computes. With m, l and O from our own forward, P's rows sum to 1 and tO is the true JVP up
// to rounding. With statistics from elsewhere it is NOT the true JVP (P is not renormalised), and not the
// linearisation of the frozen-statistics operator O_f(x) = (exp(S(x) − m)/l)·V either: that is
// (P∘tS)·V + P·tv, with no centring, while this form returns it minus μ∘O (the centring the true JVP
// needs when P's rows sum to 1, applied whether or not they do). Statistics that reconstruct the same P
// (m shifted by δ, l scaled by exp(−δ)) give the true JVP again: only P matters.
//
// Fused primal + tangent (attention_jvp_fused): for a caller with no statistics that wants O and tO
// together. One streaming pass over each row's visible keys, tile by tile, with the online softmax of
// flash attention: a running max m (a constant shift: the tangent does not differentiate it), and running
// sums rescaled by exp(m_old − m_new) whenever m grows,
//   l = Σ e,  r = Σ e·tS,  acc_o = Σ e·V_j,  acc_t = Σ e·(tS·V_j + tv_j),   e = exp(S − m);
// at the end O = acc_o / l, μ = r / l, tO = acc_t / l − μ∘O (the true JVP), and the row statistics m, l of
// the forward. The CPU kernel is the model for the GPU one: it never needs more than one key tile's scores.
//
// Both accumulate in acc_t<T> and write O and tO in T; a row that sees no key gets O = 0, tO = 0, m = −inf,
// l = 0. The CPU kernels (f32, f64) run in order and are the GPU kernels' oracle; the CUDA kernels (f32, bf16,
// f16, accumulating in f32; kernels/cuda/attention_jvp.cu) stream key tiles through shared memory as flash
// attention's forward does, in bf16/f16 on the tensor cores where the layout allows (the saved-statistics form
// when args.tensor_cores asks for it).
#pragma once
#include <cstdint>

#include "alpha/core/stream.h"
#include "alpha/kernels/attention_reference.h"

namespace alpha::kernels {

// The operands and their tangents, taken by both forms.
template <class T>
struct AttentionJvpInputs {
  const T* q;   // (B, Tq, Hq, D), strided
  const T* k;   // (B, Tk, Hkv, D), strided
  const T* v;   // (B, Tk, Hkv, Dv), strided
  const T* tq;  // (B, Tq, Hq, D), contiguous
  const T* tk;  // (B, Tk, Hkv, D), contiguous
  const T* tv;  // (B, Tk, Hkv, Dv), contiguous
};

template <class T>
struct AttentionJvpArgs {
  AttentionJvpInputs<T> in;
  const T* out;              // (B, Tq, Hq, Dv), contiguous: the forward's output
  const acc_t<T>* row_max;   // (B, Hq, Tq), contiguous: the forward's statistics
  const acc_t<T>* row_sum;   // (B, Hq, Tq), contiguous
  T* tangent_out;            // (B, Tq, Hq, Dv), contiguous
  AttentionParams<T> params; // dropout_p must be 0
  // CUDA, bf16/f16: run on the tensor cores where they take the operands (as the fused form), rounding P and
  // P·tS to T before their products, so that the result is judged as the fused form's (against the naive
  // JVP in T); false keeps P and P·tS in f32 (the FMA kernel: one rounding, of the output). The CPU kernels
  // and f32 ignore it. ops::attention_jvp sets it.
  bool tensor_cores = false;
};

template <class T>
struct AttentionJvpFusedArgs {
  AttentionJvpInputs<T> in;
  T* out;                    // (B, Tq, Hq, Dv), contiguous
  T* tangent_out;            // (B, Tq, Hq, Dv), contiguous
  acc_t<T>* row_max;         // (B, Hq, Tq), contiguous
  acc_t<T>* row_sum;         // (B, Hq, Tq), contiguous
  AttentionParams<T> params; // dropout_p must be 0
};

namespace cpu {
template <class T> void attention_jvp(const AttentionJvpArgs<T>& args);
template <class T> void attention_jvp_fused(const AttentionJvpFusedArgs<T>& args);
}  // namespace cpu

// The widest head dimension (D or Dv) the CUDA kernels are built for.
inline constexpr int64_t kAttentionJvpMaxHeadDim = 256;

#if ALPHA_WITH_CUDA
// Device pointers; queued on `stream` (Stream{}: the current device's default stream). T = float, bf16 or
// f16, computing in f32 (row_max and row_sum are f32). Every output element is written (no zeroing needed).
// Raises ValueError for dropout, ShapeError for head dimensions beyond kAttentionJvpMaxHeadDim or more than
// 65535 batch·heads, BackendError when the device lacks the shared memory a tile needs (at most 133 KiB).
namespace cuda {
template <class T> void attention_jvp(const AttentionJvpArgs<T>& args, Stream stream);
template <class T> void attention_jvp_fused(const AttentionJvpFusedArgs<T>& args, Stream stream);
}  // namespace cuda
#endif

}  // namespace alpha::kernels
