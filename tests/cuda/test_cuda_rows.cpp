// The row ops (layer norm, activations, softmax, cross-entropy, the fused head and loss, embedding) on GPU tensors: each dispatches
// to the tensor's device, matches the CPU op on the same (already rounded) values within the harness's
// tolerance rows (cuda.*, by the GPU output's dtype), and raises the same typed errors for bad inputs.
// Every test skips itself without a GPU or without the CUDA backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "alpha/kernels/cross_entropy.h"
#include "alpha/kernels/embedding.h"
#include "alpha/ops/activation.h"
#include "alpha/ops/check.h"
#include "alpha/ops/cross_entropy.h"
#include "alpha/ops/elementwise.h"
#include "alpha/ops/embedding.h"
#include "alpha/ops/layernorm.h"
#include "alpha/ops/linear_cross_entropy.h"
#include "alpha/ops/matmul.h"
#include "kernels/kernel_helpers.h"
#include "support/checks.h"
#include "support/gpu.h"

namespace alpha {
namespace {

class CudaRows : public test::GpuTest<> {};

#if ALPHA_WITH_CUDA
const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();

// got (a GPU tensor in its dtype) against want (a CPU tensor) with the row (check, got's dtype).
::testing::AssertionResult gpu_close(const Tensor& got, const Tensor& want, std::string_view check) {
  if (got.device() != kGpu) return ::testing::AssertionFailure() << "result on " << got.device().str();
  return test::all_close(got.to(kCpu), want, check);
}

#endif

TEST_F(CudaRows, LayerNormMatchesCpu) {
#if ALPHA_WITH_CUDA
  for (DType dtype : test::kGpuDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    // 4102 rows: more than the backward's teams (1024), so each team sums the parameter gradients of several.
    for (Shape shape : {Shape{4, 33, 768}, Shape{5, 1025}, Shape{7, 3}, Shape{2, 2051, 200}}) {
      const int64_t C = shape.back();
      test::GpuInput x = test::gpu_input(shape, dtype), w = test::gpu_input({C}, dtype), b = test::gpu_input({C}, dtype), dy = test::gpu_input(shape, dtype);
      uint64_t launches = kernel_launches();
      ops::LayerNormOutput got = ops::layernorm(x.gpu, w.gpu, b.gpu, 1e-5);
      EXPECT_EQ(kernel_launches(), launches + 1);
      ops::LayerNormOutput want = ops::layernorm(x.cpu, w.cpu, b.cpu, 1e-5);
      EXPECT_TRUE(gpu_close(got.y, want.y, "cuda.layernorm"));
      EXPECT_TRUE(gpu_close(got.mean, want.mean, "cuda.layernorm"));
      EXPECT_TRUE(gpu_close(got.rstd, want.rstd, "cuda.layernorm"));
      ops::LayerNormOutput no_bias = ops::layernorm(x.gpu, w.gpu, Tensor(), 1e-5);
      EXPECT_TRUE(gpu_close(no_bias.y, ops::layernorm(x.cpu, w.cpu, Tensor(), 1e-5).y, "cuda.layernorm"));

      // The backward from the CPU's statistics on both sides.
      ops::LayerNormGrads g = ops::layernorm_backward(dy.gpu, x.gpu, w.gpu, want.mean.to(kGpu), want.rstd.to(kGpu),
                                                      true, true, true);
      ops::LayerNormGrads wg = ops::layernorm_backward(dy.cpu, x.cpu, w.cpu, want.mean, want.rstd, true, true, true);
      EXPECT_TRUE(gpu_close(g.dx, wg.dx, "cuda.layernorm"));
      EXPECT_EQ(g.dweight.dtype(), DType::f32);  // the sums, unrounded to bf16/f16
      EXPECT_EQ(g.dbias.dtype(), DType::f32);
      const test::Tolerance param_tol = check::layernorm_param_grad_tolerance(dtype, shape_numel(shape) / C);
      EXPECT_TRUE(test::all_close(g.dweight.to(kCpu), wg.dweight, param_tol));
      EXPECT_TRUE(test::all_close(g.dbias.to(kCpu), wg.dbias, param_tol));
      ops::LayerNormGrads only_dweight =
          ops::layernorm_backward(dy.gpu, x.gpu, w.gpu, want.mean.to(kGpu), want.rstd.to(kGpu), false, true, false);
      EXPECT_FALSE(only_dweight.dx.defined());
      EXPECT_FALSE(only_dweight.dbias.defined());
      EXPECT_TRUE(test::bit_equal(only_dweight.dweight, g.dweight));
    }
  }
#endif
}

TEST_F(CudaRows, ActivationsMatchCpu) {
#if ALPHA_WITH_CUDA
  for (DType dtype : test::kGpuDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    // A transposed (non-contiguous) GPU input: the op makes it contiguous first.
    Tensor xt = test::random({65, 33}, dtype, -4.0, 4.0);
    Tensor gx = xt.to(kGpu).transpose(0, 1), x = xt.to(DType::f32).transpose(0, 1);
    test::GpuInput dy = test::gpu_input({33, 65}, dtype);
    EXPECT_TRUE(gpu_close(ops::gelu(gx), ops::gelu(x), "cuda.activation"));
    EXPECT_TRUE(gpu_close(ops::gelu_backward(dy.gpu, gx), ops::gelu_backward(dy.cpu, x), "cuda.activation"));
    Tensor y = ops::softcap(gx, 3.0);
    EXPECT_TRUE(gpu_close(y, ops::softcap(x, 3.0), "cuda.activation"));
    Tensor y_cpu = y.to(kCpu).to(DType::f32);
    EXPECT_TRUE(gpu_close(ops::softcap_backward(dy.gpu, y, 3.0), ops::softcap_backward(dy.cpu, y_cpu, 3.0),
                          "cuda.activation"));
    Tensor s = ops::softmax(gx);
    EXPECT_TRUE(gpu_close(s, ops::softmax(x), "cuda.softmax"));
    Tensor s_cpu = s.to(kCpu).to(DType::f32);
    EXPECT_TRUE(gpu_close(ops::softmax_backward(dy.gpu, s), ops::softmax_backward(dy.cpu, s_cpu), "cuda.softmax"));
    // Rows longer than a warp holds, and rows of one element.
    for (Shape shape : {Shape{3, 5000}, Shape{17, 1}}) {
      test::GpuInput z = test::gpu_input(shape, dtype, -4.0, 4.0);
      EXPECT_TRUE(gpu_close(ops::softmax(z.gpu), ops::softmax(z.cpu), "cuda.softmax"));
    }
  }
#endif
}

TEST_F(CudaRows, CrossEntropyMatchesCpu) {
#if ALPHA_WITH_CUDA
  for (DType dtype : test::kGpuDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    for (int64_t V : {int64_t(50257), int64_t(11)}) {
      test::GpuInput logits = test::gpu_input({2, 3, V}, dtype, -4.0, 4.0);
      Tensor targets = test::random_indices({2, 3}, int32_t(V));
      targets.data<int32_t>()[4] = ops::kIgnoreIndex;
      Tensor gtargets = targets.to(kGpu);
      ops::CrossEntropyOutput got = ops::cross_entropy(logits.gpu, gtargets);
      ops::CrossEntropyOutput want = ops::cross_entropy(logits.cpu, targets);
      EXPECT_EQ(got.loss.dtype(), DType::f32) << "the loss keeps f32 for bf16/f16 logits";
      EXPECT_EQ(got.loss.device(), kGpu);
      EXPECT_TRUE(gpu_close(got.loss, want.loss, "cuda.cross_entropy"));
      EXPECT_TRUE(gpu_close(got.lse, want.lse, "cuda.cross_entropy"));
      EXPECT_EQ(got.counted_rows, 5);
      EXPECT_EQ(got.counted.device(), kGpu);
      EXPECT_EQ(got.counted.to(kCpu).item(), 5.0);
      // The backward from the CPU's lse, with the factor from the host and from the device.
      Tensor dx = ops::cross_entropy_backward(0.5, logits.gpu, gtargets, want.lse.to(kGpu), got.counted_rows);
      Tensor want_dx = ops::cross_entropy_backward(0.5, logits.cpu, targets, want.lse, want.counted_rows);
      // Gradients are p/counted, down to ~1e-9: compare with abs per unit of the factor 0.5/5 (tolerances.h).
      test::Tolerance tol = test::tolerance("cuda.cross_entropy", dtype);
      tol.abs = std::max(tol.abs * 0.1, check::subnormal_rounding(dtype));
      EXPECT_TRUE(test::all_close(dx.to(kCpu), want_dx, tol));
      Tensor dloss = Tensor::full({}, 0.5, DType::f32, kGpu);
      Tensor dx_device = ops::cross_entropy_backward(dloss, logits.gpu, gtargets, want.lse.to(kGpu), got.counted);
      EXPECT_TRUE(test::bit_equal(dx_device, dx));
    }
  }
#endif
}

TEST_F(CudaRows, CrossEntropyWithGradMatchesCpu) {
#if ALPHA_WITH_CUDA
  // The loss and its gradient from one read of the logits (the fused classifier's kernel), called directly
  // into poisoned outputs, then over the logits themselves. Vocabularies: a short row (11), one past a warp's
  // rows (1025), gpt2's (50257, whose rows after the first start off 16-byte boundaries, and 50304), and
  // 60001, which in f32 (240 KB a row) is longer than shared memory and takes the forward and backward
  // kernels instead.
  for (DType dtype : test::kGpuDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    for (int64_t V : {int64_t(11), int64_t(1025), int64_t(50257), int64_t(50304), int64_t(60001)}) {
      SCOPED_TRACE("V " + std::to_string(V));
      const int64_t N = 7;
      test::GpuInput logits = test::gpu_input({N, V}, dtype, -4.0, 4.0);
      Tensor targets = test::random_indices({N}, int32_t(V));
      targets.data<int32_t>()[2] = targets.data<int32_t>()[5] = ops::kIgnoreIndex;
      const Tensor gtargets = targets.to(kGpu);
      const double scale = 0.125;
      // The CPU kernels on the same values; dloss = scale · counted gives the gradient the factor `scale`.
      ops::CrossEntropyOutput want = ops::cross_entropy(logits.cpu, targets);
      Tensor want_dx = ops::cross_entropy_backward(scale * double(want.counted_rows), logits.cpu, targets, want.lse,
                                                   want.counted_rows);
      test::Tolerance dx_tol = test::tolerance("cuda.cross_entropy", dtype);
      dx_tol.abs = std::max(dx_tol.abs * scale, check::subnormal_rounding(dtype));  // p·scale, down to ~1e-9
      std::vector<Tensor> gradients;
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(in_place ? "in place" : "into a separate gradient");
        Tensor source = logits.gpu.clone();
        Tensor lse = test::poisoned({N}, DType::f32).to(kGpu), loss = test::poisoned({1}, DType::f32).to(kGpu);
        Tensor counted = Tensor::full({1}, -1.0, DType::i64, kGpu);
        Tensor dlogits = in_place ? source : test::poisoned({N, V}, dtype).to(kGpu);
        ops::dispatch_float("test", source, [&]<class T>(const auto& where) {
          using A = acc_t<T>;  // f32 on the GPU
          const kernels::CrossEntropyWithGradArgs<T> args{{source.data<T>(), gtargets.data<int32_t>(), lse.data<A>(),
                                                           loss.data<A>(), counted.data<int64_t>(), N, V,
                                                           ops::kIgnoreIndex},
                                                          dlogits.data<T>(),
                                                          A(scale)};
          ALPHA_KERNEL(cross_entropy_with_grad)(where, args);
        });
        EXPECT_TRUE(gpu_close(loss.reshape({}), want.loss, "cuda.cross_entropy"));
        EXPECT_TRUE(gpu_close(lse, want.lse, "cuda.cross_entropy"));
        EXPECT_EQ(counted.to(kCpu).item(), double(want.counted_rows));
        EXPECT_TRUE(test::all_close(dlogits.to(kCpu), want_dx, dx_tol));
        gradients.push_back(dlogits);
      }
      EXPECT_TRUE(test::bit_equal(gradients[1], gradients[0])) << "in place and apart differ";
    }
  }
#endif
}

#if ALPHA_WITH_CUDA
// got (any device and dtype) against want (CPU, f64), both divided by want's largest |value|.
::testing::AssertionResult close_relative_to_largest(const Tensor& got, const Tensor& want, std::string_view check,
                                                     DType dtype) {
  double largest = 0;
  for (double v : want.to_vector<double>()) largest = std::max(largest, std::abs(v));
  if (largest == 0) return ::testing::AssertionFailure() << "the reference is all zeros: the check proves nothing";
  return test::all_close(ops::scale(got.to(kCpu).to(DType::f64), 1.0 / largest), ops::scale(want, 1.0 / largest),
                         test::tolerance(check, dtype));
}
#endif

TEST_F(CudaRows, LinearCrossEntropyMatchesCpu) {
#if ALPHA_WITH_CUDA
  const int64_t rows = 300, features = 72, vocab = 1000;
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    test::GpuInput x = test::gpu_input({rows, features}, dtype, -2.0, 2.0);
    test::GpuInput weight = test::gpu_input({vocab, features}, dtype, -0.5, 0.5);
    test::GpuInput bias = test::gpu_input({vocab}, dtype);
    Tensor targets = test::random_indices({rows}, int32_t(vocab));
    for (int64_t i = 0; i < rows; i += 7) targets.data<int32_t>()[i] = ops::kIgnoreIndex;
    // Three chunks of 100 rows; targets from the host and from the device, and a logit softcap.
    for (auto [t, cap] : {std::pair{targets, 0.0}, std::pair{targets.to(kGpu), 0.0}, std::pair{targets, 1.5}}) {
      // The reference in f64 on the CPU from the same values: linear, softcap, cross-entropy, their backwards.
      const Tensor x64 = x.cpu.to(DType::f64), w64 = weight.cpu.to(DType::f64);
      Tensor logits = ops::linear(x64, w64, bias.cpu.to(DType::f64));
      if (cap > 0) logits = ops::softcap(logits, cap);
      ops::CrossEntropyOutput want = ops::cross_entropy(logits, targets);
      Tensor dlogits = ops::cross_entropy_backward(1.0, logits, targets, want.lse, want.counted_rows);
      if (cap > 0) dlogits = ops::softcap_backward(dlogits, logits, cap);
      ops::LinearGrads want_grads = ops::linear_backward(dlogits, x64, w64, true, true, true);
      ops::LinearCrossEntropy got = ops::linear_cross_entropy(
          x.gpu, weight.gpu, bias.gpu, t, true, true, true, cap, size_t(100 * vocab) * dtype_size(dtype));
      EXPECT_EQ(got.loss.device(), kGpu);
      EXPECT_TRUE(close_relative_to_largest(got.loss, want.loss, "cuda.linear_cross_entropy", dtype));
      EXPECT_TRUE(close_relative_to_largest(got.dx, want_grads.dx, "cuda.linear_cross_entropy", dtype));
      EXPECT_TRUE(close_relative_to_largest(got.dweight, want_grads.dweight, "cuda.linear_cross_entropy", dtype));
      EXPECT_TRUE(close_relative_to_largest(got.dbias, want_grads.dbias, "cuda.linear_cross_entropy", dtype));
      EXPECT_EQ(got.dweight.dtype(), dtype);
      // wide_param_grads: dW and db as the chunks' f32 sums (bf16 operands into f32), not rounded to x's dtype;
      // with one chunk too (from its GEMM into f32).
      for (size_t chunk_bytes : {size_t(100 * vocab) * dtype_size(dtype), ops::kLinearCrossEntropyChunkBytes}) {
        ops::LinearCrossEntropy wide =
            ops::linear_cross_entropy(x.gpu, weight.gpu, bias.gpu, t, false, true, true, cap, chunk_bytes, true);
        EXPECT_EQ(wide.dweight.dtype(), DType::f32);
        EXPECT_EQ(wide.dbias.dtype(), DType::f32);
        EXPECT_TRUE(close_relative_to_largest(wide.dweight, want_grads.dweight, "cuda.linear_cross_entropy", dtype));
        EXPECT_TRUE(close_relative_to_largest(wide.dbias, want_grads.dbias, "cuda.linear_cross_entropy", dtype));
      }
    }
  }
  // f16: the loss alone, but no gradients (they would need the loss scale).
  test::GpuInput x = test::gpu_input({5, 8}, DType::f16), weight = test::gpu_input({9, 8}, DType::f16);
  Tensor targets = test::random_indices({5}, 9);
  ops::LinearCrossEntropy loss_only =
      ops::linear_cross_entropy(x.gpu, weight.gpu, Tensor(), targets, false, false, false);
  EXPECT_TRUE(close_relative_to_largest(
      loss_only.loss, ops::cross_entropy(ops::linear(x.cpu, weight.cpu, Tensor()), targets).loss.to(DType::f64),
      "cuda.linear_cross_entropy", DType::f16));
  EXPECT_ALPHA_ERROR(ops::linear_cross_entropy(x.gpu, weight.gpu, Tensor(), targets, true, false, false), DTypeError,
                     "[linear_cross_entropy]", "'x'", "f16");
#endif
}

