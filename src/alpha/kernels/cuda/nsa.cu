// Native Sparse Attention on CUDA: the fused twin of the CPU reference (kernels/nsa_reference.h, whose
// conventions and argument structs it shares), for f32, bf16 and f16 storage computing in f32 (softmax
// statistics, selection scores and every sum in f32). No [T, T] matrix is ever materialised: scores,
// probabilities and dS live one tile of keys at a time in registers or shared memory.
//
// Two forwards. bf16/f16 with G <= 16 and head dims the mma tiles take run on the tensor cores (namespace tc,
// below: the compressor and the compressed and selected branches on mma.sync, the window branch as flash
// attention); so does the backward there (tc::query_grads_kernel and tc::key_grads_kernel), its window branch through
// flash attention's backward. Everything else (f32, other shapes) runs the FMA kernels described here, which came first.
//
// FMA forward (three launches):
// 1. The compressor, K̃ = W_k·flatten(k block + pos_k) and likewise Ṽ: a tiled GEMM whose left operand is
//    gathered from the strided keys on the fly (blocks overlap when d < l; nothing is copied).
// 2. forward_kernel: one thread block per (b, kv head g, query token t) running all G query heads of the
//    group, so every K/V chunk it stages in shared memory serves the whole group (any G >= 1; up to 4 warps,
//    each running up to 4 heads at once so that a key read from shared memory serves 4 dot products). Per branch an
//    online softmax over 32-key chunks (lane = key); the compressed branch makes a second pass for its final
//    probabilities, summed over the group's heads (fixed order) and mapped onto the selection blocks; then the top-n by
//    the reference's rule (first block, the two local blocks, then n − 3 rounds of a block-wide argmax, ties to the
//    lower index); then the selected and window branches over the kept tokens; then the gated sum.
// FMA backward (the compressor's GEMMs plus three attention kernels, all deterministic: no atomics, every
// output element owned by one thread adding in a fixed order):
// 1. query_grads_kernel, per (b, g, t) as the forward: D_c = σ_c·dO·O_c (saved for 2 and 3), dgates, dq.
// 2. key_grads_kernel over the compressed keys: one block per (32 compressed keys, b, g) walks the queries
//    that see them (t >= i·d + l − 1) in chunks of 32 (token, head) rows: dK̃, dṼ into an f32 workspace.
// 3. The compressor's token gradients dX = dK̃·W (GEMM into a workspace [rows, l·D]).
// 4. The inverse of `selected`, once per step: per (b, g) and selection block j, the queries that kept j in
//    ascending t, as a CSR built without ordering atomics (csr_count_kernel: counts per chunk of queries;
//    csr_offsets_kernel: a scan; csr_fill_kernel: each chunk writes its queries where the scan says, in order).
// 5. key_grads_kernel over the tokens: one block per (32 tokens, b, g) runs the window branch's queries
//    ([j, j + w − 1]), then the selected branch's: the CSR lists of the selection blocks overlapping its tile,
//    block by block; then adds the compressor's token gradients of the blocks covering each token, and
//    writes dk, dv once.
// 6. dW = dK̃ᵀ·X (GEMM over all rows in order) and dpos = Wᵀ·Σ_rows dK̃.
// The selection is not differentiated (as the reference). Top-k ties: the scores are f32 sums in another
// order than the CPU's, so a near-tie can choose another block than the f64 reference (docs/NSA.md; the
// tests compare the choices and then feed the GPU's choice to the reference through given_selected).
#include <algorithm>
#include <cmath>
#include <string>

#include "alpha/core/error.h"
#include "alpha/kernels/cuda/common.cuh"
#include "alpha/kernels/nsa_reference.h"
#ifndef ALPHA_NSA_EMULATION  // bench/nsa_emulate.sh runs the FMA kernels only
#include <optional>
#include <type_traits>

#include "alpha/kernels/cuda/flash_attention_mma_backward.cuh"
#include "alpha/kernels/cuda/flash_attention_mma_forward.cuh"
#include "alpha/kernels/flash_attention.h"
#endif

