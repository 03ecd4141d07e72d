// CUDA optimiser kernels over contiguous device buffers, taking the CPU backend's argument structs
// (kernels/optim.h): the fused AdamW step (plain, and mixed precision with an f32 master and a bf16/f16
// gradient and compute copy), the deterministic sum of squares, and the grad norm's finish (norm, clipping
// coefficient, scaling by a factor held on the device, a step's guarded factor).
//
// AdamW reads each element's grad, m, v and param once and writes m, v, param (and the compute copy)
// once. Its arithmetic is the CPU kernel's in f32, operation by operation, with __fmul_rn/__fadd_rn/
// __fdiv_rn/__fsqrt_rn so that nothing is fused or approximated: every output equals the CPU kernel's in
// f32 rounded to T, bit for bit. The per-step scalars come from adamw_step_terms on the host, as on the CPU,
// or from device memory that the host wrote them to (AdamWArgs::terms_at).
// Sum of squares: each block reduces one fixed chunk of kChunk elements (a fixed stride per thread,
// then a shared-memory tree, all in f64) into a partial; one final block reduces the partials the same
// way. The order depends only on n: the same grads give the same bits on every run; there are no atomics.
//
// Stochastic rounding of the compute copy (and stochastic_round) calls the CPU's helpers, round_stochastic and
// stochastic_rounding_bits (host and device code): the same bits as the CPU for every launch shape.
//
// Multi-tensor kernels (multi_*, PyTorch's multi_tensor_apply): one launch for a list of tensors, each
// block working on one kChunk-element chunk of one tensor, found in a LaunchTable passed with the launch.
// Every element goes through the same __device__ function as in the single-tensor kernel (adamw_element,
// scaled, square), and the sums of squares keep the single-tensor chunks and final order, so each tensor
// gets the single-tensor kernel's bits. The sums of squares take two launches for the whole list: the
// partials of every (tensor, chunk), then one block per tensor over its partials.
#include <algorithm>
#include <type_traits>

#include "alpha/kernels/cuda/common.cuh"
#include "alpha/kernels/cuda/multi_tensor.cuh"
#include "alpha/kernels/optim.h"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride beyond this: enough blocks to fill any current GPU
// The elements one block works on: the sum of squares' fixed chunk, and the multi-tensor kernels' unit.
constexpr int64_t kChunk = 8 * kThreads;
static_assert(kChunk % kThreads == 0, "a chunk is whole strides of the block");

unsigned blocks_for(int64_t n) { return unsigned(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks)); }

// The f32 scalars of one AdamW step, as the CPU kernel uses them, and the compute copy's stochastic rounding
// (which the step read where the kernel runs selects, as it does the terms).
struct AdamWScalars {
  float lr, beta1, beta2, eps, grad_scale;
  AdamWStepTerms<float> terms;
  StochasticRounding rounding;
};

template <class T, class G, class C>
struct AdamWPointers {
  Bits<T>* param;
  const Bits<G>* grad;
  Bits<T>* m;
  Bits<T>* v;
  Bits<C>* param_copy;  // nullptr: none
  int64_t n;
  bool stochastic_rounding;     // the copy rounded stochastically with AdamWScalars::rounding's bits, not to nearest
  const double* grad_scale_at;  // nullptr: AdamWScalars::grad_scale
  const double* terms_at;       // nullptr: AdamWScalars::terms
};

// The scalars with the terms read from terms_at (and the stochastic rounding's step) and the factor from
// grad_scale_at where those are set (the factor rounded to f32 as the host rounds grad_scale); false when the
// factor is NaN: the step is skipped.
template <class T, class G, class C>
__device__ bool resolve_scalars(const AdamWPointers<T, G, C>& x, AdamWScalars& s) {
  if (x.terms_at) {
    s.terms = adamw_terms_from<float>(x.terms_at);
    s.rounding = stochastic_rounding_at_step(s.rounding, x.terms_at);
  }
  if (!x.grad_scale_at) return true;
  const double factor = *x.grad_scale_at;
  if (factor != factor) return false;
  s.grad_scale = float(factor);
  return true;
}

