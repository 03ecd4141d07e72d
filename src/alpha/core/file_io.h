// File helpers shared by every layer: crash-safe (atomic) file output, checked input at explicit offsets,
// whole-file reads, read-only memory maps, directory fsync, and a UTF-8 check.
//
// A file is replaced atomically: the bytes go to a temporary file in the target's directory, the file is
// fsynced, renamed over the target, and the directory is fsynced. A reader (or a crash at any point) sees
// either the whole old file or the whole new one, never a partial target. On any failure the temporary is
// removed.
//
// Each file-system call here is preceded by fault::before_io (alpha/core/fault.h): a no-op unless a test
// sets ALPHA_FAULT_KILL_AT to crash the process at that point of a checkpoint save.
//
// Every function takes `op`, the caller's operation name, and fails with alpha::IOError in the form of
// raise_io: "[op] file 'path' at byte offset N: what failed[: errno text]" (the offset where known).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace alpha {

// Streams bytes into a temporary next to `target`; commit() publishes them. Destroying an uncommitted
// writer (an exception on the way) removes the temporary and leaves the target untouched.
class AtomicFileWriter {
 public:
  AtomicFileWriter(std::filesystem::path target, std::string_view op);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::span<const std::byte> bytes) { write(bytes.data(), bytes.size()); }
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsync the file, rename it over the target, fsync the directory. Call once.
  void commit();

  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& temporary() const { return temporary_; }
  uint64_t bytes_written() const { return written_; }

 private:
  // Closes and removes the temporary (if still there), then raises IOError at `offset` (-1: none).
  [[noreturn]] void fail(long long offset, std::string_view what, int err);
  void discard() noexcept;

  std::filesystem::path target_;
  std::string op_;
  std::filesystem::path temporary_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// Replaces `target` with `contents` atomically (AtomicFileWriter in one call).
void write_file_atomic(const std::filesystem::path& target, std::string_view contents, std::string_view op);

// fsyncs a directory so that renames and creations inside it survive a crash.
void fsync_directory(const std::filesystem::path& dir, std::string_view op);

// A regular file opened for reading at explicit offsets; short reads and errors raise IOError with the
// path and the byte offset.
class InputFile {
 public:
  InputFile(std::filesystem::path path, std::string_view op);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // Reads exactly `bytes` at `offset`; raises IOError naming `op` if the file ends first.
  void read_at(uint64_t offset, void* dst, size_t bytes, std::string_view op) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole file as bytes.
std::string read_file(const std::filesystem::path& path, std::string_view op);

// A read-only memory map of a whole regular file (empty files map to an empty span).
class MappedFile {
 public:
  MappedFile(std::filesystem::path path, std::string_view op);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// The byte offset where the first ill-formed UTF-8 sequence starts (stray continuation bytes, bad or
// missing continuations, overlong forms, surrogates, code points above U+10FFFF), or nullopt when
// the whole text is valid.
std::optional<size_t> first_invalid_utf8(std::string_view text);

}  // namespace alpha
