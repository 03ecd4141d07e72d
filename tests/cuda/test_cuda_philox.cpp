// The dropout, optimiser and attention ops on a GPU against the same ops on the CPU: dispatch by the
// tensors' device, the claims of exact agreement (dropout masks and values, AdamW, clipping by a host or a
// device norm), the materialising attention within tolerance, determinism of the grad norm and of the
// attention backward, the multi-tensor optimiser kernels (one launch for a list) against the single-tensor
// ones bit for bit, and the errors. The kernels themselves are checked in depth by the harness
// (alpha/check/checks_{dropout,optim,attention}.cpp).
//
// Every test skips itself (GTEST_SKIP, which CTest reports as skipped) in a build without CUDA or on a
// machine without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "alpha/kernels/optim.h"
#include "alpha/ops/attention.h"
#include "alpha/ops/check.h"
#include "alpha/ops/dropout.h"
#include "alpha/ops/optim.h"
#include "support/adamw_configs.h"
#include "support/checks.h"
#include "support/gpu.h"

namespace alpha {
namespace {

class CudaPhilox : public test::GpuTest<> {};

#if ALPHA_WITH_CUDA
const Device kGpu = Device::cuda(0);

const std::vector<DType> kAllGpuDtypes(std::begin(test::kGpuDtypes), std::end(test::kGpuDtypes));

// Sizes of a list: one element, odd sizes, and one of ~490 chunks of 2048 (kernels/cuda/optim.cu).
const std::vector<int64_t> kListSizes = {1, 17, 1000, 4099, 1000003};

// More tensors than one launch takes, of sizes around a chunk.
std::vector<int64_t> many_sizes() {
  std::vector<int64_t> sizes;
  const int64_t cycle[] = {1, 17, 2047, 2048, 2049, 4099};
  for (int k = 0; k < 2 * kernels::cuda::kTensorsPerLaunch + 7; ++k) sizes.push_back(cycle[k % 6]);
  return sizes;
}

// Fresh random GPU tensors of the sizes (a dtype per tensor, cycling).
std::vector<Tensor> gpu_list(const std::vector<int64_t>& sizes, const std::vector<DType>& dtypes, double lo = -1.0,
                             double hi = 1.0) {
  std::vector<Tensor> list;
  for (size_t k = 0; k < sizes.size(); ++k)
    list.push_back(test::random({sizes[k]}, dtypes[k % dtypes.size()], lo, hi).to(kGpu));
  return list;
}

std::vector<Tensor> clones(const std::vector<Tensor>& list) {
  std::vector<Tensor> out;
  for (const Tensor& t : list) out.push_back(t.clone());
  return out;
}

// The list op (one launch per dtype pair) against the single-tensor op on each tensor in turn, bit for bit;
// params and grads in the dtypes given per tensor, compute copies (in the grad's dtype) poisoned.
void expect_list_step_matches(const std::vector<int64_t>& sizes, const std::vector<DType>& param_dtypes,
                              const std::vector<DType>& grad_dtypes,
                              const std::vector<std::optional<DType>>& copy_dtypes = {}) {
  // copy_dtypes: the compute copies' dtypes, cycling (nullopt: that tensor has none); empty: no copies at all.
  std::vector<Tensor> params = gpu_list(sizes, param_dtypes), grads = gpu_list(sizes, grad_dtypes);
  std::vector<Tensor> ms = gpu_list(sizes, param_dtypes, -0.1, 0.1), vs = gpu_list(sizes, param_dtypes, 0.01, 1.0);
  const bool with_copies = !copy_dtypes.empty();
  std::vector<Tensor> copies;
  for (size_t k = 0; k < sizes.size() && with_copies; ++k) {
    const std::optional<DType> dtype = copy_dtypes[k % copy_dtypes.size()];
    copies.push_back(dtype ? test::poisoned({sizes[k]}, *dtype).to(kGpu) : Tensor());
  }
  std::vector<Tensor> p1 = clones(params), m1 = clones(ms), v1 = clones(vs), c1;
  for (const Tensor& c : copies) c1.push_back(c.defined() ? c.clone() : Tensor());
  const std::vector<ops::AdamWConfig> configs = test::list_configs(sizes.size());
  if (with_copies) ops::adamw_step(params, grads, ms, vs, copies, configs, 0.7);
  else ops::adamw_step(params, grads, ms, vs, configs, 0.7);
  for (size_t k = 0; k < sizes.size(); ++k) {
    const bool copied = with_copies && copies[k].defined();
    if (copied) ops::adamw_step(p1[k], grads[k], m1[k], v1[k], c1[k], configs[k], 0.7);
    else ops::adamw_step(p1[k], grads[k], m1[k], v1[k], configs[k], 0.7);
    SCOPED_TRACE("tensor " + std::to_string(k) + " of " + std::to_string(sizes[k]) + " elements");
    EXPECT_TRUE(test::bit_equal(params[k], p1[k].to(Device::cpu())));
    EXPECT_TRUE(test::bit_equal(ms[k], m1[k].to(Device::cpu())));
    EXPECT_TRUE(test::bit_equal(vs[k], v1[k].to(Device::cpu())));
    if (copied) {
      EXPECT_TRUE(test::bit_equal(copies[k], c1[k].to(Device::cpu())));
      EXPECT_TRUE(test::bit_equal(copies[k], params[k].to(copies[k].dtype()).to(Device::cpu())));
    }
  }
}

// The multi-tensor sum of squares and scalings against the single-tensor kernels, tensor by tensor, into
// poisoned outputs.
template <class T>
void expect_multi_kernels_match(const std::vector<int64_t>& sizes) {
  const DType dtype = dtype_of<T>;
  std::vector<Tensor> xs = gpu_list(sizes, {dtype}, -3, 3);
  const int64_t count = int64_t(sizes.size());
  Tensor multi_sums = test::poisoned({count}, DType::f64).to(kGpu), single_sums = multi_sums.clone();
  std::vector<kernels::SumSquaresArgs<T>> squares;
  for (size_t k = 0; k < sizes.size(); ++k) {
    squares.push_back({xs[k].data<T>(), multi_sums.data<double>() + k, sizes[k]});
    kernels::cuda::sum_squares(kernels::SumSquaresArgs<T>{xs[k].data<T>(), single_sums.data<double>() + k, sizes[k]},
                               Stream{});
  }
  kernels::cuda::multi_sum_squares(std::span<const kernels::SumSquaresArgs<T>>(squares), Stream{});
  EXPECT_TRUE(test::bit_equal(multi_sums, single_sums.to(Device::cpu())));
  // Scaling by a host factor per tensor (into poisoned outputs), and in place by a factor on the device.
  Tensor factor = Tensor::full({}, 0.3, DType::f64).to(kGpu);
  std::vector<Tensor> multi_out, single_out, multi_in_place = clones(xs), single_in_place = clones(xs);
  std::vector<kernels::ScaleArgs<T>> scales;
  std::vector<kernels::ScaleByArgs<T>> scale_bys;
  for (size_t k = 0; k < sizes.size(); ++k) {
    multi_out.push_back(test::poisoned({sizes[k]}, dtype).to(kGpu));
    single_out.push_back(test::poisoned({sizes[k]}, dtype).to(kGpu));
    const float alpha = float(0.3 + 0.01 * double(k % 50));
    scales.push_back({xs[k].data<T>(), multi_out[k].data<T>(), alpha, sizes[k]});
    kernels::cuda::scale(kernels::ScaleArgs<T>{xs[k].data<T>(), single_out[k].data<T>(), alpha, sizes[k]}, Stream{});
    scale_bys.push_back({multi_in_place[k].data<T>(), factor.data<double>(), sizes[k]});
    kernels::cuda::scale_by(kernels::ScaleByArgs<T>{single_in_place[k].data<T>(), factor.data<double>(), sizes[k]},
                            Stream{});
  }
  kernels::cuda::multi_scale(std::span<const kernels::ScaleArgs<T>>(scales), Stream{});
  kernels::cuda::multi_scale_by(std::span<const kernels::ScaleByArgs<T>>(scale_bys), Stream{});
  for (size_t k = 0; k < sizes.size(); ++k) {
    EXPECT_TRUE(test::bit_equal(multi_out[k], single_out[k].to(Device::cpu()))) << k;
    EXPECT_TRUE(test::bit_equal(multi_in_place[k], single_in_place[k].to(Device::cpu()))) << k;
  }
}

#endif

TEST_F(CudaPhilox, DropoutOpsMatchTheCpuBitForBit) {
#if ALPHA_WITH_CUDA
  // p = 0 takes the kernels' path without draws.
  for (const double p : {0.3, 0.0})
    for (DType dtype : test::kGpuDtypes) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " p " + std::to_string(p));
      const ops::DropoutConfig config{p, test::fresh_seed(), 4099};
      EXPECT_TRUE(test::bit_equal(ops::dropout_mask({33, 65}, config, kGpu), ops::dropout_mask({33, 65}, config)));
      // Inputs rounded to the dtype; the CPU computes in f32 and rounds to the dtype once, as the GPU does.
      Tensor x = test::random({33, 65}, dtype).to(DType::f32), r = test::random({33, 65}, dtype).to(DType::f32);
      Tensor gx = x.to(dtype).to(kGpu), gr = r.to(dtype).to(kGpu);
      Tensor y = ops::dropout(gx, config);
      EXPECT_EQ(y.device(), kGpu);
      EXPECT_EQ(y.dtype(), dtype);
      EXPECT_TRUE(test::bit_equal(y, ops::dropout(x, config).to(dtype)));
      EXPECT_TRUE(test::bit_equal(ops::dropout_backward(gx, config), ops::dropout_backward(x, config).to(dtype)));
      EXPECT_TRUE(test::bit_equal(ops::residual_dropout_add(gr, gx, config),
                                  ops::residual_dropout_add(r, x, config).to(dtype)));
      // A strided device input is made contiguous first; the mask follows the logical (row-major) index.
      Tensor xt = x.transpose(0, 1);
      EXPECT_TRUE(test::bit_equal(ops::dropout(gx.transpose(0, 1), config), ops::dropout(xt, config).to(dtype)));
    }
#endif
}

