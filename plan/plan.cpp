// Lowering DDP and FSDP to a Schedule.
//
// Both run one rank class (every data-parallel rank runs the same list) with
// one host thread issuing onto a compute stream and a communication stream or
// two, joined by events. Micro-batches run forward over all units, then
// backward in reverse; gradients accumulate over micro-batches.
//
//  DDP   params, fp32 gradients and Adam states replicated; one all-reduce per
//        unit ("bucket") after the last micro-batch's backward of that unit,
//        overlapping the backward of the units before it; then the optimizer.
//  FSDP  ZeRO-3 over the whole data-parallel group: each unit's bf16
//        parameters are all-gathered before its forward and again before its
//        backward (resharded after forward), at most `prefetch_depth` uses
//        ahead; each micro-batch's bf16 gradients are reduce-scattered per
//        unit and accumulated into an fp32 shard; the optimizer updates 1/DP.
#include "plan/plan.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/schedule_check.hpp"
#include "plan/program_builder.hpp"

namespace hzp::plan {

using core::Bytes;
using core::CollectiveKind;
using core::ComputeKind;
using core::Dtype;
using core::Flops;
using core::StreamKind;

std::string_view to_string(Strategy s) {
  switch (s) {
    case Strategy::Ddp: return "ddp";
    case Strategy::Fsdp: return "fsdp";
  }
  return "?";
}

Strategy parse_strategy(const std::string& s) {
  for (Strategy x : all_strategies()) {
    if (s == to_string(x)) return x;
  }
  throw core::InputError("command line", "--strategy", fmt::format("expected ddp|fsdp|all, got '{}'", s));
}

std::vector<Strategy> all_strategies() { return {Strategy::Ddp, Strategy::Fsdp}; }

BatchSplit split_batch(const models::ModelSpec& m, int world, const PlanOptions& o) {
  BatchSplit b;
  b.seq_len = o.seq_len > 0 ? o.seq_len : std::min<std::int64_t>(m.max_seq_len, 8192);
  if (b.seq_len > m.max_seq_len) {
    throw core::InputError(
        "command line", "--seq-len",
        fmt::format("expected at most {} (max_seq_len of {}), got {}", m.max_seq_len, m.name, b.seq_len));
  }
  if (o.global_batch_tokens.has_value() == o.global_batch_sequences.has_value()) {
    throw core::InputError("command line", "--global-batch-tokens",
                           "expected exactly one of --global-batch-tokens and --global-batch-seqs");
  }
  if (o.micro_batch < 1)
    throw core::InputError("command line", "--micro-batch", "expected a positive number of sequences");
  std::string key = o.global_batch_tokens ? "--global-batch-tokens" : "--global-batch-seqs";
  if (o.global_batch_tokens) {
    if (*o.global_batch_tokens <= 0 || *o.global_batch_tokens % b.seq_len != 0) {
      throw core::InputError("command line", key,
                             fmt::format("expected a positive multiple of the sequence length {}, got {}", b.seq_len,
                                         *o.global_batch_tokens));
    }
    b.sequences = *o.global_batch_tokens / b.seq_len;
  } else {
    b.sequences = *o.global_batch_sequences;
    if (b.sequences <= 0) throw core::InputError("command line", key, "expected a positive number of sequences");
  }
  b.data_parallel = world;
  const std::int64_t per_step = static_cast<std::int64_t>(b.data_parallel) * o.micro_batch;
  if (b.sequences % per_step != 0) {
    throw core::InputError("command line", key,
                           fmt::format("{} sequences do not split over {} data-parallel ranks x micro-batch {}: "
                                       "expected a multiple of {} sequences",
                                       b.sequences, b.data_parallel, o.micro_batch, per_step));
  }
  b.micro_batches = b.sequences / per_step;
  return b;
}

namespace {

struct Context {
  const models::StepGraph& graph;
  const BatchSplit& batch;
  const PlanOptions& opt;
  int dp_group = 0;
  int dp = 1;
  Dtype dtype = Dtype::Bf16;
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

std::string act_buffer(std::size_t unit, std::int64_t mb) { return fmt::format("act.u{}.mb{}", unit, mb); }

// A unit's backward; recomputed activations live only while it runs.
void backward_ops(ProgramBuilder& b, int stream, const models::Unit& unit, const std::string& buffer, Dtype dtype) {
  if (unit.recomputed.count() > 0) b.alloc(stream, buffer, unit.recomputed);
  for (const auto& op : unit.backward) b.compute(stream, op, dtype);
  if (unit.recomputed.count() > 0) b.free(stream, buffer, unit.recomputed);
}

void optimizer_step(ProgramBuilder& b, int stream, std::int64_t params, const std::string& what) {
  // Adam: ~12 FLOPs per parameter, bandwidth-bound at kAdamBytesPerParam.
  b.compute(stream, "optimizer.adam" + what, ComputeKind::Optimizer, Flops(12.0 * static_cast<double>(params)),
            Bytes(kAdamBytesPerParam * params), Dtype::Fp32);
}

core::Program lower_ddp(const Context& c, const topologies::Topology& topo) {
  const auto& units = c.graph.units;
  std::vector<int> ranks(static_cast<std::size_t>(topo.devices()));
  for (int r = 0; r < topo.devices(); ++r) ranks[static_cast<std::size_t>(r)] = r;
  ProgramBuilder b(0, "dp", ranks);
  int main = b.add_thread("main", core::Duration::us(topo.spec().device.launch_latency_us));
  int comp = b.add_stream("compute", StreamKind::Compute, main);
  int grad = b.add_stream("grad_allreduce", StreamKind::GradReduce, main);

  std::int64_t params = 0;
  for (const auto& u : units) params += u.params;
  const std::int64_t gbytes = core::dtype_bytes(c.opt.grad_dtype);
  b.alloc(comp, "params", Bytes(2 * params));
  b.alloc(comp, "grads", Bytes(gbytes * params));
  b.alloc(comp, "optimizer_states", Bytes(kOptimizerStateBytesPerParam * params));

  int last_event = -1;
  for (std::int64_t mb = 0; mb < c.batch.micro_batches; ++mb) {
    const bool last = mb + 1 == c.batch.micro_batches;
    for (std::size_t u = 0; u < units.size(); ++u) {
      b.alloc(comp, act_buffer(u, mb), units[u].activations);
      for (const auto& op : units[u].forward) b.compute(comp, op, c.dtype);
    }
    for (std::size_t i = units.size(); i-- > 0;) {
      backward_ops(b, comp, units[i], fmt::format("recomputed.u{}.mb{}", i, mb), c.dtype);
      b.free(comp, act_buffer(i, mb), units[i].activations);
      if (last && units[i].params > 0) {
        int ev = b.record(comp, fmt::format("{}.grads_ready", units[i].name));
        b.wait(grad, ev, fmt::format("wait {}.grads_ready", units[i].name));
        b.collective(grad, units[i].name + ".grad_allreduce", CollectiveKind::AllReduce, c.dp_group,
                     Bytes(gbytes * units[i].params), c.opt.grad_dtype);
      }
    }
  }
  last_event = b.record(grad, "grads_reduced");
  b.wait(comp, last_event, "wait grads_reduced");
  optimizer_step(b, comp, params, "");
  b.compute(comp, "zero_grads", ComputeKind::Elementwise, Flops(0), Bytes(gbytes * params), c.opt.grad_dtype);
  return b.take();
}

core::Program lower_fsdp(const Context& c, const topologies::Topology& topo) {
  const auto& units = c.graph.units;
  const std::int64_t D = c.dp;
  std::vector<int> ranks(static_cast<std::size_t>(topo.devices()));
  for (int r = 0; r < topo.devices(); ++r) ranks[static_cast<std::size_t>(r)] = r;
  ProgramBuilder b(0, "dp", ranks);
  int main = b.add_thread("main", core::Duration::us(topo.spec().device.launch_latency_us));
  int comp = b.add_stream("compute", StreamKind::Compute, main);
  int ag = b.add_stream("param_allgather", StreamKind::ParamGather, main);
  int rs = b.add_stream("grad_reducescatter", StreamKind::GradReduce, main);

  // Each unit is flattened and padded to a multiple of DP; rank r keeps 1/DP.
  std::vector<std::int64_t> shard(units.size());
  std::int64_t shard_total = 0;
  for (std::size_t u = 0; u < units.size(); ++u) {
    shard[u] = ceil_div(units[u].weight_params, D);
    // A tied head gathers the embedding table but owns none of it.
    if (units[u].params > 0) shard_total += shard[u];
  }
  const std::int64_t gbytes = core::dtype_bytes(c.opt.grad_dtype);
  b.alloc(comp, "param_shard", Bytes(2 * shard_total));
  b.alloc(comp, "grad_shard", Bytes(gbytes * shard_total));
  b.alloc(comp, "optimizer_shard", Bytes(kOptimizerStateBytesPerParam * shard_total));

  // Every use of gathered parameters, in the order compute consumes them.
  struct Use {
    std::size_t unit;
    std::int64_t mb;
    bool backward;
  };
  std::vector<Use> uses;
  for (std::int64_t mb = 0; mb < c.batch.micro_batches; ++mb) {
    for (std::size_t u = 0; u < units.size(); ++u) uses.push_back({u, mb, false});
    for (std::size_t u = units.size(); u-- > 0;) uses.push_back({u, mb, true});
  }
  auto gathered = [&](std::size_t j) { return fmt::format("gathered.{}", j); };
  auto gathered_bytes = [&](std::size_t u) { return Bytes(2 * shard[u] * D); };

  std::vector<int> ag_done(uses.size(), -1), use_done(uses.size(), -1);
  const std::size_t depth = static_cast<std::size_t>(c.opt.prefetch_depth);
  std::size_t issued = 0;  // all-gathers issued so far
  auto issue_gather = [&](std::size_t j) {
    const Use& use = uses[j];
    const auto& unit = units[use.unit];
    // Rate limit: at most depth + 1 gathered buffers live.
    if (j >= depth + 1) b.wait(ag, use_done[j - depth - 1], fmt::format("wait slot for {}", unit.name));
    b.alloc(ag, gathered(j), gathered_bytes(use.unit));
    b.collective(ag, fmt::format("{}.allgather.{}", unit.name, use.backward ? "bwd" : "fwd"), CollectiveKind::AllGather,
                 c.dp_group, gathered_bytes(use.unit), Dtype::Bf16);
    ag_done[j] = b.record(ag, fmt::format("{}.gathered", unit.name));
  };

  int last_rs = -1;
  for (std::size_t j = 0; j < uses.size(); ++j) {
    // Prefetch: issue the gathers of the next `depth` uses before this one's compute.
    while (issued < uses.size() && issued <= j + depth && (issued < depth + 1 || use_done[issued - depth - 1] >= 0)) {
      issue_gather(issued++);
    }
    const Use& use = uses[j];
    const auto& unit = units[use.unit];
    b.wait(comp, ag_done[j], fmt::format("wait {}.gathered", unit.name));
    if (!use.backward) {
      b.alloc(comp, act_buffer(use.unit, use.mb), unit.activations);
      for (const auto& op : unit.forward) b.compute(comp, op, c.dtype);
      use_done[j] = b.record(comp, fmt::format("{}.fwd_done", unit.name));
      b.free(comp, gathered(j), gathered_bytes(use.unit));
      continue;
    }
    const Bytes grad_full = gathered_bytes(use.unit);
    const std::string gbuf = fmt::format("grad.u{}.mb{}", use.unit, use.mb);
    b.alloc(comp, gbuf, grad_full);
    backward_ops(b, comp, unit, fmt::format("recomputed.u{}.mb{}", use.unit, use.mb), c.dtype);
    use_done[j] = b.record(comp, fmt::format("{}.bwd_done", unit.name));
    b.free(comp, gathered(j), gathered_bytes(use.unit));
    b.free(comp, act_buffer(use.unit, use.mb), unit.activations);
    // Reduce-scatter this micro-batch's gradients and accumulate the shard.
    b.wait(rs, use_done[j], fmt::format("wait {}.bwd_done", unit.name));
    b.collective(rs, unit.name + ".grad_reducescatter", CollectiveKind::ReduceScatter, c.dp_group, grad_full,
                 Dtype::Bf16);
    b.compute(rs, unit.name + ".grad_accumulate", ComputeKind::Elementwise, Flops(static_cast<double>(shard[use.unit])),
              Bytes((2 + 2 * gbytes) * shard[use.unit]), c.opt.grad_dtype);
    b.free(rs, gbuf, grad_full);
  }
  last_rs = b.record(rs, "grads_reduced");
  b.wait(comp, last_rs, "wait grads_reduced");
  optimizer_step(b, comp, shard_total, ".shard");
  b.compute(comp, "zero_grads", ComputeKind::Elementwise, Flops(0), Bytes(gbytes * shard_total), c.opt.grad_dtype);
  return b.take();
}

}  // namespace

core::Schedule lower(const models::ModelSpec& m, const topologies::Topology& topo, const PlanOptions& o) {
  if (o.prefetch_depth < 0 || o.prefetch_depth > 64) {
    throw core::InputError("command line", "--prefetch-depth", fmt::format("expected 0..64, got {}", o.prefetch_depth));
  }
  BatchSplit batch = split_batch(m, topo.devices(), o);
  models::GraphOptions go;
  go.seq_len = batch.seq_len;
  go.micro_batch = o.micro_batch;
  go.recompute = o.recompute;
  go.flash_attention = o.flash_attention;
  models::StepGraph graph = models::build_step_graph(m, go);

  core::Schedule s;
  s.name = fmt::format("{}/{}x{}/{}", m.name, topo.spec().name, topo.devices(), to_string(o.strategy));
  s.step.model = m.name;
  s.step.cluster = topo.spec().name;
  s.step.strategy = std::string(to_string(o.strategy));
  s.step.world_size = topo.devices();
  s.step.seq_len = batch.seq_len;
  s.step.global_batch_sequences = batch.sequences;
  s.step.micro_batches = batch.micro_batches;
  s.step.model_flops = models::model_flops_per_sequence(m, batch.seq_len) * static_cast<double>(batch.sequences);

  core::Group dp;
  dp.id = 0;
  dp.kind = o.strategy == Strategy::Fsdp ? core::GroupKind::DpShard : core::GroupKind::DpReplica;
  for (int r = 0; r < topo.devices(); ++r) dp.ranks.push_back(r);
  s.groups.push_back(dp);

  Context c{graph, batch, o, 0, topo.devices(), Dtype::Bf16};
  s.programs.push_back(o.strategy == Strategy::Fsdp ? lower_fsdp(c, topo) : lower_ddp(c, topo));

  nlohmann::json prov{{"plan",
                       {{"strategy", to_string(o.strategy)},
                        {"seq_len", batch.seq_len},
                        {"global_batch_sequences", batch.sequences},
                        {"micro_batch", o.micro_batch},
                        {"micro_batches", batch.micro_batches},
                        {"data_parallel", batch.data_parallel},
                        {"recompute", o.recompute == models::Recompute::None        ? "none"
                                      : o.recompute == models::Recompute::Selective ? "selective"
                                                                                    : "full"},
                        {"flash_attention", o.flash_attention},
                        {"prefetch_depth", o.prefetch_depth},
                        {"grad_dtype", core::to_string(o.grad_dtype)}}},
                      {"model", m.name},
                      {"cluster", topo.spec().name},
                      {"gpus", topo.devices()}};
  s.provenance_json = prov.dump();
  core::check_schedule(s);
  return s;
}

}  // namespace hzp::plan
