// Reference attention against a naive f64 loop written here in the plainest way (the full S, P and
// dropout mask per (batch, head), and the textbook softmax backward rather than the rowsum(dO∘O)
// identity the kernel uses), through the kernels directly (into poisoned outputs) and through the
// tensor ops; finite-difference gradient checks through autograd; statistics sanity; the sliding window
// (with and without causal, one side or both, rows left empty) and its query-range rule; bad inputs.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "alpha/autograd/functions.h"
#include "alpha/core/philox.h"
#include "alpha/kernels/attention_reference.h"
#include "alpha/kernels/flash_attention.h"
#include "alpha/ops/attention.h"
#include "alpha/ops/attention_params.h"
#include "alpha/ops/check.h"
#include "support/checks.h"

namespace alpha {
namespace {

using test::all_close;
using test::random;

// How q, k and v are laid out in memory: each its own contiguous tensor, slices of one fused
// [B, T, Hq + 2·Hkv, D] qkv tensor, or head-major [B, H, T, D] tensors transposed to [B, T, H, D].
enum class Layout { contiguous, fused_qkv, head_major };

struct AttentionCase {
  std::string name;
  int64_t batch, q_len, kv_len, q_heads, kv_heads, head_dim, value_dim;
  bool causal = false;
  double softcap = 0.0;
  double dropout_p = 0.0;
  double scale = 0.0;
  Layout layout = Layout::contiguous;
  int64_t window_left = -1, window_right = -1;
};

std::ostream& operator<<(std::ostream& os, const AttentionCase& c) { return os << c.name; }

struct Inputs {
  Tensor q, k, v, dout;
};

Inputs make_inputs(const AttentionCase& c, DType dtype) {
  Inputs in;
  switch (c.layout) {
    case Layout::contiguous:
      in.q = random({c.batch, c.q_len, c.q_heads, c.head_dim}, dtype);
      in.k = random({c.batch, c.kv_len, c.kv_heads, c.head_dim}, dtype);
      in.v = random({c.batch, c.kv_len, c.kv_heads, c.value_dim}, dtype);
      break;
    case Layout::fused_qkv: {
      EXPECT_EQ(c.q_len, c.kv_len) << "a fused qkv tensor needs Tq == Tk";
      EXPECT_EQ(c.head_dim, c.value_dim) << "a fused qkv tensor needs D == Dv";
      Tensor qkv = random({c.batch, c.q_len, c.q_heads + 2 * c.kv_heads, c.head_dim}, dtype);
      in.q = qkv.slice(2, 0, c.q_heads);
      in.k = qkv.slice(2, c.q_heads, c.q_heads + c.kv_heads);
      in.v = qkv.slice(2, c.q_heads + c.kv_heads, c.q_heads + 2 * c.kv_heads);
      break;
    }
    case Layout::head_major:
      in.q = random({c.batch, c.q_heads, c.q_len, c.head_dim}, dtype).transpose(1, 2);
      in.k = random({c.batch, c.kv_heads, c.kv_len, c.head_dim}, dtype).transpose(1, 2);
      in.v = random({c.batch, c.kv_heads, c.kv_len, c.value_dim}, dtype).transpose(1, 2);
      break;
  }
  in.dout = random({c.batch, c.q_len, c.q_heads, c.value_dim}, dtype);
  return in;
}

ops::AttentionConfig config_of(const AttentionCase& c) {
  ops::AttentionConfig config;
  config.scale = c.scale;
  config.causal = c.causal;
  config.softcap = c.softcap;
  config.dropout_p = c.dropout_p;
  config.dropout_seed = test::fresh_seed();
  config.dropout_offset = 1000003;
  config.window_left = c.window_left;
  config.window_right = c.window_right;
  return config;
}

// Whether query i sees key j, written out from the definition: causal keeps j <= d, the window
// d − left <= j <= d + right, around the bottom-right aligned diagonal d = i + (Tk − Tq).
bool naive_visible(const ops::AttentionConfig& config, int64_t q_len, int64_t kv_len, int64_t i, int64_t j) {
  int64_t d = i + (kv_len - q_len);
  if (config.causal && j > d) return false;
  if (config.window_left >= 0 && j < d - config.window_left) return false;
  if (config.window_right >= 0 && j > d + config.window_right) return false;
  return true;
}

struct Expected {
  Tensor out, row_max, row_sum, dq, dk, dv;  // f64
};

// The naive f64 oracle: per (b, h) the full score matrix S, the probabilities P and the scaled dropout
// mask Z, then O = (P∘Z)·V; backward through dP = (dO·Vᵀ)∘Z and the softmax Jacobian
// dS_ij = P_ij·(dP_ij − Σ_k P_ik·dP_ik), then through the softcap.
Expected naive_attention(const Inputs& in, const ops::AttentionConfig& config) {
  int64_t B = in.q.size(0), Tq = in.q.size(1), Hq = in.q.size(2), D = in.q.size(3);
  int64_t Tk = in.k.size(1), Hkv = in.k.size(2), Dv = in.v.size(3);
  std::vector<double> q = in.q.contiguous().to_vector<double>(), k = in.k.contiguous().to_vector<double>();
  std::vector<double> v = in.v.contiguous().to_vector<double>(), dout = in.dout.contiguous().to_vector<double>();
  double scale = config.scale != 0 ? config.scale : 1.0 / std::sqrt(double(D));
  double c = config.softcap, p = config.dropout_p;
  auto at4 = [](int64_t i0, int64_t i1, int64_t i2, int64_t i3, int64_t n1, int64_t n2, int64_t n3) {
    return size_t(((i0 * n1 + i1) * n2 + i2) * n3 + i3);
  };
  std::vector<double> out(size_t(B * Tq * Hq * Dv), 0.0), m(size_t(B * Hq * Tq)), l(size_t(B * Hq * Tq));
  std::vector<double> dq(size_t(B * Tq * Hq * D), 0.0), dk(size_t(B * Tk * Hkv * D), 0.0);
  std::vector<double> dv(size_t(B * Tk * Hkv * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      int64_t g = h / (Hq / Hkv);
      std::vector<std::vector<double>> raw(Tq, std::vector<double>(Tk)), S = raw, P = raw, Z = raw, dP = raw;
      std::vector<std::vector<bool>> visible(Tq, std::vector<bool>(Tk));
      for (int64_t i = 0; i < Tq; ++i) {
        for (int64_t j = 0; j < Tk; ++j) {
          visible[i][j] = naive_visible(config, Tq, Tk, i, j);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[at4(b, i, h, d, Tq, Hq, D)] * k[at4(b, j, g, d, Tk, Hkv, D)];
          raw[i][j] = dot * scale;
          S[i][j] = c > 0 ? c * std::tanh(raw[i][j] / c) : raw[i][j];
          uint64_t index = config.dropout_offset + uint64_t(((b * Hq + h) * Tq + i) * Tk + j);
          bool keep = p == 0 || dropout_keep(config.dropout_seed, index, float(p));
          Z[i][j] = keep ? 1.0 / (1.0 - p) : 0.0;
        }
        double row_max = -std::numeric_limits<double>::infinity(), row_sum = 0;
        for (int64_t j = 0; j < Tk; ++j)
          if (visible[i][j]) row_max = std::max(row_max, S[i][j]);
        for (int64_t j = 0; j < Tk; ++j)
          if (visible[i][j]) row_sum += std::exp(S[i][j] - row_max);
        m[size_t((b * Hq + h) * Tq + i)] = row_max;
        l[size_t((b * Hq + h) * Tq + i)] = row_sum;
        for (int64_t j = 0; j < Tk; ++j) P[i][j] = visible[i][j] ? std::exp(S[i][j] - row_max) / row_sum : 0.0;
        for (int64_t j = 0; j < Tk; ++j)
          for (int64_t d = 0; d < Dv; ++d)
            out[at4(b, i, h, d, Tq, Hq, Dv)] += P[i][j] * Z[i][j] * v[at4(b, j, g, d, Tk, Hkv, Dv)];
      }
      for (int64_t i = 0; i < Tq; ++i) {
        double row_dot = 0;  // Σ_k P_ik·dP_ik
        for (int64_t j = 0; j < Tk; ++j) {
          double dropped_dp = 0;
          for (int64_t d = 0; d < Dv; ++d) {
            dropped_dp += dout[at4(b, i, h, d, Tq, Hq, Dv)] * v[at4(b, j, g, d, Tk, Hkv, Dv)];
            dv[at4(b, j, g, d, Tk, Hkv, Dv)] += P[i][j] * Z[i][j] * dout[at4(b, i, h, d, Tq, Hq, Dv)];
          }
          dP[i][j] = dropped_dp * Z[i][j];
          row_dot += P[i][j] * dP[i][j];
        }
        for (int64_t j = 0; j < Tk; ++j) {
          double dS = P[i][j] * (dP[i][j] - row_dot);
          double t = c > 0 ? std::tanh(raw[i][j] / c) : 0.0;
          double draw = dS * (1 - t * t);
          for (int64_t d = 0; d < D; ++d) {
            dq[at4(b, i, h, d, Tq, Hq, D)] += draw * scale * k[at4(b, j, g, d, Tk, Hkv, D)];
            dk[at4(b, j, g, d, Tk, Hkv, D)] += draw * scale * q[at4(b, i, h, d, Tq, Hq, D)];
          }
        }
      }
    }
  }
  return {Tensor::from_vector(out, {B, Tq, Hq, Dv}), Tensor::from_vector(m, {B, Hq, Tq}),
          Tensor::from_vector(l, {B, Hq, Tq}),       Tensor::from_vector(dq, {B, Tq, Hq, D}),
          Tensor::from_vector(dk, {B, Tk, Hkv, D}),  Tensor::from_vector(dv, {B, Tk, Hkv, Dv})};
}


struct KernelResults {
  Tensor out, row_max, row_sum, dq, dk, dv;
};

KernelResults run_kernels(const Inputs& in, const ops::AttentionConfig& config) {
  DType dtype = in.q.dtype();
  Shape stats = {in.q.size(0), in.q.size(2), in.q.size(1)};
  KernelResults r{test::poisoned(in.dout.shape(), dtype), test::poisoned(stats, dtype),
                  test::poisoned(stats, dtype),           test::poisoned(in.q.shape(), dtype),
                  test::poisoned(in.k.shape(), dtype),    test::poisoned(in.v.shape(), dtype)};
  ops::dispatch_cpu_float("test", in.q, [&]<class T>() {
    kernels::AttentionParams<T> params = ops::attention_kernel_params<T>(in.q, in.k, in.v, config);
    kernels::cpu::attention_reference_forward(kernels::AttentionForwardArgs<T>{
        in.q.data<T>(), in.k.data<T>(), in.v.data<T>(), r.out.data<T>(), r.row_max.data<acc_t<T>>(),
        r.row_sum.data<acc_t<T>>(), params});
    kernels::cpu::attention_reference_backward(kernels::AttentionBackwardArgs<T>{
        in.dout.data<T>(), in.q.data<T>(), in.k.data<T>(), in.v.data<T>(), r.out.data<T>(),
        r.row_max.data<acc_t<T>>(), r.row_sum.data<acc_t<T>>(), r.dq.data<T>(), r.dk.data<T>(), r.dv.data<T>(),
        params});
  });
  return r;
}

class AttentionReference : public ::testing::TestWithParam<std::tuple<AttentionCase, DType>> {};

TEST_P(AttentionReference, KernelsAndOpsMatchNaiveF64Loop) {
  auto [c, dtype] = GetParam();
  Inputs in = make_inputs(c, dtype);
  ops::AttentionConfig config = config_of(c);
  Expected want = naive_attention(in, config);

  KernelResults got = run_kernels(in, config);
  EXPECT_TRUE(all_close(got.out, want.out, "attention"));
  EXPECT_TRUE(all_close(got.row_max, want.row_max, "attention"));
  EXPECT_TRUE(all_close(got.row_sum, want.row_sum, "attention"));
  EXPECT_TRUE(all_close(got.dq, want.dq, "attention"));
  EXPECT_TRUE(all_close(got.dk, want.dk, "attention"));
  EXPECT_TRUE(all_close(got.dv, want.dv, "attention"));

  ops::AttentionOutput fwd = ops::attention_materialized(in.q, in.k, in.v, config);
  EXPECT_TRUE(all_close(fwd.out, want.out, "attention"));
  EXPECT_TRUE(all_close(fwd.row_max, want.row_max, "attention"));
  EXPECT_TRUE(all_close(fwd.row_sum, want.row_sum, "attention"));
  ops::AttentionGrads grads = ops::attention_materialized_backward(in.dout, in.q, in.k, in.v, fwd.out, fwd.row_max,
                                                                fwd.row_sum, config);
  EXPECT_TRUE(all_close(grads.dq, want.dq, "attention"));
  EXPECT_TRUE(all_close(grads.dk, want.dk, "attention"));
  EXPECT_TRUE(all_close(grads.dv, want.dv, "attention"));
}

// Reconstructs P from the returned statistics and the naive scores: every row with a visible key sums
// to 1; a row with none has m = −inf, l = 0 and a zero output.
TEST_P(AttentionReference, StatisticsReconstructNormalisedRows) {
  auto [c, dtype] = GetParam();
  Inputs in = make_inputs(c, dtype);
  ops::AttentionConfig config = config_of(c);
  ops::AttentionOutput fwd = ops::attention_materialized(in.q, in.k, in.v, config);
  int64_t B = c.batch, Tq = c.q_len, Tk = c.kv_len, Hq = c.q_heads, D = c.head_dim;
  double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(double(D));
  test::Tolerance tol = test::tolerance("attention", dtype);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        double m = fwd.row_max.at({b, h, i}), l = fwd.row_sum.at({b, h, i});
        int64_t visible = 0;
        for (int64_t j = 0; j < Tk; ++j) visible += naive_visible(config, Tq, Tk, i, j);
        if (visible == 0) {
          EXPECT_EQ(m, -std::numeric_limits<double>::infinity()) << "row " << i;
          EXPECT_EQ(l, 0.0) << "row " << i;
          for (int64_t d = 0; d < c.value_dim; ++d) EXPECT_EQ(fwd.out.at({b, i, h, d}), 0.0);
          continue;
        }
        double total = 0;
        for (int64_t j = 0; j < Tk; ++j) {
          if (!naive_visible(config, Tq, Tk, i, j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += in.q.at({b, i, h, d}) * in.k.at({b, j, h / (Hq / c.kv_heads), d});
          double s = c.softcap > 0 ? c.softcap * std::tanh(dot * scale / c.softcap) : dot * scale;
          total += std::exp(s - m) / l;
        }
        EXPECT_NEAR(total, 1.0, tol.abs + tol.rel) << "b " << b << " h " << h << " row " << i;
      }
}

const AttentionCase kCases[] = {
    // name, B, Tq, Tk, Hq, Hkv, D, Dv, causal, softcap, dropout_p, scale, layout
    {"mha_square", 2, 7, 7, 2, 2, 5, 5},
    {"gqa_causal_square", 2, 13, 13, 4, 2, 16, 16, true},
    {"mqa_causal_q_shorter_d_ne_dv", 1, 7, 13, 3, 1, 5, 7, true},
    {"gqa_causal_q_longer_masked_rows", 2, 13, 7, 4, 2, 5, 3, true},
    {"noncausal_q_longer_d1", 1, 33, 7, 2, 2, 1, 1},
    {"softcap_explicit_scale", 1, 33, 33, 4, 2, 16, 16, true, 0.5, 0.0, 0.9},
    {"dropout_gqa", 2, 13, 13, 4, 2, 16, 5, true, 0.0, 0.3},
    {"everything", 2, 33, 13, 4, 2, 5, 16, true, 2.0, 0.2},
    {"single_token", 1, 1, 1, 1, 1, 1, 1},
    {"single_query_many_keys", 3, 1, 33, 2, 1, 16, 5, true, 1.5, 0.5},
    {"single_key_causal", 2, 7, 1, 2, 1, 5, 5, true, 0.0, 0.25},
    {"fused_qkv_gqa", 2, 13, 13, 4, 2, 16, 16, true, 1.0, 0.1, 0.0, Layout::fused_qkv},
    {"fused_qkv_mha", 1, 7, 7, 3, 3, 5, 5, false, 0.0, 0.0, 0.0, Layout::fused_qkv},
    {"head_major_mqa", 2, 7, 33, 4, 1, 5, 16, true, 0.0, 0.5, 0.0, Layout::head_major},
    {"head_major_q_longer", 1, 33, 13, 2, 2, 16, 1, true, 3.0, 0.0, 0.0, Layout::head_major},
    // Sliding windows (..., layout, window_left, window_right).
    {"window_left_causal", 2, 13, 13, 4, 2, 5, 5, true, 0.0, 0.0, 0.0, Layout::contiguous, 3, -1},
    {"window_left_only_noncausal", 1, 13, 13, 2, 2, 5, 3, false, 0.0, 0.0, 0.0, Layout::contiguous, 4, -1},
    {"window_right_only_q_shorter", 1, 7, 13, 2, 1, 5, 5, false, 0.0, 0.0, 0.0, Layout::contiguous, -1, 2},
    {"window_both_noncausal_dropout", 2, 13, 13, 4, 2, 5, 7, false, 0.0, 0.3, 0.0, Layout::contiguous, 2, 4},
    {"window_both_q_shorter_softcap", 1, 7, 33, 2, 2, 16, 5, false, 1.5, 0.0, 0.0, Layout::contiguous, 5, 1},
    {"window_causal_q_longer_empty_rows", 2, 13, 7, 4, 2, 5, 3, true, 0.0, 0.2, 0.0, Layout::contiguous, 2, -1},
    {"window_noncausal_q_longer_empty_rows", 1, 33, 13, 2, 1, 5, 5, false, 0.0, 0.0, 0.0, Layout::contiguous, 3, 1},
    {"window_zero_width", 1, 13, 13, 2, 2, 5, 5, false, 0.0, 0.0, 0.0, Layout::contiguous, 0, 0},
    {"window_wider_than_keys_causal", 1, 7, 13, 2, 2, 5, 5, true, 0.0, 0.0, 0.0, Layout::contiguous, 100, 100},
    {"window_causal_right_bound_everything", 2, 33, 13, 4, 2, 5, 16, true, 2.0, 0.2, 0.0, Layout::contiguous, 4, 0},
    {"window_fused_qkv_gqa", 2, 13, 13, 4, 2, 16, 16, false, 1.0, 0.1, 0.0, Layout::fused_qkv, 3, 2},
    {"window_head_major_mqa", 2, 7, 33, 4, 1, 5, 16, true, 0.0, 0.5, 0.0, Layout::head_major, 9, -1},
};

INSTANTIATE_TEST_SUITE_P(Cases, AttentionReference,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(DType::f32, DType::f64)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

TEST(AttentionReferenceOps, DropoutChangesTheOutputAndSeedsReproduceIt) {
  AttentionCase c{"dropout", 1, 7, 7, 2, 2, 5, 5, true, 0.0, 0.5};
  Inputs in = make_inputs(c, DType::f64);
  ops::AttentionConfig config = config_of(c);
  ops::AttentionOutput first = ops::attention_materialized(in.q, in.k, in.v, config);
  ops::AttentionOutput again = ops::attention_materialized(in.q, in.k, in.v, config);
  EXPECT_EQ(first.out.to_vector<double>(), again.out.to_vector<double>());
  config.dropout_p = 0;
  ops::AttentionOutput undropped = ops::attention_materialized(in.q, in.k, in.v, config);
  EXPECT_NE(first.out.to_vector<double>(), undropped.out.to_vector<double>());
  // Dropout acts after normalisation: the statistics are those of the undropped softmax.
  EXPECT_EQ(first.row_max.to_vector<double>(), undropped.row_max.to_vector<double>());
  EXPECT_EQ(first.row_sum.to_vector<double>(), undropped.row_sum.to_vector<double>());
}

TEST(AttentionReferenceOps, IdenticalAcrossThreadCounts) {
  AttentionCase c{"threads", 2, 13, 13, 4, 2, 16, 16, true, 1.0, 0.2};
  Inputs in = make_inputs(c, DType::f32);
  ops::AttentionConfig config = config_of(c);
  int previous = omp_get_max_threads();
  std::vector<std::vector<float>> first;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    ops::AttentionOutput fwd = ops::attention_materialized(in.q, in.k, in.v, config);
    ops::AttentionGrads grads = ops::attention_materialized_backward(in.dout, in.q, in.k, in.v, fwd.out,
                                                                  fwd.row_max, fwd.row_sum, config);
    std::vector<std::vector<float>> results;
    for (const Tensor& t : {fwd.out, fwd.row_max, fwd.row_sum, grads.dq, grads.dk, grads.dv})
      results.push_back(t.to_vector<float>());
    if (first.empty()) first = results;
    else EXPECT_EQ(results, first) << threads << " threads";
  }
  omp_set_num_threads(previous);
}

TEST(AttentionReferenceAutograd, GradientsMatchFiniteDifferences) {
  const AttentionCase cases[] = {
      {"gqa_causal_q_longer_softcap_dropout", 1, 5, 3, 4, 2, 3, 2, true, 1.0, 0.3},
      {"mqa_q_shorter_dropout", 2, 3, 5, 2, 1, 2, 3, false, 0.0, 0.4},
      {"mha_causal_square", 1, 4, 4, 2, 2, 3, 3, true},
      {"window_left_causal_softcap_dropout", 1, 6, 6, 2, 1, 3, 2, true, 0.5, 0.3, 0.0, Layout::contiguous, 2, -1},
      {"window_both_q_longer_empty_rows", 1, 6, 3, 2, 2, 2, 3, false, 0.0, 0.0, 0.0, Layout::contiguous, 1, 0},
      {"window_right_only_q_shorter_dropout", 2, 3, 6, 2, 1, 2, 2, false, 0.0, 0.4, 0.0, Layout::contiguous, -1, 1},
  };
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(c.name);
    Inputs in = make_inputs(c, DType::f64);
    ops::AttentionConfig config = config_of(c);
    EXPECT_TRUE(test::gradcheck(
        [&](const auto& x) { return autograd::attention_materialized(x[0], x[1], x[2], config); },
        {in.q.contiguous(), in.k.contiguous(), in.v.contiguous()}));
  }
}

TEST(AttentionReferenceAutograd, GradientsFlowIntoAFusedQkv) {
  // q, k and v as slices of one fused tensor: the three gradients land in their regions of its gradient.
  int64_t Hq = 2, Hkv = 1;
  ops::AttentionConfig config = config_of({"fused", 1, 4, 4, Hq, Hkv, 3, 3, true, 0.5, 0.25});
  EXPECT_TRUE(test::gradcheck(
      [&](const auto& x) {
        return autograd::attention_materialized(autograd::slice(x[0], 2, 0, Hq),
                                             autograd::slice(x[0], 2, Hq, Hq + Hkv),
                                             autograd::slice(x[0], 2, Hq + Hkv, Hq + 2 * Hkv), config);
      },
      {random({1, 4, Hq + 2 * Hkv, 3}, DType::f64)}));
}

TEST(AttentionReferenceAutograd, SelfAttentionOverAFusedQkvMatchesThreeSlices) {
  // autograd::self_attention writes dq, dk and dv into one gradient; the slice path sums three zero-padded ones.
  const int64_t Hq = 4, Hkv = 2, D = 3;
  ops::AttentionConfig config = config_of({"fused", 1, 5, 5, Hq, Hkv, D, D, true, 0.5, 0.25});
  EXPECT_TRUE(test::gradcheck(
      [&](const auto& x) {
        return autograd::self_attention(x[0], Hq, Hkv, config, autograd::AttentionKernel::materialized);
      },
      {random({2, 5, (Hq + 2 * Hkv) * D}, DType::f64)}));

  Tensor qkv = random({2, 7, (Hq + 2 * Hkv) * D}, DType::f32), dy = random({2, 7, Hq, D}, DType::f32);
  autograd::Variable fused(qkv, true), sliced(qkv, true);
  autograd::Variable y_fused = autograd::self_attention(fused, Hq, Hkv, config, autograd::AttentionKernel::materialized);
  autograd::backward(y_fused, dy);
  auto view = [&](int64_t begin, int64_t heads) {
    return autograd::reshape(autograd::slice(sliced, 2, begin * D, (begin + heads) * D), {2, 7, heads, D});
  };
  autograd::Variable y_sliced = autograd::attention_materialized(view(0, Hq), view(Hq, Hkv), view(Hq + Hkv, Hkv), config);
  EXPECT_TRUE(test::bit_equal(y_fused.value(), y_sliced.value()));
  autograd::backward(y_sliced, dy);
  const Tensor a = fused.grad(), b = sliced.grad();
  ASSERT_EQ(a.shape(), b.shape());
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) ASSERT_EQ(va[i], vb[i]) << "element " << i;  // equal, up to the sign of 0

