// Plan search, bounds: closed-form memory of the sharded model states, one
// layer's measured cost, and the pruning of candidates that cannot fit.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/units.hpp"
#include "explore/search_internal.hpp"

namespace hzp::explore::search {

// The sharded model states alone (a lower bound on the peak), GiB: 2 bytes a
// parameter over g_p, the gradient's bytes over g_g, Adam's 12 over g_o (the
// parameters or Adam's states none on the device when offloaded), the experts
// over their own group sizes.
double memory_lower_bound_GiB(const StageParams& params, const PlanOptions& o, const plan::ShardSizes& sh,
                              const plan::ShardSizes& expert_sh) {
  const double grad_bytes = static_cast<double>(core::dtype_bytes(o.grad_dtype));
  const double optimizer = o.offload_optimizer ? 0.0 : 12.0;  // offloaded: in host memory
  const double param = o.offload_params ? 0.0 : 2.0;
  auto bytes = [&](double n, const plan::ShardSizes& g) {
    return n * (param / g.param + grad_bytes / g.grad + optimizer / g.optim);
  };
  return (bytes(params.dense, sh) + bytes(params.expert, expert_sh)) / (1024.0 * 1024 * 1024);
}

// Adam's kernels on the compute stream (bandwidth-bound: kAdamBytesPerParam
// per owned parameter), largest stage, seconds: serial with the GEMMs.
double adam_seconds(double dense_stage_params, const plan::ShardSizes& sh, const topologies::DeviceProfile& d) {
  return core::transfer_seconds(static_cast<double>(plan::kAdamBytesPerParam) * dense_stage_params / sh.optim,
                                core::Bandwidth::from_GBps(d.hbm_GBps) * d.hbm_efficiency);
}

// One transformer layer per micro-batch, from two- and three-layer models
// under FSDP without a pipeline: its GEMM and attention time, and the
// activations it keeps for backward (the peak's growth less the layer's
// sharded states; from two layers on, both models prefetch one layer's
// parameters). The same for every pipeline depth and sharding.
LayerCost Search::layer_cost(std::size_t setting, const PlanOptions& p) {
  const auto key =
      std::tuple{setting, p.tp, p.ep, p.expert_tp.value_or(0), p.micro_batch, static_cast<int>(p.recompute)};
  auto it = layer_costs_.find(key);
  if (it != layer_costs_.end()) return it->second;
  const Setting& st = settings[setting];
  PlanOptions o = p;
  o.strategy = Strategy::Fsdp;
  o.pp = o.vpp = 1;
  o.pipeline_schedule = plan::PipelineSchedule::OneFOneB;
  o.offload_optimizer = o.offload_activations = o.offload_params = false;
  o.pipeline_layout.reset();
  o.first_stage_layers.reset();
  o.last_stage_layers.reset();
  o.global_batch_tokens.reset();
  o.global_batch_sequences = o.micro_batch * (st.gpus / (o.tp * plan::sequence_split(o)));
  models::ModelSpec two = m, three = m;
  two.layers = 2;
  three.layers = 3;
  if (m.moe) two.moe->dense_layers = three.moe->dense_layers = 0;
  const Target t = target(setting);
  const Estimate e1 = estimate(t.with(two), o), e2 = estimate(t.with(three), o);
  LayerCost lc;
  if (e1.ok && e2.ok) {
    lc.compute_s = std::max(0.0, e2.compute_s - e1.compute_s);
    const int dp = st.gpus / o.tp;
    const LayerParams three_layers(three);
    const StageParams layer{three_layers.dense[2] / o.tp, three_layers.expert[2] / (o.ep * o.expert_tp.value_or(o.tp))};
    const plan::ShardSizes full{dp, dp, dp};
    const double layer_states = memory_lower_bound_GiB(layer, o, full, plan::expert_shard_sizes(o, dp, full));
    lc.activations_GiB = std::max(0.0, e2.reserved_GiB - e1.reserved_GiB - layer_states);
  }
  return layer_costs_.emplace(key, lc).first->second;
}

// Host memory of one rank's offloaded states, GiB: with the optimizer
// offloaded ZeRO-Offload's fp32 states, staging and gradient landing buffer
// over g_o, with the parameters offloaded their bf16 shard over g_p (which
// then takes the CPU's update in place where g_o = g_p: no staging).
double host_states_GiB(const StageParams& p, const PlanOptions& o, const plan::ShardSizes& sh,
                       const plan::ShardSizes& expert_sh) {
  double bytes = 0;
  for (auto [n, g] : {std::pair{p.dense, sh}, {p.expert, expert_sh}}) {
    if (o.offload_optimizer) {
      const bool in_place = o.offload_params && g.optim == g.param;
      const auto per_param = plan::kHostStateBytesPerParam - (in_place ? 2 : 0) + core::dtype_bytes(o.grad_dtype);
      bytes += static_cast<double>(per_param) * n / g.optim;
    }
    if (o.offload_params) bytes += 2.0 * n / g.param;
  }
  return bytes / (1024.0 * 1024 * 1024);
}

namespace {

// The parameters on one rank of each pipeline stage.
using Stages = std::vector<StageParams>;

// The first stage also keeps min(m, p) micro-batches' activations of its
// layers for backward under 1F1B (more when interleaved), one micro-batch
// without a pipeline: with 10 % for the allocator, a bound on its peak.
bool first_stage_fits(Search& s, const Candidate& c, const plan::ShardSizes& sh, const plan::ShardSizes& expert_sh,
                      const Stages& stages) {
  const Setting& st = s.settings[c.setting];
  const std::int64_t micro = plan::split_batch(s.m, st.gpus, c.o).micro_batches;
  const plan::PipelineLayout layout = plan::pipeline_layout(s.m, c.o);
  // ZB-V: stage 0 runs 2p - 1 forwards of its chunk 0 before the first of
  // its chunk 1, so count those of chunk 0 only.
  const bool zbv = plan::traits(c.o.pipeline_schedule).v_shape;
  const std::int64_t in_flight = std::min<std::int64_t>(micro, zbv ? 2 * c.o.pp - 1 : c.o.pp);
  int moe_or_all = 0;  // the first stage's layers of the kind the layer model measured
  for (int ch = 0; ch < (zbv ? 1 : layout.vpp); ++ch) {
    const auto v = static_cast<std::size_t>(layout.virtual_stage(0, ch));
    for (int l = layout.first_layer[v]; l < layout.first_layer[v + 1]; ++l) {
      moe_or_all += !s.m.moe || s.m.is_moe_layer(l) ? 1 : 0;
    }
  }
  // Offloaded activations: the device may hold only those in flight.
  const double activations = c.o.offload_activations ? 0.0
                                                     : 0.9 * static_cast<double>(in_flight) * moe_or_all *
                                                           s.layer_cost(c.setting, c.o).activations_GiB;
  return memory_lower_bound_GiB(stages.front(), c.o, sh, expert_sh) + activations <= st.limit_GiB;
}

// Whether a candidate passes the memory bounds: its sharded model states
// (`states`, GiB, the largest of its stages') on the device, what it
// offloads within the device's share of host memory, and (`activations`) the
// first stage's activations.
bool fits_memory(Search& s, const Candidate& c, const plan::ShardSizes& sh, const Stages& stages, double& states,
                 bool activations) {
  const Setting& st = s.settings[c.setting];
  const plan::ShardSizes expert_sh = plan::expert_shard_sizes(c.o, st.gpus / (c.o.tp * c.o.pp), sh);
  states = 0;
  double host = 0;
  for (const StageParams& p : stages) {
    states = std::max(states, memory_lower_bound_GiB(p, c.o, sh, expert_sh));
    host = std::max(host, host_states_GiB(p, c.o, sh, expert_sh));
  }
  if (states > st.limit_GiB || host > st.cluster.device.host_memory_GiB_per_device) return false;
  return !activations || first_stage_fits(s, c, sh, expert_sh, stages);
}

// The next rung of offload for a candidate that does not fit: the optimizer
// (ZeRO-Offload), then the parameters too (ZeRO-Infinity), then the
// activations too (1F1B only); false when no rung is left.
bool offload_more(PlanOptions& o) {
  if (!o.offload_optimizer) {
    o.offload_optimizer = true;
  } else if (!o.offload_params && !o.overlap_param_gather) {
    o.offload_params = true;
  } else if (!o.offload_activations && o.pipeline_schedule == plan::PipelineSchedule::OneFOneB) {
    o.offload_activations = true;
  } else {
    return false;
  }
  return true;
}

// Which offloads a plan makes, as bits: optimizer 1, parameters 2, activations 4.
int offload_mask(const PlanOptions& o) {
  return (o.offload_optimizer ? 1 : 0) + (o.offload_params ? 2 : 0) + (o.offload_activations ? 4 : 0);
}

// Candidate c with as much offloaded as it takes to pass the memory bounds,
// rung by rung, and then without each earlier rung the fit does not need
// (the activations alone may be what did not fit: each copy over the host
// link costs time); none when even every rung does not fit.
std::optional<Candidate> offloaded(Search& s, const Candidate& c, const plan::ShardSizes& sh, const Stages& stages) {
  Candidate kept = c;
  kept.preset_at_base = false;
  double states = 0;
  bool fits = false;
  while (!fits && offload_more(kept.o)) fits = fits_memory(s, kept, sh, stages, states, true);
  if (!fits) return std::nullopt;
  for (bool PlanOptions::*flag : {&PlanOptions::offload_optimizer, &PlanOptions::offload_params}) {
    if (!(kept.o.*flag) || c.o.*flag) continue;
    kept.o.*flag = false;
    if (!fits_memory(s, kept, sh, stages, states, true)) kept.o.*flag = true;
  }
  return kept;
}

}  // namespace

// The memory lower bound; shards that do not resolve are not candidates.
// Offload where it applies: a candidate that does not fit tries again with
// more offloaded to host memory, rung by rung (offload_more; on a cluster
// that states its host side), then drops each offload the fit does not
// need; each set of offloads makes a group of its own.
void prune_by_memory(Search& s) {
  const LayerParams layer_params(s.m);
  // (pp, tp, ep, expert_tp or 0, layout) -> each stage's parameters
  std::map<std::tuple<int, int, int, int, std::string>, Stages> stage_params;
  std::map<std::pair<std::size_t, int>, std::size_t> offload_groups;  // (group, what is offloaded) -> its twin
  for (auto& c : s.space) {
    const Setting& st = s.settings[c.setting];
    const int dp = st.gpus / (c.o.tp * c.o.pp);
    plan::ShardSizes sh;
    if (!plan::check_shards(c.o, dp, st.cluster, sh).empty()) continue;
    ++s.out.candidates;
    ++s.tally(c.setting).candidates;
    const plan::PipelineLayout layout = plan::pipeline_layout(s.m, c.o);
    const auto stage_key =
        std::tuple{c.o.pp, c.o.tp, c.o.ep, c.o.expert_tp.value_or(0), layout.text() + (layout.v_shape ? " V" : "")};
    auto cached = stage_params.find(stage_key);
    if (cached == stage_params.end()) {
      Stages stages;
      for (int p = 0; p < layout.pp; ++p) stages.push_back(layer_params.stage(layout, p, c.o));
      cached = stage_params.emplace(stage_key, std::move(stages)).first;
    }
    const Stages& stages = cached->second;
    auto admit = [&](const Candidate& kept) {
      double states = 0;
      (void)fits_memory(s, kept, sh, stages, states, false);
      s.alive.push_back(kept);
      // Adam on the compute stream, the dense parameters of the largest stage
      // (a bound); offloaded, Adam runs on the host: nothing on the compute stream.
      double dense = 0;
      for (const StageParams& p : stages) dense = std::max(dense, p.dense);
      s.adam.push_back(kept.o.offload_optimizer ? 0.0 : adam_seconds(dense, sh, st.cluster.device));
      s.states.push_back(states);
    };
    double states = 0;
    const bool fits = fits_memory(s, c, sh, stages, states, true);
    // --exhaustive screens every plan whose states fit, and the offloaded
    // twin of one whose activations do not.
    const bool states_fit = s.q.exhaustive && fits_memory(s, c, sh, stages, states, false);
    const std::optional<Candidate> twin = fits || !st.cluster.host ? std::nullopt : offloaded(s, c, sh, stages);
    if (fits || states_fit) admit(c);
    if (twin) {
      auto [g, added] = offload_groups.try_emplace(std::pair{c.group, offload_mask(twin->o)}, s.groups);
      if (added) ++s.groups;
      Candidate kept = *twin;
      kept.group = g->second;
      admit(kept);
    }
    if (!fits && !states_fit && !twin) {
      ++s.out.pruned_memory;
      ++s.tally(c.setting).memory;
    }
  }
}

}  // namespace hzp::explore::search
