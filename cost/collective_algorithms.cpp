// NCCL's algorithms as descriptors (collective_algorithm.hpp), and the
// registry. For a group of P ranks over D scale-up domains (NCCL's nodes)
// with k ranks in each, a collective of N bytes costs base[a][p] + Σ steps ×
// step[link][a][p] + bytes moved / bw[a][p], with (steps across the fabric at
// the NET latency, the others at the scale-up link's):
//   ring all-gather / reduce-scatter:  P−1 steps, D−1 of them across;        (P−1)/P·N
//   ring all-reduce:                   2(P−1) steps, 2(D−1) across, × 1.4
//                                      for Simple once it plateaus;          2(P−1)/P·N
//   tree all-reduce (D > 1):           2((k−1) + ⌊log2 D⌋) steps;            2N
//   NVLS all-reduce (one NVSwitch domain with SHARP): NCCL's NVLS latency;  2(P−1)/P·N
//   NVLSTree all-reduce (D > 1):       NVLS + 2⌊log2 D⌋ steps across;       2(P−1)/P·N
//   PAT all-gather / reduce-scatter (one rank per node):
//                                      ⌊log2 D⌋ steps / 3.5 + 2.8 µs × P;    (P−1)/P·N
//   ring broadcast:                    P steps;                              N
// bw[a][p] starts from the Simple ring's bus bandwidth (inside a domain the
// scale-up link at its measured ring plateau; across, the NICs the ring's
// channels leave a domain through, and the raw link), scaled and capped by
// the protocol (NCCL's factors and per-generation caps).
#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>
#include <string>

#include "cost/collective_algorithm.hpp"
#include "cost/perf_model.hpp"

namespace hzp::cost {

using core::CollectiveKind;
using A = NcclAlgorithm;
using P = NcclProtocol;

std::string_view to_string(FlowShape s) { return core::name_of(kFlowShapeNames, s); }

int CollectiveAlgorithm::channels_run(const CollectiveCall& c) const {
  return c.model.channels_used(c.protocol, c.bytes, c.shape.channels);
}

namespace {

constexpr std::size_t idx(NcclAlgorithm a) { return static_cast<std::size_t>(a); }
constexpr std::size_t idx(NcclProtocol p) { return static_cast<std::size_t>(p); }

double log2_floor(double x) { return x >= 1 ? std::floor(std::log2(x)) : 0; }

// NCCL's measured bandwidth correction for its trees at `bytes`, by
// floor(log2(bytes / 64)); 1 from 512 MiB up.
double tree_correction(const NcclTuning& t, NcclProtocol p, double bytes) {
  const double k = log2_floor(bytes / 64);
  return k < 23 ? t.tree_correction[idx(p)][static_cast<std::size_t>(k)] : 1.0;
}

// The chunk a tree moves per step and channel (enqueue.cc): the protocol's
// step; LL128's is halved while the message gives each channel too few.
double tree_chunk(const NcclTuning& t, NcclProtocol p, double bytes, int channels, int domains, double ppn) {
  double chunk = t.tree_chunk_bytes[idx(p)];
  if (p == NcclProtocol::LL128) {
    const double nsteps = 1 + log2_floor(domains) + 0.1 * ppn;
    const auto chunks = [&] { return std::floor(bytes / (channels * chunk)); };
    while (chunks() < nsteps * 64 / ppn && chunk > 131072) chunk /= 2;
    while (chunks() < nsteps * 16 / ppn && chunk > 32768) chunk /= 2;
  }
  return chunk;
}

// NCCL's node-count column: one node, two, three or more.
std::size_t node_column(int domains) { return static_cast<std::size_t>(std::clamp(domains, 1, 3) - 1); }

// The LL protocol's cap: one node's by GPU generation, else two nodes' or more.
double ll_max_GBps(const CollectiveCall& c) {
  const NcclTuning& t = c.model.tuning();
  const std::size_t col = node_column(c.shape.domains);
  return c.shape.domains == 1 ? t.ll_max_one_node_GBps[static_cast<std::size_t>(c.model.arch())]
                              : t.ll_max_GBps[std::min<std::size_t>(col, 2) - 1];
}

// A tree's bandwidth across domains: the NICs of the group's ranks in a
// domain. On two domains each domain roots one of the two trees, so each
// sends half the message across and receives the other half, both ways:
// the NICs carry half what they carry for more domains (NCCL's tuner gives
// two nodes the intra-node bandwidth).
double tree_across(const CollectiveCall& c) {
  return (c.shape.domains <= 2 ? 2 : 1) * c.group.min_ranks_per_domain * c.model.nic_GBps(c.group.top_tier);
}

// An algorithm with a row in NCCL's tuning tables: its base latency and step
// latencies are NCCL's (across domains with one rank per domain, NCCL charges
// the tree's NET step).
class NcclTableAlgorithm : public CollectiveAlgorithm {
 public:
  explicit NcclTableAlgorithm(NcclAlgorithm a) : a_(a) {}
  [[nodiscard]] std::string_view name() const override { return to_string(a_); }
  [[nodiscard]] std::optional<NcclAlgorithm> nccl() const override { return a_; }
  [[nodiscard]] std::pair<double, double> step_us(const CollectiveCall& c) const override {
    return {c.model.intra_step_us(a_, c.protocol),
            c.model.net_step_us(c.shape.per_domain == 1 ? A::Tree : a_, c.protocol, c.group.top_tier)};
  }

