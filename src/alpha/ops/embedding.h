// Embedding lookup. ids are i32 token ids; an id outside [0, V) raises ValueError naming the position.
#pragma once
#include <optional>

#include "alpha/tensor/tensor.h"

namespace alpha::ops {

// ids_checked (both ops): the caller has range-checked these very ids (on the host before moving them to the
// device, or in the forward), so the op's own check, whose device-to-host copy waits for the device's queue,
// is skipped. An id outside [0, V) then gives NaN on the GPU (the lookup) and adds to no row (the backward).

// ids [...] (i32), table [V, C] -> [..., C].
Tensor embedding(const Tensor& ids, const Tensor& table, bool ids_checked = false);
// Deterministic: each table row sums its gradient contributions in the order of the positions. grad_dtype:
// the table gradient's dtype, dy's by default; f32 beside bf16/f16 dy gives an f32 table's gradient (looked up
// through its bf16/f16 copy) rounded once. Anything else raises DTypeError. With add_into (a contiguous
// [V, C] tensor of grad_dtype on dy's device), each row the ids use gets its sum added into it, rounded once, and
// add_into itself is returned: a tied table's gradient from its other use, with no second [V, C] written and added.
Tensor embedding_backward(const Tensor& dy, const Tensor& ids, int64_t vocab_size, bool ids_checked = false,
                          std::optional<DType> grad_dtype = std::nullopt, const Tensor& add_into = Tensor());
// Whether embedding_backward writes a table gradient of grad_dtype from dy of dy_dtype: the same dtype, or f32
// beside bf16/f16.
bool embedding_backward_writes(DType dy_dtype, DType grad_dtype);

}  // namespace alpha::ops
