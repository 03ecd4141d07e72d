#include "alpha/nn/gpt.h"

#include <cmath>
#include <memory>
#include <string>

#include "alpha/autograd/functions.h"
#include "alpha/ops/check.h"
#include "alpha/ops/index_check.h"

namespace alpha::nn {

using autograd::Variable;

namespace {

// Hands out the dropout configuration of each dropout site in forward order. Every site gets its own
// Philox stream (a seed derived from the step's seed and the site's index), so no two sites share bits
// whatever their sizes. When inactive every site gets p = 0.
class DropoutSites {
 public:
  DropoutSites(double p, uint64_t step_seed) : p_(p), step_seed_(step_seed) {}
  bool active() const { return p_ > 0.0; }
  ops::DropoutConfig next() { return {p_, derive_seed(step_seed_, site_++), 0}; }

 private:
  double p_;
  uint64_t step_seed_;
  uint64_t site_ = 0;
};

// A block's dropout configurations, drawn before it runs so that a recomputation of the block (level
// "block") redraws the masks of its first run. Sites in the order the model has always drawn them: the
// attention probabilities, then the two residual branches.
struct BlockDropout {
  ops::DropoutConfig attention, attn_residual, mlp_residual;

  static BlockDropout draw(DropoutSites& sites) {
    BlockDropout d;
    d.attention = sites.next();
    d.attn_residual = sites.next();
    d.mlp_residual = sites.next();
    return d;
  }
};

// Whether the model's dense attention runs the flash kernels: asked for, or "auto" on a GPU.
bool uses_flash(const GPTConfig& c, Device device) {
  return c.attention == "flash" || (c.attention == "auto" && device.is_cuda());
}

autograd::LayerNormParams params_of(const LayerNorm& norm) { return {norm.weight(), norm.bias(), norm.eps()}; }

}  // namespace

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(std::string prefix, const GPTConfig& c, const ParameterOptions& o)
      : Module(std::move(prefix)),
        config_(c),
        flash_(uses_flash(c, o.device)),
        qkv_(child_prefix("qkv"), c.n_embd, (c.n_head + 2 * c.n_kv_head) * c.head_dim(), c.bias, c.init_std, o),
        proj_(child_prefix("proj"), c.n_embd, c.n_embd, c.bias, c.init_std / std::sqrt(2.0 * double(c.n_layer)), o) {
    add_child(qkv_);
    add_child(proj_);
    if (c.attention != "nsa") return;
    nsa_gate_ = std::make_unique<Linear>(child_prefix("nsa_gate"), c.n_embd, kernels::kNsaBranches * c.n_head, c.bias,
                                         c.init_std, o);
    nsa_k_ = std::make_unique<NsaCompressor>(child_prefix("nsa_k"), c.nsa_block, c.head_dim(), c.init_std, o);
    nsa_v_ = std::make_unique<NsaCompressor>(child_prefix("nsa_v"), c.nsa_block, c.head_dim(), c.init_std, o);
    add_child(*nsa_gate_);
    add_child(*nsa_k_);
    add_child(*nsa_v_);
  }

