// Plan lowering's driver (lower_plan): the groups, then one StageLowering per
// program (lower_stage.cpp and its passes, see stage_lowering.hpp); the
// layout and the workloads come from layout.cpp and workload.cpp.
//
// Lowering plans to a Schedule: every data-parallel strategy is one
// hierarchical ZeRO plan (g_p, g_g, g_o), composed with Megatron TP/SP, CP,
// PP (1F1B, interleaved) and EP — generated, never hand-written.
//
// One program per (pipeline stage, rank class); without workload variability
// or context parallelism every data-parallel rank of a stage is one class.
// Slots of a stage run in pipeline order; within a slot its units run forward
// in order or backward in reverse.
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
// Groups are contiguous blocks of the data-parallel index (strided sets
// inside them), and tensor ranks are innermost, so with ranks numbered node by
// node the smallest groups fill scale-up domains first and strided groups run
// along rails.
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
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "core/error.hpp"
#include "plan/stage_lowering.hpp"
#include "schedule/check.hpp"

namespace hzp::plan {

namespace {

using core::ComputeKind;
using core::Dtype;
using detail::Layout;
using detail::ShardedParams;
using detail::Stage;
using detail::StageLowering;

models::StepGraph step_graph(const models::ModelSpec& m, const stacks::StackSpec& stack, const PlanOptions& o,
                             const BatchSplit& batch) {
  const models::GraphOptions go{.seq_len = batch.seq_len,
                                .micro_batch = o.micro_batch,
                                .recompute = o.recompute,
                                .flash_attention = o.flash_attention,
                                .fused_loss = o.fused_loss,
                                .kernels = stack.ops,
                                .attention_kernel = stack.attention,
                                .selective = stack.selective,
                                .unfused_loss = stack.unfused_loss,
                                .fp8_saved_inputs = stack.fp8_saved_inputs,
                                .tp = o.tp,
                                .sequence_parallel = o.sequence_parallel,
                                .ep = o.ep,
                                .etp = o.expert_tp.value_or(0),
                                .cp = o.cp,
                                .ulysses = o.ulysses,
                                .precision = o.precision,
                                .fp8_gathered_weights = o.fp8_param_gather};
  return models::build_step_graph(m, go);
}

// Ops one program builds, estimated: per micro-batch each unit's forward and
// backward kernels and collectives (a ring-attention kernel: about six ops
// per context-parallel step; an overlapped tensor-parallel pair: its chunks)
// plus the bookkeeping around each use (allocs, frees, records, waits, the
// sharding collectives); per unit the step-end reduction, update and gather.
std::int64_t program_ops(const std::vector<detail::Unit>& units, std::int64_t micro_batches, const PlanOptions& o,
                         const stacks::Collectives& sc) {
  constexpr std::int64_t kPerUse = 8, kPerUnit = 12;
  auto ops = [&](const std::vector<models::GraphOp>& list) {
    std::int64_t n = 0;
    for (const auto& op : list) {
      if (op.collective && o.tp_comm_overlap && op.comm_group == models::CommGroup::Tp) {
        // Its chunks (a ring exchange: one per rank) and a bulk backward's regather.
        n += 3 * std::max(kTpOverlapChunks, o.tp) + 3;
      } else if (!op.collective && op.kind == ComputeKind::Attention && o.cp > 1) {
        n += 6LL * o.cp;
      } else {
        n += 1;
      }
    }
    return n;
  };
  // The collectives a stack cuts each unit's gathers and reductions into
  // (per parameter tensor, or per bucket of the unit's 16-bit values).
  auto pieces = [&](const models::Unit& u, stacks::Granularity g) -> std::int64_t {
    if (g == stacks::Granularity::Parameter) return static_cast<std::int64_t>(u.tensors.size());
    if (g == stacks::Granularity::Bucket) {
      const double bytes = 2.0 * static_cast<double>(u.weight_params + u.expert_params);
      return static_cast<std::int64_t>(std::ceil(bytes / (sc.bucket_MB * 1e6)));
    }
    return 1;
  };
  std::int64_t per_micro_batch = 0, per_step = 0;
  for (const auto& u : units) {
    // Gathered before the forward and again before the backward; reduced once.
    const std::int64_t gathers = 2 * pieces(*u.u, sc.gather), reduces = pieces(*u.u, sc.reduce);
    per_micro_batch += ops(u.u->forward) + ops(u.u->backward) + 2 * kPerUse + gathers + reduces;
    per_step += kPerUnit + reduces;
  }
  return micro_batches * per_micro_batch + per_step;
}

WorkEstimate estimate(const PlanOptions& o, const stacks::StackSpec& stack, const BatchSplit& batch,
                      const PipelineLayout& layout, const models::StepGraph& graph,
                      const detail::RankClasses& classes) {
  WorkEstimate w;
  for (int p = 0; p < o.pp; ++p) {
    const std::vector<detail::Unit> units = detail::stage_units(graph, p, layout);
    w.ops += classes.count() * program_ops(units, batch.micro_batches, o, stack.collectives);
  }
  w.programs = static_cast<std::int64_t>(o.pp) * classes.count();
  return w;
}

// What the engines need beside the programs: the name and the step.
void describe_step(core::Schedule& s, const models::ModelSpec& m, const topologies::Topology& topo,
                   const PlanOptions& o, const BatchSplit& batch) {
  s.name = fmt::format("{}/{}x{}/{}", m.name, topo.spec().name, topo.devices(), to_string(o.strategy));
  s.step.model = m.name;
  s.step.cluster = topo.spec().name;
  s.step.strategy = std::string(to_string(o.strategy));
  s.step.world_size = topo.devices();
  s.step.seq_len = batch.seq_len;
  s.step.global_batch_sequences = batch.sequences;
  s.step.micro_batches = batch.micro_batches;
  s.step.model_flops = models::model_flops_per_sequence(m, batch.seq_len) * static_cast<double>(batch.sequences);
}

// The programs of a resolved plan: the groups, then one Lowering per
// (pipeline stage, rank class).
class PlanLowering {
 public:
  PlanLowering(const Inputs& in, const PlanOptions& o, const ResolvedPlan& rp, bool names, core::Schedule& s)
      : in_(in),
        m_(in.model),
        topo_(in.cluster),
        stack_(in.stack->spec),
        o_(o),
        rp_(rp),
        names_(names),
        s_(s),
        dp_(rp.shard_ranks),
        layout_{o.tp, rp.shard_ranks, o.pp, o.vpp, o.ep},
        graph_(step_graph(m_, stack_, o, rp.batch)),
        skewed_(m_.moe && o.ep > 1 && o.moe_skew > 0),
        classes_of_(dp_, o.cp, o.ep, skewed_, o.variability_classes),
        orders_(pipeline_orders(o.pp, o.vpp, rp.batch.micro_batches, o.pipeline_schedule, layer_pass_times(graph_))) {}

