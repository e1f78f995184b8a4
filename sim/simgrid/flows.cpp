// Collective lowering to aggregated flows (see flows.hpp).
#include "sim/simgrid/flows.hpp"

#include <algorithm>
#include <map>

namespace hzp::sim::simgrid {
namespace {

using core::CollectiveKind;

// Members grouped by scale-up domain, domains ascending, ranks ascending.
std::vector<std::vector<int>> by_domain(const topologies::Topology& topo, const std::vector<int>& ranks) {
  std::map<int, std::vector<int>> m;
  for (int r : ranks) m[topo.domain_of(r)].push_back(r);
  std::vector<std::vector<int>> out;
  out.reserve(m.size());
  for (auto& [d, members] : m) {
    std::sort(members.begin(), members.end());
    out.push_back(std::move(members));
  }
  return out;
}

// Sums flows between the same pair, in a stable (src, dst) order.
std::vector<Flow> aggregate(std::map<std::pair<int, int>, double>& bytes) {
  std::vector<Flow> flows;
  flows.reserve(bytes.size());
  for (const auto& [pair, b] : bytes) {
    if (b > 0) flows.push_back(Flow{pair.first, pair.second, b});
  }
  return flows;
}

}  // namespace

FlowSet lower_collective(const cost::PerfModel& pm, CollectiveKind kind, core::Bytes bytes,
                         const std::vector<int>& ranks, int channels) {
  FlowSet fs;
  const cost::GroupSpan span = pm.span(ranks);
  const cost::CollectiveCost cost = pm.collective_cost(kind, bytes, span);
  fs.shape = cost.shape;
  fs.latency_s = cost.latency_s;
  fs.back_to_back_latency_s = std::min(cost.latency_s, cost.back_to_back_latency_s);
  if (ranks.size() <= 1 || bytes.count() == 0) return fs;

  const topologies::Topology& topo = pm.topology();
  const bool full_mesh = topo.spec().scale_up.kind == topologies::ScaleUpKind::FullMesh;
  const double P = static_cast<double>(ranks.size());
  const double N = static_cast<double>(bytes.count());
  const double eff_up = cost.scale_up_efficiency;
  const double eff_out = cost.scale_out_efficiency;
  std::map<std::pair<int, int>, double> wire;

  if (kind == CollectiveKind::AllToAll) {
    for (int src : ranks) {
      for (int dst : ranks) {
        if (src == dst) continue;
        const bool inside = topo.domain_of(src) == topo.domain_of(dst);
        wire[{src, dst}] += N / P / (inside ? eff_up : eff_out);
      }
    }
    fs.flows = aggregate(wire);
    return fs;
  }

  // Each rank's bytes as the chosen algorithm moves them ((P−1)/P·N for a
  // ring all-gather, 2N for a tree all-reduce, ...), on a chain through each
  // domain and across domains on the channels' NICs: the per-link volume of
  // ring, tree and switch shapes alike (cost/collective_algorithm.hpp).
  const double B = cost.moved_bytes;

  const auto domains = by_domain(topo, ranks);
  // Inside each domain: the ring's next member (NVSwitch) or every other member (full mesh).
  for (const auto& members : domains) {
    const std::size_t k = members.size();
    if (k < 2) continue;
    for (std::size_t j = 0; j < k; ++j) {
      if (full_mesh) {
        for (std::size_t i = 0; i < k; ++i) {
          if (i != j) wire[{members[j], members[i]}] += B / static_cast<double>(k - 1) / eff_up;
        }
      } else {
        wire[{members[j], members[(j + 1) % k]}] += B / eff_up;
      }
    }
  }
  // Across domains: channel c leaves domain d through local member c mod k_d.
  const std::size_t D = domains.size();
  if (D > 1) {
    const int C = std::max(1, channels);
    for (int c = 0; c < C; ++c) {
      for (std::size_t d = 0; d < D; ++d) {
        const auto& here = domains[d];
        const auto& next = domains[(d + 1) % D];
        const int src = here[static_cast<std::size_t>(c) % here.size()];
        const int dst = next[static_cast<std::size_t>(c) % next.size()];
        wire[{src, dst}] += B / C / eff_out;
      }
    }
  }
  fs.flows = aggregate(wire);
  return fs;
}

FlowSet lower_p2p(const cost::PerfModel& pm, core::Bytes bytes, int src, int dst) {
  FlowSet fs;
  fs.latency_s = pm.p2p_latency_s(src, dst);
  if (bytes.count() == 0 || src == dst) return fs;
  const bool inside = pm.topology().domain_of(src) == pm.topology().domain_of(dst);
  const double eff = inside ? pm.scale_up_efficiency() : pm.scale_out_efficiency();
  fs.flows.push_back(Flow{src, dst, static_cast<double>(bytes.count()) / eff});
  return fs;
}

}  // namespace hzp::sim::simgrid
