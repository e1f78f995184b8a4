// The dependency-order walk over a Schedule (see schedule_replay.hpp).
//
// Each pass advances every stream as far as its head op allows; a pass that
// moves nothing while ops remain is a deadlock. Collectives and send/recv are
// matched through tables keyed by (group, seq) and (sender, receiver, seq).
#include "schedule/replay.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <climits>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "core/error.hpp"
#include "schedule/replay_deadlock.hpp"

namespace hzp::core {
namespace {

struct Cursor {
  std::size_t program, stream;
};

// What every walk of a Schedule shares, built once (ReplayPlan): each host
// thread's issue order, the event slots, each group's participants.
struct IssueSlot {  // an op, by stream and index
  std::uint32_t stream = 0, index = 0;
};
// What the walk reads of every op, kept apart from the (large) ops: its
// kind, its event's slot, what issuing it costs its host thread.
struct OpBrief {
  OpKind kind = OpKind::Compute;
  int event = -1;  // the event slot of a record, wait or sync
  std::int64_t issue_ns = 0;
};
struct ProgramOrder {
  std::vector<std::vector<OpBrief>> ops;           // per stream
  std::vector<std::vector<IssueSlot>> thread_ops;  // per host thread
  std::size_t event_slots = 0;
  std::size_t timed_ops = 0, memory_ops = 0;  // is_timed; Alloc or Free
};
struct ReplayOrder {
  std::vector<ProgramOrder> programs;
  std::vector<std::vector<std::size_t>> participants;  // per group: participating programs
  std::vector<ReplayPlan::CommSite> comm_sites;
};

bool uses_event(OpKind k) { return k == OpKind::Record || k == OpKind::Wait || k == OpKind::Sync; }

// Each thread's ops in ascending id: read from the table of ops placed by
// their ids (`table`, its empty slots marked by a stream of UINT32_MAX), or
// sorted by id where the ids could not be placed (nullptr).
std::vector<std::vector<IssueSlot>> thread_issue_order(const Program& prog, const std::vector<IssueSlot>* table) {
  std::vector<std::vector<IssueSlot>> out(prog.threads.size());
  std::vector<std::size_t> per_thread(prog.threads.size(), 0);
  for (const Stream& st : prog.streams) per_thread.at(static_cast<std::size_t>(st.thread)) += st.ops.size();
  for (std::size_t t = 0; t < per_thread.size(); ++t) out[t].reserve(per_thread[t]);
  const auto issue = [&](IssueSlot e) { out[static_cast<std::size_t>(prog.streams[e.stream].thread)].push_back(e); };
  if (table) {
    for (const IssueSlot& e : *table) {
      if (e.stream != UINT32_MAX) issue(e);
    }
    return out;
  }
  // Rare: a Schedule read from a file with sparse or unordered ids.
  std::vector<std::pair<int, IssueSlot>> order;
  for (std::size_t k = 0; k < prog.streams.size(); ++k) {
    const auto& ops = prog.streams[k].ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      order.emplace_back(ops[i].id, IssueSlot{static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(i)});
    }
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [id, e] : order) issue(e);
  return out;
}

// One pass over a program's ops (they are large, and each pass over them
// costs a cache miss per op): the threads' issue order and the event slots.
//
// A thread issues its streams' ops in ascending id (unique within the
// program; each stream's ops ascend). Where the ids are dense, as the
// lowering writes them, each op is placed by its id and the threads read the
// table in order; else the (id, stream, index) triples are sorted. Events
// are looked up by slot: the id itself where the ids are small and
// non-negative (again what the lowering writes), else an index given to each
// distinct id.
ProgramOrder program_order(const Program& prog) {
  std::size_t n = 0;
  int lo = INT_MAX, hi = INT_MIN;
  for (const Stream& st : prog.streams) {
    if (st.ops.empty()) continue;
    n += st.ops.size();
    lo = std::min(lo, st.ops.front().id);
    hi = std::max(hi, st.ops.back().id);
  }
  const std::size_t span = n == 0 ? 0 : static_cast<std::size_t>(static_cast<std::int64_t>(hi) - lo + 1);
  const bool by_id = n > 0 && hi >= lo && span <= 2 * n + 64;
  constexpr std::uint32_t kNone = UINT32_MAX;
  std::vector<IssueSlot> table(by_id ? span : 0, {kNone, 0});
  bool placed = by_id;
  int ev_lo = 0, ev_hi = -1;
  ProgramOrder o;
  o.ops.resize(prog.streams.size());
  for (std::size_t k = 0; k < prog.streams.size(); ++k) {
    const auto& ops = prog.streams[k].ops;
    const Thread& thread = prog.threads.at(static_cast<std::size_t>(prog.streams[k].thread));
    auto& briefs = o.ops[k];
    briefs.resize(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const int event = uses_event(op.kind) ? op.event().id : -1;
      briefs[i] = {op.kind, event, issue_latency(thread, op).count_ns()};
      if (is_timed(op.kind)) ++o.timed_ops;
      if (op.kind == OpKind::Alloc || op.kind == OpKind::Free) ++o.memory_ops;
      if (uses_event(op.kind)) {
        ev_lo = std::min(ev_lo, event);
        ev_hi = std::max(ev_hi, event);
      }
      if (!placed) continue;
      const std::int64_t j = static_cast<std::int64_t>(op.id) - lo;
      if (j < 0 || j >= static_cast<std::int64_t>(span) || table[static_cast<std::size_t>(j)].stream != kNone) {
        placed = false;  // out of order or repeated: sort instead
        continue;
      }
      table[static_cast<std::size_t>(j)] = {static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(i)};
    }
  }
  o.thread_ops = thread_issue_order(prog, placed ? &table : nullptr);
  const auto ev_span = static_cast<std::int64_t>(ev_hi) + 1;  // no overflow at INT_MAX
  const bool events_dense = ev_lo >= 0 && static_cast<std::uint64_t>(ev_span) <= 4 * n + 64;
  o.event_slots = events_dense ? static_cast<std::size_t>(ev_span) : 0;
  if (!events_dense) {
    std::unordered_map<int, std::size_t> slot_of;
    for (auto& briefs : o.ops) {
      for (OpBrief& b : briefs) {
        if (!uses_event(b.kind)) continue;
        auto [it, added] = slot_of.emplace(b.event, o.event_slots);
        if (added) ++o.event_slots;
        b.event = static_cast<int>(it->second);
      }
    }
  }
  return o;
}

// Participants of each group: programs whose representative is a member.
std::vector<std::vector<std::size_t>> group_participants(const Schedule& s) {
  std::vector<std::size_t> program_of_rep(static_cast<std::size_t>(std::max(s.step.world_size, 1)), SIZE_MAX);
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    auto rep = static_cast<std::size_t>(s.programs[p].ranks.at(0));
    if (rep < program_of_rep.size()) program_of_rep[rep] = p;
  }
  std::vector<std::vector<std::size_t>> participants(s.groups.size());
  for (const Group& g : s.groups) {
    for (int rank : g.ranks) {
      auto r = static_cast<std::size_t>(rank);
      if (r < program_of_rep.size() && program_of_rep[r] != SIZE_MAX) {
        participants[static_cast<std::size_t>(g.id)].push_back(program_of_rep[r]);
      }
    }
  }
  return participants;
}

