// What the CUDA attention benchmarks that call the kernels directly (constant_time.cu,
// tma_forward_configs.cu) share: a CUDA status check that ends the tool with a message, and one
// self-attention shape with its kernel parameters (bf16 [B, T, H, D], contiguous, scale 1/√D, no softcap or
// dropout).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "alpha/kernels/flash_attention.h"

namespace alpha::bench {

// Ends the tool (exit 2) with `tool: what: CUDA's message` when status is an error.
inline void check_cuda(cudaError_t status, const char* tool, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", tool, what, cudaGetErrorString(status));
    std::exit(2);
  }
}

struct AttentionShape {
  int64_t batch, heads, seq, head_dim;
  bool causal;

  int64_t elements() const { return batch * seq * heads * head_dim; }
  int64_t rows() const { return batch * heads * seq; }
  kernels::AttentionParams<bf16> params() const {
    kernels::AttentionParams<bf16> p{};
    p.batch = batch;
    p.q_len = p.kv_len = seq;
    p.q_heads = p.kv_heads = heads;
    p.head_dim = p.value_dim = head_dim;
    p.q_strides = p.k_strides = p.v_strides = {seq * heads * head_dim, heads * head_dim, head_dim};
    p.scale = 1.0f / std::sqrt(float(head_dim));
    p.softcap = 0.0f;
    p.causal = causal;
    p.dropout_p = 0.0f;
    p.dropout_scale = 1.0f;
    return p;
  }
};

}  // namespace alpha::bench
