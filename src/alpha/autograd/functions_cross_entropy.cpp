#include <utility>

#include "alpha/autograd/compute_parameters.h"
#include "alpha/autograd/functions.h"
#include "alpha/ops/cross_entropy.h"
#include "alpha/ops/linear_cross_entropy.h"
#include "alpha/ops/optim.h"

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

Variable linear_cross_entropy(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& targets,
                              double logit_softcap, bool targets_checked) {
  constexpr const char* op = "linear_cross_entropy";
  const std::vector<Variable> inputs{x, weight, bias};
  const bool recording = needs_recording(inputs);
  auto wanted = [&](const Variable& v) { return recording && v.defined() && v.requires_grad(); };
  // weight and bias in x's dtype, as the op computes with them (a master through its held compute copy). For a
  // master the op's sums over its chunks come back unrounded (wide_param_grads), converted to the parameter's
  // dtype where they are not in it.
  const LinearParameters p(op, weight, bias, x.dtype());
  ops::LinearCrossEntropy out = ops::linear_cross_entropy(
      x.value(), p.weight.value, p.bias.value, targets, wanted(x), wanted(weight), wanted(bias), logit_softcap,
      ops::kLinearCrossEntropyChunkBytes, p.weight.master || p.bias.master, targets_checked);
  if (out.dweight.defined()) out.dweight = out.dweight.to(weight.dtype());
  if (out.dbias.defined()) out.dbias = out.dbias.to(bias.dtype());
  return record(op, out.loss, inputs, [&] {
    // The forward computed the gradients of the loss itself; the backward scales them by the loss's gradient,
    // read on the device, unless that is backward's seed 1. It runs once (the tape is cleared after it), so it
    // scales them in place and hands them over (a gradient no one else holds becomes a parameter's without a copy).
    return BackwardFn([grads = std::vector<Tensor>{out.dx, out.dweight, out.dbias}](
                          const Tensor& g, const std::vector<bool>& needs) mutable {
      std::vector<Tensor> needed;
      for (size_t i = 0; i < grads.size(); ++i)
        if (needs[i] && grads[i].defined()) needed.push_back(grads[i]);
      if (!needed.empty() && !gradient_is_one()) ops::scale_grads(needed, g.to(DType::f64));
      return std::vector<Tensor>{needs[0] ? std::move(grads[0]) : Tensor(), needs[1] ? std::move(grads[1]) : Tensor(),
                                 needs[2] ? std::move(grads[2]) : Tensor()};
    });
  });
}

}  // namespace alpha::autograd
