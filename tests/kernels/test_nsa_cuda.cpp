// The CUDA NSA kernels (kernels/cuda/nsa.cu) against the CPU reference in f64 (kernels/nsa_reference.h), on fresh
// random inputs rounded to bf16 (so f32 and bf16 runs see the same values), into NaN-poisoned outputs. The kept
// blocks are compared first: forced blocks exactly, the others as sets whose differences must be near-ties by the
// f64 score (the GPU sums its f32 scores in another order). Then the reference runs again on the GPU's choice
// (given_selected), and every output and all eight gradients are compared with it, the tolerance row
// "cuda.nsa" (abs per unit of the largest |want| above 1). Lengths 1, 17, 63, 64, 65, 127, 300, 600, 1000,
// 4099; G 1, 2, 3, 4, 16; head dims 64, 128 and 192 with 128 for v. Also: the op dispatches to the same kernels (and
// strided q, k, v give the same bits), autograd runs on the GPU, the backward gives the same bits twice, and bad inputs
// raise. Suites named Cuda* skip themselves without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "alpha/autograd/functions.h"
#include "alpha/check/tolerances.h"
#include "alpha/kernels/nsa_reference.h"
#include "alpha/ops/nsa.h"
#include "support/checks.h"
#include "support/gpu.h"

namespace alpha {
namespace {

struct NsaGpuCase {
  std::string name;
  int64_t batch, seq_len, q_heads, kv_heads, head_dim, value_dim;
  ops::NsaConfig config;
};

std::ostream& operator<<(std::ostream& os, const NsaGpuCase& c) { return os << c.name; }

// l, d, l', n, w.
ops::NsaConfig nsa_config(int64_t l, int64_t d, int64_t l_sel, int64_t n, int64_t w, double scale = 0.0) {
  return {scale, l, d, l_sel, n, w};
}

// Uniform in [lo, hi), rounded to bf16 and held in f64: exact in every dtype the kernels take.
Tensor bf16_values(Shape shape, double lo = -1.0, double hi = 1.0) {
  return test::random(std::move(shape), DType::f64, lo, hi).to(DType::bf16).to(DType::f64);
}

// As the reference's tests: inputs in [-1, 1), q in [-2, 2), the compressor's weights scaled by 1/√(l·D), gate
// logits in [-2, 2).
ops::NsaInputs make_inputs(const NsaGpuCase& c) {
  const int64_t l = c.config.block_len, D = c.head_dim, Dv = c.value_dim;
  const double wk = 2.0 / std::sqrt(double(l * D)), wv = 2.0 / std::sqrt(double(l * Dv));
  return {bf16_values({c.batch, c.seq_len, c.q_heads, D}, -2.0, 2.0),
          bf16_values({c.batch, c.seq_len, c.kv_heads, D}),
          bf16_values({c.batch, c.seq_len, c.kv_heads, Dv}),
          bf16_values({c.batch, c.seq_len, c.q_heads, 3}, -2.0, 2.0),
          bf16_values({l, D}),
          bf16_values({D, l * D}, -wk, wk),
          bf16_values({l, Dv}),
          bf16_values({Dv, l * Dv}, -wv, wv)};
}

ops::NsaInputs on(const ops::NsaInputs& in, DType dtype, Device device) {
  auto f = [&](const Tensor& t) { return t.to(dtype).to(device); };
  return {f(in.q), f(in.k), f(in.v), f(in.gates), f(in.k_pos), f(in.k_weight), f(in.v_pos), f(in.v_weight)};
}

// Output buffers: NaN, and −7 for the kept blocks (no block index, not the −1 padding).
ops::NsaAllocator poisoned_on(Device device) {
  return [device](Shape shape, DType dtype) {
    return dtype == DType::i32 ? Tensor::full(std::move(shape), -7, dtype, device)
                               : test::poisoned(std::move(shape), dtype).to(device);
  };
}

struct GpuRun {
  ops::NsaOutput forward;
  ops::NsaGrads grads;
};

// The f64 reference through the kernels, on its own choice of blocks or on `given` (CPU i32 [B, T, Hkv, n]).
ops::NsaOutput cpu_forward(const ops::NsaInputs& in, const ops::NsaConfig& config, const Tensor* given) {
  ops::NsaOutput out = ops::nsa_allocate_output(in, config, poisoned_on(Device::cpu()));
  kernels::NsaForwardArgs<double> args = ops::nsa_forward_args<double>(in, out, config);
  if (given) args.given_selected = given->data<int32_t>();
  kernels::cpu::nsa_reference_forward(args);
  return out;
}
ops::NsaGrads cpu_backward(const Tensor& dout, const ops::NsaInputs& in, const ops::NsaOutput& forward,
                           const ops::NsaConfig& config) {
  ops::NsaGrads grads = ops::nsa_allocate_grads(in, poisoned_on(Device::cpu()));
  kernels::cpu::nsa_reference_backward(ops::nsa_backward_args<double>(dout, in, forward, grads, config));
  return grads;
}

#if ALPHA_WITH_CUDA
template <class T>
void gpu_kernels(const ops::NsaInputs& in, const Tensor& dout, const ops::NsaConfig& config, GpuRun& r, bool backward) {
  if (!backward)
    kernels::cuda::nsa_forward(ops::nsa_forward_args<T>(in, r.forward, config), Stream{});
  else
    kernels::cuda::nsa_backward(ops::nsa_backward_args<T>(dout, in, r.forward, r.grads, config), Stream{});
}
#endif

// The GPU kernels called directly (in and dout on the GPU in one dtype), into poisoned outputs.
void gpu_forward(const ops::NsaInputs& in, [[maybe_unused]] const ops::NsaConfig& config, GpuRun& r) {
  r.forward = ops::nsa_allocate_output(in, config, poisoned_on(in.q.device()));
#if ALPHA_WITH_CUDA
  if (in.q.dtype() == DType::bf16)
    gpu_kernels<bf16>(in, Tensor(), config, r, false);
  else if (in.q.dtype() == DType::f16)
    gpu_kernels<f16>(in, Tensor(), config, r, false);
  else
    gpu_kernels<float>(in, Tensor(), config, r, false);
#endif
}
void gpu_backward(const ops::NsaInputs& in, [[maybe_unused]] const Tensor& dout,
                  [[maybe_unused]] const ops::NsaConfig& config, GpuRun& r) {
  r.grads = ops::nsa_allocate_grads(in, poisoned_on(in.q.device()));
#if ALPHA_WITH_CUDA
  if (in.q.dtype() == DType::bf16)
    gpu_kernels<bf16>(in, dout, config, r, true);
  else if (in.q.dtype() == DType::f16)
    gpu_kernels<f16>(in, dout, config, r, true);
  else
    gpu_kernels<float>(in, dout, config, r, true);
#endif
}

// got (any device and dtype) against want (f64) with the row "cuda.nsa" of got's dtype, abs per unit of the
// largest finite |want| where that exceeds 1.
// Prints the largest error per unit of that scale, labelled, for tightening the row. `unit` raises the scale (see
// dk_pos below).
double largest_abs(const Tensor& t) {
  double m = 0.0;
  for (double x : t.to_vector<double>())
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return m;
}
::testing::AssertionResult close(const Tensor& got, const Tensor& want, DType dtype, const std::string& label = "",
                                 double unit = 1.0) {
  const Tensor host = got.to(Device::cpu()).to(DType::f64);
  const std::vector<double> g = host.to_vector<double>(), w = want.to_vector<double>();
  double largest = unit, error = 0.0;
  for (size_t i = 0; i < w.size(); ++i)
    if (std::isfinite(w[i])) {
      largest = std::max(largest, std::abs(w[i]));
      if (i < g.size()) error = std::max(error, std::abs(g[i] - w[i]));
    }
  if (!label.empty())
    std::cout << "  " << label << " " << dtype_name(dtype) << ": max error " << error / largest << "\n";
  check::Tolerance tol = check::tolerance("cuda.nsa", dtype);
  tol.abs *= largest;
  return test::all_close(host, want, tol);
}

// The f64 selection scores of the candidate blocks of (b, t, g), from the reference's compressed keys and
// compressed-branch statistics (the definition in kernels/nsa_reference.h).
std::vector<double> f64_scores(const ops::NsaInputs& in, const ops::NsaOutput& ref, const ops::NsaConfig& cfg,
                               int64_t b, int64_t t, int64_t g) {
  const int64_t T = in.q.size(1), Hq = in.q.size(2), D = in.q.size(3), Hkv = in.k.size(2), G = Hq / Hkv;
  const int64_t B = in.q.size(0), blocks = ref.compressed_k.size(1);
  const double scale = cfg.scale != 0 ? cfg.scale : 1.0 / std::sqrt(double(D));
  const std::vector<double> q = in.q.contiguous().to_vector<double>(), ck = ref.compressed_k.to_vector<double>();
  const std::vector<double> m = ref.row_max.to_vector<double>(), l = ref.row_sum.to_vector<double>();
  const int64_t count = t + 1 < cfg.block_len ? 0 : (t + 1 - cfg.block_len) / cfg.block_stride + 1;
  std::vector<double> score(size_t(t / cfg.select_len + 1), 0.0);
  for (int64_t h = g * G; h < (g + 1) * G; ++h) {
    const size_t stat = size_t((0 * B + b) * Hq + h) * size_t(T) + size_t(t);  // branch 0
    for (int64_t i = 0; i < count; ++i) {
      double s = 0;
      for (int64_t e = 0; e < D; ++e)
        s += q[size_t(((b * T + t) * Hq + h) * D + e)] * ck[size_t(((b * blocks + i) * Hkv + g) * D + e)];
      const double prob = std::exp(s * scale - m[stat]) / l[stat];
      for (int64_t j = i * cfg.block_stride / cfg.select_len;
           j <= (i * cfg.block_stride + cfg.block_len - 1) / cfg.select_len; ++j)
        score[size_t(j)] += prob;
    }
  }
  return score;
}

// The GPU's kept blocks against the reference's own: forced blocks exactly; where the sets differ, every block
// only the reference kept scores (f64) at most `tie` above every block only the GPU kept. Returns the number of
// (b, t, g) whose sets differ.
int64_t compare_selection(const Tensor& gpu, const ops::NsaOutput& ref, const ops::NsaInputs& in,
                          const ops::NsaConfig& cfg, double tie) {
  const int64_t B = in.q.size(0), T = in.q.size(1), Hkv = in.k.size(2), n = cfg.select_count;
  const std::vector<int32_t> got = gpu.to(Device::cpu()).to_vector<int32_t>();
  const std::vector<int32_t> want = ref.selected.to_vector<int32_t>();
  int64_t differing = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t g = 0; g < Hkv; ++g) {
        const size_t at = size_t(((b * T + t) * Hkv + g) * n);
        std::vector<int32_t> gk(got.begin() + long(at), got.begin() + long(at + size_t(n)));
        std::vector<int32_t> wk(want.begin() + long(at), want.begin() + long(at + size_t(n)));
        const int64_t current = t / cfg.select_len;
        SCOPED_TRACE("b " + std::to_string(b) + " t " + std::to_string(t) + " g " + std::to_string(g));
        EXPECT_TRUE(std::is_sorted(gk.begin(), gk.begin() + std::min<int64_t>(n, current + 1)));
        if (current + 1 <= n) {
          EXPECT_EQ(gk, wk);
          continue;
        }
        const std::set<int32_t> gs(gk.begin(), gk.end()), ws(wk.begin(), wk.end());
        EXPECT_EQ(int64_t(gs.size()), n);
        for (int32_t forced : {int32_t(0), int32_t(current - 1), int32_t(current)}) EXPECT_TRUE(gs.count(forced));
        if (gs == ws) continue;
        ++differing;
        const std::vector<double> score = f64_scores(in, ref, cfg, b, t, g);
        for (int32_t only_want : ws)
          for (int32_t only_got : gs) {
            if (gs.count(only_want) || ws.count(only_got)) continue;
            EXPECT_LE(score[size_t(only_want)] - score[size_t(only_got)], tie)
                << "the GPU kept block " << only_got << " over block " << only_want;
          }
      }
  return differing;
}

class CudaNsaKernels : public test::GpuTest<::testing::TestWithParam<NsaGpuCase>> {};

TEST_P(CudaNsaKernels, ForwardAndEveryGradientMatchTheF64Reference) {
  const NsaGpuCase& c = GetParam();
  const ops::NsaInputs in = make_inputs(c);
  const Tensor dout = bf16_values({c.batch, c.seq_len, c.q_heads, c.value_dim});
  const ops::NsaOutput own = cpu_forward(in, c.config, nullptr);
  const int64_t G = c.q_heads / c.kv_heads;
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const ops::NsaInputs gin = on(in, dtype, Device::cuda(0));
    GpuRun gpu;
    gpu_forward(gin, c.config, gpu);
    const Tensor kept = gpu.forward.selected.to(Device::cpu());
    const int64_t differing = compare_selection(kept, own, in, c.config, (dtype == DType::f32 ? 1e-4 : 5e-2) * G);
    std::cout << "[ " << c.name << " " << dtype_name(dtype) << " ] " << differing << " of "
              << c.batch * c.seq_len * c.kv_heads << " selections differ from the f64 reference's (near-ties)\n";
    // The reference on the GPU's choice, then every output and gradient against it.
    const ops::NsaOutput ref = differing == 0 ? own : cpu_forward(in, c.config, &kept);
    EXPECT_TRUE(test::bit_equal(gpu.forward.selected, ref.selected));
    const char* names[] = {"out", "branch_out", "compressed_k", "compressed_v", "row_max", "row_sum"};
    const Tensor* got[] = {&gpu.forward.out,          &gpu.forward.branch_out, &gpu.forward.compressed_k,
                           &gpu.forward.compressed_v, &gpu.forward.row_max,    &gpu.forward.row_sum};
    const Tensor* want[] = {&ref.out,          &ref.branch_out, &ref.compressed_k,
                            &ref.compressed_v, &ref.row_max,    &ref.row_sum};
    for (size_t i = 0; i < std::size(names); ++i)
      EXPECT_TRUE(close(*got[i], *want[i], dtype, c.name + " " + names[i])) << names[i];
    gpu_backward(gin, dout.to(dtype).to(Device::cuda(0)), c.config, gpu);
    const ops::NsaGrads want_grads = cpu_backward(dout, in, ref, c.config);
    const char* grad_names[] = {"dq", "dk", "dv", "dgates", "dk_pos", "dk_weight", "dv_pos", "dv_weight"};
    const std::vector<Tensor> got_list = gpu.grads.list(), want_list = want_grads.list();
    for (size_t i = 0; i < got_list.size(); ++i) {
      // dk_pos is 0 in exact arithmetic (pos_k moves every compressed key by the same W·pos, and a softmax ignores a
      // shift common to its scores), so it is all rounding of sums whose terms are as large as dk_weight's (f32
      // and the f32 reference alike: 1.7e-4 absolute at T 600, G 16, max|dk_weight| 51): measured in that unit.
      const double unit = i == 4 ? std::max(1.0, largest_abs(want_list[5])) : 1.0;
      EXPECT_TRUE(close(got_list[i], want_list[i], dtype, c.name + " " + grad_names[i], unit)) << grad_names[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaNsaKernels,
    ::testing::Values(NsaGpuCase{"t1_g1_d64_paper_blocks", 1, 1, 1, 1, 64, 64, nsa_config(32, 16, 64, 16, 512)},
                      NsaGpuCase{"t17_g2_d64", 1, 17, 2, 1, 64, 64, nsa_config(8, 4, 8, 4, 12)},
                      NsaGpuCase{"t65_g3_l_not_multiple_of_d", 1, 65, 3, 1, 64, 64, nsa_config(7, 3, 5, 4, 10, 0.7)},
                      NsaGpuCase{"t63_g4_d128", 1, 63, 4, 1, 128, 128, nsa_config(8, 4, 8, 4, 12)},
                      NsaGpuCase{"t64_g4_d192_v128", 1, 64, 8, 2, 192, 128, nsa_config(8, 4, 8, 5, 16)},
                      NsaGpuCase{"t127_g1_d64_b2", 2, 127, 2, 2, 64, 64, nsa_config(16, 8, 16, 4, 32)},
                      NsaGpuCase{"t300_g2_d64_many_candidates", 1, 300, 4, 2, 64, 64, nsa_config(8, 4, 4, 6, 20)},
                      NsaGpuCase{"t600_g16_d128", 1, 600, 16, 1, 128, 128, nsa_config(32, 16, 64, 8, 256)},
                      NsaGpuCase{"t1000_g2_d192_v128_paper", 1, 1000, 4, 2, 192, 128, nsa_config(32, 16, 64, 16, 512)},
                      NsaGpuCase{"t1000_g1_d128", 1, 1000, 2, 2, 128, 128, nsa_config(32, 16, 64, 16, 100)},
                      NsaGpuCase{"t4099_g2_d64", 1, 4099, 4, 2, 64, 64, nsa_config(32, 16, 64, 8, 128)},
                      // The tensor-core key side's spans of 2,048 list entries: each 64-key tile overlaps 4 selection
                      // blocks and block 0's list holds all 4099 queries, so tile 0's third span takes that list's last
                      // 3 entries (a pair, then one alone) and runs on into the next lists.
                      NsaGpuCase{"t4099_g1_d64_spans_across_lists", 1, 4099, 2, 2, 64, 64, nsa_config(16, 8, 16, 8, 64)},
                      // Head dims that are not multiples of 8: bf16 runs the FMA forward, not the tensor cores.
                      NsaGpuCase{"t100_g2_d36_v20_fma_forward", 1, 100, 4, 2, 36, 20, nsa_config(8, 4, 8, 4, 12)}),
    [](const ::testing::TestParamInfo<NsaGpuCase>& info) { return info.param.name; });

class CudaNsa : public test::GpuTest<> {};

// One branch at a time (the others' gate logits −inf), B = H = 1, T = 32, and a K that is the identity: the
// layout pitfalls of issue 7 show up here first. f32 runs the FMA kernels, bf16 the tensor-core forward.
TEST_F(CudaNsa, OneBranchAtATimeAndAnIdentityK) {
  const NsaGpuCase c{"t32", 1, 32, 1, 1, 64, 64, nsa_config(8, 4, 8, 4, 12)};
  for (DType dtype : {DType::f32, DType::bf16})
  for (int64_t branch = 0; branch < 3; ++branch)
    for (bool identity : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " branch " + std::to_string(branch) + (identity ? " identity k" : ""));
      ops::NsaInputs in = make_inputs(c);
      std::vector<double> gates = in.gates.to_vector<double>();
      for (size_t i = 0; i < gates.size(); ++i)
        if (int64_t(i % 3) != branch) gates[i] = -INFINITY;
      in.gates = Tensor::from_vector(gates, in.gates.shape());
      if (identity) {
        std::vector<double> k(size_t(32 * 64), 0.0);
        for (int64_t t = 0; t < 32; ++t) k[size_t(t * 64 + t)] = 1.0;
        in.k = Tensor::from_vector(k, in.k.shape());
      }
      const ops::NsaOutput ref = cpu_forward(in, c.config, nullptr);
      GpuRun gpu;
      gpu_forward(on(in, dtype, Device::cuda(0)), c.config, gpu);
      EXPECT_TRUE(test::bit_equal(gpu.forward.selected, ref.selected));
      EXPECT_TRUE(close(gpu.forward.out, ref.out, dtype));
      const Tensor dout = bf16_values({1, 32, 1, 64});
      gpu_backward(on(in, dtype, Device::cuda(0)), dout.to(dtype).to(Device::cuda(0)), c.config, gpu);
      const std::vector<Tensor> got = gpu.grads.list(), want = cpu_backward(dout, in, ref, c.config).list();
      for (size_t i = 0; i < got.size(); ++i)  // dk_pos in dk_weight's unit, as above
        EXPECT_TRUE(close(got[i], want[i], dtype, "", i == 4 ? std::max(1.0, largest_abs(want[5])) : 1.0))
            << "gradient " << i;
    }
}

// Every selection score equal (all compressed keys zero): the tied free blocks must be the lowest indices, as
// the reference's rule.
TEST_F(CudaNsa, TiesGoToTheLowerBlock) {
  const NsaGpuCase c{"t200", 1, 200, 2, 1, 64, 64, nsa_config(8, 4, 8, 5, 16)};
  ops::NsaInputs in = make_inputs(c);
  in.k_weight = Tensor::zeros(in.k_weight.shape(), DType::f64);
  const ops::NsaOutput ref = cpu_forward(in, c.config, nullptr);
  for (DType dtype : {DType::f32, DType::bf16}) {  // the FMA kernels, the tensor-core forward
    SCOPED_TRACE(dtype_name(dtype));
    GpuRun gpu;
    gpu_forward(on(in, dtype, Device::cuda(0)), c.config, gpu);
    EXPECT_TRUE(test::bit_equal(gpu.forward.selected, ref.selected));
  }
}

// The op dispatches to the kernels: same bits as the direct call, for contiguous and for strided q, k, v (slices
// of one fused tensor); autograd's backward on the GPU gives the op's gradients.
TEST_F(CudaNsa, OpAndAutogradDispatchToTheKernels) {
  const NsaGpuCase c{"t100", 2, 100, 4, 2, 64, 64, nsa_config(16, 8, 16, 4, 40)};
  ops::NsaInputs in = make_inputs(c);
  const Tensor qkv64 = bf16_values({2, 100, 8, 64});  // q, k, v fused: heads [0, 4), [4, 6), [6, 8)
  in.q = qkv64.slice(2, 0, 4).contiguous(), in.k = qkv64.slice(2, 4, 6).contiguous();
  in.v = qkv64.slice(2, 6, 8).contiguous();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const ops::NsaInputs gin = on(in, dtype, Device::cuda(0));
    GpuRun direct;
    gpu_forward(gin, c.config, direct);
    const ops::NsaOutput op = ops::nsa(gin, c.config);
    EXPECT_TRUE(test::bit_equal(op.out, direct.forward.out));
    EXPECT_TRUE(test::bit_equal(op.selected, direct.forward.selected));
    // q, k, v as slices of the fused [B, T, Hq + 2·Hkv, D] tensor.
    const Tensor qkv = qkv64.to(dtype).to(Device::cuda(0));
    ops::NsaInputs strided = gin;
    strided.q = qkv.slice(2, 0, 4), strided.k = qkv.slice(2, 4, 6), strided.v = qkv.slice(2, 6, 8);
    const ops::NsaOutput op_strided = ops::nsa(strided, c.config);
    EXPECT_TRUE(test::bit_equal(op_strided.out, op.out));
    const Tensor dout = bf16_values({2, 100, 4, 64}).to(dtype).to(Device::cuda(0));
    const ops::NsaGrads g = ops::nsa_backward(dout, gin, op, c.config);
    const ops::NsaGrads g_strided = ops::nsa_backward(dout, strided, op_strided, c.config);
    gpu_backward(gin, dout, c.config, direct);
    const std::vector<Tensor> a = g.list(), b = g_strided.list(), d = direct.grads.list();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(test::bit_equal(a[i], d[i])) << "gradient " << i;
      EXPECT_TRUE(test::bit_equal(b[i], d[i])) << "gradient " << i << " (strided)";
    }
    std::vector<autograd::Variable> vars;
    for (const Tensor& t : {gin.q, gin.k, gin.v, gin.gates, gin.k_pos, gin.k_weight, gin.v_pos, gin.v_weight})
      vars.push_back(autograd::Variable(t, true));
    autograd::Variable out =
        autograd::nsa({vars[0], vars[1], vars[2], vars[3], vars[4], vars[5], vars[6], vars[7]}, c.config);
    autograd::backward(out, dout);
    for (size_t i = 0; i < vars.size(); ++i) EXPECT_TRUE(test::bit_equal(vars[i].grad(), d[i])) << "gradient " << i;
  }
}

