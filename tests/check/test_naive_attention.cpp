// The harness's yardstick for bf16/f16 attention and the rule that uses it, on the CPU (the harness itself
// needs a GPU): naive low-precision attention (check/naive_low_precision_attention.h) against the f64
// reference (ops::attention_materialized on the same values): in bf16 and f16 it is within a few roundings
// of the reference, yet in a good share of elements not the reference rounded once (it rounds its
// intermediates); in f32 it is the reference in f32. The rule (judge_against_naive, naive_attention_bound) accepts an error
// equal to the naive one, rejects one three times it, holds to its floor where the naive result is exact,
// and fails NaN, a non-finite yardstick and mismatched shapes. The naive JVP stays near the f64 JVP.
// Also the harness's scale names (parse_scale), which need no GPU either.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "alpha/check/kernel_check.h"
#include "alpha/check/naive_low_precision_attention.h"
#include "alpha/ops/attention.h"
#include "alpha/ops/attention_jvp.h"
#include "support/checks.h"

namespace alpha {
namespace {

struct NaiveCase {
  std::string name;
  int64_t batch, q_len, kv_len, q_heads, kv_heads, head_dim, value_dim;
  bool causal = false;
  double softcap = 0.0, dropout_p = 0.0;
  int64_t window_left = -1, window_right = -1;
  bool strided_q = false;  // q a slice of a wider tensor (every other head)
};

std::ostream& operator<<(std::ostream& os, const NaiveCase& c) { return os << c.name; }

const NaiveCase kCases[] = {
    // name, B, Tq, Tk, Hq, Hkv, D, Dv, causal, softcap, dropout, window left, right, strided q
    {"mha", 2, 37, 37, 2, 2, 32, 32},
    {"gqa_causal_masked_rows_dv_ne_d", 1, 50, 20, 4, 2, 16, 24, true},
    {"softcap_dropout_mqa", 2, 33, 65, 4, 1, 64, 64, false, 0.5, 0.2},
    {"window_causal_strided_q", 1, 70, 70, 2, 2, 32, 16, true, 0.0, 0.1, 9, -1, true},
};

struct Reference {
  Tensor q, k, v, dout;          // in the dtype: the naive computation's inputs (q strided for strided_q)
  ops::AttentionConfig config;
  ops::AttentionOutput fwd;      // f64, on the same values
  ops::AttentionGrads grads;
};

Reference make_reference(const NaiveCase& c, DType dtype) {
  auto values = [&](Shape shape) { return test::random(std::move(shape), DType::f64).to(dtype); };
  Reference r;
  r.q = c.strided_q ? values({c.batch, c.q_len, 2 * c.q_heads, c.head_dim}).slice(2, 0, 2 * c.q_heads, 2)
                    : values({c.batch, c.q_len, c.q_heads, c.head_dim});
  r.k = values({c.batch, c.kv_len, c.kv_heads, c.head_dim});
  r.v = values({c.batch, c.kv_len, c.kv_heads, c.value_dim});
  r.dout = values({c.batch, c.q_len, c.q_heads, c.value_dim});
  r.config.causal = c.causal;
  r.config.softcap = c.softcap;
  r.config.dropout_p = c.dropout_p;
  r.config.dropout_seed = test::fresh_seed();
  r.config.dropout_offset = 77;
  r.config.window_left = c.window_left;
  r.config.window_right = c.window_right;
  const Tensor q = r.q.to(DType::f64), k = r.k.to(DType::f64), v = r.v.to(DType::f64), dout = r.dout.to(DType::f64);
  r.fwd = ops::attention_materialized(q, k, v, r.config);
  r.grads = ops::attention_materialized_backward(dout, q, k, v, r.fwd.out, r.fwd.row_max, r.fwd.row_sum, r.config);
  return r;
}

check::NaiveAttention naive_of(const Reference& r) {
  return check::naive_low_precision_attention(r.q, r.k, r.v, r.dout, r.config);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

double max_abs(const Tensor& t) { return max_abs_diff(t, Tensor::zeros(t.shape(), DType::f64)); }

class NaiveLowPrecisionAttention : public ::testing::TestWithParam<NaiveCase> {};

TEST_P(NaiveLowPrecisionAttention, LowPrecisionRoundsAndStaysNearTheReference) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Reference r = make_reference(GetParam(), dtype);
    const check::NaiveAttention naive = naive_of(r);
    const std::pair<const char*, std::pair<Tensor, Tensor>> outputs[] = {{"out", {naive.out, r.fwd.out}},
                                                                        {"dq", {naive.dq, r.grads.dq}},
                                                                        {"dk", {naive.dk, r.grads.dk}},
                                                                        {"dv", {naive.dv, r.grads.dv}}};
    const test::Tolerance tol = test::tolerance("naive_low_precision_attention", dtype);
    for (const auto& [name, results] : outputs) {
      SCOPED_TRACE(name);
      const auto& [got, want] = results;
      EXPECT_EQ(got.dtype(), dtype);
      EXPECT_TRUE(test::all_close(got, want, test::Tolerance{tol.abs * max_abs(want), tol.rel}));
      // It rounds its intermediates, not only its result: of the elements that are not 0 (rows that see no
      // key are), over a tenth differ from the reference rounded once to T (about half do; a computation
      // that rounded only its result would differ where its f32 error crosses a rounding boundary: ~1e-4).
      const std::vector<double> g = got.to_vector<double>(), once = want.to(dtype).to_vector<double>();
      int64_t nonzero = 0, differing = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        nonzero += once[i] != 0;
        differing += once[i] != 0 && g[i] != once[i];
      }
      EXPECT_GT(10 * differing, nonzero) << differing << " of " << nonzero << " differ";
    }
  }
}

