// Attention Hessian-vector products (ops/attention_hvp.h): the exact f64 HVP (dual numbers through the
// reference forward and backward) against central finite differences of the reference backward, which is
// a different computation, Richardson-extrapolated so that the comparison is tight; the symmetry of the
// Hessian, ⟨u, H·v⟩ = ⟨v, H·u⟩, an independent check of the exact HVP; the finite-difference op's O(eps²)
// error in f64 and its accuracy in f32; the same bits at any thread count; bad inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "alpha/ops/attention_hvp.h"
#include "kernels/kernel_helpers.h"
#include "support/checks.h"

namespace alpha {
namespace {

using test::random;

struct HvpCase {
  std::string name;
  int64_t batch, q_len, kv_len, q_heads, kv_heads, head_dim, value_dim;
  ops::AttentionConfig config;  // no dropout: the HVP refuses it
  bool head_major = false;      // q, k, v (and the direction) as transposed [B, H, T, D] tensors
};

std::ostream& operator<<(std::ostream& os, const HvpCase& c) { return os << c.name; }

// The point (q, k, v), the cotangent G and a direction (vq, vk, vv), all fresh random values in [-1, 1).
struct Point {
  Tensor q, k, v, grad_out, vq, vk, vv;

  Point to(DType dtype) const {
    return {q.to(dtype), k.to(dtype), v.to(dtype), grad_out.to(dtype), vq.to(dtype), vk.to(dtype), vv.to(dtype)};
  }
};

Tensor random_operand(const HvpCase& c, int64_t time, int64_t heads, int64_t features) {
  if (c.head_major) return random({c.batch, heads, time, features}, DType::f64).transpose(1, 2);
  return random({c.batch, time, heads, features}, DType::f64);
}

Point make_point(const HvpCase& c) {
  auto q_like = [&] { return random_operand(c, c.q_len, c.q_heads, c.head_dim); };
  auto k_like = [&] { return random_operand(c, c.kv_len, c.kv_heads, c.head_dim); };
  auto v_like = [&] { return random_operand(c, c.kv_len, c.kv_heads, c.value_dim); };
  Tensor grad_out = random({c.batch, c.q_len, c.q_heads, c.value_dim}, DType::f64);
  return {q_like(), k_like(), v_like(), grad_out, q_like(), k_like(), v_like()};
}

ops::AttentionHvp exact(const Point& x, const ops::AttentionConfig& config) {
  return ops::attention_hvp_exact(x.q, x.k, x.v, x.grad_out, x.vq, x.vk, x.vv, config);
}

ops::AttentionHvp central(const Point& x, const ops::AttentionConfig& config, double eps) {
  return ops::attention_hvp(x.q, x.k, x.v, x.grad_out, x.vq, x.vk, x.vv, config, eps);
}

std::vector<double> flat(const ops::AttentionHvp& h) {
  std::vector<double> all;
  for (const Tensor& t : {h.hq, h.hk, h.hv})
    for (double value : t.to_vector<double>()) all.push_back(value);
  return all;
}

// Richardson extrapolation of the central difference: (4·C(eps/2) − C(eps)) / 3 cancels the eps² term,
// leaving O(eps⁴) truncation.
std::vector<double> richardson(const Point& x, const ops::AttentionConfig& config, double eps) {
  std::vector<double> coarse = flat(central(x, config, eps)), fine = flat(central(x, config, eps / 2));
  for (size_t i = 0; i < fine.size(); ++i) fine[i] = (4 * fine[i] - coarse[i]) / 3;
  return fine;
}

double max_abs(const std::vector<double>& values) {
  double most = 0;
  for (double value : values) most = std::max(most, std::abs(value));
  return most;
}

double max_abs_difference(const std::vector<double>& got, const std::vector<double>& want) {
  double most = 0;
  for (size_t i = 0; i < got.size(); ++i) most = std::max(most, std::abs(got[i] - want[i]));
  return most;
}

// Every element within tol.abs·max|want| + tol.rel·|want|: abs is per unit of the largest |want|, as a
// finite difference's error is relative to the scale of the whole HVP, not to each (possibly tiny) element.
::testing::AssertionResult close_to(const std::vector<double>& got, const std::vector<double>& want,
                                    test::Tolerance tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " vs " << want.size() << " elements";
  const double scale = max_abs(want);
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= tol.abs * scale + tol.rel * std::abs(want[i])))
      return ::testing::AssertionFailure() << "element " << i << " of (hq, hk, hv): " << got[i] << " vs " << want[i]
                                           << " (max |want| " << scale << ", max |error| "
                                           << max_abs_difference(got, want) << ")";
  return ::testing::AssertionSuccess();
}

