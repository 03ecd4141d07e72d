// The attention JVP on the GPU (kernels/cuda/attention_jvp.cu through ops/attention_jvp.h): both CUDA kernels,
// called directly into NaN-poisoned outputs and through the op, against the CPU kernels in f64 on the same
// values (whose tangent tests/kernels/test_attention_jvp.cpp holds to f64 finite differences of the forward),
// in f32, bf16 and f16, with row cuda.attention_jvp of the tolerance table (what the tensor-core kernel computes
// in bf16/f16, the fused form's out and tangent and the saved-statistics form's tangent when asked for, as
// ops::attention_jvp does, by the harness's rule against the naive JVP in the same precision, as that kernel
// rounds its softmax weights to T before its products: check/kernel_check.h, judge_against_naive; the FMA
// kernel's saved-statistics tangent element-wise); over odd and round sizes, every
// head-dimension bucket, causal, softcap, explicit scale, sliding windows, GQA/MQA, Tq != Tk, Dv != D, rows
// that see no key and strided q/k/v. Then NaN hygiene, extreme logits in f16 and the guardrails. Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "alpha/check/kernel_check.h"
#include "alpha/check/naive_low_precision_attention.h"
#include "alpha/kernels/attention_jvp.h"
#include "alpha/ops/attention.h"
#include "alpha/ops/attention_jvp.h"
#include "alpha/ops/attention_params.h"
#include "support/attention_jvp_case.h"
#include "support/checks.h"
#include "support/gpu.h"

namespace alpha {
namespace {

constexpr std::string_view kRow = "cuda.attention_jvp";

using test::JvpCase;

const JvpCase kCases[] = {
    // name, B, Tq, Tk, Hq, Hkv, D, Dv, config, head_major
    {"single_token", 1, 1, 1, 1, 1, 1, 1, {}},
    {"mha_t64_d64", 2, 64, 64, 4, 4, 64, 64, {}},
    {"round_causal_t256_d128", 1, 256, 256, 2, 2, 128, 128, {.causal = true}},
    {"gqa2_causal_t17_d5_dv7", 2, 17, 17, 4, 2, 5, 7, {.causal = true}},
    {"mqa_causal_tq33_tk130_d128_dv64", 1, 33, 130, 4, 1, 128, 64, {.causal = true}},
    {"gqa2_causal_empty_rows_tq100_tk37_d48", 2, 100, 37, 4, 2, 48, 48, {.causal = true}},
    {"softcap_scale_causal_t127_d96", 1, 127, 127, 4, 2, 96, 96, {.scale = 0.2, .causal = true, .softcap = 0.5}},
    {"window_left_causal_t200_d32", 1, 200, 200, 2, 2, 32, 32, {.causal = true, .window_left = 37}},
    {"window_both_softcap_d256", 1, 65, 150, 2, 1, 256, 256, {.softcap = 1.5, .window_left = 20, .window_right = 9}},
    {"window_empty_rows_tq90_tk40_d128_dv256", 2, 90, 40, 2, 2, 128, 256, {.window_left = 5, .window_right = 3}},
    {"head_major_causal_window", 2, 77, 65, 4, 2, 64, 48, {.causal = true, .softcap = 2, .window_left = 30}, true},
};

// One operand on the CPU in f64 and on the GPU in `dtype`, the same values (fresh, rounded to dtype); for
// head_major cases both are [B, H, T, D] tensors transposed to [B, T, H, D].
struct Operand {
  Tensor cpu, gpu;
};
Operand operand(Shape shape, DType dtype, bool head_major, double lo = -1.0, double hi = 1.0) {
  if (!head_major) {
    test::GpuInput in = test::gpu_input(shape, dtype, lo, hi);
    return {in.cpu.to(DType::f64), in.gpu};
  }
  test::GpuInput in = test::gpu_input({shape[0], shape[2], shape[1], shape[3]}, dtype, lo, hi);
  return {in.cpu.to(DType::f64).transpose(1, 2), in.gpu.transpose(1, 2)};
}

struct Inputs {
  Operand q, k, v, tq, tk, tv;
};
Inputs make_inputs(const JvpCase& c, DType dtype) {
  const Shape q_shape = {c.batch, c.q_len, c.q_heads, c.head_dim},
              k_shape = {c.batch, c.kv_len, c.kv_heads, c.head_dim};
  const Shape v_shape = {c.batch, c.kv_len, c.kv_heads, c.value_dim};
  return {operand(q_shape, dtype, c.head_major), operand(k_shape, dtype, c.head_major),
          operand(v_shape, dtype, c.head_major), operand(q_shape, dtype, false),
          operand(k_shape, dtype, false),        operand(v_shape, dtype, false)};
}

// Calls fn.template operator()<T>() with the element type of a GPU dtype.
template <class Fn>
void with_element_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::bf16: fn.template operator()<bf16>(); break;
    case DType::f16: fn.template operator()<f16>(); break;
    default: fn.template operator()<float>(); break;
  }
}

