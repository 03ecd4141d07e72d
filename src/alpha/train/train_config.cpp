#include "alpha/train/train_config.h"

#include "alpha/core/device.h"
#include "alpha/core/error.h"
#include "alpha/nn/gpt_config.h"
#include "alpha/train/loss_scaler.h"

namespace alpha::train {

namespace {

constexpr const char* kWhat = "train config";

void require(bool ok, const char* field, const std::string& expected, const std::string& got) {
  if (!ok) raise<ConfigError>(kWhat, field, expected, got);
}

// Reads field `name` into `value` when present, raising ConfigError when the JSON type does not fit.
template <class T>
void read_field(const nlohmann::json& j, const char* name, T& value) {
  auto it = j.find(name);
  if (it == j.end()) return;
  bool fits;
  if constexpr (std::is_same_v<T, bool>) fits = it->is_boolean();
  else if constexpr (std::is_same_v<T, std::string>) fits = it->is_string();
  else if constexpr (std::is_floating_point_v<T>) fits = it->is_number();
  else if constexpr (std::is_unsigned_v<T>) fits = it->is_number_unsigned();
  else fits = it->is_number_integer();
  if (!fits) raise<ConfigError>(kWhat, name, "a value of the field's type", it->dump());
  value = it->get<T>();
}

}  // namespace

// clang-format off
#define ALPHA_TRAIN_FIELDS(X)                                                                                    \
  X(steps) X(batch_size) X(seq_len) X(grad_accum) X(lr) X(min_lr) X(warmup_steps) X(lr_decay_steps)              \
  X(weight_decay) X(decay_embeddings) X(beta1) X(beta2) X(adam_eps) X(grad_clip) X(max_nonfinite_steps)          \
  X(eval_every) X(eval_batches) X(save_every) X(keep_last) X(data_seed) X(val_fraction) X(sample_tokens)         \
  X(temperature) X(top_k) X(prompt) X(device) X(precision) X(stochastic_rounding) X(hold_compute_copies)         \
  X(loss_scaling) X(loss_scale) X(loss_scale_growth_interval) X(tf32) X(cuda_graphs) X(zero1)                    \
  X(deterministic_reduce) X(bucket_mb) X(reduce_precision) X(dist_timeout_s) X(recompute)
// clang-format on

TrainConfig TrainConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) raise<ConfigError>(kWhat, "(root)", "a JSON object", j.dump());
  TrainConfig c;
  nlohmann::json known = c.to_json();
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.contains(it.key())) raise<ConfigError>(kWhat, it.key(), "a known field", "an unknown field");
#define X(field) read_field(j, #field, c.field);
  ALPHA_TRAIN_FIELDS(X)
#undef X
  c.validate();
  return c;
}

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j;
#define X(field) j[#field] = field;
  ALPHA_TRAIN_FIELDS(X)
#undef X
  return j;
}

#undef ALPHA_TRAIN_FIELDS

