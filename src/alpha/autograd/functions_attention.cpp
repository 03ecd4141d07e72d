#include "alpha/autograd/functions.h"

#include <array>
#include <string>

#include "alpha/core/error.h"

namespace alpha::autograd {

namespace {

using ForwardOp = ops::AttentionOutput (*)(const Tensor&, const Tensor&, const Tensor&, const ops::AttentionConfig&);
using BackwardOp = ops::AttentionGrads (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                           const Tensor&, const Tensor&, const ops::AttentionConfig&,
                                           const ops::AttentionGrads*);

// One attention implementation's forward and backward ops (ops/attention.h) as a differentiable function of
// `inputs`, whose values `split` turns into q, k and v; `gradients(values, run)` returns the inputs' gradients,
// calling run(into) for the backward, which writes dq, dk and dv into `into`'s tensors (fresh ones for
// nullptr). The backward reuses the forward's output and row statistics instead of recomputing the softmax;
// the kernels compute dq, dk and dv in one pass, so all are returned whichever inputs need them.
template <class Split, class Gradients>
Variable attention_with(const char* name, ForwardOp forward_op, BackwardOp backward_op,
                        const std::vector<Variable>& inputs, Split split, Gradients gradients,
                        const ops::AttentionConfig& config) {
  std::vector<Tensor> values;
  for (const Variable& input : inputs) values.push_back(input.value());
  const auto [q, k, v] = split(values);
  ops::AttentionOutput forward = forward_op(q, k, v, config);
  return record(name, forward.out, inputs, [&] {
    return BackwardFn(
        [values, split, gradients, forward, config, backward_op](const Tensor& g, const std::vector<bool>&) {
          const std::array<Tensor, 3> qkv = split(values);
          auto run = [&](const ops::AttentionGrads* into) {
            return backward_op(g, qkv[0], qkv[1], qkv[2], forward.out, forward.row_max, forward.row_sum, config, into);
          };
          return gradients(values, run);
        });
  });
}

Variable separate_attention(const char* name, ForwardOp forward_op, BackwardOp backward_op, const Variable& q,
                            const Variable& k, const Variable& v, const ops::AttentionConfig& config) {
  return attention_with(
      name, forward_op, backward_op, {q, k, v},
      [](const std::vector<Tensor>& x) { return std::array<Tensor, 3>{x[0], x[1], x[2]}; },
      [](const std::vector<Tensor>&, const auto& run) {
        const ops::AttentionGrads g = run(nullptr);
        return std::vector<Tensor>{g.dq, g.dk, g.dv};
      },
      config);
}

}  // namespace

Variable attention_materialized(const Variable& q, const Variable& k, const Variable& v,
                                const ops::AttentionConfig& config) {
  return separate_attention("attention_materialized", &ops::attention_materialized,
                            &ops::attention_materialized_backward, q, k, v, config);
}

Variable flash_attention(const Variable& q, const Variable& k, const Variable& v, const ops::AttentionConfig& config) {
  return separate_attention("flash_attention", &ops::flash_attention, &ops::flash_attention_backward, q, k, v, config);
}

Variable self_attention(const Variable& qkv, int64_t n_head, int64_t n_kv_head, const ops::AttentionConfig& config,
                        AttentionKernel kernel) {
  constexpr const char* kOp = "self_attention";
  if (qkv.shape().size() != 3)
    raise<ShapeError>(kOp, "qkv", "3 dimensions [B, T, (Hq + 2·Hkv)·D]", shape_str(qkv.shape()));
  if (n_head < 1 || n_kv_head < 1 || n_head % n_kv_head != 0)
    raise<ValueError>(kOp, "n_head", "a multiple of n_kv_head >= 1",
                      std::to_string(n_head) + " heads over " + std::to_string(n_kv_head));
  const int64_t heads = n_head + 2 * n_kv_head, width = qkv.size(2);
  if (width % heads != 0)
    raise<ShapeError>(kOp, "qkv", "a last dimension that is a multiple of Hq + 2·Hkv = " + std::to_string(heads),
                      shape_str(qkv.shape()));
  const int64_t D = width / heads;
  // The three head groups of a [B, T, (Hq + 2·Hkv)·D] tensor as [B, T, H, D] views (view, not reshape, which
  // would copy a strided slice).
  auto split = [=](const std::vector<Tensor>& x) {
    const Tensor& fused = x[0];
    const int64_t B = fused.size(0), T = fused.size(1), q_end = n_head * D, k_end = q_end + n_kv_head * D;
    return std::array<Tensor, 3>{fused.slice(2, 0, q_end).view({B, T, n_head, D}),
                                 fused.slice(2, q_end, k_end).view({B, T, n_kv_head, D}),
                                 fused.slice(2, k_end, width).view({B, T, n_kv_head, D})};
  };
  // The backward writes dq, dk and dv straight into the views of a fresh fused gradient, which cover it whole:
  // each element is written once, nothing is zeroed, summed or copied.
  auto gradients = [split](const std::vector<Tensor>& x, const auto& run) {
    Tensor dqkv = Tensor::empty(x[0].shape(), x[0].dtype(), x[0].device());
    const auto [dq, dk, dv] = split({dqkv});
    const ops::AttentionGrads into{dq, dk, dv};
    run(&into);
    return std::vector<Tensor>{dqkv};
  };
  if (kernel == AttentionKernel::flash)
    return attention_with("flash_attention", &ops::flash_attention, &ops::flash_attention_backward, {qkv}, split,
                          gradients, config);
  return attention_with("attention_materialized", &ops::attention_materialized, &ops::attention_materialized_backward,
                        {qkv}, split, gradients, config);
}

}  // namespace alpha::autograd
