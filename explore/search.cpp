// Plan search (see search.hpp): the phases in order — the space
// (search_space.cpp), the memory bound (search_bounds.cpp), screening with
// branch and bound (search_screen.cpp), exact verification (search_verify.cpp).
#include "explore/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <tuple>

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
  if (o.ep > 1) s += fmt::format(" ep{}", o.ep);
  s += fmt::format(" mb{} {}", o.micro_batch, plan::to_string(o.recompute));
  return s;
}

PlanSearch search_plans(const PlanQuery& q) {
  const double t0 = now_s();
  std::vector<core::Problem> bad;
  if (q.objective != "throughput" && q.objective != "cost") {
    bad.push_back({"objective", fmt::format("expected throughput or cost, got '{}'", q.objective)});
  }
  if (q.top < 1) bad.push_back({"top", "expected at least 1"});
  if (!bad.empty()) throw core::ProblemError(std::move(bad));

  search::Search s(q);
  search::enumerate_space(s);
  search::prune_by_memory(s);
  search::screen_groups(s);
  search::verify_best(s);

  // Ties (plans the model cannot tell apart) in a fixed order: less memory first, then by name.
  std::sort(s.found.begin(), s.found.end(), [&](const PlanChoice& a, const PlanChoice& b) {
    const double sa = q.objective == "cost" ? a.usd_per_million_tokens.value_or(1e300) : a.step_s;
    const double sb = q.objective == "cost" ? b.usd_per_million_tokens.value_or(1e300) : b.step_s;
    return std::tuple{sa, a.peak_reserved_GiB, a.cluster, a.gpus, describe_plan(a)} <
           std::tuple{sb, b.peak_reserved_GiB, b.cluster, b.gpus, describe_plan(b)};
  });
  // One entry per distinct plan.
  PlanSearch out = std::move(s.out);
  std::set<std::string> seen;
  for (auto& pc : s.found) {
    if (out.best.size() >= static_cast<std::size_t>(q.top)) break;
    if (seen.insert(pc.cluster + std::to_string(pc.gpus) + describe_plan(pc)).second) out.best.push_back(pc);
  }
  out.seconds = now_s() - t0;
  return out;
}

}  // namespace hzp::explore
