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

  // Scale-up: direct routes between the devices of each domain (ScaleUpShape).
  const ScaleUpShape su = scale_up_shape(topo);
  const int D = su.devices;
  const int devices = topo.devices();
  for (int first = 0; first < devices; first += D) {
    const int last = std::min(devices, first + D);
    std::vector<sg4::Link*> links;
    for (int l = 0; l < su.links(); ++l) {
      const std::string name = su.switched ? fmt::format("nvl-{}{}", l < D ? "out" : "in", first + l % D)
                                           : fmt::format("mesh{}.{}", first, l);
      links.push_back(zone->create_link(name, su.link_Bps)->seal());
    }
    for (int a = first; a < last; ++a) {
      for (int b = first; b < last; ++b) {
        if (a == b) continue;
        std::vector<sg4::LinkInRoute> route;
        for (int l : su.route(a - first, b - first)) {
          if (l >= 0) route.emplace_back(links[static_cast<std::size_t>(l)]);
        }
        zone->add_bypass_route(hosts[static_cast<std::size_t>(a)]->get_netpoint(),
                               hosts[static_cast<std::size_t>(b)]->get_netpoint(), nullptr, nullptr, route);
      }
    }
  }
  zone->seal();
  return hosts;
}

ScaleUpShape scale_up_shape(const topologies::Topology& topo) {
  const auto& spec = topo.spec();
  ScaleUpShape su;
  su.switched = spec.scale_up.kind == topologies::ScaleUpKind::NvSwitch;
  su.devices = spec.scale_up.domain_devices;
  const double up_Bps = spec.scale_up_bandwidth().bytes_per_s();
  su.link_Bps = su.switched ? up_Bps : up_Bps / std::max(1, su.devices - 1);
  return su;
}

}  // namespace hzp::sim::simgrid
