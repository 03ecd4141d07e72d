// Crash-safe file output and checked file input for checkpoints.
//
// A file is replaced atomically: the bytes go to a temporary file in the target's directory, the file is
// fsynced, renamed over the target, and the directory is fsynced. A reader (or a crash at any point)
// sees either the whole old file or the whole new one, never a partial target. On any failure the
// temporary is removed and alpha::IOError names the path, what failed and the errno text.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace alpha::train {

// Streams bytes into a temporary next to `target`; commit() publishes them. Destroying an uncommitted
// writer (an exception on the way) removes the temporary and leaves the target untouched.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path target);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsync the file, rename it over the target, fsync the directory. Call once.
  void commit();

  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& temporary() const { return temporary_; }
  uint64_t bytes_written() const { return written_; }

 private:
  // Closes and removes the temporary (if still there), then raises IOError naming `what` and errno.
  [[noreturn]] void fail(std::string_view what, int err);
  void discard() noexcept;

  std::filesystem::path target_;
  std::filesystem::path temporary_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// Replaces `target` with `contents` atomically (AtomicFileWriter in one call).
void write_file_atomic(const std::filesystem::path& target, std::string_view contents);

// fsyncs a directory so that renames and creations inside it survive a crash.
void fsync_directory(const std::filesystem::path& dir);

// A file opened for reading at explicit offsets; short reads and errors raise IOError with the path
// and the byte offset.
class InputFile {
 public:
  explicit InputFile(std::filesystem::path path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // Reads exactly `bytes` at `offset`; raises IOError (op names the caller) if the file ends first.
  void read_at(uint64_t offset, void* dst, size_t bytes, std::string_view op) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole file as bytes; IOError names the path and what failed.
std::string read_file(const std::filesystem::path& path);

}  // namespace alpha::train
