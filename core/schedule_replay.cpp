// The dependency-order walk over a Schedule (see schedule_replay.hpp).
//
// Each pass advances every stream as far as its head op allows; a pass that
// moves nothing while ops remain is a deadlock. Collectives and send/recv are
// matched through tables keyed by (group, seq) and (sender, receiver, seq).
#include "core/schedule_replay.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.hpp"

namespace hzp::core {
namespace {

struct Cursor {
  std::size_t program, stream;
};

bool issues_cost(OpKind k) {
  return k == OpKind::Compute || k == OpKind::Collective || k == OpKind::Send || k == OpKind::Recv;
}

std::string describe(const Program& p, const Stream& st, const Op& op) {
  return fmt::format("program {} ('{}') stream '{}' op {} '{}' ({})", p.id, p.name, st.name, op.id, op.name,
                     to_string(op.kind));
}

std::string why_stuck(const Op& op) {
  switch (op.kind) {
    case OpKind::Wait: return fmt::format("waits for event {}, which is never recorded before it", op.event);
    case OpKind::Collective:
      return fmt::format("collective on group {} seq {} is never reached by every member", op.group, op.seq);
    default: return fmt::format("{} with peer {} seq {} is never matched", to_string(op.kind), op.peer, op.seq);
  }
}

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
            if (ops[i].kind == OpKind::Record && ops[i].event == op.event) recorder = j;
          }
        }
        if (recorder == cur || next[p][recorder] >= prog.streams[recorder].ops.size()) break;
        cur = recorder;
      }
      if (cycle) cur = k;  // a cycle of waits: the first wait is the offender
      const Op& op = prog.streams[cur].ops[next[p][cur]];
      throw ScheduleError(fmt::format("deadlock: {} {}", describe(prog, prog.streams[cur], op), why_stuck(op)));
    }
  }
  throw ScheduleError("deadlock: no stream can advance");
}

}  // namespace

