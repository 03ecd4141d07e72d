// Matrix products against naive f64 loops: the GEMM and column-sum kernels directly (into poisoned
// outputs, every transpose combination, accumulation through alpha/beta, batches, padded rows), the
// matmul/linear tensor ops on strided views and leading dimensions, gradient checks through autograd,
// thread-count independence of the bias gradient, and bad inputs.
#include <gtest/gtest.h>
#include <omp.h>

#include "alpha/autograd/functions.h"
#include "alpha/kernels/matmul.h"
#include "alpha/ops/check.h"
#include "alpha/ops/matmul.h"
#include "support/checks.h"

namespace alpha {
namespace {

using test::all_close;
using test::random;

// c[p, i, j] = Σ_l op(a)[p, i, l]·op(b)[p, l, j] over a batch of row-major matrices; op transposes when asked.
std::vector<double> reference_gemm(const Tensor& a, const Tensor& b, int64_t batch, int64_t m, int64_t n, int64_t k,
                                   bool trans_a, bool trans_b) {
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), c(size_t(batch * m * n));
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l)
          s += av[size_t(p * m * k + (trans_a ? l * m + i : i * k + l))] *
               bv[size_t(p * k * n + (trans_b ? j * k + l : l * n + j))];
        c[size_t((p * m + i) * n + j)] = s;
      }
  return c;
}

// Σ over rows of a (rows, cols) tensor.
std::vector<double> reference_column_sum(const Tensor& x) {
  int64_t cols = x.size(-1), rows = x.numel() / cols;
  std::vector<double> xv = x.to_vector<double>(), s(size_t(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) s[size_t(c)] += xv[size_t(r * cols + c)];
  return s;
}

struct GemmCase {
  int64_t batch, m, k, n;
};

// m·n spans the element counts of test::kSizes, then odd shapes and a batch.
const GemmCase kGemmCases[] = {{1, 1, 1, 1}, {1, 8, 5, 8}, {1, 64, 33, 64}, {1, 256, 17, 256}, {1, 7, 13, 5},
                               {3, 5, 11, 9}};

class GemmKernel : public ::testing::TestWithParam<std::tuple<GemmCase, DType, bool, bool>> {};

TEST_P(GemmKernel, MatchesF64Loops) {
  auto [shape, dtype, trans_a, trans_b] = GetParam();
  auto [batch, m, k, n] = shape;
  Tensor a = random(trans_a ? Shape{batch, k, m} : Shape{batch, m, k}, dtype);
  Tensor b = random(trans_b ? Shape{batch, n, k} : Shape{batch, k, n}, dtype);
  std::vector<double> product = reference_gemm(a, b, batch, m, n, k, trans_a, trans_b);
  Tensor c_initial = random({batch, m, n}, dtype);
  std::vector<double> accumulated = c_initial.to_vector<double>();
  for (size_t i = 0; i < accumulated.size(); ++i) accumulated[i] = 0.5 * product[i] - 1.25 * accumulated[i];

  ops::dispatch_cpu_float("test", a, [&]<class T>() {
    auto args = [&](const Tensor& c, double alpha, double beta) {
      return kernels::GemmArgs<T>{a.data<T>(), b.data<T>(), c.data<T>(), batch, m, n, k, trans_a, trans_b,
                                  trans_a ? m : k, trans_b ? k : n, n, m * k, k * n, m * n,
                                  acc_t<T>(alpha), acc_t<T>(beta)};
    };
    Tensor c = test::poisoned({batch, m, n}, dtype);  // beta = 0 must overwrite, never read, the output
    kernels::cpu::gemm(args(c, 1.0, 0.0));
    EXPECT_TRUE(all_close(c, Tensor::from_vector(product, {batch, m, n}), "matmul"));
    c = c_initial.clone();
    kernels::cpu::gemm(args(c, 0.5, -1.25));
    EXPECT_TRUE(all_close(c, Tensor::from_vector(accumulated, {batch, m, n}), "matmul"));
  });
}

INSTANTIATE_TEST_SUITE_P(AllShapes, GemmKernel,
                         ::testing::Combine(::testing::ValuesIn(kGemmCases), ::testing::Values(DType::f32, DType::f64),
                                            ::testing::Bool(), ::testing::Bool()));

class ColumnSumKernel : public ::testing::TestWithParam<std::tuple<Shape, DType>> {};

TEST_P(ColumnSumKernel, MatchesF64LoopsWithPaddedRows) {
  auto [shape, dtype] = GetParam();
  int64_t rows = shape[0], cols = shape[1], ld = cols + 3;
  Tensor padded = random({rows, ld}, dtype);
  Tensor x = padded.slice(1, 0, cols);
  ops::dispatch_cpu_float("test", x, [&]<class T>() {
    Tensor out = test::poisoned({cols}, dtype);
    kernels::cpu::column_sum(kernels::ColumnSumArgs<T>{padded.data<T>(), out.data<T>(), rows, cols, ld});
    EXPECT_TRUE(all_close(out, Tensor::from_vector(reference_column_sum(x), {cols}), "matmul"));
  });
}

INSTANTIATE_TEST_SUITE_P(AllShapes, ColumnSumKernel,
                         ::testing::Combine(::testing::Values(Shape{1, 1}, Shape{16, 4}, Shape{64, 64},
                                                              Shape{65536, 1}, Shape{4096, 16}, Shape{7, 13},
                                                              Shape{300, 5}),
                                            ::testing::Values(DType::f32, DType::f64)));

TEST(ColumnSumKernel, IdenticalAcrossThreadCounts) {
  Tensor dy = random({5000, 33}, DType::f32);
  Tensor x = random({5000, 7}, DType::f32), w = random({33, 7}, DType::f32);
  int saved_threads = omp_get_max_threads();
  Tensor first = ops::linear_backward(dy, x, w, false, false, true).dbias;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    EXPECT_EQ(ops::linear_backward(dy, x, w, false, false, true).dbias.to_vector<float>(),
              first.to_vector<float>());
  }
  omp_set_num_threads(saved_threads);
}

