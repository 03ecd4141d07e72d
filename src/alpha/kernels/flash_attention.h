// Flash attention on CUDA (FlashAttention-2, Dao 2023): the fused twin of the reference attention
// (attention_reference.h), taking the same argument structs and computing the same thing under the same
// conventions (bottom-right causal mask, sliding window through visible_key_range, softcap, dropout on P
// with the reference's Philox mask, GQA/MQA, Dv != D, any Tq and Tk, row statistics, rows that see no key).
// Unlike the materialising kernels (attention_materialized.h) it never writes a score matrix anywhere: S,
// P and dS exist one tile at a time in shared memory, so memory is O(B·Hq·Tq) beyond the operands.
//
// Forward: one thread block per (query tile, b, h). It stages its Q tile in shared memory and walks the
// key tiles of the tile's visible range only (the union of visible_key_range over its rows); per key tile
// S = softcap(Q·Kᵀ·scale), masked; then the online softmax in f32: running m, l per row, the accumulator
// rescaled by exp(m_old − m_new), acc += (exp(S − m_new)∘Z)·V with Z the scaled dropout mask. At the end
// out = acc / l, row_max = m, row_sum = l: the undropped statistics of the reference (a row that sees no
// key: m = −inf, l = 0, out 0).
// Backward: (a) D = rowsum(dO∘O) into the workspace; (b) one block per (key tile, b, kv head) holds its
// K, V tiles and walks the query heads of its GQA group and their query tiles that see any of its keys,
// recomputing P = exp(S − m) / l from q, k and the forward's statistics, and accumulates
// dV += (P∘Z)ᵀ·dO and dK += dS_rawᵀ·Q·scale in registers, dS = P∘(dP − D), dP = (dO·Vᵀ)∘Z,
// dS_raw = dS∘(1 − (S/c)²) through a softcap c; (c) one block per (query tile, b, h) walks its visible key
// tiles for dQ += dS_raw·K·scale. All products are f32 FMA loops over tiles in shared memory.
//
// Determinism: by default no atomics; every output element is owned by one thread that adds its terms in a
// fixed order (dK, dV: query head, then query, ascending), and row reductions use fixed shuffle trees, so
// every run gives the same bits. With params.deterministic false the bf16/f16 backward instead adds each
// key block's dQ contribution into an f32 accumulator with atomics (FlashAttention-2's scheme; on Hopper, for
// head dims 33-64 and 97-128, with the copy engine's reduce-add, FlashAttention-3's), skipping the separate dQ
// pass; dq then varies in its low bits from run to run. On Hopper, head dims 33-64 causal with Tk <= 2048 and
// 97-128 with Tk <= 2048 (4096 causal) stay deterministic either way (wgmma_backward_adds_dq).
//
// Head dimensions: D and Dv from 1 to 256, independently (kernels are compiled for buckets of the widest
// of the two: 64, 128, 256); wider raises ShapeError.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "alpha/core/stream.h"
#include "alpha/kernels/attention_reference.h"

namespace alpha::kernels {

// The widest head dimension (D or Dv) the kernels are built for.
inline constexpr int64_t kFlashMaxHeadDim = 256;

// Where the dQ accumulator starts in the backward's workspace, in floats after D's `rows` values: rounded up
// to 16 bytes, as the copy engine's additions (and float2 atomics) need.
inline int64_t flash_dq_accumulator_offset(int64_t rows) { return (rows + 3) / 4 * 4; }

// The f32 workspace of the backward, in elements: D = rowsum(dO∘O), one value per query row (B·Hq·Tq), and
// for the non-deterministic bf16/f16 backward (params.deterministic false) the f32 dQ accumulator the atomics
// add into (B·Hq·Tq·D, from flash_dq_accumulator_offset).
template <class T>
int64_t flash_attention_backward_workspace(const AttentionParams<T>& p) {
  const int64_t rows = p.batch * p.q_heads * p.q_len;
  const bool atomic_dq = !std::is_same_v<T, float> && !p.deterministic;
  return atomic_dq ? flash_dq_accumulator_offset(rows) + rows * p.head_dim : rows;
}

#if ALPHA_WITH_CUDA
// Device pointers; queued on `stream` (Stream{}: the current device's default stream). T = float, bf16 or
// f16, computing in f32 (row_max and row_sum are f32). Raises ShapeError for head dimensions beyond 256 or
// more than 65535 batch·heads (and the bf16/f16 backward for Tq·(Hq / Hkv) of 2^31 or more: it walks the query
// tiles of a GQA group in 32-bit positions), BackendError when the device lacks the shared memory a tile needs.
namespace cuda {
// Writes out, row_max and row_sum.
template <class T>
void flash_attention_forward(const AttentionForwardArgs<T>& args, Stream stream);
// Writes dq, dk and dv (each element once: no zeroing needed). `workspace` holds at least
// flash_attention_backward_workspace_here(args.params) floats on the same device; it is overwritten.
template <class T>
void flash_attention_backward(const AttentionBackwardArgs<T>& args, float* workspace, Stream stream);
// Whether the bf16/f16 backward of these head dimensions runs Hopper's wgmma kernels on the current device
// (head-dim buckets 64 and 128 on a compute capability 9.0 device, in a library built with sm_90a code).
bool wgmma_backward_runs(int64_t head_dim, int64_t value_dim);
// Whether this backward runs the wgmma dK/dV kernel that also adds dQ into the f32 accumulator (FlashAttention-3's
// 5 products instead of 7): params.deterministic false, head-dim bucket 64 but causal with Tk <= 2048, or bucket
// 128 from Tk 2049 (4097 causal; where it measured slower below). Where the wgmma kernels run and this is false, the
// backward is the deterministic one whatever params.deterministic asks. T = bf16 or f16.
template <class T>
bool wgmma_backward_adds_dq(const AttentionParams<T>& p);
// Which kernels flash attention of these head dimensions runs on the current device, in words for the logs:
// the Hopper kernels (TMA-fed, warp-specialised wgmma), the mma.sync tensor-core kernels, or, for f32, the
// FMA kernels.
std::string flash_attention_kernels_here(bool f32, int64_t head_dim, int64_t value_dim);
// The workspace flash_attention_backward uses on the current device, in floats: as
// flash_attention_backward_workspace, less the atomic dQ accumulator where the wgmma kernels run and recompute
// dQ (not wgmma_backward_adds_dq: they read only D).
template <class T>
int64_t flash_attention_backward_workspace_here(const AttentionParams<T>& p) {
  if constexpr (!std::is_same_v<T, float>) {
    if (p.head_dim <= kFlashMaxHeadDim && p.value_dim <= kFlashMaxHeadDim &&
        wgmma_backward_runs(p.head_dim, p.value_dim) && !wgmma_backward_adds_dq(p))
      return p.batch * p.q_heads * p.q_len;
  }
  return flash_attention_backward_workspace(p);
}
}  // namespace cuda
#endif

}  // namespace alpha::kernels
