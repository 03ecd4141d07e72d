// Flash attention forward for bf16/f16 on the tensor cores: the library's instantiations and the dispatch
// over head-dimension buckets (the kernel and its design: flash_attention_mma_forward.cuh), which hands
// buckets 64 and 128 on Hopper to the warp-specialised TMA/wgmma kernel (flash_attention_tma_forward.cu).
#include "alpha/kernels/cuda/flash_attention_mma_forward.cuh"

namespace alpha::kernels::cuda {

template <class T>
void flash_attention_mma_forward(const AttentionForwardArgs<T>& args, cudaStream_t stream) {
  constexpr const char* kOp = "flash_attention_forward";
  const AttentionParams<T>& p = args.params;
  const int bucket = mma_head_dim_bucket(p, kOp);
  require_mma_rows(args.q, p.q_strides, kOp, "q");
  require_mma_rows(args.k, p.k_strides, kOp, "k");
  require_mma_rows(args.v, p.v_strides, kOp, "v");
  if (wgmma_kernels_run(bucket)) return flash_attention_wgmma_forward(args, bucket, stream);
  switch (bucket) {
    case 32: return mma_forward::launch_mma_forward<T, 32>(args, stream);
    case 64: return mma_forward::launch_mma_forward<T, 64>(args, stream);
    case 96: return mma_forward::launch_mma_forward<T, 96>(args, stream);
    case 128: return mma_forward::launch_mma_forward<T, 128>(args, stream);
    default: return mma_forward::launch_mma_forward<T, 256>(args, stream);
  }
}

template void flash_attention_mma_forward<bf16>(const AttentionForwardArgs<bf16>&, cudaStream_t);
template void flash_attention_mma_forward<f16>(const AttentionForwardArgs<f16>&, cudaStream_t);

}  // namespace alpha::kernels::cuda