TEST_P(NaiveLowPrecisionAttention, F32IsTheReferenceInF32) {
  const Reference r = make_reference(GetParam(), DType::f32);
  const check::NaiveAttention naive = naive_of(r);
  EXPECT_TRUE(test::all_close(naive.out, r.fwd.out, "attention"));
  EXPECT_TRUE(test::all_close(naive.dq, r.grads.dq, "attention"));
  EXPECT_TRUE(test::all_close(naive.dk, r.grads.dk, "attention"));
  EXPECT_TRUE(test::all_close(naive.dv, r.grads.dv, "attention"));
}

INSTANTIATE_TEST_SUITE_P(Cases, NaiveLowPrecisionAttention, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

TEST(NaiveLowPrecisionAttentionInputs, BadInputsRaise) {
  constexpr const char* kOp = "[naive_low_precision_attention]";
  const Tensor q = test::random({1, 4, 2, 8}, DType::bf16), k = test::random({1, 5, 1, 8}, DType::bf16);
  const Tensor v = test::random({1, 5, 1, 6}, DType::bf16), dout = test::random({1, 4, 2, 6}, DType::bf16);
  const ops::AttentionConfig config;
  EXPECT_ALPHA_ERROR(check::naive_low_precision_attention(q.to(DType::f64), k, v, dout, config), DTypeError, kOp,
                     "'q'", "f64");
  EXPECT_ALPHA_ERROR(check::naive_low_precision_attention(q, k.to(DType::f16), v, dout, config), DTypeError, kOp,
                     "'k'");
  EXPECT_ALPHA_ERROR(check::naive_low_precision_attention(q, k, v, test::random({1, 4, 2, 8}, DType::bf16), config),
                     ShapeError, kOp, "'dout'", "[1, 4, 2, 8]");
}

// The rule on made-up results: got holds values of the dtype, want is `ours` off each of them (signs
// alternating) and naive `naive_error` off want, so both errors are known exactly.
struct MadeUp {
  Tensor got, want, naive;
};
MadeUp made_up(DType dtype, double ours, double naive_error) {
  const Tensor got = test::random({4, 64}, DType::f64).to(dtype);
  const std::vector<double> g = got.to_vector<double>();
  std::vector<double> want(g.size()), naive(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    want[i] = g[i] - (i % 2 ? ours : -ours);
    naive[i] = want[i] + (i % 3 ? naive_error : -naive_error);
  }
  return {got, Tensor::from_vector(want, got.shape()), Tensor::from_vector(naive, got.shape())};
}

check::Comparison judged(const Tensor& got, const Tensor& want, const Tensor& naive) {
  check::Comparison c;
  c.kernel = "flash_attention.test.out";
  c.dtype = got.dtype();
  check::judge_against_naive(c, got, want, naive, "cuda.flash_attention");
  return c;
}

// The naive JVP (naive_low_precision_attention_jvp) against the f64 JVP (ops::attention_jvp_fused, the true
// JVP: tests/kernels/test_attention_jvp.cpp) on the same values, each case without its dropout: in bf16 and
// f16 within the naive row (it is found within 1.4 u of the largest output), and in f32 the JVP in f32.
TEST_P(NaiveLowPrecisionAttention, JvpStaysNearTheReference) {
  NaiveCase c = GetParam();
  c.dropout_p = 0;  // the JVP has none
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Reference r = make_reference(c, dtype);
    auto values = [&](const Shape& shape) { return test::random(shape, DType::f64).to(dtype); };
    const Tensor tq = values(r.q.shape()), tk = values(r.k.shape()), tv = values(r.v.shape());
    auto f64 = [](const Tensor& t) { return t.to(DType::f64); };
    const ops::AttentionJvpOutput want =
        ops::attention_jvp_fused(f64(r.q), f64(r.k), f64(r.v), f64(tq), f64(tk), f64(tv), r.config);
    const check::NaiveAttentionJvp naive =
        check::naive_low_precision_attention_jvp(r.q, r.k, r.v, tq, tk, tv, r.config);
    for (const auto& [got, expected] : {std::pair{naive.out, want.out}, {naive.tangent_out, want.tangent_out}}) {
      EXPECT_EQ(got.dtype(), dtype);
      if (dtype == DType::f32) {
        EXPECT_TRUE(test::all_close(got, expected, "attention_jvp"));
      } else {
        const test::Tolerance tol = test::tolerance("naive_low_precision_attention", dtype);
        EXPECT_TRUE(test::all_close(got, expected, test::Tolerance{tol.abs * max_abs(expected), tol.rel}));
      }
    }
  }
}

