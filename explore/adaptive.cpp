// Adaptive resharding (see adaptive.hpp).
#include "explore/adaptive.hpp"

#include "explore/search.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include "core/error.hpp"
#include "schedule/check.hpp"
#include "sim/analytic/analytic_engine.hpp"
#include "sim/engine.hpp"
#include "validation/expected_error.hpp"

namespace hzp::explore {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

std::vector<plan::ShardSizes> nested_sizes(int ranks) {
  std::vector<plan::ShardSizes> out;
  for (int o : divisors(ranks)) {
    for (int p : divisors(o)) {
      for (int g : divisors(o)) out.push_back({p, g, o});
    }
  }
  return out;
}

std::string sizes(const plan::ShardSizes& s) { return fmt::format("({}, {}, {})", s.param, s.grad, s.optim); }

}  // namespace

namespace {

bool better(const ShardCandidate& a, const ShardCandidate& b) {
  if (a.fits != b.fits) return a.fits;
  if (!a.fits) return a.reserved < b.reserved;
  return a.step < b.step || (a.step == b.step && a.reserved < b.reserved);
}

// Step and memory of one plan on the scenario's resolved inputs and engine.
class Evaluator {
 public:
  Evaluator(const Scenario& sc, const Inputs& in, core::Bytes limit)
      : pm_(topologies::Topology(in.cluster.spec, sc.gpus)),
        engine_(sim::make_engine(sc.engine, pm_, sc.engine_options)),
        in_(in.on(pm_.topology())),
        lowering_{.max_ops = sc.max_ops, .check = false},
        limit_(limit) {}

  ShardCandidate operator()(const plan::PlanOptions& o) const {
    ShardCandidate c;
    core::Schedule s = plan::lower(in_, o, lowering_);
    core::check_schedule(s, core::Progress::ByTheEngine);  // the engine's walk finds any deadlock
    traces::TraceHeader header;
    header.schedule_sha256 = "(adaptive search)";  // not hashed: only the fastest plan is kept
    traces::TimelineRecorder rec(/*names=*/false);
    engine_->run(s, header, rec);
    sim::Metrics metrics = sim::compute_metrics(s, rec.timeline(), pm_.topology().spec().device);
    c.step = metrics.step_time;
    c.reserved = std::max(metrics.peak_reserved(), metrics.peak_memory());
    c.fits = c.reserved <= limit_;
    c.terms = sharding_terms(s, metrics, pm_);
    return c;
  }

  // What the expected slowest rank adds to this plan's step (stragglers_seconds).
  double stragglers(const plan::PlanOptions& o) const {
    const plan::LoweredPlan lp = plan::lower_plan(in_, o, lowering_);
    return stragglers_seconds(in_.model, pm_, lp.plan, lp.schedule);
  }