Tensor on_cpu(const Tensor& t) { return t.to(Device::cpu()); }
Tensor gpu_poisoned(const Shape& shape, DType dtype) { return test::poisoned(shape, dtype).to(Device::cuda(0)); }

// A tensor-core result (out or tangent) against the f64 reference: in f32 by the row; in bf16/f16 at most twice
// as far off as the naive JVP in the same precision on the same inputs (`naive`), plus the rule's floor.
::testing::AssertionResult tensor_core_close(const Tensor& got, const Tensor& want, const Tensor& naive) {
  if (got.dtype() == DType::f32) return test::all_close(got, want, kRow);
  check::Comparison c;
  check::judge_against_naive(c, got, want, naive, kRow);
  if (c.passed) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << c.detail;
}

// The naive JVP in `dtype` on the operands' values.
check::NaiveAttentionJvp naive_jvp(const Inputs& in, DType dtype, const ops::AttentionConfig& config) {
  return check::naive_low_precision_attention_jvp(in.q.cpu.to(dtype), in.k.cpu.to(dtype), in.v.cpu.to(dtype),
                                                  in.tq.cpu.to(dtype), in.tk.cpu.to(dtype), in.tv.cpu.to(dtype),
                                                  config);
}

class CudaAttentionJvp : public test::GpuTest<::testing::TestWithParam<JvpCase>> {};

