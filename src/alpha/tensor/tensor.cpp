#include "alpha/tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include "alpha/core/launch.h"
#include "alpha/core/philox.h"

#include "alpha/kernels/copy.h"
#include "alpha/tensor/allocator.h"
#if ALPHA_WITH_CUDA
#include "alpha/runtime/cuda_backend.h"
#endif

namespace alpha {

std::string shape_str(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t shape_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Shape contiguous_strides(std::span<const int64_t> shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

Storage::Storage(Device device, size_t bytes)
    : device_(device), bytes_(bytes), data_(allocator_for(device).allocate(std::max<size_t>(bytes, 1))) {}

Storage::Storage(Device device, void* data, size_t bytes, std::shared_ptr<void> owner)
    : device_(device), bytes_(bytes), data_(data), owner_(std::move(owner)) {
  if (!owner_) raise<ValueError>("Storage", "owner", "the owner of the borrowed memory", "none");
}

Storage::~Storage() {
  if (!owner_) allocator_for(device_).free(data_);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)), shape_(std::move(shape)), strides_(std::move(strides)), offset_(offset),
      dtype_(dtype) {}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  // The extent (sizes multiplied, zeros as 1: what the strides reach) in bytes must fit int64, so that
  // numel, the strides and nbytes never overflow.
  int64_t extent = int64_t(dtype_size(dtype));
  for (int64_t d : shape) {
    if (d < 0) raise<ShapeError>("Tensor::empty", "shape", "non-negative sizes", shape_str(shape));
    if (__builtin_mul_overflow(extent, std::max<int64_t>(d, 1), &extent))
      raise<ShapeError>("Tensor::empty", "shape", "a size in bytes that fits in 64 bits", shape_str(shape));
  }
  size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>(device, bytes);
  Shape strides = contiguous_strides(shape);
  return Tensor(std::move(storage), std::move(shape), std::move(strides), 0, dtype);
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype) {
  constexpr const char* op = "Tensor::from_storage";
  if (!storage) raise<ValueError>(op, "storage", "a storage", "none");
  if (strides.size() != shape.size())
    raise<ShapeError>(op, "strides", std::to_string(shape.size()) + " strides for shape " + shape_str(shape),
                      shape_str(strides));
  // The lowest and highest element offsets the view reaches must lie in [0, bytes / element size).
  int64_t lo = offset, hi = offset;
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) raise<ShapeError>(op, "shape", "non-negative sizes", shape_str(shape));
    if (shape[d] == 0) empty = true;
    int64_t reach = 0;
    if (__builtin_mul_overflow(strides[d], std::max<int64_t>(shape[d] - 1, 0), &reach))
      raise<LayoutError>(op, "strides", "strides whose reach fits in 64 bits", shape_str(strides));
    (reach < 0 ? lo : hi) += reach;
  }
  const int64_t capacity = int64_t(storage->bytes() / dtype_size(dtype));
  if (!empty && (lo < 0 || hi >= capacity))
    raise<LayoutError>(op, "strides", "a view inside the storage's " + std::to_string(capacity) + " elements",
                       "elements " + std::to_string(lo) + ".." + std::to_string(hi) + " (shape " + shape_str(shape) +
                           ", strides " + shape_str(strides) + ", offset " + std::to_string(offset) + ")");
  return Tensor(std::move(storage), std::move(shape), std::move(strides), offset, dtype);
}

namespace {

// Calls fn(T{}) with the C++ type of a dtype.
template <class Fn>
void visit_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: fn(float{}); break;
    case DType::f64: fn(double{}); break;
    case DType::bf16: fn(bf16{}); break;
    case DType::f16: fn(f16{}); break;
    case DType::i32: fn(int32_t{}); break;
    case DType::i64: fn(int64_t{}); break;
    case DType::u16: fn(uint16_t{}); break;
    case DType::u8: fn(uint8_t{}); break;
  }
}

