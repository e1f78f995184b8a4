// The NCCL state behind Communicators, shared by the CUDA backend's sources
// (it names NCCL types, so it stays in runtime/cuda/).
#pragma once

#include <nccl.h>

#include <map>
#include <mutex>
#include <vector>

#include "runtime/cuda/cuda_backend.hpp"

namespace hzp::runtime::cuda {

struct Communicators::State {
  int rank = 0, world = 1;
  ncclComm_t world_comm = nullptr;
  std::map<int, ncclComm_t> groups;       // Schedule group id -> its communicator (groups holding this rank)
  std::map<std::size_t, ncclComm_t> p2p;  // stream index -> a clone of the world for send/recv
  std::vector<ncclComm_t> all() const {
    std::vector<ncclComm_t> v{world_comm};
    for (const auto& [g, c] : groups) v.push_back(c);
    for (const auto& [k, c] : p2p) v.push_back(c);
    return v;
  }
};

}  // namespace hzp::runtime::cuda
