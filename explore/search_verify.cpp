// Plan search, verification: the best screened candidates, every strategy's
// best and the presets at the base options simulated exactly on the full
// model; only plans whose exact peak fits are reported.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "explore/parallel_map.hpp"
#include "explore/search_internal.hpp"

namespace hzp::explore::search {

std::string bottleneck(const sim::Metrics& m, const ShardingTerms& t, bool pipelined, double stragglers_s) {
  const double step = m.step_time.to_seconds();
  std::string worst;
  double worst_s = 0;
  for (const auto& [kind, d] : m.exposed_comm) {
    if (d.to_seconds() > worst_s) {
      worst_s = d.to_seconds();
      worst = kind;
    }
  }
  const double idle = m.compute_idle.to_seconds();
  // The expected slowest rank's extra work shows on the others as waits at
  // the synchronising collectives (exposed communication or idle compute):
  // named as what it is when it is at least as large as those waits.
  if (stragglers_s > 0.05 * step && stragglers_s >= worst_s && stragglers_s >= idle) {
    return fmt::format("stragglers (the expected slowest rank adds {:.0f}% of the step)", 100 * stragglers_s / step);
  }
  if (worst_s > 0.05 * step && worst_s >= idle) {
    // Which of NCCL's terms the sharding collectives pay most: latency (ring
    // steps, more with the group) or bandwidth (bytes over the links).
    const double latency = t.gather_latency_s + t.reduce_latency_s;
    const double bandwidth = t.gather_bandwidth_s + t.reduce_bandwidth_s;
    const std::string terms =
        latency + bandwidth > 0 ? fmt::format("; sharding {:.0f}% latency", 100 * latency / (latency + bandwidth)) : "";
    return fmt::format("{} collectives exposed ({:.0f}% of the step{})", worst, 100 * worst_s / step, terms);
  }
  if (idle > 0.05 * step)
    return fmt::format("compute stream idle ({:.0f}%: {})", 100 * idle / step,
                       pipelined ? "pipeline bubble or waits" : "waits on communication or the host");
  return fmt::format("compute ({:.0f}% MFU)", 100 * m.mfu);
}

// Doubles in and out of parallel_map's records.
std::string pack(std::initializer_list<double> v) {
  return {reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(double)};
}
double unpack(const std::string& r, std::size_t i) {
  double d = 0;
  std::memcpy(&d, r.data() + i * sizeof d, sizeof d);
  return d;
}

bool Search::feasible(std::size_t i) const {
  return screened[i][0] > 0 && screened[i][2] <= settings[alive[i].setting].limit_GiB * 1.05;
}

void Search::note(std::size_t i) {
  // Screened on fewer stages, its peak is only a lower bound: not a plan to beat.
  if (!feasible(i) || on_fewer_stages[i]) return;
  const double here = score(settings[alive[i].setting], screened[i][1]);
  best_scores.push_back(here);
  std::sort(best_scores.begin(), best_scores.end());
  if (best_scores.size() > static_cast<std::size_t>(q.top)) best_scores.resize(static_cast<std::size_t>(q.top));
  double& mine = setting_best[alive[i].setting];
  mine = std::min(mine, here);
}

double Search::bound_to_beat(std::size_t setting) const {
  const double kth = best_scores.size() >= static_cast<std::size_t>(q.top) ? best_scores.back() : 1e300;
  return std::max(kth, setting_best[setting]);
}

namespace {

// The choice a verified candidate makes, from its exact simulation's record.
PlanChoice choice_of(const Search& s, const Candidate& c, const std::string& record) {
  const Setting& st = s.settings[c.setting];
  PlanChoice pc;
  pc.cluster = st.cluster_name;
  pc.gpus = st.gpus;
  pc.options = c.o;
  pc.shards = plan::resolve_shards(c.o, st.gpus / (c.o.tp * c.o.pp), st.cluster);
  pc.async = plan::resolve_async(c.o, s.stack->spec);
  pc.step_s = unpack(record, 1);
  pc.peak_reserved_GiB = unpack(record, 2);
  pc.tokens_per_s = unpack(record, 3);
  pc.mfu = unpack(record, 4);
  pc.hbm_GiB = st.limit_GiB;
  pc.usd_per_million_tokens = s.cost_of(st, pc.step_s);
  pc.bottleneck = record.substr(5 * sizeof(double));
  return pc;
}

// Exact simulations of `which` (those not simulated yet) in parallel; returns how many fit.
std::size_t verify(Search& s, std::set<std::size_t>& simulated, std::vector<std::size_t> which) {
  std::erase_if(which, [&](std::size_t i) { return !simulated.insert(i).second; });
  const auto res = parallel_map(which.size(), s.q.jobs, [&](std::size_t j) {
    const Candidate& c = s.alive[which[j]];
    sim::Metrics metrics;
    ShardingTerms terms;
    double stragglers_s = 0;
    const Estimate e = simulate(s.target(c.setting), c.o, metrics, &terms, &stragglers_s);
    if (!e.ok) return pack({e.over_op_limit ? -1.0 : 0.0});
    return pack({1.0, e.step_s, e.reserved_GiB, metrics.tokens_per_s, metrics.mfu}) +
           bottleneck(metrics, terms, c.o.pp > 1, stragglers_s);
  });
  s.out.exact += static_cast<long long>(which.size());
  std::size_t fits = 0;
  for (std::size_t j = 0; j < which.size(); ++j) {
    const Candidate& c = s.alive[which[j]];
    // Losses are counted for the candidates screening passed (a preset
    // simulated without it was counted where the bound set it aside).
    SettingTally& t = s.tally(c.setting);
    const bool screened = s.feasible(which[j]);
    if (unpack(res[j], 0) < 0 && screened) ++t.op_limit;
    if (unpack(res[j], 0) <= 0) continue;
    if (unpack(res[j], 2) > s.settings[c.setting].limit_GiB) {
      if (screened) ++t.memory;
      continue;
    }
    s.found.push_back(choice_of(s, c, res[j]));
    ++t.fit;
    ++fits;
  }
  return fits;
}

// Every strategy's best screened candidate per setting, then the presets at the base options.
std::vector<std::size_t> strategy_bests(const Search& s, const std::vector<std::size_t>& order) {
  std::vector<std::size_t> exact_set;
  std::set<std::pair<std::size_t, int>> best_of_strategy;
  for (std::size_t i : order) {
    if (best_of_strategy.insert({s.alive[i].setting, static_cast<int>(s.alive[i].o.strategy)}).second)
      exact_set.push_back(i);
  }
  for (std::size_t i = 0; i < s.alive.size(); ++i) {
    if (s.alive[i].preset_at_base && std::find(exact_set.begin(), exact_set.end(), i) == exact_set.end()) {
      exact_set.push_back(i);
    }
  }
  return exact_set;
}

}  // namespace

// Exact simulation, best screened first, until `top` plans fit (the screened
// memory is an extrapolation); plus every strategy's best and the presets at
// the base options, so that no preset beats the answer.
void verify_best(Search& s) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < s.alive.size(); ++i) {
    if (s.feasible(i)) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return s.score(s.settings[s.alive[a].setting], s.screened[a][1]) <
           s.score(s.settings[s.alive[b].setting], s.screened[b][1]);
  });
  std::set<std::size_t> simulated;
  verify(s, simulated, strategy_bests(s, order));
  // Then the best screened, in order, until `top` of them fit (at most 400).
  const std::size_t keep = static_cast<std::size_t>(s.q.top);
  std::size_t fits_from_order = 0;
  for (std::size_t n = 0; n < std::min<std::size_t>(order.size(), 400) && fits_from_order < keep;) {
    std::vector<std::size_t> next;
    while (n < std::min<std::size_t>(order.size(), 400) && next.size() < keep - fits_from_order) {
      next.push_back(order[n++]);
    }
    fits_from_order += verify(s, simulated, next);
  }
  // Then, for every setting still without a plan that fits, its own best
  // screened in order until one fits (at most 400): every setting answers.
  for (std::size_t si = 0; si < s.settings.size(); ++si) {
    std::vector<std::size_t> mine;
    for (std::size_t i : order) {
      if (s.alive[i].setting == si && !simulated.count(i)) mine.push_back(i);
    }
    for (std::size_t n = 0; n < std::min<std::size_t>(mine.size(), 400) && s.tally(si).fit == 0;) {
      std::vector<std::size_t> next;
      while (n < std::min<std::size_t>(mine.size(), 400) && next.size() < keep) next.push_back(mine[n++]);
      (void)verify(s, simulated, next);
    }
  }
}

