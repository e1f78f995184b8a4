// DeviceApi on the real CUDA runtime, cuBLASLt and NCCL: one checked call (or
// a few) per method, no decisions (those are in runtime/device/).
#pragma once

#include "runtime/device/api.hpp"

namespace hzp::runtime::cuda {

class CudaApi final : public device::DeviceApi {
 public:
  void set_device(int device, const std::string& what) override;
  device::Handle stream_create(const std::string& what) override;
  void stream_destroy(device::Handle stream) override;
  device::Handle event_create(bool timing, const std::string& what) override;
  void event_destroy(device::Handle event) override;
  void event_record(device::Handle event, device::Handle stream, const std::string& what) override;
  void stream_wait_event(device::Handle stream, device::Handle event, const std::string& what) override;
  bool event_done(device::Handle event, const std::string& what) override;
  bool stream_done(device::Handle stream, const std::string& what) override;
  float elapsed_ms(device::Handle from, device::Handle to, const std::string& what) override;
  void device_synchronize(const std::string& what) override;
  device::Handle malloc_device(std::size_t bytes, const std::string& what) override;
  void free_device(device::Handle p) override;
  device::Handle malloc_host(std::size_t bytes, const std::string& what) override;
  void free_host(device::Handle p) override;
  void copy_async(device::Handle dst, const void* src, std::size_t bytes, device::Handle stream,
                  const std::string& what) override;
  device::Handle pool_alloc(std::size_t bytes, device::Handle stream, const std::string& what) override;
  void pool_free(device::Handle p, device::Handle stream, const std::string& what) override;
  void pool_keep_reserved(const std::string& what) override;
  void pool_reset_peaks(const std::string& what) override;
  std::uint64_t pool_reserved_high(const std::string& what) override;
  std::uint64_t pool_used_high(const std::string& what) override;
  void fill_random(device::Handle buffer, std::size_t bytes, std::uint64_t seed, device::Handle stream,
                   const std::string& what) override;
  void launch_bandwidth(device::Handle buffer, std::size_t bytes, device::Handle stream,
                        const std::string& what) override;
  void launch_emulated(device::Handle buffer, std::size_t bytes, int blocks, std::uint64_t ns, device::Handle stream,
                       const std::string& what) override;
  device::Handle gemm_create(const std::string& what) override;
  void gemm_destroy(device::Handle gemm) override;
  void gemm_plan(device::Handle gemm, const core::GemmShape& s, core::Dtype dtype, const std::string& what) override;
  void gemm_run(device::Handle gemm, const core::GemmShape& s, core::Dtype dtype, device::Handle buffer,
                device::Handle stream, const std::string& what) override;
  std::size_t gemm_bytes(const core::GemmShape& s, core::Dtype dtype) override;
  device::Handle comm_init(int world, const std::string& id, int rank, const std::string& what) override;
  device::Handle comm_split(device::Handle parent, int colour, int key, const std::string& what) override;
  device::CommStatus comm_status(device::Handle comm, std::string& error) override;
  void comm_abort(device::Handle comm) override;
  void comm_destroy(device::Handle comm) override;
  void group_start(const std::string& what) override;
  void group_end(const std::string& what) override;
  void collective(core::CollectiveKind kind, device::Handle send, device::Handle recv, std::size_t count,
                  device::CommType type, device::Handle comm, device::Handle stream, const std::string& what) override;
  void all_reduce_max(device::Handle buffer, std::size_t count, device::CommType type, device::Handle comm,
                      device::Handle stream, const std::string& what) override;
  void send(device::Handle buffer, std::size_t count, device::CommType type, int peer, device::Handle comm,
            device::Handle stream, const std::string& what) override;
  void recv(device::Handle buffer, std::size_t count, device::CommType type, int peer, device::Handle comm,
            device::Handle stream, const std::string& what) override;
};

}  // namespace hzp::runtime::cuda
