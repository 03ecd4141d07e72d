// Shared by the nn and optimiser tests: small configs and random token batches, a whole-model gradient check
// and one-batch overfitting.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "alpha/core/philox.h"
#include "alpha/nn/gpt.h"
#include "alpha/nn/gpt_config.h"
#include "alpha/tensor/tensor.h"
#include "alpha/train/optimizer.h"
#include "support/checks.h"

namespace alpha::test {

// Token ids uniform in [0, vocab) from a fresh seed (i32).
inline Tensor random_ids(Shape shape, int64_t vocab) {
  uint64_t seed = fresh_seed();
  std::vector<int32_t> ids(size_t(shape_numel(shape)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(philox_bits(seed, i) % uint32_t(vocab));
  return Tensor::from_vector(ids, std::move(shape));
}

// Bit-for-bit equality (determinism checks), reporting the first differing element.
inline ::testing::AssertionResult identical(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(a.shape()) << " != " << shape_str(b.shape());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i])) return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " != " << y[i];
  return ::testing::AssertionSuccess();
}

// The smallest model that still has every part: one layer, width 8, two query heads sharing one kv head.
inline nn::GPTConfig micro_config() {
  nn::GPTConfig c;
  c.n_layer = 1;
  c.n_embd = 8;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.block_size = 8;
  c.vocab_size = 16;
  return c;
}

// The parameters `names` of `model` (f64; every parameter when empty) against central finite differences of its
// loss on (ids, targets).
inline ::testing::AssertionResult model_gradcheck(nn::GPT& model, const Tensor& ids, const Tensor& targets,
                                                  const nn::ForwardOptions& options = {},
                                                  std::vector<std::string> names = {}) {
  if (names.empty())
    for (const auto& p : model.named_parameters()) names.push_back(p.name);
  std::vector<Tensor> values;
  for (const auto& n : names) values.push_back(model.parameter(n).value().clone());
  auto loss_of = [&](const std::vector<autograd::Variable>& params) {
    for (size_t i = 0; i < names.size(); ++i) model.parameter(names[i]) = params[i];
    return model.forward(ids, targets, options).loss;
  };
  ::testing::AssertionResult result = gradcheck(loss_of, values);
  autograd::clear_tape();
  return result;
}

// `steps` AdamW steps (no weight decay, gradients clipped at norm 1, learning rate `lr`) on one fixed batch;
// returns the first and the last loss.
inline std::pair<double, double> overfit_one_batch(nn::GPT& model, const Tensor& ids, const Tensor& targets, int steps,
                                                   double lr) {
  train::AdamW optimizer(model.named_parameters(), {.weight_decay = 0.0});
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    nn::GPTOutput out = model.forward(ids, targets, {.training = true, .step = uint64_t(step)});
    last = out.loss.value().item();
    if (step == 0) first = last;
    optimizer.clear_grads();
    autograd::backward(out.loss);
    optimizer.clip_grad_norm(1.0);
    optimizer.step(lr);
  }
  return {first, last};
}

}  // namespace alpha::test
