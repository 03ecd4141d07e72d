// Does compute-sanitizer's initcheck see the stores of cuBLASLt's kernels? One bf16 GEMM D = A·B through
// cublasLtMatmul into a fresh cudaMalloc buffer (never memset), then D copied to the host and checked
// against a host product. Nothing of Alpha is involved. If initcheck reports the copy as reading
// uninitialized memory although D holds the right values, the tool does not track how those kernels write
// (on Hopper, TMA stores), and the same reports in Alpha's tests are not Alpha's. Exit code 0 when D is
// correct. Used by scripts/compute-sanitizer.sh; build: nvcc -O2 -o X cublaslt_initcheck.cu -lcublasLt
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <vector>

#define CHECK(call)                                                                   \
  do {                                                                                \
    if (auto status = (call); status != 0) {                                          \
      std::fprintf(stderr, "%s failed with %d\n", #call, static_cast<int>(status));   \
      return 2;                                                                       \
    }                                                                                 \
  } while (0)

int main() {
  const int m = 256, n = 192, k = 128;  // column-major: A m×k, B k×n, D m×n
  std::vector<__nv_bfloat16> a(m * k), b(k * n), d(m * n);
  std::vector<float> af(m * k), bf(k * n);
  for (int i = 0; i < m * k; ++i) af[i] = __bfloat162float(a[i] = __float2bfloat16(float((i * 37) % 17) / 16 - 0.5f));
  for (int i = 0; i < k * n; ++i) bf[i] = __bfloat162float(b[i] = __float2bfloat16(float((i * 11) % 13) / 12 - 0.5f));
  void *da, *db, *dd, *workspace;
  const size_t workspace_bytes = 32 << 20;
  CHECK(cudaMalloc(&da, a.size() * 2));
  CHECK(cudaMalloc(&db, b.size() * 2));
  CHECK(cudaMalloc(&dd, d.size() * 2));
  CHECK(cudaMalloc(&workspace, workspace_bytes));
  CHECK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));

  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  CHECK(cublasLtCreate(&lt));
  CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, m, k, m));
  CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k));
  CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, m));
  cublasLtMatmulPreference_t preference;
  CHECK(cublasLtMatmulPreferenceCreate(&preference));
  CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                             sizeof workspace_bytes));
  cublasLtMatmulHeuristicResult_t heuristic;
  int found = 0;
  CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, preference, 1, &heuristic, &found));
  if (found == 0) return std::fprintf(stderr, "no cuBLASLt algorithm\n"), 2;
  const float one = 1, zero = 0;
  CHECK(cublasLtMatmul(lt, desc, &one, da, la, db, lb, &zero, dd, ld, dd, ld, &heuristic.algo, workspace,
                       workspace_bytes, nullptr));
  CHECK(cudaMemcpy(d.data(), dd, d.size() * 2, cudaMemcpyDeviceToHost));  // initcheck judges this read

  double worst = 0;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double want = 0;
      for (int p = 0; p < k; ++p) want += double(af[i + p * m]) * bf[p + j * k];
      worst = std::fmax(worst, std::fabs(double(__bfloat162float(d[i + j * m])) - want) / (1 + std::fabs(want)));
    }
  std::printf("cuBLASLt D = A·B (%d×%d×%d, bf16): worst relative error %.2e: %s\n", m, k, n, worst,
              worst < 1e-2 ? "every element written and right" : "WRONG");
  return worst < 1e-2 ? 0 : 1;
}
