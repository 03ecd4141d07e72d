// The AdamW optimiser against a naive f64 loop (decay only where flagged, clipping) and, bit for bit, against
// the single-tensor op on each parameter (its step is one list op), its state export and import, argument
// errors; and the warmup + cosine learning-rate schedule.
#include <cmath>
#include <numbers>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "alpha/autograd/functions.h"
#include "alpha/ops/optim.h"
#include "alpha/train/optimizer.h"
#include "alpha/train/schedule.h"
#include "nn/nn_helpers.h"
#include "support/checks.h"

namespace alpha::train {
namespace {

using autograd::Variable;

// Parameters of odd shapes, the first two decayed, the third not.
std::vector<nn::NamedParameter> make_parameters(DType dtype) {
  return {{"w1", Variable(test::random({7, 13}, dtype), true, "w1"), true},
          {"w2", Variable(test::random({3, 5, 11}, dtype), true, "w2"), true},
          {"b", Variable(test::random({64}, dtype), true, "b"), false}};
}

// Sets each parameter's gradient to the given tensor through autograd (d/dp Σ p∘g = g).
void set_gradients(const std::vector<nn::NamedParameter>& params, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < params.size(); ++i) {
    Variable p = params[i].variable;
    p.clear_grad();
    autograd::backward(autograd::sum(autograd::mul(p, Variable(grads[i]))));
  }
}

struct NaiveAdamW {
  std::vector<std::vector<double>> p, m, v;
  int64_t t = 0;

  explicit NaiveAdamW(const std::vector<nn::NamedParameter>& params) {
    for (const auto& q : params) {
      p.push_back(q.variable.value().to_vector<double>());
      m.emplace_back(p.back().size(), 0.0);
      v.emplace_back(p.back().size(), 0.0);
    }
  }

  void step(const std::vector<std::vector<double>>& grads, const std::vector<bool>& decay, double lr,
            const AdamWOptions& o) {
    ++t;
    double bc1 = 1 - std::pow(o.beta1, double(t)), bc2 = 1 - std::pow(o.beta2, double(t));
    for (size_t k = 0; k < p.size(); ++k)
      for (size_t i = 0; i < p[k].size(); ++i) {
        double g = grads[k][i];
        m[k][i] = o.beta1 * m[k][i] + (1 - o.beta1) * g;
        v[k][i] = o.beta2 * v[k][i] + (1 - o.beta2) * g * g;
        double update = (m[k][i] / bc1) / (std::sqrt(v[k][i] / bc2) + o.eps);
        p[k][i] -= lr * (update + (decay[k] ? o.weight_decay * p[k][i] : 0.0));
      }
  }
};

TEST(AdamWOptimizer, MatchesANaiveLoopWithDecayOnlyWhereFlaggedAndClipping) {
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    std::vector<nn::NamedParameter> params = make_parameters(dtype);
    AdamWOptions options{.beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.3};
    AdamW optimizer(params, options);
    NaiveAdamW naive(params);
    const double lrs[] = {1e-2, 3e-2, 5e-3, 2e-2};
    for (int step = 0; step < 4; ++step) {
      std::vector<Tensor> grads;
      std::vector<std::vector<double>> g;
      for (const auto& q : params) {
        grads.push_back(test::random(q.variable.shape(), dtype, -2.0, 2.0));
        g.push_back(grads.back().to_vector<double>());
      }
      set_gradients(params, grads);
      // Clip on odd steps, with a max norm below the gradients' norm (about 6.7 here).
      if (step % 2 == 1) {
        double norm_sq = 0;
        for (const auto& gk : g)
          for (double x : gk) norm_sq += x * x;
        double norm = std::sqrt(norm_sq), coef = std::min(1.0, 2.0 / (norm + 1e-6));
        ClipResult clip = optimizer.clip_grad_norm(2.0);
        EXPECT_TRUE(test::all_close(Tensor::full({}, clip.norm, DType::f64), Tensor::full({}, norm, DType::f64),
                                    test::tolerance("grad_norm", dtype)));
        EXPECT_TRUE(test::all_close(Tensor::full({}, clip.clip_coef, DType::f64), Tensor::full({}, coef, DType::f64),
                                    test::tolerance("grad_norm", dtype)));
        EXPECT_LT(coef, 1.0);
        for (auto& gk : g)
          for (double& x : gk) x *= coef;
      }
      optimizer.step(lrs[step]);
      naive.step(g, {true, true, false}, lrs[step], options);
      EXPECT_EQ(optimizer.step_count(), step + 1);
    }
    for (size_t k = 0; k < params.size(); ++k)
      EXPECT_TRUE(test::all_close(params[k].variable.value(),
                                  Tensor::from_vector(naive.p[k], params[k].variable.shape()).to(dtype), "adamw"))
          << params[k].name;
  }
}

