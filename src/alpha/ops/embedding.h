// Embedding lookup. ids are i32 token ids; an id outside [0, V) raises ValueError naming the position.
#pragma once
#include "alpha/tensor/tensor.h"

namespace alpha::ops {

// ids [...] (i32), table [V, C] -> [..., C].
Tensor embedding(const Tensor& ids, const Tensor& table);
// Deterministic: each table row sums its gradient contributions in the order of the positions. ids_checked:
// the caller has range-checked these very ids (autograd's embedding: its forward did), so the check, whose
// device-to-host copy waits for the device's queue, is skipped; an id outside [0, V) then adds to no row.
Tensor embedding_backward(const Tensor& dy, const Tensor& ids, int64_t vocab_size, bool ids_checked = false);

}  // namespace alpha::ops