  /// What the Schedule will hold, before any of it is built.
  [[nodiscard]] WorkEstimate work() const { return estimate(o_, stack_, rp_.batch, rp_.layout, graph_, classes_of_); }

  void build() {
    add_groups();
    // Virtual stage c·pp + p holds the layers the pipeline layout gives it;
    // the embedding rides with the first, the head with the last.
    int program_id = 0;
    for (int p = 0; p < o_.pp; ++p) {
      std::vector<detail::Unit> units = detail::stage_units(graph_, p, rp_.layout);
      for (int c = 0; c < classes_of_.count(); ++c) {
        StageLowering lowering(units, rp_.batch, o_, param_classes_, *rp_.options.async, layout_,
                               stage(p, c, program_id++), in_);
        s_.programs.push_back(lowering.run());
      }
    }
  }

 private:
  // Tensor-parallel groups, the dense parameters' (g_p, g_g, g_o) plan over
  // DP, then for MoE models the expert-parallel groups and the expert
  // parameters' plan over the DP / ep expert-data-parallel ranks (they are
  // already split ep ways).
  void add_groups() {
    tp_groups_ = detail::add_tp_groups(s_, layout_);
    // A stack that all-reduces gradients over every data-parallel rank needs that group.
    const bool all = stack_.collectives.step_reduction == stacks::StepReduction::AllReduce;
    param_classes_.push_back(detail::add_param_class(s_, layout_, core::ParamClass::Dense, rp_.shards, 1, dp_, all));
    ep_groups_.assign(static_cast<std::size_t>(topo_.devices()), -1);
    etp_groups_ = ep_groups_;
    // Ulysses: the ulysses ranks d' = c + cp·(u + ulysses·d) of one cp index c.
    ulysses_groups_ =
        o_.ulysses > 1 ? detail::add_dp_groups(s_, core::GroupKind::Ulysses, layout_, 1, dp_, o_.cp * o_.ulysses, o_.cp)
                       : ep_groups_;
    // DualPipe: stage p and stage pp - 1 - p hold copies of each other's
    // layers; each (tensor rank, data-parallel index) pair sums its copies'
    // gradients (on the representative of tensor rank 0: the class's).
    mirror_groups_ = ep_groups_;
    if (rp_.layout.dual) {
      for (int p = 0; p < o_.pp / 2; ++p) {
        for (int d = 0; d < dp_; ++d) {
          for (int t = 0; t < o_.tp; ++t) {
            core::Group g;
            g.id = static_cast<int>(s_.groups.size());
            g.kind = core::GroupKind::PpMirror;
            g.ranks = {rank_of(t, d, p, o_.tp, dp_), rank_of(t, d, o_.pp - 1 - p, o_.tp, dp_)};
            for (int r : g.ranks) mirror_groups_[static_cast<std::size_t>(r)] = g.id;
            s_.groups.push_back(std::move(g));
          }
        }
      }
    }
    if (m_.moe) {
      // Experts over their own layout: the dense one unless folded (expert_tp != tp).
      const int etp = o_.expert_tp.value_or(o_.tp);
      const detail::Layout el = detail::expert_layout(layout_, etp);
      const int edp = el.dp / o_.ep;
      const ShardSizes expert_sh = *rp_.options.expert_shards;
      if (o_.ep > 1) ep_groups_ = detail::add_dp_groups(s_, core::GroupKind::Ep, el, 1, el.dp, o_.ep, 1);
      if (etp != o_.tp) etp_groups_ = detail::add_tp_groups(s_, el, core::GroupKind::Etp);
      param_classes_.push_back(detail::add_param_class(s_, el, core::ParamClass::Expert, expert_sh, o_.ep, edp, all));
    }
  }

