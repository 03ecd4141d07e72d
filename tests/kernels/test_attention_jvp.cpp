// The attention JVP (ops/attention_jvp.h) on the CPU: the saved-statistics form against f64 central finite
// differences of the reference forward (the true JVP) over a matrix of masks, windows, softcaps, GQA/MQA,
// Tq != Tk, empty rows and odd sizes; the fused form against the reference forward and the saved-statistics
// form; what the saved-statistics form computes with statistics from elsewhere (against a frozen-statistics
// operator written here); f32 against f64; NaN and extreme logits; bad inputs. The CUDA kernels are tested
// against these CPU kernels in tests/cuda/test_cuda_attention_jvp.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "alpha/kernels/attention_jvp.h"
#include "alpha/ops/attention.h"
#include "alpha/ops/attention_jvp.h"
#include "alpha/ops/attention_params.h"
#include "alpha/ops/check.h"
#include "support/attention_jvp_case.h"
#include "support/checks.h"

namespace alpha {
namespace {

using test::all_close;
using test::random;

using test::JvpCase;

const JvpCase kCases[] = {
    // name, B, Tq, Tk, Hq, Hkv, D, Dv, config, head_major
    {"mha_square", 1, 17, 17, 2, 2, 5, 5, {}},
    {"gqa2_causal_square", 2, 17, 17, 4, 2, 8, 8, {.causal = true}},
    {"mqa_causal_q_shorter_d_ne_dv", 1, 7, 33, 3, 1, 5, 7, {.causal = true}},
    {"gqa2_causal_q_longer_empty_rows", 2, 33, 17, 4, 2, 5, 3, {.causal = true}},
    {"noncausal_q_longer_d1", 1, 33, 7, 2, 2, 1, 1, {}},
    {"softcap_explicit_scale", 1, 17, 17, 4, 2, 16, 16, {.scale = 0.9, .causal = true, .softcap = 0.5}},
    {"window_left_causal", 2, 17, 17, 4, 2, 5, 5, {.causal = true, .window_left = 3}},
    {"window_both_q_shorter_softcap", 1, 7, 33, 2, 2, 16, 5, {.softcap = 1.5, .window_left = 5, .window_right = 1}},
    {"window_causal_q_longer_empty_rows", 2, 17, 7, 4, 2, 5, 3, {.causal = true, .window_left = 2}},
    {"window_noncausal_q_longer_empty_rows", 1, 33, 17, 2, 1, 5, 5, {.window_left = 3, .window_right = 1}},
    {"single_token", 1, 1, 1, 1, 1, 1, 1, {}},
    {"single_query_mqa_softcap", 3, 1, 33, 2, 1, 16, 5, {.causal = true, .softcap = 1.5}},
    {"everything_head_major", 2, 33, 17, 4, 2, 5, 16,
     {.causal = true, .softcap = 2.0, .window_left = 4, .window_right = 0}, true},
};

// Whether query i sees key j, from the definition: causal keeps j <= d, the window d − left <= j <= d + right,
// around the bottom-right aligned diagonal d = i + (Tk − Tq).
bool naive_visible(const ops::AttentionConfig& config, int64_t q_len, int64_t kv_len, int64_t i, int64_t j) {
  int64_t d = i + (kv_len - q_len);
  return !(config.causal && j > d) && !(config.window_left >= 0 && j < d - config.window_left) &&
         !(config.window_right >= 0 && j > d + config.window_right);
}

// Primal inputs and tangents, fresh random values in [-1, 1). Tangents are contiguous; q, k, v strided for
// head_major cases.
struct Inputs {
  Tensor q, k, v, tq, tk, tv;
};

Tensor operand(const JvpCase& c, Shape shape, DType dtype) {
  if (!c.head_major) return random(shape, dtype);
  return random({shape[0], shape[2], shape[1], shape[3]}, dtype).transpose(1, 2);
}

Inputs make_inputs(const JvpCase& c, DType dtype) {
  Shape q_shape = {c.batch, c.q_len, c.q_heads, c.head_dim}, k_shape = {c.batch, c.kv_len, c.kv_heads, c.head_dim};
  Shape v_shape = {c.batch, c.kv_len, c.kv_heads, c.value_dim};
  return {operand(c, q_shape, dtype), operand(c, k_shape, dtype), operand(c, v_shape, dtype),
          random(q_shape, dtype),     random(k_shape, dtype),     random(v_shape, dtype)};
}

// x + step·t as a contiguous f64 tensor.
Tensor moved(const Tensor& x, const Tensor& t, double step) {
  std::vector<double> values = x.contiguous().to_vector<double>(), direction = t.contiguous().to_vector<double>();
  for (size_t e = 0; e < values.size(); ++e) values[e] += step * direction[e];
  return Tensor::from_vector(values, x.shape());
}

// (f(x + h·t) − f(x − h·t)) / (2h) for f64 inputs, f mapping (q, k, v) to a tensor.
constexpr double kStep = 1e-5;
template <class F>
Tensor central_difference(const Inputs& in, F&& f) {
  Tensor plus = f(moved(in.q, in.tq, kStep), moved(in.k, in.tk, kStep), moved(in.v, in.tv, kStep));
  Tensor minus = f(moved(in.q, in.tq, -kStep), moved(in.k, in.tk, -kStep), moved(in.v, in.tv, -kStep));
  std::vector<double> p = plus.to_vector<double>(), m = minus.to_vector<double>();
  for (size_t e = 0; e < p.size(); ++e) p[e] = (p[e] - m[e]) / (2 * kStep);
  return Tensor::from_vector(p, plus.shape());
}

// The true JVP: central differences of the reference forward (attention_materialized on the CPU).
Tensor true_jvp(const Inputs& in, const ops::AttentionConfig& config) {
  return central_difference(in, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    return ops::attention_materialized(q, k, v, config).out;
  });
}

// The largest |a − b| over the largest |b|: the relative error of a whole output.
double relative_error(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double diff = 0, scale = 0;
  for (size_t e = 0; e < x.size(); ++e) diff = std::max(diff, std::abs(x[e] - y[e])), scale = std::max(scale, std::abs(y[e]));
  return diff / scale;
}

// Both JVP kernels called directly, into NaN-poisoned outputs: the saved-statistics one with the statistics
// and output of `fwd`, the fused one on its own.
struct KernelResults {
  Tensor tangent;                                      // saved statistics
  Tensor out, fused_tangent, row_max, row_sum;         // fused
};
KernelResults run_kernels(const Inputs& in, const ops::AttentionConfig& config, const ops::AttentionOutput& fwd) {
  DType dtype = in.q.dtype();
  Shape out = fwd.out.shape(), stats = fwd.row_max.shape();
  KernelResults r{test::poisoned(out, dtype), test::poisoned(out, dtype), test::poisoned(out, dtype),
                  test::poisoned(stats, dtype), test::poisoned(stats, dtype)};
  ops::dispatch_cpu_float("test", in.q, [&]<class T>() {
    kernels::AttentionParams<T> params = ops::attention_kernel_params<T>(in.q, in.k, in.v, config);
    kernels::AttentionJvpInputs<T> inputs{in.q.data<T>(),  in.k.data<T>(),  in.v.data<T>(),
                                          in.tq.data<T>(), in.tk.data<T>(), in.tv.data<T>()};
    kernels::cpu::attention_jvp(kernels::AttentionJvpArgs<T>{inputs, fwd.out.data<T>(), fwd.row_max.data<acc_t<T>>(),
                                                             fwd.row_sum.data<acc_t<T>>(), r.tangent.data<T>(), params});
    kernels::cpu::attention_jvp_fused(kernels::AttentionJvpFusedArgs<T>{
        inputs, r.out.data<T>(), r.fused_tangent.data<T>(), r.row_max.data<acc_t<T>>(), r.row_sum.data<acc_t<T>>(),
        params});
  });
  return r;
}

class AttentionJvp : public ::testing::TestWithParam<JvpCase> {};

// With our own forward's statistics, the saved-statistics JVP is the true JVP.
TEST_P(AttentionJvp, SavedStatisticsMatchFiniteDifferencesF64) {
  const JvpCase& c = GetParam();
  Inputs in = make_inputs(c, DType::f64);
  const ops::AttentionConfig& config = c.config;
  ops::AttentionOutput fwd = ops::attention_materialized(in.q, in.k, in.v, config);
  Tensor tangent = ops::attention_jvp(in.q, in.k, in.v, in.tq, in.tk, in.tv, fwd.out, fwd.row_max, fwd.row_sum, config);
  Tensor want = true_jvp(in, config);
  EXPECT_TRUE(all_close(tangent, want, "attention_jvp.finite_difference"));
  EXPECT_TRUE(all_close(run_kernels(in, config, fwd).tangent, want, "attention_jvp.finite_difference"));
}

// The fused form's out and statistics are the reference forward's, its tangent the saved-statistics form's.
TEST_P(AttentionJvp, FusedMatchesReferenceForwardAndSavedStatistics) {
  const JvpCase& c = GetParam();
  const ops::AttentionConfig& config = c.config;
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Inputs in = make_inputs(c, dtype);
    ops::AttentionOutput fwd = ops::attention_materialized(in.q, in.k, in.v, config);
    Tensor tangent = ops::attention_jvp(in.q, in.k, in.v, in.tq, in.tk, in.tv, fwd.out, fwd.row_max, fwd.row_sum,
                                        config);
    ops::AttentionJvpOutput fused = ops::attention_jvp_fused(in.q, in.k, in.v, in.tq, in.tk, in.tv, config);
    KernelResults direct = run_kernels(in, config, fwd);
    EXPECT_TRUE(all_close(direct.tangent, tangent, "attention_jvp"));
    for (const ops::AttentionJvpOutput& got :
         {fused, ops::AttentionJvpOutput{direct.out, direct.fused_tangent, direct.row_max, direct.row_sum}}) {
      EXPECT_TRUE(all_close(got.out, fwd.out, "attention_jvp"));
      EXPECT_TRUE(all_close(got.tangent_out, tangent, "attention_jvp"));
      EXPECT_TRUE(all_close(got.row_max, fwd.row_max, "attention_jvp"));
      EXPECT_TRUE(all_close(got.row_sum, fwd.row_sum, "attention_jvp"));
    }
  }
}

