// DeviceApi on CUDA, cuBLASLt and NCCL (see cuda_api.hpp).
#include "runtime/cuda/cuda_api.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstring>

#include "runtime/cuda/check.hpp"
#include "runtime/cuda/gemm.hpp"
#include "runtime/cuda/kernels.hpp"

namespace hzp::runtime::cuda {
namespace {

using device::Handle;

cudaStream_t stream_of(Handle h) { return static_cast<cudaStream_t>(h); }
cudaEvent_t event_of(Handle h) { return static_cast<cudaEvent_t>(h); }
ncclComm_t comm_of(Handle h) { return static_cast<ncclComm_t>(h); }

// A non-blocking communicator's call may return ncclInProgress: done later,
// as comm_status says.
void check_nccl(ncclResult_t r, const std::string& what) {
  if (r != ncclInProgress) check(r, what);
}

ncclDataType_t nccl_type(device::CommType t) {
  switch (t) {
    case device::CommType::U8: return ncclUint8;
    case device::CommType::F8: return ncclFloat8e4m3;
    case device::CommType::F16: return ncclFloat16;
    case device::CommType::F32: return ncclFloat32;
    case device::CommType::F64: return ncclFloat64;
    case device::CommType::Bf16: break;
  }
  return ncclBfloat16;
}

cudaMemPool_t current_pool(const std::string& what) {
  int device = 0;
  check(cudaGetDevice(&device), what);
  cudaMemPool_t pool = nullptr;
  check(cudaDeviceGetDefaultMemPool(&pool, device), what);
  return pool;
}

ncclConfig_t nonblocking() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

void CudaApi::set_device(int device, const std::string& what) { check(cudaSetDevice(device), what); }
Handle CudaApi::stream_create(const std::string& what) {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), what);
  return s;
}
void CudaApi::stream_destroy(Handle stream) { (void)cudaStreamDestroy(stream_of(stream)); }
Handle CudaApi::event_create(bool timing, const std::string& what) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), what);
  return e;
}
void CudaApi::event_destroy(Handle event) { (void)cudaEventDestroy(event_of(event)); }
void CudaApi::event_record(Handle event, Handle stream, const std::string& what) {
  check(cudaEventRecord(event_of(event), stream_of(stream)), what);
}
void CudaApi::stream_wait_event(Handle stream, Handle event, const std::string& what) {
  check(cudaStreamWaitEvent(stream_of(stream), event_of(event), 0), what);
}
bool CudaApi::event_done(Handle event, const std::string& what) {
  const cudaError_t r = cudaEventQuery(event_of(event));
  if (r == cudaErrorNotReady) return false;
  check(r, what);
  return true;
}
bool CudaApi::stream_done(Handle stream, const std::string& what) {
  const cudaError_t r = cudaStreamQuery(stream_of(stream));
  if (r == cudaErrorNotReady) return false;
  check(r, what);
  return true;
}
float CudaApi::elapsed_ms(Handle from, Handle to, const std::string& what) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, event_of(from), event_of(to)), what);
  return ms;
}
void CudaApi::device_synchronize(const std::string& what) { check(cudaDeviceSynchronize(), what); }
Handle CudaApi::malloc_device(std::size_t bytes, const std::string& what) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), what);
  return p;
}
void CudaApi::free_device(Handle p) { (void)cudaFree(p); }
Handle CudaApi::malloc_host(std::size_t bytes, const std::string& what) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes), what);
  return p;
}
void CudaApi::free_host(Handle p) { (void)cudaFreeHost(p); }
void CudaApi::copy_async(Handle dst, const void* src, std::size_t bytes, Handle stream, const std::string& what) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_of(stream)), what);
}
Handle CudaApi::pool_alloc(std::size_t bytes, Handle stream, const std::string& what) {
  void* p = nullptr;
  check(cudaMallocAsync(&p, bytes, current_pool(what), stream_of(stream)), what);
  return p;
}
void CudaApi::pool_free(Handle p, Handle stream, const std::string& what) {
  check(cudaFreeAsync(p, stream_of(stream)), what);
}
void CudaApi::pool_keep_reserved(const std::string& what) {
  std::uint64_t keep = UINT64_MAX;  // the pool keeps what it reserved: reserved = what was needed
  check(cudaMemPoolSetAttribute(current_pool(what), cudaMemPoolAttrReleaseThreshold, &keep), what);
}
void CudaApi::pool_reset_peaks(const std::string& what) {
  // CUDA: the high-water attributes can only be set to 0, which resets them to the current use.
  std::uint64_t zero = 0;
  check(cudaMemPoolSetAttribute(current_pool(what), cudaMemPoolAttrReservedMemHigh, &zero), what);
  check(cudaMemPoolSetAttribute(current_pool(what), cudaMemPoolAttrUsedMemHigh, &zero), what);
}
std::uint64_t CudaApi::pool_reserved_high(const std::string& what) {
  std::uint64_t v = 0;
  check(cudaMemPoolGetAttribute(current_pool(what), cudaMemPoolAttrReservedMemHigh, &v), what);
  return v;
}
std::uint64_t CudaApi::pool_used_high(const std::string& what) {
  std::uint64_t v = 0;
  check(cudaMemPoolGetAttribute(current_pool(what), cudaMemPoolAttrUsedMemHigh, &v), what);
  return v;
}
void CudaApi::fill_random(Handle buffer, std::size_t bytes, std::uint64_t seed, Handle stream,
                          const std::string& what) {
  check(cuda::launch_fill_random(buffer, bytes, seed, stream_of(stream)), what);
}
void CudaApi::launch_bandwidth(Handle buffer, std::size_t bytes, Handle stream, const std::string& what) {
  check(cuda::launch_bandwidth(buffer, bytes, stream_of(stream)), what);
}
void CudaApi::launch_emulated(Handle buffer, std::size_t bytes, int blocks, std::uint64_t ns, Handle stream,
                              const std::string& what) {
  check(launch_emulated_collective(buffer, bytes, blocks, ns, stream_of(stream)), what);
}
Handle CudaApi::gemm_create(const std::string&) { return new Gemms(); }
void CudaApi::gemm_destroy(Handle gemm) { delete static_cast<Gemms*>(gemm); }
void CudaApi::gemm_plan(Handle gemm, const core::GemmShape& s, core::Dtype dtype, const std::string& what) {
  static_cast<Gemms*>(gemm)->prepare(s, dtype, what);
}
void CudaApi::gemm_run(Handle gemm, const core::GemmShape& s, core::Dtype dtype, Handle buffer, Handle stream,
                       const std::string& what) {
  static_cast<Gemms*>(gemm)->run(s, dtype, buffer, stream_of(stream), what);
}
std::size_t CudaApi::gemm_bytes(const core::GemmShape& s, core::Dtype dtype) { return cuda::gemm_bytes(s, dtype); }

