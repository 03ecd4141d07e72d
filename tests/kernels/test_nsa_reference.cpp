// Reference NSA (kernels/nsa_reference.h) against a naive f64 oracle written here from the definition: the compressor
// as plain loops, the three branches as explicit [T, keys] masks with a dense softmax each, the selection scores from
// an explicit token-overlap test, and the top-n by a full sort. The kernels run directly into NaN-poisoned outputs.
// Also: the window branch and (with stride 1) the compressed branch against the dense reference attention; forced
// blocks and the tie-break; f32 against f64 (both also at G 16); finite-difference gradient checks of every input in
// f64, one branch at a time first (B = H = 1, T = 32), with a K that is the identity, then lengths 63, 64, 65 and GQA
// groups 1, 2, 4; fused and head-major layouts; the same bits at any thread count; bad inputs.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "alpha/autograd/functions.h"
#include "alpha/kernels/nsa_reference.h"
#include "alpha/ops/attention.h"
#include "alpha/ops/check.h"
#include "alpha/ops/nsa.h"
#include "kernels/kernel_helpers.h"
#include "support/checks.h"

namespace alpha {
namespace {

using test::all_close;
using test::random;

struct NsaCase {
  std::string name;
  int64_t batch, seq_len, q_heads, kv_heads, head_dim, value_dim;
  ops::NsaConfig config;
};

std::ostream& operator<<(std::ostream& os, const NsaCase& c) { return os << c.name; }

// l, d, l', n, w.
ops::NsaConfig nsa_config(int64_t l, int64_t d, int64_t l_sel, int64_t n, int64_t w, double scale = 0.0) {
  return {scale, l, d, l_sel, n, w};
}

// Inputs uniform in [-1, 1), the compressor's weights scaled by 1/√(l·D) so compressed keys stay O(1), and gate
// logits in [-2, 2).
ops::NsaInputs make_inputs(const NsaCase& c, DType dtype) {
  const int64_t l = c.config.block_len, D = c.head_dim, Dv = c.value_dim;
  ops::NsaInputs in;
  in.q = random({c.batch, c.seq_len, c.q_heads, D}, dtype, -2.0, 2.0);
  in.k = random({c.batch, c.seq_len, c.kv_heads, D}, dtype);
  in.v = random({c.batch, c.seq_len, c.kv_heads, Dv}, dtype);
  in.gates = random({c.batch, c.seq_len, c.q_heads, 3}, dtype, -2.0, 2.0);
  in.k_pos = random({l, D}, dtype);
  in.k_weight = random({D, l * D}, dtype, -2.0 / std::sqrt(double(l * D)), 2.0 / std::sqrt(double(l * D)));
  in.v_pos = random({l, Dv}, dtype);
  in.v_weight = random({Dv, l * Dv}, dtype, -2.0 / std::sqrt(double(l * Dv)), 2.0 / std::sqrt(double(l * Dv)));
  return in;
}

ops::NsaInputs converted(const ops::NsaInputs& in, DType dtype) {
  return {in.q.to(dtype),     in.k.to(dtype),        in.v.to(dtype),     in.gates.to(dtype),
          in.k_pos.to(dtype), in.k_weight.to(dtype), in.v_pos.to(dtype), in.v_weight.to(dtype)};
}

struct Oracle {
  Tensor out, branch_out, compressed_k, compressed_v;  // f64
  std::vector<std::vector<int32_t>> kept;              // per (b, t, kv head), ascending
  std::vector<std::vector<double>> scores;             // per (b, t, kv head): every candidate block's score
};

// The naive forward, from the definition in kernels/nsa_reference.h.
Oracle naive_nsa(const ops::NsaInputs& in, const ops::NsaConfig& cfg) {
  const int64_t B = in.q.size(0), T = in.q.size(1), Hq = in.q.size(2), D = in.q.size(3);
  const int64_t Hkv = in.k.size(2), Dv = in.v.size(3), G = Hq / Hkv;
  const int64_t l = cfg.block_len, d = cfg.block_stride, ls = cfg.select_len, n = cfg.select_count, w = cfg.window;
  const double scale = cfg.scale != 0 ? cfg.scale : 1.0 / std::sqrt(double(D));
  const int64_t Nc = T >= l ? (T - l) / d + 1 : 0;
  // The inputs as flat row-major f64 vectors ([B, T, H, features]; parameters [rows, cols]).
  const std::vector<double> qv = in.q.contiguous().to_vector<double>(), kv = in.k.contiguous().to_vector<double>();
  const std::vector<double> vv = in.v.contiguous().to_vector<double>(), gv = in.gates.contiguous().to_vector<double>();
  const std::vector<double> kpos = in.k_pos.to_vector<double>(), kw = in.k_weight.to_vector<double>();
  const std::vector<double> vpos = in.v_pos.to_vector<double>(), vw = in.v_weight.to_vector<double>();
  auto q = [&](int64_t b, int64_t t, int64_t h, int64_t e) { return qv[size_t(((b * T + t) * Hq + h) * D + e)]; };
  // Compressor: K̃_i[e] = Σ_{j, e'} W[e, j·F + e']·(x[i·d + j, e'] + pos[j, e']), F features.
  auto compress = [&](const std::vector<double>& x, const std::vector<double>& pos, const std::vector<double>& weight,
                      int64_t F) {
    std::vector<double> out(size_t(B * Nc * Hkv * F), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < Nc; ++i)
        for (int64_t g = 0; g < Hkv; ++g)
          for (int64_t e = 0; e < F; ++e)
            for (int64_t j = 0; j < l; ++j)
              for (int64_t f = 0; f < F; ++f)
                out[size_t(((b * Nc + i) * Hkv + g) * F + e)] +=
                    weight[size_t(e * l * F + j * F + f)] *
                    (x[size_t(((b * T + i * d + j) * Hkv + g) * F + f)] + pos[size_t(j * F + f)]);
    return out;
  };
  const std::vector<double> ck = compress(kv, kpos, kw, D), cv = compress(vv, vpos, vw, Dv);
  // One dense softmax over the keys a mask lets through; keys given by accessors.
  auto attend = [&](int64_t b, int64_t t, int64_t h, int64_t keys, const std::vector<bool>& visible,
                    const std::function<double(int64_t, int64_t)>& key,
                    const std::function<double(int64_t, int64_t)>& value, std::vector<double>& probs) {
    std::vector<double> s(size_t(keys), -std::numeric_limits<double>::infinity());
    double m = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t j = 0; j < keys; ++j) {
      if (!visible[size_t(j)]) continue;
      double dot = 0;
      for (int64_t e = 0; e < D; ++e) dot += q(b, t, h, e) * key(j, e);
      s[size_t(j)] = dot * scale;
      m = std::max(m, s[size_t(j)]);
    }
    for (int64_t j = 0; j < keys; ++j) sum += visible[size_t(j)] ? std::exp(s[size_t(j)] - m) : 0.0;
    probs.assign(size_t(keys), 0.0);
    std::vector<double> o(size_t(Dv), 0.0);
    for (int64_t j = 0; j < keys; ++j) {
      if (!visible[size_t(j)]) continue;
      probs[size_t(j)] = std::exp(s[size_t(j)] - m) / sum;
      for (int64_t e = 0; e < Dv; ++e) o[size_t(e)] += probs[size_t(j)] * value(j, e);
    }
    return o;
  };
  Oracle r;
  std::vector<double> out(size_t(B * T * Hq * Dv), 0.0), branch(size_t(3 * B * T * Hq * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < Hkv; ++g)
      for (int64_t t = 0; t < T; ++t) {
        auto ckey = [&](int64_t i, int64_t e) { return ck[size_t(((b * Nc + i) * Hkv + g) * D + e)]; };
        auto cval = [&](int64_t i, int64_t e) { return cv[size_t(((b * Nc + i) * Hkv + g) * Dv + e)]; };
        auto key = [&](int64_t j, int64_t e) { return kv[size_t(((b * T + j) * Hkv + g) * D + e)]; };
        auto val = [&](int64_t j, int64_t e) { return vv[size_t(((b * T + j) * Hkv + g) * Dv + e)]; };
        std::vector<bool> cmp_mask(static_cast<size_t>(Nc)), win_mask(static_cast<size_t>(T)),
            slc_mask(static_cast<size_t>(T));
        for (int64_t i = 0; i < Nc; ++i) cmp_mask[size_t(i)] = i * d + l - 1 <= t;
        for (int64_t j = 0; j < T; ++j) win_mask[size_t(j)] = j <= t && j > t - w;
        // Selection scores: Σ over the group's heads and the compressed blocks sharing a token with block j.
        const int64_t candidates = t / ls + 1;
        std::vector<double> score(size_t(candidates), 0.0), probs;
        std::vector<std::vector<double>> cmp_out(static_cast<size_t>(G));
        for (int64_t h = g * G; h < (g + 1) * G; ++h) {
          cmp_out[size_t(h - g * G)] = attend(b, t, h, Nc, cmp_mask, ckey, cval, probs);
          for (int64_t j = 0; j < candidates; ++j)
            for (int64_t i = 0; i < Nc; ++i) {
              bool overlap = false;
              for (int64_t x = i * d; x < i * d + l; ++x) overlap = overlap || x / ls == j;
              if (overlap) score[size_t(j)] += probs[size_t(i)];
            }
        }
        std::vector<int32_t> order(static_cast<size_t>(candidates));
        for (int64_t j = 0; j < candidates; ++j) order[size_t(j)] = int32_t(j);
        std::vector<int32_t> kept;
        if (candidates <= n) {
          kept = order;
        } else {
          const std::set<int32_t> forced = {0, int32_t(candidates - 2), int32_t(candidates - 1)};
          std::sort(order.begin(), order.end(), [&](int32_t a, int32_t c) {
            const bool fa = forced.count(a) > 0, fc = forced.count(c) > 0;
            if (fa != fc) return fa;
            if (score[size_t(a)] != score[size_t(c)]) return score[size_t(a)] > score[size_t(c)];
            return a < c;
          });
          kept.assign(order.begin(), order.begin() + n);
          std::sort(kept.begin(), kept.end());
        }
        for (int64_t j = 0; j < T; ++j)
          slc_mask[size_t(j)] = j <= t && std::find(kept.begin(), kept.end(), int32_t(j / ls)) != kept.end();
        r.kept.push_back(kept);
        r.scores.push_back(score);
        for (int64_t h = g * G; h < (g + 1) * G; ++h) {
          const std::vector<double> outs[3] = {cmp_out[size_t(h - g * G)],
                                               attend(b, t, h, T, slc_mask, key, val, probs),
                                               attend(b, t, h, T, win_mask, key, val, probs)};
          for (int64_t c = 0; c < 3; ++c) {
            const double gate = 1.0 / (1.0 + std::exp(-gv[size_t(((b * T + t) * Hq + h) * 3 + c)]));
            for (int64_t e = 0; e < Dv; ++e) {
              branch[size_t((((c * B + b) * T + t) * Hq + h) * Dv + e)] = outs[c][size_t(e)];
              out[size_t(((b * T + t) * Hq + h) * Dv + e)] += gate * outs[c][size_t(e)];
            }
          }
        }
      }
  r.out = Tensor::from_vector(out, {B, T, Hq, Dv});
  r.branch_out = Tensor::from_vector(branch, {3, B, T, Hq, Dv});
  r.compressed_k = Tensor::from_vector(ck, {B, Nc, Hkv, D});
  r.compressed_v = Tensor::from_vector(cv, {B, Nc, Hkv, Dv});
  return r;
}

// The kept blocks of (b, t, kv head) in a selected tensor [B, T, Hkv, n], in the oracle's order.
std::vector<std::vector<int32_t>> kept_lists(const Tensor& selected) {
  std::vector<int32_t> all = selected.to_vector<int32_t>();
  const int64_t B = selected.size(0), T = selected.size(1), Hkv = selected.size(2), n = selected.size(3);
  std::vector<std::vector<int32_t>> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < Hkv; ++g)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> kept;
        for (int64_t s = 0; s < n; ++s)
          if (int32_t j = all[size_t(((b * T + t) * Hkv + g) * n + s)]; j >= 0) kept.push_back(j);
        out.push_back(kept);
      }
  return out;
}