TEST_F(CudaPhilox, AdamWOpsMatchTheCpuBitForBit) {
#if ALPHA_WITH_CUDA
  const ops::AdamWConfig config{1e-2, 0.9, 0.95, 1e-8, 0.1, 7};
  for (DType dtype : test::kGpuDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    // The CPU runs in f32 on the dtype's values; its results rounded to the dtype are the GPU's.
    Tensor param = test::random({7, 130}, dtype).to(DType::f32), grad = test::random({7, 130}, dtype).to(DType::f32);
    Tensor m = test::random({7, 130}, dtype, -0.1, 0.1).to(DType::f32);
    Tensor v = test::random({7, 130}, dtype, 0.01, 1.0).to(DType::f32);
    Tensor gp = param.to(dtype).to(kGpu), gg = grad.to(dtype).to(kGpu);
    Tensor gm = m.to(dtype).to(kGpu), gv = v.to(dtype).to(kGpu);
    ops::adamw_step(gp, gg, gm, gv, config, 0.7);
    ops::adamw_step(param, grad, m, v, config, 0.7);
    EXPECT_TRUE(test::bit_equal(gp, param.to(dtype)));
    EXPECT_TRUE(test::bit_equal(gm, m.to(dtype)));
    EXPECT_TRUE(test::bit_equal(gv, v.to(dtype)));
  }
  // Mixed precision: f32 master, bf16/f16 grad and compute copy.
  for (DType low : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(low));
    Tensor param = test::random({1000003}), grad = test::random({1000003}, low);
    Tensor m = test::random({1000003}, DType::f32, -0.1, 0.1), v = test::random({1000003}, DType::f32, 0.01, 1.0);
    Tensor gp = param.to(kGpu), gg = grad.to(kGpu), gm = m.to(kGpu), gv = v.to(kGpu);
    Tensor copy = Tensor::zeros({1000003}, low), gcopy = Tensor::zeros({1000003}, low, kGpu);
    ops::adamw_step(gp, gg, gm, gv, gcopy, config);
    ops::adamw_step(param, grad, m, v, copy, config);
    EXPECT_TRUE(test::bit_equal(gp, param));
    EXPECT_TRUE(test::bit_equal(gm, m));
    EXPECT_TRUE(test::bit_equal(gv, v));
    EXPECT_TRUE(test::bit_equal(gcopy, copy));
  }