namespace alpha::kernels::cuda {

namespace {

constexpr int kChunk = 32;         // keys per chunk: one per lane
constexpr int kRowChunk = 32;      // (token, head) rows per chunk in key_grads_kernel
constexpr int kMaxQueryWarps = 4;  // warps of forward_kernel and query_grads_kernel
constexpr int kHeadBlock = 4;      // query heads a warp of those runs at once, sharing each key it reads
constexpr int kKeyThreads = 256;   // threads of key_grads_kernel: 8 warps
constexpr int kKeyWarps = kKeyThreads / 32;
constexpr int kGemmTile = 64, kGemmStep = 16, kGemmThreads = 256;

template <class T>
__device__ float ld(const T* p, int64_t i) {
  return Elem<T>::load(bits(p)[i]);
}
template <class T>
__device__ void st(T* p, int64_t i, float v) {
  bits(p)[i] = Elem<T>::store(v);
}
__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ inline int64_t offset(const AttentionStrides& s, int64_t b, int64_t t, int64_t h) {
  return b * s.batch + t * s.time + h * s.head;
}

// The compressed blocks that hold token j, [first, last] (empty when first > last): the blocks i < `blocks`
// with i·stride <= j < i·stride + len.
struct BlockSpan {
  int64_t first, last;
};
__device__ inline BlockSpan blocks_covering(int64_t j, int64_t len, int64_t stride, int64_t blocks) {
  const int64_t first = j + 1 - len <= 0 ? 0 : (j + 1 - len + stride - 1) / stride;
  const int64_t last = j / stride < blocks - 1 ? j / stride : blocks - 1;
  return {first, last};
}

// Bits [lo − base, hi − base] set (lanes of a 32-key tile starting at base); 0 when lo > hi.
__device__ inline unsigned lane_bits(int64_t lo, int64_t hi, int64_t base) {
  if (lo > hi) return 0u;
  const int first = int(lo - base), count = int(hi - lo + 1);
  const unsigned ones = count >= 32 ? 0xffffffffu : ((1u << count) - 1u);
  return ones << first;
}

// ---------------------------------------------------------------------------------------------------------
// The compressor's GEMMs: C[m, n] = Σ_k A(m, k)·B(n, k), tiles of 64×64, k in steps of 16, each thread 4×4
// outputs, k ascending (so the bits do not depend on the launch). Operands are read through small loader
// structs, so the compressor's input is gathered from the strided keys rather than copied.

template <class T>
struct RowMajor {  // (m, k) -> p[m·ld + k]
  const T* p;
  int64_t ld;
  __device__ float operator()(int64_t m, int64_t k) const { return cuda::ld(p, m * ld + k); }
};
template <class T>
struct ColMajor {  // (m, k) -> p[k·ld + m]
  const T* p;
  int64_t ld;
  __device__ float operator()(int64_t m, int64_t k) const { return cuda::ld(p, k * ld + m); }
};
struct Ones {
  __device__ float operator()(int64_t, int64_t) const { return 1.0f; }
};

// X(r, f) = src[b, i·d + j, g, e] + pos[j, e] with r = (b·Nc + i)·Hkv + g and f = j·F + e: the compressor's
// flattened input block (B, Nc, Hkv) × (l·F).
template <class T>
struct CompressorInput {
  const T* src;
  AttentionStrides s;
  const T* pos;
  int64_t features, blocks, heads, stride;
  __device__ float operator()(int64_t r, int64_t f) const {
    const int64_t g = r % heads, i = r / heads % blocks, b = r / (heads * blocks);
    const int64_t j = f / features, e = f % features;
    return ld(src, offset(s, b, i * stride + j, g) + e) + ld(pos, f);
  }
};
template <class A>
struct Transposed {  // (m, k) -> a(k, m)
  A a;
  __device__ float operator()(int64_t m, int64_t k) const { return a(k, m); }
};

template <class T>
struct Store {  // C[m·ld + n] = v, rounded to T
  T* p;
  int64_t ld;
  __device__ void operator()(int64_t m, int64_t n, float v) const { st(p, m * ld + n, v); }
};

template <class LoadA, class LoadB, class Out>
__global__ void __launch_bounds__(kGemmThreads)
    gemm_kernel(int64_t M, int64_t N, int64_t K, LoadA a, LoadB b, Out out) {
  __shared__ float as[kGemmStep][kGemmTile + 1], bs[kGemmStep][kGemmTile + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t m0 = int64_t(blockIdx.y) * kGemmTile, n0 = int64_t(blockIdx.x) * kGemmTile;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kGemmStep) {
    for (int idx = threadIdx.x; idx < kGemmStep * kGemmTile; idx += kGemmThreads) {
      const int kk = idx % kGemmStep, mm = idx / kGemmStep;
      const int64_t k = k0 + kk;
      as[kk][mm] = (m0 + mm < M && k < K) ? a(m0 + mm, k) : 0.0f;
      bs[kk][mm] = (n0 + mm < N && k < K) ? b(n0 + mm, k) : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < kGemmStep; ++kk) {
      float ar[4], br[4];
      for (int i = 0; i < 4; ++i) ar[i] = as[kk][ty + 16 * i];
      for (int j = 0; j < 4; ++j) br[j] = bs[kk][tx + 16 * j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int64_t m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
      if (m < M && n < N) out(m, n, acc[i][j]);
    }
}

template <class LoadA, class LoadB, class Out>
void gemm(int64_t M, int64_t N, int64_t K, LoadA a, LoadB b, Out out, cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  const int64_t grid_n = (N + kGemmTile - 1) / kGemmTile, grid_m = (M + kGemmTile - 1) / kGemmTile;
  if (grid_m > 65535) raise<ShapeError>("nsa", "compressor rows", "at most 65535·64", std::to_string(M));
  const dim3 grid{unsigned(grid_n), unsigned(grid_m)};
  ALPHA_CUDA_LAUNCH((gemm_kernel<LoadA, LoadB, Out>), grid, kGemmThreads, stream, M, N, K, a, b, out);
}


template <class T>
CompressorInput<T> compressor_input(const NsaParams<T>& p, const T* src, const AttentionStrides& s, const T* pos,
                                    int64_t features) {
  return {src, s, pos, features, nsa_compressed_blocks(p), p.kv_heads, p.block_stride};
}

// ---------------------------------------------------------------------------------------------------------
// The keys of one branch for query token t, as positions [0, count) mapped to key rows: the compressed blocks
// [0, count(t)), the window [t − w + 1, t], or the kept selection blocks' tokens (slot·l' + offset, those
// after t invalid).
struct BranchKeys {
  int kind;         // NsaBranch
  int64_t count;    // positions
  int64_t first;    // window: the first key
  const int* kept;  // selected: the kept blocks (shared memory), ascending
  int64_t select_len, t;
  __device__ int64_t key(int64_t pos) const {  // −1: not a key
    if (pos >= count) return -1;
    if (kind == kNsaCompressed) return pos;
    if (kind == kNsaWindow) return first + pos;
    const int64_t key = int64_t(kept[pos / select_len]) * select_len + pos % select_len;
    return key <= t ? key : -1;
  }
};

template <class T>
__device__ BranchKeys branch_keys(const NsaParams<T>& p, int kind, int64_t t, const int* kept, int kept_count) {
  BranchKeys k{kind, 0, 0, kept, p.select_len, t};
  if (kind == kNsaCompressed) k.count = nsa_compressed_blocks(t + 1, p.block_len, p.block_stride);
  if (kind == kNsaWindow) {
    k.first = t - p.window + 1 > 0 ? t - p.window + 1 : 0;
    k.count = t + 1 - k.first;
  }
  if (kind == kNsaSelected) k.count = int64_t(kept_count) * p.select_len;
  return k;
}

// Where a branch's keys and values live: the tokens (strided) or the compressed blocks (contiguous).
template <class T>
struct KeyValues {
  const T* k;
  AttentionStrides ks;
  const T* v;
  AttentionStrides vs;
};
template <class T>
__host__ __device__ KeyValues<T> compressed_kv(const NsaParams<T>& p, const T* ck, const T* cv) {
  const int64_t blocks = nsa_compressed_blocks(p);
  return {ck,
          {blocks * p.kv_heads * p.head_dim, p.kv_heads * p.head_dim, p.head_dim},
          cv,
          {blocks * p.kv_heads * p.value_dim, p.kv_heads * p.value_dim, p.value_dim}};
}

// Stages the keys (and, with v, the values) of positions [p0, p0 + 32) into shared memory as f32 rows of
// stride D + 1 and Dv + 1 (conflict-free when lane j reads row j); missing keys read as 0.
template <class T>
__device__ void stage_chunk(const NsaParams<T>& p, const KeyValues<T>& kv, const BranchKeys& keys, int64_t b, int64_t g,
                            int64_t p0, float* ks, float* vs) {
  const int64_t D = p.head_dim, Dv = p.value_dim;
  for (int64_t idx = threadIdx.x; idx < kChunk * D; idx += blockDim.x) {
    const int64_t slot = idx / D, e = idx % D, key = keys.key(p0 + slot);
    ks[slot * (D + 1) + e] = key >= 0 ? ld(kv.k, offset(kv.ks, b, key, g) + e) : 0.0f;
  }
  if (vs == nullptr) return;
  for (int64_t idx = threadIdx.x; idx < kChunk * Dv; idx += blockDim.x) {
    const int64_t slot = idx / Dv, e = idx % Dv, key = keys.key(p0 + slot);
    vs[slot * (Dv + 1) + e] = key >= 0 ? ld(kv.v, offset(kv.vs, b, key, g) + e) : 0.0f;
  }
}

__device__ inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t e = 0; e < n; ++e) s = fmaf(a[e], b[e], s);
  return s;
}

// Shared memory of forward_kernel and query_grads_kernel, in floats, carved in this order.
struct QueryLayout {
  int64_t q, o, k, v, acc, gated, stats, lanes, scores, pchunk, kept, total;
};
template <class T>
__host__ __device__ QueryLayout query_layout(const NsaParams<T>& p, bool backward) {
  const int64_t G = p.q_heads / p.kv_heads, D = p.head_dim, Dv = p.value_dim;
  const int64_t select_blocks = (p.seq_len + p.select_len - 1) / p.select_len;
  QueryLayout s{};
  int64_t at = 0;
  s.q = at, at += G * D;                                       // the group's query rows
  s.o = at, at += backward ? G * Dv : 0;                       // backward: the dO rows
  s.k = at, at += kChunk * (D + 1);                            // the chunk's keys
  s.v = at, at += kChunk * (Dv + 1);                           // and values
  s.acc = at, at += G * (backward ? D : Dv);                   // forward: the output accumulators; backward: dq
  s.gated = at, at += backward ? 0 : G * Dv;                   // forward: the gated sum
  s.stats = at, at += 6 * G;                                   // per head: m, l, then (backward) σ, D, unused ×2
  s.lanes = at, at += kMaxQueryWarps * kHeadBlock * kChunk;    // per warp and head: the chunk's P or dS
  s.scores = at, at += backward ? 0 : select_blocks + 1;       // forward: the selection scores
  s.pchunk = at, at += backward ? 0 : G * kChunk + kChunk;     // and the chunk's probabilities
  s.kept = at, at += p.select_count + 2 * kMaxQueryWarps + 2;  // kept blocks (ints), argmax scratch
  s.total = at;
  return s;
}

// The heads a warp runs at once: h0, h0 + warps, ... (up to kHeadBlock of them below G); count of them.
struct HeadBlock {
  int64_t h[kHeadBlock];
  int count;
};
__device__ inline HeadBlock head_block(int64_t h0, int warps, int64_t G) {
  HeadBlock hb{};
  hb.count = 0;
#pragma unroll
  for (int r = 0; r < kHeadBlock; ++r) {
    const int64_t h = h0 + int64_t(warps) * r;
    hb.h[r] = h < G ? h : h0;
    hb.count += h < G;
  }
  return hb;
}

// s[r] = q_{h_r}·row for the block's heads (row: this lane's key, in shared memory), k ascending.
__device__ inline void dots(const float* qs, int64_t D, const HeadBlock& hb, const float* row, float (&s)[kHeadBlock]) {
#pragma unroll
  for (int r = 0; r < kHeadBlock; ++r) s[r] = 0.0f;
  for (int64_t e = 0; e < D; ++e) {
    const float x = row[e];
#pragma unroll
    for (int r = 0; r < kHeadBlock; ++r)
      if (r < hb.count) s[r] = fmaf(qs[hb.h[r] * D + e], x, s[r]);
  }
}

// out[h_r, e] = scale[r]·out[h_r, e] + Σ_j pl[r, j]·rows[j, e] for the block's live heads and this lane's features e
// (rows: the chunk's 32 staged rows of `width` features, stride width + 1), j ascending: each row element read once
// serves every head.
__device__ inline void accumulate_chunk(const float* pl, const float* rows, int64_t width, const HeadBlock& hb,
                                        const bool (&live)[kHeadBlock], const float (&scale)[kHeadBlock], float* out) {
  for (int64_t e = threadIdx.x % 32; e < width; e += 32) {
    float a[kHeadBlock];
#pragma unroll
    for (int r = 0; r < kHeadBlock; ++r) a[r] = live[r] ? out[hb.h[r] * width + e] * scale[r] : 0.0f;
    for (int j = 0; j < kChunk; ++j) {
      const float x = rows[j * (width + 1) + e];
#pragma unroll
      for (int r = 0; r < kHeadBlock; ++r)
        if (live[r]) a[r] = fmaf(pl[r * kChunk + j], x, a[r]);
    }
#pragma unroll
    for (int r = 0; r < kHeadBlock; ++r)
      if (live[r]) out[hb.h[r] * width + e] = a[r];
  }
}

// Online softmax attention of the group's heads (rows of qs) over one branch's keys, into acc (G, Dv), m and
// l. Warp w runs the heads h ≡ w (mod warps), kHeadBlock at a time; lane j holds key p0 + j of each chunk.
template <class T>
__device__ void attend(const NsaParams<T>& p, const KeyValues<T>& kv, const BranchKeys& keys, int64_t b, int64_t g,
                       const float* qs, float* ks, float* vs, float* acc, float* m, float* l, float* lanes) {
  const int64_t G = p.q_heads / p.kv_heads, D = p.head_dim, Dv = p.value_dim;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float* pl = lanes + warp * kHeadBlock * kChunk;  // (kHeadBlock, 32)
  __syncthreads();                                 // the previous branch's results are read
  for (int64_t h = warp; h < G; h += warps) {
    for (int64_t e = lane; e < Dv; e += 32) acc[h * Dv + e] = 0.0f;
    if (lane == 0) m[h] = -INFINITY, l[h] = 0.0f;
  }
  for (int64_t p0 = 0; p0 < keys.count; p0 += kChunk) {
    __syncthreads();  // the previous chunk is consumed
    stage_chunk(p, kv, keys, b, g, p0, ks, vs);
    __syncthreads();
    const bool valid = keys.key(p0 + lane) >= 0;
    for (int64_t h0 = warp; h0 < G; h0 += int64_t(warps) * kHeadBlock) {
      const HeadBlock hb = head_block(h0, warps, G);
      float s[kHeadBlock], alpha[kHeadBlock], m_new[kHeadBlock], sum[kHeadBlock];
      bool live[kHeadBlock];
      dots(qs, D, hb, ks + lane * (D + 1), s);
#pragma unroll
      for (int r = 0; r < kHeadBlock; ++r) {
        live[r] = false, alpha[r] = 1.0f, m_new[r] = -INFINITY, sum[r] = 0.0f;
        pl[r * kChunk + lane] = 0.0f;
        if (r >= hb.count) continue;
        const float sr = valid ? s[r] * float(p.scale) : -INFINITY;
        const float m_old = m[hb.h[r]];
        m_new[r] = fmaxf(m_old, warp_max(sr));
        if (m_new[r] == -INFINITY) continue;  // no key yet (uniform across the warp)
        live[r] = true;
        alpha[r] = expf(m_old - m_new[r]);
        const float prob = valid ? expf(sr - m_new[r]) : 0.0f;
        sum[r] = warp_sum(prob);
        pl[r * kChunk + lane] = prob;
      }
      __syncwarp();
      accumulate_chunk(pl, vs, Dv, hb, live, alpha, acc);
      __syncwarp();
      if (lane == 0)
#pragma unroll
        for (int r = 0; r < kHeadBlock; ++r)
          if (live[r]) m[hb.h[r]] = m_new[r], l[hb.h[r]] = l[hb.h[r]] * alpha[r] + sum[r];
      __syncwarp();
    }
  }
  __syncthreads();
}

// The better of two (score, block) candidates: the higher score, ties to the lower block.
__device__ inline bool better(float sa, int a, float sb, int b) { return sa > sb || (sa == sb && a < b); }

// The threads select_blocks runs on: the whole block (forward_kernel) or one warp (the tensor-core forward, a
// query token per warp).
struct BlockThreads {
  static constexpr bool kOneWarp = false;
  __device__ int rank() const { return int(threadIdx.x); }
  __device__ int size() const { return int(blockDim.x); }
  __device__ void sync() const { __syncthreads(); }
};
struct WarpThreads {
  static constexpr bool kOneWarp = true;
  __device__ int rank() const { return int(threadIdx.x % 32); }
  __device__ int size() const { return 32; }
  __device__ void sync() const { __syncwarp(); }
};

// The kept blocks of query t from scores[0, current] (the reference's select_blocks): all when at most n, else
// the first, current − 1 and current, then n − 3 rounds of an argmax over the free blocks [1, current − 2] (a
// chosen block's score becomes −1, below every probability sum). Writes kept[0, count) ascending; returns count.
// scratch (2 ints per warp) is for the block-wide argmax only.
template <class Threads>
__device__ int select_blocks(Threads threads, float* scores, int64_t current, int64_t n, int* kept, int* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (current + 1 <= n) {
    for (int64_t j = threads.rank(); j <= current; j += threads.size()) kept[j] = int(j);
    threads.sync();
    return int(current + 1);
  }
  for (int64_t round = 0; round < n - 3; ++round) {
    float best_s = -2.0f;
    int best = 1 << 30;
    for (int64_t j = 1 + threads.rank(); j <= current - 2; j += threads.size())
      if (better(scores[j], int(j), best_s, best)) best_s = scores[j], best = int(j);
    for (int o = 16; o > 0; o /= 2) {
      const float os = __shfl_xor_sync(kFullWarp, best_s, o);
      const int ob = __shfl_xor_sync(kFullWarp, best, o);
      if (better(os, ob, best_s, best)) best_s = os, best = ob;
    }
    if constexpr (Threads::kOneWarp) {
      __syncwarp();  // every lane has read the scores before one is rewritten
      if (lane == 0) kept[round] = best, scores[best] = -1.0f;
    } else {
      if (lane == 0) scratch[2 * warp] = __float_as_int(best_s), scratch[2 * warp + 1] = best;
      __syncthreads();
      if (threadIdx.x == 0) {
        float s = __int_as_float(scratch[0]);
        int w_best = scratch[1];
        for (int w = 1; w < warps; ++w)
          if (better(__int_as_float(scratch[2 * w]), scratch[2 * w + 1], s, w_best))
            s = __int_as_float(scratch[2 * w]), w_best = scratch[2 * w + 1];
        kept[round] = w_best;
        scores[w_best] = -1.0f;
      }
    }
    threads.sync();
  }
  if (threads.rank() == 0) {
    kept[n - 3] = 0, kept[n - 2] = int(current - 1), kept[n - 1] = int(current);
    for (int64_t i = 1; i < n; ++i)  // insertion sort: n is small
      for (int64_t j = i; j > 0 && kept[j - 1] > kept[j]; --j) {
        const int x = kept[j];
        kept[j] = kept[j - 1], kept[j - 1] = x;
      }
  }
  threads.sync();
  return int(n);
}

// scores[j] += Σ summed[i − first] over the compressed blocks i in [first, last] that overlap selection block j, for
// every j they overlap (i ascending: a fixed order), the j spread over `threads`. Block i covers [i·d, i·d + l) and j
// covers [j·l', (j + 1)·l'), so the i overlapping j are those with j·l' − l < i·d < (j + 1)·l': a range worked out
// once per j (an int64 division is a subroutine call; testing every i against every j cost more than the products).
template <class T, class Threads>
__device__ void add_block_scores(const NsaParams<T>& p, const float* summed, int64_t first, int64_t last, float* scores,
                                 Threads threads) {
  const int64_t j_lo = first * p.block_stride / p.select_len;
  const int64_t j_hi = (last * p.block_stride + p.block_len - 1) / p.select_len;
  for (int64_t j = j_lo + threads.rank(); j <= j_hi; j += threads.size()) {
    const int64_t after = j * p.select_len - p.block_len;  // i·d must exceed this
    const int64_t i_lo = after < 0 ? 0 : after / p.block_stride + 1;
    const int64_t i_hi = ((j + 1) * p.select_len - 1) / p.block_stride;
    float s = 0.0f;
    for (int64_t i = i_lo > first ? i_lo : first; i <= (i_hi < last ? i_hi : last); ++i) s += summed[i - first];
    scores[j] += s;
  }
}

// The compressed branch's final probabilities (m, l known) summed over the group's heads, then over the
// compressed blocks overlapping each selection block, added into scores (fixed orders throughout).
template <class T>
__device__ void selection_scores(const NsaParams<T>& p, const KeyValues<T>& kv, const BranchKeys& keys, int64_t b,
                                 int64_t g, const float* qs, float* ks, const float* m, const float* l, float* pchunk,
                                 float* scores) {
  const int64_t G = p.q_heads / p.kv_heads, D = p.head_dim;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float* summed = pchunk + G * kChunk;
  for (int64_t p0 = 0; p0 < keys.count; p0 += kChunk) {
    __syncthreads();
    stage_chunk(p, kv, keys, b, g, p0, ks, nullptr);
    __syncthreads();
    const bool valid = p0 + lane < keys.count;
    for (int64_t h0 = warp; h0 < G; h0 += int64_t(warps) * kHeadBlock) {
      const HeadBlock hb = head_block(h0, warps, G);
      float s[kHeadBlock];
      dots(qs, D, hb, ks + lane * (D + 1), s);
      for (int r = 0; r < hb.count; ++r) {
        const int64_t h = hb.h[r];
        pchunk[h * kChunk + lane] = valid ? expf(s[r] * float(p.scale) - m[h]) / l[h] : 0.0f;
      }
    }
    __syncthreads();
    if (threadIdx.x < kChunk) {
      float s = 0.0f;
      for (int64_t h = 0; h < G; ++h) s += pchunk[h * kChunk + threadIdx.x];
      summed[threadIdx.x] = s;
    }
    __syncthreads();
    add_block_scores(p, summed, p0, (p0 + kChunk < keys.count ? p0 + kChunk : keys.count) - 1, scores, BlockThreads{});
  }
  __syncthreads();
}

template <class T>
__device__ int64_t stat_index(const NsaParams<T>& p, int64_t c, int64_t b, int64_t h, int64_t t) {
  return ((c * p.batch + b) * p.q_heads + h) * p.seq_len + t;
}

// The (b, g, t) of this thread block of forward_kernel or query_grads_kernel: t fastest, so that blocks running side
// by side share keys in L2.
struct QueryBlock {
  int64_t b, g, t;
};
template <class T>
__device__ QueryBlock query_block(const NsaParams<T>& p) {
  return {blockIdx.x / (p.seq_len * p.kv_heads), blockIdx.x / p.seq_len % p.kv_heads, blockIdx.x % p.seq_len};
}

// The group's query rows of token t, (G, D), as f32.
template <class T>
__device__ void stage_queries(const NsaParams<T>& p, const T* q, int64_t b, int64_t g, int64_t t, float* qs) {
  const int64_t G = p.q_heads / p.kv_heads, D = p.head_dim;
  for (int64_t idx = threadIdx.x; idx < G * D; idx += blockDim.x)
    qs[idx] = ld(q, offset(p.q_strides, b, t, g * G + idx / D) + idx % D);
}

template <class T>
__global__ void forward_kernel(NsaForwardArgs<T> args) {
  extern __shared__ float smem[];
  const NsaParams<T>& p = args.params;
  const int64_t G = p.q_heads / p.kv_heads, D = p.head_dim, Dv = p.value_dim;
  const auto [b, g, t] = query_block(p);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const QueryLayout L = query_layout(p, false);
  float *qs = smem + L.q, *ks = smem + L.k, *vs = smem + L.v, *acc = smem + L.acc, *gated = smem + L.gated;
  float *m = smem + L.stats, *l = m + G, *scores = smem + L.scores;
  int* kept = reinterpret_cast<int*>(smem + L.kept);
  int* scratch = kept + p.select_count;
  stage_queries(p, args.in.q, b, g, t, qs);
  for (int64_t idx = threadIdx.x; idx < G * Dv; idx += blockDim.x) gated[idx] = 0.0f;
  const int64_t current = t / p.select_len;
  for (int64_t j = threadIdx.x; j <= current; j += blockDim.x) scores[j] = 0.0f;
  const KeyValues<T> tokens{args.in.k, p.k_strides, args.in.v, p.v_strides};
  const KeyValues<T> compressed = compressed_kv(p, args.compressed_k, args.compressed_v);
  int kept_count = 0;
  for (int c = 0; c < kNsaBranches; ++c) {
    if (c == kNsaSelected) {  // the compressed probabilities choose the blocks
      const int32_t* given =
          args.given_selected ? args.given_selected + ((b * p.seq_len + t) * p.kv_heads + g) * p.select_count : nullptr;
      if (given) {
        __syncthreads();
        kept_count = 0;
        while (kept_count < p.select_count && given[kept_count] >= 0) ++kept_count;
        for (int64_t s = threadIdx.x; s < kept_count; s += blockDim.x) kept[s] = given[s];
        __syncthreads();
      } else {
        kept_count = select_blocks(BlockThreads{}, scores, current, p.select_count, kept, scratch);
      }
      int32_t* out = args.selected + ((b * p.seq_len + t) * p.kv_heads + g) * p.select_count;
      for (int64_t s = threadIdx.x; s < p.select_count; s += blockDim.x) out[s] = s < kept_count ? kept[s] : -1;
    }
    const BranchKeys keys = branch_keys(p, c, t, kept, kept_count);
    const KeyValues<T>& kv = c == kNsaCompressed ? compressed : tokens;
    attend(p, kv, keys, b, g, qs, ks, vs, acc, m, l, smem + L.lanes);
    // The scores matter only when there are more candidates than kept blocks.
    if (c == kNsaCompressed && keys.count > 0 && current + 1 > p.select_count && args.given_selected == nullptr)
      selection_scores(p, kv, keys, b, g, qs, ks, m, l, smem + L.pchunk, scores);
    for (int64_t h = warp; h < G; h += warps) {
      const int64_t head = g * G + h, row = (b * p.seq_len + t) * p.q_heads + head;
      const float gate = sigmoid(ld(args.in.gates, row * kNsaBranches + c));
      for (int64_t e = lane; e < Dv; e += 32) {
        const float o = l[h] > 0.0f ? acc[h * Dv + e] / l[h] : 0.0f;
        st(args.branch_out, ((c * p.batch + b) * p.seq_len + t) * p.q_heads * Dv + head * Dv + e, o);
        gated[h * Dv + e] += gate * o;
      }
      if (lane == 0) {
        args.row_max[stat_index(p, c, b, head, t)] = m[h];
        args.row_sum[stat_index(p, c, b, head, t)] = l[h];
      }
    }
  }
  __syncthreads();
  for (int64_t idx = threadIdx.x; idx < G * Dv; idx += blockDim.x)
    st(args.out, ((b * p.seq_len + t) * p.q_heads + g * G) * Dv + idx, gated[idx]);
}

// The window branch's gradients when flash attention's backward computed them (dq [B, T, Hq, D], dk and dv
// [B, T, Hkv, D/Dv]): the attention kernels below then leave that branch's keys out and add these. nullptrs: they
// compute it themselves.
template <class T>
struct WindowGrads {
  const T* dq = nullptr;
  const T* dk = nullptr;
  const T* dv = nullptr;
};

// ---------------------------------------------------------------------------------------------------------
// Backward, query side: per (b, g, t) as the forward. For each branch c and head h: dgate_c, D_c = σ_c·dO·O_c
// (written to delta for the key side), then dq += Σ_keys dS·k with dS = P∘(σ_c·dO·v − D_c)·scale.
template <class T>
__global__ void query_grads_kernel(NsaBackwardArgs<T> args, float* delta, WindowGrads<T> window) {
  extern __shared__ float smem[];
  const NsaParams<T>& p = args.params;
  const int64_t G = p.q_heads / p.kv_heads, D = p.head_dim, Dv = p.value_dim;
  const auto [b, g, t] = query_block(p);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const QueryLayout L = query_layout(p, true);
  float *qs = smem + L.q, *dos = smem + L.o, *ks = smem + L.k, *vs = smem + L.v, *dq = smem + L.acc;
  float *m = smem + L.stats, *l = m + G, *sig = l + G, *dd = sig + G;
  float* pl = smem + L.lanes + warp * kHeadBlock * kChunk;  // (kHeadBlock, 32)
  int* kept = reinterpret_cast<int*>(smem + L.kept);
  stage_queries(p, args.in.q, b, g, t, qs);
  for (int64_t idx = threadIdx.x; idx < G * D; idx += blockDim.x) dq[idx] = 0.0f;
  for (int64_t idx = threadIdx.x; idx < G * Dv; idx += blockDim.x)
    dos[idx] = ld(args.dout, ((b * p.seq_len + t) * p.q_heads + g * G) * Dv + idx);
  const int32_t* selected = args.selected + ((b * p.seq_len + t) * p.kv_heads + g) * p.select_count;
  int kept_count = 0;
  while (kept_count < p.select_count && selected[kept_count] >= 0) ++kept_count;
  for (int64_t s = threadIdx.x; s < kept_count; s += blockDim.x) kept[s] = selected[s];
  const KeyValues<T> tokens{args.in.k, p.k_strides, args.in.v, p.v_strides};
  const KeyValues<T> compressed = compressed_kv(p, args.compressed_k, args.compressed_v);
  for (int c = 0; c < kNsaBranches; ++c) {
    __syncthreads();
    for (int64_t h = warp; h < G; h += warps) {
      const int64_t head = g * G + h, row = (b * p.seq_len + t) * p.q_heads + head;
      const T* branch = args.branch_out + ((c * p.batch + b) * p.seq_len + t) * p.q_heads * Dv + head * Dv;
      float s = 0.0f;
      for (int64_t e = lane; e < Dv; e += 32) s = fmaf(dos[h * Dv + e], ld(branch, e), s);
      s = warp_sum(s);
      const float gate = sigmoid(ld(args.in.gates, row * kNsaBranches + c));
      if (lane == 0) {
        st(args.dgates, row * kNsaBranches + c, s * gate * (1.0f - gate));
        sig[h] = gate, dd[h] = gate * s;
        m[h] = args.row_max[stat_index(p, c, b, head, t)];
        l[h] = args.row_sum[stat_index(p, c, b, head, t)];
        delta[stat_index(p, c, b, head, t)] = gate * s;
      }
    }
    __syncthreads();
    if (c == kNsaWindow && window.dq != nullptr) continue;  // added at the end
    const BranchKeys keys = branch_keys(p, c, t, kept, kept_count);
    const KeyValues<T>& kv = c == kNsaCompressed ? compressed : tokens;
    for (int64_t p0 = 0; p0 < keys.count; p0 += kChunk) {
      __syncthreads();
      stage_chunk(p, kv, keys, b, g, p0, ks, vs);
      __syncthreads();
      const bool valid = keys.key(p0 + lane) >= 0;
      for (int64_t h0 = warp; h0 < G; h0 += int64_t(warps) * kHeadBlock) {
        HeadBlock hb = head_block(h0, warps, G);
        bool live[kHeadBlock];  // a row that sees no key has no gradient
        for (int r = 0; r < kHeadBlock; ++r) live[r] = r < hb.count && l[hb.h[r]] != 0.0f;
        float sq[kHeadBlock], sv[kHeadBlock];
        dots(qs, D, hb, ks + lane * (D + 1), sq);
        dots(dos, Dv, hb, vs + lane * (Dv + 1), sv);
#pragma unroll
        for (int r = 0; r < kHeadBlock; ++r) {
          const int64_t h = hb.h[r];
          float ds = 0.0f;
          if (valid && live[r]) {
            const float prob = expf(sq[r] * float(p.scale) - m[h]) / l[h];
            const float dprob = sig[h] * sv[r];
            ds = prob * (dprob - dd[h]) * float(p.scale);
          }
          pl[r * kChunk + lane] = ds;
        }
        __syncwarp();
        float ones[kHeadBlock];
#pragma unroll
        for (int r = 0; r < kHeadBlock; ++r) ones[r] = 1.0f;
        accumulate_chunk(pl, ks, D, hb, live, ones, dq);
        __syncwarp();
      }
    }
  }
  __syncthreads();
  const int64_t first = ((b * p.seq_len + t) * p.q_heads + g * G) * D;
  for (int64_t idx = threadIdx.x; idx < G * D; idx += blockDim.x)
    st(args.dq, first + idx, window.dq != nullptr ? dq[idx] + ld(window.dq, first + idx) : dq[idx]);
}

// ---------------------------------------------------------------------------------------------------------
// Backward, key side: one block per (32 keys, b, g). Thread (lane, warp) owns key lane's features
// e = warp + 8·u of dk and dv (u < kMaxDim/8) and adds every term in a fixed order: pass by pass, query
// token ascending (the selected pass: selection block ascending, then query token), head ascending.
struct KeyLayout {
  int64_t k, v, q, o, p, ds, rows, list, total;
};
template <class T>
__host__ __device__ KeyLayout key_layout(const NsaParams<T>& p) {
  const int64_t D = p.head_dim, Dv = p.value_dim;
  KeyLayout s{};
  int64_t at = 0;
  s.k = at, at += kChunk * (D + 1);
  s.v = at, at += kChunk * (Dv + 1);
  s.q = at, at += kRowChunk * D;
  s.o = at, at += kRowChunk * Dv;
  s.p = at, at += kRowChunk * (kChunk + 1);
  s.ds = at, at += kRowChunk * (kChunk + 1);
  s.rows = at, at += 7 * kRowChunk;                    // per row: t, head, mask (ints), m, l, D, σ
  s.list = at, at += 2 * kKeyThreads + kKeyWarps + 1;  // compacted (t, mask), warp counts
  s.total = at;
  return s;
}

// Which keys of the tile [key0, key0 + nk) query t sees in pass c, as lane bits.
template <class T>
__device__ unsigned visible_mask(const NsaParams<T>& p, int c, int64_t t, int64_t key0, int64_t nk) {
  const int64_t last = key0 + nk - 1;
  if (c == kNsaCompressed) {
    const int64_t hi = nsa_compressed_blocks(t + 1, p.block_len, p.block_stride) - 1;
    return lane_bits(key0, hi < last ? hi : last, key0);
  }
  if (c == kNsaWindow) {
    const int64_t lo = t - p.window + 1 > key0 ? t - p.window + 1 : key0;
    return lane_bits(lo, t < last ? t : last, key0);
  }
  return 0u;  // selected: from the selection CSR
}
// ---------------------------------------------------------------------------------------------------------
// The selected branch's inverse (step 4): per (b, g), `offsets` [NB + 1] and `queries` [T·n] list, for each
// selection block j, the queries t that kept j, ascending. Three launches over chunks of kCsrChunk queries, so
// that no list's order depends on scheduling: count each chunk's entries per block, turn the counts into each
// chunk's first position in each list (a scan over chunks, then over blocks), and let each chunk write its
// queries there in t order.
constexpr int kCsrChunk = 256;

struct SelectionCsr {
  int32_t* chunk_first;  // [B·Hkv, chunks, NB]: the chunk's count per block, then its first position in the list
  int32_t* offsets;      // [B·Hkv, NB + 1]
  int32_t* queries;      // [B·Hkv, T·n]
};

template <class T>
__host__ __device__ int64_t selection_blocks(const NsaParams<T>& p) {
  return (p.seq_len + p.select_len - 1) / p.select_len;
}
template <class T>
__host__ __device__ int64_t csr_chunks(const NsaParams<T>& p) {
  return (p.seq_len + kCsrChunk - 1) / kCsrChunk;
}

// grid (chunks, B·Hkv), kCsrChunk threads, NB ints of shared memory: chunk_first[bg, chunk, j] = how many
// queries of the chunk kept j (shared atomics: the counts, not their order, come out of them).
template <class T>
__global__ void csr_count_kernel(NsaParams<T> p, const int32_t* selected, SelectionCsr csr) {
  extern __shared__ float smem[];
  int* counts = reinterpret_cast<int*>(smem);
  const int64_t NB = selection_blocks(p), bg = blockIdx.y, b = bg / p.kv_heads, g = bg % p.kv_heads;
  for (int64_t j = threadIdx.x; j < NB; j += blockDim.x) counts[j] = 0;
  __syncthreads();
  const int64_t t = int64_t(blockIdx.x) * kCsrChunk + threadIdx.x;
  if (t < p.seq_len) {
    const int32_t* kept = selected + ((b * p.seq_len + t) * p.kv_heads + g) * p.select_count;
    for (int64_t s = 0; s < p.select_count && kept[s] >= 0; ++s) atomicAdd(&counts[kept[s]], 1);
  }
  __syncthreads();
  int32_t* out = csr.chunk_first + (bg * csr_chunks(p) + blockIdx.x) * NB;
  for (int64_t j = threadIdx.x; j < NB; j += blockDim.x) out[j] = counts[j];
}

// grid (B·Hkv), 256 threads: per block j, the counts of the chunks become their running sums (each chunk's
// first position within j's list), and offsets the running sum over blocks of the lists' lengths.
template <class T>
__global__ void csr_offsets_kernel(NsaParams<T> p, SelectionCsr csr) {
  const int64_t NB = selection_blocks(p), chunks = csr_chunks(p), bg = blockIdx.x;
  int32_t* first = csr.chunk_first + bg * chunks * NB;
  int32_t* offsets = csr.offsets + bg * (NB + 1);
  for (int64_t j = threadIdx.x; j < NB; j += blockDim.x) {
    int32_t running = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int32_t count = first[c * NB + j];
      first[c * NB + j] = running;
      running += count;
    }
    offsets[j + 1] = running;  // the list's length, until the scan below
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    offsets[0] = 0;
    for (int64_t j = 0; j < NB; ++j) offsets[j + 1] += offsets[j];
  }
}

// grid (chunks, B·Hkv), kCsrChunk threads, NB + kCsrChunk·n ints of shared memory: the chunk's kept lists are
// staged, then one thread walks its queries in ascending t and appends each to the lists of the blocks it kept.
template <class T>
__global__ void csr_fill_kernel(NsaParams<T> p, const int32_t* selected, SelectionCsr csr) {
  extern __shared__ float smem[];
  const int64_t NB = selection_blocks(p), n = p.select_count, bg = blockIdx.y, b = bg / p.kv_heads,
                g = bg % p.kv_heads;
  int* next = reinterpret_cast<int*>(smem);
  int* kept = next + NB;
  const int64_t t0 = int64_t(blockIdx.x) * kCsrChunk, count = p.seq_len - t0 < kCsrChunk ? p.seq_len - t0 : kCsrChunk;
  const int32_t* first = csr.chunk_first + (bg * csr_chunks(p) + blockIdx.x) * NB;
  const int32_t* offsets = csr.offsets + bg * (NB + 1);
  for (int64_t j = threadIdx.x; j < NB; j += blockDim.x) next[j] = offsets[j] + first[j];
  for (int64_t i = threadIdx.x; i < count * n; i += blockDim.x)
    kept[i] = selected[((b * p.seq_len + t0 + i / n) * p.kv_heads + g) * n + i % n];
  __syncthreads();
  if (threadIdx.x != 0) return;
  int32_t* queries = csr.queries + bg * p.seq_len * n;
  for (int64_t i = 0; i < count; ++i)
    for (int64_t s = 0; s < n && kept[i * n + s] >= 0; ++s) queries[next[kept[i * n + s]]++] = int32_t(t0 + i);
}

template <class T, int kMaxDim>
__global__ void __launch_bounds__(kKeyThreads)
    key_grads_kernel(NsaBackwardArgs<T> args, const float* delta, bool compressed_keys, const float* dx_k,
                     const float* dx_v, float* dck, float* dcv, SelectionCsr csr, WindowGrads<T> window) {
  extern __shared__ float smem[];
  constexpr int kPer = kMaxDim / kKeyWarps;
  const NsaParams<T>& p = args.params;
  const int64_t G = p.q_heads / p.kv_heads, D = p.head_dim, Dv = p.value_dim, T_ = p.seq_len;
  const int64_t blocks = nsa_compressed_blocks(p);
  const int64_t b = blockIdx.y / p.kv_heads, g = blockIdx.y % p.kv_heads;
  const int64_t keys_total = compressed_keys ? blocks : T_;
  const int64_t key0 = int64_t(blockIdx.x) * kChunk, nk = keys_total - key0 < kChunk ? keys_total - key0 : kChunk;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const KeyLayout L = key_layout(p);
  float *ks = smem + L.k, *vs = smem + L.v, *qs = smem + L.q, *dos = smem + L.o, *ps = smem + L.p, *dss = smem + L.ds;
  int* row_t = reinterpret_cast<int*>(smem + L.rows);
  int* row_h = row_t + kRowChunk;
  unsigned* row_mask = reinterpret_cast<unsigned*>(row_h + kRowChunk);
  float *row_m = smem + L.rows + 3 * kRowChunk, *row_l = row_m + kRowChunk, *row_d = row_l + kRowChunk,
        *row_sig = row_d + kRowChunk;
  int* list_t = reinterpret_cast<int*>(smem + L.list);
  unsigned* list_mask = reinterpret_cast<unsigned*>(list_t + kKeyThreads);
  int* warp_count = list_t + 2 * kKeyThreads;

  const KeyValues<T> kv = compressed_keys ? compressed_kv(p, args.compressed_k, args.compressed_v)
                                          : KeyValues<T>{args.in.k, p.k_strides, args.in.v, p.v_strides};
  for (int64_t idx = threadIdx.x; idx < kChunk * D; idx += blockDim.x) {
    const int64_t j = idx / D, e = idx % D;
    ks[j * (D + 1) + e] = j < nk ? ld(kv.k, offset(kv.ks, b, key0 + j, g) + e) : 0.0f;
  }
  for (int64_t idx = threadIdx.x; idx < kChunk * Dv; idx += blockDim.x) {
    const int64_t j = idx / Dv, e = idx % Dv;
    vs[j * (Dv + 1) + e] = j < nk ? ld(kv.v, offset(kv.vs, b, key0 + j, g) + e) : 0.0f;
  }
  float dk[kPer], dv[kPer];
  for (int u = 0; u < kPer; ++u) dk[u] = dv[u] = 0.0f;

  // One window of up to kKeyThreads candidate queries of pass c, thread i's query t seeing the tile's keys
  // `mask` (0: none): those that see a key are compacted in thread order, and their rows add to dk and dv.
  // Every thread of the block calls it together.
  auto add_window = [&](int c, int64_t t, unsigned mask) {
    const unsigned ballot = __ballot_sync(kFullWarp, mask != 0u);
    __syncthreads();  // the previous list is consumed
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int base = 0, count = 0;
    for (int w = 0; w < kKeyWarps; ++w) {
      if (w < warp) base += warp_count[w];
      count += warp_count[w];
    }
    if (mask != 0u) {
      const int at = base + __popc(ballot & ((1u << lane) - 1u));
      list_t[at] = int(t), list_mask[at] = mask;
    }
    __syncthreads();
    const int64_t rows = int64_t(count) * G;
    for (int64_t r0 = 0; r0 < rows; r0 += kRowChunk) {
      const int64_t nrows = rows - r0 < kRowChunk ? rows - r0 : kRowChunk;
      if (threadIdx.x < kRowChunk) {
        const int r = threadIdx.x;
        row_mask[r] = 0u;
        if (r < nrows) {
          const int64_t entry = (r0 + r) / G, head = g * G + (r0 + r) % G, tt = list_t[entry];
          const int64_t si = stat_index(p, c, b, head, tt);
          row_t[r] = int(tt), row_h[r] = int(head);
          row_m[r] = args.row_max[si], row_l[r] = args.row_sum[si], row_d[r] = delta[si];
          row_sig[r] = sigmoid(ld(args.in.gates, ((b * T_ + tt) * p.q_heads + head) * kNsaBranches + c));
          row_mask[r] = row_l[r] > 0.0f ? list_mask[entry] : 0u;
        }
      }
      __syncthreads();
      for (int64_t idx = threadIdx.x; idx < kRowChunk * D; idx += blockDim.x) {
        const int64_t r = idx / D, e = idx % D;
        qs[idx] = r < nrows ? ld(args.in.q, offset(p.q_strides, b, row_t[r], row_h[r]) + e) : 0.0f;
      }
      for (int64_t idx = threadIdx.x; idx < kRowChunk * Dv; idx += blockDim.x) {
        const int64_t r = idx / Dv, e = idx % Dv;
        dos[idx] =
            r < nrows ? row_sig[r] * ld(args.dout, ((b * T_ + row_t[r]) * p.q_heads + row_h[r]) * Dv + e) : 0.0f;
      }
      __syncthreads();
      for (int r = warp; r < kRowChunk; r += kKeyWarps) {
        float prob = 0.0f, ds = 0.0f;
        if ((row_mask[r] >> lane) & 1u) {
          prob = expf(dot(qs + r * D, ks + lane * (D + 1), D) * float(p.scale) - row_m[r]) / row_l[r];
          const float dprob = dot(dos + r * Dv, vs + lane * (Dv + 1), Dv);
          ds = prob * (dprob - row_d[r]) * float(p.scale);
        }
        ps[r * (kChunk + 1) + lane] = prob;
        dss[r * (kChunk + 1) + lane] = ds;
      }
      __syncthreads();
      for (int64_t r = 0; r < nrows; ++r) {
        const float prob = ps[r * (kChunk + 1) + lane], ds = dss[r * (kChunk + 1) + lane];
#pragma unroll
        for (int u = 0; u < kPer; ++u) {
          const int64_t e = warp + kKeyWarps * u;
          if (e < Dv) dv[u] = fmaf(prob, dos[r * Dv + e], dv[u]);
          if (e < D) dk[u] = fmaf(ds, qs[r * D + e], dk[u]);
        }
      }
      __syncthreads();
    }
  };
  if (compressed_keys) {
    for (int64_t t0 = key0 * p.block_stride + p.block_len - 1; t0 < T_; t0 += kKeyThreads) {
      const int64_t t = t0 + threadIdx.x;
      add_window(kNsaCompressed, t, t < T_ ? visible_mask(p, kNsaCompressed, t, key0, nk) : 0u);
    }
  } else {
    const int64_t t_end = key0 + nk - 1 + p.window < T_ ? key0 + nk - 1 + p.window : T_;
    for (int64_t t0 = key0; t0 < t_end && window.dk == nullptr; t0 += kKeyThreads) {
      const int64_t t = t0 + threadIdx.x;
      add_window(kNsaWindow, t, t < t_end ? visible_mask(p, kNsaWindow, t, key0, nk) : 0u);
    }
    // The selection blocks overlapping the tile, each with the queries that kept it in ascending t.
    const int64_t NB = selection_blocks(p), bg = blockIdx.y, key_last = key0 + nk - 1;
    const int32_t* offsets = csr.offsets + bg * (NB + 1);
    const int32_t* queries = csr.queries + bg * T_ * p.select_count;
    for (int64_t sb = key0 / p.select_len; sb <= key_last / p.select_len; ++sb) {
      const int64_t lo = sb * p.select_len > key0 ? sb * p.select_len : key0;
      const int64_t hi = sb * p.select_len + p.select_len - 1 < key_last ? sb * p.select_len + p.select_len - 1 : key_last;
      const int64_t begin = offsets[sb], count = offsets[sb + 1] - begin;
      for (int64_t i0 = 0; i0 < count; i0 += kKeyThreads) {
        const int64_t i = i0 + threadIdx.x, t = i < count ? queries[begin + i] : -1;
        add_window(kNsaSelected, t, t >= 0 ? lane_bits(lo, hi < t ? hi : t, key0) : 0u);
      }
    }
  }

  const int64_t j = key0 + lane;
  if (lane >= nk) return;
  if (compressed_keys) {
    const int64_t row = (b * blocks + j) * p.kv_heads + g;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int64_t e = warp + kKeyWarps * u;
      if (e < D) dck[row * D + e] = dk[u];
      if (e < Dv) dcv[row * Dv + e] = dv[u];
    }
    return;
  }
  // The compressor's token gradients: blocks i with i·d <= j < i·d + l, ascending.
  const BlockSpan covering = blocks_covering(j, p.block_len, p.block_stride, blocks);
  for (int64_t i = covering.first; i <= covering.last; ++i) {
    const int64_t row = (b * blocks + i) * p.kv_heads + g, at = j - i * p.block_stride;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int64_t e = warp + kKeyWarps * u;
      if (e < D) dk[u] += dx_k[(row * p.block_len + at) * D + e];
      if (e < Dv) dv[u] += dx_v[(row * p.block_len + at) * Dv + e];
    }
  }
  const int64_t dk_at = ((b * T_ + j) * p.kv_heads + g) * D, dv_at = ((b * T_ + j) * p.kv_heads + g) * Dv;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int64_t e = warp + kKeyWarps * u;
    if (e < D) st(args.dk, dk_at + e, window.dk != nullptr ? dk[u] + ld(window.dk, dk_at + e) : dk[u]);
    if (e < Dv) st(args.dv, dv_at + e, window.dv != nullptr ? dv[u] + ld(window.dv, dv_at + e) : dv[u]);
  }
}