TEST(AdamWOptimizer, ClippingBelowTheLimitLeavesGradientsAlone) {
  std::vector<nn::NamedParameter> params = make_parameters(DType::f64);
  AdamW optimizer(params, {});
  std::vector<Tensor> grads;
  for (const auto& q : params) grads.push_back(test::random(q.variable.shape(), DType::f64, -0.01, 0.01));
  set_gradients(params, grads);
  ClipResult clip = optimizer.clip_grad_norm(100.0);
  EXPECT_EQ(clip.clip_coef, 1.0);
  EXPECT_GT(clip.norm, 0.0);
  EXPECT_EQ(optimizer.grad_norm(), clip.norm);
  // The queued form: a 0-d f64 tensor on the gradients' device holding the same norm.
  Tensor queued = optimizer.grad_norm_tensor();
  EXPECT_EQ(queued.dim(), 0);
  EXPECT_EQ(queued.dtype(), DType::f64);
  EXPECT_EQ(queued.device(), grads[0].device());
  EXPECT_EQ(queued.item(), clip.norm);
  for (size_t k = 0; k < params.size(); ++k) EXPECT_TRUE(test::identical(params[k].variable.grad(), grads[k]));
  optimizer.clear_grads();
  for (const auto& q : params) EXPECT_FALSE(q.variable.grad().defined()) << q.name;
  EXPECT_THROW(optimizer.grad_norm(), ValueError);
  EXPECT_THROW(optimizer.grad_norm_tensor(), ValueError);
}

// step() updates every parameter in one list op: the same bits as the single-tensor op on each in turn, with
// the weight decay only where flagged, for f32 and f64 parameters in one optimiser.
TEST(AdamWOptimizer, StepIsThePerTensorOpBitForBit) {
  std::vector<nn::NamedParameter> params = make_parameters(DType::f32);
  params.push_back({"w64", Variable(test::random({4099}, DType::f64), true, "w64"), true});
  const AdamWOptions options{.beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.3};
  AdamW optimizer(params, options);
  std::vector<Tensor> values, ms, vs;
  for (const auto& q : params) {
    values.push_back(q.variable.value().clone());
    ms.push_back(Tensor::zeros(q.variable.shape(), q.variable.dtype()));
    vs.push_back(Tensor::zeros(q.variable.shape(), q.variable.dtype()));
  }
  const double lrs[] = {1e-2, 3e-2};
  for (int64_t step = 1; step <= 2; ++step) {
    std::vector<Tensor> grads;
    for (const auto& q : params) grads.push_back(test::random(q.variable.shape(), q.variable.dtype(), -2.0, 2.0));
    set_gradients(params, grads);
    optimizer.step(lrs[step - 1]);
    for (size_t k = 0; k < params.size(); ++k) {
      const double decay = params[k].decay ? options.weight_decay : 0.0;
      ops::adamw_step(values[k], grads[k], ms[k], vs[k],
                      {lrs[step - 1], options.beta1, options.beta2, options.eps, decay, step});
      EXPECT_TRUE(test::bit_equal(params[k].variable.value(), values[k])) << params[k].name << ", step " << step;
    }
  }
}

