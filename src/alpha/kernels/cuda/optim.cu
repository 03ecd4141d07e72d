// CUDA optimiser kernels over contiguous device buffers, taking the CPU backend's argument structs
// (kernels/optim.h): the fused AdamW step (plain, and mixed precision with an f32 master and a bf16/f16
// gradient and compute copy), the deterministic sum of squares, and the grad norm's finish (norm, clipping
// coefficient, scaling by a factor held on the device).
//
// AdamW reads each element's grad, m, v and param once and writes m, v, param (and the compute copy)
// once. Its arithmetic is the CPU kernel's in f32, operation by operation, with __fmul_rn/__fadd_rn/
// __fdiv_rn/__fsqrt_rn so that nothing is fused or approximated: every output equals the CPU kernel's in
// f32 rounded to T, bit for bit. The per-step scalars come from adamw_step_terms on the host, as on the CPU.
// Sum of squares: each block reduces one fixed chunk of kSquaresChunk elements (a fixed stride per thread,
// then a shared-memory tree, all in f64) into a partial; one final block reduces the partials the same
// way. The order depends only on n: the same grads give the same bits on every run; there are no atomics.
#include <algorithm>

#include "alpha/kernels/cuda/common.cuh"
#include "alpha/kernels/optim.h"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride beyond this: enough blocks to fill any current GPU
constexpr int64_t kSquaresChunk = 8 * kThreads;
static_assert(kSquaresChunk % kThreads == 0, "a chunk is whole strides of the block");

unsigned blocks_for(int64_t n) { return unsigned(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks)); }

// The f32 scalars of one AdamW step, as the CPU kernel uses them.
struct AdamWScalars {
  float lr, beta1, beta2, eps, grad_scale;
  AdamWStepTerms<float> terms;
};

template <class T, class G>
struct AdamWPointers {
  Bits<T>* param;
  const Bits<G>* grad;
  Bits<T>* m;
  Bits<T>* v;
  Bits<G>* param_copy;  // nullptr: none
  int64_t n;
};

// One element's update: the CPU kernel's expression, one rounding per operation.
template <class T, class G>
__global__ void adamw_kernel(AdamWPointers<T, G> x, AdamWScalars s) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const float one_minus_beta1 = __fadd_rn(1.0f, -s.beta1), one_minus_beta2 = __fadd_rn(1.0f, -s.beta2);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < x.n; i += stride) {
    const float g = __fmul_rn(s.grad_scale, Elem<G>::load(x.grad[i]));
    const float m = __fadd_rn(__fmul_rn(s.beta1, Elem<T>::load(x.m[i])), __fmul_rn(one_minus_beta1, g));
    const float v = __fadd_rn(__fmul_rn(s.beta2, Elem<T>::load(x.v[i])), __fmul_rn(__fmul_rn(one_minus_beta2, g), g));
    const float denominator = __fadd_rn(__fmul_rn(__fsqrt_rn(v), s.terms.inv_sqrt_bias_correction2), s.eps);
    const float update = __fdiv_rn(__fmul_rn(s.terms.step_size, m), denominator);
    const float param = __fadd_rn(__fmul_rn(Elem<T>::load(x.param[i]), s.terms.decay), -update);
    x.m[i] = Elem<T>::store(m);
    x.v[i] = Elem<T>::store(v);
    const Bits<T> stored = Elem<T>::store(param);
    x.param[i] = stored;
    if (x.param_copy) x.param_copy[i] = Elem<G>::store(Elem<T>::load(stored));
  }
}

