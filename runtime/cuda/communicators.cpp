// NCCL communicators of one rank and the NCCL id they share (see
// cuda_backend.hpp): device::DeviceComms on CudaApi.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/io.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/cuda/cuda_api.hpp"
#include "runtime/cuda/cuda_backend.hpp"
#include "runtime/cuda/handles.hpp"
#include "runtime/mpi.hpp"

namespace hzp::runtime::cuda {

void use_device(int device) { check(cudaSetDevice(device), fmt::format("cudaSetDevice({})", device)); }

std::string new_nccl_id() {
  ncclUniqueId id{};
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return {reinterpret_cast<const char*>(&id), sizeof id};
}

double world_max(Communicators& comms, double v) { return comms.comms().world_max(v); }

namespace {
// The NCCL unique id every rank shares (see Communicators).
std::string shared_nccl_id(const LaunchInfo& launch, const std::string& rendezvous_dir, const std::string& shared_id) {
  ncclUniqueId id{};
  if (!shared_id.empty()) return shared_id;
  if (mpi_built() && launch.launcher == "mpirun") {
    mpi_init();
    if (launch.rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    mpi_broadcast(&id, sizeof id);
    return {reinterpret_cast<const char*>(&id), sizeof id};
  }
  if (launch.world == 1) return new_nccl_id();
  // File rendezvous: rank 0 writes the id (whole, by rename), the others poll.
  if (rendezvous_dir.empty()) {
    throw RunError("NCCL set-up: expected --rendezvous DIR (a path every rank sees) to share the NCCL id");
  }
  // (A fresh directory per run, as torchrun's file store wants: an old id
  // there would be read before rank 0 replaces it.)
  const std::string path = (std::filesystem::path(rendezvous_dir) / "nccl-id").string();
  if (launch.rank == 0) {
    const std::string bytes = new_nccl_id();
    core::write_file_atomic(path, bytes);
    return bytes;
  }
  for (int tries = 0;; ++tries) {
    std::ifstream in(path, std::ios::binary);
    if (in && in.read(reinterpret_cast<char*>(&id), sizeof id)) break;
    if (tries > 6000) throw RunError(fmt::format("NCCL set-up: no id in {} after 60 s", path));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return {reinterpret_cast<const char*>(&id), sizeof id};
}
}  // namespace

Communicators::Communicators(const core::Schedule& s, const LaunchInfo& launch, const std::string& rendezvous_dir,
                             const std::string& shared_id, std::chrono::milliseconds timeout)
    : api_(std::make_unique<CudaApi>()) {
  const std::string id = shared_nccl_id(launch, rendezvous_dir, shared_id);
  device::CommOptions o;
  o.timeout = timeout;
  comms_ = std::make_unique<device::DeviceComms>(*api_, s, launch.rank, launch.world, id, o);
}

Communicators::~Communicators() = default;

}  // namespace hzp::runtime::cuda
