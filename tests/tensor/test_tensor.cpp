#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>

#include "alpha/core/philox.h"
#include "alpha/tensor/allocator.h"
#include "alpha/tensor/tensor.h"
#include "support/checks.h"

namespace alpha {
namespace {

TEST(Tensor, EmptyHasContiguousStridesAndSize) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::f32);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.describe(), "f32[2, 3, 4] on cpu");
}

TEST(Tensor, ZeroSizeTensorsAreContiguous) {
  for (const Shape& shape : {Shape{0}, Shape{3, 0, 2}, Shape{0, 5}, Shape{4, 0}}) {
    Tensor t = Tensor::empty(shape, DType::f32);
    EXPECT_EQ(t.numel(), 0);
    EXPECT_TRUE(t.is_contiguous()) << t.describe();
    EXPECT_TRUE(t.contiguous().is_contiguous()) << t.describe();
  }
  // Strides from a non-empty tensor: a zero-length slice has nothing out of place either.
  Tensor wide = Tensor::empty({4, 6}, DType::f32);
  EXPECT_TRUE(wide.transpose(0, 1).slice(0, 2, 2).is_contiguous());
}

// Regression (fuzz/corpus/safetensors/zero_size_hides_overflow): a zero size made numel 0, but the strides
// of [0, 2^40, 2^40] overflowed int64 (UBSan: signed overflow in contiguous_strides).
TEST(Tensor, EmptyRejectsShapesWhoseExtentOverflows) {
  const int64_t big = int64_t(1) << 40;
  for (const Shape& shape :
       {Shape{0, big, big}, Shape{big, big, 0}, Shape{big, big}, Shape{INT64_MAX / 2, 3}, Shape{INT64_MAX / 4 + 1}}) {
    SCOPED_TRACE(shape_str(shape));
    EXPECT_ALPHA_ERROR(Tensor::empty(shape, DType::f32), ShapeError, "[Tensor::empty]", "fits in 64 bits");
  }
  EXPECT_EQ(Tensor::empty({0, big}, DType::f32).numel(), 0);  // the strides still fit
}

TEST(Tensor, SliceTransposePermuteShareStorageAndIndexCorrectly) {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = float(i);
  Tensor t = Tensor::from_vector(v, {2, 3, 4});
  Tensor s = t.slice(2, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_TRUE(s.shares_storage(t));
  EXPECT_EQ(s.at({1, 2, 1}), 1 * 12 + 2 * 4 + 3);
  Tensor tr = t.transpose(0, 2);
  EXPECT_EQ(tr.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(tr.at({3, 1, 1}), 12 + 4 + 3);
  EXPECT_FALSE(tr.is_contiguous());
  Tensor p = t.permute({1, 2, 0});
  EXPECT_EQ(p.at({2, 3, 1}), 12 + 8 + 3);
  Tensor c = p.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.shares_storage(t));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 2; ++k) EXPECT_EQ(c.at({i, j, k}), p.at({i, j, k}));
  EXPECT_EQ(t.select(1, 2).at({1, 3}), 12 + 8 + 3);
}

TEST(Tensor, ViewAndReshape) {
  Tensor t = test::random({4, 6}, DType::f64);
  Tensor v = t.view({2, 2, -1});
  EXPECT_EQ(v.shape(), (Shape{2, 2, 6}));
  EXPECT_TRUE(v.shares_storage(t));
  EXPECT_EQ(v.at({1, 1, 5}), t.at({3, 5}));
  // A transposed tensor cannot be flattened as a view, but reshape copies.
  Tensor tr = t.transpose(0, 1);
  EXPECT_ALPHA_ERROR(tr.view({24}), LayoutError, "Tensor::view", "shape");
  Tensor r = tr.reshape({24});
  EXPECT_FALSE(r.shares_storage(t));
  EXPECT_EQ(r.at({7}), t.at({3, 1}));  // r[7] = tr[1][3] = t[3][1]
  // Splitting a contiguous run of a strided tensor stays a view.
  Tensor sl = test::random({3, 8}, DType::f32).slice(1, 0, 4);
  Tensor sv = sl.view({3, 2, 2});
  EXPECT_EQ(sv.at({2, 1, 0}), sl.at({2, 2}));
  // reshape views such a tensor too, rather than copying it (q, k, v as slices of a fused qkv).
  Tensor sr = sl.reshape({3, 2, -1});
  EXPECT_TRUE(sr.shares_storage(sl));
  EXPECT_EQ(sr.strides(), sv.strides());
  EXPECT_EQ(sr.at({2, 1, 1}), sl.at({2, 3}));
  EXPECT_ALPHA_ERROR(sl.reshape({5, -1}), ShapeError, "Tensor::reshape", "12 elements");
  EXPECT_ALPHA_ERROR(t.view({5, 5}), ShapeError, "Tensor::view", "24 elements");
  EXPECT_EQ(t.unsqueeze(0).shape(), (Shape{1, 4, 6}));
  EXPECT_EQ(t.unsqueeze(2).squeeze(2).shape(), (Shape{4, 6}));
}

