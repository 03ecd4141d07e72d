// The CUDA runtime as the tensor layer and the ops see it: how many GPUs there are, the raw memory the
// caching allocator draws from on each, one default stream per device, and byte copies between any two
// devices. Plain C++ (no CUDA headers), so .cpp files may call it; it exists only in builds with
// ALPHA_WITH_CUDA (definitions in cuda_backend.cu). Every CUDA call behind it is checked and a failure
// raises BackendError naming the call, the file and the line (cuda_check.cuh).
//
// Ordering: all work for a device goes to its default stream, so a block the caching allocator hands out
// again is only touched after the work that used it before; copies that hand data to the host, or
// between two GPUs, wait for their stream. Alpha never relies on the current device persisting: each
// entry point makes current the device it works on.
#pragma once
#if ALPHA_WITH_CUDA
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "alpha/core/device.h"
#include "alpha/core/stream.h"
#include "alpha/tensor/allocator.h"

namespace alpha::cuda {

// Ordinals Alpha addresses in one process (RawMemory holds plain function pointers, one pair per ordinal).
inline constexpr int kMaxDevices = 16;

// Number of CUDA devices; 0, not an error, when the machine has no GPU or no driver.
int device_count();
// Raises DeviceError naming `op` unless `device` is a CUDA device present on this machine.
void require_device(std::string_view op, Device device);
// Makes the device current for the calling thread.
void set_device(int ordinal);
// cudaMalloc / cudaFree on the device (allocate returns nullptr when the device is out of memory).
RawMemory device_memory(int ordinal);
// The device's default stream, created on first use and kept for the life of the process.
Stream default_stream(int ordinal);
// Waits for everything queued on the device's default stream.
void synchronize(int ordinal);
// Copies `bytes` bytes between two devices of which at least one is a GPU (host<->device, within a
// device, between devices).
// Returns once the destination may be read from its own device's point of view: at once for a copy
// into a GPU (stream order), after completion for a copy into host memory.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// A copy of up to kHostReadBytes bytes of device memory to the host, from one or more places (packed one
// after another), queued on the device's stream behind the work before it and collected later without
// waiting for the work queued after it (a pinned staging buffer and an event per device, made on first
// use): the trainer reads a step's losses and norm while the optimiser step it queued after them runs. One
// read per device at a time: begin_host_read raises ValueError while one is pending; finish_host_read waits
// for the copies and writes their bytes, packed, to dst (`bytes`: their total).
inline constexpr size_t kHostReadBytes = 64 * 1024;
struct HostReadPart {
  const void* src;  // device memory
  size_t bytes;
};
void begin_host_read(int ordinal, std::span<const HostReadPart> parts);
void finish_host_read(int ordinal, void* dst, size_t bytes);
// Sets `bytes` bytes of device memory to zero (stream-ordered).
void zero_bytes(void* dst, Device device, size_t bytes);
// Sets `count` elements of `element_bytes` bytes (1, 2, 4 or 8) of device memory to the bit pattern in the low
// bytes of `pattern` (stream-ordered, a kernel taking the pattern by value: nothing is read from the host, so a
// CUDA graph can capture it).
void fill_elements(void* dst, Device device, uint64_t pattern, size_t element_bytes, size_t count);

// CUDA graphs of a device's stream (the tensor layer's CudaGraph): begin_capture starts recording what is
// queued on the stream (relaxed mode: the caching allocator may take fresh memory from cudaMalloc meanwhile);
// end_capture stops, instantiates the graph and returns it with its node count; a capture that went wrong (a
// wait on the stream) raises BackendError naming why. While a capture runs, copy_bytes from the host raises
// BackendError: the graph would read that host memory again at every replay, long after its owner freed it.
// abort_capture ends a capture whose recording failed and drops what it held. launch_graph queues a graph's work on the
// stream.
struct Graph {
  void* exec = nullptr;  // cudaGraphExec_t
  size_t nodes = 0;
};
void begin_capture(int ordinal);
Graph end_capture(int ordinal);
void abort_capture(int ordinal);
void launch_graph(int ordinal, const Graph& graph);
void destroy_graph(const Graph& graph);

}  // namespace alpha::cuda

#endif  // ALPHA_WITH_CUDA
