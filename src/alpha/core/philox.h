// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), a counter-based
// generator: the random bits of element i depend only on (seed, offset + i), never on thread order,
// so the CPU and CUDA backends draw identical dropout masks and a backward pass regenerates the
// forward's mask instead of storing it.
#pragma once
#include <cstdint>

#include "alpha/core/hd.h"

namespace alpha {

struct Philox4x32 {
  uint32_t c[4];
};

ALPHA_HD Philox4x32 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kMul0) * c0;
    uint64_t p1 = uint64_t(kMul1) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// The Philox block of the stream keyed by `seed` whose counter is `block`: the random bits of elements
// 4·block .. 4·block + 3, one per lane (a kernel drawing consecutive elements calls this once per four).
// `substream` fills the counter's upper two words (0 for dropout and sampling; stochastic rounding gives
// each tensor and step its own, kernels/optim.h): different substreams never share a counter.
ALPHA_HD Philox4x32 philox_block(uint64_t seed, uint64_t block, uint64_t substream = 0) {
  return philox4x32_10(uint32_t(block), uint32_t(block >> 32), uint32_t(substream), uint32_t(substream >> 32),
                       uint32_t(seed), uint32_t(seed >> 32));
}

// The 32 random bits for element `index` of a stream keyed by `seed`: one Philox call yields four
// elements' bits, so element i uses lane i % 4 of the block whose counter is i / 4.
ALPHA_HD uint32_t philox_bits(uint64_t seed, uint64_t index, uint64_t substream = 0) {
  const Philox4x32 block = philox_block(seed, index >> 2, substream);
  // Selects, not c[index & 3]: a run-time index into the array would put it in a GPU thread's local memory.
  const uint32_t lane = uint32_t(index & 3);
  const uint32_t low = lane & 1 ? block.c[1] : block.c[0], high = lane & 1 ? block.c[3] : block.c[2];
  return lane & 2 ? high : low;
}

// Uniform in [0, 1) from 32 random bits: their top 24, exactly representable in f32 on every backend.
ALPHA_HD float uniform24(uint32_t bits) { return float(bits >> 8) * (1.0f / 16777216.0f); }

// Uniform in [0, 1) with 24 random bits (uniform24 of element `index`'s bits).
ALPHA_HD float philox_uniform(uint64_t seed, uint64_t index) { return uniform24(philox_bits(seed, index)); }

// Uniform in [0, 1) with 53 random bits (draws 2·index and 2·index + 1 of the stream): for host-side
// sampling and initialisation, identical on every toolchain (unlike std:: distributions).
ALPHA_HD double philox_uniform53(uint64_t seed, uint64_t index) {
  uint64_t high = philox_bits(seed, 2 * index) >> 5;     // 27 bits
  uint64_t low = philox_bits(seed, 2 * index + 1) >> 6;  // 26 bits
  return double((high << 26) | low) * 0x1p-53;
}

// Dropout keeps an element whose uniform draw is at least p: from the element's random bits, and from
// its index in the stream.
ALPHA_HD bool dropout_keeps(uint32_t bits, float p) { return uniform24(bits) >= p; }
ALPHA_HD bool dropout_keep(uint64_t seed, uint64_t index, float p) {
  return dropout_keeps(philox_bits(seed, index), p);
}

}  // namespace alpha