// Kept blocks equal the oracle's; where they differ, the blocks swapped must tie within `gap` (relative to the
// largest score): free blocks are compared as sets, near-ties by score. Returns the number of near-ties.
int64_t expect_same_selection(const Tensor& selected, const Oracle& want, double gap) {
  std::vector<std::vector<int32_t>> got = kept_lists(selected);
  EXPECT_EQ(got.size(), want.kept.size());
  int64_t near_ties = 0;
  for (size_t r = 0; r < got.size() && r < want.kept.size(); ++r) {
    if (got[r] == want.kept[r]) continue;
    const std::vector<double>& score = want.scores[r];
    EXPECT_EQ(got[r].size(), want.kept[r].size()) << "row " << r;
    const double top = *std::max_element(score.begin(), score.end());
    double lowest_kept = std::numeric_limits<double>::infinity(), highest_dropped = 0;
    for (int32_t j : want.kept[r])
      if (std::find(got[r].begin(), got[r].end(), j) == got[r].end())
        lowest_kept = std::min(lowest_kept, score[size_t(j)]);
    for (int32_t j : got[r])
      if (std::find(want.kept[r].begin(), want.kept[r].end(), j) == want.kept[r].end())
        highest_dropped = std::max(highest_dropped, score[size_t(j)]);
    EXPECT_LE(std::fabs(lowest_kept - highest_dropped), gap * top) << "row " << r << ": not a near-tie";
    ++near_ties;
  }
  return near_ties;
}

