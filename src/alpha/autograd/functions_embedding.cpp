#include "alpha/autograd/functions.h"
#include "alpha/ops/embedding.h"

namespace alpha::autograd {

Variable embedding(const Tensor& ids, const Variable& table, bool ids_checked, std::optional<DType> compute_dtype) {
  const Tensor looked_up = compute_dtype ? cast_value(table, *compute_dtype) : table.value();
  return record("embedding", ops::embedding(ids, looked_up, ids_checked), {table}, [&] {
    int64_t vocab_size = table.size(0);
    DType table_dtype = table.dtype();
    // The forward range-checked these ids: backward need not wait for the device to read them again.
    return BackwardFn([ids, vocab_size, table_dtype](const Tensor& g, const std::vector<bool>&) {
      // bf16/f16 dy into an f32 table: the kernel writes f32; other pairs convert the gradient afterwards.
      const bool direct = table_dtype == DType::f32 && (g.dtype() == DType::bf16 || g.dtype() == DType::f16);
      Tensor grad = ops::embedding_backward(g, ids, vocab_size, /*ids_checked=*/true,
                                            direct ? std::optional<DType>(table_dtype) : std::nullopt);
      return std::vector<Tensor>{grad.dtype() == table_dtype ? grad : grad.to(table_dtype)};
    });
  });
}

}  // namespace alpha::autograd
