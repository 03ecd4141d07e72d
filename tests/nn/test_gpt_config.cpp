// GPTConfig: JSON parsing, defaults, validation messages, named lookup in configs/.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "alpha/nn/gpt.h"
#include "alpha/nn/gpt_config.h"
#include "support/checks.h"

namespace alpha::nn {
namespace {

using nlohmann::json;

const std::filesystem::path kConfigsDir = std::filesystem::path(ALPHA_SOURCE_DIR) / "configs";

json minimal() { return json{{"n_layer", 2}, {"n_embd", 64}, {"n_head", 4}, {"block_size", 32}, {"vocab_size", 100}}; }

std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / name;
  std::ofstream(path) << text;
  return path;
}

TEST(GPTConfigParse, RequiredFieldsAndDefaults) {
  GPTConfig c = GPTConfig::from_json(minimal());
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_kv_head, 4);  // defaults to n_head
  EXPECT_EQ(c.block_size, 32);
  EXPECT_EQ(c.vocab_size, 100);
  EXPECT_EQ(c.dropout, 0.0);
  EXPECT_EQ(c.attn_softcap, 0.0);
  EXPECT_EQ(c.logit_softcap, 0.0);
  EXPECT_TRUE(c.bias);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.attention, "auto");
  EXPECT_EQ(c.head_dim(), 16);
}

TEST(GPTConfigParse, RoundTripsThroughJson) {
  json j = minimal();
  j["n_kv_head"] = 2;
  j["dropout"] = 0.25;
  j["attn_softcap"] = 50.0;
  j["logit_softcap"] = 30.0;
  j["bias"] = false;
  j["tie_embeddings"] = false;
  j["attention"] = "flash";
  j["layernorm_eps"] = 1e-6;
  j["init_std"] = 0.01;
  j["seed"] = 42;
  GPTConfig c = GPTConfig::from_json(j);
  EXPECT_EQ(c.to_json(), j);
  EXPECT_EQ(GPTConfig::from_json(c.to_json()), c);
}

struct BadField {
  const char* field;
  json value;  // null removes the field
  const char* expected_fragment;
};

TEST(GPTConfigParse, EveryBadValueNamesTheFieldAndWhatWasExpected) {
  const BadField cases[] = {
      {"n_embd", 66, "multiple of n_head"},
      {"n_kv_head", 3, "multiple of n_kv_head"},
      {"n_layer", 0, "positive"},
      {"n_head", -4, "positive"},
      {"block_size", 1.5, "integer"},
      {"vocab_size", "100", "integer"},
      {"vocab_size", nullptr, "required"},
      {"dropout", 1.0, "[0, 1)"},
      {"dropout", -0.1, "[0, 1)"},
      {"attn_softcap", -1.0, ">= 0"},
      {"logit_softcap", "big", "a number"},
      {"bias", "yes", "true or false"},
      {"tie_embeddings", 1, "true or false"},
      {"attention", "sparse", "\"auto\", \"reference\", \"flash\", \"nsa\""},
      {"layernorm_eps", 0.0, "> 0"},
      {"init_std", -0.02, "> 0"},
      {"seed", -1, "non-negative integer"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.field) + " = " + c.value.dump());
    json j = minimal();
    if (c.value.is_null())
      j.erase(c.field);
    else
      j[c.field] = c.value;
    EXPECT_ALPHA_ERROR(GPTConfig::from_json(j), ConfigError, "GPTConfig", c.field, c.expected_fragment);
  }
}

TEST(GPTConfigParse, RejectsUnknownFieldsByName) {
  json j = minimal();
  j["n_layers"] = 3;
  EXPECT_ALPHA_ERROR(GPTConfig::from_json(j), ConfigError, "n_layers", "unknown field", "n_layer");
  EXPECT_ALPHA_ERROR(GPTConfig::from_json(json::array()), ConfigError, "JSON object");
}

TEST(GPTConfigParse, ValidateCatchesValuesSetInCode) {
  GPTConfig c;
  EXPECT_NO_THROW(c.validate());
  c.n_head = 6;  // n_embd 64 is not a multiple
  EXPECT_ALPHA_ERROR(c.validate(), ConfigError, "n_embd", "multiple of n_head (6)", "64");
}

