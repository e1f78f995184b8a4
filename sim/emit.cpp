// Timeline emission shared by the engines (see emit.hpp).
#include "sim/emit.hpp"

#include <algorithm>
#include <tuple>

#include "sim/caching_allocator.hpp"

namespace hzp::sim {

void emit_timeline(const core::Schedule& s, const std::vector<std::vector<std::vector<core::OpTime>>>& times,
                   const traces::TraceHeader& header, traces::TraceSink& sink,
                   const std::vector<std::vector<std::vector<core::TimePoint>>>* issued) {
  sink.on_header(header);
  traces::emit_streams(s, sink);
  const bool names = sink.wants_names();
  // Told the counts first, a recorder holds 1.25 M records in one allocation
  // of their size instead of doubling into twice that (MT-NLG 530B).
  std::size_t timed = 0, memory_points = 0;
  for (const core::Program& prog : s.programs) {
    for (const core::Stream& st : prog.streams) {
      for (const core::Op& op : st.ops) {
        if (core::is_timed(op.kind)) ++timed;
        if (op.kind == core::OpKind::Alloc || op.kind == core::OpKind::Free) ++memory_points;
      }
    }
  }
  sink.expect(timed, memory_points);
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    const core::Program& prog = s.programs[p];
    // Memory: alloc/free in time order (ties by op id, the issue order),
    // through the caching allocator model for what is reserved.
    std::vector<std::tuple<std::int64_t, int, std::int64_t, bool, const std::string*>> deltas;
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      const core::Stream& st = prog.streams[k];
      for (std::size_t i = 0; i < st.ops.size(); ++i) {
        const core::Op& op = st.ops[i];
        const core::OpTime& t = times[p][k][i];
        if (core::is_timed(op.kind)) {
          traces::OpRecord rec = traces::op_record(s, prog, st, op, t.start, t.end, names);
          if (issued) rec.issued = (*issued)[p][k][i];
          sink.on_op(rec);
          continue;
        }
        switch (op.kind) {
          case core::OpKind::Alloc:
            deltas.emplace_back(t.start.count_ns(), op.id, op.buffer().bytes.count(), true, &op.buffer().name);
            break;
          case core::OpKind::Free:
            deltas.emplace_back(t.start.count_ns(), op.id, -op.buffer().bytes.count(), false, &op.buffer().name);
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
      sink.on_memory(traces::MemoryPoint{prog.id, core::TimePoint::ns(t), allocator.allocated(), allocator.reserved(),
                                         *buffer, core::Bytes(d)});
    }
  }
}

}  // namespace hzp::sim
