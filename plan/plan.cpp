// Lowering data-parallel plans to a Schedule: every strategy is one
// hierarchical ZeRO plan (g_p, g_g, g_o), generated — never hand-written.
//
// One rank class (every data-parallel rank runs the same list). Per
// micro-batch: units run forward in order, then backward in reverse.
//  - g_p > 1: each unit's bf16 parameters are all-gathered inside its g_p
//    group before forward and again before backward (unless kept gathered),
//    at most prefetch_depth uses ahead of compute, and freed after use.
//  - g_g > 1: after each unit's backward its bf16 gradients are
//    reduce-scattered inside the g_g group and accumulated into a 1/g_g shard
//    (accumulation dtype an option); g_g = 1 accumulates locally (fused into
//    the weight-gradient GEMMs, as Megatron's gradient-accumulation fusion).
//  - after the last micro-batch, per unit as soon as its gradients are final:
//    reduce-scatter 1/g_g -> 1/g_o over the g_o/g_g ranks holding the same
//    1/g_g shard (stride g_g), all-reduce across the DP/g_o optimizer replicas
//    (stride g_o), Adam on the 1/g_o shard, all-gather 1/g_o -> 1/g_p over the
//    g_o/g_p ranks holding pieces of the same 1/g_p shard (stride g_p).
// Groups are contiguous rank blocks (strided sets inside them), so with ranks
// numbered node by node the smallest groups fill scale-up domains first and
// strided groups run along rails.
//
// async on: a "param" thread issues the all-gathers and a "grad" thread the
// reduce-scatters, each onto its own stream; the compute thread only waits on
// events; gathered and gradient buffers come from pools of prefetch_depth + 1
// slots allocated at start. async off: the compute thread issues everything
// inline and blocks (host sync) until a buffer's last user has finished before
// reusing it; buffers come from the caching allocator (alloc/free per use).
#include "plan/plan.hpp"

#include <fmt/format.h>
#include <algorithm>
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

struct Unit {
  const models::Unit* u;
  std::int64_t padded;  // weight parameters padded to a multiple of g_o
  std::int64_t owned;   // owned parameters padded likewise (0 for a tied head)
};

struct GroupIds {
  int param = -1, grad = -1, optim = -1, replica = -1, regather = -1;
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Adds the groups of one kind over ranks 0..n-1: blocks of `block` ranks,
// split into `block / stride` groups of ranks `stride` apart. Returns the id
// of the group holding rank 0, or -1 when the groups would have one rank.
int add_groups(core::Schedule& s, core::GroupKind kind, int n, int block, int stride) {
  if (block / stride <= 1) return -1;
  int first = static_cast<int>(s.groups.size());
  for (int b = 0; b < n; b += block) {
    for (int off = 0; off < stride; ++off) {
      core::Group g;
      g.id = static_cast<int>(s.groups.size());
      g.kind = kind;
      for (int r = b + off; r < b + block; r += stride) g.ranks.push_back(r);
      s.groups.push_back(std::move(g));
    }
  }
  return first;
}

// A unit's backward; recomputed activations live only while it runs.
void backward_ops(ProgramBuilder& b, int stream, const models::Unit& unit, const std::string& buffer, Dtype dtype,
                  bool track) {
  if (track && unit.recomputed.count() > 0) b.alloc(stream, buffer, unit.recomputed);
  for (const auto& op : unit.backward) b.compute(stream, op, dtype);
  if (track && unit.recomputed.count() > 0) b.free(stream, buffer, unit.recomputed);
}

class Lowering {
 public:
  Lowering(const models::StepGraph& graph, const BatchSplit& batch, const PlanOptions& opt, ShardSizes shards,
           bool async, GroupIds groups, const topologies::Topology& topo)
      : batch_(batch),
        opt_(opt),
        sh_(shards),
        async_(async),
        groups_(groups),
        topo_(topo),
        b_(0, "dp", all_ranks(topo.devices())) {
    for (const auto& u : graph.units) {
      std::int64_t o = shards.optim;
      units_.push_back(Unit{&u, ceil_div(u.weight_params, o) * o, ceil_div(u.params, o) * o});
    }
    acc_ = core::dtype_bytes(opt.grad_dtype);
  }

  core::Program run() {
    setup();
    for (std::size_t j = 0; j < uses_.size(); ++j) {
      prefetch_through(j);
      if (uses_[j].backward) {
        backward(j);
      } else {
        forward(j);
      }
    }
    step_end();
    return b_.take();
  }

