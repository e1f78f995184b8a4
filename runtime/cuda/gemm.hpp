// GEMMs through cuBLASLt: C[m×n] = A[m×k]·B[k×n] (column major), `batch`
// strided products, in the op's dtype with fp32 accumulation (fp8 runs as
// bf16: no fp8 path here). One handle and workspace per instance (one per
// issuing thread); a plan (descriptors and the heuristic's algorithm) per
// shape and dtype, made once.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "runtime/cuda/handles.hpp"
#include "schedule/schedule.hpp"

namespace hzp::runtime::cuda {

/// Bytes of A, B and C of a shape.
[[nodiscard]] std::size_t gemm_bytes(const core::GemmShape& s, core::Dtype dtype);

class Gemms {
 public:
  Gemms();
  Gemms(const Gemms&) = delete;
  Gemms& operator=(const Gemms&) = delete;
  /// Enqueues the GEMM on `stream`, A, B and C laid out one after the other
  /// from `buffer` (at least gemm_bytes). `what` names it in errors.
  void run(const core::GemmShape& s, core::Dtype dtype, void* buffer, cudaStream_t stream, const std::string& what);
  /// Makes the shape's plan now (the heuristic is host work: keep it out of timed regions).
  void prepare(const core::GemmShape& s, core::Dtype dtype, const std::string& what) { (void)plan(s, dtype, what); }

 private:
  struct Plan {
    LtMatmulDesc desc;
    LtMatrixLayout a, b, c;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan(const core::GemmShape& s, core::Dtype dtype, const std::string& what);

  std::size_t workspace_bytes_ = 32u << 20;
  // Made in this order, destroyed in reverse: plans, workspace, handle.
  LtHandle handle_;
  DeviceBuffer workspace_;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, int>, Plan> plans_;
};

}  // namespace hzp::runtime::cuda
