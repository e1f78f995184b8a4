// Plan search internals shared by its phases (see search.hpp for the
// method): the candidate space, the closed-form bounds, screening on
// reduced-layer models, and exact verification. Not part of the library's API.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "cost/perf_model.hpp"
#include "explore/adaptive.hpp"
#include "explore/search.hpp"
#include "models/model_spec.hpp"
#include "sim/metrics.hpp"
#include "topologies/cluster_spec.hpp"

namespace hzp::explore::search {

using plan::PlanOptions;
using plan::Strategy;

struct Candidate {
  std::size_t setting = 0;  // (cluster, gpus) index
  std::size_t group = 0;    // candidates with the same model-parallel plan, micro-batch and recompute
  PlanOptions o;
  bool preset_at_base = false;
};

/// The same cluster at fewer GPUs, by GPU count: where screening runs a long
/// pipeline on fewer stages (built before screening, read by its threads).
using SmallerClusters = std::map<int, std::unique_ptr<cost::PerfModel>>;

struct Setting {
  std::string cluster_name;
  topologies::ClusterSpec cluster;
  int gpus = 0;
  std::unique_ptr<cost::PerfModel> pm;
  SmallerClusters smaller;
  double limit_GiB = 0;
};

struct Estimate {
  bool ok = false;
  double step_s = 0;
  double reserved_GiB = 0;
  double compute_s = 0;  // GEMM and attention on the compute stream: a lower bound on the step
  /// With `floor`: the step when every sharding-dependent op
  /// (plan::is_sharding_op) costs nothing, which no sharding of the same
  /// model-parallel plan can beat. A second walk of the same Schedule.
  double floor_s = 0;
  /// The model states in reserved_GiB (parameters, gradients, optimizer
  /// states), GiB: exactly linear in the layers.
  double states_GiB = 0;
  bool over_op_limit = false;  // not ok: its full Schedule would hold more than --max-ops ops
  /// Screened on fewer stages (fewer_stages): the step within a few percent,
  /// `reserved_GiB` only a lower bound of the peak; screened again as it is
  /// where it could be among the plans verified (screen_groups).
  bool fewer_stages = false;
};

/// Not ok: the plan's full Schedule would hold more than --max-ops ops.
[[nodiscard]] inline Estimate over_op_limit() {
  Estimate e;
  e.over_op_limit = true;
  return e;
}

/// What a candidate is evaluated on: the inputs (a model, the setting's
/// cluster, the stack), the setting's cost model and the Schedule size limit.
struct Target {
  plan::Inputs in;
  const cost::PerfModel& pm;
  std::int64_t max_ops = plan::kDefaultMaxOps;
  const SmallerClusters* smaller = nullptr;  // the cluster at fewer GPUs, where built
  /// The same target with another model (a reduced-layer one for screening).
  [[nodiscard]] Target with(const models::ModelSpec& m) const {
    return {{m, in.cluster, in.stack}, pm, max_ops, smaller};
  }
};

/// The analytic engine's estimate of a plan (with `floor`, also the step when
/// every sharding-dependent op costs nothing); not ok for a plan the lowering refuses.
[[nodiscard]] Estimate estimate(const Target& t, const PlanOptions& o, bool floor = false);
/// The full simulation with metrics, for the plans that are reported;
/// `terms`, when given, gets its sharding collectives' latency and bandwidth terms.
[[nodiscard]] Estimate simulate(const Target& t, const PlanOptions& o, sim::Metrics& out,
                                ShardingTerms* terms = nullptr, double* stragglers_s = nullptr);
/// Screening: the plan on reduced-layer models (and fewer micro-batches for
/// long pipelines, and fewer stages for the longest), extrapolated.
[[nodiscard]] Estimate screen(const Target& t, const PlanOptions& o, bool floor);
/// The stage counts a long pipeline is screened on (then extrapolated to its
/// own), and the GPUs each takes; none where it is screened as it is.
struct FewerStages {
  int pp1 = 0, pp2 = 0;
  int gpus1 = 0, gpus2 = 0;
};
[[nodiscard]] std::optional<FewerStages> fewer_stages(const models::ModelSpec& m, const PlanOptions& o,
                                                      const topologies::Topology& cluster);

/// Parameters on one rank of a pipeline stage: the dense ones (split tp
/// ways) and the experts (split ep x expert_tp ways), which shard over their
/// own expert-data-parallel ranks.
struct StageParams {
  double dense = 0, expert = 0;
};

// Parameters per layer (dense part, expert part), computed once per search.
struct LayerParams {
  std::vector<double> dense, expert;
  explicit LayerParams(const models::ModelSpec& m) {
    for (int l = 0; l < m.layers; ++l) {
      const double e = m.is_moe_layer(l) ? static_cast<double>(models::ffn_params(m, l)) : 0;
      dense.push_back(static_cast<double>(models::layer_params(m, l)) - e);
      expert.push_back(e);
    }
  }
  /// Parameters on one rank of pipeline stage p as `layout` places the layers
  /// (dense / tp, experts / (expert_tp · ep); expert_tp is tp unless folded).
  [[nodiscard]] StageParams stage(const plan::PipelineLayout& layout, int p, const PlanOptions& o) const {
    double d = 0, e = 0;
    for (int c = 0; c < layout.vpp; ++c) {
      const auto v = static_cast<std::size_t>(layout.virtual_stage(p, c));
      for (int l = layout.first_layer[v]; l < layout.first_layer[v + 1]; ++l) {
        d += dense[static_cast<std::size_t>(l)];
        e += expert[static_cast<std::size_t>(l)];
      }
    }
    return {d / o.tp, e / (o.ep * o.expert_tp.value_or(o.tp))};
  }
};

/// The sharded model states of one rank of a stage alone (a lower bound on its peak), GiB.
[[nodiscard]] double memory_lower_bound_GiB(const StageParams& params, const PlanOptions& o, const plan::ShardSizes& sh,
                                            const plan::ShardSizes& expert_sh);
/// The pinned host memory of one rank's offloaded states (optimizer, parameters), GiB.
[[nodiscard]] double host_states_GiB(const StageParams& p, const PlanOptions& o, const plan::ShardSizes& sh,
                                     const plan::ShardSizes& expert_sh);
/// Adam's kernels on the compute stream, largest stage, seconds.
[[nodiscard]] double adam_seconds(double dense_stage_params, const plan::ShardSizes& sh,
                                  const topologies::DeviceProfile& d);
/// Which stream or link is on the critical path, in words (and, when a
/// collective kind is exposed, the latency share of the sharding
/// collectives); `stragglers_s`, what the expected slowest rank adds to the
/// step, is named when it is at least as large as the waits it causes.
[[nodiscard]] std::string bottleneck(const sim::Metrics& m, const ShardingTerms& t, bool pipelined,
                                     double stragglers_s = 0);
/// Doubles in and out of parallel_map's records.
[[nodiscard]] std::string pack(std::initializer_list<double> v);
[[nodiscard]] double unpack(const std::string& r, std::size_t i);

/// One transformer layer per micro-batch: its GEMM and attention time and the
/// activations it keeps for backward.
struct LayerCost {
  double compute_s = 0, activations_GiB = 0;
};

/// The state of one search, shared by its phases, in order.
struct Search {
  explicit Search(const PlanQuery& query);

