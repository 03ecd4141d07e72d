// Shared by the kernel tests: random i32 class indices (embedding ids, cross-entropy targets) from a
// fresh seed, and a guard that restores the OpenMP thread count after a determinism test.
#pragma once
#include <algorithm>
#include <vector>

#include <omp.h>

#include "support/checks.h"

namespace alpha::test {

// Uniform in [0, count).
inline Tensor random_indices(Shape shape, int32_t count) {
  std::vector<int32_t> ids;
  for (double u : Tensor::uniform(shape, 0.0, double(count), fresh_seed(), DType::f64).to_vector<double>())
    ids.push_back(std::min(int32_t(u), count - 1));
  return Tensor::from_vector(ids, std::move(shape));
}

// Restores the OpenMP thread count on scope exit, for tests that vary it.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(omp_get_max_threads()) {}
  ~ThreadCountGuard() { omp_set_num_threads(saved_); }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int saved_;
};

}  // namespace alpha::test
