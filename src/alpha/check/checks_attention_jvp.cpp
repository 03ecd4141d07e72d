// Harness checks of the attention JVP (kernels/cuda/attention_jvp.cu) against the CPU kernels in f64 on the
// same values, for every dtype. Fresh q, k, v (separate tensors, or strided slices of one fused qkv tensor:
// attention_cases.h) and fresh contiguous tangents tq, tk, tv; outputs poisoned with NaN.
// - Fused form: out, tangent_out, row_max, row_sum against cpu::attention_jvp_fused in f64 (its tangent is
//   the true JVP: tests/kernels/test_attention_jvp.cpp holds it to f64 finite differences); run twice, the
//   outputs must repeat bit for bit.
// - Saved-statistics form: the tangent on the reference's out and statistics rounded as the GPU holds them
//   (out in T, statistics in f32), against cpu::attention_jvp in f64 on the same rounded values.
// How outputs are judged (tolerances.h, row cuda.attention_jvp): in f32 element-wise by the row. In bf16 and
// f16 the fused form's out and tangent_out by the flash kernels' criterion, the tensor-core kernel rounding
// e and e·tS to T before its products as FlashAttention rounds P: their error against the f64 reference may
// be at most twice that of the naive JVP computed in the same precision on the same inputs
// (naive_low_precision_attention_jvp), plus a floor that takes the row's f32 abs. The saved-statistics form
// (the FMA kernel, P and P·tS in f32: one rounding of each output to T) by the row's bf16/f16 entry, stricter;
// in bf16/f16 it runs a second time on the tensor-core kernel (args.tensor_cores, what ops::attention_jvp
// runs), which rounds P and P·tS to T before its products, judged by the naive rule as the fused form.
// The statistics are f32 for every dtype: the f32 row.
// The cases cover the three head-dimension buckets and their tile shapes (D = 1, 5, 32, 48, 64, 96, 128,
// 256; Dv != D within and across buckets), lengths that are not multiples of the tiles (1, 17, 127, 1000,
// 4099), causal and not, Tq < Tk and Tq > Tk (rows that see no key), softcap, GQA ratios 1, 2, 8 and MQA,
// fused qkv slices, and sliding windows (left, right, both, empty rows, zero width).
#if ALPHA_WITH_CUDA
#include <string>
#include <string_view>
#include <type_traits>

#include "alpha/check/attention_cases.h"
#include "alpha/check/families.h"
#include "alpha/check/naive_low_precision_attention.h"
#include "alpha/kernels/attention_jvp.h"

