// The SimGrid platform of a Topology: every device a host, the scale-up
// fabric as direct routes between the devices of a domain, the scale-out
// network as a fat tree with one NIC port per device. Built in this one file.
#pragma once

#include <string>
#include <vector>

#include "sim/simgrid/scale_up_links.hpp"
#include "topologies/topology.hpp"

namespace simgrid::s4u {
class Engine;
class Host;
}  // namespace simgrid::s4u

namespace hzp::sim::simgrid {

/// The fat tree's shape in SimGrid's terms (levels of switches above the
/// leaves; down[i]: children of a level-(i+1) switch; up[i]: parents of a
/// level-i node) and which device sits at each leaf position (-1: padding).
struct FatTreeShape {
  std::vector<unsigned> down, up;
  std::vector<int> device_at;
  /// The leaf switch of each device (position / down[0]): flows between two
  /// devices of one leaf use only their NIC links; others climb the fabric.
  [[nodiscard]] std::vector<int> leaf_of_device() const;
};

/// Leaves in rail order when the cluster is rail-optimized (a leaf switch
/// holds the same NIC index of consecutive nodes), else in device order. A
/// switch of tier i has down[i] ports facing down and down[i]/oversubscription
/// facing up (at least one); only the tiers the cluster's size needs are built.
[[nodiscard]] FatTreeShape fat_tree_shape(const topologies::Topology& topo);

/// The links of every scale-up domain as build_platform makes them: an out
/// and an in port per device at the full per-direction bandwidth (NVSwitch),
/// or one link per ordered pair at its share of it (full mesh). Devices and
/// links are numbered from 0 inside their domain.
struct ScaleUpShape {
  bool switched = true;
  int devices = 1;  // per domain
  double link_Bps = 0;
  [[nodiscard]] int links() const { return switched ? 2 * devices : devices * (devices - 1); }
  /// The capacity (bytes/s) of each of a domain's `links()` links.
  [[nodiscard]] std::vector<double> capacities() const {
    return std::vector<double>(static_cast<std::size_t>(links()), link_Bps);
  }
  /// The links a flow from local device `a` to `b` (a != b) crosses.
  [[nodiscard]] LinkPair route(int a, int b) const {
    if (switched) return {a, devices + b};
    return {a * (devices - 1) + (b < a ? b : b - 1), -1};
  }
};
[[nodiscard]] ScaleUpShape scale_up_shape(const topologies::Topology& topo);

/// Builds the platform in the engine's root zone and sets the network model
/// for RDMA and NVLink (CM02, no TCP gamma, no cross-traffic), then the
/// caller's `extra_config` ("key:value"). Returns the host of each device.
/// Links have no latency: the engine adds latencies in closed form. Call once
/// per process, before any actor runs.
std::vector<::simgrid::s4u::Host*> build_platform(::simgrid::s4u::Engine& e, const topologies::Topology& topo,
                                                  const std::vector<std::string>& extra_config = {});

}  // namespace hzp::sim::simgrid