// The walk's state: per host thread its issue cursor, per stream its next op
// and when it is idle, recorded events, what each blocked stream or thread
// waits for, and the tables that match collectives and transfers.
class Replay {
 public:
  Replay(const Schedule& s, const ReplayOrder& order, const ReplayCosts& costs)
      : s_(s), order_(order), costs_(costs), np_(s.programs.size()) {
    init_cursors();
  }

  ReplayResult run() {
    for (std::size_t p = 0; p < np_; ++p) {
      for (std::size_t ti = 0; ti < threads_[p].size(); ++ti) advance_thread(p, ti);
      for (std::size_t k = 0; k < s_.programs[p].streams.size(); ++k) push({p, k});
    }
    while (!work_.empty()) {
      const Cursor c = work_.front();
      work_.pop_front();
      queued_[c.program][c.stream] = 0;
      advance_stream(c);
    }
    if (remaining_ > 0) {
      report_blocked_thread();
      report_deadlock(s_, next_);
    }
    return std::move(r_);
  }

 private:
  // Host threads issue their streams' ops in ascending id, one launch latency
  // per kernel or collective; a sync op stalls its thread until its event has
  // happened, so issue times are found as the walk goes.
  struct ThreadCursor {
    const std::vector<IssueSlot>* ops = nullptr;  // the thread's issue order
    std::size_t next = 0;
    TimePoint clock{};
  };
  struct P2p {
    std::optional<std::pair<Cursor, TimePoint>> send, recv;
  };

