// Reference attention, naive and materialising: for one (batch, head) at a time it builds the whole
// [Tq, Tk] score matrix S = softcap(q·kᵀ·scale) with the causal and window masks applied, then the softmax
// statistics m = rowmax(S), l = rowsum(exp(S − m)) and P = exp(S − m) / l, then out = dropout(P)·V.
// It fuses nothing on purpose: it is the oracle the fused attention kernels (flash, JVP, NSA) are
// tested against, so it favours the plainest correct computation, accumulated in acc_t<T>.
//
// Conventions shared by forward and backward:
// - Query i sees the keys [begin, end) of visible_key_range(p, i): causal masking is bottom-right aligned
//   (j <= i + (Tk − Tq)), and a sliding window bounds j on either side of that diagonal. A query row that
//   sees no key (causal with Tq > Tk, or a window past the keys) has m = −inf, l = 0, output 0 and
//   contributes no gradient. Masked keys on either side are excluded from m, l and every product.
// - Dropout acts on the normalised P, so m and l are those of the undropped softmax. Element (b, h, i, j)
//   is kept iff dropout_keep(seed, offset + ((b·Hq + h)·Tq + i)·Tk + j, p); kept values are scaled by
//   1/(1 − p). The backward regenerates the same mask.
// - GQA/MQA: query head h reads kv head h / (Hq / Hkv); dk and dv sum over the Hq / Hkv query heads of
//   each group.
//
// Backward, with Z the scaled dropout mask (Z_ij = keep_ij / (1 − p)), P̃ = P∘Z and O = P̃·V:
//   dV = P̃ᵀ·dO,   dP = (dO·Vᵀ)∘Z,   dS = P∘(dP − D),   D_i = Σ_j P_ij·dP_ij.
// D_i = Σ_j P_ij·Z_ij·(dO_i·V_j) = dO_i·(Σ_j P̃_ij·V_j) = dO_i·O_i, so D = rowsum(dO∘O) holds with O the
// forward's (dropped) output and the kernel never needs the dP row sum. Through the softcap
// S = c·tanh(S_raw/c), dS_raw = dS∘(1 − (S/c)²); then dQ = dS_raw·K·scale and dK = dS_rawᵀ·Q·scale.
#pragma once
#include <cstdint>

#include "alpha/core/dtype.h"
#include "alpha/core/hd.h"
#include "alpha/core/philox.h"

