// Why a plan wins or loses: one sentence per strategy naming the term that
// decides it against the fastest plan that fits — memory, all-gather or
// reduce-scatter latency, bandwidth, overlap, pipeline bubble or compute —
// with the figures behind it. `make run` and `hzp simulate --explain` print it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "explore/adaptive.hpp"

namespace hzp::explore {

/// What one simulated plan's step is made of, as the sentence needs it.
struct PlanTerms {
  std::string name;  // the strategy ("fsdp")
  double step_s = 0;
  bool fits = true;
  double reserved_GiB = 0;
  std::string largest_memory;  // the largest buffer class at the peak ("params")
  double largest_memory_GiB = 0;
  std::map<std::string, double> exposed_s;  // by group kind
  double idle_s = 0;                        // compute stream with nothing to run
  /// Of idle_s, the time the compute stream waited for its host thread to
  /// issue the next op (the analytic engine's issue times; 0 without them).
  double host_bound_s = 0;
  int pp = 1;
  ShardingTerms sharding;
  /// What the expected slowest rank adds to the step: the plan against the
  /// same plan with every rank at the mean of the work its packed documents,
  /// compute jitter and routing skew draw, both in the analytic engine; 0
  /// without them.
  double stragglers_s = 0;
};

/// The terms of each run of `r` (sharding collectives costed by `pm`).
[[nodiscard]] std::vector<PlanTerms> plan_terms(const ScenarioResult& r, const cost::PerfModel& pm);

/// The term that makes `slow` slower than `fast`, with its figures: the
/// largest of the growth in exposed communication of one group kind (named
/// latency or bandwidth when the sharding collectives themselves cost that
/// much more, else overlap), in compute-stream waits for the host thread
/// (host), in compute-stream waits neither explains (bubble), in
/// compute-stream busy time (compute) and in what the expected slowest rank
/// adds (stragglers).
[[nodiscard]] std::string deciding_term(const PlanTerms& fast, const PlanTerms& slow);

/// A heading line and one line per plan, in the order given: against the
/// fastest plan that fits (or the fastest, when none fits), each names its
/// deciding term; plans within `tolerance` (a fraction) of it are ties. A
/// single plan: one line on what its step is made of.
[[nodiscard]] std::string why_text(const std::vector<PlanTerms>& plans, double hbm_GiB, double tolerance);

}  // namespace hzp::explore
