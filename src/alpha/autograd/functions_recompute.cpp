// Activation recomputation: differentiable functions that keep less for backward and recompute the rest
// there (functions.h, "Activation recomputation"). Level "ln_gelu" fuses a LayerNorm into the layer that
// reads its output, and drops the GELU output of the MLP; level "block" is the checkpoint of a whole
// segment. Every recomputation runs the forward's ops on the forward's inputs, so on the CPU the gradients
// are those of the unrecomputed graph bit for bit (tests/nn/test_recompute.cpp).
#include "alpha/autograd/compute_parameters.h"
#include "alpha/autograd/functions.h"
#include "alpha/ops/activation.h"
#include "alpha/ops/elementwise.h"
#include "alpha/ops/layernorm.h"
#include "alpha/ops/matmul.h"

namespace alpha::autograd {

namespace {

// What a fused LayerNorm keeps: its input and parameters (masters as autograd::layernorm takes them).
// ops::layernorm returns the per-row statistics with the output (no op normalises with given statistics), so
// backward recomputes all three from x: the same bits as the forward's.
struct NormInputs {
  Tensor x;
  NormParameters params;
  double eps;

  NormInputs(std::string_view op, const Variable& x, const LayerNormParams& norm)
      : x(x.value()), params(op, norm.weight, norm.bias, x.dtype()), eps(norm.eps) {}

  ops::LayerNormOutput normalise() const { return ops::layernorm(x, params.weight.value, params.bias.value, eps); }

