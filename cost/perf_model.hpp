// The hardware performance model: what one op costs on a Topology when
// nothing else runs (the analytic engine's cost model; the SimGrid engine
// uses the same compute costs and these collective costs as its α terms).
#pragma once

#include <vector>

#include "core/units.hpp"
#include "cost/collective_algorithm.hpp"
#include "cost/nccl.hpp"
#include "schedule/schedule.hpp"
#include "topologies/cluster_spec.hpp"
#include "topologies/topology.hpp"

namespace hzp::cost {

using topologies::ClusterSpec;
using topologies::DeviceProfile;
using topologies::Topology;

/// Where a group of ranks sits: what bounds its collectives.
struct GroupSpan {
  int ranks = 0;
  int domains = 0;  // scale-up domains touched
  int min_ranks_per_domain = 0;
  int max_ranks_per_domain = 0;
  int top_tier = -1;  // -1: within one node; else the highest fabric tier crossed
};

/// A collective's uncontended cost as NCCL would run it: the algorithm and
/// protocol chosen, its closed-form latency and its bandwidth term, seconds.
struct CollectiveCost {
  /// The chosen algorithm's name ("pairwise": an all-to-all as grouped
  /// send/recv; a registered algorithm's for as long as it stays registered)
  /// and the shape its data takes on the wire.
  std::string_view algorithm = "ring";
  FlowShape shape = FlowShape::Ring;
  NcclProtocol protocol = NcclProtocol::Simple;
  int channels = 0;
  double latency_s = 0;
  /// The latency when it directly follows one of the same kind on the same
  /// group and stream: a broadcast pipelines behind the one before (NcclModel).
  double back_to_back_latency_s = 0;
  double transfer_s = 0;
  double moved_bytes = 0;  // bytes each rank moves over its busiest link
  /// The fraction of each link's raw bandwidth this choice reaches (the
  /// Simple ring's efficiency on it, times the protocol's and the channels'
  /// share); what the SimGrid engine inflates flow bytes by.
  double scale_up_efficiency = 1;
  double scale_out_efficiency = 1;
  [[nodiscard]] double seconds() const { return latency_s + transfer_s; }
};

/// Uncontended costs of ops on a Topology (the analytic engine's cost model;
/// the SimGrid engine uses the same compute costs and these as its α terms).
class PerfModel {
 public:
  explicit PerfModel(Topology topo) : topo_(std::move(topo)), nccl_(topo_.spec()) {}
  [[nodiscard]] const Topology& topology() const { return topo_; }
  [[nodiscard]] const NcclModel& nccl() const { return nccl_; }

  /// Roofline: max(FLOPs / (peak · efficiency), bytes / (HBM · efficiency)).
  /// GEMM efficiency from the device's table by the cube root of m·n·k.
  [[nodiscard]] core::Duration compute(const core::Op& op) const;
  /// The share of the device's tensor-core capacity a GEMM's output tiles
  /// keep busy: over the tiles the library picks from, the best of relative
  /// rate x SMs with a tile (at most all of them: a second, partial wave is
  /// spread over every SM, as cuBLAS's stream-K kernels do; measured, a
  /// 2.06-wave GEMM ran within 5 % of a 1.94-wave one) x the useful part of
  /// its padded tiles. A grouped GEMM's `batch` GEMMs share the device.
  [[nodiscard]] static double gemm_fill(const DeviceProfile::GemmTiling& t, double m, double n, double batch = 1);

  [[nodiscard]] GroupSpan span(const std::vector<int>& ranks) const;
  /// Collective time as NCCL would run it (nccl.hpp); all-to-all as direct
  /// pairwise transfers.
  [[nodiscard]] core::Duration collective(core::CollectiveKind kind, core::Bytes bytes, const GroupSpan& g) const;
  [[nodiscard]] CollectiveCost collective_cost(core::CollectiveKind kind, core::Bytes bytes, const GroupSpan& g) const;
  [[nodiscard]] core::Duration p2p(core::Bytes bytes, int src, int dst) const;
  /// The latency part of `p2p`, seconds.
  [[nodiscard]] double p2p_latency_s(int src, int dst) const;
  /// The link efficiencies of a point-to-point transfer (one device's link).
  [[nodiscard]] double scale_up_efficiency() const { return topo_.spec().scale_up.ring_efficiency; }
  [[nodiscard]] double scale_out_efficiency() const { return topo_.spec().scale_out.ring_efficiency; }

 private:
  Topology topo_;
  NcclModel nccl_;
};

}  // namespace hzp::cost