namespace {

// The schedule and sequence variants of a verified plan that its options
// allow (plan::check_plan decides): a pipelined plan under ZB-H1 and
// DualPipe (vpp 1) and ZB-V (vpp 2) on its stages, an uneven plan with the
// balanced layout of those virtual stages; any plan with its data-parallel
// ranks traded for Ulysses sequence parallelism of 2, 4 or 8 (sequences
// split, attention heads split around all-to-alls).
std::vector<PlanOptions> variants(const Search& s, const Setting& st, const PlanOptions& base) {
  std::vector<PlanOptions> out;
  auto add = [&](PlanOptions o) {
    if (s.wanted(o) && plan::check_plan({s.m, st.pm->topology(), s.stack}, o).empty()) out.push_back(std::move(o));
  };
  if (base.pp > 1 && base.pipeline_schedule == plan::PipelineSchedule::OneFOneB) {
    // Every other schedule (the zero-bubble family, DualPipe and any
    // registered since), each at the vpp it runs with.
    for (const plan::PipelineScheduleTraits& t : plan::pipeline_schedules()) {
      if (t.schedule == base.pipeline_schedule) continue;
      PlanOptions o = base;
      o.pipeline_schedule = t.schedule;
      if (t.vpp > 0) o.vpp = t.vpp;
      if (base.pipeline_layout) o.pipeline_layout = plan::balanced_layout(s.m.layers, o.pp, o.vpp).text();
      add(o);
    }
  }
  if (base.ulysses == 1) {
    for (int u : {2, 4, 8}) {
      PlanOptions o = base;
      o.ulysses = u;
      add(o);
    }
  }
  return out;
}

}  // namespace

// Where the search's grid has no axis for them (they would multiply every
// pipelined group, or every group, by four): the zero-bubble and DualPipe
// schedules and Ulysses, tried on each setting's best verified plan and
// simulated exactly; a variant that fits is an answer like any other.
void refine_best(Search& s) {
  std::vector<std::size_t> which;
  for (std::size_t si = 0; si < s.settings.size(); ++si) {
    const PlanChoice* best = nullptr;
    for (const auto& pc : s.found) {
      if (pc.cluster != s.settings[si].cluster_name || pc.gpus != s.settings[si].gpus) continue;
      if (!best || s.score(s.settings[si], pc.step_s) < s.score(s.settings[si], best->step_s)) best = &pc;
    }
    if (!best) continue;
    for (PlanOptions& o : variants(s, s.settings[si], best->options)) {
      which.push_back(s.alive.size());
      s.alive.push_back(Candidate{si, s.groups++, std::move(o), false});
      s.screened.push_back({0, 0, 0, 0, 0});  // not screened: simulated exactly below
      s.on_fewer_stages.push_back(false);
    }
  }
  std::set<std::size_t> simulated;
  verify(s, simulated, which);
}

}  // namespace hzp::explore::search