#if ALPHA_WITH_CUDA
// Ids whose sorted runs meet the backward's tiles of 32 sorted positions every way: id 0 fills the first tile
// exactly, id 1 runs one position past the second, a frequent id spans many tiles, and the rest are spread.
Tensor skewed_ids(int64_t positions, int32_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(positions));
  for (int64_t i = 0; i < positions; ++i) ids[size_t(i)] = int32_t(3 + (i * 7919) % (vocab - 3));
  for (int64_t i = 0; i < positions; i += 2) ids[size_t(i)] = 2;  // half the positions: dozens of tiles
  for (int64_t i = 0; i < 32; ++i) ids[size_t(1 + 2 * i)] = 0;
  for (int64_t i = 32; i < 65; ++i) ids[size_t(1 + 2 * i)] = 1;
  return Tensor::from_vector(ids, {positions});
}

// The CUDA backward kernel itself, into a poisoned table of grad_dtype (dy's, or f32 beside bf16/f16 dy): a
// row it leaves unwritten fails the comparison.
Tensor cuda_embedding_backward(const Tensor& dy, const Tensor& ids, int64_t vocab, DType grad_dtype) {
  const int64_t channels = dy.size(-1);
  Tensor dtable = test::poisoned({vocab, channels}, grad_dtype).to(kGpu);
  auto run = [&]<class T, class G>() {
    kernels::cuda::embedding_backward(
        kernels::EmbeddingBackwardArgs<T, G>{dy.data<T>(), ids.data<int32_t>(), dtable.data<G>(), ids.numel(), vocab,
                                             channels},
        Stream{});
  };
  const bool widened = grad_dtype != dy.dtype();
  if (dy.dtype() == DType::bf16)
    widened ? run.operator()<bf16, float>() : run.operator()<bf16, bf16>();
  else if (dy.dtype() == DType::f16)
    widened ? run.operator()<f16, float>() : run.operator()<f16, f16>();
  else
    run.operator()<float, float>();
  return dtable;
}
#endif