// Both kernels, called directly into poisoned outputs, and both ops, against the f64 CPU kernels.
TEST_P(CudaAttentionJvp, KernelsAndOpsMatchTheF64Reference) {
  const JvpCase& c = GetParam();
  const ops::AttentionConfig& config = c.config;
  for (DType dtype : test::kGpuDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Inputs in = make_inputs(c, dtype);
    // The reference: the fused CPU kernel in f64 (out, the true JVP, the statistics).
    const ops::AttentionJvpOutput want =
        ops::attention_jvp_fused(in.q.cpu, in.k.cpu, in.v.cpu, in.tq.cpu, in.tk.cpu, in.tv.cpu, config);
    // The saved-statistics form's inputs as the GPU holds them (out in dtype, statistics in f32), and its
    // reference on the same rounded values.
    const Tensor out_in = want.out.to(dtype), max_in = want.row_max.to(DType::f32),
                 sum_in = want.row_sum.to(DType::f32);
    const Tensor want_saved =
        ops::attention_jvp(in.q.cpu, in.k.cpu, in.v.cpu, in.tq.cpu, in.tk.cpu, in.tv.cpu, out_in.to(DType::f64),
                           max_in.to(DType::f64), sum_in.to(DType::f64), config);
    const Tensor g_out = out_in.to(Device::cuda(0)), g_max = max_in.to(Device::cuda(0));
    const Tensor g_sum = sum_in.to(Device::cuda(0));
    const Shape out_shape = want.out.shape(), stats_shape = want.row_max.shape();

    ops::AttentionJvpOutput direct{gpu_poisoned(out_shape, dtype), gpu_poisoned(out_shape, dtype),
                                   gpu_poisoned(stats_shape, DType::f32), gpu_poisoned(stats_shape, DType::f32)};
    Tensor direct_saved = gpu_poisoned(out_shape, dtype), direct_saved_mma = gpu_poisoned(out_shape, dtype);
#if ALPHA_WITH_CUDA  // the kernels' own entry points exist in a CUDA build only (without one the test skips)
    with_element_type(dtype, [&]<class T>() {
      const kernels::AttentionParams<T> params = ops::attention_kernel_params<T>(in.q.gpu, in.k.gpu, in.v.gpu, config);
      const kernels::AttentionJvpInputs<T> inputs{in.q.gpu.data<T>(),  in.k.gpu.data<T>(),  in.v.gpu.data<T>(),
                                                  in.tq.gpu.data<T>(), in.tk.gpu.data<T>(), in.tv.gpu.data<T>()};
      kernels::cuda::attention_jvp_fused(
          kernels::AttentionJvpFusedArgs<T>{inputs, direct.out.data<T>(), direct.tangent_out.data<T>(),
                                            direct.row_max.data<float>(), direct.row_sum.data<float>(), params},
          Stream{});
      kernels::cuda::attention_jvp(kernels::AttentionJvpArgs<T>{inputs, g_out.data<T>(), g_max.data<float>(),
                                                                g_sum.data<float>(), direct_saved.data<T>(), params},
                                   Stream{});
      kernels::cuda::attention_jvp(kernels::AttentionJvpArgs<T>{inputs, g_out.data<T>(), g_max.data<float>(),
                                                                g_sum.data<float>(), direct_saved_mma.data<T>(),
                                                                params, /*tensor_cores=*/true},
                                   Stream{});
    });
#endif
    const ops::AttentionJvpOutput op_fused =
        ops::attention_jvp_fused(in.q.gpu, in.k.gpu, in.v.gpu, in.tq.gpu, in.tk.gpu, in.tv.gpu, config);
    const Tensor op_saved =
        ops::attention_jvp(in.q.gpu, in.k.gpu, in.v.gpu, in.tq.gpu, in.tk.gpu, in.tv.gpu, g_out, g_max, g_sum, config);

    const check::NaiveAttentionJvp naive = naive_jvp(in, dtype, config);
    for (const ops::AttentionJvpOutput* got :
         std::initializer_list<const ops::AttentionJvpOutput*>{&direct, &op_fused}) {
      EXPECT_TRUE(tensor_core_close(on_cpu(got->out), want.out, naive.out));
      EXPECT_TRUE(tensor_core_close(on_cpu(got->tangent_out), want.tangent_out, naive.tangent_out));
      EXPECT_TRUE(test::all_close(on_cpu(got->row_max), want.row_max, kRow));
      EXPECT_TRUE(test::all_close(on_cpu(got->row_sum), want.row_sum, kRow));
    }
    // The FMA kernel (the kernel's default) keeps P and P·tS in f32: element-wise. The tensor-core path (the
    // op's) rounds them to T: the naive rule, or element-wise where it does not take the operands.
    EXPECT_TRUE(test::all_close(on_cpu(direct_saved), want_saved, kRow));
    EXPECT_TRUE(tensor_core_close(on_cpu(direct_saved_mma), want_saved, naive.tangent_out));
    EXPECT_TRUE(tensor_core_close(on_cpu(op_saved), want_saved, naive.tangent_out));
    // The saved-statistics op on the GPU's own fused results, against the CPU's on the same values.
    const Tensor chained = ops::attention_jvp(in.q.gpu, in.k.gpu, in.v.gpu, in.tq.gpu, in.tk.gpu, in.tv.gpu,
                                              op_fused.out, op_fused.row_max, op_fused.row_sum, config);
    const Tensor want_chained = ops::attention_jvp(
        in.q.cpu, in.k.cpu, in.v.cpu, in.tq.cpu, in.tk.cpu, in.tv.cpu, on_cpu(op_fused.out).to(DType::f64),
        on_cpu(op_fused.row_max).to(DType::f64), on_cpu(op_fused.row_sum).to(DType::f64), config);
    EXPECT_TRUE(tensor_core_close(on_cpu(chained), want_chained, naive.tangent_out));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaAttentionJvp, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

class CudaAttentionJvpNumerics : public test::GpuTest<> {};

// A q row holding inf or NaN puts NaN into that row's out and tangent only (both forms, every dtype); every
// other element stays finite. The rows share query and key tiles with the bad ones.
TEST_F(CudaAttentionJvpNumerics, NonFiniteQueryRowsStayInTheirRow) {
  const JvpCase c{"nan_rows", 2, 40, 70, 4, 2, 64, 32, {.causal = true}};
  const ops::AttentionConfig& config = c.config;
  for (DType dtype : test::kGpuDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Inputs in = make_inputs(c, dtype);
    std::vector<double> values = in.q.cpu.to_vector<double>();
    auto element = [&](int64_t b, int64_t i, int64_t h, int64_t d) {
      return size_t(((b * c.q_len + i) * c.q_heads + h) * c.head_dim + d);
    };
    values[element(0, 3, 1, 2)] = std::numeric_limits<double>::infinity();
    values[element(1, 38, 2, 0)] = std::numeric_limits<double>::quiet_NaN();
    const Tensor q = Tensor::from_vector(values, in.q.cpu.shape()).to(dtype).to(Device::cuda(0));
    auto bad_row = [](int64_t b, int64_t i, int64_t h) {
      return (b == 0 && i == 3 && h == 1) || (b == 1 && i == 38 && h == 2);
    };

    const ops::AttentionJvpOutput fused =
        ops::attention_jvp_fused(q, in.k.gpu, in.v.gpu, in.tq.gpu, in.tk.gpu, in.tv.gpu, config);
    const ops::AttentionOutput fwd = ops::attention_materialized(q, in.k.gpu, in.v.gpu, config);
    const Tensor saved = ops::attention_jvp(q, in.k.gpu, in.v.gpu, in.tq.gpu, in.tk.gpu, in.tv.gpu, fwd.out,
                                            fwd.row_max, fwd.row_sum, config);
    for (auto [name, t] : {std::pair<const char*, Tensor>{"saved tangent", on_cpu(saved)},
                           {"fused out", on_cpu(fused.out)},
                           {"fused tangent", on_cpu(fused.tangent_out)}}) {
      const std::vector<double> x = t.to_vector<double>();
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t i = 0; i < c.q_len; ++i)
          for (int64_t h = 0; h < c.q_heads; ++h)
            for (int64_t d = 0; d < c.value_dim; ++d) {
              const double value = x[size_t(((b * c.q_len + i) * c.q_heads + h) * c.value_dim + d)];
              if (bad_row(b, i, h))
                EXPECT_TRUE(std::isnan(value)) << name << " b " << b << " i " << i << " h " << h;
              else
                EXPECT_TRUE(std::isfinite(value)) << name << " b " << b << " i " << i << " h " << h << ": " << value;
            }
    }
  }
}

// Logits of magnitude ~1e4 (q up to 1e4, exact in f16) in every dtype: the kernels compute S in f32 and the
// running max keeps every exponent <= 0, so out, tangent and statistics stay finite in rows that see keys, and
// row_max matches the reference. In bf16/f16 out and tangent are held to the naive rule (e·(tS − μ), rounded
// to T, stays far below f16's 65504). In f32 their accuracy is set by the conditioning, not the kernel: S and
// tS of ~1e4 carry f32 rounding of ~1e-3 into P and μ (an f32 naive computation is off as much), so an
// element-wise bound would judge the rounding of the inputs' products, and twice the naive error would judge
// two independent roundings against each other; f32 accuracy is checked at ordinary logits above.
TEST_F(CudaAttentionJvpNumerics, ExtremeLogitsStayFinite) {
  const JvpCase c{"extreme", 2, 33, 40, 4, 2, 16, 8, {.causal = true}};
  for (DType dtype : test::kGpuDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Inputs in = make_inputs(c, dtype);
    in.q = operand(in.q.cpu.shape(), dtype, false, -1e4, 1e4);
    const ops::AttentionJvpOutput got =
        ops::attention_jvp_fused(in.q.gpu, in.k.gpu, in.v.gpu, in.tq.gpu, in.tk.gpu, in.tv.gpu, c.config);
    const ops::AttentionJvpOutput want =
        ops::attention_jvp_fused(in.q.cpu, in.k.cpu, in.v.cpu, in.tq.cpu, in.tk.cpu, in.tv.cpu, c.config);
    // The saved-statistics form on the GPU's own forward results (the fused pass's): finite only. It is not
    // centred (μ is known only after its pass): its acc − μ∘O cancels two f32 sums of ~|tS|·|V| ~ 1e4 where the
    // naive JVP's one-hot P is nearly exact, which a CPU emulation put at 1.0 (bf16) and 2.6 (f16) times the
    // naive error, the latter inside the rule only through its floor (docs/ATTENTION_DERIVATIVES.md).
    const Tensor saved = ops::attention_jvp(in.q.gpu, in.k.gpu, in.v.gpu, in.tq.gpu, in.tk.gpu, in.tv.gpu, got.out,
                                            got.row_max, got.row_sum, c.config);
    double largest_logit = 0;
    for (double m : want.row_max.to_vector<double>()) largest_logit = std::max(largest_logit, std::abs(m));
    EXPECT_GT(largest_logit, 1e3);
    for (const Tensor& t : {got.out, got.tangent_out, got.row_max, got.row_sum, saved})
      for (double x : on_cpu(t).to_vector<double>()) ASSERT_TRUE(std::isfinite(x)) << x;
    EXPECT_TRUE(test::all_close(on_cpu(got.row_max), want.row_max, kRow));
    if (dtype == DType::f32) continue;
    const check::NaiveAttentionJvp naive = naive_jvp(in, dtype, c.config);
    EXPECT_TRUE(tensor_core_close(on_cpu(got.out), want.out, naive.out));
    EXPECT_TRUE(tensor_core_close(on_cpu(got.tangent_out), want.tangent_out, naive.tangent_out));
  }
}

TEST_F(CudaAttentionJvpNumerics, UnsupportedInputsRaise) {
  const Device gpu = Device::cuda(0);
  Tensor q = test::random({1, 4, 2, 8}).to(gpu), k = test::random({1, 6, 2, 8}).to(gpu);
  Tensor v = test::random({1, 6, 2, 8}).to(gpu);
  ops::AttentionConfig dropout;
  dropout.dropout_p = 0.1;
  EXPECT_ALPHA_ERROR(ops::attention_jvp_fused(q, k, v, q, k, v, dropout), ValueError, "[attention_jvp_fused]",
                     "'config.dropout_p'");
  EXPECT_ALPHA_ERROR(ops::attention_jvp_fused(q, k, v, q.to(Device::cpu()), k, v, {}), DeviceError,
                     "[attention_jvp_fused]", "'tq'");
  Tensor wide = test::random({1, 4, 2, 264}, DType::bf16).to(gpu);
  EXPECT_ALPHA_ERROR(ops::attention_jvp_fused(wide, wide, wide, wide, wide, wide, {}), ShapeError,
                     "[attention_jvp_fused]", "'q'", "at most 256", "264");
  const ops::AttentionOutput fwd = ops::attention_materialized(q, k, v, {});
  EXPECT_ALPHA_ERROR(ops::attention_jvp(q, k, v, q, k, v, fwd.out, fwd.row_max.to(Device::cpu()), fwd.row_sum, {}),
                     DeviceError, "[attention_jvp]", "'row_max'");
}

}  // namespace
}  // namespace alpha
