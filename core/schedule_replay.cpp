// The dependency-order walk over a Schedule (see schedule_replay.hpp).
//
// Each pass advances every stream as far as its head op allows; a pass that
// moves nothing while ops remain is a deadlock. Collectives and send/recv are
// matched through tables keyed by (group, seq) and (sender, receiver, seq).
#include "core/schedule_replay.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.hpp"

namespace hzp::core {
namespace {

struct Cursor {
  std::size_t program, stream;
};

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
    const Thread* thread = nullptr;
  };
  std::vector<std::vector<ThreadCursor>> threads(np);
  std::vector<std::vector<std::size_t>> issued_count(np);  // per stream: ops issued so far
  for (std::size_t p = 0; p < np; ++p) {
    const Program& prog = s.programs[p];
    r.times[p].resize(prog.streams.size());
    r.issued[p].resize(prog.streams.size());
    issued_count[p].assign(prog.streams.size(), 0);
    threads[p].resize(prog.threads.size());
    for (std::size_t t = 0; t < prog.threads.size(); ++t) threads[p][t].thread = &prog.threads[t];
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      const Stream& st = prog.streams[k];
      r.times[p][k].resize(st.ops.size());
      r.issued[p][k].resize(st.ops.size());
      // Each stream's ops are in ascending id: merge them into the thread's order.
      auto& ops = threads[p].at(static_cast<std::size_t>(st.thread)).ops;
      const auto mid = static_cast<std::ptrdiff_t>(ops.size());
      for (std::size_t i = 0; i < st.ops.size(); ++i) ops.emplace_back(st.ops[i].id, k, i);
      std::inplace_merge(ops.begin(), ops.begin() + mid, ops.end());
    }
  }

  // Participants of each group: programs whose representative is a member.
  std::vector<std::size_t> program_of_rep(static_cast<std::size_t>(std::max(s.step.world_size, 1)), SIZE_MAX);
  for (std::size_t p = 0; p < np; ++p) {
    auto rep = static_cast<std::size_t>(s.programs[p].ranks.at(0));
    if (rep < program_of_rep.size()) program_of_rep[rep] = p;
  }
  std::vector<std::vector<std::size_t>> participants(s.groups.size());
  for (const Group& g : s.groups) {
    for (int rank : g.ranks) {
      auto r_ = static_cast<std::size_t>(rank);
      if (r_ < program_of_rep.size() && program_of_rep[r_] != SIZE_MAX) {
        participants[static_cast<std::size_t>(g.id)].push_back(program_of_rep[r_]);
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

  // A worklist of streams that may advance; a stream that blocks registers
  // what would unblock it (an event, a collective, a transfer, its thread's
  // issue), so the walk is linear in ops plus wake-ups.
  std::deque<Cursor> work;
  std::vector<std::vector<char>> queued(np);
  for (std::size_t p = 0; p < np; ++p) queued[p].assign(s.programs[p].streams.size(), 0);
  auto push = [&](Cursor c) {
    if (!queued[c.program][c.stream]) {
      queued[c.program][c.stream] = 1;
      work.push_back(c);
    }
  };
  std::map<std::pair<std::size_t, int>, std::vector<std::size_t>> stream_waiters;  // (program, event) -> streams
  std::map<std::pair<std::size_t, int>, std::vector<std::size_t>> thread_waiters;  // (program, event) -> threads

  // Issues a thread's ops until it finishes or blocks in a sync.
  std::function<void(std::size_t, std::size_t)> advance_thread = [&](std::size_t p, std::size_t ti) {
    ThreadCursor& t = threads[p][ti];
    while (t.next < t.ops.size()) {
      auto [id, k, i] = t.ops[t.next];
      const Op& op = s.programs[p].streams[k].ops[i];
      if (op.kind == OpKind::Sync) {
        auto it = recorded[p].find(op.event);
        if (it == recorded[p].end()) {
          thread_waiters[{p, op.event}].push_back(ti);
          return;
        }
        t.clock = std::max(t.clock, it->second);
      }
      r.issued[p][k][i] = t.clock;
      ++issued_count[p][k];
      t.clock += issue_latency(*t.thread, op.kind);
      ++t.next;
      push({p, k});
    }
  };

  auto record_event = [&](std::size_t p, int event, TimePoint t) {
    recorded[p][event] = t;
    if (auto it = stream_waiters.find({p, event}); it != stream_waiters.end()) {
      for (std::size_t k : it->second) push({p, k});
      stream_waiters.erase(it);
    }
    if (auto it = thread_waiters.find({p, event}); it != thread_waiters.end()) {
      std::vector<std::size_t> blocked = std::move(it->second);
      thread_waiters.erase(it);
      for (std::size_t ti : blocked) advance_thread(p, ti);
    }
  };

  for (std::size_t p = 0; p < np; ++p) {
    for (std::size_t ti = 0; ti < threads[p].size(); ++ti) advance_thread(p, ti);
    for (std::size_t k = 0; k < s.programs[p].streams.size(); ++k) push({p, k});
  }

  while (!work.empty()) {
    const Cursor c = work.front();
    work.pop_front();
    queued[c.program][c.stream] = 0;
    const std::size_t p = c.program, k = c.stream;
    const Program& prog = s.programs[p];
    const Stream& st = prog.streams[k];
    while (next[p][k] < st.ops.size()) {
      const std::size_t i = next[p][k];
      if (i >= issued_count[p][k]) break;  // its thread will push this stream when it issues the op
      const Op& op = st.ops[i];
      const TimePoint ready = std::max(free_at[p][k], r.issued[p][k][i]);
      bool blocked = false;
      switch (op.kind) {
        case OpKind::Compute: {
          Duration d = costs.compute ? costs.compute(prog, op) : Duration{};
          finish(c, ready, ready + d);
          --remaining;
          break;
        }
        case OpKind::Alloc:
        case OpKind::Free:
        case OpKind::Sync:  // host-side: on the device it is already past
          finish(c, ready, ready);
          --remaining;
          break;
        case OpKind::Record:
          finish(c, ready, ready);
          --remaining;
          record_event(p, op.event, ready);
          break;
        case OpKind::Wait: {
          auto it = recorded[p].find(op.event);
          if (it == recorded[p].end()) {
            stream_waiters[{p, op.event}].push_back(k);
            blocked = true;
            break;
          }
          TimePoint t = std::max(ready, it->second);
          finish(c, t, t);
          --remaining;
          break;
        }
        case OpKind::Collective: {
          auto& list = arrived[{op.group, op.seq}];
          list.emplace_back(c, ready);
          const auto& parts = participants.at(static_cast<std::size_t>(op.group));
          if (list.size() < parts.size()) {
            blocked = true;  // the last member to arrive finishes everyone
            break;
          }
          TimePoint start{};
          // All members finish together; an all_to_allv lasts as long as its largest member's share.
          const Op* largest = &op;
          for (const auto& a : list) {
            start = std::max(start, a.second);
            const Op& mine =
                s.programs[a.first.program].streams[a.first.stream].ops[next[a.first.program][a.first.stream]];
            if (mine.bytes > largest->bytes) largest = &mine;
          }
          Duration d = costs.collective ? costs.collective(s.group(op.group), *largest) : Duration{};
          std::vector<std::pair<Cursor, TimePoint>> members = std::move(list);
          arrived.erase({op.group, op.seq});
          for (const auto& a : members) {
            finish(a.first, start, start + d);
            --remaining;
            if (a.first.program != p || a.first.stream != k) push(a.first);
          }
          break;
        }
        case OpKind::Send:
        case OpKind::Recv: {
          int me = prog.ranks.at(0);
          bool is_send = op.kind == OpKind::Send;
          auto key = is_send ? std::tuple{me, op.peer, op.seq} : std::tuple{op.peer, me, op.seq};
          auto& slot = p2p[key];
          (is_send ? slot.send : slot.recv) = std::pair{c, ready};
          if (!slot.send || !slot.recv) {
            blocked = true;
            break;
          }
          TimePoint start = std::max(slot.send->second, slot.recv->second);
          Cursor sc = slot.send->first, rc = slot.recv->first;
          const Op& send_op = s.programs[sc.program].streams[sc.stream].ops[next[sc.program][sc.stream]];
          Duration d = costs.p2p ? costs.p2p(s.programs[sc.program], send_op) : Duration{};
          p2p.erase(key);
          finish(sc, start, start + d);
          finish(rc, start, start + d);
          remaining -= 2;
          Cursor other = is_send ? rc : sc;
          if (other.program != p || other.stream != k) push(other);
          break;
        }
      }
      if (blocked) break;
    }
  }

  if (remaining > 0) {
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
  return r;
}

}  // namespace hzp::core
