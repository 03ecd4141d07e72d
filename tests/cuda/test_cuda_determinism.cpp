// Determinism and constant-time mode of flash attention on the GPU (issue 8): the backward repeated 1000
// times gives the same bits; the forward is batch invariant (row b of a batch-B call has the bits of the
// batch-1 call on that row, B in {1, 2, 3, 7, 16, 33}); a whole training run repeated gives the same
// losses and weights; constant_time runs the tensor-core kernels (the same bits as the default call) and
// refuses what they do not cover; the opt-in non-deterministic backward (atomic dQ) gives the deterministic
// dK and dV bits and a dQ that differs only by rounding. The timing test, the counter differential and the SASS audit
// live in bench/constant_time.* and scripts/sass_audit.py. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "alpha/kernels/flash_attention.h"
#include "alpha/ops/attention.h"
#include "support/checks.h"
#include "support/gpu.h"
#include "train/golden_run_util.h"

namespace alpha {
namespace {

class CudaDeterminism : public test::GpuTest<> {};

// The bytes of a tensor, on the host.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  Tensor host = t.to(Device::cpu()).contiguous();
  const auto* data = static_cast<const unsigned char*>(host.raw_data());
  return {data, data + host.numel() * dtype_size(host.dtype())};
}

ops::AttentionConfig causal_gqa_config() {
  ops::AttentionConfig config;
  config.causal = true;
  config.softcap = 20.0;
  config.window_left = 50;
  return config;
}

TEST_F(CudaDeterminism, BackwardRepeatedAThousandTimesGivesTheSameBits) {
  const Device gpu = Device::cuda(0);
  for (DType dtype : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor q = test::random({2, 97, 4, 64}, dtype).to(gpu), k = test::random({2, 97, 2, 64}, dtype).to(gpu);
    Tensor v = test::random({2, 97, 2, 64}, dtype).to(gpu), dout = test::random({2, 97, 4, 64}, dtype).to(gpu);
    const ops::AttentionConfig config = causal_gqa_config();
    ops::AttentionOutput fwd = ops::flash_attention(q, k, v, config);
    std::vector<std::vector<unsigned char>> first;
    int identical = 0;
    for (int run = 0; run < 1000; ++run) {
      ops::AttentionGrads g = ops::flash_attention_backward(dout, q, k, v, fwd.out, fwd.row_max, fwd.row_sum, config);
      std::vector<std::vector<unsigned char>> now = {bytes_of(g.dq), bytes_of(g.dk), bytes_of(g.dv)};
      if (run == 0) first = now;
      identical += now == first;
    }
    EXPECT_EQ(identical, 1000);
  }
}

TEST_F(CudaDeterminism, ForwardIsBatchInvariant) {
  const Device gpu = Device::cuda(0);
  for (DType dtype : {DType::bf16, DType::f32}) {
    for (bool constant_time : {false, true}) {
      if (constant_time && dtype == DType::f32) continue;
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (constant_time ? " constant_time" : ""));
      Tensor q = test::random({33, 45, 4, 64}, dtype).to(gpu), k = test::random({33, 61, 2, 64}, dtype).to(gpu);
      Tensor v = test::random({33, 61, 2, 64}, dtype).to(gpu);
      ops::AttentionConfig config = causal_gqa_config();
      config.constant_time = constant_time;
      std::vector<std::vector<unsigned char>> alone;
      for (int64_t b = 0; b < 33; ++b)
        alone.push_back(bytes_of(
            ops::flash_attention(q.slice(0, b, b + 1), k.slice(0, b, b + 1), v.slice(0, b, b + 1), config).out));
      for (int64_t batch : {1, 2, 3, 7, 16, 33}) {
        ops::AttentionOutput together =
            ops::flash_attention(q.slice(0, 0, batch), k.slice(0, 0, batch), v.slice(0, 0, batch), config);
        for (int64_t b = 0; b < batch; ++b)
          EXPECT_EQ(bytes_of(together.out.slice(0, b, b + 1)), alone[size_t(b)]) << "batch " << batch << ", row " << b;
      }
    }
  }
}

