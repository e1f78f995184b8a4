// Checked CUDA, cuBLASLt and NCCL calls: a failure is a RunError naming what
// was being done (the rank and op, for Schedule ops).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <string>

#include "runtime/executor.hpp"

namespace hzp::runtime::cuda {

inline void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw RunError(fmt::format("{}: CUDA error: {}", what, cudaGetErrorString(e)));
}
inline void check(cublasStatus_t e, const std::string& what) {
  if (e != CUBLAS_STATUS_SUCCESS) {
    throw RunError(fmt::format("{}: cuBLASLt error: {}", what, cublasLtGetStatusString(e)));
  }
}
inline void check(ncclResult_t e, const std::string& what) {
  if (e != ncclSuccess) throw RunError(fmt::format("{}: NCCL error: {}", what, ncclGetErrorString(e)));
}

/// A call on a non-blocking communicator (as Communicators makes them): a
/// result of ncclInProgress is waited for through ncclCommGetAsyncError.
inline void check_on(ncclComm_t comm, ncclResult_t r, const std::string& what) {
  while (r == ncclInProgress && comm != nullptr) {
    ncclResult_t state = ncclSuccess;
    r = ncclCommGetAsyncError(comm, &state);
    if (r == ncclSuccess) r = state;
  }
  if (r != ncclInProgress) check(r, what);
}

}  // namespace hzp::runtime::cuda
