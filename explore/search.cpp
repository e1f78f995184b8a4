// Plan search (see search.hpp): the phases in order — the space
// (search_space.cpp), the memory bound (search_bounds.cpp), screening with
// branch and bound (search_screen.cpp), exact verification (search_verify.cpp).
#include "explore/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <set>
#include <tuple>
#include <utility>

#include "core/options.hpp"
#include "explore/search_internal.hpp"

namespace hzp::explore {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

std::string describe_plan(const PlanChoice& c) {
  const auto& o = c.options;
  std::string s = fmt::format("{} ({},{},{}) {}", plan::to_string(o.strategy), c.shards.param, c.shards.grad,
                              c.shards.optim, c.async ? "async" : "sync");
  if (o.tp > 1) s += fmt::format(" tp{}", o.tp);
  if (o.pp > 1) s += fmt::format(" pp{}{}", o.pp, o.vpp > 1 ? fmt::format("x{}", o.vpp) : "");
  if (o.pipeline_schedule != plan::PipelineSchedule::OneFOneB) {
    s += fmt::format(" {}", plan::to_string(o.pipeline_schedule));
  }
  if (o.pipeline_layout) s += fmt::format(" layout {}", *o.pipeline_layout);
  if (o.cp > 1) s += fmt::format(" cp{}", o.cp);
  if (o.ulysses > 1) s += fmt::format(" ulysses{}", o.ulysses);
  if (o.ep > 1) s += fmt::format(" ep{}", o.ep);
  if (o.expert_tp) s += fmt::format(" etp{}", *o.expert_tp);
  if (o.offload_optimizer) s += " offload-optimizer";
  if (o.offload_params) s += " offload-params";
  if (o.offload_activations) s += " offload-activations";
  s += fmt::format(" mb{} {}", o.micro_batch, plan::to_string(o.recompute));
  return s;
}

std::string_view to_string(Objective o) { return core::name_of(kObjectives, o); }
std::optional<Objective> parse_objective(std::string_view s) { return core::parse_name(kObjectives, s); }

PlanSearch search_plans(const PlanQuery& q) {
  const double t0 = now_s();
  std::vector<core::Problem> bad;
  if (q.top < 1) bad.push_back({"top", "expected at least 1"});
  if (!bad.empty()) throw core::ProblemError(std::move(bad));

  search::Search s(q);
  search::enumerate_space(s);
  // No layout splits the batch: bad input (the reason that removed every
  // candidate), not "no plan fits the memory budget".
  if (s.space.empty() && s.why_unsplit) {
    core::Problem p = *s.why_unsplit;
    p.message = fmt::format(
        "the batch splits under none of the {} layouts tried (tensor, pipeline, micro-batch); "
        "the first: {}",
        s.unsplit, p.message);
    throw core::ProblemError({std::move(p)});
  }
  search::prune_by_memory(s);
  const double t_screen = now_s();
  search::screen_groups(s);
  const double t_exact = now_s();
  search::verify_best(s);
  search::refine_best(s);
  s.out.screen_seconds = t_exact - t_screen;
  s.out.exact_seconds = now_s() - t_exact;

  // Ties (plans the model cannot tell apart) in a fixed order: less memory first, then by name.
  std::sort(s.found.begin(), s.found.end(), [&](const PlanChoice& a, const PlanChoice& b) {
    const double sa = q.objective == Objective::Cost ? a.usd_per_million_tokens.value_or(1e300) : a.step_s;
    const double sb = q.objective == Objective::Cost ? b.usd_per_million_tokens.value_or(1e300) : b.step_s;
    return std::tuple{sa, a.peak_reserved_GiB, a.cluster, a.gpus, describe_plan(a)} <
           std::tuple{sb, b.peak_reserved_GiB, b.cluster, b.gpus, describe_plan(b)};
  });
  // One entry per distinct plan: the top ones, then the best of each setting
  // that has none among them (a larger cluster's plans do not hide a smaller one's).
  PlanSearch out = std::move(s.out);
  std::set<std::string> seen;
  std::set<std::pair<std::string, int>> answered;
  for (auto& pc : s.found) {
    if (out.best.size() >= static_cast<std::size_t>(q.top)) break;
    if (seen.insert(pc.cluster + std::to_string(pc.gpus) + describe_plan(pc)).second) {
      out.best.push_back(pc);
      answered.insert({pc.cluster, pc.gpus});
    }
  }
  for (auto& pc : s.found) {
    if (answered.insert({pc.cluster, pc.gpus}).second) out.best.push_back(pc);
  }
  out.seconds = now_s() - t0;
  return out;
}

namespace {

// Two plans with the same predictions (to the printed precision and beyond).
bool same_numbers(const PlanChoice& a, const PlanChoice& b) {
  return a.cluster == b.cluster && a.gpus == b.gpus && std::abs(a.step_s - b.step_s) <= 1e-9 * a.step_s &&
         std::abs(a.peak_reserved_GiB - b.peak_reserved_GiB) < 1e-6;
}

// "mb1 none" and "mb1 selective" -> "mb1 none|selective"; other shapes joined whole.
std::string merge_descriptions(const std::string& a, const std::string& b) {
  auto words = [](const std::string& s) {
    std::vector<std::string> w;
    std::size_t i = 0;
    while (i <= s.size()) {
      const std::size_t j = std::min(s.find(' ', i), s.size());
      w.push_back(s.substr(i, j - i));
      i = j + 1;
    }
    return w;
  };
  const auto wa = words(a), wb = words(b);
  if (wa.size() != wb.size()) return a + " | " + b;
  std::string out;
  for (std::size_t i = 0; i < wa.size(); ++i) {
    std::string w = wa[i];
    if (wa[i] != wb[i] && ("|" + wa[i] + "|").find("|" + wb[i] + "|") == std::string::npos) w += "|" + wb[i];
    out += (i ? " " : "") + w;
  }
  return out;
}

// The objective's value, larger is better.
double score(const PlanChoice& c, Objective objective) {
  if (objective == Objective::Cost && c.usd_per_million_tokens && *c.usd_per_million_tokens > 0)
    return 1 / *c.usd_per_million_tokens;
  return c.tokens_per_s;
}

}  // namespace

std::vector<RankedPlan> rank_with_ties(const std::vector<PlanChoice>& plans, Objective objective, double tolerance) {
  std::vector<RankedPlan> rows;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    auto same = std::find_if(rows.begin(), rows.end(),
                             [&](const RankedPlan& r) { return same_numbers(plans[r.plan], plans[i]); });
    if (same != rows.end()) {
      same->description = merge_descriptions(same->description, describe_plan(plans[i]));
      same->merged.push_back(i);
    } else {
      rows.push_back(RankedPlan{i, {i}, describe_plan(plans[i]), "", false});
    }
  }
  std::size_t leader = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double lead = score(plans[rows[leader].plan], objective);
    const double here = score(plans[rows[i].plan], objective);
    if (i > 0 && !(lead > 0 && std::abs(lead - here) < tolerance * lead)) leader = i;
    rows[i].rank = std::to_string(leader + 1);
    if (i != leader) rows[leader].tied = rows[i].tied = true;
  }
  for (auto& r : rows) {
    if (r.tied) r.rank += "=";
  }
  return rows;
}

TrainingCost training_cost(const PlanChoice& c, double tokens) {
  TrainingCost t;
  const double seconds = c.tokens_per_s > 0 ? tokens / c.tokens_per_s : 0;
  t.days = seconds / 86400;
  t.gpu_hours = seconds / 3600 * c.gpus;
  if (c.usd_per_million_tokens) t.usd = *c.usd_per_million_tokens * tokens / 1e6;
  return t;
}

}  // namespace hzp::explore
