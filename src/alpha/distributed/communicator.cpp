#include "alpha/distributed/communicator.h"

namespace alpha::distributed {

Tensor Communicator::gather_buffer(int64_t block_numel, DType dtype) {
  constexpr const char* op = "Communicator::gather_buffer";
  if (block_numel < 0) raise<ValueError>(op, "block_numel", "a count >= 0", std::to_string(block_numel));
  require_collective_dtype(op, dtype);
  return make_gather_buffer(block_numel, dtype);
}

Tensor Communicator::make_gather_buffer(int64_t block_numel, DType dtype) {
  return Tensor::zeros({world_size(), block_numel}, dtype, device());
}

void require_collective_dtype(const char* op, DType dtype) {
  if (dtype != DType::f64 && dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    raise<DTypeError>(op, "dtype", "f64, f32, bf16 or f16", std::string(dtype_name(dtype)));
}

}  // namespace alpha::distributed
