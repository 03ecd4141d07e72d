#include "alpha/train/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "alpha/core/error.h"
#include "alpha/core/file_io.h"
#include "alpha/core/json.h"

namespace alpha::train {

// The format is little-endian; raw tensor memory is written and read as is.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using ordered_json = nlohmann::ordered_json;

constexpr std::string_view kWriteOp = "write_safetensors";
constexpr std::string_view kReadOp = "read_safetensors";
constexpr std::string_view kMetadataKey = "__metadata__";
constexpr uint64_t kHeaderLengthBytes = 8;
constexpr size_t kHeaderAlignment = 8;

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {{DType::f32, "F32"}, {DType::f64, "F64"}, {DType::bf16, "BF16"},
                                     {DType::f16, "F16"}, {DType::i32, "I32"}, {DType::i64, "I64"},
                                     {DType::u16, "U16"}, {DType::u8, "U8"}};

// A tensor's header entry once validated: where its bytes lie relative to the start of the data.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

std::string offsets_str(uint64_t begin, uint64_t end) {
  std::string text = std::to_string(begin);  // appended piecewise: GCC 12 warns falsely on "[" + std::string
  text.insert(0, 1, '[').append(", ").append(std::to_string(end)).append(")");
  return text;
}

// Parses the header text, rejecting duplicate tensor names (JSON would silently keep the last one).
ordered_json parse_header(const std::string& text, const std::string& path) {
  std::set<std::string> seen;
  std::string duplicate;
  auto reject_duplicates = [&](int depth, nlohmann::json::parse_event_t event, ordered_json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  ordered_json header;
  try {
    header = parse_json<ordered_json>(text, reject_duplicates);
  } catch (const JsonParseError& e) {
    long long at = (long long)kHeaderLengthBytes + std::max(e.offset(), 0LL);
    raise_io(kReadOp, path, at, std::string("invalid JSON header: ") + e.what());
  }
  if (!duplicate.empty())
    raise_io(kReadOp, path, kHeaderLengthBytes, "the header names tensor '" + duplicate + "' more than once");
  if (!header.is_object())
    raise_io(kReadOp, path, kHeaderLengthBytes, "the header is a JSON " + std::string(header.type_name()) +
                                                    ", expected an object");
  return header;
}

SafetensorsMetadata parse_metadata(const ordered_json& value, const std::string& path) {
  SafetensorsMetadata metadata;
  if (!value.is_object())
    raise_io(kReadOp, path, kHeaderLengthBytes, "\"__metadata__\" is a JSON " + std::string(value.type_name()) +
                                                    ", expected an object of strings");
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      raise_io(kReadOp, path, kHeaderLengthBytes,
               "\"__metadata__\" entry '" + key + "' is a JSON " + std::string(v.type_name()) + ", expected a string");
    metadata.emplace(key, v.get<std::string>());
  }
  return metadata;
}

// A non-negative JSON integer, or IOError naming the tensor and the field.
uint64_t header_uint(const ordered_json& v, const std::string& tensor, std::string_view field, const std::string& path) {
  if (!v.is_number_unsigned())
    raise_io(kReadOp, path, kHeaderLengthBytes,
             "tensor '" + tensor + "': " + std::string(field) + " holds " + v.dump() + ", expected a non-negative integer");
  return v.get<uint64_t>();
}

// Checks one header entry's fields and types (not yet its place in the data).
Entry parse_entry(const std::string& name, const ordered_json& info, const std::string& path) {
  auto fail = [&](const std::string& what) { raise_io(kReadOp, path, kHeaderLengthBytes, "tensor '" + name + "': " + what); };
  if (!info.is_object()) fail("entry is a JSON " + std::string(info.type_name()) + ", expected an object");
  for (const auto& [key, v] : info.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets") fail("unexpected field '" + key + "'");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!info.contains(key)) fail(std::string("missing field '") + key + "'");

  Entry e{name, DType::f32, {}, 0, 0};
  const ordered_json& dtype = info["dtype"];
  if (!dtype.is_string() || !parse_safetensors_dtype(dtype.get<std::string>(), e.dtype))
    fail("unknown dtype " + dtype.dump() + " (supported: F32, F64, BF16, F16, I32, I64, U16, U8)");
  const ordered_json& shape = info["shape"];
  if (!shape.is_array()) fail("shape is " + shape.dump() + ", expected an array");
  for (const ordered_json& d : shape) {
    uint64_t size = header_uint(d, name, "shape", path);
    if (size > uint64_t(INT64_MAX)) fail("shape size " + std::to_string(size) + " is too large");
    e.shape.push_back(int64_t(size));
  }
  const ordered_json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) fail("data_offsets is " + offsets.dump() + ", expected [begin, end]");
  e.begin = header_uint(offsets[0], name, "data_offsets", path);
  e.end = header_uint(offsets[1], name, "data_offsets", path);
  return e;
}

// The byte count of a shape and dtype; false when the shape does not fit a tensor: its extent (the
// product of its sizes with zeros counted as 1, which the strides reach) in bytes overflows int64.
// (A zero size makes the byte count 0 but does not make [0, 2^40, 2^40] a valid shape.)
bool shape_bytes(const Shape& shape, DType dtype, uint64_t& bytes) {
  int64_t extent = int64_t(dtype_size(dtype));
  bool empty = false;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(extent, std::max<int64_t>(d, 1), &extent)) return false;
    empty |= d == 0;
  }
  bytes = empty ? 0 : uint64_t(extent);
  return true;
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const DTypeName& d : kDTypeNames)
    if (d.dtype == dtype) return d.name;
  return "?";
}