struct Results {
  ops::NsaOutput forward;
  ops::NsaGrads grads;
};

// Forward and backward through the kernels directly, into NaN-poisoned outputs.
Results run_kernels(const ops::NsaInputs& in, const Tensor& dout, const ops::NsaConfig& config) {
  // selected (i32) starts at −7, which no kept block nor the padding is.
  auto poisoned = [](Shape shape, DType dtype) {
    return dtype == DType::i32 ? Tensor::full(std::move(shape), -7, dtype) : test::poisoned(std::move(shape), dtype);
  };
  Results r{ops::nsa_allocate_output(in, config, poisoned), ops::nsa_allocate_grads(in, poisoned)};
  ops::NsaOutput& f = r.forward;
  ops::NsaGrads& g = r.grads;
  ops::dispatch_cpu_float("test", in.q, [&]<class T>() {
    kernels::cpu::nsa_reference_forward(ops::nsa_forward_args<T>(in, f, config));
    kernels::cpu::nsa_reference_backward(ops::nsa_backward_args<T>(dout, in, f, g, config));
  });
  return r;
}

const NsaCase kCases[] = {
    // name, B, T, Hq, Hkv, D, Dv, {scale, l, d, l', n, w}
    {"t32_mha1_tiny_blocks", 1, 32, 1, 1, 4, 4, nsa_config(4, 2, 4, 4, 6)},
    {"t63_g1", 2, 63, 2, 2, 5, 3, nsa_config(8, 4, 8, 4, 12)},
    {"t64_g2", 1, 64, 4, 2, 4, 6, nsa_config(8, 4, 8, 5, 16)},
    {"t65_g4", 2, 65, 4, 1, 3, 4, nsa_config(8, 4, 8, 3, 9)},
    {"t65_g16", 1, 65, 16, 1, 4, 4, nsa_config(8, 4, 8, 4, 12)},
    {"t65_g2_l_not_multiple_of_d", 1, 65, 2, 1, 4, 4, nsa_config(7, 3, 5, 4, 10, 0.7)},
    {"t64_paper_config_g2", 1, 64, 2, 1, 8, 8, nsa_config(32, 16, 64, 16, 512)},
    {"t65_paper_blocks_small_window", 1, 65, 2, 1, 8, 4, nsa_config(32, 16, 16, 3, 20)},
    {"t5_shorter_than_a_block", 2, 5, 2, 1, 3, 2, nsa_config(8, 4, 2, 3, 3)},
    {"t1_single_token", 1, 1, 2, 2, 2, 3, nsa_config(4, 2, 4, 3, 4)},
};

