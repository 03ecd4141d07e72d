// The config readers on arbitrary text: a model config file (alpha/nn/gpt_config.h, parse_gpt_config,
// which load_gpt_config_file reads through; JSON with comments) and the train config
// (alpha/train/train_config.h, TrainConfig::from_json and merge_fields, as a resumed run reads
// config.json's and state.json's "train_config"). Bad JSON, unknown fields, wrong types and out-of-range
// values must raise ConfigError; an accepted config must validate and survive a JSON round trip.
#include "alpha/core/json.h"
#include "alpha/nn/gpt_config.h"
#include "alpha/train/train_config.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace alpha;
  std::string_view text = fuzz::as_text(data, size);
  fuzz::expect_typed_errors([&] {
    nn::GPTConfig model = nn::parse_gpt_config(text, "fuzz.json");
    model.validate();
    fuzz::require(nn::GPTConfig::from_json(model.to_json()) == model, "a model config survives a JSON round trip");
  });
  nlohmann::json j = parse_json(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  fuzz::expect_typed_errors([&] {
    train::TrainConfig config = train::TrainConfig::from_json(j);
    config.validate();
    fuzz::require(train::TrainConfig::from_json(config.to_json()).to_json() == config.to_json(),
                  "a train config survives a JSON round trip");
  });
  fuzz::expect_typed_errors([&] {
    // `alpha train --resume --steps 10`: the saved config (outside data) with a flag merged in.
    (void)train::TrainConfig::from_json(train::merge_fields(j, {{"steps", 10}}, "train config"));
  });
  return 0;
}