TEST_F(CudaRows, EmbeddingMatchesCpu) {
#if ALPHA_WITH_CUDA
  struct Case {
    Tensor ids;
    int64_t channels;  // 64: vectorised; 37: element by element
  };
  for (DType dtype : test::kGpuDtypes)
    for (const Case& c : {Case{test::random_indices({4, 33}, 20), 64}, Case{skewed_ids(3001, 1000), 64},
                          Case{skewed_ids(3001, 1000), 37}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::to_string(c.ids.numel()) + " positions, C " +
                   std::to_string(c.channels));
      Tensor table = test::random({1000, c.channels}, dtype);
      Tensor out = ops::embedding(c.ids.to(kGpu), table.to(kGpu));
      Shape rows_shape = c.ids.shape();
      rows_shape.push_back(c.channels);
      EXPECT_EQ(out.shape(), rows_shape);
      EXPECT_TRUE(test::bit_equal(out, ops::embedding(c.ids, table.to(DType::f32)).to(dtype)));
      test::GpuInput dy = test::gpu_input(rows_shape, dtype);
      Tensor dtable = cuda_embedding_backward(dy.gpu, c.ids.to(kGpu), 1000, dtype);
      Tensor want = ops::embedding_backward(dy.cpu, c.ids, 1000);  // f64 sums rounded to f32
      EXPECT_TRUE(gpu_close(dtable, want, "cuda.embedding"));
      EXPECT_TRUE(test::bit_equal(dtable, ops::embedding_backward(dy.gpu, c.ids.to(kGpu), 1000)));
      if (dtype != DType::f32) {
        // An f32 table's gradient from bf16/f16 dy: rounded once, to f32, so as close as the f32 kernel's.
        Tensor wide = cuda_embedding_backward(dy.gpu, c.ids.to(kGpu), 1000, DType::f32);
        EXPECT_TRUE(gpu_close(wide, want, "cuda.embedding"));  // the f32 row of the table
        EXPECT_TRUE(test::bit_equal(wide, ops::embedding_backward(dy.gpu, c.ids.to(kGpu), 1000, false, DType::f32)));
        // Added into an f32 gradient already there (a tied table's): the CPU's f64 sums added to the same values.
        Tensor before = test::random({1000, c.channels}, DType::f32);
        Tensor into = before.to(kGpu);
        Tensor added = ops::embedding_backward(dy.gpu, c.ids.to(kGpu), 1000, false, DType::f32, into);
        EXPECT_TRUE(test::bit_equal(added, into));  // returned: the tensor added into
        EXPECT_TRUE(gpu_close(added, ops::embedding_backward(dy.cpu, c.ids, 1000, false, std::nullopt, before),
                              "cuda.embedding"));
      }
    }
#endif
}