TEST(Matmul, BatchedOpWithTransposeFlags) {
  for (bool trans_a : {false, true})
    for (bool trans_b : {false, true}) {
      int64_t m = 5, k = 7, n = 3;
      Tensor a = random(trans_a ? Shape{2, 3, k, m} : Shape{2, 3, m, k}, DType::f64);
      Tensor b = random(trans_b ? Shape{2, 3, n, k} : Shape{2, 3, k, n}, DType::f64);
      EXPECT_TRUE(all_close(ops::matmul(a, b, trans_a, trans_b),
                            Tensor::from_vector(reference_gemm(a, b, 6, m, n, k, trans_a, trans_b), {2, 3, m, n}),
                            "matmul"))
          << "trans_a " << trans_a << " trans_b " << trans_b;
    }
}

TEST(Matmul, StridedViews) {
  // A column slice keeps unit stride along rows (used in place, rows 20 apart); a transposed view does not
  // (copied first). Both must give the product of their logical values.
  Tensor a_rows = random({2, 5, 20}, DType::f32).slice(2, 3, 10);  // (2, 5, 7)
  Tensor a_transposed = random({2, 7, 5}, DType::f32).transpose(1, 2);  // (2, 5, 7)
  Tensor b = random({2, 7, 4}, DType::f32);
  for (const Tensor& a : {a_rows, a_transposed})
    EXPECT_TRUE(all_close(ops::matmul(a, b), Tensor::from_vector(reference_gemm(a, b, 2, 5, 4, 7, false, false),
                                                                 {2, 5, 4}), "matmul"));
}