// Element i's compute copy of the f32 value: round_stochastic's bits (core/half.h, the CPU's helper) or, without
// stochastic rounding, the nearest.
template <class C>
__device__ Bits<C> copy_bits(float value, bool stochastic, const StochasticRounding& rounding, int64_t i) {
  if constexpr (!std::is_same_v<C, float>)
    if (stochastic) return round_stochastic<C>(value, stochastic_rounding_bits(rounding, i)).bits;
  return Elem<C>::store(value);
}

// Element i's values as the update reads them.
struct AdamWLoaded {
  float grad, m, v, param;
};
template <class T, class G, class C>
__device__ AdamWLoaded adamw_load(const AdamWPointers<T, G, C>& x, int64_t i) {
  return {Elem<G>::load(x.grad[i]), Elem<T>::load(x.m[i]), Elem<T>::load(x.v[i]), Elem<T>::load(x.param[i])};
}

// Element i's update from its loaded values: the CPU kernel's expression, one rounding per operation.
template <class T, class G, class C>
__device__ void adamw_update(const AdamWPointers<T, G, C>& x, const AdamWScalars& s, int64_t i,
                             const AdamWLoaded& in) {
  const float one_minus_beta1 = __fadd_rn(1.0f, -s.beta1), one_minus_beta2 = __fadd_rn(1.0f, -s.beta2);
  const float g = __fmul_rn(s.grad_scale, in.grad);
  const float m = __fadd_rn(__fmul_rn(s.beta1, in.m), __fmul_rn(one_minus_beta1, g));
  const float v = __fadd_rn(__fmul_rn(s.beta2, in.v), __fmul_rn(__fmul_rn(one_minus_beta2, g), g));
  const float denominator = __fadd_rn(__fmul_rn(__fsqrt_rn(v), s.terms.inv_sqrt_bias_correction2), s.eps);
  const float update = __fdiv_rn(__fmul_rn(s.terms.step_size, m), denominator);
  const float param = __fadd_rn(__fmul_rn(in.param, s.terms.decay), -update);
  x.m[i] = Elem<T>::store(m);
  x.v[i] = Elem<T>::store(v);
  const Bits<T> stored = Elem<T>::store(param);
  x.param[i] = stored;
  if (x.param_copy) {
    const bool stochastic = std::is_same_v<T, float> && x.stochastic_rounding;  // an f32 master's bf16/f16 copy
    x.param_copy[i] = copy_bits<C>(Elem<T>::load(stored), stochastic, s.rounding, i);
  }
}

template <class T, class G, class C>
__device__ void adamw_element(const AdamWPointers<T, G, C>& x, const AdamWScalars& s, int64_t i) {
  adamw_update(x, s, i, adamw_load(x, i));
}

template <class T, class G, class C>
__global__ void adamw_kernel(AdamWPointers<T, G, C> x, AdamWScalars s) {
  if (!resolve_scalars(x, s)) return;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < x.n; i += stride) adamw_element(x, s, i);
}

// factor·x in f32, rounded to T: scale (elementwise.h) and scale_by.
template <class T>
__device__ Bits<T> scaled(float factor, Bits<T> x) {
  return Elem<T>::store(__fmul_rn(factor, Elem<T>::load(x)));
}

// x² in f64; a T value squared in f64 is exact (at most 2·24 significant bits), only the sums round.
template <class T>
__device__ double square(Bits<T> x) {
  const double value = Elem<T>::load(x);
  return __dmul_rn(value, value);
}

// Calls body(i) for i in [index·chunk, min(n, (index + 1)·chunk)), thread t taking elements t, t + kThreads,
// ... of it in order.
template <class Body>
__device__ void for_chunk(int64_t n, int64_t chunk, int64_t index, Body body) {
  const int64_t start = index * chunk;
  const int64_t end = start + chunk < n ? start + chunk : n;
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) body(i);
}