void TrainConfig::validate() const {
  auto str = [](auto v) { return nlohmann::json(v).dump(); };
  require(steps >= 1, "steps", ">= 1", str(steps));
  require(batch_size >= 1, "batch_size", ">= 1", str(batch_size));
  require(seq_len >= 0, "seq_len", ">= 0 (0 = block_size)", str(seq_len));
  require(grad_accum >= 1, "grad_accum", ">= 1", str(grad_accum));
  require(lr > 0, "lr", "> 0", str(lr));
  require(min_lr >= 0 && min_lr <= lr, "min_lr", "in [0, lr]", str(min_lr));
  require(warmup_steps >= 0, "warmup_steps", ">= 0", str(warmup_steps));
  require(lr_decay_steps >= 0, "lr_decay_steps", ">= 0 (0 = steps)", str(lr_decay_steps));
  require(weight_decay >= 0, "weight_decay", ">= 0", str(weight_decay));
  require(beta1 >= 0 && beta1 < 1, "beta1", "in [0, 1)", str(beta1));
  require(beta2 >= 0 && beta2 < 1, "beta2", "in [0, 1)", str(beta2));
  require(adam_eps > 0, "adam_eps", "> 0", str(adam_eps));
  require(grad_clip >= 0, "grad_clip", ">= 0 (0 = off)", str(grad_clip));
  require(max_nonfinite_steps >= 0, "max_nonfinite_steps", ">= 0 (0 = never stop)", str(max_nonfinite_steps));
  require(eval_every >= 0, "eval_every", ">= 0", str(eval_every));
  require(eval_batches >= 1, "eval_batches", ">= 1", str(eval_batches));
  require(save_every >= -1, "save_every", ">= -1 (0 = only at the end, -1 = never)", str(save_every));
  require(keep_last >= 0, "keep_last", ">= 0 (0 = all)", str(keep_last));
  require(val_fraction >= 0 && val_fraction < 1, "val_fraction", "in [0, 1)", str(val_fraction));
  require(sample_tokens >= 0, "sample_tokens", ">= 0", str(sample_tokens));
  require(temperature >= 0, "temperature", ">= 0 (0 = greedy)", str(temperature));
  require(top_k >= 0, "top_k", ">= 0 (0 = whole vocabulary)", str(top_k));
  require(bucket_mb >= 1, "bucket_mb", ">= 1", str(bucket_mb));
  require(reduce_precision == "f32" || reduce_precision == "bf16", "reduce_precision", "\"f32\" or \"bf16\"",
          str(reduce_precision));
  require(reduce_precision == "f32" || (precision == "bf16" && hold_compute_copies), "reduce_precision",
          "\"f32\" unless precision is \"bf16\" with hold_compute_copies (AdamW reads the bf16 gradients beside "
          "the held bf16 copies of the f32 weights)",
          str(reduce_precision));
  require(reduce_precision == "f32" || !deterministic_reduce, "reduce_precision",
          "\"f32\" with deterministic_reduce (its sums are one process's accumulation of the f32 gradients)",
          str(reduce_precision));
  require(dist_timeout_s > 0, "dist_timeout_s", "> 0", str(dist_timeout_s));
  Device where = Device::parse(device, "device");
  require(precision == "f32" || precision == "bf16" || precision == "f16", "precision",
          "\"f32\", \"bf16\" or \"f16\"", str(precision));
  require(precision == "f32" || where.is_cuda(), "precision",
          "\"f32\" on the CPU (bf16 and f16 compute need a CUDA device)", str(precision));
  require(!stochastic_rounding || precision != "f32", "stochastic_rounding",
          "false at precision \"f32\" (it rounds the bf16/f16 compute copy of the f32 master weights: "
          "--precision bf16 or f16)",
          str(stochastic_rounding));
  require(hold_compute_copies || !stochastic_rounding, "hold_compute_copies",
          "true with stochastic_rounding (the stochastically rounded weights are the held copies)",
          str(hold_compute_copies));
  require(loss_scaling == "auto" || loss_scaling == "dynamic" || loss_scaling == "off", "loss_scaling",
          "\"auto\", \"dynamic\" or \"off\"", str(loss_scaling));
  require(valid_loss_scale(loss_scale), "loss_scale", "a power of two in [1, 2^24]", str(loss_scale));
  require(loss_scale_growth_interval >= 1, "loss_scale_growth_interval", ">= 1", str(loss_scale_growth_interval));
  require(!tf32 || where.is_cuda(), "tf32", "false on the CPU (TF32 is a GPU tensor-core format)", str(tf32));
  if (cuda_graphs) {
    require(where.is_cuda(), "cuda_graphs", "false on the CPU (a CUDA graph is a GPU's)", str(cuda_graphs));
    require(!scales_loss(), "cuda_graphs",
            "false with loss scaling (f16, or loss_scaling \"dynamic\": the scale changes between steps)",
            str(cuda_graphs));
  }
  require(nn::recompute_from_name(recompute).has_value(), "recompute", nn::kRecomputeNames, str(recompute));
}

nlohmann::json merge_fields(const nlohmann::json& base, const nlohmann::json& overrides, const std::string& what) {
  nlohmann::json merged = base;
  for (auto it = overrides.begin(); it != overrides.end(); ++it) {
    if (!base.contains(it.key())) raise<ConfigError>(what, it.key(), "a known field", "an unknown field");
    merged[it.key()] = it.value();
  }
  return merged;
}

}  // namespace alpha::train
