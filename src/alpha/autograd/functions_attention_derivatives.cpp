// Attention's JVP and HVP as autograd functions (functions.h says what is differentiable and how).
// attention_jvp records two nodes over one fused pass: out's (inputs q, k, v) and tangent_out's (inputs
// q, k, v, tq, tk, tv). Both save the pass's out and row statistics, from which attention's backward runs
// without recomputing the softmax.
#include <string>

#include "alpha/autograd/functions.h"
#include "alpha/ops/attention_hvp.h"
#include "alpha/ops/attention_jvp.h"

namespace alpha::autograd {

namespace {

// Attention's backward on the operands' device: flash on a GPU (O(T) memory), the reference on the CPU.
ops::AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const ops::AttentionOutput& forward, const ops::AttentionConfig& config) {
  if (q.device().is_cuda())
    return ops::flash_attention_backward(grad_out, q, k, v, forward.out, forward.row_max, forward.row_sum, config);
  return ops::attention_materialized_backward(grad_out, q, k, v, forward.out, forward.row_max, forward.row_sum, config);
}

}  // namespace

AttentionJvp attention_jvp(const Variable& q, const Variable& k, const Variable& v, const Variable& tq,
                           const Variable& tk, const Variable& tv, const ops::AttentionConfig& config,
                           const AttentionJvpOptions& options) {
  ops::AttentionJvpOutput pass =
      ops::attention_jvp_fused(q.value(), k.value(), v.value(), tq.value(), tk.value(), tv.value(), config);
  const ops::AttentionOutput forward{pass.out, pass.row_max, pass.row_sum};
  const Tensor qv = q.value(), kv = k.value(), vv = v.value();
  Variable out = record("attention_jvp.out", pass.out, {q, k, v}, [&] {
    return BackwardFn([qv, kv, vv, forward, config](const Tensor& g, const std::vector<bool>&) {
      ops::AttentionGrads grads = attention_backward(g, qv, kv, vv, forward, config);
      return std::vector<Tensor>{grads.dq, grads.dk, grads.dv};
    });
  });
  Variable tangent_out = record("attention_jvp.tangent_out", pass.tangent_out, {q, k, v, tq, tk, tv}, [&] {
    const Tensor tqv = tq.value(), tkv = tk.value(), tvv = tv.value();
    const double eps = options.hvp_eps;
    return BackwardFn(
        [qv, kv, vv, tqv, tkv, tvv, forward, config, eps](const Tensor& g, const std::vector<bool>& needs) {
          std::vector<Tensor> grads(6);
          if (needs[0] || needs[1] || needs[2]) {
            if (!(eps > 0))
              raise<ValueError>("attention_jvp", "options.hvp_eps",
                                "a step > 0 to differentiate tangent_out with respect to q, k or v (a Hessian-vector "
                                "product by central differences; docs/ATTENTION_DERIVATIVES.md gives a step per dtype)",
                                std::to_string(eps));
            ops::AttentionHvp h = ops::attention_hvp(qv, kv, vv, g, tqv, tkv, tvv, config, eps);
            grads[0] = h.hq, grads[1] = h.hk, grads[2] = h.hv;
          }
          if (needs[3] || needs[4] || needs[5]) {
            ops::AttentionGrads d = attention_backward(g, qv, kv, vv, forward, config);
            grads[3] = d.dq, grads[4] = d.dk, grads[5] = d.dv;
          }
          return grads;
        });
  });
  return {out, tangent_out};
}

AttentionHvp attention_hvp(const Variable& q, const Variable& k, const Variable& v, const Variable& grad_out,
                           const Variable& vq, const Variable& vk, const Variable& vv,
                           const ops::AttentionConfig& config, double eps) {
  if (needs_recording({q, k, v, grad_out, vq, vk, vv}))
    raise<ValueError>("attention_hvp", "q, k, v, grad_out, vq, vk, vv",
                      "inputs that need no gradient, or gradients disabled (NoGradGuard): the HVP is not "
                      "differentiable",
                      "an input that requires a gradient");
  ops::AttentionHvp h = ops::attention_hvp(q.value(), k.value(), v.value(), grad_out.value(), vq.value(), vk.value(),
                                           vv.value(), config, eps);
  return {Variable(h.hq), Variable(h.hk), Variable(h.hv)};
}

}  // namespace alpha::autograd
