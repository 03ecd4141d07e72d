#include "alpha/autograd/functions.h"
#include "alpha/ops/embedding.h"

namespace alpha::autograd {

Variable embedding(const Tensor& ids, const Variable& table, bool ids_checked, std::optional<DType> compute_dtype) {
  if (compute_dtype && !is_floating(*compute_dtype))
    raise<DTypeError>("embedding", "compute_dtype", "a floating-point dtype", std::string(dtype_name(*compute_dtype)));
  const Tensor looked_up = compute_dtype ? cast_value(table, *compute_dtype) : table.value();
  return record("embedding", ops::embedding(ids, looked_up, ids_checked), {table}, [&] {
    // The forward range-checked these ids: backward need not wait for the device to read them again.
    return BackwardFn([ids, table = table.value()](const Tensor& g, const std::vector<bool>&) {
      // The kernel writes the table's dtype where it can (f32 from bf16/f16 dy); other pairs convert afterwards.
      // Writing it, it adds into the slot backward offers (a tied table's gradient from the output layer).
      const bool direct = ops::embedding_backward_writes(g.dtype(), table.dtype());
      Tensor grad = ops::embedding_backward(g, ids, table.size(0), /*ids_checked=*/true,
                                            direct ? std::optional<DType>(table.dtype()) : std::nullopt,
                                            direct ? gradient_accumulator(0, table) : Tensor());
      return std::vector<Tensor>{grad.dtype() == table.dtype() ? grad : grad.to(table.dtype())};
    });
  });
}

}  // namespace alpha::autograd
