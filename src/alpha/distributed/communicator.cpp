#include "alpha/distributed/communicator.h"

namespace alpha::distributed {

Tensor Communicator::symmetric_buffer(int64_t numel, DType dtype) { return Tensor::zeros({numel}, dtype, device()); }

void require_collective_dtype(const char* op, DType dtype) {
  if (dtype != DType::f64 && dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    raise<DTypeError>(op, "dtype", "f64, f32, bf16 or f16", std::string(dtype_name(dtype)));
}

}  // namespace alpha::distributed
