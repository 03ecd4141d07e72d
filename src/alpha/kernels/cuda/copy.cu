// Strided, converting copies on one GPU (kernels/copy.h). One thread per destination element in row-major
// order, so a contiguous destination is written coalesced; the multi-index is peeled off the flat index
// dimension by dimension (innermost first). Contiguous same-type copies never come here: they are
// cudaMemcpyAsync in the tensor layer.
#include "alpha/kernels/copy.h"
#include "alpha/kernels/cuda/common.cuh"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

namespace {

template <class T> struct Raw { using type = T; };
template <> struct Raw<bf16> { using type = unsigned short; };
template <> struct Raw<f16> { using type = unsigned short; };

template <class Src, class Dst>
__device__ typename Raw<Dst>::type convert(typename Raw<Src>::type v) {
  if constexpr (std::is_same_v<Src, Dst>) return v;
  else return Elem<Dst>::store(Elem<Src>::load(v));
}

template <class Src, class Dst>
__global__ void copy_kernel(const typename Raw<Src>::type* src, typename Raw<Dst>::type* dst, CopyLayout layout) {
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

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;

}  // namespace

template <class Src, class Dst>
void copy(const CopyArgs<Src, Dst>& args, Stream stream) {
  if (args.layout.numel == 0) return;
  const int64_t blocks = std::min((args.layout.numel + kThreads - 1) / kThreads, kMaxBlocks);
  constexpr auto kernel = copy_kernel<Src, Dst>;
  ALPHA_CUDA_LAUNCH(kernel, unsigned(blocks), kThreads, alpha::cuda::stream_handle(stream),
                    reinterpret_cast<const typename Raw<Src>::type*>(args.src),
                    reinterpret_cast<typename Raw<Dst>::type*>(args.dst), args.layout);
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
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
