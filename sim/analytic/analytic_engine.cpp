// Analytic engine (see analytic_engine.hpp). Costs: compute from the
// roofline, collectives from the α-β ring/tree model over the slowest tier
// the group spans, send/recv as one transfer; the walk is core::replay.
#include "sim/analytic/analytic_engine.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/schedule_replay.hpp"
#include "sim/caching_allocator.hpp"
#include "sim/emit.hpp"

namespace hzp::sim {

core::ReplayResult AnalyticEngine::walk(const core::Schedule& s, const FreeOps& free) const {
  std::vector<topologies::GroupSpan> spans;
  spans.reserve(s.groups.size());
  for (const auto& g : s.groups) spans.push_back(pm_.span(g.ranks));
  check_fits(s, pm_.topology());
  // Collectives repeat with the same (kind, bytes, group): cost each once.
  std::map<std::tuple<int, int, std::int64_t>, core::Duration> collective_cache;
  core::ReplayCosts costs;
  costs.compute = [&](const core::Program&, const core::Op& op) {
    return free && free(op) ? core::Duration{} : pm_.compute(op);
  };
  costs.collective = [&](const core::Group& g, const core::Op& op) {
    if (free && free(op)) return core::Duration{};
    auto key = std::tuple{g.id, static_cast<int>(op.collective), op.bytes.count()};
    auto it = collective_cache.find(key);
    if (it != collective_cache.end()) return it->second;
    core::Duration d = pm_.collective(op.collective, op.bytes, spans[static_cast<std::size_t>(g.id)]);
    collective_cache.emplace(key, d);
    return d;
  };
  costs.p2p = [&](const core::Program& sender, const core::Op& op) {
    return pm_.p2p(op.bytes, sender.ranks.at(0), op.peer);
  };
  return core::replay(s, costs);
}

void AnalyticEngine::run(const core::Schedule& s, traces::TraceHeader header, traces::TraceSink& sink) {
  core::ReplayResult r = walk(s);
  header.engine = name();
  if (header.schedule_sha256.empty()) header.schedule_sha256 = core::schedule_hash(s);
  header.schedule_name = s.name;
  header.schedule_provenance_json = s.provenance_json;
  emit_timeline(s, r.times, header, sink);
}

StepEstimate AnalyticEngine::estimate(const core::Schedule& s, const FreeOps& free) const {
  const core::ReplayResult r = walk(s, free);
  StepEstimate e;
  core::StepSpan span;
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    const core::Program& prog = s.programs[p];
    std::vector<std::tuple<std::int64_t, int, std::int64_t, const std::string*>> deltas;
    std::int64_t compute = 0;
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      const core::Stream& st = prog.streams[k];
      for (std::size_t i = 0; i < st.ops.size(); ++i) {
        const core::Op& op = st.ops[i];
        const core::OpTime& t = r.times[p][k][i];
        switch (op.kind) {
          case core::OpKind::Compute:
            if (st.kind == core::StreamKind::Compute &&
                (op.compute == core::ComputeKind::Gemm || op.compute == core::ComputeKind::Attention)) {
              compute += (t.end - t.start).count_ns();
            }
            [[fallthrough]];
          case core::OpKind::Collective:
          case core::OpKind::Send:
          case core::OpKind::Recv: span.add(t.start, t.end); break;
          case core::OpKind::Alloc: deltas.emplace_back(t.start.count_ns(), op.id, op.bytes.count(), &op.buffer); break;
          case core::OpKind::Free: deltas.emplace_back(t.start.count_ns(), op.id, -op.bytes.count(), &op.buffer); break;
          default: break;
        }
      }
    }
    std::sort(deltas.begin(), deltas.end());
    CachingAllocator allocator;
    for (const auto& [t, id, d, buffer] : deltas) {
      if (d >= 0) {
        allocator.allocate(*buffer, core::Bytes(d));
      } else {
        allocator.free(*buffer);
      }
      e.peak_reserved = std::max(e.peak_reserved, allocator.reserved());
    }
    e.model_compute = std::max(e.model_compute, core::Duration::ns(compute));
  }
  e.step = span.step();
  return e;
}

}  // namespace hzp::sim
