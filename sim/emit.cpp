// Timeline emission shared by the engines (see emit.hpp).
#include "sim/emit.hpp"

#include <algorithm>
#include <optional>
#include <tuple>

#include "sim/caching_allocator.hpp"

namespace hzp::sim {

namespace {

using Times = std::vector<std::vector<std::vector<core::OpTime>>>;
using IssueTimes = std::vector<std::vector<std::vector<core::TimePoint>>>;

struct OpCounts {
  std::size_t timed = 0, memory = 0;
};

OpCounts count_ops(const core::Schedule& s) {
  OpCounts n;
  for (const core::Program& prog : s.programs) {
    for (const core::Stream& st : prog.streams) {
      for (const core::Op& op : st.ops) {
        if (core::is_timed(op.kind)) ++n.timed;
        if (op.kind == core::OpKind::Alloc || op.kind == core::OpKind::Free) ++n.memory;
      }
    }
  }
  return n;
}

void emit(const core::Schedule& s, const Times& times, const IssueTimes* issued, OpCounts counts,
          const traces::TraceHeader& header, traces::TraceSink& sink) {
  sink.on_header(header);
  traces::emit_streams(s, sink);
  const bool names = sink.wants_names();
  // Told the counts first, a recorder holds 1.25 M records in one allocation
  // of their size instead of doubling into twice that (MT-NLG 530B).
  sink.expect(counts.timed, counts.memory);
  // Memory: alloc/free in time order (ties by op id, the issue order),
  // through the caching allocator model for what is reserved.
  using Delta = std::tuple<std::int64_t, int, std::int64_t, bool, const std::string*>;
  std::vector<Delta> deltas;
  deltas.reserve(counts.memory);
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    const core::Program& prog = s.programs[p];
    deltas.clear();
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      const core::Stream& st = prog.streams[k];
      const auto run = static_cast<std::ptrdiff_t>(deltas.size());
      for (std::size_t i = 0; i < st.ops.size(); ++i) {
        const core::Op& op = st.ops[i];
        const core::OpTime& t = times[p][k][i];
        if (core::is_timed(op.kind)) {
          // Built straight into the sink's by-value argument: a record
          // moved is two strings moved.
          sink.on_op(traces::op_record(s, prog, st, op, t.start, t.end, names,
                                       issued ? std::optional((*issued)[p][k][i]) : std::nullopt));
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
      // A stream runs its ops in order and their ids ascend, so its own
      // deltas come sorted (sorted here when a Schedule read from a file
      // breaks that): merged into the streams' before, not sorted again.
      const auto from = deltas.begin() + run;
      if (!std::is_sorted(from, deltas.end())) std::sort(from, deltas.end());
      std::inplace_merge(deltas.begin(), from, deltas.end());
    }
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

}  // namespace

void emit_timeline(const core::Schedule& s, const Times& times, const traces::TraceHeader& header,
                   traces::TraceSink& sink, const IssueTimes* issued) {
  emit(s, times, issued, count_ops(s), header, sink);
}

void emit_timeline(const core::Schedule& s, const core::ReplayResult& r, const traces::TraceHeader& header,
                   traces::TraceSink& sink) {
  emit(s, r.times, &r.issued, OpCounts{r.timed_ops, r.memory_ops}, header, sink);
}

}  // namespace hzp::sim
