// alpha_attn._C: Alpha's attention ops (flash attention and its backward, the JVP, the HVP, NSA) on PyTorch
// tensors. Each function wraps its torch tensors as Alpha tensors over the same memory (no copy: shape,
// strides and offset carried over, so SDPA's [B, H, T, D] arrives as a permuted view), calls the op, and
// hands the results back as torch tensors that own Alpha's storage. Alpha's typed errors become Python
// exceptions (alpha_attn.ShapeError is a ValueError, DTypeError a TypeError, ...) with the message intact.
//
// CUDA: Alpha queues its kernels on its own stream per device. `stream` is torch's current stream on the
// tensors' device (its cudaStream_t as an integer, 0 for the legacy default stream); Alpha's stream waits
// for the work queued there before the op, and that stream waits for Alpha's work after it, so the op is
// ordered like any torch op on the current stream. A result's memory goes back to Alpha's caching
// allocator only after the work queued on that stream by the time torch frees it, as torch's own caching
// allocator would (another stream using the result must call record_stream, as for any torch tensor).
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/extension.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "alpha/core/error.h"
#include "alpha/ops/attention.h"
#include "alpha/ops/attention_hvp.h"
#include "alpha/ops/attention_jvp.h"
#include "alpha/ops/nsa.h"
#include "alpha/tensor/tensor.h"
#if ALPHA_WITH_CUDA
#include <cuda_runtime.h>

#include "alpha/runtime/cuda_backend.h"
#endif

namespace {

using alpha::DType;
using TorchTensor = torch::Tensor;

DType alpha_dtype(const TorchTensor& t, const char* arg) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return DType::f32;
    case torch::kFloat64: return DType::f64;
    case torch::kBFloat16: return DType::bf16;
    case torch::kFloat16: return DType::f16;
    case torch::kInt32: return DType::i32;
    case torch::kInt64: return DType::i64;
    case torch::kUInt8: return DType::u8;
    default:
      alpha::raise<alpha::DTypeError>("alpha_attn", arg, "float32, float64, bfloat16 or float16",
                                      std::string(c10::toString(t.scalar_type())));
  }
}

torch::ScalarType torch_dtype(DType t) {
  switch (t) {
    case DType::f32: return torch::kFloat32;
    case DType::f64: return torch::kFloat64;
    case DType::bf16: return torch::kBFloat16;
    case DType::f16: return torch::kFloat16;
    case DType::i32: return torch::kInt32;
    case DType::i64: return torch::kInt64;
    case DType::u8: return torch::kUInt8;
    case DType::u16: break;
  }
  alpha::raise<alpha::DTypeError>("alpha_attn", "result", "a dtype torch has", std::string(alpha::dtype_name(t)));
}

alpha::Device alpha_device(const TorchTensor& t, const char* arg) {
  if (t.device().is_cpu()) return alpha::Device::cpu();
  if (t.device().is_cuda()) return alpha::Device::cuda(t.device().index());
  alpha::raise<alpha::DeviceError>("alpha_attn", arg, "a CPU or CUDA tensor", t.device().str());
}

// The torch tensor as an Alpha tensor over the same memory: the storage runs from the first element to the
// end of torch's storage and holds a reference to the torch tensor (so to its storage) until the last
// Alpha view lets go.
alpha::Tensor wrap(const TorchTensor& t, const char* arg) {
  if (!t.defined()) alpha::raise<alpha::ValueError>("alpha_attn", arg, "a tensor", "None");
  const DType dtype = alpha_dtype(t, arg);
  const alpha::Device device = alpha_device(t, arg);
  const size_t element = alpha::dtype_size(dtype);
  const size_t storage_bytes = t.storage().nbytes();
  const size_t start = size_t(t.storage_offset()) * element;
  const size_t bytes = storage_bytes > start ? storage_bytes - start : 0;
  auto owner = std::make_shared<TorchTensor>(t);
  auto storage = std::make_shared<alpha::Storage>(device, t.numel() ? t.data_ptr() : nullptr, bytes, owner);
  return alpha::Tensor::from_storage(std::move(storage), t.sizes().vec(), t.strides().vec(), 0, dtype);
}

#if ALPHA_WITH_CUDA
void check_cuda(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  cudaGetLastError();
  alpha::raise<alpha::BackendError>("alpha_attn", call, "cudaSuccess", cudaGetErrorString(status));
}