// The trainer's step: unscaling and clipping inside the update give the bits of unscale_and_clip and then
// step, with the clip biting (norm far above max_norm), not biting, and off, under a loss scale of 8, for f32
// and f64 parameters and a held bf16 compute copy; the gradients are left as they were.
TEST(AdamWOptimizer, ClippedStepIsUnscaleAndClipThenStepBitForBit) {
  auto make = [] {
    std::vector<nn::NamedParameter> params = make_parameters(DType::f32);
    params.push_back({"w64", Variable(test::random({4099}, DType::f64), true, "w64"), true});
    return params;
  };
  std::vector<nn::NamedParameter> fused = make(), apart;
  for (const auto& q : fused) apart.push_back({q.name, Variable(q.variable.value().clone(), true, q.name), q.decay});
  autograd::cast(fused[0].variable, DType::bf16);
  autograd::cast(apart[0].variable, DType::bf16);
  autograd::clear_tape();
  const AdamWOptions options{.beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.3};
  AdamW fused_opt(fused, options), apart_opt(apart, options);
  const double loss_scale = 8.0;
  for (double max_norm : {0.05, 1e9, 0.0}) {
    std::vector<Tensor> grads;
    for (const auto& q : fused) grads.push_back(test::random(q.variable.shape(), q.variable.dtype(), -3.0, 3.0));
    set_gradients(fused, grads);
    set_gradients(apart, grads);
    const double scaled_norm = fused_opt.grad_norm();
    ASSERT_GT(scaled_norm / loss_scale, 0.05);
    const ClipResult a = fused_opt.clipped_step(1e-2, loss_scale, max_norm, scaled_norm);
    const ClipResult b = apart_opt.unscale_and_clip(loss_scale, max_norm, scaled_norm);
    apart_opt.step(1e-2);
    EXPECT_EQ(a.norm, b.norm);
    EXPECT_EQ(a.clip_coef, b.clip_coef);
    EXPECT_EQ(a.clip_coef < 1.0, max_norm == 0.05) << max_norm;
    for (size_t k = 0; k < fused.size(); ++k) {
      EXPECT_TRUE(test::bit_equal(fused[k].variable.value(), apart[k].variable.value())) << fused[k].name;
      EXPECT_TRUE(test::bit_equal(fused[k].variable.grad(), grads[k])) << fused[k].name << ": the grad changed";
    }
    for (size_t k = 0; k < fused_opt.state_tensors().size(); ++k)
      EXPECT_TRUE(test::bit_equal(fused_opt.state_tensors()[k].tensor, apart_opt.state_tensors()[k].tensor)) << k;
    EXPECT_TRUE(test::bit_equal(fused[0].variable.compute_copy(), apart[0].variable.compute_copy()));
  }
  EXPECT_ALPHA_ERROR(fused_opt.clipped_step(1e-2, 0.5, 1.0, 1.0), ValueError, "[AdamW::clipped_step]", "loss_scale");
  EXPECT_ALPHA_ERROR(fused_opt.clipped_step(-1.0, 1.0, 1.0, 1.0), ValueError, "[AdamW::clipped_step]", "lr");
}