  PlanQuery q;
  models::ModelSpec m;
  std::shared_ptr<const stacks::Stack> stack;  // the one every candidate runs under, resolved
  /// What a candidate of `setting` is evaluated on.
  [[nodiscard]] Target target(std::size_t setting) const {
    return {{m, settings[setting].pm->topology(), stack}, *settings[setting].pm, q.max_ops, &settings[setting].smaller};
  }
  std::vector<Setting> settings;
  std::optional<double> price;
  double tokens_per_step = 0;
  std::vector<Candidate> space;  // 1. every well-formed candidate
  std::size_t groups = 0;
  long long unsplit = 0;                     // layouts (tp, pp, micro-batch, ...) whose batch does not split
  std::optional<core::Problem> why_unsplit;  // the first of their reasons
  // 2. candidates that pass the memory bound, with their Adam time and sharded model states (GiB)
  std::vector<Candidate> alive;
  std::vector<double> adam, states;
  // 3. screening: per alive candidate {ok, step, reserved, compute, floor}; the K best scores so far
  std::vector<std::array<double, 5>> screened;
  std::vector<bool> on_fewer_stages;  // per alive candidate: screened on fewer stages (Estimate::fewer_stages)
  std::vector<double> best_scores;    // the K best scores screened so far, over every setting
  std::vector<double> setting_best;   // per setting: its best score screened so far (1e300 before one)
  /// The score a candidate of `setting` must beat to matter: the K-th best
  /// over every setting (it could make the top K) or its setting's best
  /// (it could be that setting's answer), whichever is larger; 1e300 before either.
  [[nodiscard]] double bound_to_beat(std::size_t setting) const;
  [[nodiscard]] SettingTally& tally(std::size_t setting) { return out.settings[setting]; }
  /// Whether a candidate is one the query asks for and the stack can run.
  [[nodiscard]] bool wanted(const PlanOptions& p) const;
  std::vector<PlanChoice> found;  // 4. verified plans that fit
  PlanSearch out;

  /// The layer cost of a candidate's (setting, tp, ep, micro-batch, recompute), measured once.
  [[nodiscard]] LayerCost layer_cost(std::size_t setting, const PlanOptions& p);
  [[nodiscard]] std::optional<double> cost_of(const Setting& st, double step_s) const;
  /// What the objective ranks by (lower is better).
  [[nodiscard]] double score(const Setting& st, double step_s) const;
  [[nodiscard]] bool feasible(std::size_t i) const;
  /// Remembers a screened candidate's score among the K best.
  void note(std::size_t i);

 private:
  // (setting, tp, ep, expert_tp or 0, micro-batch, recompute) -> cost
  std::map<std::tuple<std::size_t, int, int, int, std::int64_t, int>, LayerCost> layer_costs_;
};

// The phases (search_space.cpp, search_bounds.cpp, search_screen.cpp, search_verify.cpp).
void enumerate_space(Search& s);
void prune_by_memory(Search& s);
void screen_groups(Search& s);
/// Part of screen_groups: candidates screened on fewer stages that
/// verification could reach, screened again on their own stages.
void rescreen_near_the_top(Search& s);
void verify_best(Search& s);
void refine_best(Search& s);

}  // namespace hzp::explore::search