class NsaReference : public ::testing::TestWithParam<NsaCase> {};

// Forward in f32 and f64 through the kernels against the naive oracle; ops::nsa returns the same.
TEST_P(NsaReference, ForwardMatchesNaiveOracle) {
  const NsaCase& c = GetParam();
  ops::NsaInputs in64 = make_inputs(c, DType::f64);
  Oracle want = naive_nsa(in64, c.config);
  for (DType dtype : {DType::f64, DType::f32}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    ops::NsaInputs in = converted(in64, dtype);
    Results got = run_kernels(in, random({c.batch, c.seq_len, c.q_heads, c.value_dim}, dtype), c.config);
    const int64_t near_ties = expect_same_selection(got.forward.selected, want, dtype == DType::f64 ? 1e-12 : 1e-5);
    if (near_ties > 0) continue;  // a near-tie chose another block: the outputs legitimately differ
    EXPECT_TRUE(all_close(got.forward.compressed_k, want.compressed_k, "nsa"));
    EXPECT_TRUE(all_close(got.forward.compressed_v, want.compressed_v, "nsa"));
    EXPECT_TRUE(all_close(got.forward.branch_out, want.branch_out, "nsa"));
    EXPECT_TRUE(all_close(got.forward.out, want.out, "nsa"));
    ops::NsaOutput fwd = ops::nsa(in, c.config);
    EXPECT_TRUE(test::bit_equal(fwd.out, got.forward.out));
    EXPECT_TRUE(test::bit_equal(fwd.selected, got.forward.selected));
  }
}