Handle CudaApi::comm_init(int world, const std::string& id, int rank, const std::string& what) {
  ncclUniqueId uid{};
  if (id.size() != sizeof uid) throw RunError(what + ": an NCCL id of the wrong size");
  std::memcpy(&uid, id.data(), sizeof uid);
  ncclConfig_t config = nonblocking();
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRankConfig(&comm, world, uid, rank, &config), what);
  return comm;
}
Handle CudaApi::comm_split(Handle parent, int colour, int key, const std::string& what) {
  ncclConfig_t config = nonblocking();
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommSplit(comm_of(parent), colour < 0 ? NCCL_SPLIT_NOCOLOR : colour, key, &comm, &config), what);
  return comm;
}
device::CommStatus CudaApi::comm_status(Handle comm, std::string& error) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm_of(comm), &state);
  if (r != ncclSuccess) state = r;
  if (state == ncclSuccess) return device::CommStatus::Ready;
  if (state == ncclInProgress) return device::CommStatus::InProgress;
  error = fmt::format("{} ({})", ncclGetErrorString(state), ncclGetLastError(comm_of(comm)));
  return device::CommStatus::Failed;
}
void CudaApi::comm_abort(Handle comm) { (void)ncclCommAbort(comm_of(comm)); }
void CudaApi::comm_destroy(Handle comm) { (void)ncclCommDestroy(comm_of(comm)); }
void CudaApi::group_start(const std::string& what) { check_nccl(ncclGroupStart(), what); }
void CudaApi::group_end(const std::string& what) { check_nccl(ncclGroupEnd(), what); }
void CudaApi::collective(core::CollectiveKind kind, Handle send, Handle recv, std::size_t count, device::CommType type,
                         Handle comm, Handle stream, const std::string& what) {
  const ncclDataType_t t = nccl_type(type);
  switch (kind) {
    case core::CollectiveKind::AllGather:
      check_nccl(ncclAllGather(send, recv, count, t, comm_of(comm), stream_of(stream)), what);
      break;
    case core::CollectiveKind::ReduceScatter:
      check_nccl(ncclReduceScatter(send, recv, count, t, ncclSum, comm_of(comm), stream_of(stream)), what);
      break;
    case core::CollectiveKind::AllReduce:
      check_nccl(ncclAllReduce(send, recv, count, t, ncclSum, comm_of(comm), stream_of(stream)), what);
      break;
    case core::CollectiveKind::Broadcast:
      check_nccl(ncclBroadcast(send, recv, count, t, 0, comm_of(comm), stream_of(stream)), what);
      break;
    case core::CollectiveKind::AllToAll: throw RunError(what + ": all-to-all goes as sends and receives");
  }
}
void CudaApi::all_reduce_max(Handle buffer, std::size_t count, device::CommType type, Handle comm, Handle stream,
                             const std::string& what) {
  check_nccl(ncclAllReduce(buffer, buffer, count, nccl_type(type), ncclMax, comm_of(comm), stream_of(stream)), what);
}
void CudaApi::send(Handle buffer, std::size_t count, device::CommType type, int peer, Handle comm, Handle stream,
                   const std::string& what) {
  check_nccl(ncclSend(buffer, count, nccl_type(type), peer, comm_of(comm), stream_of(stream)), what);
}
void CudaApi::recv(Handle buffer, std::size_t count, device::CommType type, int peer, Handle comm, Handle stream,
                   const std::string& what) {
  check_nccl(ncclRecv(buffer, count, nccl_type(type), peer, comm_of(comm), stream_of(stream)), what);
}

}  // namespace hzp::runtime::cuda
