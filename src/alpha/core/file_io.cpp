#include "alpha/core/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "alpha/core/error.h"
#include "alpha/core/fault.h"

namespace alpha {

namespace fs = std::filesystem;

namespace {

std::string errno_text(std::string_view what, int err) { return std::string(what) + ": " + std::strerror(err); }

fs::path directory_of(const fs::path& file) {
  fs::path dir = file.parent_path();
  return dir.empty() ? fs::path(".") : dir;
}

// Closes a descriptor on every path out of a scope, unless released.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

// Opens a regular file for reading; returns the descriptor (the caller closes it) and sets `size`.
int open_for_reading(const fs::path& path, std::string_view op, uint64_t& size) {
  FdGuard guard{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (guard.fd < 0) raise_io(op, path.string(), -1, errno_text("cannot open for reading", errno));
  struct stat st {};
  if (::fstat(guard.fd, &st) != 0) raise_io(op, path.string(), -1, errno_text("cannot stat", errno));
  if (!S_ISREG(st.st_mode)) raise_io(op, path.string(), -1, "cannot read: not a regular file");
  size = uint64_t(st.st_size);
  return guard.release();
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(fs::path target, std::string_view op) : target_(std::move(target)), op_(op) {
  if (target_.filename().empty()) raise_io(op_, target_.string(), -1, "the target path names no file");
  // mkostemp fills in the X's with a unique suffix and creates the file exclusively.
  std::string temporary_name = target_.filename().string();
  temporary_name.insert(0, 1, '.').append(".tmp.XXXXXX");  // hidden, and never mistaken for the target
  std::string pattern = (directory_of(target_) / temporary_name).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  fault::before_io("create", pattern);
  fd_ = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd_ < 0)
    raise_io(op_, target_.string(), -1, errno_text("cannot create a temporary file in its directory", errno));
  temporary_ = name.data();
  // mkostemp creates mode 0600; the file should be as readable as any other file the program writes.
  fault::before_io("chmod", temporary_);
  if (::fchmod(fd_, 0644) != 0) fail(-1, "cannot set the temporary file's mode", errno);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) discard();
}

void AtomicFileWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
}

void AtomicFileWriter::fail(long long offset, std::string_view what, int err) {
  std::string where = temporary_.empty() ? std::string() : " (temporary '" + temporary_.string() + "' removed)";
  discard();
  raise_io(op_, target_.string(), offset, errno_text(what, err) + where);
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  if (fd_ < 0) raise_io(op_, target_.string(), -1, "cannot write after commit or failure");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    fault::before_io("write", temporary_);
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail((long long)written_, "cannot write", errno);
    }
    p += n;
    bytes -= size_t(n);
    written_ += uint64_t(n);
  }
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) raise_io(op_, target_.string(), -1, "cannot commit after commit or failure");
  fault::before_io("fsync", temporary_);
  if (::fsync(fd_) != 0) fail(-1, "cannot fsync the temporary file", errno);
  fault::before_io("close", temporary_);
  int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail(-1, "cannot close the temporary file", errno);
  fault::before_io("rename", target_);
  if (::rename(temporary_.c_str(), target_.c_str()) != 0)
    fail(-1, "cannot rename the temporary file over the target", errno);
  temporary_.clear();  // it is the target now: nothing left to remove
  committed_ = true;
  fsync_directory(directory_of(target_), op_);
}

void write_file_atomic(const fs::path& target, std::string_view contents, std::string_view op) {
  AtomicFileWriter writer(target, op);
  writer.write(contents);
  writer.commit();
}

void fsync_directory(const fs::path& dir, std::string_view op) {
  const fs::path path = dir.empty() ? fs::path(".") : dir;
  fault::before_io("fsync directory", path);
  FdGuard guard{::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (guard.fd < 0) raise_io(op, path.string(), -1, errno_text("cannot open the directory", errno));
  if (::fsync(guard.fd) != 0) raise_io(op, path.string(), -1, errno_text("cannot fsync the directory", errno));
}

InputFile::InputFile(fs::path path, std::string_view op) : path_(std::move(path)) {
  fd_ = open_for_reading(path_, op, size_);
}

InputFile::~InputFile() { ::close(fd_); }

void InputFile::read_at(uint64_t offset, void* dst, size_t bytes, std::string_view op) const {
  char* p = static_cast<char*>(dst);
  uint64_t at = offset;
  while (bytes > 0) {
    ssize_t n = ::pread(fd_, p, bytes, off_t(at));
    if (n < 0) {
      if (errno == EINTR) continue;
      raise_io(op, path_.string(), (long long)at, errno_text("cannot read", errno));
    }
    if (n == 0)
      raise_io(op, path_.string(), (long long)at,
               "the file ends here, " + std::to_string(bytes) + " more bytes were expected");
    p += n;
    bytes -= size_t(n);
    at += uint64_t(n);
  }
}

std::string read_file(const fs::path& path, std::string_view op) {
  InputFile file(path, op);
  std::string contents(file.size(), '\0');
  file.read_at(0, contents.data(), contents.size(), op);
  return contents;
}

MappedFile::MappedFile(fs::path path, std::string_view op) : path_(std::move(path)) {
  uint64_t size = 0;
  FdGuard guard{open_for_reading(path_, op, size)};
  size_ = size_t(size);
  if (size_ == 0) return;  // mmap rejects a zero length
  data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, guard.fd, 0);
  if (data_ == MAP_FAILED) {
    data_ = nullptr;
    raise_io(op, path_.string(), -1, errno_text("cannot memory-map", errno));
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

}  // namespace alpha
