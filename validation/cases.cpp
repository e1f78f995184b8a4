// Validation cases (see cases.hpp).
#include "validation/cases.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/json_reader.hpp"

namespace hzp::validation {
namespace {

constexpr std::string_view kMegatron2021 = "megatron-2021";

bool memory_quantity(Quantity q) {
  return q == Quantity::StatesGiB || q == Quantity::ActivationsGiB || q == Quantity::ReservedGiB;
}

}  // namespace

std::string_view to_string(Quantity q) { return core::name_of(kQuantities, q); }

Case case_from_json(const std::string& text, const std::string& file) {
  const nlohmann::json j = core::parse_json(text, file);
  core::StrictObject o(j, file);
  core::require_schema_version(o, 1);
  Case c;
  c.file = file;
  c.name = o.str("name");
  c.group = o.str("group");
  c.source = o.str("source");
  if (c.source.empty()) o.fail("source", "expected the paper, table or page the measurement comes from");
  c.notes = o.str("notes");
  const nlohmann::json& model = o.raw("model");
  if (!model.is_object()) o.fail("model", "expected the full model object (the model catalog's schema)");
  c.model_json = model.dump();
  c.cluster = o.str("cluster");
  if (o.has("stack") && o.raw("stack").is_object()) {
    c.stack_json = o.raw("stack").dump();
  } else {
    c.stack = o.str("stack");
  }
  if (o.has("pair")) {
    c.pair = o.name("pair");
    c.pair_role = o.str("pair_role");
    if (c.pair_role != "hierarchical" && c.pair_role != "full")
      o.fail("pair_role", fmt::format("expected \"hierarchical\" or \"full\", got \"{}\"", c.pair_role));
  }
  if (o.has("nic_gbps")) c.nic_gbps = o.number("nic_gbps", 0, 1e6, true);
  if (o.has("power_limit")) c.power_limit = o.number("power_limit", 1, 1e5);
  c.gpus = static_cast<int>(o.integer("gpus", 1, 1 << 20));
  const nlohmann::json& plan = o.raw("plan");
  if (!plan.is_object()) o.fail("plan", "expected the full plan object (a plan file's schema)");
  c.plan_json = plan.dump();
  core::StrictObject m = o.object("measured");
  c.quantity = core::choose(m, "quantity", kQuantities);
  c.measured = m.number("value", 0, 1e300, true);
  if (!m.raw("flops_convention").is_null()) c.flops_convention = m.str("flops_convention");
  if (c.quantity == Quantity::TflopsPerGpu && !c.flops_convention) {
    m.fail("flops_convention", "expected how the source counts FLOPs (tflops_per_gpu needs it)");
  }
  if (c.flops_convention && !c.flops_convention->starts_with(kMegatron2021)) {
    m.fail("flops_convention", fmt::format("expected a convention starting with \"{}\"", kMegatron2021));
  }
  m.finish();
  c.tolerance = o.number("tolerance", 0, 10, true);
  if (o.has("inconsistent")) c.inconsistent = o.str("inconsistent");
  o.finish();
  return c;
}

std::vector<std::string> case_files(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw core::InputError(dir, "", "expected a directory of " + what);
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  }
  return out;
}

std::vector<Case> load_cases(const std::string& dir, const std::vector<std::string>& filters) {
  std::vector<Case> out;
  for (const auto& file : case_files(dir, "validation cases")) {
    Case c = case_from_json(core::read_file(file), file);
    const bool wanted = filters.empty() || std::any_of(filters.begin(), filters.end(), [&c](const std::string& f) {
                          return c.name.find(f) != std::string::npos || c.group.find(f) != std::string::npos;
                        });
    if (wanted) out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), [](const Case& a, const Case& b) { return a.name < b.name; });
  return out;
}

double megatron_2021_flops(double batch, double seq, double layers, double hidden, double vocab) {
  return 96.0 * batch * seq * layers * hidden * hidden *
         (1.0 + seq / (6.0 * hidden) + vocab / (16.0 * layers * hidden));
}

double convention_flops(const std::string& convention, const GptShape& g, const std::string& file) {
  if (!convention.starts_with(kMegatron2021)) {
    throw core::InputError(file, "measured.flops_convention",
                           fmt::format("expected a convention starting with \"{}\"", kMegatron2021));
  }
  return megatron_2021_flops(g.batch, g.seq, g.layers, g.hidden, g.vocab);
}

bool Scored::within() const { return std::isfinite(predicted) && std::abs(error()) <= tolerance; }

