// The CUDA runtime behind cuda_backend.h: checked calls, device count, lazily created per-device default
// streams, cudaMalloc/cudaFree for the caching allocator, and copies between any two devices.
#include "alpha/runtime/cuda_backend.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "alpha/core/error.h"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::cuda {

void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // a non-sticky error would otherwise be reported again by the next launch check
  raise<BackendError>(call, "status", "cudaSuccess",
                      std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ") at " + file +
                          ":" + std::to_string(line));
}

int device_count() {
  // Asked once: the set of visible devices is fixed when the process first touches CUDA.
  static const int count = [] {
    int n = 0;
    cudaError_t status = cudaGetDeviceCount(&n);
    // No GPU, no driver, or only the driver's stub library: a machine without CUDA, not a failure.
    if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver || status == cudaErrorStubLibrary) {
      cudaGetLastError();  // clears the error so later checked calls do not report it
      return 0;
    }
    check(status, "cudaGetDeviceCount(&n)", __FILE__, __LINE__);
    return n;
  }();
  return count;
}

void require_device(std::string_view op, Device device) {
  int count = device_count();
  if (device.is_cuda() && device.index >= 0 && device.index < count && device.index < kMaxDevices) return;
  std::string expected = count == 0 ? "a CUDA device (this machine has none: no GPU or no driver)"
                                    : "a CUDA device in cuda:0..cuda:" + std::to_string(std::min(count, kMaxDevices) - 1);
  raise<DeviceError>(op, "device", expected, device.str());
}

void set_device(int ordinal) { ALPHA_CUDA_CHECK(cudaSetDevice(ordinal)); }

namespace {

template <int Ordinal>
void* allocate_on(size_t bytes) {
  set_device(Ordinal);
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status == cudaErrorMemoryAllocation) {  // the caching allocator empties its pool, retries, then raises
    cudaGetLastError();
    return nullptr;
  }
  check(status, "cudaMalloc(&ptr, bytes)", __FILE__, __LINE__);
  return ptr;
}

template <int Ordinal>
void release_on(void* ptr, size_t) {
  cudaError_t status = cudaSetDevice(Ordinal);
  if (status == cudaSuccess) status = cudaFree(ptr);
  // At process exit the CUDA runtime may be torn down before the allocators: the driver frees everything then.
  if (status == cudaErrorCudartUnloading) return;
  check(status, "cudaFree(ptr)", __FILE__, __LINE__);
}

template <size_t... Ordinals>
constexpr std::array<RawMemory, sizeof...(Ordinals)> memory_table(std::index_sequence<Ordinals...>) {
  return {RawMemory{&allocate_on<int(Ordinals)>, &release_on<int(Ordinals)>}...};
}
constexpr auto kDeviceMemory = memory_table(std::make_index_sequence<kMaxDevices>());

struct Streams {
  std::mutex mutex;
  std::array<cudaStream_t, kMaxDevices> handles{};
};
Streams& streams() {
  static Streams s;  // never destroyed before the process ends: streams live as long as the contexts
  return s;
}

}  // namespace

RawMemory device_memory(int ordinal) {
  require_device("device_memory", Device::cuda(ordinal));
  return kDeviceMemory[size_t(ordinal)];
}

Stream default_stream(int ordinal) {
  require_device("default_stream", Device::cuda(ordinal));
  auto& s = streams();
  std::lock_guard lock(s.mutex);
  cudaStream_t& handle = s.handles[size_t(ordinal)];
  if (!handle) {
    set_device(ordinal);
    // A blocking stream: it also orders against work on the legacy default stream (libraries' defaults).
    ALPHA_CUDA_CHECK(cudaStreamCreateWithFlags(&handle, cudaStreamDefault));
    // Kernels' stream-ordered scratch (cudaMallocAsync) comes from the device's default pool; by default it
    // returns its memory to the driver at every synchronisation, so a training step would allocate it
    // afresh each time. Keeping it makes scratch pool-served in steady state, like the caching allocator.
    cudaMemPool_t pool = nullptr;
    ALPHA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, ordinal));
    uint64_t keep_all = UINT64_MAX;
    ALPHA_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  }
  return Stream{handle};
}

cudaStream_t stream_handle(Stream stream) {
  if (stream.handle) return static_cast<cudaStream_t>(stream.handle);
  int ordinal = 0;
  ALPHA_CUDA_CHECK(cudaGetDevice(&ordinal));
  return static_cast<cudaStream_t>(default_stream(ordinal).handle);
}

namespace {

// The device made current and its default stream: where every entry point below queues its work.
cudaStream_t current_stream(int ordinal) {
  cudaStream_t stream = static_cast<cudaStream_t>(default_stream(ordinal).handle);
  set_device(ordinal);
  return stream;
}

}  // namespace

void synchronize(int ordinal) {
  cudaStream_t stream = current_stream(ordinal);
  ALPHA_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device != src_device) {
    // Between two GPUs: wait for the source's producers, copy on the destination's stream, then wait for
    // the copy, so neither device's pool hands its block out again while the copy still uses it.
    synchronize(src_device.index);
    cudaStream_t stream = current_stream(dst_device.index);
    ALPHA_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, stream));
    ALPHA_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  int ordinal = dst_device.is_cuda() ? dst_device.index : src_device.index;
  cudaStream_t stream = current_stream(ordinal);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  ALPHA_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone && !src_device.is_cuda())
    raise<BackendError>("copy_bytes", "src",
                        "device memory while a CUDA graph captures (a copy from the host would read that host "
                        "memory again at every replay)",
                        "host memory");
  // From pageable host memory the call returns once the source has been staged, so the host buffer may go.
  ALPHA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  if (dst_device.is_cpu()) ALPHA_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host reads it next
}

