// Exact Hessian-vector product of attention, the f64 CPU oracle for the finite-difference HVP
// (ops::attention_hvp). For a fixed cotangent G = dout, f(q, k, v) = ⟨O(q, k, v), G⟩ has the gradient
// (dq, dk, dv) that the reference backward computes; its Hessian H applied to a direction (vq, vk, vv) is
// the derivative of that gradient along the direction. This kernel computes it forward-over-reverse: the
// reference's forward and explicit backward (attention_reference.h) are evaluated in dual numbers
// x + ε·ẋ with ε² = 0, seeded with q + ε·vq, k + ε·vk, v + ε·vv, and the ε-parts of (dq, dk, dv) are
// H·(vq, vk, vv), exact up to f64 rounding (no step size, no truncation error).
//
// It follows the reference's conventions exactly: the keys of visible_key_range (causal bottom-right,
// sliding window), the softcap S = c·tanh(S_raw/c) and its derivative 1 − (S/c)² (whose own derivative is
// part of H), GQA/MQA sums of dk, dv over each group, rows that see no key contributing nothing. The row
// statistics are recomputed in dual numbers (l carries a tangent; m does not need one, as P does not depend
// on it), so H is the Hessian of the true function, not of one with frozen statistics. Dropout is not
// supported (params.dropout_p must be 0; the op refuses it). It materialises one score row at a time.
#pragma once
#include "alpha/kernels/attention_reference.h"

namespace alpha::kernels {

struct AttentionHvpArgs {
  const double* q;      // (B, Tq, Hq, D), strided as params.q_strides
  const double* k;      // (B, Tk, Hkv, D), strided as params.k_strides
  const double* v;      // (B, Tk, Hkv, Dv), strided as params.v_strides
  const double* dout;   // (B, Tq, Hq, Dv), contiguous: G, held fixed
  const double* q_dir;  // (B, Tq, Hq, D), laid out as q: vq
  const double* k_dir;  // (B, Tk, Hkv, D), laid out as k: vk
  const double* v_dir;  // (B, Tk, Hkv, Dv), laid out as v: vv
  double* hq;           // (B, Tq, Hq, D), contiguous
  double* hk;           // (B, Tk, Hkv, D), contiguous, summed over each GQA group
  double* hv;           // (B, Tk, Hkv, Dv), contiguous, summed over each GQA group
  AttentionParams<double> params;  // dropout_p == 0
};

namespace cpu {
void attention_hvp_exact(const AttentionHvpArgs& args);
}  // namespace cpu

}  // namespace alpha::kernels
