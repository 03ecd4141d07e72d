// The one table of tolerances, for the test suite and the kernel correctness harness (`alpha check
// kernels`). A comparison passes when, for every element, |got − want| <= abs + rel·|want|. Rows are
// looked up by (check, dtype); a missing row is an error, so every tolerance in the project is visible here.
//
// Rows named after a kernel family compare a CPU kernel in f32 or f64 with a naive f64 loop (the tests).
// Rows named "cuda.<family>" compare a CUDA kernel, in the dtype it ran in, with the CPU kernel in f64 on
// the same (already rounded) inputs (the harness). f32 rows there are at most 1e-4.
// bf16 and f16 inputs are exact in both computations, and the CUDA kernels compute in f32, so what they
// add is one rounding of each output to the storage type, at most half an ulp: the unit roundoff
// u = 2⁻⁸ ≈ 3.9e-3 relative for bf16 (8 significant bits), 2⁻¹¹ ≈ 4.9e-4 for f16 (11 bits). A kernel with
// no rounding but the output's gets a row just above u; kernels that round intermediates (a GEMM's output
// feeding an epilogue, a stored activation) allow about four u, plus an absolute floor for outputs that are
// small differences of large terms (layernorm's dx, a GEMM whose terms cancel), where one ulp of the terms
// is the natural unit.
// bf16/f16 attention, whose kernels round intermediates (P, dS) as FlashAttention does, is judged by another
// rule, relative to naive attention computed in the same precision (naive_attention_bound, at the end).
#pragma once
#include <string_view>

#include "alpha/core/dtype.h"

