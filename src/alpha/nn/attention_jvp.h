// The JVP of a causal self-attention block, for training objectives that need one (a Jacobian-vector
// regulariser, a consistency model's tangent): the block of the GPT (gpt.h),
//   y = proj(attention(split(qkv(x)))),
// with a fused qkv projection whose output features are all q heads, then all k heads, then all v heads.
// Its tangent along tx follows the chain rule with the parameters held fixed: a linear layer's tangent is
// the layer applied to the tangent without its bias, so
//   (tq, tk, tv) = split(tx·W_qkvᵀ),  (o, to) = autograd::attention_jvp(q, k, v, tq, tk, tv),
//   ty = to·W_projᵀ,
// one fused attention pass for both (autograd::attention_jvp: what is differentiable and how; backward
// through ty with respect to x or the qkv weights needs options.hvp_eps > 0).
#pragma once
#include <cstdint>

#include "alpha/autograd/functions.h"
#include "alpha/nn/layers.h"

namespace alpha::nn {

struct SelfAttentionJvp {
  autograd::Variable out;          // [B, T, C]
  autograd::Variable tangent_out;  // [B, T, C]
};

// x and tx [B, T, C] in the layers' compute dtype; qkv maps C to (n_head + 2·n_kv_head)·head_dim features and
// proj n_head·head_dim to C (head_dim = C / n_head, n_kv_head dividing n_head); attention causal, with
// `softcap` on the scores (0: none). Shapes are checked by the ops (typed errors naming them).
SelfAttentionJvp causal_self_attention_jvp(const Linear& qkv, const Linear& proj, int64_t n_head, int64_t n_kv_head,
                                           double softcap, const autograd::Variable& x, const autograd::Variable& tx,
                                           const autograd::AttentionJvpOptions& options = {});

}  // namespace alpha::nn
