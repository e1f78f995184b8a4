// Collectives as aggregated flows: what each algorithm puts on the wire, one
// flow per member and link class carrying that member's total bytes, with the
// algorithm's step latencies in closed form. Pure functions of the Topology
// (no SimGrid here), so the lowering is tested by hand-computed volumes.
#pragma once

#include <vector>

#include "cost/perf_model.hpp"
#include "schedule/schedule.hpp"

namespace hzp::sim::simgrid {

/// One transfer between two devices. `wire_bytes` is what the flow puts on
/// the links: the algorithm's bytes divided by the achievable efficiency of
/// the link class it uses at this message size, so that an uncontended flow
/// lasts exactly as long as the α-β model's bandwidth term.
struct Flow {
  int src = 0;
  int dst = 0;
  double wire_bytes = 0;
};

struct FlowSet {
  cost::FlowShape shape = cost::FlowShape::Ring;
  std::vector<Flow> flows;
  double latency_s = 0;  // closed-form step latencies, added after the flows
  /// What it adds instead when it directly follows one of the same kind on
  /// the same group (sim::back_to_back), at most latency_s.
  double back_to_back_latency_s = 0;
};

/// Lowers one collective over `ranks` (ascending global ranks) with per-rank
/// `bytes` in nccl-tests' convention, on `channels` NCCL channels.
///  - Ring (all-gather, reduce-scatter, all-reduce, broadcast): members are
///    taken domain by domain; inside a domain each member sends to the next
///    over the scale-up fabric the ring's per-rank bytes B ((P−1)/P·N for
///    all-gather and reduce-scatter, 2(P−1)/P·N for all-reduce, N for
///    broadcast). Across domains channel c leaves every domain through the NIC
///    of local member c mod k to the member with the same local index in the
///    next domain (rail-aligned, as NCCL's PXN does), B/C per channel; so with
///    C a multiple of k each NIC carries B/k. A full-mesh domain spreads B over
///    all its pair links.
///  - Tree all-reduce (across domains, when the α-β model picks it): the same
///    links with B = 2N.
///  - All-to-all: direct pairwise, N/P from every member to every other.
[[nodiscard]] FlowSet lower_collective(const cost::PerfModel& pm, core::CollectiveKind kind, core::Bytes bytes,
                                       const std::vector<int>& ranks, int channels);

/// A send/recv pair: one flow and the path latency.
[[nodiscard]] FlowSet lower_p2p(const cost::PerfModel& pm, core::Bytes bytes, int src, int dst);

}  // namespace hzp::sim::simgrid