// The block sums term(i) in f64 over chunk `index` of [0, n) (for_chunk's elements) into *out: each
// thread in its order, then a shared-memory tree halves the kThreads sums. The order depends only on n and
// chunk.
template <class Term>
__device__ void chunk_sum(int64_t n, int64_t chunk, int64_t index, Term term, double* out) {
  __shared__ double partial[kThreads];
  double s = 0.0;
  for_chunk(n, chunk, index, [&](int64_t i) { s = __dadd_rn(s, term(i)); });
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) partial[threadIdx.x] = __dadd_rn(partial[threadIdx.x], partial[threadIdx.x + width]);
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = partial[0];
}

// Σ x² of chunk b into out[b].
template <class T>
__global__ void squares_kernel(const Bits<T>* x, int64_t n, int64_t chunk, double* out) {
  chunk_sum(n, chunk, blockIdx.x, [x](int64_t i) { return square<T>(x[i]); }, out + blockIdx.x);
}

// Σ partials into *out (the final pass, one block).
__global__ void partials_kernel(const double* partials, int64_t n, double* out) {
  chunk_sum(n, n, 0, [partials](int64_t i) { return partials[i]; }, out);
}

int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }

// out = x rounded stochastically to C: stochastic_round's entry of a launch, and the single-tensor arguments.
template <class C>
struct RoundEntry {
  const float* x;
  Bits<C>* out;
  int64_t n;
  StochasticRounding rounding;
};

template <class C>
__global__ void stochastic_round_kernel(RoundEntry<C> e) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < e.n; i += stride)
    e.out[i] = copy_bits<C>(e.x[i], true, e.rounding, i);
}

template <class C>
__global__ void multi_stochastic_round_kernel(const __grid_constant__ LaunchTable<RoundEntry<C>> table) {
  const BlockWork work = block_work(table);
  const RoundEntry<C>& e = table.tensors[work.tensor];
  for_chunk(e.n, kChunk, work.chunk, [&](int64_t i) { e.out[i] = copy_bits<C>(e.x[i], true, e.rounding, i); });
}

template <class T, class G, class C>
struct AdamWEntry {
  AdamWPointers<T, G, C> x;
  AdamWScalars s;
};

template <class T, class G, class C>
__global__ void multi_adamw_kernel(const __grid_constant__ LaunchTable<AdamWEntry<T, G, C>> table) {
  const BlockWork work = block_work(table);
  const AdamWEntry<T, G, C>& e = table.tensors[work.tensor];
  const AdamWPointers<T, G, C>& x = e.x;
  AdamWScalars s = e.s;
  if (!resolve_scalars(x, s)) return;
  // The thread's elements of the chunk (for_chunk's) all loaded before any is updated: as far as the compiler
  // knows the tensors may alias, so element by element each update waited for its own loads (gpt2-124m's step,
  // H200, 2026-11-29: 1.03 -> 0.91 ms; 55 registers a thread).
  constexpr int kStrides = int(kChunk / kThreads);
  const int64_t start = work.chunk * kChunk, end = start + kChunk < x.n ? start + kChunk : x.n;
  AdamWLoaded loaded[kStrides];
#pragma unroll
  for (int k = 0; k < kStrides; ++k)
    if (const int64_t i = start + threadIdx.x + int64_t(k) * kThreads; i < end) loaded[k] = adamw_load(x, i);
#pragma unroll
  for (int k = 0; k < kStrides; ++k)
    if (const int64_t i = start + threadIdx.x + int64_t(k) * kThreads; i < end) adamw_update(x, s, i, loaded[k]);
}

// out = factor·x, the factor read from *device_factor where that is set.
template <class T>
struct ScaleEntry {
  const Bits<T>* x;
  Bits<T>* out;
  int64_t n;
  float factor;
  const double* device_factor;
};

