// Strided, converting copies on one GPU (kernels/copy.h). A single contiguous same-type copy never comes
// here (the tensor layer's cudaMemcpyAsync); a list of them does, through copy_many.
//
// The layout is first simplified on the host: dimensions of extent 1 are dropped and neighbours that are
// contiguous with each other on both sides are merged (a copy of q out of a fused qkv, [B, T, H, D] with the
// qkv's strides, becomes B·T rows of H·D contiguous elements). Then:
// - rows: when the innermost dimension is unit-stride on both sides and at least kMinRowElements long, the
//   grid spans rows and the vectors along them; each thread peels a row's start offsets off the row index
//   once per row it visits, and the row moves in 16-byte vectors when the row length, both starts and every
//   outer stride allow it (else element by element). No index arithmetic per element: the per-element
//   division chain was what made these copies run at a fraction of the memory bandwidth.
// - elements: otherwise one thread per destination element in row-major order, the multi-index peeled off
//   the flat index dimension by dimension (innermost first).
// copy_many: contiguous runs of bytes, a list per launch (multi_tensor.cuh), each block moving one chunk
// of kWordsPerThread words a thread of one run; convert_many the same over floats rounded to bf16 or f16.
#include <algorithm>

#include "alpha/kernels/copy.h"
#include "alpha/kernels/cuda/common.cuh"
#include "alpha/kernels/cuda/multi_tensor.cuh"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

namespace {

template <class T> struct Raw { using type = T; };
template <> struct Raw<bf16> { using type = unsigned short; };
template <> struct Raw<f16> { using type = unsigned short; };

// f32, bf16 and f16 widen to f64 exactly; f64 narrows to f32 with one rounding to nearest, as the CPU's cast.
template <class Src, class Dst>
__device__ typename Raw<Dst>::type convert(typename Raw<Src>::type v) {
  if constexpr (std::is_same_v<Src, Dst>) return v;
  else if constexpr (std::is_same_v<Dst, double>) return double(Elem<Src>::load(v));
  else if constexpr (std::is_same_v<Src, double>) return Elem<Dst>::store(__double2float_rn(v));
  else return Elem<Dst>::store(Elem<Src>::load(v));
}

template <class Src, class Dst>
__global__ void copy_elements_kernel(const typename Raw<Src>::type* src, typename Raw<Dst>::type* dst,
                                     CopyLayout layout) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < layout.numel; i += stride) {
    int64_t rest = i, src_off = 0, dst_off = 0;
    for (int d = layout.dims - 1; d >= 0; --d) {
      const int64_t index = rest % layout.shape[d];
      rest /= layout.shape[d];
      src_off += index * layout.src_strides[d];
      dst_off += index * layout.dst_strides[d];
    }
    dst[dst_off] = convert<Src, Dst>(src[src_off]);
  }
}

// kVec elements of one side's type, moved as one load or store.
template <class T, int kVec>
struct alignas(sizeof(T) * kVec) Vector {
  T x[kVec];
};

// Rows of layout.shape[dims − 1] unit-stride elements, kVec at a time (kVec 1: one by one): y (threadIdx.y
// and blockIdx.y) picks rows, x (threadIdx.x and blockIdx.x) walks along them, so a few long rows (a weight
// matrix merged into one) spread over many blocks as well as many short ones.
template <class Src, class Dst, int kVec>
__global__ void copy_rows_kernel(const typename Raw<Src>::type* src, typename Raw<Dst>::type* dst,
                                 CopyLayout layout) {
  using SrcRaw = typename Raw<Src>::type;
  using DstRaw = typename Raw<Dst>::type;
  const int inner = layout.dims - 1;
  const int64_t row_length = layout.shape[inner], rows = layout.numel / row_length, vectors = row_length / kVec;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < rows;
       row += int64_t(gridDim.y) * blockDim.y) {
    int64_t rest = row, src_off = 0, dst_off = 0;
    for (int d = inner - 1; d >= 0; --d) {
      const int64_t index = rest % layout.shape[d];
      rest /= layout.shape[d];
      src_off += index * layout.src_strides[d];
      dst_off += index * layout.dst_strides[d];
    }
    const auto* from = reinterpret_cast<const Vector<SrcRaw, kVec>*>(src + src_off);
    auto* to = reinterpret_cast<Vector<DstRaw, kVec>*>(dst + dst_off);
    for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < vectors;
         j += int64_t(gridDim.x) * blockDim.x) {
      const Vector<SrcRaw, kVec> in = from[j];
      Vector<DstRaw, kVec> out;
#pragma unroll
      for (int e = 0; e < kVec; ++e) out.x[e] = convert<Src, Dst>(in.x[e]);
      to[j] = out;
    }
  }
}

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;
constexpr int64_t kMinRowElements = 32;