TEST_F(CudaRows, BadInputsRaise) {
#if ALPHA_WITH_CUDA
  Tensor x = test::random({4, 6}).to(kGpu), w = test::random({6}).to(kGpu);
  EXPECT_ALPHA_ERROR(ops::layernorm(x, test::random({6}), Tensor(), 1e-5), DeviceError, "[layernorm]", "'weight'",
                     "cuda:0", "cpu");
  EXPECT_ALPHA_ERROR(ops::layernorm(x, test::random({5}).to(kGpu), Tensor(), 1e-5), ShapeError, "[layernorm]",
                     "'weight'", "[6]", "[5]");
  EXPECT_ALPHA_ERROR(ops::layernorm(test::random({4, 6}, DType::f64).to(kGpu), w, Tensor(), 1e-5), DTypeError,
                     "[layernorm]", "'x'", "f32 or bf16 or f16", "f64");
  EXPECT_ALPHA_ERROR(ops::gelu(Tensor::zeros({3}, DType::i32, kGpu)), DTypeError, "[gelu]", "'x'", "i32");
  EXPECT_ALPHA_ERROR(ops::softcap(x, 0.0), ValueError, "[softcap]", "'cap'");
  EXPECT_ALPHA_ERROR(ops::softmax_backward(test::random({4, 5}).to(kGpu), x), ShapeError, "[softmax_backward]",
                     "'dy'");

  // Index ranges are checked on GPU tensors as on CPU ones, naming the first bad entry.
  Tensor table = test::random({10, 4}).to(kGpu);
  EXPECT_ALPHA_ERROR(ops::embedding(Tensor::from_vector<int32_t>({1, 10, 3}, {3}).to(kGpu), table), ValueError,
                     "[embedding]", "'ids'", "[0, 10)", "got 10", "position 1");
  EXPECT_ALPHA_ERROR(ops::embedding(Tensor::from_vector<int32_t>({1, 2}, {2}), table), DeviceError, "[embedding]",
                     "'ids'", "cuda:0");
  EXPECT_ALPHA_ERROR(ops::embedding_backward(test::random({2, 4}).to(kGpu),
                                             Tensor::from_vector<int32_t>({0, -3}, {2}).to(kGpu), 10),
                     ValueError, "[embedding_backward]", "'ids'", "got -3", "position 1");
  Tensor logits = test::random({4, 6}).to(kGpu);
  EXPECT_ALPHA_ERROR(ops::cross_entropy(logits, Tensor::from_vector<int32_t>({0, 5, 6, 1}, {4}).to(kGpu)), ValueError,
                     "[cross_entropy]", "'targets'", "[0, 6)", "got 6", "row 2");
  Tensor targets = test::random_indices({4}, 6).to(kGpu);
  ops::CrossEntropyOutput out = ops::cross_entropy(logits, targets);
  EXPECT_ALPHA_ERROR(ops::cross_entropy_backward(1.0, logits, targets, out.lse, 5), ValueError,
                     "[cross_entropy_backward]", "'counted_rows'", "got 5");
  EXPECT_ALPHA_ERROR(ops::cross_entropy_backward(out.loss, logits, targets, out.lse, out.lse), DTypeError,
                     "[cross_entropy_backward]", "'counted_rows'", "i64");
  EXPECT_ALPHA_ERROR(ops::cross_entropy_backward(out.loss, logits, targets, out.lse, out.counted.to(kCpu)),
                     DeviceError, "[cross_entropy_backward]", "'counted_rows'", "cuda:0");
#endif
}

}  // namespace
}  // namespace alpha