template <class T>
__global__ void multi_scale_kernel(const __grid_constant__ LaunchTable<ScaleEntry<T>> table) {
  const BlockWork work = block_work(table);
  const ScaleEntry<T>& e = table.tensors[work.tensor];
  const float factor = e.device_factor ? float(*e.device_factor) : e.factor;
  for_chunk(e.n, kChunk, work.chunk, [&](int64_t i) { e.out[i] = scaled<T>(factor, e.x[i]); });
}

template <class T>
struct SquaresEntry {
  const Bits<T>* x;
  int64_t n;
  double* out;
};

// Σ x² of each (tensor, chunk) into partials[block], or, for a tensor of one chunk, straight into its out
// (as sum_squares writes it).
template <class T>
__global__ void multi_squares_kernel(const __grid_constant__ LaunchTable<SquaresEntry<T>> table, double* partials) {
  const BlockWork work = block_work(table);
  const SquaresEntry<T>& e = table.tensors[work.tensor];
  const bool one_chunk = table.first_block[work.tensor + 1] - table.first_block[work.tensor] == 1;
  chunk_sum(e.n, kChunk, work.chunk, [x = e.x](int64_t i) { return square<T>(x[i]); },
            one_chunk ? e.out : partials + blockIdx.x);
}

// Block k: Σ of tensor k's partials into its out, as partials_kernel (tensors of one chunk have theirs).
template <class T>
__global__ void multi_partials_kernel(const __grid_constant__ LaunchTable<SquaresEntry<T>> table,
                                      const double* partials) {
  const int first = table.first_block[blockIdx.x], chunks = table.first_block[blockIdx.x + 1] - first;
  if (chunks == 1) return;
  chunk_sum(chunks, chunks, 0, [p = partials + first](int64_t i) { return p[i]; }, table.tensors[blockIdx.x].out);
}

__global__ void grad_norm_kernel(GradNormArgs args) {
  double total = 0.0;
  for (int64_t k = 0; k < args.count; ++k) total = __dadd_rn(total, args.squares[k]);
  *args.norm = __dsqrt_rn(total);
}

template <class L>
__global__ void step_guard_kernel(StepGuardArgs<L> args) {
  *args.factor = step_guard_factor(args);
}

__global__ void clip_coefficient_kernel(ClipCoefficientArgs args) {
  const double c = __ddiv_rn(args.max_norm, __dadd_rn(*args.norm, 1e-6));
  *args.coefficient = c < 1.0 ? c : 1.0;
}

template <class T>
__global__ void scale_by_kernel(Bits<T>* x, const double* factor, int64_t n) {
  const float f = float(*factor);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) x[i] = scaled<T>(f, x[i]);
}

template <class T, class G, class C>
AdamWScalars adamw_scalars(const AdamWArgs<T, G, C>& args) {
  return {args.lr, args.beta1, args.beta2, args.eps, args.grad_scale, adamw_step_terms(args), args.rounding};
}

template <class T, class G, class C>
AdamWPointers<T, G, C> adamw_pointers(const AdamWArgs<T, G, C>& args) {
  return {bits(args.param),
          bits(args.grad),
          bits(args.m),
          bits(args.v),
          args.param_copy ? bits(args.param_copy) : nullptr,
          args.n,
          args.stochastic_rounding,
          args.grad_scale_at,
          args.terms_at};
}

template <class C>
RoundEntry<C> round_entry(const StochasticRoundArgs<C>& args) {
  return {args.x, bits(args.out), args.n, args.rounding};
}

// The sums of squares' chunks of a tensor: at least one, which writes 0 for an empty tensor.
int64_t squares_chunks(int64_t n) { return std::max<int64_t>(chunks_of(n), 1); }

}  // namespace

template <class T, class G, class C>
void adamw_step(const AdamWArgs<T, G, C>& args, Stream stream) {
  if (args.n == 0) return;
  constexpr auto kernel = adamw_kernel<T, G, C>;
  ALPHA_CUDA_LAUNCH(kernel, blocks_for(args.n), kThreads, alpha::cuda::stream_handle(stream), adamw_pointers(args),
                    adamw_scalars(args));
}