// launch_with_shared, naming what an NSA caller can change when a launch asks more shared memory than the device offers
// a block.
template <class... Params, class... Args>
void launch_shared(void (*kernel)(Params...), const char* op, dim3 grid, int threads, size_t bytes, cudaStream_t stream,
                   const Args&... args) {
  launch_with_shared(kernel, {op, "fewer query heads per kv head, smaller head dims or a longer select_len"}, grid,
                     threads, bytes, stream, args...);
}

template <class T>
int query_threads(const NsaParams<T>& p) {
  const int64_t G = p.q_heads / p.kv_heads;
  return 32 * int(G < kMaxQueryWarps ? G : kMaxQueryWarps);
}

template <class T>
unsigned query_grid(const NsaParams<T>& p) {
  const int64_t n = p.batch * p.kv_heads * p.seq_len;
  if (n > int64_t(0x7fffffff)) raise<ShapeError>("nsa", "batch·kv_heads·seq_len", "below 2^31", std::to_string(n));
  return unsigned(n);
}

template <class T>
void check_head_dims(const char* op, const NsaParams<T>& p) {
  if (p.head_dim > kNsaCudaMaxHeadDim)
    raise<ShapeError>(op, "q", "a head dimension of at most " + std::to_string(kNsaCudaMaxHeadDim),
                      std::to_string(p.head_dim));
  if (p.value_dim > kNsaCudaMaxHeadDim)
    raise<ShapeError>(op, "v", "a head dimension of at most " + std::to_string(kNsaCudaMaxHeadDim),
                      std::to_string(p.value_dim));
}