// got against want with the "nsa" row, its abs per unit of max|want| where that exceeds 1: the compressor's weight
// gradients sum over every block of the batch, and their f32 rounding grows with those sums (tolerances.h).
::testing::AssertionResult close_per_max(const Tensor& got, const Tensor& want) {
  const test::Tolerance tol = test::tolerance("nsa", got.dtype());
  double largest = 1;
  for (double x : want.to_vector<double>()) largest = std::max(largest, std::fabs(x));
  return all_close(got, want, test::Tolerance{tol.abs * largest, tol.rel});
}

// The gradients of every input in f32 against f64 on the same inputs (the bar: relative error below 1e-3),
// both through the kernels into poisoned outputs; ops::nsa_backward returns the same.
TEST_P(NsaReference, F32GradientsMatchF64) {
  const NsaCase& c = GetParam();
  ops::NsaInputs in64 = make_inputs(c, DType::f64);
  Tensor dout64 = random({c.batch, c.seq_len, c.q_heads, c.value_dim}, DType::f64);
  Results want = run_kernels(in64, dout64, c.config);
  ops::NsaInputs in32 = converted(in64, DType::f32);
  Results got = run_kernels(in32, dout64.to(DType::f32), c.config);
  ASSERT_TRUE(test::bit_equal(got.forward.selected, want.forward.selected)) << "f32 chose other blocks than f64";
  const char* names[] = {"dq", "dk", "dv", "dgates", "dk_pos", "dk_weight", "dv_pos", "dv_weight"};
  std::vector<Tensor> g32 = got.grads.list(), g64 = want.grads.list();
  for (size_t i = 0; i < g32.size(); ++i) EXPECT_TRUE(close_per_max(g32[i], g64[i])) << names[i];
  ops::NsaOutput fwd = ops::nsa(in32, c.config);
  std::vector<Tensor> via_ops = ops::nsa_backward(dout64.to(DType::f32), in32, fwd, c.config).list();
  for (size_t i = 0; i < g32.size(); ++i) EXPECT_TRUE(test::bit_equal(via_ops[i], g32[i])) << names[i];
}

INSTANTIATE_TEST_SUITE_P(Cases, NsaReference, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

// Gate logits of −inf switch a branch off exactly (σ = 0, and no gradient through it).
Tensor only_branch(const Tensor& gates, int64_t branch) {
  Tensor g = gates.clone();
  for (int64_t c = 0; c < 3; ++c)
    if (c != branch) g.slice(3, c, c + 1).fill_(-std::numeric_limits<double>::infinity());
  return g;
}

::testing::AssertionResult nsa_gradcheck(const ops::NsaInputs& in, const ops::NsaConfig& config) {
  return test::gradcheck(
      [&](const std::vector<autograd::Variable>& x) {
        return autograd::nsa({x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]}, config);
      },
      {in.q, in.k, in.v, in.gates, in.k_pos, in.k_weight, in.v_pos, in.v_weight});
}