// Makes `waiter` wait for the work queued on `signaller` so far. Nothing to do when they are one stream, or
// when one is the legacy default stream (handle 0, torch's default): Alpha's stream is a blocking stream,
// which that stream already orders against.
void stream_wait(cudaStream_t waiter, cudaStream_t signaller) {
  if (waiter == signaller || waiter == nullptr || signaller == nullptr) return;
  cudaEvent_t event = nullptr;
  check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  cudaError_t status = cudaEventRecord(event, signaller);
  if (status == cudaSuccess) status = cudaStreamWaitEvent(waiter, event, 0);
  cudaEventDestroy(event);
  check_cuda(status, "cudaEventRecord/cudaStreamWaitEvent");
}
#endif

// One call's view of the device: for CUDA tensors, Alpha's stream waits for torch's current stream on
// entry and torch's stream for Alpha's on exit (also when the op raises); the current device is restored.
class DeviceScope {
 public:
  DeviceScope(alpha::Device device, int64_t stream) : device_(device), torch_stream_(stream) {
#if ALPHA_WITH_CUDA
    if (!device_.is_cuda()) return;
    alpha::cuda::require_device("alpha_attn", device_);
    check_cuda(cudaGetDevice(&previous_device_), "cudaGetDevice");
    alpha::cuda::set_device(device_.index);
    alpha_stream_ = static_cast<cudaStream_t>(alpha::cuda::default_stream(device_.index).handle);
    stream_wait(alpha_stream_, torch_stream());
#endif
  }
  ~DeviceScope() {
#if ALPHA_WITH_CUDA
    if (!device_.is_cuda()) return;
    try {
      alpha::cuda::set_device(device_.index);
      stream_wait(torch_stream(), alpha_stream_);
    } catch (...) {
      // A failing CUDA runtime surfaces at the next checked call; a destructor must not throw.
    }
    cudaSetDevice(previous_device_);
#endif
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  // A result as a torch tensor that owns the Alpha storage. On CUDA its memory returns to Alpha's pool
  // only once the work queued on the torch stream when it is freed has run.
  TorchTensor unwrap(const alpha::Tensor& t) const {
    if (!t.defined()) return TorchTensor();
    auto keep = std::make_shared<alpha::Tensor>(t);
    std::function<void(void*)> release = [keep](void*) mutable { keep.reset(); };
#if ALPHA_WITH_CUDA
    if (device_.is_cuda()) {
      const int index = device_.index;
      cudaStream_t torch_handle = torch_stream(), alpha_stream = alpha_stream_;
      release = [keep, index, torch_handle, alpha_stream](void*) mutable {
        int previous = 0;
        if (cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(index) == cudaSuccess) {
          try {
            stream_wait(alpha_stream, torch_handle);
          } catch (...) {
          }
          cudaSetDevice(previous);
        }
        keep.reset();
      };
    }
#endif
    auto options = torch::TensorOptions().dtype(torch_dtype(t.dtype()));
    options = device_.is_cuda() ? options.device(torch::kCUDA, device_.index) : options.device(torch::kCPU);
    return torch::from_blob(t.raw_data(), t.shape(), t.strides(), release, options);
  }

 private:
#if ALPHA_WITH_CUDA
  cudaStream_t torch_stream() const { return reinterpret_cast<cudaStream_t>(torch_stream_); }
  cudaStream_t alpha_stream_ = nullptr;
  int previous_device_ = 0;
#endif
  alpha::Device device_;
  [[maybe_unused]] int64_t torch_stream_;
};

// Releases the GIL around an Alpha op when this thread holds it (a call from Python), and does nothing on
// autograd's own threads, which run AttentionFunction::backward without it.
class GilReleased {
 public:
  GilReleased() {
    if (PyGILState_Check()) released_.emplace();
  }

