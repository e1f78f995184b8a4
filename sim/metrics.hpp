// Step metrics from a Timeline — a listener's view, so the same code scores
// the analytic engine, the SimGrid engine and measured runs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/schedule.hpp"
#include "topologies/cluster_spec.hpp"
#include "traces/timeline.hpp"

namespace hzp::sim {

struct StreamBusy {
  int program = 0;
  std::string stream;
  double fraction = 0;  // busy time / step time
};

struct ProgramMemory {
  int program = 0;
  std::string name;
  core::Bytes peak{};           // most bytes allocated at once
  core::Bytes peak_reserved{};  // most bytes the allocator held (what must fit)
  bool fits = true;             // peak_reserved <= device HBM, and host_fits
  /// What was live at the allocated peak, by buffer class ("act", "gathered",
  /// "params", ...), largest first.
  std::vector<std::pair<std::string, core::Bytes>> at_peak;
  /// Offload: pinned host memory per rank (Program::host_bytes), and whether
  /// the node's devices together fit the node's host memory.
  core::Bytes host{};
  bool host_fits = true;
};

struct Metrics {
  core::Duration step_time{};
  double tokens_per_s = 0;
  /// Model FLOPs per second per GPU (no recomputation counted), TFLOP/s.
  double model_tflops_per_gpu = 0;
  /// Model FLOPs utilisation: model_tflops_per_gpu / dense bf16 peak.
  double mfu = 0;
  /// Collective time not hidden behind compute-stream work, by group kind
  /// (the rank class with the most is reported).
  std::map<std::string, core::Duration> exposed_comm;
  /// Compute-stream time with nothing running on it.
  core::Duration compute_idle{};
  std::vector<StreamBusy> busy;
  std::vector<ProgramMemory> memory;
  [[nodiscard]] bool fits() const;
  [[nodiscard]] core::Bytes peak_memory() const;
  [[nodiscard]] core::Bytes peak_reserved() const;
  /// Offload: the most pinned host memory a rank holds (0 without offload),
  /// and whether every rank class's fits its node's host memory.
  [[nodiscard]] core::Bytes host_memory() const;
  [[nodiscard]] bool host_fits() const;
  /// The rank class with the highest reserved peak.
  [[nodiscard]] const ProgramMemory* worst_memory() const;
};

/// Metrics of one step. Exposed communication of a group kind: the time its
/// collectives run while no compute stream of the same rank class runs a
/// compute op (union of intervals minus union of intervals).
[[nodiscard]] Metrics compute_metrics(const core::Schedule& s, const traces::Timeline& t,
                                      const topologies::DeviceProfile& device);

}  // namespace hzp::sim
