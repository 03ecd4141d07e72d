// Native Sparse Attention (NSA; DeepSeek 2025), the CPU reference: naive and plain, accumulated in
// acc_t<T>, the oracle a fused NSA kernel is tested against. Every query t and query head h attends to
// three views of the causal past, and a gated sum combines them:
//   o_t = σ(g_t,0)·O_cmp + σ(g_t,1)·O_slc + σ(g_t,2)·O_win,
// with g the gate logits (the sigmoid is applied here, so its derivative is part of the backward).
//
// Compressor (shared by all kv heads; one for keys, one for values). The keys are cut into blocks of
// length l (block_len) with stride d (block_stride): block i covers tokens [i·d, i·d + l), and there are
// Nc = (T − l)/d + 1 complete blocks (none when T < l; a partial block at the end is never compressed).
// Each block becomes one key, with a learned per-position embedding pos_k (l, D) added to its keys, then a
// linear map of the flattened block w_k (D, l·D):
//   K̃_i = w_k · flatten_j(k[i·d + j] + pos_k[j]),  flat index j·D + e,
// and likewise Ṽ_i from v with pos_v (l, Dv) and w_v (Dv, l·Dv).
//
// Branches, each a softmax over its own keys with S = q·kᵀ·scale and its own row statistics m, l:
// - compressed: query t sees the compressed blocks that end at or before it, i·d + l − 1 <= t. A query
//   with no complete block (t < l − 1) gets a zero compressed output (m = −inf, l = 0, no gradient).
// - selected: the keys are cut into selection blocks of length l' (select_len), block j covering
//   [j·l', (j + 1)·l'). The score of block j for (t, kv head) is Σ over the query heads of the GQA group of
//   Σ over the compressed blocks i overlapping it (i·d < (j + 1)·l' and i·d + l > j·l') of the compressed
//   branch's probability P_cmp(t, i). The candidates are the blocks that start at or before t (j·l' <= t);
//   when there are more than n (select_count, >= 3), the first block, the block holding t and the one
//   before it are always kept and the remaining n − 3 are the highest scores, ties going to the lower
//   block index. Query t attends to the tokens of the kept blocks, causally (keys <= t). The choice is
//   piecewise constant in the inputs: no gradient flows through it.
// - sliding window: the last w tokens, keys [t − w + 1, t].
// NSA is causal by construction; there is no non-causal form.
//
// The forward returns what the backward needs: each branch's output and row statistics, the compressed
// keys and values, and the kept selection blocks. The backward follows attention_reference.h per branch
// (dS = P∘(dP − D) with D = dO_c·O_c, O_c the branch's stored output), with dO_c = σ(g_c)·dO and
// dg_c = (dO·O_c)·σ(g_c)·(1 − σ(g_c)); the compressed branch's dK̃, dṼ flow back through the compressor
// into k, v, pos and w. Every reduction runs in a fixed order, so the bits do not depend on the thread count.
#pragma once
#include <cstdint>

#include "alpha/core/dtype.h"
#include "alpha/core/hd.h"
#include "alpha/core/stream.h"
#include "alpha/kernels/attention_reference.h"

