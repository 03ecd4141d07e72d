// The naive low-precision attention (naive_low_precision_attention.h): per (batch, head) the operands as
// f32 matrices (their values are exact in T), then the formulas of the header with every rounding written
// out as rounded<T>.
#include "alpha/check/naive_low_precision_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include "alpha/core/error.h"
#include "alpha/ops/attention_params.h"
#include "alpha/ops/check.h"

namespace alpha::check {

namespace {

constexpr std::string_view kOp = "naive_low_precision_attention";

// x rounded to T (to nearest even), as f32; the identity for T = f32.
template <class T>
float rounded(float x) {
  return float(T(x));
}

// One head of a [B, T, H, features] operand as a contiguous (T, features) f32 matrix.
template <class T>
std::vector<float> head_matrix(const T* base, const kernels::AttentionStrides& s, int64_t b, int64_t h, int64_t len,
                               int64_t features) {
  std::vector<float> m(size_t(len * features));
  for (int64_t t = 0; t < len; ++t) {
    const T* row = base + b * s.batch + t * s.time + h * s.head;
    for (int64_t d = 0; d < features; ++d) m[size_t(t * features + d)] = float(row[d]);
  }
  return m;
}

// An f32 dot product, summed in order.
float dot(const float* a, const float* b, int64_t n) {
  float sum = 0;
  for (int64_t d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// Row i of one head's forward over the keys it sees (entries of other keys are left as they are):
// the rounded scores S, probabilities P, dropout factors Z and dropped probabilities P̃.
struct ProbabilityRow {
  std::vector<float> score, prob, mask, dropped;  // (Tk)
  explicit ProbabilityRow(int64_t kv_len)
      : score(size_t(kv_len)), prob(size_t(kv_len)), mask(size_t(kv_len)), dropped(size_t(kv_len)) {}
};

template <class T>
void probability_row(const kernels::AttentionParams<T>& p, const float* q_row, const std::vector<float>& k_head,
                     int64_t bh, int64_t i, kernels::KeyRange keys, ProbabilityRow& row) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = keys.begin; j < keys.end; ++j) {
    float s = rounded<T>(rounded<T>(dot(q_row, k_head.data() + j * p.head_dim, p.head_dim)) * p.scale);
    if (p.softcap > 0) s = rounded<T>(p.softcap * std::tanh(s / p.softcap));
    row.score[size_t(j)] = s;
    m = std::max(m, s);
  }
  float l = 0;
  for (int64_t j = keys.begin; j < keys.end; ++j) {
    row.prob[size_t(j)] = std::exp(row.score[size_t(j)] - m);  // unnormalised until the sum is known
    l += row.prob[size_t(j)];
  }
  for (int64_t j = keys.begin; j < keys.end; ++j) {
    row.prob[size_t(j)] = rounded<T>(row.prob[size_t(j)] / l);
    row.mask[size_t(j)] = kernels::attention_dropout_factor(p, bh, i, j);
    row.dropped[size_t(j)] = rounded<T>(row.prob[size_t(j)] * row.mask[size_t(j)]);
  }
}

template <class T>
void naive_forward(const kernels::AttentionParams<T>& p, const T* q, const T* k, const T* v, T* out) {
  const int64_t group = p.q_heads / p.kv_heads;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h) {
      const std::vector<float> q_head = head_matrix(q, p.q_strides, b, h, p.q_len, p.head_dim);          // (Tq, D)
      const std::vector<float> k_head = head_matrix(k, p.k_strides, b, h / group, p.kv_len, p.head_dim);  // (Tk, D)
      const std::vector<float> v_head = head_matrix(v, p.v_strides, b, h / group, p.kv_len, p.value_dim); // (Tk, Dv)
#pragma omp parallel
      {
        ProbabilityRow row(p.kv_len);
        std::vector<float> acc(size_t(p.value_dim));  // (Dv)
#pragma omp for schedule(dynamic, 16)
        for (int64_t i = 0; i < p.q_len; ++i) {
          const kernels::KeyRange keys = kernels::visible_key_range(p, i);
          probability_row(p, q_head.data() + i * p.head_dim, k_head, b * p.q_heads + h, i, keys, row);
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t j = keys.begin; j < keys.end; ++j)
            for (int64_t d = 0; d < p.value_dim; ++d)
              acc[size_t(d)] += row.dropped[size_t(j)] * v_head[size_t(j * p.value_dim + d)];
          T* out_row = out + ((b * p.q_len + i) * p.q_heads + h) * p.value_dim;
          for (int64_t d = 0; d < p.value_dim; ++d) out_row[d] = T(acc[size_t(d)]);
        }
      }
    }
}

