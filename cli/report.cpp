// Summary table and JSON (see report.hpp).
#include "cli/report.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/io.hpp"

namespace hzp::cli {
namespace {

std::string si(double x) {
  if (x >= 1e9) return fmt::format("{:.2f}G", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{:.1f}", x);
}

}  // namespace

nlohmann::ordered_json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json overlay_json(const topologies::ClusterOverlay& o) {
  return {
      {"calibration", o.calibration.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.calibration)},
      {"nic_gbps", optional_json(o.nic_gbps)},
      {"oversubscription", optional_json(o.oversubscription)},
      {"power_limit_W", optional_json(o.power_limit_w)}};
}

namespace {

// A name from user data as one path component: letters, digits and ._-
// kept, anything else (a '/', a control character) as '_', no leading dot.
std::string path_component(const std::string& name) {
  std::string out;
  for (const char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  if (out.empty() || out.front() == '.') out.insert(out.begin(), '_');
  return out;
}

}  // namespace

std::string run_stem(const ScenarioResult& r, const StrategyResult& run) {
  return path_component(
      fmt::format("{}_{}x{}_{}", r.model.name, r.cluster.name, r.gpus, plan::to_string(run.strategy)));
}

validation::ExpectedError expected_error_of(const ScenarioResult& r) {
  return validation::expected_error(r.cluster.device.compute_capability,
                                    r.stack ? r.stack->spec.name : stacks::kDefaultStack, r.gpus);
}

nlohmann::ordered_json expected_error_json(const validation::ExpectedError& e) {
  return {{"group", e.group()},
          {"runs", e.runs},
          {"same_device_family", e.same_family},
          {"same_stack", e.same_stack},
          {"mean_abs", e.mean_abs},
          {"bias", e.bias},
          {"max_abs", e.max_abs},
          {"warning", e.warning()},
          {"meaning",
           "throughput errors (predicted / measured - 1: + is faster than the runs) of the nearest group of public "
           "runs hzp validate cases checks; step time, tokens/s and cost share them"}};
}

std::string summary_text(const ScenarioResult& r) {
  std::string out;
  out += fmt::format("hzp {} ({}) - {} engine{}{}\n", core::version(), core::git_revision(), r.engine,
                     r.engine_detail.empty() ? "" : " (" + r.engine_detail + ")",
                     r.stack ? ", stack " + r.stack->spec.name : "");
  out += fmt::format(
      "{} on {} x {} ({}), global batch {} x {} tokens = {} tokens, {} data-parallel ranks, {} micro-batch(es) per "
      "rank\n",
      r.model.name, r.gpus, r.cluster.name, r.cluster.device.name, r.batch.sequences, r.batch.seq_len,
      si(static_cast<double>(r.batch.sequences * r.batch.seq_len)), r.batch.data_parallel, r.batch.micro_batches);
  if (!r.overlay.empty()) out += fmt::format("what-if: {} (applied to {})\n", r.overlay.describe(), r.cluster.name);
  if (r.batch.requested_sequences > 0 && r.batch.requested_sequences != r.batch.sequences) {
    out += fmt::format(
        "global batch rounded from {} to {} sequences (--round-batch): {} do not split over {} data-parallel ranks x "
        "micro-batch\n",
        r.batch.requested_sequences, r.batch.sequences, r.batch.requested_sequences, r.batch.data_parallel);
  }
  out += "MFU counts model FLOPs (Megatron convention, no recomputation) against dense bf16 peak.\n\n";
  out += fmt::format("{:<8} {:<26} {:>9} {:>9} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9}  {}\n", "strategy",
                     "(g_p,g_g,g_o) issue tp pp", "step (s)", "tokens/s", "TF/GPU", "MFU", "exposed", "idle (s)",
                     "mem GiB", "reserved", "fits");
  for (const auto& run : r.runs) {
    const auto& m = run.metrics;
    double exposed = 0;
    for (const auto& [k, d] : m.exposed_comm) exposed += d.to_seconds();
    const plan::PlanOptions& p = run.plan.options;
    std::string shards =
        fmt::format("({},{},{}) {}", p.param_shard, p.grad_shard, p.optim_shard, *p.async ? "async" : "sync");
    if (p.tp > 1 || p.pp > 1) {
      shards += fmt::format(" tp{} pp{}", p.tp, p.pp);
      if (p.vpp > 1) shards += fmt::format("x{}", p.vpp);
    }
    out += fmt::format("{:<8} {:<26} {:>9.3f} {:>9} {:>8.1f} {:>5.1f}% {:>9.3f} {:>9.3f} {:>9.1f} {:>9.1f}  {}\n",
                       plan::to_string(run.strategy), shards, m.step_time.to_seconds(), si(m.tokens_per_s),
                       m.model_tflops_per_gpu, 100 * m.mfu, exposed, m.compute_idle.to_seconds(), m.peak_memory().gib(),
                       m.peak_reserved().gib(),
                       m.fits() ? "yes" : (m.host_fits() ? "NO (out of memory)" : "NO (host memory)"));
  }
  out += fmt::format(
      "mem GiB / reserved: peak allocated, and peak held by the caching allocator, per {:.0f} GiB device.\n",
      r.cluster.device.hbm_GiB);
  out += expected_error_of(r).text();
  for (const auto& run : r.runs) {
    if (!r.stack) continue;
    if (auto why = plan::not_runnable(r.stack->spec, run.plan.options)) {
      out += fmt::format("note: {}: {}; simulated with that stack's costs all the same\n",
                         plan::to_string(run.strategy), *why);
    }
  }
  out +=
      "\nexposed: collective time not hidden behind compute, per group kind; idle: compute stream with nothing to "
      "run.\n";
  for (const auto& run : r.runs) {
    out += fmt::format("{}: ", plan::to_string(run.strategy));
    bool first = true;
    for (const auto& [k, d] : run.metrics.exposed_comm) {
      out += fmt::format("{}exposed {} {:.3f} s", first ? "" : ", ", k, d.to_seconds());
      first = false;
    }
    for (const auto& b : run.metrics.busy) {
      std::string who =
          run.schedule.programs.size() > 1 ? run.schedule.programs[static_cast<std::size_t>(b.program)].name + " " : "";
      out += fmt::format("{}{}{} busy {:.1f}%", first ? "" : ", ", who, b.stream, 100 * b.fraction);
      first = false;
    }
    out += "\n";
  }
  return out;
}

std::string summary_json(const ScenarioResult& r, const std::string& command_line) {
  nlohmann::ordered_json j;
  j["schema_version"] = 1;
  j["hzp_version"] = core::version();
  j["git_revision"] = core::git_revision();
  j["command_line"] = command_line;
  j["engine"] = r.engine;
  if (!r.engine_detail.empty()) j["engine_detail"] = r.engine_detail;
  j["inputs"] = {{"model", r.model.name},
                 {"model_sha256", r.model_sha256},
                 {"cluster", r.cluster.name},
                 {"cluster_sha256", r.cluster_sha256},
                 {"stack", r.stack ? r.stack->spec.name : ""},
                 {"stack_sha256", r.stack ? r.stack->sha256 : ""},
                 {"gpus", r.gpus}};
  j["inputs"].update(overlay_json(r.overlay));
  j["batch"] = {{"seq_len", r.batch.seq_len},
                {"global_batch_sequences", r.batch.sequences},
                {"global_batch_tokens", r.batch.sequences * r.batch.seq_len},
                {"data_parallel", r.batch.data_parallel},
                {"micro_batches_per_rank", r.batch.micro_batches}};
  if (r.batch.requested_sequences > 0 && r.batch.requested_sequences != r.batch.sequences) {
    j["batch"]["rounded_from_sequences"] = r.batch.requested_sequences;
  }
  j["expected_error"] = expected_error_json(expected_error_of(r));
  j["mfu_convention"] =
      "model FLOPs (Megatron-LM formula, causal mask not exploited, no recomputation) / dense bf16 peak";
  auto& runs = j["results"] = nlohmann::ordered_json::array();
  for (const auto& run : r.runs) {
    const auto& m = run.metrics;
    nlohmann::ordered_json x;
    x["strategy"] = plan::to_string(run.strategy);
    x["schedule_sha256"] = run.schedule_sha256;
    x["plan"] = nlohmann::ordered_json::parse(run.plan.provenance_json());
    x["step_time_s"] = m.step_time.to_seconds();
    x["tokens_per_s"] = m.tokens_per_s;
    x["model_tflops_per_gpu"] = m.model_tflops_per_gpu;
    x["mfu"] = m.mfu;
    nlohmann::ordered_json exposed = nlohmann::ordered_json::object();
    for (const auto& [k, d] : m.exposed_comm) exposed[k] = d.to_seconds();
    x["exposed_comm_s"] = exposed;
    x["compute_idle_s"] = m.compute_idle.to_seconds();
    // The busiest compute stream's step by kernel class (sim::TimeSplit).
    if (m.split.program >= 0) {
      nlohmann::ordered_json split;
      split["rank_class"] = run.schedule.programs.at(static_cast<std::size_t>(m.split.program)).name;
      split["stream"] = m.split.stream;
      for (const auto& [name, d] : m.split.classes) split[name] = d.to_seconds();
      split["host_bound"] = m.split.host_bound.to_seconds();
      split["waiting"] = m.split.waiting.to_seconds();
      x["time_split_s"] = split;
    }
    nlohmann::ordered_json busy = nlohmann::ordered_json::object();
    for (const auto& b : m.busy) busy[b.stream] = b.fraction;
    x["stream_busy_fraction"] = busy;
    x["peak_memory_GiB"] = m.peak_memory().gib();
    x["peak_reserved_GiB"] = m.peak_reserved().gib();
    nlohmann::ordered_json contributors = nlohmann::ordered_json::object();
    if (const auto* w = m.worst_memory()) {
      for (const auto& [k, b] : w->at_peak) contributors[k] = b.gib();
    }
    x["memory_at_peak_GiB"] = contributors;
    x["hbm_GiB"] = r.cluster.device.hbm_GiB;
    const std::optional<std::string> why = r.stack ? plan::not_runnable(r.stack->spec, run.plan.options) : std::nullopt;
    x["not_runnable_by_stack"] = why ? nlohmann::ordered_json(*why) : nlohmann::ordered_json(nullptr);
    x["fits_in_memory"] = m.fits();
    if (m.host_memory().count() > 0) {  // offload only: older summaries stay as they were
      x["host_memory_GiB"] = m.host_memory().gib();
      x["host_memory_fits"] = m.host_fits();
    }
    runs.push_back(x);
  }
  return j.dump(2) + "\n";
}

namespace {

std::string md_cell(const std::string& text) {
  std::string escaped;
  for (char c : text) escaped += c == '|' ? std::string("\\|") : std::string(1, c);
  return escaped;
}

std::string type_text(const nlohmann::ordered_json& p) {
  if (!p.contains("type")) return "any";
  if (!p["type"].is_array()) return p["type"].get<std::string>();
  std::string t;
  for (const auto& x : p["type"]) t += (t.empty() ? "" : " or ") + x.get<std::string>();
  return t;
}

std::string accepts_text(const nlohmann::ordered_json& p) {
  std::string accepts;
  if (p.contains("const")) accepts = p["const"].dump();
  if (p.contains("enum")) {
    for (const auto& e : p["enum"]) accepts += (accepts.empty() ? "" : ", ") + e.get<std::string>();
  }
  const char* low = p.contains("exclusiveMinimum") ? "exclusiveMinimum" : "minimum";
  if (p.contains(low)) {
    accepts = fmt::format("{}{} to {}", p.contains("exclusiveMinimum") ? "above " : "", p[low].dump(),
                          p.value("maximum", nlohmann::ordered_json("any")).dump());
  }
  if (p.contains("items") && p["items"].contains("minimum")) {
    accepts = fmt::format("{} x {} to {}", p.value("minItems", 1), p["items"]["minimum"].dump(),
                          p["items"]["maximum"].dump());
  }
  return accepts;
}

// One row per key, nested objects as dotted keys ("node.scale_up.bw_GBps",
// "scale_out.tiers[].radix").
void reference_rows(const nlohmann::ordered_json& object, const std::string& prefix, std::string& out) {
  const auto& required = object.value("required", nlohmann::ordered_json::array());
  for (const auto& [key, p] : object.at("properties").items()) {
    const std::string name = prefix + key;
    const bool req = std::find(required.begin(), required.end(), key) != required.end();
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", name, type_text(p),
                       p.contains("default") ? md_cell(p["default"].dump()) : "", md_cell(accepts_text(p)),
                       req ? "yes" : "no", md_cell(p.value("description", "")));
    if (p.contains("properties")) reference_rows(p, name + ".", out);
    if (p.contains("items") && p["items"].contains("properties")) reference_rows(p["items"], name + "[].", out);
  }
}

}  // namespace

std::string schema_reference(const nlohmann::ordered_json& schema) {
  std::string out =
      fmt::format("### {}\n\n| key | type | default | accepts | required | meaning |\n|---|---|---|---|---|---|\n",
                  schema.value("title", "options"));
  reference_rows(schema, "", out);
  return out;
}

}  // namespace hzp::cli