TEST_F(CudaDeterminism, ConstantTimeRunsTheTensorCoreKernelsAndRefusesWhatTheyDoNotCover) {
  const Device gpu = Device::cuda(0);
  Tensor q = test::random({2, 70, 4, 64}, DType::bf16).to(gpu), k = test::random({2, 70, 4, 64}, DType::bf16).to(gpu);
  Tensor v = test::random({2, 70, 4, 64}, DType::bf16).to(gpu);
  ops::AttentionConfig config = causal_gqa_config();
  ops::AttentionOutput plain = ops::flash_attention(q, k, v, config);
  config.constant_time = true;
  ops::AttentionOutput constant = ops::flash_attention(q, k, v, config);
  EXPECT_TRUE(test::bit_equal(constant.out.to(Device::cpu()), plain.out.to(Device::cpu())));
  Tensor dout = test::random({2, 70, 4, 64}, DType::bf16).to(gpu);
  EXPECT_NO_THROW(
      ops::flash_attention_backward(dout, q, k, v, constant.out, constant.row_max, constant.row_sum, config));
  EXPECT_ALPHA_ERROR(ops::flash_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), config), DTypeError,
                     "[flash_attention]", "constant_time");
  EXPECT_ALPHA_ERROR(ops::attention_materialized(q, k, v, config), ValueError, "[attention_materialized]",
                     "config.constant_time");
  config.deterministic = false;
  EXPECT_ALPHA_ERROR(ops::flash_attention(q, k, v, config), ValueError, "[flash_attention]", "config.deterministic");
}

// Causal and not: on Hopper, D 64 and 128 without the mask run the dK/dV kernel that adds dQ itself (D 96 and 128 from
// Tk 2048, hence their longer T), causal at these T the deterministic kernels.
TEST_F(CudaDeterminism, AtomicDqBackwardDiffersFromTheDeterministicOneOnlyInDqRounding) {
  const Device gpu = Device::cuda(0);
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (int64_t head_dim : {32, 64, 96, 128, 256}) {
      for (bool causal : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " D " + std::to_string(head_dim) + (causal ? " causal" : ""));
        const int64_t t = head_dim == 96 || head_dim == 128 ? 2113 : 131;
        Tensor q = test::random({2, t, 4, head_dim}, dtype).to(gpu);
        Tensor k = test::random({2, t, 2, head_dim}, dtype).to(gpu),
               v = test::random({2, t, 2, head_dim}, dtype).to(gpu);
        Tensor dout = test::random({2, t, 4, head_dim}, dtype).to(gpu);
        ops::AttentionConfig config = causal_gqa_config();
        config.causal = causal;
        ops::AttentionOutput fwd = ops::flash_attention(q, k, v, config);
        ops::AttentionGrads fixed =
            ops::flash_attention_backward(dout, q, k, v, fwd.out, fwd.row_max, fwd.row_sum, config);
        config.deterministic = false;
        ops::AttentionGrads atomic =
            ops::flash_attention_backward(dout, q, k, v, fwd.out, fwd.row_max, fwd.row_sum, config);
        EXPECT_TRUE(test::bit_equal(atomic.dk, fixed.dk));
        EXPECT_TRUE(test::bit_equal(atomic.dv, fixed.dv));
        EXPECT_TRUE(test::all_close(atomic.dq, fixed.dq, "cuda.flash_attention.atomic_dq"));
        // Where Hopper's wgmma backward runs and does not add dQ itself (causal at these T), allowing atomics
        // changes nothing: the deterministic kernels run either way (elsewhere the atomic dQ may round differently,
        // within the tolerance above).
#if ALPHA_WITH_CUDA
        kernels::AttentionParams<bf16> p = {};
        p.batch = 2, p.q_len = t, p.kv_len = t, p.q_heads = 4, p.kv_heads = 2, p.head_dim = head_dim,
        p.value_dim = head_dim, p.causal = causal, p.deterministic = false;
        if (kernels::cuda::wgmma_backward_runs(head_dim, head_dim) && !kernels::cuda::wgmma_backward_adds_dq(p)) {
          EXPECT_TRUE(test::bit_equal(atomic.dq, fixed.dq));
        }
#endif
      }
    }
  }
}

// Two straight bf16 runs of the tiny model on the GPU (flash attention, the deterministic backward):
// the same losses and gradient norms at every step and the same weights and optimiser state, bit for bit.
TEST_F(CudaDeterminism, TrainingRunRepeatedGivesTheSameLossesAndWeights) {
  test::TempDir dir;
  auto run = [&](const char* name) {
    train::TrainerOptions o = train::tiny_options(dir / name, 40);
    o.train.device = "cuda:0";
    o.train.precision = "bf16";
    if (std::string(name) == "second") o.data = {(dir / "first" / "data").string()};
    train::Trainer(o).run();
    return train::metrics_of(dir / name);
  };
  const std::vector<nlohmann::json> a = run("first"), b = run("second");
  ASSERT_EQ(a.size(), 40u);
  ASSERT_EQ(b.size(), 40u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()) << "step " << i + 1;
  }
  train::expect_same_checkpoint(dir / "first", dir / "second");
}

}  // namespace
}  // namespace alpha