double inner(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

class AttentionHvp : public ::testing::TestWithParam<HvpCase> {};

TEST_P(AttentionHvp, ExactMatchesCentralDifferencesOfTheBackward) {
  const HvpCase& c = GetParam();
  Point x = make_point(c);
  const ops::AttentionConfig& config = c.config;
  EXPECT_TRUE(close_to(flat(exact(x, config)), richardson(x, config, 1e-3), test::tolerance("attention_hvp", DType::f64)));
}

// H is symmetric: ⟨u, H·v⟩ = ⟨v, H·u⟩ for any two directions u, v.
TEST_P(AttentionHvp, HessianIsSymmetric) {
  const HvpCase& c = GetParam();
  Point x = make_point(c), other = make_point(c);
  const ops::AttentionConfig& config = c.config;
  std::vector<double> u = flat({other.vq, other.vk, other.vv}), v = flat({x.vq, x.vk, x.vv});
  std::vector<double> h_v = flat(exact(x, config));
  x.vq = other.vq, x.vk = other.vk, x.vv = other.vv;
  std::vector<double> h_u = flat(exact(x, config));
  double uhv = inner(u, h_v), vhu = inner(v, h_u);
  // The rounding of each sum is relative to the sum of its terms' magnitudes.
  double terms = 0;
  for (size_t i = 0; i < u.size(); ++i) terms += std::abs(u[i] * h_v[i]) + std::abs(v[i] * h_u[i]);
  EXPECT_LE(std::abs(uhv - vhu), test::tolerance("attention_hvp.symmetry", DType::f64).abs * terms)
      << "<u, Hv> = " << uhv << ", <v, Hu> = " << vhu;
}

// Designated fields of AttentionConfig in declaration order: scale, causal, softcap, window_left, window_right.
const HvpCase kCases[] = {
    {"mha_square", 1, 7, 7, 2, 2, 5, 5, {}},
    {"gqa2_causal_square", 2, 13, 13, 4, 2, 16, 16, {.causal = true}},
    {"mqa_causal_q_shorter_d_ne_dv", 1, 7, 17, 3, 1, 5, 7, {.causal = true}},
    {"gqa2_causal_q_longer_empty_rows", 2, 17, 7, 4, 2, 5, 3, {.causal = true}},
    {"noncausal_q_longer_d1", 1, 33, 7, 2, 2, 1, 1, {}},
    {"softcap_explicit_scale_gqa2", 1, 17, 17, 4, 2, 16, 16, {.scale = 0.9, .causal = true, .softcap = 0.5}},
    {"softcap_mqa_q_shorter", 1, 7, 33, 2, 1, 16, 5, {.softcap = 1.5}},
    {"single_token", 1, 1, 1, 1, 1, 1, 1, {}},
    {"single_query_many_keys_softcap", 2, 1, 33, 2, 1, 16, 5, {.causal = true, .softcap = 2.0}},
    {"single_key_causal_empty_rows", 2, 7, 1, 2, 1, 5, 5, {.causal = true}},
    {"window_left_causal_gqa2", 2, 13, 13, 4, 2, 5, 5, {.causal = true, .window_left = 3}},
    {"window_both_q_shorter_softcap", 1, 7, 33, 2, 2, 16, 5, {.softcap = 1.5, .window_left = 5, .window_right = 1}},
    {"window_noncausal_q_longer_empty_rows", 1, 33, 13, 2, 1, 5, 5, {.window_left = 3, .window_right = 1}},
    {"window_one_key_each_side", 1, 13, 13, 2, 2, 5, 5, {.window_left = 1, .window_right = 1}},
    {"everything_head_major", 2, 33, 17, 4, 2, 5, 16, {.causal = true, .softcap = 2.0, .window_left = 4, .window_right = 0},
     true},
};

INSTANTIATE_TEST_SUITE_P(Cases, AttentionHvp, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

// The central difference's error is c·eps² + O(eps⁴) while truncation dominates rounding (eps >> u^(1/3)):
// halving eps divides it by 4. Shown in f64 at eps = 1e-2 and 5e-3, where rounding (~u/eps ≈ 1e-14) is
// nine orders below truncation.
TEST(AttentionHvpOps, CentralDifferenceErrorIsSecondOrderInF64) {
  for (const HvpCase& c : {kCases[1], kCases[5], kCases[14]}) {
    SCOPED_TRACE(c.name);
    Point x = make_point(c);
    const ops::AttentionConfig& config = c.config;
    std::vector<double> want = flat(exact(x, config));
    double coarse = max_abs_difference(flat(central(x, config, 1e-2)), want);
    double fine = max_abs_difference(flat(central(x, config, 5e-3)), want);
    // 4·(1 ± 5%): the eps⁴ term shifts the ratio by about (eps/scale of the inputs)², far less.
    EXPECT_NEAR(coarse / fine, 4.0, 0.2) << "error " << coarse << " at eps 1e-2, " << fine << " at 5e-3";
  }
}

// In f64 at eps = 1e-5 and in f32 at eps = 3e-3 (the recommendations of docs/ATTENTION_DERIVATIVES.md), the
// op is within its tolerance of the exact HVP computed on the same (f32-rounded) inputs.
TEST(AttentionHvpOps, CentralDifferenceIsAccurateAtTheRecommendedEps) {
  for (const HvpCase& c : kCases) {
    SCOPED_TRACE(c.name);
    Point x = make_point(c).to(DType::f32);
    const ops::AttentionConfig& config = c.config;
    std::vector<double> want = flat(exact(x.to(DType::f64), config));
    EXPECT_TRUE(close_to(flat(central(x.to(DType::f64), config, 1e-5)), want,
                         test::tolerance("attention_hvp.central_difference", DType::f64)));
    EXPECT_TRUE(close_to(flat(central(x, config, 3e-3)), want,
                         test::tolerance("attention_hvp.central_difference", DType::f32)));
  }
}

TEST(AttentionHvpOps, ExactIsIdenticalAcrossThreadCounts) {
  const HvpCase& c = kCases[14];
  Point x = make_point(c);
  test::ThreadCountGuard guard;
  std::vector<double> first;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<double> h = flat(exact(x, c.config));
    if (first.empty()) first = h;
    else EXPECT_EQ(h, first) << threads << " threads";
  }
}

TEST(AttentionHvpOps, BadInputsRaise) {
  constexpr const char* kOp = "[attention_hvp]";
  constexpr const char* kExactOp = "[attention_hvp_exact]";
  HvpCase c{"bad", 2, 4, 6, 4, 2, 8, 5, {.causal = true}};
  Point x = make_point(c);
  const ops::AttentionConfig& ok = c.config;
  ops::AttentionConfig dropout = ok;
  dropout.dropout_p = 0.1;
  EXPECT_ALPHA_ERROR(central(x, dropout, 1e-5), ValueError, kOp, "'config.dropout_p'", "not supported", "0.1");
  EXPECT_ALPHA_ERROR(exact(x, dropout), ValueError, kExactOp, "'config.dropout_p'", "not supported");
  for (double eps : {0.0, -1e-3, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()})
    EXPECT_ALPHA_ERROR(central(x, ok, eps), ValueError, kOp, "'eps'", "> 0");
  Point bad = x;
  bad.vq = random({2, 4, 4, 7}, DType::f64);
  EXPECT_ALPHA_ERROR(central(bad, ok, 1e-5), ShapeError, kOp, "'vq'", "[2, 4, 4, 8]", "[2, 4, 4, 7]");
  bad = x;
  bad.vk = random({2, 6, 4, 8}, DType::f64);
  EXPECT_ALPHA_ERROR(exact(bad, ok), ShapeError, kExactOp, "'vk'", "[2, 6, 2, 8]");
  bad = x;
  bad.vv = random({2, 5, 2, 5}, DType::f64);
  EXPECT_ALPHA_ERROR(central(bad, ok, 1e-5), ShapeError, kOp, "'vv'", "[2, 6, 2, 5]");
  bad = x;
  bad.grad_out = random({2, 4, 4, 8}, DType::f64);
  EXPECT_ALPHA_ERROR(central(bad, ok, 1e-5), ShapeError, kOp, "'grad_out'", "[2, 4, 4, 5]");
  bad = x;
  bad.vq = x.vq.to(DType::f32);
  EXPECT_ALPHA_ERROR(central(bad, ok, 1e-5), DTypeError, kOp, "'vq'", "f32");
  EXPECT_ALPHA_ERROR(exact(x.to(DType::f32), ok), DTypeError, kExactOp, "'q'", "f64", "f32");
  bad = x;
  bad.k = random({2, 6, 2, 7}, DType::f64);
  EXPECT_ALPHA_ERROR(central(bad, ok, 1e-5), ShapeError, kOp, "'k'", "[2, 6, 2, 7]");
}

}  // namespace
}  // namespace alpha
