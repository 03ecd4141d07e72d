// File helpers for the data layer: whole-file reads, atomic writes (temporary file, fsync, rename, so a
// crash never leaves a half-written file under the final name), read-only memory maps, and UTF-8 checks.
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace alpha::data {

// The whole file; IOError naming `op` and the path when it cannot be opened or read.
std::string read_file(const std::string& path, std::string_view op);

// Writes `parts` one after the other to `path` atomically.
void write_file_atomic(const std::string& path, std::span<const std::span<const std::byte>> parts,
                       std::string_view op);
void write_file_atomic(const std::string& path, std::string_view bytes, std::string_view op);

// A read-only memory map of a whole file (empty files map to an empty span).
class MappedFile {
 public:
  MappedFile(const std::string& path, std::string_view op);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// The byte offset where the first ill-formed UTF-8 sequence starts (stray continuation bytes, bad or
// missing continuations, overlong forms, surrogates, code points above U+10FFFF), or nullopt when
// the whole text is valid.
std::optional<size_t> first_invalid_utf8(std::string_view text);

}  // namespace alpha::data