#endif
}

// Stochastic rounding of the compute copy: the GPU step's copy (single-tensor and list ops, bf16 and f16, a
// shard's offset) and stochastic_round's equal the CPU's bit for bit, special values included.
TEST_F(CudaPhilox, StochasticRoundingMatchesTheCpuBitForBit) {
#if ALPHA_WITH_CUDA
  for (DType low : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(low));
    const int64_t n = 1000003;
    Tensor param = test::random({n}, DType::f32, -2, 2), grad = test::random({n}, low);
    Tensor m = test::random({n}, DType::f32, -0.1, 0.1), v = test::random({n}, DType::f32, 0.01, 1.0);
    ops::AdamWConfig config{1e-2, 0.9, 0.95, 1e-8, 0.0, 7};
    config.stochastic_rounding = ops::StochasticRounding{99, 4, 12345};
    Tensor gp = param.to(kGpu), gg = grad.to(kGpu), gm = m.to(kGpu), gv = v.to(kGpu);
    Tensor copy = test::poisoned({n}, low), gcopy = test::poisoned({n}, low).to(kGpu);
    ops::adamw_step(gp, gg, gm, gv, gcopy, config);
    ops::adamw_step(param, grad, m, v, copy, config);
    EXPECT_TRUE(test::bit_equal(gp, param));
    EXPECT_TRUE(test::bit_equal(gcopy, copy));
    EXPECT_FALSE(test::bit_equal(copy, param.to(low))) << "rounded stochastically, not to nearest";
    // The list op (one multi-tensor launch per dtype) on tensors of several sizes, each its own bits.
    std::vector<Tensor> params, grads, ms, vs, copies, gparams, ggrads, gms, gvs, gcopies;
    std::vector<ops::AdamWConfig> configs;
    for (size_t k = 0; k < kListSizes.size(); ++k) {
      params.push_back(test::random({kListSizes[k]}));
      grads.push_back(test::random({kListSizes[k]}));
      ms.push_back(test::random({kListSizes[k]}, DType::f32, -0.1, 0.1));
      vs.push_back(test::random({kListSizes[k]}, DType::f32, 0.01, 1.0));
      copies.push_back(test::poisoned({kListSizes[k]}, low));
      for (auto [cpu, gpu] : {std::pair{&params, &gparams}, {&grads, &ggrads}, {&ms, &gms}, {&vs, &gvs},
                              {&copies, &gcopies}})
        gpu->push_back(cpu->back().to(kGpu));
      configs.push_back({1e-2, 0.9, 0.95, 1e-8, 0.1, 3});
      configs.back().stochastic_rounding = ops::StochasticRounding{5, uint32_t(k), 0};
    }
    ops::adamw_step(gparams, ggrads, gms, gvs, gcopies, configs);
    ops::adamw_step(params, grads, ms, vs, copies, configs);
    for (size_t k = 0; k < kListSizes.size(); ++k) EXPECT_TRUE(test::bit_equal(gcopies[k], copies[k])) << k;
    // stochastic_round (the copies a resumed run restores): the step's copy from the param it left, and
    // values with special ones among them: NaN, ±inf, the formats' largest values and beyond, subnormals, ±0.
    std::vector<Tensor> host = {param}, rounded = {test::poisoned({n}, low)};
    ops::stochastic_round(host, rounded, 7, {{99, 4, 12345}});
    EXPECT_TRUE(test::bit_equal(rounded[0], copy)) << "the step's copy is stochastic_round of its param";
    const float specials[] = {NAN,    INFINITY, -INFINITY, 3.3e38f,  -3.4e38f, 65510.0f, -65530.0f,
                              7e4f,   1e-40f,   -3e-6f,    0x1p-26f, 0.0f,     -0.0f};
    for (size_t i = 0; i < std::size(specials); ++i) host[0].data<float>()[i * 4099] = specials[i];
    std::vector<Tensor> device = {host[0].to(kGpu)}, grounded = {test::poisoned({n}, low).to(kGpu)};
    ops::stochastic_round(host, rounded, 7, {{99, 4, 12345}});
    ops::stochastic_round(device, grounded, 7, {{99, 4, 12345}});
    EXPECT_TRUE(test::bit_equal(grounded[0], rounded[0]));
  }
