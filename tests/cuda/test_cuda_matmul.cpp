// The matrix-product ops on a GPU (the kernels themselves are checked by the harness, checks_matmul.cpp):
// matmul, linear, linear_backward, linear_gelu, gelu_linear_backward and the GELU MLP's autograd function
// dispatch to the tensors' device and agree with the CPU ops on the same (rounded) values, in f32, bf16 and
// f16; bf16/f16 operands into f32 outputs (the GEMM and column-sum kernels against the CPU kernels, and
// linear_param_grads_into summing chunks); the TF32 switch; bias gradients that repeat bit for bit; and the
// errors for tensors on different devices, dtypes the GPU backend has no kernel for, and a bad GEMM call into
// cuBLASLt.
//
// Every test skips itself (GTEST_SKIP, which CTest reports as skipped) in a build without CUDA or on a
// machine without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "alpha/autograd/functions.h"
#include "alpha/kernels/matmul.h"
#include "alpha/ops/check.h"
#include "alpha/ops/matmul.h"
#include "support/checks.h"
#include "support/gpu.h"
#if ALPHA_WITH_CUDA
#include "alpha/runtime/cuda_backend.h"
#endif

namespace alpha {
namespace {

class CudaMatmul : public test::GpuTest<> {};

#if ALPHA_WITH_CUDA
const Device kGpu = Device::cuda(0);

// got (GPU, any dtype) against want (CPU f32 on the same rounded values), with the harness's row for the
// dtype ("cuda.matmul", or "cuda.matmul.tf32"): abs per unit of the inner dimension k plus rel per unit of
// the largest |want| (see src/alpha/check/tolerances.h). Prints max_abs and max_rel.
::testing::AssertionResult close_to_cpu(const char* what, const Tensor& got, const Tensor& want, int64_t k,
                                        std::string_view row = "cuda.matmul") {
  if (got.device() != kGpu) return ::testing::AssertionFailure() << what << " is on " << got.device().str();
  Tensor g = got.to(Device::cpu()).to(DType::f64), w = want.to(DType::f64);
  std::vector<double> gv = g.to_vector<double>(), wv = w.to_vector<double>();
  double scale = 0, max_abs = 0, max_rel = 0;
  for (double v : wv) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < gv.size() && i < wv.size(); ++i) {
    double err = std::fabs(gv[i] - wv[i]);
    max_abs = std::max(max_abs, err);
    if (wv[i] != 0) max_rel = std::max(max_rel, err / std::fabs(wv[i]));
  }
  std::printf("  %-24s %-5s max_abs %.3e  max_rel %.3e\n", what, std::string(dtype_name(got.dtype())).c_str(), max_abs,
              max_rel);
  check::Tolerance tol = check::tolerance(row, got.dtype());
  tol.abs = tol.abs * double(std::max<int64_t>(k, 1)) + tol.rel * scale;
  return test::all_close(g, w, tol);
}

// c = op(a)·op(b) + beta·c (m, n) and, when grad is defined, grad = a's column sums (trans_a): T = bf16 or f16
// operands, f32 c and grad, on the tensors' device (the CUDA kernel, or the CPU kernel on the host).
template <class T>
void gemm_into_f32(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& grad, int64_t m, int64_t n,
                   int64_t k, bool trans_a, bool trans_b, float beta) {
  kernels::GemmArgs<T, float> args{a.data<T>(), b.data<T>(), c.data<float>(), 1, m, n, k, trans_a, trans_b,
                                   trans_a ? m : k, trans_b ? k : n, n, 0, 0, 0, 1.0f, beta};
  if (grad.defined()) args.bias_grad_of = kernels::GemmBiasGrad::a_columns, args.bias_grad = grad.data<float>();
  if (c.device().is_cpu()) kernels::cpu::gemm(args);
  else kernels::cuda::gemm(args, Stream{});
}

#endif

TEST_F(CudaMatmul, MatmulDispatchesToTheTensorsDevice) {
#if ALPHA_WITH_CUDA
  for (DType dtype : test::kGpuDtypes)
    for (bool trans_a : {false, true})
      for (bool trans_b : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (trans_a ? " Ta" : " Na") + (trans_b ? " Tb" : " Nb"));
        const int64_t m = 37, k = 65, n = 24;
        test::GpuInput a = test::gpu_input(trans_a ? Shape{2, 3, k, m} : Shape{2, 3, m, k}, dtype);
        test::GpuInput b = test::gpu_input(trans_b ? Shape{2, 3, n, k} : Shape{2, 3, k, n}, dtype);
        uint64_t launches = kernel_launches();
        Tensor c = ops::matmul(a.gpu, b.gpu, trans_a, trans_b);
        EXPECT_EQ(kernel_launches(), launches + 1);
        EXPECT_EQ(c.dtype(), dtype);
        EXPECT_EQ(c.shape(), (Shape{2, 3, m, n}));
        EXPECT_TRUE(close_to_cpu("matmul", c, ops::matmul(a.cpu, b.cpu, trans_a, trans_b), k));
      }
  // Strided device views: a column slice is used in place (rows 20 apart), a transposed view is copied first.
  test::GpuInput wide = test::gpu_input({2, 5, 20}, DType::f32), tall = test::gpu_input({2, 7, 5}, DType::f32), b = test::gpu_input({2, 7, 4}, DType::f32);
  EXPECT_TRUE(close_to_cpu("matmul.column_slice", ops::matmul(wide.gpu.slice(2, 3, 10), b.gpu),
                           ops::matmul(wide.cpu.slice(2, 3, 10), b.cpu), 7));
  EXPECT_TRUE(close_to_cpu("matmul.transposed_view", ops::matmul(tall.gpu.transpose(1, 2), b.gpu.slice(2, 0, 4)),
                           ops::matmul(tall.cpu.transpose(1, 2), b.cpu.slice(2, 0, 4)), 7));
  // An empty inner dimension gives zeros.
  Tensor zero = ops::matmul(Tensor::zeros({3, 0}, DType::bf16, kGpu), Tensor::zeros({0, 4}, DType::bf16, kGpu));
  EXPECT_EQ(zero.to(Device::cpu()).to_vector<float>(), std::vector<float>(12, 0.0f));
#endif
}

