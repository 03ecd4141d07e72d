#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "alpha/train/safetensors.h"
#include "support/checks.h"
#include "train/train_test_util.h"

namespace alpha::train {
namespace {

using test::bit_equal;
using test::random_bits;
using test::read_raw;
using test::TempDir;
using test::write_raw;

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                             DType::i32, DType::i64, DType::u16,  DType::u8};
// 0-d, empty (leading, inner), one element, and odd shapes.
const std::vector<Shape> kShapes = {{}, {0}, {3, 0, 2}, {1}, {7, 13}, {3, 5, 11}, {4096}};

// A file laid out by hand: the header text padded with spaces to a multiple of 8 (unless pad is false),
// its length in front and the data after it.
std::string craft(std::string header, std::string_view data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  uint64_t n = header.size();
  std::string file(reinterpret_cast<const char*>(&n), 8);
  return file + header + std::string(data);
}

// Byte offset where the data starts in a file crafted from this header.
long long data_start(const std::string& header) { return 8 + (long long)((header.size() + 7) / 8 * 8); }

std::string at_offset(long long offset) { return "at byte offset " + std::to_string(offset) + ":"; }

TEST(Safetensors, RoundTripsEveryDTypeAndShapeBitExactly) {
  TempDir dir;
  NamedTensors tensors;
  for (DType dtype : kDTypes)
    for (const Shape& shape : kShapes)
      tensors.emplace_back(std::string(safetensors_dtype_name(dtype)) + "/" + shape_str(shape), random_bits(shape, dtype));
  SafetensorsMetadata metadata{{"step", "100"}, {"note", "ünïcode, \"quotes\" and\nnewlines"}};
  write_safetensors(dir / "all.safetensors", tensors, metadata);
  SafetensorsContents got = read_safetensors(dir / "all.safetensors");
  EXPECT_EQ(got.metadata, metadata);
  ASSERT_EQ(got.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(got.tensors[i].first, tensors[i].first);  // file order is the written order
    EXPECT_TRUE(bit_equal(got.tensors[i].second, tensors[i].second)) << tensors[i].first;
    EXPECT_EQ(got.tensors[i].second.strides(), contiguous_strides(tensors[i].second.shape()));
  }
}

// The bytes on disk follow the specification (checked independently of our reader).
TEST(Safetensors, WritesTheSpecifiedLayout) {
  TempDir dir;
  Tensor a = random_bits({2, 3}, DType::f32), b = random_bits({}, DType::bf16), c = random_bits({5}, DType::u8);
  write_safetensors(dir / "x.safetensors", {{"zeta", a}, {"alpha", b}, {"mid", c}}, {{"k", "v"}});
  std::string file = read_raw(dir / "x.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(file.size(), 8 + n + 24 + 2 + 5);
  std::string header = file.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));  // only spaces pad the JSON
  auto json = nlohmann::ordered_json::parse(header);
  nlohmann::ordered_json want = nlohmann::ordered_json::parse(R"({
    "__metadata__": {"k": "v"},
    "zeta": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
    "alpha": {"dtype": "BF16", "shape": [], "data_offsets": [24, 26]},
    "mid": {"dtype": "U8", "shape": [5], "data_offsets": [26, 31]}})");
  EXPECT_EQ(json.dump(), want.dump());  // ordered: header order is the data order
  EXPECT_EQ(file.substr(8 + n), test::tensor_bytes(a) + test::tensor_bytes(b) + test::tensor_bytes(c));
}

TEST(Safetensors, NonContiguousInputIsWrittenInRowMajorOrder) {
  TempDir dir;
  Tensor base = random_bits({6, 8}, DType::f64);
  Tensor transposed = base.transpose(0, 1);            // (8, 6)
  Tensor strided = base.slice(1, 1, 8, 3);             // (6, 3), step 3
  Tensor scalar_view = base.select(0, 4).select(0, 5); // 0-d view at an offset
  ASSERT_FALSE(transposed.is_contiguous());
  ASSERT_FALSE(strided.is_contiguous());
  write_safetensors(dir / "v.safetensors", {{"t", transposed}, {"s", strided}, {"e", scalar_view}});
  SafetensorsContents got = read_safetensors(dir / "v.safetensors");
  EXPECT_TRUE(got.metadata.empty());
  EXPECT_TRUE(bit_equal(got.tensors[0].second, transposed.clone()));
  EXPECT_TRUE(bit_equal(got.tensors[1].second, strided.clone()));
  EXPECT_TRUE(bit_equal(got.tensors[2].second, scalar_view.clone()));
  EXPECT_EQ(got.tensors[2].second.item(), base.at({4, 5}));
}