template <class T> double to_double(T v) { return double(static_cast<float>(v)); }
template <> double to_double(double v) { return v; }
template <> double to_double(int32_t v) { return double(v); }
template <> double to_double(int64_t v) { return double(v); }
template <> double to_double(uint16_t v) { return double(v); }
template <> double to_double(uint8_t v) { return double(v); }

template <class T> T from_double(double v) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) return T(float(v));
  else return static_cast<T>(v);
}

// Visits every element's offset (in elements, relative to the storage start) in row-major order.
template <class Fn>
void for_each_offset(const Shape& shape, const Shape& strides, int64_t base, Fn&& fn) {
  int64_t n = shape_numel(shape);
  if (n == 0) return;
  std::vector<int64_t> idx(shape.size(), 0);
  int64_t off = base;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, off);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

void require_cpu(const Tensor& t, const char* op) {
  if (!t.device().is_cpu())
    raise<DeviceError>(op, "self", "a CPU tensor (host element access)", t.device().str());
}

void require_defined(const Tensor& t, const char* op) {
  if (!t.defined()) raise<ValueError>(op, "self", "a defined tensor", "an undefined tensor");
}

// Byte copies and zeroing where a GPU is involved go through its backend. A build without one cannot
// hold a GPU tensor (its allocation is refused), so there these only raise.
void copy_device_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
#if ALPHA_WITH_CUDA
  cuda::copy_bytes(dst, dst_device, src, src_device, bytes);
#else
  (void)dst, (void)src, (void)bytes;
  raise<DeviceError>("Tensor::copy_from", "device", "the CPU (this build has no CUDA backend)",
                     (dst_device.is_cpu() ? src_device : dst_device).str());
#endif
}

void zero_device_bytes(void* dst, Device device, size_t bytes) {
#if ALPHA_WITH_CUDA
  cuda::zero_bytes(dst, device, bytes);
#else
  (void)dst, (void)bytes;
  raise<DeviceError>("Tensor::zero_", "device", "the CPU (this build has no CUDA backend)", device.str());
#endif
}

// Elements from a view's first to its last element, inclusive (strides are never negative).
int64_t span_elements(const Tensor& t) {
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.shape()[size_t(d)] - 1) * t.strides()[size_t(d)];
  return last + 1;
}

#if ALPHA_WITH_CUDA
// Whether a copy on one GPU can run as a kernel (kernels/copy.h): the same dtype, or two of f32, bf16, f16.
// Converting copies on a GPU: among f32, bf16 and f16, any of them to f64 (exact), and f64 to f32 (one rounding).
// f64 to bf16 or f16 goes through the host, which rounds once from f64 (through f32 it would round twice).
bool gpu_copy_supported(DType src, DType dst) {
  auto gpu_float = [](DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; };
  return src == dst || (gpu_float(src) && (gpu_float(dst) || dst == DType::f64)) ||
         (src == DType::f64 && dst == DType::f32);
}

// The copy's layout with size-1 dims dropped and dims that are contiguous in both views merged; nullopt
// when more than kMaxCopyDims remain.
std::optional<kernels::CopyLayout> copy_layout(const Tensor& dst, const Tensor& src) {
  kernels::CopyLayout layout;
  layout.numel = dst.numel();
  for (int64_t d = 0; d < dst.dim(); ++d) {
    const int64_t size = dst.size(d);
    if (size == 1) continue;
    const int k = layout.dims;
    if (k > 0 && layout.src_strides[k - 1] == src.stride(d) * size && layout.dst_strides[k - 1] == dst.stride(d) * size) {
      layout.shape[k - 1] *= size;  // the previous dim steps over this one whole: one dim
      layout.src_strides[k - 1] = src.stride(d);
      layout.dst_strides[k - 1] = dst.stride(d);
      continue;
    }
    if (k == kernels::kMaxCopyDims) return std::nullopt;
    layout.shape[k] = size;
    layout.src_strides[k] = src.stride(d);
    layout.dst_strides[k] = dst.stride(d);
    layout.dims = k + 1;
  }
  return layout;
}

