// The device calls the GPU backend makes, as one interface: CUDA runtime,
// cuBLASLt and NCCL behind plain C++ types, so that the backend's logic
// (runtime/device/backend.hpp) compiles and is tested without CUDA against a
// recording fake, and only runtime/cuda/cuda_api.cpp touches the real APIs
// (each method there is one checked call or a few). Handles are opaque
// pointers (a cudaStream_t, cudaEvent_t, ncclComm_t ... cast to void*). Every
// method throws RunError naming `what` when the call fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "schedule/schedule.hpp"

namespace hzp::runtime::device {

using Handle = void*;

/// Element types a communication call moves (NCCL's, by name).
enum class CommType { U8, F8, F16, Bf16, F32, F64 };
enum class CommStatus { Ready, InProgress, Failed };

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;
  // The calling thread's device (cudaSetDevice).
  virtual void set_device(int device, const std::string& what) = 0;
  // Streams and events.
  virtual Handle stream_create(const std::string& what) = 0;
  virtual void stream_destroy(Handle stream) = 0;
  virtual Handle event_create(bool timing, const std::string& what) = 0;
  virtual void event_destroy(Handle event) = 0;
  virtual void event_record(Handle event, Handle stream, const std::string& what) = 0;
  virtual void stream_wait_event(Handle stream, Handle event, const std::string& what) = 0;
  /// True once the event's last record has completed (cudaEventQuery).
  [[nodiscard]] virtual bool event_done(Handle event, const std::string& what) = 0;
  [[nodiscard]] virtual bool stream_done(Handle stream, const std::string& what) = 0;
  [[nodiscard]] virtual float elapsed_ms(Handle from, Handle to, const std::string& what) = 0;
  virtual void device_synchronize(const std::string& what) = 0;
  // Memory: plain device memory (set-up only), the stream-ordered pool, pinned host.
  virtual Handle malloc_device(std::size_t bytes, const std::string& what) = 0;
  virtual void free_device(Handle p) = 0;
  virtual Handle malloc_host(std::size_t bytes, const std::string& what) = 0;
  virtual void free_host(Handle p) = 0;
  virtual void copy_async(Handle dst, const void* src, std::size_t bytes, Handle stream, const std::string& what) = 0;
  virtual Handle pool_alloc(std::size_t bytes, Handle stream, const std::string& what) = 0;
  virtual void pool_free(Handle p, Handle stream, const std::string& what) = 0;
  /// The pool keeps what it reserved (release threshold max).
  virtual void pool_keep_reserved(const std::string& what) = 0;
  /// Resets the pool's reserved and used high-water marks (to what is held now).
  virtual void pool_reset_peaks(const std::string& what) = 0;
  [[nodiscard]] virtual std::uint64_t pool_reserved_high(const std::string& what) = 0;
  [[nodiscard]] virtual std::uint64_t pool_used_high(const std::string& what) = 0;
  // Kernels (runtime/cuda/kernels.cu) and cuBLASLt.
  /// Fills `bytes` of `buffer` with bf16 values uniform in [-1, 1) drawn from
  /// a hash of (`seed`, index): GEMMs then run on data like a model's (on
  /// zeros an H200 runs them about 10 % faster, at a lower power draw).
  virtual void fill_random(Handle buffer, std::size_t bytes, std::uint64_t seed, Handle stream,
                           const std::string& what) = 0;
  virtual void launch_bandwidth(Handle buffer, std::size_t bytes, Handle stream, const std::string& what) = 0;
  virtual void launch_emulated(Handle buffer, std::size_t bytes, int blocks, std::uint64_t ns, Handle stream,
                               const std::string& what) = 0;
  /// A cuBLASLt handle and workspace (one per issuing thread).
  virtual Handle gemm_create(const std::string& what) = 0;
  virtual void gemm_destroy(Handle gemm) = 0;
  /// Descriptors and the heuristic's algorithm for a shape (host work, cached).
  virtual void gemm_plan(Handle gemm, const core::GemmShape& s, core::Dtype dtype, const std::string& what) = 0;
  /// cublasLtMatmul of a planned shape, operands from `buffer`.
  virtual void gemm_run(Handle gemm, const core::GemmShape& s, core::Dtype dtype, Handle buffer, Handle stream,
                        const std::string& what) = 0;
  [[nodiscard]] virtual std::size_t gemm_bytes(const core::GemmShape& s, core::Dtype dtype) = 0;
  // NCCL. Communicators are non-blocking: a call may leave the communicator
  // InProgress, and comm_status says when it is Ready (or Failed).
  [[nodiscard]] virtual Handle comm_init(int world, const std::string& id, int rank, const std::string& what) = 0;
  /// colour < 0: NCCL_SPLIT_NOCOLOR (returns null).
  [[nodiscard]] virtual Handle comm_split(Handle parent, int colour, int key, const std::string& what) = 0;
  [[nodiscard]] virtual CommStatus comm_status(Handle comm, std::string& error) = 0;
  virtual void comm_abort(Handle comm) = 0;
  virtual void comm_destroy(Handle comm) = 0;
  virtual void group_start(const std::string& what) = 0;
  virtual void group_end(const std::string& what) = 0;
  virtual void collective(core::CollectiveKind kind, Handle send, Handle recv, std::size_t count, CommType type,
                          Handle comm, Handle stream, const std::string& what) = 0;
  /// In place, ncclMax.
  virtual void all_reduce_max(Handle buffer, std::size_t count, CommType type, Handle comm, Handle stream,
                              const std::string& what) = 0;
  virtual void send(Handle buffer, std::size_t count, CommType type, int peer, Handle comm, Handle stream,
                    const std::string& what) = 0;
  virtual void recv(Handle buffer, std::size_t count, CommType type, int peer, Handle comm, Handle stream,
                    const std::string& what) = 0;
};

}  // namespace hzp::runtime::device