 private:
  std::optional<py::gil_scoped_release> released_;
};

// The attention options as Python passes them, one tuple: (scale, causal, softcap, dropout_p, dropout_seed,
// dropout_offset, window_left, window_right, deterministic, constant_time).
using ConfigArgs = std::tuple<double, bool, double, double, int64_t, int64_t, int64_t, int64_t, bool, bool>;

alpha::ops::AttentionConfig attention_config(const ConfigArgs& args) {
  alpha::ops::AttentionConfig config;
  std::tie(config.scale, config.causal, config.softcap, config.dropout_p, std::ignore, std::ignore, config.window_left,
           config.window_right, config.deterministic, config.constant_time) = args;
  config.dropout_seed = uint64_t(std::get<4>(args));
  config.dropout_offset = uint64_t(std::get<5>(args));
  return config;
}

// Flash attention on a GPU, the reference (materialising) attention on the CPU: (out, row_max, row_sum).
std::tuple<TorchTensor, TorchTensor, TorchTensor> attention_forward(const TorchTensor& q, const TorchTensor& k,
                                                                    const TorchTensor& v, const ConfigArgs& options,
                                                                    int64_t stream) {
  alpha::Tensor aq = wrap(q, "q"), ak = wrap(k, "k"), av = wrap(v, "v");
  DeviceScope scope(aq.device(), stream);
  const auto config = attention_config(options);
  alpha::ops::AttentionOutput o;
  {
    GilReleased no_gil;
    o = aq.device().is_cuda() ? alpha::ops::flash_attention(aq, ak, av, config)
                              : alpha::ops::attention_materialized(aq, ak, av, config);
  }
  return {scope.unwrap(o.out), scope.unwrap(o.row_max), scope.unwrap(o.row_sum)};
}

std::tuple<TorchTensor, TorchTensor, TorchTensor> attention_backward(const TorchTensor& dout, const TorchTensor& q,
                                                                     const TorchTensor& k, const TorchTensor& v,
                                                                     const TorchTensor& out, const TorchTensor& row_max,
                                                                     const TorchTensor& row_sum,
                                                                     const ConfigArgs& options, int64_t stream) {
  alpha::Tensor aq = wrap(q, "q"), ak = wrap(k, "k"), av = wrap(v, "v");
  alpha::Tensor adout = wrap(dout, "dout"), aout = wrap(out, "out");
  alpha::Tensor am = wrap(row_max, "row_max"), al = wrap(row_sum, "row_sum");
  DeviceScope scope(aq.device(), stream);
  const auto config = attention_config(options);
  alpha::ops::AttentionGrads g;
  {
    GilReleased no_gil;
    g = aq.device().is_cuda() ? alpha::ops::flash_attention_backward(adout, aq, ak, av, aout, am, al, config)
                              : alpha::ops::attention_materialized_backward(adout, aq, ak, av, aout, am, al, config);
  }
  return {scope.unwrap(g.dq), scope.unwrap(g.dk), scope.unwrap(g.dv)};
}

// attention_forward and attention_backward as one C++ autograd function: what alpha_attn.flash_attention
// calls when no torch.func transform and no forward-mode AD is active, because a Python autograd.Function
// costs the host several times the `seed` shape's kernel time per call (the Python Function in _ops.py, with
// its jvp and vmap rules, serves the transforms). Like Python's @once_differentiable, a backward recorded
// for differentiation (create_graph) returns gradients that raise when differentiated again.
class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static TorchTensor forward(torch::autograd::AutogradContext* ctx, const TorchTensor& q, const TorchTensor& k,
                             const TorchTensor& v, const ConfigArgs& options, int64_t stream) {
    auto [out, row_max, row_sum] = attention_forward(q, k, v, options, stream);
    ctx->save_for_backward({q, k, v, out, row_max, row_sum});
    ctx->saved_data["options"] = options;
    ctx->saved_data["stream"] = stream;  // autograd runs the backward on the forward's stream
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const auto options = ctx->saved_data["options"].to<ConfigArgs>();
    auto [dq, dk, dv] = attention_backward(grads[0], saved[0], saved[1], saved[2], saved[3], saved[4], saved[5],
                                           options, ctx->saved_data["stream"].toInt());
    torch::autograd::variable_list result = {dq, dk, dv};
    if (torch::autograd::GradMode::is_enabled()) {
      for (TorchTensor& g : result) g = g.detach().requires_grad_(true);
      auto refuse = std::make_shared<torch::autograd::DelayedError>(
          "alpha_attn.flash_attention: its backward is not differentiable (attention_hvp gives second "
          "derivatives)",
          int(result.size()));
      result = (*refuse)(std::move(result));
    }
    return {result[0], result[1], result[2], TorchTensor(), TorchTensor()};
  }
};

TorchTensor attention(const TorchTensor& q, const TorchTensor& k, const TorchTensor& v, const ConfigArgs& options,
                      int64_t stream) {
  return AttentionFunction::apply(q, k, v, options, stream);
}

// The tangent of out from the forward's statistics (ops::attention_jvp).
TorchTensor attention_jvp(const TorchTensor& q, const TorchTensor& k, const TorchTensor& v, const TorchTensor& tq,
                          const TorchTensor& tk, const TorchTensor& tv, const TorchTensor& out,
                          const TorchTensor& row_max, const TorchTensor& row_sum, const ConfigArgs& options,
                          int64_t stream) {
  alpha::Tensor aq = wrap(q, "q"), ak = wrap(k, "k"), av = wrap(v, "v");
  alpha::Tensor atq = wrap(tq, "tq"), atk = wrap(tk, "tk"), atv = wrap(tv, "tv");
  alpha::Tensor aout = wrap(out, "out"), am = wrap(row_max, "row_max"), al = wrap(row_sum, "row_sum");
  DeviceScope scope(aq.device(), stream);
  const auto config = attention_config(options);
  alpha::Tensor tangent;
  {
    GilReleased no_gil;
    tangent = alpha::ops::attention_jvp(aq, ak, av, atq, atk, atv, aout, am, al, config);
  }
  return scope.unwrap(tangent);
}

