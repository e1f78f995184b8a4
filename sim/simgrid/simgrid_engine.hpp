// The SimGrid engine: flow-level contention on the cluster's real topology.
// Every simulated (rank, stream), and each host thread that syncs, is an actor; compute takes
// the analytic engine's uncontended time, slowed while a collective shares
// the device; collectives and transfers are aggregated flows (flows.hpp) that
// SimGrid's max-min solver shares with everything else in flight.
//
// SimGrid allows one engine per process, so `run` simulates in a forked child
// and reads the times back: the engine can be used many times from one
// process (strategies, sweeps, tests).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sim/engine.hpp"

namespace hzp::sim::simgrid {

class SimGridEngine final : public Engine {
 public:
  SimGridEngine(const cost::PerfModel& pm, EngineOptions options) : pm_(pm), options_(std::move(options)) {}
  [[nodiscard]] std::string name() const override { return "simgrid"; }
  void run(const core::Schedule& s, traces::TraceHeader header, traces::TraceSink& sink) override;
  /// InputError(--max-flows) when estimate_flows exceeds the options' max_flows.
  void check(const core::Schedule& s) const override;

 private:
  const cost::PerfModel& pm_;
  EngineOptions options_;
};

/// Checks --simgrid-cfg settings before any simulation: each "key:value" must
/// name one of the settings hzp passes on (simgrid_setting_keys) with a value
/// in its range; SimGrid itself dies with a backtrace on a malformed one, and
/// some values crash (contexts/stack-size:1) or stall (surf/precision:1e300)
/// the simulation. InputError("command line", "--simgrid-cfg", ...) otherwise.
void check_simgrid_settings(const std::vector<std::string>& settings);
/// The settings --simgrid-cfg accepts, in order.
[[nodiscard]] std::vector<std::string> simgrid_setting_keys();

/// The flows a simulation of `s` puts on the network, estimated from the
/// Schedule alone: each collective, send and receive of a rank class for each
/// rank that carries its traffic (with --ranks all every member of the class;
/// with classes the members of its group, and every member of the class when
/// the groups of its kind leave their leaf switch and run as background
/// flows), one flow per member and one more across scale-up domains.
/// simgrid_engine_test holds it to the flows a simulation reports.
[[nodiscard]] std::int64_t estimate_flows(const core::Schedule& s, const cost::PerfModel& pm, bool all_ranks);

}  // namespace hzp::sim::simgrid
