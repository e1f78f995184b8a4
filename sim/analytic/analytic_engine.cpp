// Analytic engine (see analytic_engine.hpp). Costs: compute from the
// roofline, collectives from the α-β ring/tree model over the slowest tier
// the group spans, send/recv as one transfer; the walk is core::replay.
#include "sim/analytic/analytic_engine.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.hpp"
#include "core/schedule_replay.hpp"
#include "sim/caching_allocator.hpp"

namespace hzp::sim {

void AnalyticEngine::run(const core::Schedule& s, traces::TraceHeader header, traces::TraceSink& sink) {
  std::vector<topologies::GroupSpan> spans;
  spans.reserve(s.groups.size());
  for (const auto& g : s.groups) spans.push_back(pm_.span(g.ranks));
  for (const auto& g : s.groups) {
    for (int r : g.ranks) {
      if (r >= pm_.topology().devices()) {
        throw core::InputError(
            "schedule", fmt::format("groups[{}].ranks", g.id),
            fmt::format("rank {} does not exist on a cluster of {} devices", r, pm_.topology().devices()));
      }
    }
  }
  // Collectives repeat with the same (kind, bytes, group): cost each once.
  std::map<std::tuple<int, int, std::int64_t>, core::Duration> collective_cache;
  core::ReplayCosts costs;
  costs.compute = [&](const core::Program&, const core::Op& op) { return pm_.compute(op); };
  costs.collective = [&](const core::Group& g, const core::Op& op) {
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
  core::ReplayResult r = core::replay(s, costs);

  header.engine = name();
  if (header.schedule_sha256.empty()) header.schedule_sha256 = core::schedule_hash(s);
  header.schedule_name = s.name;
  header.schedule_provenance_json = s.provenance_json;
  sink.on_header(header);

  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    const core::Program& prog = s.programs[p];
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      sink.on_stream(traces::StreamInfo{prog.id, prog.streams[k].id, prog.name, prog.ranks, prog.streams[k].name,
                                        prog.streams[k].kind});
    }
  }
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    const core::Program& prog = s.programs[p];
    // Memory: alloc/free in time order (ties by op id, the issue order),
    // through the caching allocator model for what is reserved.
    std::vector<std::tuple<std::int64_t, int, std::int64_t, bool, const std::string*>> deltas;
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      const core::Stream& st = prog.streams[k];
      for (std::size_t i = 0; i < st.ops.size(); ++i) {
        const core::Op& op = st.ops[i];
        const core::OpTime& t = r.times[p][k][i];
        switch (op.kind) {
          case core::OpKind::Compute:
          case core::OpKind::Collective:
          case core::OpKind::Send:
          case core::OpKind::Recv: {
            traces::OpRecord rec;
            rec.program = prog.id;
            rec.stream = st.id;
            rec.op_id = op.id;
            rec.name = op.name;
            rec.kind = op.kind;
            rec.what = op.kind == core::OpKind::Compute      ? std::string(core::to_string(op.compute))
                       : op.kind == core::OpKind::Collective ? std::string(core::to_string(op.collective))
                                                             : std::string(core::to_string(op.kind));
            if (op.kind == core::OpKind::Collective) rec.group_kind = s.group(op.group).kind;
            rec.flops = op.flops;
            rec.bytes = op.bytes;
            rec.start = t.start;
            rec.end = t.end;
            sink.on_op(rec);
            break;
          }
          case core::OpKind::Alloc:
            deltas.emplace_back(t.start.count_ns(), op.id, op.bytes.count(), true, &op.buffer);
            break;
          case core::OpKind::Free:
            deltas.emplace_back(t.start.count_ns(), op.id, -op.bytes.count(), false, &op.buffer);
            break;
          default: break;
        }
      }
    }
    std::sort(deltas.begin(), deltas.end());
    CachingAllocator allocator;
    for (const auto& [t, id, d, is_alloc, buffer] : deltas) {
      if (is_alloc) {
        allocator.allocate(*buffer, core::Bytes(d));
      } else {
        allocator.free(*buffer);
      }
      sink.on_memory(traces::MemoryPoint{prog.id, core::Duration::ns(t), allocator.allocated(), allocator.reserved(),
                                         *buffer, core::Bytes(d)});
    }
  }
}

}  // namespace hzp::sim