#endif
}

TEST_F(CudaPhilox, GradNormAndClippingOnTheDevice) {
#if ALPHA_WITH_CUDA
  for (DType dtype : test::kGpuDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<Tensor> host, a, b;
    for (int64_t n : {int64_t(5), int64_t(4099), int64_t(300001)}) {
      host.push_back(test::random({n}, dtype, -2, 2).to(DType::f64));
      a.push_back(host.back().to(dtype).to(kGpu));
      b.push_back(host.back().to(dtype).to(kGpu));
    }
    const double want = ops::global_grad_norm(host);
    Tensor norm = ops::global_grad_norm_tensor(a);
    EXPECT_EQ(norm.device(), kGpu);
    EXPECT_EQ(norm.dtype(), DType::f64);
    const double got = norm.to(Device::cpu()).item();
    test::Tolerance tol = test::tolerance("cuda.grad_norm", dtype);
    EXPECT_NEAR(got, want, tol.abs + tol.rel * want);
    // Deterministic: the same bits again, through either entry point.
    EXPECT_EQ(ops::global_grad_norm(a), got);
    // Clipping by the device norm and by the host norm give the same coefficient and grads.
    Tensor coefficient = ops::clip_grad_norm(a, 0.5 * want, norm);
    EXPECT_EQ(coefficient.device(), kGpu);
    EXPECT_EQ(coefficient.to(Device::cpu()).item(), ops::clip_grad_norm(b, 0.5 * want, got));
    for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(test::bit_equal(a[k], b[k].to(Device::cpu())));
  }
#endif
}