#ifndef ALPHA_NSA_EMULATION
// ---------------------------------------------------------------------------------------------------------
// The tensor-core forward (bf16/f16, G <= 16): the compressed and selected branches and the gated sum on mma.sync,
// after the window branch has run as flash attention with a causal window of w keys (flash_attention_forward takes
// NSA's layouts and writes its output and statistics where the window branch's belong).
//
// One block per (kWarps consecutive query tokens, b·Hkv + g); warp w runs token t0 + w with the group's G query
// heads as the 16 rows of its products (rows past G are zero and never stored), so every key a warp reads serves
// all of the group's heads, as in the paper's kernel, for any G from 1 to 16 (below 16 some rows idle).
// 1. Compressed branch: the block stages the compressed keys and values 64 at a time, shared by its tokens (each warp
//    masks the blocks that end after its token): S = Q·K̃ᵀ, flash's online softmax step, O += P̃·Ṽ. No ring: three
//    blocks of 4 warps per SM without one ran 10-15% faster than two blocks with a two-stage ring (the registers and
//    shared memory of the second stage), H100, 2026-11-26.
// 2. Selection scores, only where there are more candidates than kept blocks: a second pass over the compressed
//    keys for the final probabilities, summed over the rows (heads) by a fixed shuffle tree and then onto the
//    overlapping selection blocks (add_block_scores); the top-n by select_blocks on the warp.
// 3. Selected branch: each warp walks its kept blocks' tokens (cut at t) 16 keys at a time through its own quarter
//    of the key and value tiles: S, softmax, O += P̃·V.
// 4. The gated sum Σ σ_c·O_c: the selected output from the registers, the compressed and window ones as stored.
namespace tc {

using namespace mma;

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kKeys = 64;                  // compressed keys per shared tile
constexpr int kWarpKeys = kKeys / kWarps;  // selected keys per warp step: a warp's quarter of the tiles

template <class T>
__host__ __device__ int64_t branch_elements(const NsaParams<T>& p) {  // of one branch's slice of branch_out
  return p.batch * p.seq_len * p.q_heads * p.value_dim;
}
template <class T>
int64_t branch_stats(const NsaParams<T>& p) {  // of one branch's slice of row_max, row_sum
  return p.batch * p.q_heads * p.seq_len;
}

template <int kD, int kDv>
struct Shape {
  using QTile = SharedTile<16, kD>;
  using KTile = SharedTile<kKeys, kD>;
  using VTile = SharedTile<kKeys, kDv>;
  using WarpKTile = SharedTile<kWarpKeys, kD>;
  using WarpVTile = SharedTile<kWarpKeys, kDv>;
  static constexpr size_t kTileBytes = size_t(kWarps * QTile::kElements + KTile::kElements + VTile::kElements) * 2;
};

// After the tiles, per warp: kKeys importances (floats), the selection scores (score_floats), the kept blocks (n ints).
template <class T>
int64_t score_floats(const NsaParams<T>& p) {
  return (p.seq_len + p.select_len - 1) / p.select_len + 1;
}
template <class T, int kD, int kDv>
size_t shared_bytes(const NsaParams<T>& p) {
  return Shape<kD, kDv>::kTileBytes + size_t(kWarps) * size_t(kKeys + score_floats(p) + p.select_count) * 4;
}

// What flash's softmax step needs to know of a warp's key tile: 16 rows (the token's heads), each seeing keys [0, end).
template <class T>
__device__ AttentionParams<T> keys_below(const NsaParams<T>& p, int64_t end) {
  AttentionParams<T> view{};
  view.batch = view.q_heads = view.kv_heads = 1;
  view.q_len = 16, view.kv_len = end;
  view.scale = p.scale;
  return view;
}

// Stages compressed keys [c0, c0 + kKeys) of (b, g) (ck, cv: their first rows), and with `values` their values, for
// the whole block, once every warp is done with the previous tile.
template <class T, int kD, int kDv>
__device__ void stage_compressed(const NsaParams<T>& p, SharedTile<kKeys, kD> k, SharedTile<kKeys, kDv> v,
                                 const uint16_t* ck, const uint16_t* cv, int64_t c0, bool values) {
  const int64_t Nc = nsa_compressed_blocks(p);
  __syncthreads();
  load_tile_async<kThreads>(k, ck, p.kv_heads * p.head_dim, c0, Nc, int(p.head_dim));
  if (values) load_tile_async<kThreads>(v, cv, p.kv_heads * p.value_dim, c0, Nc, int(p.value_dim));
  copy_async_commit();
  copy_async_wait<0>();
  __syncthreads();
}

// Walks the kept selection blocks of token t (kept[0, count), ascending; each cut at t) 16 keys at a time through a
// warp's own tiles: loads keys and values [k0, k0 + 16) of (b, g) (zero past the block's end), then visit(k0, end).
template <class T, int kD, int kDv, class Visit>
__device__ void walk_selected(const NsaParams<T>& p, const NsaInputPointers<T>& in, int64_t b, int64_t g, int64_t t,
                              const int32_t* kept, int64_t count, SharedTile<kWarpKeys, kD> k,
                              SharedTile<kWarpKeys, kDv> v, int lane, Visit visit) {
  const uint16_t* k_rows = bits(in.k) + offset(p.k_strides, b, 0, g);
  const uint16_t* v_rows = bits(in.v) + offset(p.v_strides, b, 0, g);
  for (int64_t s = 0; s < count; ++s) {
    const int64_t begin = int64_t(kept[s]) * p.select_len;
    const int64_t end = begin + p.select_len < t + 1 ? begin + p.select_len : t + 1;
    for (int64_t k0 = begin; k0 < end; k0 += kWarpKeys) {
      load_tile_async<32>(k, k_rows, p.k_strides.time, k0, end, int(p.head_dim), lane);
      load_tile_async<32>(v, v_rows, p.v_strides.time, k0, end, int(p.value_dim), lane);
      copy_async_commit();
      copy_async_wait<0>();
      __syncwarp();
      visit(k0, end);
      __syncwarp();  // every lane is done with the tiles before the next load
    }
  }
}

template <int kO>
__device__ void start_rows(FragC (&acc)[1][kO], float (&row_max)[1][2], float (&row_sum)[1][2]) {
  zero(acc);
  row_max[0][0] = row_max[0][1] = -INFINITY;
  row_sum[0][0] = row_sum[0][1] = 0.0f;
}

// One key tile of a warp's online softmax: kTileKeys keys at rows [key_row, key_row + kTileKeys) of k and v, key j0
// first, those at or past view.kv_len masked: S = Q·Kᵀ, softmax step, O += P̃·V.
template <class T, int kTileKeys, int kD, int kDv, int kRowsK, int kRowsV>
__device__ void attend_tile(const AttentionParams<T>& view, float scale_log2, SharedTile<16, kD> q,
                            SharedTile<kRowsK, kD> k, SharedTile<kRowsV, kDv> v, int key_row, int64_t j0, int lane,
                            FragC (&acc)[1][kDv / 8], float (&row_max)[1][2], float (&row_sum)[1][2]) {
  constexpr int kN = kTileKeys / 8;
  FragC s[1][kN];
  zero(s);
  warp_product_abt<T, 1, kN, kD>(s, q, 0, k, key_row, lane);
  float rescale[1][2];
  const Softcap none{0.0f, 0.0f};
  if (j0 + kTileKeys <= view.kv_len)
    mma_forward::softmax_tile_of<T, 1, kN, false, false, false, false>(view, none, scale_log2, 0, 0, j0, lane, s,
                                                                       row_max, row_sum, rescale);
  else
    mma_forward::softmax_tile_of<T, 1, kN, true, false, false, false>(view, none, scale_log2, 0, 0, j0, lane, s,
                                                                      row_max, row_sum, rescale);
  mma_forward::rescale_rows(acc, rescale);
  FragA probs[1][kN / 2];
  to_a_fragments<T>(probs, s);
  warp_product_ab<T, 1, kDv / 8, kTileKeys>(acc, probs, v, key_row, 0, lane);
}

// Per row of this thread (heads lane/4 and lane/4 + 8): 1/l (0 for a row that saw no key) and the base-2 log
// normaliser lse2 = m·log2 e + log2 l (+inf there), so that P = exp2(S·scale·log2 e − lse2).
struct RowNorm {
  float inverse[2], lse2[2];
};

// Writes branch c of the warp's token for its rows below G: out = O / l, row_max = m, row_sum = l.
template <class T, int kO>
__device__ RowNorm store_branch(const NsaForwardArgs<T>& a, int c, int64_t b, int64_t g, int64_t t, int lane,
                                const FragC (&acc)[1][kO], const float (&row_max)[1][2], const float (&row_sum)[1][2]) {
  const NsaParams<T>& p = a.params;
  const int64_t G = p.q_heads / p.kv_heads;
  RowNorm norm;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = row_sum[0][half];
    sum += __shfl_xor_sync(kFullWarp, sum, 1);
    sum += __shfl_xor_sync(kFullWarp, sum, 2);
    norm.inverse[half] = select_float(sum > 0.0f, fast_reciprocal(sum), 0.0f);
    norm.lse2[half] = select_float(sum > 0.0f, row_max[0][half] + fast_log2(sum), INFINITY);
    const int64_t r = lane / 4 + 8 * half;
    if (r >= G) continue;
    const int64_t head = g * G + r;
    uint16_t* out = bits(a.branch_out) + (((c * p.batch + b) * p.seq_len + t) * p.q_heads + head) * p.value_dim;
#pragma unroll
    for (int n = 0; n < kO; ++n) {
      const int col = 8 * n + 2 * (lane % 4);
      if (col < p.value_dim)
        *reinterpret_cast<uint32_t*>(out + col) =
            pack2<T>(acc[0][n].x[2 * half] * norm.inverse[half], acc[0][n].x[2 * half + 1] * norm.inverse[half]);
    }
    if (lane % 4 == 0) {
      a.row_max[stat_index(p, c, b, head, t)] = row_max[0][half] * kLn2;
      a.row_sum[stat_index(p, c, b, head, t)] = sum;
    }
  }
  return norm;
}