 private:
  struct Use {
    std::size_t unit;
    std::int64_t mb;
    bool backward;
    bool gathers;  // this use all-gathers parameters (else it has them)
  };

  static std::vector<int> all_ranks(int n) {
    std::vector<int> v(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) v[static_cast<std::size_t>(r)] = r;
    return v;
  }
  bool gathers() const { return sh_.param > 1; }
  // Gathered buffers come from the pool when async and each is freed before
  // the next use of its slot (reshard after forward); otherwise they are
  // allocated per use.
  bool pooled() const { return async_ && opt_.reshard_after_forward; }
  bool reduces_per_micro_batch() const { return sh_.grad > 1; }
  Bytes gathered_bytes(std::size_t u) const { return Bytes(2 * units_[u].padded); }
  Bytes full_grad_bytes(std::size_t u) const { return Bytes(2 * units_[u].padded); }
  std::string buf(const char* what, std::size_t j) const { return fmt::format("{}.{}", what, j); }

  void setup() {
    const core::Duration launch = core::Duration::us(topo_.spec().device.launch_latency_us);
    main_ = b_.add_thread("main", launch);
    int param_thread = async_ ? b_.add_thread("param", launch) : main_;
    int grad_thread = async_ ? b_.add_thread("grad", launch) : main_;
    comp_ = b_.add_stream("compute", StreamKind::Compute, main_);
    ag_ = b_.add_stream("param_allgather", StreamKind::ParamGather, param_thread);
    rs_ = b_.add_stream("grad_reduce", StreamKind::GradReduce, grad_thread);

    // Model state, per rank: bf16 parameters over g_p, accumulated gradients
    // over g_g, fp32 master weights and Adam moments over g_o.
    std::int64_t owned = 0;
    for (const auto& u : units_) owned += u.owned;
    b_.alloc(comp_, "params", Bytes(2 * owned / sh_.param));
    b_.alloc(comp_, "grads", Bytes(acc_ * owned / sh_.grad));
    b_.alloc(comp_, "optimizer_states", Bytes(kOptimizerStateBytesPerParam * owned / sh_.optim));
    if (async_) {
      // Pools of prefetch_depth + 1 slots sized for the largest unit: allocated
      // once, so per-use buffers never fragment the heap.
      const auto slots = static_cast<std::int64_t>(opt_.prefetch_depth) + 1;
      Bytes largest{};
      for (std::size_t u = 0; u < units_.size(); ++u) largest = std::max(largest, gathered_bytes(u));
      if (gathers() && pooled()) b_.alloc(comp_, "pool.gathered", Bytes(slots * largest.count()));
      if (reduces_per_micro_batch()) b_.alloc(comp_, "pool.grad", Bytes(slots * largest.count()));
    }

    for (std::int64_t mb = 0; mb < batch_.micro_batches; ++mb) {
      for (std::size_t u = 0; u < units_.size(); ++u) uses_.push_back({u, mb, false, gathers()});
      for (std::size_t u = units_.size(); u-- > 0;) {
        uses_.push_back({u, mb, true, gathers() && opt_.reshard_after_forward});
      }
    }
    for (std::size_t j = 0; j < uses_.size(); ++j) {
      if (uses_[j].gathers) gather_uses_.push_back(j);
      if (uses_[j].backward) bwd_uses_.push_back(j);
    }
    ag_done_.assign(uses_.size(), -1);
    use_done_.assign(uses_.size(), -1);
    rs_done_.assign(uses_.size(), -1);
    forward_gather_.assign(units_.size() * static_cast<std::size_t>(batch_.micro_batches), -1);
  }

  // Issues all-gathers ahead of compute: those of the next prefetch_depth
  // gathering uses after use j.
  void prefetch_through(std::size_t j) {
    const std::size_t depth = static_cast<std::size_t>(opt_.prefetch_depth);
    while (next_gather_ < gather_uses_.size()) {
      std::size_t g = next_gather_;
      std::size_t use = gather_uses_[g];
      // Gathers up to depth gathering uses beyond the current one.
      std::size_t current = static_cast<std::size_t>(std::lower_bound(gather_uses_.begin(), gather_uses_.end(), j) -
                                                     gather_uses_.begin());
      if (g > current + depth) break;
      issue_gather(g, use);
      ++next_gather_;
    }
  }

