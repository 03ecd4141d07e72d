// Element-wise ops against naive f64 loops, through the kernel arguments directly (into poisoned
// outputs) and through the tensor ops, with gradient checks and bad-input tests.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "alpha/autograd/functions.h"
#include "alpha/kernels/elementwise.h"
#include "alpha/ops/check.h"
#include "alpha/ops/elementwise.h"
#include "support/checks.h"

namespace alpha {
namespace {

using test::all_close;
using test::random;

class ElementwiseSizes : public ::testing::TestWithParam<std::tuple<int64_t, DType>> {};

TEST_P(ElementwiseSizes, KernelsMatchF64Loops) {
  const auto& param = GetParam();
  const auto n = std::get<0>(param);
  const auto dtype = std::get<1>(param);
  Tensor a = random({n}, dtype), b = random({n}, dtype);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> want_add(n), want_mul(n), want_scale(n), want_axpy(n);
  double want_sum = 0, sum_of_abs = 0;
  for (int64_t i = 0; i < n; ++i) {
    want_add[i] = av[i] + bv[i];
    want_mul[i] = av[i] * bv[i];
    want_scale[i] = -1.75 * av[i];
    want_axpy[i] = bv[i] + 0.5 * av[i];
    want_sum += av[i];
    sum_of_abs += std::fabs(av[i]);
  }
  auto expect = [&](const std::vector<double>& v) { return Tensor::from_vector(v, {n}); };
  ops::dispatch_cpu_float("test", a, [&]<class T>() {
    Tensor out = test::poisoned({n}, dtype);
    kernels::cpu::add(kernels::BinaryArgs<T>{a.data<T>(), b.data<T>(), out.data<T>(), n});
    EXPECT_TRUE(all_close(out, expect(want_add), "elementwise"));
    out = test::poisoned({n}, dtype);
    kernels::cpu::mul(kernels::BinaryArgs<T>{a.data<T>(), b.data<T>(), out.data<T>(), n});
    EXPECT_TRUE(all_close(out, expect(want_mul), "elementwise"));
    out = test::poisoned({n}, dtype);
    kernels::cpu::scale(kernels::ScaleArgs<T>{a.data<T>(), out.data<T>(), acc_t<T>(-1.75), n});
    EXPECT_TRUE(all_close(out, expect(want_scale), "elementwise"));
    Tensor y = b.clone();
    kernels::cpu::axpy(kernels::AxpyArgs<T>{y.data<T>(), a.data<T>(), acc_t<T>(0.5), n});
    EXPECT_TRUE(all_close(y, expect(want_axpy), "elementwise"));
    acc_t<T> total = std::numeric_limits<acc_t<T>>::quiet_NaN();
    kernels::cpu::sum(kernels::SumArgs<T>{a.data<T>(), &total, n});
    // Rounding in an n-term sum grows with Σ|x|, not with the (possibly cancelled) result.
    test::Tolerance sum_tol = test::tolerance("sum", dtype);
    sum_tol.abs *= std::max(1.0, sum_of_abs);
    EXPECT_TRUE(all_close(Tensor::from_vector<double>({double(total)}, {1}).to(dtype),
                          Tensor::from_vector<double>({want_sum}, {1}), sum_tol));
  });
}

INSTANTIATE_TEST_SUITE_P(AllSizes, ElementwiseSizes,
                         ::testing::Combine(::testing::ValuesIn(test::kSizes),
                                            ::testing::Values(DType::f32, DType::f64)));

TEST(Elementwise, OpsOnOddStridedShapes) {
  Tensor a = random({7, 13}, DType::f64).transpose(0, 1);  // non-contiguous input
  Tensor b = random({13, 7}, DType::f64);
  Tensor s = ops::add(a, b);
  for (int64_t i = 0; i < 13; ++i)
    for (int64_t j = 0; j < 7; ++j) EXPECT_DOUBLE_EQ(s.at({i, j}), a.at({i, j}) + b.at({i, j}));
  Tensor total = ops::sum(a);
  double want = 0;
  for (int64_t i = 0; i < 13; ++i)
    for (int64_t j = 0; j < 7; ++j) want += a.at({i, j});
  EXPECT_NEAR(total.item(), want, 1e-12);
}

TEST(Elementwise, SumIsIdenticalAcrossThreadCounts) {
  Tensor a = random({300001}, DType::f32);
  double first = ops::sum(a).item();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    EXPECT_EQ(ops::sum(a).item(), first);
  }
}

// The data-parallel reduction's sum: rows added in row order (the bits of add_ accumulating them), then scaled.
TEST(Elementwise, SumRowsAddsInRowOrderThenScales) {
  for (int64_t k : {1, 2, 3}) {
    for (int64_t n : {1, 7, 64, 1001}) {
      Tensor rows = random({k, n}, DType::f32);
      Tensor got = test::poisoned({n}, DType::f32);
      ops::sum_rows(rows, got, 1.0 / double(k));
      Tensor accumulated = rows.select(0, 0).clone();
      for (int64_t r = 1; r < k; ++r) ops::add_(accumulated, rows.select(0, r));
      Tensor want = ops::scale(accumulated, 1.0 / double(k));
      EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>()) << k << " rows of " << n;
    }
  }
  Tensor rows = random({3, 5}, DType::f64);
  Tensor got = test::poisoned({5}, DType::f64);
  ops::sum_rows(rows, got, 0.5);
  for (int64_t i = 0; i < 5; ++i)
    EXPECT_NEAR(got.at({i}), 0.5 * (rows.at({0, i}) + rows.at({1, i}) + rows.at({2, i})), 1e-15);
}

