// Plan search (see search.hpp).
#include "explore/search.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "explore/parallel_map.hpp"
#include "core/error.hpp"
#include "models/model_spec.hpp"
#include "sim/analytic/analytic_engine.hpp"
#include "sim/metrics.hpp"
#include "topologies/cluster_spec.hpp"

namespace hzp::explore {
namespace {

using plan::PlanOptions;
using plan::Strategy;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Candidate {
  std::size_t setting = 0;  // (cluster, gpus) index
  std::size_t group = 0;    // candidates with the same model-parallel plan, micro-batch and recompute
  PlanOptions o;
  bool preset_at_base = false;
};

struct Setting {
  std::string cluster_name;
  topologies::ClusterSpec cluster;
  int gpus = 0;
  std::unique_ptr<topologies::PerfModel> pm;
  double limit_GiB = 0;
};

struct Estimate {
  bool ok = false;
  double step_s = 0;
  double reserved_GiB = 0;
  double compute_s = 0;  // GEMM and attention on the compute stream: a lower bound on the step
  /// With `floor`: the step when every sharding-dependent op
  /// (plan::is_sharding_op) costs nothing, which no sharding of the same
  /// model-parallel plan can beat. A second walk of the same Schedule.
  double floor_s = 0;
};

Estimate estimate(const models::ModelSpec& m, const topologies::PerfModel& pm, const PlanOptions& o,
                  bool floor = false) {
  // A plan the lowering refuses (does not divide) is not a candidate.
  if (!plan::check_plan(m, pm.topology(), o).empty()) return Estimate{};
  {
    const core::Schedule s = plan::lower(m, pm.topology(), o, /*check=*/false);
    const sim::AnalyticEngine engine(pm);
    const sim::StepEstimate e = engine.estimate(s);
    Estimate out{true, e.step.to_seconds(), e.peak_reserved.gib(), e.model_compute.to_seconds(), 0};
    if (floor) {
      out.floor_s =
          engine.estimate(s, [&s](const core::Op& op) { return plan::is_sharding_op(s, op); }).step.to_seconds();
    }
    return out;
  }
}

// The full simulation with metrics, for the plans that are reported.
Estimate simulate(const models::ModelSpec& m, const topologies::PerfModel& pm, const PlanOptions& o,
                  sim::Metrics& out) {
  if (!plan::check_plan(m, pm.topology(), o).empty()) return Estimate{};
  {
    core::Schedule s = plan::lower(m, pm.topology(), o);
    traces::TraceHeader h;
    h.schedule_sha256 = "(plan search)";
    traces::TimelineRecorder rec;
    sim::AnalyticEngine(pm).run(s, h, rec);
    out = sim::compute_metrics(s, rec.timeline(), pm.topology().spec().device);
    return Estimate{true, out.step_time.to_seconds(), out.peak_reserved().gib(), 0};
  }
}

// Screening: the same plan with a few layers per virtual stage, extrapolated
// to the model's layer count (step time and memory are affine in it).
Estimate over_layers(const models::ModelSpec& m, const topologies::PerfModel& pm, const PlanOptions& o, bool floor) {
  // Two and three layers per virtual stage for short pipelines (with one, the
  // embedding's and the head's transients can set the peak), one and two for
  // long ones (already many layers).
  const int unit = o.pp * o.vpp;
  const int k1 = unit <= 4 ? 2 : 1;
  if ((k1 + 1) * unit >= m.layers) return estimate(m, pm, o, floor);
  models::ModelSpec a = m, b = m;
  a.layers = k1 * unit;
  b.layers = (k1 + 1) * unit;
  if (m.moe) {
    a.moe->dense_layers = std::min(m.moe->dense_layers, a.layers - 1);
    b.moe->dense_layers = std::min(m.moe->dense_layers, b.layers - 1);
  }
  const Estimate ea = estimate(a, pm, o, floor), eb = estimate(b, pm, o, floor);
  if (!ea.ok || !eb.ok) return Estimate{};
  const double k = static_cast<double>(m.layers - a.layers) / (b.layers - a.layers);
  auto x = [k](double va, double vb) { return va + k * (vb - va); };
  // More layers never need less memory: the larger reduced model bounds the peak from below.
  return Estimate{true, x(ea.step_s, eb.step_s), std::max(eb.reserved_GiB, x(ea.reserved_GiB, eb.reserved_GiB)),
                  x(ea.compute_s, eb.compute_s), x(ea.floor_s, eb.floor_s)};
}

// Screening: the plan on reduced-layer models and, for pipelines with many
// micro-batches, also fewer micro-batches (p and 2p per rank): a 1F1B step is
// affine in the micro-batch count once it is at least p, and its peak memory
// no longer grows with it.
Estimate screen(const models::ModelSpec& m, const topologies::PerfModel& pm, const PlanOptions& o, bool floor) {
  const int world = pm.topology().devices();
  plan::BatchSplit split;
  if (!plan::check_batch(m, world, o, split).empty()) return Estimate{};
  const std::int64_t micro = split.micro_batches;
  if (o.pp == 1 || micro <= 2 * o.pp) return over_layers(m, pm, o, floor);
  const std::int64_t dp = world / (o.tp * o.pp * o.cp);
  auto with_micro = [&](std::int64_t mb_count) {
    PlanOptions r = o;
    r.global_batch_tokens.reset();
    r.global_batch_sequences = mb_count * o.micro_batch * dp;
    return r;
  };
  const std::int64_t m1 = o.pp, m2 = 2 * o.pp;
  const Estimate e1 = over_layers(m, pm, with_micro(m1), floor), e2 = over_layers(m, pm, with_micro(m2), floor);
  if (!e1.ok || !e2.ok) return Estimate{};
  const double k = static_cast<double>(micro - m1) / static_cast<double>(m2 - m1);
  auto x = [k](double v1, double v2) { return v1 + k * (v2 - v1); };
  return Estimate{true, x(e1.step_s, e2.step_s), std::max(e1.reserved_GiB, e2.reserved_GiB),
                  x(e1.compute_s, e2.compute_s), x(e1.floor_s, e2.floor_s)};
}

// Parameters per layer (dense part, expert part), computed once per search.
struct LayerParams {
  std::vector<double> dense, expert;
  explicit LayerParams(const models::ModelSpec& m) {
    for (int l = 0; l < m.layers; ++l) {
      const double e = m.is_moe_layer(l) ? static_cast<double>(models::ffn_params(m, l)) : 0;
      dense.push_back(static_cast<double>(models::layer_params(m, l)) - e);
      expert.push_back(e);
    }
  }
  /// Parameters on one rank of the largest pipeline stage (dense / tp, experts / (tp · ep if counted)).
  [[nodiscard]] double largest_stage(const PlanOptions& o, bool experts) const {
    const std::size_t per_stage = dense.size() / static_cast<std::size_t>(o.pp);
    double biggest = 0;
    for (std::size_t s = 0; s < static_cast<std::size_t>(o.pp); ++s) {
      double params = 0;
      for (std::size_t l = s * per_stage; l < (s + 1) * per_stage; ++l) {
        params += dense[l] + (experts ? expert[l] / o.ep : 0);
      }
      biggest = std::max(biggest, params / o.tp);
    }
    return biggest;
  }
  /// Parameters on one rank of the first pipeline stage, which holds the most activations.
  [[nodiscard]] double first_stage(const PlanOptions& o) const {
    double params = 0;
    for (std::size_t l = 0; l < dense.size() / static_cast<std::size_t>(o.pp); ++l)
      params += dense[l] + expert[l] / o.ep;
    return params / o.tp;
  }
};

// The sharded model states alone (a lower bound on the peak), GiB.
double memory_lower_bound_GiB(double stage_params, const PlanOptions& o, const plan::ShardSizes& sh) {
  const double grad_bytes = static_cast<double>(core::dtype_bytes(o.grad_dtype));
  return stage_params * (2.0 / sh.param + grad_bytes / sh.grad + 12.0 / sh.optim) / (1024.0 * 1024 * 1024);
}

// Adam's kernels on the compute stream (bandwidth-bound: kAdamBytesPerParam
// per owned parameter), largest stage, seconds: serial with the GEMMs.
double adam_seconds(double dense_stage_params, const plan::ShardSizes& sh, const topologies::DeviceProfile& d) {
  return core::transfer_seconds(static_cast<double>(plan::kAdamBytesPerParam) * dense_stage_params / sh.optim,
                                core::Bandwidth::from_GBps(d.hbm_GBps) * d.hbm_efficiency);
}

std::vector<int> divisors_from(const std::vector<int>& wanted, int n) {
  std::set<int> out;
  for (int w : wanted) {
    if (w >= 1 && w <= n && n % w == 0) out.insert(w);
  }
  out.insert(n);
  out.insert(1);
  return {out.begin(), out.end()};
}

std::string bottleneck(const sim::Metrics& m) {
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
  if (worst_s > 0.05 * step && worst_s >= idle) {
    return fmt::format("{} collectives exposed ({:.0f}% of the step)", worst, 100 * worst_s / step);
  }
  if (idle > 0.05 * step)
    return fmt::format("compute stream idle ({:.0f}%: pipeline bubble or waits)", 100 * idle / step);
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
  PlanSearch out;
  std::vector<core::Problem> bad;
  if (q.objective != "throughput" && q.objective != "cost") {
    bad.push_back({"objective", fmt::format("expected throughput or cost, got '{}'", q.objective)});
  }
  if (q.top < 1) bad.push_back({"top", "expected at least 1"});
  if (!bad.empty()) throw core::ProblemError(std::move(bad));
  const models::ModelSpec m = models::load_model(q.model);

  std::vector<Setting> settings;
  for (const auto& c : q.clusters) {
    // Each cluster as every other command resolves it: calibration and what-if changes applied.
    const topologies::ClusterSpec spec = topologies::resolve_cluster(c, q.overlay).spec;
    for (int g : q.gpus) {
      Setting s;
      s.cluster_name = c;
      s.cluster = spec;
      s.gpus = g;
      s.pm = std::make_unique<topologies::PerfModel>(topologies::Topology(spec, g));
      s.limit_GiB = q.memory_limit_GiB > 0 ? q.memory_limit_GiB : spec.device.hbm_GiB;
      settings.push_back(std::move(s));
    }
  }
  const std::optional<double> price = q.price_per_gpu_hour;
  if (q.objective == "cost") {
    for (const auto& s : settings) {
      if (!price && !s.cluster.price_per_device_hour) {
        throw core::ProblemError(
            {{"price_per_gpu_hour", fmt::format("expected a price: {} has none in its file", s.cluster_name)}});
      }
    }
  }

  // The search space.
  std::vector<Candidate> space;
  std::size_t groups = 0;
  for (std::size_t si = 0; si < settings.size(); ++si) {
    const Setting& st = settings[si];
    const int dpn = st.cluster.devices_per_node;
    for (int tp : {1, 2, 4, 8}) {
      if (tp > dpn || m.heads % tp != 0) continue;
      for (int pp = 1; pp <= std::min(64, m.layers); ++pp) {  // every pipeline depth that divides the layers
        if (m.layers % pp != 0) continue;
        for (int vpp : {1, 2, 3}) {
          if ((vpp > 1 && pp == 1) || m.layers % (pp * vpp) != 0) continue;
          for (int ep : {1, 2, 4, 8}) {
            if (ep > 1 && (!m.moe || m.moe->experts % ep != 0)) continue;
            if (st.gpus % (tp * pp) != 0) continue;
            const int dp = st.gpus / (tp * pp);
            if (dp % ep != 0) continue;
            for (std::int64_t mb : {1, 2}) {
              for (auto rc : {models::Recompute::None, models::Recompute::Selective, models::Recompute::Full}) {
                PlanOptions o = q.base;
                o.tp = tp;
                o.pp = pp;
                o.vpp = vpp;
                o.ep = ep;
                o.micro_batch = mb;
                o.recompute = rc;
                plan::BatchSplit split;
                if (!plan::check_batch(m, st.gpus, o, split).empty()) continue;
                const std::size_t group = groups++;
                const bool base = tp == 1 && pp == 1 && ep == 1 && mb == q.base.micro_batch && rc == q.base.recompute;
                for (Strategy s :
                     {Strategy::Ddp, Strategy::Zero1, Strategy::Zero2, Strategy::Fsdp, Strategy::Hsdp, Strategy::Hpz}) {
                  PlanOptions p = o;
                  p.strategy = s;
                  space.push_back(Candidate{si, group, p, base});
                }
                const auto sizes = divisors_from({2, 8, 32, 128, 512}, dp);
                for (int gp : sizes) {
                  for (int gg : sizes) {
                    if (gg < gp || gg % gp != 0) continue;
                    for (int go : sizes) {
                      if (go < gg || go % gg != 0) continue;
                      for (bool async : {true, false}) {
                        // Inline issue with these sizes is a preset already: ddp, zero1, zero2, fsdp.
                        if (!async && gg == go && (go == dp || (gp == 1 && gg == 1)) && (gp == 1 || gp == dp)) continue;
                        if (!async && gp == 1 && gg == 1 && go == dp) continue;
                        PlanOptions p = o;
                        p.strategy = Strategy::Hzp;
                        p.param_shard = gp;
                        p.grad_shard = gg;
                        p.optim_shard = go;
                        p.async = async;
                        space.push_back(Candidate{si, group, p, false});
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }

  // One transformer layer per micro-batch, from two- and three-layer models
  // under FSDP without a pipeline: its GEMM and attention time, and the
  // activations it keeps for backward (the peak's growth less the layer's
  // sharded states; from two layers on, both models prefetch one layer's
  // parameters). The same for every pipeline depth and sharding.
  struct LayerCost {
    double compute_s = 0, activations_GiB = 0;
  };
  std::map<std::tuple<std::size_t, int, int, std::int64_t, int>, LayerCost> layer_costs;  // (setting, tp, ep, mb, rc)
  auto layer_cost = [&](std::size_t setting, const PlanOptions& p) {
    const auto key = std::tuple{setting, p.tp, p.ep, p.micro_batch, static_cast<int>(p.recompute)};
    auto it = layer_costs.find(key);
    if (it != layer_costs.end()) return it->second;
    const Setting& st = settings[setting];
    PlanOptions o = p;
    o.strategy = Strategy::Fsdp;
    o.pp = o.vpp = 1;
    o.global_batch_tokens.reset();
    o.global_batch_sequences = o.micro_batch * (st.gpus / (o.tp * o.cp));
    models::ModelSpec two = m, three = m;
    two.layers = 2;
    three.layers = 3;
    if (m.moe) two.moe->dense_layers = three.moe->dense_layers = 0;
    const Estimate e1 = estimate(two, *st.pm, o), e2 = estimate(three, *st.pm, o);
    LayerCost lc;
    if (e1.ok && e2.ok) {
      lc.compute_s = std::max(0.0, e2.compute_s - e1.compute_s);
      const int dp = st.gpus / (o.tp * o.cp);
      const double layer_states = memory_lower_bound_GiB(static_cast<double>(models::layer_params(three, 2)) / o.tp, o,
                                                         plan::ShardSizes{dp, dp, dp});
      lc.activations_GiB = std::max(0.0, e2.reserved_GiB - e1.reserved_GiB - layer_states);
    }
    return layer_costs.emplace(key, lc).first->second;
  };

  // 1. Memory lower bound; shards that do not resolve are not candidates.
  std::vector<Candidate> alive;
  std::vector<double> adam;    // per alive candidate: its Adam time
  std::vector<double> states;  // per alive candidate: its sharded model states, GiB
  const LayerParams layer_params(m);
  std::map<std::tuple<int, int, int>, std::pair<double, double>> stage_params;  // (pp, tp, ep) -> (all, dense)
  for (auto& c : space) {
    const Setting& st = settings[c.setting];
    const int dp = st.gpus / (c.o.tp * c.o.pp);
    plan::ShardSizes sh;
    if (!plan::check_shards(c.o, dp, st.cluster, sh).empty()) continue;
    ++out.candidates;
    const auto stage_key = std::tuple{c.o.pp, c.o.tp, c.o.ep};
    auto cached = stage_params.find(stage_key);
    if (cached == stage_params.end()) {
      cached = stage_params
                   .emplace(stage_key,
                            std::pair{layer_params.largest_stage(c.o, true), layer_params.largest_stage(c.o, false)})
                   .first;
    }
    if (memory_lower_bound_GiB(cached->second.first, c.o, sh) > st.limit_GiB) {
      ++out.pruned_memory;
      continue;
    }
    if (!q.exhaustive) {
      // The first stage also keeps min(m, p) micro-batches' activations of its
      // layers for backward under 1F1B (more when interleaved), one micro-batch
      // without a pipeline: with 10 % for the allocator, a bound on its peak.
      const std::int64_t micro = plan::split_batch(m, st.gpus, c.o).micro_batches;
      int moe_or_all = 0;  // the first stage's layers of the kind the layer model measured
      for (int l = 0; l < m.layers / c.o.pp; ++l) moe_or_all += !m.moe || m.is_moe_layer(l) ? 1 : 0;
      const double activations = 0.9 * static_cast<double>(std::min<std::int64_t>(micro, c.o.pp)) * moe_or_all *
                                 layer_cost(c.setting, c.o).activations_GiB;
      if (memory_lower_bound_GiB(layer_params.first_stage(c.o), c.o, sh) + activations > st.limit_GiB) {
        ++out.pruned_memory;
        continue;
      }
    }
    alive.push_back(c);
    adam.push_back(adam_seconds(cached->second.second, sh, st.cluster.device));
    states.push_back(memory_lower_bound_GiB(cached->second.first, c.o, sh));
  }

  auto cost_of = [&](const Setting& st, double step_s, double tokens) -> std::optional<double> {
    auto p = price ? price : st.cluster.price_per_device_hour;
    if (!p || tokens <= 0) return std::nullopt;
    return *p * st.gpus * step_s / 3600.0 / tokens * 1e6;
  };
  const double tokens_per_step = [&] {
    const std::int64_t seq = q.base.seq_len > 0 ? q.base.seq_len : std::min<std::int64_t>(m.max_seq_len, 8192);
    if (q.base.global_batch_sequences) return static_cast<double>(*q.base.global_batch_sequences * seq);
    return static_cast<double>(q.base.global_batch_tokens.value_or(0) / seq * seq);
  }();
  auto score = [&](const Setting& st, double step_s) {
    if (q.objective == "cost") return cost_of(st, step_s, tokens_per_step).value_or(1e300);
    return step_s;  // same tokens per step everywhere: throughput is 1 / step
  };

  // 2. Screening with branch and bound over groups: the GEMM and attention
  // time of a group (the same for every sharding of it) bounds each member's
  // step from below; a group whose bound is worse than the K-th best screened
  // plan so far (with 2 % for extrapolation error) is not screened further.
  std::vector<std::array<double, 5>> screened(alive.size(), {0, 0, 0, 0, 0});  // ok, step, reserved, compute, floor
  std::map<std::size_t, std::vector<std::size_t>> members;
  for (std::size_t i = 0; i < alive.size(); ++i) members[alive[i].group].push_back(i);
  std::vector<std::size_t> firsts;
  for (const auto& [g, list] : members) firsts.push_back(list.front());
  // `floors`: which of `which` also get their group's floor.
  auto run_screen = [&](const std::vector<std::size_t>& which, const std::vector<bool>& floors) {
    auto res = parallel_map(which.size(), q.jobs, [&](std::size_t j) {
      const Candidate& c = alive[which[j]];
      const Estimate e = screen(m, *settings[c.setting].pm, c.o, floors.empty() ? false : floors[j]);
      return pack({e.ok ? 1.0 : 0.0, e.step_s, e.reserved_GiB, e.compute_s, e.floor_s});
    });
    for (std::size_t j = 0; j < which.size(); ++j) {
      for (std::size_t f = 0; f < 5; ++f) screened[which[j]][f] = unpack(res[j], f);
    }
    out.screened += static_cast<long long>(which.size());
  };
  const std::size_t keep = static_cast<std::size_t>(q.top);  // the bound only has to keep the top K
  std::vector<double> best_scores;                           // the `keep` best screened scores so far
  auto feasible = [&](std::size_t i) {
    return screened[i][0] > 0 && screened[i][2] <= settings[alive[i].setting].limit_GiB * 1.05;
  };
  auto note = [&](std::size_t i) {
    if (!feasible(i)) return;
    best_scores.push_back(score(settings[alive[i].setting], screened[i][1]));
    std::sort(best_scores.begin(), best_scores.end());
    if (best_scores.size() > keep) best_scores.resize(keep);
  };
  // A group's bound without screening it: GEMM and attention per layer and
  // micro-batch (the same for every pipeline depth and sharding) times the
  // largest stage's layers and the micro-batches, with the pipeline's fill
  // and drain; and the same without them (the stage's compute).
  auto group_bound = [&](std::size_t i) {
    const Candidate& c = alive[i];
    const Setting& st = settings[c.setting];
    // A 1F1B pipeline cannot hide its fill and drain: the last stage starts
    // after p − 1 forwards and the first finishes p − 1 backwards after it,
    // (p − 1) / v micro-batches of one stage's layer work when interleaved.
    const double micro = static_cast<double>(plan::split_batch(m, st.gpus, c.o).micro_batches);
    const double bubble = static_cast<double>(c.o.pp - 1) / c.o.vpp;
    const double stage = layer_cost(c.setting, c.o).compute_s * (m.layers / c.o.pp);
    return std::pair{stage * (micro + bubble), stage * micro};
  };
  std::vector<std::pair<double, std::size_t>> group_order;  // (bound, first member)
  std::map<std::size_t, double> bound_of_group, compute_of_group;
  for (std::size_t i : firsts) {
    const auto [bound, compute] = group_bound(i);
    group_order.emplace_back(bound, i);
    bound_of_group[alive[i].group] = bound;
    compute_of_group[alive[i].group] = compute;
  }
  std::sort(group_order.begin(), group_order.end());
  const std::size_t batch = static_cast<std::size_t>(std::max(1, 2 * q.jobs));
  for (std::size_t at = 0; at < group_order.size(); at += batch) {
    std::vector<std::size_t> heads;
    for (std::size_t g = at; g < std::min(group_order.size(), at + batch); ++g) {
      const auto [bound, first] = group_order[g];
      const double kth = best_scores.size() >= keep ? best_scores.back() : 1e300;
      if (!q.exhaustive && score(settings[alive[first].setting], bound) > 1.02 * kth) {
        out.pruned_bound += static_cast<long long>(members[alive[first].group].size());
        continue;
      }
      heads.push_back(first);
    }
    // A member is pruned when a bound on its step is worse than the K-th best
    // (with 2 % for extrapolation error): the group's pipeline bound, its GEMM
    // and attention time plus the member's own Adam, and the group's floor.
    // The floor costs the head a second walk: only for groups where the other
    // bounds leave two or more members to screen.
    auto survivors = [&](std::size_t first, double group_compute, double floor) {
      std::vector<std::size_t> kept;
      const auto& list = members[alive[first].group];
      const double kth = best_scores.size() >= keep ? best_scores.back() : 1e300;
      for (auto it = list.begin() + 1; it != list.end(); ++it) {
        const double bound = std::max({bound_of_group[alive[first].group], group_compute + adam[*it], floor});
        if (q.exhaustive || score(settings[alive[*it].setting], bound) <= 1.02 * kth) kept.push_back(*it);
      }
      return kept;
    };
    std::vector<bool> floors;
    for (std::size_t first : heads) {
      floors.push_back(!q.exhaustive && survivors(first, compute_of_group[alive[first].group], 0).size() >= 2);
    }
    run_screen(heads, floors);
    for (std::size_t i : heads) note(i);
    std::vector<std::size_t> to_screen;
    for (std::size_t first : heads) {
      const auto& list = members[alive[first].group];
      if (screened[first][0] <= 0) {  // the head does not lower: screen the others on their own
        to_screen.insert(to_screen.end(), list.begin() + 1, list.end());
        continue;
      }
      const std::vector<std::size_t> kept = survivors(first, screened[first][3], screened[first][4]);
      out.pruned_bound += static_cast<long long>(list.size() - 1 - kept.size());
      // What the group's first member holds besides its model states
      // (activations, buffers) the others hold too, give or take their
      // gathered-parameter buffers: a member estimated 10 % over the budget
      // that way is not screened.
      const double others = screened[first][2] - states[first];
      for (std::size_t i : kept) {
        if (!q.exhaustive && states[i] + others > 1.1 * settings[alive[i].setting].limit_GiB) {
          ++out.pruned_memory;
        } else {
          to_screen.push_back(i);
        }
      }
    }
    run_screen(to_screen, {});
    for (std::size_t i : to_screen) note(i);
  }

  // 3. Exact simulation of the best screened, every strategy's best and the presets at the base options.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < alive.size(); ++i) {
    if (feasible(i)) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return score(settings[alive[a].setting], screened[a][1]) < score(settings[alive[b].setting], screened[b][1]);
  });
  // Exact simulation, best screened first, until `top` plans fit (the
  // screened memory is an extrapolation); plus every strategy's best and the
  // presets at the base options, so that no preset beats the answer.
  std::vector<std::size_t> exact_set;
  std::set<std::pair<std::size_t, int>> best_of_strategy;
  for (std::size_t i : order) {
    if (best_of_strategy.insert({alive[i].setting, static_cast<int>(alive[i].o.strategy)}).second)
      exact_set.push_back(i);
  }
  for (std::size_t i = 0; i < alive.size(); ++i) {
    if (alive[i].preset_at_base && std::find(exact_set.begin(), exact_set.end(), i) == exact_set.end()) {
      exact_set.push_back(i);
    }
  }
  std::vector<PlanChoice> found;
  std::set<std::size_t> simulated;
  // Exact simulations in parallel; returns how many of `which` fit.
  auto verify = [&](std::vector<std::size_t> which) {
    std::erase_if(which, [&](std::size_t i) { return !simulated.insert(i).second; });
    const auto res = parallel_map(which.size(), q.jobs, [&](std::size_t j) {
      const Candidate& c = alive[which[j]];
      sim::Metrics metrics;
      const Estimate e = simulate(m, *settings[c.setting].pm, c.o, metrics);
      if (!e.ok) return pack({0.0});
      return pack({1.0, e.step_s, e.reserved_GiB, metrics.tokens_per_s, metrics.mfu}) + bottleneck(metrics);
    });
    out.exact += static_cast<long long>(which.size());
    std::size_t fits = 0;
    for (std::size_t j = 0; j < which.size(); ++j) {
      const Candidate& c = alive[which[j]];
      const Setting& st = settings[c.setting];
      if (unpack(res[j], 0) <= 0 || unpack(res[j], 2) > st.limit_GiB) continue;
      PlanChoice pc;
      pc.cluster = st.cluster_name;
      pc.gpus = st.gpus;
      pc.options = c.o;
      pc.shards = plan::resolve_shards(c.o, st.gpus / (c.o.tp * c.o.pp), st.cluster);
      pc.async = plan::resolve_async(c.o);
      pc.step_s = unpack(res[j], 1);
      pc.peak_reserved_GiB = unpack(res[j], 2);
      pc.tokens_per_s = unpack(res[j], 3);
      pc.mfu = unpack(res[j], 4);
      pc.hbm_GiB = st.limit_GiB;
      pc.usd_per_million_tokens = cost_of(st, pc.step_s, tokens_per_step);
      pc.bottleneck = res[j].substr(5 * sizeof(double));
      found.push_back(std::move(pc));
      ++fits;
    }
    return fits;
  };
  verify(exact_set);
  // Then the best screened, in order, until `top` of them fit (at most 400).
  std::size_t fits_from_order = 0;
  for (std::size_t n = 0; n < std::min<std::size_t>(order.size(), 400) && fits_from_order < keep;) {
    std::vector<std::size_t> next;
    while (n < std::min<std::size_t>(order.size(), 400) && next.size() < keep - fits_from_order) {
      next.push_back(order[n++]);
    }
    fits_from_order += verify(next);
  }
  // Ties (plans the model cannot tell apart) in a fixed order: less memory first, then by name.
  std::sort(found.begin(), found.end(), [&](const PlanChoice& a, const PlanChoice& b) {
    const double sa = q.objective == "cost" ? a.usd_per_million_tokens.value_or(1e300) : a.step_s;
    const double sb = q.objective == "cost" ? b.usd_per_million_tokens.value_or(1e300) : b.step_s;
    return std::tuple{sa, a.peak_reserved_GiB, a.cluster, a.gpus, describe_plan(a)} <
           std::tuple{sb, b.peak_reserved_GiB, b.cluster, b.gpus, describe_plan(b)};
  });
  // One entry per distinct plan.
  std::set<std::string> seen;
  for (auto& pc : found) {
    if (out.best.size() >= static_cast<std::size_t>(q.top)) break;
    if (seen.insert(pc.cluster + std::to_string(pc.gpus) + describe_plan(pc)).second) out.best.push_back(pc);
  }
  out.seconds = now_s() - t0;
  return out;
}

}  // namespace hzp::explore
