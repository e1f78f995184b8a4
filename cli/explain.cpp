// Plan explanation (see explain.hpp).
#include "cli/explain.hpp"

#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>

namespace hzp::cli {
namespace {

std::string ranks_text(const std::vector<int>& r) {
  if (r.size() <= 4) {
    std::string s;
    for (std::size_t i = 0; i < r.size(); ++i) s += fmt::format("{}{}", i ? "," : "", r[i]);
    return s;
  }
  int stride = r[1] - r[0];
  bool regular = true;
  for (std::size_t i = 1; i < r.size(); ++i) regular = regular && r[i] - r[i - 1] == stride;
  if (regular && stride == 1) return fmt::format("{}-{}", r.front(), r.back());
  if (regular) return fmt::format("{},{},...,{} (stride {})", r[0], r[1], r.back(), stride);
  return fmt::format("{},{},...,{}", r[0], r[1], r.back());
}

std::string placement(const cost::GroupSpan& g, const topologies::Topology& t) {
  const auto& spec = t.spec();
  std::string up = spec.scale_up.kind == topologies::ScaleUpKind::NvSwitch ? "NVSwitch" : "full-mesh";
  if (g.domains <= 1) return fmt::format("inside one {} domain", up);
  std::string tier = g.top_tier >= 0 && g.top_tier < static_cast<int>(spec.scale_out.tiers.size())
                         ? spec.scale_out.tiers[static_cast<std::size_t>(g.top_tier)].name
                         : "?";
  return fmt::format("{} domains x {} rank(s), across the {} tier", g.domains, g.min_ranks_per_domain, tier);
}

// Tensor and pipeline parallelism, and where the layers sit when uneven.
std::string model_parallelism(const plan::ResolvedPlan& plan) {
  const plan::PlanOptions& p = plan.options;
  std::string pipeline = p.pp > 1 ? " (1F1B)" : "";
  if (p.vpp > 1) pipeline = fmt::format(" x {} virtual stages (interleaved 1F1B)", p.vpp);
  const plan::PipelineScheduleTraits& schedule = plan::traits(p.pipeline_schedule);
  if (p.pp > 1 && schedule.mirrored) {
    pipeline = " (DualPipe: each stage also holds its mirror stage's copy; micro-batches from both ends)";
  } else if (p.pp > 1 && schedule.split_backward) {
    pipeline = fmt::format("{} ({}: B and W split)", p.vpp > 1 ? fmt::format(" x {} virtual stages", p.vpp) : "",
                           plan::to_string(p.pipeline_schedule));
  }
  std::string sequence;
  if (p.cp > 1) sequence += fmt::format(", cp {} (ring attention)", p.cp);
  if (p.ulysses > 1) sequence += fmt::format(", ulysses {} (all-to-all around attention)", p.ulysses);
  std::string out = fmt::format("model parallelism: tp {}{}, pp {}{}{}\n", p.tp,
                                p.sequence_parallel ? " (sequence parallel)" : "", p.pp, pipeline, sequence);
  if (p.expert_tp && *p.expert_tp != p.tp) {
    out += fmt::format(
        "experts folded (MoE parallel folding): ep {} x expert tp {} over each stage's tp x dp x cp "
        "ranks, {} expert-data-parallel\n",
        p.ep, *p.expert_tp, p.tp * plan.shard_ranks / (p.ep * *p.expert_tp));
  }
  if (!plan.layout.even()) {
    std::string counts;
    for (int v = 0; v < plan.layout.virtual_stages(); ++v) counts += fmt::format(" {}", plan.layout.layers_of(v));
    out += fmt::format("pipeline layout: {} (transformer layers per virtual stage:{})\n", plan.layout.text(), counts);
  }
  return out;
}

}  // namespace

std::string explain(const core::Schedule& s, const plan::ResolvedPlan& plan, const cost::PerfModel& pm) {
  std::string out;
  const plan::PlanOptions& p = plan.options;
  {
    out += model_parallelism(plan);
    out += fmt::format(
        "plan {}: (g_p, g_g, g_o) = ({}, {}, {}) over {} data-parallel (x context-parallel) ranks, {}, prefetch depth "
        "{}, {}{}\n",
        plan::to_string(p.strategy), p.param_shard, p.grad_shard, p.optim_shard, plan.shard_ranks,
        fmt::format("{} ({}, {})", *p.async ? "async" : "sync", *p.async ? "background issue threads" : "inline issue",
                    *p.async && plan.stack && plan.stack->spec.allocator == stacks::Allocator::Pools
                        ? "pooled buffers"
                        : "caching allocator"),
        p.prefetch_depth, p.reshard_after_forward ? "resharded after forward" : "kept gathered until backward",
        p.overlap_grad_reduce ? "" : ", gradients reduced after the whole backward");
  }
  // The representative's groups, one per kind, with how many groups of that kind exist.
  std::map<core::GroupKind, int> count;
  for (const auto& g : s.groups) ++count[g.kind];
  const core::Program& prog = s.programs.at(0);
  std::map<int, bool> used;
  for (const auto& st : prog.streams) {
    for (const auto& op : st.ops) {
      if (op.kind == core::OpKind::Collective) used[op.collective().group] = true;
    }
  }
  out += fmt::format("\ngroups of rank {} (each kind partitions the ranks that use it):\n", prog.ranks.at(0));
  out += fmt::format("  {:<12} {:>6} {:>7}  {:<28} {}\n", "kind", "size", "groups", "ranks", "placement");
  for (auto [id, _] : used) {
    const core::Group& g = s.group(id);
    out += fmt::format("  {:<12} {:>6} {:>7}  {:<28} {}\n", core::to_string(g.kind), g.ranks.size(), count[g.kind],
                       ranks_text(g.ranks), placement(pm.span(g.ranks), pm.topology()));
  }

  struct Row {
    int calls = 0;
    std::int64_t buffer = 0;
    double sent = 0;
    double seconds = 0;
    std::map<std::string, int> choices;  // NCCL algorithm/protocol -> calls
  };
  std::map<std::pair<std::string, int>, Row> rows;
  for (const auto& st : prog.streams) {
    for (const auto& op : st.ops) {
      if (op.kind != core::OpKind::Collective) continue;
      const core::Op::Collective& coll = op.collective();
      const core::Group& g = s.group(coll.group);
      const double P = static_cast<double>(g.ranks.size());
      Row& r = rows[{std::string(core::to_string(coll.kind)), coll.group}];
      ++r.calls;
      r.buffer += coll.bytes.count();
      double factor = coll.kind == core::CollectiveKind::AllReduce   ? 2 * (P - 1) / P
                      : coll.kind == core::CollectiveKind::Broadcast ? 1.0
                                                                     : (P - 1) / P;
      r.sent += factor * static_cast<double>(coll.bytes.count());
      const cost::CollectiveCost c = pm.collective_cost(coll.kind, coll.bytes, pm.span(g.ranks));
      r.seconds += c.seconds();
      // A tensor-parallel all-to-all is a step of a ring-exchange overlap
      // (copy-engine transfers of one shard, plan/lower_model_parallel.cpp), not NCCL's.
      const bool ring_step = coll.kind == core::CollectiveKind::AllToAll && g.kind == core::GroupKind::Tp;
      ++r.choices[ring_step ? std::string("ring-exchange copies")
                            : fmt::format("{}/{}", c.algorithm, cost::to_string(c.protocol))];
    }
  }
  out += fmt::format(
      "\ncommunication per rank per step (sent: bytes each rank puts on the wire; time: uncontended, one at a time; "
      "NCCL {}'s algorithm/protocol per call):\n",
      cost::nccl_tuning().version);
  out += fmt::format("  {:<15} {:<12} {:>6} {:>12} {:>10} {:>10}  {}\n", "collective", "group", "calls", "buffer GiB",
                     "sent GiB", "time (s)", "NCCL choice");
  for (const auto& [key, r] : rows) {
    std::string choice;
    for (const auto& [name, calls] : r.choices)
      choice += fmt::format("{}{} x{}", choice.empty() ? "" : ", ", name, calls);
    out += fmt::format("  {:<15} {:<12} {:>6} {:>12.3f} {:>10.3f} {:>10.4f}  {}\n", key.first,
                       core::to_string(s.group(key.second).kind), r.calls, static_cast<double>(r.buffer) / (1 << 30),
                       r.sent / (1 << 30), r.seconds, choice);
  }
  return out;
}

std::string time_split_text(const sim::TimeSplit& split, const core::Schedule& s, core::Duration step) {
  const double total = step.to_seconds();
  if (split.program < 0 || total <= 0) return "";
  std::string out = fmt::format("Where the step goes on {} of rank class {} ({:.4f} s):\n  ", split.stream,
                                s.programs.at(static_cast<std::size_t>(split.program)).name, total);
  auto item = [&](std::string_view name, core::Duration d) {
    out += fmt::format("{} {:.4f} s ({:.1f} %), ", name, d.to_seconds(), 100 * d.to_seconds() / total);
  };
  for (const auto& [name, d] : split.classes) {
    if (d.count_ns() > 0) item(name, d);
  }
  item("host_bound", split.host_bound);
  item("waiting", split.waiting);
  out.resize(out.size() - 2);
  out += "\nWhat its host threads issue in the step (each op at the stack's host cost for its kind):\n  ";
  for (const auto& h : sim::host_issue(s, split.program)) {
    out += fmt::format("{} {} kernels + {} collectives + {} event calls + {} allocator calls", h.thread, h.kernels,
                       h.collectives, h.events, h.allocs);
    if (h.syncs > 0) out += fmt::format(" + {} blocking waits", h.syncs);
    out += fmt::format(" = {:.4f} s ({:.1f} %), ", h.time.to_seconds(), 100 * h.time.to_seconds() / total);
  }
  out.resize(out.size() - 2);
  return out + "\n";
}

}  // namespace hzp::cli