  void issue_gather(std::size_t g, std::size_t j) {
    const Use& use = uses_[j];
    const auto& unit = *units_[use.unit].u;
    const std::size_t depth = static_cast<std::size_t>(opt_.prefetch_depth);
    // The slot this gather reuses was last used by gathering use g - depth - 1.
    if (g >= depth + 1) {
      int freed = use_done_[gather_uses_[g - depth - 1]];
      if (async_) {
        b_.wait(ag_, freed, fmt::format("wait slot for {}", unit.name));
      } else {
        b_.sync(ag_, freed, fmt::format("host waits slot for {}", unit.name));
      }
    }
    if (!pooled()) b_.alloc(ag_, buf("gathered", j), gathered_bytes(use.unit));
    b_.collective(ag_, fmt::format("{}.allgather.{}", unit.name, use.backward ? "bwd" : "fwd"),
                  CollectiveKind::AllGather, groups_.param, gathered_bytes(use.unit), Dtype::Bf16);
    ag_done_[j] = b_.record(ag_, fmt::format("{}.gathered", unit.name));
    if (!use.backward) forward_gather_[slot(use)] = static_cast<int>(j);
  }

  std::size_t slot(const Use& use) const { return static_cast<std::size_t>(use.mb) * units_.size() + use.unit; }

  // The use whose gathered buffer this use computes with.
  std::size_t gathered_by(std::size_t j) const {
    const Use& use = uses_[j];
    if (use.gathers) return j;
    return static_cast<std::size_t>(forward_gather_[slot(use)]);
  }

  void forward(std::size_t j) {
    const Use& use = uses_[j];
    const auto& unit = *units_[use.unit].u;
    if (gathers()) b_.wait(comp_, ag_done_[j], fmt::format("wait {}.gathered", unit.name));
    b_.alloc(comp_, fmt::format("act.u{}.mb{}", use.unit, use.mb), unit.activations);
    for (const auto& op : unit.forward) b_.compute(comp_, op, Dtype::Bf16);
    use_done_[j] = b_.record(comp_, fmt::format("{}.fwd_done", unit.name));
    if (gathers() && opt_.reshard_after_forward && !pooled())
      b_.free(comp_, buf("gathered", j), gathered_bytes(use.unit));
  }

  void backward(std::size_t j) {
    const Use& use = uses_[j];
    const auto& unit = *units_[use.unit].u;
    const bool last_mb = use.mb + 1 == batch_.micro_batches;
    if (gathers()) b_.wait(comp_, ag_done_[gathered_by(j)], fmt::format("wait {}.gathered", unit.name));
    if (reduces_per_micro_batch()) {
      // The full-gradient buffer: a pool slot (free once the reduce-scatter
      // that used it depth + 1 backward uses ago is done) or a fresh allocation.
      std::size_t k = bwd_index_++;
      const std::size_t depth = static_cast<std::size_t>(opt_.prefetch_depth);
      if (async_) {
        if (k >= depth + 1) b_.wait(comp_, rs_done_[bwd_uses_[k - depth - 1]], "wait grad slot");
      } else {
        b_.alloc(comp_, buf("grad", j), full_grad_bytes(use.unit));
      }
    }
    backward_ops(b_, comp_, unit, fmt::format("recomputed.u{}.mb{}", use.unit, use.mb), Dtype::Bf16, true);
    use_done_[j] = b_.record(comp_, fmt::format("{}.bwd_done", unit.name));
    if (gathers() && !pooled()) {
      std::size_t g = gathered_by(j);
      b_.free(comp_, buf("gathered", g), gathered_bytes(use.unit));
    }
    b_.free(comp_, fmt::format("act.u{}.mb{}", use.unit, use.mb), unit.activations);

    if (reduces_per_micro_batch()) {
      b_.wait(rs_, use_done_[j], fmt::format("wait {}.bwd_done", unit.name));
      b_.collective(rs_, unit.name + ".grad_reducescatter", CollectiveKind::ReduceScatter, groups_.grad,
                    full_grad_bytes(use.unit), Dtype::Bf16);
      const std::int64_t shard = units_[use.unit].padded / sh_.grad;
      b_.compute(rs_, unit.name + ".grad_accumulate", ComputeKind::Elementwise, Flops(static_cast<double>(shard)),
                 Bytes((2 + 2 * acc_) * shard), opt_.grad_dtype);
      rs_done_[j] = b_.record(rs_, fmt::format("{}.grad_reduced", unit.name));
      if (!async_) b_.free(rs_, buf("grad", j), full_grad_bytes(use.unit));
    } else if (last_mb && needs_step_reduction()) {
      b_.wait(rs_, use_done_[j], fmt::format("wait {}.bwd_done", unit.name));
    }
    if (last_mb) reduce_for_optimizer(use.unit);
  }

