// Scenario composition (see scenario.hpp).
#include "explore/scenario.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/io.hpp"
#include "core/json_reader.hpp"
#include "core/sha256.hpp"
#include "sim/engine.hpp"

namespace hzp::explore {
namespace {

// Adds the input hashes to the Schedule's provenance.
void stamp_inputs(core::Schedule& s, const std::string& model_sha, const std::string& cluster_sha) {
  nlohmann::json p = nlohmann::json::parse(s.provenance_json);
  p["inputs"] = {{"model_sha256", model_sha}, {"cluster_sha256", cluster_sha}};
  p["hzp_version"] = core::version();
  s.provenance_json = p.dump();
}

}  // namespace

std::pair<std::string, std::string> scenario_cluster_text(const Scenario& sc) {
  auto [text, file] = topologies::cluster_text(sc.cluster);
  if (!sc.nic_gbps && !sc.oversubscription && sc.calibration.empty()) return {text, file};
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
  if (!sc.calibration.empty()) {
    // {"schema_version": 1, "device": NAME, "source": ..., "device_profile": {key: value},
    //  optional "scale_up": {...}, "scale_out": {...}} (what `hzp calibrate` writes).
    const nlohmann::json cal = core::read_json_file(sc.calibration);
    core::StrictObject o(cal, sc.calibration);
    core::require_schema_version(o, 1);
    const std::string device = o.str("device");
    if (device != j["device"].value("name", "")) {
      o.fail("device",
             fmt::format("expected the cluster's device \"{}\", got \"{}\"", j["device"].value("name", ""), device));
    }
    if (o.str("source").empty()) o.fail("source", "expected how the calibration was obtained");
    // Each section overlays the cluster file's object of the same meaning;
    // only keys that object has.
    auto overlay = [&](const std::string& section, nlohmann::ordered_json& target, bool required) {
      if (!required && !o.has(section)) return;
      const nlohmann::json& values = o.raw(section);
      if (!values.is_object()) o.fail(section, "expected an object of values for the cluster file's " + section);
      for (const auto& [key, value] : values.items()) {
        if (!target.contains(key) || key == "name") {
          o.fail(section + "." + key, "expected a key of the cluster file's " + section);
        }
        target[key] = value;
      }
    };
    overlay("device_profile", j["device"], true);
    overlay("scale_up", j["node"]["scale_up"], false);
    overlay("scale_out", j["scale_out"], false);
    o.finish();
    file += " with calibration " + sc.calibration;
  }
  if (sc.nic_gbps) j["scale_out"]["nic_Gbps"] = *sc.nic_gbps;
  if (sc.oversubscription && !j["scale_out"]["tiers"].empty()) {
    j["scale_out"]["tiers"][0]["oversubscription"] = *sc.oversubscription;
  }
  return {j.dump(2), file};
}

namespace {
models::SpecText scenario_model_text(const Scenario& sc) {
  if (sc.model_json) return models::SpecText{sc.model_json->first, sc.model_json->second};
  return models::model_text(sc.model);
}
}  // namespace

core::Schedule build_schedule(const Scenario& sc, plan::Strategy strategy) {
  models::SpecText mt = scenario_model_text(sc);
  auto [ct, cf] = scenario_cluster_text(sc);
  models::ModelSpec m = models::model_from_json(mt.text, mt.file);
  topologies::Topology topo(topologies::cluster_from_json(ct, cf), sc.gpus);
  plan::PlanOptions o = sc.plan;
  o.strategy = strategy;
  core::Schedule s = plan::lower(m, topo, o);
  stamp_inputs(s, core::sha256_hex(mt.text), core::sha256_hex(ct));
  return s;
}

ScenarioResult run_scenario(const Scenario& sc) {
  ScenarioResult r;
  models::SpecText mt = scenario_model_text(sc);
  auto [ct, cf] = scenario_cluster_text(sc);
  r.model = models::model_from_json(mt.text, mt.file);
  r.cluster = topologies::cluster_from_json(ct, cf);
  r.model_sha256 = core::sha256_hex(mt.text);
  r.cluster_sha256 = core::sha256_hex(ct);
  r.gpus = sc.gpus;
  topologies::PerfModel pm(topologies::Topology(r.cluster, sc.gpus));
  r.batch = plan::split_batch(r.model, sc.gpus, sc.plan);
  auto engine = sim::make_engine(sc.engine, pm, sc.engine_options);
  r.engine = engine->name();

  std::vector<plan::Strategy> strategies = sc.strategies.empty() ? plan::all_strategies() : sc.strategies;
  for (plan::Strategy strategy : strategies) {
    StrategyResult run;
    run.strategy = strategy;
    plan::PlanOptions o = sc.plan;
    o.strategy = strategy;
    run.schedule = plan::lower(r.model, pm.topology(), o);
    stamp_inputs(run.schedule, r.model_sha256, r.cluster_sha256);
    if (sc.hash_schedules) run.schedule_sha256 = core::schedule_hash(run.schedule);
    traces::TraceHeader header;
    header.schedule_sha256 = sc.hash_schedules ? run.schedule_sha256 : "(not hashed)";
    header.hzp_version = core::version();
    header.git_revision = core::git_revision();
    header.command_line = sc.command_line;
    traces::TimelineRecorder rec;
    engine->run(run.schedule, header, rec);
    run.timeline = rec.take();
    r.engine_detail = run.timeline.header.engine_detail;
    run.metrics = sim::compute_metrics(run.schedule, run.timeline, r.cluster.device);
    r.runs.push_back(std::move(run));
  }
  return r;
}

}  // namespace hzp::explore
