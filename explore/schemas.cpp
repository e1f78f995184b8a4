// Input schemas (see schemas.hpp).
#include "explore/schemas.hpp"

#include <stdexcept>

#include "core/json_reader.hpp"
#include "explore/scenario.hpp"
#include "explore/sweep.hpp"
#include "models/model_spec.hpp"
#include "plan/options.hpp"
#include "stacks/stack_spec.hpp"
#include "topologies/cluster_spec.hpp"

namespace hzp::explore {
namespace {

using json = nlohmann::ordered_json;

json with_id(json schema, const std::string& name) {
  json out = {{"$schema", schema["$schema"]}, {"$id", "hzp/" + name + ".schema.json"}};
  for (const auto& [k, v] : schema.items()) {
    if (k != "$schema" && k != "$id") out[k] = v;
  }
  return out;
}

// Schedules that between them use every kind of op and group: FSDP, hzp with
// TP, PP x VPP and CP, and a MoE model with expert parallelism. The catalog
// models cut to four layers: every kind of op and group with a small
// fraction of the ops to write and read back.
std::vector<core::Schedule> representative_schedules() {
  std::vector<core::Schedule> out;
  auto add = [&](const char* model, int gpus, plan::Strategy strategy, auto&& tweak) {
    Scenario sc;
    const models::SpecText catalog = models::model_text(model);
    nlohmann::json cut = nlohmann::json::parse(catalog.text);
    cut["layers"] = 4;
    sc.model = model;
    sc.model_json = std::pair{cut.dump(), catalog.file};
    sc.gpus = gpus;
    sc.plan.seq_len = 4096;
    sc.plan.global_batch_sequences = 2 * gpus;
    tweak(sc.plan);
    out.push_back(build_schedule(sc, strategy));
  };
  // With offload: programs record the pinned host memory (host_bytes).
  add("llama3-8b", 16, plan::Strategy::Fsdp, [](plan::PlanOptions& o) {
    o.offload_optimizer = true;
    o.offload_activations = true;
  });
  add("llama3-8b", 32, plan::Strategy::Hzp, [](plan::PlanOptions& o) {
    o.tp = 2;
    o.pp = 2;
    o.vpp = 2;
    o.cp = 2;
    o.tp_comm_overlap = true;
    o.pipeline_p2p_sync = true;
  });
  add("mixtral-8x7b", 16, plan::Strategy::Hzp, [](plan::PlanOptions& o) {
    o.ep = 4;
    o.async = false;
  });
  return out;
}

}  // namespace

const std::vector<std::string>& schema_names() {
  static const std::vector<std::string> names = {"plan", "sweep", "model", "cluster", "stack", "schedule"};
  return names;
}

json input_schema(const std::string& name) {
  if (name == "plan") return plan::plan_schema();
  if (name == "sweep") return sweep_schema();
  core::SchemaRecorder rec;
  std::string title;
  if (name == "model") {
    core::SchemaRecorder::Scope scope(rec);
    for (const auto& m : models::model_catalog_names()) {
      const models::SpecText t = models::model_text(m);
      (void)models::model_from_json(t.text, t.file);
    }
    title = "hzp model (--model FILE; models/catalog/*.json)";
  } else if (name == "cluster") {
    core::SchemaRecorder::Scope scope(rec);
    for (const auto& c : topologies::cluster_catalog_names()) {
      const auto [text, file] = topologies::cluster_text(c);
      (void)topologies::cluster_from_json(text, file);
    }
    title = "hzp cluster (--cluster FILE; topologies/catalog/*.json)";
  } else if (name == "stack") {
    core::SchemaRecorder::Scope scope(rec);
    for (const auto& n : stacks::stack_catalog_names()) {
      const auto [text, file] = stacks::stack_text(n);
      (void)stacks::stack_from_json(text, file);
    }
    title = "hzp software stack (--stack FILE; stacks/catalog/*.json)";
  } else if (name == "schedule") {
    const std::vector<core::Schedule> schedules = representative_schedules();  // lowered outside the recorder
    core::SchemaRecorder::Scope scope(rec);
    for (const auto& s : schedules) (void)core::schedule_from_json(core::to_canonical_json(s), "schedule");
    title = "hzp Schedule (hzp schedule --out FILE; hzp-run SCHEDULE)";
  } else {
    throw std::invalid_argument("no schema named " + name);
  }
  return with_id(rec.schema(title), name);
}

}  // namespace hzp::explore