bool parse_safetensors_dtype(std::string_view name, DType& dtype) {
  for (const DTypeName& d : kDTypeNames)
    if (d.name == name) {
      dtype = d.dtype;
      return true;
    }
  return false;
}

void write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                       const SafetensorsMetadata& metadata) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::vector<Tensor> contiguous;
  contiguous.reserve(tensors.size());
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == kMetadataKey)
      raise<ValueError>(kWriteOp, "tensors", "non-empty names other than \"__metadata__\"", "'" + name + "'");
    if (header.contains(name))
      raise<ValueError>(kWriteOp, "tensors", "unique names", "'" + name + "' more than once");
    if (!tensor.defined())
      raise<ValueError>(kWriteOp, "tensors", "defined tensors", "an undefined tensor named '" + name + "'");
    Tensor t = tensor.to(Device::cpu()).contiguous();
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
    contiguous.push_back(std::move(t));
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ordered_json::type_error& e) {
    raise<ValueError>(kWriteOp, "tensors/metadata", "names and metadata in valid UTF-8", e.what());
  }
  // Padding the header to a multiple of 8 aligns the data for readers that map the file.
  text.append((kHeaderAlignment - text.size() % kHeaderAlignment) % kHeaderAlignment, ' ');
  uint64_t header_length = text.size();

  AtomicFileWriter file(path, kWriteOp);
  file.write(&header_length, sizeof header_length);
  file.write(text);
  for (const Tensor& t : contiguous)
    if (t.nbytes() > 0) file.write(t.raw_data(), t.nbytes());
  file.commit();
}

