// Internal to plan/: the pieces of plan lowering shared by its files — the
// rank layout and its groups (layout.cpp) and the workload scaling of an op
// (workload.cpp). One program's lowering and its passes: stage_lowering.hpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "models/model_spec.hpp"
#include "models/step_graph.hpp"
#include "plan/plan.hpp"
#include "plan/program_builder.hpp"
#include "schedule/schedule.hpp"
#include "topologies/topology.hpp"

namespace hzp::plan::detail {

/// A unit of the step graph and the model chunk (virtual stage) it runs in.
struct Unit {
  const models::Unit* u;
  int chunk;
};

struct Layout {
  int tp = 1, dp = 1, pp = 1, vpp = 1, ep = 1;
};

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// A class of parameters sharded by one hierarchical ZeRO plan: the dense
/// parameters over DP, or the expert parameters over DP / ep.
struct ShardedParams {
  core::ParamClass cls = core::ParamClass::Dense;
  std::string tag;  // "" or ".experts": appended to op names, for people
  ShardSizes sh;
  int ranks = 1;  // data-parallel ranks of this class (DP or DP / ep)
  struct Groups {
    int param = -1, grad = -1, optim = -1, replica = -1, regather = -1, all = -1;
  };
  std::vector<int> param_of, grad_of, optim_of, replica_of, regather_of;  // group of every rank
  std::vector<int> all_of;  // every data-parallel rank of the class (only for a stack that all-reduces over it)
  [[nodiscard]] Groups groups_of(int rank) const {
    const auto r = static_cast<std::size_t>(rank);
    return {param_of[r], grad_of[r], optim_of[r], replica_of[r], regather_of[r], all_of.empty() ? -1 : all_of[r]};
  }
};

// layout.cpp

/// Adds the groups of one kind over a data-parallel dimension. Within every
/// (tensor rank, stage) slice the dimension's index x in [0, count) is the
/// data-parallel rank d = offset + mult·x for each offset in [0, mult) (dense
/// parameters: mult 1, count DP; expert parameters: mult ep, count DP / ep).
/// Blocks of `block` consecutive x are split into block / stride groups of x
/// `stride` apart. Returns the group of every rank (-1 for one-rank groups).
std::vector<int> add_dp_groups(core::Schedule& s, core::GroupKind kind, const Layout& l, int mult, int count, int block,
                               int stride);
/// The tensor-parallel groups (of `kind`: tp, or etp over an expert
/// layout); the group of every rank (-1 without tp).
std::vector<int> add_tp_groups(core::Schedule& s, const Layout& l, core::GroupKind kind = core::GroupKind::Tp);
/// The layout experts see: MoE parallel folding re-splits each stage's
/// tp x DP ranks (consecutive, rank = i + tp·DP·p) into etp expert-tensor
/// ranks innermost and tp·DP / etp expert-side data-parallel indices, over
/// which the ep groups and the expert parameters' plan run; etp = tp is the
/// dense layout itself.
inline Layout expert_layout(const Layout& l, int etp) { return Layout{etp, l.tp * l.dp / etp, l.pp, l.vpp, l.ep}; }
/// The five groups of one parameter class's (g_p, g_g, g_o) plan over `count`
/// data-parallel indices `mult` apart (expert: the edp kinds).
ShardedParams add_param_class(core::Schedule& s, const Layout& l, core::ParamClass cls, ShardSizes shards, int mult,
                              int count, bool all_group = false);
/// The units of pipeline stage `p` with their chunks (layers as `layout`
/// places them), in chunk order, each chunk from the embedding to the head.
std::vector<Unit> stage_units(const models::StepGraph& graph, int p, const PipelineLayout& layout);

/// Rank classes: ranks that run identical programs. Without variability, one
/// per stage; with it, contiguous blocks of data-parallel ranks and, under a
/// routing skew, each expert-parallel rank index apart. Context-parallel ranks
/// exchange K/V blocks with each other, so each cp index is its own class too.
class RankClasses {
 public:
  RankClasses(int dp, int cp, int ep, bool skewed, int blocks);
  [[nodiscard]] int of(int d) const;
  [[nodiscard]] int count() const { return static_cast<int>(ids_.size()); }
  [[nodiscard]] int per_block() const { return per_block_; }

 private:
  [[nodiscard]] std::tuple<int, int, int> key(int d) const;
  int cp_, ep_, per_block_;
  bool skewed_;
  std::map<std::tuple<int, int, int>, int> ids_;
};

// workload.cpp

/// Φ⁻¹(p), the standard normal quantile, and Φ⁻¹(1 − q) from the upper tail q
/// (accurate where 1 − q rounds to 1).
double normal_quantile(double p);
double normal_upper_quantile(double q);
/// E of the k-th smallest (k = 1..classes) of `classes` independent maxima of
/// n draws of a variable given as points: x ascending, cdf[i] = P(X ≤ x[i])
/// ascending to 1 (each point weighs its step of the CDF).
std::vector<double> expected_order_statistics(const std::vector<double>& x, const std::vector<double>& cdf, double n,
                                              int classes);

/// The op as a rank class runs it in one micro-batch: FLOPs scaled by the
/// compute jitter `compute`, the attention core also by `attention` (Σ lenᵢ² /
/// seq²), expert kernels also by the class's expert load `experts` (their
/// GEMMs grow by rows, and their bytes with them).
models::GraphOp scale_op(const models::GraphOp& op, double compute, double attention, double experts);
/// The factor scale_op scales the op's FLOPs by (1: the op as the graph has it).
double scale_factor(const models::GraphOp& op, double compute, double attention, double experts);

}  // namespace hzp::plan::detail