// The same copy with extent-1 dimensions dropped and mergeable neighbours merged.
CopyLayout simplified(const CopyLayout& layout) {
  CopyLayout out;
  out.numel = layout.numel;
  for (int d = 0; d < layout.dims; ++d) {
    if (layout.shape[d] == 1) continue;
    const int last = out.dims - 1;
    if (last >= 0 && out.src_strides[last] == layout.src_strides[d] * layout.shape[d] &&
        out.dst_strides[last] == layout.dst_strides[d] * layout.shape[d]) {
      out.shape[last] *= layout.shape[d];
      out.src_strides[last] = layout.src_strides[d];
      out.dst_strides[last] = layout.dst_strides[d];
      continue;
    }
    out.shape[out.dims] = layout.shape[d];
    out.src_strides[out.dims] = layout.src_strides[d];
    out.dst_strides[out.dims] = layout.dst_strides[d];
    ++out.dims;
  }
  return out;
}

// Whether every row of `layout` (unit-stride innermost dimension) starts at a multiple of kVec elements from
// both base pointers, which are themselves vector-aligned, and holds whole vectors.
template <class Src, class Dst, int kVec>
bool rows_vectorize(const CopyArgs<Src, Dst>& args, const CopyLayout& layout) {
  const int inner = layout.dims - 1;
  if (layout.shape[inner] % kVec != 0) return false;
  if (reinterpret_cast<uintptr_t>(args.src) % (sizeof(Src) * kVec) != 0 ||
      reinterpret_cast<uintptr_t>(args.dst) % (sizeof(Dst) * kVec) != 0)
    return false;
  for (int d = 0; d < inner; ++d)
    if (layout.src_strides[d] % kVec != 0 || layout.dst_strides[d] % kVec != 0) return false;
  return true;
}

// Blocks of kThreads: x the warps a row's vectors need (up to all of them), y as many rows as the rest
// allows; the grid covers a row's vectors in x and the rows in y, each capped (the kernel strides on).
template <class Src, class Dst, int kVec>
void launch_rows(const CopyArgs<Src, Dst>& args, const CopyLayout& layout, cudaStream_t stream) {
  const int64_t vectors = layout.shape[layout.dims - 1] / kVec, rows = layout.numel / layout.shape[layout.dims - 1];
  const int lanes = int(std::min<int64_t>(kThreads, (vectors + 31) / 32 * 32));
  const dim3 block(unsigned(lanes), unsigned(kThreads / lanes));
  const dim3 grid(unsigned(std::min((vectors + lanes - 1) / lanes, kMaxBlocks)),
                  unsigned(std::min((rows + block.y - 1) / block.y, kMaxGridY)));
  constexpr auto kernel = copy_rows_kernel<Src, Dst, kVec>;
  ALPHA_CUDA_LAUNCH(kernel, grid, block, stream, reinterpret_cast<const typename Raw<Src>::type*>(args.src),
                    reinterpret_cast<typename Raw<Dst>::type*>(args.dst), layout);
}

constexpr int kWordsPerThread = 8;

// A run of `count` elements: words of the same type (the bits move), or floats converted to bf16 or f16.
template <class Src, class Dst>
struct RunEntry {
  const typename Raw<Src>::type* src;
  typename Raw<Dst>::type* dst;
  int64_t count;
};

template <class Src, class Dst>
__global__ void copy_runs_kernel(const __grid_constant__ LaunchTable<RunEntry<Src, Dst>> table) {
  const BlockWork work = block_work(table);
  const RunEntry<Src, Dst>& run = table.tensors[work.tensor];
  const int64_t start = work.chunk * kThreads * kWordsPerThread;
  const int64_t end = min(start + int64_t(kThreads) * kWordsPerThread, run.count);
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) run.dst[i] = convert<Src, Dst>(run.src[i]);
}