template <class T>
void sum_squares(const SumSquaresArgs<T>& args, Stream stream) {
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  const int64_t chunks = squares_chunks(args.n);
  constexpr auto chunk_kernel = squares_kernel<T>;
  if (chunks == 1) {
    ALPHA_CUDA_LAUNCH(chunk_kernel, 1, kThreads, s, bits(args.x), args.n, kChunk, args.out);
    return;
  }
  StreamScratch partials(size_t(chunks) * sizeof(double), s);
  ALPHA_CUDA_LAUNCH(chunk_kernel, unsigned(chunks), kThreads, s, bits(args.x), args.n, kChunk, partials.as<double>());
  ALPHA_CUDA_LAUNCH(partials_kernel, 1, kThreads, s, partials.as<double>(), chunks, args.out);
}

void grad_norm(const GradNormArgs& args, Stream stream) {
  ALPHA_CUDA_LAUNCH(grad_norm_kernel, 1, 1, alpha::cuda::stream_handle(stream), args);
}

void clip_coefficient(const ClipCoefficientArgs& args, Stream stream) {
  ALPHA_CUDA_LAUNCH(clip_coefficient_kernel, 1, 1, alpha::cuda::stream_handle(stream), args);
}

template <class L>
void step_guard(const StepGuardArgs<L>& args, Stream stream) {
  constexpr auto kernel = step_guard_kernel<L>;
  ALPHA_CUDA_LAUNCH(kernel, 1, 1, alpha::cuda::stream_handle(stream), args);
}
template void step_guard<float>(const StepGuardArgs<float>&, Stream);
template void step_guard<double>(const StepGuardArgs<double>&, Stream);

template <class T>
void scale_by(const ScaleByArgs<T>& args, Stream stream) {
  if (args.n == 0) return;
  constexpr auto kernel = scale_by_kernel<T>;
  ALPHA_CUDA_LAUNCH(kernel, blocks_for(args.n), kThreads, alpha::cuda::stream_handle(stream), bits(args.x),
                    args.factor, args.n);
}

template <class T, class G, class C>
void multi_adamw_step(std::span<const AdamWArgs<T, G, C>> tensors, Stream stream) {
  using Entry = AdamWEntry<T, G, C>;
  constexpr auto kernel = multi_adamw_kernel<T, G, C>;
  for_each_launch<Entry>(
      tensors, [](const AdamWArgs<T, G, C>& a) { return Entry{adamw_pointers(a), adamw_scalars(a)}; },
      [](const AdamWArgs<T, G, C>& a) { return chunks_of(a.n); },
      [&](const LaunchTable<Entry>& table, int64_t blocks) {
        ALPHA_CUDA_LAUNCH(kernel, unsigned(blocks), kThreads, alpha::cuda::stream_handle(stream), table);
      });
}

template <class T>
void multi_sum_squares(std::span<const SumSquaresArgs<T>> tensors, Stream stream) {
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  constexpr auto chunk_kernel = multi_squares_kernel<T>;
  constexpr auto final_kernel = multi_partials_kernel<T>;
  for_each_launch<SquaresEntry<T>>(
      tensors, [](const SumSquaresArgs<T>& a) { return SquaresEntry<T>{bits(a.x), a.n, a.out}; },
      [](const SumSquaresArgs<T>& a) { return squares_chunks(a.n); },
      [&](const LaunchTable<SquaresEntry<T>>& table, int64_t blocks) {
        const bool one_chunk_each = blocks == table.count;
        StreamScratch partials(one_chunk_each ? 0 : size_t(blocks) * sizeof(double), s);
        ALPHA_CUDA_LAUNCH(chunk_kernel, unsigned(blocks), kThreads, s, table, partials.as<double>());
        if (!one_chunk_each)
          ALPHA_CUDA_LAUNCH(final_kernel, unsigned(table.count), kThreads, s, table, partials.as<double>());
      });
}