// B = H = 1, T = 32: each branch alone, then all three, every input against central differences.
TEST(NsaReferenceAutograd, OneBranchAtATimeMatchesFiniteDifferences) {
  const NsaCase c{"t32", 1, 32, 1, 1, 4, 3, nsa_config(4, 2, 4, 4, 6)};
  ops::NsaInputs in = make_inputs(c, DType::f64);
  const char* names[] = {"compressed", "selected", "window"};
  for (int64_t branch = 0; branch < 3; ++branch) {
    SCOPED_TRACE(names[branch]);
    ops::NsaInputs one = in;
    one.gates = only_branch(in.gates, branch);
    EXPECT_TRUE(nsa_gradcheck(one, c.config));
  }
  SCOPED_TRACE("all three");
  EXPECT_TRUE(nsa_gradcheck(in, c.config));
}

// k is the identity (T = D = 8, key t is the unit vector e_t): the scores are q's own elements, so a transposed or
// mis-strided K shows at once.
TEST(NsaReferenceAutograd, IdentityKeys) {
  const NsaCase c{"identity", 1, 8, 2, 1, 8, 3, nsa_config(2, 1, 2, 3, 3)};
  ops::NsaInputs in = make_inputs(c, DType::f64);
  in.k = Tensor::zeros({1, 8, 1, 8}, DType::f64);
  for (int64_t t = 0; t < 8; ++t) in.k.data<double>()[t * 8 + t] = 1.0;
  Oracle want = naive_nsa(in, c.config);
  ops::NsaOutput got = ops::nsa(in, c.config);
  expect_same_selection(got.selected, want, 0.0);
  EXPECT_TRUE(all_close(got.branch_out, want.branch_out, "nsa"));
  EXPECT_TRUE(all_close(got.out, want.out, "nsa"));
  EXPECT_TRUE(nsa_gradcheck(in, c.config));
}

// Lengths around a power of two and GQA groups of 1, 2 and 4, every input in f64.
TEST(NsaReferenceAutograd, LengthsAndGroupsMatchFiniteDifferences) {
  const NsaCase cases[] = {
      {"t63_g1", 1, 63, 1, 1, 2, 2, nsa_config(8, 4, 8, 4, 12)},
      {"t64_g2", 1, 64, 2, 1, 2, 2, nsa_config(8, 4, 8, 3, 10)},
      {"t65_g4", 1, 65, 4, 1, 2, 2, nsa_config(6, 4, 8, 4, 9)},
      {"t9_b2_gqa2", 2, 9, 4, 2, 3, 2, nsa_config(3, 2, 2, 3, 2)},
  };
  for (const NsaCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(nsa_gradcheck(make_inputs(c, DType::f64), c.config));
  }
}

// The window branch is causal attention with a window of w − 1 keys to the left; with stride d = 1 the compressed
// branch is bottom-right causal attention over the Nc = T − l + 1 compressed keys (block i ends at i + l − 1, so
// query t sees i <= t − l + 1 = t + Nc − T). Both against the dense reference attention.
TEST(NsaReferenceOps, BranchesMatchDenseAttention) {
  const NsaCase c{"dense", 2, 37, 4, 2, 5, 3, nsa_config(6, 1, 8, 3, 7)};
  ops::NsaInputs in = make_inputs(c, DType::f64);
  ops::NsaOutput got = ops::nsa(in, c.config);
  ops::AttentionConfig window;
  window.causal = true;
  window.window_left = c.config.window - 1;
  ops::AttentionOutput want = ops::attention_materialized(in.q, in.k, in.v, window);
  EXPECT_TRUE(all_close(got.branch_out.select(0, kernels::kNsaWindow), want.out, "nsa"));
  EXPECT_TRUE(all_close(got.row_max.select(0, kernels::kNsaWindow), want.row_max, "nsa"));
  EXPECT_TRUE(all_close(got.row_sum.select(0, kernels::kNsaWindow), want.row_sum, "nsa"));
  ops::AttentionConfig causal;
  causal.causal = true;
  ops::AttentionOutput compressed = ops::attention_materialized(in.q, got.compressed_k, got.compressed_v, causal);
  EXPECT_TRUE(all_close(got.branch_out.select(0, kernels::kNsaCompressed), compressed.out, "nsa"));
  EXPECT_TRUE(all_close(got.row_sum.select(0, kernels::kNsaCompressed), compressed.row_sum, "nsa"));
}