  EXPECT_THROW(autograd::self_attention(fused, 3, 2, config, autograd::AttentionKernel::materialized), ValueError);
  EXPECT_THROW(autograd::self_attention(fused, 5, 1, config, autograd::AttentionKernel::materialized), ShapeError);
}

TEST(AttentionReferenceOps, BackwardWritesIntoViewsOfAFusedGradient) {
  // dq, dk and dv written into the slices of one poisoned [B, T, (Hq + 2·Hkv)·D] buffer: the same bits as the
  // fresh gradients, and every element of the buffer written.
  const int64_t B = 2, T = 6, Hq = 4, Hkv = 2, D = 3, width = (Hq + 2 * Hkv) * D;
  ops::AttentionConfig config = config_of({"fused", B, T, T, Hq, Hkv, D, D, true, 0.5, 0.25});
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor qkv = random({B, T, width}, dtype);
    auto heads = [&](const Tensor& fused, int64_t first, int64_t count) {
      return fused.slice(2, first * D, (first + count) * D).view({B, T, count, D});
    };
    const Tensor q = heads(qkv, 0, Hq), k = heads(qkv, Hq, Hkv), v = heads(qkv, Hq + Hkv, Hkv);
    const Tensor dout = random({B, T, Hq, D}, dtype);
    ops::AttentionOutput fwd = ops::attention_materialized(q, k, v, config);
    ops::AttentionGrads fresh =
        ops::attention_materialized_backward(dout, q, k, v, fwd.out, fwd.row_max, fwd.row_sum, config);
    Tensor fused_grad = test::poisoned({B, T, width}, dtype);
    const ops::AttentionGrads into{heads(fused_grad, 0, Hq), heads(fused_grad, Hq, Hkv),
                                   heads(fused_grad, Hq + Hkv, Hkv)};
    ops::AttentionGrads got =
        ops::attention_materialized_backward(dout, q, k, v, fwd.out, fwd.row_max, fwd.row_sum, config, &into);
    EXPECT_EQ(got.dq.raw_data(), into.dq.raw_data()) << "the views themselves come back";
    EXPECT_TRUE(test::bit_equal(into.dq.contiguous(), fresh.dq));
    EXPECT_TRUE(test::bit_equal(into.dk.contiguous(), fresh.dk));
    EXPECT_TRUE(test::bit_equal(into.dv.contiguous(), fresh.dv));
    for (double value : fused_grad.to_vector<double>()) ASSERT_FALSE(std::isnan(value)) << "an element left unwritten";

    // Layouts the kernels cannot write: heads not packed (a transposed view), and the wrong shape.
    ops::AttentionGrads transposed = into;
    transposed.dk = Tensor::empty({B, Hkv, T, D}, dtype).transpose(1, 2);
    EXPECT_ALPHA_ERROR(
        ops::attention_materialized_backward(dout, q, k, v, fwd.out, fwd.row_max, fwd.row_sum, config, &transposed),
        LayoutError, "[attention_materialized_backward]", "'into.dk'", "packed as [H, D]");
    ops::AttentionGrads wrong_shape = into;
    wrong_shape.dv = Tensor::empty({B, T, Hkv, D + 1}, dtype);
    EXPECT_ALPHA_ERROR(
        ops::attention_materialized_backward(dout, q, k, v, fwd.out, fwd.row_max, fwd.row_sum, config, &wrong_shape),
        ShapeError, "[attention_materialized_backward]", "'into.dv'");
    ops::AttentionGrads wrong_dtype = into;
    wrong_dtype.dq = Tensor::empty({B, T, Hq, D}, dtype == DType::f32 ? DType::f64 : DType::f32);
    EXPECT_ALPHA_ERROR(
        ops::attention_materialized_backward(dout, q, k, v, fwd.out, fwd.row_max, fwd.row_sum, config, &wrong_dtype),
        DTypeError, "[attention_materialized_backward]", "'into.dq'");
  }
}

