// CUDA matrix-product kernels behind the CPU backend's argument structs (kernels/matmul.h): GEMM on
// cuBLASLt with its epilogues, the bias-row broadcast, and a deterministic column sum. Element types: f32,
// and bf16/f16 storage; products accumulate in f32 (CUBLAS_COMPUTE_32F, or CUBLAS_COMPUTE_32F_FAST_TF32 for
// f32 only when the call allows TF32).
//
// A wider output (GemmArgs<T, float>: bf16/f16 operands; plain products and a's bias gradient only) is
// cuBLASLt's product with 16-bit A and B and f32 C and D, on the same paths; its bias gradient (BGRADB, or
// column_sum of a into f32) is f32 too, since cuBLASLt's epilogue vectors take the output's type.
//
// Row-major as column-major: our row-major C (m×n, rows ldc apart) is, read column-major, Cᵀ (n×m, ld ldc),
// and Cᵀ = op(B)ᵀ·op(A)ᵀ. So cuBLASLt computes D' = op'(A')·op'(B') with A' = b, B' = a, m' = n, n' = m,
// k' = k and the transpose flags swapped over (transa' = trans_b, transb' = trans_a): b stored k×n row-major
// is column-major n×k = op(B)ᵀ as it stands (N), b stored n×k needs T; likewise a. Nothing moves in memory.
// In that view our per-column bias is cuBLASLt's per-row bias (length m' = n), our pre-activation (m, n,
// rows ld_aux apart) its aux matrix (n×m, ld ld_aux), our c_columns bias gradient its DGELU_BGRAD (one sum
// per row of D'), and our a_columns its BGRADB (sums of op'(B') = op(A)ᵀ over k', which needs op'(B') = T,
// i.e. trans_a).
//
// cuBLASLt's GELU epilogues are the tanh approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), the form
// of kernels/activation.h (PyTorch falls back to gelu(approximate="tanh") where it cannot use them), so one
// semantics serves both backends; the CPU kernel applies the same formula in loops after its BLAS call.
//
// An addend (GemmArgs::addend) is cuBLASLt's C beside D = args.c, of D's layout; the unfused epilogue reads it in
// place of c.
//
// Epilogue paths. bf16/f16 DGELU: a plain product into c, then our element-wise pass and column_sum
// (gemm_dgelu says why). Fused: one cublasLtMatmul with the epilogue (BIAS, GELU[_AUX][_BIAS], f32 DGELU[_BGRAD],
// BGRADB), when cuBLASLt documents the configuration (the aux matrix's ld a multiple of 8; we also ask the
// bias, bias-gradient and aux pointers to be 16-byte aligned), its heuristic
// has an algorithm for it, and, for GELU and DGELU in f32 without TF32, never: cuBLASLt's f32 GELU uses an
// approximate tanh (about 2e-4 relative, seen on an RTX 3060), fine for bf16, f16 and TF32, not for f32. Unfused
// otherwise (and for k = 0): a plain cuBLASLt product alpha·op(a)·op(b) into f32 scratch, then one element-wise kernel
// adding beta·c and the bias and applying GELU or DGELU in f32, so each output is still rounded to T once, then the
// bias gradients by column_sum.
//
// cuBLASLt state: one handle per device, created on first use; one 32 MiB workspace per (device, stream)
// (Alpha queues a device's work on its default stream, so that is one per device; a second stream gets its
// own, since two GEMMs running at once must not share one); and the heuristic's algorithm per problem
// (shape, layouts, types, epilogue, pointer alignments), asked once. All behind one mutex, never released
// (the process ends with them). Descriptors are built per call on the stack (no allocation).
//
// Determinism: cuBLAS gives the same bits on every run on GPUs of one architecture and SM count, for one
// algorithm and workspace; the algorithm is fixed per problem by the cache. column_sum is fixed-order.
#include <cublasLt.h>

#include <algorithm>
#include <atomic>
#include <compare>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "alpha/core/error.h"
#include "alpha/kernels/cuda/common.cuh"
#include "alpha/kernels/matmul.h"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

