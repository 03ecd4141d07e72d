// NSA as the GPT's attention (attention = "nsa"): the config keys (read only for an NSA model, round trip,
// validation), the extra parameters, an f64 gradient check of its parameters, a tiny model whose loss falls on the
// CPU, and the configs/seed_nsa.json model at context 2048 running a forward pass.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "alpha/autograd/functions.h"
#include "alpha/nn/gpt.h"
#include "nn/nn_helpers.h"
#include "support/checks.h"

namespace alpha::nn {
namespace {

using nlohmann::json;

// c with NSA attention and blocks l, stride d, selection blocks l' (n of them), window w.
GPTConfig with_nsa(GPTConfig c, int64_t l, int64_t d, int64_t l_sel, int64_t n, int64_t w) {
  c.attention = "nsa";
  c.nsa_block = l;
  c.nsa_stride = d;
  c.nsa_select_block = l_sel;
  c.nsa_select_count = n;
  c.nsa_window = w;
  return c;
}

// micro_config with NSA blocks small enough that every branch and the top-n choice act within 8 tokens.
GPTConfig micro_nsa() { return with_nsa(test::micro_config(), 2, 1, 2, 3, 3); }

TEST(NsaGPTConfig, KeysRoundTripOnlyForNsa) {
  GPTConfig c = micro_nsa();
  json j = c.to_json();
  EXPECT_EQ(j.at("nsa_block"), 2);
  EXPECT_EQ(j.at("nsa_window"), 3);
  EXPECT_EQ(GPTConfig::from_json(j), c);
  EXPECT_FALSE(test::micro_config().to_json().contains("nsa_block"));  // other models keep their JSON as it was

  j["attention"] = "auto";
  EXPECT_ALPHA_ERROR(GPTConfig::from_json(j), ConfigError, "nsa_block", "unless \"attention\" is \"nsa\"");
  j = c.to_json();
  j["nsa_select_count"] = 2;
  EXPECT_ALPHA_ERROR(GPTConfig::from_json(j), ConfigError, "nsa_select_count", "at least 3");
  j = c.to_json();
  j["nsa_stride"] = 0;
  EXPECT_ALPHA_ERROR(GPTConfig::from_json(j), ConfigError, "nsa_stride", "positive");
  j = c.to_json();
  j["attn_softcap"] = 5.0;
  EXPECT_ALPHA_ERROR(GPTConfig::from_json(j), ConfigError, "attn_softcap", "NSA has no softcap");
}

TEST(NsaGPTModel, AddsGateAndCompressorParameters) {
  GPTConfig c = micro_nsa();
  GPT model(c);
  const int64_t D = c.head_dim(), l = c.nsa_block;
  EXPECT_EQ(model.parameter("blocks.0.attn.nsa_gate.weight").shape(), (Shape{3 * c.n_head, c.n_embd}));
  EXPECT_EQ(model.parameter("blocks.0.attn.nsa_gate.bias").shape(), (Shape{3 * c.n_head}));
  EXPECT_EQ(model.parameter("blocks.0.attn.nsa_k.pos").shape(), (Shape{l, D}));
  EXPECT_EQ(model.parameter("blocks.0.attn.nsa_k.weight").shape(), (Shape{D, l * D}));
  EXPECT_EQ(model.parameter("blocks.0.attn.nsa_v.pos").shape(), (Shape{l, D}));
  EXPECT_EQ(model.parameter("blocks.0.attn.nsa_v.weight").shape(), (Shape{D, l * D}));
  const int64_t extra = (3 * c.n_head) * (c.n_embd + 1) + 2 * (l * D + D * l * D);
  EXPECT_EQ(model.num_parameters(), GPT(test::micro_config()).num_parameters() + extra);
}

// The NSA parameters of the micro model and the qkv projection feeding it, in f64, against central finite
// differences of the loss.
TEST(NsaGPTModel, GradcheckInF64) {
  GPTConfig c = micro_nsa();
  c.init_std = 0.5;  // gradients well above the finite-difference noise
  GPT model(c, DType::f64);
  std::vector<std::string> names = {"blocks.0.attn.qkv.weight"};
  for (const char* p : {"nsa_gate.weight", "nsa_gate.bias", "nsa_k.pos", "nsa_k.weight", "nsa_v.pos", "nsa_v.weight"})
    names.push_back(std::string("blocks.0.attn.") + p);
  EXPECT_TRUE(test::model_gradcheck(model, test::random_ids({2, 8}, c.vocab_size),
                                    test::random_ids({2, 8}, c.vocab_size), {}, names));
}

// A tiny NSA model memorises one batch in 30 AdamW steps on the CPU: its loss falls well below ln(vocab).
TEST(NsaGPTModel, LossFallsOnTheCpu) {
  const GPTConfig c{.n_layer = 1, .n_embd = 32, .n_head = 4, .n_kv_head = 2, .block_size = 32, .vocab_size = 64};
  GPT model(with_nsa(c, 8, 4, 8, 3, 8));
  Tensor ids = test::random_ids({2, 32}, c.vocab_size);
  auto [first, last] = test::overfit_one_batch(model, ids, test::random_ids({2, 32}, c.vocab_size), 30, 1e-2);
  EXPECT_NEAR(first, std::log(double(c.vocab_size)), 0.1);
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
}

// The seed-sized NSA config runs a forward pass at its full context (2048) with the paper's block sizes.
TEST(NsaGPTModel, SeedConfigRunsAtContext2048) {
  GPTConfig c = load_gpt_config("seed_nsa", std::string(ALPHA_SOURCE_DIR) + "/configs");
  ASSERT_EQ(c.attention, "nsa");
  ASSERT_EQ(c.block_size, 2048);
  c.n_layer = 1;  // one block is enough to run every part at this length; the test stays short
  GPT model(c);
  autograd::NoGradGuard no_grad;
  Tensor ids = test::random_ids({1, 2048}, c.vocab_size);
  GPTOutput out = model.forward(ids, test::random_ids({1, 2048}, c.vocab_size));
  EXPECT_NEAR(out.loss.value().item(), std::log(double(c.vocab_size)), 0.1);
}

}  // namespace
}  // namespace alpha::nn