// Runs the copy kernel for the dtype pair (gpu_copy_supported) on the tensors' GPU.
void copy_on_gpu(const Tensor& dst, const Tensor& src, const kernels::CopyLayout& layout) {
  const int ordinal = dst.device().index;
  cuda::set_device(ordinal);
  const Stream stream = cuda::default_stream(ordinal);
  // A same-type copy moves words of the element's size; a converting one goes through the element types.
  auto run = [&]<class S, class D>() {
    if constexpr (std::is_same_v<S, D>) {
      using W = std::conditional_t<sizeof(S) == 1, uint8_t,
                                   std::conditional_t<sizeof(S) == 2, uint16_t,
                                                      std::conditional_t<sizeof(S) == 4, uint32_t, uint64_t>>>;
      kernels::cuda::copy(kernels::CopyArgs<W, W>{static_cast<const W*>(src.raw_data()), static_cast<W*>(dst.raw_data()),
                                                  layout},
                          stream);
    } else {
      kernels::cuda::copy(kernels::CopyArgs<S, D>{static_cast<const S*>(src.raw_data()), static_cast<D*>(dst.raw_data()),
                                                  layout},
                          stream);
    }
  };
  if (src.dtype() == dst.dtype()) {
    switch (dtype_size(dst.dtype())) {
      case 1: return run.template operator()<uint8_t, uint8_t>();
      case 2: return run.template operator()<uint16_t, uint16_t>();
      case 4: return run.template operator()<uint32_t, uint32_t>();
      default: return run.template operator()<uint64_t, uint64_t>();
    }
  }
  auto to = [&]<class S>() {
    switch (dst.dtype()) {
      case DType::bf16: return run.template operator()<S, bf16>();
      case DType::f16: return run.template operator()<S, f16>();
      case DType::f64: return run.template operator()<S, double>();
      default: return run.template operator()<S, float>();
    }
  };
  switch (src.dtype()) {
    case DType::bf16: return to.template operator()<bf16>();
    case DType::f16: return to.template operator()<f16>();
    case DType::f64: return run.template operator()<double, float>();  // f64 converts to f32 only
    default: return to.template operator()<float>();
  }
}
#endif

