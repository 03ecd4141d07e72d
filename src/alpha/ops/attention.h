// Materialising attention: builds the whole [Tq, Tk] score matrix of each (batch, head), on the tensors'
// device. On the CPU it runs the reference kernels (kernels/attention_reference.h, f32 or f64: naive, one
// score matrix per head at a time), the oracle every fused attention kernel is tested against. On a CUDA
// device it runs the materialising kernels (kernels/attention_materialized.h, f32, bf16 or f16 computing
// in f32): tiled products through an f32 workspace of B·Hq·Tq·Tk floats taken from the caching allocator,
// NOT flash attention (its memory grows with Tq·Tk). Both return the per-row statistics fused kernels
// save: m = rowmax(S) and l = rowsum(exp(S − m)), with S = softcap(q·kᵀ·scale) (entries masked by the
// causal mask or the sliding window excluded) and P = exp(S − m) / l; both draw the same dropout mask.
#pragma once
#include <cstdint>

#include "alpha/tensor/tensor.h"

namespace alpha::ops {

struct AttentionConfig {
  double scale = 0.0;       // >= 0; 0 means 1/√D
  bool causal = false;      // bottom-right aligned: query i sees keys j <= i + (Tk − Tq)
  double softcap = 0.0;     // 0 disables; else S = c·tanh(S/c)
  double dropout_p = 0.0;   // on P, mask from Philox(seed, offset + ((b·Hq + h)·Tq + i)·Tk + j)
  uint64_t dropout_seed = 0;
  uint64_t dropout_offset = 0;
  // Sliding window around the diagonal d(i) = i + (Tk − Tq): query i sees keys j with
  // d(i) − window_left <= j <= d(i) + window_right (and the causal mask, if set); −1 leaves a side unbounded.
  int64_t window_left = -1;
  int64_t window_right = -1;
  // Constant time (flash attention only): the call's control flow and memory addresses depend only on the
  // shapes and these flags, never on the values of q, k, v (or dO): docs/SECURITY.md says how that is
  // checked. The bf16/f16 tensor-core kernels are built that way, so this asks for them and refuses what
  // they do not cover (the CPU, f32) instead of running another path.
  bool constant_time = false;
  // Deterministic (the default): every run gives the same bits. false opts into the faster backward of the
  // bf16/f16 flash kernels that adds dQ into f32 with atomics (FlashAttention-2's scheme; on Hopper at head
  // dims 33-64 and 97-128 the copy engine's reduce-add, FlashAttention-3's; the order of the additions, so the low bits
  // of dq, vary from run to run), where it is the faster (kernels::cuda::wgmma_backward_adds_dq on Hopper).
  // The other kernels stay deterministic either way; constant_time requires deterministic (the atomic kernels
  // are not audited).
  bool deterministic = true;
};

struct AttentionOutput {
  Tensor out;      // [B, Tq, Hq, Dv]
  Tensor row_max;  // [B, Hq, Tq], accumulation dtype (f32 on a GPU); -inf for a fully masked row
  Tensor row_sum;  // [B, Hq, Tq]; 0 for a fully masked row (whose output is 0)
};
// q [B, Tq, Hq, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv]; Hq a multiple of Hkv (GQA/MQA).
AttentionOutput attention_materialized(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const AttentionConfig& config);

struct AttentionGrads {
  Tensor dq, dk, dv;  // dk, dv summed over each GQA group
};
// out, row_max and row_sum are the forward's; dk, dv summed over each GQA group in a fixed order (the same
// bits on every run, on both devices). With `into`, dq, dk and dv are written into its tensors (and returned)
// instead of fresh ones: shaped, typed and placed like q, k and v, each (b, t) row's heads packed ([H, D]
// contiguous) and the rows evenly spaced, as the slices of a fused [B, T, (Hq + 2·Hkv)·D] gradient are. Another
// shape raises ShapeError, another dtype DTypeError, another layout LayoutError, naming into.dq, into.dk or
// into.dv.
AttentionGrads attention_materialized_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                               const Tensor& out, const Tensor& row_max, const Tensor& row_sum,
                                               const AttentionConfig& config, const AttentionGrads* into = nullptr);

// Flash attention on a CUDA device (kernels/flash_attention.h): the contract, options, statistics and
// dropout mask of attention_materialized, computed tile by tile without ever holding the Tq×Tk scores.
// bf16 and f16 inputs accumulate in f32; f32 inputs compute in true f32 (no TF32). Head dims D and Dv up
// to 256 each. A CPU tensor raises DeviceError and a wider head ShapeError: nothing falls back to a slower
// path.
AttentionOutput flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionConfig& config);
// Which kernels flash_attention runs for inputs of `dtype` (f32, bf16 or f16; DTypeError otherwise) and these
// head dimensions on `device` (a CUDA device; DeviceError otherwise), in words for the logs: on a compute capability 9.0 GPU the Hopper kernels
// for head-dim buckets 64 and 128, else the mma.sync tensor-core kernels, and the FMA kernels for f32.
// ShapeError for head dimensions flash attention cannot take.
std::string flash_attention_kernels(Device device, DType dtype, int64_t head_dim, int64_t value_dim);
// `into`: as attention_materialized_backward's.
AttentionGrads flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& out, const Tensor& row_max, const Tensor& row_sum,
                                        const AttentionConfig& config, const AttentionGrads* into = nullptr);

}  // namespace alpha::ops