namespace {

struct HostReads {
  std::mutex mutex;
  std::array<void*, kMaxDevices> staging{};  // pinned, kHostReadBytes each
  std::array<cudaEvent_t, kMaxDevices> done{};
  std::array<size_t, kMaxDevices> pending{};  // the bytes of the read in flight; 0: none
};
HostReads& host_reads() {
  static HostReads r;  // never destroyed before the process ends, like the streams
  return r;
}

}  // namespace

void begin_host_read(int ordinal, std::span<const HostReadPart> parts) {
  constexpr const char* op = "begin_host_read";
  require_device(op, Device::cuda(ordinal));
  size_t bytes = 0;
  for (const HostReadPart& part : parts) bytes += part.bytes;
  if (bytes == 0 || bytes > kHostReadBytes)
    raise<ValueError>(op, "bytes", "1 to " + std::to_string(kHostReadBytes) + " in all", std::to_string(bytes));
  cudaStream_t stream = current_stream(ordinal);
  auto& r = host_reads();
  std::lock_guard lock(r.mutex);
  const size_t d = size_t(ordinal);
  if (r.pending[d] != 0)
    raise<ValueError>(op, "ordinal", "a device with no read pending (finish_host_read the last one first)",
                      "cuda:" + std::to_string(ordinal) + " with " + std::to_string(r.pending[d]) + " bytes pending");
  if (!r.staging[d]) {
    ALPHA_CUDA_CHECK(cudaMallocHost(&r.staging[d], kHostReadBytes));
    ALPHA_CUDA_CHECK(cudaEventCreateWithFlags(&r.done[d], cudaEventDisableTiming));
  }
  char* at = static_cast<char*>(r.staging[d]);
  for (const HostReadPart& part : parts) {
    ALPHA_CUDA_CHECK(cudaMemcpyAsync(at, part.src, part.bytes, cudaMemcpyDeviceToHost, stream));
    at += part.bytes;
  }
  ALPHA_CUDA_CHECK(cudaEventRecord(r.done[d], stream));
  r.pending[d] = bytes;
}

void finish_host_read(int ordinal, void* dst, size_t bytes) {
  constexpr const char* op = "finish_host_read";
  require_device(op, Device::cuda(ordinal));
  auto& r = host_reads();
  std::lock_guard lock(r.mutex);
  const size_t d = size_t(ordinal);
  if (r.pending[d] != bytes)
    raise<ValueError>(op, "bytes", "the pending read's " + std::to_string(r.pending[d]) + " bytes",
                      std::to_string(bytes));
  r.pending[d] = 0;  // released even if the wait fails: the next read may start
  set_device(ordinal);
  ALPHA_CUDA_CHECK(cudaEventSynchronize(r.done[d]));
  std::memcpy(dst, r.staging[d], bytes);
}

namespace {

template <class U>
__global__ void fill_kernel(U* dst, U value, size_t count) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) dst[i] = value;
}

template <class U>
void launch_fill(void* dst, uint64_t pattern, size_t count, cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  const unsigned blocks = unsigned(std::min<size_t>((count + kThreads - 1) / kThreads, 4096));
  fill_kernel<U><<<blocks, kThreads, 0, stream>>>(static_cast<U*>(dst), static_cast<U>(pattern), count);
  ALPHA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void fill_elements(void* dst, Device device, uint64_t pattern, size_t element_bytes, size_t count) {
  if (count == 0) return;
  cudaStream_t stream = current_stream(device.index);
  switch (element_bytes) {
    case 1: launch_fill<uint8_t>(dst, pattern, count, stream); break;
    case 2: launch_fill<uint16_t>(dst, pattern, count, stream); break;
    case 4: launch_fill<uint32_t>(dst, pattern, count, stream); break;
    case 8: launch_fill<uint64_t>(dst, pattern, count, stream); break;
    default:
      raise<ValueError>("fill_elements", "element_bytes", "1, 2, 4 or 8", std::to_string(element_bytes));
  }
}

void zero_bytes(void* dst, Device device, size_t bytes) {
  cudaStream_t stream = current_stream(device.index);
  ALPHA_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream));
}

void begin_capture(int ordinal) {
  cudaStream_t stream = current_stream(ordinal);
  ALPHA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
}

Graph end_capture(int ordinal) {
  cudaStream_t stream = current_stream(ordinal);
  cudaGraph_t graph = nullptr;
  ALPHA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  Graph out;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t counted = cudaGraphGetNodes(graph, nullptr, &out.nodes);
  const cudaError_t instantiated = counted == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : counted;
  cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  ALPHA_CUDA_CHECK(instantiated);
  out.exec = exec;
  return out;
}

void abort_capture(int ordinal) {
  cudaStream_t stream = current_stream(ordinal);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  }
  cudaGetLastError();  // the capture's error is the one already raised
}

void launch_graph(int ordinal, const Graph& graph) {
  cudaStream_t stream = current_stream(ordinal);
  ALPHA_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.exec), stream));
}

void destroy_graph(const Graph& graph) {
  if (graph.exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph.exec));
}

}  // namespace alpha::cuda