  // attn(norm(x)) for the block's input x (B, T, C) and its first LayerNorm, plus x itself with add_input (added
  // by the output projection's GEMM). With recompute_norm the normalised x is recomputed in backward, unless NSA's
  // gate reads it too.
  Variable forward(const Variable& x, const LayerNorm& norm, bool recompute_norm, const ops::DropoutConfig& probs,
                   bool add_input) const {
    int64_t B = x.size(0), T = x.size(1), D = config_.head_dim();
    int64_t q_width = config_.n_head * D, kv_width = config_.n_kv_head * D;
    const bool keep_normed = !recompute_norm || nsa_gate_;
    Variable normed = keep_normed ? norm.forward(x) : Variable();
    Variable qkv = keep_normed  // (B, T, (Hq + 2·Hkv)·D)
                       ? qkv_.forward(normed)
                       : autograd::layernorm_linear(x, params_of(norm), qkv_.weight(), qkv_.bias());
    ops::AttentionConfig attention;
    attention.causal = true;
    attention.softcap = config_.attn_softcap;
    attention.dropout_p = probs.p;
    attention.dropout_seed = probs.seed;
    attention.dropout_offset = probs.offset;
    Variable y;  // (B, T, Hq, D)
    if (nsa_gate_) {
      // Strided views of qkv: the kernels read them in place (unit stride along D).
      Variable q = autograd::reshape(autograd::slice(qkv, 2, 0, q_width), {B, T, config_.n_head, D});
      Variable k = autograd::reshape(autograd::slice(qkv, 2, q_width, q_width + kv_width), {B, T, config_.n_kv_head, D});
      Variable v = autograd::reshape(autograd::slice(qkv, 2, q_width + kv_width, q_width + 2 * kv_width),
                                     {B, T, config_.n_kv_head, D});
      y = nsa(normed, q, k, v);
    } else {
      y = autograd::self_attention(qkv, config_.n_head, config_.n_kv_head, attention,
                                   flash_ ? autograd::AttentionKernel::flash : autograd::AttentionKernel::materialized);
    }
    return proj_.forward(autograd::reshape(y, {B, T, config_.n_embd}), add_input ? x : Variable());
  }

 private:
  // NSA (no attention-probability dropout: its dropout site is drawn and left unused, so the other sites keep
  // their streams). The gate logits come from the block's normalised input x: (B, T, Hq·3) -> (B, T, Hq, 3).
  Variable nsa(const Variable& x, const Variable& q, const Variable& k, const Variable& v) const {
    Variable gates = autograd::reshape(nsa_gate_->forward(x), {x.size(0), x.size(1), config_.n_head, 3});
    ops::NsaConfig nsa;
    nsa.block_len = config_.nsa_block;
    nsa.block_stride = config_.nsa_stride;
    nsa.select_len = config_.nsa_select_block;
    nsa.select_count = config_.nsa_select_count;
    nsa.window = config_.nsa_window;
    return autograd::nsa({q, k, v, gates, nsa_k_->compute_pos(), nsa_k_->compute_weight(), nsa_v_->compute_pos(),
                          nsa_v_->compute_weight()},
                         nsa);
  }

  const GPTConfig& config_;
  bool flash_;  // flash kernels, else the materialising attention (unless NSA)
  Linear qkv_;
  Linear proj_;
  std::unique_ptr<Linear> nsa_gate_;  // NSA only, as the two compressors
  std::unique_ptr<NsaCompressor> nsa_k_;
  std::unique_ptr<NsaCompressor> nsa_v_;
};

class MLP : public Module {
 public:
  MLP(std::string prefix, const GPTConfig& c, const ParameterOptions& o)
      : Module(std::move(prefix)),
        fc_(child_prefix("fc"), c.n_embd, 4 * c.n_embd, c.bias, c.init_std, o),
        proj_(child_prefix("proj"), 4 * c.n_embd, c.n_embd, c.bias, c.init_std / std::sqrt(2.0 * double(c.n_layer)),
              o) {
    add_child(fc_);
    add_child(proj_);
  }

  // proj(gelu(fc(norm(x)))), plus x itself with add_input (added by proj's GEMM); with recompute_norm_gelu
  // neither norm(x) nor the GELU output is kept.
  Variable forward(const Variable& x, const LayerNorm& norm, bool recompute_norm_gelu, bool add_input) const {
    if (!recompute_norm_gelu) return gelu_mlp(fc_, proj_, norm.forward(x), add_input ? x : Variable());
    return autograd::layernorm_gelu_mlp(x, params_of(norm), fc_.weight(), fc_.bias(), proj_.weight(), proj_.bias(),
                                        add_input);
  }

 private:
  Linear fc_;
  Linear proj_;
};