  // Rank class c of pipeline stage p: its ranks, neighbours, boundary sizes and workload.
  Stage stage(int p, int c, int program) const {
    const BatchSplit& batch = rp_.batch;
    Stage stage;
    stage.program = program;
    stage.op_names = names_;
    stage.index = p;
    int first_d = -1, members = 0;
    for (int d = 0; d < dp_; ++d) {
      if (classes_of_.of(d) != c) continue;
      if (first_d < 0) first_d = d;
      ++members;
      for (int t = 0; t < o_.tp; ++t) stage.ranks.push_back(rank_of(t, d, p, o_.tp, dp_));
    }
    std::sort(stage.ranks.begin(), stage.ranks.end());
    std::string name = o_.pp > 1 ? fmt::format("stage{}", p) : "dp";
    if (classes_of_.count() > 1) name += fmt::format(".class{}", c);
    stage.name = name;
    // The neighbouring stages' members with the same data-parallel rank.
    stage.prev_rep = rank_of(0, first_d, (p + o_.pp - 1) % o_.pp, o_.tp, dp_);
    stage.next_rep = rank_of(0, first_d, (p + 1) % o_.pp, o_.tp, dp_);
    stage.order = orders_[static_cast<std::size_t>(p)];
    stage.v_shape = rp_.layout.v_shape;
    stage.dual = rp_.layout.dual;
    if (stage.dual) stage.mirror_group = mirror_groups_[static_cast<std::size_t>(rank_of(0, first_d, p, o_.tp, dp_))];
    boundary(stage);
    const auto rep = static_cast<std::size_t>(stage.ranks.front());
    stage.tp_group = tp_groups_[rep];
    stage.ep_group = ep_groups_[rep];
    stage.etp_group = etp_groups_[rep];
    stage.ulysses_group = ulysses_groups_[rep];
    // The class's workload is the slowest of the data-parallel replicas it
    // stands for: its members d' = i + cp·d share one cp index i, so each is a
    // distinct replica d (whose sequence its cp siblings share), but for its
    // ulysses ranks, which share one sequence. Under a
    // routing skew the classes of a variability block hold the replicas
    // d ≡ r (mod ep / gcd(cp, ep)): classes with the same r (cp siblings) share
    // one draw, the others draw independently, so the slowest class is the
    // slowest of all replicas.
    const int residues = skewed_ ? o_.ep / std::gcd(o_.cp, o_.ep) : 1;
    const int data_class = first_d / classes_of_.per_block() * residues + first_d / o_.cp % residues;
    stage.workload = class_workload(o_, stragglers(std::max(1, members / o_.ulysses), residues), batch.micro_batches,
                                    data_class, skewed_ ? first_d % o_.ep : 0, o_.ep, m_.moe ? m_.moe->experts : 0);
    if (o_.cp > 1) context_ring(stage, first_d, p);
    return stage;
  }