// The trainer's queued step: with step_guard's factor the bits of clipped_step, the step count advancing at
// settle(true); a NaN factor (a non-finite loss) changes nothing, and settle(false) keeps the count; steps in
// between raise.
TEST(AdamWOptimizer, QueuedStepIsClippedStepOrNothingAndCountsOnlyWhenSettled) {
  std::vector<nn::NamedParameter> queued = make_parameters(DType::f32), direct;
  for (const auto& q : queued) direct.push_back({q.name, Variable(q.variable.value().clone(), true, q.name), q.decay});
  autograd::cast(queued[0].variable, DType::bf16);
  autograd::cast(direct[0].variable, DType::bf16);
  autograd::clear_tape();
  AdamW queued_opt(queued, {}), direct_opt(direct, {});
  const double loss_scale = 4.0, max_norm = 0.3;
  const Tensor losses = Tensor::from_vector<double>({2.0, 2.5}, {2});
  for (int step = 1; step <= 2; ++step) {
    std::vector<Tensor> grads;
    for (const auto& q : queued) grads.push_back(test::random(q.variable.shape(), DType::f32, -2.0, 2.0));
    set_gradients(queued, grads);
    set_gradients(direct, grads);
    const Tensor norm = queued_opt.grad_norm_tensor();
    queued_opt.queued_step(1e-2, ops::step_guard(norm, losses, loss_scale, max_norm));
    EXPECT_EQ(queued_opt.step_count(), step - 1);
    EXPECT_ALPHA_ERROR(queued_opt.step(1e-2), ValueError, "[AdamW::step]", "settle");
    queued_opt.settle(true);
    const ClipResult clip = direct_opt.clipped_step(1e-2, loss_scale, max_norm, norm.item());
    const ClipResult logged = AdamW::clip_result(loss_scale, max_norm, norm.item());
    EXPECT_EQ(logged.clip_coef, clip.clip_coef);
    EXPECT_LT(clip.clip_coef, 1.0);
    EXPECT_EQ(queued_opt.step_count(), step);
    for (size_t k = 0; k < queued.size(); ++k)
      EXPECT_TRUE(test::bit_equal(queued[k].variable.value(), direct[k].variable.value())) << queued[k].name;
    EXPECT_TRUE(test::bit_equal(queued[0].variable.compute_copy(), direct[0].variable.compute_copy()));
  }
  std::vector<Tensor> before;
  for (const auto& q : queued) before.push_back(q.variable.value().clone());
  const Tensor bad_losses = Tensor::from_vector<double>({2.0, NAN}, {2});
  queued_opt.queued_step(1e-2, ops::step_guard(queued_opt.grad_norm_tensor(), bad_losses, loss_scale, max_norm));
  queued_opt.settle(false);
  EXPECT_EQ(queued_opt.step_count(), 2);
  for (size_t k = 0; k < queued.size(); ++k)
    EXPECT_TRUE(test::bit_equal(queued[k].variable.value(), before[k])) << queued[k].name << " moved";
  EXPECT_ALPHA_ERROR(queued_opt.settle(true), ValueError, "[AdamW::settle]", "queued");
}

// Exporting the state and importing it into a fresh optimiser over copies of the parameters continues
// bit for bit.
TEST(AdamWOptimizer, StateRoundTripResumesBitForBit) {
  std::vector<nn::NamedParameter> params = make_parameters(DType::f32);
  AdamW optimizer(params, {});
  auto random_grads = [&] {
    std::vector<Tensor> grads;
    for (const auto& q : params) grads.push_back(test::random(q.variable.shape()));
    return grads;
  };
  for (int step = 0; step < 3; ++step) {
    set_gradients(params, random_grads());
    optimizer.step(1e-2);
  }
  std::vector<NamedTensor> state = optimizer.state_tensors();
  ASSERT_EQ(state.size(), 6u);
  EXPECT_EQ(state[0].name, "m/w1");
  EXPECT_EQ(state[2].name, "m/b");
  EXPECT_EQ(state[3].name, "v/w1");
  EXPECT_EQ(state[5].name, "v/b");

  std::vector<nn::NamedParameter> copies;
  for (const auto& q : params) copies.push_back({q.name, Variable(q.variable.value().clone(), true, q.name), q.decay});
  AdamW resumed(copies, {});
  std::vector<NamedTensor> saved;
  for (const auto& t : state) saved.push_back({t.name, t.tensor.clone()});
  resumed.load_state(saved, optimizer.step_count());
  EXPECT_EQ(resumed.step_count(), 3);

  std::vector<Tensor> grads = random_grads();
  set_gradients(params, grads);
  set_gradients(copies, grads);
  optimizer.step(2e-2);
  resumed.step(2e-2);
  for (size_t k = 0; k < params.size(); ++k)
    EXPECT_TRUE(test::identical(copies[k].variable.value(), params[k].variable.value())) << params[k].name;
}

TEST(AdamWOptimizer, LoadStateRejectsMismatchesAndLeavesTheStateAlone) {
  std::vector<nn::NamedParameter> params = make_parameters(DType::f32);
  AdamW optimizer(params, {});
  std::vector<NamedTensor> good;
  for (const auto& t : optimizer.state_tensors()) good.push_back({t.name, test::random(t.tensor.shape())});

  std::vector<NamedTensor> missing(good.begin() + 1, good.end());
  EXPECT_ALPHA_ERROR(optimizer.load_state(missing, 1), ValueError, "AdamW::load_state", "m/w1");
  std::vector<NamedTensor> extra = good;
  extra.push_back({"m/unknown", test::random({2})});
  EXPECT_ALPHA_ERROR(optimizer.load_state(extra, 1), ValueError, "m/unknown");
  std::vector<NamedTensor> misshapen = good;
  misshapen[4].tensor = test::random({5, 3, 11});
  EXPECT_ALPHA_ERROR(optimizer.load_state(misshapen, 1), ShapeError, "v/w2", "[3, 5, 11]", "[5, 3, 11]");
  EXPECT_ALPHA_ERROR(optimizer.load_state(good, -1), ValueError, "step_count");

  EXPECT_EQ(optimizer.step_count(), 0);
  for (const auto& t : optimizer.state_tensors())
    EXPECT_TRUE(test::identical(t.tensor, Tensor::zeros(t.tensor.shape(), DType::f32))) << t.name;
}

