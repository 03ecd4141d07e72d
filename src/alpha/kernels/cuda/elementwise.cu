// CUDA element-wise kernels over contiguous device buffers, taking the CPU backend's argument structs
// (kernels/elementwise.h): add, mul, scale and axpy through one vectorised map kernel, and a deterministic
// sum. Element types: f32, and bf16/f16 storage computing in f32.
//
// Arithmetic uses __fadd_rn/__fmul_rn, never a fused multiply-add, so every result is rounded as the CPU
// kernel rounds it (one f32 rounding per operation, then one to the storage type): the backends agree bit
// for bit on add, mul, scale and axpy.
// Map: launch_map (common.cuh), 128-bit loads and stores with a scalar head and tail.
// Sum of rows: one thread per 128-bit vector of the output (every row and the output 16-byte aligned and n whole
// vectors; otherwise one thread per element), adding the rows' vectors in row order. Memory-bound: it reads each
// row once and writes the output once. The data-parallel reduction queues it on the communicator's stream.
// Sum: each block reduces one fixed chunk of kSumBlock elements (a fixed stride per thread, then a fixed
// shared-memory tree) into a partial; one final block reduces the partials the same way. The order depends
// only on n, so the result has the same bits on every run and every GPU; there are no atomics.
#include <algorithm>

#include "alpha/kernels/cuda/common.cuh"
#include "alpha/kernels/elementwise.h"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

namespace {

// The operations, on f32 values; unary ones ignore their second operand.
struct Add {
  static constexpr int kInputs = 2;
  __device__ float operator()(int64_t, float a, float b) const { return __fadd_rn(a, b); }
};
struct Mul {
  static constexpr int kInputs = 2;
  __device__ float operator()(int64_t, float a, float b) const { return __fmul_rn(a, b); }
};
struct Scale {
  static constexpr int kInputs = 1;
  float alpha;
  __device__ float operator()(int64_t, float x, float) const { return __fmul_rn(alpha, x); }
};
struct Axpy {  // a = y, b = x
  static constexpr int kInputs = 2;
  float alpha;
  __device__ float operator()(int64_t, float y, float x) const { return __fadd_rn(y, __fmul_rn(alpha, x)); }
};

constexpr int kThreads = 256;

static_assert(kSumBlock % kThreads == 0, "a sum chunk is whole strides of the block");

// Block b reduces x[b * chunk, min(n, (b + 1) * chunk)) into out[b]: thread t adds elements t, t + kThreads, ...
// in order, then a shared-memory tree halves the kThreads sums. The order depends only on n and chunk.
template <class T>
__global__ void sum_kernel(const Bits<T>* x, int64_t n, int64_t chunk, float* out) {
  __shared__ float partial[kThreads];
  const int64_t start = int64_t(blockIdx.x) * chunk;
  const int64_t end = start + chunk < n ? start + chunk : n;
  float s = 0.0f;
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) s = __fadd_rn(s, Elem<T>::load(x[i]));
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) partial[threadIdx.x] = __fadd_rn(partial[threadIdx.x], partial[threadIdx.x + width]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

template <class T, bool kVectors>
__global__ void sum_rows_kernel(const Bits<T>* rows, int64_t rows_count, int64_t n, float scale, Bits<T>* out) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  if constexpr (kVectors) {
    constexpr int W = kLanes<T>;
    for (int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < n / W; v += stride) {
      float sum[W], x[W];
      unpack<T>(reinterpret_cast<const uint4*>(rows)[v], sum);
      for (int64_t r = 1; r < rows_count; ++r) {
        unpack<T>(reinterpret_cast<const uint4*>(rows + r * n)[v], x);
        for (int k = 0; k < W; ++k) sum[k] = __fadd_rn(sum[k], x[k]);
      }
      for (int k = 0; k < W; ++k) sum[k] = __fmul_rn(scale, sum[k]);
      reinterpret_cast<uint4*>(out)[v] = pack<T>(sum);
    }
  } else {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
      float sum = Elem<T>::load(rows[i]);
      for (int64_t r = 1; r < rows_count; ++r) sum = __fadd_rn(sum, Elem<T>::load(rows[r * n + i]));
      out[i] = Elem<T>::store(__fmul_rn(scale, sum));
    }
  }
}

}  // namespace

template <class T>
void sum_rows(const SumRowsArgs<T>& args, Stream stream) {
  if (args.n == 0) return;
  const bool vectors = misalignment(args.rows) == 0 && misalignment(args.out) == 0 && args.n % kLanes<T> == 0;
  const int64_t work = vectors ? args.n / kLanes<T> : args.n;
  const int64_t blocks = std::min((work + kMapThreads - 1) / kMapThreads, kMaxMapBlocks);
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  if (vectors) {
    constexpr auto kernel = sum_rows_kernel<T, true>;
    ALPHA_CUDA_LAUNCH(kernel, unsigned(blocks), kMapThreads, s, bits(args.rows), args.rows_count, args.n,
                      float(args.scale), bits(args.out));
  } else {
    constexpr auto kernel = sum_rows_kernel<T, false>;
    ALPHA_CUDA_LAUNCH(kernel, unsigned(blocks), kMapThreads, s, bits(args.rows), args.rows_count, args.n,
                      float(args.scale), bits(args.out));
  }
}

template <class T>
void add(const BinaryArgs<T>& args, Stream stream) {
  launch_map(args.a, args.b, args.out, args.n, Add{}, stream);
}

template <class T>
void mul(const BinaryArgs<T>& args, Stream stream) {
  launch_map(args.a, args.b, args.out, args.n, Mul{}, stream);
}

template <class T>
void scale(const ScaleArgs<T>& args, Stream stream) {
  launch_map<T>(args.x, nullptr, args.out, args.n, Scale{args.alpha}, stream);
}

template <class T>
void axpy(const AxpyArgs<T>& args, Stream stream) {
  launch_map<T>(args.y, args.x, args.y, args.n, Axpy{args.alpha}, stream);
}

template <class T>
void sum(const SumArgs<T>& args, Stream stream) {
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  const int64_t chunks = std::max<int64_t>((args.n + kSumBlock - 1) / kSumBlock, 1);
  constexpr auto chunk_kernel = sum_kernel<T>;
  if (chunks == 1) {
    ALPHA_CUDA_LAUNCH(chunk_kernel, 1, kThreads, s, bits(args.x), args.n, kSumBlock, args.out);
    return;
  }
  // Partials in stream-ordered scratch from the driver's pool, released on the same stream.
  float* partials = nullptr;
  ALPHA_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partials), size_t(chunks) * sizeof(float), s));
  ALPHA_CUDA_LAUNCH(chunk_kernel, unsigned(chunks), kThreads, s, bits(args.x), args.n, kSumBlock, partials);
  constexpr auto final_kernel = sum_kernel<float>;
  ALPHA_CUDA_LAUNCH(final_kernel, 1, kThreads, s, partials, chunks, chunks, args.out);
  ALPHA_CUDA_CHECK(cudaFreeAsync(partials, s));
}

#define ALPHA_INSTANTIATE(T)                           \
  template void add<T>(const BinaryArgs<T>&, Stream);  \
  template void mul<T>(const BinaryArgs<T>&, Stream);  \
  template void scale<T>(const ScaleArgs<T>&, Stream); \
  template void axpy<T>(const AxpyArgs<T>&, Stream);   \
  template void sum<T>(const SumArgs<T>&, Stream);     \
  template void sum_rows<T>(const SumRowsArgs<T>&, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