  void init_cursors() {
    r_.times.resize(np_);
    r_.issued.resize(np_);
    threads_.resize(np_);
    issued_count_.resize(np_);
    next_.resize(np_);
    free_at_.resize(np_);
    events_.resize(np_);
    queued_.resize(np_);
    in_collective_.resize(np_);
    for (std::size_t p = 0; p < np_; ++p) {
      const Program& prog = s_.programs[p];
      r_.times[p].resize(prog.streams.size());
      r_.issued[p].resize(prog.streams.size());
      issued_count_[p].assign(prog.streams.size(), 0);
      threads_[p].resize(prog.threads.size());
      for (std::size_t t = 0; t < prog.threads.size(); ++t) threads_[p][t].ops = &order_.programs[p].thread_ops[t];
      for (std::size_t k = 0; k < prog.streams.size(); ++k) {
        const Stream& st = prog.streams[k];
        r_.times[p][k].resize(st.ops.size());
        r_.issued[p][k].resize(st.ops.size());
        remaining_ += st.ops.size();
      }
      next_[p].assign(prog.streams.size(), 0);
      free_at_[p].assign(prog.streams.size(), TimePoint{});
      queued_[p].assign(prog.streams.size(), 0);
      in_collective_[p].assign(prog.streams.size(), 0);
      const std::size_t slots = order_.programs[p].event_slots;
      EventTable& ev = events_[p];
      ev.time.assign(slots, TimePoint{});
      ev.recorded.assign(slots, 0);
      ev.streams.assign(slots);
      ev.threads.assign(slots);
      ev.next_stream.assign(prog.streams.size(), -1);
      ev.stream_waits.assign(prog.streams.size(), -1);
      ev.next_thread.assign(prog.threads.size(), -1);
    }
  }

  // A worklist of streams that may advance; a stream that blocks registers
  // what would unblock it (an event, a collective, a transfer, its thread's
  // issue), so the walk is linear in ops plus wake-ups.
  void push(Cursor c) {
    if (!queued_[c.program][c.stream]) {
      queued_[c.program][c.stream] = 1;
      work_.push_back(c);
    }
  }

  void finish(Cursor c, TimePoint start, TimePoint end) {
    std::size_t i = next_[c.program][c.stream]++;
    r_.times[c.program][c.stream][i] = {start, end};
    free_at_[c.program][c.stream] = end;
  }

  [[nodiscard]] const Op& head(Cursor c) const {
    return s_.programs[c.program].streams[c.stream].ops[next_[c.program][c.stream]];
  }

  // Issues a thread's ops until it finishes or blocks in a sync.
  void advance_thread(std::size_t p, std::size_t ti) {
    ThreadCursor& t = threads_[p][ti];
    const std::vector<IssueSlot>& slots = *t.ops;
    const std::vector<std::vector<OpBrief>>& briefs = order_.programs[p].ops;
    std::vector<std::vector<TimePoint>>& issued_at = r_.issued[p];
    std::vector<std::size_t>& issued = issued_count_[p];
    while (t.next < slots.size()) {
      const std::size_t k = slots[t.next].stream, i = slots[t.next].index;
      const OpBrief& op = briefs[k][i];
      if (op.kind == OpKind::Sync) {
        EventTable& ev = events_[p];
        const auto e = static_cast<std::size_t>(op.event);
        if (!ev.recorded[e]) {
          ev.threads.append(e, static_cast<int>(ti), ev.next_thread);
          return;
        }
        t.clock = std::max(t.clock, ev.time[e]);
      }
      issued_at[k][i] = t.clock;
      ++issued[k];
      t.clock += Duration::ns(op.issue_ns);
      ++t.next;
      push({p, k});
    }
  }

