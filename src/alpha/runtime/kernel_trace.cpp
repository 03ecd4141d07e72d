#include "alpha/runtime/kernel_trace.h"

#if ALPHA_WITH_CUDA
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "alpha/core/error.h"
#include "alpha/runtime/cuda_backend.h"

#if __has_include(<cupti.h>)
#include <cupti.h>  // the types and constants; the functions are looked up in the library at run time
#define ALPHA_HAS_CUPTI_HEADER 1
#endif

namespace alpha::cuda {

#if ALPHA_HAS_CUPTI_HEADER
namespace {

constexpr size_t kBufferBytes = size_t(8) << 20;
constexpr auto kTagKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
// RUNTIME and DRIVER: CUPTI writes the external-correlation record (the tag) beside an API call's record, so
// the calls must be recorded for their kernels to carry tags (cuBLASLt launches through the driver API).
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME,
                                         CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

// The CUPTI entry points Alpha uses, from the library dlopen found.
struct Cupti {
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) push_tag = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) pop_tag = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
};

// What the buffer callbacks (on CUPTI's threads) collect between start and stop.
struct Collected {
  std::mutex mutex;
  std::vector<TracedActivity> activities;
  std::vector<uint32_t> correlation_ids;              // of each activity, to find its tag
  std::unordered_map<uint32_t, uint64_t> tag_of_call;  // API call's correlation id -> innermost tag
};
Collected collected;
std::mutex trace_running;  // one trace at a time: CUPTI's activity state is the process's

std::vector<std::string> library_candidates() {
  std::vector<std::string> paths;
  if (const char* file = std::getenv("ALPHA_CUPTI_LIBRARY"); file && *file) paths.emplace_back(file);
  paths.emplace_back("libcupti.so.13");
  paths.emplace_back("libcupti.so");
  std::vector<std::filesystem::path> homes;
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) homes.emplace_back(home);
  homes.emplace_back("/usr/local/cuda");
  for (const auto& home : homes)
    for (const char* dir : {"lib64", "lib", "extras/CUPTI/lib64"})
      for (const char* name : {"libcupti.so.13", "libcupti.so"}) paths.push_back((home / dir / name).string());
  return paths;
}

const Cupti& cupti(const char* op) {
  static std::once_flag once;
  static Cupti api;
  static std::string failure;
  std::call_once(once, [] {
    void* handle = nullptr;
    std::string tried;
    for (const std::string& path : library_candidates()) {
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle) break;
      tried += (tried.empty() ? "" : ", ") + path;
    }
    if (!handle) {
      failure = "CUPTI (libcupti.so.13 of the CUDA toolkit; ALPHA_CUPTI_LIBRARY names the file), tried: " + tried;
      return;
    }
    auto bind = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
      if (!fn && failure.empty()) failure = std::string("a CUPTI with ") + symbol + " (the library lacks it)";
    };
    bind(api.enable, "cuptiActivityEnable");
    bind(api.disable, "cuptiActivityDisable");
    bind(api.register_callbacks, "cuptiActivityRegisterCallbacks");
    bind(api.flush_all, "cuptiActivityFlushAll");
    bind(api.next_record, "cuptiActivityGetNextRecord");
    bind(api.push_tag, "cuptiActivityPushExternalCorrelationId");
    bind(api.pop_tag, "cuptiActivityPopExternalCorrelationId");
    bind(api.result_string, "cuptiGetResultString");
  });
  if (!failure.empty()) raise<BackendError>(op, "kernel trace", failure, "not found");
  return api;
}

void check(const char* op, const char* call, CUptiResult result) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = "unknown error";
  cupti(op).result_string(result, &text);
  raise<BackendError>(op, call, "CUPTI_SUCCESS", std::string(text) + " (" + std::to_string(int(result)) + ")");
}