// `runs` as RunEntry<Src, Dst> (entry), each block moving kWordsPerThread elements a thread of one run.
template <class Src, class Dst, class Run, class MakeEntry>
void launch_run_list(std::span<const Run> runs, MakeEntry entry, cudaStream_t stream) {
  constexpr int64_t kChunk = int64_t(kThreads) * kWordsPerThread;
  constexpr auto kernel = copy_runs_kernel<Src, Dst>;
  for_each_launch<RunEntry<Src, Dst>>(
      runs, entry, [&](const Run& r) { return (entry(r).count + kChunk - 1) / kChunk; },
      [&](const LaunchTable<RunEntry<Src, Dst>>& table, int64_t blocks) {
        ALPHA_CUDA_LAUNCH(kernel, unsigned(blocks), kThreads, stream, table);
      });
}

template <class Word>
void launch_runs(std::span<const ContiguousCopy> copies, cudaStream_t stream) {
  launch_run_list<Word, Word>(
      copies,
      [](const ContiguousCopy& c) {
        return RunEntry<Word, Word>{static_cast<const Word*>(c.src), static_cast<Word*>(c.dst),
                                    c.bytes / int64_t(sizeof(Word))};
      },
      stream);
}

}  // namespace

void copy_many(std::span<const ContiguousCopy> copies, Stream s) {
  // The widest word every run's pointers and length are a multiple of.
  uintptr_t alignment = kVectorBytes;
  for (const ContiguousCopy& c : copies)
    alignment |= reinterpret_cast<uintptr_t>(c.src) | reinterpret_cast<uintptr_t>(c.dst) | uintptr_t(c.bytes);
  const uintptr_t word = alignment & (~alignment + 1);  // the lowest set bit
  cudaStream_t stream = alpha::cuda::stream_handle(s);
  if (word >= 16) return launch_runs<uint4>(copies, stream);
  if (word >= 4) return launch_runs<uint32_t>(copies, stream);
  if (word >= 2) return launch_runs<uint16_t>(copies, stream);
  launch_runs<uint8_t>(copies, stream);
}

template <class Dst>
void convert_many(std::span<const ContiguousConversion> runs, Stream s) {
  launch_run_list<float, Dst>(
      runs,
      [](const ContiguousConversion& c) {
        return RunEntry<float, Dst>{c.src, static_cast<typename Raw<Dst>::type*>(c.dst), c.numel};
      },
      alpha::cuda::stream_handle(s));
}
template void convert_many<bf16>(std::span<const ContiguousConversion>, Stream);
template void convert_many<f16>(std::span<const ContiguousConversion>, Stream);

template <class Src, class Dst>
void copy(const CopyArgs<Src, Dst>& args, Stream s) {
  if (args.layout.numel == 0) return;
  cudaStream_t stream = alpha::cuda::stream_handle(s);
  const CopyLayout layout = simplified(args.layout);
  const int inner = layout.dims - 1;
  if (inner >= 0 && layout.src_strides[inner] == 1 && layout.dst_strides[inner] == 1 &&
      layout.shape[inner] >= kMinRowElements) {
    constexpr int kVec = kVectorBytes / int(std::max(sizeof(Src), sizeof(Dst)));
    if (rows_vectorize<Src, Dst, kVec>(args, layout)) return launch_rows<Src, Dst, kVec>(args, layout, stream);
    return launch_rows<Src, Dst, 1>(args, layout, stream);
  }
  const int64_t blocks = std::min((layout.numel + kThreads - 1) / kThreads, kMaxBlocks);
  constexpr auto kernel = copy_elements_kernel<Src, Dst>;
  ALPHA_CUDA_LAUNCH(kernel, unsigned(blocks), kThreads, stream,
                    reinterpret_cast<const typename Raw<Src>::type*>(args.src),
                    reinterpret_cast<typename Raw<Dst>::type*>(args.dst), layout);
}

#define ALPHA_INSTANTIATE(S, D) template void copy<S, D>(const CopyArgs<S, D>&, Stream);
ALPHA_INSTANTIATE(uint8_t, uint8_t)
ALPHA_INSTANTIATE(uint16_t, uint16_t)
ALPHA_INSTANTIATE(uint32_t, uint32_t)
ALPHA_INSTANTIATE(uint64_t, uint64_t)
ALPHA_INSTANTIATE(float, bf16)
ALPHA_INSTANTIATE(float, f16)
ALPHA_INSTANTIATE(bf16, float)
ALPHA_INSTANTIATE(f16, float)
ALPHA_INSTANTIATE(bf16, f16)
ALPHA_INSTANTIATE(f16, bf16)
ALPHA_INSTANTIATE(float, double)
ALPHA_INSTANTIATE(bf16, double)
ALPHA_INSTANTIATE(f16, double)
ALPHA_INSTANTIATE(double, float)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
