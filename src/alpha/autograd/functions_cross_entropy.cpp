#include "alpha/autograd/functions.h"
#include "alpha/ops/cross_entropy.h"

namespace alpha::autograd {

Variable cross_entropy(const Variable& logits, const Tensor& targets) {
  ops::CrossEntropyOutput out = ops::cross_entropy(logits.value(), targets);
  return record("cross_entropy", out.loss, {logits}, [&] {
    // Saves the logits and the forward's output (lse, validated targets, count): the backward recomputes the
    // softmax row by row, reads the loss gradient and the count where they are, and does not validate the
    // targets again (on a GPU: no host round trip).
    return BackwardFn([x = logits.value(), out](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{ops::cross_entropy_backward(g, x, out)};
    });
  });
}

}  // namespace alpha::autograd
