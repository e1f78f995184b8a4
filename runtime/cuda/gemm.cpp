// cuBLASLt GEMMs (see gemm.hpp).
#include "runtime/cuda/gemm.hpp"

#include <cmath>

#include "runtime/cuda/check.hpp"

namespace hzp::runtime::cuda {
namespace {

cudaDataType_t cuda_type(core::Dtype d) {
  switch (d) {
    case core::Dtype::Fp16: return CUDA_R_16F;
    case core::Dtype::Fp32: return CUDA_R_32F;
    default: return CUDA_R_16BF;  // bf16, and fp8 as bf16
  }
}

std::size_t element_bytes(core::Dtype d) { return cuda_type(d) == CUDA_R_32F ? 4 : 2; }

}  // namespace

std::size_t gemm_bytes(const core::GemmShape& s, core::Dtype dtype) {
  return static_cast<std::size_t>((s.m * s.k + s.k * s.n + s.m * s.n) * s.batch) * element_bytes(dtype);
}

Gemms::Gemms() {
  check(cublasLtCreate(handle_.out()), "cublasLtCreate");
  workspace_ = device_alloc(workspace_bytes_, "cuBLASLt workspace");
}

const Gemms::Plan& Gemms::plan(const core::GemmShape& s, core::Dtype dtype, const std::string& what) {
  const auto key = std::tuple{s.m, s.n, s.k, s.batch, static_cast<int>(dtype)};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Plan p;
  const cudaDataType_t t = cuda_type(dtype);
  check(cublasLtMatmulDescCreate(p.desc.out(), CUBLAS_COMPUTE_32F, CUDA_R_32F), what + ": matmul descriptor");
  auto layout = [&](LtMatrixLayout& l, std::int64_t rows, std::int64_t cols) {
    check(cublasLtMatrixLayoutCreate(l.out(), t, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols),
                                     rows),
          what + ": matrix layout");
    const int batch = static_cast<int>(s.batch);
    const std::int64_t stride = rows * cols;
    check(cublasLtMatrixLayoutSetAttribute(l.get(), CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch),
          what + ": batch count");
    check(
        cublasLtMatrixLayoutSetAttribute(l.get(), CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
        what + ": batch stride");
  };
  layout(p.a, s.m, s.k);
  layout(p.b, s.k, s.n);
  layout(p.c, s.m, s.n);
  LtPreference pref;
  check(cublasLtMatmulPreferenceCreate(pref.out()), what + ": preference");
  check(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                             sizeof workspace_bytes_),
        what + ": workspace preference");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(handle_.get(), p.desc.get(), p.a.get(), p.b.get(), p.c.get(), p.c.get(),
                                       pref.get(), 1, &result, &found),
        what + ": algorithm heuristic");
  if (found == 0) throw RunError(fmt::format("{}: cuBLASLt has no algorithm for {}x{}x{}", what, s.m, s.n, s.k));
  p.algo = result.algo;
  return plans_.emplace(key, std::move(p)).first->second;
}

void Gemms::run(const core::GemmShape& s, core::Dtype dtype, void* buffer, cudaStream_t stream,
                const std::string& what) {
  const Plan& p = plan(s, dtype, what);
  const std::size_t elem = element_bytes(dtype);
  auto* base = static_cast<char*>(buffer);
  const void* a = base;
  const void* b = base + static_cast<std::size_t>(s.m * s.k * s.batch) * elem;
  void* c = base + static_cast<std::size_t>((s.m * s.k + s.k * s.n) * s.batch) * elem;
  // Outputs land where later GEMMs read operands: alpha = sqrt(3 / k) keeps
  // a product of two operands uniform in [-1, 1) (variance 1/3 each) at
  // that variance, so a step's data neither overflows nor decays to zeros.
  const float alpha = std::sqrt(3.0F / static_cast<float>(s.k)), beta = 0;
  check(cublasLtMatmul(handle_.get(), p.desc.get(), &alpha, a, p.a.get(), b, p.b.get(), &beta, c, p.c.get(), c,
                       p.c.get(), &p.algo, workspace_.get(), workspace_bytes_, stream),
        what + ": cublasLtMatmul");
}

}  // namespace hzp::runtime::cuda
