#include "alpha/train/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "alpha/core/error.h"

namespace alpha::train {

namespace {

constexpr std::string_view kWriteOp = "write_file_atomic";

std::string errno_text(std::string_view what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

std::filesystem::path directory_of(const std::filesystem::path& file) {
  std::filesystem::path dir = file.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path target) : target_(std::move(target)) {
  if (target_.filename().empty())
    raise_io(kWriteOp, target_.string(), -1, "the target path names no file");
  // mkostemp fills in the X's with a unique suffix and creates the file exclusively.
  std::string temporary_name = target_.filename().string();
  temporary_name.insert(0, 1, '.').append(".tmp.XXXXXX");  // hidden, and never mistaken for the target
  std::string pattern = (directory_of(target_) / temporary_name).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  fd_ = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd_ < 0) raise_io(kWriteOp, target_.string(), -1, errno_text("creating a temporary file in its directory", errno));
  temporary_ = name.data();
  // mkostemp creates mode 0600; a checkpoint should be as readable as any file the run writes.
  if (::fchmod(fd_, 0644) != 0) fail("setting the temporary file's mode", errno);
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

void AtomicFileWriter::fail(std::string_view what, int err) {
  std::string where = temporary_.empty() ? std::string() : " (temporary '" + temporary_.string() + "' removed)";
  discard();
  raise_io(kWriteOp, target_.string(), -1, errno_text(what, err) + where);
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  if (fd_ < 0) raise_io(kWriteOp, target_.string(), -1, "write after commit or failure");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("writing at byte offset " + std::to_string(written_), errno);
    }
    p += n;
    bytes -= size_t(n);
    written_ += uint64_t(n);
  }
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) raise_io(kWriteOp, target_.string(), -1, "commit after commit or failure");
  if (::fsync(fd_) != 0) fail("fsync of the temporary file", errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("closing the temporary file", errno);
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) fail("renaming the temporary file over the target", errno);
  temporary_.clear();  // it is the target now: nothing left to remove
  committed_ = true;
  fsync_directory(directory_of(target_));
}

void write_file_atomic(const std::filesystem::path& target, std::string_view contents) {
  AtomicFileWriter writer(target);
  writer.write(contents);
  writer.commit();
}

void fsync_directory(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir.empty() ? std::filesystem::path(".") : dir;
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) raise_io("fsync_directory", path.string(), -1, errno_text("opening the directory", errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) raise_io("fsync_directory", path.string(), -1, errno_text("fsync of the directory", err));
}

InputFile::InputFile(std::filesystem::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) raise_io("open", path_.string(), -1, errno_text("opening for reading", errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    raise_io("open", path_.string(), -1, errno_text("fstat", err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    raise_io("open", path_.string(), -1, "not a regular file");
  }
  size_ = uint64_t(st.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

void InputFile::read_at(uint64_t offset, void* dst, size_t bytes, std::string_view op) const {
  char* p = static_cast<char*>(dst);
  uint64_t at = offset;
  while (bytes > 0) {
    ssize_t n = ::pread(fd_, p, bytes, off_t(at));
    if (n < 0) {
      if (errno == EINTR) continue;
      raise_io(op, path_.string(), (long long)at, errno_text("reading", errno));
    }
    if (n == 0)
      raise_io(op, path_.string(), (long long)at,
               "the file ends here, " + std::to_string(bytes) + " more bytes were expected");
    p += n;
    bytes -= size_t(n);
    at += uint64_t(n);
  }
}

std::string read_file(const std::filesystem::path& path) {
  InputFile file(path);
  std::string contents(file.size(), '\0');
  file.read_at(0, contents.data(), contents.size(), "read_file");
  return contents;
}

}  // namespace alpha::train
