// Flash attention for bf16 and f16 on the tensor cores (kernels/flash_attention.h's contract): what the
// forward (flash_attention_mma_forward.cu) and backward (flash_attention_mma_backward.cu) kernels share:
// the head-dimension buckets they are compiled for, the layout they require, and the element-wise pieces
// of the score and its gradient, written once so both passes compute the same P.
//
// Precision, as FlashAttention-2: q, k, v, dO are bf16/f16; every product accumulates in f32 on the tensor
// cores (mma.m16n8k16); S, the softmax statistics and dS are f32; P (for P·V and dV = P̃ᵀ·dO) and dS (for
// dQ = dS·K and dK = dSᵀ·Q) are rounded to the input type before their products, which is where the kernels'
// error beyond the storage rounding comes from (the harness bounds it by twice the naive low-precision
// attention's).
//
// Head dimensions: D and Dv are multiples of 8 up to 256, padded with zeros in shared memory to the bucket
// of the wider of the two (32, 64, 96, 128 or 256: D = 48 runs the 64 kernels, as FlashAttention-2 does).
// Rows of q, k and v start 16-byte aligned (cp.async moves 16 bytes): the pointers are 16-byte aligned and
// every stride but the feature one is a multiple of 8 elements. Anything else raises ShapeError naming what
// was expected; nothing falls back.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "alpha/core/error.h"
#include "alpha/kernels/attention_reference.h"
#include "alpha/kernels/cuda/attention_common.cuh"
#include "alpha/kernels/flash_attention.h"