TEST(Matmul, EmptyInnerDimensionGivesZeros) {
  // A sum over no terms: the output must be written (zeros), not left as allocated.
  Tensor c = ops::matmul(Tensor::zeros({3, 0}, DType::f64), Tensor::zeros({0, 4}, DType::f64));
  EXPECT_TRUE(all_close(c, Tensor::zeros({3, 4}, DType::f64), "matmul"));
}

struct LinearCase {
  Shape leading;
  int64_t in, out;
};

// rows·out spans the element counts of test::kSizes, then odd shapes with several leading dimensions.
const LinearCase kLinearCases[] = {{{1}, 1, 1},        {{2, 4}, 5, 8},   {{8, 8}, 33, 64},
                                   {{4, 64}, 17, 256}, {{7}, 13, 5},     {{3, 5}, 11, 7}};

class LinearOp : public ::testing::TestWithParam<std::tuple<LinearCase, DType, bool>> {};

TEST_P(LinearOp, ForwardAndBackwardMatchF64Loops) {
  auto [shape, dtype, with_bias] = GetParam();
  int64_t rows = shape_numel(shape.leading);
  Shape x_shape = shape.leading, y_shape = shape.leading;
  x_shape.push_back(shape.in);
  y_shape.push_back(shape.out);
  Tensor x = random(x_shape, dtype), w = random({shape.out, shape.in}, dtype);
  Tensor bias = with_bias ? random({shape.out}, dtype) : Tensor();
  std::vector<double> want_y = reference_gemm(x, w, 1, rows, shape.out, shape.in, false, true);
  if (with_bias)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < shape.out; ++o) want_y[size_t(r * shape.out + o)] += bias.at({o});
  EXPECT_TRUE(all_close(ops::linear(x, w, bias), Tensor::from_vector(want_y, y_shape), "matmul"));

  Tensor dy = random(y_shape, dtype);
  ops::LinearGrads grads = ops::linear_backward(dy, x, w, true, true, true);
  EXPECT_TRUE(all_close(grads.dx, Tensor::from_vector(reference_gemm(dy, w, 1, rows, shape.in, shape.out, false,
                                                                     false), x_shape), "matmul"));
  EXPECT_TRUE(all_close(grads.dweight, Tensor::from_vector(reference_gemm(dy, x, 1, shape.out, shape.in, rows, true,
                                                                          false), {shape.out, shape.in}), "matmul"));
  EXPECT_TRUE(all_close(grads.dbias, Tensor::from_vector(reference_column_sum(dy), {shape.out}), "matmul"));
}

INSTANTIATE_TEST_SUITE_P(AllShapes, LinearOp,
                         ::testing::Combine(::testing::ValuesIn(kLinearCases), ::testing::Values(DType::f32, DType::f64),
                                            ::testing::Bool()));

TEST(Linear, BackwardComputesOnlyRequestedGradients) {
  Tensor x = random({3, 4}), w = random({5, 4}), dy = random({3, 5});
  ops::LinearGrads only_dx = ops::linear_backward(dy, x, w, true, false, false);
  EXPECT_TRUE(only_dx.dx.defined());
  EXPECT_FALSE(only_dx.dweight.defined());
  EXPECT_FALSE(only_dx.dbias.defined());
  ops::LinearGrads params = ops::linear_backward(dy, x, w, false, true, true);
  EXPECT_FALSE(params.dx.defined());
  EXPECT_TRUE(params.dweight.defined());
  EXPECT_TRUE(params.dbias.defined());
}

