// `--explain`: the groups a Schedule uses, where they sit on the cluster, and
// the per-rank communication of one step.
#pragma once

#include <string>

#include "cost/perf_model.hpp"
#include "plan/plan.hpp"
#include "schedule/schedule.hpp"
#include "sim/metrics.hpp"

namespace hzp::cli {

/// `plan` is the resolved plan the Schedule was lowered from.
[[nodiscard]] std::string explain(const core::Schedule& s, const plan::ResolvedPlan& plan, const cost::PerfModel& pm);

/// Where the busiest compute stream's step goes, by kernel class (sim::TimeSplit):
/// one line of seconds and shares, to hold next to a profiler's breakdown.
[[nodiscard]] std::string time_split_text(const sim::TimeSplit& split, const core::Schedule& s, core::Duration step);

}  // namespace hzp::cli
