// Harness checks of flash attention (kernels/cuda/flash_attention.cu) against the CPU reference in f64, for every
// dtype, with the check shared with the materialising kernels (attention_cases.h: forward out, row_max, row_sum;
// backward dq, dk, dv on the reference's forward results; the backward twice, bit for bit). f32 outputs and the
// statistics are held to row cuda.flash_attention; bf16/f16 out, dq, dk, dv to at most twice the error of naive
// attention in the same precision, plus a floor that takes that row's abs (the kernels round P and dS to T before their
// matrix products, as FlashAttention does). The cases cover every head-dimension bucket and tile shape of the kernels
// (D = 32, 48, 64, 96, 128, 256; Dv != D within and across buckets), lengths that are not multiples of the tiles (1,
// 17, 63, 127, 250, 600, 700, 1000, 1030, 1100, 1300, 1500, 2100, 4099; on Hopper the D 128 forward's persistent
// configurations run without dropout or a window up to 2048 keys (4096 causal, its tiles head by head or tile by tile),
// its short one up to 512 (1024 causal) otherwise, the D 64 forward's configurations meet at 1024 keys (2048 causal),
// and each runs with and without dropout), causal and not,
// Tq < Tk and Tq > Tk (leading rows that see no key), softcap, dropout, GQA ratios 1, 2, 8 and MQA, strided q/k/v
// slices of one fused qkv tensor, and sliding windows (left, right, both, empty rows, zero width) whose edges fall
// inside tiles, so that the kernels skip key tiles on both sides and query tiles in the dK/dV pass. bf16/f16 run every
// case twice: with the deterministic backward, and with the opt-in atomic-dQ backward (config.deterministic false;
// prefix flash_attention_atomic_dq). Outputs are poisoned: an element no kernel writes fails.
#if ALPHA_WITH_CUDA
#include "alpha/check/attention_cases.h"
#include "alpha/check/families.h"
#include "alpha/kernels/flash_attention.h"

