// Scenarios and the input resolver (see scenario.hpp).
#include "explore/scenario.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/sha256.hpp"
#include "plan/options.hpp"
#include "schedule/check.hpp"
#include "sim/engine.hpp"

namespace hzp::explore {
namespace {

using core::OptionSpec;
using core::ValueType;
using json = nlohmann::json;

// Adds the input hashes to the Schedule's provenance.
void stamp_inputs(core::Schedule& s, const std::string& model_sha, const std::string& cluster_sha,
                  const stacks::Stack& stack) {
  json p = json::parse(s.provenance_json);
  p["inputs"] = {{"model_sha256", model_sha}, {"cluster_sha256", cluster_sha}, {"stack_sha256", stack.sha256}};
  p["hzp_version"] = core::version();
  s.provenance_json = p.dump();
}

// A calibration holds for the stack it was fitted under (one frozen
// calibration per device and stack): InputError naming the calibration file
// and its "stack" otherwise.
void check_calibration_stack(const topologies::ResolvedCluster& cluster, const stacks::Stack& stack,
                             const std::string& calibration_file) {
  const std::string& fitted = cluster.calibration_stack;
  if (fitted.empty() || fitted == stack.spec.name) return;
  throw core::InputError(calibration_file, "stack",
                         fmt::format("expected the stack the run uses, \"{}\"; this calibration was fitted under "
                                     "\"{}\" (run with --stack {})",
                                     stack.spec.name, fitted, fitted));
}

OptionSpec spec(std::string key, ValueType type, std::string help, double min = 0, double max = 0) {
  return core::option_spec(std::move(key), type, std::move(help), min, max);
}

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(); }
std::optional<double> number_or_null(const json& v) {
  return v.is_null() ? std::nullopt : std::optional<double>(v.get<double>());
}

std::vector<ScenarioOption> make_table() {
  std::vector<ScenarioOption> t;
  t.push_back({spec("model", ValueType::Text, "catalog name (see `hzp models`) or a model .json file"),
               [](const Scenario& s) -> json { return s.model; },
               [](Scenario& s, const json& v) { s.model = v.get<std::string>(); }});
  t.push_back({spec("cluster", ValueType::Text, "catalog name (see `hzp clusters`) or a cluster .json file"),
               [](const Scenario& s) -> json { return s.cluster; },
               [](Scenario& s, const json& v) { s.cluster = v.get<std::string>(); }});
  t.push_back({spec("stack", ValueType::Text,
                    "the software stack that runs the plan: catalog name (see `hzp stacks`) or a stack .json file"),
               [](const Scenario& s) -> json { return s.stack; },
               [](Scenario& s, const json& v) { s.stack = v.get<std::string>(); }});
  t.push_back({spec("gpus", ValueType::Integer, "number of GPUs (a whole number of nodes)", 1, 1 << 20),
               [](const Scenario& s) -> json { return s.gpus; },
               [](Scenario& s, const json& v) { s.gpus = v.get<int>(); }});
  {
    OptionSpec c = spec("calibration", ValueType::Text,
                        "calibration overlay (.json): device-profile values fitted for the cluster's device");
    c.nullable = true;
    t.push_back(
        {c,
         [](const Scenario& s) -> json { return s.overlay.calibration.empty() ? json() : json(s.overlay.calibration); },
         [](Scenario& s, const json& v) { s.overlay.calibration = v.is_null() ? "" : v.get<std::string>(); }});
  }
  {
    OptionSpec c =
        spec("nic_gbps", ValueType::Number, "what-if: the NIC speed (the cluster file's nic_Gbps)", 0.001, 1e6);
    c.nullable = true;
    c.unit = "Gb/s";
    t.push_back({c, [](const Scenario& s) -> json { return optional_number(s.overlay.nic_gbps); },
                 [](Scenario& s, const json& v) { s.overlay.nic_gbps = number_or_null(v); }});
  }
  {
    OptionSpec c = spec("oversubscription", ValueType::Number,
                        "what-if: the leaf switches' down:up oversubscription (the first tier's)", 1, 64);
    c.nullable = true;
    t.push_back({c, [](const Scenario& s) -> json { return optional_number(s.overlay.oversubscription); },
                 [](Scenario& s, const json& v) { s.overlay.oversubscription = number_or_null(v); }});
  }
  {
    OptionSpec c = spec("power_limit", ValueType::Number,
                        "what-if: the devices' board power limit (the rated one or a cap the device profile lists "
                        "as measured; tensor-core work runs at that cap's clock)",
                        1, 1e5);
    c.nullable = true;
    c.unit = "W";
    t.push_back({c, [](const Scenario& s) -> json { return optional_number(s.overlay.power_limit_w); },
                 [](Scenario& s, const json& v) { s.overlay.power_limit_w = number_or_null(v); }});
  }
  {
    OptionSpec c = spec("engine", ValueType::Choice, "analytic (fast, uncontended) | simgrid (flow-level contention)");
    c.choices = {"analytic", "simgrid"};
    t.push_back({c, [](const Scenario& s) -> json { return s.engine; },
                 [](Scenario& s, const json& v) { s.engine = v.get<std::string>(); }, true});
  }
  {
    OptionSpec c = spec("ranks", ValueType::Choice,
                        "simgrid: all (every rank in detail) | classes (one per rank class, the rest as background "
                        "flows)");
    c.choices = {"all", "classes"};
    t.push_back({c, [](const Scenario& s) -> json { return s.engine_options.ranks; },
                 [](Scenario& s, const json& v) { s.engine_options.ranks = v.get<std::string>(); }, true});
  }
  t.push_back({spec("nccl_channels", ValueType::Integer, "simgrid: NCCL channels per collective", 1, 64),
               [](const Scenario& s) -> json { return s.engine_options.nccl_channels; },
               [](Scenario& s, const json& v) { s.engine_options.nccl_channels = v.get<int>(); }, true});
  return t;
}

}  // namespace