TEST(AdamWOptimizer, RejectsBadParametersOptionsAndCalls) {
  auto params = make_parameters(DType::f32);
  auto duplicated = params;
  duplicated[1].name = "w1";
  EXPECT_ALPHA_ERROR(AdamW(duplicated, {}), ValueError, "AdamW", "w1", "unique");
  auto frozen = params;
  frozen[2].variable = Variable(test::random({4}));
  EXPECT_ALPHA_ERROR(AdamW(frozen, {}), ValueError, "AdamW", "'b'", "requires a gradient");
  EXPECT_ALPHA_ERROR(AdamW(params, {.beta1 = 1.0}), ConfigError, "beta1", "[0, 1)");
  EXPECT_ALPHA_ERROR(AdamW(params, {.beta2 = -0.1}), ConfigError, "beta2");
  EXPECT_ALPHA_ERROR(AdamW(params, {.eps = 0.0}), ConfigError, "eps");
  EXPECT_ALPHA_ERROR(AdamW(params, {.weight_decay = -1.0}), ConfigError, "weight_decay");

  AdamW optimizer(params, {});
  EXPECT_ALPHA_ERROR(optimizer.step(1e-3), ValueError, "AdamW::step", "w1", "run backward first");
  EXPECT_EQ(optimizer.step_count(), 0);
  EXPECT_ALPHA_ERROR(optimizer.clip_grad_norm(0.0), ValueError, "max_norm");
  set_gradients(params, {test::random({7, 13}), test::random({3, 5, 11}), test::random({64})});
  EXPECT_ALPHA_ERROR(optimizer.step(-1.0), ValueError, "lr");
  EXPECT_ALPHA_ERROR(optimizer.step(std::nan("")), ValueError, "lr");
}

TEST(LrSchedule, WarmupThenCosineThenFloor) {
  const double max_lr = 6e-4, min_lr = 6e-5;
  WarmupCosineSchedule s(max_lr, min_lr, 10, 110);
  for (int64_t step = 0; step < 10; ++step) EXPECT_DOUBLE_EQ(s.lr(step), max_lr * double(step + 1) / 10.0);
  EXPECT_DOUBLE_EQ(s.lr(10), max_lr);
  EXPECT_DOUBLE_EQ(s.lr(60), 0.5 * (max_lr + min_lr));  // halfway through the decay
  EXPECT_DOUBLE_EQ(s.lr(35), min_lr + 0.5 * (1 + std::cos(std::numbers::pi * 0.25)) * (max_lr - min_lr));
  EXPECT_DOUBLE_EQ(s.lr(110), min_lr);
  EXPECT_DOUBLE_EQ(s.lr(100000), min_lr);
  for (int64_t step = 10; step < 110; ++step) EXPECT_LT(s.lr(step + 1), s.lr(step)) << step;

  WarmupCosineSchedule no_warmup(1.0, 0.0, 0, 4);
  EXPECT_DOUBLE_EQ(no_warmup.lr(0), 1.0);
  EXPECT_DOUBLE_EQ(no_warmup.lr(2), 0.5);
  WarmupCosineSchedule warmup_only(1.0, 0.1, 4, 4);
  EXPECT_DOUBLE_EQ(warmup_only.lr(3), 1.0);
  EXPECT_DOUBLE_EQ(warmup_only.lr(4), 0.1);
}