namespace alpha::kernels {

// Element strides of a [B, T, H, features] operand; the feature dimension is unit-stride, so q, k and v
// may be slices of one fused qkv tensor.
struct AttentionStrides {
  int64_t batch;
  int64_t time;
  int64_t head;
};

// Shapes, layouts and configuration, shared by the forward and backward arguments.
template <class T>
struct AttentionParams {
  int64_t batch;       // B
  int64_t q_len;       // Tq
  int64_t kv_len;      // Tk
  int64_t q_heads;     // Hq, a multiple of Hkv
  int64_t kv_heads;    // Hkv
  int64_t head_dim;    // D, of q and k
  int64_t value_dim;   // Dv, of v and out
  AttentionStrides q_strides, k_strides, v_strides;
  acc_t<T> scale;      // multiplies q·kᵀ
  acc_t<T> softcap;    // 0 disables
  bool causal;
  float dropout_p;     // in [0, 1); 0 disables. f32, as dropout_keep compares an f32 uniform draw with it
  acc_t<T> dropout_scale;  // 1/(1 − p), from the configuration's f64 p
  uint64_t dropout_seed;
  uint64_t dropout_offset;
  // Sliding window around the key aligned with query i, d(i) = i + (Tk − Tq) (bottom-right, as causal):
  // query i sees keys j with d(i) − window_left <= j <= d(i) + window_right; −1 leaves that side unbounded.
  // Combined with causal (which bounds the right side at d(i)). See visible_key_range.
  int64_t window_left = -1;
  int64_t window_right = -1;
  // false lets the bf16/f16 flash backward (CUDA) accumulate dQ with f32 atomics, in whatever order the
  // blocks run: faster, not bit-reproducible. Every other kernel is deterministic whatever this says.
  bool deterministic = true;
};

template <class T>
struct AttentionForwardArgs {
  const T* q;           // (B, Tq, Hq, D), strided
  const T* k;           // (B, Tk, Hkv, D), strided
  const T* v;           // (B, Tk, Hkv, Dv), strided
  T* out;               // (B, Tq, Hq, Dv), contiguous
  acc_t<T>* row_max;    // (B, Hq, Tq), contiguous
  acc_t<T>* row_sum;    // (B, Hq, Tq), contiguous
  AttentionParams<T> params;
};

template <class T>
struct AttentionBackwardArgs {
  const T* dout;             // (B, Tq, Hq, Dv), contiguous
  const T* q;                // (B, Tq, Hq, D), strided
  const T* k;                // (B, Tk, Hkv, D), strided
  const T* v;                // (B, Tk, Hkv, Dv), strided
  const T* out;              // (B, Tq, Hq, Dv), contiguous: the forward's output
  const acc_t<T>* row_max;   // (B, Hq, Tq), contiguous: the forward's statistics
  const acc_t<T>* row_sum;   // (B, Hq, Tq), contiguous
  T* dq;                     // (B, Tq, Hq, D), rows dq_row_stride apart
  T* dk;                     // (B, Tk, Hkv, D), rows dk_row_stride apart
  T* dv;                     // (B, Tk, Hkv, Dv), rows dv_row_stride apart
  AttentionParams<T> params;
  // Elements from one (b, t) row of dq, dk and dv to the next, each row's heads packed as [H, D]: 0 for
  // contiguous outputs (H·D), more to write into views of a wider buffer (the slices of a fused qkv gradient).
  int64_t dq_row_stride = 0, dk_row_stride = 0, dv_row_stride = 0;
};

// Where head h of row (b, t) of an attention gradient ([B, len, heads, dim], rows `row_stride` apart, or
// heads·dim for 0: AttentionBackwardArgs) starts, in elements.
ALPHA_HD int64_t grad_offset(int64_t b, int64_t t, int64_t h, int64_t len, int64_t row_stride, int64_t heads,
                             int64_t dim) {
  return (b * len + t) * (row_stride != 0 ? row_stride : heads * dim) + h * dim;
}

// The keys query i sees, [begin, end): all of them, cut on the right by the bottom-right aligned causal
// mask (j <= d(i) = i + Tk − Tq) and by the window (j <= d(i) + window_right), on the left by the window
// (j >= d(i) − window_left). Empty (begin == end) for a row that sees no key. Shared with the CUDA kernels.
struct KeyRange {
  int64_t begin;
  int64_t end;
};
template <class T>
ALPHA_HD KeyRange visible_key_range(const AttentionParams<T>& p, int64_t i) {
  const int64_t diagonal = i + p.kv_len - p.q_len;
  int64_t begin = 0, end = p.kv_len;
  if (p.causal && diagonal + 1 < end) end = diagonal + 1;
  if (p.window_right >= 0 && diagonal + p.window_right + 1 < end) end = diagonal + p.window_right + 1;
  if (p.window_left >= 0 && diagonal - p.window_left > begin) begin = diagonal - p.window_left;
  if (end < 0) end = 0;
  if (begin > end) begin = end;
  return {begin, end};
}

// The last row of the tile of `rows` rows starting at `first`, out of `total`.
ALPHA_HD int64_t tile_last_row(int64_t first, int rows, int64_t total) {
  return first + rows < total ? first + rows - 1 : total - 1;
}

// The keys the query rows [first_row, first_row + rows) ∩ [0, Tq) see: `any` by at least one of them (the first
// row's begin to the last row's end), `every` by all of them (the last row's begin to the first row's end; no
// masking there). Shared by the CUDA kernels' query tiles and the host's model of their cost (persistent_tiles.h).
struct TileKeyRanges {
  KeyRange any, every;
};
template <class T>
ALPHA_HD TileKeyRanges tile_key_ranges(const AttentionParams<T>& p, int64_t first_row, int rows) {
  const KeyRange first = visible_key_range(p, first_row);
  const KeyRange last = visible_key_range(p, tile_last_row(first_row, rows, p.q_len));
  return {{first.begin, last.end}, {last.begin, first.end}};
}

// The queries that see at least one key of [key_begin, key_end) (0 <= key_begin <= key_end <= Tk): a
// contiguous range, as begin and end of visible_key_range never decrease with i and the rows that see no
// key are leading or trailing ones. Query i qualifies iff end(i) > key_begin and begin(i) < key_end; with
// d(i) = i + Tk − Tq these read d(i) >= key_begin (causal), d(i) + window_right >= key_begin (right window)
// and d(i) − window_left < key_end (left window). Shared with the CUDA kernels (which skip tiles with it).
struct QueryRange {
  int64_t begin;
  int64_t end;
};
template <class T>
ALPHA_HD QueryRange visible_query_range(const AttentionParams<T>& p, int64_t key_begin, int64_t key_end) {
  if (key_begin >= key_end) return {0, 0};
  const int64_t shift = p.kv_len - p.q_len;  // d(i) = i + shift
  int64_t begin = 0, end = p.q_len;
  if (p.causal && key_begin - shift > begin) begin = key_begin - shift;
  if (p.window_right >= 0 && key_begin - p.window_right - shift > begin) begin = key_begin - p.window_right - shift;
  if (p.window_left >= 0 && key_end + p.window_left - shift < end) end = key_end + p.window_left - shift;
  if (begin > p.q_len) begin = p.q_len;
  if (end < begin) end = begin;
  return {begin, end};
}

// The Philox counter of P(b, h, i, j), with bh = b·Hq + h: dropout_offset + (bh·Tq + i)·Tk + j.
template <class T>
ALPHA_HD uint64_t attention_dropout_index(const AttentionParams<T>& p, int64_t bh, int64_t i, int64_t j) {
  return p.dropout_offset + (uint64_t(bh) * uint64_t(p.q_len) + uint64_t(i)) * uint64_t(p.kv_len) + uint64_t(j);
}

// The factor dropout applies to P(b, h, i, j), with bh = b·Hq + h: 0 when dropped, 1/(1 − p) when kept, 1
// without dropout (Z of the backward's formulas). Shared by the reference and the harness's naive attention.
template <class T>
ALPHA_HD acc_t<T> attention_dropout_factor(const AttentionParams<T>& p, int64_t bh, int64_t i, int64_t j) {
  if (p.dropout_p == 0) return acc_t<T>(1);
  const bool keep = dropout_keep(p.dropout_seed, attention_dropout_index(p, bh, i, j), p.dropout_p);
  return keep ? p.dropout_scale : acc_t<T>(0);
}

namespace cpu {
template <class T> void attention_reference_forward(const AttentionForwardArgs<T>& args);
template <class T> void attention_reference_backward(const AttentionBackwardArgs<T>& args);
}  // namespace cpu

}  // namespace alpha::kernels