// Copies src into dst, both in host memory: any strides, any dtypes, overlapping views allowed.
void copy_on_host(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    std::memmove(dst.raw_data(), src.raw_data(), dst.nbytes());
    return;
  }
  char* dst_base = static_cast<char*>(dst.storage()->data());
  const char* src_base = static_cast<const char*>(src.storage()->data());
  visit_dtype(dst.dtype(), [&](auto dst_tag) {
    using D = decltype(dst_tag);
    visit_dtype(src.dtype(), [&](auto src_tag) {
      using S = decltype(src_tag);
      std::vector<D> staged(static_cast<size_t>(dst.numel()));  // staging makes overlapping copies safe
      for_each_offset(src.shape(), src.strides(), src.offset(), [&](int64_t i, int64_t off) {
        S v;
        std::memcpy(&v, src_base + off * int64_t(sizeof(S)), sizeof(S));
        if constexpr (std::is_same_v<D, S>) staged[size_t(i)] = v;
        else staged[size_t(i)] = from_double<D>(to_double(v));
      });
      for_each_offset(dst.shape(), dst.strides(), dst.offset(), [&](int64_t i, int64_t off) {
        std::memcpy(dst_base + off * int64_t(sizeof(D)), &staged[size_t(i)], sizeof(D));
      });
    });
  });
}

}  // namespace

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::full(Shape shape, double value, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::uniform(Shape shape, double lo, double hi, uint64_t seed, DType dtype, Device device) {
  Tensor t = empty(shape, DType::f64);
  double* p = t.data<double>();
  const int64_t n = t.numel();
  // Element i depends on i alone: the threads split the work, not the values.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = lo + (hi - lo) * philox_uniform53(seed, uint64_t(i));
  return t.to(dtype).to(device);
}

Tensor Tensor::normal(Shape shape, double mean, double stddev, uint64_t seed, DType dtype, Device device) {
  // Box-Muller over pairs of Philox draws: the same values on every toolchain and thread count (a pair depends on
  // its index alone; the threads split the pairs). A model of billions of weights initialises in seconds, not
  // minutes.
  Tensor t = empty(shape, DType::f64);
  double* p = t.data<double>();
  const int64_t n = t.numel();
  constexpr double kTwoPi = 6.283185307179586476925286766559;
#pragma omp parallel for schedule(static)
  for (int64_t pair = 0; pair < (n + 1) / 2; ++pair) {
    const int64_t i = 2 * pair;
    double u1 = 1.0 - philox_uniform53(seed, uint64_t(i));  // in (0, 1]: log is finite
    double u2 = philox_uniform53(seed, uint64_t(i) + 1);
    double radius = stddev * std::sqrt(-2.0 * std::log(u1));
    p[i] = mean + radius * std::cos(kTwoPi * u2);
    if (i + 1 < n) p[i + 1] = mean + radius * std::sin(kTwoPi * u2);
  }
  return t.to(dtype).to(device);
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, Shape shape, Device device) {
  if (int64_t(values.size()) != shape_numel(shape))
    raise<ShapeError>("Tensor::from_vector", "values", std::to_string(shape_numel(shape)) + " elements for shape " +
                      shape_str(shape), std::to_string(values.size()) + " elements");
  Tensor t = empty(std::move(shape), dtype_of<T>);
  std::copy(values.begin(), values.end(), t.data<T>());
  return t.to(device);
}

int64_t Tensor::normalize_dim(int64_t d, const char* op, int64_t extra) const {
  int64_t n = dim() + extra;
  int64_t r = d < 0 ? d + n : d;
  if (r < 0 || r >= n)
    raise<ShapeError>(op, "dim", "a dimension in [" + std::to_string(-n) + ", " + std::to_string(n) + ")",
                      std::to_string(d));
  return r;
}

int64_t Tensor::size(int64_t d) const { return shape_[normalize_dim(d, "Tensor::size")]; }
int64_t Tensor::stride(int64_t d) const { return strides_[normalize_dim(d, "Tensor::stride")]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element to be out of place, whatever the strides
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  require_defined(*this, "Tensor::raw_data");
  return static_cast<char*>(storage_->data()) + offset_ * int64_t(dtype_size(dtype_));
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = normalize_dim(d, "Tensor::slice");
  int64_t n = shape_[d];
  if (step <= 0) raise<ValueError>("Tensor::slice", "step", "a positive step", std::to_string(step));
  if (start < 0) start += n;
  if (end < 0) end += n;
  if (start < 0 || end > n || start > end)
    raise<ShapeError>("Tensor::slice", "start/end", "0 <= start <= end <= " + std::to_string(n),
                      "start " + std::to_string(start) + ", end " + std::to_string(end));
  Tensor r = *this;
  r.shape_[d] = (end - start + step - 1) / step;
  r.strides_[d] = strides_[d] * step;
  r.offset_ = offset_ + start * strides_[d];
  return r;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = normalize_dim(d, "Tensor::select");
  if (index < 0) index += shape_[d];
  if (index < 0 || index >= shape_[d])
    raise<ShapeError>("Tensor::select", "index", "an index in [0, " + std::to_string(shape_[d]) + ")",
                      std::to_string(index));
  Tensor r = *this;
  r.offset_ = offset_ + index * strides_[d];
  r.shape_.erase(r.shape_.begin() + d);
  r.strides_.erase(r.strides_.begin() + d);
  return r;
}

namespace {
Shape infer_shape(Shape shape, int64_t numel, const Shape& from, const char* op) {
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1 && infer_at < 0) infer_at = int64_t(i);
    else if (shape[i] < 0) raise<ShapeError>(op, "shape", "sizes >= 0 and at most one -1", shape_str(shape));
    else known *= shape[i];
  }
  if (infer_at >= 0 && known > 0 && numel % known == 0) shape[infer_at] = numel / known;
  if (shape_numel(shape) != numel)
    raise<ShapeError>(op, "shape", "a shape with " + std::to_string(numel) + " elements (from " + shape_str(from) + ")",
                      shape_str(shape));
  return shape;
}
}  // namespace

