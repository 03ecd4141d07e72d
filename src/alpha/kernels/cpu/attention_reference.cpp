// CPU reference attention: OpenMP over (batch, query head) in the forward and over (batch, kv head) in
// the backward, so each GQA group's dk and dv are summed by one thread in a fixed head order. Each task
// is sequential, so the result does not depend on the thread count. Everything accumulates in acc_t<T>.
#include "alpha/kernels/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "alpha/kernels/cpu/attention_scores.h"

namespace alpha::kernels::cpu {

namespace {

// Fills scores (Tq, Tk) for batch b, query head h with attention_score for visible keys and −inf for
// masked ones.
template <class T>
void fill_scores(const AttentionParams<T>& p, const T* q, const T* k, int64_t b, int64_t h,
                 std::vector<acc_t<T>>& scores) {
  using A = acc_t<T>;
  const int64_t kv_head = attention_kv_head(p, h);
  for (int64_t i = 0; i < p.q_len; ++i) {
    const T* qi = row_at(q, p.q_strides, b, i, h);
    const KeyRange visible = visible_key_range(p, i);
    A* row = scores.data() + i * p.kv_len;
    for (int64_t j = 0; j < p.kv_len; ++j)
      row[j] = j < visible.begin || j >= visible.end ? -std::numeric_limits<A>::infinity()
                                                     : attention_score(p, qi, row_at(k, p.k_strides, b, j, kv_head));
  }
}

}  // namespace

template <class T>
void attention_reference_forward(const AttentionForwardArgs<T>& args) {
  using A = acc_t<T>;
  const AttentionParams<T>& p = args.params;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < p.batch * p.q_heads; ++bh) {
    int64_t b = bh / p.q_heads, h = bh % p.q_heads, kv_head = h / (p.q_heads / p.kv_heads);
    std::vector<A> scores(size_t(p.q_len * p.kv_len));  // (Tq, Tk)
    std::vector<A> out_row(size_t(p.value_dim));         // (Dv)
    fill_scores(p, args.q, args.k, b, h, scores);
    for (int64_t i = 0; i < p.q_len; ++i) {
      A* row = scores.data() + i * p.kv_len;
      const KeyRange visible = visible_key_range(p, i);
      // A row with no visible key keeps m = −inf, l = 0 and outputs 0.
      A m = -std::numeric_limits<A>::infinity();
      for (int64_t j = visible.begin; j < visible.end; ++j) m = std::max(m, row[j]);
      A l = 0;
      for (int64_t j = visible.begin; j < visible.end; ++j) {
        row[j] = std::exp(row[j] - m);  // the row now holds unnormalised probabilities
        l += row[j];
      }
      args.row_max[bh * p.q_len + i] = m;
      args.row_sum[bh * p.q_len + i] = l;
      std::fill(out_row.begin(), out_row.end(), A(0));
      for (int64_t j = visible.begin; j < visible.end; ++j) {
        A weight = row[j] / l * attention_dropout_factor(p, bh, i, j);
        if (weight == 0) continue;
        const T* vj = row_at(args.v, p.v_strides, b, j, kv_head);
        for (int64_t d = 0; d < p.value_dim; ++d) out_row[size_t(d)] += weight * A(vj[d]);
      }
      T* out = args.out + ((b * p.q_len + i) * p.q_heads + h) * p.value_dim;
      for (int64_t d = 0; d < p.value_dim; ++d) out[d] = T(out_row[size_t(d)]);
    }
  }
}

template <class T>
void attention_reference_backward(const AttentionBackwardArgs<T>& args) {
  using A = acc_t<T>;
  const AttentionParams<T>& p = args.params;
  int64_t group = p.q_heads / p.kv_heads;
#pragma omp parallel for schedule(static)
  for (int64_t bkv = 0; bkv < p.batch * p.kv_heads; ++bkv) {
    int64_t b = bkv / p.kv_heads, kv_head = bkv % p.kv_heads;
    std::vector<A> scores(size_t(p.q_len * p.kv_len));     // (Tq, Tk)
    std::vector<A> dk(size_t(p.kv_len * p.head_dim), A(0));  // (Tk, D), summed over the group
    std::vector<A> dv(size_t(p.kv_len * p.value_dim), A(0)); // (Tk, Dv), summed over the group
    std::vector<A> dq_row(size_t(p.head_dim));               // (D)
    for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
      fill_scores(p, args.q, args.k, b, h, scores);
      for (int64_t i = 0; i < p.q_len; ++i) {
        const A* row = scores.data() + i * p.kv_len;
        int64_t stat = (b * p.q_heads + h) * p.q_len + i;
        A m = args.row_max[stat], l = args.row_sum[stat];
        int64_t o = ((b * p.q_len + i) * p.q_heads + h) * p.value_dim;
        const T* dout = args.dout + o;
        // D_i = rowsum(dO∘O), equal to Σ_j P_ij·dP_ij even with dropout (see the header).
        A d_i = 0;
        for (int64_t d = 0; d < p.value_dim; ++d) d_i += A(dout[d]) * A(args.out[o + d]);
        const T* qi = row_at(args.q, p.q_strides, b, i, h);
        std::fill(dq_row.begin(), dq_row.end(), A(0));
        const KeyRange visible = visible_key_range(p, i);
        for (int64_t j = visible.begin; j < visible.end; ++j) {
          A prob = std::exp(row[j] - m) / l;
          A factor = attention_dropout_factor(p, b * p.q_heads + h, i, j);
          const T* vj = row_at(args.v, p.v_strides, b, j, kv_head);
          const T* kj = row_at(args.k, p.k_strides, b, j, kv_head);
          A dprob = 0;
          for (int64_t d = 0; d < p.value_dim; ++d) {
            dv[size_t(j * p.value_dim + d)] += prob * factor * A(dout[d]);
            dprob += A(dout[d]) * A(vj[d]);
          }
          A dscore = prob * (dprob * factor - d_i);
          dscore *= softcap_slope(p, row[j]);
          dscore *= p.scale;
          for (int64_t d = 0; d < p.head_dim; ++d) {
            dq_row[size_t(d)] += dscore * A(kj[d]);
            dk[size_t(j * p.head_dim + d)] += dscore * A(qi[d]);
          }
        }
        T* dq = args.dq + grad_offset(b, i, h, p.q_len, args.dq_row_stride, p.q_heads, p.head_dim);
        for (int64_t d = 0; d < p.head_dim; ++d) dq[d] = T(dq_row[size_t(d)]);
      }
    }
    for (int64_t j = 0; j < p.kv_len; ++j) {
      T* dk_out = args.dk + grad_offset(b, j, kv_head, p.kv_len, args.dk_row_stride, p.kv_heads, p.head_dim);
      T* dv_out = args.dv + grad_offset(b, j, kv_head, p.kv_len, args.dv_row_stride, p.kv_heads, p.value_dim);
      for (int64_t d = 0; d < p.head_dim; ++d) dk_out[d] = T(dk[size_t(j * p.head_dim + d)]);
      for (int64_t d = 0; d < p.value_dim; ++d) dv_out[d] = T(dv[size_t(j * p.value_dim + d)]);
    }
  }
}

#define ALPHA_INSTANTIATE(T)                                                              \
  template void attention_reference_forward<T>(const AttentionForwardArgs<T>&);          \
  template void attention_reference_backward<T>(const AttentionBackwardArgs<T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
