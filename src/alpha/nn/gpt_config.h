// The shape and regularisation of a GPT model, read from JSON. Validation is strict: every bad value
// and every unknown field raises ConfigError naming the field and what it should have been, so a typo
// in a config file never silently falls back to a default.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace alpha::nn {

struct GPTConfig {
  int64_t n_layer = 2;
  int64_t n_embd = 64;
  int64_t n_head = 4;
  int64_t n_kv_head = 4;    // key/value heads (GQA); n_head is a multiple of it; JSON default: n_head
  int64_t block_size = 64;  // context length
  int64_t vocab_size = 512;
  double dropout = 0.0;                 // residual, embedding and attention-probability dropout, in [0, 1)
  double attn_softcap = 0.0;            // 0 = off; else attention scores S = c·tanh(S/c)
  double logit_softcap = 0.0;           // 0 = off; else logits = c·tanh(logits/c)
  bool bias = true;                     // biases in the linear layers and LayerNorms
  bool tie_embeddings = true;           // the output head reuses wte.weight
  std::string attention = "auto";       // "auto", "reference", "flash" or "nsa" (kAttentionKinds)
  double layernorm_eps = 1e-5;
  double init_std = 0.02;
  uint64_t seed = 1337;  // parameter initialisation and dropout masks
  // Native Sparse Attention (attention = "nsa"; ops/nsa.h): compression block length l and stride d, selection
  // block length l' and count n (>= 3), sliding window w. JSON carries them only for an NSA model.
  int64_t nsa_block = 32;
  int64_t nsa_stride = 16;
  int64_t nsa_select_block = 64;
  int64_t nsa_select_count = 16;
  int64_t nsa_window = 512;

  int64_t head_dim() const { return n_embd / n_head; }

  // Throws ConfigError for the first invalid field.
  void validate() const;

  // Required fields: n_layer, n_embd, n_head, block_size, vocab_size; the rest default as above.
  static GPTConfig from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;

  bool operator==(const GPTConfig&) const = default;
};

// The attention implementations a config may name.
// "auto": flash attention on a GPU, the reference (materialising) attention on the CPU; "reference": the
// materialising attention on either device; "flash": the flash kernels (a GPU only); "nsa": Native Sparse
// Attention (the CPU reference only, so far).
inline constexpr std::string_view kAttentionKinds[] = {"auto", "reference", "flash", "nsa"};

// Activation recomputation in training: what forward keeps for backward and what backward recomputes
// (autograd/functions.h). The gradients do not depend on the level: bit for bit on the CPU and in f32; in bf16
// on a GPU, ln_gelu's recomputed GELU output may round differently (docs/PERFORMANCE.md).
enum class Recompute {
  none,     // keep every activation backward reads
  // keep the inputs of the LayerNorms and of the MLP's GELU, not their outputs (recomputed; no matrix product
  // is); an NSA model keeps ln1's output, which its gate reads beside qkv
  ln_gelu,
  block,    // keep each transformer block's input only; backward runs the whole block again
};
inline constexpr const char* kRecomputeNames = "\"none\", \"ln_gelu\" or \"block\"";
// The level named "none", "ln_gelu" or "block"; nullopt for any other name.
std::optional<Recompute> recompute_from_name(std::string_view name);

// Reads and validates a config file; an unreadable file raises IOError, bad JSON or values ConfigError
// (the message names the file).
GPTConfig load_gpt_config_file(const std::filesystem::path& path);

// The same from the text of a config file (JSON, comments allowed); `origin` names it in errors.
GPTConfig parse_gpt_config(std::string_view text, const std::string& origin);

// `name_or_path` is either a path to an existing file, or a name looked up as
// <configs_dir>/<name>.json ("tiny" -> configs_dir/tiny.json). An unknown name raises ConfigError
// listing the names configs_dir holds.
GPTConfig load_gpt_config(std::string_view name_or_path, const std::filesystem::path& configs_dir);

}  // namespace alpha::nn
