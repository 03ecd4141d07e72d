#include "alpha/autograd/functions.h"
#include "alpha/ops/embedding.h"

namespace alpha::autograd {

Variable embedding(const Tensor& ids, const Variable& table, bool ids_checked) {
  return record("embedding", ops::embedding(ids, table.value(), ids_checked), {table}, [&] {
    int64_t vocab_size = table.size(0);
    // The forward range-checked these ids: backward need not wait for the device to read them again.
    return BackwardFn([ids, vocab_size](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{ops::embedding_backward(g, ids, vocab_size, /*ids_checked=*/true)};
    });
  });
}

}  // namespace alpha::autograd