class Block : public Module {
 public:
  Block(std::string prefix, const GPTConfig& c, const ParameterOptions& o)
      : Module(std::move(prefix)),
        ln1_(child_prefix("ln1"), c.n_embd, c.bias, c.layernorm_eps, o),
        attn_(child_prefix("attn"), c, o),
        ln2_(child_prefix("ln2"), c.n_embd, c.bias, c.layernorm_eps, o),
        mlp_(child_prefix("mlp"), c, o) {
    add_child(ln1_);
    add_child(attn_);
    add_child(ln2_);
    add_child(mlp_);
  }

  // recompute_norms: level "ln_gelu" (each LayerNorm fused into the layer reading it, the GELU output dropped).
  // A residual add without dropout (p = 0) is done by the GEMM that ends its branch (its addend), with no pass of
  // its own.
  Variable forward(const Variable& x, const BlockDropout& dropout, bool recompute_norms) const {
    const bool attn_residual_in_gemm = dropout.attn_residual.p == 0.0;
    Variable h = attn_.forward(x, ln1_, recompute_norms, dropout.attention, attn_residual_in_gemm);
    if (!attn_residual_in_gemm) h = autograd::residual_dropout_add(x, h, dropout.attn_residual);
    const bool mlp_residual_in_gemm = dropout.mlp_residual.p == 0.0;
    Variable out = mlp_.forward(h, ln2_, recompute_norms, mlp_residual_in_gemm);
    return mlp_residual_in_gemm ? out : autograd::residual_dropout_add(h, out, dropout.mlp_residual);
  }

  // forward(x) keeping only x (level "block"): backward runs the block again, with the same dropout masks.
  Variable forward_checkpointed(const Variable& x, const BlockDropout& dropout) const {
    std::vector<Variable> parameters;
    for (const NamedParameter& p : named_parameters()) parameters.push_back(p.variable);
    auto block = [this, dropout](const std::vector<Variable>& in) { return forward(in[0], dropout, false); };
    return autograd::checkpoint(block, {x}, parameters);
  }

 private:
  LayerNorm ln1_;
  CausalSelfAttention attn_;
  LayerNorm ln2_;
  MLP mlp_;
};

namespace {

const GPTConfig& checked(const GPTConfig& config, Device device) {
  config.validate();
  if (config.attention == "flash" && !device.is_cuda())
    raise<ConfigError>("GPT", "attention",
                       "\"auto\" or \"reference\" on " + device.str() + " (flash attention runs on a CUDA device)",
                       "\"flash\"");
  return config;
}

}  // namespace

GPT::GPT(const GPTConfig& config, DType dtype, Device device, std::optional<DType> compute_dtype)
    : Module(""),
      config_(checked(config, device)),
      options_{config.seed, dtype, device, compute_dtype},
      wte_("wte", config.vocab_size, config.n_embd, config.init_std, options_),
      wpe_("wpe", config.block_size, config.n_embd, config.init_std, options_),
      ln_f_("ln_f", config.n_embd, config.bias, config.layernorm_eps, options_) {
  add_child(wte_);
  add_child(wpe_);
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    blocks_.push_back(std::make_unique<Block>("blocks." + std::to_string(i), config_, options_));
    add_child(*blocks_.back());
  }
  add_child(ln_f_);
  if (!config_.tie_embeddings) {
    lm_head_ =
        std::make_unique<Linear>("lm_head", config_.n_embd, config_.vocab_size, false, config_.init_std, options_);
    add_child(*lm_head_);
  }
}

GPT::~GPT() = default;

std::string GPT::attention_kernels() const {
  if (config_.attention == "nsa") return "Native Sparse Attention";
  if (!uses_flash(config_, device())) return "materialising attention (the reference)";
  return "flash attention, " +
         ops::flash_attention_kernels(device(), compute_dtype(), config_.head_dim(), config_.head_dim());
}

