// What a walk that cannot finish reports (see replay_deadlock.hpp).
#include "schedule/replay_deadlock.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace hzp::core {

std::string describe_op(const Program& p, const Stream& st, const Op& op) {
  return fmt::format("program {} ('{}') stream '{}' op {} '{}' ({})", p.id, p.name, st.name, op.id, op.name,
                     to_string(op.kind));
}

namespace {

std::string why_stuck(const Op& op) {
  switch (op.kind) {
    case OpKind::Wait: return fmt::format("waits for event {}, which is never recorded before it", op.event().id);
    case OpKind::Collective:
      return fmt::format("collective on group {} seq {} is never reached by every member", op.collective().group,
                         op.collective().seq);
    default:
      return fmt::format("{} with peer {} seq {} is never matched", to_string(op.kind), op.transfer().peer,
                         op.transfer().seq);
  }
}

}  // namespace

// Names the root cause of a deadlock: a stuck wait is usually the consequence
// of the op that blocks its event's record, so follow waits to the stream that
// should record the event; report a wait only when the waits form a cycle.
[[noreturn]] void report_deadlock(const Schedule& s, const std::vector<std::vector<std::size_t>>& next) {
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    const Program& prog = s.programs[p];
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      if (next[p][k] >= prog.streams[k].ops.size()) continue;
      std::size_t cur = k;
      std::vector<bool> seen(prog.streams.size(), false);
      bool cycle = false;
      while (true) {
        const Op& op = prog.streams[cur].ops[next[p][cur]];
        if (op.kind != OpKind::Wait) break;
        if (seen[cur]) {
          cycle = true;
          break;
        }
        seen[cur] = true;
        std::size_t recorder = cur;
        for (std::size_t j = 0; j < prog.streams.size(); ++j) {
          const auto& ops = prog.streams[j].ops;
          for (std::size_t i = next[p][j]; i < ops.size(); ++i) {
            if (ops[i].kind == OpKind::Record && ops[i].event().id == op.event().id) recorder = j;
          }
        }
        if (recorder == cur || next[p][recorder] >= prog.streams[recorder].ops.size()) break;
        cur = recorder;
      }
      if (cycle) cur = k;  // a cycle of waits: the first wait is the offender
      const Op& op = prog.streams[cur].ops[next[p][cur]];
      throw ScheduleError(fmt::format("deadlock: {} {}", describe_op(prog, prog.streams[cur], op), why_stuck(op)));
    }
  }
  throw ScheduleError("deadlock: no stream can advance");
}

}  // namespace hzp::core
