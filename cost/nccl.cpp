// The NCCL collective cost model (see nccl.hpp). Each algorithm's steps,
// bytes and bandwidth are its descriptor's (collective_algorithms.cpp); this
// file holds NCCL's constant table, the links a group's collectives run over,
// and what every algorithm shares: a collective of N bytes (nccl-tests'
// size) costs, per algorithm a and protocol p,
//   t = base[a][p] + Σ steps × step[link][a][p] + bytes moved / bw[a][p].
// A fabric may give its NET step per protocol instead (EFA: the network's
// latency, whatever the protocol). NCCL chooses on the estimate with every
// channel busy and each NET step charged the network plugin's reported
// latency too (twice for Simple: tuning.cc's latencyInter); what runs is
// spread over only the channels the message fills (enqueue.cc: a channel per
// threads × bytes per thread), so a small collective's speed depends on its
// per-channel chunk, not on N alone.
#include "cost/nccl.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cost/collective_algorithm.hpp"
#include "cost/perf_model.hpp"

namespace hzp::cost {

using core::CollectiveKind;

std::string_view to_string(NcclAlgorithm a) { return core::name_of(kNcclAlgorithmNames, a); }
std::string_view to_string(NcclProtocol p) { return core::name_of(kNcclProtocolNames, p); }

namespace {

constexpr std::size_t idx(NcclAlgorithm a) { return static_cast<std::size_t>(a); }
constexpr std::size_t idx(NcclProtocol p) { return static_cast<std::size_t>(p); }
constexpr std::size_t idx(LinkClass l) { return static_cast<std::size_t>(l); }

NcclTuning make_tuning() {
  NcclTuning t;
  t.version = "2.28.9";
  t.source =
      "NVIDIA/nccl v2.28.9-1 (dbc86fd0): src/graph/tuning.cc (base and per-step latencies, the net overhead, "
      "protocol factors, llMaxBws, perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws, "
      "treeCorrectionFactor, the ring plateau, PAT), src/enqueue.cc and src/include/comm.h (channels and threads "
      "per message); NVIDIA/nccl-tests doc/PERFORMANCE.md (bus-bandwidth factors)";
  using A = NcclAlgorithm;
  using P = NcclProtocol;
  auto set = [](auto& row, double ll, double ll128, double simple) {
    row[idx(P::LL)] = ll;
    row[idx(P::LL128)] = ll128;
    row[idx(P::Simple)] = simple;
  };
  set(t.base_latency_us[idx(A::Tree)], 6.8, 14.0, 8.4);
  set(t.base_latency_us[idx(A::Ring)], 6.6, 14.0, 8.4);
  set(t.base_latency_us[idx(A::Pat)], 8.0, 8.0, 8.0);
  auto& nv = t.step_latency_us[idx(LinkClass::NvLink)];
  set(nv[idx(A::Tree)], 0.6, 1.25, 4.0);
  set(nv[idx(A::Ring)], 0.6, 1.9, 3.4);
  set(nv[idx(A::CollNetDirect)], 0, 0, 3.7);
  set(nv[idx(A::CollNetChain)], 0, 0, 2.8);
  set(nv[idx(A::Nvls)], 0, 0, 25);
  set(nv[idx(A::NvlsTree)], 0, 0, 25);
  set(nv[idx(A::Pat)], 0, 0, 4.0);
  auto& pci = t.step_latency_us[idx(LinkClass::Pci)];
  set(pci[idx(A::Tree)], 1.0, 1.9, 4.0);
  set(pci[idx(A::Ring)], 1.0, 2.5, 5.7);
  set(pci[idx(A::CollNetDirect)], 0, 0, 3.7);
  set(pci[idx(A::CollNetChain)], 0, 0, 2.8);
  set(pci[idx(A::Pat)], 0, 0, 4.0);
  auto& net = t.step_latency_us[idx(LinkClass::Net)];
  set(net[idx(A::Tree)], 5.0, 8.5, 14);
  set(net[idx(A::Ring)], 2.7, 4.0, 14.0);
  set(net[idx(A::CollNetDirect)], 0, 0, 31);
  set(net[idx(A::CollNetChain)], 0, 0, 30);
  set(net[idx(A::Nvls)], 0, 0, 18);
  set(net[idx(A::NvlsTree)], 0, 0, 20.9);
  set(net[idx(A::Pat)], 0, 0, 14);
  t.net_overhead_us = 1.0;
  t.ll_ring_factor = 0.5;
  t.ll128_ring_factor = 0.92;
  t.tree_factor = 0.92;
  t.ll_tree_factor = 1.0 / 3.8;
  t.ll128_tree_factor_one_node = 7.0 / 9.0;
  t.ll128_tree_factor = 120.0 / 128.0;
  t.pat_factor = 0.75;
  // Rows: Volta, Ampere, Hopper, Blackwell; columns: one node, two, three or more.
  t.ll_max_one_node_GBps = {39.0, 87.7, 141.0, 282.0};
  t.ll_max_GBps = {39.0, 20.4};
  t.ring_ll128_per_channel_GBps = {{{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {73.4, 34.6, 73.4}}};
  t.tree_ll128_per_channel_GBps = {{{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}}};
  t.tree_per_channel_GBps = {{{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}}};
  t.ring_plateau_factor = 1.4;
  t.ring_plateau_factor_pre_ampere = 1.9;
  t.tree_correction[idx(P::LL)] = {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7,  .7,  .7,  .6, .5,
                                   .4,  .4,  .5,  .6,  .7, .8, .9, 1.0, 1.0, 1.0, 1.0};
  t.tree_correction[idx(P::LL128)] = {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7,  .6, .6,
                                      .6,  .6,  .6,  .6,  .8,  .9, .9, .9, .9, 1.0, 1.0};
  t.tree_correction[idx(P::Simple)] = {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5,
                                       .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9};
  t.pat_net_divisor = 3.5;
  t.pat_per_rank_us = 2.8;
  // init.cc's default buffers over NCCL_STEPS (8): LL 8 lines x 512
  // threads x 16 B (8 of data), LL128 120 words x 640 threads x 8 B (15 of
  // 16 words data), Simple 4 MiB.
  t.tree_chunk_bytes = {8.0 * 512 * 16 / 8 / 2, 120.0 * 640 * 8 / 8 * 15 / 16, 4194304.0 / 8};
  t.all_to_all_per_peer_us = (1977.9 - 67.6) / (1023 - 31);  // see nccl.hpp: not NCCL's, measured
  t.channel_threshold_bytes = {8, 8, 64};
  t.threads_per_channel = {512, 640, 512};
  return t;
}

}  // namespace

NcclArch nccl_arch(double compute_capability) {
  if (compute_capability >= 10) return NcclArch::Blackwell;
  if (compute_capability >= 9) return NcclArch::Hopper;
  if (compute_capability >= 8) return NcclArch::Ampere;
  return NcclArch::Volta;
}

const NcclTuning& nccl_tuning() {
  static const NcclTuning t = make_tuning();
  return t;
}

NcclModel::NcclModel(const ClusterSpec& spec, const NcclTuning& tuning) : t_(&tuning) {
  using A = NcclAlgorithm;
  using P = NcclProtocol;
  arch_ = nccl_arch(spec.device.compute_capability);
  ampere_or_later_ = spec.device.compute_capability >= 8;
  up_link_ = spec.scale_up.link;
  up_GBps_ = spec.scale_up.bw_GBps;
  up_ring_efficiency_ = spec.scale_up.ring_efficiency;
  nvls_efficiency_ = spec.scale_up.kind == ScaleUpKind::NvSwitch ? spec.scale_up.nvls_efficiency : 0;
  const double nccl_up = tuning.step_latency_us[idx(up_link_)][idx(A::Ring)][idx(P::Simple)];
  if (spec.scale_up.step_latency_us && nccl_up > 0) up_step_scale_ = *spec.scale_up.step_latency_us / nccl_up;
  nic_GBps_ = spec.nic_GBps_per_device();
  nic_ring_efficiency_ = spec.scale_out.ring_efficiency;
  const double nccl_net = tuning.step_latency_us[idx(LinkClass::Net)][idx(A::Ring)][idx(P::Simple)];
  if (spec.scale_out.step_latency_us && nccl_net > 0) net_step_scale_ = *spec.scale_out.step_latency_us / nccl_net;
  net_step_by_protocol_us_ = spec.scale_out.step_latency_by_protocol_us;
  plugin_latency_us_ = spec.scale_out.plugin_latency_us;
  nics_per_device_ = static_cast<double>(spec.scale_out.nics_per_node) / spec.devices_per_node;
  for (const auto& tier : spec.scale_out.tiers) {
    tier_oversubscription_.push_back(tier.oversubscription);
    tier_hop_us_.push_back(tier.hop_latency_us);
  }
}

double NcclModel::nic_GBps(int top_tier) const {
  double over = 1;
  for (int i = 0; i < top_tier && i < static_cast<int>(tier_oversubscription_.size()); ++i) {
    over = std::max(over, tier_oversubscription_[static_cast<std::size_t>(i)]);
  }
  return nic_GBps_ / over * nic_ring_efficiency_;
}

double NcclModel::intra_step_us(NcclAlgorithm a, NcclProtocol p) const {
  return t_->step_latency_us[idx(up_link_)][idx(a)][idx(p)] * up_step_scale_;
}

double NcclModel::net_step_us(NcclAlgorithm a, NcclProtocol p, int top_tier) const {
  // NCCL's NET step includes the leaf; a path to tier t climbs 2t more switches.
  double hops = 0;
  for (int i = 1; i <= top_tier && i < static_cast<int>(tier_hop_us_.size()); ++i) {
    hops += tier_hop_us_[static_cast<std::size_t>(i)] * 2;
  }
  if (net_step_by_protocol_us_) return (*net_step_by_protocol_us_)[idx(p)] + hops;
  return t_->step_latency_us[idx(LinkClass::Net)][idx(a)][idx(p)] * net_step_scale_ + hops;
}

double NcclModel::p2p_latency_us(int top_tier) const {
  const double base = t_->base_latency_us[idx(NcclAlgorithm::Ring)][idx(NcclProtocol::Simple)];
  if (top_tier < 0) return base + intra_step_us(NcclAlgorithm::Ring, NcclProtocol::Simple);
  return base + net_step_us(NcclAlgorithm::Ring, NcclProtocol::Simple, top_tier);
}

int NcclModel::channels(const GroupSpan& g) const {
  // Inside one NVSwitch domain NCCL runs 32 channels on Hopper and later (16
  // rings doubled), 16 elsewhere. Across domains, two channels per NIC the
  // ring leaves a domain through, at most 16: a ring crossing a domain
  // boundary uses one NIC per channel, so 8 NICs a crossing at most (GB200
  // NVL72 racks, 72 NICs each, reach 406 GB/s across racks: 8 x 50 GB/s;
  // CoreWeave's nccl-tests README).
  if (g.domains <= 1) return up_link_ == LinkClass::NvLink && arch_ >= NcclArch::Hopper ? 32 : 16;
  const double nics = g.min_ranks_per_domain * nics_per_device_;
  return static_cast<int>(std::clamp(std::round(2 * nics), 2.0, 16.0));
}

double NcclModel::ring_GBps(const GroupSpan& g) const {
  if (g.domains <= 1) return scale_up_GBps();
  // Across domains the scale-up plateau of a ring inside one domain does not
  // bind: two- and eight-node H100 rings reach 391-393 GB/s bus bandwidth
  // over 8 NICs of 400 Gb/s (nccl-tests issue #309) where the one-node ring
  // stops at 359 (0.80 of 450). The NICs the channels use bound it, and the
  // raw link.
  const double nics = std::min(g.min_ranks_per_domain * nics_per_device_, channels(g) / 2.0);
  const double out = nics / nics_per_device_ * nic_GBps(g.top_tier);
  return g.max_ranks_per_domain > 1 ? std::min(up_GBps_, out) : out;
}

int NcclModel::channels_used(NcclProtocol p, double bytes, int channels) const {
  const double per_channel = t_->threads_per_channel[idx(p)] * t_->channel_threshold_bytes[idx(p)];
  const double fill = per_channel > 0 ? std::floor(bytes / per_channel) : channels;
  return static_cast<int>(std::clamp(fill, 1.0, static_cast<double>(channels)));
}

GroupShape NcclModel::shape(const GroupSpan& g) const {
  const int D = g.domains;
  return {static_cast<double>(g.ranks), D, std::max(1, g.ranks / std::max(1, D)), channels(g)};
}

CollectiveChoice NcclModel::cost(const CollectiveAlgorithm& a, NcclProtocol p, CollectiveKind kind, double N,
                                 const GroupSpan& g) const {
  const CollectiveCall call{kind, p, N, g, shape(g), *this};
  CollectiveChoice c;
  c.algorithm = &a;
  c.protocol = p;
  const AlgorithmBandwidth bw = a.bandwidth(call);

  // Steps: inside a domain at the link's latency, across at the NET one.
  // NCCL's estimate adds the network plugin's reported latency to each NET
  // step, twice for Simple; the time a step takes does not include it.
  const auto [intra, inter] = a.step_us(call);
  const double plugin = plugin_latency_us_ * (p == NcclProtocol::Simple ? 2 : 1);
  const AlgorithmSteps run = a.steps(call, intra, inter);
  const double estimate_us = plugin > 0 ? a.steps(call, intra, inter + plugin).latency_us : run.latency_us;
  c.moved_bytes = run.moved;
  c.latency_s = run.latency_us * 1e-6;
  c.estimate_s = bw.bus > 0
                     ? estimate_us * 1e-6 + core::transfer_seconds(c.moved_bytes, core::Bandwidth::from_GBps(bw.bus))
                     : std::numeric_limits<double>::infinity();

  // What runs: a message that fills fewer channels runs on fewer (after the
  // choice, as in enqueue.cc); a channel carries its share of the links, and
  // the protocol's own caps stay.
  c.channels = a.channels_run(call);
  c.bus = core::Bandwidth::from_GBps(
      a.running_bus_GBps(call, std::min(bw.bus, bw.links * c.channels / call.shape.channels)));
  c.transfer_s = c.bus > core::Bandwidth{} ? core::transfer_seconds(c.moved_bytes, c.bus)
                                           : std::numeric_limits<double>::infinity();
  const double fill = a.fill_s(call, c);
  c.latency_s += fill;
  c.back_to_back_latency_s = a.back_to_back_latency_us(call, intra, inter) * 1e-6 + fill;
  return c;
}

std::vector<CollectiveChoice> NcclModel::candidates(CollectiveKind kind, double bytes, const GroupSpan& g) const {
  std::vector<CollectiveChoice> out;
  if (g.ranks <= 1 || bytes <= 0 || kind == CollectiveKind::AllToAll) return out;
  for (const CollectiveAlgorithm* a : collective_algorithms()) {
    if (!a->considered(kind, g, *this)) continue;
    for (NcclProtocol p : {NcclProtocol::LL, NcclProtocol::LL128, NcclProtocol::Simple}) {
      if (!a->runs(p)) continue;
      out.push_back(cost(*a, p, kind, bytes, g));
      out.back().preferred = a->preferred(p, g);
    }
  }
  return out;
}

CollectiveChoice NcclModel::choose(CollectiveKind kind, double bytes, const GroupSpan& g) const {
  const std::vector<CollectiveChoice> all = candidates(kind, bytes, g);
  if (all.empty()) {
    CollectiveChoice none;
    none.algorithm = &collective_algorithm(NcclAlgorithm::Ring);
    return none;
  }
  const CollectiveChoice* best = nullptr;
  for (const auto& c : all) {
    if (c.preferred && (!best || c.estimate_s < best->estimate_s)) best = &c;
  }
  return best ? *best : all.front();
}

}  // namespace hzp::cost
