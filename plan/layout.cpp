// The rank layout of a plan as process groups, parameter classes, rank
// classes and the units of each pipeline stage (see lowering.hpp).
#include "plan/lowering.hpp"

#include <algorithm>
#include <cstdint>

namespace hzp::plan::detail {

std::vector<int> add_dp_groups(core::Schedule& s, core::GroupKind kind, const Layout& l, int mult, int count, int block,
                               int stride) {
  std::vector<int> of(static_cast<std::size_t>(l.tp * l.dp * l.pp), -1);
  if (block / stride <= 1) return of;
  for (int p = 0; p < l.pp; ++p) {
    for (int t = 0; t < l.tp; ++t) {
      for (int o = 0; o < mult; ++o) {
        for (int b = 0; b < count; b += block) {
          for (int off = 0; off < stride; ++off) {
            core::Group g;
            g.id = static_cast<int>(s.groups.size());
            g.kind = kind;
            for (int x = b + off; x < b + block; x += stride) {
              const int r = rank_of(t, o + mult * x, p, l.tp, l.dp);
              g.ranks.push_back(r);
              of[static_cast<std::size_t>(r)] = g.id;
            }
            std::sort(g.ranks.begin(), g.ranks.end());
            s.groups.push_back(std::move(g));
          }
        }
      }
    }
  }
  return of;
}

std::vector<int> add_tp_groups(core::Schedule& s, const Layout& l, core::GroupKind kind) {
  std::vector<int> of(static_cast<std::size_t>(l.tp * l.dp * l.pp), -1);
  if (l.tp <= 1) return of;
  for (int p = 0; p < l.pp; ++p) {
    for (int d = 0; d < l.dp; ++d) {
      core::Group g;
      g.id = static_cast<int>(s.groups.size());
      g.kind = kind;
      for (int t = 0; t < l.tp; ++t) {
        g.ranks.push_back(rank_of(t, d, p, l.tp, l.dp));
        of[static_cast<std::size_t>(g.ranks.back())] = g.id;
      }
      s.groups.push_back(std::move(g));
    }
  }
  return of;
}

/// A class of parameters sharded by one hierarchical ZeRO plan: the dense

ShardedParams add_param_class(core::Schedule& s, const Layout& l, core::ParamClass cls, ShardSizes shards, int mult,
                              int count, bool all_group) {
  using K = core::GroupKind;
  const bool expert = cls == core::ParamClass::Expert;
  ShardedParams c;
  c.cls = cls;
  c.tag = expert ? ".experts" : "";
  c.sh = shards;
  c.ranks = count;
  auto param = add_dp_groups(s, expert ? K::Edp : K::DpShard, l, mult, count, shards.param, 1);
  auto grad = add_dp_groups(s, expert ? K::EdpGrad : K::DpGrad, l, mult, count, shards.grad, 1);
  auto optim = add_dp_groups(s, expert ? K::EdpOptim : K::DpOptim, l, mult, count, shards.optim, shards.grad);
  auto replica = add_dp_groups(s, expert ? K::EdpReplica : K::DpReplica, l, mult, count, count, shards.optim);
  auto regather = add_dp_groups(s, expert ? K::EdpRegather : K::DpRegather, l, mult, count, shards.optim, shards.param);
  c.param_of = std::move(param);
  c.grad_of = std::move(grad);
  c.optim_of = std::move(optim);
  c.replica_of = std::move(replica);
  c.regather_of = std::move(regather);
  if (all_group) c.all_of = add_dp_groups(s, expert ? K::EdpAll : K::DpAll, l, mult, count, count, 1);
  return c;
}

std::vector<Unit> stage_units(const models::StepGraph& graph, int p, const PipelineLayout& layout) {
  std::vector<Unit> units;
  for (const auto& u : graph.units) {
    int chunk = -1;
    if (u.kind == models::UnitKind::Embedding && p == 0) chunk = 0;
    if (u.kind == models::UnitKind::Head && p == layout.stage_of(layout.virtual_stages() - 1)) {
      chunk = layout.vpp - 1;
    }
    if (u.kind == models::UnitKind::Layer) {
      const int virtual_stage = layout.virtual_stage_of(u.layer);
      if (layout.stage_of(virtual_stage) == p) chunk = layout.chunk_of(virtual_stage);
    }
    if (chunk >= 0) units.push_back(Unit{&u, chunk});
    // DualPipe: chunk 1 is a copy of the mirror stage pp - 1 - p (its
    // embedding on the last stage, its head on the first).
    const int mirror = layout.pp - 1 - p;
    if (layout.dual) {
      const bool copy = (u.kind == models::UnitKind::Embedding && mirror == 0) ||
                        (u.kind == models::UnitKind::Head && mirror == layout.pp - 1) ||
                        (u.kind == models::UnitKind::Layer && layout.virtual_stage_of(u.layer) == mirror);
      if (copy) units.push_back(Unit{&u, 1});
    }
  }
  std::sort(units.begin(), units.end(), [](const auto& a, const auto& b) {
    auto order = [](const models::Unit* u) {
      return u->kind == models::UnitKind::Embedding ? -1 : u->kind == models::UnitKind::Head ? INT32_MAX : u->layer;
    };
    return std::pair{a.chunk, order(a.u)} < std::pair{b.chunk, order(b.u)};
  });
  return units;
}

RankClasses::RankClasses(int dp, int cp, int ep, bool skewed, int blocks)
    : cp_(cp), ep_(ep), per_block_(dp / blocks), skewed_(skewed) {
  for (int d = 0; d < dp; ++d) ids_.emplace(key(d), 0);
  int next = 0;
  for (auto& [k, id] : ids_) id = next++;
}

std::tuple<int, int, int> RankClasses::key(int d) const {
  return std::tuple{d % cp_, skewed_ ? d % ep_ : 0, d / per_block_};
}

int RankClasses::of(int d) const { return ids_.at(key(d)); }

}  // namespace hzp::plan::detail
