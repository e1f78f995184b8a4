// Scenarios: the one input resolver (catalog name or file, what-if changes,
// calibration overlay), composing model, cluster and plan into Schedules and
// running them through an engine. Every command resolves its inputs here.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/options.hpp"
#include "models/model_spec.hpp"
#include "plan/plan.hpp"
#include "schedule/schedule.hpp"
#include "sim/engine.hpp"
#include "sim/metrics.hpp"
#include "stacks/stack_spec.hpp"
#include "topologies/overlay.hpp"
#include "topologies/topology.hpp"
#include "traces/timeline.hpp"

namespace hzp::explore {

/// Where a run's inputs come from, before they are loaded: the model and the
/// software stack (catalog name, file, or a validation case's JSON text) and
/// the calibration and what-if changes every cluster is resolved with. What
/// a Scenario and a plan search (PlanQuery) share; resolve_inputs loads them.
struct InputSources {
  std::string model = "llama3-70b";
  /// The software stack (catalog name or .json file) every Schedule runs under.
  std::string stack = stacks::kDefaultStack;
  /// A calibration overlay (`--calibration`, a JSON file: device-profile
  /// values that replace the cluster file's, for the device it names) and
  /// the what-if changes to the cluster file: NIC speed (Gb/s), the leaf
  /// switches' down:up oversubscription, the devices' board power limit (W).
  topologies::ClusterOverlay overlay;
  /// A model given as JSON text instead of `model` (a validation case's), and
  /// the name its errors are reported under.
  std::optional<std::pair<std::string, std::string>> model_json;
  /// A stack given as JSON text instead of `stack` (a validation case's), and its error name.
  std::optional<std::pair<std::string, std::string>> stack_json;
};

/// One run's inputs and plan: the sources, the cluster and its GPU count,
/// the strategies to lower and the engine to run them on.
struct Scenario : InputSources {
  std::string cluster = "dgx-h100";
  int gpus = 1024;
  std::vector<plan::Strategy> strategies;  // empty: every implemented strategy
  plan::PlanOptions plan;                  // strategy is set per run
  std::string engine = "analytic";
  sim::EngineOptions engine_options;  // the SimGrid engine's settings
  std::string command_line;
  /// The most ops lowering may build (--max-ops): a work limit, not an input.
  std::int64_t max_ops = plan::kDefaultMaxOps;
  /// Hash each Schedule for the trace header (plan search skips it: it only
  /// keeps numbers).
  bool hash_schedules = true;
  /// Op names in the runs' timelines: needed to write a trace or CSV; the
  /// metrics do without (a string fewer per op of a large Schedule).
  bool timeline_names = true;
};

/// Limits on the work one scenario may ask for (--max-ops, --max-flows), each
/// checked against an estimate before the work starts: not inputs, so
/// neither sweep keys nor database columns nor provenance.
struct WorkLimits {
  std::int64_t max_ops = plan::kDefaultMaxOps;
  std::int64_t max_flows = sim::kDefaultMaxFlows;
  void apply(Scenario& sc) const {
    sc.max_ops = max_ops;
    sc.engine_options.max_flows = max_flows;
  }
};

/// One row of the scenario's option table: the inputs beside the plan
/// (model, cluster, GPUs, calibration, what-if changes, engine settings).
/// With plan::plan_option_table() it is every key a sweep or a command line
/// may set; `engine` marks the keys only a simulation uses.
struct ScenarioOption {
  core::OptionSpec spec;
  nlohmann::json (*get)(const Scenario&);
  void (*set)(Scenario&, const nlohmann::json&);
  bool engine = false;
};
[[nodiscard]] const std::vector<ScenarioOption>& scenario_option_table();
[[nodiscard]] const ScenarioOption* find_scenario_option(std::string_view key);
/// Checks `value` for scenario option `key` and sets it.
[[nodiscard]] std::optional<core::Problem> set_scenario_option(Scenario& sc, std::string_view key,
                                                               const nlohmann::json& value);
/// Sets `key` of either table: a scenario option on `sc`, any other on its plan.
[[nodiscard]] std::optional<core::Problem> set_input(Scenario& sc, std::string_view key, const nlohmann::json& value);

/// The inputs a scenario names, loaded: the model (catalog, file or a case's
/// JSON), the cluster with the calibration and what-if overlay applied and
/// the stack, with the SHA-256 of the texts they were parsed from.
struct Inputs {
  models::ModelSpec model;
  std::string model_sha256;
  topologies::ResolvedCluster cluster;
  std::string cluster_sha256;
  std::shared_ptr<const stacks::Stack> stack;
  /// What lowering takes: these inputs on the cluster sized to a GPU count
  /// (`topology` of this cluster's spec; it must outlive the view).
  [[nodiscard]] plan::Inputs on(const topologies::Topology& topology) const { return {model, topology, stack}; }
};
/// The one input resolver: `sources` on the cluster `cluster` (catalog name
/// or file), the calibration checked against the stack it was fitted under.
/// Every command resolves its inputs here: simulate, schedule, sweeps,
/// validation cases, `--adaptive` and plan search (once per cluster).
[[nodiscard]] Inputs resolve_inputs(const InputSources& sources, const std::string& cluster);
/// resolve_inputs(sc, sc.cluster).
[[nodiscard]] Inputs resolve_inputs(const Scenario& sc);

struct StrategyResult {
  plan::Strategy strategy = plan::Strategy::Hzp;
  plan::ResolvedPlan plan;  // every default resolved (group sizes, async, batch)
  core::Schedule schedule;
  std::string schedule_sha256;
  traces::Timeline timeline;
  sim::Metrics metrics;
};

struct ScenarioResult {
  models::ModelSpec model;
  std::string model_sha256;
  std::string cluster_sha256;
  topologies::ClusterSpec cluster;
  std::shared_ptr<const stacks::Stack> stack;
  topologies::ClusterOverlay overlay;  // the calibration and what-if changes the cluster was run with
  int gpus = 0;
  plan::BatchSplit batch;
  std::string engine;
  std::string engine_detail;  // the last run's (how the engine ran)
  std::vector<StrategyResult> runs;
};

/// Loads the inputs, lowers each strategy and simulates it. Throws InputError
/// for bad input; an out-of-memory plan is reported in its metrics, not thrown.
[[nodiscard]] ScenarioResult run_scenario(const Scenario& sc);
/// The same on inputs resolve_inputs(sc) already loaded (a caller that also
/// needs them before, as `simulate --adaptive` does, resolves them once).
[[nodiscard]] ScenarioResult run_scenario(const Scenario& sc, Inputs in);

/// Loads the inputs and lowers one strategy (for `hzp schedule`).
[[nodiscard]] core::Schedule build_schedule(const Scenario& sc, plan::Strategy strategy);

}  // namespace hzp::explore
