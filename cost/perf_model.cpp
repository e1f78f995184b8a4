// The uncontended performance model (see perf_model.hpp). Collectives cost
// what NCCL's own model says (nccl.hpp, nccl.cpp); a ring crosses each
// scale-up domain boundary once per channel, so across domains its bus
// bandwidth is bounded by the NICs of the group's k devices in a domain
// (k · NIC per device, divided by the oversubscription of every tier it
// climbs) and, inside, by the scale-up links.
#include "cost/perf_model.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"

namespace hzp::cost {

using core::Bandwidth;
using core::Bytes;
using core::Duration;
using core::transfer_seconds;
using core::us_to_seconds;

GroupSpan PerfModel::span(const std::vector<int>& ranks) const {
  GroupSpan g;
  g.ranks = static_cast<int>(ranks.size());
  // Ranks per scale-up domain: counted in a table over the domains' range
  // where it is dense (a group's ranks are devices: it always is), else
  // sorted and counted in runs.
  int min_node = INT32_MAX, max_node = -1, lo = INT32_MAX, hi = INT32_MIN;
  for (int r : ranks) {
    lo = std::min(lo, topo_.domain_of(r));
    hi = std::max(hi, topo_.domain_of(r));
    min_node = std::min(min_node, topo_.node_of(r));
    max_node = std::max(max_node, topo_.node_of(r));
  }
  std::vector<int> per_domain;
  const std::int64_t range = ranks.empty() ? 0 : static_cast<std::int64_t>(hi) - lo + 1;
  if (range <= 4 * static_cast<std::int64_t>(ranks.size()) + 64) {
    per_domain.assign(static_cast<std::size_t>(range), 0);
    for (int r : ranks) ++per_domain[static_cast<std::size_t>(topo_.domain_of(r) - lo)];
  } else {
    std::vector<int> domains;
    domains.reserve(ranks.size());
    for (int r : ranks) domains.push_back(topo_.domain_of(r));
    std::sort(domains.begin(), domains.end());
    for (std::size_t i = 0; i < domains.size(); ++i) {
      if (i == 0 || domains[i] != domains[i - 1]) per_domain.push_back(0);
      ++per_domain.back();
    }
  }
  g.min_ranks_per_domain = INT32_MAX;
  for (int n : per_domain) {
    if (n == 0) continue;
    ++g.domains;
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

Duration PerfModel::collective(core::CollectiveKind kind, Bytes bytes, const GroupSpan& g) const {
  return Duration::seconds(collective_cost(kind, bytes, g).seconds());
}

CollectiveCost PerfModel::collective_cost(core::CollectiveKind kind, Bytes bytes, const GroupSpan& g) const {
  CollectiveCost c;
  if (kind == core::CollectiveKind::AllToAll) {
    c.algorithm = to_string(NcclAlgorithm::Pairwise);
    c.shape = FlowShape::Pairwise;
  }
  c.scale_up_efficiency = topo_.spec().scale_up.ring_efficiency;
  c.scale_out_efficiency = topo_.spec().scale_out.ring_efficiency;
  if (g.ranks <= 1 || bytes.count() <= 0) return c;
  const double P = g.ranks, N = static_cast<double>(bytes.count());
  if (kind == core::CollectiveKind::AllToAll) {
    // Every rank sends N/P to each peer at once: k−1 peers over the scale-up
    // links, P−k over the NIC (NCCL runs it as grouped send/recv). Across
    // domains each of the P − 1 peers adds its issue to the latency
    // (NcclTuning::all_to_all_per_peer_us: measured, not NCCL's model).
    const double k = std::min<double>(g.max_ranks_per_domain, P);
    const double t_up = transfer_seconds(N * (k - 1) / P, nccl_.scale_up_bandwidth());
    const double t_out = g.domains > 1 ? transfer_seconds(N * (P - k) / P, nccl_.nic_bandwidth(g.top_tier)) : 0;
    const double peers_us = g.domains > 1 ? (P - 1) * nccl_.tuning().all_to_all_per_peer_us : 0;
    c.latency_s = us_to_seconds(nccl_.p2p_latency_us(g.domains > 1 ? g.top_tier : -1) + peers_us);
    c.back_to_back_latency_s = c.latency_s;
    c.transfer_s = std::max(t_up, t_out);
    c.channels = 1;
    return c;
  }
  const CollectiveChoice choice = nccl_.choose(kind, N, g);
  c.algorithm = choice.algorithm->name();
  c.shape = choice.algorithm->shape();
  c.protocol = choice.protocol;
  c.channels = choice.channels;
  c.moved_bytes = choice.moved_bytes;
  c.latency_s = choice.latency_s;
  c.back_to_back_latency_s = choice.back_to_back_latency_s;
  c.transfer_s = choice.transfer_s;
  // The protocol's and the channels' share of the Simple ring's bandwidth.
  const Bandwidth ring = nccl_.ring_bandwidth(g);
  const double share = ring > Bandwidth{} ? choice.bus / ring : 1;
  // Across domains the ring's scale-up links run at their raw rate (nccl.cpp, ring_GBps).
  if (g.domains > 1) c.scale_up_efficiency = 1;
  c.scale_up_efficiency *= share;
  c.scale_out_efficiency *= share;
  return c;
}

double PerfModel::p2p_latency_s(int src, int dst) const {
  if (topo_.domain_of(src) == topo_.domain_of(dst)) return nccl_.p2p_latency_s(-1);
  const int tier = std::max(0, topo_.tier_between(topo_.node_of(src), topo_.node_of(dst)));
  return nccl_.p2p_latency_s(tier);
}

Duration PerfModel::p2p(Bytes bytes, int src, int dst) const {
  if (topo_.domain_of(src) == topo_.domain_of(dst)) {
    return Duration::seconds(p2p_latency_s(src, dst) + transfer_seconds(bytes, nccl_.scale_up_bandwidth()));
  }
  const int tier = std::max(0, topo_.tier_between(topo_.node_of(src), topo_.node_of(dst)));
  return Duration::seconds(p2p_latency_s(src, dst) + transfer_seconds(bytes, nccl_.nic_bandwidth(tier)));
}

namespace {

// The efficiency of a fused attention op: its kernel family's, forward or
// backward (a recomputed forward is a forward), else the device's generic figure.
double attention_efficiency(const DeviceProfile& d, const core::Op& op) {
  const core::Op::Compute& c = op.compute();
  if (!c.attention_kernel) return d.attention_efficiency;
  auto it = d.attention_kernels.find(*c.attention_kernel);
  if (it == d.attention_kernels.end()) return d.attention_efficiency;
  return op.role == core::OpRole::Backward ? it->second.backward : it->second.forward;
}

// Offload (ComputeKind::HostCopy, HostOptimizer): a copy at the device's host
// link per direction; the CPU optimizer step at the device's share of the
// node's host memory bandwidth (every device of the node updates at once).
Duration host_cost(const ClusterSpec& c, const core::Op& op) {
  const core::Op::Compute& work = op.compute();
  if (!c.host) {
    throw core::InputError("schedule", op.name,
                           fmt::format("an offload op ({}) on cluster '{}', which does not describe node.host",
                                       core::to_string(work.kind), c.name));
  }
  const double GBps =
      work.kind == core::ComputeKind::HostCopy ? c.host->link_GBps : c.host->memory_GBps / c.devices_per_node;
  return Duration::seconds(transfer_seconds(work.bytes, Bandwidth::from_GBps(GBps)));
}

}  // namespace

double PerfModel::gemm_fill(const DeviceProfile::GemmTiling& t, double m, double n, double batch) {
  if (!(m >= 1 && n >= 1 && batch >= 1)) return 1;  // no tiles to judge (a Schedule file's empty GEMM)
  double best = 0;
  for (const auto& tile : t.tiles) {
    const double tiles = batch * std::ceil(m / tile.m) * std::ceil(n / tile.n);
    const double busy = std::min(1.0, tiles / t.sms);
    const double useful = batch * m * n / (tiles * tile.m * tile.n);
    best = std::max(best, tile.relative * busy * useful);
  }
  return best;
}

Duration PerfModel::compute(const core::Op& op) const {
  const core::Op::Compute& c = op.compute();
  const DeviceProfile& d = topo_.spec().device;
  if (c.kind == core::ComputeKind::HostCopy || c.kind == core::ComputeKind::HostOptimizer) {
    return host_cost(topo_.spec(), op);
  }
  auto it = d.peak_tflops.find(c.dtype);
  const core::FlopRate peak =
      core::FlopRate::from_TFLOPs(it != d.peak_tflops.end() ? it->second : d.peak_tflops.at(core::Dtype::Bf16));
  double eff = 1;
  switch (c.kind) {
    case core::ComputeKind::Gemm: {
      double size = 1;
      if (c.gemm)
        size =
            std::cbrt(static_cast<double>(c.gemm->m) * static_cast<double>(c.gemm->n) * static_cast<double>(c.gemm->k));
      eff = d.gemm.at(size);
      double ceiling = d.gemm.max();
      if (c.dtype == core::Dtype::Fp8 && !d.gemm_fp8.points.empty()) {
        // An FP8 GEMM at its measured fraction of the fp8 peak, never slower
        // than the bf16 GEMM of its shape; below the smallest measured size
        // it gets no more than the bf16 rate (nothing measured says more).
        const double bf16 = eff * d.peak_tflops.at(core::Dtype::Bf16) / peak.TFLOPs();
        eff = size < d.gemm_fp8.points.front().first ? bf16 : std::max(bf16, d.gemm_fp8.at(size));
        ceiling = std::max(d.gemm_fp8.max(), bf16);
      }
      if (c.gemm && d.gemm_tiling) {
        // The curves hold square GEMMs; this shape fills the device more or
        // less than the square of its size does (never above the curve's best).
        const auto& g = *c.gemm;
        const double ratio = gemm_fill(*d.gemm_tiling, static_cast<double>(g.m), static_cast<double>(g.n),
                                       static_cast<double>(g.batch)) /
                             gemm_fill(*d.gemm_tiling, size, size);
        eff = std::min(eff * ratio, std::max(eff, ceiling));
      }
      break;
    }
    case core::ComputeKind::Attention: eff = attention_efficiency(d, op); break;
    default:
      eff = 0;  // bandwidth-bound kernels: bytes only
      break;
  }
  eff *= d.tensor_clock_scale;  // under a power cap the tensor cores run at its clock
  double t_flops = eff > 0 ? core::compute_seconds(c.flops, peak * eff) : 0;
  double t_bytes = transfer_seconds(c.bytes, Bandwidth::from_GBps(d.hbm_GBps) * d.hbm_efficiency);
  // A bandwidth-bound op pays each of its kernels' launch, ramp and tail on
  // the device (GEMM and attention efficiencies were measured with theirs).
  const double t_tails = eff > 0 ? 0 : d.kernel_tail_us * 1e-6 * c.kernels;
  return Duration::seconds(std::max(t_flops, t_bytes) + t_tails);
}

}  // namespace hzp::cost
