// Embedding lookup. ids are i32 token ids; an id outside [0, V) raises ValueError naming the position.
#pragma once
#include "alpha/tensor/tensor.h"

namespace alpha::ops {

// ids [...] (i32), table [V, C] -> [..., C].
Tensor embedding(const Tensor& ids, const Tensor& table);
// Deterministic: each table row sums its gradient contributions in the order of the positions.
Tensor embedding_backward(const Tensor& dy, const Tensor& ids, int64_t vocab_size);

}  // namespace alpha::ops
