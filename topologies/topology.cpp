// Topology sizing and the uncontended performance model (see topology.hpp).
//
// Collective formulas, for a group of P ranks and a message of N bytes
// (nccl-tests' size), with busbw the ring's bus bandwidth and α one step's
// latency (doc/PERFORMANCE.md of nccl-tests for the bus-bandwidth factors):
//   all-gather, reduce-scatter (ring):  t = Σα(pass) + (P−1)/P · N / busbw
//   all-reduce (ring):                  t = 2·Σα(pass) + 2(P−1)/P · N / busbw
//   all-reduce (tree, across domains):  t = 2·(⌈log2 D⌉·α_out + (k−1)·α_up) + 2·N / busbw
//   broadcast (pipelined ring):         t = Σα(pass) + N / busbw
//   all-to-all (direct pairwise):       t = α_out + max(N·(k−1)/P / up, N·(P−k)/P / nic)
// A ring crosses each scale-up domain boundary once per channel, so across
// domains its bus bandwidth is bounded by the NICs of the group's k devices
// in a domain (k · NIC per device, divided by the oversubscription of every
// tier it climbs) and, inside, by the scale-up links.
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

GroupSpan PerfModel::span(const std::vector<int>& ranks) const {
  GroupSpan g;
  g.ranks = static_cast<int>(ranks.size());
  std::map<int, int> per_domain;
  int min_node = INT32_MAX, max_node = -1;
  for (int r : ranks) {
    ++per_domain[topo_.domain_of(r)];
    min_node = std::min(min_node, topo_.node_of(r));
    max_node = std::max(max_node, topo_.node_of(r));
  }
  g.domains = static_cast<int>(per_domain.size());
  g.min_ranks_per_domain = INT32_MAX;
  for (auto [d, n] : per_domain) {
    g.min_ranks_per_domain = std::min(g.min_ranks_per_domain, n);
    g.max_ranks_per_domain = std::max(g.max_ranks_per_domain, n);
  }
  if (ranks.empty()) g.min_ranks_per_domain = 0;
  // Nodes are numbered so that tier domains are contiguous: the farthest pair
  // is the first and last node.
  g.top_tier = ranks.empty() ? -1 : topo_.tier_between(min_node, max_node);
  if (g.top_tier < 0 && g.domains > 1) g.top_tier = 0;  // islands of one node meet at the leaf
  return g;
}

// Bandwidths are summed and scaled in the catalog's GB/s and latencies in its
// µs, and converted once at the end: the same floating-point operations in the
// same order as ever, so that no result moves by an ulp.
double PerfModel::scale_out_GBps(int top_tier) const {
  double over = 1;
  const auto& tiers = topo_.spec().scale_out.tiers;
  for (int i = 0; i < top_tier && i < static_cast<int>(tiers.size()); ++i) {
    over = std::max(over, tiers[static_cast<std::size_t>(i)].oversubscription);
  }
  return topo_.spec().nic_GBps_per_device() / over;
}

double PerfModel::scale_out_latency_us(int top_tier) const {
  const auto& so = topo_.spec().scale_out;
  double lat = so.nic_latency_us;
  // Up through tiers 0..top and down again: 2·top + 1 switches.
  for (int i = 0; i <= top_tier && i < static_cast<int>(so.tiers.size()); ++i) {
    lat += so.tiers[static_cast<std::size_t>(i)].hop_latency_us * (i == top_tier ? 1 : 2);
  }
  return lat;
}

Bandwidth PerfModel::ring_busbw(const GroupSpan& g, Bytes bytes) const {
  const auto& spec = topo_.spec();
  const double n = static_cast<double>(bytes.count());
  const double up = spec.scale_up.bw_GBps * spec.scale_up.efficiency.at(n);
  if (g.domains <= 1) return Bandwidth::from_GBps(up);
  const double out = g.min_ranks_per_domain * scale_out_GBps(g.top_tier) * spec.scale_out.efficiency.at(n);
  return Bandwidth::from_GBps(g.max_ranks_per_domain > 1 ? std::min(up, out) : out);
}

double PerfModel::ring_pass_latency_s(const GroupSpan& g) const {
  // One pass visits P−1 edges: D of them leave a domain, the rest are scale-up links.
  const double up = topo_.spec().scale_up.latency_us;
  if (g.domains <= 1) return us_to_seconds((g.ranks - 1) * up);
  return us_to_seconds(g.domains * scale_out_latency_us(g.top_tier) + (g.ranks - g.domains) * up);
}

double PerfModel::scale_up_efficiency(Bytes bytes) const {
  return topo_.spec().scale_up.efficiency.at(static_cast<double>(bytes.count()));
}

double PerfModel::scale_out_efficiency(Bytes bytes) const {
  return topo_.spec().scale_out.efficiency.at(static_cast<double>(bytes.count()));
}

Duration PerfModel::collective(core::CollectiveKind kind, Bytes bytes, const GroupSpan& g) const {
  CollectiveCost c = collective_cost(kind, bytes, g);
  return Duration::seconds(c.latency_s + c.transfer_s);
}