TEST(Matmul, GradientsMatchFiniteDifferences) {
  for (bool trans_a : {false, true})
    for (bool trans_b : {false, true}) {
      Tensor a = random(trans_a ? Shape{2, 4, 3} : Shape{2, 3, 4}, DType::f64);
      Tensor b = random(trans_b ? Shape{2, 5, 4} : Shape{2, 4, 5}, DType::f64);
      EXPECT_TRUE(test::gradcheck(
          [=](const auto& v) { return autograd::matmul(v[0], v[1], trans_a, trans_b); }, {a, b}))
          << "trans_a " << trans_a << " trans_b " << trans_b;
    }
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  Tensor x = random({2, 3, 4}, DType::f64), w = random({5, 4}, DType::f64), b = random({5}, DType::f64);
  EXPECT_TRUE(test::gradcheck([](const auto& v) { return autograd::linear(v[0], v[1], v[2]); }, {x, w, b}));
  EXPECT_TRUE(test::gradcheck([](const auto& v) { return autograd::linear(v[0], v[1], autograd::Variable()); },
                              {x, w}));
}

TEST(Matmul, BadInputsRaise) {
  Tensor a = random({3, 4}), b = random({5, 6});
  EXPECT_ALPHA_ERROR(ops::matmul(a, b), ShapeError, "[matmul]", "'b'", "size 4", "[5, 6]");
  EXPECT_ALPHA_ERROR(ops::matmul(a, random({4, 6}), true), ShapeError, "[matmul]", "'b'", "size 3");
  EXPECT_ALPHA_ERROR(ops::matmul(random({2, 3, 4}), random({3, 4, 5})), ShapeError, "[matmul]", "'b'",
                     "batch dimensions [2]", "[3, 4, 5]");
  EXPECT_ALPHA_ERROR(ops::matmul(a, random({2, 4, 5})), ShapeError, "[matmul]", "'b'", "2 dimensions");
  EXPECT_ALPHA_ERROR(ops::matmul(random({4}), random({4})), ShapeError, "[matmul]", "'a'", "at least 2");
  EXPECT_ALPHA_ERROR(ops::matmul(a, random({4, 6}, DType::f64)), DTypeError, "[matmul]", "'b'", "f32", "f64");
  EXPECT_ALPHA_ERROR(ops::matmul(Tensor::zeros({3, 4}, DType::i32), random({4, 6})), DTypeError, "[matmul]", "'a'",
                     "i32");
  EXPECT_ALPHA_ERROR(ops::matmul(a, Tensor()), ValueError, "[matmul]", "'b'", "undefined");
}

TEST(Linear, BadInputsRaise) {
  Tensor x = random({2, 3, 4}), w = random({5, 4});
  EXPECT_ALPHA_ERROR(ops::linear(x, random({5, 3}), Tensor()), ShapeError, "[linear]", "'weight'", "size 4");
  EXPECT_ALPHA_ERROR(ops::linear(x, random({4}), Tensor()), ShapeError, "[linear]", "'weight'", "2 dimensions");
  EXPECT_ALPHA_ERROR(ops::linear(x, w, random({4})), ShapeError, "[linear]", "'bias'", "[5]", "[4]");
  EXPECT_ALPHA_ERROR(ops::linear(x, w, random({5}, DType::f64)), DTypeError, "[linear]", "'bias'", "f64");
  EXPECT_ALPHA_ERROR(ops::linear(x, random({5, 4}, DType::f64), Tensor()), DTypeError, "[linear]", "'weight'");
  EXPECT_ALPHA_ERROR(ops::linear(Tensor::zeros({2, 4}, DType::i64), w, Tensor()), DTypeError, "[linear]", "'x'",
                     "i64");
  EXPECT_ALPHA_ERROR(ops::linear(Tensor(), w, Tensor()), ValueError, "[linear]", "'x'", "undefined");
  EXPECT_ALPHA_ERROR(ops::linear_backward(random({2, 3, 6}), x, w, true, true, true), ShapeError,
                     "[linear_backward]", "'dy'", "[2, 3, 5]", "[2, 3, 6]");
  EXPECT_ALPHA_ERROR(ops::linear_backward(random({2, 3, 5}, DType::f64), x, w, true, true, true), DTypeError,
                     "[linear_backward]", "'dy'", "f64");
}

}  // namespace
}  // namespace alpha