TEST(NaiveLowPrecisionAttentionInputs, JvpBadInputsRaise) {
  constexpr const char* kOp = "[naive_low_precision_attention]";
  const Tensor q = test::random({1, 4, 2, 8}, DType::bf16), k = test::random({1, 5, 1, 8}, DType::bf16);
  const Tensor v = test::random({1, 5, 1, 6}, DType::bf16);
  ops::AttentionConfig dropout;
  dropout.dropout_p = 0.1;
  EXPECT_ALPHA_ERROR(check::naive_low_precision_attention_jvp(q, k, v, q, k, v, dropout), ValueError, kOp,
                     "'config.dropout_p'");
  EXPECT_ALPHA_ERROR(check::naive_low_precision_attention_jvp(q, k, v, q, v, v, {}), ShapeError, kOp, "'tk'");
  EXPECT_ALPHA_ERROR(check::naive_low_precision_attention_jvp(q, k, v, q.to(DType::f16), k, v, {}), DTypeError, kOp,
                     "'tq'");
}

TEST(NaiveAttentionRule, AcceptsTheNaiveErrorAndRejectsThreeTimesIt) {
  // Errors of 0.05 on values up to 1: far above the floor (½·u·max|want| + 3e-5 < 2.5e-3).
  const double naive_error = 0.05;
  for (DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    for (double factor : {1.0, check::kNaiveErrorFactor}) {
      const MadeUp m = made_up(dtype, factor * naive_error, naive_error);
      const check::Comparison c = judged(m.got, m.want, m.naive);
      EXPECT_TRUE(c.passed) << factor << "× the naive error: " << c.detail;
      ASSERT_TRUE(c.naive.has_value());
      EXPECT_NEAR(c.max_abs, factor * naive_error, 1e-12);
      EXPECT_NEAR(c.naive->max_abs, naive_error, 1e-12);
    }
    const MadeUp m = made_up(dtype, 3 * naive_error, naive_error);
    const check::Comparison c = judged(m.got, m.want, m.naive);
    EXPECT_FALSE(c.passed) << c.detail;
    EXPECT_NE(c.detail.find("ours/naive 3.00"), std::string::npos) << c.detail;
    const std::string line = check::format_comparison(c);
    EXPECT_NE(line.find("(2xnaive)"), std::string::npos) << line;
    EXPECT_NE(line.find("FAIL"), std::string::npos) << line;
  }
}

TEST(NaiveAttentionRule, FloorHoldsWhereTheNaiveResultIsExact) {
  // An output that cancels to 0 and a naive computation that gets it exactly: only the floor's absolute
  // part, cuda.flash_attention's f32 abs, is left.
  const double abs = test::tolerance("cuda.flash_attention", DType::f32).abs;
  const Tensor zeros = Tensor::zeros({2, 64}, DType::f64);
  for (DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    EXPECT_TRUE(judged(Tensor::full({2, 64}, 0.5 * abs, dtype), zeros, zeros).passed);
    EXPECT_FALSE(judged(Tensor::full({2, 64}, 2 * abs, dtype), zeros, zeros).passed);
    EXPECT_DOUBLE_EQ(check::naive_attention_bound("cuda.flash_attention", dtype, 0.0, 0.0), abs);
  }
  EXPECT_ALPHA_ERROR(check::naive_attention_bound("cuda.flash_attention", DType::f32, 0.0, 1.0), DTypeError,
                     "[naive_attention_bound]", "bf16 or f16", "f32");
}