TEST(Safetensors, EmptyFileHasOnlyAHeader) {
  TempDir dir;
  write_safetensors(dir / "e.safetensors", {});
  EXPECT_EQ(read_raw(dir / "e.safetensors"), craft("{}", ""));
  SafetensorsContents got = read_safetensors(dir / "e.safetensors");
  EXPECT_TRUE(got.tensors.empty());
  EXPECT_TRUE(got.metadata.empty());
}

// Other writers may leave the header unpadded and put "__metadata__" anywhere; both are valid.
TEST(Safetensors, ReadsUnpaddedHeaderWithMetadataLast) {
  TempDir dir;
  int32_t values[3] = {-7, 0, 2147483647};
  std::string header = R"({"w":{"dtype":"I32","shape":[3],"data_offsets":[0,12]},"__metadata__":{"a":"bc"}})";
  ASSERT_NE(header.size() % 8, 0u);
  write_raw(dir / "u.safetensors", craft(header, std::string_view(reinterpret_cast<char*>(values), 12), false));
  SafetensorsContents got = read_safetensors(dir / "u.safetensors");
  EXPECT_EQ(got.metadata, (SafetensorsMetadata{{"a", "bc"}}));
  ASSERT_EQ(got.tensors.size(), 1u);
  EXPECT_EQ(got.tensors[0].second.to_vector<int32_t>(), (std::vector<int32_t>{-7, 0, 2147483647}));
}

