// Predicted against measured: two Timelines of the same Schedule, compared
// step time, op kind by op kind, exposed communication, overlap and critical
// path. Refuses Timelines of different Schedules.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "traces/timeline.hpp"

namespace hzp::validation {

struct KindError {
  core::Duration predicted{};  // summed op time of this kind
  core::Duration measured{};
  [[nodiscard]] double relative_error() const;  // (predicted − measured) / measured
};

/// What one Timeline's rank classes spend on communication: the time some
/// collective or send/recv runs while no compute op does (exposed), and the
/// share of the communication time that compute hides (overlap), for the rank
/// class with the most exposed time.
struct Exposure {
  core::Duration exposed{};
  core::Duration communication{};  // the union of its communication intervals
  int program = 0;
  [[nodiscard]] double overlap() const;  // 1 − exposed / communication (1 when there is none)
};
[[nodiscard]] Exposure exposure(const traces::Timeline& t);

/// The chain of ops that ends the step: from the op that ends last, each
/// step back goes to the op of the same rank class that ended last at or
/// before this one started (a trace-level critical path: dependencies are
/// not in the trace, the latest finisher stands for the one waited on).
struct CriticalPath {
  std::vector<std::size_t> ops;  // indices into Timeline::ops, first to last
  std::map<std::string, core::Duration> by_kind;
};
[[nodiscard]] CriticalPath critical_path(const traces::Timeline& t);

/// An op's kind as compare reports it: the compute kind ("gemm", ...), or
/// "<collective>/<group kind>", or "send"/"recv".
[[nodiscard]] std::string kind_key(const traces::OpRecord& r);

struct Comparison {
  core::Duration predicted_step{};
  core::Duration measured_step{};
  [[nodiscard]] double step_error() const;  // signed, relative to measured
  /// By op kind: "gemm", "attention", ..., and collectives as "<kind>/<group kind>".
  std::map<std::string, KindError> by_kind;
  Exposure predicted_exposure, measured_exposure;
  /// Time on each critical path by op kind.
  std::map<std::string, KindError> critical_by_kind;
  std::size_t predicted_path_ops = 0, measured_path_ops = 0;
  /// Where the critical paths first differ, walking back from the end; empty
  /// when they are the same ops.
  std::string divergence;
};

/// Throws InputError when the two Timelines carry different Schedule hashes or
/// different op sets (an op present in one and not the other).
[[nodiscard]] Comparison compare(const traces::Timeline& predicted, const traces::Timeline& measured);

/// A Markdown report of a comparison: provenance of both runs, step,
/// exposed communication and overlap, per-kind and critical-path tables, and
/// `picture` (a file name next to the report) when not empty.
[[nodiscard]] std::string markdown_report(const Comparison& c, const traces::Timeline& predicted,
                                          const traces::Timeline& measured, const std::string& picture);

}  // namespace hzp::validation
