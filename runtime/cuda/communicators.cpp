// NCCL communicators of one rank and the NCCL id they share (see
// cuda_backend.hpp): the world, one split per Schedule group, a clone per
// stream that sends or receives.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#ifdef HZP_HAVE_MPI
#include <mpi.h>
#endif

#include "core/io.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/cuda/comm_state.hpp"
#include "runtime/cuda/cuda_backend.hpp"
#include "runtime/cuda/handles.hpp"

namespace hzp::runtime::cuda {

void use_device(int device) { check(cudaSetDevice(device), fmt::format("cudaSetDevice({})", device)); }

std::string new_nccl_id() {
  ncclUniqueId id{};
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return {reinterpret_cast<const char*>(&id), sizeof id};
}

double world_max(Communicators& comms, double v) {
  const DeviceBuffer buffer = device_alloc(sizeof v, "world max buffer");
  auto* d = static_cast<double*>(buffer.get());
  check(cudaMemcpy(d, &v, sizeof v, cudaMemcpyHostToDevice), "world max copy");
  check(ncclAllReduce(d, d, 1, ncclFloat64, ncclMax, comms.state().world_comm.get(), nullptr), "world max all-reduce");
  check(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost), "world max copy back");
  return v;
}

Communicators::Communicators(const core::Schedule& s, const LaunchInfo& launch, const std::string& rendezvous_dir,
                             const std::string& shared_id)
    : state_(std::make_unique<State>()) {
  State& st = *state_;
  st.rank = launch.rank;
  st.world = launch.world;
  ncclUniqueId id{};
  bool shared = false;
  if (!shared_id.empty()) {
    if (shared_id.size() != sizeof id) throw RunError("NCCL set-up: a shared id of the wrong size");
    std::memcpy(&id, shared_id.data(), sizeof id);
    shared = true;
  }
#ifdef HZP_HAVE_MPI
  if (!shared && launch.launcher == "mpirun") {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(nullptr, nullptr);
    if (st.rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    shared = true;
  }
#endif
  if (!shared && st.world > 1) {
    // File rendezvous: rank 0 writes the id (whole, by rename), the others poll.
    if (rendezvous_dir.empty()) {
      throw RunError("NCCL set-up: expected --rendezvous DIR (a path every rank sees) to share the NCCL id");
    }
    // (A fresh directory per run, as torchrun's file store wants: an old id
    // there would be read before rank 0 replaces it.)
    const std::string path = (std::filesystem::path(rendezvous_dir) / "nccl-id").string();
    if (st.rank == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      core::write_file_atomic(path, std::string(reinterpret_cast<const char*>(&id), sizeof id));
    } else {
      for (int tries = 0;; ++tries) {
        std::ifstream in(path, std::ios::binary);
        if (in && in.read(reinterpret_cast<char*>(&id), sizeof id)) break;
        if (tries > 6000) throw RunError(fmt::format("NCCL set-up: no id in {} after 60 s", path));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  } else if (!shared) {
    check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  }
  check(ncclCommInitRank(st.world_comm.out(), st.world, id, st.rank), "ncclCommInitRank (world)");
  // One split per round, every rank in every round, in the same order.
  for (const SplitRound& round : comm_split_rounds(s)) {
    const std::optional<int> colour = split_colour(s, round, st.rank);
    NcclComm comm;
    check(ncclCommSplit(st.world_comm.get(), colour ? *colour : NCCL_SPLIT_NOCOLOR, st.rank, comm.out(), nullptr),
          fmt::format("ncclCommSplit ({} groups)", core::to_string(round.kind)));
    if (colour) st.groups[*colour] = std::move(comm);
  }
  // A world clone per stream that sends or receives (NCCL forbids using one
  // communicator from two host threads at once).
  const RankPlan plan = rank_plan(s, st.rank);
  const auto& prog = s.programs[plan.program];
  for (std::size_t k = 0; k < prog.streams.size(); ++k) {
    const bool p2p = std::any_of(prog.streams[k].ops.begin(), prog.streams[k].ops.end(), [](const core::Op& op) {
      return op.kind == core::OpKind::Send || op.kind == core::OpKind::Recv;
    });
    if (!p2p) continue;
    NcclComm comm;
    check(ncclCommSplit(st.world_comm.get(), 0, st.rank, comm.out(), nullptr), "ncclCommSplit (send/recv clone)");
    st.p2p[k] = std::move(comm);
  }
}

Communicators::~Communicators() {
  for (NcclComm* c : state_->all()) c->reset();
}

void Communicators::abort() {
  for (NcclComm* c : state_->all()) {
    if (*c) ncclCommAbort(c->release());
  }
  state_->groups.clear();
  state_->p2p.clear();
}

}  // namespace hzp::runtime::cuda
