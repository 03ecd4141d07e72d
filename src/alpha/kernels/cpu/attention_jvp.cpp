// CPU attention JVP (see attention_jvp.h): OpenMP over (batch, query head), each task sequential (rows
// in order, keys in order), so the result does not depend on the thread count. Scores are computed one
// (query, key) pair at a time and never stored beyond one key tile; everything accumulates in acc_t<T>.
#include "alpha/kernels/attention_jvp.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "alpha/kernels/cpu/attention_scores.h"

namespace alpha::kernels::cpu {

namespace {

// Keys per step of the fused kernel's online softmax: the running max, and with it the rescaling of the
// running sums, changes at most once per tile, as in a GPU kernel's key tile.
constexpr int64_t kKeyTile = 16;

// The operands of one (batch, query head) task: the rows of query i and key j, and where row i's
// statistics and outputs go.
template <class T>
struct HeadRows {
  const AttentionParams<T>& p;
  const AttentionJvpInputs<T>& in;
  int64_t b, h, kv_head;

  const T* query(int64_t i) const { return row_at(in.q, p.q_strides, b, i, h); }
  const T* key(int64_t j) const { return row_at(in.k, p.k_strides, b, j, kv_head); }
  const T* value(int64_t j) const { return row_at(in.v, p.v_strides, b, j, kv_head); }
  const T* tangent_query(int64_t i) const { return in.tq + ((b * p.q_len + i) * p.q_heads + h) * p.head_dim; }
  const T* tangent_key(int64_t j) const { return in.tk + ((b * p.kv_len + j) * p.kv_heads + kv_head) * p.head_dim; }
  const T* tangent_value(int64_t j) const { return in.tv + ((b * p.kv_len + j) * p.kv_heads + kv_head) * p.value_dim; }
  int64_t statistic(int64_t i) const { return (b * p.q_heads + h) * p.q_len + i; }      // into (B, Hq, Tq)
  int64_t output(int64_t i) const { return ((b * p.q_len + i) * p.q_heads + h) * p.value_dim; }  // (B, Tq, Hq, Dv)

  // tS_ij = (tq_i·k_j + q_i·tk_j)·scale·(1 − (S_ij/c)²), given the score S_ij.
  acc_t<T> tangent_score(int64_t i, int64_t j, acc_t<T> score) const {
    const acc_t<T> raw = (dot(tangent_query(i), key(j), p.head_dim) + dot(query(i), tangent_key(j), p.head_dim)) * p.scale;
    return raw * softcap_slope(p, score);
  }

  // acc_out += e·V_j and acc_tangent += e·(tS·V_j + tv_j); acc_out may be null.
  void accumulate(int64_t j, acc_t<T> e, acc_t<T> tangent_score, acc_t<T>* acc_out, acc_t<T>* acc_tangent) const {
    const T* vj = value(j);
    const T* tvj = tangent_value(j);
    for (int64_t d = 0; d < p.value_dim; ++d) {
      if (acc_out) acc_out[d] += e * acc_t<T>(vj[d]);
      acc_tangent[d] += e * (tangent_score * acc_t<T>(vj[d]) + acc_t<T>(tvj[d]));
    }
  }
};

// Calls row(rows, i, scratch) for every query row i of every (batch, query head): heads in parallel, the
// rows of a head in order, with `scratch` (2·Dv accumulators) private to the task.
template <class T, class Row>
void for_each_query_row(const AttentionParams<T>& p, const AttentionJvpInputs<T>& in, Row&& row) {
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < p.batch * p.q_heads; ++bh) {
    const int64_t h = bh % p.q_heads;
    const HeadRows<T> rows{p, in, bh / p.q_heads, h, attention_kv_head(p, h)};
    std::vector<acc_t<T>> scratch(size_t(2 * p.value_dim));
    for (int64_t i = 0; i < p.q_len; ++i) row(rows, i, scratch);
  }
}

}  // namespace