TEST(NaiveAttentionRule, NonFiniteValuesAndShapesFail) {
  const MadeUp m = made_up(DType::bf16, 0.01, 0.1);
  ASSERT_TRUE(judged(m.got, m.want, m.naive).passed);
  Tensor poisoned = m.got.clone();
  poisoned.view({256}).slice(0, 7, 8).fill_(std::numeric_limits<double>::quiet_NaN());
  EXPECT_FALSE(judged(poisoned, m.want, m.naive).passed);
  Tensor infinite = m.naive.clone();
  infinite.view({256}).slice(0, 3, 4).fill_(std::numeric_limits<double>::infinity());
  const check::Comparison c = judged(m.got, m.want, infinite);
  EXPECT_FALSE(c.passed);
  EXPECT_NE(c.detail.find("naive computation is not finite"), std::string::npos) << c.detail;
  EXPECT_FALSE(judged(m.got.view({2, 128}), m.want, m.naive).passed);
  EXPECT_FALSE(judged(m.got, m.want, m.naive.view({2, 128})).passed);
}

TEST(HarnessScale, ParsesFullAndSmallAndNamesTheSourceOfAnythingElse) {
  EXPECT_EQ(check::parse_scale("full", "ALPHA_CHECK_SCALE"), check::Scale::full);
  EXPECT_EQ(check::parse_scale("small", "ALPHA_CHECK_SCALE"), check::Scale::small);
  EXPECT_ALPHA_ERROR(check::parse_scale("Small", "ALPHA_CHECK_SCALE"), ValueError, "check kernels",
                     "ALPHA_CHECK_SCALE", "\"full\" or \"small\"", "Small");
  EXPECT_ALPHA_ERROR(check::parse_scale("", "ALPHA_CHECK_SCALE"), ValueError, "ALPHA_CHECK_SCALE");
}

TEST(HarnessShard, ParsesIndexOverCountAndNamesTheSourceOfAnythingElse) {
  const check::Shard shard = check::parse_shard("2/5", "ALPHA_CHECK_SHARD");
  EXPECT_EQ(shard.index, 2);
  EXPECT_EQ(shard.count, 5);
  for (const char* bad : {"5/5", "-1/5", "1/0", "1", "/5", "1/", "1/5x", "a/5", ""})
    EXPECT_ALPHA_ERROR(check::parse_shard(bad, "ALPHA_CHECK_SHARD"), ValueError, "check kernels", "ALPHA_CHECK_SHARD",
                       "\"i/n\" with 0 <= i < n", bad);
}

TEST(HarnessShard, EveryCaseTheScaleKeepsRunsInExactlyOneShard) {
  const int64_t sizes[] = {1, 70000, 17, 65536, 4099 * 4099, 3, 1000, 65537, 8, 9, 10};
  for (check::Scale scale : {check::Scale::full, check::Scale::small}) {
    for (int64_t count : {1, 2, 3, 7}) {
      std::vector<int> runs(std::size(sizes), 0);
      for (int64_t index = 0; index < count; ++index) {
        check::CaseFilter filter(scale, {index, count});
        for (size_t i = 0; i < std::size(sizes); ++i) runs[i] += filter.includes(sizes[i]);
      }
      for (size_t i = 0; i < std::size(sizes); ++i)
        EXPECT_EQ(runs[i], check::CaseFilter(scale, {}).fits_scale(sizes[i]) ? 1 : 0)
            << "size " << sizes[i] << ", " << count << " shards";
    }
  }
  check::CaseFilter second_of_two(check::Scale::small, {1, 2});
  EXPECT_FALSE(second_of_two.includes(1));
  EXPECT_FALSE(second_of_two.includes(70000));  // left out by the scale: takes no number
  EXPECT_TRUE(second_of_two.includes(2));
  EXPECT_ALPHA_ERROR(check::CaseFilter(check::Scale::full, {3, 3}), ValueError, "check kernels", "shard");
}

}  // namespace
}  // namespace alpha