// Adds one compressed-key tile (keys c0 + [0, kKeys), those at or past `count` not the token's) to the warp's selection
// scores: the final probabilities P = exp2(S·scale·log2 e − lse2) of its rows below G, summed over the rows per key
// by a fixed shuffle tree, then onto the overlapping selection blocks.
template <class T, int kD>
__device__ void add_tile_scores(const NsaParams<T>& p, SharedTile<16, kD> q, SharedTile<kKeys, kD> k, int64_t c0,
                                int64_t count, const RowNorm& cmp, float scale_log2, int lane, float* importance,
                                float* scores) {
  const int64_t G = p.q_heads / p.kv_heads;
  FragC s[1][kKeys / 8];
  zero(s);
  warp_product_abt<T, 1, kKeys / 8, kD>(s, q, 0, k, 0, lane);
  const bool top = lane / 4 < G, bottom = lane / 4 + 8 < G;
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      const int col = 8 * nt + 2 * (lane % 4) + x;
      const bool valid = c0 + col < count;
      float sum = select_float(valid && top, fast_exp2(fmaf(s[0][nt].x[x], scale_log2, -cmp.lse2[0])), 0.0f) +
                  select_float(valid && bottom, fast_exp2(fmaf(s[0][nt].x[2 + x], scale_log2, -cmp.lse2[1])), 0.0f);
      sum += __shfl_xor_sync(kFullWarp, sum, 4);
      sum += __shfl_xor_sync(kFullWarp, sum, 8);
      sum += __shfl_xor_sync(kFullWarp, sum, 16);
      if (lane < 4) importance[col] = sum;
    }
  __syncwarp();
  add_block_scores(p, importance, c0, (c0 + kKeys < count ? c0 + kKeys : count) - 1, scores, WarpThreads{});
  __syncwarp();
}

// out = σ(g_cmp)·O_cmp + σ(g_slc)·O_slc + σ(g_win)·O_win for the warp's rows below G, O_slc = acc·inverse.
template <class T, int kO>
__device__ void store_gated(const NsaForwardArgs<T>& a, int64_t b, int64_t g, int64_t t, int lane,
                            const FragC (&acc)[1][kO], const RowNorm& slc) {
  const NsaParams<T>& p = a.params;
  const int64_t G = p.q_heads / p.kv_heads, Dv = p.value_dim;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t r = lane / 4 + 8 * half;
    if (r >= G) continue;
    const int64_t row = (b * p.seq_len + t) * p.q_heads + g * G + r;
    const float gate_cmp = sigmoid(ld(a.in.gates, row * kNsaBranches + kNsaCompressed));
    const float gate_slc = sigmoid(ld(a.in.gates, row * kNsaBranches + kNsaSelected));
    const float gate_win = sigmoid(ld(a.in.gates, row * kNsaBranches + kNsaWindow));
    const int64_t branch = p.batch * p.seq_len * p.q_heads * Dv;  // elements per branch of branch_out
    const T* cmp = a.branch_out + kNsaCompressed * branch + row * Dv;
    const T* win = a.branch_out + kNsaWindow * branch + row * Dv;
#pragma unroll
    for (int n = 0; n < kO; ++n) {
      const int col = 8 * n + 2 * (lane % 4);
      if (col >= Dv) continue;
      float o[2];
#pragma unroll
      for (int x = 0; x < 2; ++x)
        o[x] = gate_cmp * ld(cmp, col + x) + gate_slc * acc[0][n].x[2 * half + x] * slc.inverse[half] +
               gate_win * ld(win, col + x);
      *reinterpret_cast<uint32_t*>(bits(a.out) + row * Dv + col) = pack2<T>(o[0], o[1]);
    }
  }
}

template <class T, int kD, int kDv>
__global__ void __launch_bounds__(kThreads, 3) forward_kernel(NsaForwardArgs<T> a, int64_t score_count) {
  using S = Shape<kD, kDv>;
  constexpr int kO = kDv / 8;
  extern __shared__ __align__(16) uint16_t tiles[];
  const NsaParams<T>& p = a.params;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t G = p.q_heads / p.kv_heads, T_ = p.seq_len, Nc = nsa_compressed_blocks(p), n = p.select_count;
  const int64_t b = blockIdx.y / p.kv_heads, g = blockIdx.y % p.kv_heads;
  const int64_t t0 = int64_t(gridDim.x - 1 - blockIdx.x) * kWarps, t = t0 + warp;  // the longest rows first
  const int64_t last_t = (t0 + kWarps < T_ ? t0 + kWarps : T_) - 1;
  const bool live = t < T_;
  const typename S::QTile q_tile{tiles + warp * S::QTile::kElements};
  const typename S::KTile k_tile{tiles + kWarps * S::QTile::kElements};
  const typename S::VTile v_tile{k_tile.data + S::KTile::kElements};
  float* floats = reinterpret_cast<float*>(v_tile.data + S::VTile::kElements);
  float* importance = floats + warp * kKeys;
  float* scores = floats + kWarps * kKeys + warp * score_count;
  int* kept = reinterpret_cast<int*>(floats + kWarps * (kKeys + score_count)) + warp * n;

  if (live)
    load_tile_async<32>(q_tile, bits(a.in.q) + offset(p.q_strides, b, t, g * G), p.q_strides.head, 0, G,
                        int(p.head_dim), lane);
  copy_async_commit();
  const int64_t count = live ? nsa_compressed_blocks(t + 1, p.block_len, p.block_stride) : 0;  // the token's
  const int64_t count_max = nsa_compressed_blocks(last_t + 1, p.block_len, p.block_stride);   // the block's
  const uint16_t* ck = bits(a.compressed_k) + (b * Nc * p.kv_heads + g) * p.head_dim;
  const uint16_t* cv = bits(a.compressed_v) + (b * Nc * p.kv_heads + g) * p.value_dim;
  const float scale_log2 = float(p.scale) * kLog2e;

  const auto load_compressed = [&](int64_t c0, bool values) {
    stage_compressed(p, k_tile, v_tile, ck, cv, c0, values);
  };

  // 1. The compressed branch.
  FragC acc[1][kO];
  float row_max[1][2], row_sum[1][2];
  start_rows(acc, row_max, row_sum);
  for (int64_t c0 = 0; c0 < count_max; c0 += kKeys) {
    load_compressed(c0, true);
    if (c0 < count)
      attend_tile<T, kKeys>(keys_below(p, count), scale_log2, q_tile, k_tile, v_tile, 0, c0, lane, acc, row_max,
                            row_sum);
  }
  RowNorm cmp{};
  if (live) cmp = store_branch(a, kNsaCompressed, b, g, t, lane, acc, row_max, row_sum);

  // 2. The selection scores (block-uniform test first, so that every warp meets the same barriers).
  const int64_t current = t / p.select_len;
  const bool choose = live && a.given_selected == nullptr && current + 1 > n;
  if (choose)
    for (int64_t j = lane; j <= current; j += 32) scores[j] = 0.0f;
  if (a.given_selected == nullptr && last_t / p.select_len + 1 > n)
    for (int64_t c0 = 0; c0 < count_max; c0 += kKeys) {
      load_compressed(c0, false);
      if (choose && c0 < count)
        add_tile_scores<T, kD>(p, q_tile, k_tile, c0, count, cmp, scale_log2, lane, importance, scores);
    }
  __syncthreads();  // the shared tiles are free: from here each warp works in its own quarter of them
  if (!live) return;
  int kept_count = 0;
  if (a.given_selected != nullptr) {
    const int32_t* given = a.given_selected + ((b * T_ + t) * p.kv_heads + g) * n;
    while (kept_count < n && given[kept_count] >= 0) ++kept_count;
    for (int64_t s = lane; s < kept_count; s += 32) kept[s] = given[s];
    __syncwarp();
  } else {
    kept_count = select_blocks(WarpThreads{}, scores, current, n, kept, nullptr);
  }
  int32_t* selected = a.selected + ((b * T_ + t) * p.kv_heads + g) * n;
  for (int64_t s = lane; s < n; s += 32) selected[s] = s < kept_count ? kept[s] : -1;

  // 3. The selected branch, 16 keys at a time.
  const typename S::WarpKTile k_mine{k_tile.at(kWarpKeys * warp, 0)};
  const typename S::WarpVTile v_mine{v_tile.at(kWarpKeys * warp, 0)};
  start_rows(acc, row_max, row_sum);
  walk_selected(p, a.in, b, g, t, kept, kept_count, k_mine, v_mine, lane, [&](int64_t k0, int64_t end) {
    attend_tile<T, kWarpKeys>(keys_below(p, end), scale_log2, q_tile, k_mine, v_mine, 0, k0, lane, acc, row_max,
                              row_sum);
  });
  const RowNorm slc = store_branch(a, kNsaSelected, b, g, t, lane, acc, row_max, row_sum);

  // 4. The gated sum.
  store_gated(a, b, g, t, lane, acc, slc);
}

// The compressor on the tensor cores: for each (b, kv head g), K̃_i = W·flatten(k block i) + W·flatten(pos) over the
// blocks i, as l·⌈F/64⌉ products of 64-feature slices: slice (j, e0) of block i is k[i·d + j, g, e0 : e0 + 64], so
// the slices of the blocks form a matrix of row stride d·(time stride), copied straight from the keys (no gathered
// copy), and W's columns j·F + e0 : + 64 the other operand. `bias` = W·flatten(pos) in f32 (computed once), so the
// products take the keys as stored; the reference's W·(k + pos) is the same sum. Tiles of 64 blocks × 64 output
// features, 4 warps of 16 blocks each, single-stage cp.async.
constexpr int kCompressTile = 64;

template <class T>
__global__ void __launch_bounds__(kThreads) compress_kernel(const T* src, AttentionStrides s, const T* weight,
                                                            const float* bias, T* out, int64_t blocks, int64_t heads,
                                                            int64_t block_len, int64_t block_stride, int features) {
  using Tile = SharedTile<kCompressTile, kCompressTile>;
  __shared__ __align__(16) uint16_t a_data[Tile::kElements], b_data[Tile::kElements];
  const Tile a_tile{a_data}, b_tile{b_data};
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t i0 = int64_t(blockIdx.x) * kCompressTile, n0 = int64_t(blockIdx.y) * kCompressTile;
  const int64_t b = blockIdx.z / heads, g = blockIdx.z % heads;
  const uint16_t* rows = bits(src) + b * s.batch + g * s.head;
  FragC acc[1][kCompressTile / 8];
  zero(acc);
  for (int64_t j = 0; j < block_len; ++j)
    for (int e0 = 0; e0 < features; e0 += kCompressTile) {
      const int width = features - e0 < kCompressTile ? features - e0 : kCompressTile;
      __syncthreads();  // the previous slice is consumed
      load_tile_async<kThreads>(a_tile, rows + j * s.time + e0, block_stride * s.time, i0, blocks, width);
      load_tile_async<kThreads>(b_tile, bits(weight) + j * features + e0, block_len * features, n0, features, width);
      copy_async_commit();
      copy_async_wait<0>();
      __syncthreads();
      warp_product_abt<T, 1, kCompressTile / 8, kCompressTile>(acc, a_tile, 16 * warp, b_tile, 0, lane);
    }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = i0 + 16 * warp + lane / 4 + 8 * half;
    if (i >= blocks) continue;
    uint16_t* row = bits(out) + ((b * blocks + i) * heads + g) * features;
#pragma unroll
    for (int nt = 0; nt < kCompressTile / 8; ++nt) {
      const int64_t n = n0 + 8 * nt + 2 * (lane % 4);
      if (n < features)
        *reinterpret_cast<uint32_t*>(row + n) =
            pack2<T>(acc[0][nt].x[2 * half] + bias[n], acc[0][nt].x[2 * half + 1] + bias[n + 1]);
    }
  }
}

// compressed = W·flatten(src blocks + pos) on the tensor cores ([B, Nc, Hkv, F]); `bias` is F floats of scratch.
template <class T>
void compress(const NsaParams<T>& p, const T* src, const AttentionStrides& s, const T* pos, const T* weight, T* out,
              int64_t features, float* bias, cudaStream_t stream) {
  const int64_t blocks = nsa_compressed_blocks(p), l = p.block_len;
  if (blocks == 0) return;
  gemm(1, features, l * features, RowMajor<T>{pos, 0}, RowMajor<T>{weight, l * features}, Store<float>{bias, features},
       stream);  // W·flatten(pos), f32
  const dim3 grid{unsigned((blocks + kCompressTile - 1) / kCompressTile),
                  unsigned((features + kCompressTile - 1) / kCompressTile), unsigned(p.batch * p.kv_heads)};
  ALPHA_CUDA_LAUNCH(compress_kernel<T>, grid, kThreads, stream, src, s, weight, bias, out, blocks, p.kv_heads, l,
                    p.block_stride, int(features));
}

// The backward's query side on the tensor cores (bf16/f16, the forward's shapes, the window's gradients from flash
// attention's backward): per (4 tokens, b·Hkv + g), warp w runs token t0 + w with the group's heads as its 16 rows, as
// the forward. Per branch c and row: D_c = σ_c·(dO·O_c), written for the key side, and dgate_c; then for the
// compressed keys (staged per block) and the selected ones (16 per warp step): S = Q·Kᵀ and dP = dO·Vᵀ on the tensor
// cores, P = exp2(S·scale·log2 e − lse2), dS = P∘(σ_c·dP − D_c) (flash's entry_gradient with σ_c in the dropout
// factor's place), dq += dS·K; at the end dq·scale plus the window's (this kernel runs only where flash attention's
// backward took the window: window.dq is set).
template <int kD, int kDv>
struct GradShape {
  using QTile = SharedTile<16, kD>;
  using OTile = SharedTile<16, kDv>;
  using KTile = SharedTile<kKeys, kD>;
  using VTile = SharedTile<kKeys, kDv>;
  using WarpKTile = SharedTile<kWarpKeys, kD>;
  using WarpVTile = SharedTile<kWarpKeys, kDv>;
  static constexpr size_t kBytes =
      size_t(kWarps * (QTile::kElements + OTile::kElements) + KTile::kElements + VTile::kElements) * 2;
};

// Per row of this thread (heads lane/4 and lane/4 + 8) for one branch: lse2 (+inf where the row has no keys or is past
// G), D_c and σ_c.
struct RowGrad {
  float lse2[2], delta[2], gate[2];
};