// Deterministic: the forward and the backward twice on the same inputs give the same bits.
TEST_F(CudaNsa, SameBitsTwice) {
  const NsaGpuCase c{"t1000", 1, 1000, 8, 2, 128, 128, nsa_config(32, 16, 64, 16, 256)};
  const ops::NsaInputs in = make_inputs(c);
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const ops::NsaInputs gin = on(in, dtype, Device::cuda(0));
    const Tensor dout = bf16_values({1, 1000, 8, 128}).to(dtype).to(Device::cuda(0));
    GpuRun first, second;
    gpu_forward(gin, c.config, first);
    gpu_forward(gin, c.config, second);
    EXPECT_TRUE(test::bit_equal(first.forward.out, second.forward.out));
    EXPECT_TRUE(test::bit_equal(first.forward.selected, second.forward.selected));
    gpu_backward(gin, dout, c.config, first);
    gpu_backward(gin, dout, c.config, second);
    const std::vector<Tensor> a = first.grads.list(), b = second.grads.list();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(test::bit_equal(a[i], b[i])) << "gradient " << i;
  }
}

TEST_F(CudaNsa, HeadDimsBeyondTheKernelsRaise) {
  const NsaGpuCase c{"wide", 1, 8, 1, 1, 264, 64, nsa_config(4, 2, 4, 3, 4)};
  const ops::NsaInputs gin = on(make_inputs(c), DType::f32, Device::cuda(0));
  EXPECT_ALPHA_ERROR(ops::nsa(gin, c.config), ShapeError, "[nsa]", "'q'", "at most 256", "264");
}

