// Activation recomputation (nn::Recompute, autograd/functions_recompute.cpp): at every level a GPT's loss and
// every parameter gradient equal those of recompute "none" bit for bit (with and without dropout, tied and untied,
// with and without biases, NSA, over two accumulated micro-batches); the fused functions and the checkpoint pass
// f64 finite-difference checks; a nested recomputation leaves the outer tape intact; TapeScope refuses what would
// bypass the outer backward; the peak memory falls with each level; the train config validates the option.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "alpha/autograd/functions.h"
#include "alpha/nn/gpt.h"
#include "alpha/ops/elementwise.h"
#include "alpha/train/telemetry.h"
#include "alpha/train/train_config.h"
#include "nn/nn_helpers.h"
#include "support/checks.h"

namespace alpha::nn {
namespace {

using autograd::Variable;

struct Variant {
  std::string name;
  GPTConfig config;
};

// Small models covering every path the levels change: tied head with biases, untied head without biases (and
// softcaps), NSA (whose gate keeps ln1's output).
std::vector<Variant> variants() {
  GPTConfig tied = test::micro_config();
  tied.n_layer = 2;
  GPTConfig untied = tied;
  untied.tie_embeddings = false;
  untied.bias = false;
  untied.attn_softcap = 20.0;
  untied.logit_softcap = 30.0;
  GPTConfig nsa = test::micro_config();
  nsa.attention = "nsa";
  nsa.nsa_block = 2;
  nsa.nsa_stride = 1;
  nsa.nsa_select_block = 2;
  nsa.nsa_select_count = 3;
  nsa.nsa_window = 3;
  return {{"tied", tied}, {"untied", untied}, {"nsa", nsa}};
}

struct StepResult {
  std::vector<double> losses;               // one per micro-batch
  std::map<std::string, Tensor> gradients;  // accumulated over the micro-batches
};

// One training step of two micro-batches (gradients accumulate over both) from a fresh model.
StepResult train_step(const GPTConfig& config, Recompute level, const std::vector<Tensor>& batches) {
  GPT model(config);
  StepResult result;
  for (size_t micro = 0; micro < batches.size(); ++micro) {
    ForwardOptions options{.training = true, .step = 5, .micro_step = micro, .recompute = level};
    GPTOutput out = model.forward(batches[micro], batches[micro], options);
    result.losses.push_back(out.loss.value().item());
    autograd::backward(out.loss);
  }
  for (const NamedParameter& p : model.named_parameters()) result.gradients[p.name] = p.variable.grad();
  return result;
}

class RecomputeLevel : public ::testing::TestWithParam<Recompute> {};

TEST_P(RecomputeLevel, LossAndEveryGradientEqualNoRecomputeBitForBit) {
  for (const Variant& v : variants()) {
    for (double dropout : {0.0, 0.2}) {
      SCOPED_TRACE(v.name + ", dropout " + std::to_string(dropout));
      GPTConfig c = v.config;
      c.dropout = dropout;
      std::vector<Tensor> batches{test::random_ids({2, c.block_size}, c.vocab_size),
                                  test::random_ids({2, c.block_size}, c.vocab_size)};
      StepResult plain = train_step(c, Recompute::none, batches);
      StepResult recomputed = train_step(c, GetParam(), batches);
      EXPECT_EQ(recomputed.losses, plain.losses);
      ASSERT_EQ(recomputed.gradients.size(), plain.gradients.size());
      for (const auto& [name, grad] : plain.gradients) {
        ASSERT_TRUE(recomputed.gradients.at(name).defined()) << name << " got no gradient";
        EXPECT_TRUE(test::bit_equal(recomputed.gradients.at(name), grad)) << name;
      }
    }
  }
}

// Data-parallel training reduces a parameter's gradient as soon as backward reports it complete: every parameter
// is reported once, holding its final gradient, the checkpoint's stand-ins never.
TEST_P(RecomputeLevel, ReportsEachParameterOnceWithItsCompleteGradient) {
  GPTConfig c = test::micro_config();
  c.n_layer = 2;
  GPT model(c);
  Tensor ids = test::random_ids({2, c.block_size}, c.vocab_size);
  std::map<const autograd::VariableState*, Tensor> reported;
  GPTOutput out = model.forward(ids, ids, {.training = true, .recompute = GetParam()});
  autograd::backward(out.loss, {}, [&](const autograd::VariableState& leaf) {
    EXPECT_TRUE(reported.emplace(&leaf, leaf.grad.clone()).second) << leaf.name << " reported twice";
  });
  std::vector<NamedParameter> parameters = model.named_parameters();
  EXPECT_EQ(reported.size(), parameters.size());
  for (const NamedParameter& p : parameters) {
    auto it = reported.find(p.variable.state().get());
    ASSERT_NE(it, reported.end()) << p.name << " never reported";
    EXPECT_TRUE(test::bit_equal(it->second, p.variable.grad())) << p.name << " reported before it was complete";
  }
}

// Evaluation (no gradients) runs the same forward and records nothing.
TEST_P(RecomputeLevel, EvaluationGivesTheSameLogitsAndRecordsNothing) {
  GPTConfig c = test::micro_config();
  GPT model(c);
  Tensor ids = test::random_ids({2, c.block_size}, c.vocab_size);
  autograd::NoGradGuard no_grad;
  Tensor plain = model.forward(ids).logits.value();
  EXPECT_TRUE(test::bit_equal(model.forward(ids, {}, {.recompute = GetParam()}).logits.value(), plain));
  EXPECT_EQ(autograd::tape_size(), 0u);
}

// Finite differences through the whole model in f64, dropout on (its masks are fixed by step and micro-step).
TEST_P(RecomputeLevel, ModelGradcheckF64) {
  GPTConfig c = test::micro_config();
  c.dropout = 0.2;
  GPT model(c, DType::f64);
  Tensor ids = test::random_ids({2, 5}, c.vocab_size), targets = test::random_ids({2, 5}, c.vocab_size);
  EXPECT_TRUE(test::model_gradcheck(model, ids, targets, {.training = true, .step = 2, .recompute = GetParam()}));
}

INSTANTIATE_TEST_SUITE_P(Levels, RecomputeLevel, ::testing::Values(Recompute::ln_gelu, Recompute::block),
                         [](const auto& info) { return info.param == Recompute::block ? "block" : "ln_gelu"; });

// A training step's peak bytes in use (the allocator's, as the trainer reports it in metrics.jsonl).
uint64_t peak_bytes_of_step(const GPT& model, const Tensor& ids, Recompute level) {
  train::CounterSnapshot start = train::CounterSnapshot::take(Device::cpu());
  GPTOutput out = model.forward(ids, ids, {.training = true, .recompute = level});
  autograd::backward(out.loss);
  return train::StepCounters::since(start, Device::cpu()).peak_bytes;
}

TEST(RecomputeMemory, PeakFallsWithEachLevel) {
  GPTConfig c;  // 4 layers of width 64 over 64 tokens
  c.n_layer = 4;
  GPT model(c);
  const int64_t B = 8;
  Tensor ids = test::random_ids({B, c.block_size}, c.vocab_size);
  peak_bytes_of_step(model, ids, Recompute::none);  // the gradient buffers exist from here on
  uint64_t none = peak_bytes_of_step(model, ids, Recompute::none);
  uint64_t ln_gelu = peak_bytes_of_step(model, ids, Recompute::ln_gelu);
  uint64_t block = peak_bytes_of_step(model, ids, Recompute::block);
  // Per block, "none" keeps 16 B·T·C-sized activations: x, ln1(x), qkv (3), the attention output, h, ln2(h), the
  // pre-activation (4) and the GELU output (4). ln_gelu drops the GELU output and both normalised copies, but
  // its backward recomputes one block's GELU output and one normalised copy at a time (5), which counts where
  // the step's peak falls in backward; block keeps only x, but recomputes one block's 16 at a time.
  const uint64_t activation_bytes = uint64_t(B * c.block_size * c.n_embd) * sizeof(float);
  EXPECT_GE(none - std::min(none, ln_gelu), uint64_t(6 * c.n_layer - 5) * activation_bytes)
      << "none " << none << ", ln_gelu " << ln_gelu;
  EXPECT_GE(none - std::min(none, block), uint64_t(15 * c.n_layer - 16) * activation_bytes)
      << "none " << none << ", block " << block;
  EXPECT_LT(block, ln_gelu) << "ln_gelu " << ln_gelu << ", block " << block;
}

// A checkpointed segment between other ops, against the same ops unsegmented: x feeds the segment twice (through
// u and directly) and the op after it; w and b are parameters the segment reads.
TEST(ActivationCheckpoint, OuterTapeSurvivesTheNestedRecomputation) {
  Tensor xv = test::random({3, 4}), wv = test::random({5, 4}), bv = test::random({5}), w_out_v = test::random({5, 4});
  auto run = [&](bool checkpointed) {
    Variable x(xv, true), w(wv, true), b(bv, true), w_out(w_out_v, true);
    Variable u = autograd::scale(x, 2.0);  // recorded before the segment: its node must survive the nested backward
    autograd::Segment segment = [&](const std::vector<Variable>& in) {
      return autograd::mul(autograd::gelu(autograd::linear(in[0], w, b)), autograd::linear(in[1], w, Variable()));
    };
    Variable y = checkpointed ? autograd::checkpoint(segment, {u, x}, {w, b}) : segment({u, x});
    Variable loss = autograd::sum(autograd::mul(y, autograd::linear(x, w_out, Variable())));
    if (checkpointed) {
      EXPECT_EQ(autograd::tape_size(), 5u);  // scale, checkpoint, linear, mul, sum
    }
    autograd::backward(loss);
    EXPECT_EQ(autograd::tape_size(), 0u);
    return std::vector<Tensor>{loss.value(), x.grad(), w.grad(), b.grad(), w_out.grad()};
  };
  std::vector<Tensor> plain = run(false), checkpointed = run(true);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(test::bit_equal(checkpointed[i], plain[i])) << i;
}

TEST(ActivationCheckpoint, GradcheckF64) {
  auto f = [](const std::vector<Variable>& v) {  // x [3,4], y [3,5], w [5,4], b [5]
    const Variable &w = v[2], &b = v[3];
    autograd::Segment segment = [&](const std::vector<Variable>& in) {
      return autograd::add(autograd::gelu(autograd::linear(in[0], w, b)), autograd::mul(in[1], in[1]));
    };
    return autograd::mul(autograd::checkpoint(segment, {v[0], v[1]}, {w, b}), v[1]);
  };
  EXPECT_TRUE(test::gradcheck(f, {test::random({3, 4}, DType::f64), test::random({3, 5}, DType::f64),
                                  test::random({5, 4}, DType::f64), test::random({5}, DType::f64)}));
}

TEST(LayerNormLinear, GradcheckF64) {
  auto f = [](const std::vector<Variable>& v) {
    return autograd::layernorm_linear(v[0], {v[1], v[2], 1e-5}, v[3], v[4]);
  };
  EXPECT_TRUE(test::gradcheck(f, {test::random({2, 3, 4}, DType::f64), test::random({4}, DType::f64, 0.5, 1.5),
                                  test::random({4}, DType::f64), test::random({6, 4}, DType::f64),
                                  test::random({6}, DType::f64)}));
}

TEST(LayerNormGeluMlp, GradcheckF64) {
  for (bool add_input : {false, true}) {
    auto f = [add_input](const std::vector<Variable>& v) {
      return autograd::layernorm_gelu_mlp(v[0], {v[1], v[2], 1e-5}, v[3], v[4], v[5], v[6], add_input);
    };
    EXPECT_TRUE(test::gradcheck(
        f, {test::random({2, 3, 4}, DType::f64), test::random({4}, DType::f64, 0.5, 1.5), test::random({4}, DType::f64),
            test::random({8, 4}, DType::f64), test::random({8}, DType::f64), test::random({4, 8}, DType::f64),
            test::random({4}, DType::f64)}))
        << "add_input " << add_input;
  }
}

// x + MLP(LayerNorm(x)) fused (add_input) against gelu_mlp with x as its residual after a separate layernorm, in
// f32: the same bits, values and every gradient, where the tape hands the fused function its output's gradient
// (behind a scale); handed a gradient someone else holds, it adds the residual's gradient in a pass of its own.
TEST(LayerNormGeluMlp, AddingItsInputMatchesGeluMlpWithItAsResidual) {
  std::vector<Tensor> values{test::random({2, 5, 6}), test::random({6}, DType::f32, 0.5, 1.5),
                             test::random({6}),       test::random({12, 6}),
                             test::random({12}),      test::random({6, 12}),
                             test::random({6})};
  Tensor dy = test::random({2, 5, 6});
  auto run = [&](bool fused, bool behind_a_scale) {
    std::vector<Variable> v;
    for (const Tensor& t : values) v.emplace_back(t, true);
    Variable y = fused ? autograd::layernorm_gelu_mlp(v[0], {v[1], v[2], 1e-5}, v[3], v[4], v[5], v[6], true)
                       : autograd::gelu_mlp(autograd::layernorm(v[0], v[1], v[2], 1e-5), v[3], v[4], v[5], v[6], v[0]);
    std::vector<Tensor> out{y.value()};
    autograd::backward(behind_a_scale ? autograd::scale(y, 0.5) : y, dy);
    for (const Variable& p : v) out.push_back(p.grad());
    return out;
  };
  const std::vector<Tensor> plain = run(false, true), fused = run(true, true), unowned = run(true, false);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(test::bit_equal(fused[i], plain[i])) << i;
    if (i > 0) {
      EXPECT_TRUE(test::all_close(unowned[i], ops::scale(plain[i], 2.0), "layernorm")) << i;
    }
  }
}

// A leaf the nested graph reaches but nobody listed would get the nested backward's gradient straight into its
// buffer; a variable of the outer graph is not live on the nested tape. Both raise; the outer tape is untouched.
TEST(TapeScope, RefusesUnlistedLeavesAndOuterGraphs) {
  Variable a(test::random({4}), true, "a"), listed(test::random({4}), true);
  Variable outer = autograd::scale(a, 3.0);
  {
    Variable stand_in(listed.value(), true);
    autograd::TapeScope scope({{listed, stand_in}});
    EXPECT_ALPHA_ERROR(autograd::mul(listed, a), ValueError, "mul", "unlisted leaf 'a'");
    EXPECT_ALPHA_ERROR(autograd::mul(listed, outer), ValueError, "mul", "still on the tape");
    Variable nested = autograd::sum(autograd::mul(listed, listed));
    autograd::backward(nested);
    EXPECT_TRUE(stand_in.grad().defined());
    EXPECT_FALSE(listed.grad().defined());
  }
  EXPECT_EQ(autograd::tape_size(), 1u);
  autograd::backward(autograd::sum(outer));
  EXPECT_TRUE(test::bit_equal(a.grad(), Tensor::full({4}, 3.0, DType::f32)));
}

TEST(RecomputeConfig, ValidatesAndRoundTrips) {
  EXPECT_EQ(train::TrainConfig().recompute, "none");
  for (const char* level : {"none", "ln_gelu", "block"}) {
    train::TrainConfig c = train::TrainConfig::from_json({{"recompute", level}});
    EXPECT_EQ(train::TrainConfig::from_json(c.to_json()).recompute, level);
    EXPECT_TRUE(recompute_from_name(level).has_value());
  }
  EXPECT_ALPHA_ERROR(train::TrainConfig::from_json({{"recompute", "everything"}}), ConfigError, "recompute",
                     "\"none\", \"ln_gelu\" or \"block\"", "everything");
  EXPECT_ALPHA_ERROR(train::TrainConfig::from_json({{"recompute", 2}}), ConfigError, "recompute");
}

}  // namespace
}  // namespace alpha::nn
