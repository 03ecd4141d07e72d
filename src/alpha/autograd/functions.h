// Differentiable ops on Variables. Each op's forward calls the tensor-op layer and its backward
// (recorded only when an input needs a gradient) calls the matching *_backward tensor op.
// Implementations live one family per file: functions_<family>.cpp.
#pragma once
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

// Matrix products (functions_matmul.cpp).
Variable matmul(const Variable& a, const Variable& b, bool trans_a = false, bool trans_b = false);
Variable linear(const Variable& x, const Variable& weight, const Variable& bias);  // bias may be undefined
// The GELU MLP y = linear(gelu(linear(x, fc_weight, fc_bias)), proj_weight, proj_bias) as one function, so
// that GELU rides on GEMM epilogues both ways: forward, fc+GELU is one GEMM (ops::linear_gelu, keeping the
// pre-activation); backward, the gradient of the pre-activation comes from proj's input-gradient GEMM with a
// DGELU epilogue (ops::gelu_linear_backward), which also sums it into fc's bias gradient. A DGELU epilogue
// needs the GEMM whose product is dL/dgelu, which belongs to the layer after the GELU: hence one function for
// both layers rather than one for linear+gelu. Biases may be undefined.
Variable gelu_mlp(const Variable& x, const Variable& fc_weight, const Variable& fc_bias, const Variable& proj_weight,
                  const Variable& proj_bias);

// Normalisation and activations (functions_layernorm.cpp, functions_activation.cpp).
Variable layernorm(const Variable& x, const Variable& weight, const Variable& bias, double eps);
Variable gelu(const Variable& x);
Variable softcap(const Variable& x, double cap);
Variable softmax(const Variable& x);

// Embedding and loss (functions_embedding.cpp, functions_cross_entropy.cpp). ids and targets are i32
// tensors (not differentiable).
Variable embedding(const Tensor& ids, const Variable& table);
Variable cross_entropy(const Variable& logits, const Tensor& targets);  // mean over non-ignored rows

// Dropout (functions_dropout.cpp).
Variable dropout(const Variable& x, const ops::DropoutConfig& config);
Variable residual_dropout_add(const Variable& residual, const Variable& x, const ops::DropoutConfig& config);

// Materialising attention (functions_attention.cpp; ops/attention.h: the reference kernels on the CPU,
// the materialising CUDA kernels on a GPU): q [B,Tq,Hq,D], k [B,Tk,Hkv,D], v [B,Tk,Hkv,Dv].
Variable attention_materialized(const Variable& q, const Variable& k, const Variable& v,
                                const ops::AttentionConfig& config);
// Flash attention (ops::flash_attention: CUDA tensors only), same contract and gradients.
Variable flash_attention(const Variable& q, const Variable& k, const Variable& v, const ops::AttentionConfig& config);

// Native Sparse Attention (functions_nsa.cpp; ops/nsa.h, CPU only): q [B,T,Hq,D], k [B,T,Hkv,D],
// v [B,T,Hkv,Dv], gate logits [B,T,Hq,3], the compressor's k_pos [l,D], k_weight [D,l·D], v_pos [l,Dv],
// v_weight [Dv,l·Dv]. No gradient flows through the choice of selection blocks.
struct NsaVariables {
  Variable q, k, v, gates, k_pos, k_weight, v_pos, v_weight;
};
Variable nsa(const NsaVariables& in, const ops::NsaConfig& config);

}  // namespace alpha::autograd
