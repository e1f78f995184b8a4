// Platform building (see platform.hpp). Measured facts this relies on
// (../shared/reference/dependencies.md): GPUs as fat-tree leaves keep one
// NIC per GPU; NVLink as bypass routes between the GPUs of a domain;
// CM02 with TCP-gamma 0 and no cross-traffic matches α-β flows exactly.
#include "sim/simgrid/platform.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>

#include <simgrid/s4u.hpp>
#include "core/error.hpp"

namespace hzp::sim::simgrid {

namespace sg4 = ::simgrid::s4u;

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
  const long long leaves = (devices + per_leaf - 1) / per_leaf;
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

std::vector<sg4::Host*> build_platform(sg4::Engine& e, const topologies::Topology& topo,
                                       const std::vector<std::string>& extra_config) {
  e.set_config("network/model:CM02");
  e.set_config("network/TCP-gamma:0");
  e.set_config("network/crosstraffic:0");
  for (const auto& cfg : extra_config) {
    try {
      e.set_config(cfg);
    } catch (const std::exception&) {  // SimGrid's message lists every setting: name the one at fault instead
      throw core::InputError(
          "command line", "--simgrid-cfg",
          fmt::format("expected a SimGrid setting key:value that SimGrid 3.32 knows, got '{}'", cfg));
    }
  }

  const auto& spec = topo.spec();
  const FatTreeShape shape = fat_tree_shape(topo);
  std::vector<sg4::Host*> hosts(static_cast<std::size_t>(topo.devices()), nullptr);
  auto leaf = [&](sg4::NetZone* zone, const std::vector<unsigned long>&, unsigned long id) {
    const int device = shape.device_at.at(id);
    sg4::Host* h = zone->create_host(device >= 0 ? fmt::format("gpu{}", device) : fmt::format("pad{}", id), 1e9);
    h->seal();
    if (device >= 0) hosts[static_cast<std::size_t>(device)] = h;
    return std::make_pair(h->get_netpoint(), static_cast<::simgrid::kernel::routing::NetPoint*>(nullptr));
  };
  std::vector<unsigned> count(shape.down.size(), 1);
  const double nic_Bps = spec.nic_bandwidth_per_device().bytes_per_s();
  sg4::NetZone* zone = sg4::create_fatTree_zone(
      "fabric", e.get_netzone_root(),
      sg4::FatTreeParams(static_cast<unsigned>(shape.down.size()), shape.down, shape.up, count),
      sg4::ClusterCallbacks(leaf), nic_Bps, 0, sg4::Link::SharingPolicy::SPLITDUPLEX);

  // Scale-up: NVSwitch = an out and an in link per device at the full
  // per-direction bandwidth; full mesh = one link per ordered pair at its share.
  const int D = spec.scale_up.domain_devices;
  const double up_Bps = spec.scale_up_bandwidth().bytes_per_s();
  const int devices = topo.devices();
  for (int first = 0; first < devices; first += D) {
    const int last = std::min(devices, first + D);
    if (spec.scale_up.kind == topologies::ScaleUpKind::NvSwitch) {
      std::vector<sg4::Link*> out, in;
      for (int d = first; d < last; ++d) {
        out.push_back(zone->create_link(fmt::format("nvl-out{}", d), up_Bps)->seal());
        in.push_back(zone->create_link(fmt::format("nvl-in{}", d), up_Bps)->seal());
      }
      for (int a = first; a < last; ++a) {
        for (int b = first; b < last; ++b) {
          if (a == b) continue;
          zone->add_bypass_route(hosts[static_cast<std::size_t>(a)]->get_netpoint(),
                                 hosts[static_cast<std::size_t>(b)]->get_netpoint(), nullptr, nullptr,
                                 {sg4::LinkInRoute(out[static_cast<std::size_t>(a - first)]),
                                  sg4::LinkInRoute(in[static_cast<std::size_t>(b - first)])});
        }
      }
    } else {
      const double pair_Bps = up_Bps / std::max(1, D - 1);
      for (int a = first; a < last; ++a) {
        for (int b = first; b < last; ++b) {
          if (a == b) continue;
          sg4::Link* l = zone->create_link(fmt::format("mesh{}-{}", a, b), pair_Bps)->seal();
          zone->add_bypass_route(hosts[static_cast<std::size_t>(a)]->get_netpoint(),
                                 hosts[static_cast<std::size_t>(b)]->get_netpoint(), nullptr, nullptr,
                                 {sg4::LinkInRoute(l)});
        }
      }
    }
  }
  zone->seal();
  return hosts;
}

}  // namespace hzp::sim::simgrid