TEST(Tensor, DTypeConversionsRoundToNearestEven) {
  Tensor t = Tensor::from_vector<float>({1.0f, 1.00390625f, 1.01171875f, -2.5f, 65504.0f, 1e-7f, 70000.0f}, {7});
  std::vector<double> b = t.to(DType::bf16).to_vector<double>();
  EXPECT_EQ(b[0], 1.0);
  EXPECT_EQ(b[1], 1.0);       // halfway between 1 and 1+2^-7 rounds to even (1)
  EXPECT_EQ(b[2], 1.015625);  // halfway between 1+2^-7 and 1+2^-6 rounds to even (1+2^-6)
  EXPECT_EQ(b[3], -2.5);
  std::vector<double> h = t.to(DType::f16).to_vector<double>();
  EXPECT_EQ(h[3], -2.5);
  EXPECT_EQ(h[4], 65504.0);
  EXPECT_EQ(h[5], 2.0 / 16777216.0);  // f16 subnormal: 1e-7 rounds to 2·2^-24
  EXPECT_TRUE(std::isinf(h[6]));
  Tensor ints = Tensor::from_vector<int32_t>({-3, 7}, {2});
  EXPECT_EQ(ints.to(DType::f64).to_vector<double>(), (std::vector<double>{-3, 7}));
}

TEST(Tensor, BadAccessRaisesTypedErrors) {
  Tensor t = Tensor::zeros({2, 3}, DType::f32);
  EXPECT_ALPHA_ERROR(t.data<double>(), DTypeError, "Tensor::data", "f32", "f64");
  EXPECT_ALPHA_ERROR(t.size(2), ShapeError, "Tensor::size", "dim");
  EXPECT_ALPHA_ERROR(t.slice(1, 2, 5), ShapeError, "Tensor::slice", "start/end");
  EXPECT_ALPHA_ERROR(t.permute({0, 0}), ShapeError, "Tensor::permute");
  EXPECT_ALPHA_ERROR(t.at({2, 0}), ShapeError, "Tensor::at", "index");
  EXPECT_ALPHA_ERROR(t.item(), ShapeError, "Tensor::item");
  EXPECT_ALPHA_ERROR(t.to(Device::cuda(99)), DeviceError, "Tensor::to");
  EXPECT_ALPHA_ERROR(Tensor::empty({2, -1}, DType::f32), ShapeError, "Tensor::empty");
  EXPECT_ALPHA_ERROR(Tensor().contiguous(), ValueError, "Tensor::contiguous");
  EXPECT_ALPHA_ERROR(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), ShapeError, "from_vector", "4 elements");
  EXPECT_ALPHA_ERROR(parse_dtype("f8", "--dtype"), ConfigError, "--dtype", "'f8'");
  EXPECT_ALPHA_ERROR(Device::parse("gpu", "--device"), ConfigError, "--device", "'gpu'");
  EXPECT_EQ(Device::parse("cuda:3", "--device"), Device::cuda(3));
}