// A group of 64 query heads at head dim 256 asks about 270 KB of shared memory a block of the query kernels, more than
// an H100 or H200 offers (227 KB): the error says so and names what the caller can change.
TEST_F(CudaNsa, SharedMemoryBeyondTheDeviceRaisesNamingWhatToChange) {
  const NsaGpuCase c{"wide_group", 1, 8, 64, 1, 256, 256, nsa_config(4, 2, 4, 3, 4)};
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const ops::NsaInputs gin = on(make_inputs(c), dtype, Device::cuda(0));
    EXPECT_ALPHA_ERROR(ops::nsa(gin, c.config), BackendError, "[nsa]", "shared memory", "bytes per block",
                       "fewer query heads per kv head");
  }
}

// Runs on the CPU: the dtypes the CPU backend lacks still raise typed errors.
TEST(NsaDispatch, CpuBf16Raises) {
  const NsaGpuCase c{"t8", 1, 8, 2, 1, 8, 8, nsa_config(4, 2, 4, 3, 4)};
  const ops::NsaInputs in = on(make_inputs(c), DType::bf16, Device::cpu());
  EXPECT_ALPHA_ERROR(ops::nsa(in, c.config), DTypeError, "[nsa]", "'q'", "bf16");
}

}  // namespace
}  // namespace alpha