namespace {
// The strides that lay `shape` over a tensor of shape `from` and strides `strides` without moving data, or
// nullopt when there are none. Groups the source dimensions into runs that are contiguous among themselves;
// each run can be re-split into any new dimensions whose sizes multiply to the run's size (PyTorch's rule).
std::optional<Shape> view_strides(const Shape& shape, const Shape& from, const Shape& strides, int64_t numel) {
  if (numel == 0 || from.empty()) return contiguous_strides(shape);
  Shape new_strides(shape.size(), 1);
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t base_stride = strides.back(), run_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(from.size()) - 1; d >= 0; --d) {
    run_numel *= from[d];
    bool run_ends = d == 0 || (from[d - 1] != 1 && strides[d - 1] != run_numel * base_stride);
    if (!run_ends) continue;
    while (view_d >= 0 && (view_numel < run_numel || shape[view_d] == 1)) {
      new_strides[view_d] = view_numel * base_stride;
      view_numel *= shape[view_d];
      --view_d;
    }
    if (view_numel != run_numel) return std::nullopt;
    if (d > 0) base_stride = strides[d - 1], run_numel = 1, view_numel = 1;
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}
}  // namespace

Tensor Tensor::view(Shape shape) const {
  require_defined(*this, "Tensor::view");
  shape = infer_shape(std::move(shape), numel(), shape_, "Tensor::view");
  std::optional<Shape> strides = view_strides(shape, shape_, strides_, numel());
  if (!strides)
    raise<LayoutError>("Tensor::view", "shape", "a shape compatible with the strides " + shape_str(strides_) +
                       " of shape " + shape_str(shape_) + " (use reshape or contiguous)", shape_str(shape));
  Tensor r = *this;
  r.shape_ = std::move(shape);
  r.strides_ = std::move(*strides);
  return r;
}

Tensor Tensor::reshape(Shape shape) const {
  require_defined(*this, "Tensor::reshape");
  Shape inferred = infer_shape(std::move(shape), numel(), shape_, "Tensor::reshape");
  std::optional<Shape> strides = view_strides(inferred, shape_, strides_, numel());
  if (!strides) return contiguous().view(std::move(inferred));
  Tensor r = *this;
  r.shape_ = std::move(inferred);
  r.strides_ = std::move(*strides);
  return r;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = normalize_dim(d0, "Tensor::transpose");
  d1 = normalize_dim(d1, "Tensor::transpose");
  Tensor r = *this;
  std::swap(r.shape_[d0], r.shape_[d1]);
  std::swap(r.strides_[d0], r.strides_[d1]);
  return r;
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  if (int64_t(order.size()) != dim())
    raise<ShapeError>("Tensor::permute", "order", std::to_string(dim()) + " dimensions", shape_str(order));
  std::vector<bool> seen(order.size(), false);
  Tensor r = *this;
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t d = normalize_dim(order[i], "Tensor::permute");
    if (seen[d]) raise<ShapeError>("Tensor::permute", "order", "a permutation of the dimensions", shape_str(order));
    seen[d] = true;
    r.shape_[i] = shape_[d];
    r.strides_[i] = strides_[d];
  }
  return r;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = normalize_dim(d, "Tensor::unsqueeze", 1);
  Tensor r = *this;
  int64_t s = d < dim() ? strides_[d] * shape_[d] : 1;
  r.shape_.insert(r.shape_.begin() + d, 1);
  r.strides_.insert(r.strides_.begin() + d, s);
  return r;
}