// dout, dq, dk, dv contiguous.
template <class T>
void naive_backward(const kernels::AttentionParams<T>& p, const T* dout, const T* q, const T* k, const T* v, T* dq,
                    T* dk, T* dv) {
  const int64_t group = p.q_heads / p.kv_heads;
  const kernels::AttentionStrides dout_strides{p.q_len * p.q_heads * p.value_dim, p.q_heads * p.value_dim,
                                               p.value_dim};
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t kv_head = 0; kv_head < p.kv_heads; ++kv_head) {
      const std::vector<float> k_head = head_matrix(k, p.k_strides, b, kv_head, p.kv_len, p.head_dim);   // (Tk, D)
      const std::vector<float> v_head = head_matrix(v, p.v_strides, b, kv_head, p.kv_len, p.value_dim);  // (Tk, Dv)
      std::vector<float> dk_sum(size_t(p.kv_len * p.head_dim), 0.0f);   // (Tk, D): dSᵀ·Q over the group
      std::vector<float> dv_sum(size_t(p.kv_len * p.value_dim), 0.0f);  // (Tk, Dv): P̃ᵀ·dO over the group
      for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
        const std::vector<float> q_head = head_matrix(q, p.q_strides, b, h, p.q_len, p.head_dim);         // (Tq, D)
        const std::vector<float> dout_head = head_matrix(dout, dout_strides, b, h, p.q_len, p.value_dim);  // (Tq, Dv)
        // P̃ and dS of this head, 0 where masked, for the sums over queries below.
        std::vector<float> dropped(size_t(p.q_len * p.kv_len), 0.0f), dscore(size_t(p.q_len * p.kv_len), 0.0f);
#pragma omp parallel
        {
          ProbabilityRow row(p.kv_len);
          std::vector<float> dprob(size_t(p.kv_len)), acc(size_t(p.head_dim));  // (Tk), (D)
#pragma omp for schedule(dynamic, 16)
          for (int64_t i = 0; i < p.q_len; ++i) {
            const kernels::KeyRange keys = kernels::visible_key_range(p, i);
            probability_row(p, q_head.data() + i * p.head_dim, k_head, b * p.q_heads + h, i, keys, row);
            const float* dout_row = dout_head.data() + i * p.value_dim;
            float row_dot = 0;  // rowsum(dP∘P)
            for (int64_t j = keys.begin; j < keys.end; ++j) {
              const float dropped_dprob = rounded<T>(dot(dout_row, v_head.data() + j * p.value_dim, p.value_dim));
              dprob[size_t(j)] = rounded<T>(dropped_dprob * row.mask[size_t(j)]);
              row_dot += dprob[size_t(j)] * row.prob[size_t(j)];
            }
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t j = keys.begin; j < keys.end; ++j) {
              float ds = rounded<T>(row.prob[size_t(j)] * (dprob[size_t(j)] - row_dot));
              if (p.softcap > 0) {
                const float capped = row.score[size_t(j)] / p.softcap;
                ds = rounded<T>(ds * (1.0f - capped * capped));
              }
              dscore[size_t(i * p.kv_len + j)] = ds;
              dropped[size_t(i * p.kv_len + j)] = row.dropped[size_t(j)];
              for (int64_t d = 0; d < p.head_dim; ++d) acc[size_t(d)] += ds * k_head[size_t(j * p.head_dim + d)];
            }
            T* dq_row = dq + ((b * p.q_len + i) * p.q_heads + h) * p.head_dim;
            for (int64_t d = 0; d < p.head_dim; ++d) dq_row[d] = T(rounded<T>(acc[size_t(d)]) * p.scale);
          }
        }
