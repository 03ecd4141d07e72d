// Exact attention HVP on the CPU: the reference forward and backward (attention_reference.cpp) written
// again over dual numbers, one score row at a time. OpenMP over (batch, kv head), as the reference
// backward, so each GQA group's hk and hv are summed by one thread in a fixed head order and the result does
// not depend on the thread count. The ε-parts (tangents) of the gradients are the output.
#include "alpha/kernels/attention_hvp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace alpha::kernels::cpu {

namespace {

// a + ε·ȧ with ε² = 0: `value` is what the reference computes, `tangent` its derivative along the
// direction (vq, vk, vv).
struct Dual {
  double value = 0;
  double tangent = 0;
};

Dual operator+(Dual a, Dual b) { return {a.value + b.value, a.tangent + b.tangent}; }
Dual operator-(Dual a, Dual b) { return {a.value - b.value, a.tangent - b.tangent}; }
Dual operator*(Dual a, Dual b) { return {a.value * b.value, a.value * b.tangent + a.tangent * b.value}; }
Dual operator*(double s, Dual a) { return {s * a.value, s * a.tangent}; }
Dual operator/(Dual a, Dual b) {
  const double r = a.value / b.value;
  return {r, (a.tangent - r * b.tangent) / b.value};
}
Dual& operator+=(Dual& a, Dual b) { return a = a + b; }
Dual exp(Dual a) {
  const double e = std::exp(a.value);
  return {e, e * a.tangent};
}
Dual tanh(Dual a) {
  const double t = std::tanh(a.value);
  return {t, (1 - t * t) * a.tangent};
}

// Row t of head h of a (B, T, H, n) operand and its direction (laid out alike), as n dual numbers.
void load_row(const double* base, const double* dir, const AttentionStrides& s, int64_t b, int64_t t, int64_t h,
              int64_t n, std::vector<Dual>& row) {
  const int64_t at = b * s.batch + t * s.time + h * s.head;
  for (int64_t d = 0; d < n; ++d) row[size_t(d)] = {base[at + d], dir[at + d]};
}

Dual dot(const Dual* a, const Dual* b, int64_t n) {
  Dual sum;
  for (int64_t d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

}  // namespace

void attention_hvp_exact(const AttentionHvpArgs& args) {
  const AttentionParams<double>& p = args.params;
  const int64_t group = p.q_heads / p.kv_heads, D = p.head_dim, Dv = p.value_dim;
#pragma omp parallel for schedule(static)
  for (int64_t bkv = 0; bkv < p.batch * p.kv_heads; ++bkv) {
    const int64_t b = bkv / p.kv_heads, kv_head = bkv % p.kv_heads;
    std::vector<Dual> keys(size_t(p.kv_len * D)), values(size_t(p.kv_len * Dv));  // (Tk, D), (Tk, Dv)
    std::vector<Dual> row(size_t(std::max(D, Dv)));
    for (int64_t j = 0; j < p.kv_len; ++j) {
      load_row(args.k, args.k_dir, p.k_strides, b, j, kv_head, D, row);
      std::copy_n(row.begin(), D, keys.begin() + j * D);
      load_row(args.v, args.v_dir, p.v_strides, b, j, kv_head, Dv, row);
      std::copy_n(row.begin(), Dv, values.begin() + j * Dv);
    }
    std::vector<Dual> dk(size_t(p.kv_len * D)), dv(size_t(p.kv_len * Dv));  // summed over the group
    std::vector<Dual> query(static_cast<size_t>(D)), dq(static_cast<size_t>(D)), out(static_cast<size_t>(Dv));
    std::vector<Dual> scores(size_t(p.kv_len));
    for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
      for (int64_t i = 0; i < p.q_len; ++i) {
        load_row(args.q, args.q_dir, p.q_strides, b, i, h, D, query);
        const KeyRange visible = visible_key_range(p, i);
        // Forward: S = softcap(q·kᵀ·scale); m shifts the exponent only (P does not depend on it), so it
        // stays a plain number; l and P carry tangents.
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = visible.begin; j < visible.end; ++j) {
          Dual s = p.scale * dot(query.data(), keys.data() + j * D, D);
          scores[size_t(j)] = p.softcap > 0 ? p.softcap * tanh((1 / p.softcap) * s) : s;
          m = std::max(m, scores[size_t(j)].value);
        }
        Dual l;
        for (int64_t j = visible.begin; j < visible.end; ++j) l += exp(scores[size_t(j)] - Dual{m, 0});
        std::fill(out.begin(), out.end(), Dual{});
        for (int64_t j = visible.begin; j < visible.end; ++j) {
          const Dual prob = exp(scores[size_t(j)] - Dual{m, 0}) / l;
          for (int64_t d = 0; d < Dv; ++d) out[size_t(d)] += prob * values[size_t(j * Dv + d)];
        }
        // Backward with dO = G (a constant): D_i = G_i·O_i, dV += Pᵀ·G, dS = P∘(G·Vᵀ − D_i), through the
        // softcap's 1 − (S/c)², then dQ = dS·K·scale and dK = dSᵀ·Q·scale.
        const double* g = args.dout + ((b * p.q_len + i) * p.q_heads + h) * Dv;
        Dual d_i;
        for (int64_t d = 0; d < Dv; ++d) d_i += g[d] * out[size_t(d)];
        std::fill(dq.begin(), dq.end(), Dual{});
        for (int64_t j = visible.begin; j < visible.end; ++j) {
          const Dual prob = exp(scores[size_t(j)] - Dual{m, 0}) / l;
          Dual dprob;
          for (int64_t d = 0; d < Dv; ++d) {
            dv[size_t(j * Dv + d)] += g[d] * prob;
            dprob += g[d] * values[size_t(j * Dv + d)];
          }
          Dual dscore = prob * (dprob - d_i);
          if (p.softcap > 0) {
            const Dual capped = (1 / p.softcap) * scores[size_t(j)];
            dscore = dscore * (Dual{1, 0} - capped * capped);
          }
          dscore = p.scale * dscore;
          for (int64_t d = 0; d < D; ++d) {
            dq[size_t(d)] += dscore * keys[size_t(j * D + d)];
            dk[size_t(j * D + d)] += dscore * query[size_t(d)];
          }
        }
        double* hq = args.hq + ((b * p.q_len + i) * p.q_heads + h) * D;
        for (int64_t d = 0; d < D; ++d) hq[d] = dq[size_t(d)].tangent;
      }
    }
    for (int64_t j = 0; j < p.kv_len; ++j) {
      double* hk = args.hk + ((b * p.kv_len + j) * p.kv_heads + kv_head) * D;
      double* hv = args.hv + ((b * p.kv_len + j) * p.kv_heads + kv_head) * Dv;
      for (int64_t d = 0; d < D; ++d) hk[d] = dk[size_t(j * D + d)].tangent;
      for (int64_t d = 0; d < Dv; ++d) hv[d] = dv[size_t(j * Dv + d)].tangent;
    }
  }
}

}  // namespace alpha::kernels::cpu