  bool needs_step_reduction() const { return sh_.optim / sh_.grad > 1 || batch_.data_parallel / sh_.optim > 1; }

  // Once the unit's gradients are final: 1/g_g -> 1/g_o, then across replicas.
  void reduce_for_optimizer(std::size_t u) {
    const auto& unit = *units_[u].u;
    if (units_[u].owned == 0) return;
    if (sh_.optim / sh_.grad > 1) {
      b_.collective(rs_, unit.name + ".grad_reducescatter.optim", CollectiveKind::ReduceScatter, groups_.optim,
                    Bytes(acc_ * units_[u].padded / sh_.grad), opt_.grad_dtype);
    }
    if (batch_.data_parallel / sh_.optim > 1) {
      b_.collective(rs_, unit.name + ".grad_allreduce", CollectiveKind::AllReduce, groups_.replica,
                    Bytes(acc_ * units_[u].padded / sh_.optim), opt_.grad_dtype);
    }
    reduced_.emplace_back(u, needs_step_reduction() || reduces_per_micro_batch()
                                 ? b_.record(rs_, fmt::format("{}.grads_final", unit.name))
                                 : -1);
  }

  void step_end() {
    // Adam per unit on the compute stream as each unit's reduction lands
    // (units arrive in backward order), then the regather of its parameters.
    for (auto [u, ev] : reduced_) {
      const auto& unit = *units_[u].u;
      if (ev >= 0) b_.wait(comp_, ev, fmt::format("wait {}.grads_final", unit.name));
      const std::int64_t shard = units_[u].owned / sh_.optim;
      b_.compute(comp_, unit.name + ".adam", ComputeKind::Optimizer, Flops(12.0 * static_cast<double>(shard)),
                 Bytes(kAdamBytesPerParam * shard), Dtype::Fp32);
      if (sh_.optim / sh_.param > 1) {
        int done = b_.record(comp_, fmt::format("{}.updated", unit.name));
        b_.wait(ag_, done, fmt::format("wait {}.updated", unit.name));
        b_.collective(ag_, unit.name + ".param_allgather.optim", CollectiveKind::AllGather, groups_.regather,
                      Bytes(2 * units_[u].owned / sh_.param), Dtype::Bf16);
      }
    }
    std::int64_t owned = 0;
    for (const auto& u : units_) owned += u.owned;
    b_.compute(comp_, "zero_grads", ComputeKind::Elementwise, Flops(0), Bytes(acc_ * owned / sh_.grad),
               opt_.grad_dtype);
  }

  const BatchSplit& batch_;
  const PlanOptions& opt_;
  ShardSizes sh_;
  bool async_;
  GroupIds groups_;
  const topologies::Topology& topo_;
  ProgramBuilder b_;
  std::vector<Unit> units_;
  std::int64_t acc_ = 4;
  int main_ = 0, comp_ = 0, ag_ = 0, rs_ = 0;
  std::vector<Use> uses_;
  std::vector<std::size_t> gather_uses_, bwd_uses_;
  std::vector<int> ag_done_, use_done_, rs_done_, forward_gather_;
  std::size_t next_gather_ = 0, bwd_index_ = 0;
  std::vector<std::pair<std::size_t, int>> reduced_;
};

std::string recompute_name(models::Recompute r) {
  return r == models::Recompute::None ? "none" : r == models::Recompute::Selective ? "selective" : "full";
}

}  // namespace

std::string_view to_string(Strategy s) {
  switch (s) {
    case Strategy::Ddp: return "ddp";
    case Strategy::Zero1: return "zero1";
    case Strategy::Zero2: return "zero2";
    case Strategy::Fsdp: return "fsdp";
    case Strategy::Hsdp: return "hsdp";
    case Strategy::Hpz: return "hpz";
    case Strategy::Hzp: return "hzp";
  }
  return "?";
}

Strategy parse_strategy(const std::string& s) {
  if (s == "zero3") return Strategy::Fsdp;
  for (Strategy x : all_strategies()) {
    if (s == to_string(x)) return x;
  }
  throw core::InputError("command line", "--strategy",
                         fmt::format("expected ddp|zero1|zero2|zero3|fsdp|hsdp|hpz|hzp|all, got '{}'", s));
}

