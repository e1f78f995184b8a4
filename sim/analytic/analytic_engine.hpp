// The analytic engine: a dependency-order walk over the Schedule with
// uncontended costs from the performance model. One rank per class;
// milliseconds per configuration, which is what sweeps and planning use.
#pragma once

#include "sim/engine.hpp"

namespace hzp::sim {

class AnalyticEngine final : public Engine {
 public:
  explicit AnalyticEngine(const topologies::PerfModel& pm) : pm_(pm) {}
  [[nodiscard]] std::string name() const override { return "analytic"; }
  void run(const core::Schedule& s, traces::TraceHeader header, traces::TraceSink& sink) override;

 private:
  const topologies::PerfModel& pm_;
};

}  // namespace hzp::sim