  // The expected order statistics of the classes' workloads, once per class
  // size: ranks wait for each other every micro-batch where the data-parallel
  // ranks gather parameters (g_p > 1) or route tokens (ep > 1) inside it, else
  // at the step's gradient reduction.
  const Stragglers& stragglers(int ranks, int residues) const {
    auto it = stragglers_.find(ranks);
    if (it != stragglers_.end()) return it->second;
    const bool per_micro_batch = rp_.options.param_shard > 1 || (m_.moe && o_.ep > 1);
    WorkloadShape w;
    w.seq_len = rp_.batch.seq_len;
    w.micro_batch = o_.micro_batch;
    w.period = per_micro_batch ? 1 : rp_.batch.micro_batches;
    w.classes = o_.variability_classes * residues;
    w.ranks = ranks;
    w.at_mean = rp_.ranks_at_mean;
    return stragglers_.emplace(ranks, expected_stragglers(o_, w)).first->second;
  }

  // With sequence parallelism the boundary is already split over tp; without
  // it, each rank sends its 1/tp slice and the receivers all-gather.
  void boundary(Stage& stage) const {
    const std::int64_t activation =
        core::dtype_bytes(Dtype::Bf16) * rp_.batch.seq_len / sequence_split(o_) * o_.micro_batch * m_.hidden;
    stage.boundary_bytes = activation / o_.tp;
    stage.boundary_gather_bytes = o_.tp > 1 && !o_.sequence_parallel ? activation : 0;
  }

  // Ring neighbours: the classes of the next and previous context-parallel index.
  void context_ring(Stage& stage, int first_d, int p) const {
    const int base = first_d - first_d % o_.cp;
    stage.cp_next_rep = rank_of(0, base + (first_d + 1) % o_.cp, p, o_.tp, dp_);
    stage.cp_prev_rep = rank_of(0, base + (first_d + o_.cp - 1) % o_.cp, p, o_.tp, dp_);
    stage.cp = o_.cp;
    // K and V of this rank's tokens, per K/V head on this tensor-parallel rank
    // (under Ulysses: of the cp chunk's every token, for its share of heads).
    const std::int64_t tp_kv_heads = std::max<std::int64_t>(1, (m_.mla ? m_.heads : m_.kv_heads) / o_.tp);
    const std::int64_t kv_heads = std::max<std::int64_t>(tp_kv_heads, o_.ulysses) / o_.ulysses;
    stage.kv_block_bytes = core::dtype_bytes(Dtype::Bf16) * rp_.batch.seq_len / o_.cp * o_.micro_batch * kv_heads *
                           (m_.qk_head_dim() + m_.v_head_dim());
  }