// dq += dS·K over kTileKeys keys at rows [key_row, +kTileKeys) of k and v, key j0 first, those at or past `end` masked.
template <class T, int kTileKeys, int kD, int kDv, int kRowsK, int kRowsV>
__device__ void dq_tile(const AttentionParams<T>& view, float scale_log2, SharedTile<16, kD> q, SharedTile<16, kDv> dout,
                        SharedTile<kRowsK, kD> k, SharedTile<kRowsV, kDv> v, int key_row, int64_t j0, int64_t end,
                        const RowGrad& rows, int lane, FragC (&dq)[1][kD / 8]) {
  constexpr int kN = kTileKeys / 8;
  FragC s[1][kN], dp[1][kN];
  zero(s);
  zero(dp);
  warp_product_abt<T, 1, kN, kD>(s, q, 0, k, key_row, lane);
  warp_product_abt<T, 1, kN, kDv>(dp, dout, 0, v, key_row, lane);
  const Softcap none{0.0f, 0.0f};
#pragma unroll
  for (int nt = 0; nt < kN; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int half = x / 2;
      const bool valid = j0 + 8 * nt + 2 * (lane % 4) + x % 2 < end;
      const EntryGrad e = entry_gradient<false>(view, none, scale_log2, s[0][nt].x[x], dp[0][nt].x[x], rows.lse2[half],
                                                rows.delta[half], rows.gate[half]);
      s[0][nt].x[x] = select_float(valid, e.dscore, 0.0f);
    }
  FragA ds[1][kN / 2];
  to_a_fragments<T>(ds, s);
  warp_product_ab<T, 1, kD / 8, kTileKeys>(dq, ds, k, key_row, 0, lane);
}

template <class T, int kD, int kDv>
__global__ void __launch_bounds__(kThreads, kD > 128 ? 2 : 3)  // D 192 spilled 352 bytes at 3 blocks per SM
    query_grads_kernel(NsaBackwardArgs<T> a, float* delta, WindowGrads<T> window) {
  using S = GradShape<kD, kDv>;
  extern __shared__ __align__(16) uint16_t tiles[];
  const NsaParams<T>& p = a.params;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t G = p.q_heads / p.kv_heads, T_ = p.seq_len, Nc = nsa_compressed_blocks(p), n = p.select_count;
  const int64_t b = blockIdx.y / p.kv_heads, g = blockIdx.y % p.kv_heads;
  const int64_t t0 = int64_t(gridDim.x - 1 - blockIdx.x) * kWarps, t = t0 + warp;
  const int64_t last_t = (t0 + kWarps < T_ ? t0 + kWarps : T_) - 1;
  const bool live = t < T_;
  const typename S::QTile q_tile{tiles + warp * S::QTile::kElements};
  const typename S::OTile do_tile{tiles + kWarps * S::QTile::kElements + warp * S::OTile::kElements};
  const typename S::KTile k_tile{tiles + kWarps * (S::QTile::kElements + S::OTile::kElements)};
  const typename S::VTile v_tile{k_tile.data + S::KTile::kElements};
  const int64_t first_row = (b * T_ + t) * p.q_heads + g * G;  // the token's first head
  if (live) {
    load_tile_async<32>(q_tile, bits(a.in.q) + offset(p.q_strides, b, t, g * G), p.q_strides.head, 0, G,
                        int(p.head_dim), lane);
    load_tile_async<32>(do_tile, bits(a.dout) + first_row * p.value_dim, p.value_dim, 0, G, int(p.value_dim), lane);
  }
  copy_async_commit();
  copy_async_wait<0>();
  __syncwarp();

  // Every branch's D_c and dgate_c (the window's too); the compressed and selected branches' rows kept for dq.
  RowGrad rows[2];
  for (int c = 0; c < kNsaBranches; ++c) {
    const T* o = a.branch_out + c * branch_elements(p) + first_row * p.value_dim;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t r = lane / 4 + 8 * half;
      const bool row_live = live && r < G;
      float dot_o = 0.0f;
      if (row_live)
        for (int64_t col = 2 * (lane % 4); col < p.value_dim; col += 8)
          for (int x = 0; x < 2; ++x)
            dot_o = fmaf(Elem<T>::load(*do_tile.at(int(r), int(col + x))), ld(o, r * p.value_dim + col + x), dot_o);
      dot_o += __shfl_xor_sync(kFullWarp, dot_o, 1);
      dot_o += __shfl_xor_sync(kFullWarp, dot_o, 2);
      float gate = 0.0f, lse2 = INFINITY;
      if (row_live) {
        const int64_t si = stat_index(p, c, b, g * G + r, t);
        gate = sigmoid(ld(a.in.gates, (first_row + r) * kNsaBranches + c));
        lse2 = log2_normaliser(a.row_max[si], a.row_sum[si]);
        if (lane % 4 == 0) {
          st(a.dgates, (first_row + r) * kNsaBranches + c, dot_o * gate * (1.0f - gate));
          delta[si] = gate * dot_o;
        }
      }
      if (c < 2) rows[c].lse2[half] = lse2, rows[c].delta[half] = gate * dot_o, rows[c].gate[half] = gate;
    }
  }

  const float scale_log2 = float(p.scale) * kLog2e;
  AttentionParams<T> view{};
  view.scale = p.scale;
  FragC dq[1][kD / 8];
  zero(dq);
  const int64_t count = live ? nsa_compressed_blocks(t + 1, p.block_len, p.block_stride) : 0;  // the token's
  const int64_t count_max = nsa_compressed_blocks(last_t + 1, p.block_len, p.block_stride);   // the block's
  const uint16_t* ck = bits(a.compressed_k) + (b * Nc * p.kv_heads + g) * p.head_dim;
  const uint16_t* cv = bits(a.compressed_v) + (b * Nc * p.kv_heads + g) * p.value_dim;
  for (int64_t c0 = 0; c0 < count_max; c0 += kKeys) {
    stage_compressed(p, k_tile, v_tile, ck, cv, c0, true);
    if (c0 < count)
      dq_tile<T, kKeys>(view, scale_log2, q_tile, do_tile, k_tile, v_tile, 0, c0, count, rows[kNsaCompressed], lane, dq);
  }
  __syncthreads();  // the shared tiles are free: from here each warp works in its own quarter of them
  if (!live) return;

  const typename S::WarpKTile k_mine{k_tile.at(kWarpKeys * warp, 0)};
  const typename S::WarpVTile v_mine{v_tile.at(kWarpKeys * warp, 0)};
  const int32_t* kept = a.selected + ((b * T_ + t) * p.kv_heads + g) * n;
  int64_t kept_count = 0;
  while (kept_count < n && kept[kept_count] >= 0) ++kept_count;
  walk_selected(p, a.in, b, g, t, kept, kept_count, k_mine, v_mine, lane, [&](int64_t k0, int64_t end) {
    dq_tile<T, kWarpKeys>(view, scale_log2, q_tile, do_tile, k_mine, v_mine, 0, k0, end, rows[kNsaSelected], lane, dq);
  });

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t r = lane / 4 + 8 * half;
    if (r >= G) continue;
    const int64_t at = (first_row + r) * p.head_dim;
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt) {
      const int64_t col = 8 * nt + 2 * (lane % 4);
      if (col >= p.head_dim) continue;
      float v[2];
#pragma unroll
      for (int x = 0; x < 2; ++x)
        v[x] = dq[0][nt].x[2 * half + x] * float(p.scale) + ld(window.dq, at + col + x);
      *reinterpret_cast<uint32_t*>(bits(a.dq) + at + col) = pack2<T>(v[0], v[1]);
    }
  }
}

// The backward's key side on the tensor cores (the compressed keys, then the tokens). A key tile is kKeys keys of one
// (b, g); its walk is the query tokens that see them: for compressed keys [c0, c0 + kKeys) the tokens t >= c0·d + l − 1
// (each the keys below its own count); for tokens, the queries that kept the selection blocks overlapping the tile (the
// CSR lists, concatenated, each query up to itself). Walks are uneven (compressed tile 0 and selection block 0, which
// every query keeps, are walked by all T tokens), so each is cut into spans of kSpanTokens tokens, one block each:
// span_table_kernel counts them, key_grads_kernel runs them into partial sums, key_grads_epilogue_kernel adds a tile's
// partial sums in span order (so the result does not depend on scheduling: no atomics).
// key_grads_kernel: kWarps warps hold the tile's K and V in shared memory, each warp 16 keys as the mma rows, and step
// through the span two tokens (32 rows: each token's G heads, padded to 16) at a time, through a two-stage cp.async
// ring of q, dO and the rows' statistics. Per step, transposed so that the keys are the rows:
//   Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, then per entry P̃ = P·σ_c and dS = P∘(σ_c·dP − D_c) (flash's entry_gradient with σ_c in
//   the dropout factor's place), dV += P̃ᵀ·dO and dK += dSᵀ·Q.
constexpr int kStepRows = 32;            // two tokens' 16 head rows
constexpr int64_t kSpanTokens = 2048;    // tokens per block of a key tile's walk (even: steps take two)

// A step's rows in shared memory: lse2 (+inf for a padded row), D_c and σ_c per row, and per token the keys it sees.
struct StepRows {
  float lse2[kStepRows], delta[kStepRows], gate[kStepRows];
  int64_t begin[2], end[2];
};

template <int kD, int kDv>
struct KeyGradShape {
  using KTile = SharedTile<kKeys, kD>;
  using VTile = SharedTile<kKeys, kDv>;
  using QTile = SharedTile<kStepRows, kD>;
  using OTile = SharedTile<kStepRows, kDv>;
  using TokenQTile = SharedTile<16, kD>;
  using TokenOTile = SharedTile<16, kDv>;
  static constexpr int kElements = KTile::kElements + VTile::kElements + 2 * (QTile::kElements + OTile::kElements);
  static constexpr size_t kBytes = size_t(kElements) * 2 + 2 * sizeof(StepRows);
};

// The token lists a key tile walks. Compressed keys: one list, the tokens from c0·d + l − 1 on. Tokens: the selection
// blocks overlapping the tile, each with the CSR's list of the queries that kept it.
template <bool kCompressed>
struct TokenLists {
  int64_t seq_len, block_len, block_stride, select_len;
  int64_t j0, nk, first, last;  // the tile's keys [j0, j0 + nk); its lists [first, last]
  const int32_t* offsets;       // tokens: the CSR of (b, g)
  const int32_t* queries;

  __device__ int64_t first_token() const { return j0 * block_stride + block_len - 1; }
  __device__ int64_t count(int64_t list) const {
    if constexpr (kCompressed) return first_token() < seq_len ? seq_len - first_token() : 0;
    else return offsets[list + 1] - offsets[list];
  }
  __device__ int64_t total() const {
    int64_t n = 0;
    for (int64_t list = first; list <= last; ++list) n += count(list);
    return n;
  }
  __device__ int64_t token(int64_t list, int64_t i) const {
    if constexpr (kCompressed) return first_token() + i;
    else return queries[offsets[list] + i];
  }
  // The tile's keys token t of `list` sees: [begin, end).
  __device__ void visible(int64_t list, int64_t t, int64_t& begin, int64_t& end) const {
    if constexpr (kCompressed) {
      begin = j0;
      end = nsa_compressed_blocks(t + 1, block_len, block_stride);
    } else {
      const int64_t block = list * select_len;
      begin = block > j0 ? block : j0;
      end = block + select_len < t + 1 ? block + select_len : t + 1;
    }
    if (end > j0 + nk) end = j0 + nk;
  }
};
template <bool kCompressed, class T>
__device__ TokenLists<kCompressed> token_lists(const NsaParams<T>& p, const SelectionCsr& csr, int64_t bg, int64_t j0) {
  const int64_t keys = kCompressed ? nsa_compressed_blocks(p) : p.seq_len;
  TokenLists<kCompressed> lists{p.seq_len, p.block_len, p.block_stride, p.select_len, j0,
                                keys - j0 < kKeys ? keys - j0 : kKeys, 0, 0, nullptr, nullptr};
  if constexpr (!kCompressed) {
    const int64_t NB = selection_blocks(p);
    lists.first = j0 / p.select_len, lists.last = (j0 + lists.nk - 1) / p.select_len;
    lists.offsets = csr.offsets + bg * (NB + 1);
    lists.queries = csr.queries + bg * p.seq_len * p.select_count;
  }
  return lists;
}

// A step's place in a span: its first token is entry i of `list`, with `left` entries of the span to go.
struct ListCursor {
  int64_t list, i, left;
};
template <class Lists>
__device__ ListCursor skip_empty(const Lists& lists, ListCursor c) {
  while (c.list <= lists.last && c.i >= lists.count(c.list)) c.list += 1, c.i = 0;
  return c;
}

// Per (b, g): first[tile] = the first span of each key tile (a running sum of ceil(walk / kSpanTokens)), first[tiles]
// the total. spans_bound(...) spans per (b, g) is what the partial sums' memory holds.
struct SpanTable {
  int32_t* first;  // [B·Hkv, tiles + 1]
  float* dk;       // [B·Hkv, bound, kKeys, D]: the spans' partial dK (scaled) and dV
  float* dv;       // [B·Hkv, bound, kKeys, Dv]
  int64_t tiles, bound;
};
template <class T>
int64_t key_tiles(const NsaParams<T>& p, bool compressed_keys) {
  return ((compressed_keys ? nsa_compressed_blocks(p) : p.seq_len) + kKeys - 1) / kKeys;
}
template <class T>
int64_t spans_bound(const NsaParams<T>& p, bool compressed_keys) {
  const int64_t tiles = key_tiles(p, compressed_keys);
  if (compressed_keys) {  // exact: tile c walks the tokens from c·kKeys·d + l − 1 on
    int64_t spans = 0;
    for (int64_t c = 0; c < tiles; ++c) {
      const int64_t walk = p.seq_len - (c * kKeys * p.block_stride + p.block_len - 1);
      spans += walk > 0 ? (walk + kSpanTokens - 1) / kSpanTokens : 0;
    }
    return spans;
  }
  // Each query keeps at most n blocks, each overlapping at most `tiles_per_block` tiles.
  const int64_t tiles_per_block = p.select_len % kKeys == 0 ? p.select_len / kKeys : p.select_len / kKeys + 2;
  return tiles + (p.seq_len * p.select_count * tiles_per_block + kSpanTokens - 1) / kSpanTokens;
}

