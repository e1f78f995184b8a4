// Plan search, the space: every (cluster, GPU count) setting resolved as every
// command resolves it, and every well-formed candidate plan on each.
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "explore/scenario.hpp"
#include "explore/search_internal.hpp"
#include "topologies/overlay.hpp"

namespace hzp::explore::search {
namespace {

std::vector<int> divisors_from(const std::vector<int>& wanted, int n) {
  std::set<int> out;
  for (int w : wanted) {
    if (w >= 1 && w <= n && n % w == 0) out.insert(w);
  }
  out.insert(n);
  out.insert(1);
  return {out.begin(), out.end()};
}

// The hzp group sizes (and issue mode) of one model-parallel plan over `dp` ranks.
void add_hzp_candidates(Search& s, std::size_t si, std::size_t group, const PlanOptions& o, int dp) {
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
          if (s.wanted(p)) s.space.push_back(Candidate{si, group, p, false});
        }
      }
    }
  }
}

// Every micro-batch and recompute of one model-parallel plan: a group of the
// presets and the hzp sizes.
void add_group(Search& s, std::size_t si, int tp, int pp, int vpp, plan::PipelineSchedule schedule, int ep,
               const std::optional<std::string>& layout, std::optional<int> expert_tp) {
  const Setting& st = s.settings[si];
  const int dp = st.gpus / (tp * pp);
  // Micro-batches up to 8: few large ones amortise what each micro-batch
  // repeats (ZeRO-3's gathers, offloaded parameters' fetches), as in
  // Calculon's best plans (one micro-batch of 8 or 9 per rank).
  for (std::int64_t mb : {1, 2, 4, 8}) {
    for (auto rc : {models::Recompute::None, models::Recompute::Selective, models::Recompute::Full}) {
      PlanOptions o = s.q.base;
      o.tp = tp;
      o.pp = pp;
      o.vpp = vpp;
      o.pipeline_schedule = schedule;
      o.first_stage_layers.reset();
      o.last_stage_layers.reset();
      o.pipeline_layout = layout;
      o.ep = ep;
      o.expert_tp = expert_tp;
      o.micro_batch = mb;
      o.recompute = rc;
      plan::BatchSplit split;
      if (std::vector<core::Problem> ps = plan::check_batch(s.m, st.gpus, o, split); !ps.empty()) {
        ++s.unsplit;
        ++s.tally(si).batch_unsplit;
        if (!s.why_unsplit) s.why_unsplit = ps.front();
        continue;
      }
      const std::size_t group = s.groups++;
      const bool base = tp == 1 && pp == 1 && ep == 1 && mb == s.q.base.micro_batch && rc == s.q.base.recompute;
      for (Strategy x :
           {Strategy::Ddp, Strategy::Zero1, Strategy::Zero2, Strategy::Fsdp, Strategy::Hsdp, Strategy::Hpz}) {
        PlanOptions p = o;
        p.strategy = x;
        if (s.wanted(p)) s.space.push_back(Candidate{si, group, p, base});
      }
      add_hzp_candidates(s, si, group, o, dp);
    }
  }
}

}  // namespace

Search::Search(const PlanQuery& query) : q(query), price(query.price_per_gpu_hour) {
  if (q.clusters.empty()) throw core::ProblemError({core::Problem{"cluster", "expected at least one cluster"}});
  for (const auto& c : q.clusters) {
    // The inputs on each cluster as every other command resolves them
    // (calibration and what-if changes applied, the calibration's stack
    // checked); the model and the stack are the same on every cluster.
    Inputs in = resolve_inputs(q, c);
    if (!stack) {
      m = std::move(in.model);
      stack = std::move(in.stack);
      for (Strategy x : q.strategies) {  // asked for by name: one the stack does not run is bad input
        PlanOptions p;
        p.strategy = x;
        if (auto why = plan::not_runnable(stack->spec, p)) throw core::ProblemError({{"strategy", *why}});
      }
    }
    const topologies::ClusterSpec& spec = in.cluster.spec;
    for (int g : q.gpus) {
      Setting s;
      s.cluster_name = c;
      s.cluster = spec;
      s.gpus = g;
      s.pm = std::make_unique<cost::PerfModel>(topologies::Topology(spec, g));
      s.limit_GiB = q.memory_limit_GiB > 0 ? q.memory_limit_GiB : spec.device.hbm_GiB;
      settings.push_back(std::move(s));
      out.settings.push_back(SettingTally{c, g});
      setting_best.push_back(1e300);
    }
  }
  if (q.objective == Objective::Cost) {
    for (const auto& s : settings) {
      if (!price && !s.cluster.price_per_device_hour) {
        throw core::ProblemError(
            {{"price_per_gpu_hour", fmt::format("expected a price: {} has none in its file", s.cluster_name)}});
      }
    }
  }
  const std::int64_t seq = q.base.seq_len > 0 ? q.base.seq_len : std::min<std::int64_t>(m.max_seq_len, 8192);
  // A batch no plan can split is bad input, not "no plan fits".
  if (seq > m.max_seq_len) {
    throw core::ProblemError(
        {{"seq_len", fmt::format("expected at most {} (max_seq_len of {}), got {}", m.max_seq_len, m.name, seq)}});
  }
  if (q.base.global_batch_tokens && *q.base.global_batch_tokens % seq != 0) {
    throw core::ProblemError({{"global_batch_tokens", fmt::format("expected a positive multiple of the sequence "
                                                                  "length {}, got {}",
                                                                  seq, *q.base.global_batch_tokens)}});
  }
  tokens_per_step =
      q.base.global_batch_sequences
          ? static_cast<double>(*q.base.global_batch_sequences * seq)
          : static_cast<double>(q.base.global_batch_tokens.value_or(plan::kDefaultGlobalBatchTokens) / seq * seq);
}