 protected:
  [[nodiscard]] double base_us(const CollectiveCall& c) const {
    return c.model.tuning().base_latency_us[idx(a_)][idx(c.protocol)];
  }

 private:
  NcclAlgorithm a_;
};

class Ring final : public NcclTableAlgorithm {
 public:
  Ring() : NcclTableAlgorithm(A::Ring) {}
  [[nodiscard]] FlowShape shape() const override { return FlowShape::Ring; }
  [[nodiscard]] bool considered(CollectiveKind kind, const GroupSpan&, const NcclModel&) const override {
    return kind != CollectiveKind::AllToAll;
  }
  // A ring's LL128 across domains runs well below what NCCL's model gives
  // it: on a 2-node H100 ring all-reduce (nccl-tests #309, NCCL_ALGO=Ring)
  // 1-16 MiB take 157-199 us where LL128 would take 81-170 and Simple
  // 189-264. NCCL can run it (a run may force it); hzp's tuner does not pick
  // it (validation/collectives: the development case and the held-out RoCE
  // and EFA curves all move closer, docs/VALIDATION.md).
  [[nodiscard]] bool preferred(NcclProtocol p, const GroupSpan& g) const override {
    return !(p == P::LL128 && g.domains > 1);
  }
  [[nodiscard]] AlgorithmSteps steps(const CollectiveCall& c, double intra, double inter) const override {
    const NcclTuning& t = c.model.tuning();
    const double n = c.shape.ranks, N = c.bytes;
    const int D = c.shape.domains, ch = c.shape.channels;
    double latency_us = base_us(c);
    const bool all_reduce = c.kind == CollectiveKind::AllReduce;
    if (D > 1) intra = std::max(intra, t.net_overhead_us * (c.protocol == P::Simple ? 3 : 1));
    if (c.kind == CollectiveKind::Broadcast) {
      // A chain over every rank, as NCCL's ring model costs it: n steps, of
      // which one per domain crosses the network (tuning.cc: nsteps =
      // nRanks, nInterSteps = nNodes).
      latency_us += (n - (D > 1 ? D : 0)) * intra + (D > 1 ? D * inter : 0);
      return {latency_us, N};
    }
    const double steps = (all_reduce ? 2 : 1) * (n - 1);
    const double inter_steps = D > 1 ? (all_reduce ? 2 : 1) * (D - 1) : 0;
    latency_us += (steps - inter_steps) * intra + inter_steps * inter;
    if (all_reduce && c.protocol == P::Simple && D > 1 && N / (ch * n) >= 64) {
      latency_us *= c.model.ampere_or_later() ? t.ring_plateau_factor : t.ring_plateau_factor_pre_ampere;
    }
    return {latency_us, (all_reduce ? 2 : 1) * (n - 1) / n * N};
  }
  [[nodiscard]] AlgorithmBandwidth bandwidth(const CollectiveCall& c) const override {
    const NcclTuning& t = c.model.tuning();
    const double links = c.model.ring_GBps(c.group);
    double bw = links;
    if (c.protocol == P::LL) bw = std::min(ll_max_GBps(c), bw * t.ll_ring_factor);
    if (c.protocol == P::LL128) {
      bw = std::min(
          bw * t.ll128_ring_factor,
          c.shape.channels *
              t.ring_ll128_per_channel_GBps[static_cast<std::size_t>(c.model.arch())][node_column(c.shape.domains)]);
    }
    return {links, bw};
  }
  // A broadcast is a pipeline from its root along the chain, and its ranks
  // leave it one hop apart (NCCL serialises one communicator's collectives
  // on each GPU, NVIDIA/nccl#574; a broadcast only ever sends to the next
  // peer, nccl#490). The next broadcast's root — the previous one's first
  // hop when owners broadcast in rank order, as InternEvo's
  // HybridZeroOptimizer.broadcast_params does — starts as soon as it has
  // forwarded the previous data, and each rank downstream as soon as it
  // has: back to back, a broadcast adds its launch and one hop, and the
  // chain is paid once, by the first of the run.
  [[nodiscard]] double back_to_back_latency_us(const CollectiveCall& c, double intra, double inter) const override {
    if (c.kind != CollectiveKind::Broadcast) return steps(c, intra, inter).latency_us;
    const NcclTuning& t = c.model.tuning();
    if (c.shape.domains > 1) intra = std::max(intra, t.net_overhead_us * (c.protocol == P::Simple ? 3 : 1));
    return base_us(c) + (c.shape.per_domain > 1 ? intra : inter);
  }
  // An LL ring's channel threshold is per rank (enqueue.cc).
  [[nodiscard]] int channels_run(const CollectiveCall& c) const override {
    const double threshold_ranks = c.protocol == P::LL ? c.shape.ranks : 1;
    return c.model.channels_used(c.protocol, c.bytes / threshold_ranks, c.shape.channels);
  }
};

class Tree final : public NcclTableAlgorithm {
 public:
  Tree() : NcclTableAlgorithm(A::Tree) {}
  [[nodiscard]] FlowShape shape() const override { return FlowShape::Tree; }
  [[nodiscard]] bool considered(CollectiveKind kind, const GroupSpan& g, const NcclModel&) const override {
    return kind == CollectiveKind::AllReduce && g.domains > 1;
  }
  // The same holds for the tree's LL128 across domains: on every multi-node
  // all-reduce curve here where NCCL's model picks it (HDR InfiniBand on
  // Leonardo at 8-256 nodes of 4 A100, NDR InfiniBand at 2-8 nodes of 8 H100,
  // EFA at 2 nodes of p4de and p5), 256 KiB-64 MiB run 1.5-3x longer than it
  // gives. What hzp picks instead (Tree or Ring Simple, LL), with the tree's
  // pipeline fill (fill_s), comes within about a quarter of them there
  // (validation/collectives, docs/VALIDATION.md).
  [[nodiscard]] bool preferred(NcclProtocol p, const GroupSpan& g) const override {
    return !(p == P::LL128 && g.domains > 1);
  }
  [[nodiscard]] AlgorithmSteps steps(const CollectiveCall& c, double intra, double inter) const override {
    const double latency_us = base_us(c) + 2 * ((c.shape.per_domain - 1) * intra + log2_floor(c.shape.domains) * inter);
    return {latency_us, 2 * c.bytes};
  }
  [[nodiscard]] AlgorithmBandwidth bandwidth(const CollectiveCall& c) const override {
    const NcclTuning& t = c.model.tuning();
    const auto arch = static_cast<std::size_t>(c.model.arch());
    const std::size_t col = node_column(c.shape.domains);
    const int D = c.shape.domains, ch = c.shape.channels;
    double bw = c.model.ring_GBps(c.group);
    // The scale-up link still bounds a two-domain tree.
    if (D == 2) bw = std::min(c.model.up_GBps(), tree_across(c));
    const double links = bw;
    bw = std::min(bw * t.tree_factor, ch * t.tree_per_channel_GBps[arch][col]);
    if (c.protocol == P::LL) bw = std::min(bw * t.ll_tree_factor, ll_max_GBps(c));
    if (c.protocol == P::LL128) {
      bw = std::min(bw * (D == 1 ? t.ll128_tree_factor_one_node : t.ll128_tree_factor),
                    ch * t.tree_ll128_per_channel_GBps[arch][col]);
    }
    return {links, bw * tree_correction(t, c.protocol, c.bytes)};
  }
  // A tree streams its chunks through 2((ppn - 1) + log2 D) hops, up the
  // chain and the tree and down again. NCCL's estimate charges each hop its
  // latency and the message its bandwidth, not the first chunk's crossing of
  // every hop before the pipeline streams. That chunk crosses alone, at
  // twice a channel's share of the bus bandwidth (once streaming, the up and
  // down halves share each link: the 2N bytes above). The last network hop
  // is the bandwidth term's own. Only what runs pays it; the choice is made
  // on NCCL's estimate.
  [[nodiscard]] double fill_s(const CollectiveCall& c, const CollectiveChoice& run) const override {
    const int D = c.shape.domains, ppn = c.shape.per_domain;
    const double bus_GBps = run.bus.GBps();
    if (D <= 1 || bus_GBps <= 0) return 0;
    const double chunk =
        std::min(c.bytes / run.channels, tree_chunk(c.model.tuning(), c.protocol, c.bytes, run.channels, D, ppn));
    const double up_hop_s = chunk / (2 * c.model.up_GBps() / c.shape.channels * 1e9);
    const double net_hop_s = chunk / (2 * bus_GBps / run.channels * 1e9);
    return 2 * (ppn - 1) * up_hop_s + (2 * log2_floor(D) - 1) * net_hop_s;
  }
};

// NVLink SHARP: an all-reduce in the switch, on every channel (Simple only).
class NvlsBase : public NcclTableAlgorithm {
 public:
  using NcclTableAlgorithm::NcclTableAlgorithm;
  [[nodiscard]] bool runs(NcclProtocol p) const override { return p == P::Simple; }
  [[nodiscard]] int channels_run(const CollectiveCall& c) const override { return c.shape.channels; }

