// Point-wise activations and the row softmax.
#pragma once
#include "alpha/tensor/tensor.h"

namespace alpha::ops {

// GELU, tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
Tensor gelu(const Tensor& x);
Tensor gelu_backward(const Tensor& dy, const Tensor& x);

// Softcap: c·tanh(x/c), c > 0.
Tensor softcap(const Tensor& x, double cap);
// Takes the forward's output y (dy/dx = 1 − (y/c)²), so x need not be kept.
Tensor softcap_backward(const Tensor& dy, const Tensor& y, double cap);

// Softmax over the last dimension, max-subtracted.
Tensor softmax(const Tensor& x);
Tensor softmax_backward(const Tensor& dy, const Tensor& y);

}  // namespace alpha::ops
