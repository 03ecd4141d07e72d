// Matrix products against naive f64 loops: the GEMM and column-sum kernels directly (into poisoned
// outputs, every transpose combination, accumulation through alpha/beta, batches, padded rows), the GEMM
// epilogues (bias, GELU keeping the pre-activation, DGELU, bias gradients; padded outputs whose padding must
// stay untouched), bf16/f16 operands into an f32 output (GEMM, a's bias gradient, column sums), the
// matmul/linear/linear_gelu tensor ops on strided views and leading dimensions, linear_param_grads_into
// summing chunks of rows, the fused GELU ops giving the unfused ops' bits, gradient checks through autograd
// (the GELU MLP too), thread-count independence of the bias gradient, and bad inputs.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "alpha/autograd/functions.h"
#include "alpha/kernels/matmul.h"
#include "alpha/ops/activation.h"
#include "alpha/ops/check.h"
#include "alpha/ops/elementwise.h"
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

// m·n spans the element counts of test::kSizes, then odd shapes, a batch and an empty inner dimension.
const GemmCase kGemmCases[] = {{1, 1, 1, 1}, {1, 8, 5, 8}, {1, 64, 33, 64}, {1, 256, 17, 256}, {1, 7, 13, 5},
                               {1, 37, 29, 53}, {3, 5, 11, 9}, {1, 3, 0, 4}};

// Calls fn.template operator()<T, Out>() for the GEMM of `dtype` operands: f32 and f64 into themselves, bf16
// and f16 into f32 (GemmArgs<T, float>, how dW is summed over chunks of rows).
template <class Fn>
void for_gemm_types(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f64: fn.template operator()<double, double>(); break;
    case DType::bf16: fn.template operator()<bf16, float>(); break;
    case DType::f16: fn.template operator()<f16, float>(); break;
    default: fn.template operator()<float, float>(); break;
  }
}

class GemmKernel : public ::testing::TestWithParam<std::tuple<GemmCase, DType, bool, bool>> {};

TEST_P(GemmKernel, MatchesF64Loops) {
  const auto& param = GetParam();
  const auto shape = std::get<0>(param);
  const auto dtype = std::get<1>(param);
  const auto trans_a = std::get<2>(param);
  const auto trans_b = std::get<3>(param);
  const int64_t batch = shape.batch, m = shape.m, k = shape.k, n = shape.n;
  Tensor a = random(trans_a ? Shape{batch, k, m} : Shape{batch, m, k}, dtype);
  Tensor b = random(trans_b ? Shape{batch, n, k} : Shape{batch, k, n}, dtype);
  std::vector<double> product = reference_gemm(a, b, batch, m, n, k, trans_a, trans_b);
  for_gemm_types(dtype, [&]<class T, class Out>() {
    const DType out_dtype = dtype_of<Out>;
    Tensor c_initial = random({batch, m, n}, out_dtype);
    std::vector<double> accumulated = c_initial.to_vector<double>();
    for (size_t i = 0; i < accumulated.size(); ++i) accumulated[i] = 0.5 * product[i] - 1.25 * accumulated[i];
    auto args = [&](const Tensor& c, double alpha, double beta) {
      return kernels::GemmArgs<T, Out>{a.data<T>(), b.data<T>(), c.data<Out>(), batch, m, n, k, trans_a, trans_b,
                                       trans_a ? m : k, trans_b ? k : n, n, m * k, k * n, m * n,
                                       acc_t<T>(alpha), acc_t<T>(beta)};
    };
    Tensor c = test::poisoned({batch, m, n}, out_dtype);  // beta = 0 must overwrite, never read, the output
    kernels::cpu::gemm(args(c, 1.0, 0.0));
    EXPECT_TRUE(all_close(c, Tensor::from_vector(product, {batch, m, n}), "matmul"));
    c = c_initial.clone();
    kernels::cpu::gemm(args(c, 0.5, -1.25));
    EXPECT_TRUE(all_close(c, Tensor::from_vector(accumulated, {batch, m, n}), "matmul"));
  });
}

INSTANTIATE_TEST_SUITE_P(AllShapes, GemmKernel,
                         ::testing::Combine(::testing::ValuesIn(kGemmCases),
                                            ::testing::Values(DType::f32, DType::f64, DType::bf16, DType::f16),
                                            ::testing::Bool(), ::testing::Bool()));

