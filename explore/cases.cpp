// `hzp validate cases` (see validate.hpp).
#include "explore/cases.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/io.hpp"
#include "explore/parallel_map.hpp"
#include "explore/scenario.hpp"
#include "models/model_spec.hpp"
#include "plan/plan_file.hpp"
#include "topologies/cluster_spec.hpp"
#include "validation/expected_error.hpp"

namespace hzp::explore {
namespace {

double class_GiB(const sim::ProgramMemory& pm, std::initializer_list<std::string_view> classes) {
  double bytes = 0;
  for (const auto& [cls, b] : pm.at_peak) {
    for (auto c : classes) bytes += cls == c ? static_cast<double>(b.count()) : 0.0;
  }
  return bytes / (1024.0 * 1024 * 1024);
}

// Parameters, gradients and optimizer state per GPU as Korthikanti et al.
// count them: the transformer layers' (18 bytes a parameter), without the
// embedding and head — so the rank class that holds the least (a pipeline
// stage of layers only, when there is one).
double layer_states_GiB(const sim::Metrics& m) {
  double least = 0;
  bool first = true;
  for (const auto& pm : m.memory) {
    const double v = class_GiB(pm, {"params", "grads", "optimizer_states"});
    if (first || v < least) least = v;
    first = false;
  }
  return least;
}

}  // namespace

std::string calibration_for(const validation::Case& c, const std::string& dir) {
  if (dir.empty()) return "";
  std::string device = topologies::load_cluster(c.cluster).device.name;
  std::replace(device.begin(), device.end(), ' ', '-');
  for (const std::string& name : {c.stack.empty() ? std::string() : device + "." + c.stack, device}) {
    if (name.empty()) continue;
    const std::string path = (std::filesystem::path(dir) / (name + ".json")).string();
    if (std::filesystem::exists(path)) return path;
  }
  return "";
}

validation::Scored run_case(const validation::Case& c, const std::string& calibration) {
  Scenario sc;
  sc.overlay.calibration = calibration;
  sc.model_json = std::pair{c.model_json, c.file + " (model)"};
  sc.cluster = c.cluster;
  sc.stack = c.stack;
  if (!c.stack_json.empty()) sc.stack_json = std::pair{c.stack_json, c.file + " (stack)"};
  sc.overlay.nic_gbps = c.nic_gbps;
  sc.overlay.power_limit_w = c.power_limit;
  sc.gpus = c.gpus;
  sc.plan = plan::plan_from_json(c.plan_json, c.file + " (plan)");
  sc.strategies = {sc.plan.strategy};
  sc.hash_schedules = false;
  sc.timeline_names = false;
  ScenarioResult r;
  try {
    r = run_scenario(sc);
  } catch (const core::InputError& e) {
    if (e.key() != "--power-limit") throw;
    throw core::InputError(c.file, "power_limit", e.expected());  // the case's key, not the flag
  }
  const sim::Metrics& m = r.runs.at(0).metrics;
  validation::Scored s{c.name, c.group, c.quantity, c.measured, 0, c.tolerance, m.fits()};
  const double step = m.step_time.to_seconds();
  switch (c.quantity) {
    case validation::Quantity::IterationTime: s.predicted = step; break;
    case validation::Quantity::TokensPerGpu:
      s.predicted = static_cast<double>(r.batch.sequences * r.batch.seq_len) / step / c.gpus;
      break;
    case validation::Quantity::TflopsPerGpu: {
      const validation::GptShape g{static_cast<double>(r.batch.sequences), static_cast<double>(r.batch.seq_len),
                                   static_cast<double>(r.model.layers), static_cast<double>(r.model.hidden),
                                   static_cast<double>(r.model.vocab)};
      s.predicted =
          core::FlopRate::from_flops_per_s(validation::convention_flops(*c.flops_convention, g, c.file) / step / c.gpus)
              .TFLOPs();
      break;
    }
    case validation::Quantity::StatesGiB: s.predicted = layer_states_GiB(m); break;
    case validation::Quantity::ActivationsGiB: {
      const sim::ProgramMemory* worst = m.worst_memory();
      s.predicted = worst ? class_GiB(*worst, {"act"}) : 0.0;
      break;
    }
    case validation::Quantity::ReservedGiB: {
      const sim::ProgramMemory* worst = m.worst_memory();
      s.predicted = worst ? worst->peak_reserved.gib() : 0.0;
      break;
    }
  }
  return s;
}

std::vector<validation::Scored> run_cases(const std::vector<validation::Case>& cases, int jobs,
                                          const std::string& calibration_dir) {
  const auto results = parallel_map(cases.size(), jobs, [&](std::size_t i) {
    try {
      const validation::Scored s = run_case(cases[i], calibration_for(cases[i], calibration_dir));
      return nlohmann::json{{"predicted", s.predicted}, {"fits", s.fits}}.dump();
    } catch (const std::exception& e) {
      return nlohmann::json{{"error", e.what()}}.dump();
    }
  });
  std::vector<validation::Scored> out;
  std::map<std::string, std::string> families;  // cluster -> device family
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto r = nlohmann::json::parse(results[i]);
    if (r.contains("error")) throw core::InputError(cases[i].file, "", r["error"].get<std::string>());
    const auto& c = cases[i];
    auto [family, fresh] = families.try_emplace(c.cluster);
    if (fresh) {
      family->second = validation::device_family(topologies::load_cluster(c.cluster).device.compute_capability);
    }
    const std::string stack =
        c.stack_json.empty() ? c.stack : nlohmann::json::parse(c.stack_json).value("name", c.stack);
    out.push_back(validation::Scored{c.name, c.group, c.quantity, c.measured, r["predicted"].get<double>(), c.tolerance,
                                     r["fits"].get<bool>(), c.pair, c.pair_role, c.inconsistent.empty(), family->second,
                                     stack, c.gpus});
  }
  return out;
}