// Compressed keys all zero make every compressed probability equal, so blocks of equal overlap tie: with l = d = l'
// each compressed block lies in one selection block, the complete ones tie, and the lower indices must win; the first
// and the two local blocks are kept whatever the scores.
TEST(NsaReferenceOps, ForcedBlocksAndTieBreak) {
  const NsaCase c{"ties", 1, 40, 2, 1, 3, 2, nsa_config(4, 4, 4, 5, 4)};
  ops::NsaInputs in = make_inputs(c, DType::f64);
  in.k_weight = Tensor::zeros(in.k_weight.shape(), DType::f64);
  std::vector<std::vector<int32_t>> kept = kept_lists(ops::nsa(in, c.config).selected);
  for (int64_t t = 0; t < c.seq_len; ++t) {
    const int32_t current = int32_t(t / 4);
    std::vector<int32_t> want;
    if (current + 1 <= 5) {
      for (int32_t j = 0; j <= current; ++j) want.push_back(j);
    } else {
      want = {0, 1, 2, current - 1, current};  // blocks 1, 2: the lowest of the tied free ones
    }
    EXPECT_EQ(kept[size_t(t)], want) << "t " << t;
  }
  // Scores that favour other blocks never push out the forced ones.
  const NsaCase far{"forced", 1, 64, 1, 1, 4, 2, nsa_config(4, 4, 4, 4, 4)};
  ops::NsaInputs biased = make_inputs(far, DType::f64);
  for (const auto& blocks : kept_lists(ops::nsa(biased, far.config).selected)) {
    ASSERT_FALSE(blocks.empty());
    EXPECT_EQ(blocks.front(), 0);
    if (blocks.size() >= 2) {
      EXPECT_EQ(blocks[blocks.size() - 1] - 1, blocks[blocks.size() - 2]);
    }
  }
}

TEST(NsaReferenceOps, LongSequenceForwardMatchesOracle) {
  const NsaCase c{"t1000", 1, 1000, 2, 1, 8, 8, nsa_config(32, 16, 64, 16, 512)};
  ops::NsaInputs in = make_inputs(c, DType::f64);
  Oracle want = naive_nsa(in, c.config);
  ops::NsaOutput got = ops::nsa(in, c.config);
  expect_same_selection(got.selected, want, 1e-12);
  EXPECT_TRUE(all_close(got.out, want.out, "nsa"));
}

TEST(NsaReferenceOps, IdenticalAcrossThreadCounts) {
  const NsaCase c{"threads", 2, 40, 4, 2, 4, 4, nsa_config(8, 4, 8, 3, 9)};
  ops::NsaInputs in = make_inputs(c, DType::f32);
  Tensor dout = random({2, 40, 4, 4});
  test::ThreadCountGuard guard;
  std::vector<Tensor> first;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    ops::NsaOutput fwd = ops::nsa(in, c.config);
    std::vector<Tensor> results = ops::nsa_backward(dout, in, fwd, c.config).list();
    results.push_back(fwd.out);
    if (first.empty()) {
      first = results;
      continue;
    }
    for (size_t i = 0; i < results.size(); ++i) EXPECT_TRUE(test::bit_equal(results[i], first[i])) << threads;
  }
}