TEST_F(CudaPhilox, ListAdamWMatchesPerTensorStepsBitForBit) {
#if ALPHA_WITH_CUDA
  for (DType dtype : test::kGpuDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    expect_list_step_matches(kListSizes, {dtype}, {dtype});
  }
  // Mixed precision: f32 masters, bf16 and f16 grads and compute copies in one list (a launch per pair).
  expect_list_step_matches(kListSizes, {DType::f32}, {DType::bf16, DType::f16}, {DType::bf16, DType::f16});
  // The trainer's case: f32 masters and grads, bf16 or f16 copies, and tensors without one in the same list.
  expect_list_step_matches(kListSizes, {DType::f32}, {DType::f32}, {DType::bf16, std::nullopt, DType::f16});
  // Every GPU dtype in one list; more tensors than one launch takes.
  expect_list_step_matches(many_sizes(), kAllGpuDtypes, kAllGpuDtypes);
  expect_list_step_matches(many_sizes(), {DType::f32}, {DType::bf16}, {DType::bf16});
#endif
}

TEST_F(CudaPhilox, MultiTensorNormAndScalingKernelsMatchPerTensorKernelsBitForBit) {
#if ALPHA_WITH_CUDA
  for (const std::vector<int64_t>& sizes : {kListSizes, many_sizes()}) {
    SCOPED_TRACE(sizes.size());
    expect_multi_kernels_match<float>(sizes);
    expect_multi_kernels_match<bf16>(sizes);
    expect_multi_kernels_match<f16>(sizes);
  }
  // The ops on a list of every dtype: each sum in its tensor's slot, added in list order.
  std::vector<Tensor> grads = gpu_list(kListSizes, kAllGpuDtypes, -2, 2);
  Tensor squares = test::poisoned({int64_t(grads.size())}, DType::f64).to(kGpu);
  for (size_t k = 0; k < grads.size(); ++k)
    ops::dispatch_float("test", grads[k], [&]<class T>(const auto& where) {
      ALPHA_KERNEL(sum_squares)(where, kernels::SumSquaresArgs<T>{grads[k].data<T>(), squares.data<double>() + k,
                                                                  grads[k].numel()});
    });
  Tensor want = Tensor::empty({}, DType::f64, kGpu);
  kernels::cuda::grad_norm(kernels::GradNormArgs{squares.data<double>(), squares.numel(), want.data<double>()},
                           Stream{});
  EXPECT_TRUE(test::bit_equal(ops::global_grad_norm_tensor(grads), want.to(Device::cpu())));
#endif
}

