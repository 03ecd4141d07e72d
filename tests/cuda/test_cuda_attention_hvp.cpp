// The attention HVP on the GPU (ops::attention_hvp: central differences of flash attention's backward in
// f32, O(T) memory) against the exact f64 HVP on the CPU (ops::attention_hvp_exact) on the same values, in
// f32, bf16 and f16 at the recommended eps 3e-3, with row cuda.attention_hvp (abs per unit of max|H·v|, as a
// finite difference's error is relative to the whole HVP); over odd and round sizes, causal, softcap with an
// explicit scale, windows, GQA/MQA, Tq != Tk with rows that see no key, Dv != D, head dimensions that the
// bf16/f16 flash kernels do not take (5) and 256, strided q/k/v; then the memory it holds (never a Tq×Tk
// matrix) and the autograd JVP's gradients on the GPU. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "alpha/autograd/functions.h"
#include "alpha/ops/attention_hvp.h"
#include "alpha/tensor/allocator.h"
#include "support/attention_jvp_case.h"
#include "support/checks.h"
#include "support/gpu.h"

namespace alpha {
namespace {

using test::JvpCase;

constexpr double kEps = 3e-3;  // docs/ATTENTION_DERIVATIVES.md's step for f32

const JvpCase kCases[] = {
    // name, B, Tq, Tk, Hq, Hkv, D, Dv, config, head_major
    {"single_token", 1, 1, 1, 1, 1, 8, 8, {}},
    {"mha_t64_d64", 2, 64, 64, 4, 4, 64, 64, {}},
    {"gqa2_causal_t17_d5_dv7", 2, 17, 17, 4, 2, 5, 7, {.causal = true}},
    {"mqa_causal_tq33_tk130_d128_dv64", 1, 33, 130, 4, 1, 128, 64, {.causal = true}},
    {"gqa2_causal_empty_rows_tq100_tk37_d48", 2, 100, 37, 4, 2, 48, 48, {.causal = true}},
    {"softcap_scale_causal_t127_d96", 1, 127, 127, 4, 2, 96, 96, {.scale = 0.2, .causal = true, .softcap = 0.5}},
    {"window_both_softcap_d256", 1, 65, 150, 2, 1, 256, 256, {.softcap = 1.5, .window_left = 20, .window_right = 9}},
    {"head_major_causal_window", 2, 77, 65, 4, 2, 64, 48, {.causal = true, .softcap = 2, .window_left = 30}, true},
};

// A point on the CPU in f64 and on the GPU in `dtype`, the same values (fresh, rounded to dtype).
struct Point {
  std::vector<Tensor> cpu, gpu;  // q, k, v, grad_out, vq, vk, vv
};
Point make_point(const JvpCase& c, DType dtype) {
  const Shape q = {c.batch, c.q_len, c.q_heads, c.head_dim}, k = {c.batch, c.kv_len, c.kv_heads, c.head_dim};
  const Shape v = {c.batch, c.kv_len, c.kv_heads, c.value_dim}, out = {c.batch, c.q_len, c.q_heads, c.value_dim};
  Point p;
  for (const Shape& shape : {q, k, v, out, q, k, v}) {
    const bool strided = c.head_major && p.cpu.size() < 3;  // q, k, v as transposed [B, H, T, D] tensors
    test::GpuInput in = test::gpu_input(strided ? Shape{shape[0], shape[2], shape[1], shape[3]} : shape, dtype);
    Tensor cpu = in.cpu.to(DType::f64), gpu = in.gpu;
    if (strided) cpu = cpu.transpose(1, 2), gpu = gpu.transpose(1, 2);
    p.cpu.push_back(cpu);
    p.gpu.push_back(gpu);
  }
  return p;
}

std::vector<double> flat(const ops::AttentionHvp& h) {
  std::vector<double> all;
  for (const Tensor& t : {h.hq, h.hk, h.hv})
    for (double value : t.to_vector<double>()) all.push_back(value);
  return all;
}

// Every element within tol.abs·max|want| + tol.rel·|want|. A vanishing HVP (one key: O = v is linear in the
// inputs) has no scale of its own; what the difference quotient returns there is the rounding of O(1)
// gradients over 2·eps, judged per unit.
::testing::AssertionResult close_to(const std::vector<double>& got, const std::vector<double>& want,
                                    test::Tolerance tol) {
  double scale = 0, worst = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  if (scale == 0) scale = 1;
  size_t worst_at = 0;
  bool ok = got.size() == want.size();
  for (size_t i = 0; ok && i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    if (!(err <= tol.abs * scale + tol.rel * std::abs(want[i]))) ok = false;
    if (!(err <= worst)) worst = err, worst_at = i;
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max |error| " << worst << " at element " << worst_at
                                       << " of (hq, hk, hv), max |want| " << scale << " (" << got.size() << " vs "
                                       << want.size() << " elements)";
}

class CudaAttentionHvp : public test::GpuTest<::testing::TestWithParam<JvpCase>> {};

TEST_P(CudaAttentionHvp, CentralDifferenceMatchesTheExactF64Hvp) {
  const JvpCase& c = GetParam();
  for (DType dtype : test::kGpuDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Point x = make_point(c, dtype);
    const ops::AttentionHvp got =
        ops::attention_hvp(x.gpu[0], x.gpu[1], x.gpu[2], x.gpu[3], x.gpu[4], x.gpu[5], x.gpu[6], c.config, kEps);
    EXPECT_EQ(got.hq.dtype(), dtype);
    EXPECT_TRUE(got.hk.device().is_cuda());
    const ops::AttentionHvp want =
        ops::attention_hvp_exact(x.cpu[0], x.cpu[1], x.cpu[2], x.cpu[3], x.cpu[4], x.cpu[5], x.cpu[6], c.config);
    EXPECT_TRUE(close_to(flat(got), flat(want), test::tolerance("cuda.attention_hvp", dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaAttentionHvp, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

class CudaAttentionHvpOps : public test::GpuTest<> {};

// At Tq = Tk = 8192 one head's f32 scores take 256 MiB; the HVP's peak beyond its inputs stays below that
// (promoted copies, perturbed points, gradients and flash attention's O(T) workspace: about 50 MiB).
TEST_F(CudaAttentionHvpOps, NeverHoldsTheScoreMatrix) {
  const JvpCase c{"long", 1, 8192, 8192, 1, 1, 64, 64, {.causal = true}};
  const Point x = make_point(c, DType::bf16);
  CachingAllocator& allocator = allocator_for(Device::cuda(0));
  const uint64_t before = allocator.stats().bytes_in_use;
  allocator.reset_peak();
  const ops::AttentionHvp h =
      ops::attention_hvp(x.gpu[0], x.gpu[1], x.gpu[2], x.gpu[3], x.gpu[4], x.gpu[5], x.gpu[6], c.config, kEps);
  const uint64_t scores = uint64_t(c.q_len) * uint64_t(c.kv_len) * sizeof(float);
  EXPECT_LT(allocator.stats().peak_bytes_in_use - before, scores) << "one head's scores: " << scores << " bytes";
  for (double e : h.hq.to_vector<double>()) ASSERT_TRUE(std::isfinite(e));
}

// The autograd JVP on the GPU in f32: tangent_out's gradients (flash attention's backward for the tangents,
// the HVP for the primal) against the same gradients on the CPU in f64, by the HVP's row.
TEST_F(CudaAttentionHvpOps, AutogradJvpGradientsMatchTheCpu) {
  const JvpCase c{"autograd", 2, 33, 40, 4, 2, 16, 24, {.causal = true, .softcap = 1.5}};
  const Point x = make_point(c, DType::f32);
  auto grads = [&](const std::vector<Tensor>& point, double eps) {
    std::vector<autograd::Variable> vars;
    for (int i : {0, 1, 2, 4, 5, 6}) vars.emplace_back(point[size_t(i)].contiguous().clone(), true);
    const autograd::AttentionJvp y =
        autograd::attention_jvp(vars[0], vars[1], vars[2], vars[3], vars[4], vars[5], c.config, {.hvp_eps = eps});
    autograd::backward(y.tangent_out, point[3].contiguous());
    std::vector<double> all;
    for (const autograd::Variable& v : vars)
      for (double e : v.grad().to_vector<double>()) all.push_back(e);
    return all;
  };
  EXPECT_TRUE(close_to(grads(x.gpu, kEps), grads(x.cpu, 1e-5), test::tolerance("cuda.attention_hvp", DType::f32)));
}

}  // namespace
}  // namespace alpha