namespace {

// What a signed error means, whatever the quantity: a step time predicted
// short and a throughput predicted high are both "too fast".
std::string_view verdict(const validation::Scored& s) {
  if (s.predicted == s.measured) return "";
  if (validation::time_like(s.quantity)) return validation::throughput_error(s) > 0 ? "too fast" : "too slow";
  return s.predicted > s.measured ? "too high" : "too low";
}

}  // namespace

std::string cases_table(const std::vector<validation::Scored>& scored) {
  std::string t = fmt::format("{:<46} {:<17} {:>10} {:>10} {:>8} {:<8} {:>6}  {}\n", "case", "quantity", "measured",
                              "predicted", "error", "(hzp)", "tol", "");
  for (const auto& s : scored) {
    t += fmt::format("{:<46} {:<17} {:>10.4g} {:>10.4g} {:>+7.1f}% {:<8} {:>5.0f}%  {}{}\n", s.name,
                     validation::to_string(s.quantity), s.measured, s.predicted, 100 * s.error(), verdict(s),
                     100 * s.tolerance, s.within() ? "ok" : "MISS", s.fits ? "" : " (predicted out of memory)");
  }
  t += fmt::format("\n{:<24} {:>6} {:>7} {:>10} {:>9} {:>12}  {}\n", "group", "cases", "within", "mean |err|",
                   "max |err|", "mean signed", "worst");
  for (const auto& g : validation::summarize(scored)) {
    t += fmt::format("{:<24} {:>6} {:>7} {:>9.1f}% {:>8.1f}% {:>+11.1f}%  {}\n", g.group, g.cases, g.within,
                     100 * g.mean_abs, 100 * g.max_abs, 100 * g.mean_signed, g.worst);
  }
  const auto pairs = validation::score_pairs(scored);
  if (pairs.empty()) return t;
  t += fmt::format("\n{:<34} {:>9} {:>9} {:>8}  {}\n", "pair (speedup of hierarchical over full)", "measured",
                   "predicted", "error", "within 15 %, same sign");
  int within = 0;
  for (const auto& p : pairs) {
    within += p.within() ? 1 : 0;
    t += fmt::format("{:<34} {:>9.3f} {:>9.3f} {:>+7.1f}%  {}\n", p.pair, p.measured, p.predicted, 100 * p.error(),
                     p.within()      ? "ok"
                     : p.same_sign() ? "off"
                                     : "WRONG SIGN");
  }
  t += fmt::format("{} of {} pairs within 15 % and of the same sign\n", within, pairs.size());
  return t;
}

std::string cases_json(const std::vector<validation::Scored>& scored) {
  nlohmann::ordered_json j;
  j["hzp_version"] = core::version();
  j["git_revision"] = core::git_revision();
  j["engine"] = "analytic";
  auto& cases = j["cases"] = nlohmann::ordered_json::array();
  for (const auto& s : scored) {
    cases.push_back({{"name", s.name},
                     {"group", s.group},
                     {"quantity", validation::to_string(s.quantity)},
                     {"measured", s.measured},
                     {"predicted", s.predicted},
                     {"error", s.error()},
                     {"tolerance", s.tolerance},
                     {"within", s.within()},
                     {"fits_in_memory", s.fits}});
  }
  auto& groups = j["summary"] = nlohmann::ordered_json::array();
  for (const auto& g : validation::summarize(scored)) {
    groups.push_back({{"group", g.group},
                      {"cases", g.cases},
                      {"within_tolerance", g.within},
                      {"mean_abs_error", g.mean_abs},
                      {"max_abs_error", g.max_abs},
                      {"mean_signed_error", g.mean_signed},
                      {"worst", g.worst}});
  }
  auto& pairs = j["pairs"] = nlohmann::ordered_json::array();
  for (const auto& p : validation::score_pairs(scored)) {
    pairs.push_back({{"pair", p.pair},
                     {"measured_speedup", p.measured},
                     {"predicted_speedup", p.predicted},
                     {"error", p.error()},
                     {"same_sign", p.same_sign()},
                     {"within", p.within()}});
  }
  return j.dump(2) + "\n";
}

}  // namespace hzp::explore
