#include "alpha/distributed/communicator.h"

namespace alpha::distributed {

void require_collective_dtype(const char* op, DType dtype) {
  if (dtype != DType::f64 && dtype != DType::f32 && dtype != DType::bf16)
    raise<DTypeError>(op, "dtype", "f64, f32 or bf16", std::string(dtype_name(dtype)));
}

}  // namespace alpha::distributed