// One streaming pass: (out, tangent of out, row_max, row_sum) (ops::attention_jvp_fused).
std::tuple<TorchTensor, TorchTensor, TorchTensor, TorchTensor> attention_jvp_fused(
    const TorchTensor& q, const TorchTensor& k, const TorchTensor& v, const TorchTensor& tq, const TorchTensor& tk,
    const TorchTensor& tv, const ConfigArgs& options, int64_t stream) {
  alpha::Tensor aq = wrap(q, "q"), ak = wrap(k, "k"), av = wrap(v, "v");
  alpha::Tensor atq = wrap(tq, "tq"), atk = wrap(tk, "tk"), atv = wrap(tv, "tv");
  DeviceScope scope(aq.device(), stream);
  const auto config = attention_config(options);
  alpha::ops::AttentionJvpOutput o;
  {
    GilReleased no_gil;
    o = alpha::ops::attention_jvp_fused(aq, ak, av, atq, atk, atv, config);
  }
  return {scope.unwrap(o.out), scope.unwrap(o.tangent_out), scope.unwrap(o.row_max), scope.unwrap(o.row_sum)};
}

// H·(vq, vk, vv) of ⟨attention(q, k, v), grad_out⟩: central differences (eps > 0), or exact (eps = 0: the
// dual-number oracle, f64 CPU only).
std::tuple<TorchTensor, TorchTensor, TorchTensor> attention_hvp(const TorchTensor& q, const TorchTensor& k,
                                                                const TorchTensor& v, const TorchTensor& grad_out,
                                                                const TorchTensor& vq, const TorchTensor& vk,
                                                                const TorchTensor& vv, double eps,
                                                                const ConfigArgs& options, int64_t stream) {
  alpha::Tensor aq = wrap(q, "q"), ak = wrap(k, "k"), av = wrap(v, "v"), ag = wrap(grad_out, "grad_out");
  alpha::Tensor avq = wrap(vq, "vq"), avk = wrap(vk, "vk"), avv = wrap(vv, "vv");
  DeviceScope scope(aq.device(), stream);
  const auto config = attention_config(options);
  alpha::ops::AttentionHvp h;
  {
    GilReleased no_gil;
    h = eps == 0 ? alpha::ops::attention_hvp_exact(aq, ak, av, ag, avq, avk, avv, config)
                 : alpha::ops::attention_hvp(aq, ak, av, ag, avq, avk, avv, config, eps);
  }
  return {scope.unwrap(h.hq), scope.unwrap(h.hk), scope.unwrap(h.hv)};
}

alpha::ops::NsaConfig nsa_config(double scale, int64_t block_len, int64_t block_stride, int64_t select_len,
                                 int64_t select_count, int64_t window) {
  return {.scale = scale,
          .block_len = block_len,
          .block_stride = block_stride,
          .select_len = select_len,
          .select_count = select_count,
          .window = window};
}

alpha::ops::NsaInputs nsa_inputs(const std::vector<TorchTensor>& in) {
  if (in.size() != 8)
    alpha::raise<alpha::ValueError>("alpha_attn.nsa", "inputs",
                                    "8 tensors (q, k, v, gates, k_pos, k_weight, v_pos, v_weight)",
                                    std::to_string(in.size()));
  return {wrap(in[0], "q"),     wrap(in[1], "k"),        wrap(in[2], "v"),     wrap(in[3], "gates"),
          wrap(in[4], "k_pos"), wrap(in[5], "k_weight"), wrap(in[6], "v_pos"), wrap(in[7], "v_weight")};
}

// (out, branch_out, compressed_k, compressed_v, row_max, row_sum, selected), as ops::nsa returns them.
std::vector<TorchTensor> nsa_forward(const std::vector<TorchTensor>& inputs, double scale, int64_t block_len,
                                     int64_t block_stride, int64_t select_len, int64_t select_count, int64_t window,
                                     int64_t stream) {
  const alpha::ops::NsaInputs in = nsa_inputs(inputs);
  DeviceScope scope(in.q.device(), stream);
  const auto config = nsa_config(scale, block_len, block_stride, select_len, select_count, window);
  alpha::ops::NsaOutput o;
  {
    GilReleased no_gil;
    o = alpha::ops::nsa(in, config);
  }
  std::vector<TorchTensor> result;
  for (const alpha::Tensor* t :
       {&o.out, &o.branch_out, &o.compressed_k, &o.compressed_v, &o.row_max, &o.row_sum, &o.selected})
    result.push_back(scope.unwrap(*t));
  return result;
}

