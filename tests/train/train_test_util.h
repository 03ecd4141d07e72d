// Helpers for the checkpoint I/O suites: scratch directories, tensors of random bits, bit-exact
// comparison, and raw file access for crafting corrupt files.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

#include <signal.h>
#include <sys/resource.h>

#include <gtest/gtest.h>

#include "alpha/tensor/tensor.h"

namespace alpha::test {

// A fresh directory under the system temporary directory, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// While alive, writes that grow any file beyond `bytes` fail with EFBIG (SIGXFSZ ignored): a way to make
// a write fail mid-file that also binds root.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes);
  ~FileSizeLimit();
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  sighandler_t saved_handler_;
};

// Every byte random: for float dtypes this includes NaNs with payloads, infinities, subnormals and -0,
// which only a bit-exact path preserves.
Tensor random_bits(Shape shape, DType dtype);

// The tensor's elements as raw bytes, row-major.
std::string tensor_bytes(const Tensor& t);

// Same dtype, same shape and the same bytes.
::testing::AssertionResult bit_equal(const Tensor& got, const Tensor& want);

// Plain (non-atomic) file access, for crafting and inspecting files byte by byte.
void write_raw(const std::filesystem::path& path, std::string_view bytes);
std::string read_raw(const std::filesystem::path& path);

// The names in a directory, sorted (hidden temporaries included).
std::vector<std::string> list_dir(const std::filesystem::path& dir);

}  // namespace alpha::test