  const Inputs& in_;
  const models::ModelSpec& m_;
  const topologies::Topology& topo_;
  const stacks::StackSpec& stack_;
  const PlanOptions& o_;
  const ResolvedPlan& rp_;
  const bool names_;  // LowerOptions::names
  core::Schedule& s_;
  const int dp_;  // the data-parallel index d' = c + cp·(u + ulysses·d) runs over DP x CP x ulysses
  const Layout layout_;
  const models::StepGraph graph_;
  const bool skewed_;
  const detail::RankClasses classes_of_;
  const std::vector<std::vector<PipelineSlot>> orders_;  // each stage's slots
  std::vector<int> tp_groups_, ep_groups_, etp_groups_, ulysses_groups_, mirror_groups_;
  std::vector<ShardedParams> param_classes_;
  mutable std::map<int, Stragglers> stragglers_;  // by ranks per class
};

}  // namespace

WorkEstimate estimate_work(const models::ModelSpec& m, const PlanOptions& o, const ResolvedPlan& rp) {
  const bool skewed = m.moe && o.ep > 1 && o.moe_skew > 0;
  const stacks::StackSpec& stack = (rp.stack ? rp.stack : stacks::default_stack())->spec;
  return estimate(o, stack, rp.batch, rp.layout, step_graph(m, stack, o, rp.batch),
                  detail::RankClasses(rp.shard_ranks, o.cp, o.ep, skewed, o.variability_classes));
}

void check_work(const WorkEstimate& w, std::int64_t max_ops) {
  if (w.ops <= max_ops) return;
  throw core::InputError(
      "command line", "--max-ops",
      fmt::format("this plan's Schedule would hold about {} ops ({} rank class{}; about {:.1f} GB to build), over "
                  "the limit of {}: raise --max-ops to build it, or use fewer micro-batches per rank or rank classes",
                  w.ops, w.programs, w.programs == 1 ? "" : "es", static_cast<double>(w.bytes()) / 1e9, max_ops));
}

core::Schedule lower(const Inputs& in, const PlanOptions& o, const LowerOptions& lo) {
  return lower_plan(in, o, lo).schedule;
}

LoweredPlan lower_plan(const Inputs& in, const PlanOptions& o, const LowerOptions& lo) {
  return lower_resolved(in, o, resolve_plan(in, o), lo);
}

namespace {

// Lowers a resolved plan; over lo.max_ops, throws (check_work) or, with
// `quiet`, returns nullopt before any op is built.
std::optional<LoweredPlan> lower_checked(const Inputs& in, const PlanOptions& o, ResolvedPlan resolved,
                                         const LowerOptions& lo, bool quiet) {
  LoweredPlan out;
  out.plan = std::move(resolved);
  core::Schedule& s = out.schedule;
  const models::ModelSpec& m = in.model;
  const topologies::Topology& topo = in.cluster;
  PlanLowering lowering(in, o, out.plan, lo.names, s);
  // Refuse a Schedule too large to build before building any of it.
  const WorkEstimate work = lowering.work();
  if (quiet && work.ops > lo.max_ops) return std::nullopt;
  check_work(work, lo.max_ops);
  describe_step(s, m, topo, o, out.plan.batch);
  lowering.build();
  nlohmann::json prov{
      {"plan", out.plan.provenance()}, {"model", m.name}, {"cluster", topo.spec().name}, {"gpus", topo.devices()}};
  s.provenance_json = prov.dump();
  if (lo.check) core::check_schedule(s);
  return out;
}

}  // namespace

LoweredPlan lower_resolved(const Inputs& in, const PlanOptions& o, ResolvedPlan resolved, const LowerOptions& lo) {
  return *lower_checked(in, o, std::move(resolved), lo, false);
}

std::optional<LoweredPlan> lower_within(const Inputs& in, const PlanOptions& o, ResolvedPlan resolved,
                                        const LowerOptions& lo) {
  return lower_checked(in, o, std::move(resolved), lo, true);
}

bool is_sharding_op(const core::Schedule& /*s*/, const core::Op& op) {
  switch (op.role) {
    case core::OpRole::ParamGather:
    case core::OpRole::GradReduce:
    case core::OpRole::GradAccumulate:
    case core::OpRole::Optimizer:
    case core::OpRole::ZeroGrads: return true;
    default: return false;
  }
}

}  // namespace hzp::plan