TEST(Elementwise, SumRowsRejectsBadOutputs) {
  Tensor rows = random({2, 6});
  Tensor short_out = Tensor::zeros({5}, DType::f32);
  EXPECT_ALPHA_ERROR(ops::sum_rows(rows, short_out, 1.0), ShapeError, "[sum_rows]", "'out'", "[6]", "[5]");
  Tensor vector = random({6});
  EXPECT_ALPHA_ERROR(ops::sum_rows(vector, short_out, 1.0), ShapeError, "[sum_rows]", "'rows'");
  Tensor inside = rows.select(0, 1);
  EXPECT_ALPHA_ERROR(ops::sum_rows(rows, inside, 1.0), ValueError, "[sum_rows]", "'out'", "not overlapping");
  Tensor strided = random({6, 2}).transpose(0, 1);
  Tensor out6 = Tensor::zeros({6}, DType::f32);
  EXPECT_ALPHA_ERROR(ops::sum_rows(strided, out6, 1.0), LayoutError, "[sum_rows]", "'rows'", "contiguous");
  Tensor other_dtype = Tensor::zeros({6}, DType::f64);
  EXPECT_ALPHA_ERROR(ops::sum_rows(rows, other_dtype, 1.0), DTypeError, "[sum_rows]", "'out'", "f64");
}

TEST(Elementwise, GradientsMatchFiniteDifferences) {
  EXPECT_TRUE(test::gradcheck([](const auto& v) { return autograd::mul(autograd::add(v[0], v[1]), v[0]); },
                              {random({3, 5}, DType::f64), random({3, 5}, DType::f64)}));
  EXPECT_TRUE(test::gradcheck([](const auto& v) { return autograd::sum(autograd::scale(v[0], -3.0)); },
                              {random({17}, DType::f64)}));
}

TEST(Elementwise, BadInputsRaise) {
  Tensor a = random({4}), b = random({5});
  EXPECT_ALPHA_ERROR(ops::add(a, b), ShapeError, "[add]", "'b'", "[4]", "[5]");
  EXPECT_ALPHA_ERROR(ops::mul(a, random({4}, DType::f64)), DTypeError, "[mul]", "'b'", "f32", "f64");
  EXPECT_ALPHA_ERROR(ops::scale(Tensor::zeros({4}, DType::i32), 2), DTypeError, "[scale]", "'x'", "i32");
  Tensor strided = random({4, 4}).transpose(0, 1);
  EXPECT_ALPHA_ERROR(ops::add_(strided, random({4, 4})), LayoutError, "[add_]", "'y'", "contiguous");
  EXPECT_ALPHA_ERROR(ops::sum(Tensor()), ValueError, "[sum]", "'x'", "undefined");
}

}  // namespace
}  // namespace alpha
