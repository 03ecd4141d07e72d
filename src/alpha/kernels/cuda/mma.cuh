// Warp-level tensor-core building blocks for the bf16/f16 attention kernels: mma.sync m16n8k16 products
// with f32 accumulators (sm_80 and later; the sm_90a build runs them as HMMA), ldmatrix fragment loads from
// shared memory, cp.async 16-byte copies from global to shared memory, and the two warp products every
// attention pass is written in (A from shared memory or from registers, B from shared memory as stored or
// transposed). The fragment layouts are spelled out once, here.
//
// Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane = 4·g + t:
//   A, 16×16 row-major, 4 registers of two 16-bit values: a0 (row g, cols 2t, 2t+1), a1 (row g+8, same),
//     a2 (row g, cols 2t+8, 2t+9), a3 (row g+8, same);
//   B, 16×8 (k × n), 2 registers: b0 (k 2t, 2t+1; n g), b1 (k 2t+8, 2t+9; n g);
//   C, 16×8 f32: c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8, same).
// So the C tiles of columns [16k, 16k+8) and [16k+8, 16k+16) of a product, rounded to 16 bits in pairs,
// are the A fragment of k-step k of the next product: P = exp(S − m) goes from the registers that computed S
// straight into P·V, and dS into dS·K, with no trip through shared memory.
//
// Shared tiles hold 16-bit elements with rows padded by 8 elements (16 bytes): the 8 rows one 8×8 ldmatrix
// reads then start in 8 different 16-byte bank groups, so loads are free of bank conflicts.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "alpha/core/dtype.h"

namespace alpha::kernels::cuda::mma {

struct FragA {
  uint32_t x[4];
};
struct FragB {
  uint32_t x[2];
};
struct FragC {
  float x[4];
};

// c += a·b for T = bf16 or f16 operands.
template <class T>
__device__ __forceinline__ void mma(FragC& c, const FragA& a, const FragB& b) {
  if constexpr (std::is_same_v<T, bf16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3])
        : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
  } else {
    static_assert(std::is_same_v<T, f16>, "mma takes bf16 or f16");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3])
        : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
  }
}

// Two f32 values rounded to T (nearest even) in one register, `low` at the lower address.
template <class T>
__device__ __forceinline__ uint32_t pack2(float low, float high) {
  uint32_t word;
  if constexpr (std::is_same_v<T, bf16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(low, high);
    word = *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(low, high);
    word = *reinterpret_cast<const uint32_t*>(&v);
  }
  return word;
}

__device__ __forceinline__ uint32_t shared_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// ldmatrix: lanes 8m .. 8m+7 give the addresses of the 8 rows (16 bytes each) of matrix m; register m
// receives matrix m in the A/B fragment order (thread lane holds row lane/4, elements 2·(lane%4) and +1; with
// .trans, the transposed matrix).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// 16 bytes from global to shared memory without passing through registers; with `valid` false the 16
// bytes are zero-filled and nothing is read (src must still be a valid address).
__device__ __forceinline__ void copy_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// A shared tile of kRows × kCols 16-bit elements, rows padded by 8 elements.
template <int kRows, int kCols>
struct SharedTile {
  static_assert(kCols % 16 == 0, "tiles are whole 16-column k-steps");
  static constexpr int kStride = kCols + 8;
  static constexpr int kElements = kRows * kStride;
  uint16_t* data;
  __device__ uint16_t* at(int row, int col) const { return data + row * kStride + col; }
  // The tile `index` tiles past this one (stages of a ring laid out back to back), without indexing an
  // array of tiles by a run-time value, which would put the array in local memory.
  __device__ SharedTile next(int index) const { return {data + index * kElements}; }
};

