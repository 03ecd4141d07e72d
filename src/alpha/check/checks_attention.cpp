// Harness checks of the materialising CUDA attention (kernels/cuda/attention_materialized.cu) against the
// CPU reference in f64, for every dtype, over shapes that cover: causal with Tq < Tk and with Tq > Tk
// (leading query rows that see no key: m = −inf, l = 0, output 0, no gradient), softcap,
// dropout on P (the reference's Philox mask), GQA (Hq = 8, Hkv = 2) and MQA (Hkv = 1), D = 48, 64 and 128,
// Dv != D, Tq = 1 (decoding), odd lengths (77), q/k/v as strided views into one fused qkv tensor, and the
// `seed` model's shape (B = 8, T = 512, H = 8, D = 48, causal).
// The forward's out, row_max and row_sum are compared; the backward runs on the reference's forward
// results rounded to the dtype (so both sides see the same numbers) and its dq, dk, dv are compared, and
// it runs twice: dq, dk and dv (dk and dv summed over each GQA group) must repeat bit for bit.
// The workspace is poisoned with NaN: a kernel reading an entry no kernel wrote (a masked one) fails.
// The check itself is shared with flash attention's (attention_cases.h), and so is how it judges: f32
// outputs and the statistics by row cuda.attention; bf16/f16 out, dq, dk, dv by the same rule as flash
// attention's (at most twice the error of naive attention in the same precision, plus a floor), which these
// kernels, computing in f32 with P kept in f32, should meet with room to spare: their error is about one
// rounding of each output, the naive computation's several.
// One rule for both keeps the runner single; the element-wise bf16/f16 rows of cuda.attention still hold
// the same kernels in the ops-level test (tests/cuda/test_cuda_philox.cpp).
#if ALPHA_WITH_CUDA
#include "alpha/check/attention_cases.h"
#include "alpha/check/families.h"
#include "alpha/kernels/attention_materialized.h"

namespace alpha::check {

namespace {

constexpr AttentionCase kCases[] = {
    {"mha", 2, 64, 64, 4, 4, 64, 64, false, 0.0, 0.0, false},
    {"causal_gqa_dropout_d48", 2, 128, 128, 8, 2, 48, 48, true, 0.0, 0.1, false},
    {"causal_tq_lt_tk_softcap", 1, 77, 200, 4, 4, 64, 64, true, 0.3, 0.0, false},
    {"causal_masked_rows_mqa_dv64_d128", 2, 100, 37, 4, 1, 128, 64, true, 0.0, 0.0, false},
    {"decode_tq1_gqa_dropout", 3, 1, 77, 8, 2, 64, 64, true, 0.0, 0.2, false},
    {"fused_qkv_t77_gqa_softcap_dropout", 2, 77, 77, 8, 2, 64, 64, true, 0.3, 0.1, true},
    {"cross_tq33_tk130_d128_dv96", 1, 33, 130, 2, 2, 128, 96, false, 0.0, 0.1, false},
    {"seed", 8, 512, 512, 8, 8, 48, 48, true, 0.0, 0.0, false},
    {"window_left63_causal_gqa_dropout", 2, 200, 200, 8, 2, 64, 64, true, 0.0, 0.1, false, 63, -1},
    {"window_left100_noncausal_d48", 1, 200, 200, 4, 4, 48, 48, false, 0.0, 0.0, false, 100, -1},
    {"window_right70_fused_qkv_dropout", 2, 130, 130, 8, 2, 64, 64, false, 0.0, 0.1, true, -1, 70},
    {"window_both_tq_lt_tk_softcap", 1, 77, 300, 4, 4, 64, 64, false, 0.3, 0.0, false, 20, 45},
    {"window_empty_rows_tq_gt_tk_mqa", 2, 300, 100, 4, 1, 48, 64, false, 0.0, 0.1, false, 10, 5},
    {"window_causal_empty_rows_tq_gt_tk", 1, 150, 70, 2, 2, 64, 32, true, 0.0, 0.0, false, 30, 0},
    {"window_zero_width_causal", 1, 65, 65, 2, 2, 64, 64, true, 0.0, 0.0, false, 0, 0},
    // Dv 7 is no whole number of 16-byte vectors: the backward's delta pass loads element by element.
    {"odd_dims_d5_dv7_t17_gqa", 2, 17, 17, 4, 2, 5, 7, true, 0.0, 0.0, false},
};

// The kernels with their workspace, poisoned with NaN: a kernel reading an entry no kernel wrote fails.
template <class T>
void check_case(Context& ctx, const AttentionCase& c) {
  auto workspace = [&](const kernels::AttentionParams<T>& p) {
    return ctx.poisoned({kernels::attention_materialized_workspace(p)}, DType::f32);
  };
  check_attention_case<T>(
      ctx, c, "attention", "cuda.attention",
      [&](const kernels::AttentionForwardArgs<T>& args) {
        Tensor ws = workspace(args.params);
        kernels::cuda::attention_materialized_forward(args, ws.data<float>(), ctx.stream());
      },
      [&](const kernels::AttentionBackwardArgs<T>& args) {
        Tensor ws = workspace(args.params);
        kernels::cuda::attention_materialized_backward(args, ws.data<float>(), ctx.stream());
      });
}

}  // namespace

void check_attention(Context& ctx) {
  for_each_cuda_dtype([&]<class T>() {
    for (const AttentionCase& c : kCases)
      if (ctx.includes(c.q_len * c.kv_len)) check_case<T>(ctx, c);
  });
}

}  // namespace alpha::check
#endif