Tensor Tensor::squeeze(int64_t d) const {
  d = normalize_dim(d, "Tensor::squeeze");
  if (shape_[d] != 1)
    raise<ShapeError>("Tensor::squeeze", "dim", "a dimension of size 1", "size " + std::to_string(shape_[d]));
  Tensor r = *this;
  r.shape_.erase(r.shape_.begin() + d);
  r.strides_.erase(r.strides_.begin() + d);
  return r;
}

void Tensor::copy_from(const Tensor& src) {
  require_defined(*this, "Tensor::copy_from");
  require_defined(src, "Tensor::copy_from");
  if (src.shape_ != shape_)
    raise<ShapeError>("Tensor::copy_from", "src", "shape " + shape_str(shape_), shape_str(src.shape_));
  // One scope for the whole copy, however many transfers it takes; on the GPU's side when there is one.
  LaunchScope launch("Tensor::copy_from", device().is_cpu() ? src.device() : device(), LaunchLayer::tensor);
  if (device().is_cpu() && src.device().is_cpu()) return copy_on_host(*this, src);
  if (numel() == 0) return;
  // Whole contiguous ranges in different storages move as bytes (cudaMemcpy forbids overlapping ranges).
  if (dtype_ == src.dtype_ && is_contiguous() && src.is_contiguous() && !shares_storage(src))
    return copy_device_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes());
#if ALPHA_WITH_CUDA
  // Within one GPU: the copy kernel; overlapping views are staged through a temporary first.
  if (device() == src.device() && gpu_copy_supported(src.dtype_, dtype_)) {
    if (shares_storage(src)) return copy_from(src.clone());
    if (auto layout = copy_layout(*this, src)) return copy_on_gpu(*this, src, *layout);
  }
#endif
  // Any other copy that involves a GPU (between host and device, or between GPUs, with a layout or dtype
  // change; dtype pairs the kernel lacks) goes through host memory: each GPU side's span (its first to its
  // last element) comes to the host as a view with the same layout, the host copies, and the destination's
  // span goes back. Correct for any layout, dtype pair and overlap.
  auto on_host = [](const Tensor& t, bool read) {
    if (t.device().is_cpu()) return t;
    size_t bytes = size_t(span_elements(t)) * dtype_size(t.dtype_);
    auto host = std::make_shared<Storage>(Device::cpu(), bytes);
    if (read) copy_device_bytes(host->data(), Device::cpu(), t.raw_data(), t.device(), bytes);
    return Tensor(std::move(host), t.shape_, t.strides_, 0, t.dtype_);
  };
  Tensor src_host = on_host(src, true);
  // A contiguous destination is overwritten whole; a strided one keeps the elements between its own.
  Tensor dst_host = on_host(*this, !is_contiguous());
  copy_on_host(dst_host, src_host);
  if (!device().is_cpu())
    copy_device_bytes(raw_data(), device(), dst_host.raw_data(), Device::cpu(), dst_host.storage()->bytes());
}