  void record_event(std::size_t p, std::size_t e, TimePoint t) {
    EventTable& ev = events_[p];
    ev.time[e] = t;
    ev.recorded[e] = 1;
    for (int k = ev.streams.take(e); k >= 0; k = ev.next_stream[static_cast<std::size_t>(k)]) {
      ev.stream_waits[static_cast<std::size_t>(k)] = -1;
      push({p, static_cast<std::size_t>(k)});
    }
    // A thread let go may block again on another event, which relinks it:
    // its successor is read first.
    for (int ti = ev.threads.take(e); ti >= 0;) {
      const int after = ev.next_thread[static_cast<std::size_t>(ti)];
      advance_thread(p, static_cast<std::size_t>(ti));
      ti = after;
    }
  }

  // Runs the stream's issued ops until one blocks or the stream ends. Ops
  // that never block (compute, allocations and frees, a sync already past)
  // run here, on the stream's own slots; the others through run_op. The
  // slots are references, not copies: a record can issue more of this
  // stream's ops (its thread waited on the event), and a collective
  // finishes every member's head, this stream's too.
  void advance_stream(Cursor c) {
    const std::size_t p = c.program, k = c.stream;
    const Program& prog = s_.programs[p];
    const std::vector<Op>& ops = prog.streams[k].ops;
    const std::vector<OpBrief>& briefs = order_.programs[p].ops[k];
    const std::vector<TimePoint>& issued_at = r_.issued[p][k];
    std::vector<OpTime>& times = r_.times[p][k];
    std::size_t& next = next_[p][k];
    const std::size_t& issued = issued_count_[p][k];
    TimePoint& free_at = free_at_[p][k];
    while (next < ops.size()) {
      const std::size_t i = next;
      if (i >= issued) break;  // its thread will push this stream when it issues the op
      const TimePoint ready = std::max(free_at, issued_at[i]);
      const OpBrief& brief = briefs[i];
      switch (brief.kind) {
        case OpKind::Compute: {
          const Duration d = costs_.compute_at ? costs_.compute_at(prog, ops[i], OpAt{k, i}, ready)
                             : costs_.compute  ? costs_.compute(prog, ops[i])
                                               : Duration{};
          times[i] = {ready, ready + d};
          free_at = ready + d;
          ++next;
          --remaining_;
          break;
        }
        case OpKind::Alloc:
        case OpKind::Free:
        case OpKind::Sync:  // host-side: on the device it is already past
          times[i] = {ready, ready};
          free_at = ready;
          ++next;
          --remaining_;
          break;
        default:
          if (!run_op(c, brief, ops[i], ready)) return;
      }
    }
  }

  // Runs the stream's head op from `ready` (a record, a wait, a collective or
  // a transfer); false when it blocks.
  bool run_op(Cursor c, const OpBrief& brief, const Op& op, TimePoint ready) {
    switch (brief.kind) {
      case OpKind::Record:
        finish(c, ready, ready);
        --remaining_;
        record_event(c.program, static_cast<std::size_t>(brief.event), ready);
        return true;
      case OpKind::Wait: return run_wait(c, brief, ready);
      case OpKind::Collective: return run_collective(c, op, ready);
      case OpKind::Send:
      case OpKind::Recv: return run_transfer(c, op, ready);
      case OpKind::Compute:
      case OpKind::Alloc:
      case OpKind::Free:
      case OpKind::Sync: break;  // run by advance_stream
    }
    return true;
  }

  bool run_wait(Cursor c, const OpBrief& op, TimePoint ready) {
    EventTable& ev = events_[c.program];
    const auto e = static_cast<std::size_t>(op.event);
    if (!ev.recorded[e]) {
      // Listed once: a stream pushed again before its event (its thread
      // issued more) comes back to the same wait.
      if (ev.stream_waits[c.stream] != op.event) {
        ev.stream_waits[c.stream] = op.event;
        ev.streams.append(e, static_cast<int>(c.stream), ev.next_stream);
      }
      return false;
    }
    TimePoint t = std::max(ready, ev.time[e]);
    finish(c, t, t);
    --remaining_;
    return true;
  }

