#include "alpha/nn/gpt_config.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

#include "alpha/core/error.h"
#include "alpha/core/json.h"

namespace alpha::nn {

namespace {

using nlohmann::json;

constexpr std::string_view kOp = "GPTConfig";

constexpr std::string_view kFields[] = {"n_layer",        "n_embd",    "n_head",        "n_kv_head",     "block_size",
                                        "vocab_size",     "dropout",   "attn_softcap",  "logit_softcap", "bias",
                                        "tie_embeddings", "attention", "layernorm_eps", "init_std",      "seed",
                                        "nsa_block",      "nsa_stride", "nsa_select_block", "nsa_select_count",
                                        "nsa_window"};
// The fields an NSA model adds (kFields' last five).
constexpr std::string_view kNsaFields[] = {"nsa_block", "nsa_stride", "nsa_select_block", "nsa_select_count",
                                           "nsa_window"};
constexpr std::string_view kRequired[] = {"n_layer", "n_embd", "n_head", "block_size", "vocab_size"};

std::string json_desc(const json& v) { return std::string(v.type_name()) + " " + v.dump(); }

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

int64_t read_int(const json& v, std::string_view field) {
  bool fits = v.is_number_integer() &&
              (!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()));
  if (!fits) raise<ConfigError>(kOp, field, "an integer", json_desc(v));
  return v.get<int64_t>();
}

uint64_t read_unsigned(const json& v, std::string_view field) {
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
    raise<ConfigError>(kOp, field, "a non-negative integer", json_desc(v));
  return v.get<uint64_t>();
}

double read_double(const json& v, std::string_view field) {
  if (!v.is_number()) raise<ConfigError>(kOp, field, "a number", json_desc(v));
  return v.get<double>();
}

bool read_bool(const json& v, std::string_view field) {
  if (!v.is_boolean()) raise<ConfigError>(kOp, field, "true or false", json_desc(v));
  return v.get<bool>();
}

std::string read_string(const json& v, std::string_view field) {
  if (!v.is_string()) raise<ConfigError>(kOp, field, "a string", json_desc(v));
  return v.get<std::string>();
}

void require_positive(int64_t value, std::string_view field) {
  if (value < 1) raise<ConfigError>(kOp, field, "a positive integer", std::to_string(value));
}

void require_non_negative(double value, std::string_view field, std::string_view meaning) {
  if (!(value >= 0.0)) raise<ConfigError>(kOp, field, meaning, std::to_string(value));
}

// The NSA fields with their values, in kNsaFields' order.
std::array<std::pair<std::string_view, int64_t>, 5> nsa_values(const GPTConfig& c) {
  return {{{kNsaFields[0], c.nsa_block},
           {kNsaFields[1], c.nsa_stride},
           {kNsaFields[2], c.nsa_select_block},
           {kNsaFields[3], c.nsa_select_count},
           {kNsaFields[4], c.nsa_window}}};
}

}  // namespace

void GPTConfig::validate() const {
  require_positive(n_layer, "n_layer");
  require_positive(n_embd, "n_embd");
  require_positive(n_head, "n_head");
  require_positive(n_kv_head, "n_kv_head");
  require_positive(block_size, "block_size");
  require_positive(vocab_size, "vocab_size");
  if (vocab_size > std::numeric_limits<int32_t>::max())
    raise<ConfigError>(kOp, "vocab_size", "at most 2^31 - 1 (token ids are i32)", std::to_string(vocab_size));
  if (n_embd % n_head != 0)
    raise<ConfigError>(kOp, "n_embd", "a multiple of n_head (" + std::to_string(n_head) + ")", std::to_string(n_embd));
  if (n_head % n_kv_head != 0)
    raise<ConfigError>(kOp, "n_head", "a multiple of n_kv_head (" + std::to_string(n_kv_head) + ")",
                       std::to_string(n_head));
  if (!(dropout >= 0.0 && dropout < 1.0))
    raise<ConfigError>(kOp, "dropout", "a probability in [0, 1)", std::to_string(dropout));
  require_non_negative(attn_softcap, "attn_softcap", "a cap >= 0 (0 = off)");
  require_non_negative(logit_softcap, "logit_softcap", "a cap >= 0 (0 = off)");
  if (std::find(std::begin(kAttentionKinds), std::end(kAttentionKinds), attention) == std::end(kAttentionKinds))
    raise<ConfigError>(kOp, "attention", "one of \"auto\", \"reference\", \"flash\", \"nsa\"", "\"" + attention + "\"");
  if (!(layernorm_eps > 0.0)) raise<ConfigError>(kOp, "layernorm_eps", "a value > 0", std::to_string(layernorm_eps));
  for (auto [field, value] : nsa_values(*this)) require_positive(value, field);
  if (nsa_select_count < 3)
    raise<ConfigError>(kOp, "nsa_select_count", "at least 3 (the first and the two local blocks are always kept)",
                       std::to_string(nsa_select_count));
  if (attention == "nsa" && attn_softcap != 0.0)
    raise<ConfigError>(kOp, "attn_softcap", "0 with attention \"nsa\" (NSA has no softcap)",
                       std::to_string(attn_softcap));
  if (!(init_std > 0.0)) raise<ConfigError>(kOp, "init_std", "a value > 0", std::to_string(init_std));
}