 protected:
  [[nodiscard]] static bool has_nvls(CollectiveKind kind, const GroupSpan& g, const NcclModel& m) {
    return kind == CollectiveKind::AllReduce && m.nvls_GBps() > 0 && m.arch() >= NcclArch::Hopper &&
           g.max_ranks_per_domain > 1;
  }
};

class Nvls final : public NvlsBase {
 public:
  Nvls() : NvlsBase(A::Nvls) {}
  [[nodiscard]] FlowShape shape() const override { return FlowShape::Switch; }
  [[nodiscard]] bool considered(CollectiveKind kind, const GroupSpan& g, const NcclModel& m) const override {
    return has_nvls(kind, g, m) && g.domains == 1;
  }
  [[nodiscard]] AlgorithmSteps steps(const CollectiveCall& c, double intra, double) const override {
    // NCCL's NVLS latency replaces the base.
    return {intra, 2 * (c.shape.ranks - 1) / c.shape.ranks * c.bytes};
  }
  [[nodiscard]] AlgorithmBandwidth bandwidth(const CollectiveCall& c) const override {
    return {c.model.nvls_GBps(), c.model.nvls_GBps()};
  }
};

// NVLS inside each domain, a tree across.
class NvlsTree final : public NvlsBase {
 public:
  NvlsTree() : NvlsBase(A::NvlsTree) {}
  [[nodiscard]] FlowShape shape() const override { return FlowShape::Tree; }
  [[nodiscard]] bool considered(CollectiveKind kind, const GroupSpan& g, const NcclModel& m) const override {
    return has_nvls(kind, g, m) && g.domains > 1;
  }
  [[nodiscard]] AlgorithmSteps steps(const CollectiveCall& c, double intra, double inter) const override {
    return {base_us(c) + (intra + 2 * log2_floor(c.shape.domains) * inter),
            2 * (c.shape.ranks - 1) / c.shape.ranks * c.bytes};
  }
  [[nodiscard]] AlgorithmBandwidth bandwidth(const CollectiveCall& c) const override {
    const double bw = std::min(c.model.nvls_GBps(), tree_across(c));
    return {bw, bw};
  }
  // Its inter-node part is a tree: it runs at the mid-size efficiency NCCL
  // measured for its trees (the tree correction), which NCCL's tuner applies
  // to Tree only, so the choice is made without it.
  [[nodiscard]] double running_bus_GBps(const CollectiveCall& c, double bus) const override {
    return c.shape.domains > 1 ? bus * tree_correction(c.model.tuning(), c.protocol, c.bytes) : bus;
  }
};

// PAT: all-gather and reduce-scatter with one rank per domain (Simple only).
class Pat final : public NcclTableAlgorithm {
 public:
  Pat() : NcclTableAlgorithm(A::Pat) {}
  [[nodiscard]] FlowShape shape() const override { return FlowShape::Tree; }
  [[nodiscard]] bool considered(CollectiveKind kind, const GroupSpan& g, const NcclModel&) const override {
    return (kind == CollectiveKind::AllGather || kind == CollectiveKind::ReduceScatter) && g.domains > 1 &&
           g.max_ranks_per_domain == 1;
  }
  [[nodiscard]] bool runs(NcclProtocol p) const override { return p == P::Simple; }
  [[nodiscard]] AlgorithmSteps steps(const CollectiveCall& c, double, double inter) const override {
    const NcclTuning& t = c.model.tuning();
    return {base_us(c) + (log2_floor(c.shape.domains) * inter / t.pat_net_divisor + t.pat_per_rank_us * c.shape.ranks),
            (c.shape.ranks - 1) / c.shape.ranks * c.bytes};
  }
  [[nodiscard]] AlgorithmBandwidth bandwidth(const CollectiveCall& c) const override {
    const double links = c.model.ring_GBps(c.group);
    return {links, links * c.model.tuning().pat_factor};
  }
};

struct Registry {
  std::mutex mutex;
  std::vector<const CollectiveAlgorithm*> list;
  Ring ring;
  Tree tree;
  Nvls nvls;
  NvlsTree nvls_tree;
  Pat pat;
  Registry() : list{&ring, &tree, &nvls, &nvls_tree, &pat} {}
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

const std::vector<const CollectiveAlgorithm*>& collective_algorithms() { return registry().list; }

void use_collective_algorithms(const std::vector<const CollectiveAlgorithm*>& algorithms) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  r.list = algorithms;
}

const CollectiveAlgorithm* find_collective_algorithm(std::string_view name) {
  for (const CollectiveAlgorithm* a : collective_algorithms()) {
    if (a->name() == name) return a;
  }
  return nullptr;
}

const CollectiveAlgorithm& collective_algorithm(NcclAlgorithm a) {
  for (const CollectiveAlgorithm* d : collective_algorithms()) {
    if (d->nccl() == a) return *d;
  }
  throw std::logic_error("no collective algorithm " + std::string(to_string(a)));
}

CollectiveAlgorithmRegistration::CollectiveAlgorithmRegistration(std::unique_ptr<const CollectiveAlgorithm> algorithm)
    : algorithm_(std::move(algorithm)) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  if (find_collective_algorithm(algorithm_->name())) {
    throw std::logic_error("collective algorithm " + std::string(algorithm_->name()) + " registered twice");
  }
  r.list.push_back(algorithm_.get());
}

CollectiveAlgorithmRegistration::~CollectiveAlgorithmRegistration() {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  std::erase(r.list, algorithm_.get());
}

}  // namespace hzp::cost