std::string from_hex(std::string_view hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes.push_back(char(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return bytes;
}

// A file written by the Python library (safetensors 0.8.0, safetensors.numpy.save_file) with
//   {"i": int64 [-5, 2**40], "b": float64 arange(3) - 1.5, "a": float32 [[1, -2], [3.25, 4]],
//    "s": float16 3.0 (0-d), "c": uint8 empty}, metadata {"format": "np"}.
TEST(Safetensors, ReadsAFileWrittenByThePythonLibrary) {
  TempDir dir;
  write_raw(dir / "py.safetensors",
            from_hex("38010000000000007b225f5f6d657461646174615f5f223a7b22666f726d6174223a226e70227d2c2269223a7b226474"
                     "797065223a22493634222c227368617065223a5b325d2c22646174615f6f666673657473223a5b302c31365d7d2c2262"
                     "223a7b226474797065223a22463634222c227368617065223a5b335d2c22646174615f6f666673657473223a5b31362c"
                     "34305d7d2c2261223a7b226474797065223a22463332222c227368617065223a5b322c325d2c22646174615f6f666673"
                     "657473223a5b34302c35365d7d2c2273223a7b226474797065223a22463136222c227368617065223a5b5d2c22646174"
                     "615f6f666673657473223a5b35362c35385d7d2c2263223a7b226474797065223a225538222c227368617065223a5b30"
                     "5d2c22646174615f6f666673657473223a5b35382c35385d7d7d202020202020fbffffffffffffff0000000000010000"
                     "000000000000f8bf000000000000e0bf000000000000e03f0000803f000000c000005040000080400042"));
  SafetensorsContents got = read_safetensors(dir / "py.safetensors");
  EXPECT_EQ(got.metadata, (SafetensorsMetadata{{"format", "np"}}));
  ASSERT_EQ(got.tensors.size(), 5u);
  EXPECT_EQ(got.tensors[0].first, "i");
  EXPECT_EQ(got.tensors[0].second.to_vector<int64_t>(), (std::vector<int64_t>{-5, int64_t(1) << 40}));
  EXPECT_EQ(got.tensors[1].first, "b");
  EXPECT_EQ(got.tensors[1].second.to_vector<double>(), (std::vector<double>{-1.5, -0.5, 0.5}));
  EXPECT_EQ(got.tensors[2].first, "a");
  EXPECT_EQ(got.tensors[2].second.shape(), (Shape{2, 2}));
  EXPECT_EQ(got.tensors[2].second.to_vector<float>(), (std::vector<float>{1, -2, 3.25f, 4}));
  EXPECT_EQ(got.tensors[3].first, "s");
  EXPECT_EQ(got.tensors[3].second.dtype(), DType::f16);
  EXPECT_EQ(got.tensors[3].second.shape(), Shape{});
  EXPECT_EQ(got.tensors[3].second.item(), 3.0);
  EXPECT_EQ(got.tensors[4].first, "c");
  EXPECT_EQ(got.tensors[4].second.dtype(), DType::u8);
  EXPECT_EQ(got.tensors[4].second.shape(), Shape{0});
}

TEST(Safetensors, WriterRejectsBadNamesAndUndefinedTensors) {
  TempDir dir;
  Tensor t = random_bits({2}, DType::f32);
  auto path = dir / "bad.safetensors";
  EXPECT_ALPHA_ERROR(write_safetensors(path, {{"a", t}, {"a", t}}), ValueError, "[write_safetensors]", "unique names",
                     "'a' more than once");
  EXPECT_ALPHA_ERROR(write_safetensors(path, {{"", t}}), ValueError, "non-empty names");
  EXPECT_ALPHA_ERROR(write_safetensors(path, {{"__metadata__", t}}), ValueError, "other than \"__metadata__\"");
  EXPECT_ALPHA_ERROR(write_safetensors(path, {{"u", Tensor()}}), ValueError, "undefined tensor named 'u'");
  EXPECT_ALPHA_ERROR(write_safetensors(path, {{"\xff", t}}), ValueError, "valid UTF-8");
  EXPECT_TRUE(test::list_dir(dir.path()).empty());  // nothing was created
}

// Each corruption: the crafted file, the byte offset the error must report, and a phrase it must contain.
struct Corruption {
  const char* name;
  std::string file;
  long long offset;
  std::string phrase;
};

std::vector<Corruption> corruptions() {
  std::string f32x2(8, '\x11'), f32x4(16, '\x22');
  std::vector<Corruption> cases;
  cases.push_back({"short", std::string("\x05\0\0\0", 4), 0, "fewer than the 8-byte header length"});
  {
    std::string file = craft("{}", "");
    file[0] = char(200);
    cases.push_back({"header_length", file, 0, "header length 200 runs past the end of the file (16 bytes)"});
  }
  {
    std::string h = R"({"a":})";  // the '}' at header index 5 is the error
    cases.push_back({"json", craft(h, ""), 8 + 5, "invalid JSON header"});
  }
  {
    std::string h = R"([1, 2])";
    cases.push_back({"not_object", craft(h, ""), 8, "the header is a JSON array, expected an object"});
  }
  {
    std::string h = R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})";
    cases.push_back({"dtype", craft(h, "\1\0"), 8, "tensor 'a': unknown dtype \"BOOL\""});
  }
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,2],"extra":1}})";
    cases.push_back({"extra_field", craft(h, "\1\0"), 8, "tensor 'a': unexpected field 'extra'"});
  }
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})";
    cases.push_back({"negative_shape", craft(h, f32x2), 8, "shape holds -2, expected a non-negative integer"});
  }
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})";
    cases.push_back({"offsets_arity", craft(h, f32x2), 8, "data_offsets is [0], expected [begin, end]"});
  }
  {
    std::string h = R"({"__metadata__":{"a":1}})";
    cases.push_back({"metadata", craft(h, ""), 8, "\"__metadata__\" entry 'a' is a JSON number, expected a string"});
  }
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    cases.push_back({"duplicate", craft(h, f32x2), 8, "names tensor 'a' more than once"});
  }
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
    cases.push_back({"size_mismatch", craft(h, f32x2), data_start(h),
                     "tensor 'a': shape [3] of F32 does not match its data_offsets [0, 8) (8 bytes)"});
  }
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})";
    cases.push_back({"inverted", craft(h, f32x2), data_start(h) + 8, "data_offsets [8, 0) end before they begin"});
  }
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
    cases.push_back({"overlap", craft(h, f32x4), data_start(h) + 4,
                     "tensor 'b': data_offsets [4, 12) overlap the previous tensor 'a' [0, 8)"});
  }
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"c":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    cases.push_back({"order", craft(h, f32x4), data_start(h) + 0,
                     "tensor 'c': data_offsets [0, 8) are out of order: they begin before the previous tensor 'b' [4, 8)"});
  }
  {
    // Header order differs from data order: the first tensor does not start the data.
    std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    cases.push_back({"swapped", craft(h, f32x4), data_start(h) + 0,
                     "tensor 'a': data_offsets [8, 16) leave 8 unused bytes before it (tensors must lie back to back in header order)"});
  }
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})";
    cases.push_back({"gap", craft(h, f32x4), data_start(h) + 8, "data_offsets [12, 16) leave 4 unused bytes before it"});
  }
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[1000],"data_offsets":[0,4000]}})";
    std::string file = craft(h, f32x2);
    cases.push_back({"out_of_bounds", file, (long long)file.size(),
                     "need data up to byte offset " + std::to_string(data_start(h) + 4000) +
                         " but the file ends here (truncated, or the offsets are out of bounds)"});
  }
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    cases.push_back({"trailing", craft(h, f32x2 + "xyz"), data_start(h) + 8, "3 bytes of trailing data"});
  }
  // Regressions from fuzz/corpus/safetensors: a zero size hid a shape whose strides overflow int64
  // (UBSan in Tensor::empty), before or after the overflow; the bytes of a huge shape wrapping u64.
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[0,1099511627776,1099511627776],"data_offsets":[0,0]}})";
    cases.push_back({"zero_size_hides_overflow", craft(h, ""), data_start(h),
                     "tensor 'a': shape [0, 1099511627776, 1099511627776] of F32 is too large"});
  }
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904,0],"data_offsets":[0,0]}})";
    cases.push_back({"zero_size_after_overflow", craft(h, ""), data_start(h), "is too large"});
  }
  {
    std::string h = R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})";
    cases.push_back({"bytes_wrap", craft(h, ""), data_start(h), "is too large"});
  }
  {
    // Deep nesting parses (nlohmann's parser is iterative) but its dump in the error message recursed.
    std::string h = R"({"a":{"dtype":"F32","shape":)" + std::string(100000, '[') + std::string(100000, ']') +
                    R"(,"data_offsets":[0,0]}})";
    cases.push_back({"deep_nesting", craft(h, ""), 8, "nested deeper than 64 levels"});
  }
  {
    // A number past the double range made nlohmann throw out_of_range (not parse_error), which escaped.
    std::string h = R"({"a":{"dtype":"F32","shape":[1e400],"data_offsets":[0,0]}})";
    cases.push_back({"number_past_double", craft(h, ""), 8, "invalid JSON header: [json.exception.out_of_range.406]"});
  }
  return cases;
}

