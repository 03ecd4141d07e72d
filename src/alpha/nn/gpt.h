// The GPT: token + learned position embeddings, n_layer pre-LayerNorm transformer blocks
//   x = x + dropout(attn(ln1(x)));  x = x + dropout(mlp(ln2(x)))
// a final LayerNorm, and an output head (tied to wte or separate) with an optional logit softcap.
// Attention is causal self-attention (grouped-query when n_kv_head < n_head) computed from one fused
// qkv projection whose output features are all q heads, then all k heads, then all v heads.
//
// Parameter names: wte.weight, wpe.weight, blocks.{i}.{ln1,ln2}.{weight,bias},
// blocks.{i}.attn.{qkv,proj}.{weight,bias}, blocks.{i}.mlp.{fc,proj}.{weight,bias}, ln_f.{weight,bias},
// lm_head.weight (only when untied); biases only when config.bias. An NSA model (attention "nsa") adds per block
// blocks.{i}.attn.nsa_gate.{weight,bias} (gate logits, 3 per head: compressed, selected, window) and
// blocks.{i}.attn.{nsa_k,nsa_v}.{pos,weight} (the compressors).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "alpha/autograd/variable.h"
#include "alpha/nn/gpt_config.h"
#include "alpha/nn/layers.h"
#include "alpha/nn/module.h"

namespace alpha::nn {

struct ForwardOptions {
  bool training = false;  // dropout is active only when training (and config.dropout > 0)
  // Dropout masks are a pure function of (config.seed, step, micro_step), so a resumed run redraws
  // exactly the masks of the run it continues. micro_step tells gradient-accumulation micro-batches
  // of one step apart.
  uint64_t step = 0;
  uint64_t micro_step = 0;
  Recompute recompute = Recompute::none;  // what a recorded forward keeps for backward
  // The caller vouches for ids and targets (ids in [0, vocab_size), targets too and none ignored), checked where
  // they came from: the forward reads none of them back, wherever they lie, and moves nothing between the host
  // and the device besides them (except in f16 compute, whose separate loss validates the targets it reads back).
  // Device ids and targets then make a forward a CUDA graph can capture.
  bool inputs_checked = false;
};

struct GPTOutput {
  autograd::Variable logits;  // [B, T, vocab_size]; undefined when the loss came from the fused head (forward)
  autograd::Variable loss;    // 0-dimensional mean cross-entropy; undefined when no targets were given
};

class Block;  // one transformer block (gpt.cpp)

class GPT : public Module {
 public:
  // Validates the config; raises ConfigError for an attention implementation this build lacks.
  // Parameters are initialised deterministically from config.seed: weights ~ normal(0, init_std), the
  // residual projections (attn.proj, mlp.proj) with init_std/√(2·n_layer) as in GPT-2, LayerNorm
  // weights 1, biases 0. Parameters are held in `dtype`; the computation runs in `compute_dtype` (default:
  // the same), e.g. f32 parameters with bf16 compute (see ParameterOptions).
  explicit GPT(const GPTConfig& config, DType dtype = DType::f32, Device device = Device::cpu(),
               std::optional<DType> compute_dtype = std::nullopt);
  ~GPT() override;

  const GPTConfig& config() const { return config_; }
  DType dtype() const { return options_.dtype; }
  DType compute_dtype() const { return options_.compute(); }
  Device device() const { return options_.device; }
  // The attention this model runs, in words for the logs: on a GPU with flash attention, which kernels
  // (ops::flash_attention_kernels: the Hopper ones on a compute capability 9.0 device).
  std::string attention_kernels() const;

  // ids [B, T] i32 with 1 <= T <= block_size; targets [B, T] i32 (or undefined), entries in
  // [0, vocab_size) or ops::kIgnoreIndex, on the host (validated there, with no wait for the device) or on
  // the model's device. With targets the output holds the loss only, from the fused head and loss
  // (autograd::linear_cross_entropy), unless the compute dtype is f16: then the logits too.
  GPTOutput forward(const Tensor& ids, const Tensor& targets = {}, const ForwardOptions& options = {}) const;

 private:
  GPTConfig config_;
  ParameterOptions options_;
  Embedding wte_;
  Embedding wpe_;
  std::vector<std::unique_ptr<Block>> blocks_;
  LayerNorm ln_f_;
  std::unique_ptr<Linear> lm_head_;  // null when tied to wte
  // The position ids [B, T] on the model's device of each shape a training forward saw, kept for the next of
  // that shape: a training step then builds no host vector and makes no host-to-device copy for them. Never
  // replaced: a captured step (a CUDA graph) reads them at their address.
  mutable std::map<Shape, Tensor> position_ids_;
};

}  // namespace alpha::nn
