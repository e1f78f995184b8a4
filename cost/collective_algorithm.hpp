// One descriptor per collective algorithm: which collectives and groups it
// serves, its protocols, its steps and the bytes it moves, its bandwidth caps,
// what only running it costs, and the shape its data takes on the wire (what
// the SimGrid engine lowers to flows). NcclModel costs every registered
// algorithm the same way (nccl.hpp); adding one is a descriptor and a
// register_collective_algorithm call, in one file.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "cost/nccl.hpp"

namespace hzp::cost {

/// How an algorithm's data moves between ranks. The SimGrid engine puts each
/// rank's bytes on a chain through every domain's members (and across
/// domains on the channels' NICs) for Ring, Tree and Switch alike: a tree's
/// and NVLink SHARP's per-link volume is each rank's bytes, as a ring's is.
/// Pairwise: every rank to every other (all-to-all).
enum class FlowShape { Ring, Tree, Switch, Pairwise };
inline constexpr core::Names<FlowShape, 4> kFlowShapeNames{{{FlowShape::Ring, "ring"},
                                                            {FlowShape::Tree, "tree"},
                                                            {FlowShape::Switch, "switch"},
                                                            {FlowShape::Pairwise, "pairwise"}}};
[[nodiscard]] std::string_view to_string(FlowShape s);

/// A group as the step formulas see it: ranks, domains, ranks per domain (at
/// least one) and the channels NCCL builds.
struct GroupShape {
  double ranks = 0;
  int domains = 1, per_domain = 1, channels = 1;
};

/// One collective of one (algorithm, protocol) being costed.
struct CollectiveCall {
  core::CollectiveKind kind = core::CollectiveKind::AllReduce;
  NcclProtocol protocol = NcclProtocol::Simple;
  double bytes = 0;  // N, nccl-tests' size
  const GroupSpan& group;
  GroupShape shape;
  const NcclModel& model;
};

/// Base latency plus steps, and the bytes moved over the busiest link.
struct AlgorithmSteps {
  double latency_us = 0;
  double moved = 0;
};

/// Bus bandwidth with every channel busy, GB/s: what the links alone carry,
/// and with the protocol's factors and caps.
struct AlgorithmBandwidth {
  double links = 0;
  double bus = 0;
};

class CollectiveAlgorithm {
 public:
  virtual ~CollectiveAlgorithm() = default;
  /// Its name as NCCL_ALGO spells it, in lower case (and in case files).
  [[nodiscard]] virtual std::string_view name() const = 0;
  /// Its row of NCCL's tuning tables (none for an algorithm NCCL lacks).
  [[nodiscard]] virtual std::optional<NcclAlgorithm> nccl() const { return std::nullopt; }
  [[nodiscard]] virtual FlowShape shape() const = 0;
  /// Whether NCCL would consider it for this collective over this group.
  [[nodiscard]] virtual bool considered(core::CollectiveKind kind, const GroupSpan& g, const NcclModel& m) const = 0;
  [[nodiscard]] virtual bool runs(NcclProtocol) const { return true; }
  /// Whether hzp's tuner picks it when its estimate is the least (a run may
  /// still force one it does not pick).
  [[nodiscard]] virtual bool preferred(NcclProtocol, const GroupSpan&) const { return true; }
  /// The latency of one step inside a domain and one across it, µs.
  [[nodiscard]] virtual std::pair<double, double> step_us(const CollectiveCall& c) const = 0;
  /// Its latency with steps of `intra` and `inter` µs, and the bytes it moves.
  [[nodiscard]] virtual AlgorithmSteps steps(const CollectiveCall& c, double intra, double inter) const = 0;
  [[nodiscard]] virtual AlgorithmBandwidth bandwidth(const CollectiveCall& c) const = 0;
  /// The channels what runs spreads over (after the choice, as enqueue.cc).
  [[nodiscard]] virtual int channels_run(const CollectiveCall& c) const;
  /// The bus bandwidth it runs at on those channels, from `bus` (the
  /// bandwidth capped to their share of the links).
  [[nodiscard]] virtual double running_bus_GBps(const CollectiveCall&, double bus) const { return bus; }
  /// Latency only running it pays, beyond NCCL's estimate (seconds).
  [[nodiscard]] virtual double fill_s(const CollectiveCall&, const CollectiveChoice&) const { return 0; }
  /// Its latency, µs, when it directly follows one of the same kind on the
  /// same group and stream (back to back on one communicator): what is left
  /// to pay once the one before has drained into it. By default all of it
  /// (`steps`): a ring all-gather's ranks leave it together, so the next
  /// starts on every rank at once and walks its whole ring again.
  [[nodiscard]] virtual double back_to_back_latency_us(const CollectiveCall& c, double intra, double inter) const {
    return steps(c, intra, inter).latency_us;
  }
};

/// Every algorithm hzp costs, in the order candidates are listed: NCCL's
/// (ring, tree, nvls, nvls_tree, pat) and any registered since.
[[nodiscard]] const std::vector<const CollectiveAlgorithm*>& collective_algorithms();
/// The registered algorithm of that name, or null.
[[nodiscard]] const CollectiveAlgorithm* find_collective_algorithm(std::string_view name);
/// NCCL's algorithm of that row (one hzp costs: not CollNet or Pairwise).
[[nodiscard]] const CollectiveAlgorithm& collective_algorithm(NcclAlgorithm a);

/// Replaces this copy's list with another copy's: the SimGrid module (its own
/// copy of this library, loaded in the engine's forked child) costs with the
/// algorithms the parent registered, whose descriptors live in the same
/// memory image.
void use_collective_algorithms(const std::vector<const CollectiveAlgorithm*>& algorithms);

/// Adds an algorithm for as long as the registration lives (a test's toy; a
/// new algorithm's file holds one in a static).
class CollectiveAlgorithmRegistration {
 public:
  explicit CollectiveAlgorithmRegistration(std::unique_ptr<const CollectiveAlgorithm> algorithm);
  ~CollectiveAlgorithmRegistration();
  CollectiveAlgorithmRegistration(const CollectiveAlgorithmRegistration&) = delete;
  CollectiveAlgorithmRegistration& operator=(const CollectiveAlgorithmRegistration&) = delete;

 private:
  std::unique_ptr<const CollectiveAlgorithm> algorithm_;
};

}  // namespace hzp::cost
