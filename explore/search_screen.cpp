// Plan search, screening: each candidate's step and memory from the analytic
// engine on reduced-layer models, extrapolated, with branch and bound over
// groups of candidates that share their model-parallel plan.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "explore/parallel_map.hpp"
#include "explore/search_internal.hpp"
#include "schedule/check.hpp"
#include "sim/analytic/analytic_engine.hpp"

namespace hzp::explore::search {
namespace {

// Screening: the same plan with a few layers per virtual stage, extrapolated
// to the model's layer count (step time and memory are affine in it).
Estimate over_layers(const Target& t, const PlanOptions& o, bool floor) {
  const models::ModelSpec& m = t.in.model;
  // Two and three layers per virtual stage for short pipelines (with one, the
  // embedding's and the head's transients can set the peak), one and two for
  // long ones (already many layers).
  const int unit = o.pp * o.vpp;
  const int k1 = unit <= 4 ? 2 : 1;
  // An uneven layout is screened as the even pipeline of its largest
  // virtual stage (max x pp x vpp layers), which sets its pace: a slight
  // overestimate of the work, fill and drain and the first stage's memory.
  PlanOptions even = o;
  even.pipeline_layout.reset();
  even.first_stage_layers.reset();
  even.last_stage_layers.reset();
  int target = m.layers;
  if (o.pipeline_layout || o.first_stage_layers || o.last_stage_layers) {
    const plan::PipelineLayout layout = plan::pipeline_layout(m, o);
    int most = 0;
    for (int v = 0; v < layout.virtual_stages(); ++v) most = std::max(most, layout.layers_of(v));
    target = most * unit;
  }
  // The model itself where it is no larger than the two reduced ones together
  // (long pipelines: Llama-3 70B's 80 layers at pp 32 would be screened as 32
  // and 64): exact, and cheaper.
  if ((k1 + 1) * unit >= target || (2 * k1 + 1) * unit >= m.layers) return estimate(t, o, floor);
  // The reduced model with `per_stage` layers per virtual stage. The layer it
  // adds over fewer is what most of the model's layers are: an MoE layer
  // (all keep the same leading dense layers, at least one MoE layer each).
  // The model's own extra dense layers are then extrapolated as MoE ones, a
  // small overestimate (DeepSeek-V3: 2 of 61).
  auto reduced = [&](int per_stage) {
    models::ModelSpec r = m;
    r.layers = per_stage * unit;
    if (m.moe) r.moe->dense_layers = std::min(m.moe->dense_layers, k1 * unit - 1);
    return std::pair{r.layers, estimate(t.with(r), even, floor)};
  };
  const auto [la, ea] = reduced(k1);
  const auto [lb, eb] = reduced(k1 + 1);
  if (!ea.ok || !eb.ok) return ea.over_op_limit || eb.over_op_limit ? over_op_limit() : Estimate{};
  auto at_target = [target](int l1, double v1, int l2, double v2) {
    return v1 + static_cast<double>(target - l1) / (l2 - l1) * (v2 - v1);
  };
  auto x = [&](double va, double vb) { return at_target(la, va, lb, vb); };
  // The peak grows at least by the model states, which are exactly linear
  // in the layers. Where it grows less from a to b, the smaller model's peak
  // was set by transients that more layers do not repeat (the head's logits
  // and loss before the first layer's activations outweigh them): the
  // growth is then measured one layer per stage further on.
  Estimate lo = ea, hi = eb;
  int l_lo = la, l_hi = lb;
  const bool offloaded = o.offload_activations;
  if ((offloaded || eb.reserved_GiB - ea.reserved_GiB < eb.states_GiB - ea.states_GiB) && (k1 + 2) * unit < target) {
    const auto [lc, ec] = reduced(k1 + 2);
    if (!ec.ok) return Estimate{};
    lo = eb, hi = ec, l_lo = lb, l_hi = lc;
  }
  const double states = at_target(l_lo, lo.states_GiB, l_hi, hi.states_GiB);
  // More layers never need less memory: the larger reduced model bounds the
  // peak from below, as do the extrapolated states with what the larger
  // model holds besides them. Offloaded activations: the device holds those
  // in flight, which do not grow with the layers, so more layers add their
  // states only, to the most any reduced model held besides its states (the
  // caching allocator's peaks wander from one layer count to the next).
  double reserved = std::max(hi.reserved_GiB, states + hi.reserved_GiB - hi.states_GiB);
  if (offloaded) {
    for (const Estimate& e : {ea, lo}) reserved = std::max(reserved, states + e.reserved_GiB - e.states_GiB);
  } else {
    reserved = std::max(reserved, at_target(l_lo, lo.reserved_GiB, l_hi, hi.reserved_GiB));
  }
  return Estimate{true,  x(ea.step_s, eb.step_s), reserved, x(ea.compute_s, eb.compute_s), x(ea.floor_s, eb.floor_s),
                  states};
}

}  // namespace

Estimate estimate(const Target& t, const PlanOptions& o, bool floor) {
  const cost::PerfModel& pm = t.pm;
  // A plan the lowering refuses (does not divide) is not a candidate; one
  // over --max-ops is not built (counted as such, not an error that ends the search).
  plan::ResolvedPlan resolved;
  if (!plan::check_plan(t.in, o, &resolved).empty()) return Estimate{};
  std::optional<plan::LoweredPlan> lowered =
      plan::lower_within(t.in, o, std::move(resolved), {.max_ops = t.max_ops, .check = false, .names = false});
  if (!lowered) return over_op_limit();
  {
    const core::Schedule& s = lowered->schedule;
    // Screening is uncontended: compute does not slow under collectives and
    // collectives do not share links here (one walk per candidate; the
    // estimate stays a lower bound of the simulation that ranks the plans
    // reported, which has both).
    const sim::AnalyticEngine engine(pm, sim::Contention::none());
    const sim::StepEstimate e = engine.estimate(s);
    Estimate out{true, e.step.to_seconds(), e.peak_reserved.gib(), e.model_compute.to_seconds(),
                 0,    e.model_states.gib()};
    // More pinned host memory than the node has does not fit either.
    if (e.host.count() > 0 && e.host.gib() > pm.topology().spec().device.host_memory_GiB_per_device) {
      out.reserved_GiB = std::numeric_limits<double>::infinity();
    }
    if (floor) {
      out.floor_s =
          engine.estimate(s, [&s](const core::Op& op) { return plan::is_sharding_op(s, op); }).step.to_seconds();
    }
    return out;
  }
}

// The full simulation with metrics, for the plans that are reported; with
// `stragglers_s`, also what the expected slowest rank adds to the step
// (stragglers_seconds: 0 where the ranks' work does not vary).
Estimate simulate(const Target& t, const PlanOptions& o, sim::Metrics& out, ShardingTerms* terms,
                  double* stragglers_s) {
  const cost::PerfModel& pm = t.pm;
  plan::ResolvedPlan resolved;
  if (!plan::check_plan(t.in, o, &resolved).empty()) return Estimate{};
  // A plan whose full Schedule is over --max-ops cannot be simulated exactly:
  // not an answer (screening, on reduced models, still ranked it).
  std::optional<plan::ResolvedPlan> kept;
  if (stragglers_s) kept = resolved;
  std::optional<plan::LoweredPlan> lowered =
      plan::lower_within(t.in, o, std::move(resolved), {.max_ops = t.max_ops, .check = false, .names = false});
  if (!lowered) return over_op_limit();
  {
    core::Schedule& s = lowered->schedule;
    core::check_schedule(s, core::Progress::ByTheEngine);  // the engine's walk finds any deadlock
    traces::TraceHeader h;
    h.schedule_sha256 = "(plan search)";
    traces::TimelineRecorder rec(/*names=*/false);
    sim::AnalyticEngine(pm).run(s, h, rec);
    out = sim::compute_metrics(s, rec.timeline(), pm.topology().spec().device);
    if (terms) *terms = sharding_terms(s, out, pm);
    if (stragglers_s) *stragglers_s = stragglers_seconds(t.in.model, pm, *kept, s);
    const double reserved = out.host_fits() ? out.peak_reserved().gib() : std::numeric_limits<double>::infinity();
    return Estimate{true, out.step_time.to_seconds(), reserved, 0};
  }
}

// Long 1F1B pipelines (interleaved or not) of a dense model in its balanced
// layout, with at least as many micro-batches per rank as stages: at a fixed
// data-parallel size, micro-batch count and share of the layers per stage,
// each stage more adds its fill and drain, so the step is affine in the
// stage count. Such a pipeline is screened on 4 and 8 stages holding the
// same share of the layers (the same balanced pattern) on proportionally
// fewer GPUs, and its step extrapolated: the walk's cost grows with stages x
// micro-batches. Its peak memory is not affine in the stages (over_stages).
std::optional<FewerStages> fewer_stages(const models::ModelSpec& m, const PlanOptions& o,
                                        const topologies::Topology& cluster) {
  if (o.pp < 16 || m.moe || o.pipeline_schedule != plan::PipelineSchedule::OneFOneB) return std::nullopt;
  constexpr int kPp1 = 4, kPp2 = 8;
  if (m.layers * kPp1 % o.pp != 0) return std::nullopt;  // a whole share of the layers on 4 (and 8) stages
  const int world = cluster.devices();
  plan::BatchSplit split;
  if (!plan::check_batch(m, world, o, split).empty() || split.micro_batches < o.pp) return std::nullopt;
  if (plan::pipeline_layout(m, o).text() != plan::balanced_layout(m.layers, o.pp, o.vpp).text()) return std::nullopt;
  const int per_node = cluster.spec().devices_per_node;
  const FewerStages f{kPp1, kPp2, world / o.pp * kPp1, world / o.pp * kPp2};
  if (world % o.pp != 0 || f.gpus1 % per_node != 0) return std::nullopt;
  return f;
}

namespace {

// The estimate at e1 + k (e2 - e1), with the peak `reserved` (the model
// states are the same in both).
Estimate affine(const Estimate& e1, const Estimate& e2, double k, double reserved) {
  auto x = [k](double v1, double v2) { return v1 + k * (v2 - v1); };
  return Estimate{true,
                  x(e1.step_s, e2.step_s),
                  reserved,
                  x(e1.compute_s, e2.compute_s),
                  x(e1.floor_s, e2.floor_s),
                  std::max(e1.states_GiB, e2.states_GiB)};
}

// The plan with `count` micro-batches per rank: the global batch set in
// sequences over its data-parallel ranks on the target's cluster.
PlanOptions with_micro_batches(const Target& t, const PlanOptions& o, std::int64_t count) {
  PlanOptions r = o;
  r.global_batch_tokens.reset();
  r.global_batch_sequences = count * o.micro_batch * (t.in.cluster.devices() / (o.tp * o.pp * plan::sequence_split(o)));
  return r;
}

// A pipeline with many micro-batches per rank (more than twice `settled`,
// from where its schedule's step is affine in them and its peak memory no
// longer grows with them) on `settled` and twice as many, extrapolated; else
// on all of them.
Estimate over_micro_batches(const Target& t, const PlanOptions& o, std::int64_t micro, std::int64_t settled,
                            bool floor) {
  if (o.pp == 1 || micro <= 2 * settled) return over_layers(t, o, floor);
  const std::int64_t m1 = settled, m2 = 2 * settled;
  const Estimate e1 = over_layers(t, with_micro_batches(t, o, m1), floor);
  const Estimate e2 = over_layers(t, with_micro_batches(t, o, m2), floor);
  if (!e1.ok || !e2.ok) return e1.over_op_limit || e2.over_op_limit ? over_op_limit() : Estimate{};
  const double k = static_cast<double>(micro - m1) / static_cast<double>(m2 - m1);
  return affine(e1, e2, k, std::max(e1.reserved_GiB, e2.reserved_GiB));
}

// The pipeline on fewer stages (fewer_stages), each with the micro-batches
// of the pipeline itself, extrapolated from where its own schedule settles
// (`settled`: a few stages settle within a few micro-batches, but not in a
// way that extrapolates to hundreds).
Estimate over_stages(const Target& t, const PlanOptions& o, const FewerStages& f, std::int64_t micro,
                     std::int64_t settled, bool floor) {
  const models::ModelSpec& m = t.in.model;
  auto on = [&](int pp, int gpus) {
    models::ModelSpec r = m;
    r.layers = m.layers * pp / o.pp;  // whole (fewer_stages)
    PlanOptions p = o;
    p.pp = pp;
    p.pipeline_layout.reset();
    if (r.layers % (pp * o.vpp) != 0) p.pipeline_layout = plan::balanced_layout(r.layers, pp, o.vpp).text();
    const cost::PerfModel& pm = *t.smaller->at(gpus);
    const Target fewer{{r, pm.topology(), t.in.stack}, pm, t.max_ops, t.smaller};
    return over_micro_batches(fewer, with_micro_batches(fewer, p, micro), micro, settled, floor);
  };
  const Estimate e1 = on(f.pp1, f.gpus1), e2 = on(f.pp2, f.gpus2);
  if (!e1.ok || !e2.ok) return e1.over_op_limit || e2.over_op_limit ? over_op_limit() : Estimate{};
  const double k = static_cast<double>(o.pp - f.pp1) / (f.pp2 - f.pp1);
  // The peak is not affine in the stages: which stage sets it moves (the
  // balanced layout gives the end stages fewer layers but more micro-batches
  // in flight). Each stage of the longer pipeline holds at least as many
  // micro-batches in flight as its counterpart on fewer stages, so the
  // smaller of the two peaks is taken as a lower bound (at or below the
  // exact screen's peak in each of the 7,039 pipelines that the exhaustive
  // Llama-3 70B query screens so, bench/results/plan-search.txt); a candidate
  // that could be verified is screened again as it is (rescreen_near_the_top).
  Estimate e = affine(e1, e2, k, std::min(e1.reserved_GiB, e2.reserved_GiB));
  e.fewer_stages = true;
  return e;
}

}  // namespace

// Screening: the plan on reduced-layer models and, for pipelines with many
// micro-batches, also fewer micro-batches (over_micro_batches); the longest
// pipelines also on fewer stages (fewer_stages).
Estimate screen(const Target& t, const PlanOptions& o, bool floor) {
  const models::ModelSpec& m = t.in.model;
  plan::BatchSplit split;
  if (!plan::check_batch(m, t.in.cluster.devices(), o, split).empty()) return Estimate{};
  const std::int64_t settled = plan::traits(o.pipeline_schedule).settled_per_stage * o.pp;
  if (t.smaller) {
    const auto f = fewer_stages(m, o, t.in.cluster);
    if (f && t.smaller->contains(f->gpus1) && t.smaller->contains(f->gpus2)) {
      return over_stages(t, o, *f, split.micro_batches, settled, floor);
    }
  }
  return over_micro_batches(t, o, split.micro_batches, settled, floor);
}

namespace {

// A group's bound without screening it: GEMM and attention per layer and
// micro-batch (the same for every pipeline depth and sharding) times the
// largest stage's layers and the micro-batches, with the pipeline's fill
// and drain; and the same without them (the stage's compute).
std::pair<double, double> group_bound(Search& s, std::size_t i) {
  const Candidate& c = s.alive[i];
  const Setting& st = s.settings[c.setting];
  // A 1F1B pipeline cannot hide its fill and drain: the last stage starts
  // after p − 1 forwards and the first finishes p − 1 backwards after it,
  // (p − 1) / v micro-batches of one stage's layer work when interleaved.
  // Uneven layouts: the largest stage's work per micro-batch, and the fill
  // and drain at the smallest stage's (a bound either way).
  const double micro = static_cast<double>(plan::split_batch(s.m, st.gpus, c.o).micro_batches);
  // Zero-bubble schedules may hide it all: no fill and drain in their bound.
  const double bubble =
      plan::traits(c.o.pipeline_schedule).fills_and_drains ? static_cast<double>(c.o.pp - 1) / c.o.vpp : 0.0;
  const plan::PipelineLayout layout = plan::pipeline_layout(s.m, c.o);
  int fewest = layout.stage_layers(0);
  for (int p = 1; p < layout.pp; ++p) fewest = std::min(fewest, layout.stage_layers(p));
  const double per_layer = s.layer_cost(c.setting, c.o).compute_s;
  const double stage = per_layer * layout.max_stage_layers();
  return std::pair{stage * micro + per_layer * fewest * bubble, stage * micro};
}

// Screens `which` in parallel; `floors`: which of them also get their group's
// floor; `own_stages`: none on fewer stages.
void run_screen(Search& s, const std::vector<std::size_t>& which, const std::vector<bool>& floors,
                bool own_stages = false) {
  // Threads: screening lowers and walks Schedules and touches no global state.
  const auto res = thread_map<Estimate>(which.size(), s.q.jobs, [&](std::size_t j) {
    const Candidate& c = s.alive[which[j]];
    Target t = s.target(c.setting);
    if (own_stages) t.smaller = nullptr;
    return screen(t, c.o, floors.empty() ? false : floors[j]);
  });
  for (std::size_t j = 0; j < which.size(); ++j) {
    const Estimate& e = res[j];
    s.screened[which[j]] = {e.ok ? 1.0 : 0.0, e.step_s, e.reserved_GiB, e.compute_s, e.floor_s};
    s.on_fewer_stages[which[j]] = e.fewer_stages;
    if (e.over_op_limit) ++s.tally(s.alive[which[j]].setting).op_limit;
  }
  s.out.screened += static_cast<long long>(which.size());
}

struct Groups {
  std::map<std::size_t, std::vector<std::size_t>> members;  // group -> alive indices, first is its head
  std::vector<std::pair<double, std::size_t>> order;        // (bound, head), best bound first
  std::map<std::size_t, double> bound, compute;             // per group
};

Groups make_groups(Search& s) {
  Groups g;
  for (std::size_t i = 0; i < s.alive.size(); ++i) g.members[s.alive[i].group].push_back(i);
  std::vector<std::size_t> firsts;
  for (const auto& [group, list] : g.members) firsts.push_back(list.front());
  for (std::size_t i : firsts) {
    const auto [bound, compute] = group_bound(s, i);
    g.order.emplace_back(bound, i);
    g.bound[s.alive[i].group] = bound;
    g.compute[s.alive[i].group] = compute;
  }
  std::sort(g.order.begin(), g.order.end());
  return g;
}

// A member is pruned when a bound on its step is worse than both the K-th best
// over every setting and its setting's best (with 2 % for extrapolation error): the group's pipeline bound, its GEMM
// and attention time plus the member's own Adam, and the group's floor.
std::vector<std::size_t> survivors(Search& s, Groups& g, std::size_t first, double group_compute, double floor) {
  std::vector<std::size_t> kept;
  const auto& list = g.members[s.alive[first].group];
  const double kth = s.bound_to_beat(s.alive[first].setting);
  for (auto it = list.begin() + 1; it != list.end(); ++it) {
    const double bound = std::max({g.bound[s.alive[first].group], group_compute + s.adam[*it], floor});
    if (s.q.exhaustive || s.score(s.settings[s.alive[*it].setting], bound) <= 1.02 * kth) kept.push_back(*it);
  }
  return kept;
}

// The members of the screened heads' groups that the bounds keep.
std::vector<std::size_t> members_to_screen(Search& s, Groups& g, const std::vector<std::size_t>& heads) {
  std::vector<std::size_t> to_screen;
  for (std::size_t first : heads) {
    const auto& list = g.members[s.alive[first].group];
    if (s.screened[first][0] <= 0) {  // the head does not lower: screen the others on their own
      to_screen.insert(to_screen.end(), list.begin() + 1, list.end());
      continue;
    }
    const std::vector<std::size_t> kept = survivors(s, g, first, s.screened[first][3], s.screened[first][4]);
    s.out.pruned_bound += static_cast<long long>(list.size() - 1 - kept.size());
    s.tally(s.alive[first].setting).bound += static_cast<long long>(list.size() - 1 - kept.size());
    // What the group's first member holds besides its model states
    // (activations, buffers) the others hold too, give or take their
    // gathered-parameter buffers: a member estimated 10 % over the budget
    // that way is not screened.
    const double others = s.screened[first][2] - s.states[first];
    for (std::size_t i : kept) {
      if (!s.q.exhaustive && s.states[i] + others > 1.1 * s.settings[s.alive[i].setting].limit_GiB) {
        ++s.out.pruned_memory;
        ++s.tally(s.alive[i].setting).memory;
      } else {
        to_screen.push_back(i);
      }
    }
  }
  return to_screen;
}

}  // namespace

// The candidates screened on fewer stages that verification could reach
// (verify_best): among the first `top` plans that screening sees fit, the
// first of each strategy on each setting, or within kNear of the last of
// those; screened again as they are, until none is left.
void rescreen_near_the_top(Search& s) {
  constexpr double kNear = 1.10;  // the stage extrapolation's step is within 7 % (bench/results/plan-search.txt)
  for (;;) {
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < s.alive.size(); ++i) {
      if (s.feasible(i)) order.push_back(i);
    }
    auto score = [&](std::size_t i) { return s.score(s.settings[s.alive[i].setting], s.screened[i][1]); };
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return score(a) < score(b); });
    // (setting, strategy) -> the score that verification reaches in it
    std::map<std::pair<std::size_t, int>, double> reach;
    double top = 0;
    for (std::size_t n = 0; n < order.size(); ++n) {
      const Candidate& c = s.alive[order[n]];
      reach.try_emplace({c.setting, static_cast<int>(c.o.strategy)}, score(order[n]));
      if (n < static_cast<std::size_t>(s.q.top)) top = score(order[n]);
    }
    std::vector<std::size_t> again;
    for (std::size_t i : order) {
      if (!s.on_fewer_stages[i]) continue;
      const Candidate& c = s.alive[i];
      if (score(i) <= kNear * std::max(top, reach[{c.setting, static_cast<int>(c.o.strategy)}])) again.push_back(i);
    }
    if (again.empty()) return;
    run_screen(s, again, {}, true);
    s.out.screened -= static_cast<long long>(again.size());  // counted once, as screened
    for (std::size_t i : again) s.note(i);
  }
}