namespace {

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  raise<BackendError>(call, "status", "CUBLAS_STATUS_SUCCESS",
                      std::string(cublasLtGetStatusName(status)) + " at " + file + ":" + std::to_string(line));
}
#define ALPHA_CUBLASLT_CHECK(call) check_cublas((call), #call, __FILE__, __LINE__)

std::atomic<bool> fused_epilogues{true};

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

template <class T> constexpr cudaDataType_t kCudaType = CUDA_R_32F;
template <> constexpr cudaDataType_t kCudaType<bf16> = CUDA_R_16BF;
template <> constexpr cudaDataType_t kCudaType<f16> = CUDA_R_16F;

// Everything cuBLASLt's heuristic sees, hence the key of its cached answer.
struct PlanKey {
  int device;
  int a_type, d_type, compute;
  uint32_t epilogue;
  bool trans_a, trans_b;
  int64_t batch, m, n, k, lda, ldb, ldd, stride_a, stride_b, stride_d, ld_aux;
  uint32_t align_a, align_b, align_c, align_d, align_bias, align_aux;
  auto operator<=>(const PlanKey&) const = default;
};

struct Plan {
  bool supported;
  cublasLtMatmulAlgo_t algo;
};

// Handles and workspaces live as long as the process. At exit the workspaces go back to the device (a
// leak to compute-sanitizer's leak check otherwise); the handles are left to the process, as cuBLASLt's own
// state may already be gone.
struct LtState {
  std::mutex mutex;
  std::map<int, cublasLtHandle_t> handles;
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::map<PlanKey, Plan> plans;

  ~LtState() {
    for (auto& [key, workspace] : workspaces) (void)cudaFree(workspace);  // fails harmlessly once CUDA is gone
  }
};

LtState& lt_state() {
  static LtState state;
  return state;
}

cublasLtHandle_t lt_handle(int device) {
  LtState& s = lt_state();
  std::lock_guard lock(s.mutex);
  cublasLtHandle_t& handle = s.handles[device];
  if (!handle) ALPHA_CUBLASLT_CHECK(cublasLtCreate(&handle));
  return handle;
}

void* lt_workspace(int device, cudaStream_t stream) {
  LtState& s = lt_state();
  std::lock_guard lock(s.mutex);
  void*& workspace = s.workspaces[{device, stream}];
  if (!workspace) ALPHA_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  return workspace;
}

// The alignment cuBLASLt may assume for a matrix: its address's largest power of two (at most 256, the
// heuristic's default), and that of the batch stride in bytes when there are several matrices.
uint32_t alignment(const void* p, int64_t batch = 1, int64_t stride_bytes = 0) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p) | 256u;
  if (batch > 1) bits |= uint64_t(stride_bytes);
  return p ? uint32_t(bits & (~bits + 1)) : 256u;
}