namespace alpha::kernels {

// The branches in the order of the gate logits' last dimension and of the per-branch outputs.
enum NsaBranch : int64_t { kNsaCompressed = 0, kNsaSelected = 1, kNsaWindow = 2, kNsaBranches = 3 };

template <class T>
struct NsaParams {
  int64_t batch;      // B
  int64_t seq_len;    // T, of queries and keys alike
  int64_t q_heads;    // Hq, a multiple of Hkv
  int64_t kv_heads;   // Hkv
  int64_t head_dim;   // D, of q and k
  int64_t value_dim;  // Dv, of v and out
  AttentionStrides q_strides, k_strides, v_strides;
  acc_t<T> scale;        // multiplies q·kᵀ in every branch
  int64_t block_len;     // l >= 1
  int64_t block_stride;  // d >= 1
  int64_t select_len;    // l' >= 1
  int64_t select_count;  // n >= 3
  int64_t window;        // w >= 1
};

// Complete compression blocks of a sequence of length T: (T − l)/d + 1, or 0 when T < l. With T = t + 1, the
// compressed blocks query t sees. Shared with the CUDA kernels.
ALPHA_HD int64_t nsa_compressed_blocks(int64_t seq_len, int64_t block_len, int64_t block_stride) {
  return seq_len < block_len ? 0 : (seq_len - block_len) / block_stride + 1;
}
template <class T>
ALPHA_HD int64_t nsa_compressed_blocks(const NsaParams<T>& p) {
  return nsa_compressed_blocks(p.seq_len, p.block_len, p.block_stride);
}

// The inputs, shared by the forward and backward arguments.
template <class T>
struct NsaInputPointers {
  const T* q;         // (B, T, Hq, D), strided
  const T* k;         // (B, T, Hkv, D), strided
  const T* v;         // (B, T, Hkv, Dv), strided
  const T* gates;     // (B, T, Hq, 3), contiguous: gate logits, in NsaBranch order
  const T* k_pos;     // (l, D), contiguous
  const T* k_weight;  // (D, l·D), contiguous
  const T* v_pos;     // (l, Dv), contiguous
  const T* v_weight;  // (Dv, l·Dv), contiguous
};

template <class T>
struct NsaForwardArgs {
  NsaInputPointers<T> in;
  T* out;             // (B, T, Hq, Dv), contiguous
  T* branch_out;      // (3, B, T, Hq, Dv), contiguous: each branch's output before gating
  T* compressed_k;    // (B, Nc, Hkv, D), contiguous
  T* compressed_v;    // (B, Nc, Hkv, Dv), contiguous
  acc_t<T>* row_max;  // (3, B, Hq, T), contiguous
  acc_t<T>* row_sum;  // (3, B, Hq, T), contiguous
  int32_t* selected;  // (B, T, Hkv, n), contiguous: kept selection blocks ascending, then −1s
  NsaParams<T> params;
  // Tests only: when set, (B, T, Hkv, n) kept blocks (ascending, then −1s, as `selected`) used instead of the
  // top-n choice (copied to `selected`), so a kernel can be compared with another on the other's choice.
  const int32_t* given_selected = nullptr;
};

template <class T>
struct NsaBackwardArgs {
  const T* dout;  // (B, T, Hq, Dv), contiguous
  NsaInputPointers<T> in;
  const T* branch_out;      // (3, B, T, Hq, Dv): the forward's, contiguous as the rest
  const T* compressed_k;    // (B, Nc, Hkv, D)
  const T* compressed_v;    // (B, Nc, Hkv, Dv)
  const acc_t<T>* row_max;  // (3, B, Hq, T)
  const acc_t<T>* row_sum;  // (3, B, Hq, T)
  const int32_t* selected;  // (B, T, Hkv, n)
  T* dq;                    // (B, T, Hq, D), contiguous
  T* dk;                    // (B, T, Hkv, D), contiguous
  T* dv;                    // (B, T, Hkv, Dv), contiguous
  T* dgates;                // (B, T, Hq, 3), contiguous
  T* dk_pos;                // (l, D)
  T* dk_weight;             // (D, l·D)
  T* dv_pos;                // (l, Dv)
  T* dv_weight;             // (Dv, l·Dv)
  NsaParams<T> params;
};

namespace cpu {
template <class T>
void nsa_reference_forward(const NsaForwardArgs<T>& args);
template <class T>
void nsa_reference_backward(const NsaBackwardArgs<T>& args);
}  // namespace cpu

// The widest head dimension (D or Dv) the CUDA kernels (kernels/cuda/nsa.cu) are built for.
inline constexpr int64_t kNsaCudaMaxHeadDim = 256;

#if ALPHA_WITH_CUDA
// The CUDA kernels (kernels/cuda/nsa.cu): device pointers, queued on `stream`; T = float, bf16 or f16, computing in
// f32 (row_max, row_sum f32). Same outputs as the reference; the backward writes every gradient (no zeroing
// needed) and is deterministic. Raises ShapeError for head dimensions beyond kNsaCudaMaxHeadDim, BackendError when
// a block would need more shared memory than the device offers (large G·D, or a long T with a short select_len).
namespace cuda {
template <class T>
void nsa_forward(const NsaForwardArgs<T>& args, Stream stream);
template <class T>
void nsa_backward(const NsaBackwardArgs<T>& args, Stream stream);
}  // namespace cuda
#endif

}  // namespace alpha::kernels