// Starts copying rows [first, first + kRows) of a global operand (row r at rows + r·row_stride, `width`
// elements wide, width and row_stride multiples of 8, rows 16-byte aligned) into `tile`, by the kThreads
// threads of the block; rows at or past `total` and columns at or past `width` are zero-filled. Completes at
// copy_async_wait. When whole rows of 16-byte chunks divide among the threads, each thread's chunks sit in
// one column at a fixed row step, so the per-chunk work is a pointer increment. `thread` is the caller's rank
// among the kThreads (a warp loading a tile of its own passes its lane).
template <int kThreads, int kRows, int kCols>
__device__ __forceinline__ void load_tile_async(SharedTile<kRows, kCols> tile, const uint16_t* rows, int64_t row_stride,
                                                int64_t first, int64_t total, int width,
                                                int thread = int(threadIdx.x)) {
  constexpr int kChunksPerRow = kCols / 8;
  if constexpr (kThreads % kChunksPerRow == 0) {
    constexpr int kRowStep = kThreads / kChunksPerRow;
    const int col = thread % kChunksPerRow * 8, row0 = thread / kChunksPerRow;
    const int64_t rows_left = total - first - row0;  // this thread's row pass·kRowStep exists iff below
    const uint16_t* src = rows + (first + row0) * row_stride + col;
#pragma unroll
    for (int pass = 0; pass * kRowStep < kRows; ++pass) {
      if (kRows % kRowStep != 0 && row0 + pass * kRowStep >= kRows) break;
      const bool valid = pass * kRowStep < rows_left && col < width;
      copy_async16(tile.at(row0 + pass * kRowStep, col), valid ? src + pass * kRowStep * row_stride : rows, valid);
    }
  } else {
#pragma unroll 4
    for (int e = thread; e < kRows * kChunksPerRow; e += kThreads) {
      const int r = e / kChunksPerRow, col = e % kChunksPerRow * 8;
      const bool valid = first + r < total && col < width;
      copy_async16(tile.at(r, col), valid ? rows + (first + r) * row_stride + col : rows, valid);
    }
  }
}

// The A fragment of rows [row0, row0 + 16), columns [k0, k0 + 16) of a row-major tile.
template <int kRows, int kCols>
__device__ __forceinline__ void load_a(FragA& a, SharedTile<kRows, kCols> tile, int row0, int k0, int lane) {
  ldmatrix_x4(a.x, tile.at(row0 + lane % 16, k0 + 8 * (lane / 16)));
}

// The A fragment of rows [m0, m0 + 16), columns [k0, k0 + 16) of A = tileᵀ (the tile holds A's columns as
// rows: tile[k][m], as the key-major dSᵀ does for dQ = dS·K): ldmatrix.trans hands lane 4g + t the pair
// (k 2t, 2t+1; m g) of each 8×8 block, which is A's (row g, cols 2t, 2t+1).
template <int kRows, int kCols>
__device__ __forceinline__ void load_a_transposed(FragA& a, SharedTile<kRows, kCols> tile, int m0, int k0, int lane) {
  ldmatrix_x4_trans(a.x, tile.at(k0 + lane % 8 + 8 * (lane / 16), m0 + 8 * ((lane / 8) % 2)));
}

// B fragments of n-tiles n0 and n0 + 8 at k-step [k0, k0 + 16) for B = tileᵀ (the tile holds B's columns
// as rows: tile[n][k], as K does for S = Q·Kᵀ).
template <int kRows, int kCols>
__device__ __forceinline__ void load_b_pair_transposed(FragB (&b)[2], SharedTile<kRows, kCols> tile, int n0, int k0,
                                                       int lane) {
  uint32_t r[4];
  ldmatrix_x4(r, tile.at(n0 + lane % 8 + 8 * (lane / 16), k0 + 8 * ((lane / 8) % 2)));
  b[0] = {r[0], r[1]};
  b[1] = {r[2], r[3]};
}

