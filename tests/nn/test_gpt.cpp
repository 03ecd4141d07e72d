// The GPT model: parameter names, shapes, count and decay flags; initialisation; forward shapes and
// errors; loss at initialisation; an f64 gradient check of the whole model; deterministic dropout;
// and overfitting one batch with AdamW.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "alpha/autograd/functions.h"
#include "alpha/nn/gpt.h"
#include "alpha/ops/cross_entropy.h"
#include "nn/nn_helpers.h"
#include "support/checks.h"

namespace alpha::nn {
namespace {

using autograd::Variable;

struct ExpectedParameter {
  std::string name;
  Shape shape;
  bool decay;
};

// The parameter list the brief specifies, built independently of the model code.
std::vector<ExpectedParameter> expected_parameters(const GPTConfig& c) {
  int64_t C = c.n_embd, qkv = (c.n_head + 2 * c.n_kv_head) * (c.n_embd / c.n_head);
  std::vector<ExpectedParameter> out = {{"wte.weight", {c.vocab_size, C}, false},
                                        {"wpe.weight", {c.block_size, C}, false}};
  auto add = [&](const std::string& name, Shape shape, bool decay) { out.push_back({name, std::move(shape), decay}); };
  for (int64_t i = 0; i < c.n_layer; ++i) {
    std::string b = "blocks." + std::to_string(i) + ".";
    add(b + "ln1.weight", {C}, false);
    if (c.bias) add(b + "ln1.bias", {C}, false);
    add(b + "attn.qkv.weight", {qkv, C}, true);
    if (c.bias) add(b + "attn.qkv.bias", {qkv}, false);
    add(b + "attn.proj.weight", {C, C}, true);
    if (c.bias) add(b + "attn.proj.bias", {C}, false);
    add(b + "ln2.weight", {C}, false);
    if (c.bias) add(b + "ln2.bias", {C}, false);
    add(b + "mlp.fc.weight", {4 * C, C}, true);
    if (c.bias) add(b + "mlp.fc.bias", {4 * C}, false);
    add(b + "mlp.proj.weight", {C, 4 * C}, true);
    if (c.bias) add(b + "mlp.proj.bias", {C}, false);
  }
  add("ln_f.weight", {C}, false);
  if (c.bias) add("ln_f.bias", {C}, false);
  if (!c.tie_embeddings) add("lm_head.weight", {c.vocab_size, C}, true);
  return out;
}

// Closed-form parameter count: embeddings, per layer (two norms, qkv, attention projection, MLP), final
// norm, and the head when untied.
int64_t parameter_count_formula(const GPTConfig& c) {
  int64_t C = c.n_embd, D = c.n_embd / c.n_head, b = c.bias ? 1 : 0;
  int64_t qkv_out = (c.n_head + 2 * c.n_kv_head) * D;
  int64_t norm = C * (1 + b);
  int64_t per_layer = 2 * norm + qkv_out * (C + b) + C * (C + b) + 4 * C * (C + b) + C * (4 * C + b);
  return c.vocab_size * C + c.block_size * C + c.n_layer * per_layer + norm + (c.tie_embeddings ? 0 : c.vocab_size * C);
}

double sample_std(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= double(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / double(v.size()));
}

GPTConfig tiny() {
  GPTConfig c;  // the defaults are the tiny shape: 2 layers, width 64, 4 heads, context 64, vocabulary 512
  c.n_kv_head = 2;
  return c;
}

TEST(GPTModel, ParameterNamesShapesDecayAndCount) {
  for (bool bias : {true, false})
    for (bool tie : {true, false})
      for (int64_t kv_heads : {4, 2, 1}) {
        GPTConfig c = tiny();
        c.bias = bias;
        c.tie_embeddings = tie;
        c.n_kv_head = kv_heads;
        SCOPED_TRACE(c.to_json().dump());
        GPT model(c);
        std::vector<NamedParameter> got = model.named_parameters();
        std::vector<ExpectedParameter> want = expected_parameters(c);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_EQ(got[i].name, want[i].name);
          EXPECT_EQ(got[i].variable.name(), want[i].name);
          EXPECT_EQ(got[i].variable.shape(), want[i].shape) << want[i].name;
          EXPECT_EQ(got[i].decay, want[i].decay) << want[i].name;
          EXPECT_TRUE(got[i].variable.requires_grad());
          EXPECT_TRUE(got[i].variable.is_leaf());
        }
        EXPECT_EQ(model.num_parameters(), parameter_count_formula(c));
      }
}

TEST(GPTModel, NamesItsAttentionForTheLogs) {
  GPTConfig c = tiny();
  EXPECT_EQ(GPT(c).attention_kernels(), "materialising attention (the reference)");
  c.attention = "nsa";
  EXPECT_EQ(GPT(c).attention_kernels(), "Native Sparse Attention");
}

TEST(GPTModel, GPT2SmallHasTheKnownParameterCount) {
  GPTConfig c;
  c.n_layer = 12;
  c.n_embd = 768;
  c.n_head = 12;
  c.n_kv_head = 12;
  c.block_size = 1024;
  c.vocab_size = 50257;
  // 124,439,808: the published count of GPT-2 small with its 50257-token vocabulary and tied head.
  EXPECT_EQ(parameter_count_formula(c), 124439808);
}

TEST(GPTModel, InitialisationIsDeterministicAndScaled) {
  GPTConfig c = tiny();
  GPT a(c), b(c);
  for (const auto& p : a.named_parameters())
    EXPECT_TRUE(test::identical(b.parameter(p.name).value(), p.variable.value())) << p.name;

  c.seed += 1;
  GPT other(c);
  EXPECT_FALSE(test::identical(other.parameter("wte.weight").value(), a.parameter("wte.weight").value()));

  // Weights depend only on (seed, name): dropping biases leaves them unchanged.
  GPTConfig no_bias = tiny();
  no_bias.bias = false;
  GPT nb(no_bias);
  EXPECT_TRUE(test::identical(nb.parameter("blocks.1.attn.qkv.weight").value(),
                              a.parameter("blocks.1.attn.qkv.weight").value()));

  // normal(0, init_std); residual projections scaled by 1/√(2·n_layer); norms 1, biases 0.
  double residual_std = c.init_std / std::sqrt(2.0 * double(c.n_layer));
  EXPECT_NEAR(sample_std(a.parameter("wte.weight").value()), c.init_std, 0.05 * c.init_std);
  EXPECT_NEAR(sample_std(a.parameter("blocks.0.mlp.fc.weight").value()), c.init_std, 0.05 * c.init_std);
  EXPECT_NEAR(sample_std(a.parameter("blocks.0.mlp.proj.weight").value()), residual_std, 0.05 * residual_std);
  EXPECT_NEAR(sample_std(a.parameter("blocks.1.attn.proj.weight").value()), residual_std, 0.05 * residual_std);
  EXPECT_TRUE(test::identical(a.parameter("ln_f.weight").value(), Tensor::full({c.n_embd}, 1.0, DType::f32)));
  EXPECT_TRUE(test::identical(a.parameter("blocks.0.attn.qkv.bias").value(),
                              Tensor::zeros({(c.n_head + 2 * c.n_kv_head) * c.head_dim()}, DType::f32)));
  EXPECT_ALPHA_ERROR(a.parameter("lm_head.weight"), ValueError, "lm_head.weight");
}

TEST(GPTModel, ForwardShapesAndLossAtInitialisation) {
  GPTConfig c = tiny();
  GPT model(c);
  Tensor ids = test::random_ids({3, 17}, c.vocab_size);
  GPTOutput no_targets = model.forward(ids);
  EXPECT_EQ(no_targets.logits.shape(), (Shape{3, 17, c.vocab_size}));
  EXPECT_FALSE(no_targets.loss.defined());
  autograd::clear_tape();

  GPTOutput out = model.forward(ids, test::random_ids({3, 17}, c.vocab_size));
  EXPECT_EQ(out.loss.shape(), Shape{});
  // Small initial weights give near-uniform predictions: the loss is about ln(vocab).
  EXPECT_NEAR(out.loss.value().item(), std::log(double(c.vocab_size)), 0.05);
  autograd::clear_tape();

  // The full context works too.
  EXPECT_EQ(model.forward(test::random_ids({1, c.block_size}, c.vocab_size)).logits.shape(),
            (Shape{1, c.block_size, c.vocab_size}));
  autograd::clear_tape();
}

// The position ids a model keeps between training forwards: a forward of one shape after forwards of others
// (training and not) gives the bits of a fresh model's (the same seed) forward, for a shape seen before and one
// not.
TEST(GPTModel, ForwardsOfChangingShapesMatchAFreshModel) {
  GPTConfig c = tiny();
  GPT model(c);
  const ForwardOptions training{true};
  const Tensor a = test::random_ids({3, 17}, c.vocab_size), b = test::random_ids({2, 40}, c.vocab_size);
  const Tensor a_first = model.forward(a, Tensor(), training).logits.value();
  const Tensor evaluated = model.forward(test::random_ids({1, 9}, c.vocab_size)).logits.value();
  const Tensor b_after_a = model.forward(b, Tensor(), training).logits.value();
  const Tensor a_again = model.forward(a, Tensor(), training).logits.value();
  autograd::clear_tape();
  GPT fresh(c);
  EXPECT_TRUE(test::bit_equal(b_after_a, fresh.forward(b, Tensor(), training).logits.value()));
  EXPECT_TRUE(test::bit_equal(a_again, a_first));
  autograd::clear_tape();
}

TEST(GPTModel, ForwardRejectsBadInputs) {
  GPTConfig c = tiny();
  GPT model(c);
  Tensor ids = test::random_ids({2, 8}, c.vocab_size);
  EXPECT_ALPHA_ERROR(model.forward(ids.to(DType::f32)), DTypeError, "GPT::forward", "ids");
  EXPECT_ALPHA_ERROR(model.forward(test::random_ids({16}, c.vocab_size)), ShapeError, "GPT::forward", "ids");
  EXPECT_ALPHA_ERROR(model.forward(test::random_ids({1, c.block_size + 1}, c.vocab_size)), ShapeError, "GPT::forward",
                     "ids", "block_size (64)");
  EXPECT_ALPHA_ERROR(model.forward(ids, test::random_ids({2, 7}, c.vocab_size)), ShapeError, "GPT::forward", "targets");
  // A token outside the vocabulary, named by its flat position (checked on the host, before the lookup).
  std::vector<int32_t> bad = ids.to_vector<int32_t>();
  bad[11] = -3;
  EXPECT_ALPHA_ERROR(model.forward(Tensor::from_vector(bad, {2, 8})), ValueError, "GPT::forward", "'ids'", "got -3",
                     "position 11");
  autograd::clear_tape();
}

// Every parameter of the micro model, in f64, against central finite differences of the loss, with
// everything on at once: biases, untied head, GQA, both softcaps, an ignored target, and dropout with a
// fixed step (a fixed mask is a fixed linear map, so the loss stays smooth).
TEST(GPTModel, WholeModelGradcheckInF64) {
  GPTConfig c = test::micro_config();
  c.tie_embeddings = false;
  c.attn_softcap = 5.0;
  c.logit_softcap = 3.0;
  c.dropout = 0.1;
  c.init_std = 0.5;  // large enough that every gradient is well above the finite-difference noise
  GPT model(c, DType::f64);
  Tensor ids = test::random_ids({2, 5}, c.vocab_size);
  Tensor targets = test::random_ids({2, 5}, c.vocab_size);
  targets.data<int32_t>()[3] = ops::kIgnoreIndex;
  EXPECT_TRUE(test::model_gradcheck(model, ids, targets, {.training = true, .step = 7, .micro_step = 0}));
}

TEST(GPTModel, TiedModelGradcheckInF64) {
  GPTConfig c = test::micro_config();
  c.bias = false;
  c.init_std = 0.5;
  GPT model(c, DType::f64);
  Tensor ids = test::random_ids({2, 8}, c.vocab_size);
  Tensor targets = test::random_ids({2, 8}, c.vocab_size);
  const std::vector<std::string> names = {"wte.weight", "blocks.0.attn.qkv.weight", "blocks.0.ln2.weight"};
  std::vector<Tensor> values;
  for (const auto& n : names) values.push_back(model.parameter(n).value().clone());
  auto loss_of = [&](const std::vector<Variable>& params) {
    for (size_t i = 0; i < names.size(); ++i) model.parameter(names[i]) = params[i];
    return model.forward(ids, targets).loss;
  };
  EXPECT_TRUE(test::gradcheck(loss_of, values));
  autograd::clear_tape();
}

// With targets the head and the loss run fused (the logits never held): the same loss and the same gradient
// for every parameter as the cross-entropy of the logits the model gives without targets, tied and untied,
// with and without a logit softcap.
TEST(GPTModel, FusedHeadLossEqualsCrossEntropyOfTheLogits) {
  for (auto [tied, cap] : {std::pair{true, 0.0}, std::pair{false, 0.0}, std::pair{true, 2.0}}) {
    SCOPED_TRACE(std::string(tied ? "tied head" : "untied head") + ", logit softcap " + std::to_string(cap));
    GPTConfig c = test::micro_config();
    c.tie_embeddings = tied;
    c.logit_softcap = cap;
    c.init_std = 0.5;  // logits large enough that the cap bends them
    GPT model(c, DType::f64);
    Tensor ids = test::random_ids({2, 7}, c.vocab_size);
    Tensor targets = test::random_ids({2, 7}, c.vocab_size);
    targets.data<int32_t>()[5] = ops::kIgnoreIndex;
    auto loss_and_grads = [&](bool fused) {
      model.zero_grad();
      GPTOutput out = fused ? model.forward(ids, targets) : model.forward(ids);
      EXPECT_EQ(out.logits.defined(), !fused);
      Variable loss = fused ? out.loss
                            : autograd::cross_entropy(autograd::reshape(out.logits, {14, c.vocab_size}),
                                                      targets.reshape({14}));
      autograd::backward(loss);
      std::vector<Tensor> values{loss.value()};
      for (const auto& p : model.named_parameters()) values.push_back(p.variable.grad().clone());
      return values;
    };
    std::vector<Tensor> fused = loss_and_grads(true), composite = loss_and_grads(false);
    ASSERT_EQ(fused.size(), composite.size());
    for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(test::all_close(fused[i], composite[i], "linear_cross_entropy"));
  }
}

// Mixed precision on the CPU (f64 parameters computing in f32, as f32 parameters compute in bf16 on a GPU): the
// fused head takes the head's parameters themselves and hands back their gradients in f64, from its f32 sums,
// without a cast of its own; they agree with the cross-entropy of the logits computed through casts, tied and
// untied, to f32's tolerance.
TEST(GPTModel, FusedHeadTakesTheMasterWeightsUnderMixedPrecision) {
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied head" : "untied head");
    GPTConfig c = test::micro_config();
    c.tie_embeddings = tied;
    GPT model(c, DType::f64, Device::cpu(), DType::f32);
    Tensor ids = test::random_ids({2, 7}, c.vocab_size);
    Tensor targets = test::random_ids({2, 7}, c.vocab_size);
    auto loss_and_grads = [&](bool fused) {
      model.zero_grad();
      GPTOutput out = fused ? model.forward(ids, targets) : model.forward(ids);
      Variable loss = fused ? out.loss
                            : autograd::cross_entropy(autograd::reshape(out.logits, {14, c.vocab_size}),
                                                      targets.reshape({14}));
      autograd::backward(loss);
      std::vector<Tensor> values{loss.value().to(DType::f64)};
      for (const auto& p : model.named_parameters()) {
        EXPECT_EQ(p.variable.grad().dtype(), DType::f64) << p.name;
        values.push_back(p.variable.grad().clone());
      }
      return values;
    };
    std::vector<Tensor> fused = loss_and_grads(true), composite = loss_and_grads(false);
    ASSERT_EQ(fused.size(), composite.size());
    for (size_t i = 0; i < fused.size(); ++i)
      EXPECT_TRUE(test::all_close(fused[i], composite[i], test::tolerance("linear_cross_entropy", DType::f32))) << i;
  }
}