void copy_many(std::span<const Tensor> dsts, std::span<const Tensor> srcs) {
  constexpr const char* kOp = "copy_many";
  if (dsts.size() != srcs.size())
    raise<ShapeError>(kOp, "srcs", std::to_string(dsts.size()) + " tensors (one per destination)",
                      std::to_string(srcs.size()));
  if (dsts.empty()) return;
  std::vector<kernels::ContiguousCopy> runs;
  std::vector<kernels::ContiguousConversion> conversions;  // f32 pairs into conversion_dtype
  DType conversion_dtype = DType::bf16;
  bool one_launch = !dsts[0].device().is_cpu();
  for (size_t k = 0; k < dsts.size(); ++k) {
    const Tensor &dst = dsts[k], &src = srcs[k];
    require_defined(dst, kOp);
    require_defined(src, kOp);
    if (src.shape() != dst.shape())
      raise<ShapeError>(kOp, "srcs[" + std::to_string(k) + "]", "shape " + shape_str(dst.shape()), shape_str(src.shape()));
    const bool same = src.dtype() == dst.dtype();
    const bool converts = src.dtype() == DType::f32 && (dst.dtype() == DType::bf16 || dst.dtype() == DType::f16) &&
                          (conversions.empty() || dst.dtype() == conversion_dtype);
    one_launch = one_launch && dst.device() == dsts[0].device() && src.device() == dst.device() && (same || converts) &&
                 dst.is_contiguous() && src.is_contiguous() && !dst.shares_storage(src);
    if (!one_launch) continue;
    if (same) {
      runs.push_back({src.raw_data(), dst.raw_data(), int64_t(dst.nbytes())});
    } else {
      conversions.push_back({static_cast<const float*>(src.raw_data()), dst.raw_data(), dst.numel()});
      conversion_dtype = dst.dtype();
    }
  }
  one_launch = one_launch && (runs.empty() || conversions.empty());  // one kernel: copies or conversions
#if ALPHA_WITH_CUDA
  if (one_launch) {
    LaunchScope launch(kOp, dsts[0].device(), LaunchLayer::tensor);
    cuda::set_device(dsts[0].device().index);
    const Stream stream = cuda::default_stream(dsts[0].device().index);
    if (runs.empty() && conversion_dtype == DType::bf16) return kernels::cuda::convert_many<bf16>(conversions, stream);
    if (runs.empty()) return kernels::cuda::convert_many<f16>(conversions, stream);
    return kernels::cuda::copy_many(runs, stream);
  }
#endif
  for (size_t k = 0; k < dsts.size(); ++k) Tensor(dsts[k]).copy_from(srcs[k]);
}

Tensor Tensor::contiguous() const {
  require_defined(*this, "Tensor::contiguous");
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  require_defined(*this, "Tensor::clone");
  Tensor r = empty(shape_, dtype_, device());
  r.copy_from(*this);
  return r;
}

Tensor Tensor::to(Device target) const {
  require_defined(*this, "Tensor::to");
  if (target == device()) return *this;
  require_available("Tensor::to", target);
  Tensor r = empty(shape_, dtype_, target);
  r.copy_from(*this);
  return r;
}

Tensor Tensor::to(DType target) const {
  require_defined(*this, "Tensor::to");
  if (target == dtype_) return *this;
  Tensor r = empty(shape_, target, device());
  r.copy_from(*this);
  return r;
}

void Tensor::fill_(double value) {
  require_defined(*this, "Tensor::fill_");
#if ALPHA_WITH_CUDA
  if (!device().is_cpu() && is_contiguous()) {  // the value's bits, written by a kernel on the device
    LaunchScope launch("Tensor::fill_", device(), LaunchLayer::tensor);
    visit_dtype(dtype_, [&](auto tag) {
      using T = decltype(tag);
      const T v = from_double<T>(value);
      uint64_t pattern = 0;
      std::memcpy(&pattern, &v, sizeof(T));
      cuda::fill_elements(raw_data(), device(), pattern, sizeof(T), size_t(numel()));
    });
    return;
  }
#endif
  if (!device().is_cpu()) return copy_from(full(shape_, value, dtype_, device()));  // a strided view: from a fill
  char* base = static_cast<char*>(storage_->data());
  visit_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    T v = from_double<T>(value);
    for_each_offset(shape_, strides_, offset_,
                    [&](int64_t, int64_t off) { std::memcpy(base + off * int64_t(sizeof(T)), &v, sizeof(T)); });
  });
}

void Tensor::zero_() {
  require_defined(*this, "Tensor::zero_");
  LaunchScope launch("Tensor::zero_", device(), LaunchLayer::tensor);
  if (!is_contiguous()) fill_(0.0);
  else if (device().is_cpu()) std::memset(raw_data(), 0, nbytes());
  else zero_device_bytes(raw_data(), device(), nbytes());
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  require_defined(*this, "Tensor::at");
  require_cpu(*this, "Tensor::at");
  if (int64_t(index.size()) != dim())
    raise<ShapeError>("Tensor::at", "index", std::to_string(dim()) + " indices", std::to_string(index.size()));
  int64_t off = offset_;
  size_t d = 0;
  for (int64_t i : index) {
    if (i < 0 || i >= shape_[d])
      raise<ShapeError>("Tensor::at", "index", "an index in [0, " + std::to_string(shape_[d]) + ") for dim " +
                        std::to_string(d), std::to_string(i));
    off += i * strides_[d++];
  }
  double out = 0;
  const char* base = static_cast<const char*>(storage_->data());
  visit_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    T v;
    std::memcpy(&v, base + off * int64_t(sizeof(T)), sizeof(T));
    out = to_double(v);
  });
  return out;
}

