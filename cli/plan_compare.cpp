// The best plan of each strategy family, side by side (see plan_compare.hpp).
#include "cli/plan_compare.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "cli/option_flags.hpp"
#include "core/error.hpp"
#include "cost/perf_model.hpp"
#include "explore/scenario.hpp"
#include "explore/why.hpp"

namespace hzp::cli {

std::vector<plan::Strategy> strategies_of(const std::vector<std::string>& names, const char* flag) {
  const core::OptionSpec& spec = *plan_specs({"strategy"}).at(0);
  std::vector<plan::Strategy> out;
  for (const auto& n : names) {
    const core::Checked c = core::value_from_text(spec, n);
    if (!c.problem.empty()) throw core::InputError("command line", flag, c.problem);
    const plan::Strategy s = *plan::parse_strategy(c.value.get<std::string>());
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

std::vector<Family> families_of(const std::vector<std::string>& texts, const std::string& stack) {
  std::vector<Family> out;
  for (const auto& text : texts) {
    const auto at = text.find('@');
    Family f;
    f.strategy = strategies_of({text.substr(0, at)}, "--compare").at(0);
    f.stack = at == std::string::npos ? stack : text.substr(at + 1);
    plan::PlanOptions o;
    o.strategy = f.strategy;
    if (auto why = plan::not_runnable(stacks::resolve_stack(f.stack)->spec, o)) {
      throw core::InputError("command line", "--compare", *why);
    }
    const bool seen = std::any_of(out.begin(), out.end(),
                                  [&](const Family& g) { return g.strategy == f.strategy && g.stack == f.stack; });
    if (!seen) out.push_back(f);
  }
  const bool one_stack =
      std::all_of(out.begin(), out.end(), [&](const Family& f) { return f.stack == out.front().stack; });
  for (Family& f : out) {
    f.label =
        std::string(plan::to_string(f.strategy)) + (one_stack ? "" : "@" + stacks::resolve_stack(f.stack)->spec.name);
  }
  return out;
}

std::vector<Compared> compare_families(explore::PlanQuery q, const std::vector<Family>& families) {
  std::vector<Compared> out;
  q.top = 1;
  const double cc = topologies::load_cluster(q.clusters.at(0)).device.compute_capability;
  for (const Family& family : families) {
    q.stack = family.stack;
    q.strategies = {family.strategy};
    const explore::PlanSearch r = explore::search_plans(q);
    Compared c;
    c.family = family;
    if (!r.best.empty()) c.best = r.best.front();
    c.tally = r.settings.at(0);
    c.expected = validation::expected_error(cc, stacks::resolve_stack(family.stack)->spec.name, q.gpus.at(0));
    out.push_back(std::move(c));
  }
  return out;
}

namespace {

// The family's best plan simulated as `hzp simulate` runs it: its step's terms.
explore::PlanTerms terms_of(const explore::PlanQuery& q, const Compared& c) {
  const explore::PlanChoice& best = *c.best;
  explore::Scenario sc;
  static_cast<explore::InputSources&>(sc) = q;  // the model, calibration and what-ifs the search ran with
  sc.stack = c.family.stack;
  sc.cluster = best.cluster;
  sc.gpus = best.gpus;
  sc.max_ops = q.max_ops;
  sc.plan = best.options;
  sc.strategies = {best.options.strategy};
  const explore::ScenarioResult r = explore::run_scenario(sc);
  const cost::PerfModel pm(topologies::Topology(r.cluster, r.gpus));
  explore::PlanTerms t = explore::plan_terms(r, pm).at(0);
  t.name = c.family.label;
  return t;
}

}  // namespace

std::string compare_text(const explore::PlanQuery& q, const std::vector<Compared>& families, double tolerance) {
  std::size_t width = 6;
  for (const auto& c : families) width = std::max(width, c.family.label.size());
  std::string text = fmt::format("hzp plan --compare: the best plan of each family, {} on {} x {}\n", q.model,
                                 q.gpus.at(0), q.clusters.at(0));
  if (!q.overlay.empty()) text += fmt::format("what-if: {}\n", q.overlay.describe());
  text += "\n";
  text += fmt::format("{:<{}} {:<44} {:>8} {:>10} {:>6} {:>9} {:>9}  {}\n", "family", width, "plan", "step s",
                      "tokens/s", "MFU", "mem GiB", "$/Mtok", "bottleneck");
  std::vector<explore::PlanTerms> terms;
  double hbm = 0;
  for (const auto& c : families) {
    if (!c.best) {
      text += fmt::format("{:<{}} no plan fits: {} candidates, {} over the memory budget, {} over --max-ops\n",
                          c.family.label, width, c.tally.candidates, c.tally.memory, c.tally.op_limit);
      continue;
    }
    const explore::PlanChoice& b = *c.best;
    text +=
        fmt::format("{:<{}} {:<44} {:>8.3f} {:>10.0f} {:>5.1f}% {:>9.1f} {:>9}  {}\n", c.family.label, width,
                    explore::describe_plan(b), b.step_s, b.tokens_per_s, 100 * b.mfu, b.peak_reserved_GiB,
                    b.usd_per_million_tokens ? fmt::format("{:.3f}", *b.usd_per_million_tokens) : "n/a", b.bottleneck);
    terms.push_back(terms_of(q, c));
    hbm = b.hbm_GiB;
  }
  if (!terms.empty()) text += "\n" + explore::why_text(terms, hbm, tolerance);
  // Each family's expected error, once per distinct group (named by the
  // first family of the group where the families' groups differ).
  std::vector<std::pair<std::string, std::string>> groups;  // label, text
  for (const auto& c : families) {
    const std::string e = c.expected.text();
    const bool said = std::any_of(groups.begin(), groups.end(), [&](const auto& g) { return g.second == e; });
    if (!said) groups.emplace_back(c.family.label, e);
  }
  for (const auto& [label, e] : groups) text += "\n" + (groups.size() > 1 ? label + ": " : std::string()) + e;
  return text;
}

nlohmann::ordered_json compare_json(const std::vector<Compared>& families) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& c : families) {
    nlohmann::ordered_json x{{"family", plan::to_string(c.family.strategy)},
                             {"stack", stacks::resolve_stack(c.family.stack)->spec.name}};
    if (c.best) {
      const explore::PlanChoice& b = *c.best;
      x["plan"] = explore::describe_plan(b);
      x["param_shard"] = b.shards.param;
      x["grad_shard"] = b.shards.grad;
      x["optim_shard"] = b.shards.optim;
      x["tp"] = b.options.tp;
      x["pp"] = b.options.pp;
      x["step_time_s"] = b.step_s;
      x["tokens_per_s"] = b.tokens_per_s;
      x["mfu"] = b.mfu;
      x["peak_reserved_GiB"] = b.peak_reserved_GiB;
      x["usd_per_million_tokens"] =
          b.usd_per_million_tokens ? nlohmann::ordered_json(*b.usd_per_million_tokens) : nlohmann::ordered_json();
      x["bottleneck"] = b.bottleneck;
    } else {
      x["plan"] = nullptr;
    }
    x["candidates"] = c.tally.candidates;
    x["over_memory"] = c.tally.memory;
    x["over_max_ops"] = c.tally.op_limit;
    x["expected_error"] = {{"group", c.expected.group()},
                           {"mean_abs", c.expected.mean_abs},
                           {"bias", c.expected.bias},
                           {"warning", c.expected.warning()}};
    out.push_back(x);
  }
  return out;
}

}  // namespace hzp::cli
