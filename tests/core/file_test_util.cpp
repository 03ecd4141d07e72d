#include "core/file_test_util.h"

#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "alpha/core/file_io.h"

namespace alpha::test {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "alpha_test_XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  // Tests may leave read-only directories behind; make them writable so that removal succeeds.
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(path_, ignored))
    if (e.is_directory(ignored)) fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ignored);
  fs::remove_all(path_, ignored);
}

FileSizeLimit::FileSizeLimit(rlim_t bytes) : saved_handler_(signal(SIGXFSZ, SIG_IGN)) {
  if (getrlimit(RLIMIT_FSIZE, &saved_) != 0) throw std::runtime_error("getrlimit failed");
  rlimit limited = saved_;
  limited.rlim_cur = bytes;
  if (setrlimit(RLIMIT_FSIZE, &limited) != 0) throw std::runtime_error("setrlimit failed");
}

FileSizeLimit::~FileSizeLimit() {
  setrlimit(RLIMIT_FSIZE, &saved_);
  signal(SIGXFSZ, saved_handler_);
}

void write_raw(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string read_raw(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> list_dir(const fs::path& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

int run_alpha(const std::string& args, const TempDir& dir, std::string& out, std::string& err) {
  std::string command = std::string(ALPHA_BINARY) + " " + args + " >" + dir.file("stdout") + " 2>" + dir.file("stderr");
  int status = std::system(command.c_str());
  out = read_file(dir.file("stdout"), "test");
  err = read_file(dir.file("stderr"), "test");
  return WEXITSTATUS(status);
}

}  // namespace alpha::test
