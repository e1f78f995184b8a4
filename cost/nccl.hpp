// Collectives as NCCL runs them: the algorithms and protocols NCCL's tuner
// considers for a group's shape, each costed the way NCCL's own model costs
// it (a base latency, a latency per ring or tree step by the link it
// crosses, a bus bandwidth per protocol), and the cheapest chosen as NCCL's
// tuner chooses. The constants are NCCL's (a versioned table, see
// nccl_tuning()); the bandwidths are the cluster's.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/names.hpp"
#include "schedule/schedule.hpp"
#include "topologies/cluster_spec.hpp"

namespace hzp::cost {

using topologies::ClusterSpec;
using topologies::LinkClass;
using topologies::ScaleUpKind;

struct GroupSpan;
struct GroupShape;
class CollectiveAlgorithm;

/// NCCL's algorithms, in its order; Pairwise is all-to-all as grouped
/// send/recv (which NCCL's tuner does not cost).
enum class NcclAlgorithm { Tree, Ring, CollNetDirect, CollNetChain, Nvls, NvlsTree, Pat, Pairwise };
enum class NcclProtocol { LL, LL128, Simple };
/// Their names as NCCL prints them (NCCL_ALGO, NCCL_PROTO) in lower case for the algorithms.
inline constexpr core::Names<NcclAlgorithm, 8> kNcclAlgorithmNames{{{NcclAlgorithm::Tree, "tree"},
                                                                    {NcclAlgorithm::Ring, "ring"},
                                                                    {NcclAlgorithm::CollNetDirect, "collnet_direct"},
                                                                    {NcclAlgorithm::CollNetChain, "collnet_chain"},
                                                                    {NcclAlgorithm::Nvls, "nvls"},
                                                                    {NcclAlgorithm::NvlsTree, "nvls_tree"},
                                                                    {NcclAlgorithm::Pat, "pat"},
                                                                    {NcclAlgorithm::Pairwise, "pairwise"}}};
inline constexpr core::Names<NcclProtocol, 3> kNcclProtocolNames{
    {{NcclProtocol::LL, "LL"}, {NcclProtocol::LL128, "LL128"}, {NcclProtocol::Simple, "Simple"}}};

inline constexpr int kNcclAlgorithms = 7;  // without Pairwise
inline constexpr int kNcclProtocols = 3;

[[nodiscard]] std::string_view to_string(NcclAlgorithm);
[[nodiscard]] std::string_view to_string(NcclProtocol);

/// GPU generations NCCL's bandwidth caps distinguish (by compute capability).
enum class NcclArch { Volta, Ampere, Hopper, Blackwell };
[[nodiscard]] NcclArch nccl_arch(double compute_capability);

/// NCCL's tuning constants for one NCCL version (src/graph/tuning.cc and
/// src/enqueue.cc of that version), µs and GB/s as NCCL states them.
struct NcclTuning {
  std::string version;
  std::string source;
  /// Base latency per algorithm and protocol.
  std::array<std::array<double, kNcclProtocols>, kNcclAlgorithms> base_latency_us{};
  /// Latency of one step across a link of each class.
  std::array<std::array<std::array<double, kNcclProtocols>, kNcclAlgorithms>, 3> step_latency_us{};
  /// Host cost of a network step (an x86 Intel host); a ring across nodes
  /// pays at least it (three times for Simple) on every step inside a node.
  double net_overhead_us = 0;
  /// Protocol factors on Simple's bus bandwidth: LL moves 8-byte lines of
  /// which 4 are data, LL128 120 of 128.
  double ll_ring_factor = 0;
  double ll128_ring_factor = 0;
  double tree_factor = 0;  // Simple tree vs ring
  double ll_tree_factor = 0;
  double ll128_tree_factor_one_node = 0;
  double ll128_tree_factor = 0;
  double pat_factor = 0;
  /// Caps by GPU generation and node count (one node, two, three or more).
  std::array<double, 4> ll_max_one_node_GBps{};  // by generation, one node
  std::array<double, 2> ll_max_GBps{};           // two nodes, three or more (an Intel host)
  std::array<std::array<double, 3>, 4> ring_ll128_per_channel_GBps{};
  std::array<std::array<double, 3>, 4> tree_ll128_per_channel_GBps{};
  std::array<std::array<double, 3>, 4> tree_per_channel_GBps{};
  /// Simple all-reduce rings across nodes pay their latency this many times
  /// once each rank's per-channel share reaches 64 bytes (compute capability
  /// 8.0 and up, and below).
  double ring_plateau_factor = 0;
  double ring_plateau_factor_pre_ampere = 0;
  /// Tree all-reduce bandwidth against floor(log2(bytes / 64)), per protocol.
  std::array<std::array<double, 23>, kNcclProtocols> tree_correction{};
  /// PAT latency: base + floor(log2 nodes) · NET step / divisor + per rank · ranks.
  double pat_net_divisor = 0;
  double pat_per_rank_us = 0;
  /// Data a tree moves per step and channel (enqueue.cc: the protocol's
  /// buffer over NCCL_STEPS; LL lines carry half data, LL128 lines 15 of 16
  /// words), before enqueue.cc cuts the LL128 tree's chunk for small messages.
  std::array<double, kNcclProtocols> tree_chunk_bytes{};
  /// Not NCCL's: what each peer adds to an all-to-all's latency across
  /// domains (its grouped sends and receives are issued peer by peer). The
  /// slope of the small-message floor measured on Leonardo (4 A100 a node,
  /// HDR InfiniBand; De Sensi et al., SC24 raw data): 67.6 µs at 32 GPUs,
  /// 1,977.9 µs at 1,024, (1977.9 − 67.6) / (1023 − 31) = 1.926 µs a peer.
  double all_to_all_per_peer_us = 0;
  /// After choosing, enqueue.cc spreads a collective over fewer channels
  /// while bytes < channels · threads · threshold (LL rings: threshold × ranks).
  std::array<double, kNcclProtocols> channel_threshold_bytes{};
  std::array<int, kNcclProtocols> threads_per_channel{};
};

/// The table hzp follows (one NCCL version; see nccl.cpp for its sources).
[[nodiscard]] const NcclTuning& nccl_tuning();

/// One (algorithm, protocol) NCCL would consider, costed. Times are
/// unrounded seconds (the performance model rounds its sum once).
struct CollectiveChoice {
  const CollectiveAlgorithm* algorithm = nullptr;  // a registered one (collective_algorithm.hpp)
  NcclProtocol protocol = NcclProtocol::Simple;
  int channels = 1;      // channels the message is spread over
  double latency_s = 0;  // base + steps (+ a tree's pipeline fill across domains)
  /// The latency when it directly follows one of the same kind on the same
  /// group and stream (CollectiveAlgorithm::back_to_back_latency_us).
  double back_to_back_latency_s = 0;
  double transfer_s = 0;   // bytes on the busiest link / bandwidth, over the channels used
  core::Bandwidth bus{};   // the bus bandwidth it runs at, over the channels used
  double moved_bytes = 0;  // bytes over the busiest link (a fraction of the message: (P−1)/P·N)
  /// NCCL's own estimate (every channel busy): what the choice is made on.
  double estimate_s = 0;
  /// Whether hzp's tuner picks it when it is cheapest (a run may still force
  /// one that is not, e.g. NCCL_PROTO=LL128).
  bool preferred = true;
  [[nodiscard]] double seconds() const { return latency_s + transfer_s; }
};

/// The collective cost model (see the file comment). Bandwidth bounds come
/// from the cluster: the scale-up link, and the NICs of the group's devices
/// in a domain (less the oversubscription of the tiers the group climbs),
/// each at the fraction a Simple ring reaches on it. A value type: it keeps
/// the few figures it needs, so a copy of its owner never dangles.
///
/// Units: what it hands the rest of hzp is typed (CollectiveChoice's
/// core::Bandwidth and unrounded seconds; the `*_bandwidth` and `*_s`
/// accessors). The tuner's own arithmetic — NcclTuning's table, the
/// algorithm descriptors' steps and caps, and the `*_us` / `*_GBps`
/// accessors they call — stays in µs and GB/s, the units NCCL's tuning.cc
/// states them in, so that each line can be held against NCCL's.
class NcclModel {
 public:
  explicit NcclModel(const ClusterSpec& spec, const NcclTuning& tuning = nccl_tuning());

