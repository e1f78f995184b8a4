// The engine interface: run a Schedule on a Topology, emit into a TraceSink.
// Engines see only the Schedule and the topology with its performance model,
// never the model or the plan.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cost/perf_model.hpp"
#include "schedule/schedule.hpp"
#include "traces/timeline.hpp"

namespace hzp::sim {

class Engine {
 public:
  virtual ~Engine() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  /// Simulates one step. The header's engine and provenance are filled in
  /// here, and the Schedule's hash unless the caller already computed it; the
  /// caller supplies version and command line.
  virtual void run(const core::Schedule& s, traces::TraceHeader header, traces::TraceSink& sink) = 0;
  /// Refuses a Schedule this engine would take too long or too much memory
  /// for, with an InputError naming the flag that raises the limit; callers
  /// check every Schedule before running any. Default: nothing (the analytic
  /// engine is linear in the ops, which lowering already bounded).
  virtual void check(const core::Schedule& /*s*/) const {}
};

/// The most flows a SimGrid simulation may put on the network unless raised
/// (--max-flows): about 13 minutes and 3 GB on one core (bench/results/
/// simgrid-scale.txt: 5.4 M flows, 8,192 ranks in detail, 763 s, 2.8 GB).
inline constexpr std::int64_t kDefaultMaxFlows = 10'000'000;

/// Settings of the SimGrid engine (the analytic engine takes only `interference`
/// and `link_sharing`).
struct EngineOptions {
  /// "all": every rank in detail; "classes": one representative per rank
  /// class, the other ranks' traffic as background flows.
  std::string ranks = "all";
  int nccl_channels = 16;
  /// Slow compute down while a collective runs on the same device, by the
  /// device profile's comm_compute_slowdown.
  bool interference = true;
  /// Analytic engine: concurrent collectives of one device and link class
  /// share its bandwidth (the SimGrid engine's flows always do).
  bool link_sharing = true;
  /// Extra SimGrid settings ("key:value"), applied after hzp's own.
  std::vector<std::string> simgrid_config;
  /// Not an input (no sweep key): the most flows a simulation may launch,
  /// checked against an estimate before it starts; --max-flows.
  std::int64_t max_flows = kDefaultMaxFlows;
};

/// "analytic" or "simgrid"; InputError(--engine / --ranks / --nccl-channels) otherwise.
[[nodiscard]] std::unique_ptr<Engine> make_engine(const std::string& name, const cost::PerfModel& pm,
                                                  const EngineOptions& options = {});

/// Throws InputError when a group names a rank the topology lacks.
void check_fits(const core::Schedule& s, const topologies::Topology& topo);

/// Whether op `i` of `st` is a collective that directly follows one of the
/// same kind on the same group (nothing between them on the stream, which
/// issues it as the other ends): both engines then charge it the latency left
/// once the one before has drained into it
/// (cost::CollectiveCost::back_to_back_latency_s: a run of broadcasts pays its
/// chain once).
[[nodiscard]] inline bool back_to_back(const core::Stream& st, std::size_t i) {
  if (i == 0 || i >= st.ops.size()) return false;
  const core::Op& a = st.ops[i - 1];
  const core::Op& b = st.ops[i];
  return a.kind == core::OpKind::Collective && b.kind == core::OpKind::Collective &&
         a.collective().kind == b.collective().kind && a.collective().group == b.collective().group;
}

}  // namespace hzp::sim
