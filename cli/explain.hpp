// `--explain`: the groups a Schedule uses, where they sit on the cluster, and
// the per-rank communication of one step.
#pragma once

#include <string>

#include "core/schedule.hpp"
#include "plan/plan.hpp"
#include "topologies/topology.hpp"

namespace hzp::cli {

/// `plan` is the resolved plan the Schedule was lowered from.
[[nodiscard]] std::string explain(const core::Schedule& s, const plan::ResolvedPlan& plan,
                                  const topologies::PerfModel& pm);

}  // namespace hzp::cli