// q, k and v as slices of one fused qkv tensor, and as head-major tensors transposed to [B, T, H, D]: the same
// bits as contiguous copies, forward and backward (a wrong stride order for K is the classic NSA bug).
TEST(NsaReferenceOps, StridedInputsMatchContiguous) {
  const NsaCase c{"strided", 2, 23, 4, 2, 3, 3, nsa_config(4, 2, 4, 3, 5)};
  ops::NsaInputs base = make_inputs(c, DType::f64);
  Tensor qkv = random({2, 23, 8, 3}, DType::f64);
  ops::NsaInputs fused = base, head_major = base;
  fused.q = qkv.slice(2, 0, 4);
  fused.k = qkv.slice(2, 4, 6);
  fused.v = qkv.slice(2, 6, 8);
  head_major.q = random({2, 4, 23, 3}, DType::f64).transpose(1, 2);
  head_major.k = random({2, 2, 23, 3}, DType::f64).transpose(1, 2);
  head_major.v = random({2, 2, 23, 3}, DType::f64).transpose(1, 2);
  Tensor dout = random({2, 23, 4, 3}, DType::f64);
  for (const ops::NsaInputs& strided : {fused, head_major}) {
    ops::NsaInputs dense = strided;
    dense.q = strided.q.contiguous();
    dense.k = strided.k.contiguous();
    dense.v = strided.v.contiguous();
    ops::NsaOutput got = ops::nsa(strided, c.config), want = ops::nsa(dense, c.config);
    EXPECT_TRUE(test::bit_equal(got.out, want.out));
    std::vector<Tensor> g = ops::nsa_backward(dout, strided, got, c.config).list();
    std::vector<Tensor> w = ops::nsa_backward(dout, dense, want, c.config).list();
    for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(test::bit_equal(g[i], w[i])) << i;
  }
}

TEST(NsaReferenceOps, BadInputsRaise) {
  constexpr const char* kOp = "[nsa]";
  const NsaCase c{"bad", 1, 8, 2, 1, 4, 3, nsa_config(4, 2, 4, 3, 4)};
  ops::NsaInputs ok = make_inputs(c, DType::f32);
  auto with = [&](auto change) {
    ops::NsaInputs in = ok;
    change(in);
    return in;
  };
  EXPECT_ALPHA_ERROR(ops::nsa(with([](auto& in) {
                                in.k = random({1, 9, 1, 4});
                                in.v = random({1, 9, 1, 3});
                              }),
                              c.config),
                     ShapeError, kOp, "'k'", "size 8 in dimension 1");
  EXPECT_ALPHA_ERROR(ops::nsa(with([](auto& in) {
                                in.gates = random({1, 8, 2, 2});
                              }),
                              c.config),
                     ShapeError, kOp, "'gates'", "[1, 8, 2, 3]");
  EXPECT_ALPHA_ERROR(ops::nsa(with([](auto& in) {
                                in.k_weight = random({4, 12});
                              }),
                              c.config),
                     ShapeError, kOp, "'k_weight'", "[4, 16]");
  EXPECT_ALPHA_ERROR(ops::nsa(with([](auto& in) {
                                in.v_pos = random({4, 3}, DType::f64);
                              }),
                              c.config),
                     DTypeError, kOp, "'v_pos'");
  EXPECT_ALPHA_ERROR(ops::nsa(with([](auto& in) {
                                in.k = random({1, 8, 3, 4});
                                in.v = random({1, 8, 3, 3});
                              }),
                              c.config),
                     ShapeError, kOp, "'k'", "dividing");
  ops::NsaConfig few = c.config;
  few.select_count = 2;
  EXPECT_ALPHA_ERROR(ops::nsa(ok, few), ValueError, kOp, "'config.select_count'", "at least 3", "2");
  ops::NsaConfig no_stride = c.config;
  no_stride.block_stride = 0;
  EXPECT_ALPHA_ERROR(ops::nsa(ok, no_stride), ValueError, kOp, "'config.block_stride'");
  ops::NsaOutput fwd = ops::nsa(ok, c.config);
  Tensor dout = random({1, 8, 2, 3});
  ops::NsaOutput stale = fwd;
  stale.selected = Tensor::zeros({1, 8, 1, 4}, DType::i32);
  EXPECT_ALPHA_ERROR(ops::nsa_backward(dout, ok, stale, c.config), ShapeError, "[nsa_backward]", "'forward.selected'");
  EXPECT_ALPHA_ERROR(ops::nsa_backward(random({1, 8, 2, 4}), ok, fwd, c.config), ShapeError, "[nsa_backward]",
                     "'dout'");
}

}  // namespace
}  // namespace alpha