namespace {

// Reads exactly `bytes` at `offset` of the source being parsed; raises IOError when it ends first.
using ReadAt = std::function<void(uint64_t offset, void* dst, size_t bytes)>;

// The reader proper, over any byte source of `size` bytes (a file or memory); `where` names it in errors.
SafetensorsContents parse_safetensors(uint64_t size, const ReadAt& read_at, const std::string& where) {
  if (size < kHeaderLengthBytes)
    raise_io(kReadOp, where, 0, "the file has " + std::to_string(size) +
                                    " bytes, fewer than the 8-byte header length");
  uint64_t header_length = 0;
  read_at(0, &header_length, sizeof header_length);
  if (header_length > size - kHeaderLengthBytes)
    raise_io(kReadOp, where, 0, "the header length " + std::to_string(header_length) + " runs past the end of the file (" +
                                    std::to_string(size) + " bytes)");
  std::string text(header_length, '\0');
  read_at(kHeaderLengthBytes, text.data(), text.size());
  ordered_json header = parse_header(text, where);

  const uint64_t data_start = kHeaderLengthBytes + header_length;
  const uint64_t data_size = size - data_start;
  auto data_error = [&](uint64_t data_offset, const std::string& what) {
    raise_io(kReadOp, where, (long long)(data_start + data_offset), what);
  };

  SafetensorsContents contents;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == kMetadataKey) {
      contents.metadata = parse_metadata(info, where);
      continue;
    }
    Entry e = parse_entry(name, info, where);
    const std::string span = "data_offsets " + offsets_str(e.begin, e.end);
    uint64_t bytes = 0;
    if (e.end < e.begin) data_error(e.begin, "tensor '" + name + "': " + span + " end before they begin");
    if (!shape_bytes(e.shape, e.dtype, bytes))
      data_error(e.begin, "tensor '" + name + "': shape " + shape_str(e.shape) + " of " +
                              std::string(safetensors_dtype_name(e.dtype)) + " is too large (its size in bytes overflows 64 bits)");
    if (bytes != e.end - e.begin)
      data_error(e.begin, "tensor '" + name + "': shape " + shape_str(e.shape) + " of " +
                              std::string(safetensors_dtype_name(e.dtype)) + " does not match its " + span + " (" +
                              std::to_string(e.end - e.begin) + " bytes)");
    // Tensors must tile the data in header order: each begins where the previous one ended.
    uint64_t expected = entries.empty() ? 0 : entries.back().end;
    if (e.begin < expected) {
      const Entry& prev = entries.back();
      bool before = e.begin < prev.begin;
      data_error(e.begin, "tensor '" + name + "': " + span + (before ? " are out of order: they begin before" : " overlap") +
                              " the previous tensor '" + prev.name + "' " + offsets_str(prev.begin, prev.end));
    }
    if (e.begin > expected)
      data_error(expected, "tensor '" + name + "': " + span + " leave " + std::to_string(e.begin - expected) +
                               " unused bytes before it (tensors must lie back to back in header order)");
    if (e.end > data_size)
      raise_io(kReadOp, where, (long long)size,
               "tensor '" + name + "': " + span + " need data up to byte offset " + std::to_string(data_start + e.end) +
                   " but the file ends here (truncated, or the offsets are out of bounds)");
    entries.push_back(std::move(e));
  }
  uint64_t data_end = entries.empty() ? 0 : entries.back().end;
  if (data_end < data_size)
    data_error(data_end, std::to_string(data_size - data_end) + " bytes of trailing data after the last tensor");

  contents.tensors.reserve(entries.size());
  for (Entry& e : entries) {
    Tensor t = Tensor::empty(std::move(e.shape), e.dtype);
    if (t.nbytes() > 0) read_at(data_start + e.begin, t.raw_data(), t.nbytes());
    contents.tensors.emplace_back(std::move(e.name), std::move(t));
  }
  return contents;
}

}  // namespace

SafetensorsContents read_safetensors(const std::filesystem::path& path) {
  InputFile file(path, kReadOp);
  return parse_safetensors(
      file.size(), [&](uint64_t offset, void* dst, size_t bytes) { file.read_at(offset, dst, bytes, kReadOp); },
      path.string());
}

SafetensorsContents read_safetensors_bytes(std::span<const std::byte> bytes, const std::string& origin) {
  return parse_safetensors(
      bytes.size(),
      [&](uint64_t offset, void* dst, size_t count) {
        if (offset > bytes.size() || count > bytes.size() - offset)
          raise_io(kReadOp, origin, (long long)offset, "the data ends here, " + std::to_string(count) +
                                                           " more bytes were expected");
        if (count > 0) std::memcpy(dst, bytes.data() + offset, count);
      },
      origin);
}

}  // namespace alpha::train
