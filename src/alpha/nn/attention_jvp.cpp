#include "alpha/nn/attention_jvp.h"

namespace alpha::nn {

using autograd::Variable;

namespace {

// The q, k and v heads of a fused projection [B, T, (Hq + 2·Hkv)·D], as strided views: [B, T, H, D] each.
struct Heads {
  Variable q, k, v;
};
Heads split_heads(const Variable& qkv, int64_t n_head, int64_t n_kv_head, int64_t head_dim) {
  const int64_t B = qkv.size(0), T = qkv.size(1), q_width = n_head * head_dim, kv_width = n_kv_head * head_dim;
  auto heads = [&](int64_t start, int64_t width, int64_t count) {
    return autograd::reshape(autograd::slice(qkv, 2, start, start + width), {B, T, count, head_dim});
  };
  return {heads(0, q_width, n_head), heads(q_width, kv_width, n_kv_head),
          heads(q_width + kv_width, kv_width, n_kv_head)};
}

}  // namespace

SelfAttentionJvp causal_self_attention_jvp(const Linear& qkv, const Linear& proj, int64_t n_head, int64_t n_kv_head,
                                           double softcap, const Variable& x, const Variable& tx,
                                           const autograd::AttentionJvpOptions& options) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), head_dim = C / n_head;
  const Variable qkv_weight = qkv.compute_weight();
  const Heads primal = split_heads(autograd::linear(x, qkv_weight, qkv.compute_bias()), n_head, n_kv_head, head_dim);
  const Heads tangent = split_heads(autograd::linear(tx, qkv_weight, Variable()), n_head, n_kv_head, head_dim);
  ops::AttentionConfig attention;
  attention.causal = true;
  attention.softcap = softcap;
  const autograd::AttentionJvp y =
      autograd::attention_jvp(primal.q, primal.k, primal.v, tangent.q, tangent.k, tangent.v, attention, options);
  const Variable proj_weight = proj.compute_weight();
  return {autograd::linear(autograd::reshape(y.out, {B, T, n_head * head_dim}), proj_weight, proj.compute_bias()),
          autograd::linear(autograd::reshape(y.tangent_out, {B, T, n_head * head_dim}), proj_weight, Variable())};
}

}  // namespace alpha::nn
