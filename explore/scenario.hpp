// Composes the three inputs into Schedules and runs them through an engine:
// the one place where models, plans and engines meet (the CLI's job).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/schedule.hpp"
#include "plan/plan.hpp"
#include "sim/engine.hpp"
#include "sim/metrics.hpp"
#include "topologies/topology.hpp"
#include "traces/timeline.hpp"

namespace hzp::explore {

struct Scenario {
  std::string model = "llama3-70b";
  std::string cluster = "dgx-h100";
  int gpus = 1024;
  std::vector<plan::Strategy> strategies;  // empty: every implemented strategy
  plan::PlanOptions plan;                  // strategy is set per run
  std::string engine = "analytic";
  sim::EngineOptions engine_options;  // the SimGrid engine's settings
  std::string command_line;
  /// What-if changes to the cluster file: NIC speed (Gb/s) and the leaf
  /// switches' down:up oversubscription.
  std::optional<double> nic_gbps;
  std::optional<double> oversubscription;
  /// A model given as JSON text instead of `model` (a validation case's), and
  /// the name its errors are reported under.
  std::optional<std::pair<std::string, std::string>> model_json;
  /// A calibration overlay (JSON file): device-profile values that replace
  /// the cluster file's, for the device it names (`--calibration`).
  std::string calibration;
  /// Hash each Schedule for the trace header (plan search skips it: it only
  /// keeps numbers).
  bool hash_schedules = true;
};

/// The cluster file's text with the scenario's what-if changes applied, and
/// the name errors are reported under.
[[nodiscard]] std::pair<std::string, std::string> scenario_cluster_text(const Scenario& sc);

struct StrategyResult {
  plan::Strategy strategy = plan::Strategy::Fsdp;
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
  int gpus = 0;
  plan::BatchSplit batch;
  std::string engine;
  std::string engine_detail;  // the last run's (how the engine ran)
  std::vector<StrategyResult> runs;
};

/// Loads the inputs, lowers each strategy and simulates it. Throws InputError
/// for bad input; an out-of-memory plan is reported in its metrics, not thrown.
[[nodiscard]] ScenarioResult run_scenario(const Scenario& sc);

/// Loads the inputs and lowers one strategy (for `hzp schedule`).
[[nodiscard]] core::Schedule build_schedule(const Scenario& sc, plan::Strategy strategy);

}  // namespace hzp::explore