TEST_F(CudaMatmul, LinearAndItsBackwardMatchTheCpu) {
#if ALPHA_WITH_CUDA
  for (DType dtype : test::kGpuDtypes)
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (with_bias ? " with bias" : " without bias"));
      const int64_t in = 48, out = 40;
      test::GpuInput x = test::gpu_input({4, 33, in}, dtype), w = test::gpu_input({out, in}, dtype), dy = test::gpu_input({4, 33, out}, dtype);
      test::GpuInput bias = with_bias ? test::gpu_input({out}, dtype) : test::GpuInput{};
      EXPECT_TRUE(close_to_cpu("linear", ops::linear(x.gpu, w.gpu, bias.gpu), ops::linear(x.cpu, w.cpu, bias.cpu), in));
      // A residual added by the GEMM (cuBLASLt's C beside D), fused and unfused.
      test::GpuInput residual = test::gpu_input({4, 33, out}, dtype);
      for (bool fused : {true, false}) {
        kernels::cuda::set_gemm_fused_epilogues(fused);
        EXPECT_TRUE(close_to_cpu("linear.residual", ops::linear(x.gpu, w.gpu, bias.gpu, residual.gpu),
                                 ops::linear(x.cpu, w.cpu, bias.cpu, residual.cpu), in))
            << (fused ? "fused" : "unfused");
      }
      kernels::cuda::set_gemm_fused_epilogues(true);
      ops::LinearGrads got = ops::linear_backward(dy.gpu, x.gpu, w.gpu, true, true, true);
      ops::LinearGrads want = ops::linear_backward(dy.cpu, x.cpu, w.cpu, true, true, true);
      EXPECT_TRUE(close_to_cpu("linear_backward.dx", got.dx, want.dx, out));
      EXPECT_TRUE(close_to_cpu("linear_backward.dweight", got.dweight, want.dweight, 4 * 33));
      EXPECT_TRUE(close_to_cpu("linear_backward.dbias", got.dbias, want.dbias, 4 * 33));
      // db alone (a column sum) and beside dW (dW's GEMM) agree, and each repeats bit for bit.
      Tensor alone = ops::linear_backward(dy.gpu, x.gpu, w.gpu, false, false, true).dbias;
      EXPECT_TRUE(close_to_cpu("linear_backward.dbias_alone", alone, want.dbias, 4 * 33));
      EXPECT_EQ(ops::linear_backward(dy.gpu, x.gpu, w.gpu, false, false, true).dbias.to(Device::cpu()).to_vector<float>(),
                alone.to(Device::cpu()).to_vector<float>());
      EXPECT_EQ(ops::linear_backward(dy.gpu, x.gpu, w.gpu, false, true, true).dbias.to(Device::cpu()).to_vector<float>(),
                got.dbias.to(Device::cpu()).to_vector<float>());
    }