// Borrowed memory (the Python bindings wrap PyTorch tensors this way): views read it in place, the owner
// is released with the last tensor and the allocator never frees it, and views reaching outside it raise.
TEST(Tensor, FromStorageViewsBorrowedMemoryAndRejectsViewsOutsideIt) {
  auto values = std::make_shared<std::vector<float>>(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  std::weak_ptr<std::vector<float>> watch = values;
  auto storage = std::make_shared<Storage>(Device::cpu(), values->data(), values->size() * sizeof(float), values);
  values.reset();
  {
    // A transposed 3×2 view from element 1: [[1, 3], [5, 7], [9, 11]] read column by column.
    Tensor t = Tensor::from_storage(storage, {2, 3}, {2, 4}, 1, DType::f32);
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 5, 9, 3, 7, 11}));
    // Negative strides are fine while they stay inside.
    Tensor reversed = Tensor::from_storage(storage, {12}, {-1}, 11, DType::f32);
    EXPECT_EQ(reversed.to_vector<float>()[0], 11.0f);
    EXPECT_FALSE(watch.expired());
  }
  EXPECT_ALPHA_ERROR(Tensor::from_storage(storage, {2, 3}, {2, 4}, 2, DType::f32), LayoutError, "Tensor::from_storage",
                     "inside the storage's 12 elements", "elements 2..12");
  EXPECT_ALPHA_ERROR(Tensor::from_storage(storage, {12}, {-1}, 10, DType::f32), LayoutError, "Tensor::from_storage",
                     "elements -1..10");
  EXPECT_ALPHA_ERROR(Tensor::from_storage(storage, {7}, {2}, 0, DType::f64), LayoutError, "Tensor::from_storage",
                     "6 elements");
  EXPECT_ALPHA_ERROR(Tensor::from_storage(storage, {2, 3}, {1}, 0, DType::f32), ShapeError, "Tensor::from_storage",
                     "strides");
  EXPECT_ALPHA_ERROR(Tensor::from_storage(storage, {3}, {int64_t(1) << 62}, 0, DType::f32), LayoutError,
                     "Tensor::from_storage", "64 bits");
  EXPECT_ALPHA_ERROR(Tensor::from_storage(nullptr, {1}, {1}, 0, DType::f32), ValueError, "Tensor::from_storage");
  // An empty view reaches nothing, so any offset is inside.
  EXPECT_EQ(Tensor::from_storage(storage, {0, 3}, {3, 1}, 100, DType::f32).numel(), 0);
  float scratch = 0;
  EXPECT_ALPHA_ERROR(Storage(Device::cpu(), &scratch, sizeof scratch, nullptr), ValueError, "Storage", "owner");
  storage.reset();
  EXPECT_TRUE(watch.expired());
}

TEST(Tensor, RandomFillsAreSeededAndHaveTheirDistributions) {
  Tensor u = Tensor::uniform({100001}, -2.0, 3.0, 11, DType::f64);
  Tensor n = Tensor::normal({100001}, 1.5, 0.5, 12, DType::f64);  // odd count: the last Box-Muller pair is half used
  std::vector<double> uv = u.to_vector<double>(), nv = n.to_vector<double>();
  double umean = 0, nmean = 0, nvar = 0;
  for (double x : uv) {
    ASSERT_GE(x, -2.0);
    ASSERT_LT(x, 3.0);
    umean += x / double(uv.size());
  }
  for (double x : nv) {
    ASSERT_TRUE(std::isfinite(x));
    nmean += x / double(nv.size());
  }
  for (double x : nv) nvar += (x - nmean) * (x - nmean) / double(nv.size());
  EXPECT_NEAR(umean, 0.5, 0.02);
  EXPECT_NEAR(nmean, 1.5, 0.01);
  EXPECT_NEAR(std::sqrt(nvar), 0.5, 0.01);
  EXPECT_EQ(Tensor::normal({7}, 0, 1, 12, DType::f64).to_vector<double>(),
            Tensor::normal({7}, 0, 1, 12, DType::f64).to_vector<double>());
  EXPECT_NE(Tensor::normal({7}, 0, 1, 12, DType::f64).to_vector<double>(),
            Tensor::normal({7}, 0, 1, 13, DType::f64).to_vector<double>());
  // The threads split the work, never the values: one thread gives the bits of four, and element i its own
  // draw (a prefix of a larger fill).
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Tensor u1 = Tensor::uniform({100001}, -2.0, 3.0, 11, DType::f64);
  const Tensor n1 = Tensor::normal({100001}, 1.5, 0.5, 12, DType::f64);
  omp_set_num_threads(4);
  EXPECT_TRUE(test::bit_equal(u1, Tensor::uniform({100001}, -2.0, 3.0, 11, DType::f64)));
  EXPECT_TRUE(test::bit_equal(n1, Tensor::normal({100001}, 1.5, 0.5, 12, DType::f64)));
  omp_set_num_threads(threads);
  EXPECT_TRUE(test::bit_equal(n1.slice(0, 0, 4001), Tensor::normal({4001}, 1.5, 0.5, 12, DType::f64)));
  EXPECT_TRUE(test::bit_equal(u1, u));
  EXPECT_TRUE(test::bit_equal(n1, n));
}

