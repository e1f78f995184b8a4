// Timeline emission shared by the engines (see emit.hpp).
#include "sim/emit.hpp"

#include <algorithm>
#include <tuple>

#include "sim/caching_allocator.hpp"

namespace hzp::sim {

void emit_timeline(const core::Schedule& s, const std::vector<std::vector<std::vector<core::OpTime>>>& times,
                   const traces::TraceHeader& header, traces::TraceSink& sink) {
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
        const core::OpTime& t = times[p][k][i];
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
