// The NCCL state behind Communicators, shared by the CUDA backend's sources
// (it names NCCL types, so it stays in runtime/cuda/).
#pragma once

#include <nccl.h>

#include <map>
#include <mutex>
#include <vector>

#include "runtime/cuda/cuda_backend.hpp"
#include "runtime/cuda/handles.hpp"

namespace hzp::runtime::cuda {

struct Communicators::State {
  int rank = 0, world = 1;
  NcclComm world_comm;
  std::map<int, NcclComm> groups;       // Schedule group id -> its communicator (groups holding this rank)
  std::map<std::size_t, NcclComm> p2p;  // stream index -> a clone of the world for send/recv
  /// Every communicator, the world first (the order they are destroyed in).
  std::vector<NcclComm*> all() {
    std::vector<NcclComm*> v{&world_comm};
    for (auto& [g, c] : groups) v.push_back(&c);
    for (auto& [k, c] : p2p) v.push_back(&c);
    return v;
  }
};

}  // namespace hzp::runtime::cuda