// f32 against the same values in f64, both forms: within the bar (relative error below 1e-3 of the
// largest output) and the f32 row.
TEST_P(AttentionJvp, F32MatchesF64) {
  const JvpCase& c = GetParam();
  const ops::AttentionConfig& config = c.config;
  Inputs in32 = make_inputs(c, DType::f32);
  Inputs in64{in32.q.to(DType::f64), in32.k.to(DType::f64), in32.v.to(DType::f64),
              in32.tq.to(DType::f64), in32.tk.to(DType::f64), in32.tv.to(DType::f64)};
  auto saved = [&](const Inputs& in) {
    ops::AttentionOutput fwd = ops::attention_materialized(in.q, in.k, in.v, config);
    return ops::attention_jvp(in.q, in.k, in.v, in.tq, in.tk, in.tv, fwd.out, fwd.row_max, fwd.row_sum, config);
  };
  auto fused = [&](const Inputs& in) { return ops::attention_jvp_fused(in.q, in.k, in.v, in.tq, in.tk, in.tv, config); };
  Tensor saved64 = saved(in64), saved32 = saved(in32);
  ops::AttentionJvpOutput fused64 = fused(in64), fused32 = fused(in32);
  EXPECT_TRUE(all_close(saved32, saved64, "attention_jvp"));
  EXPECT_TRUE(all_close(fused32.out, fused64.out, "attention_jvp"));
  EXPECT_TRUE(all_close(fused32.tangent_out, fused64.tangent_out, "attention_jvp"));
  EXPECT_LT(relative_error(saved32, saved64), 1e-3);
  EXPECT_LT(relative_error(fused32.tangent_out, fused64.tangent_out), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionJvp, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

// The frozen-statistics operator O_f(x) = (exp(S(x) − m)/l)·V with m, l given (not recomputed), written
// out from the definition, and the scores S it used: per (b, h) the visible keys by the same rule as the
// reference, P not renormalised.
struct Frozen {
  Tensor out;     // [B, Tq, Hq, Dv]
  Tensor scores;  // [B, Hq, Tq, Tk], 0 where masked
};
Frozen frozen_operator(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& row_max,
                       const Tensor& row_sum, const ops::AttentionConfig& config) {
  int64_t B = q.size(0), Tq = q.size(1), Hq = q.size(2), D = q.size(3), Tk = k.size(1), Hkv = k.size(2);
  int64_t Dv = v.size(3);
  double scale = config.scale != 0 ? config.scale : 1.0 / std::sqrt(double(D)), c = config.softcap;
  std::vector<double> out(size_t(B * Tq * Hq * Dv), 0.0), scores(size_t(B * Hq * Tq * Tk), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 0; j < Tk; ++j) {
          if (!naive_visible(config, Tq, Tk, i, j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q.at({b, i, h, d}) * k.at({b, j, h / (Hq / Hkv), d});
          double s = c > 0 ? c * std::tanh(dot * scale / c) : dot * scale;
          scores[size_t(((b * Hq + h) * Tq + i) * Tk + j)] = s;
          double p = std::exp(s - row_max.at({b, h, i})) / row_sum.at({b, h, i});
          for (int64_t d = 0; d < Dv; ++d) out[size_t(((b * Tq + i) * Hq + h) * Dv + d)] += p * v.at({b, j, h / (Hq / Hkv), d});
        }
  return {Tensor::from_vector(out, {B, Tq, Hq, Dv}), Tensor::from_vector(scores, {B, Hq, Tq, Tk})};
}

// With statistics from elsewhere. (a) Statistics that reconstruct the same P (m shifted by δ, l scaled by
// exp(−δ)) give the true JVP: only P matters. (b) Statistics that do not (l doubled) give neither the true
// JVP nor the linearisation of the frozen-statistics operator, but exactly that linearisation minus μ∘O_f,
// μ = rowsum(P∘tS) with tS the derivative of the scores along the tangents (the kernel header's claim).
TEST(AttentionJvpFrozen, ForeignStatisticsLineariseTheFrozenOperatorMinusTheCentring) {
  const JvpCase cases[] = {
      {"gqa2_causal_softcap", 1, 7, 9, 4, 2, 5, 3, {.causal = true, .softcap = 1.5}},
      {"mqa_window_q_longer_empty_rows", 2, 9, 5, 2, 1, 3, 4, {.causal = true, .window_left = 2}},
  };
  for (const JvpCase& c : cases) {
    SCOPED_TRACE(c.name);
    Inputs in = make_inputs(c, DType::f64);
    const ops::AttentionConfig& config = c.config;
    ops::AttentionOutput fwd = ops::attention_materialized(in.q, in.k, in.v, config);
    Tensor truth = true_jvp(in, config);

    std::vector<double> m = fwd.row_max.to_vector<double>(), l = fwd.row_sum.to_vector<double>();
    std::vector<double> shifted_m = m, shifted_l = l, doubled_l = l;
    for (size_t r = 0; r < m.size(); ++r) {
      if (l[r] == 0) continue;  // a row that sees no key keeps m = −inf, l = 0
      shifted_m[r] += 0.75, shifted_l[r] *= std::exp(-0.75), doubled_l[r] *= 2;
    }
    Shape stats = fwd.row_max.shape();
    Tensor same_p = ops::attention_jvp(in.q, in.k, in.v, in.tq, in.tk, in.tv, fwd.out,
                                       Tensor::from_vector(shifted_m, stats), Tensor::from_vector(shifted_l, stats),
                                       config);
    EXPECT_TRUE(all_close(same_p, truth, "attention_jvp.finite_difference"));

    Tensor row_max = fwd.row_max, row_sum = Tensor::from_vector(doubled_l, stats);
    Frozen at_x = frozen_operator(in.q, in.k, in.v, row_max, row_sum, config);
    Tensor got = ops::attention_jvp(in.q, in.k, in.v, in.tq, in.tk, in.tv, at_x.out, row_max, row_sum, config);
    Tensor frozen_linear = central_difference(in, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return frozen_operator(q, k, v, row_max, row_sum, config).out;
    });
    Tensor score_tangent = central_difference(in, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return frozen_operator(q, k, v, row_max, row_sum, config).scores;
    });
    // want = frozen_linear − μ∘O_f, μ_i = Σ_j P_ij·tS_ij with the frozen P.
    int64_t B = c.batch, Tq = c.q_len, Tk = c.kv_len, Hq = c.q_heads, Dv = c.value_dim;
    std::vector<double> want = frozen_linear.to_vector<double>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t i = 0; i < Tq; ++i) {
          double mu = 0;
          for (int64_t j = 0; j < Tk; ++j) {
            if (!naive_visible(config, Tq, Tk, i, j)) continue;
            double s = at_x.scores.at({b, h, i, j});
            mu += std::exp(s - row_max.at({b, h, i})) / row_sum.at({b, h, i}) * score_tangent.at({b, h, i, j});
          }
          for (int64_t d = 0; d < Dv; ++d) want[size_t(((b * Tq + i) * Hq + h) * Dv + d)] -= mu * at_x.out.at({b, i, h, d});
        }
    EXPECT_TRUE(all_close(got, Tensor::from_vector(want, got.shape()), "attention_jvp.finite_difference"));
    EXPECT_GT(relative_error(got, truth), 1e-2) << "foreign statistics must not give the true JVP";
    EXPECT_GT(relative_error(got, frozen_linear), 1e-3) << "nor the frozen operator's linearisation";
  }
}

// A q row holding inf or NaN puts NaN into that row's out and tangent only (both forms); every other
// element stays finite.
TEST(AttentionJvpNumerics, NonFiniteQueryRowsStayInTheirRow) {
  JvpCase c{"nan_rows", 2, 9, 7, 4, 2, 5, 6, {}};
  const ops::AttentionConfig& config = c.config;
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Inputs in = make_inputs(c, dtype);
    Tensor q = in.q.contiguous().to(DType::f64);
    std::vector<double> values = q.to_vector<double>();
    auto element = [&](int64_t b, int64_t i, int64_t h, int64_t d) {
      return size_t(((b * c.q_len + i) * c.q_heads + h) * c.head_dim + d);
    };
    values[element(0, 3, 1, 2)] = std::numeric_limits<double>::infinity();
    values[element(1, 8, 2, 0)] = std::numeric_limits<double>::quiet_NaN();
    in.q = Tensor::from_vector(values, q.shape()).to(dtype);
    auto bad_row = [](int64_t b, int64_t i, int64_t h) { return (b == 0 && i == 3 && h == 1) || (b == 1 && i == 8 && h == 2); };

    ops::AttentionOutput fwd = ops::attention_materialized(in.q, in.k, in.v, config);
    Tensor saved = ops::attention_jvp(in.q, in.k, in.v, in.tq, in.tk, in.tv, fwd.out, fwd.row_max, fwd.row_sum, config);
    ops::AttentionJvpOutput fused = ops::attention_jvp_fused(in.q, in.k, in.v, in.tq, in.tk, in.tv, config);
    for (auto [name, t] : {std::pair<const char*, Tensor>{"saved tangent", saved},
                           {"fused out", fused.out},
                           {"fused tangent", fused.tangent_out}})
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t i = 0; i < c.q_len; ++i)
          for (int64_t h = 0; h < c.q_heads; ++h)
            for (int64_t d = 0; d < c.value_dim; ++d) {
              double x = t.at({b, i, h, d});
              if (bad_row(b, i, h)) EXPECT_TRUE(std::isnan(x)) << name << " b " << b << " i " << i << " h " << h;
              else EXPECT_TRUE(std::isfinite(x)) << name << " b " << b << " i " << i << " h " << h << ": " << x;
            }
  }
}