namespace alpha::check {

struct Tolerance {
  double abs;
  double rel;
};

struct ToleranceRow {
  std::string_view check;
  DType dtype;
  Tolerance tol;
};

inline constexpr ToleranceRow kTolerances[] = {
    // Forward and backward kernels against naive f64 loops.
    {"elementwise", DType::f32, {1e-6, 1e-6}},
    {"elementwise", DType::f64, {1e-13, 1e-13}},
    // sum: abs is per unit of Σ|x| (the test scales it), since cancellation leaves the rounding of the
    // partial sums in a small result; f32 blocks accumulate n·2⁻²⁴ worst case, √n typical.
    {"sum", DType::f32, {1e-6, 1e-5}},
    {"sum", DType::f64, {1e-14, 1e-12}},
    // f32 matmul: K up to 256 terms of magnitude ~1 that may cancel; f32 rounding of the partial sums
    // then leaves ~√K·2⁻²⁴·K ≈ 1e-5 absolute worst case in the result, hence 5e-5. bf16/f16 operands into an
    // f32 output take the f32 row: the CPU kernel widens them exactly and multiplies in f32.
    {"matmul", DType::f32, {5e-5, 1e-5}},
    {"matmul", DType::f64, {1e-11, 1e-11}},
    {"layernorm", DType::f32, {1e-5, 1e-5}},
    {"layernorm", DType::f64, {1e-11, 1e-11}},
    {"activation", DType::f32, {1e-6, 1e-5}},
    {"activation", DType::f64, {1e-12, 1e-12}},
    {"softmax", DType::f32, {1e-6, 1e-5}},
    {"softmax", DType::f64, {1e-12, 1e-12}},
    {"embedding", DType::f32, {1e-6, 1e-6}},
    {"embedding", DType::f64, {1e-12, 1e-12}},
    {"cross_entropy", DType::f32, {1e-5, 1e-5}},
    {"cross_entropy", DType::f64, {1e-11, 1e-11}},
    // The fused head and loss (ops/linear_cross_entropy.h) against linear then cross-entropy in f64: two
    // short GEMMs and the chunks' loss sum on top of cross_entropy's rounding.
    {"linear_cross_entropy", DType::f32, {1e-5, 1e-5}},
    {"linear_cross_entropy", DType::f64, {1e-12, 1e-11}},
    {"dropout", DType::f32, {1e-6, 1e-6}},
    {"dropout", DType::f64, {1e-13, 1e-13}},
    {"adamw", DType::f32, {1e-6, 1e-5}},
    {"adamw", DType::f64, {1e-12, 1e-12}},
    {"grad_norm", DType::f32, {1e-5, 1e-5}},
    {"grad_norm", DType::f64, {1e-11, 1e-11}},
    {"attention", DType::f32, {2e-5, 1e-4}},
    {"attention", DType::f64, {1e-11, 1e-10}},
    // The harness's naive low-precision attention (check/naive_low_precision_attention.h) against the f64
    // reference: abs is per unit of the output's largest |want| (the test scales it), as its roundings of
    // intermediates (P, dS, the products) add errors relative to the terms rather than to each output.
    // With u = 2⁻⁸ (bf16), 2⁻¹¹ (f16) it is found within 1.7·u·max|want|, on the tests' cases and the
    // harness's; four u: 1.6e-2, 2.0e-3.
    {"naive_low_precision_attention", DType::bf16, {1.6e-2, 0}},
    {"naive_low_precision_attention", DType::f16, {2.0e-3, 0}},
    // Analytic gradients (f64) against central finite differences.
    {"gradcheck", DType::f64, {1e-6, 1e-5}},
    // NSA (kernels/nsa_reference.h): the reference against the naive f64 oracle, and f32 against f64 on the
    // same inputs (the bar is a relative error below 1e-3). f32: dot products over D <= 16, softmax
    // sums over up to ~1000 keys, the compressor's l·D-term products, and gradient sums over the group's
    // queries and (for the compressor's weights) every block of every batch: found within 7.1e-7 absolute on
    // O(1) outputs and 3.2e-6 on the compressor's weight gradients at T <= 65: abs 1e-5, rel 1e-4. Gradients
    // take abs per unit of their largest |want| where that exceeds 1 (the test scales it): the compressor's
    // weight gradients grow with T (up to 39 at T = 2051, G = 4, where the error was 5.1e-5, 1.3e-6 of it).
    // f64: the oracle sums in the kernel's order and was found bit-identical; the row leaves room for another.
    {"nsa", DType::f32, {1e-5, 1e-4}},
    {"nsa", DType::f64, {1e-12, 1e-11}},
    // The CUDA NSA kernels (kernels/cuda/nsa.cu) against the f64 reference on the same (bf16-exact) inputs and the
    // same kept blocks (tests/kernels/test_nsa_cuda.cpp); abs per unit of the largest |want| where that exceeds 1,
    // as "nsa" (dk_pos, 0 in exact arithmetic, per unit of dk_weight's). Measured so far only by running the kernels'
    // code on the CPU (bench/nsa_emulate.sh: the same f32 arithmetic, T <= 600, D <= 192, G <= 16): f32 within
    // 7.8e-6 (dk_pos 3.4e-6 of max|dk_weight|); bf16, whose outputs, compressed keys and values and stored branch
    // outputs are rounded (u = 2⁻⁸), within 1.6e-2 (dk, dq, dk_weight; dk_pos 2.4e-2). f32: 5e-5 absolute, 1e-4
    // relative (the bar is 1e-3); bf16: 4e-2 both, about ten u. Tighten them to what the H100 shows
    // (scripts/nsa-gpu.sh prints each output's error).
    {"cuda.nsa", DType::f32, {5e-5, 1e-4}},
    {"cuda.nsa", DType::bf16, {4e-2, 4e-2}},
    // Attention JVP (ops/attention_jvp.h): the fused form against the reference forward and the saved-
    // statistics form, and f32 against f64 (the bar is a relative error below 1e-3). The same dot
    // products (D <= 16) and softmax sums (Tk <= 33) as "attention", plus the online rescaling and the
    // tangent's sums of P·tS·V (terms ~1 that cancel through μ): found within 2.4e-7 absolute on O(1)
    // outputs in f32 (4u; 3.8e-7 of the largest output at most) and 3.6e-15 in f64; l (up to ~25) within
    // 2e-6 in f32, which rel covers.
    {"attention_jvp", DType::f32, {2e-6, 1e-5}},
    {"attention_jvp", DType::f64, {1e-13, 1e-12}},
    // The f64 JVP against central differences of the f64 forward at step h = 1e-5: truncation h²/6 times the
    // third derivative along the tangent (largest through a tight softcap: found up to 3.2e-9 absolute at
    // c = 0.5, below 1e-10 without) plus rounding u·|O|/h ≈ 1e-11; 2e-8 absolute, 1e-7 relative.
    {"attention_jvp.finite_difference", DType::f64, {2e-8, 1e-7}},
    // Attention HVP (ops/attention_hvp.h). abs is per unit of max|H·v| over hq, hk and hv (the test scales
    // it): a finite difference's error is relative to the whole HVP, not to each element. The exact f64 HVP
    // against Richardson-extrapolated central differences of the f64 backward ((4·C(h/2) − C(h))/3 at
    // h = 1e-3): truncation O(h⁴) times the fifth derivative, largest through a tight softcap (found up to
    // 2.3e-9 at c = 0.5, scale 0.9; ~1e-12 without), plus rounding ~u·|∇f|/h ≈ 1e-13: 2e-8.
    {"attention_hvp", DType::f64, {2e-8, 0}},
    // ⟨u, H·v⟩ − ⟨v, H·u⟩ per unit of Σ|u∘H·v| + Σ|v∘H·u|: both are the exact HVP's f64 sums, whose rounding
    // is relative to their terms (found up to 2e-16); 1e-13 leaves room for the cancellation inside each
    // element, and is nine orders below what an asymmetric (wrong) Hessian gives.
    {"attention_hvp.symmetry", DType::f64, {1e-13, 0}},
    // ops::attention_hvp against the exact HVP at the eps docs/ATTENTION_DERIVATIVES.md recommends. f64 at
    // eps = 1e-5: truncation eps²/6 times the third derivative (found up to 1.5e-8 at softcap c = 0.5, ~1e-10
    // without) plus rounding ~u/eps ≈ 1e-11: 1e-7. f32 at eps = 3e-3: rounding of the two f32 backward
    // passes, about 10·u·|∇f|/eps (the sums of Tk·(D + Dv) terms), plus truncation: found up to 2.5e-4
    // without a softcap and 1.4e-3 with c = 0.5, scale 0.9 (where truncation dominates): 4e-3.
    {"attention_hvp.central_difference", DType::f64, {1e-7, 0}},
    {"attention_hvp.central_difference", DType::f32, {4e-3, 0}},

    // CUDA kernels against the CPU kernel in f64 (the harness). Element-wise add, mul, scale and axpy round
    // exactly as the CPU does (one f32 rounding per operation, then one to T): any difference is a bug.
    {"cuda.elementwise", DType::f32, {1e-6, 1e-6}},
    {"cuda.elementwise", DType::bf16, {1e-6, 4e-3}},
    {"cuda.elementwise", DType::f16, {1e-6, 5e-4}},
    // sum: f32 partials in a different tree than the f64 reference; abs is per unit of Σ|x| (see "sum").
    {"cuda.sum", DType::f32, {1e-6, 1e-5}},
    {"cuda.sum", DType::bf16, {1e-6, 1e-5}},
    {"cuda.sum", DType::f16, {1e-6, 1e-5}},
    // The row kernels below round each output once to bf16 or f16 after computing in f32. Rounding to
    // nearest is off by at most half an ulp, which relative to the value is up to 2⁻⁸ ≈ 3.9e-3 for bf16 (8
    // significant bits: just above a power of two an ulp is 2⁻⁷ of the value) and 2⁻¹¹ ≈ 4.9e-4 for f16;
    // their rows allow about two such roundings (8e-3, 1e-3), the f32 computation's error riding on top.
    // layernorm: f32 statistics over up to 1M elements per row (each thread sums ~2000 in order, then a
    // fixed tree) put ~1e-6 relative into rstd; abs covers outputs near 0 (dx is a difference of O(1) terms).
    // dweight and dbias add 1e-7 of abs per row summed (the check scales it): f32 partial sums over
    // thousands of rows.
    {"cuda.layernorm", DType::f32, {1e-5, 1e-5}},
    {"cuda.layernorm", DType::bf16, {1e-5, 8e-3}},
    {"cuda.layernorm", DType::f16, {1e-5, 1e-3}},
    // gelu, softcap: tanhf is within 2 ulps, but gelu_backward's 1 − t² cancels as |t| → 1: with t one ulp
    // off, ½x(1 − t²)·du is ~2e-6 off in absolute terms at |x| = 5, where the result is near 0.
    {"cuda.activation", DType::f32, {5e-6, 1e-5}},
    {"cuda.activation", DType::bf16, {5e-6, 8e-3}},
    {"cuda.activation", DType::f16, {5e-6, 1e-3}},
    // softmax: abs is per unit of the largest y (the check scales it): the backward's y·(dy − Σ dy·y) carries
    // y times the f32 error of Σ dy·y, which cancels where dy ≈ Σ dy·y; outputs are otherwise relative.
    {"cuda.softmax", DType::f32, {1e-6, 1e-5}},
    {"cuda.softmax", DType::bf16, {1e-6, 8e-3}},
    {"cuda.softmax", DType::f16, {1e-6, 1e-3}},
    // cross_entropy: lse and loss are f32 outputs (x − lse rounds to ~1e-6 absolute at |lse| ≈ 15); dlogits'
    // abs is per unit of the gradient factor dloss / counted (the check scales it), since p_j ranges down to
    // 1e-8 and below while its error stays relative.
    {"cuda.cross_entropy", DType::f32, {1e-6, 1e-5}},
    {"cuda.cross_entropy", DType::bf16, {1e-6, 8e-3}},
    {"cuda.cross_entropy", DType::f16, {1e-6, 1e-3}},
    // The fused head and loss on the GPU against linear then cross-entropy in f32 on the GPU, from the same
    // inputs, every value divided by the largest |reference| of its tensor: bf16 rounds the logits, dlogits,
    // the chunks' dW (before their f32 sum) and dx, each by up to 2⁻⁸ relative.
    {"cuda.linear_cross_entropy", DType::f32, {1e-5, 1e-4}},
    {"cuda.linear_cross_entropy", DType::bf16, {2e-2, 2e-2}},
    {"cuda.linear_cross_entropy", DType::f16, {2e-3, 2e-3}},  // the loss alone (no f16 gradients)
    // embedding: the lookup copies bits; the backward rounds the CPU's own f64 sum once to f32 (2⁻²⁴ relative)
    // and then to the dtype (one rounding, see above; f16's abs for its subnormals, spaced 6e-8). The check
    // also compares bits with the CPU kernel's f64 result rounded to the dtype.
    {"cuda.embedding", DType::f32, {1e-12, 1e-7}},
    {"cuda.embedding", DType::bf16, {1e-12, 4e-3}},
    {"cuda.embedding", DType::f16, {3e-8, 5e-4}},
    // GEMM and its epilogues (inputs in [-1, 1]). The checks scale abs: it is per unit of K (times |alpha|),
    // plus rel per unit of the largest intermediate magnitude (the largest |output| or |pre-activation|).
    // Per unit of K: f32 accumulation of K products, about K·2⁻²⁴/3 for sequential sums, far less for
    // cuBLAS's blocked ones; 1e-6 is 16·2⁻²⁴ per term. Per unit of the largest intermediate: an epilogue may
    // round the pre-activation (or the product before a bias) to T before applying GELU or the bias, an
    // error relative to that intermediate, not to the output, which can be far smaller (GELU of a negative
    // value, a product cancelled by its bias). rel: f32 1e-5 covers tanhf and the rounding of alpha·p + beta·c
    // (f32 GELU/DGELU epilogues run in our kernel with accurate tanhf: cuBLASLt's f32 GELU uses an
    // approximate tanh, about 2e-4 relative). A bf16 rounding is up to 2⁻⁸ ≈ 3.9e-3 relative (8 significant
    // bits: half an ulp just above a power of two), an f16 one 2⁻¹¹ ≈ 4.9e-4 (11 bits): bf16 allows four,
    // 1.6e-2; f16 eight, 3.9e-3, since cuBLASLt's fused GELU adds its approximate tanh (≈ 2⁻¹¹) to the
    // output's and the pre-activation's roundings. bf16/f16 operands into an f32 output (GemmArgs<T, float>,
    // its bias gradient, column_sum into f32) take the f32 rows here and below: their products are exact in f32
    // and accumulate as f32 ones do, with no rounding to 16 bits.
    {"cuda.matmul", DType::f32, {1e-6, 1e-5}},
    {"cuda.matmul", DType::bf16, {1e-6, 1.6e-2}},
    {"cuda.matmul", DType::f16, {1e-6, 3.9e-3}},
    // f32 with TF32 allowed: tensor cores round each input to 10 explicit mantissa bits (relative error up
    // to 2⁻¹¹ ≈ 4.9e-4), so each product carries up to 2·2⁻¹¹ and the K products' independent errors add to
    // a few 1e-4 of the output's scale; fused GELU adds the approximate tanh (≈ 2⁻¹¹). 8·2⁻¹¹ ≈ 3.9e-3 bounds
    // them relative to each output and, through the scaled abs, to the largest intermediate.
    {"cuda.matmul.tf32", DType::f32, {1e-6, 3.9e-3}},
    // Bias gradients of a GEMM (sums over the rows of its output or of a), compared with the f64 column sums
    // of the values the GPU stored (c) or was given (a); abs is per unit of the largest column's Σ|x|. f32:
    // rounding of f32 partial sums. bf16/f16: cuBLASLt may sum the outputs before their rounding to T, up to
    // 2⁻⁸ (bf16) or 2⁻¹¹ (f16) of each |x|, then round the sum once: twice the rounding, as abs and rel.
    {"cuda.matmul.bias_grad", DType::f32, {1e-5, 1e-5}},
    {"cuda.matmul.bias_grad", DType::bf16, {7.8e-3, 7.8e-3}},
    {"cuda.matmul.bias_grad", DType::f16, {9.8e-4, 9.8e-4}},
    // column_sum of exact inputs: f32 partial sums in a fixed order (a chunk's 1024 rows strided over 8
    // threads, an 8-way tree, then the chunks' partials the same way): at 1M rows at most about
    // (127 + 3 + 127 + 3)·2⁻²⁴ ≈ 1.6e-5 of the column's Σ|x|, typically √260·2⁻²⁴ ≈ 1e-6 with random signs:
    // abs 1e-5 per unit of Σ|x|. rel: one rounding of the sum to T, doubled (bf16 2·2⁻⁸, f16 2·2⁻¹¹).
    {"cuda.column_sum", DType::f32, {1e-5, 1e-5}},
    {"cuda.column_sum", DType::bf16, {1e-5, 7.8e-3}},
    {"cuda.column_sum", DType::f16, {1e-5, 9.8e-4}},
    // The unit roundoff of a rounding to bf16 (8 significant bits) is 2⁻⁸ ≈ 3.9e-3 relative, to f16 (11 bits)
    // 2⁻¹¹ ≈ 4.9e-4: the rows below that round their outputs once allow that much, plus the f32 work.
    // dropout, residual_dropout_add: equal to the CPU kernel in f32 bit for bit (checked); against f64 that
    // is one f32 rounding of scale·x and one of the sum, 2⁻²⁴ of terms up to ~2.5 (abs), then for bf16/f16
    // one rounding to T.
    {"cuda.dropout", DType::f32, {1e-6, 1e-6}},
    {"cuda.dropout", DType::bf16, {1e-6, 4e-3}},
    {"cuda.dropout", DType::f16, {1e-6, 5e-4}},
    // adamw: equal to the CPU kernel in f32 bit for bit (checked), so the f32 row is the CPU's "adamw"
    // (f32 rounding of m's and param's sums of terms ~1: abs 1e-6); bf16/f16 add one rounding of each output.
    // Mixed precision compares the f32 master with the f32 row and the compute copy with its dtype's row.
    {"cuda.adamw", DType::f32, {1e-6, 1e-5}},
    {"cuda.adamw", DType::bf16, {1e-6, 4e-3}},
    {"cuda.adamw", DType::f16, {1e-6, 5e-4}},
    // A stochastically rounded compute copy lands on either neighbour: up to one gap (2u) from f64, plus the
    // f32 work; f16's subnormals (gap 2⁻²⁴) sit under the abs floor.
    {"cuda.adamw.stochastic_rounding", DType::bf16, {1e-6, 8e-3}},
    {"cuda.adamw.stochastic_rounding", DType::f16, {1e-6, 1e-3}},
    // sum_squares and the global norm (f64 results for every input dtype, rows by input dtype): squares are
    // exact in f64; the sums are added in another order than the CPU's, n·2⁻⁵³ relative at worst
    // (1e-10 for n = 10⁶), ~√n·2⁻⁵³ typically.
    {"cuda.grad_norm", DType::f32, {1e-12, 1e-10}},
    {"cuda.grad_norm", DType::bf16, {1e-12, 1e-10}},
    {"cuda.grad_norm", DType::f16, {1e-12, 1e-10}},
    // Materialising attention: f32 accumulation throughout (dot products over D ≤ 128, softmax sums over
    // Tk ≤ 512, gradient sums over group·Tq ≤ 512 terms), a few ulps of expf/tanhf, as the CPU's f32
    // "attention" row; row_max and row_sum are f32 for every dtype and use the f32 row. The harness judges
    // bf16/f16 outputs by naive_attention_bound (below), whose floor takes the f32 row's abs. The bf16/f16
    // rows serve the ops-level test against the CPU in f32 (tests/cuda/test_cuda_philox.cpp): inputs exact
    // in both computations and P kept in f32, so the outputs add one rounding to T (2⁻⁸, 2⁻¹¹) over the f32
    // error, which cancellation in dq/dk (sums of terms of both signs) makes absolute: 2e-5.
    {"cuda.attention", DType::f32, {2e-5, 1e-4}},
    {"cuda.attention", DType::bf16, {2e-5, 5e-3}},
    {"cuda.attention", DType::f16, {2e-5, 1e-3}},
    // Flash attention in f32 (the bar is a relative error below 1e-3; these are tighter): the
    // materialising kernels' error sources (f32 FMA dot products over D ≤ 256, a few ulps of expf/tanhf, rows
    // up to Tk = 4099 keys, dK/dV sums over group·Tq ≤ 8198 terms) plus the online softmax, which rescales l and
    // the output accumulator by exp(m_old − m_new) once per key tile (about Tk / 32 extra roundings of 2⁻²⁴
    // each: < 1e-5 relative at Tk = 4099). Same bounds as cuda.attention, with the absolute floor raised to 3e-5
    // for the longer sums; row_max and row_sum (f32 for every dtype) use this row. bf16/f16 outputs are
    // judged by naive_attention_bound (below), whose floor takes this row's abs.
    {"cuda.flash_attention", DType::f32, {3e-5, 1e-4}},
    // The atomic-dQ backward's dq (config.deterministic false) against the deterministic backward's: both
    // round f32 sums of the same dS·K terms to T, in different orders and with dS from Q·Kᵀ or (K·Qᵀ)ᵀ, so
    // they differ by a few units in T's last place (2⁻⁸, 2⁻¹¹ relative) on |dq| ~ 1 entries.
    {"cuda.flash_attention.atomic_dq", DType::bf16, {2e-2, 2e-2}},
    {"cuda.flash_attention.atomic_dq", DType::f16, {3e-3, 3e-3}},
    // The attention JVP (kernels/cuda/attention_jvp.cu). f32: the FMA kernels, f32 throughout (the scores'
    // and tangent scores' dot products over D <= 256, row sums over Tk <= 4099 keys, the online rescaling
    // once per key tile as flash attention's), the flash row's error sources, with tO = acc − μ∘O a difference
    // of terms about as large as itself (within the f32 abs); row_max and row_sum (f32 for every dtype) use
    // it too. bf16/f16: the saved-statistics form runs the FMA kernel, whose inputs are exact in both
    // computations and which keeps P, tS and their products in f32, so its output adds one rounding to T (at
    // most 2⁻⁸ bf16, 2⁻¹¹ f16 relative) to the f32 error, as cuda.attention's bf16/f16 rows. The fused form's
    // bf16/f16 out and tangent (the tensor-core kernel rounds e and e·tS to T before its products) are judged
    // by naive_attention_bound against the naive JVP in the same precision, whose floor takes the f32 abs.
    {"cuda.attention_jvp", DType::f32, {3e-5, 1e-4}},
    {"cuda.attention_jvp", DType::bf16, {3e-5, 5e-3}},
    {"cuda.attention_jvp", DType::f16, {3e-5, 1e-3}},
    // The attention HVP on a GPU (ops::attention_hvp: central differences of flash attention's backward in
    // f32 at eps = 3e-3, bf16/f16 operands promoted) against the exact f64 HVP on the same values; abs per
    // unit of max|H·v| over hq, hk and hv (the test scales it). f32: the f32 CPU op's bound
    // (attention_hvp.central_difference), the flash backward's f32 sums being as long as the reference's.
    // bf16/f16 add the rounding of the result to T, at most half an ulp of max|H·v| (2⁻⁹, 2⁻¹²).
    {"cuda.attention_hvp", DType::f32, {4e-3, 0}},
    {"cuda.attention_hvp", DType::bf16, {6e-3, 0}},
    {"cuda.attention_hvp", DType::f16, {4.3e-3, 0}},
};

// Throws std::out_of_range for a missing row.
Tolerance tolerance(std::string_view check, DType dtype);

// The "cuda.layernorm" row for dweight and dbias, sums over `rows` rows: its abs grows by 1e-7 per row summed,
// since f32 partial sums of `rows` terms of size up to ~2 keep a rounding error that grows with them.
Tolerance layernorm_param_grad_tolerance(DType dtype, int64_t rows);

// bf16 and f16 attention (out, dq, dk, dv of the harness's attention checks) against naive attention
// computed in the same precision (check/naive_low_precision_attention.h: every product and intermediate
// rounded to T, as PyTorch's math SDPA path computes), both measured against the f64 reference. The usual
// criterion in the field: ours passes iff
//   max|got − want| <= kNaiveErrorFactor · max|naive − want| + floor,
//   floor = ½·u·max|want| + the abs of the check's f32 row,
// with u the unit roundoff of T (2⁻⁸ bf16, 2⁻¹¹ f16). The floor keeps a case in which the naive computation
// happens to be exact, or nearly, from failing spuriously. Its first term is less than one rounding of the
// largest output to T (half an ulp is at least ½·u of the value): what a kernel computing in f32 and
// rounding once may be off where the naive roundings all land exactly (Tk = 1: out = v, dv = dout). Its
// second is the f32 error the kernel's internals may leave where an output cancels to 0 (dq and dk of rows
// that see one key: the naive dP − rowsum(dP∘P) cancels exactly, the kernel's f32 dP − D, summed in another
// order, does not), which the f32 row bounds: the f32 kernel is held to no less. The naive error is 0.4 to
// 1.7 u·max|want|, so on the harness's cases (computed on the CPU) the floor is 12% to 48% of the bound, all
// of it where the naive result is exact: in effect ours may be 2.3 to 3.8 times as far off as the naive
// computation (the most for f16 gradients below 0.05, where the f32 abs weighs most).
inline constexpr double kNaiveErrorFactor = 2.0;

// The largest max|got − want| the rule above allows an output in `dtype` (bf16 or f16; DTypeError for
// another) of the check whose f32 row is `check`, given the naive computation's max|naive − want| and the
// reference's max|want|.
double naive_attention_bound(std::string_view check, DType dtype, double naive_max_abs, double want_max_abs);

// The absolute error of rounding a value to `dtype` where its spacing stops shrinking: half the spacing of
// f16's subnormals (below 6.1e-5), 2⁻²⁵ ≈ 3.0e-8. bf16 and f32 share f32's range (subnormals below 1e-38): 0.
// A check that scales a row's abs down to the size of small outputs keeps at least this.
constexpr double subnormal_rounding(DType dtype) { return dtype == DType::f16 ? 0x1p-25 : 0.0; }

}  // namespace alpha::check