// grid (B·Hkv), 256 threads: the tiles' span counts in parallel, then their running sum.
template <bool kCompressed, class T>
__global__ void span_table_kernel(NsaParams<T> p, SelectionCsr csr, SpanTable table) {
  int32_t* first = table.first + blockIdx.x * (table.tiles + 1);
  for (int64_t tile = threadIdx.x; tile < table.tiles; tile += blockDim.x) {
    const int64_t walk = token_lists<kCompressed>(p, csr, blockIdx.x, tile * kKeys).total();
    first[tile + 1] = int32_t((walk + kSpanTokens - 1) / kSpanTokens);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  first[0] = 0;
  for (int64_t tile = 0; tile < table.tiles; ++tile) first[tile + 1] += first[tile];
}

template <class T, int kD, int kDv, bool kCompressed>
__global__ void __launch_bounds__(kThreads, 2)
    key_grads_kernel(NsaBackwardArgs<T> a, const float* delta, SelectionCsr csr, SpanTable table) {
  using S = KeyGradShape<kD, kDv>;
  constexpr int kN = kStepRows / 8;
  extern __shared__ __align__(16) uint16_t tiles[];
  const NsaParams<T>& p = a.params;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t G = p.q_heads / p.kv_heads, T_ = p.seq_len, Nc = nsa_compressed_blocks(p);
  const int64_t bg = blockIdx.y, b = bg / p.kv_heads, g = bg % p.kv_heads, span_id = blockIdx.x;
  // This block's tile: the last whose first span is at or below span_id (none: the grid's bound exceeds the spans).
  const int32_t* first = table.first + bg * (table.tiles + 1);
  if (span_id >= first[table.tiles]) return;
  int64_t lo = 0, hi = table.tiles - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (first[mid] <= span_id) lo = mid;
    else hi = mid - 1;
  }
  const int64_t j0 = lo * kKeys, span = span_id - first[lo];
  const TokenLists<kCompressed> lists = token_lists<kCompressed>(p, csr, bg, j0);
  const int branch = kCompressed ? kNsaCompressed : kNsaSelected;
  const typename S::KTile k_tile{tiles};
  const typename S::VTile v_tile{k_tile.data + S::KTile::kElements};
  const typename S::QTile q_tiles{v_tile.data + S::VTile::kElements};  // stage s: q_tiles.next(s)
  const typename S::OTile do_tiles{q_tiles.data + 2 * S::QTile::kElements};
  StepRows* step_rows = reinterpret_cast<StepRows*>(tiles + S::kElements);

  if constexpr (kCompressed) {
    load_tile_async<kThreads>(k_tile, bits(a.compressed_k) + (b * Nc * p.kv_heads + g) * p.head_dim,
                              p.kv_heads * p.head_dim, j0, Nc, int(p.head_dim));
    load_tile_async<kThreads>(v_tile, bits(a.compressed_v) + (b * Nc * p.kv_heads + g) * p.value_dim,
                              p.kv_heads * p.value_dim, j0, Nc, int(p.value_dim));
  } else {
    load_tile_async<kThreads>(k_tile, bits(a.in.k) + offset(p.k_strides, b, 0, g), p.k_strides.time, j0, T_,
                              int(p.head_dim));
    load_tile_async<kThreads>(v_tile, bits(a.in.v) + offset(p.v_strides, b, 0, g), p.v_strides.time, j0, T_,
                              int(p.value_dim));
  }

  // Starts loading the step at `c` into stage s: the two tokens' q and dO rows, their statistics and visible keys.
  auto load_step = [&](ListCursor c, int s) {
    const int64_t count = lists.count(c.list);
    StepRows& rows = step_rows[s];
#pragma unroll
    for (int slot = 0; slot < 2; ++slot) {
      const int64_t t = c.i + slot < count && slot < c.left ? lists.token(c.list, c.i + slot) : -1;
      const int64_t first_row = (b * T_ + t) * p.q_heads + g * G;
      const typename S::TokenQTile q{q_tiles.next(s).at(16 * slot, 0)};
      const typename S::TokenOTile dout{do_tiles.next(s).at(16 * slot, 0)};
      load_tile_async<kThreads>(q, t >= 0 ? bits(a.in.q) + offset(p.q_strides, b, t, g * G) : bits(a.in.q),
                                p.q_strides.head, 0, t >= 0 ? G : 0, int(p.head_dim));
      load_tile_async<kThreads>(dout, t >= 0 ? bits(a.dout) + first_row * p.value_dim : bits(a.dout), p.value_dim, 0,
                                t >= 0 ? G : 0, int(p.value_dim));
      const int r = int(threadIdx.x) - 16 * slot;
      if (r >= 0 && r < 16) {
        const bool live = t >= 0 && r < G;
        const int64_t si = live ? stat_index(p, branch, b, g * G + r, t) : 0;
        rows.lse2[16 * slot + r] = live ? log2_normaliser(a.row_max[si], a.row_sum[si]) : INFINITY;
        rows.delta[16 * slot + r] = live ? delta[si] : 0.0f;
        rows.gate[16 * slot + r] = live ? sigmoid(ld(a.in.gates, (first_row + r) * kNsaBranches + branch)) : 0.0f;
      }
      if (threadIdx.x == 32 + slot) {
        int64_t begin = 0, end = 0;
        if (t >= 0) lists.visible(c.list, t, begin, end);
        rows.begin[slot] = begin, rows.end[slot] = end;
      }
    }
  };
  // The step after c: two entries on within its list, or the next non-empty list.
  auto following = [&](ListCursor c) {
    const int64_t taken = lists.count(c.list) - c.i < 2 ? lists.count(c.list) - c.i : 2;
    return skip_empty(lists, {c.list, c.i + taken, c.left - taken});
  };
  auto walking = [&](ListCursor c) { return c.left > 0 && c.list <= lists.last; };

  const float scale_log2 = float(p.scale) * kLog2e;
  AttentionParams<T> view{};
  view.scale = p.scale;
  const Softcap none{0.0f, 0.0f};
  const int key_row0 = 16 * warp;
  FragC dk[1][kD / 8], dv[1][kDv / 8];
  zero(dk);
  zero(dv);
  // The span's first entry: entry span·kSpanTokens of the tile's lists, concatenated.
  ListCursor current{lists.first, span * kSpanTokens, kSpanTokens};
  while (current.list < lists.last && current.i >= lists.count(current.list))
    current.i -= lists.count(current.list), current.list += 1;
  current = skip_empty(lists, current);
  if (walking(current)) load_step(current, 0);
  copy_async_commit();
  for (int stage = 0; walking(current); stage ^= 1) {
    const ListCursor next = following(current);
    if (walking(next)) load_step(next, stage ^ 1);
    copy_async_commit();
    copy_async_wait<1>();
    __syncthreads();  // this stage's rows (and the first time K and V) are in place

    FragC st[1][kN], dpt[1][kN];  // Sᵀ and dPᵀ: rows this warp's keys, columns the step's 32 rows
    zero(st);
    zero(dpt);
    warp_product_abt<T, 1, kN, kD>(st, k_tile, key_row0, q_tiles.next(stage), 0, lane);
    warp_product_abt<T, 1, kN, kDv>(dpt, v_tile, key_row0, do_tiles.next(stage), 0, lane);
    const StepRows& rows = step_rows[stage];
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int col = mma_backward::fragment_col(lane, n, x), slot = n / 2;
        const int64_t j = j0 + key_row0 + mma_backward::fragment_row(lane, x);
        const EntryGrad e = entry_gradient<false>(view, none, scale_log2, st[0][n].x[x], dpt[0][n].x[x],
                                                  rows.lse2[col], rows.delta[col], rows.gate[col]);
        const bool visible = j >= rows.begin[slot] && j < rows.end[slot];
        st[0][n].x[x] = select_float(visible, e.prob_dropped, 0.0f);
        dpt[0][n].x[x] = select_float(visible, e.dscore, 0.0f);
      }
    FragA probs[1][kN / 2], dscores[1][kN / 2];
    to_a_fragments<T>(probs, st);
    to_a_fragments<T>(dscores, dpt);
    warp_product_ab<T, 1, kDv / 8, kStepRows>(dv, probs, do_tiles.next(stage), 0, 0, lane);
    warp_product_ab<T, 1, kD / 8, kStepRows>(dk, dscores, q_tiles.next(stage), 0, 0, lane);
    __syncthreads();  // every warp is done with this stage before the next step refills it
    current = next;
  }
  copy_async_wait<0>();

  // The span's partial sums: its rows of the tile's kKeys.
  const int64_t span_rows = (bg * table.bound + span_id) * kKeys;
  // Into the span's f32 rows (row-major, D or Dv columns), summed in span order by the epilogue.
  float* dk_rows = table.dk + (span_rows + key_row0) * p.head_dim;
  float* dv_rows = table.dv + (span_rows + key_row0) * p.value_dim;
  mma_backward::store_rows<float>(dk, float(p.scale), int(p.head_dim), lane,
                                  [&](int r) { return dk_rows + r * p.head_dim; });
  mma_backward::store_rows<float>(dv, 1.0f, int(p.value_dim), lane, [&](int r) { return dv_rows + r * p.value_dim; });
}

// out[(b, j, g), e] (width columns) = Σ over the spans of j's tile, in span order, of partial[span, j mod kKeys, e];
// for tokens (Out = T) plus the compressor's token gradients dx of the blocks i with i·d <= j < i·d + l (ascending)
// and the window's (flash attention's backward); for the compressed keys (Out = float) that alone.
template <class T, class Out>
__global__ void key_grads_epilogue_kernel(NsaParams<T> p, SpanTable table, const float* partial, int64_t keys,
                                          int64_t width, const float* dx, const T* from_window, Out* out) {
  const int64_t total = p.batch * keys * p.kv_heads * width, Nc = nsa_compressed_blocks(p);
  const int64_t l = p.block_len, d = p.block_stride;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = idx % width, g = idx / width % p.kv_heads, j = idx / width / p.kv_heads % keys;
    const int64_t b = idx / width / p.kv_heads / keys, bg = b * p.kv_heads + g, tile = j / kKeys;
    const int32_t* first = table.first + bg * (table.tiles + 1);
    float sum = 0.0f;
    for (int64_t span = first[tile]; span < first[tile + 1]; ++span)
      sum += partial[((bg * table.bound + span) * kKeys + j % kKeys) * width + e];
    if constexpr (std::is_same_v<Out, float>) {
      out[idx] = sum;
    } else {
      const BlockSpan covering = blocks_covering(j, l, d, Nc);
      for (int64_t i = covering.first; i <= covering.last; ++i)
        sum += dx[(((b * Nc + i) * p.kv_heads + g) * l + j - i * d) * width + e];
      st(out, idx, sum + ld(from_window, idx));
    }
  }
}

// The memory of the key side's span tables and partial sums, in bytes (256-byte aligned pieces): the larger of the
// compressed keys' and the tokens', as the two run one after the other.
struct KeySideScratch {
  size_t dk, dv, total;
};
template <class T>
KeySideScratch key_side_scratch(const NsaParams<T>& p) {
  const auto rounded = [](int64_t bytes) { return size_t((bytes + 255) / 256 * 256); };
  const int64_t groups = p.batch * p.kv_heads;
  const int64_t tiles = std::max(key_tiles(p, true), key_tiles(p, false));
  const int64_t bound = std::max(spans_bound(p, true), spans_bound(p, false));
  KeySideScratch at{};
  at.dk = rounded(groups * (tiles + 1) * int64_t(sizeof(int32_t)));
  at.dv = at.dk + rounded(groups * bound * kKeys * p.head_dim * int64_t(sizeof(float)));
  at.total = at.dv + rounded(groups * bound * kKeys * p.value_dim * int64_t(sizeof(float)));
  return at;
}

// The key side over the compressed keys (dck, dcv: dK̃, dṼ in f32) or the tokens (dk, dv, with the compressor's token
// gradients dx_k, dx_v and the window's); `scratch`: key_side_scratch(p).total bytes.
template <class T, int kD, int kDv>
void key_side(const NsaBackwardArgs<T>& a, const float* delta, bool compressed_keys, const SelectionCsr& csr,
              char* scratch, const float* dx_k, const float* dx_v, WindowGrads<T> window, float* dck, float* dcv,
              cudaStream_t stream) {
  const NsaParams<T>& p = a.params;
  const KeySideScratch at = key_side_scratch(p);
  const int64_t groups = p.batch * p.kv_heads;
  const SpanTable table{reinterpret_cast<int32_t*>(scratch), reinterpret_cast<float*>(scratch + at.dk),
                        reinterpret_cast<float*>(scratch + at.dv), key_tiles(p, compressed_keys),
                        spans_bound(p, compressed_keys)};
  if (groups == 0 || table.tiles == 0) return;
  const dim3 grid{unsigned(table.bound), unsigned(groups)};
  const int64_t keys = compressed_keys ? nsa_compressed_blocks(p) : p.seq_len;
  auto epilogue_grid = [&](int64_t width) {
    return unsigned(std::min<int64_t>((groups * keys * width + 255) / 256, 4096));
  };
  const auto span_table = compressed_keys ? span_table_kernel<true, T> : span_table_kernel<false, T>;
  ALPHA_CUDA_LAUNCH(span_table, unsigned(groups), 256, stream, p, csr, table);
  launch_shared(compressed_keys ? key_grads_kernel<T, kD, kDv, true> : key_grads_kernel<T, kD, kDv, false>,
                "nsa_backward", grid, kThreads, KeyGradShape<kD, kDv>::kBytes, stream, a, delta, csr, table);
  if (compressed_keys) {
    const auto sum_spans = key_grads_epilogue_kernel<T, float>;
    ALPHA_CUDA_LAUNCH(sum_spans, epilogue_grid(p.head_dim), 256, stream, p, table, table.dk, keys, p.head_dim, nullptr,
                      nullptr, dck);
    ALPHA_CUDA_LAUNCH(sum_spans, epilogue_grid(p.value_dim), 256, stream, p, table, table.dv, keys, p.value_dim,
                      nullptr, nullptr, dcv);
  } else {
    const auto sum_spans = key_grads_epilogue_kernel<T, T>;
    ALPHA_CUDA_LAUNCH(sum_spans, epilogue_grid(p.head_dim), 256, stream, p, table, table.dk, keys, p.head_dim, dx_k,
                      window.dk, a.dk);
    ALPHA_CUDA_LAUNCH(sum_spans, epilogue_grid(p.value_dim), 256, stream, p, table, table.dv, keys, p.value_dim, dx_v,
                      window.dv, a.dv);
  }
}

// Whether the window branch can run as flash attention on the tensor cores (bf16/f16, head dims multiples of 8, rows
// of q, k, v 16-byte aligned): the tensor-core forward's condition, and the backward's for flash's window gradients.
template <class T>
bool window_on_flash(const NsaParams<T>& p, const NsaInputPointers<T>& in) {
  return !std::is_same_v<T, float> && p.head_dim % 8 == 0 && p.value_dim % 8 == 0 &&
         mma_rows_aligned(in.q, p.q_strides) && mma_rows_aligned(in.k, p.k_strides) &&
         mma_rows_aligned(in.v, p.v_strides);
}

// The (kD, kDv) bucket the tensor-core kernels run these arguments in, or 0 where they do not take them (G above 16,
// head dims not multiples of 8 or above 192/128, rows not 16-byte aligned); bucket() adds the forward's own
// conditions (f32, the compressor's weights, the selection scores' shared memory). The rest runs the FMA kernels.
template <class T>
int head_bucket(const NsaParams<T>& p, const NsaInputPointers<T>& in, const T* compressed_k, const T* compressed_v) {
  const int64_t G = p.q_heads / p.kv_heads, D = p.head_dim, Dv = p.value_dim;
  if (G > 16 || !window_on_flash(p, in) || reinterpret_cast<uintptr_t>(compressed_k) % 16 ||
      reinterpret_cast<uintptr_t>(compressed_v) % 16)
    return 0;
  return D <= 64 && Dv <= 64 ? 64 : D <= 128 && Dv <= 128 ? 128 : D <= 192 && Dv <= 128 ? 192 : 0;
}
template <class T>
int bucket(const NsaForwardArgs<T>& a) {
  if constexpr (std::is_same_v<T, float>) {
    return 0;
  } else {
    const NsaParams<T>& p = a.params;
    if (reinterpret_cast<uintptr_t>(a.in.k_weight) % 16 || reinterpret_cast<uintptr_t>(a.in.v_weight) % 16) return 0;
    const int kd = head_bucket(p, a.in, a.compressed_k, a.compressed_v);
    if (kd == 0) return 0;
    const size_t bytes = kd == 64    ? shared_bytes<T, 64, 64>(p)
                         : kd == 128 ? shared_bytes<T, 128, 128>(p)
                                     : shared_bytes<T, 192, 128>(p);
    return bytes <= block_shared_memory_limit() ? kd : 0;
  }
}

template <class T, int kD, int kDv>
void launch(const NsaForwardArgs<T>& a, cudaStream_t stream) {
  const NsaParams<T>& p = a.params;
  const dim3 grid{unsigned((p.seq_len + kWarps - 1) / kWarps), unsigned(p.batch * p.kv_heads)};
  launch_shared(forward_kernel<T, kD, kDv>, "nsa", grid, kThreads, shared_bytes<T, kD, kDv>(p), stream, a,
                score_floats(p));
}