// B fragments of n-tiles n0 and n0 + 8 at k-step [k0, k0 + 16) for B = tile (tile[k][n], as V for P·V).
template <int kRows, int kCols>
__device__ __forceinline__ void load_b_pair(FragB (&b)[2], SharedTile<kRows, kCols> tile, int k0, int n0, int lane) {
  uint32_t r[4];
  ldmatrix_x4_trans(r, tile.at(k0 + lane % 16, n0 + 8 * (lane / 16)));
  b[0] = {r[0], r[1]};
  b[1] = {r[2], r[3]};
}

// acc[m][n] (16 × 8 each) += A·Bᵀ over k in [0, kK): A rows [a_row0 + 16m, +16) of `a`, B's columns rows
// [b_row0 + 8n, +8) of `bt` (both row-major over k). kN counts 8-column tiles and is even.
template <class T, int kM, int kN, int kK, int kRowsA, int kColsA, int kRowsB, int kColsB>
__device__ __forceinline__ void warp_product_abt(FragC (&acc)[kM][kN], SharedTile<kRowsA, kColsA> a, int a_row0,
                                                 SharedTile<kRowsB, kColsB> bt, int b_row0, int lane) {
  static_assert(kN % 2 == 0 && kK % 16 == 0, "B fragments come in pairs of n-tiles, k in 16-steps");
#pragma unroll
  for (int k = 0; k < kK / 16; ++k) {
    FragA frag_a[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) load_a(frag_a[m], a, a_row0 + 16 * m, 16 * k, lane);
#pragma unroll
    for (int n = 0; n < kN; n += 2) {
      FragB frag_b[2];
      load_b_pair_transposed(frag_b, bt, b_row0 + 8 * n, 16 * k, lane);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        mma<T>(acc[m][n], frag_a[m], frag_b[0]);
        mma<T>(acc[m][n + 1], frag_a[m], frag_b[1]);
      }
    }
  }
}

// acc[m][n] += A·B over k in [0, kK): A from registers (a[m][k-step]), B rows [b_row0 + k) and columns
// [b_col0 + 8n, +8) of the row-major tile `b` (tile[k][n]).
template <class T, int kM, int kN, int kK, int kRowsB, int kColsB>
__device__ __forceinline__ void warp_product_ab(FragC (&acc)[kM][kN], const FragA (&a)[kM][kK / 16],
                                                SharedTile<kRowsB, kColsB> b, int b_row0, int b_col0, int lane) {
  static_assert(kN % 2 == 0 && kK % 16 == 0, "B fragments come in pairs of n-tiles, k in 16-steps");
#pragma unroll
  for (int k = 0; k < kK / 16; ++k) {
#pragma unroll
    for (int n = 0; n < kN; n += 2) {
      FragB frag_b[2];
      load_b_pair(frag_b, b, b_row0 + 16 * k, b_col0 + 8 * n, lane);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        mma<T>(acc[m][n], a[m][k], frag_b[0]);
        mma<T>(acc[m][n + 1], a[m][k], frag_b[1]);
      }
    }
  }
}

// The A fragments of a product's C tiles (kN 8-column tiles = kN / 2 k-steps), rounded to T.
template <class T, int kM, int kN>
__device__ __forceinline__ void to_a_fragments(FragA (&a)[kM][kN / 2], const FragC (&c)[kM][kN]) {
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int k = 0; k < kN / 2; ++k) {
      const FragC& left = c[m][2 * k];
      const FragC& right = c[m][2 * k + 1];
      a[m][k] = {pack2<T>(left.x[0], left.x[1]), pack2<T>(left.x[2], left.x[3]), pack2<T>(right.x[0], right.x[1]),
                 pack2<T>(right.x[2], right.x[3])};
    }
}

template <int kM, int kN>
__device__ __forceinline__ void zero(FragC (&acc)[kM][kN]) {
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int n = 0; n < kN; ++n) acc[m][n] = {0.0f, 0.0f, 0.0f, 0.0f};
}

}  // namespace alpha::kernels::cuda::mma
