// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA'14): a
// tiny generator whose output is fixed by its definition, unlike std:: distributions, whose results
// differ between standard libraries. The data layer uses it wherever text or an order must be the
// same on every machine: corpus generation and per-epoch shuffles.
#pragma once
#include <cstdint>

namespace alpha::data {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n) for n > 0, without modulo bias (Lemire's multiply-and-reject).
  uint64_t below(uint64_t n) {
    unsigned __int128 m = (unsigned __int128)next() * n;
    uint64_t low = uint64_t(m);
    if (low < n) {
      uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = (unsigned __int128)next() * n;
        low = uint64_t(m);
      }
    }
    return uint64_t(m >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace alpha::data