namespace alpha::check {

namespace {

// name, B, Tq, Tk, Hq, Hkv, D, Dv, causal, softcap, dropout, fused qkv, window left, window right
constexpr AttentionCase kCases[] = {
    {"t1", 1, 1, 1, 2, 2, 64, 64, true, 0.0, 0.0, false},
    {"mha_d64", 2, 64, 64, 4, 4, 64, 64, false, 0.0, 0.0, false},
    {"causal_gqa2_t17_d32", 2, 17, 17, 4, 2, 32, 32, true, 0.0, 0.0, false},
    {"causal_gqa8_dropout_t127_d48", 1, 127, 127, 16, 2, 48, 48, true, 0.0, 0.1, false},
    {"causal_masked_rows_mqa_tq100_tk37_d128_dv64", 2, 100, 37, 4, 1, 128, 64, true, 0.0, 0.0, false},
    {"decode_tq1_gqa_dropout_d96", 3, 1, 77, 8, 2, 96, 96, true, 0.0, 0.2, false},
    {"fused_qkv_t127_gqa_softcap_dropout", 2, 127, 127, 8, 2, 64, 64, true, 0.3, 0.1, true},
    {"cross_tq33_tk130_d128_dropout", 1, 33, 130, 2, 2, 128, 128, false, 0.0, 0.1, false},
    {"causal_tq77_tk200_softcap_d256", 1, 77, 200, 2, 2, 256, 256, true, 0.3, 0.0, false},
    {"mqa_d256_dv128_dropout", 1, 65, 65, 4, 1, 256, 128, false, 0.0, 0.1, false},
    {"causal_t1000_d64", 1, 1000, 1000, 2, 2, 64, 64, true, 0.0, 0.0, false},
    {"tq1000_tk300_gqa2_dropout_d128", 1, 1000, 300, 4, 2, 128, 128, false, 0.0, 0.1, false},
    // With Tq·Tk within the sanitizer runs' small scale (at most 65536): past the D 64 forward's short range, with and
    // without dropout; Tq < 128 leaving a D 128 block's second consumer no rows.
    {"tq90_tk700_d128", 1, 90, 700, 2, 2, 128, 128, false, 0.0, 0.0, false},
    {"causal_tq63_tk1030_gqa2_softcap_dropout_d128", 1, 63, 1030, 2, 1, 128, 128, true, 0.3, 0.1, false},
    {"tq63_tk1030_gqa2_dropout_d64", 1, 63, 1030, 4, 2, 64, 64, false, 0.0, 0.1, false},
    {"tq63_tk1030_softcap_d64", 1, 63, 1030, 2, 2, 64, 64, false, 0.3, 0.0, false},
    // The D 128 forward causal across several key tiles (its ring wraps).
    {"causal_tq100_tk600_d128", 1, 100, 600, 2, 2, 128, 128, true, 0.0, 0.0, false},
    // More query tiles (240 of 128 rows) than an H100's or H200's SMs for the D 128 forward's persistent blocks (one
    // per SM), so that blocks run several: without a mask; causal, taken tile by tile (few tiles a block, of unequal
    // cost); causal with Tq < Tk, tiles of one cost taken head by head.
    {"persistent_b30_tq130_tk500_d128", 30, 130, 500, 4, 4, 128, 128, false, 0.0, 0.0, false},
    {"causal_b20_t250_gqa2_d128", 20, 250, 250, 4, 2, 128, 128, true, 0.0, 0.0, false},
    {"causal_b8_tq130_tk300_h10_d128", 8, 130, 300, 10, 10, 128, 128, true, 0.0, 0.0, false},
    // Past Tk 2048 without a mask: the D 128 forward's blocks of one query tile, the D 97-128 backward adding dQ itself
    // (config.deterministic false).
    {"tq31_tk2100_gqa2_d128", 1, 31, 2100, 4, 2, 128, 128, false, 0.0, 0.0, false},
    {"tq30_tk2100_softcap_dropout_d96", 1, 30, 2100, 2, 2, 96, 96, false, 0.3, 0.1, false},
    {"causal_t4099_gqa2_d64", 1, 4099, 4099, 2, 1, 64, 64, true, 0.0, 0.0, false},
    {"tq1300_tk1100_gqa2_softcap_dropout_d64", 1, 1300, 1100, 4, 2, 64, 64, false, 0.3, 0.1, false},
    {"window_left63_causal_gqa_dropout", 2, 200, 200, 8, 2, 64, 64, true, 0.0, 0.1, false, 63, -1},
    {"window_left100_causal_t1000_d32", 1, 1000, 1000, 2, 2, 32, 32, true, 0.0, 0.0, false, 100, -1},
    {"window_right70_fused_qkv_dropout", 2, 130, 130, 8, 2, 64, 64, false, 0.0, 0.1, true, -1, 70},
    {"window_both_tq_lt_tk_softcap_d48", 1, 77, 300, 4, 4, 48, 48, false, 0.3, 0.0, false, 20, 45},
    {"window_empty_rows_tq_gt_tk_mqa_dv64", 2, 300, 100, 4, 1, 48, 64, false, 0.0, 0.1, false, 10, 5},
    {"window_causal_empty_rows_tq_gt_tk_d256", 1, 150, 70, 2, 2, 256, 256, true, 0.0, 0.0, false, 30, 0},
    {"window_zero_width_causal", 1, 65, 65, 2, 2, 64, 64, true, 0.0, 0.0, false, 0, 0},
    {"window_left300_right200_t1500_d64", 1, 1500, 1500, 2, 2, 64, 64, false, 0.0, 0.0, false, 300, 200},
};

template <class T>
void check_case(Context& ctx, const AttentionCase& c, bool deterministic) {
  check_attention_case<T>(
      ctx, c, deterministic ? "flash_attention" : "flash_attention_atomic_dq", "cuda.flash_attention",
      [&](const kernels::AttentionForwardArgs<T>& args) { kernels::cuda::flash_attention_forward(args, ctx.stream()); },
      [&](const kernels::AttentionBackwardArgs<T>& args) {
        Tensor workspace =
            ctx.poisoned({kernels::cuda::flash_attention_backward_workspace_here(args.params)}, DType::f32);
        kernels::cuda::flash_attention_backward(args, workspace.data<float>(), ctx.stream());
      },
      deterministic);
}

}  // namespace

void check_flash_attention(Context& ctx) {
  for_each_cuda_dtype([&]<class T>() {
    for (const AttentionCase& c : kCases) {
      if (!ctx.includes(c.q_len * c.kv_len)) continue;
      check_case<T>(ctx, c, true);
      if constexpr (!std::is_same_v<T, float>) check_case<T>(ctx, c, false);
    }
  });
}

}  // namespace alpha::check
#endif
