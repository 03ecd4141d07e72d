// Flash attention through the op, autograd and the model on the GPU: the op matches the materialising
// op on the same inputs (both are checked against the f64 reference kernel by kernel in the harness),
// gradients flow through autograd, the GPT picks flash on a GPU with attention "auto" and trains, and the
// guardrails raise (a CPU tensor, a head dimension beyond the kernels', a bf16 head dimension that is not a
// multiple of 8, bf16 rows that are not 16-byte aligned), and the kernels it runs are named for the logs.
// Skipped without a GPU, except the CPU guardrails.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "alpha/autograd/functions.h"
#include "alpha/kernels/flash_attention.h"
#include "alpha/nn/gpt.h"
#include "alpha/ops/attention.h"
#include "kernels/kernel_helpers.h"
#include "support/checks.h"
#include "support/gpu.h"

namespace alpha {
namespace {

class CudaFlash : public test::GpuTest<> {};

TEST_F(CudaFlash, OpMatchesTheMaterialisingOpForwardAndBackward) {
  const Device gpu = Device::cuda(0);
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // A fused qkv tensor: q, k, v are strided views; GQA 4:2, causal, softcap, dropout, a window.
    Tensor qkv = test::random({2, 77, 8, 48}, dtype).to(gpu);
    Tensor q = qkv.slice(2, 0, 4), k = qkv.slice(2, 4, 6), v = qkv.slice(2, 6, 8);
    ops::AttentionConfig config;
    config.causal = true;
    config.softcap = 5.0;
    config.dropout_p = 0.1;
    config.dropout_seed = 7;
    config.window_left = 40;
    ops::AttentionOutput flash = ops::flash_attention(q, k, v, config);
    ops::AttentionOutput dense = ops::attention_materialized(q, k, v, config);
    const double tol = dtype == DType::f32 ? 1e-4 : 2e-2;
    EXPECT_TRUE(test::all_close(flash.out.to(Device::cpu()), dense.out.to(Device::cpu()), test::Tolerance{tol, tol}));
    EXPECT_TRUE(test::all_close(flash.row_sum.to(Device::cpu()), dense.row_sum.to(Device::cpu()),
                                test::Tolerance{1e-4, 1e-4}));
    Tensor dout = test::random({2, 77, 4, 48}, dtype).to(gpu);
    ops::AttentionGrads gf = ops::flash_attention_backward(dout, q, k, v, flash.out, flash.row_max, flash.row_sum, config);
    ops::AttentionGrads gd =
        ops::attention_materialized_backward(dout, q, k, v, dense.out, dense.row_max, dense.row_sum, config);
    for (auto [got, want] : {std::pair{gf.dq, gd.dq}, {gf.dk, gd.dk}, {gf.dv, gd.dv}})
      EXPECT_TRUE(test::all_close(got.to(Device::cpu()), want.to(Device::cpu()), test::Tolerance{tol, tol}));
  }
}

TEST_F(CudaFlash, BackwardWritesIntoViewsOfAFusedGradient) {
  // dq, dk and dv written into the slices of one poisoned fused gradient [B, T, (Hq + 2·Hkv)·D], by every
  // backward kernel family: the Hopper kernels (bf16, D 64 and 128), the mma.sync kernels (bf16, D 48; also
  // with the atomic dQ and its store pass), the f32 FMA kernels, and the materialising kernels. The same bits
  // as fresh gradients, and every element of the buffer written.
  const Device gpu = Device::cuda(0);
  struct Case {
    DType dtype;
    int64_t head_dim;
    bool deterministic;
  };
  for (Case c : {Case{DType::bf16, 64, true}, Case{DType::bf16, 128, true}, Case{DType::bf16, 48, true},
                 Case{DType::bf16, 48, false}, Case{DType::f32, 40, true}}) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " D " + std::to_string(c.head_dim) +
                 (c.deterministic ? "" : " atomic dQ"));
    const int64_t B = 2, T = 131, Hq = 4, Hkv = 2, D = c.head_dim, width = (Hq + 2 * Hkv) * D;
    const Tensor qkv = test::random({B, T, width}, c.dtype).to(gpu);
    auto heads = [&](const Tensor& fused, int64_t first, int64_t count) {
      return fused.slice(2, first * D, (first + count) * D).view({B, T, count, D});
    };
    const Tensor q = heads(qkv, 0, Hq), k = heads(qkv, Hq, Hkv), v = heads(qkv, Hq + Hkv, Hkv);
    const Tensor dout = test::random({B, T, Hq, D}, c.dtype).to(gpu);
    ops::AttentionConfig config;
    config.causal = true;
    config.deterministic = c.deterministic;
    for (bool flash : {true, false}) {
      SCOPED_TRACE(flash ? "flash" : "materialised");
      const auto forward = flash ? &ops::flash_attention : &ops::attention_materialized;
      const auto backward = flash ? &ops::flash_attention_backward : &ops::attention_materialized_backward;
      ops::AttentionOutput fwd = forward(q, k, v, config);
      ops::AttentionGrads fresh = backward(dout, q, k, v, fwd.out, fwd.row_max, fwd.row_sum, config, nullptr);
      Tensor fused_grad = test::poisoned({B, T, width}, c.dtype).to(gpu);
      const ops::AttentionGrads into{heads(fused_grad, 0, Hq), heads(fused_grad, Hq, Hkv),
                                     heads(fused_grad, Hq + Hkv, Hkv)};
      backward(dout, q, k, v, fwd.out, fwd.row_max, fwd.row_sum, config, &into);
      if (c.deterministic) {
        EXPECT_TRUE(test::bit_equal(into.dq.contiguous(), fresh.dq));
      } else {  // the atomic dQ's low bits vary from run to run
        EXPECT_TRUE(test::all_close(into.dq.contiguous().to(Device::cpu()), fresh.dq.to(Device::cpu()),
                                    test::Tolerance{1e-2, 1e-2}));
      }
      EXPECT_TRUE(test::bit_equal(into.dk.contiguous(), fresh.dk));
      EXPECT_TRUE(test::bit_equal(into.dv.contiguous(), fresh.dv));
      for (double value : fused_grad.to(Device::cpu()).to_vector<double>())
        ASSERT_FALSE(std::isnan(value)) << "an element left unwritten";
    }
  }
}