template <class Attr, class V>
void set_desc(cublasLtMatmulDesc_t desc, Attr attr, const V& value) {
  ALPHA_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

// A column-major layout rows×cols with leading dimension ld (raised to rows when there is a single column,
// where it is never stepped), `batch` of them `stride` elements apart.
void init_layout(cublasLtMatrixLayoutOpaque_t& layout, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                 int64_t batch, int64_t stride) {
  if (cols <= 1) ld = std::max(ld, rows);
  ALPHA_CUBLASLT_CHECK(cublasLtMatrixLayoutInit(&layout, type, uint64_t(rows), uint64_t(cols), ld));
  if (batch > 1) {
    int32_t count = int32_t(batch);
    ALPHA_CUBLASLT_CHECK(
        cublasLtMatrixLayoutSetAttribute(&layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    ALPHA_CUBLASLT_CHECK(
        cublasLtMatrixLayoutSetAttribute(&layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
}

template <class T, class Out>
cublasLtEpilogue_t epilogue_of(const GemmArgs<T, Out>& args) {
  const bool bias = args.bias != nullptr, aux = args.aux != nullptr;
  switch (args.epilogue) {
    case GemmEpilogue::gelu:
      if (aux) return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case GemmEpilogue::dgelu:
      return args.bias_grad_of == GemmBiasGrad::c_columns ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    case GemmEpilogue::none: break;
  }
  if (args.bias_grad_of == GemmBiasGrad::a_columns) return CUBLASLT_EPILOGUE_BGRADB;
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// D = epilogue(alpha·op(a)·op(b) + beta·C) for the row-major problem in `args`, through the column-major
// transpose (see the top of the file). D is `d` (rows ldd apart, element type d_type): args.c for the fused
// path, f32 scratch for the unfused one; C is args.addend when set (of D's layout), else D itself. Returns false,
// having queued nothing, when cuBLASLt has no algorithm for an epilogue; raises BackendError when it has none for a
// plain product.
template <class T, class Out>
bool lt_matmul(const GemmArgs<T, Out>& args, cublasLtEpilogue_t epilogue, void* d, cudaDataType_t d_type, int64_t ldd,
               float beta, cudaStream_t stream) {
  int device = 0;
  ALPHA_CUDA_CHECK(cudaGetDevice(&device));
  const cublasComputeType_t compute =
      std::is_same_v<T, float> && args.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const int64_t d_bytes = d_type == CUDA_R_32F ? 4 : 2;

  cublasLtMatmulDescOpaque_t desc;
  ALPHA_CUBLASLT_CHECK(cublasLtMatmulDescInit(&desc, compute, CUDA_R_32F));
  const cublasOperation_t trans_a_prime = args.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t trans_b_prime = args.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(&desc, CUBLASLT_MATMUL_DESC_TRANSA, trans_a_prime);
  set_desc(&desc, CUBLASLT_MATMUL_DESC_TRANSB, trans_b_prime);
  set_desc(&desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  const void* bias = nullptr;  // the bias, or the bias gradient, in cuBLASLt's one pointer
  if (epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
      epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
    bias = args.bias;
  else if (epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD || epilogue == CUBLASLT_EPILOGUE_BGRADB)
    bias = args.bias_grad;
  if (bias) set_desc(&desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const void* aux = nullptr;
  if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
      epilogue == CUBLASLT_EPILOGUE_DGELU || epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
    aux = args.aux;
    set_desc(&desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    set_desc(&desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, args.ld_aux);
  }

  // A' = b: n×k (N) or k×n (T) column-major; B' = a: k×m (N) or m×k (T); C' = D' = c: n×m.
  cublasLtMatrixLayoutOpaque_t layout_a, layout_b, layout_d;
  init_layout(layout_a, kCudaType<T>, args.trans_b ? args.k : args.n, args.trans_b ? args.n : args.k, args.ldb,
              args.batch, args.stride_b);
  init_layout(layout_b, kCudaType<T>, args.trans_a ? args.m : args.k, args.trans_a ? args.k : args.m, args.lda,
              args.batch, args.stride_a);
  init_layout(layout_d, d_type, args.n, args.m, ldd, args.batch, args.stride_c);
  const void* c = args.addend ? static_cast<const void*>(args.addend) : d;

  const PlanKey key{device,
                    int(kCudaType<T>),
                    int(d_type),
                    int(compute),
                    uint32_t(epilogue),
                    args.trans_a,
                    args.trans_b,
                    args.batch,
                    args.m,
                    args.n,
                    args.k,
                    args.lda,
                    args.ldb,
                    ldd,
                    args.stride_a,
                    args.stride_b,
                    args.stride_c,
                    aux ? args.ld_aux : 0,
                    alignment(args.a, args.batch, args.stride_a * int64_t(sizeof(T))),
                    alignment(args.b, args.batch, args.stride_b * int64_t(sizeof(T))),
                    alignment(c, args.batch, args.stride_c * d_bytes),
                    alignment(d, args.batch, args.stride_c * d_bytes),
                    alignment(bias),
                    alignment(aux)};
  cublasLtHandle_t handle = lt_handle(device);
  Plan plan{};
  bool known = false;
  {
    LtState& s = lt_state();
    std::lock_guard lock(s.mutex);
    auto it = s.plans.find(key);
    if (it != s.plans.end()) plan = it->second, known = true;
  }
  if (!known) {
    cublasLtMatmulPreferenceOpaque_t preference;
    ALPHA_CUBLASLT_CHECK(cublasLtMatmulPreferenceInit(&preference));
    const uint64_t workspace_bytes = kWorkspaceBytes;
    ALPHA_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(&preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &workspace_bytes, sizeof(workspace_bytes)));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b},  // A' is b
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a},  // B' is a
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d}};
    for (const auto& [attr, bytes] : alignments)
      ALPHA_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(&preference, attr, &bytes, sizeof(bytes)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, &desc, &layout_a, &layout_b, &layout_d, &layout_d,
                                                           &preference, 1, &result, &found);
    if (status != CUBLAS_STATUS_NOT_SUPPORTED) check_cublas(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    plan.supported = status == CUBLAS_STATUS_SUCCESS && found > 0;
    if (plan.supported) plan.algo = result.algo;
    LtState& s = lt_state();
    std::lock_guard lock(s.mutex);
    s.plans.emplace(key, plan);
  }
  if (!plan.supported) {
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) return false;
    raise<BackendError>("gemm", "problem", "one cuBLASLt has an algorithm for",
                        "none for m " + std::to_string(args.m) + ", n " + std::to_string(args.n) + ", k " +
                            std::to_string(args.k) + ", batch " + std::to_string(args.batch) + ", lda " +
                            std::to_string(args.lda) + ", ldb " + std::to_string(args.ldb) + ", ldc " +
                            std::to_string(ldd));
  }
  const float alpha = float(args.alpha);
  ALPHA_CUBLASLT_CHECK(cublasLtMatmul(handle, &desc, &alpha, args.b, &layout_a, args.a, &layout_b, &beta, c, &layout_d,
                                      d, &layout_d, &plan.algo, lt_workspace(device, stream), kWorkspaceBytes, stream));
  return true;
}

// GELU, tanh form, and its derivative, in f32: the formulas of the CPU kernels (kernels/cpu/activation.cpp).
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluCubic = 0.044715f;

__device__ float gelu(float x) {
  const float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5f * x * (1.0f + t);
}

// d/dx [½x(1 + tanh u)] with u = √(2/π)(x + 0.044715x³): ½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²),
// t = tanh_of(u).
template <class Tanh>
__device__ float gelu_grad(float x, Tanh tanh_of) {
  const float t = tanh_of(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}
__device__ float gelu_grad(float x) {
  return gelu_grad(x, [](float u) { return tanhf(u); });
}

template <class T>
struct EpilogueArgs {
  const float* product;  // (m, n) packed: alpha·op(a)·op(b); null for a zero product (k = 0)
  Bits<T>* c;            // (m, n), rows ldc apart: read when beta != 0 (unless there is an addend), written
  const Bits<T>* addend;  // (m, n), rows ldc apart: read in place of c when set
  int64_t ldc;
  float beta;
  const Bits<T>* bias;   // (n) or null
  GemmEpilogue epilogue;
  Bits<T>* aux;          // (m, n), rows ld_aux apart: written by gelu (when set), read by dgelu
  int64_t ld_aux;
  int64_t m, n;
};

// The unfused epilogue: v = product + beta·c + bias in f32, then gelu (keeping v in aux) or dgelu, and one
// rounding to T per output.
template <class T>
__global__ void epilogue_kernel(EpilogueArgs<T> e) {
  const int64_t total = e.m * e.n;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx / e.n, j = idx - i * e.n;
    Bits<T>& out = e.c[i * e.ldc + j];
    float v = e.product ? e.product[idx] : 0.0f;
    if (e.beta != 0.0f) v = __fadd_rn(v, __fmul_rn(e.beta, Elem<T>::load(e.addend ? e.addend[i * e.ldc + j] : out)));
    if (e.bias) v = __fadd_rn(v, Elem<T>::load(e.bias[j]));
    if (e.epilogue == GemmEpilogue::gelu) {
      if (e.aux) e.aux[i * e.ld_aux + j] = Elem<T>::store(v);
      v = gelu(v);
    } else if (e.epilogue == GemmEpilogue::dgelu) {
      v = __fmul_rn(v, gelu_grad(Elem<T>::load(e.aux[i * e.ld_aux + j])));
    }
    out = Elem<T>::store(v);
  }
}

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride beyond this

unsigned blocks_for(int64_t work) { return unsigned(std::min((work + kThreads - 1) / kThreads, kMaxBlocks)); }

// c = c ⊙ gelu'(aux) in place (f32 arithmetic, tanh from common.cuh's fast_tanh, absolute error ~2⁻²², far
// below a bf16/f16 result's rounding; one rounding to T): the bf16/f16 DGELU after a plain product into c.
// Tiles of rows_per_tile rows over y, runs of V columns (V = 1, or kLanes<T>: one 16-byte vector) over x: no
// index division per element. With kColumnSums each thread also adds up its columns of the stored (rounded)
// results over the tile's rows, in row order, into column_partials[tile][column]: the bias gradient's column
// sum without a second read of c (gpt2-124m's 16384 × 3072 c: 38 µs a call, H200).
template <class T, int V, bool kColumnSums>
__global__ void dgelu_in_place_kernel(Bits<T>* c, int64_t ldc, const Bits<T>* aux, int64_t ld_aux, int64_t m, int64_t n,
                                      int64_t rows_per_tile, float* column_partials) {
  for (int64_t tile = blockIdx.y; tile * rows_per_tile < m; tile += gridDim.y) {
    const int64_t first = tile * rows_per_tile, end = first + rows_per_tile < m ? first + rows_per_tile : m;
    for (int64_t j = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V; j < n;
         j += int64_t(gridDim.x) * blockDim.x * V) {
      float sums[V] = {};
#pragma unroll 4
      for (int64_t i = first; i < end; ++i) {
        Bits<T>* out = c + i * ldc + j;
        const Bits<T>* pre = aux + i * ld_aux + j;
        float product[V], x[V];
        if constexpr (V == 1) {
          product[0] = Elem<T>::load(*out);
          x[0] = Elem<T>::load(*pre);
        } else {
          unpack<T>(*reinterpret_cast<const uint4*>(out), product);
          unpack<T>(*reinterpret_cast<const uint4*>(pre), x);
        }
#pragma unroll
        for (int e = 0; e < V; ++e) {
          product[e] = __fmul_rn(product[e], gelu_grad(x[e], [](float u) { return fast_tanh(u); }));
          if constexpr (kColumnSums) sums[e] = __fadd_rn(sums[e], Elem<T>::load(Elem<T>::store(product[e])));
        }
        if constexpr (V == 1)
          *out = Elem<T>::store(product[0]);
        else
          *reinterpret_cast<uint4*>(out) = pack<T>(product);
      }
      if constexpr (kColumnSums)
#pragma unroll
        for (int e = 0; e < V; ++e) column_partials[tile * n + j + e] = sums[e];
    }
  }
}

// A GEMM's bias gradient (if any) as a column sum of a or of the stored c, for the paths that do not fuse it.
template <class T, class Out>
void bias_grads_by_column_sums(const GemmArgs<T, Out>& args, cudaStream_t stream) {
  if (args.bias_grad_of == GemmBiasGrad::a_columns)
    column_sum(ColumnSumArgs<T, Out>{args.a, args.bias_grad, args.k, args.m, args.lda}, Stream{stream});
  if (args.bias_grad_of == GemmBiasGrad::c_columns)
    column_sum(ColumnSumArgs<Out>{args.c, args.bias_grad, args.m, args.n, args.ldc}, Stream{stream});
}

// The problem's alpha·op(a)·op(b) alone: no bias, epilogue or bias gradient (batch is 1 whenever there is an
// epilogue), for the paths that apply those themselves.
template <class T, class Out>
GemmArgs<T, Out> plain_product(const GemmArgs<T, Out>& args) {
  GemmArgs<T, Out> plain = args;
  plain.bias = nullptr;
  plain.epilogue = GemmEpilogue::none;
  plain.aux = nullptr;
  plain.bias_grad_of = GemmBiasGrad::none;
  plain.bias_grad = nullptr;
  plain.addend = nullptr;
  return plain;
}

// The unfused path: plain product into f32 scratch, the epilogue kernel (over the output's type), the bias
// gradients.
template <class T, class Out>
void gemm_unfused(const GemmArgs<T, Out>& args, cudaStream_t stream) {
  float* product = nullptr;
  if (args.k > 0) {
    ALPHA_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&product), size_t(args.m * args.n) * sizeof(float),
                                     stream));
    GemmArgs<T, Out> plain = plain_product(args);
    plain.stride_c = args.m * args.n;
    lt_matmul(plain, CUBLASLT_EPILOGUE_DEFAULT, product, CUDA_R_32F, args.n, 0.0f, stream);
  }
  if (args.batch == 1) {
    EpilogueArgs<Out> e{product,         bits(args.c),  bits(args.addend), args.ldc,    float(args.beta),
                        bits(args.bias), args.epilogue, bits(args.aux),    args.ld_aux, args.m,
                        args.n};
    constexpr auto kernel = epilogue_kernel<Out>;
    ALPHA_CUDA_LAUNCH(kernel, blocks_for(args.m * args.n), kThreads, stream, e);
  } else {  // k = 0 with a batch: c = beta·c for each matrix (there is no epilogue with a batch)
    for (int64_t p = 0; p < args.batch; ++p) {
      EpilogueArgs<Out> e{nullptr,
                          bits(args.c + p * args.stride_c),
                          nullptr,
                          args.ldc,
                          float(args.beta),
                          nullptr,
                          GemmEpilogue::none,
                          nullptr,
                          0,
                          args.m,
                          args.n};
      constexpr auto kernel = epilogue_kernel<Out>;
      ALPHA_CUDA_LAUNCH(kernel, blocks_for(args.m * args.n), kThreads, stream, e);
    }
  }
  if (product) ALPHA_CUDA_CHECK(cudaFreeAsync(product, stream));
  bias_grads_by_column_sums(args, stream);
}

// The bf16/f16 DGELU as a plain cuBLASLt product into c, then dgelu_in_place_kernel, which for a large c also
// sums the bias gradient's columns by tiles of rows (the tiles' partials then added by column_sum), and
// for a small one leaves them to column_sum. cuBLASLt's own
// DGELU[_BGRAD] epilogue ran as a separate element-wise kernel of its own that cost several times this pass
// (H200, the seed config's MLP, 2026-11-26: 92 µs a call, 10% of a training step's GPU time). The product is
// rounded to T before gelu' multiplies it, as under PyTorch's autocast, where the unfused path keeps it in f32;
// both are within the bf16/f16 tolerances of the f64 reference.
template <class T>
void gemm_dgelu(const GemmArgs<T>& args, cudaStream_t stream) {
  lt_matmul(plain_product(args), CUBLASLT_EPILOGUE_DEFAULT, args.c, kCudaType<T>, args.ldc, 0.0f, stream);
  constexpr int kVec = kLanes<T>;
  const bool vectorised = args.n % kVec == 0 && args.ldc % kVec == 0 && args.ld_aux % kVec == 0 &&
                          misalignment(args.c) == 0 && misalignment(args.aux) == 0;
  const int64_t columns = vectorised ? args.n / kVec : args.n;  // a thread's runs of columns
  const int threads = int(std::min<int64_t>(kThreads, (columns + 31) / 32 * 32));
  const int64_t column_blocks = std::min((columns + threads - 1) / threads, kMaxBlocks);
  // The pass sums the bias gradient's columns itself where its tiles of kRowsPerSumTile rows still make
  // kFusedSumMinBlocks blocks (gpt2-124m's 16384 × 3072: 1024, where it saved the 38 µs re-read of c for 26 µs);
  // with fewer, the GPU idles while each thread walks its rows (seed's 10240 × 1536 would make 320), and
  // column_sum reads c again instead. The partials (tiles × n floats) stay small next to c.
  constexpr int64_t kRowsPerSumTile = 32, kFusedSumMinBlocks = 512;
  const int64_t rows_per_tile = std::max(kRowsPerSumTile, (args.m + kMaxGridY - 1) / kMaxGridY);
  const int64_t sum_tiles = (args.m + rows_per_tile - 1) / rows_per_tile;
  const bool column_sums =
      args.bias_grad_of == GemmBiasGrad::c_columns && column_blocks * sum_tiles >= kFusedSumMinBlocks;
  const int64_t tiles = column_sums ? sum_tiles : args.m;
  float* partials = nullptr;  // (tiles, n), stream-ordered scratch
  if (column_sums)
    ALPHA_CUDA_CHECK(
        cudaMallocAsync(reinterpret_cast<void**>(&partials), size_t(tiles * args.n) * sizeof(float), stream));
  const dim3 grid(unsigned(column_blocks), unsigned(std::min(tiles, kMaxGridY)));
  auto launch = [&]<int V, bool kColumnSums>() {
    constexpr auto kernel = dgelu_in_place_kernel<T, V, kColumnSums>;
    ALPHA_CUDA_LAUNCH(kernel, grid, threads, stream, bits(args.c), args.ldc, bits(args.aux), args.ld_aux, args.m,
                      args.n, column_sums ? rows_per_tile : int64_t(1), partials);
  };
  if (vectorised && column_sums)
    launch.template operator()<kVec, true>();
  else if (vectorised)
    launch.template operator()<kVec, false>();
  else if (column_sums)
    launch.template operator()<1, true>();
  else
    launch.template operator()<1, false>();
  if (column_sums) {
    column_sum(ColumnSumArgs<float, T>{partials, args.bias_grad, tiles, args.n, args.n}, Stream{stream});
    ALPHA_CUDA_CHECK(cudaFreeAsync(partials, stream));
  } else {
    bias_grads_by_column_sums(args, stream);
  }
}

template <class T>
__global__ void broadcast_rows_kernel(const Bits<T>* row, Bits<T>* out, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = row[i % cols];
}

// Column sums: a block covers kSumCols adjacent columns (one per lane of threadIdx.x, so each row is read
// coalesced) and one chunk of rows; thread row y adds rows y, y + kSumRowThreads, ... of the chunk in order,
// then a fixed shared-memory tree adds the kSumRowThreads partials. With several chunks, their partials (f32)
// are summed the same way by a second launch with one chunk. The order depends only on rows and cols.
constexpr int kSumCols = 32;
constexpr int kSumRowThreads = 8;
constexpr int64_t kSumRowChunk = 1024;

template <class In, class Out>
__global__ void column_sum_kernel(const Bits<In>* x, int64_t rows, int64_t cols, int64_t ld, int64_t chunk,
                                  Bits<Out>* out) {
  __shared__ float partial[kSumRowThreads][kSumCols + 1];
  const int64_t col = int64_t(blockIdx.x) * kSumCols + threadIdx.x;
  const int64_t start = int64_t(blockIdx.y) * chunk;
  const int64_t end = start + chunk < rows ? start + chunk : rows;
  float s = 0.0f;
  if (col < cols)
    for (int64_t r = start + threadIdx.y; r < end; r += kSumRowThreads)
      s = __fadd_rn(s, Elem<In>::load(x[r * ld + col]));
  partial[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  for (int width = kSumRowThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.y) < width)
      partial[threadIdx.y][threadIdx.x] =
          __fadd_rn(partial[threadIdx.y][threadIdx.x], partial[threadIdx.y + width][threadIdx.x]);
    __syncthreads();
  }
  if (threadIdx.y == 0 && col < cols) out[int64_t(blockIdx.y) * cols + col] = Elem<Out>::store(partial[0][threadIdx.x]);
}

}  // namespace