double reference_gelu(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

// Derivative of the tanh-form GELU through sech², written out independently of the kernels.
double reference_gelu_grad(double x) {
  double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
  double sech2 = 1 / (std::cosh(u) * std::cosh(u));
  return 0.5 * (1 + std::tanh(u)) + 0.5 * x * sech2 * std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

// One epilogue configuration: p = alpha·op(a)·op(b) + beta·c0 (+ bias per column), then the epilogue. With
// `addend`, c0 is given as the addend and c starts poisoned (NaN, which a read of c would carry into p).
struct EpilogueCase {
  const char* name;
  kernels::GemmEpilogue epilogue;
  bool bias, aux;
  double alpha, beta;
  kernels::GemmBiasGrad bias_grad;
  bool addend = false;
};
using kernels::GemmBiasGrad, kernels::GemmEpilogue;
const EpilogueCase kEpilogueCases[] = {
    {"bias", GemmEpilogue::none, true, false, 1.0, 0.0, GemmBiasGrad::none},
    {"bias_accumulate", GemmEpilogue::none, true, false, 0.5, -1.25, GemmBiasGrad::none},
    {"gelu", GemmEpilogue::gelu, false, false, 1.0, 0.0, GemmBiasGrad::none},
    {"gelu_bias_pre", GemmEpilogue::gelu, true, true, 1.0, 0.0, GemmBiasGrad::none},
    {"gelu_bias_pre_accumulate", GemmEpilogue::gelu, true, true, 0.5, 0.75, GemmBiasGrad::none},
    {"dgelu", GemmEpilogue::dgelu, false, true, 1.0, 0.0, GemmBiasGrad::none},
    {"dgelu_bias_grad", GemmEpilogue::dgelu, false, true, 0.5, 0.0, GemmBiasGrad::c_columns},
    {"bias_grad_of_a", GemmEpilogue::none, false, false, 2.0, 0.0, GemmBiasGrad::a_columns},
    {"bias_addend", GemmEpilogue::none, true, false, 1.0, 1.0, GemmBiasGrad::none, true},
    {"addend_scaled", GemmEpilogue::none, false, false, 0.5, -1.25, GemmBiasGrad::none, true},
    {"gelu_bias_pre_addend", GemmEpilogue::gelu, true, true, 1.0, 0.75, GemmBiasGrad::none, true},
};

struct EpilogueParam {
  GemmCase shape;
  DType dtype;
  bool trans_a, trans_b;
  EpilogueCase epilogue;
};

// Every epilogue at every transpose pair (a_columns needs trans_a), in f32 and f64, at 1x1x1, odd sizes and
// an empty inner dimension (k = 0: the product is zero, the epilogue still runs).
std::vector<EpilogueParam> epilogue_params() {
  const GemmCase shapes[] = {{1, 1, 1, 1}, {1, 7, 13, 5}, {1, 64, 33, 64}, {1, 127, 65, 33}, {1, 3, 0, 4}};
  std::vector<EpilogueParam> params;
  for (const GemmCase& shape : shapes)
    for (DType dtype : {DType::f32, DType::f64})
      for (bool trans_a : {false, true})
        for (bool trans_b : {false, true})
          for (const EpilogueCase& e : kEpilogueCases)
            if (e.bias_grad != GemmBiasGrad::a_columns || trans_a) params.push_back({shape, dtype, trans_a, trans_b, e});
  return params;
}

class GemmEpilogueKernel : public ::testing::TestWithParam<EpilogueParam> {};

TEST_P(GemmEpilogueKernel, MatchesF64LoopsAndLeavesPaddingAlone) {
  const EpilogueParam& p = GetParam();
  const int64_t m = p.shape.m, k = p.shape.k, n = p.shape.n;
  const EpilogueCase& e = p.epilogue;
  const DType dtype = p.dtype;
  Tensor a = random(p.trans_a ? Shape{k, m} : Shape{m, k}, dtype);
  Tensor b = random(p.trans_b ? Shape{n, k} : Shape{k, n}, dtype);
  Tensor c0 = random({m, n}, dtype), bias = random({n}, dtype), pre_in = random({m, n}, dtype, -3.0, 3.0);
  // c and aux have padded rows (ldc = n + 2, ld_aux = n + 3) whose padding starts and must stay NaN.
  Tensor c = test::poisoned({m, n + 2}, dtype), aux = test::poisoned({m, n + 3}, dtype);
  Tensor c_view = c.slice(1, 0, n), aux_view = aux.slice(1, 0, n);
  // An addend has c's row stride; its padding, NaN too, must not reach c.
  Tensor addend = test::poisoned({m, n + 2}, dtype);
  if (e.beta != 0) (e.addend ? addend.slice(1, 0, n) : c_view).copy_from(c0);
  if (e.epilogue == GemmEpilogue::dgelu) aux_view.copy_from(pre_in);
  const int64_t grad_size = e.bias_grad == GemmBiasGrad::a_columns ? m : n;
  Tensor bias_grad = test::poisoned({grad_size}, dtype);

  std::vector<double> product = reference_gemm(a, b, 1, m, n, k, p.trans_a, p.trans_b);
  std::vector<double> c0v = c0.to_vector<double>(), biasv = bias.to_vector<double>(), prev = pre_in.to_vector<double>();
  std::vector<double> want_c(size_t(m * n)), want_aux(size_t(m * n)), want_grad(size_t(grad_size), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      size_t at = size_t(i * n + j);
      double v = e.alpha * product[at] + (e.beta != 0 ? e.beta * c0v[at] : 0.0) + (e.bias ? biasv[size_t(j)] : 0.0);
      want_aux[at] = v;
      if (e.epilogue == GemmEpilogue::gelu) v = reference_gelu(v);
      if (e.epilogue == GemmEpilogue::dgelu) v *= reference_gelu_grad(prev[at]);
      want_c[at] = v;
      if (e.bias_grad == GemmBiasGrad::c_columns) want_grad[size_t(j)] += v;
    }
  if (e.bias_grad == GemmBiasGrad::a_columns) {  // a stored (k, m): its column sums
    std::vector<double> av = a.to_vector<double>();
    for (int64_t l = 0; l < k; ++l)
      for (int64_t i = 0; i < m; ++i) want_grad[size_t(i)] += av[size_t(l * m + i)];
  }

  ops::dispatch_cpu_float("test", a, [&]<class T>() {
    kernels::GemmArgs<T> args{a.data<T>(), b.data<T>(), c.data<T>(), 1, m, n, k, p.trans_a, p.trans_b,
                              p.trans_a ? m : k, p.trans_b ? k : n, n + 2, 0, 0, 0, acc_t<T>(e.alpha), acc_t<T>(e.beta)};
    args.bias = e.bias ? bias.data<T>() : nullptr;
    args.epilogue = e.epilogue;
    if (e.aux) {
      args.aux = aux.data<T>();
      args.ld_aux = n + 3;
    }
    args.bias_grad_of = e.bias_grad;
    if (e.bias_grad != GemmBiasGrad::none) args.bias_grad = bias_grad.data<T>();
    if (e.addend) args.addend = addend.data<T>();
    kernels::cpu::gemm(args);
  });
  EXPECT_TRUE(all_close(c_view, Tensor::from_vector(want_c, {m, n}), "matmul"));
  if (e.epilogue == GemmEpilogue::gelu && e.aux) {
    EXPECT_TRUE(all_close(aux_view, Tensor::from_vector(want_aux, {m, n}), "matmul"));
  }
  if (e.bias_grad != GemmBiasGrad::none) {
    EXPECT_TRUE(all_close(bias_grad, Tensor::from_vector(want_grad, {grad_size}), "matmul"));
  }
  for (double v : c.slice(1, n, n + 2).to_vector<double>()) ASSERT_TRUE(std::isnan(v)) << "c's padding was written";
  if (e.epilogue == GemmEpilogue::gelu) {
    for (double v : (e.aux ? aux.slice(1, n, n + 3) : aux).to_vector<double>())
      ASSERT_TRUE(std::isnan(v)) << "aux written outside the pre-activation";
  }
}

// "MxKxN_dtype_Na_Tb": a test's name for a GEMM's shape, dtype and transposes.
std::string gemm_case_name(const GemmCase& shape, DType dtype, bool trans_a, bool trans_b) {
  return std::to_string(shape.m) + "x" + std::to_string(shape.k) + "x" + std::to_string(shape.n) + "_" +
         std::string(dtype_name(dtype)) + (trans_a ? "_Ta" : "_Na") + (trans_b ? "_Tb" : "_Nb");
}

INSTANTIATE_TEST_SUITE_P(AllEpilogues, GemmEpilogueKernel, ::testing::ValuesIn(epilogue_params()),
                         [](const ::testing::TestParamInfo<EpilogueParam>& info) {
                           const EpilogueParam& p = info.param;
                           return std::string(p.epilogue.name) + "_" +
                                  gemm_case_name(p.shape, p.dtype, p.trans_a, p.trans_b);
                         });

TEST(GemmEpilogueKernel, InconsistentFieldsRaise) {
  std::vector<float> a(6, 1.0f), b(6, 1.0f), c(4, 0.0f), aux(4, 0.0f), grad(2, 0.0f);
  auto args = [&] {  // (2, 3)·(3, 2)
    return kernels::GemmArgs<float>{a.data(), b.data(), c.data(), 1, 2, 2, 3, false, false, 3, 2, 2, 0, 0, 0, 1.0f, 0.0f};
  };
  auto with = [&](auto change) {
    kernels::GemmArgs<float> x = args();
    change(x);
    return x;
  };
  using Args = kernels::GemmArgs<float>;
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with([&](Args& x) { x.batch = 2, x.bias = grad.data(); })), ValueError,
                     "[gemm]", "'batch'", "expected 1");
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with([&](Args& x) { x.epilogue = GemmEpilogue::dgelu; })), ValueError,
                     "[gemm]", "'aux'", "pre-activation");
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with([&](Args& x) {
                       x.epilogue = GemmEpilogue::dgelu, x.aux = aux.data(), x.ld_aux = 2, x.beta = 1.0f;
                     })),
                     ValueError, "[gemm]", "'beta'");
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with([&](Args& x) {
                       x.epilogue = GemmEpilogue::dgelu, x.aux = aux.data(), x.ld_aux = 2, x.bias = grad.data();
                     })),
                     ValueError, "[gemm]", "'bias'");
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with([&](Args& x) {
                       x.epilogue = GemmEpilogue::gelu, x.aux = aux.data(), x.ld_aux = 1;
                     })),
                     ValueError, "[gemm]", "'ld_aux'", "at least n = 2");
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with([&](Args& x) { x.aux = aux.data(), x.ld_aux = 2; })), ValueError,
                     "[gemm]", "'aux'");
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with([&](Args& x) {
                       x.bias_grad_of = GemmBiasGrad::c_columns, x.bias_grad = grad.data();
                     })),
                     ValueError, "[gemm]", "'bias_grad_of'", "dgelu");
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with([&](Args& x) {
                       x.bias_grad_of = GemmBiasGrad::a_columns, x.bias_grad = grad.data();
                     })),
                     ValueError, "[gemm]", "'bias_grad_of'", "trans_a");
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with([&](Args& x) { x.bias_grad_of = GemmBiasGrad::a_columns; })),
                     ValueError, "[gemm]", "'bias_grad'");
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with([&](Args& x) { x.bias_grad = grad.data(); })), ValueError, "[gemm]",
                     "'bias_grad'");
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with([&](Args& x) { x.addend = aux.data(); })), ValueError, "[gemm]", "'beta'",
                     "nonzero with an addend");
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with([&](Args& x) { x.addend = aux.data(), x.beta = 1.0f, x.batch = 2; })),
                     ValueError, "[gemm]", "'batch'", "an addend");
}

