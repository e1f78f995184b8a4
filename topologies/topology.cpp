// Topology sizing: nodes, scale-up domains and fabric tiers (see topology.hpp).
#include "topologies/topology.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.hpp"

namespace hzp::topologies {

using core::Bandwidth;
using core::Bytes;
using core::Duration;
using core::transfer_seconds;
using core::us_to_seconds;

Topology::Topology(ClusterSpec spec, int devices) : spec_(std::move(spec)), devices_(devices) {
  const int dpn = spec_.devices_per_node;
  if (devices <= 0 || devices > kMaxDevices) {
    throw core::InputError("command line", "--gpus",
                           fmt::format("expected 1 to {} GPUs, got {}", kMaxDevices, devices));
  }
  if (devices < dpn) {
    if (dpn % devices != 0) {
      throw core::InputError(
          "command line", "--gpus",
          fmt::format("{} has {} devices per node: expected a divisor of {} or a multiple of it, got {}", spec_.name,
                      dpn, dpn, devices));
    }
    nodes_ = 1;
  } else {
    if (devices % dpn != 0) {
      throw core::InputError(
          "command line", "--gpus",
          fmt::format("{} has {} devices per node: expected a multiple of {}, got {}", spec_.name, dpn, dpn, devices));
    }
    nodes_ = devices / dpn;
  }
  // Fat-tree capacity: a tier-0 (leaf) switch gives radix·o/(1+o) ports to
  // NICs; a middle tier multiplies the domain by radix/2 (half its ports face
  // up), the top tier by its full radix.
  const auto& tiers = spec_.scale_out.tiers;
  long long ports = 0;
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    const double o = tiers[i].oversubscription;
    if (i == 0) {
      ports = static_cast<long long>(std::floor(tiers[i].radix * o / (1.0 + o)));
      if (tiers.size() == 1) ports = tiers[i].radix;
    } else {
      ports *= (i + 1 == tiers.size()) ? tiers[i].radix : tiers[i].radix / 2;
    }
    ports = std::min(ports, 1LL << 40);  // saturate: far beyond any fabric, and no overflow below
    // Nodes per tier-i domain: with rails, a node puts one port in each rail's
    // domain; without, all its NICs land in the same one.
    long long nodes_here = spec_.scale_out.rail_optimized ? ports : ports / spec_.scale_out.nics_per_node;
    nodes_per_tier_domain_.push_back(std::max(1LL, nodes_here));
  }
  port_capacity_ = spec_.scale_out.rail_optimized ? ports * spec_.scale_out.nics_per_node : ports;
  long long needed = static_cast<long long>(nodes_) * spec_.scale_out.nics_per_node;
  if (nodes_ > 1 && needed > port_capacity_) {
    throw core::InputError("command line", "--gpus",
                           fmt::format("{} GPUs need {} NIC ports; the {}-tier fat tree of {} connects at most {}",
                                       devices, needed, tiers.size(), spec_.name, port_capacity_));
  }
}

int Topology::tier_between(int node_a, int node_b) const {
  if (node_a == node_b) return -1;
  for (std::size_t i = 0; i < nodes_per_tier_domain_.size(); ++i) {
    if (node_a / nodes_per_tier_domain_[i] == node_b / nodes_per_tier_domain_[i]) return static_cast<int>(i);
  }
  return static_cast<int>(nodes_per_tier_domain_.size()) - 1;
}

}  // namespace hzp::topologies
