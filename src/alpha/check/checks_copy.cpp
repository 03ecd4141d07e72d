// Harness checks of the GPU copy kernel (kernels/cuda/copy.cu) through Tensor::copy_from: contiguous(),
// to(DType) and copies into strided views on the GPU, for every supported dtype pair, against the same
// copy in host memory. Conversions round to nearest even on both sides, so the results must agree bit for
// bit.
#if ALPHA_WITH_CUDA
#include <string>
#include <utility>

#include "alpha/check/families.h"

namespace alpha::check {

namespace {

std::string pair_name(DType src, DType dst) {
  return std::string(dtype_name(src)) + "_to_" + std::string(dtype_name(dst));
}

}  // namespace

void check_copy(Context& ctx) {
  const DType floats[] = {DType::f32, DType::bf16, DType::f16};
  // Shapes of 1 to 2^20 elements and odd ones; each is also viewed transposed and sliced.
  const Shape shapes[] = {{1}, {8, 8}, {64, 64}, {16, 64, 64}, {1024, 1024}, {7}, {3, 1001}, {5, 7, 9, 11}};
  for (const Shape& shape : shapes) {
    if (!ctx.includes(shape_numel(shape))) continue;
    for (DType src_dtype : floats) {
      Tensor host = ctx.random(shape, src_dtype).to(src_dtype);
      Tensor gpu = host.to(ctx.gpu());
      // A strided source: the last two dims swapped (or the only one reversed in steps of 2).
      const bool two_d = host.dim() >= 2;
      Tensor host_view = two_d ? host.transpose(-1, -2) : host.slice(0, 0, host.size(0), 2);
      Tensor gpu_view = two_d ? gpu.transpose(-1, -2) : gpu.slice(0, 0, gpu.size(0), 2);
      ctx.compare_bits("copy.contiguous." + std::string(dtype_name(src_dtype)), gpu_view.contiguous(),
                       host_view.contiguous());
      for (DType dst_dtype : floats) {
        if (dst_dtype == src_dtype) continue;
        ctx.compare_bits("copy.convert." + pair_name(src_dtype, dst_dtype), gpu_view.to(dst_dtype),
                         host_view.to(dst_dtype));
      }
      // Into a transposed (strided) destination, from a contiguous source.
      if (two_d) {
        Tensor gpu_dst = ctx.poisoned(shape, DType::f32), host_dst = gpu_dst.to(Device::cpu());
        gpu_dst.transpose(-1, -2).copy_from(gpu.transpose(-1, -2).contiguous());
        host_dst.transpose(-1, -2).copy_from(host.transpose(-1, -2).contiguous());
        ctx.compare_bits("copy.into_view." + pair_name(src_dtype, DType::f32), gpu_dst, host_dst);
      }
    }
  }
  // Row-wise copies (unit-stride rows once neighbouring dimensions merge): a window of each row's last
  // dimension at a 16-byte-aligned start (moved in vectors) and at an unaligned one (element by element),
  // and whole contiguous tensors converted (one merged row).
  const Shape row_shapes[] = {{37, 3, 72}, {64, 64}, {5, 7, 9, 40}, {2, 4099}};
  for (const Shape& shape : row_shapes) {
    if (!ctx.includes(shape_numel(shape))) continue;
    const int64_t last = shape.back();
    for (DType src_dtype : floats) {
      Tensor host = ctx.random(shape, src_dtype).to(src_dtype);
      Tensor gpu = host.to(ctx.gpu());
      const std::pair<int64_t, int64_t> windows[] = {{8, last}, {1, last - 1}};
      for (const auto& [begin, end] : windows) {
        const std::string window = "[" + std::to_string(begin) + ":" + std::to_string(end) + "]";
        Tensor host_rows = host.slice(-1, begin, end), gpu_rows = gpu.slice(-1, begin, end);
        ctx.compare_bits("copy.rows" + window + "." + std::string(dtype_name(src_dtype)), gpu_rows.contiguous(),
                         host_rows.contiguous());
        for (DType dst_dtype : floats)
          if (dst_dtype != src_dtype)
            ctx.compare_bits("copy.rows" + window + "." + pair_name(src_dtype, dst_dtype), gpu_rows.to(dst_dtype),
                             host_rows.to(dst_dtype));
      }
      for (DType dst_dtype : floats)
        if (dst_dtype != src_dtype)
          ctx.compare_bits("copy.whole." + pair_name(src_dtype, dst_dtype), gpu.to(dst_dtype), host.to(dst_dtype));
    }
  }
  // Overlapping views of one storage (staged through a temporary): a shift by one element.
  Tensor host = ctx.random({4099}, DType::f32).to(DType::f32);
  Tensor gpu = host.to(ctx.gpu());
  gpu.slice(0, 1, 4099).copy_from(gpu.slice(0, 0, 4098));
  host.slice(0, 1, 4099).copy_from(host.slice(0, 0, 4098));
  ctx.compare_bits("copy.overlapping", gpu, host);
}

}  // namespace alpha::check
#endif