template <class T>
void attention_jvp(const AttentionJvpArgs<T>& args) {
  using A = acc_t<T>;
  const AttentionParams<T>& p = args.params;
  for_each_query_row(p, args.in, [&](const HeadRows<T>& rows, int64_t i, std::vector<A>& scratch) {
    const A m = args.row_max[rows.statistic(i)], l = args.row_sum[rows.statistic(i)];
    const KeyRange visible = visible_key_range(p, i);
    A* acc = scratch.data();  // (Dv): Σ_j P_ij·(tS_ij·V_j + tv_j)
    std::fill(acc, acc + p.value_dim, A(0));
    A mu = 0;  // Σ_j P_ij·tS_ij
    for (int64_t j = visible.begin; j < visible.end; ++j) {
      const A score = attention_score(p, rows.query(i), rows.key(j));
      const A prob = std::exp(score - m) / l;
      const A tangent_score = rows.tangent_score(i, j, score);
      mu += prob * tangent_score;
      rows.accumulate(j, prob, tangent_score, nullptr, acc);
    }
    // tO = (P∘tS)·V + P·tv − μ∘O; a row that sees no key has acc = 0, μ = 0 and O = 0: it gets 0.
    const int64_t o = rows.output(i);
    for (int64_t d = 0; d < p.value_dim; ++d) args.tangent_out[o + d] = T(acc[d] - mu * A(args.out[o + d]));
  });
}

template <class T>
void attention_jvp_fused(const AttentionJvpFusedArgs<T>& args) {
  using A = acc_t<T>;
  const AttentionParams<T>& p = args.params;
  for_each_query_row(p, args.in, [&](const HeadRows<T>& rows, int64_t i, std::vector<A>& scratch) {
    const KeyRange visible = visible_key_range(p, i);
    A* acc_out = scratch.data();                  // (Dv): Σ e·V_j
    A* acc_tangent = scratch.data() + p.value_dim;  // (Dv): Σ e·(tS·V_j + tv_j)
    std::fill(scratch.begin(), scratch.end(), A(0));
    A m = -std::numeric_limits<A>::infinity(), l = 0, r = 0;  // running max, Σ e, Σ e·tS
    std::array<A, kKeyTile> scores, tangent_scores;            // one key tile
    for (int64_t tile = visible.begin; tile < visible.end; tile += kKeyTile) {
      const int64_t count = std::min(kKeyTile, visible.end - tile);
      A tile_max = -std::numeric_limits<A>::infinity();
      for (int64_t t = 0; t < count; ++t) {
        scores[size_t(t)] = attention_score(p, rows.query(i), rows.key(tile + t));
        tangent_scores[size_t(t)] = rows.tangent_score(i, tile + t, scores[size_t(t)]);
        tile_max = std::max(tile_max, scores[size_t(t)]);
      }
      // The running max only grows; the sums so far were taken against the old one.
      const A m_new = std::max(m, tile_max);
      const A rescale = std::exp(m - m_new);
      l *= rescale;
      r *= rescale;
      for (A& x : scratch) x *= rescale;
      m = m_new;
      for (int64_t t = 0; t < count; ++t) {
        const A e = std::exp(scores[size_t(t)] - m);
        l += e;
        r += e * tangent_scores[size_t(t)];
        rows.accumulate(tile + t, e, tangent_scores[size_t(t)], acc_out, acc_tangent);
      }
    }
    args.row_max[rows.statistic(i)] = m;
    args.row_sum[rows.statistic(i)] = l;
    // O = acc_out / l, μ = r / l, tO = acc_tangent / l − μ∘O; a row that sees no key gets 0 for both.
    const bool empty = visible.begin == visible.end;
    const A mu = empty ? A(0) : r / l;
    const int64_t o = rows.output(i);
    for (int64_t d = 0; d < p.value_dim; ++d) {
      const A out = empty ? A(0) : acc_out[d] / l;
      args.out[o + d] = T(out);
      args.tangent_out[o + d] = empty ? T(0) : T(acc_tangent[d] / l - mu * out);
    }
  });
}

#define ALPHA_INSTANTIATE(T)                                                  \
  template void attention_jvp<T>(const AttentionJvpArgs<T>&);                 \
  template void attention_jvp_fused<T>(const AttentionJvpFusedArgs<T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
