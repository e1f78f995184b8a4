// The SimGrid engine: flow-level contention on the cluster's real topology.
// Every simulated (rank, stream) and host thread is an actor; compute takes
// the analytic engine's uncontended time, slowed while a collective shares
// the device; collectives and transfers are aggregated flows (flows.hpp) that
// SimGrid's max-min solver shares with everything else in flight.
//
// SimGrid allows one engine per process, so `run` simulates in a forked child
// and reads the times back: the engine can be used many times from one
// process (strategies, sweeps, tests).
#pragma once

#include <vector>

#include "core/schedule_replay.hpp"
#include "sim/engine.hpp"

namespace hzp::sim::simgrid {

/// What one simulation produced.
struct SimResult {
  /// times[program][stream][op] of the member emitted for each program: its
  /// slowest member (`--ranks all`) or its representative (`--ranks classes`).
  std::vector<std::vector<std::vector<core::OpTime>>> times;
  std::vector<int> emitted_rank;  // per program
  int ranks_simulated = 0;        // ranks with actors of their own
  long long flows = 0;            // flows put on the network, background included
};

/// Runs the simulation in this process. It creates the process's one SimGrid
/// engine, so call it at most once per process (`SimGridEngine::run` forks).
[[nodiscard]] SimResult simulate_in_process(const core::Schedule& s, const topologies::PerfModel& pm,
                                            const EngineOptions& options);

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