std::vector<Summary> summarize(const std::vector<Scored>& scored) {
  std::vector<Summary> out;
  std::map<std::string, std::size_t> at;
  auto add = [&](const std::string& group, const Scored& s) {
    auto [it, fresh] = at.emplace(group, out.size());
    if (fresh) out.push_back(Summary{group, 0, 0, 0, 0, 0, ""});
    Summary& g = out[it->second];
    const double e = s.error();
    ++g.cases;
    g.within += s.within() ? 1 : 0;
    g.mean_abs += std::abs(e);
    g.mean_signed += e;
    if (std::abs(e) >= g.max_abs) {
      g.max_abs = std::abs(e);
      g.worst = s.name;
    }
  };
  for (const auto& s : scored) add(s.group, s);
  for (const auto& s : scored) {
    if (memory_quantity(s.quantity)) continue;
    add(s.group.starts_with("hopper-") ? "hopper" : s.group.ends_with("-sharded") ? "sharded-dp" : "megatron-era", s);
  }
  for (const auto& s : scored) add(memory_quantity(s.quantity) ? "memory" : "all", s);
  for (const auto& s : scored) {
    if (!memory_quantity(s.quantity) && s.consistent) add("all consistent", s);
  }
  for (auto& g : out) {
    g.mean_abs /= g.cases;
    g.mean_signed /= g.cases;
  }
  return out;
}

std::vector<PairScore> score_pairs(const std::vector<Scored>& scored) {
  std::vector<PairScore> out;
  std::map<std::string, std::pair<const Scored*, const Scored*>> members;  // pair -> (hierarchical, full)
  std::vector<std::string> order;
  for (const auto& s : scored) {
    if (s.pair.empty()) continue;
    auto [it, fresh] = members.try_emplace(s.pair);
    if (fresh) order.push_back(s.pair);
    (s.pair_role == "hierarchical" ? it->second.first : it->second.second) = &s;
  }
  for (const auto& name : order) {
    const auto [h, f] = members.at(name);
    if (!h || !f || h->quantity != f->quantity) continue;
    // Throughputs divide hierarchical by full; times full by hierarchical.
    const bool time = h->quantity == Quantity::IterationTime;
    auto speedup = [&](double hv, double fv) { return time ? fv / hv : hv / fv; };
    out.push_back({name, speedup(h->measured, f->measured), speedup(h->predicted, f->predicted)});
  }
  return out;
}

MissBaseline miss_baseline_from_json(const std::string& text, const std::string& file) {
  const nlohmann::json j = core::parse_json(text, file);
  core::StrictObject o(j, file);
  core::require_schema_version(o, 1);
  (void)o.str("note");
  (void)o.str("hzp_version");
  (void)o.str("git_revision");
  const nlohmann::json& misses = o.raw("misses");
  if (!misses.is_object()) o.fail("misses", "expected an object of case name -> signed relative error");
  MissBaseline b;
  for (const auto& [name, e] : misses.items()) {
    if (!e.is_number() || !std::isfinite(e.get<double>())) {
      o.fail("misses." + name, "expected the case's signed relative error, a finite number");
    }
    b.errors.emplace(name, e.get<double>());
  }
  o.finish();
  return b;
}

MissBaseline misses_of(const std::vector<Scored>& scored) {
  MissBaseline b;
  for (const auto& s : scored) {
    if (!s.within()) b.errors.emplace(s.name, s.error());
  }
  return b;
}

BaselineCheck check_misses(const std::vector<Scored>& scored, const MissBaseline& baseline) {
  BaselineCheck out;
  for (const auto& s : scored) {
    const auto it = baseline.errors.find(s.name);
    const double e = s.error();
    if (it == baseline.errors.end()) {
      if (!s.within()) {
        out.failures.push_back(fmt::format("{}: {:+.1f}% is outside its tolerance of {:.0f}% (a new miss)", s.name,
                                           100 * e, 100 * s.tolerance));
      }
      continue;
    }
    const double was = it->second;
    if (!std::isfinite(e) || std::abs(e) > std::abs(was) + kMissSlack) {
      out.failures.push_back(
          fmt::format("{}: {:+.1f}%, worse than the recorded miss of {:+.1f}%", s.name, 100 * e, 100 * was));
    } else if (s.within()) {
      out.notes.push_back(
          fmt::format("{}: {:+.1f}% is within its tolerance now (recorded {:+.1f}%)", s.name, 100 * e, 100 * was));
    } else if (std::abs(e) < std::abs(was) - kMissSlack) {
      out.notes.push_back(fmt::format("{}: {:+.1f}%, better than the recorded {:+.1f}%", s.name, 100 * e, 100 * was));
    }
  }
  return out;
}

}  // namespace hzp::validation