TEST(Safetensors, EveryCorruptionNamesFileAndOffset) {
  TempDir dir;
  for (const Corruption& c : corruptions()) {
    SCOPED_TRACE(c.name);
    auto path = dir / (std::string(c.name) + ".safetensors");
    write_raw(path, c.file);
    const std::string file = path.string(), where = at_offset(c.offset);
    EXPECT_ALPHA_ERROR(read_safetensors(path), IOError, "[read_safetensors]", file.c_str(), where.c_str(),
                       c.phrase.c_str());
    // The in-memory reader is the same parser: the same error, naming the origin given.
    EXPECT_ALPHA_ERROR(read_safetensors_bytes(std::as_bytes(std::span(c.file)), "in-memory"), IOError,
                       "[read_safetensors] file 'in-memory'", where.c_str(), c.phrase.c_str());
  }
}

TEST(Safetensors, ReadsFromMemoryWhatItReadsFromAFile) {
  TempDir dir;
  write_safetensors(dir / "a.safetensors", {{"a", random_bits({3, 5}, DType::bf16)}, {"b", random_bits({7}, DType::i64)}},
                    {{"k", "v"}});
  std::string bytes = read_raw(dir / "a.safetensors");
  SafetensorsContents file = read_safetensors(dir / "a.safetensors");
  SafetensorsContents memory = read_safetensors_bytes(std::as_bytes(std::span(bytes)));
  EXPECT_EQ(memory.metadata, file.metadata);
  ASSERT_EQ(memory.tensors.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(memory.tensors[i].first, file.tensors[i].first);
    EXPECT_TRUE(bit_equal(memory.tensors[i].second, file.tensors[i].second));
  }
}

