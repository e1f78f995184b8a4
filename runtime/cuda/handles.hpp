// Owners of CUDA, cuBLASLt and NCCL handles: each frees its handle with the
// matching destroy call when it goes out of scope, so a check that throws
// halfway through a set-up or a benchmark leaks nothing.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <string>
#include <utility>

namespace hzp::runtime::cuda {

/// Owns one handle of type T (a pointer-like type, null when empty) and frees
/// it with Destroy. Move-only; `out()` gives the address a create call fills.
template <class T, auto Destroy>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  explicit UniqueHandle(T h) : h_(h) {}
  ~UniqueHandle() { reset(); }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;
  UniqueHandle(UniqueHandle&& o) noexcept : h_(o.release()) {}
  UniqueHandle& operator=(UniqueHandle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = o.release();
    }
    return *this;
  }

  [[nodiscard]] T get() const { return h_; }
  [[nodiscard]] explicit operator bool() const { return h_ != nullptr; }
  /// Frees what it holds and returns where a create call writes the new handle.
  [[nodiscard]] T* out() {
    reset();
    return &h_;
  }
  /// Gives the handle up without freeing it.
  [[nodiscard]] T release() { return std::exchange(h_, nullptr); }
  void reset() {
    if (h_ != nullptr) (void)Destroy(std::exchange(h_, nullptr));
  }

 private:
  T h_ = nullptr;
};

using Event = UniqueHandle<cudaEvent_t, cudaEventDestroy>;
using Stream = UniqueHandle<cudaStream_t, cudaStreamDestroy>;
/// Device memory from cudaMalloc (or cudaMallocAsync: cudaFree frees it too).
using DeviceBuffer = UniqueHandle<void*, cudaFree>;
using LtHandle = UniqueHandle<cublasLtHandle_t, cublasLtDestroy>;
using LtMatmulDesc = UniqueHandle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using LtMatrixLayout = UniqueHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using LtPreference = UniqueHandle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;
using NcclComm = UniqueHandle<ncclComm_t, ncclCommDestroy>;

/// Checked creation (each throws RunError naming `what`, as `check` does).
[[nodiscard]] Event make_event(unsigned flags, const std::string& what);
[[nodiscard]] Stream make_stream(unsigned flags, const std::string& what);
[[nodiscard]] DeviceBuffer device_alloc(std::size_t bytes, const std::string& what);

}  // namespace hzp::runtime::cuda