 private:
  cost::PerfModel pm_;
  std::unique_ptr<sim::Engine> engine_;
  plan::Inputs in_;
  plan::LowerOptions lowering_;  // the scenario's --max-ops; the engine's walk checks progress
  core::Bytes limit_;
};

using Seen = std::map<std::tuple<int, int, int>, ShardCandidate>;

// Every nested (g_p, g_g, g_o) over the data-parallel ranks, fastest fitting first.
void evaluate_dense(const Evaluator& evaluate, const plan::PlanOptions& base, int dp, AdaptiveChoice& choice,
                    Seen& dense_seen) {
  for (const plan::ShardSizes& d : nested_sizes(dp)) {
    plan::PlanOptions o = base;
    o.param_shard = d.param;
    o.grad_shard = d.grad;
    o.optim_shard = d.optim;
    ShardCandidate c = evaluate(o);
    c.dense = d;
    dense_seen[{d.param, d.grad, d.optim}] = c;
    choice.candidates.push_back(c);
  }
  std::stable_sort(choice.candidates.begin(), choice.candidates.end(), better);
}

// Experts: their own sizes over the expert-data-parallel ranks, dense fixed at `best`.
ShardCandidate evaluate_experts(const Evaluator& evaluate, const plan::PlanOptions& base, int edp,
                                const ShardCandidate& best, AdaptiveChoice& choice) {
  std::vector<ShardCandidate> experts;
  for (const plan::ShardSizes& e : nested_sizes(edp)) {
    plan::PlanOptions o = base;
    o.param_shard = best.dense.param;
    o.grad_shard = best.dense.grad;
    o.optim_shard = best.dense.optim;
    o.expert_shards = e;
    ShardCandidate c = evaluate(o);
    c.dense = best.dense;
    c.expert = e;
    experts.push_back(c);
  }
  std::stable_sort(experts.begin(), experts.end(), better);
  choice.candidates.insert(choice.candidates.begin(), experts.begin(), experts.end());
  std::stable_sort(choice.candidates.begin(), choice.candidates.end(), better);
  return experts.front();
}

// The straggler term of the chosen dense sizes and of each size it is
// compared with (one group size doubled or halved): only they need it.
void add_stragglers(const Evaluator& evaluate, const plan::PlanOptions& base, const plan::ShardSizes& b, Seen& seen) {
  auto scale = [](int v, int f) { return f > 0 ? v * 2 : v / 2; };
  std::vector<plan::ShardSizes> around{b};
  for (int f : {2, -2}) {
    around.push_back({scale(b.param, f), b.grad, b.optim});
    around.push_back({b.param, scale(b.grad, f), b.optim});
    around.push_back({b.param, b.grad, scale(b.optim, f)});
  }
  for (const plan::ShardSizes& n : around) {
    auto it = seen.find({n.param, n.grad, n.optim});
    if (it == seen.end()) continue;
    plan::PlanOptions o = base;
    o.param_shard = n.param;
    o.grad_shard = n.grad;
    o.optim_shard = n.optim;
    it->second.stragglers_s = evaluate.stragglers(o);
  }
}

// What moves from `here` to `there`: memory when `there` does not fit; else
// the collective time's latency and bandwidth terms and how much of the change
// the step sees (the rest overlap hides).
std::string deciding_term(const ShardCandidate& here, const ShardCandidate& there) {
  if (!there.fits) return "memory decides (does not fit)";
  const ShardingTerms &a = here.terms, &b = there.terms;
  const double latency = b.gather_latency_s + b.reduce_latency_s - a.gather_latency_s - a.reduce_latency_s;
  const double bandwidth = b.gather_bandwidth_s + b.reduce_bandwidth_s - a.gather_bandwidth_s - a.reduce_bandwidth_s;
  const double exposed = b.exposed_s - a.exposed_s;
  // The expected slowest rank decides when it makes at least half the change.
  const double stragglers = there.stragglers_s - here.stragglers_s;
  const double step = (there.step - here.step).to_seconds();
  if (stragglers != 0 && std::abs(stragglers) >= 0.5 * std::abs(step)) {
    return fmt::format(
        "stragglers {:+.3f} s (the expected slowest rank adds {:.3f} s against {:.3f} s: stragglers "
        "decide), collectives {:+.3f} s",
        stragglers, there.stragglers_s, here.stragglers_s, latency + bandwidth);
  }
  const char* term = std::abs(latency) >= std::abs(bandwidth) ? "latency" : "bandwidth";
  return fmt::format("collectives {:+.3f} s (latency {:+.3f}, bandwidth {:+.3f}: {} decides), exposed {:+.3f} s",
                     latency + bandwidth, latency, bandwidth, term, exposed);
}

// The chosen sizes against their neighbours, one dimension at a time, and the fastest plans that fit.
void explain(const ShardCandidate& best, const Seen& dense_seen, const plan::BatchSplit& batch,
             const plan::PlanOptions& base, double memory_limit_GiB, double tolerance, AdaptiveChoice& choice) {
  std::string& x = choice.explanation;
  const int fitting = static_cast<int>(std::count_if(choice.candidates.begin(), choice.candidates.end(),
                                                     [](const ShardCandidate& c) { return c.fits; }));
  x +=
      fmt::format("adaptive resharding: {} plans evaluated over {} data-parallel ranks, {} fit {:.1f} GiB per device\n",
                  choice.candidates.size(), batch.data_parallel, fitting, memory_limit_GiB);
  x += fmt::format("chosen dense (g_p, g_g, g_o) = {}", sizes(best.dense));
  if (best.expert)
    x += fmt::format(", experts {} over {} expert-data-parallel ranks", sizes(*best.expert),
                     batch.data_parallel / base.ep);
  x += fmt::format(": step {:.3f} s, {:.1f} GiB\n", best.step.to_seconds(), best.reserved.gib());
  const ShardingTerms& t = best.terms;
  x += fmt::format(
      "its sharding per step: parameter gathers {:.3f} s (latency {:.3f}, bandwidth {:.3f}), gradient reductions "
      "{:.3f} s (latency {:.3f}, bandwidth {:.3f}); {:.3f} s of communication not hidden by compute\n",
      t.gather_latency_s + t.gather_bandwidth_s, t.gather_latency_s, t.gather_bandwidth_s,
      t.reduce_latency_s + t.reduce_bandwidth_s, t.reduce_latency_s, t.reduce_bandwidth_s, t.exposed_s);
  x += "what changing one dense group size does (memory per device, step time, and the term that moves it):\n";
  const plan::ShardSizes b = best.dense;
  auto neighbour = [&](const char* name, plan::ShardSizes n, int from, int to) {
    auto it = dense_seen.find({n.param, n.grad, n.optim});
    if (it == dense_seen.end()) return;
    const ShardCandidate& c = it->second;
    const ShardCandidate& here = dense_seen.at({b.param, b.grad, b.optim});
    x += fmt::format("  {} {} -> {}: memory {:+.1f} GiB, step {:+.3f} s: {}\n", name, from, to,
                     c.reserved.gib() - here.reserved.gib(), (c.step - here.step).to_seconds(), deciding_term(here, c));
  };
  for (int f : {2, -2}) {
    auto scale = [&](int v) { return f > 0 ? v * 2 : v / 2; };
    neighbour("g_p", {scale(b.param), b.grad, b.optim}, b.param, scale(b.param));
    neighbour("g_g", {b.param, scale(b.grad), b.optim}, b.grad, scale(b.grad));
    neighbour("g_o", {b.param, b.grad, scale(b.optim)}, b.optim, scale(b.optim));
  }
  const double tie = tolerance * best.step.to_seconds();
  const auto ties = std::count_if(choice.candidates.begin(), choice.candidates.end(), [&](const ShardCandidate& c) {
    return c.fits && std::abs((c.step - best.step).to_seconds()) < tie;
  });
  x += fmt::format(
      "fastest plans that fit ('=': within {:.1f} % of the chosen step, the expected error of this device and stack: a "
      "tie):\n",
      100 * tolerance);
  int shown = 0;
  for (const auto& c : choice.candidates) {
    if (!c.fits || shown == 5) continue;
    x += fmt::format("  {} dense {}{}  step {:.3f} s  {:.1f} GiB\n",
                     std::abs((c.step - best.step).to_seconds()) < tie ? "=" : " ", sizes(c.dense),
                     c.expert ? fmt::format(" experts {}", sizes(*c.expert)) : std::string(), c.step.to_seconds(),
                     c.reserved.gib());
    ++shown;
  }
  if (ties > 1) {
    x += fmt::format(
        "{} plans that fit are within {:.1f} % of the chosen step, the expected error: a tie; any of them is as good "
        "as the model can tell\n",
        ties, 100 * tolerance);
  }
}

}  // namespace