// bf16/f16 operands into an f32 output as dW = dyᵀ·x is summed over chunks of rows (trans_a): the first chunk
// into a poisoned output with padded rows (beta = 0 overwrites it and leaves the padding) with a's bias
// gradient (db) in f32, the second accumulated onto it (beta = 1). GemmKernel checks every transpose pair.
TEST(GemmWiderOutputKernel, SumsChunksWithTheBiasGradientOfA) {
  for (DType dtype : {DType::bf16, DType::f16})
    for (const auto& size : {std::tuple<int64_t, int64_t, int64_t>{29, 37, 53}, {64, 64, 64}, {0, 3, 4}}) {
      const int64_t rows = std::get<0>(size), out = std::get<1>(size), in = std::get<2>(size);
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::to_string(rows) + " rows");
      Tensor dy1 = random({rows, out}, dtype), x1 = random({rows, in}, dtype);
      Tensor dy2 = random({rows, out}, dtype), x2 = random({rows, in}, dtype);
      std::vector<double> want = reference_gemm(dy1, x1, 1, out, in, rows, true, false);
      const std::vector<double> second = reference_gemm(dy2, x2, 1, out, in, rows, true, false);
      Tensor dweight = test::poisoned({out, in + 2}, DType::f32), dbias = test::poisoned({out}, DType::f32);
      for_gemm_types(dtype, [&]<class T, class Out>() {
        auto chunk = [&](const Tensor& dy, const Tensor& x, float beta, Out* bias_grad) {
          kernels::GemmArgs<T, Out> args{dy.data<T>(), x.data<T>(), dweight.data<Out>(), 1, out, in, rows, true,
                                         false, out, in, in + 2, 0, 0, 0, acc_t<T>(1), acc_t<T>(beta)};
          if (bias_grad) args.bias_grad_of = GemmBiasGrad::a_columns, args.bias_grad = bias_grad;
          kernels::cpu::gemm(args);
        };
        chunk(dy1, x1, 0.0f, dbias.data<Out>());
        EXPECT_TRUE(all_close(dweight.slice(1, 0, in), Tensor::from_vector(want, {out, in}), "matmul"));
        EXPECT_TRUE(all_close(dbias, Tensor::from_vector(reference_column_sum(dy1), {out}), "matmul"));
        chunk(dy2, x2, 1.0f, nullptr);
      });
      for (size_t i = 0; i < want.size(); ++i) want[i] += second[i];
      EXPECT_TRUE(all_close(dweight.slice(1, 0, in), Tensor::from_vector(want, {out, in}), "matmul"));
      for (double v : dweight.slice(1, in, in + 2).to_vector<double>())
        ASSERT_TRUE(std::isnan(v)) << "dW's padding was written";
    }
}