// Logits of magnitude ~1e4 (large q) in f32: the running max keeps every exponent <= 0, so out, tangent
// and statistics stay finite in rows that see keys (and are 0, 0, −inf, 0 in rows that see none).
TEST(AttentionJvpNumerics, ExtremeLogitsStayFiniteInF32) {
  JvpCase c{"extreme", 2, 17, 9, 4, 2, 16, 8, {.causal = true}};
  const ops::AttentionConfig& config = c.config;
  Inputs in = make_inputs(c, DType::f32);
  in.q = random(in.q.shape(), DType::f32, -1e4, 1e4);
  ops::AttentionOutput fwd = ops::attention_materialized(in.q, in.k, in.v, config);
  Tensor saved = ops::attention_jvp(in.q, in.k, in.v, in.tq, in.tk, in.tv, fwd.out, fwd.row_max, fwd.row_sum, config);
  ops::AttentionJvpOutput fused = ops::attention_jvp_fused(in.q, in.k, in.v, in.tq, in.tk, in.tv, config);
  double largest_logit = 0;
  for (double m : fused.row_max.to_vector<double>())
    if (std::isfinite(m)) largest_logit = std::max(largest_logit, std::abs(m));
  EXPECT_GT(largest_logit, 1e3);
  for (const Tensor& t : {saved, fused.out, fused.tangent_out})
    for (double x : t.to_vector<double>()) ASSERT_TRUE(std::isfinite(x)) << x;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.q_heads; ++h)
      for (int64_t i = 0; i < c.q_len; ++i) {
        bool sees_keys = i + c.kv_len - c.q_len >= 0;
        double m = fused.row_max.at({b, h, i}), l = fused.row_sum.at({b, h, i});
        EXPECT_EQ(std::isfinite(m), sees_keys) << "b " << b << " h " << h << " i " << i;
        EXPECT_TRUE(std::isfinite(l) && (l >= 1) == sees_keys) << "b " << b << " h " << h << " i " << i << ": " << l;
      }
}