TEST_F(CudaFlash, GptUsesFlashOnTheGpuAndItsGradientsMatchTheMaterialisingModel) {
  nn::GPTConfig c = nn::load_gpt_config("tiny", ALPHA_SOURCE_DIR "/configs");
  ASSERT_EQ(c.attention, "auto");
  Tensor ids = test::random_indices({2, 33}, int32_t(c.vocab_size));
  Tensor targets = test::random_indices({2, 33}, int32_t(c.vocab_size));
  auto loss_and_grads = [&](const char* attention) {
    nn::GPTConfig ci = c;
    ci.attention = attention;
    nn::GPT model(ci, DType::f32, Device::cuda(0));
    autograd::Variable loss = model.forward(ids, targets).loss;
    autograd::backward(loss);
    std::vector<Tensor> grads;
    for (const auto& p : model.named_parameters()) grads.push_back(p.variable.grad().to(Device::cpu()));
    return std::pair{loss.value().item(), grads};
  };
  auto [flash_loss, flash_grads] = loss_and_grads("auto");
  auto [dense_loss, dense_grads] = loss_and_grads("reference");
  EXPECT_NEAR(flash_loss, dense_loss, 1e-5);
  ASSERT_EQ(flash_grads.size(), dense_grads.size());
  for (size_t i = 0; i < flash_grads.size(); ++i)
    EXPECT_TRUE(test::all_close(flash_grads[i], dense_grads[i], test::Tolerance{1e-5, 1e-3})) << "parameter " << i;
}

TEST_F(CudaFlash, WiderHeadsRaise) {
  Tensor q = test::random({1, 4, 1, 320}, DType::bf16).to(Device::cuda(0));
  EXPECT_ALPHA_ERROR(ops::flash_attention(q, q, q, {}), ShapeError, "[flash_attention]", "'q'", "at most 256", "320");
}

TEST_F(CudaFlash, Bf16HeadDimsThatAreNotMultiplesOf8Raise) {
  Tensor q = test::random({1, 4, 2, 36}, DType::bf16).to(Device::cuda(0));
  EXPECT_ALPHA_ERROR(ops::flash_attention(q, q, q, {}), ShapeError, "[flash_attention]", "'q'", "multiple of 8", "36");
  // f32 runs the FMA kernels, which take any head dimension up to 256.
  Tensor q32 = test::random({1, 4, 2, 36}, DType::f32).to(Device::cuda(0));
  EXPECT_NO_THROW(ops::flash_attention(q32, q32, q32, {}));
}

