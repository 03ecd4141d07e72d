// Differentiable ops on Variables. Each op's forward calls the tensor-op layer and its backward
// (recorded only when an input needs a gradient) calls the matching *_backward tensor op.
// Implementations live one family per file: functions_<family>.cpp.
#pragma once
#include <functional>
#include <optional>
#include <vector>

#include "alpha/autograd/variable.h"
#include "alpha/ops/attention.h"
#include "alpha/ops/dropout.h"
#include "alpha/ops/nsa.h"

namespace alpha::autograd {

// Element-wise (functions_elementwise.cpp).
Variable add(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable scale(const Variable& x, double alpha);
Variable sum(const Variable& x);

// Views (functions_view.cpp): gradients flow back into the viewed region.
Variable reshape(const Variable& x, Shape shape);
Variable slice(const Variable& x, int64_t dim, int64_t start, int64_t end);
// x converted to dtype (x itself when it already has it); the gradient converts back. Mixed precision:
// f32 parameters enter a bf16 computation through it, and their gradients accumulate in f32.
Variable cast(const Variable& x, DType dtype);
// The value cast(x, dtype) holds, without recording: for a parameter (a leaf that requires a gradient) its
// held compute copy, converted and held on first use; else x's value converted (itself in that dtype). For
// functions that take parameters in their own dtype and return their gradients in it.
Tensor cast_value(const Variable& x, DType dtype);

// Matrix products (functions_matmul.cpp). The functions with linear layers or LayerNorms (linear, gelu_mlp, and
// below layernorm, layernorm_linear, layernorm_gelu_mlp, linear_cross_entropy) take parameters in x's dtype, or
// master parameters in a wider float dtype, which compute through their held compute copies and get their
// gradients as unrounded f32 sums (compute_parameters.h).
Variable matmul(const Variable& a, const Variable& b, bool trans_a = false, bool trans_b = false);
// y = x·Wᵀ + b (bias may be undefined); with a residual (y's shape), residual + x·Wᵀ + b from the one GEMM (the
// residual its addend, ops::linear): a residual stream without dropout, added with no pass of its own.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias, const Variable& residual = {});
// The GELU MLP y = linear(gelu(linear(x, fc_weight, fc_bias)), proj_weight, proj_bias) as one function, so
// that GELU rides on GEMM epilogues both ways: forward, fc+GELU is one GEMM (ops::linear_gelu, keeping the
// pre-activation); backward, the gradient of the pre-activation comes from proj's input-gradient GEMM with a
// DGELU epilogue (ops::gelu_linear_backward), which also sums it into fc's bias gradient. A DGELU epilogue
// needs the GEMM whose product is dL/dgelu, which belongs to the layer after the GELU: hence one function for
// both layers rather than one for linear+gelu. Biases may be undefined; a residual, when given, is added by proj's
// GEMM, as linear's.
Variable gelu_mlp(const Variable& x, const Variable& fc_weight, const Variable& fc_bias, const Variable& proj_weight,
                  const Variable& proj_bias, const Variable& residual = {});

// Normalisation and activations (functions_layernorm.cpp, functions_activation.cpp).
Variable layernorm(const Variable& x, const Variable& weight, const Variable& bias, double eps);
Variable gelu(const Variable& x);
Variable softcap(const Variable& x, double cap);
Variable softmax(const Variable& x);

// Activation recomputation (functions_recompute.cpp): spend compute in backward to keep fewer activations.
//
// Level "ln_gelu": the LayerNorm before a linear layer and the GELU inside the MLP keep their inputs instead
// of their outputs, which backward recomputes with the same ops (so the same bits); no matrix product is
// recomputed. layernorm_linear(x, norm, W, b) = linear(layernorm(x), W, b) keeps x (not the normalised x);
// layernorm_gelu_mlp is gelu_mlp(layernorm(x), ...) keeping x and the pre-activation (which GELU's backward
// needs anyway) but neither the normalised x nor gelu(pre). Biases may be undefined.
struct LayerNormParams {
  Variable weight;
  Variable bias;  // may be undefined
  double eps = 1e-5;
};
Variable layernorm_linear(const Variable& x, const LayerNormParams& norm, const Variable& weight,
                          const Variable& bias);
// With add_input, layernorm_gelu_mlp returns x + that (a block's residual stream without dropout, added by proj's
// GEMM); its backward adds the LayerNorm's dx into the output's gradient where the tape hands that over.
Variable layernorm_gelu_mlp(const Variable& x, const LayerNormParams& norm, const Variable& fc_weight,
                            const Variable& fc_bias, const Variable& proj_weight, const Variable& proj_bias,
                            bool add_input = false);

// Level "block": segment(inputs) keeping only the inputs. Forward runs the segment without recording; the
// one node recorded lists the inputs and then `parameters` (every leaf the segment reads besides its inputs),
// so their gradients reach them through the outer backward like any op's (per-pass sums, on_leaf_ready).
// Backward re-runs the segment on a tape of its own (TapeScope) over fresh leaves sharing the inputs' and
// parameters' storage, backpropagates the incoming gradient there and returns those leaves' gradients. The
// segment must compute the same thing when re-run: dropout takes its masks from configs drawn before the
// call, never from state the first run advanced. Gradients equal the unrecomputed graph's bit for bit.
using Segment = std::function<Variable(const std::vector<Variable>& inputs)>;
Variable checkpoint(const Segment& segment, const std::vector<Variable>& inputs,
                    const std::vector<Variable>& parameters);

// Embedding and loss (functions_embedding.cpp, functions_cross_entropy.cpp). ids and targets are i32
// tensors (not differentiable).
// ids_checked: the caller range-checked ids already (ops::embedding); backward never checks them again.
// compute_dtype: the lookup reads the table in this dtype (cast_value: a parameter's held bf16/f16 copy) and
// the output has it, while the table's gradient comes back in the table's own dtype (f32), rounded once from
// the f64 sums (a cast in front would round it to bf16 and widen it again).
Variable embedding(const Tensor& ids, const Variable& table, bool ids_checked = false,
                   std::optional<DType> compute_dtype = std::nullopt);
Variable cross_entropy(const Variable& logits, const Tensor& targets);  // mean over non-ignored rows
// cross_entropy(linear(x, weight, bias), targets), of softcap(logits, logit_softcap) when that is > 0, without
// holding the logits (ops/linear_cross_entropy.h: chunks of rows, their gradients computed in the forward
// and scaled by the loss's gradient in the backward, on the device). bias may be undefined. With gradients,
// x must not be f16 (DTypeError). weight and bias may be in another float dtype than x (a model's f32 master
// weights under bf16 compute): the op computes with their values in x's dtype (cast_value: a parameter's held
// compute copy) and their gradients come back in their own dtype, for f32 weights the op's f32 sums over its
// chunks as they are (a cast in front would round them to bf16 and widen them again). targets_checked: as the op's
// (every target in [0, V), none ignored, vouched for by the caller: nothing is read back).
Variable linear_cross_entropy(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& targets,
                              double logit_softcap = 0.0, bool targets_checked = false);

// Dropout (functions_dropout.cpp).
Variable dropout(const Variable& x, const ops::DropoutConfig& config);
Variable residual_dropout_add(const Variable& residual, const Variable& x, const ops::DropoutConfig& config);

// Materialising attention (functions_attention.cpp; ops/attention.h: the reference kernels on the CPU,
// the materialising CUDA kernels on a GPU): q [B,Tq,Hq,D], k [B,Tk,Hkv,D], v [B,Tk,Hkv,Dv].
Variable attention_materialized(const Variable& q, const Variable& k, const Variable& v,
                                const ops::AttentionConfig& config);
// Flash attention (ops::flash_attention: CUDA tensors only), same contract and gradients.
Variable flash_attention(const Variable& q, const Variable& k, const Variable& v, const ops::AttentionConfig& config);

// Self-attention over one fused projection qkv [B, T, (Hq + 2·Hkv)·D] (all q heads, then all k heads, then all v
// heads), read in place as strided views, by the materialising or the flash kernels; returns [B, T, Hq, D]. The
// same values and gradients as attention over three slice()s of qkv, but the backward writes dq, dk and dv into
// one gradient of qkv's shape: no zero-filled qkv-sized gradient per slice, and no sums of them.
enum class AttentionKernel { materialized, flash };
Variable self_attention(const Variable& qkv, int64_t n_head, int64_t n_kv_head, const ops::AttentionConfig& config,
                        AttentionKernel kernel);

// Attention's forward-mode derivative and Hessian-vector product (functions_attention_derivatives.cpp; what
// they compute: ops/attention_jvp.h, ops/attention_hvp.h, docs/ATTENTION_DERIVATIVES.md). Shapes as above;
// no dropout (ValueError naming config.dropout_p).
struct AttentionJvpOptions {
  // The step of the central difference that differentiates tangent_out with respect to q, k and v. For a
  // gradient G arriving at tangent_out, ⟨tO, G⟩ = ⟨(tq, tk, tv), ∇f(q, k, v)⟩ with f = ⟨O, G⟩, so that gradient
  // is H·(tq, tk, tv), H the Hessian of f: ops::attention_hvp at this step, an approximation whose error
  // docs/ATTENTION_DERIVATIVES.md tabulates (1e-5 for f64, 3e-3 for f32 and, computed in f32 on a GPU, bf16
  // and f16). 0 refuses it: backward raises ValueError naming hvp_eps when q, k or v needs a gradient
  // through tangent_out (rather than leaving that part out).
  double hvp_eps = 0.0;
};
struct AttentionJvp {
  Variable out;          // [B, Tq, Hq, Dv]
  Variable tangent_out;  // [B, Tq, Hq, Dv], the JVP of out along (tq, tk, tv)
};
// out = attention(q, k, v) and its tangent along (tq, tk, tv) (shaped as q, k, v), by ops::attention_jvp_fused:
// one pass of the CPU kernel or the CUDA kernels, never the Tq×Tk matrix on a GPU. Gradients:
// - of out with respect to q, k, v: attention's backward from the statistics the pass returns
//   (ops::flash_attention_backward on a GPU, whose guardrails apply; ops::attention_materialized_backward on
//   the CPU);
// - of tangent_out with respect to tq, tk, tv: tO is linear in them, so this is that same backward of the
//   gradient arriving at tangent_out, exact;
// - of tangent_out with respect to q, k, v: the Hessian-vector product of options.hvp_eps (above).
AttentionJvp attention_jvp(const Variable& q, const Variable& k, const Variable& v, const Variable& tq,
                           const Variable& tk, const Variable& tv, const ops::AttentionConfig& config,
                           const AttentionJvpOptions& options = {});

struct AttentionHvp {
  Variable hq;  // [B, Tq, Hq, D]
  Variable hk;  // [B, Tk, Hkv, D], summed over each GQA group
  Variable hv;  // [B, Tk, Hkv, Dv], summed over each GQA group
};
// H·(vq, vk, vv) for f(q, k, v) = ⟨attention(q, k, v), grad_out⟩, by ops::attention_hvp (central differences at
// step eps; on a GPU through flash attention, O(T) memory). Not differentiable: when any input would be
// recorded (it requires a gradient and gradients are enabled) it raises ValueError instead of returning
// values that backward would treat as constants; call it under NoGradGuard for a training loop's
// second-order step.
AttentionHvp attention_hvp(const Variable& q, const Variable& k, const Variable& v, const Variable& grad_out,
                           const Variable& vq, const Variable& vk, const Variable& vv,
                           const ops::AttentionConfig& config, double eps);

// Native Sparse Attention (functions_nsa.cpp; ops/nsa.h, CPU only): q [B,T,Hq,D], k [B,T,Hkv,D],
// v [B,T,Hkv,Dv], gate logits [B,T,Hq,3], the compressor's k_pos [l,D], k_weight [D,l·D], v_pos [l,Dv],
// v_weight [Dv,l·Dv]. No gradient flows through the choice of selection blocks.
struct NsaVariables {
  Variable q, k, v, gates, k_pos, k_weight, v_pos, v_weight;
};
Variable nsa(const NsaVariables& in, const ops::NsaConfig& config);

}  // namespace alpha::autograd
