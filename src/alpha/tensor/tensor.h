// Tensor: a strided view (shape, strides in elements, offset) of reference-counted storage that lives
// on one device. Views (slice, reshape of contiguous data, transpose, permute) share storage; copies
// are explicit (contiguous, clone, to). Element access from the host is for the CPU only.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "alpha/core/device.h"
#include "alpha/core/dtype.h"
#include "alpha/core/error.h"

namespace alpha {

using Shape = std::vector<int64_t>;

std::string shape_str(std::span<const int64_t> shape);
int64_t shape_numel(std::span<const int64_t> shape);
Shape contiguous_strides(std::span<const int64_t> shape);

// Raw memory from a device's caching allocator, returned to it when the last tensor lets go; or memory
// borrowed from another owner (a PyTorch tensor), kept alive by `owner` and never given to the allocator.
class Storage {
 public:
  Storage(Device device, size_t bytes);
  Storage(Device device, void* data, size_t bytes, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Device device_;
  size_t bytes_;
  void* data_;
  std::shared_ptr<void> owner_;  // set for borrowed memory
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false; used for optional arguments such as a missing bias

  static Tensor empty(Shape shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype, Device device = Device::cpu());
  static Tensor full(Shape shape, double value, DType dtype, Device device = Device::cpu());
  // Deterministic random fills from a seeded generator (CPU, then copied to the device).
  static Tensor uniform(Shape shape, double lo, double hi, uint64_t seed, DType dtype = DType::f32,
                        Device device = Device::cpu());
  static Tensor normal(Shape shape, double mean, double stddev, uint64_t seed, DType dtype = DType::f32,
                       Device device = Device::cpu());
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape, Device device = Device::cpu());
  // A view of existing storage (borrowed memory, no copy); raises LayoutError unless every element it
  // reaches lies inside the storage.
  static Tensor from_storage(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool shares_storage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }

  // Pointer to the first element. The typed form checks that T matches the dtype.
  void* raw_data() const;
  template <class T> T* data() const;

  // Views, sharing storage.
  Tensor slice(int64_t d, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t d, int64_t index) const;       // drops dimension d
  Tensor view(Shape shape) const;                      // requires a compatible layout; -1 infers one size
  Tensor reshape(Shape shape) const;                   // view when possible, else a contiguous copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& order) const;
  Tensor unsqueeze(int64_t d) const;
  Tensor squeeze(int64_t d) const;

  // Copies.
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;  // value conversion (rounds to nearest even for bf16/f16)
  void copy_from(const Tensor& src);  // same shape; converts dtype; any strides on both sides

  void fill_(double value);
  void zero_();

  // Host access (CPU tensors): one element at a multi-index, converted to double; the whole tensor as T.
  double at(std::initializer_list<int64_t> index) const;
  double item() const;  // single-element tensors, on any device (a device tensor is copied to the host)
  template <class T> std::vector<T> to_vector() const;  // any device: the elements, row-major, converted to T

  std::string describe() const;  // "f32[2, 3] on cpu"

 private:
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype);
  int64_t normalize_dim(int64_t d, const char* op, int64_t extra = 0) const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::f32;
};

// Tensors' values on their way to the host: the copies are queued at construction, behind the work that
// produces them, and wait() returns them (contiguous CPU tensors, in order, each in its own dtype) without
// waiting for work queued after the construction. The trainer reads its step's losses and norm so while the
// optimiser step runs. GPU tensors of one device, at most cuda::kHostReadBytes bytes in all, one HostCopy
// pending per device (ValueError otherwise); CPU tensors' copies are made at once.
class HostCopy {
 public:
  explicit HostCopy(std::vector<Tensor> sources);
  ~HostCopy();
  HostCopy(const HostCopy&) = delete;
  HostCopy& operator=(const HostCopy&) = delete;
  std::vector<Tensor> wait();  // once (ValueError the second time)

 private:
  void collect();                // the pending copies into hosts_
  std::vector<Tensor> sources_;  // kept alive until the copies are collected
  std::vector<Tensor> hosts_;
  bool pending_ = false;
  bool collected_ = false;
};

// dsts[k].copy_from(srcs[k]) for every k. On one GPU, when every pair is contiguous, in two storages and of one
// dtype, or every pair f32 into one of bf16 or f16, one launch for the whole list (kernels::cuda::copy_many,
// convert_many) instead of one per pair; else pair by pair. The destinations must not overlap one another or
// another pair's source.
void copy_many(std::span<const Tensor> dsts, std::span<const Tensor> srcs);

template <class T>
T* Tensor::data() const {
  if (dtype_of<T> != dtype_)
    raise<DTypeError>("Tensor::data", "T", "the tensor's dtype " + std::string(dtype_name(dtype_)),
                      std::string(dtype_name(dtype_of<T>)));
  return static_cast<T*>(raw_data());
}

}  // namespace alpha