// Every TP (within a node), every pipeline depth that divides the layers,
// VPP 1-3 where pp x vpp divides them too, EP for MoE models, micro-batch
// 1, 2, 4 or 8, every recompute; and pipeline depths that are powers of two but do not
// divide the layers, with plan::balanced_layout.
void enumerate_space(Search& s) {
  const models::ModelSpec& m = s.m;
  for (std::size_t si = 0; si < s.settings.size(); ++si) {
    const Setting& st = s.settings[si];
    for (int tp : {1, 2, 4, 8}) {
      if (tp > st.cluster.devices_per_node || m.heads % tp != 0) continue;
      for (int pp = 1; pp <= std::min(64, m.layers); ++pp) {
        const bool uneven = m.layers % pp != 0;
        if (uneven && (pp & (pp - 1)) != 0) continue;
        for (int vpp : {1, 2, 3}) {
          if ((vpp > 1 && pp == 1) || pp * vpp > m.layers) continue;
          if (!uneven && m.layers % (pp * vpp) != 0) continue;
          std::optional<std::string> layout;
          if (uneven) layout = plan::balanced_layout(m.layers, pp, vpp).text();
          // 1F1B (interleaved when vpp > 1) only: the zero-bubble schedules
          // doubled the pipelined groups and the search's time; they are a
          // simulate and sweep option (pipeline_schedule).
          const plan::PipelineSchedule schedule = plan::PipelineSchedule::OneFOneB;
          for (int ep : {1, 2, 4, 8}) {
            if (ep > 1 && (!m.moe || m.moe->experts % ep != 0)) continue;
            if (st.gpus % (tp * pp) != 0 || (st.gpus / (tp * pp)) % ep != 0) continue;
            add_group(s, si, tp, pp, vpp, schedule, ep, layout, std::nullopt);
          }
          // MoE parallel folding: experts unsplit (expert_tp 1) and ep over
          // the stage's tp x dp ranks, up to 64.
          for (int ep : {8, 16, 32, 64}) {
            if (!m.moe || tp == 1 || m.moe->experts % ep != 0 || st.gpus % (tp * pp) != 0) continue;
            if ((st.gpus / pp) % ep != 0) continue;
            add_group(s, si, tp, pp, vpp, schedule, ep, layout, 1);
          }
        }
      }
    }
  }
}

std::optional<double> Search::cost_of(const Setting& st, double step_s) const {
  auto p = price ? price : st.cluster.price_per_device_hour;
  if (!p || tokens_per_step <= 0) return std::nullopt;
  return *p * st.gpus * step_s / 3600.0 / tokens_per_step * 1e6;
}

bool Search::wanted(const PlanOptions& p) const {
  const bool asked =
      q.strategies.empty() || std::find(q.strategies.begin(), q.strategies.end(), p.strategy) != q.strategies.end();
  return asked && !plan::not_runnable(stack->spec, p);
}

double Search::score(const Setting& st, double step_s) const {
  if (q.objective == Objective::Cost) return cost_of(st, step_s).value_or(1e300);
  return step_s;  // same tokens per step everywhere: throughput is 1 / step
}

}  // namespace hzp::explore::search