TEST_F(CudaFlash, Bf16RowsThatAreNot16ByteAlignedRaise) {
  // Head dim 16 viewed one element into rows of 17: rows start 2 bytes past a 16-byte boundary (and the
  // strides are not multiples of 8), which cp.async cannot move.
  Tensor base = test::random({1, 4, 2, 17}, DType::bf16).to(Device::cuda(0));
  Tensor q = base.slice(3, 1, 17);
  EXPECT_ALPHA_ERROR(ops::flash_attention(q, q, q, {}), ShapeError, "flash_attention_forward", "'q'", "16-byte aligned");
}

// The backward walks a GQA group's query tiles in 32-bit positions: Tq·(Hq / Hkv) from 2^31 is refused before anything
// is queued (no tensor that long is made: the check reads the shape only, so the pointers stay null).
TEST_F(CudaFlash, Bf16BackwardOfSequencesFrom2To31Raises) {
#if ALPHA_WITH_CUDA  // the fixture skips without a GPU; the kernels' entry point exists only in CUDA builds
  kernels::AttentionBackwardArgs<bf16> args{};
  kernels::AttentionParams<bf16>& p = args.params;
  p.batch = 1;
  p.q_heads = p.kv_heads = 1;
  p.head_dim = p.value_dim = 64;
  p.q_len = int64_t(1) << 31;
  p.kv_len = 64;
  EXPECT_ALPHA_ERROR(kernels::cuda::flash_attention_backward(args, nullptr, Stream{}), ShapeError,
                     "flash_attention_backward", "q_len", "below 2^31", "2147483648");
  // Shorter, but its GQA group of 2 walks 2^31 steps.
  p.q_len = int64_t(1) << 30;
  p.q_heads = 4;
  p.kv_heads = 2;
  EXPECT_ALPHA_ERROR(kernels::cuda::flash_attention_backward(args, nullptr, Stream{}), ShapeError,
                     "flash_attention_backward", "q_heads / kv_heads", "below 2^31", "1073741824·2");
#endif
}

// The D 128 forward's persistent blocks (Hopper, no dropout or window, up to 2048 keys or 4096 causal) count their
// query tiles in 32 bits: tiles·B·Hq from 2^31 is refused before anything is built or queued (the shape only: the
// pointers stay null). Elsewhere the one-tile kernels run, which have no such limit.
TEST_F(CudaFlash, Bf16ForwardOf2To31PersistentTilesRaises) {
#if ALPHA_WITH_CUDA
  if (ops::flash_attention_kernels(Device::cuda(0), DType::bf16, 128, 128).find("Hopper") == std::string::npos)
    GTEST_SKIP() << "the persistent forward runs on Hopper only";
  kernels::AttentionForwardArgs<bf16> args{};
  kernels::AttentionParams<bf16>& p = args.params;
  p.batch = 1;
  p.q_heads = p.kv_heads = 65535;
  p.head_dim = p.value_dim = 128;
  p.q_len = int64_t(32769) * 128;  // 32,769 tiles of 128 rows in each of 65,535 heads
  p.kv_len = 64;
  p.scale = 1.0f;
  EXPECT_ALPHA_ERROR(kernels::cuda::flash_attention_forward(args, Stream{}), ShapeError, "flash_attention_forward",
                     "query tiles·batch·heads", "below 2^31", "32769·65535");
#endif
}

TEST_F(CudaFlash, KernelsAreNamedForTheLogs) {
  const Device gpu = Device::cuda(0);
  EXPECT_NE(ops::flash_attention_kernels(gpu, DType::f32, 64, 64).find("FMA"), std::string::npos);
  const std::string bf16 = ops::flash_attention_kernels(gpu, DType::bf16, 48, 48);
  EXPECT_TRUE(bf16.find("Hopper") != std::string::npos || bf16.find("mma.sync") != std::string::npos) << bf16;
  EXPECT_NE(bf16.find("bucket 64"), std::string::npos) << bf16;
  EXPECT_ALPHA_ERROR(ops::flash_attention_kernels(gpu, DType::bf16, 36, 36), ShapeError, "flash_attention_kernels_here",
                     "multiples of 8", "36");
}

TEST(CudaFlashGuardrails, KernelsOfACpuDeviceRaise) {
  EXPECT_ALPHA_ERROR(ops::flash_attention_kernels(Device::cpu(), DType::bf16, 64, 64), DeviceError,
                     "[flash_attention_kernels]", "'device'", "a CUDA device", "cpu");
}

TEST(CudaFlashGuardrails, CpuTensorsRaise) {
  Tensor q = test::random({1, 4, 2, 32}, DType::f32);
  EXPECT_ALPHA_ERROR(ops::flash_attention(q, q, q, {}), DeviceError, "[flash_attention]", "'q'", "CUDA tensor", "cpu");
}

}  // namespace
}  // namespace alpha