TEST_F(CudaPhilox, MaterializedAttentionMatchesTheCpuReference) {
#if ALPHA_WITH_CUDA
  // GQA, causal with Tq < Tk, softcap and dropout; q, k, v slices of one fused tensor on each side.
  ops::AttentionConfig config;
  config.causal = true;
  config.softcap = 0.5;
  config.dropout_p = 0.1;
  config.dropout_seed = test::fresh_seed();
  const int64_t B = 2, T = 77, Hq = 8, Hkv = 2, D = 48;
  Tensor qkv = test::random({B, T, Hq + 2 * Hkv, D});
  Tensor dout = test::random({B, 40, Hq, D});
  for (DType dtype : test::kGpuDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor host = qkv.to(dtype).to(DType::f32), device = qkv.to(dtype).to(kGpu);
    auto split = [&](const Tensor& t) {  // q: the last 40 queries; k, v: all 77 keys
      return std::vector<Tensor>{t.slice(1, T - 40, T).slice(2, 0, Hq), t.slice(2, Hq, Hq + Hkv),
                                 t.slice(2, Hq + Hkv, Hq + 2 * Hkv)};
    };
    std::vector<Tensor> h = split(host), g = split(device);
    ops::AttentionOutput want = ops::attention_materialized(h[0], h[1], h[2], config);
    ops::AttentionOutput got = ops::attention_materialized(g[0], g[1], g[2], config);
    EXPECT_EQ(got.out.device(), kGpu);
    EXPECT_EQ(got.out.dtype(), dtype);
    EXPECT_EQ(got.row_max.dtype(), DType::f32);
    EXPECT_TRUE(test::all_close(got.out, want.out, "cuda.attention"));
    EXPECT_TRUE(test::all_close(got.row_max, want.row_max, "cuda.attention"));
    EXPECT_TRUE(test::all_close(got.row_sum, want.row_sum, "cuda.attention"));
    // Both backwards run on the CPU forward's results, out rounded to the dtype as the GPU holds it.
    Tensor out_in = want.out.to(dtype).to(DType::f32);
    Tensor gdout = dout.to(dtype).to(kGpu), hdout = dout.to(dtype).to(DType::f32);
    ops::AttentionGrads want_grads =
        ops::attention_materialized_backward(hdout, h[0], h[1], h[2], out_in, want.row_max, want.row_sum, config);
    Tensor g_out = out_in.to(dtype).to(kGpu), g_max = want.row_max.to(kGpu), g_sum = want.row_sum.to(kGpu);
    ops::AttentionGrads first =
        ops::attention_materialized_backward(gdout, g[0], g[1], g[2], g_out, g_max, g_sum, config);
    ops::AttentionGrads second =
        ops::attention_materialized_backward(gdout, g[0], g[1], g[2], g_out, g_max, g_sum, config);
    EXPECT_TRUE(test::all_close(first.dq, want_grads.dq, "cuda.attention"));
    EXPECT_TRUE(test::all_close(first.dk, want_grads.dk, "cuda.attention"));
    EXPECT_TRUE(test::all_close(first.dv, want_grads.dv, "cuda.attention"));
    // dk and dv sum over each GQA group in a fixed order: the same bits on every run.
    EXPECT_TRUE(test::bit_equal(second.dq, first.dq.to(Device::cpu())));
    EXPECT_TRUE(test::bit_equal(second.dk, first.dk.to(Device::cpu())));
    EXPECT_TRUE(test::bit_equal(second.dv, first.dv.to(Device::cpu())));
  }
#endif
}