template <class T, int kD, int kDv>
void launch_query_grads(const NsaBackwardArgs<T>& a, float* delta, WindowGrads<T> window, cudaStream_t stream) {
  const NsaParams<T>& p = a.params;
  const dim3 grid{unsigned((p.seq_len + kWarps - 1) / kWarps), unsigned(p.batch * p.kv_heads)};
  launch_shared(query_grads_kernel<T, kD, kDv>, "nsa_backward", grid, kThreads, GradShape<kD, kDv>::kBytes, stream, a,
                delta, window);
}

// The window branch as flash attention over NSA's q, k, v: causal, the last w keys, into the window's slices of
// branch_out, row_max and row_sum.
template <class T>
AttentionParams<T> window_params(const NsaParams<T>& p) {
  AttentionParams<T> f{};
  f.batch = p.batch, f.q_len = f.kv_len = p.seq_len, f.q_heads = p.q_heads, f.kv_heads = p.kv_heads;
  f.head_dim = p.head_dim, f.value_dim = p.value_dim;
  f.q_strides = p.q_strides, f.k_strides = p.k_strides, f.v_strides = p.v_strides;
  f.scale = p.scale, f.causal = true, f.dropout_scale = 1, f.window_left = p.window - 1;
  return f;
}

template <class T>
void window_as_flash(const NsaForwardArgs<T>& a, Stream stream) {
  const NsaParams<T>& p = a.params;
  AttentionForwardArgs<T> w{};
  w.q = a.in.q, w.k = a.in.k, w.v = a.in.v;
  w.out = a.branch_out + kNsaWindow * branch_elements(p);
  w.row_max = a.row_max + kNsaWindow * branch_stats(p);
  w.row_sum = a.row_sum + kNsaWindow * branch_stats(p);
  w.params = window_params(p);
  flash_attention_forward(w, stream);
}

// dO_win = σ(g_win)·dO, rounded to T: the window branch's output gradient.
template <class T>
__global__ void gate_window_kernel(const T* dout, const T* gates, T* out, int64_t rows, int64_t width) {
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < rows * width;
       idx += int64_t(gridDim.x) * blockDim.x)
    st(out, idx, sigmoid(ld(gates, idx / width * kNsaBranches + kNsaWindow)) * ld(dout, idx));
}

// Where the window branch's backward keeps its pieces in one scratch allocation, in bytes from its start (each piece
// 256-byte aligned): flash's f32 workspace, the gated dO, then the window's dq, dk and dv (in T).
struct WindowScratch {
  size_t gated, dq, dk, dv, total;
};
template <class T>
WindowScratch window_scratch(const NsaParams<T>& p) {
  const int64_t q_rows = p.batch * p.seq_len * p.q_heads, kv_rows = p.batch * p.seq_len * p.kv_heads;
  const auto rounded = [](int64_t bytes) { return size_t((bytes + 255) / 256 * 256); };
  WindowScratch at{};
  at.gated = rounded(flash_attention_backward_workspace_here(window_params(p)) * int64_t(sizeof(float)));
  at.dq = at.gated + rounded(q_rows * p.value_dim * int64_t(sizeof(T)));
  at.dk = at.dq + rounded(q_rows * p.head_dim * int64_t(sizeof(T)));
  at.dv = at.dk + rounded(kv_rows * p.head_dim * int64_t(sizeof(T)));
  at.total = at.dv + rounded(kv_rows * p.value_dim * int64_t(sizeof(T)));
  return at;
}

// The window branch's gradients by flash attention's backward, into `scratch` (window_scratch(p).total bytes).
template <class T>
WindowGrads<T> window_grads_as_flash(const NsaBackwardArgs<T>& a, char* scratch, Stream stream) {
  const NsaParams<T>& p = a.params;
  const WindowScratch at = window_scratch(p);
  const int64_t q_rows = p.batch * p.seq_len * p.q_heads;
  AttentionBackwardArgs<T> w{};
  w.params = window_params(p);
  float* workspace = reinterpret_cast<float*>(scratch);
  T* gated = reinterpret_cast<T*>(scratch + at.gated);
  T* dq = reinterpret_cast<T*>(scratch + at.dq);
  T* dk = reinterpret_cast<T*>(scratch + at.dk);
  T* dv = reinterpret_cast<T*>(scratch + at.dv);
  const cudaStream_t s = alpha::cuda::stream_handle(stream);
  const int64_t total = q_rows * p.value_dim;
  const unsigned grid = unsigned(std::min<int64_t>((total + 255) / 256, 4096));
  ALPHA_CUDA_LAUNCH(gate_window_kernel<T>, grid, 256, s, a.dout, a.in.gates, gated, q_rows, p.value_dim);
  w.dout = gated, w.q = a.in.q, w.k = a.in.k, w.v = a.in.v;
  w.out = a.branch_out + kNsaWindow * branch_elements(p);
  w.row_max = a.row_max + kNsaWindow * branch_stats(p);
  w.row_sum = a.row_sum + kNsaWindow * branch_stats(p);
  w.dq = dq, w.dk = dk, w.dv = dv;
  flash_attention_backward(w, workspace, stream);
  return {dq, dk, dv};
}

}  // namespace tc
#endif

// key_grads_kernel for the bucket of max(D, Dv).
template <class T>
void launch_key_grads(const NsaBackwardArgs<T>& args, const float* delta, bool compressed_keys, const float* dx_k,
                      const float* dx_v, float* dck, float* dcv, const SelectionCsr& csr, WindowGrads<T> window,
                      cudaStream_t stream) {
  const NsaParams<T>& p = args.params;
  const int64_t keys = compressed_keys ? nsa_compressed_blocks(p) : p.seq_len;
  const dim3 grid{unsigned((keys + kChunk - 1) / kChunk), unsigned(p.batch * p.kv_heads)};
  const size_t bytes = size_t(key_layout(p).total) * sizeof(float);
  const int64_t widest = p.head_dim > p.value_dim ? p.head_dim : p.value_dim;
  if (widest <= 64)
    launch_shared(key_grads_kernel<T, 64>, "nsa_backward", grid, kKeyThreads, bytes, stream, args, delta,
                  compressed_keys, dx_k, dx_v, dck, dcv, csr, window);
  else if (widest <= 128)
    launch_shared(key_grads_kernel<T, 128>, "nsa_backward", grid, kKeyThreads, bytes, stream, args, delta,
                  compressed_keys, dx_k, dx_v, dck, dcv, csr, window);
  else
    launch_shared(key_grads_kernel<T, 256>, "nsa_backward", grid, kKeyThreads, bytes, stream, args, delta,
                  compressed_keys, dx_k, dx_v, dck, dcv, csr, window);
}

}  // namespace

template <class T>
void nsa_forward(const NsaForwardArgs<T>& args, Stream stream) {
  const NsaParams<T>& p = args.params;
  check_head_dims("nsa", p);
  if (p.batch * p.seq_len * p.q_heads == 0) return;
  if (p.batch * p.kv_heads > 65535)
    raise<ShapeError>("nsa", "batch·kv_heads", "at most 65535", std::to_string(p.batch * p.kv_heads));
  const cudaStream_t s = alpha::cuda::stream_handle(stream);
  const int64_t rows = p.batch * nsa_compressed_blocks(p) * p.kv_heads, l = p.block_len;
  const int64_t D = p.head_dim, Dv = p.value_dim;
#ifndef ALPHA_NSA_EMULATION
  if constexpr (!std::is_same_v<T, float>) {
    if (const int kd = tc::bucket(args)) {
      StreamScratch bias(size_t(D + Dv) * sizeof(float), s);
      tc::compress(p, args.in.k, p.k_strides, args.in.k_pos, args.in.k_weight, args.compressed_k, D, bias.as<float>(), s);
      tc::compress(p, args.in.v, p.v_strides, args.in.v_pos, args.in.v_weight, args.compressed_v, Dv,
                   bias.as<float>() + D, s);
      tc::window_as_flash(args, stream);
      if (kd == 64) tc::launch<T, 64, 64>(args, s);
      if (kd == 128) tc::launch<T, 128, 128>(args, s);
      if (kd == 192) tc::launch<T, 192, 128>(args, s);
      return;
    }
  }
#endif
  gemm(rows, D, l * D, compressor_input(p, args.in.k, p.k_strides, args.in.k_pos, D),
       RowMajor<T>{args.in.k_weight, l * D}, Store<T>{args.compressed_k, D}, s);
  gemm(rows, Dv, l * Dv, compressor_input(p, args.in.v, p.v_strides, args.in.v_pos, Dv),
       RowMajor<T>{args.in.v_weight, l * Dv}, Store<T>{args.compressed_v, Dv}, s);
  launch_shared(forward_kernel<T>, "nsa", dim3(query_grid(p)), query_threads(p),
                size_t(query_layout(p, false).total) * sizeof(float), s, args);
}

template <class T>
void nsa_backward(const NsaBackwardArgs<T>& args, Stream stream) {
  const NsaParams<T>& p = args.params;
  check_head_dims("nsa_backward", p);
  const cudaStream_t s = alpha::cuda::stream_handle(stream);
  const int64_t blocks = nsa_compressed_blocks(p), rows = p.batch * blocks * p.kv_heads, l = p.block_len;
  const int64_t D = p.head_dim, Dv = p.value_dim;
  if (p.batch * p.kv_heads > 65535)
    raise<ShapeError>("nsa_backward", "batch·kv_heads", "at most 65535", std::to_string(p.batch * p.kv_heads));
  // f32 workspace: D_c per row [3, B, Hq, T]; dK̃ [rows, D], dṼ [rows, Dv]; dX_k [rows, l·D], dX_v [rows, l·Dv];
  // the column sums of dK̃, dṼ [D + Dv]; then the selection CSR's int32s (SelectionCsr).
  const int64_t n_delta = kNsaBranches * p.batch * p.q_heads * p.seq_len;
  const int64_t floats = n_delta + rows * (D + Dv) + rows * l * (D + Dv) + D + Dv;
  const int64_t groups = p.batch * p.kv_heads, NB = selection_blocks(p), chunks = csr_chunks(p);
  const int64_t csr_ints = groups * (chunks * NB + NB + 1 + p.seq_len * p.select_count);
  StreamScratch scratch(size_t(floats + csr_ints) * sizeof(float), s);
  float* delta = scratch.as<float>();
  float *dck = delta + n_delta, *dcv = dck + rows * D, *dx_k = dcv + rows * Dv, *dx_v = dx_k + rows * l * D;
  float *total_k = dx_v + rows * l * Dv, *total_v = total_k + D;
  SelectionCsr csr;
  csr.chunk_first = reinterpret_cast<int32_t*>(total_v + Dv);
  csr.offsets = csr.chunk_first + groups * chunks * NB;
  csr.queries = csr.offsets + groups * (NB + 1);
  // bf16/f16 on the tensor cores: the window branch by flash attention's backward, which the kernels below add.
  WindowGrads<T> window{};
#ifndef ALPHA_NSA_EMULATION
  std::optional<StreamScratch> window_memory;
  if constexpr (!std::is_same_v<T, float>)
    if (p.batch * p.seq_len * p.q_heads > 0 && tc::window_on_flash(p, args.in)) {
      window_memory.emplace(tc::window_scratch(p).total, s);
      window = tc::window_grads_as_flash(args, window_memory->template as<char>(), stream);
    }
#endif
  // The tensor-core query and key kernels where flash attention took the window and the shapes fit; else the FMA ones.
  int kd = 0;
#ifndef ALPHA_NSA_EMULATION
  if (window.dq != nullptr) kd = tc::head_bucket(p, args.in, args.compressed_k, args.compressed_v);
  std::optional<StreamScratch> key_memory;  // the tensor-core key side's span tables and partial sums
  if (kd != 0) key_memory.emplace(tc::key_side_scratch(p).total, s);
#endif
  auto key_grads = [&](bool compressed_keys) {
#ifndef ALPHA_NSA_EMULATION
    if constexpr (!std::is_same_v<T, float>) {
      char* scratch = kd != 0 ? key_memory->template as<char>() : nullptr;
      if (kd == 64)
        return tc::key_side<T, 64, 64>(args, delta, compressed_keys, csr, scratch, dx_k, dx_v, window, dck, dcv, s);
      if (kd == 128)
        return tc::key_side<T, 128, 128>(args, delta, compressed_keys, csr, scratch, dx_k, dx_v, window, dck, dcv, s);
      if (kd == 192)
        return tc::key_side<T, 192, 128>(args, delta, compressed_keys, csr, scratch, dx_k, dx_v, window, dck, dcv, s);
    }
#endif
    if (compressed_keys) launch_key_grads(args, delta, true, nullptr, nullptr, dck, dcv, csr, window, s);
    else launch_key_grads(args, delta, false, dx_k, dx_v, nullptr, nullptr, csr, window, s);
  };
  if (p.batch * p.seq_len * p.q_heads > 0) {
    if (kd == 0)
      launch_shared(query_grads_kernel<T>, "nsa_backward", dim3(query_grid(p)), query_threads(p),
                    size_t(query_layout(p, true).total) * sizeof(float), s, args, delta, window);
#ifndef ALPHA_NSA_EMULATION
    if constexpr (!std::is_same_v<T, float>) {
      if (kd == 64) tc::launch_query_grads<T, 64, 64>(args, delta, window, s);
      if (kd == 128) tc::launch_query_grads<T, 128, 128>(args, delta, window, s);
      if (kd == 192) tc::launch_query_grads<T, 192, 128>(args, delta, window, s);
    }
#endif
    key_grads(true);
    const dim3 chunk_grid{unsigned(chunks), unsigned(groups)};
    launch_shared(csr_count_kernel<T>, "nsa_backward", chunk_grid, kCsrChunk, size_t(NB) * sizeof(int32_t), s, p,
                  args.selected, csr);
    launch_shared(csr_offsets_kernel<T>, "nsa_backward", dim3(unsigned(groups)), 256, 0, s, p, csr);
    launch_shared(csr_fill_kernel<T>, "nsa_backward", chunk_grid, kCsrChunk,
                  size_t(NB + kCsrChunk * p.select_count) * sizeof(int32_t), s, p, args.selected, csr);
  }
  // dX = dK̃·W: [rows, l·D] = [rows, D]·[D, l·D].
  gemm(rows, l * D, D, RowMajor<float>{dck, D}, ColMajor<T>{args.in.k_weight, l * D}, Store<float>{dx_k, l * D}, s);
  gemm(rows, l * Dv, Dv, RowMajor<float>{dcv, Dv}, ColMajor<T>{args.in.v_weight, l * Dv}, Store<float>{dx_v, l * Dv},
       s);
  if (p.batch * p.seq_len * p.q_heads > 0) key_grads(false);
  // dW[e, f] = Σ_rows dK̃[row, e]·X[row, f]; dpos[f] = Σ_e W[e, f]·Σ_rows dK̃[row, e].
  using InputK = Transposed<CompressorInput<T>>;
  gemm(D, l * D, rows, ColMajor<float>{dck, D}, InputK{compressor_input(p, args.in.k, p.k_strides, args.in.k_pos, D)},
       Store<T>{args.dk_weight, l * D}, s);
  gemm(Dv, l * Dv, rows, ColMajor<float>{dcv, Dv},
       InputK{compressor_input(p, args.in.v, p.v_strides, args.in.v_pos, Dv)}, Store<T>{args.dv_weight, l * Dv}, s);
  gemm(1, D, rows, Ones{}, ColMajor<float>{dck, D}, Store<float>{total_k, D}, s);
  gemm(1, Dv, rows, Ones{}, ColMajor<float>{dcv, Dv}, Store<float>{total_v, Dv}, s);
  gemm(1, l * D, D, RowMajor<float>{total_k, 0}, ColMajor<T>{args.in.k_weight, l * D}, Store<T>{args.dk_pos, l * D}, s);
  gemm(1, l * Dv, Dv, RowMajor<float>{total_v, 0}, ColMajor<T>{args.in.v_weight, l * Dv}, Store<T>{args.dv_pos, l * Dv},
       s);
}

#define ALPHA_INSTANTIATE(T)                                                  \
  template void nsa_forward<T>(const NsaForwardArgs<T>& args, Stream stream); \
  template void nsa_backward<T>(const NsaBackwardArgs<T>& args, Stream stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
