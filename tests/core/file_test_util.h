// File helpers for the suites that touch the disk: scratch directories, a file-size limit that makes writes
// fail mid-file, and raw (non-atomic) file access for crafting and inspecting files byte by byte.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <signal.h>
#include <sys/resource.h>

namespace alpha::test {

// A fresh directory under the system temporary directory, removed with everything in it on destruction.
class TempDir;
// Runs the `alpha` binary with `args` (a shell word list); returns its exit code, with stdout and stderr
// captured into `out` and `err` (through files in `dir`).
int run_alpha(const std::string& args, const TempDir& dir, std::string& out, std::string& err);

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }
  // The path of `name` inside the directory, as a string.
  std::string file(std::string_view name) const { return (path_ / name).string(); }

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

// Plain (non-atomic) file access, for crafting and inspecting files byte by byte.
void write_raw(const std::filesystem::path& path, std::string_view bytes);
std::string read_raw(const std::filesystem::path& path);

// The names in a directory, sorted (hidden temporaries included).
std::vector<std::string> list_dir(const std::filesystem::path& dir);

}  // namespace alpha::test
