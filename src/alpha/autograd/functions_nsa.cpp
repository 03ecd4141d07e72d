#include "alpha/autograd/functions.h"
#include "alpha/ops/nsa.h"

namespace alpha::autograd {

// The backward reuses everything the forward saved (branch outputs, statistics, compressed keys and values, the kept
// blocks) and returns all eight gradients in one pass of the kernel, whichever inputs need them.
Variable nsa(const NsaVariables& in, const ops::NsaConfig& config) {
  const std::vector<Variable> inputs{in.q, in.k, in.v, in.gates, in.k_pos, in.k_weight, in.v_pos, in.v_weight};
  const ops::NsaInputs values{in.q.value(),     in.k.value(),        in.v.value(),     in.gates.value(),
                              in.k_pos.value(), in.k_weight.value(), in.v_pos.value(), in.v_weight.value()};
  ops::NsaOutput forward = ops::nsa(values, config);
  return record("nsa", forward.out, inputs, [&] {
    return BackwardFn([values, forward, config](const Tensor& g, const std::vector<bool>&) {
      return ops::nsa_backward(g, values, forward, config).list();
    });
  });
}

}  // namespace alpha::autograd
