// CPU reference NSA (conventions in kernels/nsa_reference.h). OpenMP over (batch, kv head) in the forward and the
// backward, since the GQA group shares one selection and one set of dk, dv rows: each task runs its query heads in
// order, so its sums have a fixed order. The compressor's weight and position gradients, shared by every task, are
// summed afterwards over (batch, block, kv head) in order, in parallel over their output rows. Nothing depends on the
// thread count. Everything accumulates in acc_t<T>.
#include "alpha/kernels/nsa_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "alpha/kernels/cpu/attention_scores.h"

namespace alpha::kernels::cpu {

namespace {

// Where one branch reads its keys and values: rows (b, key index, kv head) of two strided operands (the tokens for
// the selected and window branches, the compressed blocks for the compressed one).
template <class T>
struct KeySource {
  const T* k;
  AttentionStrides k_strides;
  const T* v;
  AttentionStrides v_strides;
};

// Where one branch's key and value gradients go for one (batch, kv head): contiguous rows by key index.
template <class A>
struct KeyGradients {
  A* dk;  // (keys, D)
  A* dv;  // (keys, Dv)
};

// Problems smaller than this many query rows (B·T·Hq) run on one thread: waking the pool would cost more than the
// work (finite-difference checks call the kernels thousands of times on tiny inputs).
constexpr int64_t kParallelMinRows = 512;
template <class T>
bool run_parallel(const NsaParams<T>& p) {
  return p.batch * p.seq_len * p.q_heads >= kParallelMinRows;
}

template <class T>
AttentionStrides contiguous_strides(const NsaParams<T>& p, int64_t rows, int64_t features) {
  return {rows * p.kv_heads * features, p.kv_heads * features, features};
}

template <class T>
KeySource<T> compressed_source(const NsaParams<T>& p, const T* compressed_k, const T* compressed_v) {
  const int64_t blocks = nsa_compressed_blocks(p);
  return {compressed_k, contiguous_strides(p, blocks, p.head_dim), compressed_v,
          contiguous_strides(p, blocks, p.value_dim)};
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The key ranges of each branch for query t. Compressed: the blocks ending at or before t. Selected: the kept blocks
// (ascending, −1 padded), cut at t. Window: the last w tokens.
template <class T>
std::vector<KeyRange> compressed_range(const NsaParams<T>& p, int64_t t) {
  const int64_t count = t + 1 < p.block_len ? 0 : (t + 1 - p.block_len) / p.block_stride + 1;
  return {{0, count}};
}

template <class T>
std::vector<KeyRange> selected_ranges(const NsaParams<T>& p, const int32_t* kept, int64_t t) {
  std::vector<KeyRange> ranges;
  for (int64_t slot = 0; slot < p.select_count && kept[slot] >= 0; ++slot) {
    const int64_t begin = int64_t(kept[slot]) * p.select_len;
    ranges.push_back({begin, std::min(begin + p.select_len, t + 1)});
  }
  return ranges;
}

template <class T>
std::vector<KeyRange> window_range(const NsaParams<T>& p, int64_t t) {
  return {{std::max<int64_t>(0, t - p.window + 1), t + 1}};
}

// Softmax attention of query row qi over the keys of `ranges`: out_row = Σ_j P_j·v_j, returning the row statistics
// {m, l}; scores is left holding exp(S_j − m) in key order (P_j·l). No key: m = −inf, l = 0, out_row = 0.
template <class T>
std::pair<acc_t<T>, acc_t<T>> attend_forward(const NsaParams<T>& p, const T* qi, const KeySource<T>& src, int64_t b,
                                             int64_t g, const std::vector<KeyRange>& ranges,
                                             std::vector<acc_t<T>>& scores, std::vector<acc_t<T>>& out_row) {
  using A = acc_t<T>;
  scores.clear();
  A m = -std::numeric_limits<A>::infinity();
  for (const KeyRange& r : ranges)
    for (int64_t j = r.begin; j < r.end; ++j) {
      scores.push_back(dot(qi, row_at(src.k, src.k_strides, b, j, g), p.head_dim) * p.scale);
      m = std::max(m, scores.back());
    }
  A l = 0;
  for (A& s : scores) {
    s = std::exp(s - m);
    l += s;
  }
  std::fill(out_row.begin(), out_row.end(), A(0));
  size_t index = 0;
  for (const KeyRange& r : ranges)
    for (int64_t j = r.begin; j < r.end; ++j) {
      const A weight = scores[index++] / l;
      const T* vj = row_at(src.v, src.v_strides, b, j, g);
      for (int64_t e = 0; e < p.value_dim; ++e) out_row[size_t(e)] += weight * A(vj[e]);
    }
  return {m, l};
}

// The backward of attend_forward for one row, given the branch's output gradient dout_c, its D = dO_c·O_c and the
// forward's statistics: adds into dq_row and into the key gradients by key index.
template <class T>
void attend_backward(const NsaParams<T>& p, const T* qi, const KeySource<T>& src, int64_t b, int64_t g,
                     const std::vector<KeyRange>& ranges, acc_t<T> m, acc_t<T> l, const std::vector<acc_t<T>>& dout_c,
                     acc_t<T> d, std::vector<acc_t<T>>& dq_row, const KeyGradients<acc_t<T>>& grads) {
  using A = acc_t<T>;
  for (const KeyRange& r : ranges)
    for (int64_t j = r.begin; j < r.end; ++j) {
      const T* kj = row_at(src.k, src.k_strides, b, j, g);
      const T* vj = row_at(src.v, src.v_strides, b, j, g);
      const A prob = std::exp(dot(qi, kj, p.head_dim) * p.scale - m) / l;
      A dprob = 0;
      for (int64_t e = 0; e < p.value_dim; ++e) {
        grads.dv[j * p.value_dim + e] += prob * dout_c[size_t(e)];
        dprob += dout_c[size_t(e)] * A(vj[e]);
      }
      const A dscore = prob * (dprob - d) * p.scale;
      for (int64_t e = 0; e < p.head_dim; ++e) {
        dq_row[size_t(e)] += dscore * A(kj[e]);
        grads.dk[j * p.head_dim + e] += dscore * A(qi[e]);
      }
    }
}

// One compressor input x = flatten_j(src[b, i·d + j, g] + pos[j]) (l·features), for block i.
template <class T>
void compressor_input(const NsaParams<T>& p, const T* src, const AttentionStrides& s, const T* pos, int64_t features,
                      int64_t b, int64_t i, int64_t g, std::vector<acc_t<T>>& x) {
  for (int64_t j = 0; j < p.block_len; ++j) {
    const T* row = row_at(src, s, b, i * p.block_stride + j, g);
    for (int64_t e = 0; e < features; ++e)
      x[size_t(j * features + e)] = acc_t<T>(row[e]) + acc_t<T>(pos[j * features + e]);
  }
}

// out (B, Nc, Hkv, features) = weight · x for every block, batch and kv head.
template <class T>
void compress(const NsaParams<T>& p, const T* src, const AttentionStrides& s, const T* pos, const T* weight,
              int64_t features, T* out) {
  using A = acc_t<T>;
  const int64_t blocks = nsa_compressed_blocks(p), width = p.block_len * features;
#pragma omp parallel for schedule(static) if (run_parallel(p))
  for (int64_t task = 0; task < p.batch * blocks * p.kv_heads; ++task) {
    const int64_t b = task / (blocks * p.kv_heads), i = task / p.kv_heads % blocks, g = task % p.kv_heads;
    std::vector<A> x(static_cast<size_t>(width));
    compressor_input(p, src, s, pos, features, b, i, g, x);
    for (int64_t e = 0; e < features; ++e) {
      A sum = 0;
      for (int64_t f = 0; f < width; ++f) sum += A(weight[e * width + f]) * x[size_t(f)];
      out[task * features + e] = T(sum);
    }
  }
}

// The compressor's weight and position gradients from dcompressed (B, Nc, Hkv, features), summed over (b, i, g) in
// order: dweight[e, f] = Σ dcompressed[e]·x[f] and, as x is linear in pos, dpos[f] = Σ_e weight[e, f]·Σ
// dcompressed[e].
template <class T>
void compressor_parameter_grads(const NsaParams<T>& p, const T* src, const AttentionStrides& s, const T* pos,
                                const T* weight, int64_t features, const std::vector<acc_t<T>>& dcompressed, T* dpos,
                                T* dweight) {
  using A = acc_t<T>;
  const int64_t blocks = nsa_compressed_blocks(p), width = p.block_len * features;
  const int64_t rows = p.batch * blocks * p.kv_heads;
#pragma omp parallel for schedule(static) if (run_parallel(p))
  for (int64_t e = 0; e < features; ++e) {
    std::vector<A> x(static_cast<size_t>(width)), row(static_cast<size_t>(width), A(0));
    for (int64_t task = 0; task < rows; ++task) {
      const int64_t b = task / (blocks * p.kv_heads), i = task / p.kv_heads % blocks, g = task % p.kv_heads;
      compressor_input(p, src, s, pos, features, b, i, g, x);
      const A grad = dcompressed[size_t(task * features + e)];
      for (int64_t f = 0; f < width; ++f) row[size_t(f)] += grad * x[size_t(f)];
    }
    for (int64_t f = 0; f < width; ++f) dweight[e * width + f] = T(row[size_t(f)]);
  }
  std::vector<A> total(size_t(features), A(0));
  for (int64_t task = 0; task < rows; ++task)
    for (int64_t e = 0; e < features; ++e) total[size_t(e)] += dcompressed[size_t(task * features + e)];
  for (int64_t f = 0; f < width; ++f) {
    A sum = 0;
    for (int64_t e = 0; e < features; ++e) sum += A(weight[e * width + f]) * total[size_t(e)];
    dpos[f] = T(sum);
  }
}

// Adds the compressed blocks' gradients of one (batch, kv head) back onto their tokens: dtokens[i·d + j] +=
// (weightᵀ·dcompressed_i)[j].
template <class T>
void compressor_token_grads(const NsaParams<T>& p, const T* weight, int64_t features, const acc_t<T>* dcompressed,
                            acc_t<T>* dtokens) {
  const int64_t blocks = nsa_compressed_blocks(p), width = p.block_len * features;
  for (int64_t i = 0; i < blocks; ++i)
    for (int64_t e = 0; e < features; ++e) {
      const acc_t<T> grad = dcompressed[i * features + e];
      for (int64_t f = 0; f < width; ++f)
        dtokens[(i * p.block_stride) * features + f] += grad * acc_t<T>(weight[e * width + f]);
    }
}

// The kept selection blocks of query t from the blocks' scores (candidates [0, t/l' + 1)): all when at most n, else
// the first, the block of t and the one before it, then the n − 3 best others by score (ties: the lower index).
// Writes them ascending into kept[0, n), −1 after.
template <class A>
void select_blocks(const std::vector<A>& score, int64_t current, int64_t n, int32_t* kept) {
  const int64_t candidates = current + 1;
  std::vector<int32_t> chosen;
  if (candidates <= n) {
    for (int64_t j = 0; j < candidates; ++j) chosen.push_back(int32_t(j));
  } else {
    std::vector<int32_t> free;
    for (int64_t j = 1; j < current - 1; ++j) free.push_back(int32_t(j));
    const auto better = [&](int32_t a, int32_t b) {
      return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b);
    };
    std::partial_sort(free.begin(), free.begin() + (n - 3), free.end(), better);
    chosen.assign(free.begin(), free.begin() + (n - 3));
    chosen.insert(chosen.end(), {0, int32_t(current - 1), int32_t(current)});
    std::sort(chosen.begin(), chosen.end());
  }
  for (int64_t slot = 0; slot < n; ++slot) kept[slot] = slot < int64_t(chosen.size()) ? chosen[size_t(slot)] : -1;
}

template <class T>
size_t stat_index(const NsaParams<T>& p, int64_t c, int64_t b, int64_t h, int64_t t) {
  return size_t(((c * p.batch + b) * p.q_heads + h) * p.seq_len + t);
}

template <class T>
int64_t branch_row(const NsaParams<T>& p, int64_t c, int64_t b, int64_t t, int64_t h) {
  return (((c * p.batch + b) * p.seq_len + t) * p.q_heads + h) * p.value_dim;
}

}  // namespace

template <class T>
void nsa_reference_forward(const NsaForwardArgs<T>& args) {
  using A = acc_t<T>;
  const NsaParams<T>& p = args.params;
  compress(p, args.in.k, p.k_strides, args.in.k_pos, args.in.k_weight, p.head_dim, args.compressed_k);
  compress(p, args.in.v, p.v_strides, args.in.v_pos, args.in.v_weight, p.value_dim, args.compressed_v);
  const KeySource<T> compressed = compressed_source(p, args.compressed_k, args.compressed_v);
  const KeySource<T> tokens{args.in.k, p.k_strides, args.in.v, p.v_strides};
  const int64_t group = p.q_heads / p.kv_heads;
#pragma omp parallel for schedule(static) if (run_parallel(p))
  for (int64_t bg = 0; bg < p.batch * p.kv_heads; ++bg) {
    const int64_t b = bg / p.kv_heads, g = bg % p.kv_heads;
    std::vector<A> scores, selection, out_row(size_t(p.value_dim));
    std::vector<A> gated(size_t(group * p.value_dim));  // (group, Dv)
    for (int64_t t = 0; t < p.seq_len; ++t) {
      const int64_t current = t / p.select_len;
      selection.assign(size_t(current + 1), A(0));
      std::fill(gated.begin(), gated.end(), A(0));
      int32_t* kept = args.selected + ((b * p.seq_len + t) * p.kv_heads + g) * p.select_count;
      const std::vector<KeyRange> ranges[kNsaBranches] = {compressed_range(p, t), {}, window_range(p, t)};
      // Branch order matters: the compressed probabilities choose the selected blocks.
      for (int64_t c = 0; c < kNsaBranches; ++c) {
        if (c == kNsaSelected && args.given_selected)
          std::copy_n(args.given_selected + (kept - args.selected), p.select_count, kept);
        else if (c == kNsaSelected)
          select_blocks(selection, current, p.select_count, kept);
        const std::vector<KeyRange> selected = c == kNsaSelected ? selected_ranges(p, kept, t) : ranges[c];
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const T* qi = row_at(args.in.q, p.q_strides, b, t, h);
          auto [m, l] =
              attend_forward(p, qi, c == kNsaCompressed ? compressed : tokens, b, g, selected, scores, out_row);
          args.row_max[stat_index(p, c, b, h, t)] = m;
          args.row_sum[stat_index(p, c, b, h, t)] = l;
          T* branch = args.branch_out + branch_row(p, c, b, t, h);
          const A gate = A(sigmoid(double(args.in.gates[((b * p.seq_len + t) * p.q_heads + h) * kNsaBranches + c])));
          for (int64_t e = 0; e < p.value_dim; ++e) {
            branch[e] = T(out_row[size_t(e)]);
            gated[size_t((h - g * group) * p.value_dim + e)] += gate * out_row[size_t(e)];
          }
          if (c != kNsaCompressed) continue;
          for (int64_t i = 0; i < int64_t(scores.size()); ++i) {  // block i overlaps [i·d, i·d + l)
            const int64_t first = i * p.block_stride / p.select_len;
            const int64_t last = (i * p.block_stride + p.block_len - 1) / p.select_len;
            for (int64_t j = first; j <= last; ++j) selection[size_t(j)] += scores[size_t(i)] / l;
          }
        }
      }
      for (int64_t h = g * group; h < (g + 1) * group; ++h)
        for (int64_t e = 0; e < p.value_dim; ++e)
          args.out[((b * p.seq_len + t) * p.q_heads + h) * p.value_dim + e] =
              T(gated[size_t((h - g * group) * p.value_dim + e)]);
    }
  }
}

