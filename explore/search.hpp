// `hzp plan`: search strategies and their parameters for the best plans of a
// model on one or more clusters and GPU counts.
//
// Every well-formed candidate (group sizes, TP/PP/VPP/EP, micro-batch,
// recompute, async) is evaluated in three steps, cheapest first:
//  1. memory lower bound, closed form: the sharded model states alone (2Ψ/g_p
//     + gradient bytes·Ψ/g_g + 12Ψ/g_o over the largest pipeline stage)
//     exceed the budget -> pruned, never simulated;
//  2. screening by the analytic engine on the same plan with two and three
//     layers per virtual pipeline stage (one and two for long pipelines),
//     extrapolated linearly in the layer count (step time and peak reserved memory are affine in it), with
//     branch and bound over groups of candidates that share the
//     model-parallel plan, micro-batch and recompute: their GEMM and attention
//     time bounds every member's step from below, so a group whose bound is
//     worse than the best plans screened so far is not screened further;
//  3. the best screened candidates, and every preset, simulated exactly on the
//     full model; only plans whose exact peak fits are reported.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/names.hpp"
#include "explore/scenario.hpp"
#include "plan/plan.hpp"
#include "stacks/stack_spec.hpp"
#include "topologies/overlay.hpp"

namespace hzp::explore {

/// What plan search ranks by: tokens per second, or dollars per million
/// tokens (needs a price).
enum class Objective { Throughput, Cost };
inline constexpr core::Names<Objective, 2> kObjectives{
    {{Objective::Throughput, "throughput"}, {Objective::Cost, "cost"}}};
[[nodiscard]] std::string_view to_string(Objective o);
/// "throughput" or "cost"; nullopt for any other text.
[[nodiscard]] std::optional<Objective> parse_objective(std::string_view s);

/// A plan search: the input sources (model, the stack every candidate runs
/// under, the calibration and what-if changes applied to every cluster),
/// resolved by resolve_inputs once per cluster, and what to search over.
struct PlanQuery : InputSources {
  std::vector<std::string> clusters{"dgx-h100"};
  std::vector<int> gpus{1024};
  plan::PlanOptions base;  // batch, sequence length
  /// The most ops an exactly simulated candidate's Schedule may hold
  /// (--max-ops); one over it is counted, not simulated.
  std::int64_t max_ops = plan::kDefaultMaxOps;
  /// Only these strategies (empty: every one the stack runs; one it does not
  /// run is refused). The search proposes only plans the stack can run
  /// (plan::not_runnable).
  std::vector<plan::Strategy> strategies;
  /// Called as screening advances (the long phase): groups of candidates
  /// screened or set aside so far, of how many; the last call has done == total.
  std::function<void(std::size_t done, std::size_t total)> progress;
  double memory_limit_GiB = 0;               // 0: each cluster's HBM
  std::optional<double> price_per_gpu_hour;  // else the cluster file's price
  Objective objective = Objective::Throughput;
  int top = 5;
  int jobs = 1;
  /// Screen every candidate that passes the closed-form memory bound (no
  /// branch and bound): slow, the reference the pruned search is tested against.
  bool exhaustive = false;
};

struct PlanChoice {
  std::string cluster;
  int gpus = 0;
  plan::PlanOptions options;  // strategy and resolved group sizes
  plan::ShardSizes shards;
  bool async = false;
  double step_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double peak_reserved_GiB = 0;
  double hbm_GiB = 0;
  std::optional<double> usd_per_million_tokens;
  std::string bottleneck;  // which stream or link is on the critical path
};

/// What became of one (cluster, GPU count)'s candidates, so that a setting
/// with no answer says why.
struct SettingTally {
  std::string cluster;
  int gpus = 0;
  long long candidates = 0;     // well-formed plans
  long long batch_unsplit = 0;  // layouts (tp, pp, micro-batch, recompute) whose batch does not split over the GPUs
  long long memory = 0;         // over the memory budget: by the closed-form bound, screening or the exact peak
  long long bound = 0;          // slower than the setting's best by their compute bound: not screened
  long long op_limit = 0;       // over --max-ops: not simulated exactly
  long long fit = 0;            // simulated exactly, and they fit
};

struct PlanSearch {
  /// Feasible, best first: the `top` best, then the best of every setting
  /// (cluster, GPU count) that has none among them.
  std::vector<PlanChoice> best;
  std::vector<SettingTally> settings;  // in the order of the query's clusters, then GPU counts
  long long candidates = 0;            // well-formed plans in the search space
  long long pruned_memory = 0;         // by the closed-form memory bound
  long long pruned_bound = 0;          // by a group's compute lower bound (branch and bound)
  long long screened = 0;              // extrapolated from reduced-layer simulations
  long long exact = 0;                 // simulated on the full model
  double seconds = 0;
  double screen_seconds = 0, exact_seconds = 0;  // wall time of screening and of the exact simulations
  [[nodiscard]] double candidates_per_second() const {
    return seconds > 0 ? static_cast<double>(candidates) / seconds : 0;
  }
};

[[nodiscard]] PlanSearch search_plans(const PlanQuery& q);

/// A one-line label for a plan, e.g. "hzp (8,8,1024) async tp2 pp4x2 mb1 full".
[[nodiscard]] std::string describe_plan(const PlanChoice& c);

/// A row of `hzp plan`'s answer: plans of the same cluster and GPUs with the
/// same predictions merged into one (differing words joined by '|', e.g.
/// "mb1 none|selective"), ranked by the objective, and a rank shared ("1=")
/// by rows within `tolerance` (relative) of the first row of their tie.
struct RankedPlan {
  std::size_t plan = 0;             // index into the plans given: the first of the merged ones
  std::vector<std::size_t> merged;  // every plan of the row (plan first)
  std::string description;
  std::string rank;  // "3", or "1=" for a tie
  bool tied = false;
};
[[nodiscard]] std::vector<RankedPlan> rank_with_ties(const std::vector<PlanChoice>& plans, Objective objective,
                                                     double tolerance);

/// Training `tokens` with a plan: wall-clock days, GPU-hours and, when a
/// price is known, dollars.
struct TrainingCost {
  double days = 0;
  double gpu_hours = 0;
  std::optional<double> usd;
};
[[nodiscard]] TrainingCost training_cost(const PlanChoice& c, double tokens);

}  // namespace hzp::explore