template <class T>
void multi_scale(std::span<const ScaleArgs<T>> tensors, Stream stream) {
  constexpr auto kernel = multi_scale_kernel<T>;
  for_each_launch<ScaleEntry<T>>(
      tensors, [](const ScaleArgs<T>& a) { return ScaleEntry<T>{bits(a.x), bits(a.out), a.n, a.alpha, nullptr}; },
      [](const ScaleArgs<T>& a) { return chunks_of(a.n); },
      [&](const LaunchTable<ScaleEntry<T>>& table, int64_t blocks) {
        ALPHA_CUDA_LAUNCH(kernel, unsigned(blocks), kThreads, alpha::cuda::stream_handle(stream), table);
      });
}

template <class T>
void multi_scale_by(std::span<const ScaleByArgs<T>> tensors, Stream stream) {
  constexpr auto kernel = multi_scale_kernel<T>;
  for_each_launch<ScaleEntry<T>>(
      tensors, [](const ScaleByArgs<T>& a) { return ScaleEntry<T>{bits(a.x), bits(a.x), a.n, 0.0f, a.factor}; },
      [](const ScaleByArgs<T>& a) { return chunks_of(a.n); },
      [&](const LaunchTable<ScaleEntry<T>>& table, int64_t blocks) {
        ALPHA_CUDA_LAUNCH(kernel, unsigned(blocks), kThreads, alpha::cuda::stream_handle(stream), table);
      });
}

template <class C>
void stochastic_round(const StochasticRoundArgs<C>& args, Stream stream) {
  if (args.n == 0) return;
  constexpr auto kernel = stochastic_round_kernel<C>;
  ALPHA_CUDA_LAUNCH(kernel, blocks_for(args.n), kThreads, alpha::cuda::stream_handle(stream), round_entry(args));
}

template <class C>
void multi_stochastic_round(std::span<const StochasticRoundArgs<C>> tensors, Stream stream) {
  constexpr auto kernel = multi_stochastic_round_kernel<C>;
  for_each_launch<RoundEntry<C>>(
      tensors, [](const StochasticRoundArgs<C>& a) { return round_entry(a); },
      [](const StochasticRoundArgs<C>& a) { return chunks_of(a.n); },
      [&](const LaunchTable<RoundEntry<C>>& table, int64_t blocks) {
        ALPHA_CUDA_LAUNCH(kernel, unsigned(blocks), kThreads, alpha::cuda::stream_handle(stream), table);
      });
}

#define ALPHA_INSTANTIATE_ROUND(C)                                                  \
  template void stochastic_round<C>(const StochasticRoundArgs<C>&, Stream);         \
  template void multi_stochastic_round<C>(std::span<const StochasticRoundArgs<C>>, Stream);
ALPHA_INSTANTIATE_ROUND(bf16)
ALPHA_INSTANTIATE_ROUND(f16)
#undef ALPHA_INSTANTIATE_ROUND

#define ALPHA_INSTANTIATE_ADAMW(T, G, C)                                            \
  template void adamw_step<T, G, C>(const AdamWArgs<T, G, C>&, Stream);             \
  template void multi_adamw_step<T, G, C>(std::span<const AdamWArgs<T, G, C>>, Stream);
ALPHA_INSTANTIATE_ADAMW(float, float, float)
ALPHA_INSTANTIATE_ADAMW(bf16, bf16, bf16)
ALPHA_INSTANTIATE_ADAMW(f16, f16, f16)
ALPHA_MIXED_PRECISION_ADAMW_TYPES(ALPHA_INSTANTIATE_ADAMW)
#undef ALPHA_INSTANTIATE_ADAMW

#define ALPHA_INSTANTIATE(T)                                                        \
  template void sum_squares<T>(const SumSquaresArgs<T>&, Stream);                   \
  template void scale_by<T>(const ScaleByArgs<T>&, Stream);                         \
  template void multi_sum_squares<T>(std::span<const SumSquaresArgs<T>>, Stream);   \
  template void multi_scale<T>(std::span<const ScaleArgs<T>>, Stream);              \
  template void multi_scale_by<T>(std::span<const ScaleByArgs<T>>, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