GPTOutput GPT::forward(const Tensor& ids, const Tensor& targets, const ForwardOptions& options) const {
  constexpr const char* op = "GPT::forward";
  ops::check_defined(op, "ids", ids);
  ops::check_dtype(op, "ids", ids, {DType::i32});
  ops::check_dim(op, "ids", ids, 2);
  int64_t B = ids.size(0), T = ids.size(1);
  if (B < 1 || T < 1 || T > config_.block_size)
    raise<ShapeError>(op, "ids",
                      "[B, T] with B >= 1 and 1 <= T <= block_size (" + std::to_string(config_.block_size) + ")",
                      shape_str(ids.shape()));
  if (targets.defined()) {
    ops::check_dtype(op, "targets", targets, {DType::i32});
    ops::check_shape(op, "targets", targets, ids.shape());
  }

  double p = options.training ? config_.dropout : 0.0;
  DropoutSites dropout(p, derive_seed(derive_seed(config_.seed, options.step), options.micro_step));

  // A training forward's are kept (position_ids_); evaluation's and sampling's, of many shapes, are made afresh.
  Tensor fresh_position_ids;
  Tensor& position_ids = options.training ? position_ids_[Shape{B, T}] : fresh_position_ids;
  if (!position_ids.defined()) {
    std::vector<int32_t> positions(size_t(B * T));
    for (int64_t i = 0; i < B * T; ++i) positions[size_t(i)] = int32_t(i % T);
    position_ids = Tensor::from_vector(positions, {B, T}).to(device());
  }

  // Token ids on the host (the loader's) are range-checked there, before they move: the lookup on a GPU then
  // need not read them back, a read that would wait for the work still queued (the last step's update).
  // Positions are in range by construction.
  const bool ids_on_host = ids.device().is_cpu();
  if (ids_on_host && !options.inputs_checked)
    ops::check_index_range(op, "ids", ids.contiguous(), config_.vocab_size, "position");
  Variable tokens = wte_.forward(ids.to(device()), /*ids_checked=*/ids_on_host || options.inputs_checked);
  Variable x = autograd::add(tokens, wpe_.forward(position_ids, /*ids_checked=*/true));  // (B, T, C)
  if (dropout.active()) x = autograd::dropout(x, dropout.next());
  const bool recompute_norms = options.recompute == Recompute::ln_gelu;
  for (const auto& block : blocks_) {
    BlockDropout block_dropout = BlockDropout::draw(dropout);
    x = options.recompute == Recompute::block ? block->forward_checkpointed(x, block_dropout)
                                              : block->forward(x, block_dropout, recompute_norms);
  }
  // The head takes its parameters themselves, as every linear function does (the tied table computes with its
  // held bf16 copy, which the lookup also read), and returns their gradients in f32, where the table's meets the
  // lookup's, which autograd::embedding returns in f32.
  const Variable head_weight = lm_head_ ? lm_head_->weight() : wte_.weight();
  const Variable head_bias = lm_head_ ? lm_head_->bias() : Variable();
  // With targets, the head, its softcap and the loss run as one op that never holds the (B·T, V) logits
  // (their gradients are computed chunk by chunk in the forward, summed in f32 over the chunks), except in f16,
  // whose gradients need the loss scale that only the backward knows.
  if (targets.defined() && compute_dtype() != DType::f16) {
    Variable features = autograd::reshape(ln_f_.forward(x), {B * T, config_.n_embd});
    return {Variable(), autograd::linear_cross_entropy(features, head_weight, head_bias, targets.reshape({B * T}),
                                                       config_.logit_softcap, options.inputs_checked)};
  }
  Variable logits = recompute_norms ? autograd::layernorm_linear(x, params_of(ln_f_), head_weight, head_bias)
                                    : autograd::linear(ln_f_.forward(x), head_weight, head_bias);  // (B, T, V)
  if (config_.logit_softcap > 0.0) logits = autograd::softcap(logits, config_.logit_softcap);

  GPTOutput out{logits, Variable()};
  if (targets.defined())
    out.loss = autograd::cross_entropy(autograd::reshape(logits, {B * T, config_.vocab_size}),
                                       targets.to(device()).reshape({B * T}));
  return out;
}

}  // namespace alpha::nn