GPTConfig GPTConfig::from_json(const json& j) {
  if (!j.is_object()) raise<ConfigError>(kOp, "config", "a JSON object", json_desc(j));
  for (const auto& [key, value] : j.items())
    if (std::find(std::begin(kFields), std::end(kFields), key) == std::end(kFields)) {
      std::vector<std::string> known(std::begin(kFields), std::end(kFields));
      raise<ConfigError>(kOp, key, "a known field (" + joined(known) + ")", "an unknown field");
    }
  for (std::string_view field : kRequired)
    if (!j.contains(field)) raise<ConfigError>(kOp, field, "a value (the field is required)", "none");

  GPTConfig c;
  c.n_layer = read_int(j.at("n_layer"), "n_layer");
  c.n_embd = read_int(j.at("n_embd"), "n_embd");
  c.n_head = read_int(j.at("n_head"), "n_head");
  c.n_kv_head = j.contains("n_kv_head") ? read_int(j.at("n_kv_head"), "n_kv_head") : c.n_head;
  c.block_size = read_int(j.at("block_size"), "block_size");
  c.vocab_size = read_int(j.at("vocab_size"), "vocab_size");
  if (j.contains("dropout")) c.dropout = read_double(j.at("dropout"), "dropout");
  if (j.contains("attn_softcap")) c.attn_softcap = read_double(j.at("attn_softcap"), "attn_softcap");
  if (j.contains("logit_softcap")) c.logit_softcap = read_double(j.at("logit_softcap"), "logit_softcap");
  if (j.contains("bias")) c.bias = read_bool(j.at("bias"), "bias");
  if (j.contains("tie_embeddings")) c.tie_embeddings = read_bool(j.at("tie_embeddings"), "tie_embeddings");
  if (j.contains("attention")) c.attention = read_string(j.at("attention"), "attention");
  if (j.contains("layernorm_eps")) c.layernorm_eps = read_double(j.at("layernorm_eps"), "layernorm_eps");
  if (j.contains("init_std")) c.init_std = read_double(j.at("init_std"), "init_std");
  if (j.contains("seed")) c.seed = read_unsigned(j.at("seed"), "seed");
  int64_t* nsa_slots[] = {&c.nsa_block, &c.nsa_stride, &c.nsa_select_block, &c.nsa_select_count, &c.nsa_window};
  for (size_t i = 0; i < std::size(kNsaFields); ++i) {
    if (!j.contains(kNsaFields[i])) continue;
    if (c.attention != "nsa")
      raise<ConfigError>(kOp, kNsaFields[i], "no value unless \"attention\" is \"nsa\"", "\"" + c.attention + "\"");
    *nsa_slots[i] = read_int(j.at(kNsaFields[i]), kNsaFields[i]);
  }
  c.validate();
  return c;
}

json GPTConfig::to_json() const {
  json j{{"n_layer", n_layer},
         {"n_embd", n_embd},
         {"n_head", n_head},
         {"n_kv_head", n_kv_head},
         {"block_size", block_size},
         {"vocab_size", vocab_size},
         {"dropout", dropout},
         {"attn_softcap", attn_softcap},
         {"logit_softcap", logit_softcap},
         {"bias", bias},
         {"tie_embeddings", tie_embeddings},
         {"attention", attention},
         {"layernorm_eps", layernorm_eps},
         {"init_std", init_std},
         {"seed", seed}};
  if (attention == "nsa")
    for (auto [field, value] : nsa_values(*this)) j[std::string(field)] = value;
  return j;
}

GPTConfig parse_gpt_config(std::string_view text, const std::string& origin) {
  json j;
  try {
    j = parse_json(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const JsonParseError& e) {
    throw ConfigError("[load_gpt_config] file '" + origin + "': not valid JSON: " + e.what());
  }
  try {
    return GPTConfig::from_json(j);
  } catch (const ConfigError& e) {
    throw ConfigError("[load_gpt_config] file '" + origin + "': " + e.what());
  }
}

GPTConfig load_gpt_config_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) raise_io("load_gpt_config", path.string(), -1, "cannot be opened for reading");
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) raise_io("load_gpt_config", path.string(), -1, "cannot be read");
  return parse_gpt_config(text, path.string());
}

GPTConfig load_gpt_config(std::string_view name_or_path, const std::filesystem::path& configs_dir) {
  std::filesystem::path as_path(name_or_path);
  if (std::filesystem::is_regular_file(as_path)) return load_gpt_config_file(as_path);
  std::filesystem::path named = configs_dir / (std::string(name_or_path) + ".json");
  if (std::filesystem::is_regular_file(named)) return load_gpt_config_file(named);

  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(configs_dir, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  std::string got = "'";  // appended rather than "'" + name, which trips GCC 12's -Wrestrict false positive
  got.append(name_or_path).append("'");
  raise<ConfigError>("load_gpt_config", "config",
                     "an existing file or a config name in '" + configs_dir.string() + "' (" +
                         (names.empty() ? std::string("none there") : joined(names)) + ")",
                     got);
}

std::optional<Recompute> recompute_from_name(std::string_view name) {
  if (name == "none") return Recompute::none;
  if (name == "ln_gelu") return Recompute::ln_gelu;
  if (name == "block") return Recompute::block;
  return std::nullopt;
}

}  // namespace alpha::nn
