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

/// What a plan's data-parallel sharding costs per step, on the first rank
/// class: its parameter gathers' and gradient reductions' uncontended time,
/// split into NCCL's latency and bandwidth terms, and the communication the
/// step could not hide behind compute (overlap).
struct ShardingTerms {
  double gather_latency_s = 0, gather_bandwidth_s = 0;
  double reduce_latency_s = 0, reduce_bandwidth_s = 0;
  double exposed_s = 0;
};

/// The terms of `s`'s first program, simulated into `metrics`.
[[nodiscard]] ShardingTerms sharding_terms(const core::Schedule& s, const sim::Metrics& metrics,
                                           const cost::PerfModel& pm);

/// What the expected slowest rank adds to a lowered plan's step: `s` (lowered
/// from `resolved`) against the same resolved plan with every rank at the mean
/// of the work its documents, jitter and routing skew draw, both in the
/// analytic engine; 0 when its ranks' work does not vary.
[[nodiscard]] double stragglers_seconds(const models::ModelSpec& m, const cost::PerfModel& pm,
                                        const plan::ResolvedPlan& resolved, const core::Schedule& s);

struct ShardCandidate {
  plan::ShardSizes dense;
  std::optional<plan::ShardSizes> expert;
  core::Duration step{};
  core::Bytes reserved{};
  bool fits = false;
  ShardingTerms terms{};
  double stragglers_s = 0;  // stragglers_seconds, for the chosen plan and its neighbours only
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
/// The same on the scenario's inputs, resolved once by the caller (the final
/// simulation of the chosen plan then runs on the very same inputs).
[[nodiscard]] AdaptiveChoice choose_shards(const Scenario& sc, const Inputs& in, double memory_limit_GiB);

}  // namespace hzp::explore