// The sharding collectives of the first program, costed one at a time.
ShardingTerms sharding_terms(const core::Schedule& s, const sim::Metrics& metrics, const cost::PerfModel& pm) {
  ShardingTerms t;
  for (const auto& [kind, d] : metrics.exposed_comm) t.exposed_s += d.to_seconds();
  for (const auto& st : s.programs.front().streams) {
    for (const auto& op : st.ops) {
      if (op.kind != core::OpKind::Collective) continue;
      const bool gather = op.role == core::OpRole::ParamGather;
      if (!gather && op.role != core::OpRole::GradReduce) continue;
      const core::Op::Collective& c = op.collective();
      const auto cost = pm.collective_cost(c.kind, c.bytes, pm.span(s.group(c.group).ranks));
      (gather ? t.gather_latency_s : t.reduce_latency_s) += cost.latency_s;
      (gather ? t.gather_bandwidth_s : t.reduce_bandwidth_s) += cost.transfer_s;
    }
  }
  return t;
}

double stragglers_seconds(const models::ModelSpec& m, const cost::PerfModel& pm, const plan::ResolvedPlan& resolved,
                          const core::Schedule& s) {
  const plan::PlanOptions& o = resolved.options;
  if (!(o.doc_mean_tokens > 0 || o.doc_lengths || o.compute_jitter > 0 || o.moe_skew > 0)) return 0;
  plan::ResolvedPlan at_mean = resolved;
  at_mean.ranks_at_mean = true;
  // The plan was admitted under its own --max-ops; the same plan at the mean is the same size.
  const plan::LowerOptions unbounded{.max_ops = std::numeric_limits<std::int64_t>::max(), .check = false};
  const core::Schedule uniform =
      plan::lower_resolved({m, pm.topology(), resolved.stack}, o, std::move(at_mean), unbounded).schedule;
  const sim::AnalyticEngine engine(pm);
  return std::max(0.0, engine.estimate(s).step.to_seconds() - engine.estimate(uniform).step.to_seconds());
}