TEST_F(CudaPhilox, BadInputsRaise) {
#if ALPHA_WITH_CUDA
  const ops::DropoutConfig dropout{0.1, 1, 0};
  Tensor g = test::random({4, 4}).to(kGpu);
  EXPECT_ALPHA_ERROR(ops::residual_dropout_add(g, test::random({4, 4}), dropout), DeviceError, "[residual_dropout_add]",
                     "'x'", "cuda:0", "cpu");
  EXPECT_ALPHA_ERROR(ops::dropout(test::random({4}, DType::f64).to(kGpu), dropout), DTypeError, "[dropout]", "'x'",
                     "f32 or bf16 or f16", "f64");
  // AdamW: state on the param's device and dtype; mixed grads only for an f32 param.
  Tensor p = test::random({4, 4}).to(kGpu), m = test::random({4, 4}).to(kGpu);
  Tensor v = test::random({4, 4}, DType::f32, 0, 1).to(kGpu), v_cpu = test::random({4, 4}, DType::f32, 0, 1);
  ops::AdamWConfig config;
  EXPECT_ALPHA_ERROR(ops::adamw_step(p, test::random({4, 4}), m, v, config), DeviceError, "[adamw_step]", "'grad'");
  EXPECT_ALPHA_ERROR(ops::adamw_step(p, g, m, v_cpu, config), DeviceError, "[adamw_step]", "'v'");
  Tensor pb = p.to(DType::bf16), mb = m.to(DType::bf16), vb = v.to(DType::bf16);
  EXPECT_ALPHA_ERROR(ops::adamw_step(pb, g.to(DType::f16), mb, vb, config), DTypeError, "[adamw_step]", "'grad'",
                     "bf16", "f16");
  Tensor copy = Tensor::zeros({4, 4}, DType::bf16);  // on the CPU
  EXPECT_ALPHA_ERROR(ops::adamw_step(p, g.to(DType::bf16), m, v, copy, config), DeviceError, "[adamw_step]",
                     "'compute_copy'");
  // The list op: every tensor on the first param's device.
  std::vector<Tensor> ps = {p, p.clone()}, gs = {g, g.clone()}, ms = {m, m.clone()}, vs = {v, v.clone()};
  const std::vector<ops::AdamWConfig> configs = {config, config};
  std::vector<Tensor> ps_cpu = {p, test::random({4, 4})};
  EXPECT_ALPHA_ERROR(ops::adamw_step(ps_cpu, gs, ms, vs, configs), DeviceError, "[adamw_step]", "'params[1]'",
                     "cuda:0", "cpu");
  std::vector<Tensor> gs_cpu = {g, test::random({4, 4})};
  EXPECT_ALPHA_ERROR(ops::adamw_step(ps, gs_cpu, ms, vs, configs), DeviceError, "[adamw_step]", "'grads[1]'");
  std::vector<Tensor> copies = {g.to(DType::bf16), Tensor::zeros({4, 4}, DType::bf16)};
  std::vector<Tensor> bf16_grads = {g.to(DType::bf16), g.to(DType::bf16)};
  EXPECT_ALPHA_ERROR(ops::adamw_step(ps, bf16_grads, ms, vs, copies, configs), DeviceError, "[adamw_step]",
                     "'compute_copies[1]'");
  // Grad norm: one device for the whole list; a device norm for device grads.
  std::vector<Tensor> mixed = {g, test::random({3})};
  EXPECT_ALPHA_ERROR(ops::global_grad_norm(mixed), DeviceError, "[global_grad_norm]", "'grads[1]'");
  std::vector<Tensor> grads = {g};
  EXPECT_ALPHA_ERROR(ops::clip_grad_norm(grads, 1.0, Tensor::zeros({}, DType::f64)), DeviceError, "[clip_grad_norm]",
                     "'norm'", "cuda:0");
  // Attention: every operand on q's device; statistics in f32 on a GPU.
  Tensor q = test::random({1, 8, 2, 16}).to(kGpu), k = test::random({1, 8, 2, 16}).to(kGpu);
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, k, test::random({1, 8, 2, 16}), {}), DeviceError,
                     "[attention_materialized]", "'v'");
  Tensor q64 = test::random({1, 8, 2, 16}, DType::f64).to(kGpu);
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q64, q64, q64, {}), DTypeError, "[attention_materialized]", "'q'",
                     "f64");
  ops::AttentionOutput fwd = ops::attention_materialized(q.to(DType::bf16), k.to(DType::bf16), k.to(DType::bf16), {});
  EXPECT_EQ(fwd.row_sum.dtype(), DType::f32);
  Tensor qb = q.to(DType::bf16), kb = k.to(DType::bf16);
  EXPECT_ALPHA_ERROR(ops::attention_materialized_backward(fwd.out, qb, kb, kb, fwd.out, fwd.row_max,
                                                          fwd.row_sum.to(DType::bf16), {}),
                     DTypeError, "[attention_materialized_backward]", "'row_sum'", "f32", "bf16");
#endif
}

}  // namespace
}  // namespace alpha