  // Gradients of x, weight and bias (needs[0..2]) from the gradient of the normalised output; x is the
  // node's input 0, whose gradient dx is added into where backward offers it (as autograd::layernorm does).
  // With `residual`, the node's output adds x itself (x + f(x)) and residual is that output's gradient g, which
  // x's gradient also takes: the kernel adds dx into g where the tape hands g over and no slot is offered
  // (own_gradient), else it is added after. The function calls this after its last read of g.
  std::vector<Tensor> backward(const Tensor& dnormed, const ops::LayerNormOutput& normed,
                               const std::vector<bool>& needs, const Tensor& residual = Tensor()) const {
    Tensor into = gradient_accumulator(0, x);
    // residual is the node's own gradient: the tape hands it over when no one else holds it (own_gradient)
    const bool into_residual = needs[0] && residual.defined() && !into.defined() && own_gradient().defined();
    if (into_residual) into = residual;
    std::vector<Tensor> grads = params.grads(ops::layernorm_backward(dnormed, x, params.weight.value, normed.mean,
                                                                     normed.rstd, needs[0], needs[1], needs[2], into));
    if (needs[0] && residual.defined() && !into_residual) ops::add_(grads[0], residual);
    return grads;
  }
};

}  // namespace

// Inputs x, norm weight, norm bias, weight, bias. Backward: the normalised x again, linear's gradients from
// it, then LayerNorm's from the input gradient linear returns.
Variable layernorm_linear(const Variable& x, const LayerNormParams& norm, const Variable& weight,
                          const Variable& bias) {
  NormInputs norm_inputs("layernorm_linear", x, norm);
  const LinearParameters p("layernorm_linear", weight, bias, x.dtype());
  Tensor y = ops::linear(norm_inputs.normalise().y, p.weight.value, p.bias.value);
  return record("layernorm_linear", y, {x, norm.weight, norm.bias, weight, bias}, [&] {
    return BackwardFn([norm_inputs, p](const Tensor& g, const std::vector<bool>& needs) {
      const bool need_dnormed = needs[0] || needs[1] || needs[2];  // x or the norm's parameters
      ops::LayerNormOutput normed = norm_inputs.normalise();
      ops::LinearGrads linear =
          ops::linear_backward(g, normed.y, p.weight.value, need_dnormed, p.weight_grad_in_compute(needs[3]),
                               p.bias_grad_in_compute(needs[4]));
      p.master_grads(g, normed.y, needs[3], needs[4], linear.dweight, linear.dbias);
      std::vector<Tensor> grads = need_dnormed ? norm_inputs.backward(linear.dx, normed, needs)
                                               : std::vector<Tensor>(3);
      grads.insert(grads.end(), {linear.dweight, linear.dbias});
      return grads;
    });
  });
}

// Inputs x, norm weight, norm bias, fc weight, fc bias, proj weight, proj bias. Keeps x and fc's
// pre-activation; backward recomputes h = gelu(pre) for proj's weight gradient (ops::gelu is the formula
// linear_gelu's epilogue applies to pre), then, as gelu_mlp (mlp_backward), the gradient of pre from proj's
// input-gradient GEMM with a DGELU epilogue, and last the normalised x for fc's weight gradient and LayerNorm's
// backward.
Variable layernorm_gelu_mlp(const Variable& x, const LayerNormParams& norm, const Variable& fc_weight,
                            const Variable& fc_bias, const Variable& proj_weight, const Variable& proj_bias,
                            bool add_input) {
  std::vector<Variable> inputs{x, norm.weight, norm.bias, fc_weight, fc_bias, proj_weight, proj_bias};
  NormInputs norm_inputs("layernorm_gelu_mlp", x, norm);
  const LinearParameters fc_p("layernorm_gelu_mlp", fc_weight, fc_bias, x.dtype()),
      proj_p("layernorm_gelu_mlp", proj_weight, proj_bias, x.dtype());
  ops::LinearGelu fc =
      ops::linear_gelu(norm_inputs.normalise().y, fc_p.weight.value, fc_p.bias.value, needs_recording(inputs));
  Tensor y = ops::linear(fc.out, proj_p.weight.value, proj_p.bias.value, add_input ? x.value() : Tensor());
  return record("layernorm_gelu_mlp", y, inputs, [&] {
    return BackwardFn([norm_inputs, fc_p, proj_p, pre = fc.pre, add_input](const Tensor& g,
                                                                           const std::vector<bool>& needs) {
      const bool need_dnormed = needs[0] || needs[1] || needs[2];  // x or the norm's parameters
      const bool need_dpre = need_dnormed || needs[3];
      ops::LayerNormOutput normed;
      if (need_dpre) normed = norm_inputs.normalise();
      std::vector<Tensor> mlp = mlp_backward(g, normed.y, pre, ops::gelu(pre), fc_p, proj_p,
                                             {need_dnormed, needs[3], needs[4], needs[5], needs[6]});
      std::vector<Tensor> grads =
          need_dnormed ? norm_inputs.backward(mlp[0], normed, needs, add_input ? g : Tensor()) : std::vector<Tensor>(3);
      grads.insert(grads.end(), mlp.begin() + 1, mlp.end());
      return grads;
    });
  });
}

// The node's inputs are `inputs` then `parameters`. Backward gives each a stand-in (a fresh leaf over the
// same tensor, requiring a gradient where the outer node needs one); the segment reads the inputs' stand-ins
// as arguments and the parameters through the TapeScope's redirection of their edges.
Variable checkpoint(const Segment& segment, const std::vector<Variable>& inputs,
                    const std::vector<Variable>& parameters) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = segment(inputs).value();
  }
  std::vector<Variable> outer = inputs;
  outer.insert(outer.end(), parameters.begin(), parameters.end());
  return record("checkpoint", out, outer, [&] {
    size_t input_count = inputs.size();
    return BackwardFn([segment, outer, input_count](const Tensor& g, const std::vector<bool>& needs) {
      TapeScope::StandIns stand_ins;
      for (size_t i = 0; i < outer.size(); ++i)
        stand_ins.emplace_back(outer[i], Variable(outer[i].value(), needs[i], outer[i].name()));
      std::vector<Variable> segment_inputs;
      for (size_t i = 0; i < input_count; ++i) segment_inputs.push_back(stand_ins[i].second);
      TapeScope scope(stand_ins);
      Variable recomputed = segment(segment_inputs);
      std::vector<Tensor> grads(outer.size());
      if (!recomputed.requires_grad()) return grads;  // nothing that needs a gradient reaches the output
      backward(recomputed, g);
      for (size_t i = 0; i < outer.size(); ++i) grads[i] = stand_ins[i].second.grad();
      return grads;
    });
  });
}

}  // namespace alpha::autograd