namespace alpha::kernels::cuda {

// The kernels' bucket for D and Dv (raises ShapeError for what the kernels cannot take).
inline int mma_head_dim_bucket(int64_t head_dim, int64_t value_dim, const char* op) {
  const int64_t widest = std::max(head_dim, value_dim);
  if (head_dim < 8 || value_dim < 8 || widest > 256 || head_dim % 8 || value_dim % 8)
    raise<ShapeError>(op, "head_dim, value_dim", "multiples of 8 from 8 to 256 for bf16/f16 flash attention",
                      std::to_string(head_dim) + ", " + std::to_string(value_dim));
  return widest <= 32 ? 32 : widest <= 64 ? 64 : widest <= 96 ? 96 : widest <= 128 ? 128 : 256;
}
template <class T>
int mma_head_dim_bucket(const AttentionParams<T>& p, const char* op) {
  return mma_head_dim_bucket(p.head_dim, p.value_dim, op);
}

// Whether `rows` (an operand of [B, T, H, features]) starts 16-byte aligned with every stride a multiple of 8
// elements, as cp.async and TMA need.
inline bool mma_rows_aligned(const void* rows, const AttentionStrides& s) {
  return reinterpret_cast<uintptr_t>(rows) % 16 == 0 && s.batch % 8 == 0 && s.time % 8 == 0 && s.head % 8 == 0;
}

// Raises ShapeError unless mma_rows_aligned.
template <class T>
void require_mma_rows(const T* rows, const AttentionStrides& s, const char* op, const char* name) {
  if (!mma_rows_aligned(rows, s))
    raise<ShapeError>(
        op, name, "16-byte aligned rows (pointer 16-byte aligned, batch/time/head strides multiples of 8)",
        "strides " + std::to_string(s.batch) + ", " + std::to_string(s.time) + ", " + std::to_string(s.head));
}

// Whether query i sees key j (false for i past Tq).
template <class T>
__device__ __forceinline__ bool mma_visible(const AttentionParams<T>& p, int64_t i, int64_t j) {
  if (i >= p.q_len) return false;
  const KeyRange range = visible_key_range(p, i);
  return j >= range.begin && j < range.end;
}

// condition ? a : b as a select instruction (selp), never a branch: for conditions on data, which a
// constant-time kernel must not branch on (a plain ?: may compile to either).
__device__ __forceinline__ float select_float(bool condition, float a, float b) {
  float r;
  asm("{\n .reg .pred p;\n setp.ne.u32 p, %1, 0;\n selp.f32 %0, %2, %3, p;\n}"
      : "=f"(r)
      : "r"(unsigned(condition)), "f"(a), "f"(b));
  return r;
}

// The logit's softcap c, and 1/c, worked out once per kernel (c = 0: none).
struct Softcap {
  float cap, inverse;
};
template <class T>
__device__ __forceinline__ Softcap softcap_of(const AttentionParams<T>& p) {
  return {p.softcap, p.softcap > 0 ? fast_reciprocal(p.softcap) : 0.0f};
}

// S = softcap(dot·scale), the logit of one entry.
template <class T>
__device__ __forceinline__ float attention_logit(const AttentionParams<T>& p, Softcap c, float dot) {
  const float s = dot * p.scale;
  return c.cap > 0 ? c.cap * fast_tanh(s * c.inverse) : s;
}

// A block's batch entry and heads from its grid row: blockIdx.y = b·H + head, with H = Hq (head a query
// head, kv_head its group's) or, for kv_heads_of_row, H = Hkv. 32-bit arithmetic (heads_extent keeps B·H
// under 2¹⁶): a 64-bit division is a subroutine call, which the constant-time audit refuses.
struct BlockHeads {
  int64_t b, head, kv_head, group;
};
template <class T>
__device__ __forceinline__ BlockHeads query_heads_of_row(const AttentionParams<T>& p, unsigned row) {
  const unsigned heads = unsigned(p.q_heads), group = heads / unsigned(p.kv_heads), head = row % heads;
  return {row / heads, head, head / group, group};
}
template <class T>
__device__ __forceinline__ BlockHeads kv_heads_of_row(const AttentionParams<T>& p, unsigned row) {
  const unsigned heads = unsigned(p.kv_heads), group = unsigned(p.q_heads) / heads, head = row % heads;
  return {row / heads, head, head, group};
}

// Query tile `from_end` of `tiles` tiles of `rows` rows of head bh = b·Hq + h (counted from the last tile, so
// that under a causal mask the longest rows start first), and the keys it sees: [key_begin, key_end) by any of
// its rows, [whole_begin, whole_end) by every one (no masking there). query_tile: the block's, tile blockIdx.x
// of head blockIdx.y.
struct QueryTile {
  int64_t bh, b, h, kv_head, first_row, key_begin, key_end, whole_begin, whole_end;
};
template <class T>
__device__ __forceinline__ QueryTile query_tile_at(const AttentionParams<T>& p, int rows, int64_t from_end,
                                                   int64_t tiles, unsigned bh) {
  const BlockHeads heads = query_heads_of_row(p, bh);
  const int64_t first_row = (tiles - 1 - from_end) * rows;
  const TileKeyRanges keys = tile_key_ranges(p, first_row, rows);
  return {int64_t(bh),    heads.b,      heads.head,       heads.kv_head, first_row,
          keys.any.begin, keys.any.end, keys.every.begin, keys.every.end};
}
template <class T>
__device__ __forceinline__ QueryTile query_tile(const AttentionParams<T>& p, int rows) {
  return query_tile_at(p, rows, blockIdx.x, gridDim.x, blockIdx.y);
}

// The rows of one head of an operand [B, T, H, features]: element (t, e) at rows[t·strides.time + e].
template <class T>
__device__ __forceinline__ const uint16_t* head_rows(const T* x, const AttentionStrides& strides, int64_t b,
                                                     int64_t head) {
  return bits(x) + b * strides.batch + head * strides.head;
}

// log2 of the forward's normaliser of row i, so that P = exp2(S·log2e − lse2): m·log2e + log2(l). +inf
// for a row that sees no key (and for rows past Tq): P = 0 there.
__device__ __forceinline__ float log2_normaliser(float row_max, float row_sum) {
  return select_float(row_sum > 0.0f, fmaf(row_max, kLog2e, fast_log2(row_sum)), INFINITY);
}

// P̃ and dS_raw of one visible entry, from its q·k dot, its dO·v dot, its row's lse2 and D, and its
// dropout factor z: P = exp(S − m) / l, P̃ = P·z, dS = P·(dP·z − D), through the softcap
// dS_raw = dS·(1 − (S/c)²). `scale_log2` is scale·log2e. The factor `scale` of dQ = dS_raw·K·scale and
// dK = dS_rawᵀ·Q·scale is left to the callers, who apply it once to their accumulators. kSoftcap is
// p.softcap > 0, a template as in the forward's softmax step.
struct EntryGrad {
  float prob_dropped;
  float dscore;
};
template <bool kSoftcap, class T>
__device__ __forceinline__ EntryGrad entry_gradient(const AttentionParams<T>& p, Softcap c, float scale_log2, float qk,
                                                    float dov, float lse2, float delta, float z) {
  float prob, ds;
  if constexpr (kSoftcap) {
    const float s = attention_logit(p, c, qk), ratio = s * c.inverse;
    prob = fast_exp2(fmaf(s, kLog2e, -lse2));
    ds = prob * fmaf(dov, z, -delta) * (1.0f - ratio * ratio);
  } else {
    prob = fast_exp2(fmaf(qk, scale_log2, -lse2));
    ds = prob * fmaf(dov, z, -delta);
  }
  return {prob * z, ds};
}

template <class T>
void flash_attention_mma_forward(const AttentionForwardArgs<T>& args, cudaStream_t stream);
// Whether this head-dimension bucket runs the Hopper kernels (flash_attention_tma_forward.cuh,
// flash_attention_wgmma_backward.cu) on the current device: buckets 64 and 128 on a compute capability 9.0
// device (H100, H200), in a library built with sm_90a code. The device's answer is asked once.
bool wgmma_kernels_run(int bucket);
// The warp-specialised TMA/wgmma forward of bucket 64 or 128 (where wgmma_kernels_run).
template <class T>
void flash_attention_wgmma_forward(const AttentionForwardArgs<T>& args, int bucket, cudaStream_t stream);
// The wgmma backward of bucket 64 or 128 (where wgmma_kernels_run). Deterministic, but with
// params.deterministic false where wgmma_backward_adds_dq, where the dK/dV kernel also adds dQ into the f32
// accumulator (flash_attention_wgmma_backward.cu has the numbers). workspace: as flash_attention_mma_backward's.
template <class T>
void flash_attention_wgmma_backward(const AttentionBackwardArgs<T>& args, float* workspace, cudaStream_t stream);
// workspace (flash_attention_backward_workspace floats): D = rowsum(dO∘O) per query row in its first B·Hq·Tq,
// already computed (launch_attention_delta); for the non-deterministic backward the dQ accumulator after it.
template <class T>
void flash_attention_mma_backward(const AttentionBackwardArgs<T>& args, float* workspace, cudaStream_t stream);

}  // namespace alpha::kernels::cuda