  /// Every (algorithm, protocol) NCCL would consider for this collective and
  /// group, costed (every registered algorithm that considers it, in
  /// collective_algorithms() order); empty for a group of one or zero bytes.
  [[nodiscard]] std::vector<CollectiveChoice> candidates(core::CollectiveKind kind, double bytes,
                                                         const GroupSpan& g) const;
  /// The least-estimate preferred candidate, as NCCL's tuner picks (a
  /// zero-cost Ring Simple choice for a group of one or zero bytes).
  [[nodiscard]] CollectiveChoice choose(core::CollectiveKind kind, double bytes, const GroupSpan& g) const;

  /// Channels NCCL builds for this group (rings or trees side by side).
  [[nodiscard]] int channels(const GroupSpan& g) const;

  /// The Simple ring's bandwidth over this group at large sizes.
  [[nodiscard]] core::Bandwidth ring_bandwidth(const GroupSpan& g) const {
    return core::Bandwidth::from_GBps(ring_GBps(g));
  }
  /// What one device's scale-up link and its NICs (through the tiers up to
  /// `top_tier`) carry for a ring.
  [[nodiscard]] core::Bandwidth scale_up_bandwidth() const { return core::Bandwidth::from_GBps(scale_up_GBps()); }
  [[nodiscard]] core::Bandwidth nic_bandwidth(int top_tier) const {
    return core::Bandwidth::from_GBps(nic_GBps(top_tier));
  }
  /// A send/recv's latency within a domain (`top_tier` < 0) or across tiers, seconds.
  [[nodiscard]] double p2p_latency_s(int top_tier) const { return core::us_to_seconds(p2p_latency_us(top_tier)); }