TEST(GemmWiderOutputKernel, RefusesEpiloguesAndBias) {
  std::vector<bf16> a(6, bf16(1.0f)), b(6, bf16(1.0f));
  std::vector<float> c(4, 0.0f), aux(4, 0.0f), bias(2, 0.0f);
  auto args = [&] {  // (2, 3)·(3, 2)
    return kernels::GemmArgs<bf16, float>{a.data(), b.data(), c.data(), 1, 2, 2, 3, false, false, 3, 2, 2, 0, 0, 0,
                                          1.0f, 0.0f};
  };
  auto with_bias = args();
  with_bias.bias = bias.data();
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with_bias), ValueError, "[gemm]", "'bias'", "wider");
  auto with_gelu = args();
  with_gelu.epilogue = GemmEpilogue::gelu;
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with_gelu), ValueError, "[gemm]", "'epilogue'", "wider");
  auto with_dgelu = args();
  with_dgelu.epilogue = GemmEpilogue::dgelu, with_dgelu.aux = aux.data(), with_dgelu.ld_aux = 2;
  EXPECT_ALPHA_ERROR(kernels::cpu::gemm(with_dgelu), ValueError, "[gemm]", "'epilogue'", "wider");
}

class ColumnSumKernel : public ::testing::TestWithParam<std::tuple<Shape, DType>> {};