TEST(AttentionReferenceOps, FlashKernelsOfBadInputsRaise) {
  EXPECT_ALPHA_ERROR(ops::flash_attention_kernels(Device::cuda(0), DType::i32, 64, 64), DTypeError,
                     "[flash_attention_kernels]", "'dtype'", "f32, bf16 or f16", "i32");
  EXPECT_ALPHA_ERROR(ops::flash_attention_kernels(Device::cpu(), DType::bf16, 64, 64), DeviceError,
                     "[flash_attention_kernels]", "'device'", "a CUDA device", "cpu");
}

TEST(AttentionReferenceOps, BadInputsRaise) {
  constexpr const char* kOp = "[attention_materialized]";
  Tensor q = random({2, 4, 4, 8}), k = random({2, 6, 2, 8}), v = random({2, 6, 2, 5});
  ops::AttentionConfig ok;
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, random({2, 6, 3, 8}), random({2, 6, 3, 5}), ok), ShapeError, kOp,
                     "'k'", "dividing", "[2, 6, 3, 8]");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, random({2, 6, 2, 7}), v, ok), ShapeError, kOp, "'k'",
                     "[2, 6, 2, 7]");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, random({3, 6, 2, 8}), v, ok), ShapeError, kOp, "'k'");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, k, random({3, 6, 2, 5}), ok), ShapeError, kOp, "'v'");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, k, random({2, 5, 2, 5}), ok), ShapeError, kOp, "'v'",
                     "[2, 5, 2, 5]");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, k, random({2, 6, 1, 5}), ok), ShapeError, kOp, "'v'");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(random({2, 4, 32}), k, v, ok), ShapeError, kOp, "'q'",
                     "4 dimensions");
  Tensor wide = random({2, 4, 4, 16});
  EXPECT_ALPHA_ERROR(ops::attention_materialized(wide.slice(3, 0, 16, 2), k, v, ok), LayoutError, kOp, "'q'",
                     "unit stride");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, random({2, 6, 2, 16}).slice(3, 0, 16, 2), v, ok), LayoutError,
                     kOp, "'k'", "unit stride");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(Tensor::zeros({2, 4, 4, 8}, DType::i32), k, v, ok), DTypeError, kOp,
                     "'q'", "i32");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, k, random({2, 6, 2, 5}, DType::f64), ok), DTypeError, kOp, "'v'",
                     "f32", "f64");
  auto with = [](auto set) {
    ops::AttentionConfig config;
    set(config);
    return config;
  };
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, k, v, with([](auto& c) { c.dropout_p = -0.1; })), ValueError, kOp,
                     "'config.dropout_p'", "[0, 1)");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, k, v, with([](auto& c) { c.dropout_p = 1.0; })), ValueError, kOp,
                     "'config.dropout_p'");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, k, v, with([](auto& c) { c.softcap = -1.0; })), ValueError, kOp,
                     "'config.softcap'");
  // The flash kernels take the row maximum of the unscaled dots: a negative scale would reverse it.
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, k, v, with([](auto& c) { c.scale = -0.5; })), ValueError, kOp,
                     "'config.scale'", ">= 0", "-0.5");
  EXPECT_ALPHA_ERROR(ops::flash_attention(q, k, v, with([](auto& c) { c.scale = -0.5; })), ValueError,
                     "[flash_attention]", "'config.scale'");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, k, v, with([](auto& c) { c.window_left = -2; })), ValueError, kOp,
                     "'config.window_left'", "-2");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, k, v, with([](auto& c) { c.window_right = -7; })), ValueError,
                     kOp, "'config.window_right'", "-7");
  // The atomic-dQ backward is not audited for constant time: asking for both is refused before anything runs.
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, k, v, with([](auto& c) {
                       c.constant_time = true;
                       c.deterministic = false;
                     })),
                     ValueError, kOp, "'config.deterministic'", "constant_time");

  constexpr const char* kBackOp = "[attention_materialized_backward]";
  ops::AttentionOutput fwd = ops::attention_materialized(q, k, v, ok);
  Tensor dout = random({2, 4, 4, 5});
  EXPECT_ALPHA_ERROR(
      ops::attention_materialized_backward(random({2, 4, 4, 8}), q, k, v, fwd.out, fwd.row_max, fwd.row_sum, ok),
      ShapeError, kBackOp, "'dout'", "[2, 4, 4, 5]");
  EXPECT_ALPHA_ERROR(ops::attention_materialized_backward(dout, q, k, v, fwd.out, random({2, 4, 3}), fwd.row_sum, ok),
                     ShapeError, kBackOp, "'row_max'");
  EXPECT_ALPHA_ERROR(
      ops::attention_materialized_backward(dout, q, k, v, fwd.out, fwd.row_max, fwd.row_sum.to(DType::f64), ok),
      DTypeError, kBackOp, "'row_sum'");
  EXPECT_ALPHA_ERROR(ops::attention_materialized_backward(dout, q, random({2, 6, 3, 8}), random({2, 6, 3, 5}),
                                                       fwd.out, fwd.row_max, fwd.row_sum, ok),
                     ShapeError, kBackOp, "'k'", "dividing");
  EXPECT_ALPHA_ERROR(ops::attention_materialized_backward(dout, q, k, v, fwd.out, fwd.row_max, fwd.row_sum,
                                                          with([](auto& c) { c.window_left = -3; })),
                     ValueError, kBackOp, "'config.window_left'");
}