  bool run_collective(Cursor c, const Op& op, TimePoint ready) {
    const Op::Collective& coll = op.collective();
    const Group& group = s_.group(coll.group);
    const auto& parts = order_.participants.at(static_cast<std::size_t>(coll.group));
    if (parts.size() <= 1) {  // one program holds every member: nothing to wait for
      Duration d = costs_.collective_at ? costs_.collective_at(group, op, s_.programs[c.program],
                                                               OpAt{c.stream, next_[c.program][c.stream]}, ready)
                   : costs_.collective  ? costs_.collective(group, op)
                                        : Duration{};
      finish(c, ready, ready + d);
      --remaining_;
      return true;
    }
    const auto key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(coll.group)) << 32) |
                     static_cast<std::uint32_t>(coll.seq);
    // A stream pushed again while it waits here (its thread issued more of
    // its ops) has arrived already: counted once, at its first arrival.
    char& waiting = in_collective_[c.program][c.stream];
    if (waiting) return false;
    auto& list = arrived_[key];
    list.emplace_back(c, ready);
    waiting = 1;
    if (list.size() < parts.size()) return false;  // the last member to arrive finishes everyone
    TimePoint start{};
    // All members finish together; an all_to_allv lasts as long as its largest member's share.
    const Op* largest = &op;
    for (const auto& a : list) {
      start = std::max(start, a.second);
      const Op& mine = head(a.first);
      if (mine.collective().bytes > largest->collective().bytes) largest = &mine;
    }
    Duration d{};
    if (costs_.collective_at) {
      for (const auto& a : list) {
        const Cursor m = a.first;
        d = std::max(d, costs_.collective_at(group, *largest, s_.programs[m.program],
                                             OpAt{m.stream, next_[m.program][m.stream]}, start));
      }
    } else if (costs_.collective) {
      d = costs_.collective(group, *largest);
    }
    std::vector<std::pair<Cursor, TimePoint>> members = std::move(list);
    arrived_.erase(key);
    for (const auto& a : members) {
      in_collective_[a.first.program][a.first.stream] = 0;
      finish(a.first, start, start + d);
      --remaining_;
      if (a.first.program != c.program || a.first.stream != c.stream) push(a.first);
    }
    return true;
  }

  bool run_transfer(Cursor c, const Op& op, TimePoint ready) {
    int me = s_.programs[c.program].ranks.at(0);
    bool is_send = op.kind == OpKind::Send;
    const Op::Transfer& t = op.transfer();
    auto key = is_send ? std::tuple{me, t.peer, t.seq} : std::tuple{t.peer, me, t.seq};
    auto& slot = p2p_[key];
    (is_send ? slot.send : slot.recv) = std::pair{c, ready};
    if (!slot.send || !slot.recv) return false;
    TimePoint start = std::max(slot.send->second, slot.recv->second);
    Cursor sc = slot.send->first, rc = slot.recv->first;
    const Op& send_op = head(sc);
    Duration d = costs_.p2p ? costs_.p2p(s_.programs[sc.program], send_op) : Duration{};
    p2p_.erase(key);
    finish(sc, start, start + d);
    finish(rc, start, start + d);
    remaining_ -= 2;
    Cursor other = is_send ? rc : sc;
    if (other.program != c.program || other.stream != c.stream) push(other);
    return true;
  }

  // A host thread blocked in a sync holds back everything it has not issued.
  void report_blocked_thread() const {
    for (std::size_t p = 0; p < np_; ++p) {
      for (std::size_t t = 0; t < threads_[p].size(); ++t) {
        if (threads_[p][t].next >= threads_[p][t].ops->size()) continue;
        const IssueSlot e = (*threads_[p][t].ops)[threads_[p][t].next];
        const std::size_t k = e.stream, i = e.index;
        const Program& prog = s_.programs[p];
        const Op& op = prog.streams[k].ops[i];
        throw ScheduleError(
            fmt::format("deadlock: {} blocks host thread '{}' on event {}, which is never recorded before it",
                        describe_op(prog, prog.streams[k], op), prog.threads[t].name, op.event().id));
      }
    }
  }

  const Schedule& s_;
  const ReplayOrder& order_;
  const ReplayCosts& costs_;
  const std::size_t np_;
  ReplayResult r_;
  std::vector<std::vector<ThreadCursor>> threads_;
  std::vector<std::vector<std::size_t>> issued_count_;  // per stream: ops issued so far
  std::vector<std::vector<std::size_t>> next_;          // next op index per stream
  std::vector<std::vector<TimePoint>> free_at_;         // when each stream is idle
  // Who waits for each event slot, in the order they came: a list threaded
  // through `next` (by stream or thread; each waits on one event at a time),
  // so that waiting allocates nothing.
  struct Waiters {
    std::vector<int> first, last;  // by slot; -1: none
    void assign(std::size_t slots) {
      first.assign(slots, -1);
      last.assign(slots, -1);
    }
    void append(std::size_t e, int who, std::vector<int>& next) {
      next[static_cast<std::size_t>(who)] = -1;
      if (last[e] < 0) {
        first[e] = who;
      } else {
        next[static_cast<std::size_t>(last[e])] = who;
      }
      last[e] = who;
    }
    /// The first waiter (-1: none), the list emptied.
    int take(std::size_t e) {
      const int head = first[e];
      first[e] = last[e] = -1;
      return head;
    }
  };
  // Per program, by event slot: when it was recorded, and who waits for it.
  struct EventTable {
    std::vector<TimePoint> time;
    std::vector<char> recorded;
    Waiters streams, threads;
    std::vector<int> next_stream, next_thread;  // the waiter after each stream, thread
    std::vector<int> stream_waits;              // by stream: the slot it is listed on, or -1
  };
  std::vector<EventTable> events_;
  // Collective arrivals of groups spanning several programs: (group, seq) ->
  // cursors that reached it, with their ready time.
  std::unordered_map<std::uint64_t, std::vector<std::pair<Cursor, TimePoint>>> arrived_;
  // Point-to-point: (sender rank, receiver rank, seq) -> ready time of each side.
  std::map<std::tuple<int, int, int>, P2p> p2p_;
  std::size_t remaining_ = 0;
  std::deque<Cursor> work_;
  std::vector<std::vector<char>> queued_;
  std::vector<std::vector<char>> in_collective_;  // per stream: arrived at its head collective, not yet run
};

}  // namespace