HostCopy::HostCopy(std::vector<Tensor> sources) {
  constexpr const char* op = "HostCopy";
  if (sources.empty()) raise<ValueError>(op, "sources", "at least one tensor", "none");
  for (size_t k = 0; k < sources.size(); ++k) {
    require_defined(sources[k], op);
    if (sources[k].device() != sources[0].device())
      raise<DeviceError>(op, "sources[" + std::to_string(k) + "]", "a tensor on " + sources[0].device().str(),
                         sources[k].device().str());
    sources_.push_back(sources[k].contiguous());
  }
  if (sources_[0].device().is_cpu()) {
    for (const Tensor& t : sources_) hosts_.push_back(t.clone());
    return;
  }
#if ALPHA_WITH_CUDA
  std::vector<cuda::HostReadPart> parts;
  for (const Tensor& t : sources_) {
    parts.push_back({t.raw_data(), t.nbytes()});
    hosts_.push_back(Tensor::empty(t.shape(), t.dtype(), Device::cpu()));
  }
  // A launch of its own, so that a profile tags the device-to-host copies with the read that queued them.
  LaunchScope launch(op, sources_[0].device(), LaunchLayer::tensor);
  cuda::begin_host_read(sources_[0].device().index, parts);
  pending_ = true;
#endif
}

void HostCopy::collect() {
#if ALPHA_WITH_CUDA
  pending_ = false;
  size_t total = 0;
  for (const Tensor& h : hosts_) total += h.nbytes();
  std::vector<char> packed(total);
  cuda::finish_host_read(sources_[0].device().index, packed.data(), total);
  const char* at = packed.data();
  for (Tensor& h : hosts_) {
    std::memcpy(h.raw_data(), at, h.nbytes());
    at += h.nbytes();
  }
#endif
}

HostCopy::~HostCopy() {
  // An uncollected copy (an exception between the two ends) still frees its device's slot for the next read.
  if (pending_) try {
      collect();
    } catch (...) {
    }
}

std::vector<Tensor> HostCopy::wait() {
  if (collected_) raise<ValueError>("HostCopy::wait", "self", "a copy not yet collected", "one waited for before");
  collected_ = true;
  if (pending_) collect();
  sources_.clear();
  return hosts_;
}

double Tensor::item() const {
  if (numel() != 1) raise<ShapeError>("Tensor::item", "self", "a tensor with one element", shape_str(shape_));
  // A device tensor's element comes to the host first (the copy waits for the work that produces it).
  return reshape({}).to(Device::cpu()).at({});
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  require_defined(*this, "Tensor::to_vector");
  Tensor c = to(Device::cpu()).to(dtype_of<T>).contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device().str();
}

#define ALPHA_TENSOR_INSTANTIATE(T)                                                     \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, Shape, Device);       \
  template std::vector<T> Tensor::to_vector<T>() const;
ALPHA_TENSOR_INSTANTIATE(float)
ALPHA_TENSOR_INSTANTIATE(double)
ALPHA_TENSOR_INSTANTIATE(bf16)
ALPHA_TENSOR_INSTANTIATE(f16)
ALPHA_TENSOR_INSTANTIATE(int32_t)
ALPHA_TENSOR_INSTANTIATE(int64_t)
ALPHA_TENSOR_INSTANTIATE(uint16_t)
ALPHA_TENSOR_INSTANTIATE(uint8_t)
#undef ALPHA_TENSOR_INSTANTIATE

}  // namespace alpha