TEST(Tensor, CopyManyCopiesEveryPairAndNamesABadOne) {
  Tensor flat = Tensor::full({20}, -7.0, DType::f32);
  std::vector<Tensor> srcs{test::random({3, 2}), test::random({5}), test::random({2, 2}, DType::bf16)};
  std::vector<Tensor> dsts{flat.slice(0, 1, 7).view({3, 2}), flat.slice(0, 9, 14), flat.slice(0, 15, 19).view({2, 2})};
  copy_many(dsts, srcs);
  std::vector<float> got = flat.to_vector<float>();
  for (int64_t i : {0, 7, 8, 14, 19}) EXPECT_EQ(got[size_t(i)], -7.0f) << "element " << i << " is no destination";
  for (size_t k = 0; k < srcs.size(); ++k) EXPECT_TRUE(test::bit_equal(dsts[k], srcs[k].to(DType::f32))) << k;
  std::vector<Tensor> wrong{test::random({3, 2}), test::random({4})};
  EXPECT_ALPHA_ERROR(copy_many(std::span(dsts).first(2), wrong), ShapeError, "[copy_many]", "srcs[1]");
  EXPECT_ALPHA_ERROR(copy_many(dsts, wrong), ShapeError, "[copy_many]", "srcs");
}

// CPU tensors' HostCopy is made at once (a view's values, contiguous; each tensor in its dtype), so later writes
// to the sources do not reach it; it is collected once.
TEST(HostCopy, HoldsTheValuesAtConstructionAndIsCollectedOnce) {
  Tensor source = test::random({5, 6});
  const Tensor column = source.slice(1, 2, 3);
  const Tensor norm = Tensor::full({}, 2.5, DType::f64);
  const Tensor want = column.contiguous().clone();
  HostCopy copy({column, norm});
  source.fill_(-1.0f);
  const std::vector<Tensor> got = copy.wait();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].device().is_cpu());
  EXPECT_TRUE(got[0].is_contiguous());
  EXPECT_TRUE(test::bit_equal(got[0], want));
  EXPECT_EQ(got[1].dtype(), DType::f64);
  EXPECT_EQ(got[1].item(), 2.5);
  EXPECT_ALPHA_ERROR(copy.wait(), ValueError, "[HostCopy::wait]", "collected");
  EXPECT_ALPHA_ERROR(HostCopy({Tensor()}), ValueError, "HostCopy");
  EXPECT_ALPHA_ERROR(HostCopy({}), ValueError, "'sources'");
}