struct ReplayPlan::Impl {
  ReplayOrder order;
};

ReplayPlan::ReplayPlan(const Schedule& s) : s_(s) {
  auto impl = std::make_unique<Impl>();
  impl->order.programs.reserve(s.programs.size());
  for (const Program& prog : s.programs) impl->order.programs.push_back(program_order(prog));
  for (std::size_t p = 0; p < impl->order.programs.size(); ++p) {
    const auto& streams = impl->order.programs[p].ops;
    for (std::size_t k = 0; k < streams.size(); ++k) {
      for (std::size_t i = 0; i < streams[k].size(); ++i) {
        const OpKind kind = streams[k][i].kind;
        if (kind == OpKind::Collective || kind == OpKind::Send || kind == OpKind::Recv) {
          impl->order.comm_sites.push_back({p, k, i, kind});
        }
      }
    }
  }
  impl->order.participants = group_participants(s);
  impl_ = std::move(impl);
}

ReplayPlan::~ReplayPlan() = default;

const std::vector<ReplayPlan::CommSite>& ReplayPlan::comm_sites() const { return impl_->order.comm_sites; }

ReplayResult ReplayPlan::replay(const ReplayCosts& costs) const {
  ReplayResult r = Replay(s_, impl_->order, costs).run();
  for (const ProgramOrder& o : impl_->order.programs) {
    r.timed_ops += o.timed_ops;
    r.memory_ops += o.memory_ops;
  }
  return r;
}

ReplayResult replay(const Schedule& s, const ReplayCosts& costs) { return ReplayPlan(s).replay(costs); }

}  // namespace hzp::core