std::vector<Strategy> all_strategies() {
  return {Strategy::Ddp,  Strategy::Zero1, Strategy::Zero2, Strategy::Fsdp,
          Strategy::Hsdp, Strategy::Hpz,   Strategy::Hzp};
}

bool resolve_async(const PlanOptions& o) { return o.async.value_or(o.strategy == Strategy::Hzp); }

ShardSizes resolve_shards(const PlanOptions& o, int dp, const topologies::ClusterSpec& c) {
  const int node = std::min(c.devices_per_node, dp);
  const int domain = std::min(c.scale_up.domain_devices, dp);
  ShardSizes s;
  switch (o.strategy) {
    case Strategy::Ddp: s = {1, 1, 1}; break;
    case Strategy::Zero1: s = {1, 1, dp}; break;
    case Strategy::Zero2: s = {1, dp, dp}; break;
    case Strategy::Fsdp: s = {dp, dp, dp}; break;
    case Strategy::Hsdp: {
      int S = o.param_shard > 0 ? o.param_shard : node;
      s = {S, S, S};
      break;
    }
    case Strategy::Hpz: s = {node, dp, dp}; break;
    case Strategy::Hzp:
      s = {o.param_shard > 0 ? o.param_shard : domain, o.grad_shard > 0 ? o.grad_shard : node,
           o.optim_shard > 0 ? o.optim_shard : dp};
      break;
  }
  if (o.strategy != Strategy::Hzp && o.strategy != Strategy::Hsdp && (o.param_shard || o.grad_shard || o.optim_shard)) {
    throw core::InputError(
        "command line", "--param-shard",
        fmt::format("expected no group sizes for the {} preset (use --strategy hzp)", to_string(o.strategy)));
  }
  if (o.strategy == Strategy::Hsdp && (o.grad_shard || o.optim_shard)) {
    throw core::InputError("command line", "--grad-shard", "expected only --param-shard (the shard size S) for hsdp");
  }
  auto check = [&](const char* key, int v, int of, const char* what) {
    if (v < 1 || of % v != 0) {
      throw core::InputError("command line", key, fmt::format("expected a divisor of {} ({}), got {}", what, of, v));
    }
  };
  check("--optim-shard", s.optim, dp, "the data-parallel size");
  check("--param-shard", s.param, s.optim, "the optimizer shard group g_o");
  check("--grad-shard", s.grad, s.optim, "the optimizer shard group g_o");
  return s;
}

core::Schedule lower(const models::ModelSpec& m, const topologies::Topology& topo, const PlanOptions& o) {
  if (o.prefetch_depth < 0 || o.prefetch_depth > 64) {
    throw core::InputError("command line", "--prefetch-depth", fmt::format("expected 0..64, got {}", o.prefetch_depth));
  }
  BatchSplit batch = split_batch(m, topo.devices(), o);
  const ShardSizes sh = resolve_shards(o, batch.data_parallel, topo.spec());
  const bool async = resolve_async(o);
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

  const int dp = batch.data_parallel;
  GroupIds g;
  g.param = add_groups(s, core::GroupKind::DpShard, dp, sh.param, 1);
  g.grad = add_groups(s, core::GroupKind::DpGrad, dp, sh.grad, 1);
  g.optim = add_groups(s, core::GroupKind::DpOptim, dp, sh.optim, sh.grad);
  g.replica = add_groups(s, core::GroupKind::DpReplica, dp, dp, sh.optim);
  g.regather = add_groups(s, core::GroupKind::DpRegather, dp, sh.optim, sh.param);

  Lowering lowering(graph, batch, o, sh, async, g, topo);
  s.programs.push_back(lowering.run());

  nlohmann::json prov{{"plan",
                       {{"strategy", to_string(o.strategy)},
                        {"param_shard", sh.param},
                        {"grad_shard", sh.grad},
                        {"optim_shard", sh.optim},
                        {"async", async},
                        {"reshard_after_forward", o.reshard_after_forward},
                        {"seq_len", batch.seq_len},
                        {"global_batch_sequences", batch.sequences},
                        {"micro_batch", o.micro_batch},
                        {"micro_batches", batch.micro_batches},
                        {"data_parallel", batch.data_parallel},
                        {"recompute", recompute_name(o.recompute)},
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