TEST(Allocator, SizeClassesBoundWaste) {
  EXPECT_EQ(CachingAllocator::size_class(1), 512u);
  EXPECT_EQ(CachingAllocator::size_class(512), 512u);
  EXPECT_EQ(CachingAllocator::size_class(513), 1024u);
  EXPECT_EQ(CachingAllocator::size_class((5u << 20) + 100), 6u << 20);
  for (size_t bytes : {1000u, 4097u, 100000u, 5u << 20, 123456789u}) {
    size_t c = CachingAllocator::size_class(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_LE(double(c), 1.25 * double(bytes) + 512);
  }
  // From 16 MiB up a 32nd of the power-of-two range: a 2304 x 9216 f32 weight (81 MiB) takes 82 MiB, not 96.
  EXPECT_EQ(CachingAllocator::size_class(size_t(2304) * 9216 * 4), size_t(82) << 20);
  EXPECT_EQ(CachingAllocator::size_class((size_t(16) << 20) + 1), size_t(16.5 * (1 << 20)));
  for (size_t bytes :
       {size_t(16) << 20, (size_t(16) << 20) + 1, size_t(84934656), size_t(1) << 30, size_t(3000000001)}) {
    size_t c = CachingAllocator::size_class(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_LE(double(c), double(bytes) * (1.0 + 1.0 / 32)) << bytes;
  }
}

TEST(Allocator, ReusesFreedBlocksAndTracksStatistics) {
  CachingAllocator alloc(Device::cpu(), RawMemory{[](size_t n) { return std::aligned_alloc(64, n); },
                                                  [](void* p, size_t) { std::free(p); }});
  void* a = alloc.allocate(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  alloc.free(a);
  void* b = alloc.allocate(900);  // same size class
  EXPECT_EQ(a, b);
  void* c = alloc.allocate(1 << 20);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocations, 3u);
  EXPECT_EQ(s.pool_hits, 1u);
  EXPECT_EQ(s.pool_misses, 2u);
  EXPECT_EQ(s.bytes_in_use, 1024u + (1u << 20));
  EXPECT_EQ(s.peak_bytes_in_use, s.bytes_in_use);
  alloc.free(b);
  alloc.free(c);
  EXPECT_EQ(alloc.stats().bytes_in_use, 0u);
  EXPECT_EQ(alloc.stats().bytes_reserved, 1024u + (1u << 20));
  alloc.empty_pool();
  EXPECT_EQ(alloc.stats().bytes_reserved, 0u);
  int local = 0;
  EXPECT_ALPHA_ERROR(alloc.free(&local), ValueError, "free", "unknown pointer");
}

// Capture pools (a CUDA graph's memory): during a capture requests are served from the pool and frees go to it,
// blocks of the device's pool included; its blocks freed later return to it; other requests never get them, nor
// does a later capture's pool; released, they serve the device's pool again.
TEST(Allocator, CapturePoolsKeepTheirBlocksUntilReleased) {
  CachingAllocator alloc(Device::cpu(), RawMemory{[](size_t n) { return std::aligned_alloc(64, n); },
                                                  [](void* p, size_t) { std::free(p); }});
  void* before = alloc.allocate(1000);
  void* held = alloc.allocate(1000);
  alloc.free(before);  // in the device's pool
  const uint64_t pool = alloc.begin_capture();
  EXPECT_GT(pool, 0u);
  EXPECT_ALPHA_ERROR(alloc.begin_capture(), ValueError, "begin_capture", "capturing");
  void* scratch = alloc.allocate(1000);
  EXPECT_NE(scratch, before) << "the device's pool serves no capture";
  void* output = alloc.allocate(1000);
  alloc.free(scratch);
  alloc.free(held);  // a block of the device's pool freed during the capture: the graph may read it
  alloc.end_capture();
  EXPECT_ALPHA_ERROR(alloc.end_capture(), ValueError, "end_capture", "no capture");
  EXPECT_EQ(alloc.stats().capture_pool_bytes, 2048u);
  void* outside = alloc.allocate(1000);
  EXPECT_EQ(outside, before);
  void* fresh = alloc.allocate(1000);
  EXPECT_TRUE(fresh != scratch && fresh != held && fresh != output);
  alloc.free(output);  // the capture's output, freed later: back to its pool
  EXPECT_EQ(alloc.stats().capture_pool_bytes, 3072u);
  const uint64_t next = alloc.begin_capture();
  void* other_capture = alloc.allocate(1000);
  EXPECT_TRUE(other_capture != scratch && other_capture != held && other_capture != output);
  alloc.end_capture();
  alloc.release_capture_pool(pool);
  EXPECT_EQ(alloc.stats().capture_pool_bytes, 0u);
  std::vector<void*> live{outside, fresh};
  for (int i = 0; i < 3; ++i) {
    live.push_back(alloc.allocate(1000));
    EXPECT_TRUE(live.back() == scratch || live.back() == held || live.back() == output);
  }
  alloc.free(other_capture);
  alloc.release_capture_pool(next);
  EXPECT_EQ(alloc.stats().capture_pool_bytes, 0u);
  for (void* p : live) alloc.free(p);
  EXPECT_EQ(alloc.stats().bytes_in_use, 0u);
}

TEST(Allocator, TensorsReturnStorageToThePool) {
  auto& alloc = allocator_for(Device::cpu());
  { Tensor warm = Tensor::empty({1000}, DType::f32); }
  AllocatorStats before = alloc.stats();
  { Tensor t = Tensor::empty({1000}, DType::f32); }
  AllocatorStats after = alloc.stats();
  EXPECT_EQ(after.pool_hits, before.pool_hits + 1);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  // Known-answer vectors for philox4x32_10 from the Random123 distribution (kat_vectors).
  Philox4x32 zero = philox4x32_10(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(zero.c[0], 0x6627e8d5u);
  EXPECT_EQ(zero.c[1], 0xe169c58du);
  EXPECT_EQ(zero.c[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.c[3], 0x9b00dbd8u);
  Philox4x32 ones = philox4x32_10(~0u, ~0u, ~0u, ~0u, ~0u, ~0u);
  EXPECT_EQ(ones.c[0], 0x408f276du);
  EXPECT_EQ(ones.c[1], 0x41c83b0eu);
  EXPECT_EQ(ones.c[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.c[3], 0x6d5451fdu);
  Philox4x32 pi = philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(pi.c[0], 0xd16cfe09u);
  EXPECT_EQ(pi.c[1], 0x94fdccebu);
  EXPECT_EQ(pi.c[2], 0x5001e420u);
  EXPECT_EQ(pi.c[3], 0x24126ea1u);
}

TEST(Philox, UniformIsInRangeAndUnbiased) {
  double mean = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    float u = philox_uniform(42, uint64_t(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    mean += u;
  }
  EXPECT_NEAR(mean / n, 0.5, 0.005);
}

}  // namespace
}  // namespace alpha
