// The actors of a rank simulated in detail (see simulation.hpp): host threads
// that hold back what follows their syncs, streams that run their ops in
// order, and send/recv pairs.
#include "core/units.hpp"
#include "sim/simgrid/simulation.hpp"

namespace hzp::sim::simgrid {

using core::Op;
using core::OpKind;

// A thread issues its ops at the program's sync-free times until a sync;
// when the sync's event happens later than the sync would have been issued,
// everything after it shifts by the difference.
void Simulation::thread_body(Rank& r, std::size_t t) {
  const core::Program& prog = s_.programs[r.program];
  const ProgramInfo& pi = info_[r.program];
  const auto& ops = pi.thread_ops[t];
  for (std::size_t q = 0; q <= ops.size(); ++q) {
    if (q < ops.size() && prog.streams[ops[q].first].ops[ops[q].second].kind != OpKind::Sync) continue;
    set_issued(r, t, q);  // everything before this sync (or the end) is issued
    if (q == ops.size()) break;
    auto [k, i] = ops[q];
    const auto ev = static_cast<std::size_t>(pi.event[k][i]);
    if (r.event_time[ev] < 0) {
      r.event_waiters[static_cast<int>(ev)].push_back(sg4::Actor::self());
      sg4::this_actor::suspend();
    }
    const std::int64_t at = pi.issue0[k][i] + r.shifts[t].back().second;
    const std::int64_t happened = core::TimePoint::seconds(r.event_time[ev]).count_ns();
    if (happened > at) r.shifts[t].emplace_back(q, r.shifts[t].back().second + happened - at);
  }
}

void Simulation::set_issued(Rank& r, std::size_t t, std::size_t upto) {
  r.issued_upto[t] = upto;
  const core::Program& prog = s_.programs[r.program];
  for (std::size_t k = 0; k < prog.streams.size(); ++k) {
    if (r.issue_waiter[k] && static_cast<std::size_t>(prog.streams[k].thread) == t) {
      sg4::ActorPtr a = std::move(r.issue_waiter[k]);
      r.issue_waiter[k] = nullptr;
      a->resume();  // it checks again and waits anew if still not issued
    }
  }
}

// Blocks until op i of stream k is issued, then until its issue time.
void Simulation::await_issue(Rank& r, std::size_t k, std::size_t i) {
  while (!issued(r, k, i)) {
    r.issue_waiter[k] = sg4::Actor::self();
    sg4::this_actor::suspend();
  }
  const double at = issue_time(r, k, i);
  if (at > now_s()) sg4::this_actor::sleep_until(at);
}

void Simulation::record_event(Rank& r, int ev) {
  r.event_time[static_cast<std::size_t>(ev)] = now_s();
  auto it = r.event_waiters.find(ev);
  if (it == r.event_waiters.end()) return;
  std::vector<sg4::ActorPtr> waiters = std::move(it->second);
  r.event_waiters.erase(it);
  for (auto& a : waiters) a->resume();
}

void Simulation::stream_body(Rank& r, std::size_t k) {
  const core::Stream& st = s_.programs[r.program].streams[k];
  const ProgramInfo& pi = info_[r.program];
  std::size_t i = 0;
  while (i < st.ops.size()) {
    const Op& op = st.ops[i];
    await_issue(r, k, i);
    switch (op.kind) {
      case OpKind::Compute:
        if (core::is_offload(op.compute().kind)) {  // copy engines or the host CPU: no SMs, never slowed
          const double t0 = now_s();
          sg4::this_actor::sleep_for(pi.work[k][i]);
          done(r, k, i, t0, now_s());
          break;
        }
        [[fallthrough]];
      case OpKind::Alloc:
      case OpKind::Free: i = compute_run(r, k, i); continue;
      case OpKind::Record:
        done(r, k, i, now_s(), now_s());
        record_event(r, pi.event[k][i]);
        break;
      case OpKind::Wait: {
        const auto ev = static_cast<std::size_t>(pi.event[k][i]);
        if (r.event_time[ev] < 0) {
          r.event_waiters[static_cast<int>(ev)].push_back(sg4::Actor::self());
          sg4::this_actor::suspend();
        }
        done(r, k, i, now_s(), now_s());
        break;
      }
      case OpKind::Sync: done(r, k, i, now_s(), now_s()); break;
      case OpKind::Collective: collective(r, k, i, op); break;
      case OpKind::Send:
      case OpKind::Recv: transfer(r, k, i, op); break;
    }
    ++i;
  }
}

// Kernels that start back to back (each issued before the previous one
// ends, even uncontended) run as one timed wait; allocs and frees between
// them take their place in it. Returns the index after the run.
std::size_t Simulation::compute_run(Rank& r, std::size_t k, std::size_t first) {
  const core::Stream& st = s_.programs[r.program].streams[k];
  const ProgramInfo& pi = info_[r.program];
  const double t0 = now_s();
  double work = 0;
  std::size_t j = first;
  for (; j < st.ops.size(); ++j) {
    const OpKind kind = st.ops[j].kind;
    if (kind != OpKind::Compute && kind != OpKind::Alloc && kind != OpKind::Free) break;
    if (kind == OpKind::Compute && core::is_offload(st.ops[j].compute().kind)) break;
    if (j > first && (!issued(r, k, j) || issue_time(r, k, j) > t0 + work)) break;
    work += pi.work[k][j];
  }
  r.device.run(k, work);
  // Each op starts where the one before ended, at the work done before it.
  double done_work = 0, at = t0;
  for (std::size_t i = first; i < j; ++i) {
    const double start = at;
    done_work += pi.work[k][i];
    if (pi.work[k][i] > 0) at = r.device.time_after(t0, done_work);
    done(r, k, i, start, at);
  }
  return j;
}

// The first side to arrive waits; the second runs the pair's flow and
// resumes it at the end.
void Simulation::transfer(Rank& r, std::size_t k, std::size_t i, const Op& op) {
  const bool is_send = op.kind == OpKind::Send;
  const int rep = s_.programs[r.program].ranks.at(0);
  const core::Op::Transfer& xfer = op.transfer();
  const int peer = xfer.peer + (r.rank - rep);
  const auto key = is_send ? std::tuple{r.rank, peer, xfer.seq} : std::tuple{peer, r.rank, xfer.seq};
  auto [it, first] = transfers_.try_emplace(key);
  std::shared_ptr<Transfer>& t = it->second;
  if (first) {
    t = std::make_shared<Transfer>();
    t->waiting = sg4::Actor::self();
    t->waiting_rank = &r;
    std::shared_ptr<Transfer> keep = t;
    sg4::this_actor::suspend();
    done(r, k, i, keep->start, keep->end);
    return;
  }
  std::shared_ptr<Transfer> keep = t;
  transfers_.erase(it);
  const int src = std::get<0>(key), dst = std::get<1>(key);
  keep->start = now_s();
  r.device.begin();
  keep->waiting_rank->device.begin();
  if (classes_ && pm_.topology().domain_of(src) != pm_.topology().domain_of(dst)) mirror_transfer(op, src, dst);
  FlowSet fs = lower_p2p(pm_, xfer.bytes, src, dst);
  std::vector<const Flow*> flows;
  for (const Flow& f : fs.flows) flows.push_back(&f);
  send_and_wait(flows);
  if (fs.latency_s > 0) sg4::this_actor::sleep_for(fs.latency_s);
  keep->end = now_s();
  r.device.end();
  keep->waiting_rank->device.end();
  done(r, k, i, keep->start, keep->end);
  keep->waiting->resume();
}

// In `--ranks classes`, a transfer across domains: the sender's class mates
// send to their own peers at the same time (background flows that climb above their leaf).
void Simulation::mirror_transfer(const Op& op, int src, int dst) {
  const core::Program& sender =
      s_.programs[static_cast<std::size_t>(program_of_rank_.at(static_cast<std::size_t>(src)))];
  for (int m : sender.ranks) {
    const int to = m + (dst - src);
    if (m == src || to < 0 || to >= pm_.topology().devices() || !climbs(m, to)) continue;
    auto l = std::make_shared<Lowered>();
    l->set = lower_p2p(pm_, op.transfer().bytes, m, to);
    give(m, Proxy::Job{nullptr, l});
  }
}

}  // namespace hzp::sim::simgrid