TEST(LrSchedule, RejectsBadParameters) {
  EXPECT_ALPHA_ERROR(WarmupCosineSchedule(0.0, 0.0, 0, 10), ConfigError, "WarmupCosineSchedule", "max_lr");
  EXPECT_ALPHA_ERROR(WarmupCosineSchedule(1e-3, 2e-3, 0, 10), ConfigError, "min_lr");
  EXPECT_ALPHA_ERROR(WarmupCosineSchedule(1e-3, -1.0, 0, 10), ConfigError, "min_lr");
  EXPECT_ALPHA_ERROR(WarmupCosineSchedule(1e-3, 0.0, 11, 10), ConfigError, "warmup_steps", "decay_steps = 10");
  EXPECT_ALPHA_ERROR(WarmupCosineSchedule(1e-3, 0.0, -1, 10), ConfigError, "warmup_steps");
  EXPECT_ALPHA_ERROR(WarmupCosineSchedule(1e-3, 0.0, 0, 0), ConfigError, "decay_steps");
  EXPECT_ALPHA_ERROR(WarmupCosineSchedule(1e-3, 0.0, 0, 10).lr(-1), ValueError, "step");
}

// Mixed precision: a parameter's held bf16/f16 copy (autograd::cast's) is rewritten by the step in the same
// pass, in its own storage, and stays held; a parameter without one gets none.
TEST(AdamWOptimizer, AStepRewritesTheHeldComputeCopiesInPlace) {
  std::vector<nn::NamedParameter> params = make_parameters(DType::f32);
  Tensor held_bf16 = autograd::cast(params[0].variable, DType::bf16).value();
  Tensor held_f16 = autograd::cast(params[1].variable, DType::f16).value();
  autograd::clear_tape();
  held_bf16.fill_(NAN);  // poisoned: the step must write every element
  held_f16.fill_(NAN);
  set_gradients(params, {test::random({7, 13}), test::random({3, 5, 11}), test::random({64})});
  AdamW opt(params, AdamWOptions{});
  opt.step(1e-2);
  for (auto [k, held, dtype] : {std::tuple(0, held_bf16, DType::bf16), std::tuple(1, held_f16, DType::f16)}) {
    const Variable& v = params[size_t(k)].variable;
    ASSERT_TRUE(v.compute_copy().defined());
    EXPECT_EQ(v.compute_copy().raw_data(), held.raw_data());  // the same storage, rewritten
    EXPECT_TRUE(test::bit_equal(v.compute_copy(), v.value().to(dtype)));
    EXPECT_EQ(autograd::cast(v, dtype).value().raw_data(), held.raw_data());  // the next forward reads it
  }
  EXPECT_FALSE(params[2].variable.compute_copy().defined());
  autograd::clear_tape();
}

// The op's compute copy beside f32 grads: the same param, m and v bits as without one, the copy the
// updated param rounded; a copy of another dtype than the grad's, beside a bf16 grad, is refused.
TEST(AdamWOptimizer, AComputeCopyBesideF32GradsIsTheUpdatedParamRounded) {
  for (DType copy_dtype : {DType::bf16, DType::f16}) {
    Tensor param = test::random({1000}), grad = test::random({1000});
    Tensor m = test::random({1000}, DType::f32, 0.0, 0.1), v = test::random({1000}, DType::f32, 0.0, 0.1);
    Tensor param2 = param.clone(), m2 = m.clone(), v2 = v.clone();
    Tensor copy = Tensor::full({1000}, NAN, copy_dtype);
    const ops::AdamWConfig config{1e-2, 0.9, 0.95, 1e-8, 0.1, 3};
    ops::adamw_step(param, grad, m, v, copy, config);
    ops::adamw_step(param2, grad, m2, v2, config);
    EXPECT_TRUE(test::bit_equal(param, param2));
    EXPECT_TRUE(test::bit_equal(m, m2));
    EXPECT_TRUE(test::bit_equal(v, v2));
    EXPECT_TRUE(test::bit_equal(copy, param.to(copy_dtype)));
  }
  Tensor param = test::random({8}), m = Tensor::zeros({8}, DType::f32), v = Tensor::zeros({8}, DType::f32);
  Tensor f16_copy = Tensor::zeros({8}, DType::f16);
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, test::random({8}).to(DType::bf16), m, v, f16_copy, ops::AdamWConfig{}),
                     DTypeError, "[adamw_step]", "compute_copy");
}

}  // namespace
}  // namespace alpha::train
