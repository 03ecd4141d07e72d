#include "alpha/autograd/functions.h"

namespace alpha::autograd {

Variable attention_materialized(const Variable& q, const Variable& k, const Variable& v,
                                const ops::AttentionConfig& config) {
  ops::AttentionOutput forward = ops::attention_materialized(q.value(), k.value(), v.value(), config);
  // The backward reuses the forward's output and row statistics instead of recomputing the softmax. The
  // kernel computes dq, dk and dv in one pass, so all three are returned whichever inputs need them.
  return record("attention_materialized", forward.out, {q, k, v}, [&] {
    Tensor qv = q.value(), kv = k.value(), vv = v.value();
    return BackwardFn([qv, kv, vv, forward, config](const Tensor& g, const std::vector<bool>&) {
      ops::AttentionGrads grads = ops::attention_materialized_backward(g, qv, kv, vv, forward.out,
                                                                       forward.row_max, forward.row_sum, config);
      return std::vector<Tensor>{grads.dq, grads.dk, grads.dv};
    });
  });
}

}  // namespace alpha::autograd