void set_gemm_fused_epilogues(bool enabled) { fused_epilogues.store(enabled, std::memory_order_relaxed); }
bool gemm_fused_epilogues() { return fused_epilogues.load(std::memory_order_relaxed); }

template <class T, class Out>
void gemm(const GemmArgs<T, Out>& args, Stream s) {
  check_gemm_epilogue("gemm", args);
  cudaStream_t stream = alpha::cuda::stream_handle(s);
  if (args.m == 0 || args.n == 0) {  // c is empty; a bias gradient still has its length (sums over no rows: 0)
    bias_grads_by_column_sums(args, stream);
    return;
  }
  if constexpr (!std::is_same_v<T, float> && std::is_same_v<T, Out>)
    if (args.epilogue == GemmEpilogue::dgelu && args.k > 0 && gemm_fused_epilogues()) return gemm_dgelu(args, stream);
  const cublasLtEpilogue_t epilogue = epilogue_of(args);
  const bool plain = epilogue == CUBLASLT_EPILOGUE_DEFAULT;
  // cuBLASLt documents the GELU aux matrix's leading dimension as a multiple of 8; its epilogue vectors and
  // aux matrix are kept 16-byte aligned (others have seen misaligned bias pointers fail at run time).
  const bool documented = (args.aux == nullptr || args.ld_aux % 8 == 0) && alignment(args.aux) >= 16 &&
                          alignment(args.bias) >= 16 && alignment(args.bias_grad) >= 16;
  // cuBLASLt's GELU uses an approximate tanh (about 2e-4 relative): below bf16's and f16's precision and
  // TF32's, not f32's, whose GELU and DGELU stay in our kernel with tanhf.
  const bool precise_enough = !std::is_same_v<T, float> || args.allow_tf32 || args.epilogue == GemmEpilogue::none;
  if (args.k > 0 && (plain || (gemm_fused_epilogues() && documented && precise_enough)) &&
      lt_matmul(args, epilogue, args.c, kCudaType<Out>, args.ldc, float(args.beta), stream))
    return;
  gemm_unfused(args, stream);
}