TEST(GPTModel, DropoutIsAPureFunctionOfTheStep) {
  GPTConfig c = tiny();
  c.dropout = 0.2;
  GPT model(c);
  Tensor ids = test::random_ids({2, 16}, c.vocab_size);
  auto logits = [&](ForwardOptions o) {
    autograd::NoGradGuard no_grad;
    return model.forward(ids, {}, o).logits.value();
  };
  Tensor step3 = logits({.training = true, .step = 3});
  EXPECT_TRUE(test::identical(logits({.training = true, .step = 3}), step3));
  EXPECT_FALSE(test::identical(logits({.training = true, .step = 4}), step3));
  EXPECT_FALSE(test::identical(logits({.training = true, .step = 3, .micro_step = 1}), step3));

  // Evaluation ignores dropout: the same as a model built without it.
  GPTConfig no_dropout = c;
  no_dropout.dropout = 0.0;
  GPT reference(no_dropout);
  autograd::NoGradGuard no_grad;
  EXPECT_TRUE(test::identical(logits({.training = false, .step = 3}), reference.forward(ids).logits.value()));
  EXPECT_FALSE(test::identical(step3, reference.forward(ids).logits.value()));
}

// Fifty AdamW steps on one fixed batch memorise it: the loss falls far below its initial ln(vocab).
TEST(GPTModel, OverfitsOneBatch) {
  GPTConfig c = tiny();
  GPT model(c);
  Tensor ids = test::random_ids({4, 32}, c.vocab_size);
  Tensor targets = test::random_ids({4, 32}, c.vocab_size);
  auto [first, last] = test::overfit_one_batch(model, ids, targets, 50, 1e-2);
  EXPECT_NEAR(first, std::log(double(c.vocab_size)), 0.05);
  EXPECT_LT(last, 0.05 * first) << "first " << first << ", last " << last;
}

}  // namespace
}  // namespace alpha::nn