ReplayResult replay(const Schedule& s, const ReplayCosts& costs) {
  ReplayResult r;
  const std::size_t np = s.programs.size();
  r.times.resize(np);
  r.issued.resize(np);

  // Host threads issue their streams' ops in ascending id, one launch latency
  // per kernel or collective; a sync op stalls its thread until its event has
  // happened, so issue times are found as the walk goes.
  struct ThreadCursor {
    std::vector<std::tuple<int, std::size_t, std::size_t>> ops;  // (id, stream, index)
    std::size_t next = 0;
    TimePoint clock{};
    Duration launch{};
  };
  std::vector<std::vector<ThreadCursor>> threads(np);
  std::vector<std::vector<std::size_t>> issued_count(np);  // per stream: ops issued so far
  for (std::size_t p = 0; p < np; ++p) {
    const Program& prog = s.programs[p];
    r.times[p].resize(prog.streams.size());
    r.issued[p].resize(prog.streams.size());
    issued_count[p].assign(prog.streams.size(), 0);
    threads[p].resize(prog.threads.size());
    for (std::size_t t = 0; t < prog.threads.size(); ++t) threads[p][t].launch = prog.threads[t].launch_latency;
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      const Stream& st = prog.streams[k];
      r.times[p][k].resize(st.ops.size());
      r.issued[p][k].resize(st.ops.size());
      for (std::size_t i = 0; i < st.ops.size(); ++i) {
        threads[p].at(static_cast<std::size_t>(st.thread)).ops.emplace_back(st.ops[i].id, k, i);
      }
    }
    for (auto& t : threads[p]) std::sort(t.ops.begin(), t.ops.end());
  }

  // Participants of each group: programs whose representative is a member.
  std::vector<std::vector<std::size_t>> participants(s.groups.size());
  for (std::size_t p = 0; p < np; ++p) {
    for (const Group& g : s.groups) {
      if (std::binary_search(g.ranks.begin(), g.ranks.end(), s.programs[p].ranks.at(0))) {
        participants[static_cast<std::size_t>(g.id)].push_back(p);
      }
    }
  }

  std::vector<std::vector<std::size_t>> next(np);      // next op index per stream
  std::vector<std::vector<TimePoint>> free_at(np);     // when each stream is idle
  std::vector<std::map<int, TimePoint>> recorded(np);  // event -> time
  for (std::size_t p = 0; p < np; ++p) {
    next[p].assign(s.programs[p].streams.size(), 0);
    free_at[p].assign(s.programs[p].streams.size(), TimePoint{});
  }
  // Collective arrivals: (group, seq) -> cursors that reached it, with their ready time.
  std::map<std::pair<int, int>, std::vector<std::pair<Cursor, TimePoint>>> arrived;
  // Point-to-point: (sender rank, receiver rank, seq) -> ready time of each side.
  struct P2p {
    std::optional<std::pair<Cursor, TimePoint>> send, recv;
  };
  std::map<std::tuple<int, int, int>, P2p> p2p;

  auto finish = [&](Cursor c, TimePoint start, TimePoint end) {
    std::size_t i = next[c.program][c.stream]++;
    r.times[c.program][c.stream][i] = {start, end};
    free_at[c.program][c.stream] = end;
  };

  std::size_t remaining = 0;
  for (const auto& prog : s.programs) {
    for (const auto& st : prog.streams) remaining += st.ops.size();
  }

  auto advance_threads = [&]() {
    std::size_t moved = 0;
    for (std::size_t p = 0; p < np; ++p) {
      for (auto& t : threads[p]) {
        while (t.next < t.ops.size()) {
          auto [id, k, i] = t.ops[t.next];
          const Op& op = s.programs[p].streams[k].ops[i];
          if (op.kind == OpKind::Sync) {
            auto it = recorded[p].find(op.event);
            if (it == recorded[p].end()) break;
            t.clock = std::max(t.clock, it->second);
          }
          r.issued[p][k][i] = t.clock;
          ++issued_count[p][k];
          if (issues_cost(op.kind)) t.clock += t.launch;
          ++t.next;
          ++moved;
        }
      }
    }
    return moved;
  };

  while (remaining > 0) {
    std::size_t progressed = advance_threads();
    for (std::size_t p = 0; p < np; ++p) {
      const Program& prog = s.programs[p];
      for (std::size_t k = 0; k < prog.streams.size(); ++k) {
        const Stream& st = prog.streams[k];
        bool blocked = false;
        while (!blocked && next[p][k] < st.ops.size()) {
          std::size_t i = next[p][k];
          if (i >= issued_count[p][k]) break;  // its thread has not issued it yet
          const Op& op = st.ops[i];
          Cursor c{p, k};
          TimePoint ready = std::max(free_at[p][k], r.issued[p][k][i]);
          switch (op.kind) {
            case OpKind::Compute: {
              Duration d = costs.compute ? costs.compute(prog, op) : Duration{};
              finish(c, ready, ready + d);
              break;
            }
            case OpKind::Alloc:
            case OpKind::Free:
            case OpKind::Sync: finish(c, ready, ready); break;  // a sync is host-side: on the device it is past
            case OpKind::Record:
              recorded[p][op.event] = ready;
              finish(c, ready, ready);
              break;
            case OpKind::Wait: {
              auto it = recorded[p].find(op.event);
              if (it == recorded[p].end()) {
                blocked = true;
                continue;
              }
              TimePoint t = std::max(ready, it->second);
              finish(c, t, t);
              break;
            }
            case OpKind::Collective: {
              auto& list = arrived[{op.group, op.seq}];
              bool mine = std::any_of(list.begin(), list.end(),
                                      [&](const auto& a) { return a.first.program == p && a.first.stream == k; });
              if (!mine) list.emplace_back(c, ready);
              const auto& parts = participants.at(static_cast<std::size_t>(op.group));
              if (list.size() < parts.size()) {
                blocked = true;
                continue;
              }
              TimePoint start{};
              for (const auto& a : list) start = std::max(start, a.second);
              Duration d = costs.collective ? costs.collective(s.group(op.group), op) : Duration{};
              for (const auto& a : list) {
                finish(a.first, start, start + d);
                ++progressed;
                --remaining;
              }
              arrived.erase({op.group, op.seq});
              continue;  // counted above, for every member
            }
            case OpKind::Send:
            case OpKind::Recv: {
              int me = prog.ranks.at(0);
              bool is_send = op.kind == OpKind::Send;
              auto key = is_send ? std::tuple{me, op.peer, op.seq} : std::tuple{op.peer, me, op.seq};
              auto& slot = p2p[key];
              auto& mine = is_send ? slot.send : slot.recv;
              if (!mine) mine = std::pair{c, ready};
              if (!slot.send || !slot.recv) {
                blocked = true;
                continue;
              }
              TimePoint start = std::max(slot.send->second, slot.recv->second);
              Cursor sc = slot.send->first;
              const Op& send_op = s.programs[sc.program].streams[sc.stream].ops[next[sc.program][sc.stream]];
              Duration d = costs.p2p ? costs.p2p(s.programs[sc.program], send_op) : Duration{};
              Cursor rc = slot.recv->first;
              p2p.erase(key);
              finish(sc, start, start + d);
              finish(rc, start, start + d);
              progressed += 2;
              remaining -= 2;
              continue;
            }
          }
          ++progressed;
          --remaining;
        }
      }
    }
    if (progressed == 0) {
      // A host thread blocked in a sync holds back everything it has not issued.
      for (std::size_t p = 0; p < np; ++p) {
        for (std::size_t t = 0; t < threads[p].size(); ++t) {
          if (threads[p][t].next >= threads[p][t].ops.size()) continue;
          auto [id, k, i] = threads[p][t].ops[threads[p][t].next];
          const Program& prog = s.programs[p];
          const Op& op = prog.streams[k].ops[i];
          throw ScheduleError(
              fmt::format("deadlock: {} blocks host thread '{}' on event {}, which is never recorded before it",
                          describe(prog, prog.streams[k], op), prog.threads[t].name, op.event));
        }
      }
      report_deadlock(s, next);
    }
  }
  return r;
}

}  // namespace hzp::core
