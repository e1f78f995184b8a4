// The fat tree's shape (see platform.hpp): plain arithmetic on the
// Topology, kept out of the SimGrid module so that flow estimates and tests
// use it without loading SimGrid.
#include "sim/simgrid/platform.hpp"

#include <algorithm>
#include <cmath>

namespace hzp::sim::simgrid {

FatTreeShape fat_tree_shape(const topologies::Topology& topo) {
  const auto& spec = topo.spec();
  const int dpn = spec.devices_per_node;
  const int nodes = topo.nodes();
  const int devices = topo.devices();
  const auto& npt = topo.nodes_per_tier_domain();
  const auto& tiers = spec.scale_out.tiers;
  const bool rails = spec.scale_out.rail_optimized && spec.scale_out.nics_per_node == dpn && nodes > 1;

  FatTreeShape s;
  std::size_t levels = 1;
  while (levels < npt.size() && nodes > npt[levels - 1]) ++levels;
  if (nodes <= 1 || npt.empty() || nodes <= npt[0]) levels = 1;

  const long long leaf_nodes = npt.empty() ? nodes : std::min<long long>(npt[0], nodes);
  if (levels == 1) {
    s.down = {static_cast<unsigned>(devices)};
    s.up = {1};
    s.device_at.resize(static_cast<std::size_t>(devices));
    for (int d = 0; d < devices; ++d) s.device_at[static_cast<std::size_t>(d)] = d;
    return s;
  }
  const long long per_leaf = rails ? leaf_nodes : leaf_nodes * dpn;
  // With rails, a block of leaf_nodes nodes fills one leaf per rail, so a
  // partial last block still needs all its rails' leaves.
  const long long leaves =
      rails ? (nodes + leaf_nodes - 1) / leaf_nodes * dpn : (devices + per_leaf - 1) / per_leaf;
  s.down.push_back(static_cast<unsigned>(per_leaf));
  long long below = 1;  // leaves under one switch of the current level
  for (std::size_t i = 1; i < levels; ++i) {
    long long children = 0;
    if (i + 1 < levels) {
      children = npt[i] / npt[i - 1] * (i == 1 && rails ? dpn : 1);
    } else {
      children = (leaves + below - 1) / below;
    }
    children = std::max<long long>(1, children);
    s.down.push_back(static_cast<unsigned>(children));
    below *= children;
  }
  s.up.push_back(1);  // one NIC port per device
  for (std::size_t i = 1; i < levels; ++i) {
    const double o = tiers[i - 1].oversubscription;
    s.up.push_back(static_cast<unsigned>(std::max(1.0, std::round(s.down[i - 1] / o))));
  }
  long long positions = 1;
  for (unsigned d : s.down) positions *= d;
  s.device_at.assign(static_cast<std::size_t>(positions), -1);
  for (long long p = 0; p < positions; ++p) {
    long long device = -1;
    if (rails) {
      const long long block = p / (leaf_nodes * dpn), q = p % (leaf_nodes * dpn);
      const long long rail = q / leaf_nodes, node = block * leaf_nodes + q % leaf_nodes;
      if (node < nodes) device = node * dpn + rail;
    } else if (p < devices) {
      device = p;
    }
    s.device_at[static_cast<std::size_t>(p)] = static_cast<int>(device);
  }
  return s;
}

std::vector<int> FatTreeShape::leaf_of_device() const {
  std::vector<int> leaf;
  for (std::size_t p = 0; p < device_at.size(); ++p) {
    const int d = device_at[p];
    if (d < 0) continue;
    if (leaf.size() <= static_cast<std::size_t>(d)) leaf.resize(static_cast<std::size_t>(d) + 1, -1);
    leaf[static_cast<std::size_t>(d)] = static_cast<int>(p / down.at(0));
  }
  return leaf;
}

}  // namespace hzp::sim::simgrid
