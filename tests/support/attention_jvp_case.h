// A case of the attention JVP tests (tests/kernels/test_attention_jvp.cpp on the CPU,
// tests/cuda/test_cuda_attention_jvp.cpp on the GPU): shapes, configuration and layout of q, k, v.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

#include "alpha/ops/attention.h"

namespace alpha::test {

struct JvpCase {
  std::string name;
  int64_t batch, q_len, kv_len, q_heads, kv_heads, head_dim, value_dim;
  ops::AttentionConfig config;  // never dropout
  bool head_major = false;      // q, k, v as [B, H, T, D] tensors transposed to [B, T, H, D] (strided)
};

inline std::ostream& operator<<(std::ostream& os, const JvpCase& c) { return os << c.name; }

}  // namespace alpha::test