// visible_key_range and visible_query_range (which the CUDA kernels skip tiles with) against the naive
// mask, for every small shape, window and key range: the key range is exactly the visible keys, and the
// query range exactly the queries that see some key of [key_begin, key_end) (empty when none does).
TEST(AttentionReferenceWindow, RangesMatchTheNaiveMask) {
  const int64_t windows[] = {-1, 0, 1, 3, 20};
  for (bool causal : {false, true})
    for (int64_t left : windows)
      for (int64_t right : windows)
        for (int64_t q_len = 1; q_len <= 7; ++q_len)
          for (int64_t kv_len = 1; kv_len <= 7; ++kv_len) {
            ops::AttentionConfig config;
            config.causal = causal;
            config.window_left = left;
            config.window_right = right;
            kernels::AttentionParams<double> p{};
            p.q_len = q_len, p.kv_len = kv_len, p.causal = causal, p.window_left = left, p.window_right = right;
            std::string where = "causal " + std::to_string(causal) + " left " + std::to_string(left) + " right " +
                                std::to_string(right) + " Tq " + std::to_string(q_len) + " Tk " + std::to_string(kv_len);
            for (int64_t i = 0; i < q_len; ++i) {
              kernels::KeyRange keys = kernels::visible_key_range(p, i);
              ASSERT_LE(0, keys.begin) << where;
              ASSERT_LE(keys.begin, keys.end) << where;
              ASSERT_LE(keys.end, kv_len) << where;
              for (int64_t j = 0; j < kv_len; ++j)
                ASSERT_EQ(j >= keys.begin && j < keys.end, naive_visible(config, q_len, kv_len, i, j))
                    << where << " i " << i << " j " << j;
            }
            for (int64_t key_begin = 0; key_begin <= kv_len; ++key_begin)
              for (int64_t key_end = key_begin; key_end <= kv_len; ++key_end) {
                int64_t first = q_len, last = -1;
                for (int64_t i = 0; i < q_len; ++i)
                  for (int64_t j = key_begin; j < key_end; ++j)
                    if (naive_visible(config, q_len, kv_len, i, j)) first = std::min(first, i), last = std::max(last, i);
                kernels::QueryRange queries = kernels::visible_query_range(p, key_begin, key_end);
                std::string keys = where + " keys [" + std::to_string(key_begin) + ", " + std::to_string(key_end) + ")";
                if (last < 0) {
                  ASSERT_EQ(queries.begin, queries.end) << keys;
                  continue;
                }
                ASSERT_EQ(queries.begin, first) << keys;
                ASSERT_EQ(queries.end, last + 1) << keys;
                for (int64_t i = first; i <= last; ++i) {  // contiguous: every query in between sees one
                  bool any = false;
                  for (int64_t j = key_begin; j < key_end; ++j) any = any || naive_visible(config, q_len, kv_len, i, j);
                  ASSERT_TRUE(any) << keys << " i " << i;
                }
              }
          }
}

