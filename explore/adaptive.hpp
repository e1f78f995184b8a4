// Adaptive resharding (`hzp simulate --adaptive`): choose the hierarchical
// ZeRO group sizes — for dense and, separately, for expert parameters — that
// minimise the predicted step time while the plan fits the memory budget, and
// say what each larger group saves in memory and costs in time.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "explore/scenario.hpp"

namespace hzp::explore {

struct ShardCandidate {
  plan::ShardSizes dense;
  std::optional<plan::ShardSizes> expert;
  core::Duration step{};
  core::Bytes reserved{};
  bool fits = false;
};

struct AdaptiveChoice {
  plan::PlanOptions plan;                  // the scenario's plan with the chosen sizes (strategy hzp)
  std::vector<ShardCandidate> candidates;  // everything evaluated, fastest fitting first
  std::string explanation;
};

/// Evaluates every (g_p, g_g, g_o) with g_p | g_o, g_g | g_o, g_o | DP with the
/// analytic engine (then the expert sizes over DP / ep with the dense ones
/// fixed). Throws InfeasibleError when nothing fits `memory_limit_GiB`.
[[nodiscard]] AdaptiveChoice choose_shards(const Scenario& sc, double memory_limit_GiB);

}  // namespace hzp::explore
