// A cluster of a given size: which node, scale-up domain and fabric tier each
// device sits in. What an op costs on it: cost/perf_model.hpp.
#pragma once

#include <vector>

#include "core/units.hpp"
#include "topologies/cluster_spec.hpp"

namespace hzp::topologies {

/// The most devices a cluster may have (a million).
inline constexpr int kMaxDevices = 1 << 20;

/// `devices` devices of a ClusterSpec. Device d sits on node d / devices_per_node.
/// Fabric tier i groups nodes into domains of `nodes_per_tier_domain[i]` nodes:
/// two nodes in the same tier-i domain talk through tier-i switches at most.
class Topology {
 public:
  /// Throws InputError(--gpus) when the cluster cannot have this size: not a
  /// whole number of nodes (or a divisor of one node), or more NIC ports than
  /// the fat tree's tiers can connect.
  Topology(ClusterSpec spec, int devices);

  [[nodiscard]] const ClusterSpec& spec() const { return spec_; }
  [[nodiscard]] int devices() const { return devices_; }
  [[nodiscard]] int nodes() const { return nodes_; }
  [[nodiscard]] int node_of(int device) const { return device / spec_.devices_per_node; }
  [[nodiscard]] int domain_of(int device) const { return device / spec_.scale_up.domain_devices; }
  /// The highest fabric tier a path between two nodes climbs (0 = leaf).
  [[nodiscard]] int tier_between(int node_a, int node_b) const;
  [[nodiscard]] const std::vector<long long>& nodes_per_tier_domain() const { return nodes_per_tier_domain_; }
  /// NIC ports the fabric can connect at most.
  [[nodiscard]] long long port_capacity() const { return port_capacity_; }

 private:
  ClusterSpec spec_;
  int devices_ = 0;
  int nodes_ = 0;
  std::vector<long long> nodes_per_tier_domain_;
  long long port_capacity_ = 0;
};

}  // namespace hzp::topologies