TEST(AttentionJvpOps, BadInputsRaise) {
  Tensor q = random({2, 4, 4, 8}), k = random({2, 6, 2, 8}), v = random({2, 6, 2, 5});
  Tensor tq = random(q.shape()), tk = random(k.shape()), tv = random(v.shape());
  ops::AttentionConfig ok;
  ops::AttentionOutput fwd = ops::attention_materialized(q, k, v, ok);
  ops::AttentionConfig dropout;
  dropout.dropout_p = 0.1;
  constexpr const char* kOp = "[attention_jvp]";
  constexpr const char* kFused = "[attention_jvp_fused]";
  EXPECT_ALPHA_ERROR(ops::attention_jvp(q, k, v, tq, tk, tv, fwd.out, fwd.row_max, fwd.row_sum, dropout), ValueError,
                     kOp, "'config.dropout_p'", "dropout");
  EXPECT_ALPHA_ERROR(ops::attention_jvp_fused(q, k, v, tq, tk, tv, dropout), ValueError, kFused, "'config.dropout_p'");
  EXPECT_ALPHA_ERROR(ops::attention_jvp(q, k, v, tq, tk, tv, fwd.out, random({2, 4, 3}), fwd.row_sum, ok), ShapeError,
                     kOp, "'row_max'", "[2, 4, 4]");
  EXPECT_ALPHA_ERROR(ops::attention_jvp(q, k, v, tq, tk, tv, fwd.out, fwd.row_max, fwd.row_sum.to(DType::f64), ok),
                     DTypeError, kOp, "'row_sum'", "f64");
  EXPECT_ALPHA_ERROR(ops::attention_jvp(q, k, v, tq, tk, tv, random({2, 4, 4, 8}), fwd.row_max, fwd.row_sum, ok),
                     ShapeError, kOp, "'out'", "[2, 4, 4, 5]");
  EXPECT_ALPHA_ERROR(ops::attention_jvp(q, k, v, random({2, 4, 4, 7}), tk, tv, fwd.out, fwd.row_max, fwd.row_sum, ok),
                     ShapeError, kOp, "'tq'");
  EXPECT_ALPHA_ERROR(ops::attention_jvp_fused(q, k, v, tq, random({2, 6, 4, 8}), tv, ok), ShapeError, kFused, "'tk'",
                     "[2, 6, 4, 8]");
  EXPECT_ALPHA_ERROR(ops::attention_jvp_fused(q, k, v, tq, tk, random({2, 6, 2, 5}, DType::f64), ok), DTypeError,
                     kFused, "'tv'");
  EXPECT_ALPHA_ERROR(ops::attention_jvp_fused(q, random({2, 6, 3, 8}), random({2, 6, 3, 5}), tq, tk, tv, ok),
                     ShapeError, kFused, "'k'", "dividing");
}

}  // namespace
}  // namespace alpha