#endif
}

TEST_F(CudaMatmul, LinearGeluAndItsBackwardMatchTheCpu) {
#if ALPHA_WITH_CUDA
  // hidden 64: the pre-activation's rows are a multiple of 8 apart (cuBLASLt's fused epilogues); 65: they are
  // not (the unfused path). 2 × 45 rows: the DGELU pass leaves the bias gradient to column_sum; 2 × 8207 rows:
  // it sums the columns itself (513 tiles of 32 rows, the last one short), in vectors at 64, element by element
  // at 65.
  for (int64_t time : {45, 8207})
    for (int64_t hidden : {64, 65})
      for (DType dtype : test::kGpuDtypes)
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE(std::to_string(time) + " " + std::to_string(hidden) + " " + std::string(dtype_name(dtype)) +
                       (with_bias ? " bias" : ""));
          const int64_t in = 24, out = 16, rows = 2 * time;
          test::GpuInput x = test::gpu_input({2, time, in}, dtype), w1 = test::gpu_input({hidden, in}, dtype);
          test::GpuInput w2 = test::gpu_input({out, hidden}, dtype), dy = test::gpu_input({2, time, out}, dtype);
          test::GpuInput b1 = with_bias ? test::gpu_input({hidden}, dtype) : test::GpuInput{};
          ops::LinearGelu got = ops::linear_gelu(x.gpu, w1.gpu, b1.gpu);
          ops::LinearGelu want = ops::linear_gelu(x.cpu, w1.cpu, b1.cpu);
          EXPECT_TRUE(close_to_cpu("linear_gelu.pre", got.pre, want.pre, in));
          EXPECT_TRUE(close_to_cpu("linear_gelu.out", got.out, want.out, in));
          EXPECT_FALSE(ops::linear_gelu(x.gpu, w1.gpu, b1.gpu, false).pre.defined());
          EXPECT_TRUE(
              close_to_cpu("linear_gelu.out_only", ops::linear_gelu(x.gpu, w1.gpu, b1.gpu, false).out, want.out, in));
          // The backward from the same (GPU-rounded) pre and h on both sides.
          Tensor pre = got.pre.to(Device::cpu()).to(DType::f32), h = got.out.to(Device::cpu()).to(DType::f32);
          ops::GeluLinearGrads g = ops::gelu_linear_backward(dy.gpu, got.pre, got.out, w2.gpu, true, true, true, true);
          ops::GeluLinearGrads r = ops::gelu_linear_backward(dy.cpu, pre, h, w2.cpu, true, true, true, true);
          EXPECT_TRUE(close_to_cpu("gelu_linear_backward.dpre", g.dpre, r.dpre, out));
          EXPECT_TRUE(close_to_cpu("gelu_linear_backward.dpre_bias", g.dpre_bias, r.dpre_bias, rows * out));
          EXPECT_TRUE(close_to_cpu("gelu_linear_backward.dweight", g.dweight, r.dweight, rows));
          EXPECT_TRUE(close_to_cpu("gelu_linear_backward.dbias", g.dbias, r.dbias, rows));
        }
#endif
}