const std::vector<ScenarioOption>& scenario_option_table() {
  static const std::vector<ScenarioOption> t = make_table();
  return t;
}

const ScenarioOption* find_scenario_option(std::string_view key) {
  return core::find_row(scenario_option_table(), key);
}

std::optional<core::Problem> set_scenario_option(Scenario& sc, std::string_view key, const json& value) {
  return core::set_row(scenario_option_table(), sc, key, value, "scenario option");
}

std::optional<core::Problem> set_input(Scenario& sc, std::string_view key, const json& value) {
  return find_scenario_option(key) ? set_scenario_option(sc, key, value) : plan::set_plan_option(sc.plan, key, value);
}

Inputs resolve_inputs(const InputSources& sources, const std::string& cluster) {
  const models::SpecText mt = sources.model_json
                                  ? models::SpecText{sources.model_json->first, sources.model_json->second}
                                  : models::model_text(sources.model);
  Inputs in;
  in.model = models::model_from_json(mt.text, mt.file);
  in.model_sha256 = core::sha256_hex(mt.text);
  in.cluster = topologies::resolve_cluster(cluster, sources.overlay);
  in.cluster_sha256 = core::sha256_hex(in.cluster.text);
  in.stack = sources.stack_json ? stacks::stack_from_text(sources.stack_json->first, sources.stack_json->second)
                                : stacks::resolve_stack(sources.stack);
  check_calibration_stack(in.cluster, *in.stack, sources.overlay.calibration);
  return in;
}

Inputs resolve_inputs(const Scenario& sc) { return resolve_inputs(sc, sc.cluster); }

core::Schedule build_schedule(const Scenario& sc, plan::Strategy strategy) {
  const Inputs in = resolve_inputs(sc);
  const topologies::Topology topo(in.cluster.spec, sc.gpus);
  plan::PlanOptions o = sc.plan;
  o.strategy = strategy;
  core::Schedule s = plan::lower(in.on(topo), o, {.max_ops = sc.max_ops});
  stamp_inputs(s, in.model_sha256, in.cluster_sha256, *in.stack);
  return s;
}

ScenarioResult run_scenario(const Scenario& sc) { return run_scenario(sc, resolve_inputs(sc)); }

ScenarioResult run_scenario(const Scenario& sc, Inputs in) {
  ScenarioResult r;
  r.model = std::move(in.model);
  r.cluster = std::move(in.cluster.spec);
  r.model_sha256 = std::move(in.model_sha256);
  r.cluster_sha256 = std::move(in.cluster_sha256);
  r.gpus = sc.gpus;
  r.overlay = sc.overlay;
  cost::PerfModel pm(topologies::Topology(r.cluster, sc.gpus));
  r.stack = in.stack;
  r.batch = plan::split_batch(r.model, sc.gpus, sc.plan);
  auto engine = sim::make_engine(sc.engine, pm, sc.engine_options);
  r.engine = engine->name();

  std::vector<plan::Strategy> strategies = sc.strategies.empty() ? plan::all_strategies() : sc.strategies;
  // Every strategy lowered (each refused before it is built if it would be
  // too large) and checked by the engine before any is simulated: a refusal
  // comes first, not after the others ran.
  for (plan::Strategy strategy : strategies) {
    StrategyResult run;
    run.strategy = strategy;
    plan::PlanOptions o = sc.plan;
    o.strategy = strategy;
    // The engine's walk checks progress (deadlocks) as it simulates.
    plan::LoweredPlan lowered =
        plan::lower_plan({r.model, pm.topology(), in.stack}, o, {.max_ops = sc.max_ops, .check = false});
    core::check_schedule(lowered.schedule, core::Progress::ByTheEngine);
    run.schedule = std::move(lowered.schedule);
    run.plan = std::move(lowered.plan);
    stamp_inputs(run.schedule, r.model_sha256, r.cluster_sha256, *in.stack);
    engine->check(run.schedule);
    r.runs.push_back(std::move(run));
  }
  for (StrategyResult& run : r.runs) {
    if (sc.hash_schedules) run.schedule_sha256 = core::schedule_hash(run.schedule);
    traces::TraceHeader header;
    header.schedule_sha256 = sc.hash_schedules ? run.schedule_sha256 : "(not hashed)";
    header.hzp_version = core::version();
    header.git_revision = core::git_revision();
    header.command_line = sc.command_line;
    traces::TimelineRecorder rec(sc.timeline_names);
    engine->run(run.schedule, header, rec);
    run.timeline = rec.take();
    r.engine_detail = run.timeline.header.engine_detail;
    run.metrics = sim::compute_metrics(run.schedule, run.timeline, r.cluster.device);
  }
  return r;
}

}  // namespace hzp::explore