// The gradients of the 8 inputs, given dout and the 7 tensors nsa_forward returned.
std::vector<TorchTensor> nsa_backward(const TorchTensor& dout, const std::vector<TorchTensor>& inputs,
                                      const std::vector<TorchTensor>& forward, double scale, int64_t block_len,
                                      int64_t block_stride, int64_t select_len, int64_t select_count, int64_t window,
                                      int64_t stream) {
  const alpha::ops::NsaInputs in = nsa_inputs(inputs);
  if (forward.size() != 7)
    alpha::raise<alpha::ValueError>("alpha_attn.nsa_backward", "forward", "the 7 tensors nsa returned",
                                    std::to_string(forward.size()));
  alpha::ops::NsaOutput f{wrap(forward[0], "out"),          wrap(forward[1], "branch_out"),
                          wrap(forward[2], "compressed_k"), wrap(forward[3], "compressed_v"),
                          wrap(forward[4], "row_max"),      wrap(forward[5], "row_sum"),
                          wrap(forward[6], "selected")};
  alpha::Tensor adout = wrap(dout, "dout");
  DeviceScope scope(in.q.device(), stream);
  const auto config = nsa_config(scale, block_len, block_stride, select_len, select_count, window);
  alpha::ops::NsaGrads g;
  {
    GilReleased no_gil;
    g = alpha::ops::nsa_backward(adout, in, f, config);
  }
  std::vector<TorchTensor> result;
  for (const alpha::Tensor& t : g.list()) result.push_back(scope.unwrap(t));
  return result;
}

// For the tests: whether this build has Alpha's CUDA backend.
bool built_with_cuda() {
#if ALPHA_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Alpha's attention kernels on PyTorch tensors (the raw entry points; use alpha_attn's functions)";
  // Later registrations are tried first, so the subclasses come after the base class.
  auto error = py::register_exception<alpha::Error>(m, "AlphaError", PyExc_RuntimeError);
  py::register_exception<alpha::BackendError>(m, "BackendError", error.ptr());
  py::register_exception<alpha::NumericError>(m, "NumericError", error.ptr());
  py::register_exception<alpha::IOError>(m, "IOError", error.ptr());
  py::register_exception<alpha::ShapeError>(m, "ShapeError", PyExc_ValueError);
  py::register_exception<alpha::LayoutError>(m, "LayoutError", PyExc_ValueError);
  py::register_exception<alpha::ValueError>(m, "ValueError", PyExc_ValueError);
  py::register_exception<alpha::ConfigError>(m, "ConfigError", PyExc_ValueError);
  py::register_exception<alpha::DeviceError>(m, "DeviceError", PyExc_ValueError);
  py::register_exception<alpha::DTypeError>(m, "DTypeError", PyExc_TypeError);

  m.def("attention", &attention, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("options"), py::arg("stream"));
  m.def("attention_forward", &attention_forward, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("options"),
        py::arg("stream"));
  m.def("attention_backward", &attention_backward, py::arg("dout"), py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("out"), py::arg("row_max"), py::arg("row_sum"), py::arg("options"), py::arg("stream"));
  m.def("attention_jvp", &attention_jvp, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("tq"), py::arg("tk"),
        py::arg("tv"), py::arg("out"), py::arg("row_max"), py::arg("row_sum"), py::arg("options"), py::arg("stream"));
  m.def("attention_jvp_fused", &attention_jvp_fused, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("tq"),
        py::arg("tk"), py::arg("tv"), py::arg("options"), py::arg("stream"));
  m.def("attention_hvp", &attention_hvp, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("grad_out"), py::arg("vq"),
        py::arg("vk"), py::arg("vv"), py::arg("eps"), py::arg("options"), py::arg("stream"));
  m.def("nsa_forward", &nsa_forward, py::arg("inputs"), py::arg("scale"), py::arg("block_len"), py::arg("block_stride"),
        py::arg("select_len"), py::arg("select_count"), py::arg("window"), py::arg("stream"));
  m.def("nsa_backward", &nsa_backward, py::arg("dout"), py::arg("inputs"), py::arg("forward"), py::arg("scale"),
        py::arg("block_len"), py::arg("block_stride"), py::arg("select_len"), py::arg("select_count"),
        py::arg("window"), py::arg("stream"));
  m.def("built_with_cuda", &built_with_cuda);
}