AdaptiveChoice choose_shards(const Scenario& sc, double memory_limit_GiB) {
  return choose_shards(sc, resolve_inputs(sc), memory_limit_GiB);
}

AdaptiveChoice choose_shards(const Scenario& sc, const Inputs& in, double memory_limit_GiB) {
  // The same inputs the final simulation of the chosen plan runs on:
  // calibration and what-if changes included.
  const Evaluator evaluate(sc, in, core::gib(memory_limit_GiB));
  plan::PlanOptions base = sc.plan;
  base.strategy = plan::Strategy::Hzp;
  const plan::BatchSplit batch = plan::split_batch(in.model, sc.gpus, base);

  AdaptiveChoice choice;
  Seen dense_seen;
  evaluate_dense(evaluate, base, batch.data_parallel, choice, dense_seen);
  ShardCandidate best = choice.candidates.front();
  if (in.model.moe) {
    best = evaluate_experts(evaluate, base, batch.data_parallel / std::max(base.ep, 1), best, choice);
  }
  if (!best.fits) {
    throw core::InfeasibleError(
        fmt::format("no hierarchical ZeRO group sizes fit {:.1f} GiB; the smallest needs {:.1f} GiB", memory_limit_GiB,
                    best.reserved.gib()));
  }
  choice.plan = base;
  choice.plan.param_shard = best.dense.param;
  choice.plan.grad_shard = best.dense.grad;
  choice.plan.optim_shard = best.dense.optim;
  choice.plan.expert_shards = best.expert;
  // Plans closer than the error expected of this device and stack are a tie.
  const double tolerance =
      validation::expected_error(in.cluster.spec.device.compute_capability, in.stack->spec.name, sc.gpus).mean_abs;
  add_stragglers(evaluate, base, best.dense, dense_seen);
  explain(best, dense_seen, batch, base, memory_limit_GiB, tolerance, choice);
  return choice;
}

}  // namespace hzp::explore