TEST_F(CudaMatmul, GeluMlpGradientsMatchTheCpu) {
#if ALPHA_WITH_CUDA
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    test::GpuInput x = test::gpu_input({3, 16, 32}, dtype), w1 = test::gpu_input({128, 32}, dtype), b1 = test::gpu_input({128}, dtype);
    test::GpuInput w2 = test::gpu_input({32, 128}, dtype), b2 = test::gpu_input({32}, dtype);
    auto run = [](const Tensor& xv, const Tensor& w1v, const Tensor& b1v, const Tensor& w2v, const Tensor& b2v) {
      std::vector<autograd::Variable> v{autograd::Variable(xv, true), autograd::Variable(w1v, true),
                                        autograd::Variable(b1v, true), autograd::Variable(w2v, true),
                                        autograd::Variable(b2v, true)};
      autograd::Variable y = autograd::gelu_mlp(v[0], v[1], v[2], v[3], v[4]);
      autograd::backward(y, Tensor::full(y.shape(), 0.5, y.dtype(), y.value().device()));
      std::vector<Tensor> out{y.value()};
      for (const auto& p : v) out.push_back(p.grad());
      return out;
    };
    std::vector<Tensor> got = run(x.gpu, w1.gpu, b1.gpu, w2.gpu, b2.gpu), want = run(x.cpu, w1.cpu, b1.cpu, w2.cpu, b2.cpu);
    const char* names[] = {"gelu_mlp.y", "gelu_mlp.dx", "gelu_mlp.dfc_weight", "gelu_mlp.dfc_bias",
                           "gelu_mlp.dproj_weight", "gelu_mlp.dproj_bias"};
    // Inner dimensions: 128 (y, through 32), 128 (dx), 48 rows (weights, biases). The backward compounds the
    // forward's roundings in bf16, so bf16 compares at twice the inner dimension.
    const int64_t inner[] = {128, 128, 48, 48, 48, 48};
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(close_to_cpu(names[i], got[i], want[i], inner[i] * (dtype == DType::bf16 ? 2 : 1))) << names[i];
  }
#endif
}

TEST_F(CudaMatmul, WiderOutputGemmMatchesTheCpu) {
#if ALPHA_WITH_CUDA
  // bf16/f16 operands into an f32 output, as dW is summed over chunks of rows: the CUDA kernel against the CPU
  // kernel on the same values, into a poisoned output (beta = 0), then a second product accumulated onto it
  // (beta = 1); with trans_a (dW = dyᵀ·x), a's bias gradient in f32 too (cuBLASLt's BGRADB or the column sum).
  for (DType dtype : {DType::bf16, DType::f16})
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{37, 29, 53}, {64, 64, 64}, {256, 1000, 192}})
      for (bool trans_a : {false, true})
        for (bool trans_b : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::to_string(m) + "x" + std::to_string(k) + "x" +
                       std::to_string(n) + (trans_a ? " Ta" : " Na") + (trans_b ? " Tb" : " Nb"));
          const Shape a_shape = trans_a ? Shape{k, m} : Shape{m, k}, b_shape = trans_b ? Shape{n, k} : Shape{k, n};
          Tensor a = test::random(a_shape, dtype), b = test::random(b_shape, dtype);
          Tensor a2 = test::random(a_shape, dtype), b2 = test::random(b_shape, dtype);
          Tensor c = test::poisoned({m, n}, DType::f32), grad = trans_a ? test::poisoned({m}, DType::f32) : Tensor();
          Tensor gc = c.to(kGpu), ggrad = grad.defined() ? grad.to(kGpu) : Tensor();
          auto both = [&](const Tensor& x, const Tensor& y, const Tensor& out, const Tensor& sums, float beta) {
            if (dtype == DType::bf16) gemm_into_f32<bf16>(x, y, out, sums, m, n, k, trans_a, trans_b, beta);
            else gemm_into_f32<f16>(x, y, out, sums, m, n, k, trans_a, trans_b, beta);
          };
          both(a, b, c, grad, 0.0f);
          both(a.to(kGpu), b.to(kGpu), gc, ggrad, 0.0f);
          EXPECT_TRUE(close_to_cpu("gemm.f32_out", gc, c, k));
          if (trans_a) {
            EXPECT_TRUE(close_to_cpu("gemm.f32_out.bias_grad", ggrad, grad, k));
          }
          both(a2, b2, c, Tensor(), 1.0f);
          both(a2.to(kGpu), b2.to(kGpu), gc, Tensor(), 1.0f);
          EXPECT_TRUE(close_to_cpu("gemm.f32_out.accumulated", gc, c, 2 * k));
        }
  // The column sum into f32 (dbias without dW), against the CPU kernel.
  for (DType dtype : {DType::bf16, DType::f16}) {
    Tensor x = test::random({3001, 33}, dtype), want = test::poisoned({33}, DType::f32);
    Tensor gx = x.to(kGpu), got = want.to(kGpu);
    if (dtype == DType::bf16) {
      kernels::cpu::column_sum(kernels::ColumnSumArgs<bf16, float>{x.data<bf16>(), want.data<float>(), 3001, 33, 33});
      kernels::cuda::column_sum(kernels::ColumnSumArgs<bf16, float>{gx.data<bf16>(), got.data<float>(), 3001, 33, 33},
                                Stream{});
    } else {
      kernels::cpu::column_sum(kernels::ColumnSumArgs<f16, float>{x.data<f16>(), want.data<float>(), 3001, 33, 33});
      kernels::cuda::column_sum(kernels::ColumnSumArgs<f16, float>{gx.data<f16>(), got.data<float>(), 3001, 33, 33},
                                Stream{});
    }
    EXPECT_TRUE(close_to_cpu("column_sum.f32_out", got, want, 3001));
  }
