// The classifier and its cross-entropy loss as one op over chunks of rows, so that the [N, V] logits are
// never held whole. Per chunk of rows: logits = x·Wᵀ + b (softcapped, c·tanh(logits/c), when a cap is
// given), the rows' losses, and, when asked, the chunk's
// share of the gradients of the mean loss (dx, dW, db), computed at once from the chunk's dlogits; the
// chunk's logits and dlogits are then dropped. The loss and dlogits come from one pass over the logits
// (kernels::cross_entropy_with_grad), and without a cap the dlogits overwrite the logits. A training step
// holds one chunk of logits (and of dlogits beside them with a cap) instead of all the logits until the
// backward and all the dlogits during it (gpt2-124m at batch 16: 16384 × 50304 bf16 logits are 1.6 GB, and
// so are their dlogits).
//
// The gradients are those of the loss itself (dloss = 1): the autograd function scales them by the loss's
// gradient in the backward (autograd::linear_cross_entropy). So the forward does the backward's GEMMs, and the
// backward is one scaling pass over dx, dW and db.
#pragma once
#include <cstddef>

#include "alpha/tensor/tensor.h"

namespace alpha::ops {

struct LinearCrossEntropy {
  Tensor loss;     // 0-dimensional mean over the non-ignored rows (0 when every row is ignored), in the
                   // accumulation dtype (f64 for f64, else f32), as ops::cross_entropy gives it
  Tensor dx;       // d loss / d x, shaped like x; undefined unless asked for
  Tensor dweight;  // d loss / d weight, [V, C]; undefined unless asked for (dtype: see wide_param_grads)
  Tensor dbias;    // d loss / d bias, [V]; undefined unless asked for (dtype: see wide_param_grads)
};

// The logits of one chunk take at most about this many bytes (and as many again for their dlogits): 4 chunks
// at gpt2-124m's batch 16 × 1024, vocabulary 50304, in bf16; one chunk for the `seed` config.
inline constexpr size_t kLinearCrossEntropyChunkBytes = size_t(512) << 20;

// x [..., C], weight [V, C], bias [V] or undefined (x's dtype and device), targets i32 with one entry per
// row of x (shaped [N] or like x without its last dimension), each in [0, V) or kIgnoreIndex, on the host or
// on x's device. Targets on the host are validated there, with no wait for the device; targets on the device
// are copied to the host to be validated (one copy that waits for the stream, as ops::cross_entropy), unless
// targets_checked: the caller vouches that every target lies in [0, V), none ignored, checked where they came
// from (a trainer's batch on the host), and the op reads none of them back. Nothing then goes between the host
// and the device, so that a CUDA graph can capture the op and replay it on other targets of the shape.
// The loss equals ops::cross_entropy(ops::linear(x, weight, bias), targets).loss (with a logit_softcap > 0,
// of ops::softcap of those logits) up to the order of the chunks' sums. logit_softcap: 0 (none) or > 0. Gradients in
// f16 are refused (DTypeError): computed before the loss's gradient is known, an f16 gradient would miss the loss scale
// that keeps it from underflowing; f16 takes linear and cross_entropy. dW and db are summed over the chunks in the
// accumulation dtype, by the GEMMs themselves (each chunk's product added into one f32 sum for bf16 x:
// ops::linear_param_grads_into), and rounded once to x's dtype; with wide_param_grads they are returned in the
// accumulation dtype instead, unrounded (for a caller whose weights are kept in it: a model's f32 master weights under
// bf16 compute), and one chunk's come from its GEMM in that dtype too.
LinearCrossEntropy linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                        const Tensor& targets, bool need_dx, bool need_dweight, bool need_dbias,
                                        double logit_softcap = 0.0, size_t chunk_bytes = kLinearCrossEntropyChunkBytes,
                                        bool wide_param_grads = false, bool targets_checked = false);

}  // namespace alpha::ops