namespace alpha::check {

namespace {

// name, B, Tq, Tk, Hq, Hkv, D, Dv, causal, softcap, dropout (always 0), fused qkv, window left, window right
constexpr AttentionCase kCases[] = {
    {"t1", 1, 1, 1, 2, 2, 64, 64, true, 0.0, 0.0, false},
    {"mha_d64", 2, 64, 64, 4, 4, 64, 64, false, 0.0, 0.0, false},
    {"odd_dims_d5_dv7_t17", 2, 17, 17, 4, 2, 5, 7, true, 0.0, 0.0, false},
    {"d1_tq33_tk7", 1, 33, 7, 2, 2, 1, 1, false, 0.0, 0.0, false},
    {"causal_gqa2_t17_d32", 2, 17, 17, 4, 2, 32, 32, true, 0.0, 0.0, false},
    {"causal_gqa8_t127_d48", 1, 127, 127, 16, 2, 48, 48, true, 0.0, 0.0, false},
    {"causal_masked_rows_mqa_tq100_tk37_d128_dv64", 2, 100, 37, 4, 1, 128, 64, true, 0.0, 0.0, false},
    {"decode_tq1_gqa_d96", 3, 1, 77, 8, 2, 96, 96, true, 0.0, 0.0, false},
    {"fused_qkv_t127_gqa_softcap", 2, 127, 127, 8, 2, 64, 64, true, 0.3, 0.0, true},
    {"cross_tq33_tk130_d128", 1, 33, 130, 2, 2, 128, 128, false, 0.0, 0.0, false},
    {"causal_tq77_tk200_softcap_d256", 1, 77, 200, 2, 2, 256, 256, true, 0.3, 0.0, false},
    {"mqa_d256_dv128", 1, 65, 65, 4, 1, 256, 128, false, 0.0, 0.0, false},
    {"causal_t1000_d64", 1, 1000, 1000, 2, 2, 64, 64, true, 0.0, 0.0, false},
    {"tq1000_tk300_gqa2_d128", 1, 1000, 300, 4, 2, 128, 128, false, 0.0, 0.0, false},
    {"causal_t4099_gqa2_d64", 1, 4099, 4099, 2, 1, 64, 64, true, 0.0, 0.0, false},
    {"window_left63_causal_gqa", 2, 200, 200, 8, 2, 64, 64, true, 0.0, 0.0, false, 63, -1},
    {"window_right70_fused_qkv", 2, 130, 130, 8, 2, 64, 64, false, 0.0, 0.0, true, -1, 70},
    {"window_both_tq_lt_tk_softcap_d48", 1, 77, 300, 4, 4, 48, 48, false, 0.3, 0.0, false, 20, 45},
    {"window_empty_rows_tq_gt_tk_mqa_dv64", 2, 300, 100, 4, 1, 48, 64, false, 0.0, 0.0, false, 10, 5},
    {"window_causal_empty_rows_tq_gt_tk_d256", 1, 150, 70, 2, 2, 256, 256, true, 0.0, 0.0, false, 30, 0},
    {"window_zero_width_causal", 1, 65, 65, 2, 2, 64, 64, true, 0.0, 0.0, false, 0, 0},
};

constexpr std::string_view kRow = "cuda.attention_jvp";

// The fused form's outputs.
struct Fused {
  Tensor out, tangent, row_max, row_sum;
};

template <class T>
void check_case(Context& ctx, const AttentionCase& c) {
  const DType dtype = dtype_of<T>;
  const std::string name = std::string("attention_jvp.") + c.name;
  ops::AttentionConfig config;
  config.causal = c.causal;
  config.softcap = c.softcap;
  config.window_left = c.window_left;
  config.window_right = c.window_right;
  AttentionInputs in = make_attention_inputs(ctx, c, dtype);
  Tensor tq = ctx.random(in.q.shape(), dtype), tk = ctx.random(in.k.shape(), dtype),
         tv = ctx.random(in.v.shape(), dtype);
  Tensor gtq = ctx.to_gpu(tq, dtype), gtk = ctx.to_gpu(tk, dtype), gtv = ctx.to_gpu(tv, dtype);
  const Shape out_shape = {c.batch, c.q_len, c.q_heads, c.value_dim}, stats_shape = {c.batch, c.q_heads, c.q_len};
  const kernels::AttentionParams<T> params = ops::attention_kernel_params<T>(in.gq, in.gk, in.gv, config);
  const kernels::AttentionParams<double> params64 = ops::attention_kernel_params<double>(in.q, in.k, in.v, config);
  const kernels::AttentionJvpInputs<T> inputs{in.gq.data<T>(), in.gk.data<T>(), in.gv.data<T>(),
                                              gtq.data<T>(),   gtk.data<T>(),   gtv.data<T>()};
  const kernels::AttentionJvpInputs<double> inputs64{in.q.data<double>(), in.k.data<double>(), in.v.data<double>(),
                                                     tq.data<double>(),   tk.data<double>(),   tv.data<double>()};

  // Fused, twice.
  auto run_fused = [&] {
    Fused f{ctx.poisoned(out_shape, dtype), ctx.poisoned(out_shape, dtype), ctx.poisoned(stats_shape, DType::f32),
            ctx.poisoned(stats_shape, DType::f32)};
    kernels::cuda::attention_jvp_fused(
        kernels::AttentionJvpFusedArgs<T>{inputs, f.out.data<T>(), f.tangent.data<T>(), f.row_max.data<float>(),
                                          f.row_sum.data<float>(), params},
        ctx.stream());
    return f;
  };
  const Fused got = run_fused(), again = run_fused();
  // out and tangent_out: by the f32 row, or in bf16/f16 against the naive JVP in T (see the header).
  constexpr bool low_precision = !std::is_same_v<T, float>;
  const NaiveAttentionJvp naive =
      low_precision ? naive_low_precision_attention_jvp(in.q.to(dtype), in.k.to(dtype), in.v.to(dtype), tq.to(dtype),
                                                        tk.to(dtype), tv.to(dtype), config)
                    : NaiveAttentionJvp{};
  auto judge = [&](std::string_view output, const Tensor& result, const Tensor& want, const Tensor& naive_result) {
    if constexpr (low_precision)
      ctx.compare_with_naive(name + std::string(output), result, want, naive_result, kRow);
    else
      ctx.compare(name + std::string(output), result, want, kRow);
  };
  Fused want{nans(out_shape), nans(out_shape), nans(stats_shape), nans(stats_shape)};
  kernels::cpu::attention_jvp_fused(
      kernels::AttentionJvpFusedArgs<double>{inputs64, want.out.data<double>(), want.tangent.data<double>(),
                                             want.row_max.data<double>(), want.row_sum.data<double>(), params64});
  judge(".fused.out", got.out, want.out, naive.out);
  judge(".fused.tangent_out", got.tangent, want.tangent, naive.tangent_out);
  ctx.compare(name + ".fused.row_max", got.row_max, want.row_max, kRow);
  ctx.compare(name + ".fused.row_sum", got.row_sum, want.row_sum, kRow);
  ctx.compare_bits(name + ".fused.out.repeats", again.out, got.out);
  ctx.compare_bits(name + ".fused.tangent_out.repeats", again.tangent, got.tangent);

  // Saved statistics: the reference's forward results rounded as the GPU holds them, on both sides.
  Tensor out_in = want.out.to(dtype).to(DType::f64);
  Tensor max_in = want.row_max.to(DType::f32).to(DType::f64), sum_in = want.row_sum.to(DType::f32).to(DType::f64);
  Tensor g_out = ctx.to_gpu(out_in, dtype), g_max = ctx.to_gpu(max_in, DType::f32);
  Tensor g_sum = ctx.to_gpu(sum_in, DType::f32);
  Tensor tangent = ctx.poisoned(out_shape, dtype), want_tangent = nans(out_shape);
  kernels::cuda::attention_jvp(kernels::AttentionJvpArgs<T>{inputs, g_out.data<T>(), g_max.data<float>(),
                                                            g_sum.data<float>(), tangent.data<T>(), params},
                               ctx.stream());
  kernels::cpu::attention_jvp(kernels::AttentionJvpArgs<double>{inputs64, out_in.data<double>(), max_in.data<double>(),
                                                                sum_in.data<double>(), want_tangent.data<double>(),
                                                                params64});
  ctx.compare(name + ".saved.tangent_out", tangent, want_tangent, kRow);
  if constexpr (low_precision) {
    Tensor tangent_mma = ctx.poisoned(out_shape, dtype);
    kernels::cuda::attention_jvp(
        kernels::AttentionJvpArgs<T>{inputs, g_out.data<T>(), g_max.data<float>(), g_sum.data<float>(),
                                     tangent_mma.data<T>(), params, /*tensor_cores=*/true},
        ctx.stream());
    judge(".saved_tensor_cores.tangent_out", tangent_mma, want_tangent, naive.tangent_out);
  }
}

}  // namespace

void check_attention_jvp(Context& ctx) {
  for_each_cuda_dtype([&]<class T>() {
    for (const AttentionCase& c : kCases)
      if (ctx.includes(c.q_len * c.kv_len)) check_case<T>(ctx, c);
  });
}

}  // namespace alpha::check
#endif