#pragma omp parallel for schedule(dynamic, 16)
        for (int64_t j = 0; j < p.kv_len; ++j) {
          const kernels::QueryRange queries = kernels::visible_query_range(p, j, j + 1);
          for (int64_t i = queries.begin; i < queries.end; ++i) {
            const float w = dropped[size_t(i * p.kv_len + j)], ds = dscore[size_t(i * p.kv_len + j)];
            for (int64_t d = 0; d < p.value_dim; ++d)
              dv_sum[size_t(j * p.value_dim + d)] += w * dout_head[size_t(i * p.value_dim + d)];
            for (int64_t d = 0; d < p.head_dim; ++d)
              dk_sum[size_t(j * p.head_dim + d)] += ds * q_head[size_t(i * p.head_dim + d)];
          }
        }
      }
      for (int64_t j = 0; j < p.kv_len; ++j) {
        T* dk_row = dk + ((b * p.kv_len + j) * p.kv_heads + kv_head) * p.head_dim;
        T* dv_row = dv + ((b * p.kv_len + j) * p.kv_heads + kv_head) * p.value_dim;
        for (int64_t d = 0; d < p.head_dim; ++d)
          dk_row[d] = T(rounded<T>(dk_sum[size_t(j * p.head_dim + d)]) * p.scale);
        for (int64_t d = 0; d < p.value_dim; ++d) dv_row[d] = T(dv_sum[size_t(j * p.value_dim + d)]);
      }
    }
}

template <class T>
void naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                     const ops::AttentionConfig& config, NaiveAttention& result) {
  const kernels::AttentionParams<T> p = ops::attention_kernel_params<T>(q, k, v, config);
  naive_forward(p, q.data<T>(), k.data<T>(), v.data<T>(), result.out.data<T>());
  naive_backward(p, dout.data<T>(), q.data<T>(), k.data<T>(), v.data<T>(), result.dq.data<T>(), result.dk.data<T>(),
                 result.dv.data<T>());
}

}  // namespace

NaiveAttention naive_low_precision_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                             const ops::AttentionConfig& config) {
  ops::check_dtype(kOp, "q", q, {DType::f32, DType::bf16, DType::f16});
  if (!q.device().is_cpu()) raise<DeviceError>(kOp, "q", "a CPU tensor", q.describe());
  for (auto [name, t] : {std::pair<std::string_view, const Tensor&>{"k", k}, {"v", v}, {"dout", dout}}) {
    ops::check_same_device(kOp, name, t, q);
    ops::check_same_dtype(kOp, name, t, q);
  }
  ops::check_dim(kOp, "q", q, 4);
  ops::check_dim(kOp, "k", k, 4);
  ops::check_dim(kOp, "v", v, 4);
  ops::check_shape(kOp, "dout", dout, {q.size(0), q.size(1), q.size(2), v.size(3)});
  const Tensor dout_rows = dout.contiguous();
  NaiveAttention result{Tensor::empty(dout.shape(), q.dtype()), Tensor::empty(q.shape(), q.dtype()),
                        Tensor::empty(k.shape(), q.dtype()), Tensor::empty(v.shape(), q.dtype())};
  switch (q.dtype()) {
    case DType::bf16: naive_attention<bf16>(q, k, v, dout_rows, config, result); break;
    case DType::f16: naive_attention<f16>(q, k, v, dout_rows, config, result); break;
    default: naive_attention<float>(q, k, v, dout_rows, config, result); break;
  }
  return result;
}

}  // namespace alpha::check
