// Inputs of the attention harness checks (attention_cases.h).
#if ALPHA_WITH_CUDA
#include "alpha/check/attention_cases.h"

#include <cmath>

namespace alpha::check {

AttentionInputs make_attention_inputs(Context& ctx, const AttentionCase& c, DType dtype) {
  AttentionInputs in;
  if (c.fused_qkv) {
    Tensor qkv = ctx.random({c.batch, c.q_len, c.q_heads + 2 * c.kv_heads, c.head_dim}, dtype);
    Tensor gqkv = ctx.to_gpu(qkv, dtype);
    const int64_t k0 = c.q_heads, v0 = c.q_heads + c.kv_heads, end = c.q_heads + 2 * c.kv_heads;
    in.q = qkv.slice(2, 0, k0), in.k = qkv.slice(2, k0, v0), in.v = qkv.slice(2, v0, end);
    in.gq = gqkv.slice(2, 0, k0), in.gk = gqkv.slice(2, k0, v0), in.gv = gqkv.slice(2, v0, end);
    return in;
  }
  in.q = ctx.random({c.batch, c.q_len, c.q_heads, c.head_dim}, dtype);
  in.k = ctx.random({c.batch, c.kv_len, c.kv_heads, c.head_dim}, dtype);
  in.v = ctx.random({c.batch, c.kv_len, c.kv_heads, c.value_dim}, dtype);
  in.gq = ctx.to_gpu(in.q, dtype), in.gk = ctx.to_gpu(in.k, dtype), in.gv = ctx.to_gpu(in.v, dtype);
  return in;
}

Tensor nans(const Shape& shape) { return Tensor::full(shape, NAN, DType::f64); }

}  // namespace alpha::check
#endif
