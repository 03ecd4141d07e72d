// What the CPU attention kernels (reference, JVP) share, under the conventions of attention_reference.h:
// locating a row of a strided [B, T, H, features] operand, the kv head a query head reads (GQA/MQA), the
// score S = softcap(q·kᵀ·scale) of one query and one key accumulated in acc_t<T>, and the softcap's slope.
#pragma once
#include <cmath>
#include <cstdint>

#include "alpha/kernels/attention_reference.h"

namespace alpha::kernels::cpu {

template <class T>
const T* row_at(const T* base, const AttentionStrides& s, int64_t b, int64_t t, int64_t h) {
  return base + b * s.batch + t * s.time + h * s.head;
}

// The kv head query head h reads: h / (Hq / Hkv).
template <class T>
int64_t attention_kv_head(const AttentionParams<T>& p, int64_t h) {
  return h / (p.q_heads / p.kv_heads);
}

// Σ_d a[d]·b[d] in acc_t<T>, in order.
template <class T>
acc_t<T> dot(const T* a, const T* b, int64_t n) {
  acc_t<T> sum = 0;
  for (int64_t d = 0; d < n; ++d) sum += acc_t<T>(a[d]) * acc_t<T>(b[d]);
  return sum;
}

// softcap(q_i·k_j·scale): the score of one visible (query, key) pair.
template <class T>
acc_t<T> attention_score(const AttentionParams<T>& p, const T* qi, const T* kj) {
  const acc_t<T> s = dot(qi, kj, p.head_dim) * p.scale;
  return p.softcap > 0 ? p.softcap * std::tanh(s / p.softcap) : s;
}

// dS/dS_raw through the softcap, from the capped score S = c·tanh(S_raw/c): 1 − (S/c)²; 1 without one.
template <class T>
acc_t<T> softcap_slope(const AttentionParams<T>& p, acc_t<T> score) {
  if (!(p.softcap > 0)) return acc_t<T>(1);
  const acc_t<T> t = score / p.softcap;
  return acc_t<T>(1) - t * t;
}

}  // namespace alpha::kernels::cpu
