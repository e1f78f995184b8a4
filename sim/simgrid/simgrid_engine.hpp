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

#include <utility>

#include "sim/engine.hpp"

namespace hzp::sim::simgrid {

class SimGridEngine final : public Engine {
 public:
  SimGridEngine(const topologies::PerfModel& pm, EngineOptions options) : pm_(pm), options_(std::move(options)) {}
  [[nodiscard]] std::string name() const override { return "simgrid"; }
  void run(const core::Schedule& s, traces::TraceHeader header, traces::TraceSink& sink) override;

 private:
  const topologies::PerfModel& pm_;
  EngineOptions options_;
};

}  // namespace hzp::sim::simgrid