CollectiveCost PerfModel::collective_cost(core::CollectiveKind kind, Bytes bytes, const GroupSpan& g) const {
  CollectiveCost c;
  if (kind == core::CollectiveKind::AllToAll) c.algorithm = Algorithm::Pairwise;
  if (g.ranks <= 1 || bytes.count() == 0) return c;
  const double P = g.ranks, N = static_cast<double>(bytes.count());
  const Bandwidth busbw = ring_busbw(g, bytes);
  const double pass = ring_pass_latency_s(g);
  switch (kind) {
    case core::CollectiveKind::AllGather:
    case core::CollectiveKind::ReduceScatter:
      c.latency_s = pass;
      c.transfer_s = transfer_seconds((P - 1) / P * N, busbw);
      break;
    case core::CollectiveKind::AllReduce: {
      c.latency_s = 2 * pass;
      c.transfer_s = transfer_seconds(2 * (P - 1) / P * N, busbw);
      if (g.domains > 1) {
        const double up = us_to_seconds(topo_.spec().scale_up.latency_us);
        const double out = us_to_seconds(scale_out_latency_us(g.top_tier));
        const double tree_latency = 2 * (std::ceil(std::log2(g.domains)) * out + (g.max_ranks_per_domain - 1) * up);
        const double tree_transfer = transfer_seconds(2 * N, busbw);
        if (tree_latency + tree_transfer < c.latency_s + c.transfer_s) {
          c = CollectiveCost{Algorithm::Tree, tree_latency, tree_transfer};
        }
      }
      break;
    }
    case core::CollectiveKind::Broadcast:
      c.latency_s = pass;
      c.transfer_s = transfer_seconds(N, busbw);
      break;
    case core::CollectiveKind::AllToAll: {
      const auto& spec = topo_.spec();
      const double k = std::min<double>(g.max_ranks_per_domain, P);
      const Bandwidth up = Bandwidth::from_GBps(spec.scale_up.bw_GBps * scale_up_efficiency(bytes));
      const double t_up = transfer_seconds(N * (k - 1) / P, up);
      double t_out = 0;
      c.latency_s = us_to_seconds(spec.scale_up.latency_us);
      if (g.domains > 1) {
        const Bandwidth nic = Bandwidth::from_GBps(scale_out_GBps(g.top_tier) * scale_out_efficiency(bytes));
        t_out = transfer_seconds(N * (P - k) / P, nic);
        c.latency_s = us_to_seconds(scale_out_latency_us(g.top_tier));
      }
      c.transfer_s = std::max(t_up, t_out);
      break;
    }
  }
  return c;
}

double PerfModel::p2p_latency_s(int src, int dst) const {
  if (topo_.domain_of(src) == topo_.domain_of(dst)) return us_to_seconds(topo_.spec().scale_up.latency_us);
  int tier = std::max(0, topo_.tier_between(topo_.node_of(src), topo_.node_of(dst)));
  return us_to_seconds(scale_out_latency_us(tier));
}

Duration PerfModel::p2p(Bytes bytes, int src, int dst) const {
  const auto& spec = topo_.spec();
  if (topo_.domain_of(src) == topo_.domain_of(dst)) {
    const Bandwidth up = Bandwidth::from_GBps(spec.scale_up.bw_GBps * scale_up_efficiency(bytes));
    return Duration::seconds(p2p_latency_s(src, dst) + transfer_seconds(bytes, up));
  }
  int tier = std::max(0, topo_.tier_between(topo_.node_of(src), topo_.node_of(dst)));
  const Bandwidth nic = Bandwidth::from_GBps(scale_out_GBps(tier) * scale_out_efficiency(bytes));
  return Duration::seconds(p2p_latency_s(src, dst) + transfer_seconds(bytes, nic));
}

Duration PerfModel::compute(const core::Op& op) const {
  const DeviceProfile& d = topo_.spec().device;
  auto it = d.peak_tflops.find(op.dtype);
  const core::FlopRate peak =
      core::FlopRate::from_TFLOPs(it != d.peak_tflops.end() ? it->second : d.peak_tflops.at(core::Dtype::Bf16));
  double eff = 1;
  switch (op.compute) {
    case core::ComputeKind::Gemm: {
      double size = 1;
      if (op.gemm)
        size = std::cbrt(static_cast<double>(op.gemm->m) * static_cast<double>(op.gemm->n) *
                         static_cast<double>(op.gemm->k));
      eff = d.gemm.at(size);
      break;
    }
    case core::ComputeKind::Attention: eff = d.attention_efficiency; break;
    default:
      eff = 0;  // bandwidth-bound kernels: bytes only
      break;
  }
  double t_flops = eff > 0 ? core::compute_seconds(op.flops, peak * eff) : 0;
  double t_bytes = transfer_seconds(op.bytes, Bandwidth::from_GBps(d.hbm_GBps) * d.hbm_efficiency);
  return Duration::seconds(std::max(t_flops, t_bytes));
}

}  // namespace hzp::topologies
