#include "alpha/autograd/functions.h"
#include "alpha/ops/cross_entropy.h"

namespace alpha::autograd {

Variable cross_entropy(const Variable& logits, const Tensor& targets) {
  ops::CrossEntropyOutput out = ops::cross_entropy(logits.value(), targets);
  return record("cross_entropy", out.loss, {logits}, [&] {
    // Saves the logits and the per-row lse only: the backward recomputes the softmax row by row.
    // The loss gradient and the row count stay where they are (on a GPU: no host round trip).
    return BackwardFn([x = logits.value(), targets, lse = out.lse, counted = out.counted](
                          const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{ops::cross_entropy_backward(g, x, targets, lse, counted)};
    });
  });
}

}  // namespace alpha::autograd
