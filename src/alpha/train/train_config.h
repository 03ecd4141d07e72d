// The trainer's settings (everything that is not the model's shape), read from and written to JSON with
// the same strictness as the model config: unknown fields and bad values raise ConfigError naming the
// field, so a typo never falls back to a default silently.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace alpha::train {

struct TrainConfig {
  int64_t steps = 300;           // optimiser steps in total (a resumed run continues up to this)
  int64_t batch_size = 16;       // sequences per micro-batch
  int64_t seq_len = 0;           // tokens per sequence; 0 = the model's block_size
  int64_t grad_accum = 1;        // micro-batches per optimiser step
  double lr = 3e-3;              // peak learning rate
  double min_lr = 3e-4;          // floor of the cosine decay
  int64_t warmup_steps = 30;     // capped at the decay steps, so a short run still works
  int64_t lr_decay_steps = 0;    // step where the cosine reaches min_lr; 0 = steps
  double weight_decay = 0.1;     // decoupled; only on matrices (not biases, norms, embeddings)
  bool decay_embeddings = false; // also decay wte/wpe
  double beta1 = 0.9;
  double beta2 = 0.95;
  double adam_eps = 1e-8;
  double grad_clip = 1.0;        // global-norm clipping threshold; 0 = off
  // A step whose loss or global gradient norm is NaN or Inf is skipped (no parameter or optimizer update,
  // "skipped": true in metrics.jsonl, a line on stdout); this many skipped steps in a row stop the run with
  // a NumericError after checkpointing the last good weights. 0 = skip forever, never stop.
  int64_t max_nonfinite_steps = 8;
  int64_t eval_every = 50;       // validation loss every N steps (and at the last step); 0 = never
  int64_t eval_batches = 4;
  // Checkpoint every N steps (and at the last step); 0 = only at the end; -1 = never (a benchmark's run,
  // whose checkpoint of a model of billions of parameters would take minutes to write).
  int64_t save_every = 100;
  int64_t keep_last = 3;         // checkpoints kept; 0 = all
  uint64_t data_seed = 1;        // shuffling of the training windows
  double val_fraction = 0.1;     // share of each document held out when text is prepared
  int64_t sample_tokens = 200;   // tokens sampled at the end; 0 = none
  double temperature = 0.8;
  int64_t top_k = 40;
  std::string prompt = "";       // sampling prompt; empty = start from the end-of-text token
  std::string device = "cpu";
  // "f32"; "bf16": bf16 activations and weights for compute, f32 master weights and optimizer state; "f16":
  // the same in f16, with dynamic loss scaling (a CUDA device only: the CPU backend computes in f32 and f64).
  std::string precision = "f32";
  // bf16/f16 precision: the compute copy of the f32 master weights that each AdamW step writes is rounded
  // stochastically (up with probability equal to the distance to the next value down as a fraction of the gap, so
  // unbiased: small updates are not lost to rounding) instead of to nearest. The random bits are Philox's,
  // drawn per parameter, step and element from the model seed: the run repeats and resumes bit for bit on
  // every backend and thread count, and ZeRO-1 rounds as one rank does. Refused at precision "f32" (no copy).
  bool stochastic_rounding = false;
  // bf16/f16 precision: false converts each f32 master weight to the compute dtype at every use instead of holding
  // the converted copy between steps (AdamW writing it): 2 bytes a parameter less, for a model at the edge of the
  // GPU's memory (with --recompute block), for a conversion pass per use; the same bits. Refused with
  // stochastic_rounding, whose rounding lives in the held copy.
  bool hold_compute_copies = true;
  // "auto" (dynamic for f16, off otherwise), "dynamic" or "off": the loss multiplied by a power-of-two scale
  // before backward, the gradients divided by it, steps with an Inf/NaN gradient skipped with the scale halved,
  // the scale doubled after loss_scale_growth_interval finite steps (train/loss_scaler.h). Without an overflow
  // it changes no bit of the update, so "dynamic" is valid at every precision.
  std::string loss_scaling = "auto";
  double loss_scale = 65536;                  // the initial scale, a power of two in [1, 2^24]
  int64_t loss_scale_growth_interval = 1000;  // finite steps in a row before the scale doubles
  // Data parallel over several ranks (docs/DISTRIBUTED.md); batch_size is per rank.
  bool zero1 = false;               // shard AdamW's state over the ranks (reduce-scatter + all-gather)
  bool deterministic_reduce = false; // gradients all-gathered and added in rank order (docs/DISTRIBUTED.md)
  int64_t bucket_mb = 25;           // gradient bucket size in MiB
  // The gradients' dtype in the collectives: "f32" (the master weights') or "bf16" (half the bytes, each rank's
  // gradient rounded to bf16 before the average, as PyTorch DDP's bf16 compression hook; docs/DISTRIBUTED.md).
  std::string reduce_precision = "f32";
  double dist_timeout_s = 300;      // a collective waiting longer for a peer fails the run, naming the rank
  bool tf32 = false;             // f32 matmuls on a GPU may use TF32 tensor cores (10-bit mantissa inputs)
  // A CUDA device's training step (forward, backward, norm, AdamW) captured once into a CUDA graph and replayed
  // every step after the first, with the same bits as without (docs/PERFORMANCE.md). A captured step replays its
  // launches' by-value arguments, so it takes no loss scaling (f32 or bf16), no stochastic rounding, no dropout
  // and one process (ConfigError otherwise); a profiled step runs without the graph.
  bool cuda_graphs = false;
  // Activation recomputation (nn::Recompute): "none"; "ln_gelu" (LayerNorm and GELU outputs recomputed in
  // backward, no matmul); "block" (each block keeps its input only and runs again in backward). Less memory
  // for more backward time; the gradients do not change (docs/PERFORMANCE.md).
  std::string recompute = "none";

  int64_t effective_seq_len(int64_t block_size) const { return seq_len > 0 ? seq_len : block_size; }
  bool scales_loss() const { return loss_scaling == "dynamic" || (loss_scaling == "auto" && precision == "f16"); }
  int64_t effective_decay_steps() const { return lr_decay_steps > 0 ? lr_decay_steps : steps; }
  int64_t effective_warmup_steps() const { return std::min(warmup_steps, effective_decay_steps()); }

  void validate() const;  // ConfigError naming the first bad field
  static TrainConfig from_json(const nlohmann::json& j);  // every field optional
  nlohmann::json to_json() const;
};

// Returns `base` with each field of `overrides` replaced; a field `base` does not have raises
// ConfigError naming it (`what` says which config, e.g. "model config"). Used for command-line flags.
nlohmann::json merge_fields(const nlohmann::json& base, const nlohmann::json& overrides, const std::string& what);

}  // namespace alpha::train