  // In NCCL's units (see the class comment), for the tuner's arithmetic.
  /// Simple ring bus bandwidth over this group at large sizes, GB/s.
  [[nodiscard]] double ring_GBps(const GroupSpan& g) const;
  /// A scale-up link's and a NIC's achievable bandwidth for one device, GB/s
  /// (the NIC's through the tiers up to `top_tier`).
  [[nodiscard]] double scale_up_GBps() const { return up_GBps_ * up_ring_efficiency_; }
  [[nodiscard]] double nic_GBps(int top_tier) const;
  /// The scale-up link's raw bandwidth, and NVLink SHARP's (0: none), GB/s.
  [[nodiscard]] double up_GBps() const { return up_GBps_; }
  [[nodiscard]] double nvls_GBps() const { return up_GBps_ * nvls_efficiency_; }
  [[nodiscard]] NcclArch arch() const { return arch_; }
  [[nodiscard]] bool ampere_or_later() const { return ampere_or_later_; }
  /// The group as the step formulas see it.
  [[nodiscard]] GroupShape shape(const GroupSpan& g) const;
  /// The channels a message of `bytes` fills of `channels` under protocol p
  /// (enqueue.cc: a channel per threads x bytes per thread).
  [[nodiscard]] int channels_used(NcclProtocol p, double bytes, int channels) const;
  /// Latency of one step within a scale-up domain and across the fabric up to
  /// `top_tier` (NCCL's NET step plus two switch hops per tier above the leaf), µs.
  [[nodiscard]] double intra_step_us(NcclAlgorithm a, NcclProtocol p) const;
  [[nodiscard]] double net_step_us(NcclAlgorithm a, NcclProtocol p, int top_tier) const;
  /// A send/recv's latency within a domain or across tiers, µs (p2p_latency_s).
  [[nodiscard]] double p2p_latency_us(int top_tier) const;
  [[nodiscard]] const NcclTuning& tuning() const { return *t_; }

 private:
  [[nodiscard]] CollectiveChoice cost(const CollectiveAlgorithm& a, NcclProtocol p, core::CollectiveKind kind,
                                      double bytes, const GroupSpan& g) const;

  const NcclTuning* t_;
  NcclArch arch_ = NcclArch::Hopper;
  bool ampere_or_later_ = true;
  LinkClass up_link_ = LinkClass::NvLink;
  double up_GBps_ = 0;
  double up_ring_efficiency_ = 1;
  double nvls_efficiency_ = 0;  // 0: no NVLink SHARP
  double up_step_scale_ = 1;    // a calibrated step latency over NCCL's Simple ring step
  double nic_GBps_ = 0;         // per device, before oversubscription
  double nic_ring_efficiency_ = 1;
  double net_step_scale_ = 1;
  std::optional<std::array<double, kNcclProtocols>> net_step_by_protocol_us_;
  double plugin_latency_us_ = 0;  // added to NET steps in NCCL's estimate only
  double nics_per_device_ = 1;
  std::vector<double> tier_oversubscription_;
  std::vector<double> tier_hop_us_;
};

}  // namespace hzp::cost