#endif
}

TEST_F(CudaMatmul, LinearParamGradsIntoSumsBf16ChunksInF32) {
#if ALPHA_WITH_CUDA
  // dW and db of bf16 chunks of rows summed into f32 on the GPU, against the same on the CPU from the same values
  // in f32: dW with db (dW's GEMM, db written apart and added after the first chunk), dW alone, db alone.
  const int64_t rows = 300, in = 72, out = 1000;
  test::GpuInput x = test::gpu_input({rows, in}, DType::bf16), dy = test::gpu_input({rows, out}, DType::bf16);
  for (auto [with_dweight, with_dbias] : {std::pair{true, true}, {true, false}, {false, true}}) {
    SCOPED_TRACE(std::string(with_dweight ? "dW " : "") + (with_dbias ? "db" : ""));
    auto sums_on = [&](const Tensor& xs, const Tensor& dys) {
      const Device device = xs.device();
      Tensor dweight = with_dweight ? Tensor::full({out, in}, NAN, DType::f32, device) : Tensor();
      Tensor dbias = with_dbias ? Tensor::full({out}, NAN, DType::f32, device) : Tensor();
      for (int64_t first = 0; first < rows; first += 100)
        ops::linear_param_grads_into(dys.slice(0, first, first + 100), xs.slice(0, first, first + 100), dweight,
                                     dbias, first > 0);
      return std::pair{dweight, dbias};
    };
    auto [got_w, got_b] = sums_on(x.gpu, dy.gpu);
    auto [want_w, want_b] = sums_on(x.cpu, dy.cpu);
    if (with_dweight) {
      EXPECT_EQ(got_w.dtype(), DType::f32);
      EXPECT_TRUE(close_to_cpu("linear_param_grads_into.dweight", got_w, want_w, rows));
    }
    if (with_dbias) {
      EXPECT_EQ(got_b.dtype(), DType::f32);
      EXPECT_TRUE(close_to_cpu("linear_param_grads_into.dbias", got_b, want_b, rows));
    }
  }
  // A bf16 accumulator is refused: the sums are f32.
  EXPECT_ALPHA_ERROR(ops::linear_param_grads_into(dy.gpu, x.gpu, Tensor::empty({out, in}, DType::bf16, kGpu),
                                                  Tensor(), false),
                     DTypeError, "[linear_param_grads_into]", "'dweight'", "f32", "bf16");
#endif
}