// Screening with branch and bound over groups: the GEMM and attention time of
// a group (the same for every sharding of it) bounds each member's step from
// below; a group whose bound is worse than both the K-th best screened plan
// so far and the best of its own setting (cluster, GPU count) (with 2 % for
// extrapolation error) is not screened further: the answer is the top K and
// the best of every setting.
void screen_groups(Search& s) {
  s.screened.assign(s.alive.size(), {0, 0, 0, 0, 0});
  s.on_fewer_stages.assign(s.alive.size(), false);
  // The smaller clusters that long pipelines are screened on, built before
  // the screening threads read them.
  for (const Candidate& c : s.alive) {
    Setting& st = s.settings[c.setting];
    if (const auto f = fewer_stages(s.m, c.o, st.pm->topology())) {
      for (int gpus : {f->gpus1, f->gpus2}) {
        if (!st.smaller.contains(gpus)) {
          st.smaller.emplace(gpus, std::make_unique<cost::PerfModel>(topologies::Topology(st.cluster, gpus)));
        }
      }
    }
  }
  Groups g = make_groups(s);
  // The bound keeps the top K over every setting and each setting's best (Search::bound_to_beat).
  const std::size_t batch = static_cast<std::size_t>(std::max(1, 2 * s.q.jobs));
  for (std::size_t at = 0; at < g.order.size(); at += batch) {
    std::vector<std::size_t> heads;
    for (std::size_t k = at; k < std::min(g.order.size(), at + batch); ++k) {
      const auto [bound, first] = g.order[k];
      const std::size_t setting = s.alive[first].setting;
      if (!s.q.exhaustive && s.score(s.settings[setting], bound) > 1.02 * s.bound_to_beat(setting)) {
        s.out.pruned_bound += static_cast<long long>(g.members[s.alive[first].group].size());
        s.tally(setting).bound += static_cast<long long>(g.members[s.alive[first].group].size());
        continue;
      }
      heads.push_back(first);
    }
    // The floor costs the head a second walk: only for groups where the other
    // bounds leave two or more members to screen.
    std::vector<bool> floors;
    for (std::size_t first : heads) {
      floors.push_back(!s.q.exhaustive && survivors(s, g, first, g.compute[s.alive[first].group], 0).size() >= 2);
    }
    run_screen(s, heads, floors);
    for (std::size_t i : heads) s.note(i);
    const std::vector<std::size_t> to_screen = members_to_screen(s, g, heads);
    run_screen(s, to_screen, {});
    for (std::size_t i : to_screen) s.note(i);
    if (s.q.progress) s.q.progress(std::min(g.order.size(), at + batch), g.order.size());
  }
  rescreen_near_the_top(s);
}

}  // namespace hzp::explore::search