std::string demangled(const char* name) {
  if (!name) return "(unnamed kernel)";
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> plain(abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
  return status == 0 && plain ? std::string(plain.get()) : std::string(name);
}

std::string memcpy_name(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    default: return "memcpy";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  const Cupti& api = cupti("kernel trace");
  std::lock_guard lock(collected.mutex);
  CUpti_Activity* record = nullptr;
  while (api.next_record(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    TracedActivity a;
    uint32_t correlation = 0;
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        a = {TracedActivity::Kind::kernel, demangled(k->name), k->start, k->end, k->deviceId, 0};
        correlation = k->correlationId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        a = {TracedActivity::Kind::memcpy, memcpy_name(m->copyKind), m->start, m->end, m->deviceId, 0};
        correlation = m->correlationId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        a = {TracedActivity::Kind::memset, "memset", m->start, m->end, m->deviceId, 0};
        correlation = m->correlationId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (e->externalKind == kTagKind) collected.tag_of_call[e->correlationId] = e->externalId;
        continue;
      }
      default: continue;  // the API calls' own records: only their tags matter
    }
    collected.activities.push_back(std::move(a));
    collected.correlation_ids.push_back(correlation);
  }
  std::free(buffer);
}

}  // namespace

void KernelTrace::start(const char* op) {
  const Cupti& api = cupti(op);
  if (running_ || !trace_running.try_lock())
    raise<BackendError>(op, "kernel trace", "no other trace running in this process", "one is running");
  running_ = true;
  op_ = op;
  {
    std::lock_guard lock(collected.mutex);
    collected.activities.clear();
    collected.correlation_ids.clear();
    collected.tag_of_call.clear();
  }
  check(op, "cuptiActivityRegisterCallbacks", api.register_callbacks(buffer_requested, buffer_completed));
  for (CUpti_ActivityKind kind : kKinds) check(op, "cuptiActivityEnable", api.enable(kind));
}

void KernelTrace::push_tag(uint64_t tag) { check(op_, "cuptiActivityPushExternalCorrelationId", cupti(op_).push_tag(kTagKind, tag)); }

void KernelTrace::pop_tag() {
  uint64_t last = 0;
  check(op_, "cuptiActivityPopExternalCorrelationId", cupti(op_).pop_tag(kTagKind, &last));
}

std::vector<TracedActivity> KernelTrace::stop() {
  if (!running_) raise<BackendError>(op_, "kernel trace", "a running trace (start() first)", "none running");
  const Cupti& api = cupti(op_);
  for (int d = 0; d < device_count(); ++d) synchronize(d);
  for (CUpti_ActivityKind kind : kKinds) api.disable(kind);
  check(op_, "cuptiActivityFlushAll", api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  running_ = false;
  trace_running.unlock();
  std::vector<TracedActivity> out;
  {
    std::lock_guard lock(collected.mutex);
    out = std::move(collected.activities);
    for (size_t i = 0; i < out.size(); ++i) {
      auto tag = collected.tag_of_call.find(collected.correlation_ids[i]);
      if (tag != collected.tag_of_call.end()) out[i].tag = tag->second;
    }
    collected.activities.clear();
    collected.correlation_ids.clear();
    collected.tag_of_call.clear();
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TracedActivity& a, const TracedActivity& b) { return a.start_ns < b.start_ns; });
  return out;
}

KernelTrace::~KernelTrace() {
  if (!running_) return;
  const Cupti& api = cupti(op_);
  for (CUpti_ActivityKind kind : kKinds) api.disable(kind);
  api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  trace_running.unlock();
}

#else  // no cupti.h in this CUDA toolkit

void KernelTrace::start(const char* op) {
  raise<BackendError>(op, "kernel trace", "a build whose CUDA toolkit had cupti.h", "built without it");
}
void KernelTrace::push_tag(uint64_t) {}
void KernelTrace::pop_tag() {}
std::vector<TracedActivity> KernelTrace::stop() { return {}; }
KernelTrace::~KernelTrace() = default;

#endif  // ALPHA_HAS_CUPTI_HEADER

}  // namespace alpha::cuda

#endif  // ALPHA_WITH_CUDA