TEST_P(ColumnSumKernel, MatchesF64LoopsWithPaddedRows) {
  const auto& param = GetParam();
  const auto shape = std::get<0>(param);
  const auto dtype = std::get<1>(param);
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

class ColumnSumWiderOutputKernel : public ::testing::TestWithParam<std::tuple<Shape, DType>> {};

TEST_P(ColumnSumWiderOutputKernel, SumsBf16AndF16IntoF32) {
  auto [shape, dtype] = GetParam();
  int64_t rows = shape[0], cols = shape[1], ld = cols + 3;
  Tensor padded = random({rows, ld}, dtype);
  Tensor out = test::poisoned({cols}, DType::f32);
  if (dtype == DType::bf16)
    kernels::cpu::column_sum(kernels::ColumnSumArgs<bf16, float>{padded.data<bf16>(), out.data<float>(), rows, cols, ld});
  else
    kernels::cpu::column_sum(kernels::ColumnSumArgs<f16, float>{padded.data<f16>(), out.data<float>(), rows, cols, ld});
  EXPECT_TRUE(all_close(out, Tensor::from_vector(reference_column_sum(padded.slice(1, 0, cols)), {cols}), "matmul"));
}

INSTANTIATE_TEST_SUITE_P(AllShapes, ColumnSumWiderOutputKernel,
                         ::testing::Combine(::testing::Values(Shape{1, 1}, Shape{64, 64}, Shape{7, 13}, Shape{300, 5}),
                                            ::testing::Values(DType::bf16, DType::f16)));

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

TEST(ColumnSumKernel, FusedBiasGradientIdenticalAcrossThreadCounts) {
  // With dW requested too, db comes from dW's GEMM (a_columns): the same fixed-order sum.
  Tensor dy = random({5000, 33}, DType::f32);
  Tensor x = random({5000, 7}, DType::f32), w = random({33, 7}, DType::f32);
  int saved_threads = omp_get_max_threads();
  ops::LinearGrads first = ops::linear_backward(dy, x, w, false, true, true);
  EXPECT_EQ(first.dbias.to_vector<float>(), ops::linear_backward(dy, x, w, false, false, true).dbias.to_vector<float>());
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    EXPECT_EQ(ops::linear_backward(dy, x, w, false, true, true).dbias.to_vector<float>(),
              first.dbias.to_vector<float>());
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
  // With a residual, added by the same GEMM; a poisoned (NaN) output buffer is never read.
  Tensor residual = random(y_shape, dtype);
  std::vector<double> want_residual = residual.to_vector<double>();
  for (size_t i = 0; i < want_residual.size(); ++i) want_residual[i] += want_y[i];
  EXPECT_TRUE(all_close(ops::linear(x, w, bias, residual), Tensor::from_vector(want_residual, y_shape), "matmul"));

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

// dW and db summed over chunks of rows by linear_param_grads_into (the first chunk overwriting poisoned
// accumulators, the others adding) against the f64 loops over all rows, and against linear_backward's bits
// for a single call: dW with db (from dW's GEMM), dW alone, db alone (a column sum).
TEST(LinearParamGradsInto, SumsChunksOfRowsLikeOneBackward) {
  for (DType dtype : {DType::f32, DType::f64})
    for (auto [with_dweight, with_dbias] : {std::pair{true, true}, {true, false}, {false, true}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (with_dweight ? " dW" : "") + (with_dbias ? " db" : ""));
      const int64_t rows = 2 * 19, in = 13, out = 29;
      Tensor x = random({2, 19, in}, dtype), dy = random({2, 19, out}, dtype);
      Tensor dweight = with_dweight ? test::poisoned({out, in}, dtype) : Tensor();
      Tensor dbias = with_dbias ? test::poisoned({out}, dtype) : Tensor();
      const Tensor x_rows = x.reshape({rows, in}), dy_rows = dy.reshape({rows, out});
      const int64_t bounds[] = {0, 5, 17, 30, rows};  // chunks of 5, 12, 13 and 8 rows
      for (size_t c = 0; c + 1 < std::size(bounds); ++c)
        ops::linear_param_grads_into(dy_rows.slice(0, bounds[c], bounds[c + 1]),
                                     x_rows.slice(0, bounds[c], bounds[c + 1]), dweight, dbias, c > 0);
      if (with_dweight) {
        EXPECT_TRUE(all_close(dweight, Tensor::from_vector(reference_gemm(dy, x, 1, out, in, rows, true, false),
                                                           {out, in}), "matmul"));
      }
      if (with_dbias) {
        EXPECT_TRUE(all_close(dbias, Tensor::from_vector(reference_column_sum(dy), {out}), "matmul"));
      }
      // One call over every row: linear_backward's bits (the same GEMM and column sum).
      ops::linear_param_grads_into(dy, x, dweight, dbias, false);
      ops::LinearGrads want = ops::linear_backward(dy, x, random({out, in}, dtype), false, with_dweight, with_dbias);
      if (with_dweight) {
        EXPECT_TRUE(test::bit_equal(dweight, want.dweight));
      }
      if (with_dbias) {
        EXPECT_TRUE(test::bit_equal(dbias, want.dbias));
      }
    }
}

TEST(LinearParamGradsInto, BadInputsRaise) {
  Tensor x = random({2, 3, 4}), dy = random({2, 3, 5}), dweight = random({5, 4}), dbias = random({5});
  constexpr const char* op = "[linear_param_grads_into]";
  EXPECT_ALPHA_ERROR(ops::linear_param_grads_into(dy, x, Tensor(), Tensor(), false), ValueError, op, "'dweight'",
                     "neither");
  EXPECT_ALPHA_ERROR(ops::linear_param_grads_into(dy, x, random({5, 4}, DType::f64), dbias, false), DTypeError, op,
                     "'dweight'", "f32", "f64");
  EXPECT_ALPHA_ERROR(ops::linear_param_grads_into(dy, x, random({5, 3}), dbias, false), ShapeError, op, "'dweight'",
                     "size 4");
  EXPECT_ALPHA_ERROR(ops::linear_param_grads_into(dy, x, random({20}), dbias, false), ShapeError, op, "'dweight'",
                     "2 dimensions");
  EXPECT_ALPHA_ERROR(ops::linear_param_grads_into(dy, x, random({4, 5}).transpose(0, 1), dbias, false), LayoutError,
                     op, "'dweight'", "contiguous");
  EXPECT_ALPHA_ERROR(ops::linear_param_grads_into(dy, x, dweight, random({6}), false), ShapeError, op, "'dbias'",
                     "size 5");
  EXPECT_ALPHA_ERROR(ops::linear_param_grads_into(dy, x, dweight, random({5}, DType::f64), false), DTypeError, op,
                     "'dbias'", "f32");
  EXPECT_ALPHA_ERROR(ops::linear_param_grads_into(random({2, 3, 6}), x, dweight, dbias, false), ShapeError, op,
                     "'dy'", "[2, 3, 5]", "[2, 3, 6]");
  EXPECT_ALPHA_ERROR(ops::linear_param_grads_into(dy.to(DType::f64), x, dweight, dbias, false), DTypeError, op, "'dy'",
                     "f64");
  EXPECT_ALPHA_ERROR(ops::linear_param_grads_into(dy, Tensor::zeros({2, 3, 4}, DType::i32), dweight, dbias, false),
                     DTypeError, op, "'x'", "i32");
  // f64 x sums in f64: an f32 accumulator is refused.
  EXPECT_ALPHA_ERROR(ops::linear_param_grads_into(dy.to(DType::f64), x.to(DType::f64), dweight, Tensor(), false),
                     DTypeError, op, "'dweight'", "f64", "f32");
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
  Tensor r = random({2, 3, 5}, DType::f64);
  EXPECT_TRUE(test::gradcheck([](const auto& v) { return autograd::linear(v[0], v[1], v[2]); }, {x, w, b}));
  EXPECT_TRUE(test::gradcheck([](const auto& v) { return autograd::linear(v[0], v[1], autograd::Variable()); },
                              {x, w}));
  EXPECT_TRUE(test::gradcheck([](const auto& v) { return autograd::linear(v[0], v[1], v[2], v[3]); }, {x, w, b, r}));
}

// The residual is added by linear's GEMM: within one rounding of linear then add, and its gradient is the
// output's gradient; wrong residuals raise, naming the op and the argument.
TEST(Linear, ResidualIsAddedByTheGemm) {
  Tensor x = random({3, 5, 9}), w = random({7, 9}), b = random({7}), r = random({3, 5, 7});
  Tensor want = ops::add(ops::linear(x, w, b), r);
  EXPECT_TRUE(all_close(ops::linear(x, w, b, r), want, "matmul"));
  autograd::Variable vx(x, true), vw(w, true), vb(b, true), vr(r, true);
  Tensor dy = random({3, 5, 7});
  autograd::backward(autograd::linear(vx, vw, vb, vr), dy);
  EXPECT_EQ(vr.grad().to_vector<float>(), dy.to_vector<float>());
  autograd::Variable ux(x, true), uw(w, true), ub(b, true);
  autograd::backward(autograd::linear(ux, uw, ub), dy);
  for (auto [fused, plain] : {std::pair{vx, ux}, {vw, uw}, {vb, ub}})
    EXPECT_EQ(fused.grad().to_vector<float>(), plain.grad().to_vector<float>());
  EXPECT_ALPHA_ERROR(ops::linear(x, w, b, random({3, 5, 6})), ShapeError, "[linear]", "'residual'");
  EXPECT_ALPHA_ERROR(ops::linear(x, w, b, r.to(DType::f64)), DTypeError, "[linear]", "'residual'");
}

TEST(LinearGelu, OpsMatchF64LoopsAndTheUnfusedOpsBits) {
  for (DType dtype : {DType::f32, DType::f64})
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (with_bias ? " with bias" : " without bias"));
      const int64_t rows = 15, in = 9, hidden = 13, out = 6;
      Tensor x = random({3, 5, in}, dtype), w1 = random({hidden, in}, dtype), w2 = random({out, hidden}, dtype);
      Tensor b1 = with_bias ? random({hidden}, dtype) : Tensor(), b2 = with_bias ? random({out}, dtype) : Tensor();
      ops::LinearGelu fused = ops::linear_gelu(x, w1, b1);
      Tensor pre = ops::linear(x, w1, b1), h = ops::gelu(pre);
      EXPECT_EQ(fused.pre.shape(), (Shape{3, 5, hidden}));
      EXPECT_EQ(fused.pre.to_vector<double>(), pre.to_vector<double>());
      EXPECT_EQ(fused.out.to_vector<double>(), h.to_vector<double>());
      EXPECT_FALSE(ops::linear_gelu(x, w1, b1, false).pre.defined());
      EXPECT_EQ(ops::linear_gelu(x, w1, b1, false).out.to_vector<double>(), h.to_vector<double>());
      std::vector<double> want_pre = reference_gemm(x, w1, 1, rows, hidden, in, false, true);
      std::vector<double> want_h(want_pre.size());
      for (size_t i = 0; i < want_pre.size(); ++i) {
        if (with_bias) want_pre[i] += b1.to_vector<double>()[i % size_t(hidden)];
        want_h[i] = reference_gelu(want_pre[i]);
      }
      EXPECT_TRUE(all_close(fused.out, Tensor::from_vector(want_h, {3, 5, hidden}), "matmul"));

      // The backward through proj and the GELU: the bits of linear_backward then gelu_backward.
      Tensor dy = random({3, 5, out}, dtype);
      ops::GeluLinearGrads grads = ops::gelu_linear_backward(dy, pre, h, w2, true, true, true, with_bias);
      ops::LinearGrads proj = ops::linear_backward(dy, h, w2, true, true, with_bias);
      Tensor dpre = ops::gelu_backward(proj.dx, pre);
      EXPECT_EQ(grads.dpre.to_vector<double>(), dpre.to_vector<double>());
      EXPECT_EQ(grads.dpre_bias.to_vector<double>(),
                ops::linear_backward(dpre, x, w1, false, false, true).dbias.to_vector<double>());
      EXPECT_EQ(grads.dweight.to_vector<double>(), proj.dweight.to_vector<double>());
      EXPECT_EQ(grads.dbias.defined(), with_bias);
      if (with_bias) {
        EXPECT_EQ(grads.dbias.to_vector<double>(), proj.dbias.to_vector<double>());
      }
      // Against f64 loops: dpre = (dy·W2) ⊙ gelu'(pre).
      std::vector<double> dh = reference_gemm(dy, w2, 1, rows, hidden, out, false, false), prev = pre.to_vector<double>();
      for (size_t i = 0; i < dh.size(); ++i) dh[i] *= reference_gelu_grad(prev[i]);
      EXPECT_TRUE(all_close(grads.dpre, Tensor::from_vector(dh, {3, 5, hidden}), "matmul"));
      // Only the bias gradient of pre: dpre is not returned.
      ops::GeluLinearGrads only_bias = ops::gelu_linear_backward(dy, pre, h, w2, false, true, false, false);
      EXPECT_FALSE(only_bias.dpre.defined());
      EXPECT_FALSE(only_bias.dweight.defined());
      EXPECT_EQ(only_bias.dpre_bias.to_vector<double>(), grads.dpre_bias.to_vector<double>());
    }
}

