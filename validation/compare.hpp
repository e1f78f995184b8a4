// Predicted against measured: two Timelines of the same Schedule, compared
// step time and op kind by op kind. Refuses Timelines of different Schedules.
#pragma once

#include <map>
#include <string>

#include "traces/timeline.hpp"

namespace hzp::validation {

struct KindError {
  core::Duration predicted{};  // summed op time of this kind
  core::Duration measured{};
  [[nodiscard]] double relative_error() const;  // (predicted − measured) / measured
};

struct Comparison {
  core::Duration predicted_step{};
  core::Duration measured_step{};
  [[nodiscard]] double step_error() const;  // signed, relative to measured
  /// By op kind: "gemm", "attention", ..., and collectives as "<kind>/<group kind>".
  std::map<std::string, KindError> by_kind;
};

/// Throws InputError when the two Timelines carry different Schedule hashes or
/// different op sets (an op present in one and not the other).
[[nodiscard]] Comparison compare(const traces::Timeline& predicted, const traces::Timeline& measured);

}  // namespace hzp::validation