// Cutting a real file short anywhere (in the length, the header or the data) is reported, never misread.
TEST(Safetensors, TruncationAnywhereIsReported) {
  TempDir dir;
  write_safetensors(dir / "full.safetensors", {{"a", random_bits({3, 5}, DType::f32)}, {"b", random_bits({7}, DType::i64)}});
  std::string full = read_raw(dir / "full.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, full.data(), 8);
  for (size_t cut : {size_t(3), size_t(8), size_t(8 + n / 2), size_t(8 + n), size_t(8 + n + 60), full.size() - 1}) {
    SCOPED_TRACE(cut);
    auto path = dir / "cut.safetensors";
    write_raw(path, full.substr(0, cut));
    long long where = cut < 8 + n ? 0 : (long long)cut;
    const char* phrase = cut < 8 ? "fewer than the 8-byte" : cut < 8 + n ? "runs past the end of the file" : "truncated";
    const std::string file = path.string(), at = at_offset(where);
    EXPECT_ALPHA_ERROR(read_safetensors(path), IOError, file.c_str(), at.c_str(), phrase);
  }
  EXPECT_ALPHA_ERROR(read_safetensors(dir / "absent.safetensors"), IOError, "absent.safetensors'", "No such file");
}

// Writes a file and a JSON description of it, and checks both with the Python `safetensors` library
// (tests/python/read_safetensors.py). Runs where ALPHA_PYTHON names a Python that has `safetensors`,
// `numpy` and `ml_dtypes` (for BF16); elsewhere it is skipped.
TEST(SafetensorsPython, PythonLibraryReadsOurFiles) {
  const char* python = std::getenv("ALPHA_PYTHON");
  if (python == nullptr || *python == '\0') GTEST_SKIP() << "set ALPHA_PYTHON to a Python with safetensors";
  TempDir dir;
  NamedTensors tensors;
  nlohmann::json description = {{"metadata", {{"format", "alpha"}, {"step", "7"}}}, {"tensors", nlohmann::json::array()}};
  for (DType dtype : kDTypes)
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{7, 13}, Shape{3, 5, 11}}) {
      bool is_int = !is_floating(dtype), is_unsigned = dtype == DType::u8 || dtype == DType::u16;
      double hi = dtype == DType::u8 ? 255 : dtype == DType::u16 ? 65535 : is_int ? 1e6 : 100;  // finite in f16
      Tensor t = test::random(shape, dtype, is_unsigned ? 0 : -hi, hi);
      if (shape.size() == 2) t = t.transpose(0, 1);  // a non-contiguous input
      std::string name = "t." + std::string(dtype_name(dtype)) + "." + std::to_string(shape.size());
      tensors.emplace_back(name, t);
      nlohmann::json values = is_int ? nlohmann::json(t.to_vector<int64_t>()) : nlohmann::json(t.to_vector<double>());
      description["tensors"].push_back(
          {{"name", name}, {"dtype", safetensors_dtype_name(dtype)}, {"shape", t.shape()}, {"values", values}});
    }
  write_safetensors(dir / "x.safetensors", tensors, description["metadata"].get<SafetensorsMetadata>());
  write_raw(dir / "x.json", description.dump());
  std::string command = std::string(python) + " " ALPHA_SOURCE_DIR "/tests/python/read_safetensors.py " +
                        (dir / "x.safetensors").string() + " " + (dir / "x.json").string();
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

}  // namespace
}  // namespace alpha::train
