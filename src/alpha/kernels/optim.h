// Optimiser kernels over flat parameter buffers, all in place:
// - adamw_step fuses the whole AdamW update into one pass over (param, grad, m, v): grad is first
//   multiplied by grad_scale (the clipping coefficient, so clipping needs no separate pass over the
//   grads), m and v are updated, and param gets the decoupled weight decay and the bias-corrected step
//     g = grad_scale·grad;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//     param = param·(1 − lr·wd) − lr · (m / (1−β1^t)) / (√(v / (1−β2^t)) + eps),   t = step (1-based)
//   computed per element in acc_t<T>.
// - sum_squares gives Σ x² in f64 with a fixed reduction order, the building block of the global grad
//   norm: the same grads give the same norm bits for every thread count.
// In-place scaling of the grads for clipping is kernels::cpu::scale (elementwise.h) with out == x.
#pragma once
#include <cstdint>

#include "alpha/core/dtype.h"

namespace alpha::kernels {

template <class T>
struct AdamWArgs {
  T* param;           // (n), updated in place
  const T* grad;      // (n)
  T* m;               // (n) first moment, updated in place
  T* v;               // (n) second moment, updated in place
  acc_t<T> lr;
  acc_t<T> beta1;
  acc_t<T> beta2;
  acc_t<T> eps;
  acc_t<T> weight_decay;
  acc_t<T> grad_scale;
  int64_t step;       // 1-based, for the bias corrections
  int64_t n;
};

template <class T>
struct SumSquaresArgs {
  const T* x;   // (n)
  double* out;  // (1) Σ x², accumulated in f64
  int64_t n;
};

namespace cpu {
template <class T> void adamw_step(const AdamWArgs<T>& args);
template <class T> void sum_squares(const SumSquaresArgs<T>& args);
}  // namespace cpu

}  // namespace alpha::kernels
