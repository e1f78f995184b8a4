// Plan search, bounds: closed-form memory of the sharded model states, one
// layer's measured cost, and the pruning of candidates that cannot fit.
#include <fmt/format.h>

#include <algorithm>

#include "core/units.hpp"
#include "explore/search_internal.hpp"

namespace hzp::explore::search {

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

// One transformer layer per micro-batch, from two- and three-layer models
// under FSDP without a pipeline: its GEMM and attention time, and the
// activations it keeps for backward (the peak's growth less the layer's
// sharded states; from two layers on, both models prefetch one layer's
// parameters). The same for every pipeline depth and sharding.
LayerCost Search::layer_cost(std::size_t setting, const PlanOptions& p) {
  const auto key = std::tuple{setting, p.tp, p.ep, p.micro_batch, static_cast<int>(p.recompute)};
  auto it = layer_costs_.find(key);
  if (it != layer_costs_.end()) return it->second;
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
  return layer_costs_.emplace(key, lc).first->second;
}

namespace {

// The first stage also keeps min(m, p) micro-batches' activations of its
// layers for backward under 1F1B (more when interleaved), one micro-batch
// without a pipeline: with 10 % for the allocator, a bound on its peak.
bool first_stage_fits(Search& s, const Candidate& c, const plan::ShardSizes& sh, const LayerParams& layer_params) {
  const Setting& st = s.settings[c.setting];
  const std::int64_t micro = plan::split_batch(s.m, st.gpus, c.o).micro_batches;
  const plan::PipelineLayout layout = plan::pipeline_layout(s.m, c.o);
  int moe_or_all = 0;  // the first stage's layers of the kind the layer model measured
  for (int ch = 0; ch < layout.vpp; ++ch) {
    const auto v = static_cast<std::size_t>(ch * layout.pp);
    for (int l = layout.first_layer[v]; l < layout.first_layer[v + 1]; ++l) {
      moe_or_all += !s.m.moe || s.m.is_moe_layer(l) ? 1 : 0;
    }
  }
  const double activations = 0.9 * static_cast<double>(std::min<std::int64_t>(micro, c.o.pp)) * moe_or_all *
                             s.layer_cost(c.setting, c.o).activations_GiB;
  return memory_lower_bound_GiB(layer_params.first_stage(layout, c.o), c.o, sh) + activations <= st.limit_GiB;
}

}  // namespace

// The memory lower bound; shards that do not resolve are not candidates.
void prune_by_memory(Search& s) {
  const LayerParams layer_params(s.m);
  // (pp, tp, ep, layout) -> (all, dense)
  std::map<std::tuple<int, int, int, std::string>, std::pair<double, double>> stage_params;
  for (auto& c : s.space) {
    const Setting& st = s.settings[c.setting];
    const int dp = st.gpus / (c.o.tp * c.o.pp);
    plan::ShardSizes sh;
    if (!plan::check_shards(c.o, dp, st.cluster, sh).empty()) continue;
    ++s.out.candidates;
    const plan::PipelineLayout layout = plan::pipeline_layout(s.m, c.o);
    const auto stage_key = std::tuple{c.o.pp, c.o.tp, c.o.ep, layout.text()};
    auto cached = stage_params.find(stage_key);
    if (cached == stage_params.end()) {
      cached = stage_params
                   .emplace(stage_key, std::pair{layer_params.largest_stage(layout, c.o, true),
                                                 layer_params.largest_stage(layout, c.o, false)})
                   .first;
    }
    if (memory_lower_bound_GiB(cached->second.first, c.o, sh) > st.limit_GiB ||
        (!s.q.exhaustive && !first_stage_fits(s, c, sh, layer_params))) {
      ++s.out.pruned_memory;
      continue;
    }
    s.alive.push_back(c);
    s.adam.push_back(adam_seconds(cached->second.second, sh, st.cluster.device));
    s.states.push_back(memory_lower_bound_GiB(cached->second.first, c.o, sh));
  }
}

}  // namespace hzp::explore::search
