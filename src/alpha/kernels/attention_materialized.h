// Materialising attention on CUDA: the GPU twin of the reference (attention_reference.h), taking the same
// argument structs and computing the same thing under the same conventions (bottom-right causal mask,
// softcap, dropout on P with the reference's Philox mask, GQA/MQA, Dv != D, any Tq and Tk, row statistics,
// rows that see no key). It is NOT flash attention: it writes the whole f32 score matrix of every
// (batch, head) to a workspace of B·Hq·Tq·Tk floats and reads it back, so its memory grows with Tq·Tk.
// It exists so that a model trains on the GPU before the fused kernels land, and as their second oracle.
//
// Forward, per (b, h): S = softcap(q·kᵀ·scale) into the workspace (tiled, shared memory); one row kernel
// takes m = rowmax(S), l = rowsum(exp(S − m)) over the visible keys and overwrites the row with
// P̃ = exp(S − m) / l · dropout factor; out = P̃·V (tiled).
// Backward: D = rowsum(dO∘O); S recomputed into the workspace (the same bits as the forward's);
// dV = P̃ᵀ·dO with P̃ rebuilt from S, m, l and the mask as it is loaded; then the workspace is overwritten
// with dS = P∘(dP∘Z − D) (through the softcap, times the scale), dP = dO·Vᵀ computed tile by tile;
// dQ = dS·K; dK = dSᵀ·Q. dK and dV sum over the Hq / Hkv query heads of their group inside one thread
// per element, in a fixed order (head, then query): no atomics, the same bits on every run.
#pragma once
#include <cstdint>

#include "alpha/core/stream.h"
#include "alpha/kernels/attention_reference.h"

namespace alpha::kernels {

// The f32 workspace both directions need, in elements: the score matrices (B·Hq·Tq·Tk) and one value per
// query row (B·Hq·Tq, the backward's D).
template <class T>
int64_t attention_materialized_workspace(const AttentionParams<T>& p) {
  return p.batch * p.q_heads * p.q_len * (p.kv_len + 1);
}

#if ALPHA_WITH_CUDA
// Device pointers; queued on `stream` (Stream{}: the current device's default stream). T = float, bf16 or
// f16, accumulating in f32 (row_max and row_sum are f32). `workspace` holds at least
// attention_materialized_workspace(args.params) floats on the same device; it is overwritten.
namespace cuda {
template <class T>
void attention_materialized_forward(const AttentionForwardArgs<T>& args, float* workspace, Stream stream);
template <class T>
void attention_materialized_backward(const AttentionBackwardArgs<T>& args, float* workspace, Stream stream);
}  // namespace cuda
#endif

}  // namespace alpha::kernels