TEST(GPTConfigParse, NamedConfigsLoadFromTheConfigsDirectory) {
  GPTConfig tiny = load_gpt_config("tiny", kConfigsDir);
  EXPECT_EQ(tiny.n_layer, 2);
  EXPECT_EQ(tiny.n_embd, 64);
  EXPECT_EQ(tiny.n_head, 4);
  EXPECT_EQ(tiny.n_kv_head, 2);
  EXPECT_EQ(tiny.block_size, 64);
  EXPECT_EQ(tiny.vocab_size, 512);

  GPTConfig seed = load_gpt_config("seed", kConfigsDir);
  EXPECT_EQ(seed.n_layer, 8);
  EXPECT_EQ(seed.n_embd, 384);
  EXPECT_EQ(seed.n_head, 8);
  EXPECT_EQ(seed.block_size, 512);
  EXPECT_EQ(seed.vocab_size, 4096);

  GPTConfig gpt2 = load_gpt_config("gpt2-124m", kConfigsDir);
  EXPECT_EQ(gpt2.n_layer, 12);
  EXPECT_EQ(gpt2.n_embd, 768);
  EXPECT_EQ(gpt2.n_head, 12);
  EXPECT_EQ(gpt2.block_size, 1024);
  EXPECT_EQ(gpt2.vocab_size, 50304);

  // A path works as well as a name.
  EXPECT_EQ(load_gpt_config((kConfigsDir / "tiny.json").string(), "/nonexistent"), tiny);
}

TEST(GPTConfigParse, UnknownNameListsTheAvailableOnes) {
  EXPECT_ALPHA_ERROR(load_gpt_config("huge", kConfigsDir), ConfigError, "'huge'", "tiny", "seed", "gpt2-124m");
}

TEST(GPTConfigParse, FileErrorsNameTheFile) {
  auto bad_json = write_temp("alpha_bad_json.json", "{\"n_layer\": 2,");
  EXPECT_ALPHA_ERROR(load_gpt_config_file(bad_json), ConfigError, "alpha_bad_json.json", "not valid JSON");
  json j = minimal();
  j["dropout"] = 2.0;
  auto bad_value = write_temp("alpha_bad_value.json", j.dump());
  EXPECT_ALPHA_ERROR(load_gpt_config_file(bad_value), ConfigError, "alpha_bad_value.json", "dropout");
  EXPECT_ALPHA_ERROR(load_gpt_config_file(std::filesystem::path(::testing::TempDir()) / "alpha_missing.json"), IOError,
                     "alpha_missing.json");
}

// Regression (fuzz/corpus/config/deep_nesting): deep nesting parsed and then recursed (json_desc's dump)
// once per level; it is now rejected while parsing.
TEST(GPTConfigParse, RejectsDeepNestingAndReadsFromText) {
  std::string deep = "{\"n_layer\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_ALPHA_ERROR(parse_gpt_config(deep, "deep.json"), ConfigError, "file 'deep.json'", "nested deeper than 64");
  auto path = write_temp("alpha_deep.json", deep);
  EXPECT_ALPHA_ERROR(load_gpt_config_file(path), ConfigError, "alpha_deep.json", "nested deeper than 64");
  EXPECT_EQ(parse_gpt_config("// comment\n" + minimal().dump(), "text").n_layer, minimal()["n_layer"].get<int64_t>());
  // Regression (fuzz/corpus/config/crash_number_past_double): nlohmann's out_of_range (not a parse_error)
  // escaped as an untyped exception.
  EXPECT_ALPHA_ERROR(parse_gpt_config(R"({"dropout": 1e400})", "big.json"), ConfigError, "file 'big.json'",
                     "not valid JSON", "number overflow");
}

TEST(GPTConfigParse, ModelRefusesAttentionItCannotRunThere) {
  GPTConfig c = GPTConfig::from_json(minimal());
  c.attention = "flash";  // on the CPU
  EXPECT_ALPHA_ERROR(GPT model(c), ConfigError, "GPT", "attention", "flash", "runs on a CUDA device", "cpu");
}

}  // namespace
}  // namespace alpha::nn
