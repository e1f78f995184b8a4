// One sweep point (see sweep.hpp): its scenario from the option tables, its
// simulation, and the database row of every input as resolved and every metric.
#include <fmt/format.h>

#include <chrono>

#include "core/error.hpp"
#include "core/io.hpp"
#include "explore/sweep.hpp"
#include "plan/options.hpp"

namespace hzp::explore {
namespace {

using json = nlohmann::ordered_json;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

// The point's inputs as columns (every input key has one), for the rows of
// points that fail before they resolve.
void copy_input_columns(const json& inputs, json& row) {
  for (const auto& [key, value] : inputs.items()) row[key] = value;
}

Scenario scenario_of(const json& in, const std::string& file) {
  Scenario sc;
  std::vector<core::Problem> problems;
  for (const auto& [key, value] : in.items()) {
    std::optional<core::Problem> p = set_input(sc, key, value);
    if (p) problems.push_back(*p);
  }
  if (!problems.empty()) {
    throw core::InputError(file, "", core::join_problems(problems, [](const std::string& k) { return k; }));
  }
  sc.strategies = {sc.plan.strategy};
  sc.hash_schedules = false;  // rows carry the input hashes; the Schedule's adds 20 ms per point
  sc.timeline_names = false;
  return sc;
}

PointResult run_point(const SweepPoint& pt, const WorkLimits& limits) {
  PointResult res;
  json& row = res.row;
  row["point"] = pt.index;
  row["key"] = pt.key;
  row["inputs"] = pt.inputs.dump();
  copy_input_columns(pt.inputs, row);
  row["hzp_version"] = core::version();
  row["git_revision"] = core::git_revision();
  const double t0 = now_s();
  try {
    Scenario sc = scenario_of(pt.inputs, "sweep point");
    limits.apply(sc);
    ScenarioResult r = run_scenario(sc);
    const StrategyResult& run = r.runs.at(0);
    const sim::Metrics& m = run.metrics;
    // Every input as it was resolved: the scenario's, then the plan's (group
    // sizes, async and batch as they ran).
    for (const auto& option : scenario_option_table()) row[option.spec.key] = option.get(sc);
    row["model"] = r.model.name;
    row["cluster"] = r.cluster.name;
    row["engine"] = r.engine;
    row["nic_gbps"] = r.cluster.scale_out.nic_Gbps;
    row["oversubscription"] =
        r.cluster.scale_out.tiers.empty() ? 1.0 : r.cluster.scale_out.tiers.front().oversubscription;
    row["power_limit"] = r.cluster.device.power ? json(r.cluster.device.power->limit_W) : json();
    const json resolved = plan::plan_options_json(run.plan.options);
    for (const auto& [key, value] : resolved.items()) row[key] = value;
    row["engine_detail"] = r.engine_detail;
    row["model_sha256"] = r.model_sha256;
    row["cluster_sha256"] = r.cluster_sha256;
    row["batch_sequences"] = r.batch.sequences;
    if (r.batch.requested_sequences > 0 && r.batch.requested_sequences != r.batch.sequences) {
      row["batch_rounded_from"] = r.batch.requested_sequences;
    }
    row["step_time_s"] = m.step_time.to_seconds();
    row["tokens_per_s"] = m.tokens_per_s;
    row["tflops_per_gpu"] = m.model_tflops_per_gpu;
    row["mfu"] = m.mfu;
    double exposed = 0;
    for (const auto& [kind, d] : m.exposed_comm) exposed += d.to_seconds();
    row["exposed_comm_s"] = exposed;
    row["peak_memory_gib"] = m.peak_memory().gib();
    row["peak_reserved_gib"] = m.peak_reserved().gib();
    row["fits"] = m.fits();
    if (m.fits()) {
      res.status = "ok";
    } else {
      res.status = "infeasible";
      res.error = fmt::format("out of memory: {:.1f} GiB reserved per device, {} has {:.0f} GiB",
                              m.peak_reserved().gib(), r.cluster.device.name, r.cluster.device.hbm_GiB);
    }
  } catch (const core::InfeasibleError& e) {
    res.status = "infeasible";
    res.error = e.what();
  } catch (const std::exception& e) {
    res.status = "error";
    res.error = e.what();
  }
  row["wall_s"] = now_s() - t0;
  row["status"] = res.status;
  if (!res.error.empty()) row["error"] = res.error;
  return res;
}

}  // namespace hzp::explore
