// The safetensors file format (https://github.com/huggingface/safetensors), written and read so that
// files interchange with the Python `safetensors` library:
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header, space-padded to a multiple of 8][data]
//
// The header maps each tensor name to {"dtype": "F32"|"F64"|"BF16"|"F16"|"I32"|"I64"|"U16"|"U8",
// "shape": [...], "data_offsets": [begin, end]} (offsets relative to the start of the data), plus an
// optional "__metadata__" object of string -> string. Tensors are stored row-major, little-endian,
// back to back in header order. The reader accepts exactly that layout and rejects anything else with
// an IOError naming the file and the byte offset (from the start of the file) where it went wrong.
#pragma once
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "alpha/tensor/tensor.h"

namespace alpha::train {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using SafetensorsMetadata = std::map<std::string, std::string>;

struct SafetensorsContents {
  NamedTensors tensors;  // in file order
  SafetensorsMetadata metadata;
};

// "F32", "BF16", ... for a dtype, and back; the parse returns false for names this engine has no dtype for.
std::string_view safetensors_dtype_name(DType dtype);
bool parse_safetensors_dtype(std::string_view name, DType& dtype);

// Writes the tensors (any strides; copied to contiguous CPU memory as needed) in the given order, with
// the metadata, atomically (see alpha/core/file_io.h). Names must be non-empty, unique and not "__metadata__"
// (ValueError); tensors must be defined (ValueError).
void write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                       const SafetensorsMetadata& metadata = {});

// Reads and validates a whole file into contiguous CPU tensors. The file is untrusted: any malformed
// or hostile content (sizes, offsets, dtypes, JSON) raises IOError, never reads out of bounds.
SafetensorsContents read_safetensors(const std::filesystem::path& path);

// The same reader over bytes in memory (`origin` names them in errors, as the path does for a file).
SafetensorsContents read_safetensors_bytes(std::span<const std::byte> bytes, const std::string& origin = "<memory>");

}  // namespace alpha::train
