#include "alpha/data/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "alpha/core/error.h"

namespace alpha::data {
namespace {

std::string errno_text() { return std::strerror(errno); }

// Closes a descriptor on every path out of a scope.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

void write_all(int fd, std::span<const std::byte> bytes, const std::string& path, std::string_view op,
               long long offset) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) raise_io(op, path, offset, "cannot write: " + errno_text());
    bytes = bytes.subspan(size_t(n));
    offset += n;
  }
}

}  // namespace

std::string read_file(const std::string& path, std::string_view op) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) raise_io(op, path, -1, "cannot open: " + errno_text());
  FdGuard guard{fd};
  std::string out;
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) raise_io(op, path, (long long)out.size(), "cannot read: " + errno_text());
    if (n == 0) break;
    out.append(buffer, size_t(n));
  }
  return out;
}

void write_file_atomic(const std::string& path, std::span<const std::span<const std::byte>> parts,
                       std::string_view op) {
  // The temporary file sits beside the target so that the rename stays within one file system.
  std::string temp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) raise_io(op, temp, -1, "cannot create: " + errno_text());
  try {
    FdGuard guard{fd};
    long long offset = 0;
    for (auto part : parts) {
      write_all(fd, part, temp, op, offset);
      offset += (long long)part.size();
    }
    if (::fsync(fd) != 0) raise_io(op, temp, -1, "cannot fsync: " + errno_text());
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    std::string why = errno_text();
    ::unlink(temp.c_str());
    raise_io(op, path, -1, "cannot rename the temporary file into place: " + why);
  }
  // The rename is durable only once the directory entry is synced.
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void write_file_atomic(const std::string& path, std::string_view bytes, std::string_view op) {
  std::span<const std::byte> part(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
  write_file_atomic(path, std::span(&part, 1), op);
}

MappedFile::MappedFile(const std::string& path, std::string_view op) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) raise_io(op, path, -1, "cannot open: " + errno_text());
  FdGuard guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) raise_io(op, path, -1, "cannot stat: " + errno_text());
  size_ = size_t(st.st_size);
  if (size_ == 0) return;
  data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (data_ == MAP_FAILED) {
    data_ = nullptr;
    raise_io(op, path, -1, "cannot memory-map: " + errno_text());
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

std::optional<size_t> first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size(), i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The lead byte fixes the length and the allowed range of the first continuation byte, which
    // excludes overlong forms (E0, F0), surrogates (ED) and code points past U+10FFFF (F4).
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      unsigned char b = s[i + k];
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return i;
    }
    i += len;
  }
  return std::nullopt;
}

}  // namespace alpha::data