TEST(GeluMlp, GradientsMatchFiniteDifferences) {
  Tensor x = random({2, 3, 4}, DType::f64), w1 = random({6, 4}, DType::f64), b1 = random({6}, DType::f64);
  Tensor w2 = random({5, 6}, DType::f64), b2 = random({5}, DType::f64);
  EXPECT_TRUE(test::gradcheck([](const auto& v) { return autograd::gelu_mlp(v[0], v[1], v[2], v[3], v[4]); },
                              {x, w1, b1, w2, b2}));
  EXPECT_TRUE(test::gradcheck(
      [](const auto& v) { return autograd::gelu_mlp(v[0], v[1], autograd::Variable(), v[2], autograd::Variable()); },
      {x, w1, w2}));
  Tensor r = random({2, 3, 5}, DType::f64);
  EXPECT_TRUE(test::gradcheck([](const auto& v) { return autograd::gelu_mlp(v[0], v[1], v[2], v[3], v[4], v[5]); },
                              {x, w1, b1, w2, b2, r}));
}

TEST(GeluMlp, MatchesTheUnfusedComposition) {
  Tensor x = random({4, 8}), w1 = random({12, 8}), b1 = random({12}), w2 = random({8, 12}), b2 = random({8});
  autograd::Variable vx(x, true), vw1(w1, true), vb1(b1, true), vw2(w2, true), vb2(b2, true);
  autograd::Variable y = autograd::gelu_mlp(vx, vw1, vb1, vw2, vb2);
  Tensor want = ops::linear(ops::gelu(ops::linear(x, w1, b1)), w2, b2);
  EXPECT_EQ(y.value().to_vector<float>(), want.to_vector<float>());
  autograd::backward(autograd::sum(y));
  autograd::Variable ux(x, true), uw1(w1, true), ub1(b1, true), uw2(w2, true), ub2(b2, true);
  autograd::backward(autograd::sum(autograd::linear(autograd::gelu(autograd::linear(ux, uw1, ub1)), uw2, ub2)));
  for (auto [fused, unfused] : {std::pair{vx, ux}, {vw1, uw1}, {vb1, ub1}, {vw2, uw2}, {vb2, ub2}})
    EXPECT_EQ(fused.grad().to_vector<float>(), unfused.grad().to_vector<float>());
  autograd::NoGradGuard no_grad;  // without recording, pre is not kept; the output is the same
  EXPECT_EQ(autograd::gelu_mlp(vx, vw1, vb1, vw2, vb2).value().to_vector<float>(), want.to_vector<float>());
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

TEST(LinearGelu, BadInputsRaise) {
  Tensor x = random({2, 3, 4}), w = random({5, 4}), pre = random({2, 3, 5}), h = random({2, 3, 5});
  Tensor w2 = random({6, 5}), dy = random({2, 3, 6});
  EXPECT_ALPHA_ERROR(ops::linear_gelu(x, random({5, 3}), Tensor()), ShapeError, "[linear_gelu]", "'weight'", "size 4");
  EXPECT_ALPHA_ERROR(ops::linear_gelu(x, w, random({4})), ShapeError, "[linear_gelu]", "'bias'", "[5]");
  EXPECT_ALPHA_ERROR(ops::linear_gelu(x, w, random({5}, DType::f64)), DTypeError, "[linear_gelu]", "'bias'", "f64");
  EXPECT_ALPHA_ERROR(ops::linear_gelu(Tensor::zeros({2, 4}, DType::i32), w, Tensor()), DTypeError, "[linear_gelu]",
                     "'x'", "i32");
  EXPECT_ALPHA_ERROR(ops::gelu_linear_backward(dy, random({2, 3, 4}), h, w2, true, true, true, true), ShapeError,
                     "[gelu_linear_backward]", "'pre'", "[2, 3, 5]", "[2, 3, 4]");
  EXPECT_ALPHA_ERROR(ops::gelu_linear_backward(dy, pre.to(DType::f64), h, w2, true, true, true, true), DTypeError,
                     "[gelu_linear_backward]", "'pre'", "f64");
  EXPECT_ALPHA_ERROR(ops::gelu_linear_backward(random({2, 3, 5}), pre, h, w2, true, true, true, true), ShapeError,
                     "[gelu_linear_backward]", "'dy'", "[2, 3, 6]");
  EXPECT_ALPHA_ERROR(ops::gelu_linear_backward(dy, pre, h, random({6, 4}), true, true, true, true), ShapeError,
                     "[gelu_linear_backward]", "'weight'", "size 5");
}

}  // namespace
}  // namespace alpha