template <class T>
void broadcast_rows(const BroadcastRowsArgs<T>& args, Stream s) {
  const int64_t total = args.rows * args.cols;
  if (total == 0) return;
  constexpr auto kernel = broadcast_rows_kernel<T>;
  ALPHA_CUDA_LAUNCH(kernel, blocks_for(total), kThreads, alpha::cuda::stream_handle(s), bits(args.row), bits(args.out),
                    args.rows, args.cols);
}

template <class T, class Out>
void column_sum(const ColumnSumArgs<T, Out>& args, Stream s) {
  if (args.cols == 0) return;
  cudaStream_t stream = alpha::cuda::stream_handle(s);
  const int64_t chunk = std::max(kSumRowChunk, (args.rows + kMaxGridY - 1) / kMaxGridY);
  const int64_t chunks = std::max<int64_t>(1, (args.rows + chunk - 1) / chunk);
  const dim3 block(kSumCols, kSumRowThreads);
  const unsigned col_blocks = unsigned((args.cols + kSumCols - 1) / kSumCols);
  if (chunks == 1) {
    constexpr auto kernel = column_sum_kernel<T, Out>;
    ALPHA_CUDA_LAUNCH(kernel, dim3(col_blocks, 1), block, stream, bits(args.x), args.rows, args.cols, args.ld, chunk,
                      bits(args.out));
    return;
  }
  float* partials = nullptr;  // (chunks, cols), stream-ordered scratch
  ALPHA_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partials), size_t(chunks * args.cols) * sizeof(float),
                                   stream));
  constexpr auto chunk_kernel = column_sum_kernel<T, float>;
  ALPHA_CUDA_LAUNCH(chunk_kernel, dim3(col_blocks, unsigned(chunks)), block, stream, bits(args.x), args.rows,
                    args.cols, args.ld, chunk, partials);
  constexpr auto final_kernel = column_sum_kernel<float, Out>;
  ALPHA_CUDA_LAUNCH(final_kernel, dim3(col_blocks, 1), block, stream, partials, chunks, args.cols, args.cols, chunks,
                    bits(args.out));
  ALPHA_CUDA_CHECK(cudaFreeAsync(partials, stream));
}

#define ALPHA_INSTANTIATE(T)                                               \
  template void gemm<T, T>(const GemmArgs<T, T>&, Stream);                 \
  template void broadcast_rows<T>(const BroadcastRowsArgs<T>&, Stream);    \
  template void column_sum<T, T>(const ColumnSumArgs<T, T>&, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE
#define ALPHA_INSTANTIATE_WIDER_OUTPUT(T)                                  \
  template void gemm<T, float>(const GemmArgs<T, float>&, Stream);         \
  template void column_sum<T, float>(const ColumnSumArgs<T, float>&, Stream);
ALPHA_INSTANTIATE_WIDER_OUTPUT(bf16)
ALPHA_INSTANTIATE_WIDER_OUTPUT(f16)
#undef ALPHA_INSTANTIATE_WIDER_OUTPUT

}  // namespace alpha::kernels::cuda
