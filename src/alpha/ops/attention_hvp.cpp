#include "alpha/ops/attention_hvp.h"

#include <cmath>
#include <string>
#include <tuple>

#include "alpha/kernels/attention_hvp.h"
#include "alpha/ops/attention_params.h"
#include "alpha/ops/check.h"
#include "alpha/ops/elementwise.h"

namespace alpha::ops {

namespace {

// Validates what both HVPs take: the attention inputs, grad_out shaped as the output, the direction shaped
// as (q, k, v) on their device in their dtype, and no dropout.
void check_hvp_inputs(std::string_view op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad_out,
                      const Tensor& vq, const Tensor& vk, const Tensor& vv, const AttentionConfig& config) {
  check_attention_inputs(op, q, k, v, config);
  const Shape out_shape = {q.size(0), q.size(1), q.size(2), v.size(3)};
  for (auto [name, t, shape] : {std::tuple<std::string_view, const Tensor&, const Shape&>{"grad_out", grad_out, out_shape},
                                {"vq", vq, q.shape()},
                                {"vk", vk, k.shape()},
                                {"vv", vv, v.shape()}}) {
    check_defined(op, name, t);
    check_same_device(op, name, t, q);
    check_same_dtype(op, name, t, q);
    check_shape(op, name, t, shape);
  }
  if (config.dropout_p != 0)
    raise<ValueError>(op, "config.dropout_p", "0 (the HVP of attention with dropout is not supported)",
                      std::to_string(config.dropout_p));
}

// The point, cotangent and direction of the central difference, in the dtype it computes in.
struct HvpPoint {
  Tensor q, k, v, grad_out, vq, vk, vv;
};

// ∇f at (q, k, v) + step·(vq, vk, vv): the forward's statistics recomputed at that point, then the backward
// with dout = grad_out. On a GPU flash attention (O(T) memory, never the Tq×Tk scores); on the CPU the
// reference (attention_materialized).
AttentionGrads gradient_at(const HvpPoint& x, const AttentionConfig& config, double step) {
  Tensor qs = x.q.clone(), ks = x.k.clone(), vs = x.v.clone();
  add_(qs, x.vq, step);
  add_(ks, x.vk, step);
  add_(vs, x.vv, step);
  const bool gpu = qs.device().is_cuda();
  const auto forward = gpu ? &flash_attention : &attention_materialized;
  const auto backward = gpu ? &flash_attention_backward : &attention_materialized_backward;
  AttentionOutput fwd = forward(qs, ks, vs, config);
  return backward(x.grad_out, qs, ks, vs, fwd.out, fwd.row_max, fwd.row_sum, config, nullptr);
}

// (plus − minus) / (2·eps), the difference taken first: it is exact where the two are within a factor of 2.
Tensor central_difference(Tensor plus, const Tensor& minus, double eps) {
  add_(plus, minus, -1.0);
  return scale(plus, 0.5 / eps);
}

}  // namespace

AttentionHvp attention_hvp(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad_out,
                           const Tensor& vq, const Tensor& vk, const Tensor& vv, const AttentionConfig& config,
                           double eps) {
  constexpr std::string_view op = "attention_hvp";
  check_hvp_inputs(op, q, k, v, grad_out, vq, vk, vv, config);
  if (!(eps > 0) || !std::isfinite(eps))
    raise<ValueError>(op, "eps", "a finite step > 0 (see docs/ATTENTION_DERIVATIVES.md for a value per dtype)",
                      std::to_string(eps));
  // On a GPU in f32 whatever the operands' dtype: differences of bf16/f16 gradients are rounding at any eps
  // (docs/ATTENTION_DERIVATIVES.md), and f32 flash attention takes every head dimension up to 256.
  const DType compute = q.device().is_cuda() ? DType::f32 : q.dtype();
  const HvpPoint x{q.to(compute),  k.to(compute),  v.to(compute), grad_out.to(compute),
                   vq.to(compute), vk.to(compute), vv.to(compute)};
  AttentionGrads plus = gradient_at(x, config, eps);
  AttentionGrads minus = gradient_at(x, config, -eps);
  return {central_difference(plus.dq, minus.dq, eps).to(q.dtype()),
          central_difference(plus.dk, minus.dk, eps).to(q.dtype()),
          central_difference(plus.dv, minus.dv, eps).to(q.dtype())};
}

AttentionHvp attention_hvp_exact(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad_out,
                                 const Tensor& vq, const Tensor& vk, const Tensor& vv, const AttentionConfig& config) {
  constexpr std::string_view op = "attention_hvp_exact";
  check_defined(op, "q", q);
  if (!q.device().is_cpu())
    raise<DeviceError>(op, "q", "a CPU tensor (the exact HVP is the f64 CPU oracle; attention_hvp runs on a GPU)",
                       q.device().str());
  check_dtype(op, "q", q, {DType::f64});
  check_hvp_inputs(op, q, k, v, grad_out, vq, vk, vv, config);
  // Contiguous copies, so that each direction is laid out as its operand (the strides params carry).
  Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous(), gc = grad_out.contiguous();
  Tensor vqc = vq.contiguous(), vkc = vk.contiguous(), vvc = vv.contiguous();
  AttentionHvp result{Tensor::empty(q.shape(), DType::f64), Tensor::empty(k.shape(), DType::f64),
                      Tensor::empty(v.shape(), DType::f64)};
  LaunchScope launch(op, q.device());
  kernels::cpu::attention_hvp_exact(kernels::AttentionHvpArgs{
      qc.data<double>(), kc.data<double>(), vc.data<double>(), gc.data<double>(), vqc.data<double>(),
      vkc.data<double>(), vvc.data<double>(), result.hq.data<double>(), result.hk.data<double>(),
      result.hv.data<double>(), attention_kernel_params<double>(qc, kc, vc, config)});
  return result;
}

}  // namespace alpha::ops
