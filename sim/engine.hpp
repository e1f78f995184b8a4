// The engine interface: run a Schedule on a Topology, emit into a TraceSink.
// Engines see only the Schedule and the topology with its performance model,
// never the model or the plan.
#pragma once

#include <memory>
#include <string>

#include "core/schedule.hpp"
#include "topologies/topology.hpp"
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
};

/// "analytic" (and, once built, "simgrid"); InputError(--engine) otherwise.
[[nodiscard]] std::unique_ptr<Engine> make_engine(const std::string& name, const topologies::PerfModel& pm);

}  // namespace hzp::sim