// The flash backward's workspace: D's rows, then (non-deterministic bf16/f16 only) the dQ accumulator from a
// 16-byte aligned offset, as the copy engine's reduce-add and float2 atomics need, whatever the row count.
TEST(FlashAttentionWorkspace, HoldsTheDqAccumulatorFromASixteenByteAlignedOffset) {
  EXPECT_EQ(kernels::flash_dq_accumulator_offset(0), 0);
  EXPECT_EQ(kernels::flash_dq_accumulator_offset(1), 4);
  EXPECT_EQ(kernels::flash_dq_accumulator_offset(4), 4);
  EXPECT_EQ(kernels::flash_dq_accumulator_offset(1047), 1048);
  kernels::AttentionParams<bf16> p = {};
  p.batch = 1, p.q_heads = 3, p.q_len = 7, p.kv_heads = 3, p.kv_len = 7, p.head_dim = 48, p.value_dim = 48;
  EXPECT_EQ(kernels::flash_attention_backward_workspace(p), 21);  // deterministic: D only
  p.deterministic = false;
  EXPECT_EQ(kernels::flash_attention_backward_workspace(p), 24 + 21 * 48);
  kernels::AttentionParams<float> f32 = {};
  f32.batch = 1, f32.q_heads = 3, f32.q_len = 7, f32.head_dim = 48, f32.deterministic = false;
  EXPECT_EQ(kernels::flash_attention_backward_workspace(f32), 21);  // f32 has no atomic-dQ backward
}

}  // namespace
}  // namespace alpha
