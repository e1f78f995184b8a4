// The busiest compute stream's step by kernel class (see metrics.hpp).
#include <algorithm>
#include <array>
#include <map>
#include <string_view>

#include "sim/metrics.hpp"

namespace hzp::sim {
namespace {

constexpr std::array<std::string_view, 9> kClasses = {
    "gemm",      "attention_forward", "attention_backward", "norm_rotary_activation", "loss",
    "optimizer", "copies_casts",      "embedding_other",    "communication"};

std::size_t class_of(const core::Op& op) {
  using core::ComputeKind;
  using core::OpRole;
  if (op.kind != core::OpKind::Compute) return 8;
  const bool pass = op.role == OpRole::Forward || op.role == OpRole::Backward || op.role == OpRole::Recompute;
  switch (op.compute().kind) {
    case ComputeKind::Gemm: return 0;
    case ComputeKind::Attention: return op.role == OpRole::Backward ? 2 : 1;
    case ComputeKind::Norm:
    case ComputeKind::Elementwise: return pass ? 3 : 6;
    case ComputeKind::Loss: return 4;
    case ComputeKind::Optimizer:
    case ComputeKind::HostOptimizer: return 5;
    case ComputeKind::HostCopy: return 6;
    case ComputeKind::Embedding: return 7;
  }
  return 7;
}

}  // namespace

std::vector<HostIssue> host_issue(const core::Schedule& s, int program) {
  const core::Program& p = s.programs.at(static_cast<std::size_t>(program));
  std::vector<HostIssue> out(p.threads.size());
  for (std::size_t i = 0; i < p.threads.size(); ++i) out[i].thread = p.threads[i].name;
  for (const auto& st : p.streams) {
    const auto t = static_cast<std::size_t>(st.thread);
    const core::Thread& thread = p.threads.at(t);
    for (const auto& op : st.ops) {
      HostIssue& h = out[t];
      switch (op.kind) {
        case core::OpKind::Compute: h.kernels += op.compute().kernels; break;
        case core::OpKind::Collective:
        case core::OpKind::Send:
        case core::OpKind::Recv: ++h.collectives; break;
        case core::OpKind::Record:
        case core::OpKind::Wait: ++h.events; break;
        case core::OpKind::Alloc:
        case core::OpKind::Free: ++h.allocs; break;
        case core::OpKind::Sync: ++h.syncs; break;
      }
      h.time += core::issue_latency(thread, op);
    }
  }
  return out;
}

TimeSplit time_split(const core::Schedule& s, const traces::Timeline& t, core::Duration step) {
  // The busiest compute stream (ties: the lowest rank class, then stream).
  std::map<std::pair<int, int>, std::int64_t> busy;
  for (const auto& r : t.ops) {
    const core::Stream& st =
        s.programs.at(static_cast<std::size_t>(r.program)).streams.at(static_cast<std::size_t>(r.stream));
    if (st.kind == core::StreamKind::Compute) busy[{r.program, r.stream}] += (r.end - r.start).count_ns();
  }
  TimeSplit out;
  for (std::string_view c : kClasses) out.classes.emplace_back(std::string(c), core::Duration{});
  if (busy.empty()) {
    out.waiting = step;
    return out;
  }
  const auto best = std::max_element(busy.begin(), busy.end(), [](const auto& a, const auto& b) {
    return a.second < b.second || (a.second == b.second && a.first > b.first);
  });
  const auto [program, stream] = best->first;
  const core::Stream& st = s.programs[static_cast<std::size_t>(program)].streams[static_cast<std::size_t>(stream)];
  out.program = program;
  out.stream = st.name;

  std::vector<const traces::OpRecord*> recs;
  for (const auto& r : t.ops) {
    if (r.program == program && r.stream == stream) recs.push_back(&r);
  }
  std::sort(recs.begin(), recs.end(), [](const auto* a, const auto* b) { return a->start < b->start; });
  // Ops of one stream run one after another; a gap before an op is host-bound
  // up to when its host thread issued it, waiting after that. The step starts
  // with the Timeline's first op (0 in the engines; a measured trace's origin
  // may precede it).
  core::TimePoint begin = t.ops.front().start;
  for (const auto& r : t.ops) begin = std::min(begin, r.start);
  core::TimePoint free_at = begin;
  std::int64_t host_ns = 0, wait_ns = 0;
  for (const auto* r : recs) {
    const std::int64_t gap = std::max<std::int64_t>(0, (r->start - free_at).count_ns());
    if (gap > 0) {
      const std::int64_t host = r->issued ? std::clamp<std::int64_t>((*r->issued - free_at).count_ns(), 0, gap) : 0;
      host_ns += host;
      wait_ns += gap - host;
    }
    // A stream's ops are in ascending id (the order its thread issues them).
    const auto it =
        std::lower_bound(st.ops.begin(), st.ops.end(), r->op_id, [](const core::Op& op, int id) { return op.id < id; });
    const std::size_t c = it != st.ops.end() && it->id == r->op_id ? class_of(*it) : 7;
    if (r->end > free_at) out.classes[c].second += r->end - std::max(r->start, free_at);
    free_at = std::max(free_at, r->end);
  }
  wait_ns += std::max<std::int64_t>(0, step.count_ns() - (free_at - begin).count_ns());
  out.host_bound = core::Duration::ns(host_ns);
  out.waiting = core::Duration::ns(wait_ns);
  return out;
}

}  // namespace hzp::sim
