#include "alpha/autograd/functions.h"

namespace alpha::autograd {

namespace {

// One attention implementation's forward and backward ops (ops/attention.h) as a differentiable function.
// The backward reuses the forward's output and row statistics instead of recomputing the softmax; the
// kernels compute dq, dk and dv in one pass, so all three are returned whichever inputs need them.
template <class Forward, class Backward>
Variable attention_with(const char* name, Forward forward_op, Backward backward_op, const Variable& q,
                        const Variable& k, const Variable& v, const ops::AttentionConfig& config) {
  ops::AttentionOutput forward = forward_op(q.value(), k.value(), v.value(), config);
  return record(name, forward.out, {q, k, v}, [&] {
    Tensor qv = q.value(), kv = k.value(), vv = v.value();
    return BackwardFn([qv, kv, vv, forward, config, backward_op](const Tensor& g, const std::vector<bool>&) {
      ops::AttentionGrads grads = backward_op(g, qv, kv, vv, forward.out, forward.row_max, forward.row_sum, config);
      return std::vector<Tensor>{grads.dq, grads.dk, grads.dv};
    });
  });
}

}  // namespace

Variable attention_materialized(const Variable& q, const Variable& k, const Variable& v,
                                const ops::AttentionConfig& config) {
  return attention_with("attention_materialized", &ops::attention_materialized, &ops::attention_materialized_backward,
                        q, k, v, config);
}

Variable flash_attention(const Variable& q, const Variable& k, const Variable& v, const ops::AttentionConfig& config) {
  return attention_with("flash_attention", &ops::flash_attention, &ops::flash_attention_backward, q, k, v, config);
}

}  // namespace alpha::autograd
