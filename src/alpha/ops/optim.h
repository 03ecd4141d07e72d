// Optimiser kernels over parameter tensors, updated in place.
#pragma once
#include <cstdint>
#include <vector>

#include "alpha/tensor/tensor.h"

namespace alpha::ops {

struct AdamWConfig {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled: param -= lr · weight_decay · param
  int64_t step = 1;           // 1-based, for bias correction
};

// One fused AdamW step: m, v updated, then param. grad is scaled by grad_scale first (clipping).
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& config,
                double grad_scale = 1.0);

// √(Σ‖g‖²) over all tensors, in a fixed reduction order (deterministic).
double global_grad_norm(const std::vector<Tensor>& grads);
// Scales every grad by min(1, max_norm / (norm + 1e-6)) in place; returns that coefficient.
double clip_grad_norm(std::vector<Tensor>& grads, double max_norm, double norm);

}  // namespace alpha::ops