TEST_F(CudaMatmul, Tf32IsAnOptInForF32Only) {
#if ALPHA_WITH_CUDA
  ASSERT_FALSE(ops::allow_tf32());
  test::GpuInput a = test::gpu_input({256, 1024}, DType::f32), b = test::gpu_input({1024, 192}, DType::f32);
  Tensor want = ops::matmul(a.cpu, b.cpu);
  EXPECT_TRUE(close_to_cpu("matmul.f32", ops::matmul(a.gpu, b.gpu), want, 1024));
  ops::set_allow_tf32(true);
  EXPECT_TRUE(ops::allow_tf32());
  Tensor tf32 = ops::matmul(a.gpu, b.gpu);
  ops::set_allow_tf32(false);
  EXPECT_TRUE(close_to_cpu("matmul.tf32", tf32, want, 1024, "cuda.matmul.tf32"));
  EXPECT_FALSE(ops::allow_tf32());
#endif
}

TEST_F(CudaMatmul, BadInputsRaise) {
#if ALPHA_WITH_CUDA
  Tensor a = test::random({3, 4}).to(kGpu), b = test::random({4, 5}).to(kGpu), cpu_b = test::random({4, 5});
  Tensor x = test::random({2, 4}).to(kGpu), w = test::random({5, 4}).to(kGpu), bias = test::random({5}).to(kGpu);
  EXPECT_ALPHA_ERROR(ops::matmul(a, cpu_b), DeviceError, "[matmul]", "'b'", "cuda:0", "cpu");
  EXPECT_ALPHA_ERROR(ops::matmul(a, b.to(DType::bf16)), DTypeError, "[matmul]", "'b'", "f32", "bf16");
  EXPECT_ALPHA_ERROR(ops::matmul(test::random({3, 4}, DType::f64).to(kGpu), b), DTypeError, "[matmul]", "'a'",
                     "f32 or bf16 or f16", "f64");
  EXPECT_ALPHA_ERROR(ops::linear(x, w.to(Device::cpu()), bias), DeviceError, "[linear]", "'weight'", "cuda:0");
  EXPECT_ALPHA_ERROR(ops::linear(x, w, bias.to(Device::cpu())), DeviceError, "[linear]", "'bias'", "cuda:0", "cpu");
  EXPECT_ALPHA_ERROR(ops::linear_gelu(x, w, bias.to(Device::cpu())), DeviceError, "[linear_gelu]", "'bias'");
  EXPECT_ALPHA_ERROR(ops::linear_backward(test::random({2, 5}), x, w, true, true, true), DeviceError,
                     "[linear_backward]", "'dy'", "cuda:0");
  Tensor pre = test::random({2, 5}).to(kGpu), dy = test::random({2, 3}).to(kGpu), w2 = test::random({3, 5}).to(kGpu);
  EXPECT_ALPHA_ERROR(ops::gelu_linear_backward(dy, pre.to(Device::cpu()), pre, w2, true, true, true, true),
                     DeviceError, "[gelu_linear_backward]", "'pre'", "cuda:0");
  // A call cuBLASLt refuses (a's rows 2 apart, but 8 long) surfaces as a BackendError.
  Tensor c = Tensor::empty({4, 4}, DType::f32, kGpu), aa = test::random({4, 8}).to(kGpu), bb = test::random({8, 4}).to(kGpu);
  auto bad_lda = [&] {
    kernels::cuda::gemm(kernels::GemmArgs<float>{aa.data<float>(), bb.data<float>(), c.data<float>(), 1, 4, 4, 8, false,
                                                 false, 2, 4, 4, 0, 0, 0, 1.0f, 0.0f},
                        Stream{});
    cuda::synchronize(0);
  };
  EXPECT_THROW(bad_lda(), BackendError);
  // Epilogue rules are the CPU kernel's.
  EXPECT_ALPHA_ERROR(kernels::cuda::gemm(kernels::GemmArgs<float>{a.data<float>(), b.data<float>(), x.data<float>(), 2,
                                                                  1, 1, 1, false, false, 1, 1, 1, 1, 1, 1, 1.0f, 0.0f,
                                                                  false, bias.data<float>()},
                                         Stream{}),
                     ValueError, "[gemm]", "'batch'");
#endif
}

}  // namespace
}  // namespace alpha
