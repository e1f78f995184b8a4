// The analytic engine: a dependency-order walk over the Schedule with
// uncontended costs from the performance model, then walked again with what
// the walk before shows: compute slowed where collectives share its device,
// concurrent collectives sharing its links. One rank per class; milliseconds
// per configuration, which is what sweeps and planning use.
#pragma once

#include <functional>

#include "schedule/replay.hpp"
#include "sim/engine.hpp"

namespace hzp::sim {

/// What a plan search needs from one simulation, without building a Timeline.
struct StepEstimate {
  core::Duration step{};
  core::Bytes peak_reserved{};  // worst rank class, through the caching-allocator model
  /// Compute-stream time of GEMM and attention kernels, worst rank class:
  /// the same under every sharding of the same model-parallel plan, and a
  /// lower bound on its step time.
  core::Duration model_compute{};
  /// Offload: pinned host memory per rank, worst rank class (Program::host_bytes).
  core::Bytes host{};
  /// The model states a rank allocates (parameters, gradients, optimizer
  /// states), worst rank class: linear in the layers a stage holds, where the
  /// caching allocator's peak need not be.
  core::Bytes model_states{};
};

/// What the analytic engine models of ops that share a device.
struct Contention {
  /// Compute runs slower by the device profile's comm_compute_slowdown while
  /// a collective or transfer runs on the same device, as in the SimGrid engine.
  bool interference = true;
  /// Collectives of one link class (scale-up, or across domains over the
  /// NICs) running at once on one device split its bandwidth, as the SimGrid
  /// engine's flows do.
  bool link_sharing = true;
  /// Every op at its uncontended cost (plan screening's lower bounds, the
  /// host runtime's virtual clock).
  static constexpr Contention none() { return {false, false}; }
};

class AnalyticEngine final : public Engine {
 public:
  explicit AnalyticEngine(const cost::PerfModel& pm, Contention contention = {}) : pm_(pm), contention_(contention) {}
  [[nodiscard]] std::string name() const override { return "analytic"; }
  void run(const core::Schedule& s, traces::TraceHeader header, traces::TraceSink& sink) override;
  /// Ops a what-if walk treats as taking no time (collectives included).
  using FreeOps = std::function<bool(const core::Op&)>;
  /// The same walk, reduced to step time, peak reserved memory and compute;
  /// ops `free` accepts cost nothing (a plan search's lower bounds).
  [[nodiscard]] StepEstimate estimate(const core::Schedule& s, const FreeOps& free = {}) const;

 private:
  [[nodiscard]] core::ReplayResult walk(const core::Schedule& s, const FreeOps& free = {}) const;
  /// Whether the walk slows compute under collectives (interference on, and a device that slows).
  [[nodiscard]] bool slows_compute() const {
    return contention_.interference && pm_.topology().spec().device.comm_compute_slowdown > 1;
  }
  const cost::PerfModel& pm_;
  Contention contention_;
};

}  // namespace hzp::sim