template <class T>
void nsa_reference_backward(const NsaBackwardArgs<T>& args) {
  using A = acc_t<T>;
  const NsaParams<T>& p = args.params;
  const int64_t group = p.q_heads / p.kv_heads, blocks = nsa_compressed_blocks(p);
  const KeySource<T> compressed = compressed_source(p, args.compressed_k, args.compressed_v);
  const KeySource<T> tokens{args.in.k, p.k_strides, args.in.v, p.v_strides};
  std::vector<A> dcompressed_k(size_t(p.batch * blocks * p.kv_heads * p.head_dim),
                               A(0));  // (B, Nc, Hkv, D)
  std::vector<A> dcompressed_v(size_t(p.batch * blocks * p.kv_heads * p.value_dim),
                               A(0));  // (B, Nc, Hkv, Dv)
#pragma omp parallel for schedule(static) if (run_parallel(p))
  for (int64_t bg = 0; bg < p.batch * p.kv_heads; ++bg) {
    const int64_t b = bg / p.kv_heads, g = bg % p.kv_heads;
    std::vector<A> dk(size_t(p.seq_len * p.head_dim), A(0)), dv(size_t(p.seq_len * p.value_dim), A(0));
    std::vector<A> dck(size_t(blocks * p.head_dim), A(0)), dcv(size_t(blocks * p.value_dim), A(0));
    std::vector<A> dq_row(size_t(p.head_dim)), dout_c(size_t(p.value_dim));
    const KeyGradients<A> token_grads{dk.data(), dv.data()}, compressed_grads{dck.data(), dcv.data()};
    for (int64_t h = g * group; h < (g + 1) * group; ++h)
      for (int64_t t = 0; t < p.seq_len; ++t) {
        const int64_t row = (b * p.seq_len + t) * p.q_heads + h;
        const T* dout = args.dout + row * p.value_dim;
        const T* qi = row_at(args.in.q, p.q_strides, b, t, h);
        const int32_t* kept = args.selected + ((b * p.seq_len + t) * p.kv_heads + g) * p.select_count;
        const std::vector<KeyRange> ranges[kNsaBranches] = {compressed_range(p, t), selected_ranges(p, kept, t),
                                                            window_range(p, t)};
        std::fill(dq_row.begin(), dq_row.end(), A(0));
        for (int64_t c = 0; c < kNsaBranches; ++c) {
          const T* branch = args.branch_out + branch_row(p, c, b, t, h);
          const double gate = sigmoid(double(args.in.gates[row * kNsaBranches + c]));
          A dgate = 0, d = 0;
          for (int64_t e = 0; e < p.value_dim; ++e) {
            dgate += A(dout[e]) * A(branch[e]);
            dout_c[size_t(e)] = A(gate) * A(dout[e]);
            d += dout_c[size_t(e)] * A(branch[e]);
          }
          args.dgates[row * kNsaBranches + c] = T(dgate * A(gate * (1.0 - gate)));
          const A l = args.row_sum[stat_index(p, c, b, h, t)];
          if (l == 0) continue;  // a row that sees no key has a zero output and no gradient
          attend_backward(p, qi, c == kNsaCompressed ? compressed : tokens, b, g, ranges[c],
                          args.row_max[stat_index(p, c, b, h, t)], l, dout_c, d, dq_row,
                          c == kNsaCompressed ? compressed_grads : token_grads);
        }
        for (int64_t e = 0; e < p.head_dim; ++e) args.dq[row * p.head_dim + e] = T(dq_row[size_t(e)]);
      }
    compressor_token_grads<T>(p, args.in.k_weight, p.head_dim, dck.data(), dk.data());
    compressor_token_grads<T>(p, args.in.v_weight, p.value_dim, dcv.data(), dv.data());
    for (int64_t i = 0; i < blocks; ++i) {
      std::copy_n(dck.begin() + i * p.head_dim, p.head_dim,
                  dcompressed_k.begin() + ((b * blocks + i) * p.kv_heads + g) * p.head_dim);
      std::copy_n(dcv.begin() + i * p.value_dim, p.value_dim,
                  dcompressed_v.begin() + ((b * blocks + i) * p.kv_heads + g) * p.value_dim);
    }
    for (int64_t t = 0; t < p.seq_len; ++t) {
      T* dk_out = args.dk + ((b * p.seq_len + t) * p.kv_heads + g) * p.head_dim;
      T* dv_out = args.dv + ((b * p.seq_len + t) * p.kv_heads + g) * p.value_dim;
      for (int64_t e = 0; e < p.head_dim; ++e) dk_out[e] = T(dk[size_t(t * p.head_dim + e)]);
      for (int64_t e = 0; e < p.value_dim; ++e) dv_out[e] = T(dv[size_t(t * p.value_dim + e)]);
    }
  }
  compressor_parameter_grads(p, args.in.k, p.k_strides, args.in.k_pos, args.in.k_weight, p.head_dim, dcompressed_k,
                             args.dk_pos, args.dk_weight);
  compressor_parameter_grads(p, args.in.v, p.v_strides, args.in.v_pos, args.in.v_weight, p.value_dim, dcompressed_v,
                             args.dv_pos, args.dv_weight);
}

#define ALPHA_INSTANTIATE(T)                                        \
  template void nsa_reference_forward<T>(const NsaForwardArgs<T>&); \
  template void nsa_reference_backward<T>(const NsaBackwardArgs<T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
