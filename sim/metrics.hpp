// Step metrics from a Timeline — a listener's view, so the same code scores
// the analytic engine, the SimGrid engine and measured runs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "schedule/schedule.hpp"
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

/// Where one compute stream's step goes, by kernel class, so that it can be
/// held next to a profiler's breakdown of a real step. `classes` in a fixed
/// order: gemm, attention_forward, attention_backward (recomputed forwards
/// are forwards), norm_rotary_activation (norm and element-wise kernels of the
/// passes), loss, optimizer (the optimizer step, on the device or the host),
/// copies_casts (element-wise kernels of the sharding: FSDP copy-in/out, FP8
/// weight casts, gradient accumulation and zeroing; host copies),
/// embedding_other, communication (collectives, sends and receives run on the
/// compute stream itself). The compute stream's idle time splits into
/// host_bound (its host thread had not yet issued the next op: the device
/// waits on the host) and waiting (on other streams: communication, events,
/// the step's ends). classes + host_bound + waiting = the step.
struct TimeSplit {
  int program = -1;  // the rank class whose compute stream is busiest
  std::string stream;
  std::vector<std::pair<std::string, core::Duration>> classes;
  core::Duration host_bound{};
  core::Duration waiting{};
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
  TimeSplit split;
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

/// What one host thread of a rank class issues in a step and the host time
/// that costs it (core::issue_latency summed over its streams' ops): kernels
/// at the thread's launch latency each; collectives, sends and receives at
/// its collective launch latency; event records and waits, allocator calls
/// and returns from blocking waits at theirs. Whether that time shows in the
/// step depends on whether the thread falls behind the device
/// (TimeSplit::host_bound); a synchronous plan issues everything from one
/// thread, an asynchronous one moves the sharding collectives, their events
/// and (with pools, none) their allocator calls to two more.
struct HostIssue {
  std::string thread;
  std::int64_t kernels = 0;
  std::int64_t collectives = 0;  // collectives, sends and receives
  std::int64_t events = 0;       // records and waits
  std::int64_t allocs = 0;       // allocations and frees
  std::int64_t syncs = 0;        // blocking waits
  core::Duration time{};
};
/// The host threads of rank class `program`, in thread order.
[[nodiscard]] std::vector<HostIssue> host_issue(const core::Schedule& s, int program);

/// The busiest compute stream's step by kernel class (time_split.cpp). Host-
/// bound time needs the records' issue times; without them (the SimGrid
/// engine, traces without args.issued_us) all idle time is `waiting`.
[[nodiscard]] TimeSplit time_split(const core::Schedule& s, const traces::Timeline& t, core::Duration step);

}  // namespace hzp::sim