// Block b sums term(i) in f64 for i in [b·chunk, min(n, (b + 1)·chunk)) into out[b]: thread t takes
// elements t, t + kThreads, ... in order, then a shared-memory tree halves the kThreads sums. The order
// depends only on n and chunk.
template <class Term>
__device__ void chunk_sum(int64_t n, int64_t chunk, Term term, double* out) {
  __shared__ double partial[kThreads];
  const int64_t start = int64_t(blockIdx.x) * chunk;
  const int64_t end = start + chunk < n ? start + chunk : n;
  double s = 0.0;
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) s = __dadd_rn(s, term(i));
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) partial[threadIdx.x] = __dadd_rn(partial[threadIdx.x], partial[threadIdx.x + width]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// Σ x² per chunk; a T value squared in f64 is exact (at most 2·24 significant bits), only the sums round.
template <class T>
__global__ void squares_kernel(const Bits<T>* x, int64_t n, int64_t chunk, double* out) {
  chunk_sum(n, chunk, [x](int64_t i) {
    const double value = Elem<T>::load(x[i]);
    return __dmul_rn(value, value);
  }, out);
}

// Σ partials per chunk (the final pass, one chunk).
__global__ void partials_kernel(const double* partials, int64_t n, int64_t chunk, double* out) {
  chunk_sum(n, chunk, [partials](int64_t i) { return partials[i]; }, out);
}

__global__ void grad_norm_kernel(GradNormArgs args) {
  double total = 0.0;
  for (int64_t k = 0; k < args.count; ++k) total = __dadd_rn(total, args.squares[k]);
  *args.norm = __dsqrt_rn(total);
}

__global__ void clip_coefficient_kernel(ClipCoefficientArgs args) {
  const double c = __ddiv_rn(args.max_norm, __dadd_rn(*args.norm, 1e-6));
  *args.coefficient = c < 1.0 ? c : 1.0;
}

template <class T>
__global__ void scale_by_kernel(Bits<T>* x, const double* factor, int64_t n) {
  const float f = float(*factor);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = Elem<T>::store(__fmul_rn(f, Elem<T>::load(x[i])));
}

}  // namespace

template <class T, class G>
void adamw_step(const AdamWArgs<T, G>& args, Stream stream) {
  if (args.n == 0) return;
  const AdamWScalars s{args.lr, args.beta1, args.beta2, args.eps, args.grad_scale, adamw_step_terms(args)};
  const AdamWPointers<T, G> x{bits(args.param), bits(args.grad), bits(args.m), bits(args.v),
                              args.param_copy ? bits(args.param_copy) : nullptr, args.n};
  constexpr auto kernel = adamw_kernel<T, G>;
  ALPHA_CUDA_LAUNCH(kernel, blocks_for(args.n), kThreads, alpha::cuda::stream_handle(stream), x, s);
}

template <class T>
void sum_squares(const SumSquaresArgs<T>& args, Stream stream) {
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  const int64_t chunks = std::max<int64_t>((args.n + kSquaresChunk - 1) / kSquaresChunk, 1);
  constexpr auto chunk_kernel = squares_kernel<T>;
  if (chunks == 1) {
    ALPHA_CUDA_LAUNCH(chunk_kernel, 1, kThreads, s, bits(args.x), args.n, kSquaresChunk, args.out);
    return;
  }
  // Partials in stream-ordered scratch from the driver's pool, released on the same stream.
  double* partials = nullptr;
  ALPHA_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partials), size_t(chunks) * sizeof(double), s));
  ALPHA_CUDA_LAUNCH(chunk_kernel, unsigned(chunks), kThreads, s, bits(args.x), args.n, kSquaresChunk, partials);
  ALPHA_CUDA_LAUNCH(partials_kernel, 1, kThreads, s, partials, chunks, chunks, args.out);
  ALPHA_CUDA_CHECK(cudaFreeAsync(partials, s));
}

void grad_norm(const GradNormArgs& args, Stream stream) {
  ALPHA_CUDA_LAUNCH(grad_norm_kernel, 1, 1, alpha::cuda::stream_handle(stream), args);
}

void clip_coefficient(const ClipCoefficientArgs& args, Stream stream) {
  ALPHA_CUDA_LAUNCH(clip_coefficient_kernel, 1, 1, alpha::cuda::stream_handle(stream), args);
}

template <class T>
void scale_by(const ScaleByArgs<T>& args, Stream stream) {
  if (args.n == 0) return;
  constexpr auto kernel = scale_by_kernel<T>;
  ALPHA_CUDA_LAUNCH(kernel, blocks_for(args.n), kThreads, alpha::cuda::stream_handle(stream), bits(args.x),
                    args.factor, args.n);
}

template void adamw_step<float, float>(const AdamWArgs<float, float>&, Stream);
template void adamw_step<bf16, bf16>(const AdamWArgs<bf16, bf16>&, Stream);
template void adamw_step<f16, f16>(const AdamWArgs<f16, f16>&, Stream);
template void adamw_step<float, bf16>(const AdamWArgs<float, bf16>&, Stream);
template void adamw_step<float, f16>(const AdamWArgs<float, f16>&, Stream);

#define ALPHA_INSTANTIATE(T)                                        \
  template void sum_squares<T>(const SumSquaresArgs<T>&, Stream);   \
  template void scale_by<T>(const ScaleByArgs<T>&, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
